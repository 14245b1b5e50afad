//! PostgreSQL → Kafka: what users see in the topics.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Record, Sluice, drop_slot_and_publication, free_port, pg, pg_at, pipeline_toml, read_topic,
    slot_confirmed, test_dir, unique,
};

/// 100,000 rows inserted, updated and deleted in mixed transactions (single-row and
/// multi-thousand-row, plus primary-key changes) arrive as committed: counts per op, before and
/// after images, per-key order and partition, positions increasing per key, and the newest event
/// per key equals the table.
#[tokio::test(flavor = "multi_thread")]
async fn mixed_transactions_arrive_as_committed() {
    let url = crate::support::stack().pg_url;
    mixed_workload(&url, &url, None, 60_000).await;
}

/// The body of [`mixed_transactions_arrive_as_committed`], on the PostgreSQL server at `server`
/// (the tables are made over that plain URL), with sluice reading it at `source_url` and, when
/// given, writing to `kafka`'s brokers with its `[kafka.client]` lines (the records are read
/// back over the plaintext listener); `tls_pg` runs it over TLS and SASL_SSL, `versions` on
/// another major version's server. `big` is the size of the first, single-transaction insert
/// (60,000 here: 100,000 rows in all; the TLS and version runs, which prove the connection and
/// the server rather than the volume, take 10,000: 50,000 rows in all).
pub(crate) async fn mixed_workload(
    server: &str,
    source_url: &str,
    kafka: Option<(&str, &str)>,
    big: i64,
) {
    assert!(big >= 6_000, "the key changes below need ids up to 6,000");
    let name = unique("mixed");
    let schema = name.clone();
    let client = pg_at(server).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.items (id bigint PRIMARY KEY, n int NOT NULL, payload text);
             ALTER TABLE {schema}.items REPLICA IDENTITY FULL;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(
        &name,
        &schema,
        &name,
        port,
        "[kafka.producer]\n\"linger.ms\" = \"2\"\n",
    )
    .replace("[admin]", "topic_partitions = 3\n\n[admin]")
    .replace(
        &format!("url = \"{}\"", crate::support::stack().pg_url),
        &format!("url = \"{source_url}\""),
    );
    assert!(toml.contains(source_url));
    let toml = match kafka {
        None => toml,
        Some((brokers, client)) => {
            let plain_brokers = format!("brokers = \"{}\"", crate::support::stack().brokers);
            assert!(toml.contains(&plain_brokers));
            toml.replace(&plain_brokers, &format!("brokers = \"{brokers}\""))
                .replace(
                    "[kafka.producer]",
                    &format!("[kafka.client]\n{client}\n[kafka.producer]"),
                )
        }
    };
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    let t = format!("{schema}.items");
    // `big` rows in one transaction.
    client
        .batch_execute(&format!(
            "INSERT INTO {t} SELECT g, 0, repeat('x', 100) FROM generate_series(1, {big}) g"
        ))
        .await
        .unwrap();
    // 38 transactions of 1,000 rows.
    for batch in 0..38 {
        let start = big + 1 + batch * 1000;
        client
            .batch_execute(&format!(
                "INSERT INTO {t} SELECT g, 0, 'b' FROM generate_series({start}, {}) g",
                start + 999
            ))
            .await
            .unwrap();
    }
    // 2,000 single-row transactions.
    let total = big + 40_000;
    for id in total - 1_999..=total {
        client
            .execute(&format!("INSERT INTO {t} VALUES ($1, 0, 's')"), &[&id])
            .await
            .unwrap();
    }
    // total/5 updates in one transaction, 500 single-row updates of other keys.
    client
        .batch_execute(&format!("UPDATE {t} SET n = n + 1 WHERE id % 5 = 0"))
        .await
        .unwrap();
    for id in (1..=1000).filter(|i| i % 5 != 0).take(500) {
        client
            .execute(
                &format!("UPDATE {t} SET n = n + 1 WHERE id = $1"),
                &[&(id as i64)],
            )
            .await
            .unwrap();
    }
    // total/10 deletes in one transaction, 500 single-row deletes.
    client
        .batch_execute(&format!("DELETE FROM {t} WHERE id % 10 = 1"))
        .await
        .unwrap();
    for id in (2..=2000).step_by(4).take(500) {
        client
            .execute(&format!("DELETE FROM {t} WHERE id = $1"), &[&(id as i64)])
            .await
            .unwrap();
    }
    // 100 primary-key changes in one transaction, mixed with an insert and a delete.
    client
        .batch_execute(&format!(
            "BEGIN;
             UPDATE {t} SET id = id + 1000000 WHERE id BETWEEN 5003 AND 6000 AND id % 10 = 3;
             INSERT INTO {t} VALUES (200000, 7, 'late');
             DELETE FROM {t} WHERE id = 200000;
             COMMIT;"
        ))
        .await
        .unwrap();
    let total = total as usize;
    let (inserts, updates, deletes) =
        (total + 1 + 100, total / 5 + 500, total / 10 + 500 + 100 + 1);
    let expected_records = inserts + updates + 2 * deletes;

    let topic = format!("{name}.{schema}.items");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(180), |r| {
            r.len() >= expected_records
        })
    })
    .await
    .unwrap();

    let count = |op: Option<&str>| records.iter().filter(|r| r.op() == op).count();
    assert_eq!(count(Some("c")), inserts, "inserts");
    assert_eq!(count(Some("u")), updates, "updates");
    assert_eq!(count(Some("d")), deletes, "deletes");
    assert_eq!(count(None), deletes, "a tombstone after each delete");
    assert_eq!(
        records.len(),
        expected_records,
        "no duplicates without a crash"
    );

    // Per key: one partition, ops in a valid order, positions strictly increasing.
    let mut by_key: HashMap<i64, Vec<&Record>> = HashMap::new();
    for record in &records {
        let id = record.key.as_ref().expect("keyed")["id"].as_i64().unwrap();
        by_key.entry(id).or_default().push(record);
    }
    for (id, events) in &by_key {
        let partition = events[0].partition;
        assert!(
            events.iter().all(|e| e.partition == partition),
            "key {id} in one partition"
        );
        let positions: Vec<(u64, u64)> = events
            .iter()
            .map(|e| {
                (
                    e.header_u64("sluice.commit_lsn"),
                    e.header_u64("sluice.tx_index"),
                )
            })
            .collect();
        assert!(
            positions.windows(2).all(|w| w[0] < w[1]),
            "positions of key {id} increase: {positions:?}"
        );
        let ops: Vec<&str> = events
            .iter()
            .map(|e| e.op().unwrap_or("tombstone"))
            .collect();
        assert_eq!(ops[0], "c", "key {id} starts with its insert: {ops:?}");
        for pair in ops.windows(2) {
            let ok = matches!(
                pair,
                ["c" | "u", "u" | "d"] | ["d", "tombstone"] | ["tombstone", "c"]
            );
            assert!(ok, "key {id}: {ops:?}");
        }
    }

    // Before and after images (REPLICA IDENTITY FULL).
    for record in records.iter().filter(|r| r.op() == Some("u")) {
        let value = record.value.as_ref().unwrap();
        let (before, after) = (&value["before"], &value["after"]);
        assert_eq!(before["id"], after["id"]);
        assert_eq!(
            after["n"].as_i64().unwrap(),
            before["n"].as_i64().unwrap() + 1
        );
        assert_eq!(value["source"]["table"], "items");
        assert_eq!(value["source"]["connector"], "postgresql");
        assert!(value["source"]["lsn"].as_u64().unwrap() > 0);
    }
    for record in records.iter().filter(|r| r.op() == Some("d")) {
        let value = record.value.as_ref().unwrap();
        assert!(value["after"].is_null());
        assert_eq!(value["before"]["id"], record.key.as_ref().unwrap()["id"]);
        assert!(value["before"]["payload"].is_string(), "full before image");
    }

    // The newest event per key equals the table.
    let mut latest: BTreeMap<i64, Value> = BTreeMap::new();
    for (id, events) in by_key {
        match events.last().unwrap().value.as_ref() {
            None => {}
            Some(value) => {
                latest.insert(id, value["after"].clone());
            }
        }
    }
    let rows = client
        .query(&format!("SELECT id, n, payload FROM {t} ORDER BY id"), &[])
        .await
        .unwrap();
    let table: BTreeMap<i64, Value> = rows
        .iter()
        .map(|r| {
            let id: i64 = r.get(0);
            (
                id,
                json!({"id": id, "n": r.get::<_, i32>(1), "payload": r.get::<_, String>(2)}),
            )
        })
        .collect();
    assert_eq!(latest.len(), table.len(), "keys");
    assert!(latest == table, "latest event per key equals the table");

    // The slot advances to the acknowledged position.
    let current: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])
        .await
        .unwrap()
        .get(0);
    let slot = format!("sluice_{name}");
    let deadline = std::time::Instant::now() + crate::support::bound(Duration::from_secs(30));
    loop {
        let confirmed = slot_confirmed(&client, &slot).await.unwrap_or(0);
        if confirmed >= current as u64 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "slot confirmed {confirmed} never reached {current}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// sluice's additions to Debezium's events (`[kafka.events]`): embedded JSON, numerics as
/// strings, truncate events. tests/it/debezium.rs checks the default (Debezium's) output.
const SLUICE_EVENTS: &str = "\n[kafka.events]\nembed_json = true\ndecimal_handling_mode = \"string\"\nskipped_operations = \"none\"\n";

/// A table with one column of every documented type round-trips to the JSON that
/// docs/type-mapping.md documents; a column added mid-stream shows up in later events;
/// truncates and logical messages are events too.
#[tokio::test(flavor = "multi_thread")]
async fn types_schema_changes_truncates_and_messages() {
    let name = unique("types");
    let client = pg().await;
    client
        .batch_execute(&format!("CREATE SCHEMA {name}; {}", typed_table_ddl(&name)))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, SLUICE_EVENTS);
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "{}

             ALTER TABLE {name}.t ADD COLUMN c_added int DEFAULT 7;
             INSERT INTO {name}.t (id) VALUES (2);
             TRUNCATE {name}.t;
             SELECT pg_logical_emit_message(true, 'audit', 'hello');",
            typed_row_insert(&name, 1)
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 3)
    })
    .await
    .unwrap();
    assert_eq!(records.len(), 3, "{records:?}");
    let after = &records[0].value.as_ref().unwrap()["after"];
    let expected = typed_row_json(1);
    assert_eq!(after, &expected);
    let added = &records[1].value.as_ref().unwrap()["after"];
    assert_eq!(added["id"], 2);
    assert_eq!(added["c_added"], 7, "the new column after ALTER TABLE");
    let truncate = records[2].value.as_ref().unwrap();
    assert_eq!(truncate["op"], "t");
    assert!(records[2].key.is_none());

    let messages = format!("{name}.message");
    let messages = tokio::task::spawn_blocking(move || {
        read_topic(&messages, Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    let message = messages[0].value.as_ref().unwrap();
    assert_eq!(message["op"], "m");
    assert_eq!(message["message"]["prefix"], "audit");
    assert_eq!(message["message"]["content"], "aGVsbG8=");
    // The change events' `source` block, as Debezium's message events have it.
    let source = &message["source"];
    for field in ["xmin", "origin", "origin_lsn"] {
        assert_eq!(source.get(field), Some(&Value::Null), "{field}: {source}");
    }
    assert!(
        source["sequence"]
            .as_str()
            .is_some_and(|s| s.starts_with('[')),
        "{source}"
    );
    assert!(
        source["ts_us"].is_i64() && source["ts_ns"].is_i64(),
        "{source}"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A table with one column of every documented type (in schema `name`, type `name.mood`).
fn typed_table_ddl(name: &str) -> String {
    format!(
        "CREATE TYPE {name}.mood AS ENUM ('sad', 'happy');
         CREATE TABLE {name}.t (
           id int PRIMARY KEY, c_bool boolean, c_int2 smallint, c_int8 bigint,
           c_float4 real, c_float8 double precision, c_nan double precision, c_inf double precision,
           c_numeric numeric(10,4), c_text text, c_varchar varchar(10), c_bytea bytea,
           c_uuid uuid, c_json json, c_jsonb jsonb, c_date date, c_time time, c_time3 time(3),
           c_timetz timetz, c_ts timestamp, c_ts3 timestamp(3), c_tstz timestamptz,
           c_interval interval, c_int_array int[], c_text_array text[], c_enum {name}.mood,
           c_point point, c_null text);"
    )
}

/// The row of [`typed_table_ddl`]'s table with key `id` (literals in ISO forms that every
/// DateStyle reads alike).
fn typed_row_insert(name: &str, id: i32) -> String {
    format!(
        "INSERT INTO {name}.t VALUES (
           {id}, true, -32768, 9223372036854775807,
           1.5, 2.25, 'NaN', '-Infinity',
           123.45, 'héllo \"x\"', 'ab', '\\x0a0b0c',
           'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '{{\"a\": [1, 2]}}', '{{\"b\": null}}', '2016-11-04',
           '13:51:30.123456', '13:51:30.123',
           '13:51:30.123789+02', '2016-11-04 13:51:30.123456', '2016-11-04 13:51:30.123',
           '2016-11-04 13:51:30.123456+01', 'P1Y2M3DT4H5M6.78S', '{{1,2,NULL}}', '{{a,\"b c\"}}',
           'happy', '(1,2)', NULL);"
    )
}

/// The `after` image docs/type-mapping.md documents for [`typed_row_insert`]'s row.
fn typed_row_json(id: i32) -> Value {
    json!({
        "id": id, "c_bool": true, "c_int2": -32768, "c_int8": 9223372036854775807i64,
        "c_float4": 1.5, "c_float8": 2.25, "c_nan": "NaN", "c_inf": "-Infinity",
        "c_numeric": "123.4500", "c_text": "héllo \"x\"", "c_varchar": "ab", "c_bytea": "CgsM",
        "c_uuid": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "c_json": {"a": [1, 2]},
        "c_jsonb": {"b": null}, "c_date": 17109, "c_time": 49890123456i64, "c_time3": 49890123,
        "c_timetz": "11:51:30.123789Z", "c_ts": 1478267490123456i64, "c_ts3": 1478267490123i64,
        "c_tstz": "2016-11-04T12:51:30.123456Z", "c_interval": 37091106780000i64,
        "c_int_array": [1, 2, null], "c_text_array": ["a", "b c"], "c_enum": "happy",
        "c_point": {"x": 1, "y": 2, "wkb": "AQEAAAAAAAAAAADwPwAAAAAAAABA", "srid": null},
        "c_null": null
    })
}

/// The snapshot reads rows on ordinary SQL connections, the stream gets them from the walsender:
/// both must encode every type alike whatever the role's or database's session defaults are.
/// The pipeline connects as a role whose defaults differ from sluice's fixed settings in every
/// one that changes text output (TimeZone, DateStyle, IntervalStyle, extra_float_digits,
/// bytea_output); the row snapshotted and the same row streamed must both be the documented JSON.
#[tokio::test(flavor = "multi_thread")]
async fn snapshot_and_stream_encode_every_type_alike() {
    let name = unique("typesnap");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE ROLE {name} LOGIN SUPERUSER REPLICATION;
             ALTER ROLE {name} SET TimeZone = 'Asia/Kolkata';
             ALTER ROLE {name} SET DateStyle = 'SQL, DMY';
             ALTER ROLE {name} SET IntervalStyle = 'postgres_verbose';
             ALTER ROLE {name} SET extra_float_digits = 0;
             ALTER ROLE {name} SET bytea_output = 'escape';
             CREATE SCHEMA {name}; {} {}",
            typed_table_ddl(&name),
            typed_row_insert(&name, 1)
        ))
        .await
        .unwrap();
    let url = crate::support::stack()
        .pg_url
        .replacen("postgres@", &format!("{name}@"), 1);
    assert_ne!(
        url,
        crate::support::stack().pg_url,
        "the URL names the user postgres"
    );
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, SLUICE_EVENTS).replacen(
        &crate::support::stack().pg_url,
        &url,
        1,
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&typed_row_insert(&name, 2))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 2)
    })
    .await
    .unwrap();
    assert_eq!(records.len(), 2, "{records:?}");
    let snapshot = records[0].value.as_ref().unwrap();
    let streamed = records[1].value.as_ref().unwrap();
    assert_eq!(snapshot["op"], "r", "{snapshot}");
    assert_eq!(streamed["op"], "c", "{streamed}");
    assert_eq!(snapshot["after"], typed_row_json(1), "the snapshotted row");
    assert_eq!(streamed["after"], typed_row_json(2), "the streamed row");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
    client
        .batch_execute(&format!(
            "DROP SCHEMA {name} CASCADE; DROP OWNED BY {name}; DROP ROLE {name};"
        ))
        .await
        .unwrap();
}

//! PostgreSQL and MySQL → Kafka in Avro through a real schema registry (Apicurio Registry, Confluent
//! API), decoded by a client no one here wrote (Python confluent-kafka's `AvroDeserializer`
//! with its `SchemaRegistryClient`, `scripts/avro-decode`).

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, test_dir, unique, wait_until,
};

fn registry_url() -> String {
    std::env::var("SCHEMA_REGISTRY_URL").unwrap_or_else(|_| {
        panic!(
            "SCHEMA_REGISTRY_URL is not set: start the registry and load its settings: \
             `scripts/dev-stack registry-up && eval \"$(scripts/dev-stack env)\"` (scripts/test \
             does both)"
        )
    })
}

/// Every record of `topic` as `scripts/avro-decode` decodes it, once `count` are there.
fn decode(topic: &str, count: usize) -> Vec<Value> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/avro-decode");
    let mut last = Vec::new();
    for _ in 0..60 {
        // Under coreutils' `timeout`: a decoder once sat 18 minutes on an open socket (its own
        // 30 s limits never fired), holding the suite, and about one call in fifty still
        // stalls; a stuck one is killed and run again, and prints its Python stack first
        // (`--stack-after`) so that the log says where it stalled.
        let output = std::process::Command::new("timeout")
            .args(["--kill-after=5", "60", script, topic, "--timeout", "30"])
            .args(["--stack-after", "50"])
            .output()
            .expect("scripts/avro-decode runs");
        if matches!(output.status.code(), Some(124 | 137) | None) {
            eprintln!(
                "avro-decode {topic} did not end within 60 s: running it again; it said:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            continue;
        }
        assert!(
            output.status.success(),
            "avro-decode failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        last = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        if last.len() >= count {
            return last;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    panic!("{topic}: {} records, expected {count}", last.len());
}

fn registry_get(path: &str) -> Value {
    let url = format!("{}{path}", registry_url());
    let output = std::process::Command::new("curl")
        .args(["-sf", &url])
        .output()
        .expect("curl");
    assert!(output.status.success(), "GET {url} failed");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn registry_put(path: &str, body: &str) {
    let url = format!("{}{path}", registry_url());
    let status = std::process::Command::new("curl")
        .args([
            "-sf",
            "-o",
            "/dev/null",
            "-X",
            "PUT",
            "-H",
            "Content-Type: application/vnd.schemaregistry.v1+json",
            "-d",
            body,
            &url,
        ])
        .status()
        .expect("curl");
    assert!(status.success(), "PUT {url} failed");
}

fn avro_toml(name: &str, port: u16) -> String {
    pipeline_toml(name, name, name, port, "")
        .replace("[admin]", "[kafka.events]\nformat = \"avro\"\n\n[admin]")
        + &format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url())
}

/// Snapshot and stream (inserts, updates, deletes under REPLICA IDENTITY DEFAULT, a column
/// added mid-stream) in Avro: every record decodes with the independent client by its registry
/// id, the schemas registered under `<topic>-key` / `<topic>-value` are Debezium's names, each
/// key's events come in the order of its changes, the newest per key equals the table, a
/// delete's `before` holds the key and the NOT NULL columns' zero (as Debezium's), and the
/// column added mid-stream registered a second value version, old and new records both
/// decoding.
#[tokio::test(flavor = "multi_thread")]
async fn avro_records_decode_by_registry_id_and_equal_the_table() {
    let name = unique("avro");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name};
             CREATE TABLE {name}.items (id bigint PRIMARY KEY, n int NOT NULL, label text NOT NULL,
               note text, price numeric(10,2), flag boolean, data bytea, small smallint);
             INSERT INTO {name}.items
               SELECT i, i, 'label ' || i, CASE WHEN i % 3 = 0 THEN NULL ELSE 'n' || i END,
                      i * 1.25, i % 2 = 0, decode(lpad(to_hex(i), 4, '0'), 'hex'), (i % 100)::smallint
               FROM generate_series(1, 200) i;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let mut sluice = Sluice::start(&dir, &avro_toml(&name, port), port);
    sluice.wait_streaming(Duration::from_secs(60));
    // Streamed changes: updates of every key, deletes of some, inserts of new keys.
    for round in 0..3 {
        client
            .batch_execute(&format!(
                "UPDATE {name}.items SET n = n + 1000, price = price + 0.01, note = 'r{round}'
                   WHERE id % 4 = {round};
                 DELETE FROM {name}.items WHERE id % 50 = {round} + 7;
                 INSERT INTO {name}.items VALUES ({id}, -1, 'new', NULL, -0.5, NULL, '\\x00ff', -3);",
                id = 1000 + round
            ))
            .await
            .unwrap();
    }
    client
        .batch_execute(&format!(
            "ALTER TABLE {name}.items ADD COLUMN extra text;
             INSERT INTO {name}.items (id, n, label, extra) VALUES (2000, 7, 'after alter', 'x');"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.items");
    // What each key's events must be: the changes above, replayed.
    let mut want: BTreeMap<i64, Vec<&str>> = (1..=200).map(|id| (id, vec!["r"])).collect();
    let mut deleted = Vec::new();
    for round in 0..3 {
        for (id, ops) in want.iter_mut() {
            if id % 4 == round && ops.last() != Some(&"tombstone") && *id < 1000 {
                ops.push("u");
            }
        }
        for (id, ops) in want.iter_mut() {
            if id % 50 == round + 7 && *id < 1000 {
                ops.extend(["d", "tombstone"]);
                deleted.push(*id);
            }
        }
        want.insert(1000 + round, vec!["c"]);
    }
    want.insert(2000, vec!["c"]);
    let expected: usize = want.values().map(Vec::len).sum();
    let records = decode(&topic, expected);
    assert_eq!(records.len(), expected);

    // Per key: its events in the order of its changes, each decoding with a registered id.
    let mut by_key: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    let mut value_ids = std::collections::BTreeSet::new();
    for record in &records {
        let id = record["key"]["id"].as_i64().expect("an Avro key with id");
        assert!(record["key_schema_id"].as_u64().is_some(), "{record}");
        if !record["value"].is_null() {
            value_ids.insert(record["value_schema_id"].as_u64().unwrap());
        }
        by_key.entry(id).or_default().push(record);
    }
    assert_eq!(
        value_ids.len(),
        2,
        "one value schema before the ALTER, one after"
    );
    for (id, events) in &by_key {
        let ops: Vec<&str> = events
            .iter()
            .map(|e| e["value"]["op"].as_str().unwrap_or("tombstone"))
            .collect();
        assert_eq!(ops, want[id], "key {id}: {events:#?}");
    }
    assert_eq!(by_key.len(), want.len());

    // A delete's before: the key, the NOT NULL columns' zero, the others null.
    let delete = records
        .iter()
        .find(|r| r["value"]["op"] == "d")
        .expect("a delete");
    let before = &delete["value"]["before"];
    assert_eq!(before["n"], 0, "{before}");
    assert_eq!(before["label"], "", "{before}");
    assert_eq!(before["note"], Value::Null, "{before}");
    assert_eq!(delete["value"]["after"], Value::Null);

    // The newest event per key equals the table.
    let rows = client
        .query(
            &format!(
                "SELECT id, n, label, note, price::text, flag, encode(data, 'base64'), small, extra
                 FROM {name}.items"
            ),
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 200 - deleted.len() + 4);
    for row in rows {
        let id: i64 = row.get(0);
        let last = by_key[&id].last().unwrap();
        let after = &last["value"]["after"];
        let want = json!({
            "id": id,
            "n": row.get::<_, i32>(1),
            "label": row.get::<_, String>(2),
            "note": row.get::<_, Option<String>>(3),
            "price": row.get::<_, Option<String>>(4),
            "flag": row.get::<_, Option<bool>>(5),
            "data": row.get::<_, Option<String>>(6),
            "small": row.get::<_, Option<i16>>(7),
        });
        for (column, value) in want.as_object().unwrap() {
            assert_eq!(&after[column], value, "key {id} column {column}: {after}");
        }
        if id == 2000 {
            assert_eq!(after["extra"], "x", "{after}");
        }
    }

    // The registry holds Debezium's names: <topic>-key / <topic>-value, two value versions.
    let versions = registry_get(&format!("/subjects/{topic}-value/versions"));
    assert_eq!(versions, json!([1, 2]), "{versions}");
    let latest = registry_get(&format!("/subjects/{topic}-value/versions/latest"));
    let schema: Value = serde_json::from_str(latest["schema"].as_str().unwrap()).unwrap();
    assert_eq!(schema["name"], "Envelope");
    assert_eq!(schema["namespace"], topic);
    assert_eq!(schema["connect.name"], format!("{topic}.Envelope"));
    let key = registry_get(&format!("/subjects/{topic}-key/versions/latest"));
    let key: Value = serde_json::from_str(key["schema"].as_str().unwrap()).unwrap();
    assert_eq!(key["name"], "Key");
    assert_eq!(key["fields"], json!([{"name": "id", "type": "long"}]));

    sluice.stop();
    drop_slot_and_publication(&client, &name).await;
}

/// A table `t (id int PRIMARY KEY, v int)` holding `(1, 1)` in a new schema, an Avro pipeline
/// streaming it, and its topic.
struct IntTable {
    name: String,
    client: tokio_postgres::Client,
    dir: std::path::PathBuf,
    sluice: Sluice,
    topic: String,
}

async fn int_table_streaming(prefix: &str) -> IntTable {
    let name = unique(prefix);
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name};
             CREATE TABLE {name}.t (id int PRIMARY KEY, v int);
             INSERT INTO {name}.t VALUES (1, 1);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let sluice = Sluice::start(&dir, &avro_toml(&name, port), port);
    sluice.wait_streaming(Duration::from_secs(60));
    let topic = format!("{name}.{name}.t");
    IntTable {
        name,
        client,
        dir,
        sluice,
        topic,
    }
}

/// A column retyped mid-stream under the subject's BACKWARD compatibility: the registry refuses
/// the new schema, the pipeline stops naming the subject and the compatibility level, and
/// nothing is lost: once the subject lets the change through, the run resumes and writes the
/// change.
#[tokio::test(flavor = "multi_thread")]
async fn a_refused_schema_change_stops_naming_the_subject_and_loses_nothing() {
    let IntTable {
        name,
        client,
        dir,
        mut sluice,
        topic,
    } = int_table_streaming("avro_refused").await;
    let subject = format!("{topic}-value");
    assert_eq!(decode(&topic, 1).len(), 1);
    registry_put(
        &format!("/config/{subject}"),
        "{\"compatibility\":\"BACKWARD\"}",
    );
    // `sluice check` reaches the registry and names the subjects with their levels.
    let file = dir.join("pipeline.toml");
    let (_, check) =
        crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(30));
    assert!(check.contains("schema registry http://"), "{check}");
    assert!(
        check.contains(&format!(
            "subject \"{subject}\": 1 version(s), compatibility BACKWARD"
        )),
        "{check}"
    );
    assert!(
        check.contains(&format!(
            "subject \"{topic}-key\": 1 version(s), compatibility NONE  WARNING"
        )),
        "{check}"
    );
    // `sluice doctor` names the subject still under NONE (the key's), not the value's.
    let (_, doctor) = crate::faults::run_sluice(
        &["doctor", "--json", "--pipeline", file.to_str().unwrap()],
        Duration::from_secs(180),
    );
    let findings: Value = serde_json::from_str(&doctor).unwrap_or_else(|e| panic!("{e}: {doctor}"));
    let none = findings
        .as_array()
        .and_then(|f| {
            f.iter()
                .find(|f| f["code"] == "registry.compatibility_none")
        })
        .unwrap_or_else(|| panic!("no registry.compatibility_none finding: {doctor}"));
    assert_eq!(
        none["evidence"]["subjects"],
        json!([format!("{topic}-key")]),
        "{none}"
    );
    client
        .batch_execute(&format!(
            "ALTER TABLE {name}.t ALTER COLUMN v TYPE text;
             INSERT INTO {name}.t VALUES (2, 'two');"
        ))
        .await
        .unwrap();
    sluice.wait_log("the registry's refusal", Duration::from_secs(60), |log| {
        log.contains("refused the new schema")
    });
    let log = sluice.log_text();
    assert!(
        log.contains(&subject) && log.contains("compatibility level is BACKWARD"),
        "the log names the subject and its level: {log}"
    );
    // Nothing after the refused change was written.
    assert_eq!(decode(&topic, 1).len(), 1);
    registry_put(
        &format!("/config/{subject}"),
        "{\"compatibility\":\"NONE\"}",
    );
    sluice.restart();
    let records = decode(&topic, 2);
    assert_eq!(records.len(), 2, "{records:#?}");
    assert_eq!(records[1]["value"]["after"], json!({"id": 2, "v": "two"}));
    sluice.stop();
    drop_slot_and_publication(&client, &name).await;
}

/// A column's type changed while sluice was stopped, after changes it had not read: those
/// changes decode under the type they were written with (the Relation message's), not the
/// catalog's newer one; the change after the `ALTER` under the new type, as a second version.
/// (Reading the column types from the catalog alone gave the older changes the text schema:
/// their integers could not be written, and the pipeline stopped.)
#[tokio::test(flavor = "multi_thread")]
async fn changes_before_a_type_change_made_while_stopped_keep_their_type() {
    let IntTable {
        name,
        client,
        mut sluice,
        topic,
        ..
    } = int_table_streaming("avro_retype").await;
    assert_eq!(decode(&topic, 1).len(), 1);
    assert!(sluice.stop(), "sluice stops on SIGTERM");
    // Three transactions: one before the type change, the change with a row, one after.
    for sql in [
        format!("INSERT INTO {name}.t VALUES (2, 2)"),
        format!(
            "ALTER TABLE {name}.t ALTER COLUMN v TYPE text; INSERT INTO {name}.t VALUES (3, 'three')"
        ),
        format!("INSERT INTO {name}.t VALUES (4, 'four')"),
    ] {
        client.batch_execute(&sql).await.unwrap();
    }
    sluice.restart();
    let records = decode(&topic, 4);
    let after: Vec<&Value> = records.iter().map(|r| &r["value"]["after"]).collect();
    assert_eq!(
        after,
        [
            &json!({"id": 1, "v": 1}),
            &json!({"id": 2, "v": 2}),
            &json!({"id": 3, "v": "three"}),
            &json!({"id": 4, "v": "four"}),
        ],
        "{records:#?}"
    );
    let versions = registry_get(&format!("/subjects/{topic}-value/versions"));
    assert_eq!(versions.as_array().map(Vec::len), Some(2), "{versions}");
    assert!(
        sluice
            .log_text()
            .contains("disagree on these columns' types"),
        "the log says why the older changes keep their type"
    );
    sluice.stop();
    drop_slot_and_publication(&client, &name).await;
}

/// A registry that does not answer: the pipeline writes nothing, retries with backoff and says
/// so in `/health`; with a second URL that answers (tried in turn), it resumes and every change
/// arrives.
#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_registry_is_retried_shown_in_health_and_loses_nothing() {
    let name = unique("avro_down");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name};
             CREATE TABLE {name}.t (id int PRIMARY KEY, v text);
             INSERT INTO {name}.t VALUES (1, 'one');"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let dead = format!("http://127.0.0.1:{}", free_port());
    let toml = avro_toml(&name, port);
    let down = toml.replace(&registry_url(), &dead);
    assert_ne!(down, toml);
    let mut sluice = Sluice::start(&dir, &down, port);
    let mut health = Value::Null;
    wait_until(
        "/health shows the registry down",
        Duration::from_secs(60),
        || {
            health = sluice
                .get("/health")
                .and_then(|h| serde_json::from_str(&h).ok())
                .unwrap_or(Value::Null);
            health["schema_registry_error"]
                .as_str()
                .is_some_and(|e| e.contains("does not answer") && e.contains(&dead))
        },
    );
    client
        .batch_execute(&format!("INSERT INTO {name}.t VALUES (2, 'two');"))
        .await
        .unwrap();
    sluice.stop();
    // Both URLs, the dead one first: the second answers.
    let both = toml.replace(
        &format!("url = \"{}\"", registry_url()),
        &format!("url = [\"{dead}\", \"{}\"]", registry_url()),
    );
    assert_ne!(both, toml);
    let mut sluice = Sluice::start(&dir, &both, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let topic = format!("{name}.{name}.t");
    let records = decode(&topic, 2);
    let ids: Vec<i64> = records
        .iter()
        .map(|r| r["value"]["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, [1, 2]);
    let health: Value = serde_json::from_str(&sluice.get("/health").unwrap()).unwrap();
    assert_eq!(health["schema_registry_error"], Value::Null);
    sluice.stop();
    drop_slot_and_publication(&client, &name).await;
}

/// MySQL → Kafka in Avro: a snapshot, streamed inserts, updates and deletes, then an `ALTER
/// TABLE … ADD COLUMN … DEFAULT` mid-stream. Every record decodes with the independent client
/// by its registry id; each key's events come in the order of its changes; the newest event
/// per key equals the table; the added column registered a second value version (its field
/// carrying the column's default) before the first record with it, records of both versions
/// decoding; and the schema-change topic's DDL event decodes too.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_avro_records_decode_and_equal_the_table_across_an_added_column() {
    use mysql_async::prelude::Queryable;

    use crate::mysql::{Server, pipeline};

    let server = Server::Mysql;
    let _server = server.shared().await;
    let name = unique("my_avro");
    let mut conn = server.root().await;
    conn.query_drop(format!(
        "CREATE DATABASE {name} CHARACTER SET utf8mb4; USE {name};
         CREATE TABLE items (id BIGINT PRIMARY KEY, n INT NOT NULL, label VARCHAR(40) NOT NULL,
           note TEXT, price DECIMAL(10,2), flag BIT(1), data VARBINARY(8), small SMALLINT,
           kind ENUM('a','b'));
         INSERT INTO items SELECT seq, seq, CONCAT('label ', seq), IF(seq % 3 = 0, NULL,
           CONCAT('n', seq)), seq * 1.25, seq % 2, UNHEX(LPAD(HEX(seq), 4, '0')), seq % 100,
           IF(seq % 2 = 0, 'a', 'b')
           FROM (WITH RECURSIVE s(seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s
                 WHERE seq < 100) SELECT seq FROM s) rows_;"
    ))
    .await
    .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = format!(
        "{}\n[kafka.events]\nformat = \"avro\"\n\n[schema_registry]\nurl = \"{}\"\n",
        pipeline(server, &name, &name, &name, port),
        registry_url()
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    for round in 0..3 {
        conn.query_drop(format!(
            "UPDATE items SET n = n + 1000, price = price + 0.01, note = 'r{round}'
               WHERE id % 4 = {round};
             DELETE FROM items WHERE id % 25 = {round} + 7;
             INSERT INTO items VALUES ({id}, -1, 'new', NULL, -0.5, NULL, X'00FF', -3, 'b');",
            id = 1000 + round
        ))
        .await
        .unwrap();
    }
    conn.query_drop(
        "ALTER TABLE items ADD COLUMN extra VARCHAR(10) DEFAULT 'dflt';
         INSERT INTO items (id, n, label, extra) VALUES (2000, 7, 'after alter', 'x');
         INSERT INTO items (id, n, label) VALUES (2001, 8, 'defaulted');
         UPDATE items SET n = 5 WHERE id = 1;",
    )
    .await
    .unwrap();
    let topic = format!("{name}.{name}.items");
    let mut want: BTreeMap<i64, Vec<&str>> = (1..=100).map(|id| (id, vec!["r"])).collect();
    let mut deleted = Vec::new();
    for round in 0..3 {
        for (id, ops) in want.iter_mut() {
            if id % 4 == round && ops.last() != Some(&"tombstone") && *id < 1000 {
                ops.push("u");
            }
        }
        for (id, ops) in want.iter_mut() {
            if id % 25 == round + 7 && *id < 1000 {
                ops.extend(["d", "tombstone"]);
                deleted.push(*id);
            }
        }
        want.insert(1000 + round, vec!["c"]);
    }
    want.insert(2000, vec!["c"]);
    want.insert(2001, vec!["c"]);
    want.get_mut(&1).unwrap().push("u");
    let expected: usize = want.values().map(Vec::len).sum();
    let records = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || decode(&topic, expected)
    })
    .await
    .unwrap();
    assert_eq!(records.len(), expected);

    let mut by_key: BTreeMap<i64, Vec<&Value>> = BTreeMap::new();
    let mut value_ids = std::collections::BTreeSet::new();
    for record in &records {
        let id = record["key"]["id"].as_i64().expect("an Avro key with id");
        assert!(record["key_schema_id"].as_u64().is_some(), "{record}");
        if !record["value"].is_null() {
            value_ids.insert(record["value_schema_id"].as_u64().unwrap());
        }
        by_key.entry(id).or_default().push(record);
    }
    assert_eq!(
        value_ids.len(),
        2,
        "one value schema before the ALTER, one after"
    );
    for (id, events) in &by_key {
        let ops: Vec<&str> = events
            .iter()
            .map(|e| e["value"]["op"].as_str().unwrap_or("tombstone"))
            .collect();
        assert_eq!(ops, want[id], "key {id}: {events:#?}");
    }
    assert_eq!(by_key.len(), want.len());

    // The newest event per key equals the table.
    type Row = (
        i64,
        i32,
        String,
        Option<String>,
        Option<String>,
        Option<bool>,
        Option<String>,
        Option<i16>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Row> = conn
        .query(
            "SELECT id, n, label, note, CAST(price AS CHAR), flag = 1, TO_BASE64(data), small,
               kind, extra FROM items",
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 100 - deleted.len() + 5);
    for (id, n, label, note, price, flag, data, small, kind, extra) in rows {
        let after = &by_key[&id].last().unwrap()["value"]["after"];
        let want = json!({
            "id": id, "n": n, "label": label, "note": note, "price": price, "flag": flag,
            "data": data, "small": small, "kind": kind,
        });
        for (column, value) in want.as_object().unwrap() {
            assert_eq!(&after[column], value, "key {id} column {column}: {after}");
        }
        if id >= 2000 || id == 1 {
            assert_eq!(after["extra"], json!(extra), "{after}");
        }
    }
    assert_eq!(
        by_key[&2001].last().unwrap()["value"]["after"]["extra"],
        "dflt"
    );

    // Two value versions; the second's new field carries the column's default.
    let versions = registry_get(&format!("/subjects/{topic}-value/versions"));
    assert_eq!(versions, json!([1, 2]), "{versions}");
    let latest = registry_get(&format!("/subjects/{topic}-value/versions/latest"));
    let schema: Value = serde_json::from_str(latest["schema"].as_str().unwrap()).unwrap();
    assert_eq!(schema["connect.name"], format!("{topic}.Envelope"));
    let row = &schema["fields"][0]["type"][1]["fields"];
    let extra = row
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["name"] == "extra")
        .expect("the added column's field");
    assert_eq!(extra["default"], "dflt", "{extra}");

    // The schema-change topic (`<prefix>`) in Avro too: the ALTER decodes.
    let changes = tokio::task::spawn_blocking({
        let topic = name.clone();
        move || decode(&topic, 1)
    })
    .await
    .unwrap();
    assert!(
        changes.iter().any(|c| c["value"]["ddl"]
            .as_str()
            .is_some_and(|d| d.contains("ADD COLUMN"))),
        "{changes:#?}"
    );
    drop(sluice);
    conn.query_drop(format!("DROP DATABASE {name}"))
        .await
        .unwrap();
}

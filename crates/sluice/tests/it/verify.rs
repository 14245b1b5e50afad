//! `sluice verify` against the real PostgreSQL and Kafka: equal while changes keep flowing
//! (no false positive), faults injected into the topic found with their keys (exit code 1),
//! repaired by `--repair` until equal again; a source it cannot reach is exit code 2.

use std::panic::AssertUnwindSafe;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt as _;
use rand::Rng;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::Value;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, sluice_bin, stack, test_dir,
    unique,
};

/// Rows in the table (thousands: the test runs in seconds).
const ROWS: i64 = 3000;

/// Every type class verify compares (arrays and intervals included); `big` holds TOASTed values
/// for some rows, which the writer's updates leave out of their events (`unavailable_columns`).
const COLUMNS: &str = "id bigint PRIMARY KEY, v bigint NOT NULL, s text, c char(4), b bool, \
    n numeric(10,2), nu numeric, f4 real, f8 float8, d date, tm time, tm3 time(3), \
    ts timestamp, ts3 timestamp(3), tz timestamptz, by bytea, j jsonb, u uuid, \
    arr int[], iv interval, ta text[], na numeric(10,2)[], md int[], big text";

/// The SQL that creates `schema` and `table` ([`COLUMNS`]) with `rows` rows of every compared
/// type (ids 101..=200 with TOASTed values), and a row of NULLs (id 0).
fn create_table(schema: &str, table: &str, rows: i64) -> String {
    format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {table} ({COLUMNS});
         INSERT INTO {table} SELECT g, 0, 'row ' || g, 'ab', g % 2 = 0, g * 1.25, g / 7.0,
           g / 3.0, g / 3.0, DATE '2020-01-01' + g, TIME '10:00:00.123456', TIME '10:00:01.5',
           TIMESTAMP '2020-01-01 00:00:00.654321' + g * INTERVAL '1 hour',
           TIMESTAMP '2020-01-01 00:00:00.12', now(), '\\xdeadbeef', '{{\"a\": [1, 2]}}',
           gen_random_uuid(), ARRAY[g], INTERVAL '1 day',
           ARRAY['a,b', 'c\"d', NULL, '{{x}}', 'row ' || g], ARRAY[g * 1.5, NULL],
           ARRAY[[g, 1], [2, 3]],
           CASE WHEN g BETWEEN 101 AND 200 THEN (SELECT string_agg(md5(random()::text || g || i), '')
             FROM generate_series(1, 250) i) END
         FROM generate_series(1, {rows}) g;
         INSERT INTO {table} (id, v) VALUES (0, 0);"
    )
}

/// Runs `sluice verify FILE --json ARGS`: the exit code and the report.
pub(crate) fn verify(file: &std::path::Path, args: &[&str]) -> (i32, Value) {
    let started = Instant::now();
    let output = Command::new(sluice_bin())
        .arg("verify")
        .arg(file)
        .arg("--json")
        .args(args)
        .output()
        .expect("run sluice verify");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "not a JSON report ({e}): {stdout}\nstderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    eprintln!(
        "sluice verify {args:?}: exit {:?} in {:?}",
        output.status.code(),
        started.elapsed()
    );
    (output.status.code().unwrap_or(-1), report)
}

/// Updates random rows (and deletes and inserts some) until `stop`.
fn start_writer(table: String, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let client = pg().await;
        let mut changes = 0u64;
        let mut next_id = ROWS * 10;
        while !stop.load(Ordering::Relaxed) {
            let (ids, action) = {
                let mut rng = rand::rng();
                // Keys 1..=100 are left alone: the faults go there. Keys 101..=200 hold
                // TOASTed values: a third of the updates go there.
                let ids: Vec<String> = (0..6)
                    .map(|i| {
                        let range = if i % 3 == 0 { 101..=200 } else { 101..=ROWS };
                        rng.random_range(range).to_string()
                    })
                    .collect();
                (ids, rng.random_range(0..10))
            };
            let sql = match action {
                0 => format!("DELETE FROM {table} WHERE id = {}", ids[0]),
                1 => {
                    next_id += 1;
                    format!("INSERT INTO {table} (id, v, s) VALUES ({next_id}, 1, 'new')")
                }
                _ => format!(
                    "UPDATE {table} SET v = v + 1, s = 'u' || v, f8 = random(), \
                     nu = random()::numeric * 1000, ts = now(), \
                     arr = ARRAY[v, NULL, -v], iv = v * INTERVAL '1 mon -1 day 1.5 s' \
                     WHERE id IN ({})",
                    ids.join(",")
                ),
            };
            client.batch_execute(&sql).await.unwrap();
            changes += 1;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        changes
    })
}

/// Produces records of raw bytes (a `None` value: a tombstone) to `topic`.
fn produce(topic: &str, records: &[(&str, Option<&str>)]) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    for (key, value) in records {
        let mut record = BaseRecord::<str, str>::to(topic).key(*key);
        if let Some(value) = value {
            record = record.payload(*value);
        }
        producer.send(record).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The report of `table`.
fn table_report<'a>(report: &'a Value, table: &str) -> &'a Value {
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["table"] == table)
        .unwrap_or_else(|| panic!("no {table} in {report:#}"))
}

pub(crate) fn differences(report: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["differences"].as_array().unwrap().clone())
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                d["key"]["id"].to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

/// Equal, repeatedly, while a writer keeps changing the table; a replaced record and a
/// tombstone injected into the topic are found with their keys (exit code 1), `--repair`
/// requests their incremental snapshot and verify turns equal again.
#[tokio::test(flavor = "multi_thread")]
async fn verify_is_equal_under_changes_and_finds_and_repairs_faults() {
    let client = pg().await;
    let name = unique("verify");
    let schema = name.clone();
    let table = format!("{schema}.t");
    client
        .batch_execute(&format!(
            "{}
             CREATE TABLE {schema}.empty (id int PRIMARY KEY);",
            create_table(&schema, &table, ROWS)
        ))
        .await
        .unwrap();
    // Cleaned up also when the scenario fails: a slot left behind keeps WAL.
    let outcome = AssertUnwindSafe(scenario(&name, &schema, &table))
        .catch_unwind()
        .await;
    drop_slot_and_publication(&client, &name).await;
    let _ = client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The pipeline, the writer, the verifications and the faults of
/// [`verify_is_equal_under_changes_and_finds_and_repairs_faults`].
async fn scenario(name: &str, schema: &str, table: &str) {
    let admin = free_port();
    let dir = test_dir(name);
    let toml = pipeline_toml(name, schema, name, admin, "").replace(
        "[kafka]",
        &format!("signal_table = \"{schema}.sluice_signal\"\n\n[kafka]"),
    );
    let sluice = Sluice::start(&dir, &toml, admin);
    sluice.wait_streaming(Duration::from_secs(60));
    let topic = format!("{name}.{table}");

    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(table.to_owned(), Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut partial_keys = 0;
    for run in 0..3 {
        let (code, report) = verify(&sluice.file, &[]);
        partial_keys += table_report(&report, table)["partial_keys"]
            .as_u64()
            .unwrap();
        // An empty table whose topic was never created is equal too.
        let empty = table_report(&report, &format!("{schema}.empty"));
        assert_eq!(empty["status"], "equal", "{report:#}");
        assert_eq!(code, 0, "run {run} under changes: {report:#}");
        let t = table_report(&report, table);
        assert_eq!(t["status"], "equal", "{report:#}");
        assert!(t["source_rows"].as_u64().unwrap() > ROWS as u64 / 2);
        let not_compared: Vec<&str> = t["columns_not_compared"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["column"].as_str().unwrap())
            .collect();
        assert!(not_compared.is_empty(), "{not_compared:?}");
    }
    assert!(partial_keys > 0, "no update left a TOASTed value out");

    // Faults: key 5's newest record replaced by another value (a record not written by
    // sluice, so without its position header); key 7 deleted from the topic by a tombstone.
    produce(
        &topic,
        &[
            (
                r#"{"id":5}"#,
                Some(r#"{"before":null,"after":{"id":5,"v":0,"s":"tampered"},"op":"u"}"#),
            ),
            (r#"{"id":7}"#, None),
        ],
    );
    let (code, report) = verify(&sluice.file, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["status"], "differences");
    assert_eq!(
        differences(&report),
        [
            ("differs".to_owned(), "5".to_owned()),
            ("missing_in_topic".to_owned(), "7".to_owned())
        ],
        "{report:#}"
    );
    let five = table_report(&report, table)["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["key"]["id"] == 5)
        .unwrap();
    assert_eq!(five["source"]["s"], "row 5");
    assert_eq!(five["topic"]["s"], "tampered");

    // Repaired: the pipeline snapshots exactly keys 5 and 7 again.
    let (code, report) = verify(&sluice.file, &["--repair"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["repair"]["keys"], 2, "{report:#}");
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    loop {
        let (code, report) = verify(&sluice.file, &[]);
        if code == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not repaired within 60 s: {report:#}\n{}",
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let changes = writer.await.unwrap();
    assert!(changes > 20, "the writer made {changes} changes");

    // A table whose topic holds a key the table does not: found; `--repair` names the fix.
    produce(
        &topic,
        &[(
            r#"{"id":999999}"#,
            Some(r#"{"before":null,"after":{"id":999999,"v":0},"op":"c"}"#),
        )],
    );
    let (code, report) = verify(&sluice.file, &["--repair"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        differences(&report),
        [("missing_in_source".to_owned(), "999999".to_owned())]
    );
    assert!(
        report["repair"]["hints"][0]
            .as_str()
            .unwrap()
            .contains("republication"),
        "{report:#}"
    );

    drop(sluice);
}

/// A source that cannot be reached, and a pipeline file of another kind: exit code 2 with the
/// reason.
#[tokio::test(flavor = "multi_thread")]
async fn verify_says_when_it_cannot_verify() {
    let name = unique("verify_unreachable");
    let dir = test_dir(&name);
    let port = free_port();
    let toml = pipeline_toml(&name, "public", &name, free_port(), "").replace(
        &stack().pg_url,
        &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
    );
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, toml).unwrap();
    let (code, report) = verify(&file, &[]);
    assert_eq!(code, 2, "{report:#}");
    assert_eq!(report["status"], "error");
    assert!(
        report["error"].as_str().unwrap().contains("PostgreSQL"),
        "{report:#}"
    );
}

/// Avro topics: the same table captured by a JSON pipeline (intervals and decimals as strings)
/// and by an Avro pipeline (Confluent's wire format through the dev stack's schema registry)
/// verifies equal in both formats, arrays and intervals included. A row
/// changed while the Avro pipeline was stopped, its change then skipped by advancing the slot
/// past it (a silent loss), is found with its key (exit code 1); a record whose schema id the
/// registry does not hold leaves the table not verified (exit code 2), not "different".
#[tokio::test(flavor = "multi_thread")]
async fn verify_reads_avro_topics_as_json_ones() {
    let client = pg().await;
    let json_name = unique("verify_json");
    let avro_name = unique("verify_avro");
    let schema = avro_name.clone();
    let table = format!("{schema}.t");
    client
        .batch_execute(&create_table(&schema, &table, 60))
        .await
        .unwrap();
    let outcome = AssertUnwindSafe(avro_scenario(&json_name, &avro_name, &schema, &table))
        .catch_unwind()
        .await;
    for name in [&json_name, &avro_name] {
        drop_slot_and_publication(&client, name).await;
    }
    let _ = client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The pipelines, verifications and the fault of [`verify_reads_avro_topics_as_json_ones`].
async fn avro_scenario(json_name: &str, avro_name: &str, schema: &str, table: &str) {
    let registry = std::env::var("SCHEMA_REGISTRY_URL").unwrap_or_else(|_| {
        panic!(
            "SCHEMA_REGISTRY_URL is not set: eval \"$(scripts/dev-stack env)\" (scripts/test does)"
        )
    });
    // The JSON pipeline writes intervals and decimals as strings: their other encodings.
    let json_admin = free_port();
    let json_toml = pipeline_toml(json_name, schema, json_name, json_admin, "").replace(
        "[admin]",
        "[kafka.events]\ninterval_handling_mode = \"string\"\n\
         decimal_handling_mode = \"string\"\n\n[admin]",
    );
    let json = Sluice::start(&test_dir(json_name), &json_toml, json_admin);
    let avro_admin = free_port();
    let avro_toml = pipeline_toml(avro_name, schema, avro_name, avro_admin, "")
        .replace("[admin]", "[kafka.events]\nformat = \"avro\"\n\n[admin]")
        + &format!("\n[schema_registry]\nurl = \"{registry}\"\n");
    let mut avro = Sluice::start(&test_dir(avro_name), &avro_toml, avro_admin);
    json.wait_streaming(Duration::from_secs(60));
    avro.wait_streaming(Duration::from_secs(60));

    // The same rows, in both formats: equal.
    for sluice in [&json, &avro] {
        let (code, report) = verify(&sluice.file, &[]);
        assert_eq!(code, 0, "{report:#}");
        let t = table_report(&report, table);
        assert_eq!(t["status"], "equal", "{report:#}");
        assert_eq!(t["source_rows"], 61, "{report:#}");
        assert_eq!(t["topic_keys"], 61, "{report:#}");
        // Arrays and intervals included.
        assert_eq!(
            t["columns_not_compared"],
            serde_json::json!([]),
            "{report:#}"
        );
    }

    // Row 5 changed while the Avro pipeline is stopped, and its change skipped: the slot is
    // advanced past it, as a slot recreated or moved behind the pipeline's back would be.
    assert!(avro.stop(), "sluice stops gracefully:\n{}", avro.log_text());
    let client = pg().await;
    client
        .batch_execute(&format!(
            "UPDATE {table} SET s = 'behind sluice' WHERE id = 5"
        ))
        .await
        .unwrap();
    client
        .execute(
            "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())",
            &[&format!("sluice_{avro_name}")],
        )
        .await
        .unwrap();
    // sluice would refuse the gap (its state remembers where it was): the state goes too, as
    // when the gap is accepted (`on_slot_loss = "recreate"`).
    let state = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state")
        .join(format!("{avro_name}.slot.json"));
    std::fs::remove_file(&state).unwrap();
    avro.restart();
    avro.wait_streaming(Duration::from_secs(60));
    let (code, report) = verify(&avro.file, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        differences(&report),
        [("differs".to_owned(), "5".to_owned())],
        "{report:#}"
    );
    let five = &table_report(&report, table)["differences"][0];
    assert_eq!(five["columns"], serde_json::json!(["s"]), "{report:#}");
    assert_eq!(five["source"]["s"], "behind sluice");
    assert_eq!(five["topic"]["s"], "row 5");
    // The JSON pipeline got the change.
    let (code, report) = verify(&json.file, &[]);
    assert_eq!(code, 0, "{report:#}");

    // A record whose schema id the registry does not hold: not verified, with the reason.
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let unknown: &[u8] = &[0, 0x7f, 0xff, 0xff, 0xf0, 2, 0];
    producer
        .send(
            BaseRecord::<[u8], [u8]>::to(&format!("{avro_name}.{table}"))
                .key(unknown)
                .payload(unknown),
        )
        .map_err(|(e, _)| e)
        .unwrap();
    producer.flush(Duration::from_secs(30)).unwrap();
    let (code, report) = verify(&avro.file, &[]);
    assert_eq!(code, 2, "{report:#}");
    let t = table_report(&report, table);
    assert_eq!(t["status"], "not_verified", "{report:#}");
    assert!(
        t["reason"].as_str().unwrap().contains("2147483632"),
        "the reason names the schema id: {report:#}"
    );
    drop(avro);
    drop(json);
}

/// Kafka → PostgreSQL: a sink stopped at a crash point after a few batches committed (so its
/// sub-partitions have applied different prefixes of the topic, and the rest is not applied)
/// verifies equal, the records it has not applied left out; once it has applied everything,
/// equal again; a row changed, a row deleted and a row added in the target table are found
/// with their keys (exit code 1).
#[tokio::test(flavor = "multi_thread")]
async fn verify_sink_compares_applied_records_and_finds_changed_and_missing_rows() {
    use crate::sink::create_topic;
    use crate::sink_pg::{
        assert_applied_once, counters_table, drop_database, produce_changes, sink_toml,
        target_database,
    };
    let name = unique("verify_sink");
    let (url, target) = target_database(&name).await;
    counters_table(&target).await;
    let topic = format!("{name}.app.counters");
    create_topic(&topic, 2).await;
    // 400 keys × 10 changes over 2 partitions × 4 sub-partitions: about 2 batches each.
    let expected = produce_changes(&topic, 400, 10);
    let port = free_port();
    let toml = sink_toml(&name, std::slice::from_ref(&topic), &url, port, "");
    let mut sink = Sluice::start_with_env(
        &test_dir(&name),
        &toml,
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "sink::postgres::batch_committed=5*off->return".to_owned(),
        )],
    );
    crate::support::wait_until(
        "the sink to abort at its crash point",
        Duration::from_secs(120),
        || sink.exited().is_some(),
    );
    let applied: Vec<i64> = target
        .query(
            "SELECT next_offset FROM sluice_sink_progress ORDER BY kafka_partition, sub_partition",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        applied.iter().any(|&n| n > 0),
        "no batch committed before the crash point (build with --features failpoints): {applied:?}\n{}",
        sink.log_text()
    );
    let (code, report) = verify(&sink.file, &[]);
    assert_eq!(code, 0, "part applied ({applied:?}): {report:#}");
    assert_eq!(report["kind"], "sink", "{report:#}");
    let t = table_report(&report, "app.counters");
    assert_eq!(t["status"], "equal", "{report:#}");
    assert!(t["source_rows"].as_u64().unwrap() > 0, "{report:#}");
    assert!(
        t["read"]["after_position"].as_u64().unwrap() > 0,
        "records the sink has not applied were read as applied: {report:#}"
    );

    sink.env.clear();
    sink.restart();
    assert_applied_once(&target, &expected, Duration::from_secs(120), &sink).await;
    let (code, report) = verify(&sink.file, &[]);
    assert_eq!(code, 0, "{report:#}");
    let t = table_report(&report, "app.counters");
    assert_eq!(t["source_rows"], expected.len() as u64, "{report:#}");
    assert_eq!(t["topic_keys"], expected.len() as u64, "{report:#}");

    // Faults in the target table: key 5 changed, key 7 deleted, key 99999 added.
    sink.kill();
    target
        .batch_execute(
            "UPDATE app.counters SET label = 'tampered' WHERE id = 5;
             DELETE FROM app.counters WHERE id = 7;
             INSERT INTO app.counters VALUES (99999, 1, 'extra');",
        )
        .await
        .unwrap();
    let (code, report) = verify(&sink.file, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["status"], "differences");
    assert_eq!(
        differences(&report),
        [
            ("differs".to_owned(), "5".to_owned()),
            ("missing_in_table".to_owned(), "7".to_owned()),
            ("missing_in_topic".to_owned(), "99999".to_owned()),
        ],
        "{report:#}"
    );
    let five = table_report(&report, "app.counters")["differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["key"]["id"] == 5)
        .unwrap();
    assert_eq!(five["columns"], serde_json::json!(["label"]), "{report:#}");
    assert_eq!(five["source"]["label"], "tampered");
    assert_eq!(five["topic"]["label"], format!("k5 c{}", expected[&5]));
    drop(sink);
    drop(target);
    drop_database(&name).await;
}

/// MySQL/MariaDB → Kafka (MariaDB of the dev stack): equal while a writer keeps changing the
/// table (the snapshot's binlog position and the records' positions agree), every compared
/// type included; a replaced record and a tombstone injected into the topic are found with
/// their keys (exit code 1).
#[tokio::test(flavor = "multi_thread")]
async fn verify_mariadb_is_equal_under_changes_and_finds_faults() {
    verify_mysql_server(crate::mysql::Server::Mariadb).await;
}

/// [`verify_mariadb_is_equal_under_changes_and_finds_faults`] against MySQL 8.0 (its snapshot
/// stops commits for a moment: `FLUSH TABLES WITH READ LOCK`). Not in the suite, which keeps
/// to one server per feature for time: `SLUICE_IT_VERIFY_MYSQL=1` runs it.
#[tokio::test(flavor = "multi_thread")]
async fn verify_mysql_is_equal_under_changes_and_finds_faults() {
    if std::env::var_os("SLUICE_IT_VERIFY_MYSQL").is_none() {
        eprintln!("skipped: SLUICE_IT_VERIFY_MYSQL is not set");
        return;
    }
    verify_mysql_server(crate::mysql::Server::Mysql).await;
}

async fn verify_mysql_server(server: crate::mysql::Server) {
    use mysql_async::prelude::Queryable;

    use crate::mysql::{database_with_table, pipeline};
    let _server = server.shared().await;
    let database = unique("verify_my");
    let mut root = database_with_table(
        server,
        &database,
        "(id INT NOT NULL PRIMARY KEY, v BIGINT NOT NULL, u BIGINT UNSIGNED, \
          note VARCHAR(40), d DECIMAL(10,2), dt DATETIME(3), dt6 DATETIME(6), \
          ts TIMESTAMP(6) NULL, day DATE, b VARBINARY(16), e ENUM('a','b'), flag BIT(1), \
          y YEAR, f DOUBLE)",
    )
    .await;
    let rows = 2000u32;
    for first in (1..=rows).step_by(500) {
        let values: Vec<String> = (first..=rows.min(first + 499))
            .map(|id| {
                format!(
                    "({id}, {id}, {}, 'row{id} é', {id}.25, '2020-01-01 00:00:00.123' + INTERVAL {id} HOUR, \
                     '2020-01-01 00:00:00.654321' + INTERVAL {id} MINUTE, \
                     '2021-06-01 10:00:00.5' + INTERVAL {id} SECOND, '1969-12-31' + INTERVAL {id} DAY, \
                     UNHEX('00FF{id:04X}'), '{}', b'{}', {}, {id}.5)",
                    if id == 1 { "18446744073709551615".to_owned() } else { id.to_string() },
                    if id % 2 == 0 { "a" } else { "b" },
                    id % 2,
                    1990 + id % 50,
                )
            })
            .collect();
        root.query_drop(format!(
            "INSERT INTO {database}.t VALUES {}",
            values.join(",")
        ))
        .await
        .unwrap();
    }
    root.query_drop(format!("INSERT INTO {database}.t (id, v) VALUES (0, 0)"))
        .await
        .unwrap();
    // The signal table `--repair` writes to (sluice creates it).
    root.query_drop(format!(
        "GRANT CREATE, INSERT, DELETE ON {database}.* TO 'sluice'@'127.0.0.1'"
    ))
    .await
    .unwrap();
    let prefix = unique("vmy");
    let admin = free_port();
    let dir = test_dir(&database);
    let toml = pipeline(server, &database, &database, &prefix, admin).replacen(
        "heartbeat_interval_ms = 1000",
        &format!("heartbeat_interval_ms = 1000\nsignal_table = \"{database}.sluice_signal\""),
        1,
    );
    let mut sluice = Sluice::start(&dir, &toml, admin);
    sluice.wait_streaming(Duration::from_secs(60));

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, database) = (Arc::clone(&stop), database.clone());
        tokio::spawn(async move {
            let mut conn = server.root().await;
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                // Keys 1..=100 are left alone: the faults go there.
                let id = 101 + n.wrapping_mul(7919) % u64::from(rows - 100);
                let sql = match n % 5 {
                    0 => format!("DELETE FROM {database}.t WHERE id = {id}"),
                    1 => format!(
                        "INSERT INTO {database}.t (id, v, note) VALUES ({}, {n}, 'new')",
                        100_000 + n
                    ),
                    _ => format!(
                        "UPDATE {database}.t SET v = v + 1, note = 'upd{n}', d = d + 1.5, \
                         dt6 = NOW(6), ts = NOW(6), b = UNHEX('ABCD'), flag = b'1' \
                         WHERE id IN ({id}, {})",
                        101 + (id * 31) % u64::from(rows - 100)
                    ),
                };
                conn.query_drop(sql).await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            n
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let table = format!("{database}.t");
    for run in 0..2 {
        let (code, report) = verify(&sluice.file, &[]);
        assert_eq!(code, 0, "run {run} under changes: {report:#}");
        let t = table_report(&report, &table);
        assert_eq!(t["status"], "equal", "{report:#}");
        assert!(t["source_rows"].as_u64().unwrap() > u64::from(rows) / 2);
        let not_compared: Vec<&str> = t["columns_not_compared"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["column"].as_str().unwrap())
            .collect();
        assert_eq!(not_compared, ["f"], "{report:#}");
    }
    stop.store(true, Ordering::Relaxed);
    let changes = writer.await.unwrap();
    assert!(changes > 20, "the writer made {changes} changes");

    let topic = format!("{prefix}.{table}");
    produce(
        &topic,
        &[
            (
                r#"{"id":5}"#,
                Some(r#"{"before":null,"after":{"id":5,"v":5,"note":"tampered"},"op":"u"}"#),
            ),
            (r#"{"id":7}"#, None),
        ],
    );
    let (code, report) = verify(&sluice.file, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        differences(&report),
        [
            ("differs".to_owned(), "5".to_owned()),
            ("missing_in_topic".to_owned(), "7".to_owned())
        ],
        "{report:#}"
    );
    // The source row is shown by column name (the names are the plan's, the values MySQL's).
    let five = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["differences"].as_array().cloned().unwrap_or_default())
        .find(|d| d["key"]["id"] == 5)
        .unwrap();
    assert_eq!(five["source"]["id"], 5, "{report:#}");
    assert!(five["source"]["note"].is_string(), "{report:#}");
    assert_eq!(five["topic"]["note"], "tampered", "{report:#}");

    // Repaired: the pipeline snapshots exactly keys 5 and 7 again (its signal table).
    let (code, report) = verify(&sluice.file, &["--repair"]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["repair"]["keys"], 2, "{report:#}");
    crate::support::wait_until(
        "verify to find the repaired keys equal",
        Duration::from_secs(60),
        || verify(&sluice.file, &[]).0 == 0,
    );
    sluice.stop();
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

/// Scheduled verification (`verify_interval_s`): the running pipeline verifies its table every
/// second; `/health` and the `sluice_verify_*` metrics show it equal, then, after a record of
/// the topic is replaced, the differences (the time of the last success kept).
#[tokio::test(flavor = "multi_thread")]
async fn scheduled_verification_shows_in_health_and_metrics() {
    let client = pg().await;
    let name = unique("verify_sched");
    let schema = name.clone();
    let table = format!("{schema}.t");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {table} (id bigint PRIMARY KEY, note text);
             INSERT INTO {table} SELECT g, 'row ' || g FROM generate_series(1, 200) g;"
        ))
        .await
        .unwrap();
    let outcome = AssertUnwindSafe(async {
        let admin = free_port();
        let toml = pipeline_toml(&name, &schema, &name, admin, "").replacen(
            "state_dir =",
            "verify_interval_s = 1\nstate_dir =",
            1,
        );
        let sluice = Sluice::start(&test_dir(&name), &toml, admin);
        sluice.wait_streaming(Duration::from_secs(60));
        let verification = |sluice: &Sluice| -> Value {
            sluice
                .get("/health")
                .and_then(|h| serde_json::from_str::<Value>(&h).ok())
                .map(|h| h["verification"].clone())
                .unwrap_or_default()
        };
        crate::support::wait_until(
            "a scheduled verification to find the table equal",
            Duration::from_secs(60),
            || verification(&sluice)["status"] == "equal",
        );
        let equal = verification(&sluice);
        assert_eq!(equal["rows_compared"], 200, "{equal:#}");
        assert!(
            sluice
                .metric("sluice_verify_last_success_timestamp_seconds")
                .unwrap_or_default()
                > 1e9,
            "{:?}",
            sluice.get("/metrics")
        );
        assert!(
            sluice
                .metric("sluice_verify_rows_compared_total")
                .unwrap_or_default()
                >= 200.0
        );

        produce(
            &format!("{name}.{table}"),
            &[(
                r#"{"id":5}"#,
                Some(r#"{"before":null,"after":{"id":5,"note":"tampered"},"op":"u"}"#),
            )],
        );
        crate::support::wait_until(
            "a scheduled verification to find the difference",
            Duration::from_secs(60),
            || verification(&sluice)["status"] == "differences",
        );
        let differs = verification(&sluice);
        assert_eq!(differs["differences_found"], 1, "{differs:#}");
        assert_eq!(differs["ranges_differing"], 1, "{differs:#}");
        assert_eq!(
            differs["last_success_unix_ms"], equal["last_success_unix_ms"],
            "{differs:#}"
        );
        assert_eq!(
            sluice.metric("sluice_verify_ranges_differing"),
            Some(1.0),
            "{:?}",
            sluice.get("/metrics")
        );

        // `sluice doctor` on the pipeline file reads the running pipeline's /health: the
        // failed verification is critical (exit code 2), with the repair named.
        let output = Command::new(sluice_bin())
            .args(["doctor", "--json", "--pipeline"])
            .arg(&sluice.file)
            .output()
            .expect("run sluice doctor");
        let findings: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        let failed = findings
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["code"] == "pipeline.verification_failed")
            .unwrap_or_else(|| panic!("no pipeline.verification_failed in {findings:#}"));
        assert_eq!(failed["severity"], "critical", "{failed:#}");
        assert_eq!(failed["evidence"]["differences_found"], 1, "{failed:#}");
        assert!(
            failed["fix"].as_str().unwrap().contains("--repair"),
            "{failed:#}"
        );
        assert_eq!(output.status.code(), Some(2), "{findings:#}");
    })
    .catch_unwind()
    .await;
    drop_slot_and_publication(&client, &name).await;
    let _ = client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// A pipeline whose initial snapshot has not finished (stopped by a crash point right after
/// creating its slot): `verify` says so (exit code 2, "initial snapshot in progress") instead
/// of reporting every row missing from the topic; once the pipeline ran its snapshot, equal.
#[tokio::test(flavor = "multi_thread")]
async fn verify_during_the_initial_snapshot_cannot_verify() {
    let client = pg().await;
    let name = unique("verify_snap");
    let schema = name.clone();
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema};
             CREATE TABLE {schema}.t (id bigint PRIMARY KEY, note text);
             INSERT INTO {schema}.t SELECT g, 'row ' || g FROM generate_series(1, 100) g;"
        ))
        .await
        .unwrap();
    let outcome = AssertUnwindSafe(async {
        let admin = free_port();
        let dir = test_dir(&name);
        let toml = pipeline_toml(&name, &schema, &name, admin, "");
        let mut sluice = Sluice::start_with_env(
            &dir,
            &toml,
            admin,
            vec![(
                "FAILPOINTS".to_owned(),
                "snapshot::slot_created=return".to_owned(),
            )],
        );
        crate::support::wait_until(
            "sluice to stop at snapshot::slot_created (build with --features sluice/failpoints)",
            Duration::from_secs(60),
            || sluice.exited().is_some(),
        );
        let (code, report) = verify(&sluice.file, &["--wait-timeout", "5"]);
        assert_eq!(code, 2, "{report:#}");
        assert!(
            report["error"]
                .as_str()
                .unwrap()
                .starts_with("initial snapshot in progress"),
            "{report:#}"
        );

        let sluice = Sluice::start(&dir, &toml, admin);
        sluice.wait_streaming(Duration::from_secs(60));
        let (code, report) = verify(&sluice.file, &[]);
        assert_eq!(code, 0, "{report:#}");
        assert_eq!(report["source_rows"], 100, "{report:#}");
    })
    .catch_unwind()
    .await;
    drop_slot_and_publication(&client, &name).await;
    let _ = client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

/// The differences of a files report: kind and `partition/offset`, sorted.
pub(crate) fn offset_differences(report: &Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|t| t["differences"].as_array().unwrap().clone())
        .map(|d| {
            (
                d["kind"].as_str().unwrap().to_owned(),
                format!("{}/{}", d["key"]["partition"], d["key"]["offset"]),
            )
        })
        .collect();
    out.sort();
    out
}

/// Kafka → files: the output of a sink that wrote a whole topic (tombstones skipped) verifies
/// equal; then a record removed from a file, a record changed and a record written twice are
/// found with their partitions and offsets (exit code 1).
async fn files_scenario(format: &str) {
    use crate::sink::{
        create_topic, files_under, produce as produce_values, sink_toml, wait_for_output,
    };
    let name = unique(&format!("verify_files_{format}"));
    let topic = name.clone();
    create_topic(&topic, 2).await;
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce_values(&topic, 3000, 100, 0))
            .await
            .unwrap();
    }
    // Two tombstones: skipped by the sink (skip_tombstones), left out by verify.
    produce(&topic, &[("k1", None), ("k2", None)]);
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    // JSON Lines: verified on a schedule too (verify_interval_s), in the running sink.
    let scheduled = format == "jsonl";
    let mut toml = sink_toml(&name, &topic, &root, port, format, 2, "");
    if scheduled {
        toml = toml.replacen(
            &format!("name = \"{name}\"\n"),
            &format!("name = \"{name}\"\nverify_interval_s = 1\n"),
            1,
        );
    }
    let mut sink = Sluice::start(&dir, &toml, port);
    let sink_ref = &sink;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, 3000, Duration::from_secs(120), &[sink_ref])
    });
    let (code, report) = verify(&sink.file, &[]);
    assert_eq!(code, 0, "{report:#}");
    assert_eq!(report["kind"], "files", "{report:#}");
    let t = &report["tables"][0];
    assert_eq!(t["status"], "equal", "{report:#}");
    assert_eq!(t["source_rows"], 3000, "{report:#}");
    assert_eq!(t["topic_keys"], 3000, "{report:#}");
    let verification = |sink: &Sluice| -> Value {
        sink.get("/health")
            .and_then(|h| serde_json::from_str::<Value>(&h).ok())
            .map(|h| h["verification"].clone())
            .unwrap_or_default()
    };
    if scheduled {
        // (A run that began before the last epochs committed finds fewer records equal.)
        crate::support::wait_until(
            "a scheduled verification of the sink to find the 3,000 records equal",
            Duration::from_secs(60),
            || {
                let v = verification(&sink);
                v["status"] == "equal" && v["rows_compared"] == 3000
            },
        );
    }

    // Faults, by hand: in one file the 3rd record removed, the 5th changed, and the 2nd
    // written again at its end.
    let mut files = Vec::new();
    files_under(&root, &mut files);
    files.retain(|f| f.to_string_lossy().contains("part-"));
    files.sort();
    let faults = if format == "parquet" {
        tamper_parquet(&files[0])
    } else {
        tamper_jsonl(&files[0])
    };
    if scheduled {
        // The running sink's next verification finds them; `sluice doctor` reads it from
        // /health (critical, exit code 2).
        // (A run reading the file while it was rewritten may count other differences.)
        crate::support::wait_until(
            "a scheduled verification of the sink to find the 3 differences",
            Duration::from_secs(60),
            || {
                let v = verification(&sink);
                v["status"] == "differences" && v["differences_found"] == 3
            },
        );
        let output = Command::new(sluice_bin())
            .args(["doctor", "--json", "--pipeline"])
            .arg(&sink.file)
            .output()
            .expect("run sluice doctor");
        let findings: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        });
        assert!(
            findings
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f["code"] == "pipeline.verification_failed" && f["severity"] == "critical"),
            "{findings:#}"
        );
        assert_eq!(output.status.code(), Some(2), "{findings:#}");
    }
    assert!(sink.stop(), "graceful stop failed:\n{}", sink.log_text());
    let (code, report) = verify(&sink.file, &[]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(report["status"], "differences", "{report:#}");
    let mut want = vec![
        ("differs".to_owned(), faults.1.clone()),
        ("duplicated".to_owned(), faults.2.clone()),
        ("missing_in_files".to_owned(), faults.0.clone()),
    ];
    want.sort();
    assert_eq!(offset_differences(&report), want, "{report:#}");
    let text = Command::new(sluice_bin())
        .arg("verify")
        .arg(&sink.file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("missing in the files"), "{text}");
    assert!(text.contains("DIFFERENCES"), "{text}");
}

/// `partition/offset` of a JSON line.
fn line_at(line: &str) -> String {
    let v: Value = serde_json::from_str(line).unwrap();
    format!("{}/{}", v["_partition"], v["_offset"])
}

/// Removes the 3rd line of `file`, changes its 5th and appends its 2nd again: the removed,
/// changed and doubled records' `partition/offset`.
fn tamper_jsonl(file: &std::path::Path) -> (String, String, String) {
    let text = std::fs::read_to_string(file).unwrap();
    let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
    let doubled = lines[1].clone();
    let removed = lines.remove(2);
    let changed = line_at(&lines[3]);
    lines[3] = lines[3].replace("\"seq\":", "\"seq\":1000");
    lines.push(doubled.clone());
    std::fs::write(file, lines.join("\n") + "\n").unwrap();
    (line_at(&removed), changed, line_at(&doubled))
}

/// The same faults in a Parquet file, rewritten with arrow.
fn tamper_parquet(file: &std::path::Path) -> (String, String, String) {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Int32Type, Int64Type};
    use arrow_array::{ArrayRef, Int64Array, RecordBatch};
    use parquet::arrow::ArrowWriter;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let batches: Vec<RecordBatch> =
        ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(file).unwrap())
            .unwrap()
            .build()
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let batch = &batches[0];
    let at = |row: usize| {
        let p = batch
            .column_by_name("_partition")
            .unwrap()
            .as_primitive::<Int32Type>();
        let o = batch
            .column_by_name("_offset")
            .unwrap()
            .as_primitive::<Int64Type>();
        format!("{}/{}", p.value(row), o.value(row))
    };
    let (removed, changed, doubled) = (at(2), at(4), at(1));
    // Rows 0-1, then 3- with the 5th row's `seq` changed, then row 1 again.
    let rest = batch.slice(3, batch.num_rows() - 3);
    let seq = rest.schema().index_of("seq").unwrap();
    let mut values: Vec<Option<i64>> = rest
        .column(seq)
        .as_primitive::<Int64Type>()
        .iter()
        .collect();
    values[1] = values[1].map(|v| v + 1000);
    let mut columns: Vec<ArrayRef> = rest.columns().to_vec();
    columns[seq] = std::sync::Arc::new(Int64Array::from(values));
    let rest = RecordBatch::try_new(rest.schema(), columns).unwrap();
    let mut writer =
        ArrowWriter::try_new(std::fs::File::create(file).unwrap(), batch.schema(), None).unwrap();
    writer.write(&batch.slice(0, 2)).unwrap();
    writer.write(&rest).unwrap();
    for b in &batches[1..] {
        writer.write(b).unwrap();
    }
    writer.write(&batch.slice(1, 1)).unwrap();
    writer.close().unwrap();
    (removed, changed, doubled)
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_files_jsonl_finds_removed_changed_and_doubled_records() {
    files_scenario("jsonl").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn verify_files_parquet_finds_removed_changed_and_doubled_records() {
    files_scenario("parquet").await;
}

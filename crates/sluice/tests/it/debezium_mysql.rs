//! sluice's MySQL/MariaDB change events against the golden files of a real Debezium MySQL
//! connector run (issue 16): `scripts/debezium-capture --source mysql` ran Debezium 3.6.1's
//! MySQL connector on `scripts/debezium/mysql/setup.sql` (snapshotted, `op: "r"`) and
//! `changes.sql` (streamed) against MySQL 8.0 and wrote `tests/debezium/mysql/defaults/`.
//!
//! Each test runs sluice on the same two scripts in a database of its own, waits until sluice
//! has confirmed the binlog past an end marker written after the changes (every record before
//! it acknowledged by Kafka), reads every topic back, pairs the records with the golden files
//! per table on (op, key) in topic order and compares key and value field by field with the
//! engine of the PostgreSQL comparison (`debezium::compare`), object members' order included
//! (Debezium's JSON has its schema's order). Only the run-dependent fields of
//! `tests/debezium/mysql/README.md` are not compared by value.
//!
//! MariaDB: Maven Central has no Debezium MariaDB connector at 3.6.x, and Debezium's MySQL
//! connector no longer reads MariaDB, so sluice's MariaDB events are compared with the same
//! MySQL golden files (sluice writes `"connector":"mysql"` events for both servers).
//!
//! A ratchet per server, `tests/debezium/mysql/known-differences-<server>.txt`: the
//! difference groups still accepted. The test fails on a difference not listed and on a
//! listed line that no longer occurs: the lists only shrink.

mod avro_parity;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions};
use rdkafka::client::DefaultClientContext;

use crate::debezium::compare::{Diff, J, Rec, golden_dir, ratchet_report, read_topics, statements};
use crate::mysql::{Server, pipeline};
use crate::support::{Sluice, free_port, read_topic, stack, test_dir, unique};

/// The capture's topic prefix and database (`source.name`, `source.db` in the golden files).
const GOLDEN_PREFIX: &str = "dbzmy";
const GOLDEN_DATABASE: &str = "dbzmy_capture";
/// The golden files' name for the schema-change topic (the bare `<prefix>` topic).
const SCHEMA_CHANGES: &str = "<schema-changes>";

/// Paths whose values depend on the run (or on the server's binlog): not compared by value.
const RUN_DEPENDENT: &[&str] = &[
    "value.ts_ms",
    "value.ts_us",
    "value.ts_ns",
    "value.source.version",
    "value.source.ts_ms",
    "value.source.ts_us",
    "value.source.ts_ns",
    "value.source.file",
    "value.source.pos",
    "value.source.gtid",
    "value.source.thread",
    // The GTID of the change's transaction (`provide_transaction_metadata`).
    "value.transaction.id",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/debezium/mysql")
}

/// `<prefix>.<database>.<table>` → `<table>`; the bare prefix → [`SCHEMA_CHANGES`].
fn table_of(topic: &str) -> String {
    match topic.rsplit_once('.') {
        Some((_, table)) => table.to_owned(),
        None => SCHEMA_CHANGES.to_owned(),
    }
}

/// Replaces this run's `<prefix>.<database>.` with the capture's in the schemas' record names.
fn normalise_schema(schema: &mut J, prefix: &str, database: &str) {
    match schema {
        J::Obj(members) => {
            for (name, value) in members {
                match value {
                    J::Str(text) if name == "name" => {
                        if let Some(rest) = text.strip_prefix(&format!("{prefix}.{database}.")) {
                            *text = format!("{GOLDEN_PREFIX}.{GOLDEN_DATABASE}.{rest}");
                        }
                    }
                    other => normalise_schema(other, prefix, database),
                }
            }
        }
        J::Arr(items) => items
            .iter_mut()
            .for_each(|i| normalise_schema(i, prefix, database)),
        _ => {}
    }
}

/// Replaces this run's prefix and database with the capture's in `source.name`/`source.db`,
/// the schemas' record names, and the database's name in a schema change's `databaseName`
/// (key and value), `ddl` and `tableChanges[].id`.
pub(crate) fn normalise(mut rec: Rec, prefix: &str, database: &str) -> Rec {
    for schema in [rec.key_schema.as_mut(), rec.value_schema.as_mut()]
        .into_iter()
        .flatten()
    {
        normalise_schema(schema, prefix, database);
    }
    let rename = |value: &mut J| {
        if let J::Str(text) = value {
            *text = text.replace(database, GOLDEN_DATABASE);
        }
    };
    if let Some(name) = rec.key.as_mut().and_then(|k| k.get_mut("databaseName")) {
        rename(name);
    }
    if let Some(value) = rec.value.as_mut() {
        for field in ["databaseName", "ddl"] {
            if let Some(text) = value.get_mut(field) {
                rename(text);
            }
        }
        if let Some(J::Arr(changes)) = value.get_mut("tableChanges") {
            for change in changes {
                if let Some(id) = change.get_mut("id") {
                    rename(id);
                }
            }
        }
    }
    if let Some(source) = rec.value.as_mut().and_then(|v| v.get_mut("source")) {
        for (field, ours, theirs) in [
            ("name", prefix, GOLDEN_PREFIX),
            ("db", database, GOLDEN_DATABASE),
        ] {
            if let Some(J::Str(value)) = source.get_mut(field)
                && value == ours
            {
                *value = theirs.to_owned();
            }
        }
    }
    rec
}

fn server_name(server: Server) -> &'static str {
    match server {
        Server::Mariadb => "mariadb",
        Server::Mysql => "mysql",
    }
}

/// Runs sluice on the capture's scripts against `server` (`extra`: lines added to the
/// pipeline file, e.g. a `[kafka.events]` table) and returns its records per table.
async fn run_sluice(server: Server, extra: &str) -> BTreeMap<String, Vec<Rec>> {
    let records = run_sluice_then(server, extra, marker_place_json, |prefix, database| {
        read_topics(prefix, &|topic: &str| !topic.ends_with(".zz_marker"))
            .into_iter()
            .map(|(topic, recs)| {
                // The schema-change topic (`prefix` itself) under its full name.
                let topic = if topic.is_empty() {
                    prefix.to_owned()
                } else {
                    format!("{prefix}.{topic}")
                };
                let recs = recs
                    .into_iter()
                    .map(|r| normalise(r, prefix, database))
                    .collect();
                (topic, recs)
            })
            .collect::<BTreeMap<_, _>>()
    })
    .await;
    records
        .into_iter()
        .map(|(topic, recs)| (table_of(&topic), recs))
        .collect()
}

/// The binlog place (`source.file`, `source.pos`) of the end marker's record, read as JSON (with
/// or without schemas).
fn marker_place_json(topic: &str) -> (String, u64) {
    let marker = read_topic(topic, Duration::from_secs(60), |r| !r.is_empty());
    let value = marker
        .first()
        .and_then(|r| r.value.as_ref())
        .unwrap_or_else(|| panic!("the end marker never arrived"));
    // With schemas: `{"schema":…,"payload":…}`.
    let source = &value.get("payload").unwrap_or(value)["source"];
    (
        source["file"].as_str().unwrap().to_owned(),
        source["pos"].as_u64().unwrap(),
    )
}

/// Runs sluice on the capture's scripts against `server` (`extra`: lines added to the pipeline
/// file); once sluice has confirmed past the end marker (whose place `marker_place` reads from
/// its topic), `read` gets the topic prefix and the database (records normalised by the
/// caller with [`normalise`]); the topics and the database are dropped afterwards.
pub(crate) async fn run_sluice_then<T: Send + 'static>(
    server: Server,
    extra: &str,
    marker_place: fn(&str) -> (String, u64),
    read: impl FnOnce(&str, &str) -> T + Send + 'static,
) -> T {
    let script = |name: &str| statements(&root().join("scripts/debezium/mysql").join(name));
    let database = unique("dbzmy");
    let prefix = unique("dbzmy");
    let mut conn = server.root().await;
    // In utf8mb4, the capture's database's character set (MySQL 8's default; MariaDB's is the
    // server's, latin1 on the dev stack): tables created without one (`zz_marker`) get it.
    conn.query_drop(format!("CREATE DATABASE {database} CHARACTER SET utf8mb4"))
        .await
        .unwrap();
    conn.query_drop(format!("USE {database}")).await.unwrap();
    for statement in script("setup.sql") {
        conn.query_drop(&statement)
            .await
            .unwrap_or_else(|e| panic!("setup.sql: {statement}: {e}"));
    }
    let dir = test_dir(&database);
    let admin_port = free_port();
    let sluice = Sluice::start(
        &dir,
        &format!(
            "{}{extra}",
            pipeline(server, &database, &database, &prefix, admin_port)
        ),
        admin_port,
    )
    .streaming(Duration::from_secs(60))
    .await;
    for statement in script("changes.sql") {
        conn.query_drop(&statement)
            .await
            .unwrap_or_else(|e| panic!("changes.sql: {statement}: {e}"));
    }
    // The end marker: once sluice's confirmed position (every record up to it acknowledged)
    // is past the marker's row, every change before it is in Kafka.
    conn.query_drop("INSERT INTO zz_marker VALUES (1, 'end')")
        .await
        .unwrap();
    let marker_topic = format!("{prefix}.{database}.zz_marker");
    let place = tokio::task::spawn_blocking({
        let topic = marker_topic.clone();
        move || marker_place(&topic)
    })
    .await
    .unwrap_or_else(|_| panic!("the end marker never arrived; log:\n{}", sluice.log_text()));
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    loop {
        let confirmed = sluice
            .get("/health")
            .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
            .map(|health| {
                let binlog = &health["binlog"];
                (
                    binlog["confirmed_file"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    binlog["confirmed_pos"].as_u64().unwrap_or(0),
                )
            });
        if confirmed.is_some_and(|c| c > place) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "sluice did not confirm past the end marker {place:?}; log:\n{}",
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let records = tokio::task::spawn_blocking({
        let (prefix, database) = (prefix.clone(), database.clone());
        move || read(&prefix, &database)
    })
    .await
    .unwrap();
    drop(sluice);
    conn.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
    let mut topics: Vec<String> = super::debezium::avro_parity::topics_with_prefix(&prefix);
    topics.push(marker_topic);
    let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .expect("admin client");
    let _ = admin.delete_topics(&topics, &AdminOptions::new()).await;
    records
}

/// sluice's events on `server` against the golden files of `combination` (`defaults`,
/// `schemas-enable`; `extra`: the pipeline lines that give it), with the ratchet of the server
/// and combination.
async fn events_match_debezium(server: Server, combination: &str, extra: &str) {
    let _server = server.shared().await;
    let started = Instant::now();
    let ours = run_sluice(server, extra).await;
    let golden = golden_dir(&golden_root().join(combination), &table_of);
    let mut diff = Diff::new(RUN_DEPENDENT).with_member_order();
    let name = server_name(server);
    for (table, expected) in &golden {
        let group = format!("{name} {table}");
        match ours.get(table) {
            Some(actual) => diff.compare_topic(&group, expected, actual),
            None => diff.add(
                &group,
                "",
                "topic-only-in-debezium",
                format!("{} records", expected.len()),
            ),
        }
    }
    for (table, actual) in &ours {
        if !golden.contains_key(table) {
            diff.add(
                &format!("{name} {table}"),
                "",
                "topic-only-in-sluice",
                format!("{} records", actual.len()),
            );
        }
    }
    let file = if combination == "defaults" {
        format!("known-differences-{name}.txt")
    } else {
        format!("known-differences-{name}-{combination}.txt")
    };
    let report = ratchet_report(
        &diff,
        &golden_root().join(&file),
        &format!("tests/debezium/mysql/{file}"),
    );
    println!(
        "{name}: compared {} records and {} fields with Debezium's in {:?}: \
         {} field differences in {} groups, all of them known: {}",
        diff.records,
        diff.fields,
        started.elapsed(),
        diff.groups.values().map(|g| g.0).sum::<usize>(),
        diff.groups.len(),
        report.is_empty()
    );
    assert!(report.is_empty(), "{report}");
    // 85 row records and the 25 schema changes (fewer when a transform filters them).
    let golden_records: usize = golden.values().map(Vec::len).sum();
    assert!(
        diff.records >= golden_records && diff.records >= 95,
        "too few records paired: {} of the golden files' {golden_records}",
        diff.records
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_events_match_debezium_golden_files() {
    events_match_debezium(Server::Mysql, "defaults", "").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_events_match_debezium_golden_files() {
    events_match_debezium(Server::Mariadb, "defaults", "").await;
}

/// Debezium's SchemaChangeEventFilter on the schema change topic (DROP and DATABASE changes
/// left out), against Kafka Connect running the same transform (the capture's
/// `schema-change-filter`).
#[tokio::test(flavor = "multi_thread")]
async fn mysql_schema_change_filter_matches_kafka_connect() {
    events_match_debezium(
        Server::Mysql,
        "schema-change-filter",
        "\n[transforms]\nchain = \"ddl\"\n[transforms.ddl]\n\
         type = \"io.debezium.transforms.SchemaChangeEventFilter\"\n\
         \"schema.change.event.exclude.list\" = \"DROP,DATABASE\"\n",
    )
    .await;
}

/// JSON with schemas (`JsonConverter`, `schemas.enable=true`): the schemas of every key and
/// value compared exactly with Debezium's, member order included.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_schemas_match_debezium_golden_files() {
    events_match_debezium(
        Server::Mysql,
        "schemas-enable",
        "\n[kafka.events]\nformat = \"json_with_schemas\"\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_schemas_match_debezium_golden_files() {
    events_match_debezium(
        Server::Mariadb,
        "schemas-enable",
        "\n[kafka.events]\nformat = \"json_with_schemas\"\n",
    )
    .await;
}

//! sluice's MySQL Avro change events and registered schemas against a real Debezium MySQL
//! connector's (`tests/debezium/mysql/avro/<combination>/`, Apicurio's `AvroConverter`,
//! issue 41).
//!
//! Runs sluice with `format = "avro"` and the registry of `SCHEMA_REGISTRY_URL` on the MySQL
//! capture's scripts (`scripts/debezium/mysql/setup.sql` + `changes.sql`) against MySQL 8.0,
//! dumps its topics with `scripts/avro-dump` (the decoder that wrote the golden files) and
//! compares, as the PostgreSQL test does (`debezium::avro_parity`): the records field by field
//! (each key and value with the version of its subject its schema id is), and every subject's
//! schema versions (the text as parsed JSON, the Parsing Canonical Form exactly), the
//! schema-change topic's included.
//!
//! `transaction-metadata` compares the transaction topic (`<prefix>.transaction`, its
//! GTID ids masked as run-dependent, the end marker's transactions left out on both sides) and
//! every change event's `transaction` block (`total_order`, `data_collection_order`).
//!
//! A ratchet: `KNOWN` lists the difference groups still accepted, each with its reason; the
//! test fails on a group not listed and on a listed one that no longer occurs.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use super::{GOLDEN_DATABASE, GOLDEN_PREFIX, RUN_DEPENDENT, SCHEMA_CHANGES, golden_root};
use crate::debezium::avro_parity::{
    Dump, compare_dumps, load_dump_with, registry_url, topics_with_prefix,
};
use crate::debezium::compare::{Diff, J, Parser, Rec, ratchet_report_known};
use crate::mysql::Server;
use crate::support::{read_topic, stack, test_dir, unique};

/// The combinations the MySQL source writes, and the `[kafka.events]` options that give each.
const COMBINATIONS: &[(&str, &str)] = &[
    ("defaults", ""),
    ("decimal-string", "decimal_handling_mode = \"string\""),
    ("decimal-double", "decimal_handling_mode = \"double\""),
    ("binary-hex", "binary_handling_mode = \"hex\""),
    (
        "transaction-metadata",
        "provide_transaction_metadata = true",
    ),
];

/// The combinations `scripts/test` runs (the others with `SLUICE_AVRO_PARITY_ALL=1`).
const IN_SUITE: &[&str] = &["defaults", "binary-hex", "transaction-metadata"];

/// The accepted difference groups (`<combination> <table> <path> <kind>`), each with why.
const KNOWN: &[(&str, &str)] = &[];

/// The end markers' table.
const MARKER: &str = "zz_marker";

/// Runs `scripts/avro-dump` on `topics` into `dir`.
fn avro_dump(dir: &Path, topics: &[String]) {
    let output = std::process::Command::new(super::root().join("scripts/avro-dump"))
        .arg("--out")
        .arg(dir)
        .arg("--brokers")
        .arg(stack().brokers)
        .arg("--registry")
        .arg(registry_url())
        .args(topics)
        .output()
        .expect("scripts/avro-dump runs");
    assert!(
        output.status.success(),
        "avro-dump failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The end marker's binlog place, from its Avro record.
fn marker_place_avro(topic: &str) -> (String, u64) {
    read_topic(topic, Duration::from_secs(60), |r| !r.is_empty());
    let dir = test_dir(&unique("my-avro-marker"));
    avro_dump(&dir, &[topic.to_owned()]);
    let text = std::fs::read_to_string(dir.join(format!("{topic}.jsonl"))).expect("marker dump");
    let line = text.lines().next().expect("the marker's record");
    let record = Parser::parse(line);
    let source = record
        .get("value")
        .and_then(|v| v.get("source"))
        .expect("the marker's source");
    let file = match source.get("file") {
        Some(J::Str(file)) => file.clone(),
        other => panic!("marker file: {other:?}"),
    };
    let pos = match source.get("pos") {
        Some(J::Num { text, .. }) => text.parse().expect("marker pos"),
        other => panic!("marker pos: {other:?}"),
    };
    (file, pos)
}

/// A dump's names mapped to the capture's: topics `<prefix>.<database>.<table>` to `<table>`
/// (the bare `<prefix>` to the schema-change topic), record names and `source` blocks by
/// `normalise` (`run`: this run's prefix and database; `None` for the golden files).
fn load(dir: &Path, prefix: &str, database: &str, run: bool) -> Dump {
    let stem = format!("{prefix}.{database}.");
    let rename = |text: &str| text.replace(&stem, &format!("{GOLDEN_PREFIX}.{GOLDEN_DATABASE}."));
    let transactions = format!("{prefix}.{TRANSACTIONS}");
    let record_table = |topic: &str| {
        if topic == prefix {
            Some(SCHEMA_CHANGES.to_owned())
        } else if topic == transactions {
            Some(TRANSACTIONS.to_owned())
        } else {
            topic.strip_prefix(&stem).map(str::to_owned)
        }
    };
    let subject_table = |topic: &str| record_table(topic).filter(|t| t != MARKER);
    let normalise = |rec: Rec| {
        if run {
            super::normalise(rec, prefix, database)
        } else {
            rec
        }
    };
    let mut dump = load_dump_with(dir, &rename, &subject_table, &record_table, &normalise);
    without_marker_transactions(&mut dump, database);
    dump
}

/// The transaction topic's table name in a dump.
const TRANSACTIONS: &str = "transaction";

/// Leaves out the transaction topic's BEGIN/END of the end markers' transactions (each run
/// writes its own) and names the data collections by the capture's database.
fn without_marker_transactions(dump: &mut Dump, database: &str) {
    let Some(recs) = dump.records.get_mut(TRANSACTIONS) else {
        return;
    };
    let id = |rec: &Rec| match rec.value.as_ref().and_then(|v| v.get("id")) {
        Some(J::Str(id)) => id.clone(),
        _ => String::new(),
    };
    let marker = format!("\"{database}.{MARKER}\"");
    let markers: BTreeSet<String> = recs
        .iter()
        .filter(|rec| {
            rec.value
                .as_ref()
                .is_some_and(|v| v.show().contains(&marker))
        })
        .map(id)
        .collect();
    recs.retain(|rec| !markers.contains(&id(rec)));
    for rec in recs.iter_mut() {
        if let Some(J::Arr(collections)) = rec
            .value
            .as_mut()
            .and_then(|v| v.get_mut("data_collections"))
        {
            for collection in collections {
                if let Some(J::Str(name)) = collection.get_mut("data_collection") {
                    *name = name.replace(database, GOLDEN_DATABASE);
                }
            }
        }
    }
}

/// Runs sluice in Avro with a combination's options and dumps its topics.
async fn run_avro(options: &str) -> Dump {
    let extra = format!(
        "\n[kafka.events]\nformat = \"avro\"\n{options}\n\n[schema_registry]\nurl = \"{}\"\n",
        registry_url()
    );
    super::run_sluice_then(
        Server::Mysql,
        &extra,
        marker_place_avro,
        |prefix, database| {
            let dir = test_dir(&format!("{prefix}-avro"));
            avro_dump(&dir, &topics_with_prefix(prefix));
            load(&dir, prefix, database, true)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_avro_matches_debezium_golden_files() {
    let _server = Server::Mysql.shared().await;
    let started = Instant::now();
    // SLUICE_AVRO_PARITY=name,name runs only those.
    let all = std::env::var_os("SLUICE_AVRO_PARITY_ALL").is_some();
    let only = std::env::var("SLUICE_AVRO_PARITY").ok();
    let combinations: Vec<&(&str, &str)> = COMBINATIONS
        .iter()
        .filter(|(name, _)| match &only {
            Some(only) => only.split(',').any(|o| o.trim() == *name),
            None => all || IN_SUITE.contains(name),
        })
        .collect();
    let runs =
        futures::future::join_all(combinations.iter().map(|(_, options)| run_avro(options))).await;
    let mut diff = Diff::new(RUN_DEPENDENT);
    let mut summary = Vec::new();
    for ((combination, _), ours) in combinations.iter().copied().zip(&runs) {
        let golden = load(
            &golden_root().join("avro").join(combination),
            GOLDEN_PREFIX,
            GOLDEN_DATABASE,
            false,
        );
        let (records, groups) = (diff.records, diff.groups.len());
        let schemas = compare_dumps(combination, &golden, ours, MARKER, &mut diff);
        summary.push(format!(
            "{combination}: {} records, {schemas} schemas, {} new groups",
            diff.records - records,
            diff.groups.len() - groups
        ));
        // 10 tables' key and value subjects (keyless: value only, evolve: two versions) and
        // the schema-change topic's.
        assert!(schemas >= 21, "{combination}: {schemas} schemas compared");
    }
    let known: BTreeSet<String> = KNOWN
        .iter()
        .filter(|(line, _)| {
            combinations
                .iter()
                .any(|(name, _)| line.split_whitespace().next() == Some(*name))
        })
        .map(|(line, _)| line.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    let report = ratchet_report_known(&diff, &known, "debezium_mysql::avro_parity::KNOWN");
    println!(
        "compared with Debezium MySQL's Avro in {:?}: {}; {} groups",
        started.elapsed(),
        summary.join("; "),
        diff.groups.len()
    );
    assert!(report.is_empty(), "{report}");
    // 85 row records, their tombstones and the schema changes, per combination.
    assert!(
        diff.records >= 110 * combinations.len(),
        "too few records paired: {}",
        diff.records
    );
}

//! sluice's change events against the golden files of a real Debezium run (issue 15).
//!
//! Runs sluice on `scripts/debezium/setup.sql` (snapshotted rows, `op: "r"`) and
//! `scripts/debezium/changes.sql` (streamed) in a database of its own, reads every topic back,
//! pairs the records with `tests/debezium/defaults/` per topic on (op, key) in topic order, and
//! compares key and value field by field, ignoring only the run-dependent fields the golden
//! files' README lists. Numbers are compared by their decimal value (`1.5E-5` = `0.000015`,
//! `1.4E-45` ≠ `1e-45`), object members in any order.
//!
//! The combinations, one sluice run each, side by side: `defaults`, and under `[kafka.events]`
//! `decimal-string` (`decimal_handling_mode = "string"`), `time-connect`
//! (`time_precision_mode = "connect"`), `binary-hex` (`binary_handling_mode = "hex"`),
//! `truncate` (`skipped_operations = "none"`), `transaction-metadata`
//! (`provide_transaction_metadata = true`) and `schemas-enable` (`schemas_enable = true`,
//! JsonConverter's `{"schema":…,"payload":…}`). In `schemas-enable` the
//! payloads are compared as above (paths `key.…`/`value.…`) and the schemas as data, exactly:
//! member and field order included (Connect's schemas are ordered), a schema's fields named by
//! their `field` (paths `value.schema.after.<column>.<member>`).
//!
//! A ratchet while parity is incomplete: `tests/debezium/known-differences.txt` lists the
//! difference groups (`<combination> <table> <field path> <kind>`) still accepted. The test fails on a
//! difference not listed, and on a listed line that no longer occurs: the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

pub(crate) mod avro_parity;
pub(crate) mod compare;
mod type_table;

use compare::{Diff, J, Rec, canonical_number, golden_dir, read_topics, statements};

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pg_at, pipeline_toml, slot_confirmed, stack,
    test_dir, unique,
};

/// The capture's topic prefix and database (`source.name`, `source.db` in the golden files).
const GOLDEN_PREFIX: &str = "dbzcap";
const GOLDEN_DATABASE: &str = "dbz_capture";

/// Paths (from the record: `key`/`value`, then field names) whose values depend on the run:
/// their values are not compared, but a field on one side only is a difference.
const RUN_DEPENDENT: &[&str] = &[
    "value.ts_ms",
    "value.ts_us",
    "value.ts_ns",
    "value.source.version",
    "value.source.ts_ms",
    "value.source.ts_us",
    "value.source.ts_ns",
    "value.source.txId",
    "value.source.lsn",
    "value.source.sequence",
    "value.source.xmin",
    "value.transaction.id",
];

/// The transaction topic's records (`provide_transaction_metadata`), as `<schema.table>`.
const TRANSACTION_TABLE: &str = "transaction";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/debezium")
}

/// The golden records of a combination, per `schema.table`.
fn golden(combination: &str) -> BTreeMap<String, Vec<Rec>> {
    golden_dir(&golden_root().join(combination), &|topic| {
        topic.split_once('.').unwrap().1.to_owned()
    })
}

/// The accepted difference groups of the ratchet file.
fn known_differences() -> BTreeSet<String> {
    compare::known_differences(&golden_root().join("known-differences.txt"))
}

/// Replaces this run's prefix with the capture's in a schema's record names
/// (`<prefix>.public.t.Value`).
fn normalise_schema(schema: &mut J, prefix: &str) {
    match schema {
        J::Obj(members) => {
            for (name, value) in members {
                match value {
                    J::Str(text) if name == "name" => {
                        if let Some(rest) = text.strip_prefix(&format!("{prefix}.")) {
                            *text = format!("{GOLDEN_PREFIX}.{rest}");
                        }
                    }
                    other => normalise_schema(other, prefix),
                }
            }
        }
        J::Arr(items) => items.iter_mut().for_each(|i| normalise_schema(i, prefix)),
        _ => {}
    }
}

/// Replaces this run's prefix and database with the capture's in `source.name`/`source.db`
/// (and the schemas' record names).
pub(crate) fn normalise(mut rec: Rec, prefix: &str, database: &str) -> Rec {
    for schema in [rec.key_schema.as_mut(), rec.value_schema.as_mut()]
        .into_iter()
        .flatten()
    {
        normalise_schema(schema, prefix);
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

/// Runs sluice on the change script once (`extra` keys added to `[source.postgres]`'s
/// neighbourhood) and returns its records per table.
async fn run_sluice(extra: &str) -> BTreeMap<String, Vec<Rec>> {
    run_sluice_on(
        extra,
        statements(&root().join("scripts/debezium/setup.sql")),
        statements(&root().join("scripts/debezium/changes.sql")),
    )
    .await
}

/// Runs sluice in a database of its own: `setup` before it starts (snapshotted), `changes`
/// once it streams; returns its records per table.
async fn run_sluice_on(
    extra: &str,
    setup: Vec<String>,
    changes: Vec<String>,
) -> BTreeMap<String, Vec<Rec>> {
    run_sluice_then(extra, setup, changes, |prefix| {
        let wanted = |topic: &str| {
            topic.starts_with(&format!("{prefix}.public."))
                || topic == format!("{prefix}.{TRANSACTION_TABLE}")
        };
        read_topics(prefix, &wanted)
            .into_iter()
            .map(|(table, recs)| {
                let recs = recs
                    .into_iter()
                    .map(|r| normalise(r, prefix, prefix))
                    .collect();
                (table, recs)
            })
            .collect()
    })
    .await
}

/// Runs sluice as `run_sluice_on` does and, once it confirmed the changes, `read` with its
/// topic prefix (also its database's name), before the database is dropped.
pub(crate) async fn run_sluice_then<T: Send + 'static>(
    extra: &str,
    setup: Vec<String>,
    changes: Vec<String>,
    read: impl FnOnce(&str) -> T + Send + 'static,
) -> T {
    run_sluice_with_then("", extra, setup, changes, read).await
}

/// [`run_sluice_then`] with `source` keys added to `[source.postgres]` (`@name@` in them:
/// the run's name, which is also its topic prefix and database).
pub(crate) async fn run_sluice_with_then<T: Send + 'static>(
    source: &str,
    extra: &str,
    setup: Vec<String>,
    changes: Vec<String>,
    read: impl FnOnce(&str) -> T + Send + 'static,
) -> T {
    let name = unique("dbz");
    let admin = pg().await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let base = stack().pg_url;
    let url = format!(
        "{}/{name}",
        base.rsplit_once('/').expect("a database in PG_URL").0
    );
    let client = pg_at(&url).await;
    for statement in setup {
        client
            .batch_execute(&statement)
            .await
            .unwrap_or_else(|e| panic!("setup.sql: {statement}: {e}"));
    }
    let port = free_port();
    let dir = test_dir(&name);
    let source = source.replace("@name@", &name);
    let toml = pipeline_toml(&name, "public", &name, port, extra).replace(
        &format!("url = \"{base}\""),
        &format!("url = \"{url}\"\n{source}"),
    );
    // Creating the slot waits for every transaction running in the cluster to end: with the
    // rest of the suite's writers around (and several of these runs at once), that can take
    // a minute. Past 10 s sluice's log names what a slot's creation waits for (a test's
    // sessions carry its name as application_name); the panic shows the log. The wait is off
    // this task's thread: the runs beside this one (`join!`) go on with their changes.
    let sluice = Sluice::start(&dir, &toml, port)
        .streaming(Duration::from_secs(300))
        .await;
    for statement in changes {
        client
            .batch_execute(&statement)
            .await
            .unwrap_or_else(|e| panic!("changes.sql: {statement}: {e}"));
    }
    let end: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])
        .await
        .unwrap()
        .get(0);
    let slot = format!("sluice_{name}");
    // A bound, not a wait: under a loaded machine (a CI run took 2.7 times its usual time)
    // several of these runs share two cores.
    let deadline = Instant::now() + Duration::from_secs(180);
    while slot_confirmed(&client, &slot).await.unwrap_or(0) < end as u64 {
        assert!(
            Instant::now() < deadline,
            "sluice did not confirm the changes; log:\n{}",
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let prefix = name.clone();
    let records = tokio::task::spawn_blocking(move || read(&prefix))
        .await
        .unwrap();
    drop(sluice);
    drop(client);
    drop_slot_and_publication(&admin, &name).await;
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    records
}

/// A transaction topic's records with their ids (`<txId>:<lsn>`, run-dependent) masked and
/// those of the end-marker transactions (which only the capture writes) left out.
fn mask_transactions(records: &mut BTreeMap<String, Vec<Rec>>) {
    let Some(recs) = records.get_mut(TRANSACTION_TABLE) else {
        return;
    };
    // `<txId>:` of a record's id.
    let xid = |rec: &Rec| match rec.value.as_ref().and_then(|v| v.get("id")) {
        Some(J::Str(id)) => id.split(':').next().unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    let markers: BTreeSet<String> = recs
        .iter()
        .filter(|rec| {
            rec.value
                .as_ref()
                .is_some_and(|v| v.show().contains("\"public.zz_marker\""))
        })
        .map(xid)
        .collect();
    recs.retain(|rec| !markers.contains(&xid(rec)));
    let masked = || J::Str("<txId>:<lsn>".into());
    for rec in recs.iter_mut() {
        for part in [rec.key.as_mut(), rec.value.as_mut()].into_iter().flatten() {
            if let Some(id) = part.get_mut("id") {
                *id = masked();
            }
        }
    }
}

/// Compares sluice's records with a combination's golden files; groups are named
/// `<combination> <table> …`.
fn compare(combination: &str, ours: &BTreeMap<String, Vec<Rec>>, diff: &mut Diff) {
    let mut golden = golden(combination);
    mask_transactions(&mut golden);
    let mut ours = ours.clone();
    mask_transactions(&mut ours);
    let ours = &ours;
    for (table, expected) in &golden {
        let actual = ours.get(table).map(Vec::as_slice).unwrap_or_default();
        diff.compare_topic(&format!("{combination} {table}"), expected, actual);
    }
    for (table, actual) in ours {
        if !golden.contains_key(table) && table != "public.zz_marker" {
            diff.add(
                &format!("{combination} {table}"),
                "",
                "topic-only-in-sluice",
                format!("{} records", actual.len()),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn events_match_debezium_golden_files() {
    let started = Instant::now();
    // One sluice run per combination captured with an option sluice has, side by side.
    let (
        defaults,
        decimal_string,
        time_connect,
        binary_hex,
        truncate,
        transactions,
        schemas_enable,
    ) = tokio::join!(
        run_sluice(""),
        run_sluice("\n[kafka.events]\ndecimal_handling_mode = \"string\"\n"),
        run_sluice("\n[kafka.events]\ntime_precision_mode = \"connect\"\n"),
        run_sluice("\n[kafka.events]\nbinary_handling_mode = \"hex\"\n"),
        run_sluice("\n[kafka.events]\nskipped_operations = \"none\"\n"),
        run_sluice("\n[kafka.events]\nprovide_transaction_metadata = true\n"),
        run_sluice("\n[kafka.events]\nschemas_enable = true\n"),
    );
    let mut diff = Diff::new(RUN_DEPENDENT);
    compare("defaults", &defaults, &mut diff);
    compare("decimal-string", &decimal_string, &mut diff);
    compare("time-connect", &time_connect, &mut diff);
    compare("binary-hex", &binary_hex, &mut diff);
    compare("truncate", &truncate, &mut diff);
    compare("transaction-metadata", &transactions, &mut diff);
    compare("schemas-enable", &schemas_enable, &mut diff);

    // The partitioned tables' lines are partitioned_tables_match_debezium_golden_files'.
    let known: BTreeSet<String> = known_differences()
        .into_iter()
        .filter(|l| !l.starts_with("partitions-"))
        .collect();
    let report =
        compare::ratchet_report_known(&diff, &known, "tests/debezium/known-differences.txt");
    println!(
        "compared {} records and {} fields with Debezium's (defaults, decimal-string, time-connect, binary-hex, truncate, \
         transaction-metadata, schemas-enable) in {:?}: \
         {} field differences in {} groups, all of them known: {}",
        diff.records,
        diff.fields,
        started.elapsed(),
        diff.groups.values().map(|g| g.0).sum::<usize>(),
        diff.groups.len(),
        report.is_empty()
    );
    assert!(report.is_empty(), "{report}");
    assert!(
        diff.records >= 2700,
        "too few records paired: {}",
        diff.records
    );
}

/// Partitioned tables (scripts/debezium/partitions.sql: two levels, default partitions; its
/// changes move a row between partitions) against Debezium's captures of the same:
/// `partitions = "root"` against Debezium publishing via the partition root (the root's
/// topic), `partitions = "leaves"` against its default publication (a topic per partition).
/// The other tables are compared too, as in the defaults.
#[tokio::test(flavor = "multi_thread")]
async fn partitioned_tables_match_debezium_golden_files() {
    let started = Instant::now();
    let sql = |names: [&str; 2]| -> Vec<String> {
        names
            .iter()
            .flat_map(|n| statements(&root().join("scripts/debezium").join(n)))
            .collect()
    };
    let mut diff = Diff::new(RUN_DEPENDENT);
    for (combination, mode) in [("partitions-root", "root"), ("partitions-leaves", "leaves")] {
        let ours = run_sluice_with_then(
            &format!("partitions = \"{mode}\"\n"),
            "",
            sql(["setup.sql", "partitions.sql"]),
            sql(["changes.sql", "partitions-changes.sql"]),
            |prefix| {
                let wanted = |topic: &str| topic.starts_with(&format!("{prefix}.public."));
                read_topics(prefix, &wanted)
                    .into_iter()
                    .map(|(table, recs)| {
                        let recs = recs
                            .into_iter()
                            .map(|r| normalise(r, prefix, prefix))
                            .collect();
                        (table, recs)
                    })
                    .collect::<BTreeMap<_, _>>()
            },
        )
        .await;
        compare(combination, &ours, &mut diff);
    }
    // Only the lines of these combinations.
    let known: BTreeSet<String> = known_differences()
        .into_iter()
        .filter(|l| l.starts_with("partitions-"))
        .collect();
    let report =
        compare::ratchet_report_known(&diff, &known, "tests/debezium/known-differences.txt");
    println!(
        "compared {} records and {} fields with Debezium's (partitions-root, partitions-leaves) in {:?}: \
         {} field differences in {} groups, all of them known: {}",
        diff.records,
        diff.fields,
        started.elapsed(),
        diff.groups.values().map(|g| g.0).sum::<usize>(),
        diff.groups.len(),
        report.is_empty()
    );
    assert!(report.is_empty(), "{report}");
    let partitioned: usize = ["partitions-root", "partitions-leaves"]
        .iter()
        .map(|c| {
            golden(c)
                .iter()
                .filter(|(t, _)| t.starts_with("public.measurements"))
                .map(|(_, r)| r.len())
                .sum::<usize>()
        })
        .sum();
    assert!(
        partitioned >= 20 && diff.records >= 800,
        "too few records: {} paired, {partitioned} of partitioned tables in the golden files",
        diff.records
    );
}

/// `column_propagate_source_type` (Debezium's `column.propagate.source.type`): the matching
/// columns' schemas, snapshotted and streamed, carry the source type's name, length and scale;
/// the others do not.
#[tokio::test(flavor = "multi_thread")]
async fn column_propagate_source_type_names_the_source_types() {
    let setup = [
        "CREATE DOMAIN price AS numeric(8,2);",
        "CREATE TABLE items (id integer PRIMARY KEY, code varchar(12) NOT NULL, amount price, \
         note text, at timestamp(3));",
        "INSERT INTO items VALUES (1, 'a', 1.5, 'x', '2020-01-01');",
    ];
    let extra = "\n[kafka.events]\nschemas_enable = true\n\
                 column_propagate_source_type = \"public\\\\.items\\\\.(code|amount),.*\\\\.AT\"\n";
    let records = run_sluice_on(
        extra,
        setup.iter().map(|s| s.to_string()).collect(),
        vec!["INSERT INTO items VALUES (2, 'b', 2.5, 'y', '2020-01-02');".into()],
    )
    .await;
    let items = &records["public.items"];
    let ops: Vec<String> = items.iter().map(Rec::op).collect();
    assert_eq!(ops, ["r", "c"]);
    for record in items {
        let schema = record.value_schema.as_ref().expect("a value schema");
        let J::Arr(fields) = schema.get("fields").unwrap() else {
            panic!("fields")
        };
        let after = fields[1].get("fields").unwrap();
        let J::Arr(columns) = after else {
            panic!("columns")
        };
        let parameters: Vec<String> = columns
            .iter()
            .map(|c| c.get("parameters").map_or("-".into(), J::show))
            .collect();
        assert_eq!(
            parameters,
            [
                "-",
                r#"{"__debezium.source.column.type":"VARCHAR","__debezium.source.column.length":"12","__debezium.source.column.scale":"0"}"#,
                r#"{"scale":"2","connect.decimal.precision":"8","__debezium.source.column.type":"PRICE","__debezium.source.column.length":"8","__debezium.source.column.scale":"2"}"#,
                "-",
                r#"{"__debezium.source.column.type":"TIMESTAMP","__debezium.source.column.length":"26","__debezium.source.column.scale":"3"}"#,
            ],
            "{}",
            schema.show()
        );
    }
}

#[test]
fn numbers_compare_by_decimal_value() {
    assert_eq!(canonical_number("1.5E-5"), canonical_number("0.000015"));
    assert_eq!(canonical_number("-0"), canonical_number("0.000"));
    assert_eq!(canonical_number("100"), canonical_number("1e2"));
    assert_ne!(canonical_number("1.4E-45"), canonical_number("1e-45"));
    assert_ne!(canonical_number("-1"), canonical_number("1"));
}

/// What a user sees for a Debezium option value sluice does not know: `sluice check` names the
/// key and lists the supported values.
#[test]
fn unknown_option_values_are_refused_with_the_supported_ones() {
    let name = unique("dbzopt");
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    for (line, expected) in [
        (
            "time_precision_mode = \"nanoseconds\"",
            "kafka.events.time_precision_mode: unknown variant `nanoseconds`, expected one of \
             `adaptive`, `adaptive_time_microseconds`, `connect`",
        ),
        (
            "skipped_operations = \"c,x\"",
            "kafka.events.skipped_operations: unknown operation \"x\" in \"c,x\": expected a \
             comma-separated list of `c`, `u`, `d`, `t`, or `none`",
        ),
    ] {
        let toml = pipeline_toml(&name, "public", &name, free_port(), "")
            + &format!("\n[kafka.events]\n{line}\n");
        std::fs::write(&file, toml).unwrap();
        let (code, output) =
            crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(20));
        assert_eq!(code, Some(1), "{output}");
        assert!(output.contains(expected), "{output}");
    }
}

/// `skipped_operations` and `tombstones_on_delete` by Debezium's names: with `"c,d"` and
/// `false`, the change script gives exactly Debezium's default run's snapshot reads, updates,
/// the delete + create pairs of key-changing updates (an update, so not skipped, as Debezium
/// skips by the change's operation), the TRUNCATE (`t` is not in the list), and no insert,
/// delete or tombstone.
#[tokio::test(flavor = "multi_thread")]
async fn skipped_operations_and_tombstones_by_debeziums_names() {
    let ours = run_sluice(
        "\n[kafka.events]\nskipped_operations = \"c,d\"\ntombstones_on_delete = false\n",
    )
    .await;
    let lsn = |rec: &Rec| {
        rec.value
            .as_ref()
            .and_then(|v| v.get("source"))
            .and_then(|s| s.get("lsn"))
            .map(J::canonical)
    };
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for recs in golden("defaults").values() {
        let lsns = |op: &str| -> BTreeSet<String> {
            recs.iter()
                .filter(|r| r.op() == op)
                .filter_map(lsn)
                .collect()
        };
        let key_changes: BTreeSet<String> = lsns("c").intersection(&lsns("d")).cloned().collect();
        for rec in recs {
            let kept = match rec.op().as_str() {
                "r" | "u" => true,
                "c" | "d" => lsn(rec).is_some_and(|l| key_changes.contains(&l)),
                _ => false,
            };
            if kept {
                *expected.entry(rec.op()).or_default() += 1;
            }
        }
    }
    *expected.entry("t".into()).or_default() += 1;
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for (table, recs) in &ours {
        if table != "public.zz_marker" {
            for rec in recs {
                *found.entry(rec.op()).or_default() += 1;
            }
        }
    }
    assert!(expected["c"] > 0 && expected["u"] > 0, "{expected:?}");
    assert_eq!(found, expected);
}

//! A real Debezium's events through the PostgreSQL sink (issue 51): every golden capture of
//! `tests/debezium/` (the seven PostgreSQL combinations) produced to topics as the capture
//! holds them, byte for byte, applied by one sink to empty copies of the capture's tables,
//! and each table compared with the source after the capture's SQL, every column and row.
//!
//! The source is made again here: `scripts/debezium/setup.sql` then `changes.sql` in a
//! database of this test's own (the scripts are deterministic, so its tables hold what the
//! capture's source held when the capture ended). Each combination's target tables are
//! `CREATE TABLE … (LIKE public.<table> INCLUDING ALL)` in a schema of their own
//! (`c_<combination>`), so they have the source's final columns, defaults and keys, and no
//! row. Columns are compared by their text (`::text`), so a value must be the same to the
//! digit, the zone and the array bound to count as equal.
//!
//! Every difference found must be one of [`KNOWN`] (with the reason: something the events do
//! not carry), and every entry of [`KNOWN`] must still occur, so the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde::Deserialize;
use serde_json::value::RawValue;
use tokio_postgres::Client;

use crate::debezium::compare::statements;
use crate::sink::create_topic;
use crate::sink_pg::{drop_database, sink_toml, target_database, wait_zero};
use crate::support::{Sluice, broker_shared, free_port, test_dir, unique};

/// The PostgreSQL combinations of `tests/debezium/`.
const COMBINATIONS: [&str; 7] = [
    "defaults",
    "decimal-string",
    "schemas-enable",
    "time-connect",
    "binary-hex",
    "truncate",
    "transaction-metadata",
];

/// Tables the sink cannot apply: their records have no key (no primary key in the source).
const KEYLESS: [&str; 2] = ["keyless", "keyless_nothing"];

/// Tables whose rows the capture's SQL deletes after updating them: each is compared a second
/// time, as `<table>_mid`, with the source before the first of these statements (from the
/// records before the deletes), so that what the updates left is seen.
const BEFORE_DELETE: (&str, [&str; 2]) =
    ("DELETE FROM toast_default", ["toast_default", "toast_full"]);

/// The combinations with `decimal.handling.mode = precise` (Debezium's default).
const PRECISE: &str =
    "defaults,schemas-enable,time-connect,binary-hex,truncate,transaction-metadata";
/// The combinations with `skipped.operations = t` (Debezium's default).
const SKIP_TRUNCATE: &str =
    "defaults,decimal-string,schemas-enable,time-connect,binary-hex,transaction-metadata";
/// The combinations whose `timestamp` is microseconds (all but `time-connect`).
const MICROS: &str =
    "defaults,decimal-string,schemas-enable,binary-hex,truncate,transaction-metadata";

const NOT_EMITTED: &str = "Debezium leaves interval[], money[], name[] and xml[] columns out of its \
    events (types it does not map, a warning in Connect's log): absent, so the target's default";
const COMPOSITE: &str =
    "Debezium leaves composite types out of its events (`pair`): absent, so the target's default";
const MULTI_DIMENSIONAL: &str =
    "Debezium writes a multi-dimensional array as a list of nulls ([null,null])";
const LOWER_BOUND: &str = "Debezium's arrays carry no lower bound: [0:1]={7,8} arrives as [7,8]";
const JSON_TEXT: &str = "json (not jsonb): the sink applies rows through jsonb_populate_recordset, \
    so the document is the same but its text is normalised (spacing, number form), and a json \
    'null' document becomes SQL NULL";
const ENUM_ARRAY: &str = "Debezium writes an enum array holding a NULL element as null";
const NUMERIC_SPECIAL: &str = "decimal.handling.mode = precise: Debezium writes NaN and ±Infinity \
    numerics (and a numeric[] holding NaN) as null";
const NUMERIC_SCALE: &str = "VariableScaleDecimal: Debezium drops the trailing zeros of an \
    unconstrained numeric (123.4500 arrives with scale 2, 0.000 with scale 0): the same number";
const TIMETZ: &str =
    "Debezium writes timetz in UTC (ZonedTime …Z): the same instant, the zone offset lost";
const INTERVAL: &str = "interval.handling.mode = numeric: microseconds, months as 30 days and \
    years as 365.25 (the month/day/time split lost; 178000000 years overflows a long)";
const NAME: &str = "Debezium writes the `name` column of streamed rows as null";
const XML_DECLARATION: &str = "Debezium writes xml without its declaration (<?xml …?>)";
const SNAPSHOT_BC: &str = "Debezium's snapshot (JDBC's java.sql.Date) loses the era of BC dates \
    (0001-01-01 BC arrives as -719162 days, 0001-01-01); the streamed copies are right";
const TIMESTAMP_OVERFLOW: &str = "Debezium overflows 294276-12-31 23:59:59.999999 in microseconds \
    (-9223372036853775810): PostgreSQL refuses it (timestamp out of range), the record is \
    dead-lettered";
const CONNECT_MILLIS: &str =
    "time.precision.mode = connect: Debezium writes time and timestamp in milliseconds";
const TRUNCATE_SKIPPED: &str =
    "skipped.operations = t (Debezium's default): no event says that TRUNCATE removed the rows";

/// The differences that remain, each with its reason: `(combinations, table, keys, column,
/// reason)`; combinations and keys are comma-separated, `*` for all.
const KNOWN: &[(&str, &str, &str, &str, &str)] = &[
    ("*", "arrays", "1,101,3,103", "a_interval", NOT_EMITTED),
    ("*", "arrays", "1,101,3,103", "a_money", NOT_EMITTED),
    ("*", "arrays", "1,101,3,103", "a_name", NOT_EMITTED),
    ("*", "arrays", "1,101,3,103", "a_xml", NOT_EMITTED),
    ("*", "others", "1,101,3,103", "c_pair", COMPOSITE),
    ("*", "arrays", "1,101", "a_int4_2d", MULTI_DIMENSIONAL),
    ("*", "arrays", "1,101", "a_int4_lb", LOWER_BOUND),
    ("*", "arrays", "1,101", "a_json", JSON_TEXT),
    ("*", "scalars", "4,104,5,105", "c_json", JSON_TEXT),
    ("*", "arrays", "1,101", "a_mood", ENUM_ARRAY),
    ("*", "arrays", "1,101", "a_numeric", NUMERIC_SPECIAL),
    (PRECISE, "scalars", "5,105", "c_numeric", NUMERIC_SPECIAL),
    (
        PRECISE,
        "scalars",
        "5,105",
        "c_numeric_10_4",
        NUMERIC_SPECIAL,
    ),
    (PRECISE, "specials", "1,101", "c_numeric", NUMERIC_SPECIAL),
    (
        "time-connect",
        "specials",
        "2,102",
        "c_numeric",
        NUMERIC_SPECIAL,
    ),
    (PRECISE, "scalars", "1,101", "c_numeric", NUMERIC_SCALE),
    (PRECISE, "specials", "3,103", "c_numeric", NUMERIC_SCALE),
    ("*", "arrays", "1,101", "a_timetz", TIMETZ),
    ("*", "scalars", "1,101,3,103,5,105", "c_timetz", TIMETZ),
    ("*", "scalars", "1,101,3,103,4,104", "c_interval", INTERVAL),
    ("*", "specials", "1,101,3,103", "c_interval", INTERVAL),
    ("time-connect", "specials", "2,102", "c_interval", INTERVAL),
    ("*", "scalars", "101,103,104,105", "c_name", NAME),
    ("*", "scalars", "5,105", "c_xml", XML_DECLARATION),
    ("*", "scalars", "3", "c_date", SNAPSHOT_BC),
    ("*", "specials", "3", "c_date", SNAPSHOT_BC),
    (MICROS, "specials", "2,102", "<row>", TIMESTAMP_OVERFLOW),
    (
        "time-connect",
        "arrays",
        "1,101",
        "a_timestamp",
        CONNECT_MILLIS,
    ),
    (
        "time-connect",
        "scalars",
        "1,101,4,104",
        "c_time",
        CONNECT_MILLIS,
    ),
    (
        "time-connect",
        "scalars",
        "1,101",
        "c_time6",
        CONNECT_MILLIS,
    ),
    (
        "time-connect",
        "scalars",
        "1,101,4,104",
        "c_timestamp",
        CONNECT_MILLIS,
    ),
    (
        "time-connect",
        "specials",
        "2,102,4,104",
        "c_timestamp",
        CONNECT_MILLIS,
    ),
    (SKIP_TRUNCATE, "trunc", "1,2", "<row>", TRUNCATE_SKIPPED),
];

/// One line of a golden file: the key and value as the JsonConverter wrote them.
#[derive(Deserialize)]
struct GoldenLine<'a> {
    #[serde(borrow)]
    key: &'a RawValue,
    #[serde(borrow)]
    value: &'a RawValue,
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The golden files of a combination: (table, lines).
fn golden_files(combination: &str) -> Vec<(String, String)> {
    let dir = root()
        .join("crates/sluice/tests/debezium")
        .join(combination);
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            let name = path.file_name()?.to_str()?.to_owned();
            let table = name
                .strip_prefix("dbzcap.public.")?
                .strip_suffix(".jsonl")?
                .to_owned();
            Some((table, std::fs::read_to_string(&path).ok()?))
        })
        .collect();
    files.sort();
    files
}

/// The schema of a combination's target tables.
fn schema_of(combination: &str) -> String {
    format!("c_{}", combination.replace('-', "_"))
}

/// One difference between the source and a target table.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Difference {
    combination: String,
    table: String,
    key: String,
    column: String,
    source: String,
    target: String,
}

/// The primary-key columns of `public.<table>`, in key order.
async fn key_columns(client: &Client, table: &str) -> Vec<String> {
    client
        .query(
            "SELECT a.attname::text FROM pg_index i
             JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
             WHERE i.indrelid = to_regclass($1) AND i.indisprimary
             ORDER BY array_position(i.indkey::int2[], a.attnum)",
            &[&format!("public.{table}")],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The columns of `public.<table>`, in table order.
async fn columns(client: &Client, table: &str) -> Vec<String> {
    client
        .query(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = to_regclass($1)
             AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&format!("public.{table}")],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// Every difference between the source's `<table>` (`public`, or `mid` for a `…_mid` table)
/// and `<schema>.<table>`: a row on one side only (column `<row>`), or a column whose text
/// differs.
async fn compare_table(
    client: &Client,
    combination: &str,
    table: &str,
    compared: &mut u64,
) -> Vec<Difference> {
    let schema = schema_of(combination);
    let (source, like) = match table.strip_suffix("_mid") {
        Some(like) => (format!("mid.{like}"), like),
        None => (format!("public.{table}"), table),
    };
    let key = key_columns(client, like).await;
    let all = columns(client, like).await;
    let q = |c: &str| format!("\"{c}\"");
    let key_text: Vec<String> = key
        .iter()
        .map(|k| format!("coalesce(s.{0}, t.{0})::text", q(k)))
        .collect();
    let mut select = vec![format!("concat_ws(',', {})", key_text.join(", "))];
    select.push(format!("s.{} IS NULL", q(&key[0])));
    select.push(format!("t.{} IS NULL", q(&key[0])));
    for column in &all {
        select.push(format!("s.{0}::text, t.{0}::text", q(column)));
    }
    let on: Vec<String> = key.iter().map(|k| format!("s.{0} = t.{0}", q(k))).collect();
    let sql = format!(
        "SELECT {} FROM {source} s FULL JOIN {schema}.{table} t ON {} ORDER BY 1",
        select.join(", "),
        on.join(" AND ")
    );
    let rows = client.query(&sql, &[]).await.unwrap();
    let mut found = Vec::new();
    let difference = |key: &str, column: &str, source: String, target: String| Difference {
        combination: combination.to_owned(),
        table: table.to_owned(),
        key: key.to_owned(),
        column: column.to_owned(),
        source,
        target,
    };
    for row in rows {
        let key: String = row.get(0);
        let (only_target, only_source): (bool, bool) = (row.get(1), row.get(2));
        if only_target || only_source {
            let side = if only_source { "source" } else { "target" };
            found.push(difference(
                &key,
                "<row>",
                format!("{side} only"),
                String::new(),
            ));
            continue;
        }
        for (i, column) in all.iter().enumerate() {
            *compared += 1;
            let source: Option<String> = row.get(3 + 2 * i);
            let target: Option<String> = row.get(4 + 2 * i);
            if source != target {
                let show = |v: Option<String>| {
                    v.map_or("NULL".into(), |v| v.chars().take(60).collect::<String>())
                };
                found.push(difference(&key, column, show(source), show(target)));
            }
        }
    }
    found
}

/// Whether `known` names `difference`.
fn names(known: &(&str, &str, &str, &str, &str), difference: &Difference) -> bool {
    let (combinations, table, key, column, _) = *known;
    (combinations == "*" || combinations.split(',').any(|c| c == difference.combination))
        && table == difference.table
        && (key == "*" || key.split(',').any(|k| k == difference.key))
        && column == difference.column
}

#[tokio::test(flavor = "multi_thread")]
async fn debeziums_golden_events_rebuild_the_source_tables() {
    let _broker = broker_shared().await;
    let started = Instant::now();
    let name = unique("pgsink_dbz");
    let (url, client) = target_database(&name).await;
    // The source: the capture's scripts, and the tables of BEFORE_DELETE as they are before
    // its statement.
    for script in ["setup.sql", "changes.sql"] {
        for statement in statements(&root().join("scripts/debezium").join(script)) {
            if statement.starts_with(BEFORE_DELETE.0) {
                let copies: Vec<String> = BEFORE_DELETE
                    .1
                    .iter()
                    .map(|t| format!("CREATE TABLE mid.{t} AS TABLE public.{t};"))
                    .collect();
                client
                    .batch_execute(&format!("CREATE SCHEMA mid; {}", copies.join(" ")))
                    .await
                    .unwrap();
            }
            client
                .batch_execute(&statement)
                .await
                .unwrap_or_else(|e| panic!("{script}: {statement}: {e}"));
        }
    }
    // The targets and the topics, one schema and one topic per table per combination.
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", crate::support::stack().brokers)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let mut produced: BTreeMap<&str, usize> = BTreeMap::new();
    let mut tables: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut total = 0usize;
    for combination in COMBINATIONS {
        let schema = schema_of(combination);
        client
            .batch_execute(&format!("CREATE SCHEMA {schema}"))
            .await
            .unwrap();
        let mut files = golden_files(combination);
        // The records before the deletes of BEFORE_DELETE's tables, as `<table>_mid`.
        for (table, lines) in files.clone() {
            if BEFORE_DELETE.1.contains(&table.as_str()) {
                let before: Vec<&str> = lines
                    .lines()
                    .take_while(|l| !l.contains(r#""op":"d""#))
                    .collect();
                files.push((format!("{table}_mid"), before.join("\n")));
            }
        }
        for (table, lines) in files {
            if KEYLESS.contains(&table.as_str()) {
                continue;
            }
            let like = table.strip_suffix("_mid").unwrap_or(&table);
            client
                .batch_execute(&format!(
                    "CREATE TABLE {schema}.{table} (LIKE public.{like} INCLUDING ALL)"
                ))
                .await
                .unwrap();
            let topic = format!("{name}.{schema}.{table}");
            create_topic(&topic, 1).await;
            for line in lines.lines().filter(|l| !l.trim().is_empty()) {
                let golden: GoldenLine<'_> = serde_json::from_str(line).unwrap();
                let mut record = BaseRecord::<str, str>::to(&topic);
                if golden.key.get() != "null" {
                    record = record.key(golden.key.get());
                }
                if golden.value.get() != "null" {
                    record = record.payload(golden.value.get());
                }
                producer.send(record).map_err(|(e, _)| e).unwrap();
                *produced.entry(combination).or_default() += 1;
                total += 1;
            }
            tables.entry(combination).or_default().push(table);
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();

    let dead_letter_topic = format!("{name}_dlq");
    create_topic(&dead_letter_topic, 1).await;
    // One sink per set of Debezium options the events without schemas were written with.
    let pipelines: [(&str, &[&str]); 4] = [
        (
            "",
            &[
                "defaults",
                "schemas-enable",
                "truncate",
                "transaction-metadata",
            ],
        ),
        ("decimal_handling_mode = \"string\"", &["decimal-string"]),
        ("time_precision_mode = \"connect\"", &["time-connect"]),
        ("binary_handling_mode = \"hex\"", &["binary-hex"]),
    ];
    let mut sinks = Vec::new();
    for (i, (options, combinations)) in pipelines.iter().enumerate() {
        let schemas: Vec<String> = combinations.iter().map(|c| schema_of(c)).collect();
        let port = free_port();
        let pipeline = format!("{name}_p{i}");
        let toml = sink_toml(
            &pipeline,
            &[format!("/{name}\\\\.({})\\\\..*/", schemas.join("|"))],
            &url,
            port,
            "",
        )
        // `auto_evolve`: `evolve.c`, dropped in the source, is in events of the target's
        // table.
        .replace(
            "sub_partitions = 4",
            &format!("sub_partitions = 1\ntruncate = true\nauto_evolve = true\n{options}"),
        )
        .replace(
            "[admin]",
            &format!(
                "[delivery]\non_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\n\n[admin]"
            ),
        );
        let sink = Sluice::start(&test_dir(&pipeline), &toml, port);
        if i == 0 {
            // The first creates the progress table; the others find it.
            wait_zero(
                "the progress table",
                &client,
                "SELECT (to_regclass('public.sluice_sink_progress') IS NULL)::int::bigint",
                Duration::from_secs(60),
                &sink,
            )
            .await;
        }
        sinks.push(sink);
    }
    wait_zero(
        "every record applied (or dead-lettered)",
        &client,
        &format!(
            "SELECT {total} - coalesce(sum(next_offset), 0)::bigint FROM sluice_sink_progress WHERE pipeline LIKE '{name}_p%'"
        ),
        Duration::from_secs(120),
        &sinks[0],
    )
    .await;
    let applied_in = started.elapsed();

    // What was refused, and why.
    let dead: Vec<String> = {
        let topic = dead_letter_topic.clone();
        tokio::task::spawn_blocking(move || {
            crate::support::read_topic(&topic, Duration::from_secs(3), |_| false)
                .into_iter()
                .map(|r| {
                    format!(
                        "{} {}: {}",
                        r.headers
                            .get("sluice.dlq.topic")
                            .cloned()
                            .unwrap_or_default(),
                        r.key.map(|k| k.to_string()).unwrap_or_default(),
                        r.headers
                            .get("sluice.dlq.reason")
                            .cloned()
                            .unwrap_or_default()
                    )
                })
                .collect()
        })
        .await
        .unwrap()
    };

    let mut differences = Vec::new();
    let mut report = String::new();
    for combination in COMBINATIONS {
        let mut compared = 0;
        let mut found = Vec::new();
        for table in &tables[combination] {
            found.extend(compare_table(&client, combination, table, &mut compared).await);
        }
        report.push_str(&format!(
            "{combination}: {} records, {} tables, {compared} values compared, {} differences\n",
            produced[combination],
            tables[combination].len(),
            found.len()
        ));
        differences.extend(found);
    }
    let unexplained: Vec<&Difference> = differences
        .iter()
        .filter(|d| !KNOWN.iter().any(|k| names(k, d)))
        .collect();
    let gone: Vec<_> = KNOWN
        .iter()
        .filter(|k| !differences.iter().any(|d| names(k, d)))
        .collect();
    let by_reason: BTreeMap<&str, usize> =
        differences.iter().fold(BTreeMap::new(), |mut acc, d| {
            let reason = KNOWN.iter().find(|k| names(k, d)).map_or("?", |k| k.4);
            *acc.entry(reason).or_default() += 1;
            acc
        });
    let tables_with_differences: BTreeSet<(&str, &str)> = differences
        .iter()
        .map(|d| (d.combination.as_str(), d.table.as_str()))
        .collect();
    println!(
        "{report}applied in {applied_in:?}, compared in {:?}; {} differences in {} tables, by reason: {by_reason:#?}\ndead-lettered: {dead:#?}",
        started.elapsed() - applied_in,
        differences.len(),
        tables_with_differences.len(),
    );
    let show: Vec<String> = unexplained
        .iter()
        .map(|d| {
            format!(
                "(\"{}\", \"{}\", \"{}\", \"{}\", \"?\"), // {} -> {}",
                d.combination, d.table, d.key, d.column, d.source, d.target
            )
        })
        .collect();
    assert!(
        unexplained.is_empty() && gone.is_empty(),
        "differences without a reason:\n{}\nknown differences that no longer occur: {gone:#?}\ndead-lettered: {dead:#?}",
        show.join("\n")
    );
    drop(sinks);
    drop(client);
    drop_database(&name).await;
}

//! The sinks read Avro: PostgreSQL → sluice (Avro through the dev stack's schema registry) →
//! Kafka → sluice's files sink (JSON Lines, Parquet) and PostgreSQL sink, each decoding the
//! records by their registry id. What they write is compared with the source: the target table
//! row by row (typed columns created from the Avro schemas), the files' JSON with the JSON
//! events a second pipeline writes for the same changes. Records that are not Avro, or whose
//! schema id the registry does not hold, take the sink's bad-record way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_schema::DataType;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use serde_json::Value;

use crate::sink::create_topic;
use crate::sink_pg::{assert_equal_to_source, drop_database, sink_toml, target_database};
use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, stack, test_dir,
    unique, wait_until,
};

fn registry_url() -> String {
    std::env::var("SCHEMA_REGISTRY_URL").unwrap_or_else(|_| {
        panic!(
            "SCHEMA_REGISTRY_URL is not set: `scripts/dev-stack registry-up && eval \
             \"$(scripts/dev-stack env)\"`"
        )
    })
}

fn registry_section() -> String {
    format!("\n[schema_registry]\nurl = \"{}\"\n", registry_url())
}

/// A CDC pipeline writing Avro (`avro`) or JSON.
fn cdc_toml(name: &str, schema: &str, prefix: &str, port: u16, avro: bool) -> String {
    let toml = pipeline_toml(name, schema, prefix, port, "");
    if avro {
        toml.replace("[admin]", "[kafka.events]\nformat = \"avro\"\n\n[admin]")
            + &registry_section()
    } else {
        toml
    }
}

/// Produces records of raw bytes (key, value) to `topic`.
fn produce_raw(topic: &str, records: &[(&[u8], &[u8])]) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    for (key, value) in records {
        producer
            .send(BaseRecord::to(topic).key(*key).payload(*value))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// The source columns: the encodings a sink has to turn back into values.
const COLUMNS: &str = "id bigint PRIMARY KEY, n integer NOT NULL, amount numeric(12,2), \
    ratio numeric, label text, flag boolean, born date, seen timestamp(6), at timestamptz, \
    t time, payload bytea, doc jsonb, uid uuid, tags text[], nums integer[], \
    counter bigint NOT NULL DEFAULT 0";

/// A mixed workload on `t`: a bulk insert, single inserts, updates of the same keys, a column
/// added mid-stream, deletes and primary-key changes.
async fn workload(source: &tokio_postgres::Client, t: &str) {
    source
        .batch_execute(&format!(
            "INSERT INTO {t} (id, n, amount, ratio, label, flag, born, seen, at, t, payload, doc, uid, tags, nums)
             SELECT g, g % 7, (g * 1.25)::numeric(12,2) - 100, g / 7.0, 'row ' || g || ' \"q\" é', g % 2 = 0,
                    DATE '2000-01-01' + g * 37 - 4000,
                    TIMESTAMP '2026-11-25 10:00:00.123456' + g * interval '1 second 1 microsecond',
                    '2026-11-25 10:00:00+00'::timestamptz + g * interval '1 second',
                    TIME '00:00:00.000001' + g * interval '1 second',
                    decode(lpad(to_hex(g), 8, '0'), 'hex'),
                    jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g % 3)),
                    md5(g::text)::uuid, ARRAY['x' || g, NULL, ''], ARRAY[g, -g]
             FROM generate_series(1, 150) g"
        ))
        .await
        .unwrap();
    for id in 151..=160i64 {
        source
            .execute(
                &format!("INSERT INTO {t} (id, n, label) VALUES ($1, 1, NULL)"),
                &[&id],
            )
            .await
            .unwrap();
    }
    for round in 0..3 {
        source
            .batch_execute(&format!(
                "UPDATE {t} SET counter = counter + 1, n = n + {round}, amount = coalesce(amount, 0) + 0.01,
                        tags = array_append(coalesce(tags, '{{}}'), 'r{round}')
                 WHERE id % 4 = {round}"
            ))
            .await
            .unwrap();
    }
    source
        .batch_execute(&format!(
            "ALTER TABLE {t} ADD COLUMN extra text;
             UPDATE {t} SET extra = 'x' || id WHERE id % 5 = 0;
             DELETE FROM {t} WHERE id % 7 = 1;
             UPDATE {t} SET id = id + 100000 WHERE id % 11 = 2;"
        ))
        .await
        .unwrap();
}

/// PostgreSQL → Avro through the registry → the PostgreSQL sink with `format = "avro"`,
/// `auto_create` and `auto_evolve`: the target table is created with the types of the Avro
/// schemas (numeric, date, timestamp, bytea, arrays, …), takes the column added mid-stream, and
/// equals the source row by row. Then a record that is not Avro stops the sink naming topic,
/// partition, offset and the reason.
#[tokio::test(flavor = "multi_thread")]
async fn avro_events_replicate_into_postgres_with_typed_auto_created_tables() {
    let name = unique("avro_pgsink");
    let schema = name.clone();
    let source = pg().await;
    source
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.items ({COLUMNS});"
        ))
        .await
        .unwrap();
    let (target_url, target) = target_database(&name).await;
    let topic = format!("{name}.{schema}.items");
    create_topic(&topic, 2).await;
    let cdc_port = free_port();
    let cdc = Sluice::start(
        &test_dir(&format!("{name}_cdc")),
        &cdc_toml(&name, &schema, &name, cdc_port, true),
        cdc_port,
    );
    cdc.wait_streaming(Duration::from_secs(60));
    let sink_port = free_port();
    let mut sink = Sluice::start(
        &test_dir(&format!("{name}_sink")),
        &(sink_toml(
            &format!("{name}_sink"),
            std::slice::from_ref(&topic),
            &target_url,
            sink_port,
            "format = \"avro\"\n",
        )
        .replace(
            "[sink.postgres]\n",
            "[sink.postgres]\nauto_create = true\nauto_evolve = true\n",
        ) + &registry_section()),
        sink_port,
    );
    sink.wait_streaming(Duration::from_secs(60));

    let t = format!("{schema}.items");
    workload(&source, &t).await;
    crate::support::wait_until(
        "the added column to reach the target table",
        Duration::from_secs(120),
        || {
            let target_url = target_url.clone();
            let schema = schema.clone();
            std::thread::spawn(move || {
                tokio::runtime::Runtime::new().unwrap().block_on(async {
                    crate::support::pg_at(&target_url)
                        .await
                        .query_one(
                            "SELECT count(*) FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'items' AND column_name = 'extra'",
                            &[&schema],
                        )
                        .await
                        .unwrap()
                        .get::<_, i64>(0)
                        == 1
                })
            })
            .join()
            .unwrap()
        },
    );
    let (rows, expected) =
        assert_equal_to_source(&source, &target, &schema, Duration::from_secs(120), &sink).await;
    assert_eq!(rows, expected);
    assert!(rows > 100, "{rows} rows");
    // The table was created with the Avro schemas' types.
    let types: BTreeMap<String, String> = target
        .query(
            &format!(
                "SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
                  WHERE attrelid = '{t}'::regclass AND attnum > 0 AND NOT attisdropped"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    for (column, want) in [
        ("id", "bigint"),
        ("n", "integer"),
        ("amount", "numeric(12,2)"),
        ("born", "date"),
        ("seen", "timestamp without time zone"),
        ("at", "timestamp with time zone"),
        ("payload", "bytea"),
        ("tags", "text[]"),
        ("nums", "integer[]"),
        ("flag", "boolean"),
    ] {
        assert_eq!(
            types.get(column).map(String::as_str),
            Some(want),
            "column {column}: {types:?}"
        );
    }

    // A record that is not in the wire format: the default policy stops the sink, naming it.
    produce_raw(&topic, &[(b"{\"id\":1}", b"{\"op\":\"c\"}")]);
    wait_until("the sink to stop", Duration::from_secs(60), || {
        sink.exited().is_some()
    });
    let log = sink.log_text();
    assert!(
        log.contains(&format!("record {topic}/"))
            && log.contains("cannot be written: the key is not in Confluent's Avro wire format"),
        "{log}"
    );
    drop(cdc);
    drop(sink);
    drop_slot_and_publication(&source, &name).await;
    drop(target);
    drop_database(&name).await;
}

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with("_sluice") {
            continue;
        }
        if path.is_dir() {
            files_under(&path, out);
        } else if !entry.file_name().to_string_lossy().starts_with(".tmp") {
            out.push(path);
        }
    }
}

/// The JSON Lines under `root`, in (partition, offset) order.
fn json_lines(root: &Path) -> Vec<Value> {
    let mut files = Vec::new();
    files_under(root, &mut files);
    let mut lines: Vec<Value> = files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    lines.sort_by_key(|l| (l["_partition"].as_i64(), l["_offset"].as_i64()));
    lines
}

/// A Parquet row: partition, offset, `op`, `after` (parsed).
type ParquetRow = (i64, i64, String, Value);

/// The Parquet rows under `root`, and the columns' types.
fn parquet_rows(root: &Path) -> (Vec<ParquetRow>, BTreeMap<String, DataType>) {
    let mut files = Vec::new();
    files_under(root, &mut files);
    let mut rows = Vec::new();
    let mut types = BTreeMap::new();
    for file in files {
        let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&file).unwrap())
            .unwrap()
            .build()
            .unwrap();
        for batch in reader {
            let batch = batch.unwrap();
            for field in batch.schema().fields() {
                types.insert(field.name().clone(), field.data_type().clone());
            }
            let column = |name: &str| batch.column_by_name(name).unwrap().clone();
            let partition = column("_partition");
            let offset = column("_offset");
            let op = column("op");
            let after = column("after");
            for i in 0..batch.num_rows() {
                rows.push((
                    i64::from(
                        partition
                            .as_primitive::<arrow_array::types::Int32Type>()
                            .value(i),
                    ),
                    offset
                        .as_primitive::<arrow_array::types::Int64Type>()
                        .value(i),
                    op.as_string::<i32>().value(i).to_owned(),
                    if after.is_null(i) {
                        Value::Null
                    } else {
                        serde_json::from_str(after.as_string::<i32>().value(i)).unwrap()
                    },
                ));
            }
        }
    }
    rows.sort_by_key(|r| (r.0, r.1));
    (rows, types)
}

fn files_sink_toml(
    name: &str,
    topic: &str,
    root: &Path,
    port: u16,
    format: &str,
    extra: &str,
) -> String {
    format!(
        r#"
name = "{name}"

[source.kafka]
brokers = "{brokers}"
topics = ["{topic}"]
group_id = "{name}"
format = "avro"
[source.kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

[sink.files]
path = "{root}"
format = "{format}"
roll_interval_ms = 300
sub_partitions = 2

[admin]
listen = "127.0.0.1:{port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
{extra}
{registry}
"#,
        brokers = stack().brokers,
        root = root.display(),
        registry = registry_section(),
    )
}

/// The same changes written twice by two CDC pipelines, as JSON and as Avro through the
/// registry; the Avro topic read by a files sink into JSON Lines and into Parquet. Each JSON
/// line's `before`, `after` and `op` equal the JSON event of the same change (Connect's JSON of
/// the record: numeric as base64, dates as days, timestamps as µs, bytea as base64, arrays), in
/// the order of each key's changes; the Parquet columns hold the same, typed (`op` utf8, `ts_ms`
/// int64). Records that are not Avro, or name a schema id the registry does not hold, go to the
/// dead-letter topic with the reason.
#[tokio::test(flavor = "multi_thread")]
async fn avro_events_become_json_lines_and_parquet_equal_to_the_json_events() {
    let name = unique("avro_files");
    let json_name = format!("{name}_j");
    let schema = name.clone();
    let source = pg().await;
    source
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.items ({COLUMNS});"
        ))
        .await
        .unwrap();
    let avro_topic = format!("{name}.{schema}.items");
    let json_topic = format!("{json_name}.{schema}.items");
    create_topic(&avro_topic, 2).await;
    create_topic(&json_topic, 2).await;
    let dead_letter_topic = format!("{name}_dlq");
    create_topic(&dead_letter_topic, 1).await;
    let mut processes = Vec::new();
    for (pipeline, avro) in [(&name, true), (&json_name, false)] {
        let port = free_port();
        let cdc = Sluice::start(
            &test_dir(&format!("{pipeline}_cdc")),
            &cdc_toml(pipeline, &schema, pipeline, port, avro),
            port,
        );
        cdc.wait_streaming(Duration::from_secs(60));
        processes.push(cdc);
    }
    let jsonl_root = test_dir(&format!("{name}_jsonl")).join("out");
    let parquet_root = test_dir(&format!("{name}_parquet")).join("out");
    for (format, root, extra) in [
        (
            "jsonl",
            &jsonl_root,
            format!(
                "[delivery]\non_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\n"
            ),
        ),
        ("parquet", &parquet_root, String::new()),
    ] {
        let port = free_port();
        let sink_name = format!("{name}_{format}");
        let sink = Sluice::start(
            &test_dir(&sink_name),
            &files_sink_toml(&sink_name, &avro_topic, root, port, format, &extra),
            port,
        );
        sink.wait_streaming(Duration::from_secs(60));
        processes.push(sink);
    }

    workload(&source, &format!("{schema}.items")).await;
    // The JSON events, tombstones left out (the files sink skips them).
    let expected_count =
        |records: &[crate::support::Record]| records.iter().filter(|r| r.value.is_some()).count();
    // The last change of the workload: key 156 moved to 100156.
    let last_change = |records: &[crate::support::Record]| {
        records.iter().any(|r| {
            r.value
                .as_ref()
                .is_some_and(|v| v["after"]["id"] == 100_156)
        })
    };
    let json_events = read_topic(&json_topic, Duration::from_secs(120), last_change);
    assert!(last_change(&json_events), "the JSON events did not arrive");
    let json_events = read_topic(&json_topic, Duration::from_secs(3), |_| false);
    let want = expected_count(&json_events);
    let mut lines = Vec::new();
    wait_until("the JSON lines", Duration::from_secs(120), || {
        lines = json_lines(&jsonl_root);
        lines.len() >= want
    });
    assert_eq!(lines.len(), want);
    let (parquet, types) = {
        let mut found = (Vec::new(), BTreeMap::new());
        wait_until("the Parquet rows", Duration::from_secs(120), || {
            found = parquet_rows(&parquet_root);
            found.0.len() >= want
        });
        found
    };
    assert_eq!(parquet.len(), want);
    assert_eq!(types.get("op"), Some(&DataType::Utf8), "{types:?}");
    assert_eq!(types.get("ts_ms"), Some(&DataType::Int64), "{types:?}");
    assert_eq!(types.get("after"), Some(&DataType::Utf8), "{types:?}");

    // Per key, the changes in order, equal to the JSON events field by field.
    type Changes = BTreeMap<String, Vec<(String, Value, Value)>>;
    let mut from_json: Changes = BTreeMap::new();
    for record in json_events.iter().filter(|r| r.value.is_some()) {
        let value = record.value.as_ref().unwrap();
        from_json
            .entry(record.key.as_ref().unwrap().to_string())
            .or_default()
            .push((
                value["op"].as_str().unwrap().to_owned(),
                value["before"].clone(),
                value["after"].clone(),
            ));
    }
    let mut from_lines: Changes = BTreeMap::new();
    for line in &lines {
        from_lines
            .entry(line["_key"].to_string())
            .or_default()
            .push((
                line["op"].as_str().unwrap().to_owned(),
                line["before"].clone(),
                line["after"].clone(),
            ));
    }
    assert_eq!(from_lines.len(), from_json.len());
    for (key, changes) in &from_json {
        assert_eq!(from_lines.get(key), Some(changes), "key {key}");
    }
    // Parquet holds the JSON lines' values, typed.
    for (row, line) in parquet.iter().zip(&lines) {
        assert_eq!(row.2, line["op"], "{line}");
        assert_eq!(row.3, line["after"], "{line}");
    }
    // Types as Connect writes them, spot-checked on a row of the bulk insert.
    let row = lines
        .iter()
        .find(|l| l["after"]["id"] == 8)
        .map(|l| &l["after"])
        .expect("row 8");
    assert_eq!(row["born"], 10957 + 8 * 37 - 4000, "{row}");
    assert_eq!(row["payload"], "AAAACA==", "{row}");
    assert_eq!(row["nums"], serde_json::json!([8, -8]), "{row}");
    assert_eq!(row["t"], 8_000_001i64, "{row}");

    // A record that is not Avro and one naming a schema id no one registered: the JSON Lines
    // sink dead-letters them with the reason (the Parquet one, stopping on bad records, stops).
    produce_raw(
        &avro_topic,
        &[
            (b"k1", b"{\"not\":\"avro\"}"),
            (&[0, 0x7f, 0xff, 0xff, 0xf0, 2, 2], b"v"),
        ],
    );
    let dead = read_topic(&dead_letter_topic, Duration::from_secs(30), |r| {
        r.len() >= 2
    });
    assert_eq!(dead.len(), 2, "{dead:?}");
    // Dead-lettered as they were consumed, not decoded.
    assert!(
        dead.iter()
            .any(|r| r.value == Some(serde_json::json!({"not": "avro"}))),
        "{dead:?}"
    );
    let reasons: Vec<&str> = dead
        .iter()
        .map(|r| r.headers["sluice.dlq.reason"].as_str())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("the key is not in Confluent's Avro wire format")),
        "{reasons:?}"
    );
    assert!(
        reasons
            .iter()
            .any(|r| r.contains("schema id 2147483632 is unknown to the registry")),
        "{reasons:?}"
    );

    drop(processes);
    drop_slot_and_publication(&source, &name).await;
    drop_slot_and_publication(&source, &json_name).await;
}

/// A files sink whose registry does not answer: `/health` says so, nothing is written and
/// nothing is skipped (each run ends after half of `processing_timeout_ms` and restarts from
/// the committed files); started again with the dead URL first and the registry second (URLs
/// tried in turn), every record arrives, once and in order.
#[tokio::test(flavor = "multi_thread")]
async fn a_sink_whose_registry_does_not_answer_shows_it_and_loses_nothing() {
    let name = unique("avro_sink_down");
    let source = pg().await;
    source
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY, v text);
             INSERT INTO {name}.t SELECT g, 'v' || g FROM generate_series(1, 40) g;"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    create_topic(&topic, 1).await;
    // Records failing would go here: a registry that does not answer must not make them fail.
    let dead_letter_topic = format!("{name}_dlq");
    create_topic(&dead_letter_topic, 1).await;
    let cdc_port = free_port();
    let cdc = Sluice::start(
        &test_dir(&format!("{name}_cdc")),
        &cdc_toml(&name, &name, &name, cdc_port, true),
        cdc_port,
    );
    cdc.wait_streaming(Duration::from_secs(60));
    let dead = format!("http://127.0.0.1:{}", free_port());
    let sink_name = format!("{name}_sink");
    let root = test_dir(&sink_name).join("out");
    let port = free_port();
    let toml = files_sink_toml(
        &sink_name,
        &topic,
        &root,
        port,
        "jsonl",
        &format!(
            "[delivery]\nprocessing_timeout_ms = 4000\non_failure = \"dead_letter\"\n\
             dead_letter_topic = \"{dead_letter_topic}\"\n"
        ),
    );
    let down = toml.replace(&registry_url(), &dead);
    assert_ne!(down, toml);
    let mut sink = Sluice::start(&test_dir(&sink_name), &down, port);
    // `sluice check` reaches the registry with the pipeline's settings.
    let file = test_dir(&sink_name).join("pipeline.toml");
    let (status, check) =
        crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(30));
    assert_ne!(status, Some(0), "{check}");
    assert!(
        check.contains(&format!("schema registry {dead}: FAILED")),
        "{check}"
    );
    let mut health = Value::Null;
    wait_until(
        "/health shows the registry down",
        Duration::from_secs(60),
        || {
            health = sink
                .get("/health")
                .and_then(|h| serde_json::from_str(&h).ok())
                .unwrap_or(Value::Null);
            health["schema_registry_error"]
                .as_str()
                .is_some_and(|e| e.contains("does not answer") && e.contains(&dead))
        },
    );
    // Past a run's wait: the run ended and was restarted, nothing written.
    wait_until(
        "a run to end on the registry",
        Duration::from_secs(60),
        || sink.log_text().contains("did not answer for"),
    );
    assert!(json_lines(&root).is_empty());
    source
        .batch_execute(&format!("INSERT INTO {name}.t VALUES (41, 'late')"))
        .await
        .unwrap();
    sink.stop();
    let both = toml.replace(
        &format!("url = \"{}\"", registry_url()),
        &format!("url = [\"{dead}\", \"{}\"]", registry_url()),
    );
    assert_ne!(both, toml);
    let sink = Sluice::start(&test_dir(&sink_name), &both, port);
    let (_, check) =
        crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(30));
    assert!(
        check.contains("schema registry ") && check.contains(": connected (global compatibility"),
        "{check}"
    );
    let mut lines = Vec::new();
    wait_until("every record", Duration::from_secs(60), || {
        lines = json_lines(&root);
        lines.len() >= 41
    });
    let ids: Vec<i64> = lines
        .iter()
        .map(|l| l["after"]["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids, (1..=41).collect::<Vec<_>>());
    let health: Value = serde_json::from_str(&sink.get("/health").unwrap()).unwrap();
    assert_eq!(health["schema_registry_error"], Value::Null, "{health}");
    let dead = read_topic(&dead_letter_topic, Duration::from_secs(3), |_| false);
    assert!(dead.is_empty(), "{dead:?}");
    drop(sink);
    drop(cdc);
    drop_slot_and_publication(&source, &name).await;
}

//! The initial snapshot: parallel chunks consistent with the stream under concurrent writes,
//! resumed at its unfinished chunks after a crash, and skipped with `snapshot = "never"`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::Value;

use crate::support::{
    Record, Sluice, drop_slot_and_publication, free_port, pg, pg_at, pipeline_toml,
    pipeline_toml_at, read_topic, test_dir, unique, wait_until,
};

const TABLES: [&str; 3] = ["a", "b", "c"];

/// Rows per table: `SLUICE_IT_SNAPSHOT_ROWS` / 3 (default 120,000 in all; the snapshot benchmark
/// in bench/ measures millions).
fn rows_per_table() -> i64 {
    std::env::var("SLUICE_IT_SNAPSHOT_ROWS")
        .ok()
        .and_then(|v| v.parse::<i64>().ok())
        .unwrap_or(120_000)
        / 3
}

async fn create_tables(client: &tokio_postgres::Client, schema: &str, rows: i64) {
    client
        .batch_execute(&format!("CREATE SCHEMA {schema};"))
        .await
        .unwrap();
    for table in TABLES {
        client
            .batch_execute(&format!(
                "CREATE TABLE {schema}.{table} (id bigint PRIMARY KEY, v bigint NOT NULL, payload text); \
                 INSERT INTO {schema}.{table} SELECT g, 0, md5(g::text) FROM generate_series(1, {rows}) g;"
            ))
            .await
            .unwrap();
    }
}

/// Updates and deletes random rows (and inserts new ones) until `stop`; returns the count.
fn start_writer(schema: String, rows: i64, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    start_writer_at(crate::support::stack().pg_url, schema, rows, stop)
}

/// [`start_writer`] on the server at `url`.
fn start_writer_at(
    url: String,
    schema: String,
    rows: i64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let client = pg_at(&url).await;
        let mut changes = 0u64;
        let mut next_id = rows + 1;
        while !stop.load(Ordering::Relaxed) {
            let (table, id, action) = {
                let mut rng = rand::rng();
                (
                    TABLES[rng.random_range(0..3)],
                    rng.random_range(1..=rows),
                    rng.random_range(0..10),
                )
            };
            let sql = match action {
                0 => format!("DELETE FROM {schema}.{table} WHERE id = {id}"),
                1 => {
                    next_id += 1;
                    format!("INSERT INTO {schema}.{table} VALUES ({next_id}, 1, 'new')")
                }
                _ => format!("UPDATE {schema}.{table} SET v = v + 1 WHERE id = {id}"),
            };
            client.batch_execute(&sql).await.unwrap();
            changes += 1;
            if changes.is_multiple_of(50) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        changes
    })
}

/// The table's rows: id → v.
async fn table_contents(
    client: &tokio_postgres::Client,
    schema: &str,
    table: &str,
) -> HashMap<i64, i64> {
    client
        .query(&format!("SELECT id, v FROM {schema}.{table}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)))
        .collect()
}

/// The newest event per key, applied in topic order: id → v (deleted keys removed).
fn latest_per_key(records: &[Record]) -> (HashMap<i64, i64>, usize) {
    let mut state = HashMap::new();
    let mut reads = 0;
    for record in records {
        let Some(id) = record.key.as_ref().and_then(|k| k["id"].as_i64()) else {
            continue;
        };
        match record.op() {
            Some("r" | "c" | "u") => {
                if record.op() == Some("r") {
                    reads += 1;
                }
                let v = record.value.as_ref().unwrap()["after"]["v"]
                    .as_i64()
                    .unwrap();
                state.insert(id, v);
            }
            Some("d") => {
                state.remove(&id);
            }
            _ => {}
        }
    }
    (state, reads)
}

/// Waits until every table's newest events equal its contents; returns the snapshot reads.
async fn assert_equal_to_tables(client: &tokio_postgres::Client, schema: &str) -> usize {
    let mut reads = 0;
    for table in TABLES {
        let expected = table_contents(client, schema, table).await;
        let topic = format!("{schema}.{schema}.{table}");
        let target = expected.clone();
        let (state, table_reads) = tokio::task::spawn_blocking(move || {
            let records = read_topic(&topic, Duration::from_secs(240), |records| {
                latest_per_key(records).0 == target
            });
            latest_per_key(&records)
        })
        .await
        .unwrap();
        let missing = expected.keys().filter(|k| !state.contains_key(k)).count();
        let extra = state.keys().filter(|k| !expected.contains_key(k)).count();
        let differ = expected
            .iter()
            .filter(|(k, v)| state.get(k).is_some_and(|s| s != *v))
            .count();
        assert!(
            state == expected,
            "{schema}.{table}: {missing} rows missing in Kafka, {extra} extra, {differ} with another value"
        );
        reads += table_reads;
    }
    reads
}

fn snapshot_rows(sluice: &Sluice) -> f64 {
    sluice
        .metric("sluice_source_snapshot_rows_total")
        .unwrap_or(0.0)
}

/// 3 tables snapshotted while another client updates, deletes and inserts random rows: when
/// both are done, the newest event per key in Kafka equals every table's contents.
#[tokio::test(flavor = "multi_thread")]
async fn initial_snapshot_is_consistent_with_concurrent_changes() {
    snapshot_under_writes(&crate::support::stack().pg_url).await;
}

/// The body of [`initial_snapshot_is_consistent_with_concurrent_changes`], on the PostgreSQL
/// server at `server` (`versions` runs it on another major version's).
pub(crate) async fn snapshot_under_writes(server: &str) {
    let name = unique("snap");
    let client = pg_at(server).await;
    let rows = rows_per_table();
    create_tables(&client, &name, rows).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer_at(server.to_owned(), name.clone(), rows, Arc::clone(&stop));
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml_at(server, &name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        // Five chunks per table, whatever the size.
        &format!(
            "[source.postgres]\nsnapshot_workers = 4\nsnapshot_chunk_rows = {}\n",
            rows / 5
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    let started = Instant::now();
    sluice.wait_streaming(Duration::from_secs(300));
    let snapshot_seconds = started.elapsed().as_secs_f64();
    // Keep writing while streaming, then stop.
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::Relaxed);
    let changes = writer.await.unwrap();
    let reads = assert_equal_to_tables(&client, &name).await;
    println!(
        "snapshot: {} rows in 3 tables read in {snapshot_seconds:.1} s (to streaming) with {changes} concurrent changes; {reads} read events; Kafka equals the tables",
        3 * rows
    );
    assert!(
        reads as i64 >= 3 * rows * 8 / 10,
        "most rows came from the snapshot: {reads}"
    );
    assert_eq!(
        snapshot_rows(&sluice) as usize,
        reads,
        "every read row was published once"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// The environment that arms the `snapshot::chunks_recorded` crash point: the process aborts
/// when finished chunks are recorded for the `passes + 1`-th time.
pub(crate) fn crash_after_recorded_chunks(passes: u32) -> Vec<(String, String)> {
    vec![(
        "FAILPOINTS".to_owned(),
        format!("snapshot::chunks_recorded={passes}*off->return"),
    )]
}

/// Waits until sluice aborted at its armed crash point.
pub(crate) fn wait_crash(sluice: &mut Sluice) {
    wait_until(
        "sluice to abort at its crash point",
        Duration::from_secs(300),
        || {
            let streaming = sluice
                .get("/health")
                .is_some_and(|body| body.contains("\"state\":\"streaming\""));
            assert!(
                !streaming,
                "the snapshot finished without reaching its crash point: build sluice with --features failpoints, as scripts/test does"
            );
            sluice.exited().is_some()
        },
    );
    assert!(
        sluice
            .log_text()
            .contains("failpoint snapshot::chunks_recorded"),
        "sluice exited, but not at the crash point:\n{}",
        sluice.log_text()
    );
    sluice.kill();
}

/// A crash in the middle of the snapshot (4 workers, 5,000-row chunks): the next start reads
/// only the chunks not finished before the kill (counted), streams, and Kafka still equals
/// the tables. The producer lingers a second before it sends a batch, so at the crash the
/// newest chunks' records are still in its queue: a chunk recorded as finished before its
/// records were acknowledged would lose them (Kafka would not equal the tables).
#[tokio::test(flavor = "multi_thread")]
async fn killed_snapshot_resumes_at_its_unfinished_chunks() {
    let name = unique("snapkill");
    let client = pg().await;
    let rows = rows_per_table();
    create_tables(&client, &name, rows).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(name.clone(), rows, Arc::clone(&stop));
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(
        &name,
        &name,
        &name,
        port,
        "[kafka.producer]\n\"linger.ms\" = \"1000\"\n",
    )
    .replace(
        "[source.postgres]\n",
        // Twenty chunks per table, whatever the size.
        &format!(
            "[source.postgres]\nsnapshot_workers = 4\nsnapshot_chunk_rows = {}\n",
            rows / 20
        ),
    );
    // Crash after the 7th batch of finished chunks was recorded (at least 7 of ~60 chunks
    // done, at most 4 per batch: far from all).
    let mut sluice = Sluice::start_with_env(&dir, &toml, port, crash_after_recorded_chunks(6));
    wait_crash(&mut sluice);
    let state_file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state")
        .join(format!("{name}.slot.json"));
    let state: Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let chunks = state["snapshot_plan"]["chunks"]
        .as_array()
        .expect("a plan")
        .clone();
    let done_before = chunks.iter().filter(|c| c["done"] == true).count();
    assert!(
        done_before > 0 && done_before < chunks.len(),
        "{done_before} of {} chunks done",
        chunks.len()
    );
    sluice.env.clear();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(300));
    let second = snapshot_rows(&sluice);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    assert_equal_to_tables(&client, &name).await;
    // Chunks hold ~rows/20 rows (concurrent inserts and deletes move that a little).
    let undone = (chunks.len() - done_before) as f64;
    let chunk_rows = (rows / 20) as f64;
    println!(
        "snapshot killed with {done_before} of {} chunks finished; the second run read {second} rows for {undone} unfinished chunks; Kafka equals the tables",
        chunks.len()
    );
    assert!(
        second <= undone * chunk_rows * 1.05 + 500.0,
        "finished chunks were read again: {second} rows for {undone} chunks"
    );
    assert!(second > 0.0);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A crash right after the slot was created with its exported snapshot, before the state file
/// recorded it: the next start must not adopt the slot as someone else's (no snapshot, every
/// existing row missing) but snapshot under a new snapshot: every row is read once.
#[tokio::test(flavor = "multi_thread")]
async fn crash_between_slot_creation_and_its_record_still_snapshots() {
    let name = unique("snapslot");
    let client = pg().await;
    let rows = 2_000;
    create_tables(&client, &name, rows).await;
    let port = free_port();
    let dir = test_dir(&name);
    let mut sluice = Sluice::start_with_env(
        &dir,
        &pipeline_toml(&name, &name, &name, port, ""),
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "snapshot::slot_created=return".to_owned(),
        )],
    );
    wait_until(
        "sluice to abort at snapshot::slot_created (build with --features sluice/failpoints)",
        Duration::from_secs(120),
        || sluice.exited().is_some(),
    );
    assert!(
        sluice
            .log_text()
            .contains("failpoint snapshot::slot_created"),
        "{}",
        sluice.log_text()
    );
    let slots: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
            &[&format!("sluice_{name}")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(slots, 1, "the crash left the new slot behind");
    sluice.kill();
    sluice.env.clear();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(120));
    let reads = assert_equal_to_tables(&client, &name).await;
    assert_eq!(
        reads as i64,
        3 * rows,
        "every row read once by the snapshot"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// `snapshot = "never"`: rows that existed before the slot are not read; new changes stream.
#[tokio::test(flavor = "multi_thread")]
async fn snapshot_never_streams_only_new_changes() {
    let name = unique("snapnever");
    let client = pg().await;
    create_tables(&client, &name, 100).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!("UPDATE {name}.a SET v = 7 WHERE id = 3"))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.a");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    let ops: Vec<Option<&str>> = records.iter().map(Record::op).collect();
    assert_eq!(ops, [Some("u")], "only the new change: {records:?}");
    assert_eq!(
        records[0].value.as_ref().unwrap()["source"]["snapshot"],
        Value::from("false")
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Tables whose rows split exactly into chunks (100 rows, `snapshot_chunk_rows = 50`) still
/// mark their last row as Debezium does: `last_in_data_collection` once per table, `first` and
/// `last` once in the whole snapshot.
#[tokio::test(flavor = "multi_thread")]
async fn snapshot_markers_survive_tables_that_split_exactly_into_chunks() {
    let name = unique("snapmark");
    let client = pg().await;
    create_tables(&client, &name, 100).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot_workers = 2\nsnapshot_chunk_rows = 50\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    let mut markers: HashMap<String, usize> = HashMap::new();
    for table in TABLES {
        let topic = format!("{name}.{name}.{table}");
        let records = tokio::task::spawn_blocking(move || {
            read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 100)
        })
        .await
        .unwrap();
        assert_eq!(records.len(), 100, "{table}: one read per row");
        let ends: Vec<&str> = records
            .iter()
            .filter_map(|r| r.value.as_ref()?["source"]["snapshot"].as_str())
            .filter(|m| matches!(*m, "last_in_data_collection" | "last"))
            .collect();
        assert_eq!(ends.len(), 1, "{table}: one last row, marked: {ends:?}");
        for record in &records {
            let marker = record.value.as_ref().unwrap()["source"]["snapshot"].clone();
            *markers
                .entry(marker.as_str().unwrap().to_owned())
                .or_default() += 1;
        }
    }
    assert_eq!(markers.get("first"), Some(&1), "{markers:?}");
    assert_eq!(markers.get("last"), Some(&1), "{markers:?}");
    assert_eq!(
        markers.get("last_in_data_collection"),
        Some(&2),
        "{markers:?}"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Per table of `schema`: how many snapshot reads (`op: "r"`) each row id got, read until
/// `rows` distinct ids arrived. The id is `after.id` (the table without a key has null keys).
async fn reads_per_id(schema: &str, table: &str, rows: usize) -> HashMap<i64, usize> {
    let topic = format!("{schema}.{schema}.{table}");
    let count = |records: &[Record]| {
        let mut reads: HashMap<i64, usize> = HashMap::new();
        for record in records.iter().filter(|r| r.op() == Some("r")) {
            let id = record.value.as_ref().unwrap()["after"]["id"]
                .as_i64()
                .unwrap();
            *reads.entry(id).or_default() += 1;
        }
        reads
    };
    tokio::task::spawn_blocking(move || {
        let records = read_topic(&topic, Duration::from_secs(240), |records| {
            count(records).len() >= rows
        });
        count(&records)
    })
    .await
    .unwrap()
}

/// Creates `schema.nokey` (no primary key) and `schema.compkey` (a two-column key) with `rows`
/// rows each.
async fn create_keyless_tables(client: &tokio_postgres::Client, schema: &str, rows: i64) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; \
             CREATE TABLE {schema}.nokey (id bigint NOT NULL, payload text); \
             CREATE TABLE {schema}.compkey (id bigint NOT NULL, part int NOT NULL, payload text, PRIMARY KEY (part, id)); \
             INSERT INTO {schema}.nokey SELECT g, md5(g::text) FROM generate_series(1, {rows}) g; \
             INSERT INTO {schema}.compkey SELECT g, g % 7, md5(g::text) FROM generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
}

/// The chunks of the snapshot plan in the pipeline's state file.
fn plan_chunks(name: &str) -> Vec<Value> {
    let state_file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state")
        .join(format!("{name}.slot.json"));
    let state: Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    state["snapshot_plan"]["chunks"]
        .as_array()
        .expect("a plan")
        .clone()
}

/// A table without a primary key and one with a composite key (30,000 rows each) are split
/// into page (ctid) ranges read by 4 workers: several chunks per table, and every row is in
/// Kafka exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn tables_without_a_single_column_key_are_split_by_pages() {
    let name = unique("snapctid");
    let client = pg().await;
    let rows = 30_000;
    create_keyless_tables(&client, &name, rows).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        // Five chunks per table, whatever the size.
        &format!(
            "[source.postgres]\nsnapshot_workers = 4\nsnapshot_chunk_rows = {}\n",
            rows / 5
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(300));
    for table in ["nokey", "compkey"] {
        let reads = reads_per_id(&name, table, rows as usize).await;
        assert_eq!(reads.len(), rows as usize, "{table}: every row");
        let twice = reads.values().filter(|n| **n > 1).count();
        assert_eq!(twice, 0, "{table}: {twice} rows read more than once");
    }
    assert_eq!(snapshot_rows(&sluice) as i64, 2 * rows, "rows read");
    // The plan (from the log): chunks per table.
    let log = sluice.log_text();
    let chunks: usize = log
        .lines()
        .find(|l| l.contains("snapshot: starting"))
        .and_then(|l| l.split("chunks=").nth(1))
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no plan in the log:\n{log}"));
    println!("snapshot of 2 x {rows} rows without a single-column key: {chunks} chunks");
    assert!(
        chunks >= 8,
        "both tables split into several chunks: {chunks}"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A crash in the middle of a page-range snapshot: the plan holds page ranges, and the next
/// start reads exactly the rows of the chunks not finished before the kill (counted against
/// the table), and every row is in Kafka.
#[tokio::test(flavor = "multi_thread")]
async fn killed_page_range_snapshot_reads_only_its_unfinished_chunks() {
    let name = unique("snapctidkill");
    let client = pg().await;
    let rows = 120_000;
    create_keyless_tables(&client, &name, rows).await;
    client
        .batch_execute(&format!("DROP TABLE {name}.compkey"))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot_workers = 2\nsnapshot_chunk_rows = 5000\nsnapshot_fetch_rows = 1000\n",
    );
    // Crash after the 5th batch of finished chunks was recorded (at least 5 of ~24 chunks
    // done, at most 2 per batch).
    let mut sluice = Sluice::start_with_env(&dir, &toml, port, crash_after_recorded_chunks(4));
    wait_crash(&mut sluice);
    let chunks = plan_chunks(&name);
    assert!(
        chunks.iter().all(|c| c["pages"].is_object()),
        "page ranges: {chunks:?}"
    );
    let done_before = chunks.iter().filter(|c| c["done"] == true).count();
    assert!(
        done_before > 0 && done_before < chunks.len(),
        "{done_before} of {} chunks done",
        chunks.len()
    );
    // The rows of the unfinished chunks, counted in the table by their page ranges.
    let mut unfinished_rows = 0i64;
    for chunk in chunks.iter().filter(|c| c["done"] == false) {
        let first = chunk["pages"]["first"].as_u64().unwrap();
        let end = chunk["pages"]["end"]
            .as_u64()
            .map_or(String::new(), |end| format!(" AND ctid < '({end},0)'::tid"));
        unfinished_rows += client
            .query_one(
                &format!("SELECT count(*) FROM {name}.nokey WHERE ctid >= '({first},0)'::tid{end}"),
                &[],
            )
            .await
            .unwrap()
            .get::<_, i64>(0);
    }
    sluice.env.clear();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(300));
    let second = snapshot_rows(&sluice) as i64;
    println!(
        "page-range snapshot killed with {done_before} of {} chunks finished; the second run read {second} rows, the unfinished chunks hold {unfinished_rows}",
        chunks.len()
    );
    assert_eq!(
        second, unfinished_rows,
        "only the unfinished chunks were read"
    );
    let reads = reads_per_id(&name, "nokey", rows as usize).await;
    assert_eq!(reads.len(), rows as usize, "every row");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

//! Incremental snapshots while streaming: triggered by the signal table (and killed and
//! resumed) under concurrent updates, and through the admin API with a filter; a table that
//! joins the captured set while running is snapshotted.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use serde_json::Value;

use crate::support::{
    Record, Sluice, drop_slot_and_publication, free_port, http_json, pg, pipeline_toml, read_topic,
    test_dir, unique, wait_until,
};

/// Rows of the big table: `SLUICE_IT_INCREMENTAL_ROWS` (default 100,000, which keeps the suite
/// within its time budget; the issue's size is 500,000). Chunks are a fiftieth of it. Not fewer:
/// the writer updates random rows flat out, and on a smaller table so many of a chunk's keys
/// change during its window that fewer than 80 % of the rows come from the snapshot (50,000
/// rows under load: 70 %).
fn rows() -> i64 {
    std::env::var("SLUICE_IT_INCREMENTAL_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000)
}

fn snapshot_rows(sluice: &Sluice) -> f64 {
    sluice
        .metric("sluice_source_snapshot_rows_total")
        .unwrap_or(0.0)
}

pub(crate) fn incremental_running(sluice: &Sluice) -> bool {
    sluice
        .get("/health")
        .and_then(|body| serde_json::from_str::<Value>(&body).ok())
        .is_some_and(|health| !health["incremental_snapshot"].is_null())
}

/// Every key's events in topic order — without the exact duplicates a crash replays (same
/// commit LSN, LSN and index: at-least-once) —: for each key, `v` never goes down, a deleted
/// key never comes back (ids are never reused), and at most `max_reads` snapshot rows per key.
/// Returns
/// (latest state id → v, snapshot read events, reads that followed a streamed change of the
/// same key).
fn check_order(records: &[Record], max_reads: usize) -> (HashMap<i64, i64>, usize, usize) {
    let mut state: HashMap<i64, i64> = HashMap::new();
    let mut last_v: HashMap<i64, i64> = HashMap::new();
    let mut deleted: HashMap<i64, bool> = HashMap::new();
    let mut reads_per_key: HashMap<i64, usize> = HashMap::new();
    let mut streamed_before: HashMap<i64, bool> = HashMap::new();
    let (mut reads, mut reads_after_changes) = (0, 0);
    let mut positions = std::collections::HashSet::new();
    for record in records {
        let position = (
            record.header_u64("sluice.commit_lsn"),
            record.header_u64("sluice.lsn"),
            record.header_u64("sluice.tx_index"),
        );
        if record.value.is_some() && !positions.insert(position) {
            continue; // replayed after the kill
        }
        let Some(id) = record.key.as_ref().and_then(|k| k["id"].as_i64()) else {
            continue;
        };
        let value = record.value.as_ref();
        match record.op() {
            Some(op @ ("r" | "c" | "u")) => {
                let v = value.unwrap()["after"]["v"].as_i64().unwrap();
                if op == "r" {
                    assert_eq!(
                        value.unwrap()["source"]["snapshot"],
                        "incremental",
                        "{record:?}"
                    );
                    reads += 1;
                    let n = reads_per_key.entry(id).or_default();
                    *n += 1;
                    assert!(*n <= max_reads, "key {id} read {n} times");
                    if streamed_before.get(&id) == Some(&true) {
                        reads_after_changes += 1;
                    }
                } else {
                    streamed_before.insert(id, true);
                }
                assert!(
                    !deleted.get(&id).copied().unwrap_or(false),
                    "key {id} came back after its delete with op {op} (v {v}): an older snapshot row overwrote a streamed delete"
                );
                let previous = last_v.get(&id).copied().unwrap_or(i64::MIN);
                assert!(
                    v >= previous,
                    "key {id}: op {op} with v {v} after v {previous}: an older snapshot row overwrote a newer streamed change"
                );
                last_v.insert(id, v);
                state.insert(id, v);
            }
            Some("d") => {
                deleted.insert(id, true);
                streamed_before.insert(id, true);
                state.remove(&id);
            }
            _ => {}
        }
    }
    (state, reads, reads_after_changes)
}

/// Updates (`v = v + 1`, 50 random rows per statement), deletes and inserts (new ids) rows
/// of `table` until `stop`; returns the rows changed.
pub(crate) fn start_writer(
    table: String,
    rows: i64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let client = pg().await;
        let mut changes = 0u64;
        let mut next_id = rows * 10;
        while !stop.load(Ordering::Relaxed) {
            let (ids, action) = {
                let mut rng = rand::rng();
                let ids: Vec<String> = (0..50)
                    .map(|_| rng.random_range(1..=rows).to_string())
                    .collect();
                (ids, rng.random_range(0..20))
            };
            let (sql, count) = match action {
                0 => (format!("DELETE FROM {table} WHERE id = {}", ids[0]), 1),
                1 => {
                    next_id += 1;
                    (
                        format!("INSERT INTO {table} VALUES ({next_id}, 1, 'new')"),
                        1,
                    )
                }
                _ => (
                    format!(
                        "UPDATE {table} SET v = v + 1 WHERE id IN ({})",
                        ids.join(",")
                    ),
                    50,
                ),
            };
            client.batch_execute(&sql).await.unwrap();
            changes += count;
        }
        changes
    })
}

pub(crate) async fn table_contents(
    client: &tokio_postgres::Client,
    table: &str,
) -> HashMap<i64, i64> {
    client
        .query(&format!("SELECT id, v FROM {table}"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0), r.get::<_, i64>(1)))
        .collect()
}

/// 50,000 rows (`SLUICE_IT_INCREMENTAL_ROWS`; 500,000 for a longer run) that predate the
/// pipeline (`snapshot = "never"`) are snapshotted on a signal, in 50 chunks,
/// while another client updates, deletes and inserts; the process is SIGKILLed in the middle
/// and resumes the snapshot where its confirmed progress stands. Per key, no snapshot row is
/// older than a streamed change before it, and the newest event per key equals the table.
#[tokio::test(flavor = "multi_thread")]
async fn incremental_snapshot_under_concurrent_writes_never_overwrites_newer_changes() {
    let name = unique("incr");
    let client = pg().await;
    let rows = rows();
    let table = format!("{name}.big");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {table} (id bigint PRIMARY KEY, v bigint NOT NULL, payload text); \
             INSERT INTO {table} SELECT g, 0, md5(g::text) FROM generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\nsnapshot = \"never\"\nsignal_table = \"{name}.sluice_signal\"\nincremental_chunk_rows = {}\n",
            (rows / 50).max(1)
        ),
    );
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(table.clone(), rows, Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(500)).await;
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.sluice_signal VALUES ('sig-1', 'execute-snapshot', \
             '{{\"data-collections\": [\"{table}\"], \"type\": \"incremental\"}}')"
        ))
        .await
        .unwrap();
    wait_until("40 % of the snapshot", Duration::from_secs(300), || {
        snapshot_rows(&sluice) >= (rows * 4 / 10) as f64
    });
    sluice.kill();
    let first = rows * 4 / 10;
    let state_file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it/state")
        .join(format!("{name}.slot.json"));
    let state: Value = serde_json::from_slice(&std::fs::read(&state_file).unwrap()).unwrap();
    let progress = state["incremental"]["queue"][0].clone();
    assert_eq!(progress["table"], table.as_str(), "state: {state}");
    let resumed_after: i64 = progress["after"][0]
        .as_str()
        .expect("progress recorded before the kill")
        .parse()
        .unwrap();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(60));
    wait_until("the snapshot's resumption", Duration::from_secs(60), || {
        snapshot_rows(&sluice) > 0.0
    });
    wait_until("the end of the snapshot", Duration::from_secs(300), || {
        !incremental_running(&sluice)
    });
    let second = snapshot_rows(&sluice);
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let changes = writer.await.unwrap();
    let expected = table_contents(&client, &table).await;
    let topic = format!("{name}.{table}");
    let target = expected.clone();
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(240), |records| {
            check_order(records, 2).0 == target
        })
    })
    .await
    .unwrap();
    let (state, reads, reads_after_changes) = check_order(&records, 2);
    let missing = expected.keys().filter(|k| !state.contains_key(k)).count();
    let differ = expected
        .iter()
        .filter(|(k, v)| state.get(k).is_some_and(|s| s != *v))
        .count();
    assert!(
        state == expected,
        "{missing} rows missing in Kafka, {differ} with another value"
    );
    println!(
        "incremental snapshot of {rows} rows under {changes} concurrent changes, killed after ≥{first} rows (progress after id {resumed_after}); second run read {second} rows; {reads} read events, {reads_after_changes} of them after a streamed change of their key; per-key order holds and Kafka equals the table"
    );
    assert!(
        reads as i64 >= rows * 8 / 10,
        "most rows came from the snapshot: {reads}"
    );
    assert!(
        resumed_after > 0 && second < (rows - resumed_after) as f64 + 5_000.0,
        "the second run re-read confirmed chunks: {second} rows after id {resumed_after}"
    );
    assert!(
        state_after_done(&state_file),
        "the finished snapshot is gone from the state file's queue"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

fn state_after_done(state_file: &std::path::Path) -> bool {
    let state: Value = serde_json::from_slice(&std::fs::read(state_file).unwrap()).unwrap();
    state["incremental"]["queue"]
        .as_array()
        .is_some_and(Vec::is_empty)
}

/// The admin API snapshots only the rows its filter selects; a table moved into the captured
/// schema while running is snapshotted whole; a table without a primary key is refused in the
/// log and the others go on.
#[tokio::test(flavor = "multi_thread")]
async fn api_snapshot_with_a_filter_and_a_table_joining_while_running() {
    let name = unique("incrapi");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE SCHEMA {name}_x; \
             CREATE TABLE {name}.t1 (id bigint PRIMARY KEY, v bigint NOT NULL); \
             INSERT INTO {name}.t1 SELECT g, 0 FROM generate_series(1, 1000) g; \
             CREATE TABLE {name}.nokey (id bigint, v bigint); \
             INSERT INTO {name}.nokey SELECT g, 0 FROM generate_series(1, 10) g; \
             CREATE TABLE {name}_x.t2 (id bigint PRIMARY KEY, v bigint NOT NULL); \
             INSERT INTO {name}_x.t2 SELECT g, 0 FROM generate_series(1, 700) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"when_needed\"\nincremental_chunk_rows = 64\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    // The initial snapshot read t1 and nokey; count what's there, then ask for a filtered one.
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(
            r#"{{"tables": ["{name}.t1", "{name}.nokey"], "filter": "id % 10 = 0", "id": "api-1"}}"#
        ),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        r#"{"tables": ["nodot"]}"#,
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("not schema.table"), "{body}");
    let t1 = format!("{name}.{name}.t1");
    let incremental_reads = |records: &[Record]| -> Vec<i64> {
        records
            .iter()
            .filter(|r| {
                r.value
                    .as_ref()
                    .is_some_and(|v| v["op"] == "r" && v["source"]["snapshot"] == "incremental")
            })
            .map(|r| r.key.as_ref().unwrap()["id"].as_i64().unwrap())
            .collect()
    };
    let records = tokio::task::spawn_blocking({
        let t1 = t1.clone();
        move || {
            read_topic(&t1, Duration::from_secs(60), |records| {
                incremental_reads(records).len() >= 100
            })
        }
    })
    .await
    .unwrap();
    let mut ids = incremental_reads(&records);
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=100).map(|n| n * 10).collect::<Vec<i64>>(),
        "exactly the filtered rows, once"
    );
    wait_until(
        "the refusal of the table without a key",
        Duration::from_secs(30),
        || sluice.log_text().contains("has no primary key"),
    );
    // A table moved into the captured schema: its rows never streamed; one change makes the
    // stream see it, and it is snapshotted.
    client
        .batch_execute(&format!(
            "ALTER TABLE {name}_x.t2 SET SCHEMA {name}; UPDATE {name}.t2 SET v = 1 WHERE id = 1;"
        ))
        .await
        .unwrap();
    let t2 = format!("{name}.{name}.t2");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&t2, Duration::from_secs(60), |records| {
            incremental_reads(records).len() >= 700
        })
    })
    .await
    .unwrap();
    let mut latest: HashMap<i64, i64> = HashMap::new();
    for record in &records {
        let id = record.key.as_ref().unwrap()["id"].as_i64().unwrap();
        latest.insert(
            id,
            record.value.as_ref().unwrap()["after"]["v"]
                .as_i64()
                .unwrap(),
        );
    }
    assert_eq!(
        latest.len(),
        700,
        "every row of the joined table is in Kafka"
    );
    assert_eq!(
        latest[&1], 1,
        "the streamed update is the newest event of id 1"
    );
    println!(
        "API snapshot: 100 filtered rows of 1000; joined table: {} events for 700 rows",
        records.len()
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// DBLog's race on PostgreSQL: a transaction whose commit is in the WAL — decoded and
/// streamed — but not yet visible to other sessions (it waits for a synchronous standby after
/// writing its commit record; the same state lasts microseconds on every commit) must not let
/// an incremental chunk read before it became visible publish the older row after it. The
/// test holds such a commit open with a synchronous standby that never comes, snapshots the
/// table, releases the commit, and checks the streamed update stays the newest event.
#[tokio::test(flavor = "multi_thread")]
async fn a_streamed_commit_not_yet_visible_is_not_overwritten_by_a_chunk() {
    let cluster =
        tokio::task::spawn_blocking(|| crate::support::ThrowawayPg::start(&["wal_level=logical"]))
            .await
            .unwrap();
    let name = unique("incrrace");
    let client = crate::support::pg_at(&cluster.url).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id bigint PRIMARY KEY, v bigint NOT NULL); \
             INSERT INTO {name}.t SELECT g, 0 FROM generate_series(1, 100) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "")
        .replacen(&crate::support::stack().pg_url, &cluster.url, 1)
        .replace(
            "[source.postgres]\n",
            "[source.postgres]\nsnapshot = \"never\"\n",
        );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    // From now on a commit with synchronous_commit = on waits for a standby that never comes:
    // its commit record is written (and decoded), but it stays invisible to other sessions.
    for sql in [
        "SET synchronous_commit = local",
        "ALTER SYSTEM SET synchronous_standby_names = 'sluice_never_there'",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    hold_commits_until_effective(&client, &cluster.url, &name).await;
    let stuck_url = cluster.url.clone();
    let stuck_table = format!("{name}.t");
    let stuck = tokio::spawn(async move {
        let stuck = crate::support::pg_at(&stuck_url).await;
        stuck
            .batch_execute(&format!(
                "SET synchronous_commit = on; UPDATE {stuck_table} SET v = 1 WHERE id = 5"
            ))
            .await
            .unwrap();
    });
    let topic = format!("{name}.{name}.t");
    let streamed = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || {
            read_topic(&topic, Duration::from_secs(60), |records| {
                !records.is_empty()
            })
        }
    })
    .await
    .unwrap();
    assert_eq!(streamed.len(), 1, "{streamed:?}");
    assert_eq!(streamed[0].value.as_ref().unwrap()["after"]["v"], 1);
    assert_eq!(
        sync_rep_waiters(&client, &format!("%UPDATE {name}.t %")).await,
        1,
        "the update's commit waits for the standby"
    );
    let visible: i64 = client
        .query_one(&format!("SELECT v FROM {name}.t WHERE id = 5"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        visible, 0,
        "the streamed update is not visible to other sessions yet"
    );
    assert!(
        !stuck.is_finished(),
        "the update's commit waits for the standby"
    );
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{name}.t"], "id": "race"}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    // A chunk read while the commit is invisible must be read again (not accepted): wait until
    // sluice says so, then release the commit.
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    while sluice.log_text().matches("reading it again").count() == 0 {
        assert!(
            Instant::now() < deadline,
            "no chunk was re-read while a decoded commit was invisible; log:\n{}",
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for sql in [
        "ALTER SYSTEM RESET synchronous_standby_names",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    tokio::time::timeout(Duration::from_secs(30), stuck)
        .await
        .expect("the update's commit completes once released")
        .unwrap();
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |records| {
            records
                .iter()
                .filter(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r"))
                .count()
                >= 100
        })
    })
    .await
    .unwrap();
    let mut latest: HashMap<i64, (String, i64)> = HashMap::new();
    for record in &records {
        let value = record.value.as_ref().unwrap();
        latest.insert(
            record.key.as_ref().unwrap()["id"].as_i64().unwrap(),
            (
                value["op"].as_str().unwrap().to_owned(),
                value["after"]["v"].as_i64().unwrap(),
            ),
        );
    }
    assert_eq!(latest.len(), 100, "every row in Kafka");
    assert_eq!(
        latest[&5].1, 1,
        "id 5: the newest event is {:?}; a chunk read while the streamed update was invisible overwrote it",
        latest[&5]
    );
    assert!(
        latest.iter().all(|(&id, (_, v))| *v == i64::from(id == 5)),
        "every other row is its snapshot read: {latest:?}"
    );
    let rereads = sluice.log_text().matches("reading it again").count();
    assert!(rereads >= 1, "re-reads logged: {rereads}");
    println!(
        "race: {} events; id 5 newest {:?}; re-reads logged: {rereads}",
        records.len(),
        latest[&5],
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
    drop(cluster);
}

/// Sessions whose commit waits for a synchronous standby, running a statement like `query`.
async fn sync_rep_waiters(client: &tokio_postgres::Client, query: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep' AND query LIKE $1",
            &[&query],
        )
        .await
        .unwrap()
        .get(0)
}

/// `pg_reload_conf()` returns before the checkpointer has read the new
/// `synchronous_standby_names` (it publishes "standbys are defined" to the backends); a commit
/// made meanwhile does not wait. Commit probes to a table outside the pipeline's schema until
/// one is seen waiting, then cancel it (the cancelled probe commits locally).
async fn hold_commits_until_effective(client: &tokio_postgres::Client, url: &str, name: &str) {
    let probe_table = format!("{name}_probe.p");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}_probe; CREATE TABLE {probe_table} (v bigint)"
        ))
        .await
        .unwrap();
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(30));
    loop {
        let probe = crate::support::pg_at(url).await;
        let pid: i32 = probe
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        let insert = format!("SET synchronous_commit = on; INSERT INTO {probe_table} VALUES (1)");
        let commit = tokio::spawn(async move { probe.batch_execute(&insert).await });
        let waiting = loop {
            if sync_rep_waiters(client, &format!("%INSERT INTO {probe_table}%")).await > 0 {
                break true;
            }
            if commit.is_finished() {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        if waiting {
            client
                .query_one("SELECT pg_cancel_backend($1)", &[&pid])
                .await
                .unwrap();
            let _ = commit.await;
            return;
        }
        assert!(
            Instant::now() < deadline,
            "commits never started waiting for the synchronous standby"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The admin API answers a snapshot request once it is in the state file: a crash right after
/// the answer does not lose it, the restarted pipeline carries it out.
#[tokio::test(flavor = "multi_thread")]
async fn an_accepted_api_request_survives_a_crash() {
    let name = unique("incrdur");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id bigint PRIMARY KEY, v bigint NOT NULL); \
             INSERT INTO {name}.t SELECT g, 0 FROM generate_series(1, 1000) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\n",
    );
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{name}.t"], "filter": "id % 10 = 0", "id": "durable"}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(answer["recorded"], true, "{body}");
    sluice.kill();
    let state = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("it")
            .join("state")
            .join(format!("{name}.slot.json")),
    )
    .unwrap();
    assert!(
        state.contains("durable"),
        "the request is in the state file: {state}"
    );
    sluice.restart();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |records| {
            records
                .iter()
                .filter_map(|r| r.key.as_ref())
                .map(|k| k["id"].as_i64().unwrap())
                .collect::<std::collections::HashSet<i64>>()
                .len()
                >= 100
        })
    })
    .await
    .unwrap();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| {
            let value = r.value.as_ref().unwrap();
            assert_eq!(value["op"], "r", "{value}");
            r.key.as_ref().unwrap()["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, (1..=100).map(|n| n * 10).collect::<Vec<i64>>());
    println!(
        "durable API request: {} records for 100 rows after a crash",
        records.len()
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

//! `delivery.guarantee = "exactly_once"`: sluice is crashed again and again — at crash points
//! between a transaction's records and its commit and between the commit and the slot's
//! confirmation, and by SIGKILL at random (seeded, reproducible) moments — and a consumer with
//! `isolation.level = read_committed` sees every change exactly once: no duplicate, no gap.
//!
//! Sizes: `SLUICE_IT_EOS_ROWS` (streaming, default 20,000), `SLUICE_IT_EOS_SNAPSHOT_ROWS`
//! (initial snapshot, default 50,000) and `SLUICE_IT_EOS_INCREMENTAL_ROWS` (incremental
//! snapshot, default 20,000); `SLUICE_IT_EOS_SEED` replays the kill moments of a run (each test
//! prints its seed). The must-show sizes are 200,000 and 500,000.

use std::collections::HashMap;
use std::time::Duration;

use rand::{Rng, SeedableRng};

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, http_json, pg, pipeline_toml, read_topic_with,
    test_dir, unique, wait_until,
};

fn env_or(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The kill moments' generator: `SLUICE_IT_EOS_SEED`, else a fresh seed (printed).
fn rng(test: &str) -> rand::rngs::StdRng {
    let seed = std::env::var("SLUICE_IT_EOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| rand::rng().random::<u64>());
    println!("{test}: SLUICE_IT_EOS_SEED={seed}");
    rand::rngs::StdRng::seed_from_u64(seed)
}

const EXACTLY_ONCE: &str = "\n[delivery]\nguarantee = \"exactly_once\"\n";

/// Reads `topic` as a `read_committed` consumer until every id of `1..=count` was seen and
/// nothing more arrives; returns the records per id.
fn read_committed_ids(topic: &str, count: usize, timeout: Duration) -> HashMap<i64, usize> {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut counted = 0;
    let records = read_topic_with(
        topic,
        timeout,
        &[("isolation.level", "read_committed")],
        |records| {
            for record in &records[counted..] {
                if let Some(id) = record.key.as_ref().and_then(|k| k["id"].as_i64()) {
                    *seen.entry(id).or_default() += 1;
                }
            }
            counted = records.len();
            seen.len() >= count
        },
    );
    let mut per_id: HashMap<i64, usize> = HashMap::new();
    for record in &records {
        let id = record.key.as_ref().unwrap()["id"].as_i64().unwrap();
        *per_id.entry(id).or_default() += 1;
    }
    per_id
}

/// Asserts that ids `1..=rows` each appear exactly once; prints the counts.
fn assert_exactly_once(what: &str, per_id: &HashMap<i64, usize>, rows: i64, sluice: &Sluice) {
    let missing: Vec<i64> = (1..=rows)
        .filter(|id| !per_id.contains_key(id))
        .take(10)
        .collect();
    let missing_count = (1..=rows).filter(|id| !per_id.contains_key(id)).count();
    let duplicates: usize = per_id.values().map(|n| n.saturating_sub(1)).sum();
    let duplicated: Vec<(i64, usize)> = per_id
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, n)| (*id, *n))
        .take(10)
        .collect();
    println!(
        "{what}: {} distinct ids of {rows}, {duplicates} duplicates, {missing_count} missing (read_committed)",
        per_id.len()
    );
    let tail: String = {
        let log = sluice.log_text();
        log.lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("failpoint"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        missing.is_empty(),
        "{what}: {missing_count} ids missing, e.g. {missing:?}\nlog warnings:\n{tail}"
    );
    assert!(
        duplicated.is_empty(),
        "{what}: {duplicates} duplicates seen by a read_committed consumer, e.g. (id, times) {duplicated:?}\nlog warnings:\n{tail}"
    );
}

/// Creates schema `name` with table `t` holding rows `1..=rows` of ~200 bytes.
async fn create_table_of(client: &tokio_postgres::Client, name: &str, rows: i64) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY, payload text);
             INSERT INTO {name}.t SELECT g, md5(g::text) || repeat('p', 168) FROM generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
}

/// Runs sluice with `failpoint` armed until it aborts there (it must: the load keeps
/// transactions coming), then restarts it without.
fn crash_at(sluice: &mut Sluice, failpoint: &str, passes: u32) {
    sluice.kill();
    sluice.env = vec![(
        "FAILPOINTS".to_owned(),
        format!("{failpoint}={passes}*off->return"),
    )];
    sluice.restart();
    wait_until(
        &format!("sluice to abort at {failpoint} (build with --features sluice/failpoints)"),
        Duration::from_secs(120),
        || sluice.exited().is_some(),
    );
    assert!(
        sluice
            .log_text()
            .contains(&format!("failpoint {failpoint}: aborting")),
        "sluice exited, but not at {failpoint}:\n{}",
        sluice.log_text()
    );
    sluice.kill();
    sluice.env.clear();
    sluice.restart();
}

/// Streaming: rows inserted in 250 transactions over ~25 s while sluice is crashed at both crash points
/// and then SIGKILLed five times at random moments; a read_committed consumer sees each row
/// exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_streaming_survives_crashes_without_duplicates() {
    let name = unique("eos_stream");
    let rows = env_or("SLUICE_IT_EOS_ROWS", 20_000);
    let mut rng = rng("exactly_once_streaming");
    let client = pg().await;
    create_table_of(&client, &name, 0).await;
    let port = free_port();
    let dir = test_dir(&name);
    let mut sluice = Sluice::start(
        &dir,
        &pipeline_toml(&name, &name, &name, port, EXACTLY_ONCE),
        port,
    );
    sluice.wait_streaming(Duration::from_secs(60));

    let writer = {
        let schema = name.clone();
        tokio::spawn(async move {
            // 250 transactions over ~25 s, whatever the size: the crashes fall into the load.
            let client = pg().await;
            let per_tx = (rows / 250).max(1);
            let mut start = 1;
            while start <= rows {
                let end = (start + per_tx - 1).min(rows);
                client
                    .batch_execute(&format!(
                        "INSERT INTO {schema}.t SELECT g, md5(g::text) || repeat('p', 168) FROM generate_series({start}, {end}) g"
                    ))
                    .await
                    .unwrap();
                start = end + 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    // Deterministic crash points first: after a transaction's records and offsets record were
    // produced but before its commit; after its commit but before the slot is confirmed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::block_in_place(|| {
        crash_at(&mut sluice, "exactly_once::before_commit", 3);
        crash_at(&mut sluice, "exactly_once::after_commit", 2);
    });
    let mut kills = 0;
    while kills < 5 {
        let pause = rng.random_range(300..1500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        sluice.kill();
        kills += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
        sluice.restart();
    }
    let writer_done = writer.is_finished();
    writer.await.unwrap();
    println!(
        "exactly_once_streaming: {kills} SIGKILLs, the load still running at the last: {}",
        !writer_done
    );
    let topic = format!("{name}.{name}.t");
    let per_id = tokio::task::spawn_blocking(move || {
        read_committed_ids(&topic, rows as usize, Duration::from_secs(300))
    })
    .await
    .unwrap();
    assert_exactly_once("exactly_once_streaming", &per_id, rows, &sluice);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// The initial snapshot (4 workers, chunks of a 25th of the table) of a table written the whole
/// time (inserts, updates and deletes in small transactions), crashed once in the first run of
/// the snapshot and once in the resumed one (whose rows are read under a newer snapshot), then
/// at both exactly-once crash points, SIGKILLed at random moments and twice more while
/// streaming. A read_committed consumer sees every change once: per key the versions are
/// contiguous and never repeated (a row changed after the consistent point comes from the
/// stream alone, not also as `op: "r"`), `r` only first, `d` only last, and the newest event
/// per key equals the table.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_snapshot_survives_crashes_without_duplicates() {
    let name = unique("eos_snap");
    let rows = env_or("SLUICE_IT_EOS_SNAPSHOT_ROWS", 50_000);
    let mut rng = rng("exactly_once_snapshot");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY, v int NOT NULL DEFAULT 0, payload text);
             INSERT INTO {name}.t SELECT g, 0, md5(g::text) || repeat('p', 168) FROM generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
    let stop_writing = tokio_util::sync::CancellationToken::new();
    let writer = tokio::spawn(write_while_snapshotting(
        name.clone(),
        rows,
        rng.random(),
        stop_writing.clone(),
    ));
    let port = free_port();
    let dir = test_dir(&name);
    let chunk_rows = (rows / 25).max(1000);
    let toml = pipeline_toml(&name, &name, &name, port, EXACTLY_ONCE).replace(
        "[source.postgres]\n",
        &format!("[source.postgres]\nsnapshot_workers = 4\nsnapshot_chunk_rows = {chunk_rows}\n"),
    );
    let crash = "failpoint snapshot::chunks_recorded: aborting";
    // In the first run of the snapshot (under the slot's exported snapshot), after its third
    // batch of finished chunks.
    let mut sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "snapshot::chunks_recorded=2*off->return".to_owned(),
        )],
    );
    let aborted = |sluice: &mut Sluice| {
        wait_until(
            "sluice to abort at snapshot::chunks_recorded (build with --features sluice/failpoints)",
            Duration::from_secs(120),
            || sluice.exited().is_some(),
        );
    };
    tokio::task::block_in_place(|| aborted(&mut sluice));
    let first_run = sluice.log_text();
    assert!(
        first_run.contains(crash),
        "not aborted in the snapshot:\n{first_run}"
    );
    assert!(
        first_run.contains("exported=true"),
        "the first run did not read under the exported snapshot:\n{first_run}"
    );
    // In the resumed snapshot, after its second batch of finished chunks.
    sluice.env = vec![(
        "FAILPOINTS".to_owned(),
        "snapshot::chunks_recorded=1*off->return".to_owned(),
    )];
    sluice.restart();
    tokio::task::block_in_place(|| aborted(&mut sluice));
    let second_run = sluice.log_text()[first_run.len()..].to_owned();
    assert!(
        second_run.contains("resuming under a new snapshot") && second_run.contains(crash),
        "the second run did not abort in a resumed snapshot:\n{second_run}"
    );
    sluice.kill();
    sluice.env.clear();
    sluice.restart();
    tokio::task::block_in_place(|| {
        crash_at(&mut sluice, "exactly_once::before_commit", 2);
        crash_at(&mut sluice, "exactly_once::after_commit", 2);
    });
    let mut during_snapshot = 0;
    for _ in 0..3 {
        let pause = rng.random_range(500..2500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        if sluice
            .get("/health")
            .is_some_and(|b| b.contains("\"state\":\"snapshotting\""))
        {
            during_snapshot += 1;
        }
        sluice.kill();
        tokio::time::sleep(Duration::from_millis(100)).await;
        sluice.restart();
    }
    tokio::task::block_in_place(|| sluice.wait_streaming(Duration::from_secs(600)));
    // Twice more while streaming, the table still written.
    for _ in 0..2 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
        sluice.kill();
        tokio::time::sleep(Duration::from_millis(100)).await;
        sluice.restart();
    }
    assert!(
        !writer.is_finished(),
        "the writer stopped before the last kill"
    );
    stop_writing.cancel();
    let changes = writer.await.unwrap();
    println!(
        "exactly_once_snapshot: 2 aborts in the snapshot (one resumed), 4 at crash points, 5 SIGKILLs ({during_snapshot} while snapshotting), {changes} changes written meanwhile"
    );
    let table: HashMap<i64, i64> = client
        .query(&format!("SELECT id, v FROM {name}.t"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get::<_, i64>(0), i64::from(r.get::<_, i32>(1))))
        .collect();
    let topic = format!("{name}.{name}.t");
    let events = tokio::task::spawn_blocking({
        let table = table.clone();
        move || read_committed_changes(&topic, &table, Duration::from_secs(300))
    })
    .await
    .unwrap();
    assert_every_change_once("exactly_once_snapshot", &events, &table, &sluice);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// One change event of a key, as a read_committed consumer saw it: `op` and the row's version
/// after it (`None` for a delete).
type Change = (char, Option<i64>);

/// Writes `{schema}.t` until `stop`: transactions of 20 inserts (new ids after `rows`), 10
/// updates (`v = v + 1`) and 2 deletes of random live rows, one every ~40 ms. Returns the
/// changes written.
async fn write_while_snapshotting(
    schema: String,
    rows: i64,
    seed: u64,
    stop: tokio_util::sync::CancellationToken,
) -> u64 {
    let client = pg().await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut live: Vec<i64> = (1..=rows).collect();
    let mut next = rows + 1;
    let mut changes = 0;
    while !stop.is_cancelled() {
        let mut sql = format!(
            "BEGIN; INSERT INTO {schema}.t SELECT g, 0, md5(g::text) FROM generate_series({next}, {}) g;",
            next + 19
        );
        live.extend(next..next + 20);
        next += 20;
        for _ in 0..10 {
            let id = live[rng.random_range(0..live.len())];
            sql.push_str(&format!("UPDATE {schema}.t SET v = v + 1 WHERE id = {id};"));
        }
        for _ in 0..2 {
            let id = live.swap_remove(rng.random_range(0..live.len()));
            sql.push_str(&format!("DELETE FROM {schema}.t WHERE id = {id};"));
        }
        sql.push_str("COMMIT;");
        client.batch_execute(&sql).await.unwrap();
        changes += 32;
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    changes
}

/// Reads `topic` as a read_committed consumer until the newest event of every key equals
/// `table` (a delete for a key not in it) and nothing more arrives; returns the changes per key
/// in order (tombstones left out).
fn read_committed_changes(
    topic: &str,
    table: &HashMap<i64, i64>,
    timeout: Duration,
) -> HashMap<i64, Vec<Change>> {
    let mut newest: HashMap<i64, Change> = HashMap::new();
    let mut counted = 0;
    let change = |value: &serde_json::Value| -> Change {
        let op = value["op"]
            .as_str()
            .and_then(|o| o.chars().next())
            .unwrap_or('?');
        (op, value["after"]["v"].as_i64())
    };
    let records = read_topic_with(
        topic,
        timeout,
        &[("isolation.level", "read_committed")],
        |records| {
            for record in &records[counted..] {
                let (Some(key), Some(value)) = (&record.key, &record.value) else {
                    continue;
                };
                newest.insert(key["id"].as_i64().unwrap(), change(value));
            }
            counted = records.len();
            table.iter().all(|(id, v)| {
                newest
                    .get(id)
                    .is_some_and(|c| c.0 != 'd' && c.1 == Some(*v))
            }) && newest
                .iter()
                .all(|(id, c)| table.contains_key(id) || c.0 == 'd')
        },
    );
    let mut per_key: HashMap<i64, Vec<Change>> = HashMap::new();
    for record in &records {
        let (Some(key), Some(value)) = (&record.key, &record.value) else {
            continue;
        };
        per_key
            .entry(key["id"].as_i64().unwrap())
            .or_default()
            .push(change(value));
    }
    per_key
}

/// Asserts that every key's changes are each seen once, in order, ending at the table's row.
fn assert_every_change_once(
    what: &str,
    events: &HashMap<i64, Vec<Change>>,
    table: &HashMap<i64, i64>,
    sluice: &Sluice,
) {
    let mut duplicates = Vec::new();
    let mut disorder = Vec::new();
    let mut wrong_newest = Vec::new();
    for (id, changes) in events {
        for window in changes.windows(2) {
            let ((op, version), (next_op, next_version)) = (window[0], window[1]);
            match (version, next_version) {
                // The same version twice: one change delivered twice (`r` then `c`/`u`).
                (Some(a), Some(b)) if b == a => duplicates.push((*id, changes.clone())),
                (Some(a), Some(b)) if b != a + 1 => disorder.push((*id, changes.clone())),
                _ => {}
            }
            if next_op == 'r' || next_op == 'c' || op == 'd' {
                disorder.push((*id, changes.clone()));
            }
        }
        let newest = changes.last().copied();
        let expected = table.get(id);
        let right = match (newest, expected) {
            (Some((op, version)), Some(v)) => op != 'd' && version == Some(*v),
            (Some((op, _)), None) => op == 'd',
            (None, _) => false,
        };
        if !right {
            wrong_newest.push((*id, changes.clone(), expected.copied()));
        }
    }
    let missing: Vec<&i64> = table
        .keys()
        .filter(|id| !events.contains_key(id))
        .take(10)
        .collect();
    let changes: usize = events.values().map(Vec::len).sum();
    println!(
        "{what}: {} keys, {changes} changes, {} keys with a change twice, {} out of order, {} missing, {} not equal to the table (read_committed)",
        events.len(),
        duplicates.len(),
        disorder.len(),
        table.keys().filter(|id| !events.contains_key(id)).count(),
        wrong_newest.len()
    );
    let tail = || -> String {
        sluice
            .log_text()
            .lines()
            .filter(|l| {
                l.contains("WARN")
                    || l.contains("ERROR")
                    || l.contains("failpoint")
                    || l.contains("snapshot")
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        missing.is_empty(),
        "{what}: keys in the table never seen, e.g. {missing:?}\nlog:\n{}",
        tail()
    );
    assert!(
        duplicates.is_empty(),
        "{what}: {} keys with a change seen twice by a read_committed consumer, e.g. {:?}\nlog:\n{}",
        duplicates.len(),
        &duplicates[..duplicates.len().min(5)],
        tail()
    );
    assert!(
        disorder.is_empty(),
        "{what}: {} keys with changes out of order or missing in between, e.g. {:?}",
        disorder.len(),
        &disorder[..disorder.len().min(5)]
    );
    assert!(
        wrong_newest.is_empty(),
        "{what}: {} keys whose newest event is not the table's row, e.g. (id, changes, table's v) {:?}",
        wrong_newest.len(),
        &wrong_newest[..wrong_newest.len().min(5)]
    );
}

/// An incremental snapshot (2,000-row chunks, transactions of at most 64 kB, so a chunk would
/// span several) crashed twice between a transaction's commit and the slot's confirmation (at
/// the third commit of a run: inside the first chunk, were chunks split) and then SIGKILLed
/// three times at random moments: a read_committed consumer sees each row once.
/// A chunk's rows commit in one transaction with the progress after it, so a restart resumes
/// after the last committed chunk instead of reading it again.
#[tokio::test(flavor = "multi_thread")]
async fn exactly_once_incremental_snapshot_survives_crashes_without_duplicates() {
    let name = unique("eos_incr");
    let rows = env_or("SLUICE_IT_EOS_INCREMENTAL_ROWS", 20_000);
    let mut rng = rng("exactly_once_incremental");
    let client = pg().await;
    create_table_of(&client, &name, rows).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(
        &name,
        &name,
        &name,
        port,
        &format!("{EXACTLY_ONCE}transaction_max_bytes = 65536\n"),
    )
    .replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\nincremental_chunk_rows = 2000\n",
    );
    // The snapshot's chunks are the only transactions: the first run aborts after its third
    // commit (the request is committed with the first chunk, so every later run resumes it).
    let mut sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "exactly_once::after_commit=2*off->return".to_owned(),
        )],
    );
    tokio::task::block_in_place(|| sluice.wait_streaming(Duration::from_secs(120)));
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{name}.t"], "id": "eos-incremental"}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    let topic = format!("{name}.{name}.t");
    tokio::task::block_in_place(|| {
        wait_until(
            "sluice to abort at exactly_once::after_commit (build with --features sluice/failpoints)",
            Duration::from_secs(120),
            || sluice.exited().is_some(),
        );
        assert!(
            sluice
                .log_text()
                .contains("failpoint exactly_once::after_commit"),
            "{}",
            sluice.log_text()
        );
        crash_at(&mut sluice, "exactly_once::after_commit", 2);
    });
    for _ in 0..3 {
        let pause = rng.random_range(300..1500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        sluice.kill();
        tokio::time::sleep(Duration::from_millis(100)).await;
        sluice.restart();
    }
    tokio::task::block_in_place(|| sluice.wait_streaming(Duration::from_secs(120)));
    let per_id = tokio::task::spawn_blocking(move || {
        read_committed_ids(&topic, rows as usize, Duration::from_secs(300))
    })
    .await
    .unwrap();
    assert_exactly_once("exactly_once_incremental", &per_id, rows, &sluice);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

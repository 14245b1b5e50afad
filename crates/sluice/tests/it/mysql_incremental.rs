//! MySQL/MariaDB incremental snapshots while streaming (DBLog watermarks in the signal table),
//! against both servers of the dev stack: requested through the signal table under concurrent
//! inserts, updates and deletes (and once crashed mid-way and resumed), and through the admin
//! API with a filter.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use serde_json::Value;

use crate::mysql::{Server, keyed_changes, pipeline_with, state_file, table_rows, table_with_rows};
use crate::support::{
    Record, Sluice, free_port, http_json, read_topic, test_dir, unique, wait_until,
};

/// Rows of the snapshotted table.
const ROWS: u32 = 4000;

/// Rows per chunk: ten chunks.
const CHUNK_ROWS: u32 = 400;

/// The failpoint that widens each chunk's window between its read and its closing watermark
/// (so the concurrent writer changes keys of the chunk just read, inside the window).
const WIDE_WINDOWS: &str = "mysql_incremental::close=return(150)";

/// Creates database `name` with `t` (see [`table_with_rows`], `v` = 0), and lets the
/// replication user create and write the signal table there.
async fn table_with_signal_table(server: Server, name: &str, rows: u32) -> mysql_async::Conn {
    let mut root = table_with_rows(server, name, rows, |_| 0).await;
    // Watermarks are rows of the signal table, which sluice creates when missing.
    root.query_drop(format!(
        "GRANT CREATE, INSERT, DELETE ON {name}.* TO 'sluice'@'127.0.0.1'"
    ))
    .await
    .unwrap();
    root
}

/// Updates (`v = v + 1`, so `v` only grows per key), deletes and inserts (new ids, never
/// reused) rows of `database.t` until `stop`, with `writers` connections side by side (so
/// transactions commit in groups), writer `w` on the ids `≡ w` modulo their number; returns
/// the statements run.
fn start_writer(
    server: Server,
    database: String,
    rows: u32,
    writers: u64,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (database, stop) = (database.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut conn = server.root().await;
                let rows = u64::from(rows);
                // An id of this writer's: w, w + writers, …, within 1..=rows.
                let own = |x: u64| ((x % (rows / writers)) * writers + w) % rows + 1;
                let mut n: u64 = 0;
                let mut next = rows * 10 + w * 1_000_000;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let id = own(n.wrapping_mul(7919));
                    let sql = match n % 10 {
                        0 => format!("DELETE FROM {database}.t WHERE id = {id}"),
                        1 => {
                            next += 1;
                            format!("INSERT INTO {database}.t VALUES ({next}, 1, 'new')")
                        }
                        _ => format!(
                            "UPDATE {database}.t SET v = v + 1, note = 'upd{n}' WHERE id IN ({id}, {}, {})",
                            own(id * 31),
                            own(id * 17)
                        ),
                    };
                    conn.query_drop(sql).await.unwrap();
                }
                n
            })
        })
        .collect();
    tokio::spawn(async move {
        let mut statements = 0;
        for task in tasks {
            statements += task.await.unwrap();
        }
        statements
    })
}

/// Every row of `database.t`: id → v.
async fn table_contents(server: Server, database: &str) -> BTreeMap<u64, i64> {
    table_rows(server, database)
        .await
        .into_iter()
        .filter_map(|(id, row)| Some((id, row?.0)))
        .collect()
}

/// What the topic says, checked on the way: every key's events in topic order (records replayed
/// after a crash — the same binlog place and op — counted once): `v` never goes down, a deleted
/// key never comes back (ids are never reused), every `op: "r"` is marked `incremental`.
struct Checked {
    /// Newest state: id → v (deleted keys left out).
    state: BTreeMap<u64, i64>,
    /// Incremental read events.
    reads: usize,
    /// The first violation, if any.
    violation: Option<String>,
}

fn check(records: &[Record]) -> Checked {
    let mut state = BTreeMap::new();
    let mut last_v: HashMap<u64, i64> = HashMap::new();
    let mut deleted: HashSet<u64> = HashSet::new();
    let mut seen = HashSet::new();
    let mut reads = 0;
    let mut violation = None;
    for (key, value) in keyed_changes(records) {
        let source = &value["source"];
        let op = value["op"].as_str().unwrap_or_default().to_owned();
        let place = (
            source["file"].as_str().unwrap_or_default().to_owned(),
            source["pos"].as_u64().unwrap_or_default(),
            source["row"].as_u64().unwrap_or_default(),
            op.clone(),
        );
        if !seen.insert(place) {
            continue; // replayed after the crash
        }
        if op == "d" {
            deleted.insert(key);
            state.remove(&key);
            continue;
        }
        let v = value["after"]["v"].as_i64().unwrap();
        if op == "r" {
            reads += 1;
            if source["snapshot"] != "incremental" && violation.is_none() {
                violation = Some(format!("a read not marked incremental: {value}"));
            }
        }
        if deleted.contains(&key) && violation.is_none() {
            violation = Some(format!(
                "key {key} came back after its delete with op {op} (v {v}): an older chunk row overwrote a streamed delete"
            ));
        }
        let previous = last_v.get(&key).copied().unwrap_or(i64::MIN);
        if v < previous && violation.is_none() {
            violation = Some(format!(
                "key {key}: op {op} with v {v} after v {previous}: an older chunk row overwrote a newer streamed change"
            ));
        }
        last_v.insert(key, v);
        state.insert(key, v);
    }
    Checked {
        state,
        reads,
        violation,
    }
}

fn incremental_running(sluice: &Sluice) -> bool {
    sluice
        .get("/health")
        .and_then(|body| serde_json::from_str::<Value>(&body).ok())
        .is_some_and(|health| !health["incremental_snapshot"].is_null())
}

/// The state file's incremental snapshot state.
fn saved_incremental(name: &str) -> Value {
    std::fs::read(state_file(name))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<Value>(&bytes).ok())
        .map(|state| state["incremental"].clone())
        .unwrap_or(Value::Null)
}

/// Whether the request `id` is accepted and finished, as the state file says.
fn finished(name: &str, id: &str) -> bool {
    let state = saved_incremental(name);
    state["accepted"]
        .as_array()
        .is_some_and(|ids| ids.iter().any(|i| i == id))
        && state["queue"].as_array().is_some_and(Vec::is_empty)
}

/// A table that predates the pipeline (`snapshot = "never"`) is snapshotted on a signal table
/// row while a writer updates, deletes and inserts; with `crash`, the process aborts once
/// chunk progress was saved (`mysql_incremental::progress_saved`) and the restarted run
/// resumes after the saved chunk. Per key no chunk row is older than a streamed change before
/// it, the request finishes, and the newest event per key equals the table.
async fn signal_snapshot_under_writes(server: Server, crash: bool) {
    let _server = server.shared().await;
    snapshot_under_writes(server, crash, 2).await;
}

async fn snapshot_under_writes(server: Server, crash: bool, writers: u64) {
    let name = unique(if crash { "my_incrkill" } else { "my_incr" });
    let mut root = table_with_signal_table(server, &name, ROWS).await;
    let prefix = unique("mi");
    let dir = test_dir(&name);
    let admin_port = free_port();
    let toml = pipeline_with(
        server,
        &name,
        &name,
        &prefix,
        admin_port,
        &format!(
            "snapshot = \"never\"\nsignal_table = \"{name}.sluice_signal\"\nincremental_chunk_rows = {CHUNK_ROWS}"
        ),
    );
    let mut failpoints = WIDE_WINDOWS.to_owned();
    if crash {
        // The third save of chunk progress aborts: three or more of the ten chunks are done.
        failpoints.push_str(";mysql_incremental::progress_saved=2*off->return");
    }
    let env = vec![("FAILPOINTS".to_owned(), failpoints)];
    let mut sluice = Sluice::start_with_env(&dir, &toml, admin_port, env);
    sluice.wait_streaming(Duration::from_secs(60));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(server, name.clone(), ROWS, writers, Arc::clone(&stop));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    root.query_drop(format!(
        "INSERT INTO {name}.sluice_signal VALUES ('sig-1', 'execute-snapshot', \
         '{{\"data-collections\": [\"{name}.t\"], \"type\": \"incremental\"}}')"
    ))
    .await
    .unwrap();
    if crash {
        wait_until("the crash point", Duration::from_secs(60), || {
            sluice.exited().is_some()
        });
        assert!(
            sluice
                .log_text()
                .contains("failpoint mysql_incremental::progress_saved"),
            "sluice exited, but not at the crash point:\n{}",
            sluice.log_text()
        );
        let progress = saved_incremental(&name)["queue"][0].clone();
        assert_eq!(progress["table"], format!("{name}.t"), "{progress}");
        let after = progress["after"][0]["int"]
            .as_i64()
            .unwrap_or_else(|| panic!("chunk progress saved before the crash: {progress}"));
        assert!(after > 0 && after < i64::from(ROWS), "{progress}");
        eprintln!("{server:?}: crashed with progress after id {after}");
        sluice.env = vec![("FAILPOINTS".to_owned(), WIDE_WINDOWS.to_owned())];
        sluice.restart();
        sluice.wait_streaming(Duration::from_secs(60));
        assert!(
            sluice.log_text().contains("incremental snapshot: resuming"),
            "{}",
            sluice.log_text()
        );
    }
    wait_until("the request to finish", Duration::from_secs(120), || {
        finished(&name, "sig-1") && !incremental_running(&sluice)
    });
    let snapshot_seconds = started.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let statements = writer.await.unwrap();
    let table = table_contents(server, &name).await;
    let topic = format!("{prefix}.{name}.t");
    let records = tokio::task::spawn_blocking({
        let table = table.clone();
        move || read_topic(&topic, Duration::from_secs(60), |r| check(r).state == table)
    })
    .await
    .unwrap();
    let checked = check(&records);
    if let Some(violation) = &checked.violation {
        panic!("{server:?}: {violation}");
    }
    let differ: Vec<u64> = table
        .iter()
        .filter(|(id, v)| checked.state.get(id) != Some(v))
        .map(|(id, _)| *id)
        .chain(
            checked
                .state
                .keys()
                .filter(|id| !table.contains_key(id))
                .copied(),
        )
        .collect();
    assert!(
        differ.is_empty(),
        "{server:?}: {} keys differ from the table, e.g. {:?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
    // Keys changed in a window are left to the stream: most, not all, rows are read.
    assert!(
        checked.reads >= ROWS as usize / 2,
        "{server:?}: only {} reads",
        checked.reads
    );
    eprintln!(
        "{server:?}: incremental snapshot of {ROWS} rows in {snapshot_seconds:.1} s under {statements} concurrent statements{}; {} records, {} reads; Kafka equals the table",
        if crash { ", crashed once" } else { "" },
        records.len(),
        checked.reads
    );
    assert!(sluice.stop(), "{}", sluice.log_text());
    root.query_drop(format!("DROP DATABASE {name}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_incremental_snapshot_under_writes_never_overwrites_newer_changes() {
    signal_snapshot_under_writes(Server::Mariadb, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_incremental_snapshot_under_writes_never_overwrites_newer_changes() {
    signal_snapshot_under_writes(Server::Mysql, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_incremental_snapshot_crashed_mid_way_resumes_and_finishes() {
    signal_snapshot_under_writes(Server::Mariadb, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_incremental_snapshot_crashed_mid_way_resumes_and_finishes() {
    signal_snapshot_under_writes(Server::Mysql, true).await;
}

/// MySQL's form of DBLog's race: a transaction is in the binlog, and streamed, before InnoDB
/// commits it and other sessions see it. With `sync_binlog = 0` the dump thread sends a group's
/// events once they are written, and `binlog_group_commit_sync_delay` then holds the group for
/// 200 ms before its engine commit: every streamed change is invisible that long. Sixteen
/// writers commit in such groups while a table is snapshotted; a chunk read in that gap must
/// not publish the older row after the streamed change (the opening watermark, which commits
/// after the group, is what orders the read after it). MySQL only: MariaDB has no delay between
/// writing a group and committing it. Takes the server for itself (global settings).
#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_streamed_commit_not_yet_visible_is_not_overwritten_by_a_chunk() {
    let server = Server::Mysql;
    let _server = server.exclusive().await;
    let mut root = server.root().await;
    let (sync, delay): (u64, u64) = root
        .query_first("SELECT @@GLOBAL.sync_binlog, @@GLOBAL.binlog_group_commit_sync_delay")
        .await
        .unwrap()
        .unwrap();
    root.query_drop("SET GLOBAL sync_binlog = 0, GLOBAL binlog_group_commit_sync_delay = 200000")
        .await
        .unwrap();
    let result = tokio::spawn(snapshot_under_writes(server, false, 16)).await;
    root.query_drop(format!(
        "SET GLOBAL sync_binlog = {sync}, GLOBAL binlog_group_commit_sync_delay = {delay}"
    ))
    .await
    .unwrap();
    if let Err(panic) = result {
        std::panic::resume_unwind(panic.into_panic());
    }
}

/// The admin API: a request with a filter publishes exactly the rows it selects, once, marked
/// `incremental`, and is answered once recorded; a republication (tombstones) is refused for
/// a MySQL source; the request finishes (status and state file).
async fn api_snapshot_with_a_filter(server: Server) {
    let _server = server.shared().await;
    let name = unique("my_incrapi");
    let mut root = table_with_signal_table(server, &name, 1000).await;
    let prefix = unique("mia");
    let dir = test_dir(&name);
    let admin_port = free_port();
    let toml = pipeline_with(
        server,
        &name,
        &name,
        &prefix,
        admin_port,
        &format!(
            "snapshot = \"never\"\nsignal_table = \"{name}.sluice_signal\"\nincremental_chunk_rows = 64"
        ),
    );
    let mut sluice = Sluice::start(&dir, &toml, admin_port);
    sluice.wait_streaming(Duration::from_secs(60));
    // The admin API runs `sluice doctor` for a MySQL pipeline as for a PostgreSQL one.
    let (status, body) = crate::support::http_request(
        sluice.admin,
        "GET",
        &format!("/api/v1/pipelines/{name}/doctor"),
        &[],
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("\"mysql.server\"") && body.contains("\"mysql.settings\""),
        "{body}"
    );
    // Its evidence names the server without the password (it was shown whole before).
    let password = server
        .url(false)
        .split_once("://")
        .and_then(|(_, rest)| rest.rsplit_once('@'))
        .and_then(|(user, _)| user.split_once(':'))
        .map(|(_, password)| password.to_owned())
        .unwrap();
    assert!(!body.contains(&format!(":{password}@")), "{body}");
    assert!(body.contains(":***@"), "{body}");
    let path = format!("/api/v1/pipelines/{name}/snapshots");
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &path,
        &format!(r#"{{"tables": ["{name}.t"], "tombstones": true}}"#),
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("PostgreSQL sources only"), "{body}");
    // A filter that could be more than one condition (in MySQL's grammar) is refused.
    for (filter, why) in [
        ("id > 0; DO SLEEP(5)", "contains ';'"),
        ("id > 0 # x", "contains a comment"),
        ("id > 0 /*! OR 1=1 */", "contains a comment"),
        ("'a\\' = 'b'' OR 1=1 -- '", "backslash"),
    ] {
        let body = serde_json::json!({"tables": [format!("{name}.t")], "filter": filter});
        let (status, body) = http_json(sluice.admin, "POST", &path, &body.to_string()).unwrap();
        assert_eq!(status, 400, "{filter}: {body}");
        assert!(body.contains(why), "{filter}: {body}");
    }
    let started = Instant::now();
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &path,
        &format!(r#"{{"tables": ["{name}.t"], "filter": "id % 10 = 0", "id": "api-1"}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    assert!(body.contains("\"recorded\":true"), "{body}");
    let topic = format!("{prefix}.{name}.t");
    let reads = |records: &[Record]| -> Vec<u64> {
        records
            .iter()
            .filter(|r| {
                r.value
                    .as_ref()
                    .is_some_and(|v| v["op"] == "r" && v["source"]["snapshot"] == "incremental")
            })
            .map(|r| r.key.as_ref().unwrap()["id"].as_u64().unwrap())
            .collect()
    };
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |records| {
            reads(records).len() >= 100
        })
    })
    .await
    .unwrap();
    let mut ids = reads(&records);
    ids.sort_unstable();
    assert_eq!(
        ids,
        (1..=100).map(|n| n * 10).collect::<Vec<u64>>(),
        "exactly the filtered rows, once"
    );
    wait_until("the request to finish", Duration::from_secs(30), || {
        finished(&name, "api-1") && !incremental_running(&sluice)
    });
    eprintln!(
        "{server:?}: API snapshot of 100 filtered rows of 1000 in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    assert!(sluice.stop(), "{}", sluice.log_text());
    root.query_drop(format!("DROP DATABASE {name}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_api_snapshot_with_a_filter() {
    api_snapshot_with_a_filter(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_api_snapshot_with_a_filter() {
    api_snapshot_with_a_filter(Server::Mysql).await;
}

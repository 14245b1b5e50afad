//! Active/standby for MySQL/MariaDB pipelines: two instances of one pipeline, state in a Kafka
//! topic; the active one is SIGKILLed mid-load (or frozen with SIGSTOP) and the standby takes
//! over from the position the former one saved.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::faults::run_sluice;
use crate::ha::{health, is_active_and_streaming, is_standby};
use crate::mysql::{Server, binlog_place, database_with_table, ids, pipeline, spawn_inserts};
use crate::sink::signal;
use crate::support::{
    Sluice, free_port, read_topic, state_documents, test_dir, unique, wait_until,
};

/// What each test here starts from: the server shared with other tests, a
/// database of its own with table `t (id INT PRIMARY KEY, v VARCHAR(20))`, a topic prefix of its
/// own and a root connection.
struct Setup {
    _server: tokio::sync::RwLockReadGuard<'static, ()>,
    database: String,
    prefix: String,
    root: mysql_async::Conn,
}

impl Setup {
    async fn new(server: Server, database: &str, prefix: &str) -> Self {
        let _server = server.shared().await;
        let database = unique(database);
        let root = database_with_table(
            server,
            &database,
            "(id INT NOT NULL PRIMARY KEY, v VARCHAR(20))",
        )
        .await;
        Self {
            _server,
            database,
            prefix: unique(prefix),
            root,
        }
    }
}

/// Instances `a` and `b` of one pipeline (one file, one `server_id`, as on two hosts) with
/// `state_store = "kafka"` and `ha` (lines of `[ha]`); each has a `state_dir` of its own, so
/// what it resumes from can only come from the state topic. Returns the two files, their
/// directories and admin ports.
fn instance_pair(
    server: Server,
    database: &str,
    prefix: &str,
    state_topic: &str,
    ha: &str,
) -> ([String; 2], [std::path::PathBuf; 2], [u16; 2]) {
    let ports = [free_port(), free_port()];
    let file = pipeline(server, database, database, prefix, ports[0]).replace(
        "[source.mysql]\n",
        &format!("state_store = \"kafka\"\nstate_topic = \"{state_topic}\"\n\n[source.mysql]\n"),
    );
    let dirs = [
        test_dir(&format!("{database}-a")),
        test_dir(&format!("{database}-b")),
    ];
    let toml = |index: usize, instance: &str| {
        let state_dir = dirs[index].join("state");
        let own = with_state_dir(&file, &state_dir.display().to_string());
        format!(
            "{}\n[ha]\ninstance_id = \"{instance}\"\n{ha}\n",
            own.replace(
                &format!("127.0.0.1:{}", ports[0]),
                &format!("127.0.0.1:{}", ports[index])
            )
        )
    };
    ([toml(0, "a"), toml(1, "b")], dirs, ports)
}

/// `file` with its `state_dir = "…"` line pointing at `dir`.
fn with_state_dir(file: &str, dir: &str) -> String {
    file.lines()
        .map(|line| {
            if line.starts_with("state_dir = ") {
                format!("state_dir = \"{dir}\"")
            } else {
                line.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The (file, pos) of a saved MySQL state document.
fn position(document: &serde_json::Value) -> (String, u64) {
    let position = &document["position"];
    (
        position["file"].as_str().expect("file").to_owned(),
        position["pos"].as_u64().expect("pos"),
    )
}

/// The newest saved position of pipeline `name` in `state_topic`.
fn latest_saved(state_topic: &str, name: &str) -> Option<(String, u64)> {
    state_documents(state_topic, &format!("{name}.mysql"))
        .last()
        .filter(|d| !d.is_null())
        .map(position)
}

/// Two instances (`a` active, `b` standby) with `state_store = "kafka"`; while a writer inserts
/// `SLUICE_IT_MYSQL_HA_ROWS` rows (default 20,000) in 10-row transactions over about 20 s, `a`
/// is SIGKILLed once a third of them is written and it has saved a position. `b` takes over,
/// the restarted `a` waits as the standby, every row is in the topic (duplicates counted), and
/// the saved position in the state topic advances past the last row; `sluice slots` reads it
/// meanwhile without fencing the active instance.
async fn a_standby_takes_over_from_a_killed_active_instance(server: Server) {
    let rows: u32 = std::env::var("SLUICE_IT_MYSQL_HA_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let Setup {
        _server,
        database,
        prefix,
        mut root,
    } = Setup::new(server, "my_ha", "mha").await;
    let state_topic = format!("{database}.state");
    let (files, dirs, ports) = instance_pair(server, &database, &prefix, &state_topic, "");
    let mut a = Sluice::start(&dirs[0], &files[0], ports[0]);
    a.wait_streaming(Duration::from_secs(60));
    let mut b = Sluice::start(&dirs[1], &files[1], ports[1]);
    tokio::task::block_in_place(|| {
        wait_until("b waits as the standby", Duration::from_secs(30), || {
            is_standby(&b)
        });
    });
    assert_eq!(health(&b)["active"]["instance"], "a", "{}", b.log_text());

    let (writer, written) = spawn_inserts(server, &database, rows, 10, None);
    // Mid-load, once `a` has saved a position of its own in the state topic.
    let before_kill = tokio::task::block_in_place(|| {
        wait_until(
            "a third of the rows written and a position saved",
            Duration::from_secs(60),
            || {
                written.load(std::sync::atomic::Ordering::Relaxed) >= rows / 3
                    && latest_saved(&state_topic, &database).is_some()
            },
        );
        latest_saved(&state_topic, &database).unwrap()
    });
    let log_before = b.log_text().len();
    let killed = Instant::now();
    a.kill();
    let at_kill = written.load(std::sync::atomic::Ordering::Relaxed);
    let took = tokio::task::block_in_place(|| {
        wait_until("the standby takes over", Duration::from_secs(60), || {
            is_active_and_streaming(&b)
        });
        killed.elapsed()
    });
    let log = b.log_text();
    let run = &log[log_before.min(log.len())..];
    assert!(run.contains("took over as the active instance"), "{run}");
    assert!(health(&b)["takeovers"].as_u64().unwrap_or(0) >= 1);
    // The killed instance comes back as the standby: `b` keeps the role.
    a.restart();
    tokio::task::block_in_place(|| {
        wait_until(
            "the restarted instance waits as the standby",
            Duration::from_secs(30),
            || is_standby(&a),
        );
    });
    assert_eq!(health(&a)["active"]["instance"], "b");
    // `sluice slots` reads the saved position from the state topic (without fencing `b`).
    let (code, output) = run_sluice(
        &["slots", "--pipeline", a.file.to_str().unwrap()],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{output}");
    assert!(
        output.contains(&format!(
            "STATE     kafka topic {state_topic} key {database}.mysql"
        )),
        "{output}"
    );
    assert!(output.contains("the pipeline can resume"), "{output}");

    writer.await.unwrap();
    assert!(
        at_kill < rows,
        "the writer finished before the kill: the kill must fall into the load"
    );
    let topic = format!("{prefix}.{database}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(180), |records| {
            ids(records).len() >= rows as usize
        })
    })
    .await
    .unwrap();
    let counts = ids(&records);
    let missing: Vec<u32> = (1..=rows).filter(|id| !counts.contains_key(id)).collect();
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    println!(
        "{server:?} HA: {rows} rows, active killed after row {at_kill}: {} records, {duplicates} duplicates; takeover {:.1} s",
        records.len(),
        took.as_secs_f64()
    );
    assert!(
        missing.is_empty(),
        "{} rows missing after the takeover, e.g. {:?}\na:\n{}\nb:\n{}",
        missing.len(),
        &missing[..missing.len().min(10)],
        a.log_text(),
        b.log_text()
    );
    // The active instance saved past the last row (written after the takeover).
    let last_row = records
        .iter()
        .filter(|r| r.value.as_ref().is_some_and(|v| v["after"]["id"] == rows))
        .map(binlog_place)
        .max()
        .expect("the last row's record");
    let saved = tokio::task::block_in_place(|| {
        wait_until(
            "the saved position passes the last row",
            Duration::from_secs(60),
            || latest_saved(&state_topic, &database).is_some_and(|saved| saved > last_row),
        );
        latest_saved(&state_topic, &database).unwrap()
    });
    println!("{server:?} HA: saved position {before_kill:?} before the kill, {saved:?} at the end");
    assert!(saved > before_kill);
    assert!(b.stop(), "{}", b.log_text());
    assert!(a.stop(), "{}", a.log_text());
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_standby_takes_over_from_a_killed_active_instance() {
    a_standby_takes_over_from_a_killed_active_instance(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_standby_takes_over_from_a_killed_active_instance() {
    a_standby_takes_over_from_a_killed_active_instance(Server::Mysql).await;
}

/// The local TCP ports of process `pid`'s sockets (its fds' socket inodes in /proc/net/tcp*).
fn local_ports(pid: u32) -> std::collections::HashSet<u16> {
    let inodes: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .flat_map(|text| {
            text.lines()
                .skip(1)
                .filter_map(|line| {
                    let fields: Vec<&str> = line.split_whitespace().collect();
                    let port = fields.get(1)?.rsplit(':').next()?;
                    inodes
                        .contains(*fields.get(9)?)
                        .then(|| u16::from_str_radix(port, 16).ok())
                        .flatten()
                })
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The binlog dump threads on the server whose client is one of `ports`.
async fn dump_threads_of(
    root: &mut mysql_async::Conn,
    ports: &std::collections::HashSet<u16>,
) -> usize {
    let hosts: Vec<String> = root
        .query("SELECT HOST FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'")
        .await
        .unwrap();
    hosts
        .iter()
        .filter_map(|host| host.rsplit(':').next()?.parse::<u16>().ok())
        .filter(|port| ports.contains(port))
        .count()
}

/// Inserts rows `from..=to` into `database.t` in 100-row transactions.
async fn insert_ids(root: &mut mysql_async::Conn, database: &str, from: u32, to: u32) {
    for first in (from..=to).step_by(100) {
        let values: Vec<String> = (first..=(first + 99).min(to))
            .map(|id| format!("({id}, 'v{id}')"))
            .collect();
        root.query_drop(format!(
            "INSERT INTO {database}.t VALUES {}",
            values.join(",")
        ))
        .await
        .unwrap();
    }
}

/// The active instance is frozen (SIGSTOP: its sockets stay open, it reads nothing): the server
/// ends its lock session after the failover timeout and the standby takes over; the frozen
/// instance's binlog dump ends too. Woken again, the former instance becomes a standby and
/// produces nothing more; every row is in the topic.
async fn a_frozen_active_instance_is_replaced_and_its_dump_ended(server: Server) {
    let Setup {
        _server,
        database,
        prefix,
        mut root,
    } = Setup::new(server, "my_hafz", "mhf").await;
    let state_topic = format!("{database}.state");
    let (files, dirs, ports) = instance_pair(
        server,
        &database,
        &prefix,
        &state_topic,
        "failover_timeout_ms = 3000",
    );
    let mut a = Sluice::start(&dirs[0], &files[0], ports[0]);
    a.wait_streaming(Duration::from_secs(60));
    let mut b = Sluice::start(&dirs[1], &files[1], ports[1]);
    tokio::task::block_in_place(|| {
        wait_until("b waits as the standby", Duration::from_secs(30), || {
            is_standby(&b)
        });
    });
    let topic = format!("{prefix}.{database}.t");
    let read_ids = |count: u32| {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || {
            ids(&read_topic(&topic, Duration::from_secs(120), |records| {
                ids(records).len() >= count as usize
            }))
        })
    };
    insert_ids(&mut root, &database, 1, 500).await;
    assert_eq!(read_ids(500).await.unwrap().len(), 500);

    let a_ports = local_ports(a.pid().unwrap());
    assert_eq!(
        dump_threads_of(&mut root, &a_ports).await,
        1,
        "the active instance's binlog dump is found by its client port"
    );
    signal(&a, "STOP");
    let frozen = Instant::now();
    tokio::task::block_in_place(|| {
        wait_until("b takes over", Duration::from_secs(60), || {
            is_active_and_streaming(&b)
        });
    });
    let took = frozen.elapsed();
    // Ended by the new dump of the same server id
    // (`a_new_dump_of_the_same_replica_ends_a_frozen_former_one`).
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(10));
    while dump_threads_of(&mut root, &a_ports).await > 0 {
        assert!(
            Instant::now() < deadline,
            "the frozen instance's binlog dump still runs 10 s after b took over\nb:\n{}",
            b.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!(
        "{server:?} frozen: b took over {:.1} s after the freeze; a's dump ended {:.1} s after the freeze",
        took.as_secs_f64(),
        frozen.elapsed().as_secs_f64()
    );
    insert_ids(&mut root, &database, 501, 1_000).await;

    signal(&a, "CONT");
    tokio::task::block_in_place(|| {
        wait_until(
            "the woken instance becomes a standby that names b as the active instance",
            Duration::from_secs(60),
            // A standby learns the holder's label on its next poll: "unknown" until then.
            || is_standby(&a) && health(&a)["active"]["instance"] == "b",
        );
    });
    let produced = |sluice: &Sluice| sluice.metric("sluice_kafka_produced_records_total");
    let a_as_standby = produced(&a);
    insert_ids(&mut root, &database, 1_001, 1_500).await;
    let counts = read_ids(1_500).await.unwrap();
    let missing: Vec<u32> = (1..=1_500).filter(|id| !counts.contains_key(id)).collect();
    assert!(
        missing.is_empty(),
        "{} rows missing, e.g. {:?}\na:\n{}\nb:\n{}",
        missing.len(),
        &missing[..missing.len().min(10)],
        a.log_text(),
        b.log_text()
    );
    assert_eq!(
        produced(&a),
        a_as_standby,
        "the former instance produced as a standby\n{}",
        a.log_text()
    );
    assert!(is_standby(&a) && is_active_and_streaming(&b));
    assert!(b.stop(), "{}", b.log_text());
    assert!(a.stop(), "{}", a.log_text());
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

/// A second instance of the same replica (same `server_id`, its own state file, no election)
/// starts while the first is frozen: the server ends the frozen instance's binlog dump at once
/// (both end a former dump of the same server id when the replica names no `@slave_uuid`, as
/// sluice does not), not after `net_write_timeout` (60 s by default).
async fn a_new_dump_of_the_same_replica_ends_a_frozen_former_one(server: Server) {
    let Setup {
        _server,
        database,
        prefix,
        mut root,
    } = Setup::new(server, "my_zomb", "mzb").await;
    let ports = [free_port(), free_port()];
    let file = pipeline(server, &database, &database, &prefix, ports[0]);
    let second = file
        .replace(
            &format!("name = \"{database}\""),
            &format!("name = \"{database}_2\""),
        )
        .replace(
            &format!("127.0.0.1:{}", ports[0]),
            &format!("127.0.0.1:{}", ports[1]),
        );
    let dirs = [
        test_dir(&format!("{database}-1")),
        test_dir(&format!("{database}-2")),
    ];
    let mut first = Sluice::start(&dirs[0], &file, ports[0]);
    first.wait_streaming(Duration::from_secs(60));
    let first_ports = local_ports(first.pid().unwrap());
    assert_eq!(dump_threads_of(&mut root, &first_ports).await, 1);
    signal(&first, "STOP");
    let mut replacement = Sluice::start(&dirs[1], &second, ports[1]);
    replacement.wait_streaming(Duration::from_secs(60));
    let started = Instant::now();
    while dump_threads_of(&mut root, &first_ports).await > 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the frozen instance's binlog dump still runs 10 s after another of the same replica started\n{}",
            replacement.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    signal(&first, "CONT");
    first.kill();
    assert!(replacement.stop(), "{}", replacement.log_text());
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_new_dump_of_the_same_replica_ends_a_frozen_former_one() {
    a_new_dump_of_the_same_replica_ends_a_frozen_former_one(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_new_dump_of_the_same_replica_ends_a_frozen_former_one() {
    a_new_dump_of_the_same_replica_ends_a_frozen_former_one(Server::Mysql).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_frozen_active_instance_is_replaced_and_its_dump_ended() {
    a_frozen_active_instance_is_replaced_and_its_dump_ended(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_frozen_active_instance_is_replaced_and_its_dump_ended() {
    a_frozen_active_instance_is_replaced_and_its_dump_ended(Server::Mysql).await;
}

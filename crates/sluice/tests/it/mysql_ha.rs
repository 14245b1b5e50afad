//! Active/standby for MySQL/MariaDB pipelines: two instances of one pipeline, state in a Kafka
//! topic; the active one is SIGKILLed mid-load and the standby takes over from the position the
//! killed one saved.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;

use crate::faults::run_sluice;
use crate::ha::{health, is_active_and_streaming, is_standby};
use crate::mysql::{Server, binlog_place, database_with_table, ids, pipeline, spawn_inserts};
use crate::support::{
    Sluice, broker_shared, free_port, read_topic, state_documents, test_dir, unique, wait_until,
};

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
    let _broker = broker_shared().await;
    let _server = server.shared().await;
    let database = unique("my_ha");
    let prefix = unique("mha");
    let mut root = database_with_table(
        server,
        &database,
        "(id INT NOT NULL PRIMARY KEY, v VARCHAR(20))",
    )
    .await;
    let state_topic = format!("{database}.state");
    let ports = [free_port(), free_port()];
    // One pipeline file (one server_id), as on two hosts; only the admin port and the
    // instance's name differ.
    let file = pipeline(server, &database, &database, &prefix, ports[0]).replace(
        "[source.mysql]\n",
        &format!("state_store = \"kafka\"\nstate_topic = \"{state_topic}\"\n\n[source.mysql]\n"),
    );
    // Each instance has a state_dir of its own, as on two hosts: what it resumes from can
    // only come from the state topic.
    let dirs = [
        test_dir(&format!("{database}-a")),
        test_dir(&format!("{database}-b")),
    ];
    let toml = |index: usize, instance: &str| {
        let state_dir = dirs[index].join("state");
        let own = with_state_dir(&file, &state_dir.display().to_string());
        format!(
            "{}\n[ha]\ninstance_id = \"{instance}\"\n",
            own.replace(
                &format!("127.0.0.1:{}", ports[0]),
                &format!("127.0.0.1:{}", ports[index])
            )
        )
    };
    let mut a = Sluice::start(&dirs[0], &toml(0, "a"), ports[0]);
    a.wait_streaming(Duration::from_secs(60));
    let mut b = Sluice::start(&dirs[1], &toml(1, "b"), ports[1]);
    tokio::task::block_in_place(|| {
        wait_until("b waits as the standby", Duration::from_secs(30), || {
            is_standby(&b)
        });
    });
    assert_eq!(health(&b)["active"]["instance"], "a", "{}", b.log_text());

    let (writer, written) = spawn_inserts(server, &database, rows, 10);
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

//! The WAL budget (`source.postgres.wal_budget`): warnings at 50 % and 80 % in `/health`, the
//! metrics and the log, with what holds the slot back; `alert` keeps the slot past 100 %,
//! `drop_slot` drops it and the next run republishes.
//!
//! The slot is held back by pausing the pipeline (the shared Kafka stays up), and WAL is made
//! by inserting rows, a few MiB at a time, into a table of a schema no pipeline captures (logical
//! messages would be decoded by every running pipeline's slot), so the 96 MiB budget is
//! crossed in seconds. Other tests write WAL on the same server meanwhile, so the assertions
//! are "at least this level", never exact figures.

use std::time::Duration;

use serde_json::Value;
use tokio_postgres::Client;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, http_json, pg, pipeline_toml, read_topic,
    test_dir, unique, wait_slot_inactive, wait_until,
};

const MIB: i64 = 1 << 20;
/// Large enough that the WAL other tests write while this one's pipeline streams (the slot's
/// restart point moves only every ~15 s, with the server's running-transactions records)
/// stays far below it; WAL is made in steps of a 32nd of it.
const BUDGET_MIB: i64 = 96;
const STEP_MIB: i64 = BUDGET_MIB / 32;

fn health(sluice: &Sluice) -> Value {
    sluice
        .get("/health")
        .and_then(|body| serde_json::from_str(&body).ok())
        .unwrap_or_default()
}

fn budget_toml(name: &str, port: u16, extra: &str) -> String {
    pipeline_toml(name, name, name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\nwal_budget = \"{BUDGET_MIB}MiB\"\nwal_budget_check_interval_ms = 200\n{extra}"
        ),
    )
}

async fn create_table(client: &Client, name: &str) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id int PRIMARY KEY, v text NOT NULL); \
             INSERT INTO {name}.t SELECT g, 'v' || g FROM generate_series(1, 5) g; \
             CREATE SCHEMA {name}_filler; CREATE TABLE {name}_filler.wal (v text);"
        ))
        .await
        .unwrap();
}

/// Writes about `mib` MiB of WAL (rows no pipeline captures).
async fn make_wal(client: &Client, name: &str, mib: i64) {
    for _ in 0..mib {
        client
            .execute(
                &format!(
                    "INSERT INTO {name}_filler.wal SELECT repeat('x', 1000) FROM generate_series(1, 1000)"
                ),
                &[],
            )
            .await
            .unwrap();
    }
}

/// Drops the test's slot, publication and filler table.
async fn clean_up(client: &Client, name: &str) {
    drop_slot_and_publication(client, name).await;
    let _ = client
        .batch_execute(&format!("DROP SCHEMA {name}_filler CASCADE"))
        .await;
}

/// Pauses the pipeline and waits until its walsender is gone.
async fn pause(sluice: &Sluice, client: &Client, name: &str) {
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/pause"),
        "",
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    wait_until("the paused state", Duration::from_secs(30), || {
        health(sluice)["state"] == "paused"
    });
    wait_slot_inactive(client, &format!("sluice_{name}")).await;
}

/// Makes WAL a step at a time until `/health` shows the slot retaining at least `percent` % of
/// the budget; returns the status then.
async fn fill_to(sluice: &Sluice, client: &Client, name: &str, percent: i64) -> Value {
    let target = BUDGET_MIB * MIB * percent / 100;
    for _ in 0..2 * BUDGET_MIB / STEP_MIB {
        let status = health(sluice);
        if status["wal_budget"]["retained_bytes"].as_i64().unwrap_or(0) >= target {
            return status;
        }
        make_wal(client, name, STEP_MIB).await;
        // Two checks.
        tokio::time::sleep(Duration::from_millis(450)).await;
    }
    panic!(
        "the slot never retained {percent} % of the budget; /health: {}",
        health(sluice)
    );
}

fn level_at_least(status: &Value, levels: &[&str]) {
    let level = status["wal_budget"]["level"].as_str().unwrap_or("");
    assert!(
        levels.contains(&level),
        "level {level:?}, expected one of {levels:?}: {status}"
    );
}

/// 50 % and 80 %: `/health` (level, warning, what holds the slot: the pause and a transaction
/// left open), the metrics and one log line per crossing; past 100 % under `alert` the slot
/// stays, doctor reports it, and streaming resumes.
#[tokio::test(flavor = "multi_thread")]
async fn wal_budget_warns_at_50_and_80_percent_and_alert_keeps_the_slot() {
    let name = unique("walbudget");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let mut sluice = Sluice::start(&dir, &budget_toml(&name, port, ""), port);
    sluice.wait_streaming(Duration::from_secs(60));
    wait_until("the first check", Duration::from_secs(30), || {
        health(&sluice)["wal_budget"]["budget_bytes"] == BUDGET_MIB * MIB
    });
    assert_eq!(
        sluice.metric("sluice_source_wal_budget_bytes"),
        Some((BUDGET_MIB * MIB) as f64)
    );
    // A transaction left open (it wrote, so it has an xid): the slot cannot move past its
    // start.
    let open = pg().await;
    let open_pid: i32 = open
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    open.batch_execute(&format!(
        "BEGIN; INSERT INTO {name}_filler.wal VALUES ('open')"
    ))
    .await
    .unwrap();
    pause(&sluice, &client, &name).await;

    let status = fill_to(&sluice, &client, &name, 55).await;
    // The check after the one that saw it.
    tokio::time::sleep(Duration::from_millis(450)).await;
    let status = if status["wal_budget"]["level"] == "under" {
        health(&sluice)
    } else {
        status
    };
    level_at_least(&status, &["warning_50", "warning_80", "exceeded"]);
    let budget = &status["wal_budget"];
    assert_eq!(budget["held_by"][0]["kind"], "paused", "{status}");
    // Named once it has been open for 5 s.
    let named = format!("pg_terminate_backend({open_pid})");
    wait_until(
        "the open transaction named",
        Duration::from_secs(30),
        || {
            health(&sluice)["wal_budget"]["held_by"]
                .as_array()
                .is_some_and(|held| {
                    held.iter().any(|h| {
                        h["kind"] == "long_transaction"
                            && h["detail"].as_str().is_some_and(|d| d.contains(&named))
                    })
                })
        },
    );
    // Ended once named: an open transaction with an xid in the shared cluster holds back
    // every other test's slot creation.
    open.batch_execute("COMMIT").await.unwrap();
    let warning = budget["warning"].as_str().unwrap();
    assert!(
        warning.contains("the pipeline is paused")
            && warning.contains(&format!("wal_budget {BUDGET_MIB}.0 MiB")),
        "{warning}"
    );
    assert!(sluice.metric("sluice_source_wal_budget_level").unwrap() >= 50.0);
    assert!(
        sluice
            .metric("sluice_source_slot_retained_wal_bytes")
            .unwrap()
            >= (BUDGET_MIB / 2 * MIB) as f64
    );

    fill_to(&sluice, &client, &name, 85).await;
    wait_until("the 80 % level", Duration::from_secs(10), || {
        matches!(
            health(&sluice)["wal_budget"]["level"].as_str(),
            Some("warning_80" | "exceeded")
        )
    });
    assert!(sluice.metric("sluice_source_wal_budget_level").unwrap() >= 80.0);
    // Checks keep coming (every 200 ms): the crossing is logged once.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let log = sluice.log_text();
    let count = |text: &str| log.matches(text).count();
    // (Other tests' WAL may have carried it past 100 % already.)
    assert!(
        count("WAL budget: 80% reached") + count("WAL budget: 100% reached") >= 1,
        "{log}"
    );
    for percent in [50, 80, 100] {
        assert!(
            count(&format!("WAL budget: {percent}% reached")) <= 1,
            "{log}"
        );
    }
    assert!(
        log.contains("held back by: the pipeline is paused"),
        "{log}"
    );

    // Past 100 %: alert keeps the slot, and warns.
    fill_to(&sluice, &client, &name, 110).await;
    wait_until("the exceeded level", Duration::from_secs(10), || {
        health(&sluice)["wal_budget"]["level"] == "exceeded"
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let status = health(&sluice);
    assert!(
        status["wal_budget"]["warning"]
            .as_str()
            .unwrap()
            .ends_with("wal_budget_action = \"alert\": the slot is kept"),
        "{status}"
    );
    assert_eq!(status["wal_budget"]["slot_dropped"], false);
    assert_eq!(sluice.metric("sluice_source_wal_budget_level"), Some(100.0));
    let slot = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&format!("sluice_{name}")],
        )
        .await
        .unwrap();
    assert!(slot.is_some(), "alert never drops the slot");
    assert!(sluice.exited().is_none(), "alert never stops the pipeline");
    // doctor: the budget against max_slot_wal_keep_size (-1 on the dev stack: alert only
    // warns and nothing limits the slot), and the slot past its budget, not streaming.
    let file = sluice.file.to_str().unwrap().to_owned();
    let (code, all) = crate::doctor::sluice_json(&["doctor", "--pipeline", &file], &[]);
    assert_eq!(code, 2, "a critical finding: {all:#}");
    let keep = &crate::doctor::findings(&all, "pg.wal_budget", None)[0];
    assert_eq!(
        keep["evidence"]["wal_budget_bytes"],
        BUDGET_MIB * MIB,
        "{keep}"
    );
    if keep["evidence"]["max_slot_wal_keep_size_mb"] == -1 {
        assert_eq!(keep["severity"], "info", "{keep}");
        assert!(
            keep["summary"].as_str().unwrap().contains("nothing limits"),
            "{keep}"
        );
    }
    // The dev stack's server is on this machine and its user may read data_directory: the
    // WAL disk's free space is checked against the budget (a few MiB: it fits).
    let disk = &crate::doctor::findings(&all, "pg.wal_disk", None)[0];
    assert_eq!(disk["severity"], "ok", "{disk}");
    assert!(
        disk["evidence"]["wal_path"]
            .as_str()
            .unwrap()
            .ends_with("/pg_wal"),
        "{disk}"
    );
    assert!(disk["evidence"]["free_bytes"].as_u64() > Some(0), "{disk}");
    let found = &crate::doctor::findings(&all, "pg.wal_budget_slot", None)[0];
    assert_eq!(found["severity"], "critical", "{found}");
    assert_eq!(found["evidence"]["level"], "exceeded", "{found}");
    assert!(
        found["summary"]
            .as_str()
            .unwrap()
            .contains("the pipeline is not running"),
        "{found}"
    );
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/resume"),
        "",
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    sluice.wait_streaming(Duration::from_secs(60));

    assert!(sluice.stop(), "graceful stop");
    clean_up(&client, &name).await;
}

/// `drop_slot`: past 100 % the slot is dropped and the pipeline stops saying so; the next run
/// creates the slot and republishes the table: the rows as they are, a tombstone for the row
/// deleted while the slot was held back.
#[tokio::test(flavor = "multi_thread")]
async fn wal_budget_drop_slot_drops_the_slot_and_the_next_run_republishes() {
    let name = unique("walbudgetdrop");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = budget_toml(
        &name,
        port,
        "wal_budget_action = \"drop_slot\"\nsnapshot = \"when_needed\"\n",
    );
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let topic = format!("{name}.{name}.t");
    let first = read_topic(&topic, Duration::from_secs(60), |records| {
        records.len() >= 5
    });
    assert_eq!(first.len(), 5, "the initial snapshot");

    pause(&sluice, &client, &name).await;
    client
        .batch_execute(&format!(
            "DELETE FROM {name}.t WHERE id = 2; UPDATE {name}.t SET v = 'changed' WHERE id = 3; \
             INSERT INTO {name}.t VALUES (6, 'v6');"
        ))
        .await
        .unwrap();
    let slot = format!("sluice_{name}");
    fill_to(&sluice, &client, &name, 90).await;
    make_wal(&client, &name, BUDGET_MIB / 5).await;
    wait_until("sluice to stop", Duration::from_secs(60), || {
        sluice.exited().is_some()
    });
    assert!(!sluice.exited().unwrap().success(), "it fails loudly");
    let log = sluice.log_text();
    assert!(
        log.contains("the slot was dropped (wal_budget_action = \"drop_slot\")")
            && log.contains(
                "the next run creates the slot anew and republishes every captured table"
            ),
        "{log}"
    );
    let remaining = client
        .query_opt(
            "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap();
    assert!(remaining.is_none(), "the slot is dropped");
    let state_file = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it/state")
        .join(format!("{name}.slot.json"));
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert!(
        state["wal_budget_drop"]["retained_bytes"].as_i64().unwrap() >= BUDGET_MIB * MIB,
        "{state}"
    );

    // The next run: a new slot, and the table republished while streaming.
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(60));
    let records = read_topic(&topic, Duration::from_secs(120), |records| {
        records
            .iter()
            .any(|r| r.value.is_none() && r.key.as_ref().is_some_and(|k| k["id"] == 2))
            && records.iter().any(|r| {
                r.op() == Some("r") && r.value.as_ref().is_some_and(|v| v["after"]["id"] == 6)
            })
    });
    let republished: Vec<&crate::support::Record> = records[5..].iter().collect();
    let read_ids: Vec<i64> = republished
        .iter()
        .filter(|r| r.op() == Some("r"))
        .filter_map(|r| r.value.as_ref()?["after"]["id"].as_i64())
        .collect();
    for id in [1, 3, 4, 5, 6] {
        assert!(read_ids.contains(&id), "row {id} republished: {read_ids:?}");
    }
    assert!(!read_ids.contains(&2), "{read_ids:?}");
    let changed = republished
        .iter()
        .find(|r| r.op() == Some("r") && r.value.as_ref().is_some_and(|v| v["after"]["id"] == 3))
        .unwrap();
    assert_eq!(changed.value.as_ref().unwrap()["after"]["v"], "changed");
    assert!(
        republished
            .iter()
            .any(|r| r.value.is_none() && r.key.as_ref().is_some_and(|k| k["id"] == 2)),
        "a tombstone for the row deleted while the slot was held back"
    );
    let state: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert!(state.get("wal_budget_drop").is_none(), "{state}");
    assert!(
        client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot]
            )
            .await
            .unwrap()
            .is_some(),
        "the slot exists again"
    );
    // Streaming goes on from the new slot.
    client
        .batch_execute(&format!("INSERT INTO {name}.t VALUES (7, 'v7')"))
        .await
        .unwrap();
    read_topic(&topic, Duration::from_secs(60), |records| {
        records
            .iter()
            .any(|r| r.op() == Some("c") && r.value.as_ref().is_some_and(|v| v["after"]["id"] == 7))
    });

    assert!(sluice.stop(), "graceful stop");
    clean_up(&client, &name).await;
}

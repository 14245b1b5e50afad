//! Following a failover: several hosts with `target_session_attrs=read-write` (libpq's
//! meaning) for the replication connection as for SQL, and doctor's failover and
//! `idle_replication_slot_timeout` findings (PostgreSQL 17+/18). The whole failover — a primary
//! killed under load, its standby promoted — is `scripts/failover-demo`.

use std::time::Duration;

use serde_json::json;

use crate::doctor::{findings, sluice_json};
use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pg_at, pg_version, pipeline_toml_at,
    read_topic, stack, test_dir, unique,
};

/// `host:port` of a URL `postgres://user@host:port/db…`.
fn address(url: &str) -> String {
    let rest = url.split_once('@').expect("a user in the URL").1;
    rest.split('/').next().unwrap().to_owned()
}

/// The URL's database replaced by `database`.
fn with_database(url: &str, database: &str) -> String {
    let (base, rest) = url
        .rsplit_once("/postgres")
        .expect("the URL names postgres");
    format!("{base}/{database}{rest}")
}

/// The first host answers read-only (a standby would; here PostgreSQL 18's database with
/// `default_transaction_read_only`), the second read-write: under `target_session_attrs=
/// read-write` every connection of sluice's — the replication connection too — goes to the
/// second, and the pipeline streams from it.
#[tokio::test(flavor = "multi_thread")]
async fn read_write_target_passes_over_a_read_only_host() {
    let name = unique("rw");
    let other = pg_version(18);
    let other_admin = pg_at(&other.url).await;
    for sql in [
        format!("CREATE DATABASE {name}"),
        format!("ALTER DATABASE {name} SET default_transaction_read_only = on"),
    ] {
        other_admin.batch_execute(&sql).await.unwrap();
    }
    let admin = pg().await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    let client = pg_at(&with_database(&stack().pg_url, &name)).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY, v text);
             INSERT INTO {name}.t VALUES (1, 'one');"
        ))
        .await
        .unwrap();
    let url = format!(
        "postgres://postgres@{},{}/{name}?target_session_attrs=read-write",
        address(&other.url),
        address(&stack().pg_url)
    );
    let port = free_port();
    let dir = test_dir(&name);
    let sluice = Sluice::start(
        &dir,
        &pipeline_toml_at(&url, &name, &name, &name, port, ""),
        port,
    );
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!("INSERT INTO {name}.t VALUES (2, 'two')"))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(30), |r| r.len() >= 2)
    })
    .await
    .unwrap();
    let ops: Vec<&str> = records.iter().filter_map(|r| r.op()).collect();
    assert_eq!(ops, ["r", "c"], "log:\n{}", sluice.log_text());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
    drop(client);
    admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
    other_admin
        .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
        .await
        .unwrap();
}

/// On PostgreSQL 18: a pipeline slot that is not a failover slot is named with the fix, the
/// URL naming no standby is said, and `idle_replication_slot_timeout` names the inactive slot
/// it will invalidate and when.
#[tokio::test(flavor = "multi_thread")]
async fn doctor_names_failover_pieces_and_the_idle_slot_timeout_on_18() {
    let server = pg_version(18);
    let client = pg_at(&server.url).await;
    let name = unique("fodoc");
    let slot = format!("sluice_{name}");
    for sql in [
        format!("CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY)"),
        format!("SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"),
        "ALTER SYSTEM SET idle_replication_slot_timeout = '1h'".to_owned(),
        "SELECT pg_reload_conf()".to_owned(),
    ] {
        client.batch_execute(&sql).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    std::fs::write(
        &file,
        pipeline_toml_at(&server.url, &name, &name, &name, free_port(), ""),
    )
    .unwrap();
    let file_arg = file.display().to_string();
    let (code, all) =
        tokio::task::spawn_blocking(move || sluice_json(&["doctor", "--pipeline", &file_arg], &[]))
            .await
            .unwrap();
    for sql in [
        "ALTER SYSTEM RESET idle_replication_slot_timeout",
        "SELECT pg_reload_conf()",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    drop_slot_and_publication(&client, &name).await;
    let not_failover = findings(&all, "pg.slot_failover", Some(("slot", json!(slot))));
    assert_eq!(not_failover.len(), 1, "{all:#}");
    assert_eq!(not_failover[0]["severity"], "warning");
    assert!(
        not_failover[0]["fix"]
            .as_str()
            .unwrap()
            .contains("sluice makes it a failover slot"),
        "{all:#}"
    );
    assert_eq!(
        findings(&all, "pg.failover_standbys", None).len(),
        1,
        "{all:#}"
    );
    let idle = findings(&all, "pg.slot_idle_timeout", Some(("slot", json!(slot))));
    assert_eq!(idle.len(), 1, "{all:#}");
    assert_eq!(idle[0]["severity"], "warning");
    assert_eq!(idle[0]["evidence"]["idle_replication_slot_timeout_s"], 3600);
    assert!(
        idle[0]["summary"]
            .as_str()
            .unwrap()
            .contains("invalidates it at the first checkpoint after"),
        "{all:#}"
    );
    assert_eq!(code, 1, "warnings: exit code 1\n{all:#}");
}

/// The failover itself, small (`scripts/failover-demo --ops 2000 --ha --pg-version 18`: about
/// 20 s): a PostgreSQL 18 primary with a physical standby syncing the pipeline's failover slot,
/// two sluice instances on the pipeline (`[ha]`, `state_store = "kafka"`), the primary killed
/// (SIGKILL) mid-workload and the standby promoted. The script reads the topic back: every
/// change is there in per-key order, nothing is extra, no snapshot was taken again; one instance
/// is active and the other its standby before and after. The scale run is the script's default
/// (100,000 operations on 17).
#[tokio::test(flavor = "multi_thread")]
async fn a_primary_failover_under_two_instances_loses_nothing() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/failover-demo");
    let output = tokio::process::Command::new("timeout")
        .args(["--kill-after=10", "600", script])
        .args(["--ops", "2000", "--ha", "--pg-version", "18"])
        .env("SLUICE", crate::support::sluice_bin())
        .output()
        .await
        .expect("scripts/failover-demo runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let result: serde_json::Value = stdout
        .lines()
        .rev()
        .find_map(|line| serde_json::from_str(line).ok())
        .unwrap_or_else(|| panic!("no result line; the script said:\n{stderr}"));
    assert!(output.status.success(), "{result}\n{stderr}");
    for (key, want) in [
        ("missing", json!(0)),
        ("extra", json!(0)),
        ("order_ok", json!(true)),
        ("snapshot_records", json!(0)),
    ] {
        assert_eq!(result[key], want, "{key}: {result}\n{stderr}");
    }
    assert!(
        result["changes_on_new_primary"].as_u64().unwrap() > 0,
        "{result}"
    );
    for roles in ["roles_before", "roles_after"] {
        let mut seen: Vec<&str> = result[roles]
            .as_object()
            .unwrap_or_else(|| panic!("{roles}: {result}"))
            .values()
            .filter_map(|v| v.as_str())
            .collect();
        seen.sort_unstable();
        assert_eq!(seen, ["active", "standby"], "{roles}: {result}");
    }
}

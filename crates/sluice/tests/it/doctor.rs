//! `sluice doctor` and `sluice slots` against real conditions: each test creates the
//! condition (on the shared server with unique names, or on a throwaway cluster for server-wide
//! settings) and asserts the finding's code, severity and evidence, and the exit code.

use std::process::Command;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use serde_json::Value;

use crate::support::{
    ThrowawayPg, drop_slot_and_publication, free_port, pg, pipeline_toml, sluice_bin, stack,
    test_dir, unique,
};

/// Runs `sluice <args> --json`; returns (exit code, parsed output).
pub(crate) fn sluice_json(args: &[&str], env: &[(&str, &str)]) -> (i32, Value) {
    let mut command = Command::new(sluice_bin());
    command.args(args).arg("--json");
    for (k, v) in env {
        command.env(k, v);
    }
    let output = command.output().expect("run sluice");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{args:?}: not JSON ({e}):\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code().unwrap_or(-1), json)
}

/// The findings with `code` whose evidence matches `key = value` (when given).
pub(crate) fn findings<'a>(
    all: &'a Value,
    code: &str,
    key: Option<(&str, Value)>,
) -> Vec<&'a Value> {
    all.as_array()
        .expect("an array of findings")
        .iter()
        .filter(|f| f["code"] == code)
        .filter(|f| key.as_ref().is_none_or(|(k, v)| f["evidence"][*k] == *v))
        .collect()
}

/// An abandoned slot with WAL behind it is named with the bytes it retains; `sluice slots`
/// lists it as inactive with its lag, and marks the pipeline's own slot.
#[tokio::test(flavor = "multi_thread")]
async fn abandoned_slot_is_reported_with_the_wal_it_retains() {
    let client = pg().await;
    let slot = unique("abandoned");
    client
        .query_one(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    // ~4 MiB of WAL behind it.
    let table = unique("walgen");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id int, payload text); \
             INSERT INTO {table} SELECT g, repeat('x', 1000) FROM generate_series(1, 4000) g; \
             DROP TABLE {table};"
        ))
        .await
        .unwrap();
    let s = stack();
    let (code, all) = sluice_json(
        &["doctor"],
        &[("PG_URL", &s.pg_url), ("KAFKA_BROKERS", &s.brokers)],
    );
    let found = findings(
        &all,
        "pg.slot_inactive",
        Some(("slot", Value::from(slot.clone()))),
    );
    assert_eq!(found.len(), 1, "{all:#}");
    let retained = found[0]["evidence"]["retained_wal_bytes"].as_i64().unwrap();
    assert!(retained >= 4_000_000, "retained {retained}");
    assert!(
        found[0]["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("pg_drop_replication_slot('{slot}')"))
    );
    assert!(
        code >= 1,
        "the shared server has max_slot_wal_keep_size = -1: at least a warning"
    );

    let (code, slots) = sluice_json(&["slots"], &[("PG_URL", &s.pg_url)]);
    assert_eq!(code, 0);
    let row = slots
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["slot"] == slot.as_str())
        .expect("the slot is listed");
    assert_eq!(row["active"], false);
    assert_eq!(row["plugin"], "pgoutput");
    assert!(
        row["restart_lag_bytes"].as_i64().unwrap() >= 4_000_000,
        "{row}"
    );
    assert_eq!(row["sluice"], false, "not a sluice_ slot");
    client
        .query_one("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
}

/// The pipeline's tables: one without a key (critical: updates would fail on the server), one
/// left out of an existing publication, and `max_slot_wal_keep_size` unset.
#[tokio::test(flavor = "multi_thread")]
async fn tables_without_keys_and_outside_the_publication_are_named() {
    let name = unique("doc");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.keyed (id int PRIMARY KEY); \
             CREATE TABLE {name}.nokey (id int); \
             CREATE TABLE {name}.later (id int PRIMARY KEY); \
             CREATE PUBLICATION sluice_{name} FOR TABLE {name}.keyed, {name}.nokey;"
        ))
        .await
        .unwrap();
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, pipeline_toml(&name, &name, &name, free_port(), "")).unwrap();
    let (code, all) = sluice_json(&["doctor", "--pipeline", file.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "a critical finding: {all:#}");
    let nokey = findings(
        &all,
        "pg.table_no_key",
        Some(("table", Value::from(format!("{name}.nokey")))),
    );
    assert_eq!(nokey.len(), 1, "{all:#}");
    assert_eq!(nokey[0]["severity"], "critical");
    assert_eq!(nokey[0]["evidence"]["replica_identity"], "d");
    assert!(
        nokey[0]["fix"]
            .as_str()
            .unwrap()
            .contains("REPLICA IDENTITY FULL")
    );
    assert!(
        findings(
            &all,
            "pg.table_no_key",
            Some(("table", Value::from(format!("{name}.keyed"))))
        )
        .is_empty()
    );
    let coverage = findings(
        &all,
        "pg.publication_coverage",
        Some(("table", Value::from(format!("{name}.later")))),
    );
    assert_eq!(coverage.len(), 1, "{all:#}");
    assert!(coverage[0]["fix"].as_str().unwrap().contains(&format!(
        "ALTER PUBLICATION sluice_{name} ADD TABLE {name}.later"
    )));
    let keep = findings(&all, "pg.max_slot_wal_keep_size", None);
    assert_eq!(keep[0]["severity"], "warning");
    assert_eq!(keep[0]["evidence"]["max_slot_wal_keep_size_mb"], -1);
    // The topics do not exist yet: they will be created (info).
    let missing = findings(
        &all,
        "kafka.topic_missing",
        Some(("topic", Value::from(format!("{name}.{name}.keyed")))),
    );
    assert_eq!(missing.len(), 1, "{all:#}");
    assert_eq!(missing[0]["severity"], "info");
    drop_slot_and_publication(&client, &name).await;
}

/// A hand-made publication for `partitions = "root"` without publish_via_partition_root, that
/// lists a partitioned table and one of its partitions: both are named, with the SQL to fix.
#[tokio::test(flavor = "multi_thread")]
async fn a_hand_made_publication_that_misses_the_partition_root_or_lists_both_is_named() {
    let name = unique("docpart");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.events (id int, at int, PRIMARY KEY (id, at)) PARTITION BY RANGE (at); \
             CREATE TABLE {name}.events_1 PARTITION OF {name}.events FOR VALUES FROM (0) TO (10); \
             CREATE PUBLICATION sluice_{name} FOR TABLE {name}.events, {name}.events_1;"
        ))
        .await
        .unwrap();
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    let toml = pipeline_toml(&name, &name, &name, free_port(), "").replace(
        "[source.postgres]\n",
        "[source.postgres]\ncreate_publication = false\n",
    );
    std::fs::write(&file, toml).unwrap();
    let (code, all) = sluice_json(&["doctor", "--pipeline", file.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "a critical finding: {all:#}");
    let via_root = findings(&all, "pg.publication_partition_root", None);
    assert_eq!(via_root.len(), 1, "{all:#}");
    assert_eq!(via_root[0]["severity"], "critical");
    assert_eq!(via_root[0]["evidence"]["partitions"], "root");
    assert_eq!(
        via_root[0]["fix"],
        format!("ALTER PUBLICATION sluice_{name} SET (publish_via_partition_root = true)")
    );
    let both = findings(
        &all,
        "pg.publication_root_and_partition",
        Some(("partition", Value::from(format!("{name}.events_1")))),
    );
    assert_eq!(both.len(), 1, "{all:#}");
    assert_eq!(both[0]["evidence"]["table"], format!("{name}.events"));
    assert!(both[0]["fix"].as_str().unwrap().starts_with(&format!(
        "ALTER PUBLICATION sluice_{name} DROP TABLE {name}.events_1"
    )));
    drop_slot_and_publication(&client, &name).await;
}

/// `synchronous_commit = off` with `wal_writer_delay = 200ms` (a throwaway cluster: these
/// are server-wide): the latency trap is named with the added latency.
#[tokio::test(flavor = "multi_thread")]
async fn async_commit_with_a_slow_wal_writer_is_the_latency_trap() {
    let cluster = tokio::task::spawn_blocking(|| {
        ThrowawayPg::start(&[
            "wal_level=logical",
            "synchronous_commit=off",
            "wal_writer_delay=200ms",
            "max_slot_wal_keep_size=1GB",
        ])
    })
    .await
    .unwrap();
    let (code, all) = sluice_json(
        &["doctor", "--pg-url", &cluster.url],
        &[("KAFKA_BROKERS", &stack().brokers)],
    );
    let trap = findings(&all, "pg.async_commit_latency", None);
    assert_eq!(trap.len(), 1, "{all:#}");
    assert_eq!(trap[0]["severity"], "warning");
    assert_eq!(trap[0]["evidence"]["synchronous_commit"], "off");
    assert_eq!(trap[0]["evidence"]["wal_writer_delay_ms"], 200);
    assert!(
        trap[0]["summary"].as_str().unwrap().contains("600 ms"),
        "{}",
        trap[0]
    );
    let keep = findings(&all, "pg.max_slot_wal_keep_size", None);
    assert_eq!(keep[0]["severity"], "ok", "set on this cluster");
    assert_eq!(code, 1, "warnings only: {all:#}");
    drop(cluster);
}

/// A server with a synchronous standby configured (PostgreSQL 15 here): logical decoding does not
/// wait for it and the slot would not survive a failover — a warning with the way out.
#[tokio::test(flavor = "multi_thread")]
async fn standbys_without_failover_slots_are_a_warning() {
    let cluster = tokio::task::spawn_blocking(|| {
        ThrowawayPg::start(&[
            "wal_level=logical",
            "synchronous_standby_names='standby1'",
            "max_slot_wal_keep_size=1GB",
        ])
    })
    .await
    .unwrap();
    let (_, all) = sluice_json(
        &["doctor", "--pg-url", &cluster.url],
        &[("KAFKA_BROKERS", &stack().brokers)],
    );
    let failover = findings(&all, "pg.failover_slots", None);
    assert_eq!(failover.len(), 1, "{all:#}");
    assert_eq!(failover[0]["severity"], "warning", "{all:#}");
    assert_eq!(
        failover[0]["evidence"]["synchronous_standby_names"],
        "standby1"
    );
    assert!(
        failover[0]["fix"]
            .as_str()
            .unwrap()
            .contains("on_slot_loss"),
        "{}",
        failover[0]
    );
    drop(cluster);
    // The shared dev cluster has no standby: ok.
    let (_, all) = sluice_json(
        &["doctor", "--pg-url", &stack().pg_url],
        &[("KAFKA_BROKERS", &stack().brokers)],
    );
    let failover = findings(&all, "pg.failover_slots", None);
    assert_eq!(failover[0]["severity"], "ok", "{all:#}");
}

/// A topic whose `min.insync.replicas` exceeds its replication factor refuses every acks=all
/// write: critical, with the command that fixes it.
#[tokio::test(flavor = "multi_thread")]
async fn min_insync_replicas_above_the_replication_factor_is_critical() {
    let name = unique("isr");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY);"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let new_topic = NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
        .set("min.insync.replicas", "2")
        .set("cleanup.policy", "compact")
        .set("delete.retention.ms", "60000");
    let results = admin
        .create_topics(
            [&new_topic],
            &AdminOptions::new().request_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, pipeline_toml(&name, &name, &name, free_port(), "")).unwrap();
    let (code, all) = sluice_json(&["doctor", "--pipeline", file.to_str().unwrap()], &[]);
    assert_eq!(code, 2, "{all:#}");
    let isr = findings(
        &all,
        "kafka.min_insync_replicas",
        Some(("topic", Value::from(topic.clone()))),
    );
    assert_eq!(isr.len(), 1, "{all:#}");
    assert_eq!(isr[0]["severity"], "critical");
    assert_eq!(isr[0]["evidence"]["min_insync_replicas"], 2);
    assert_eq!(isr[0]["evidence"]["replication_factor"], 1);
    let tombstones = findings(
        &all,
        "kafka.compaction_tombstones",
        Some(("topic", Value::from(topic.clone()))),
    );
    assert_eq!(tombstones.len(), 1, "{all:#}");
    // Human output carries the same, with the fix.
    let text = Command::new(sluice_bin())
        .args(["doctor", "--pipeline", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("[CRITICAL] kafka.min_insync_replicas")
            && text.contains("fix: kafka-configs"),
        "{text}"
    );
    let _ = admin.delete_topics(&[&topic], &AdminOptions::new()).await;
    drop_slot_and_publication(&client, &name).await;
}

/// A role without REPLICATION, without SELECT on a captured table and without CREATE on the
/// database (the publication must be created): each is named with the fix.
#[tokio::test(flavor = "multi_thread")]
async fn missing_privileges_are_reported() {
    let client = pg().await;
    let name = unique("docpriv");
    let role = format!("{name}_role");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.secret (id int PRIMARY KEY); \
             CREATE ROLE {role} LOGIN NOREPLICATION; GRANT USAGE ON SCHEMA {name} TO {role};"
        ))
        .await
        .unwrap();
    let url = stack().pg_url.replace("postgres@", &format!("{role}@"));
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    let toml = pipeline_toml(&name, &name, &name, free_port(), "").replace(&stack().pg_url, &url);
    std::fs::write(&file, toml).unwrap();
    let (code, all) = sluice_json(&["doctor", "--pipeline", file.to_str().unwrap()], &[]);
    let replication = findings(
        &all,
        "pg.privilege_replication",
        Some(("user", Value::from(role.clone()))),
    );
    assert_eq!(replication.len(), 1, "{all:#}");
    assert_eq!(replication[0]["severity"], "critical");
    assert_eq!(replication[0]["evidence"]["replication"], false);
    assert_eq!(
        replication[0]["fix"],
        format!("ALTER ROLE {role} REPLICATION").as_str()
    );
    let select = findings(
        &all,
        "pg.privilege_select",
        Some(("table", Value::from(format!("{name}.secret")))),
    );
    assert_eq!(select.len(), 1, "{all:#}");
    assert!(
        select[0]["fix"]
            .as_str()
            .unwrap()
            .contains(&format!("GRANT SELECT ON {name}.secret TO {role}"))
    );
    let create = findings(&all, "pg.privilege_create", None);
    assert_eq!(create.len(), 1, "{all:#}");
    assert_eq!(create[0]["severity"], "critical");
    assert_eq!(code, 2);
    client
        .batch_execute(&format!(
            "DROP SCHEMA {name} CASCADE; DROP OWNED BY {role}; DROP ROLE {role};"
        ))
        .await
        .unwrap();
}

/// A slot that retained more WAL than `max_slot_wal_keep_size` (1 MB on a throwaway cluster,
/// then far more WAL and checkpoints) is unreserved or lost; with only two slots allowed and
/// one used, the headroom warning shows too.
#[tokio::test(flavor = "multi_thread")]
async fn slot_beyond_max_slot_wal_keep_size_and_little_headroom_are_reported() {
    let cluster = tokio::task::spawn_blocking(|| {
        ThrowawayPg::start(&[
            "wal_level=logical",
            "max_slot_wal_keep_size=1MB",
            "wal_keep_size=0",
            "min_wal_size=32MB",
            "max_wal_size=64MB",
            "max_replication_slots=2",
        ])
    })
    .await
    .unwrap();
    let client = crate::support::pg_at(&cluster.url).await;
    let slot = "sluice_doctor_lost";
    client
        .execute(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    client
        .batch_execute(
            "CREATE TABLE t (id int PRIMARY KEY, payload text); \
             INSERT INTO t SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 40000) g; \
             SELECT pg_switch_wal(); CHECKPOINT; \
             INSERT INTO t SELECT g, repeat(md5(g::text), 32) FROM generate_series(40001, 80000) g; \
             SELECT pg_switch_wal(); CHECKPOINT;",
        )
        .await
        .unwrap();
    let (code, all) = sluice_json(
        &["doctor", "--pg-url", &cluster.url],
        &[("KAFKA_BROKERS", &stack().brokers)],
    );
    let lost = findings(&all, "pg.slot_lost", Some(("slot", Value::from(slot))));
    let unreserved = findings(
        &all,
        "pg.slot_unreserved",
        Some(("slot", Value::from(slot))),
    );
    assert!(
        lost.len() == 1 && lost[0]["severity"] == "critical"
            || unreserved.len() == 1 && unreserved[0]["severity"] == "warning",
        "{all:#}"
    );
    let headroom = findings(&all, "pg.slot_headroom", None);
    assert_eq!(headroom[0]["severity"], "warning", "{all:#}");
    assert_eq!(headroom[0]["evidence"]["max_replication_slots"], 2);
    assert_eq!(code, if lost.is_empty() { 1 } else { 2 });
    let (_, slots) = sluice_json(&["slots", "--pg-url", &cluster.url], &[]);
    let row = &slots.as_array().unwrap()[0];
    assert_eq!(row["slot"], slot);
    assert!(
        matches!(row["wal_status"].as_str(), Some("lost" | "unreserved")),
        "{row}"
    );
    assert_eq!(row["sluice"], true);
    drop(client);
    drop(cluster);
}

/// A session idle in a transaction that wrote and a forgotten prepared transaction (a gid with
/// a quote and a backslash in it), on a throwaway cluster (`max_prepared_transactions`, and nothing else's slot
/// creation waits for them): past `--long-transaction-s` both are named with how to end them;
/// what doctor says to run ends them, and the finding is then ok.
#[tokio::test(flavor = "multi_thread")]
async fn open_and_prepared_transactions_are_named_with_how_to_end_them() {
    let cluster = tokio::task::spawn_blocking(|| {
        ThrowawayPg::start(&["wal_level=logical", "max_prepared_transactions=2"])
    })
    .await
    .unwrap();
    let idle = crate::support::pg_at(&cluster.url).await;
    let pid: i32 = idle
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    idle.batch_execute("BEGIN; SELECT pg_current_xact_id();")
        .await
        .unwrap();
    let preparer = crate::support::pg_at(&cluster.url).await;
    preparer
        .batch_execute(
            "BEGIN; CREATE TABLE prepared_t (id int); PREPARE TRANSACTION 'it''s \\ forgotten';",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let brokers = stack().brokers;
    let doctor = |threshold: &str| {
        let (code, all) = sluice_json(
            &[
                "doctor",
                "--pg-url",
                &cluster.url,
                "--long-transaction-s",
                threshold,
            ],
            &[("KAFKA_BROKERS", &brokers)],
        );
        let found = findings(&all, "pg.open_transactions", None);
        assert_eq!(found.len(), 1, "{all:#}");
        (code, found[0].clone())
    };

    let (code, open) = doctor("1");
    assert_eq!(open["severity"], "warning", "{open:#}");
    assert_eq!(code, 1, "warnings only");
    let summary = open["summary"].as_str().unwrap();
    let test = crate::support::application_name();
    assert!(
        summary.starts_with("2 transactions that wrote have been open for 1 s or more"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!(
            "pid {pid} (database \"postgres\", user \"postgres\", application \"{test}\", idle in transaction"
        )),
        "{summary}"
    );
    let kinds: Vec<&str> = open["evidence"]["transactions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["session", "prepared"], "{open:#}");
    // What doctor says to run, run as said.
    let terminate = format!("SELECT pg_terminate_backend({pid})");
    assert!(summary.contains(&terminate), "{summary}");
    // The gid has a quote and a backslash: an escape-string literal means the same whatever
    // the operator's session's standard_conforming_strings.
    let rollback = r"ROLLBACK PREPARED E'it''s \\ forgotten'";
    assert!(
        summary.contains(&format!("{rollback} in database \"postgres\"")),
        "{summary}"
    );
    let admin = crate::support::pg_at(&cluster.url).await;
    admin.batch_execute(&terminate).await.unwrap();
    admin.batch_execute(rollback).await.unwrap();
    // pg_terminate_backend signals; the backend ends a moment later.
    let deadline = std::time::Instant::now() + crate::support::bound(Duration::from_secs(10));
    while admin
        .query_opt("SELECT 1 FROM pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "pid {pid} still there"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let (_, after) = doctor("1");
    assert_eq!(after["severity"], "ok", "{after:#}");
    // The default threshold (5 minutes) with nothing that old: ok too.
    let (_, default) = doctor("300");
    assert_eq!(default["evidence"]["threshold_s"], 300, "{default:#}");
    drop(cluster);
}

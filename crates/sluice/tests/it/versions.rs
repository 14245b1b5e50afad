//! The CDC core against PostgreSQL 18 (the stack's server is 15): the mixed workload (over TLS
//! with SCRAM), the initial snapshot under concurrent writes and SIGKILL during load, on a
//! server of that version started once per run (`scripts/pg-versions`); and what is new in 18
//! (generated columns). `scripts/pg-matrix` runs the whole core against every version 14–18.

use std::time::Duration;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg_at, pg_version, pipeline_toml_at, read_topic,
    test_dir, unique, wait_until,
};

/// [`crate::cdc::mixed_transactions_arrive_as_committed`] on PostgreSQL 18, sluice reading over
/// verify-full TLS with SCRAM.
#[tokio::test(flavor = "multi_thread")]
async fn mixed_transactions_arrive_as_committed_on_18_over_tls() {
    let server = pg_version(18);
    crate::cdc::mixed_workload(&server.url, &server.tls_url, None, 10_000).await;
}

/// [`crate::snapshot::initial_snapshot_is_consistent_with_concurrent_changes`] on PostgreSQL 18.
#[tokio::test(flavor = "multi_thread")]
async fn initial_snapshot_is_consistent_with_concurrent_changes_on_18() {
    crate::snapshot::snapshot_under_writes(&pg_version(18).url).await;
}

/// [`crate::faults::sigkill_during_load_loses_nothing`] on PostgreSQL 18.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_load_loses_nothing_on_18() {
    crate::faults::sigkill_during_load(&pg_version(18).url).await;
}

/// PostgreSQL 18's stored generated columns: with `publish_generated_columns = true` the
/// generated column's value is in every event (snapshot, insert, update), computed by the
/// server; without it (the default, as Debezium) the column is absent from them all.
#[tokio::test(flavor = "multi_thread")]
async fn generated_columns_are_captured_when_asked_on_18() {
    let server = pg_version(18);
    let client = pg_at(&server.url).await;
    for publish in [true, false] {
        let name = unique("gencols");
        client
            .batch_execute(&format!(
                "CREATE SCHEMA {name};
                 CREATE TABLE {name}.t (id int PRIMARY KEY, price int NOT NULL,
                     doubled int GENERATED ALWAYS AS (price * 2) STORED);
                 INSERT INTO {name}.t VALUES (1, 10);"
            ))
            .await
            .unwrap();
        let port = free_port();
        let dir = test_dir(&name);
        let toml = pipeline_toml_at(&server.url, &name, &name, &name, port, "").replace(
            "[source.postgres]\n",
            &format!("[source.postgres]\npublish_generated_columns = {publish}\n"),
        );
        let sluice = Sluice::start(&dir, &toml, port);
        sluice.wait_streaming(Duration::from_secs(60));
        client
            .batch_execute(&format!(
                "INSERT INTO {name}.t VALUES (2, 21); UPDATE {name}.t SET price = 11 WHERE id = 1;"
            ))
            .await
            .unwrap();
        let topic = format!("{name}.{name}.t");
        let records = tokio::task::spawn_blocking(move || {
            read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 3)
        })
        .await
        .unwrap();
        let ops: Vec<&str> = records.iter().filter_map(|r| r.op()).collect();
        assert_eq!(ops, ["r", "c", "u"], "{records:?}");
        for record in &records {
            let after = &record.value.as_ref().unwrap()["after"];
            let price = after["price"].as_i64().unwrap();
            if publish {
                assert_eq!(after["doubled"].as_i64(), Some(price * 2), "{after}");
            } else {
                assert!(after.get("doubled").is_none(), "{after}");
            }
        }
        let published: String = client
            .query_one(
                "SELECT pubgencols::text FROM pg_publication WHERE pubname = $1",
                &[&format!("sluice_{name}")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(published, if publish { "s" } else { "n" });
        drop(sluice);
        drop_slot_and_publication(&client, &name).await;
    }
}

/// A new slot's creation waits for every transaction that had written when it began, in any
/// database: sluice names such a transaction (pid, application, state, how to end it) in its
/// log and in `/health`'s hint while it waits, and clears the hint once the slot exists; so
/// does a pipeline with `snapshot = "never"`, whose slot is created through SQL. On
/// the 18 server, whose other tests are few: the held transaction delays every slot created
/// meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_slot_creation_names_the_open_transaction_it_waits_for_on_18() {
    let server = pg_version(18);
    let client = pg_at(&server.url).await;
    let name = unique("slotwait");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY);"
        ))
        .await
        .unwrap();
    // Idle in a transaction that has an xid (it wrote nothing: pg_current_xact_id assigns one).
    let holder = pg_at(&server.url).await;
    let pid: i32 = holder
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    holder
        .batch_execute("BEGIN; SELECT pg_current_xact_id();")
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml_at(&server.url, &name, &name, &name, port, "");
    // Held for 4 s once the slot exists (the hint must be gone before streaming clears it).
    let sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "snapshot::slot_created=sleep(4000)".to_owned(),
        )],
    );
    // A pipeline that streams only new changes creates its slot through SQL on its own
    // connection: it names the transaction too.
    let never = format!("{name}_never");
    let never_port = free_port();
    let never_toml = pipeline_toml_at(&server.url, &never, &name, &never, never_port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\n",
    );
    let never_sluice = Sluice::start(&test_dir(&never), &never_toml, never_port);
    let named = format!("SELECT pg_terminate_backend({pid})");
    for sluice in [&sluice, &never_sluice] {
        sluice.wait_log(
            "the open transaction named",
            Duration::from_secs(40),
            |log| log.contains(&named),
        );
    }
    let line = sluice
        .log_text()
        .lines()
        .find(|l| l.contains(&named))
        .unwrap()
        .to_owned();
    let test = crate::support::application_name();
    for part in [
        format!("creating replication slot \"sluice_{name}\" has waited"),
        format!("pid {pid} (database \"postgres\""),
        format!("application \"{test}\", idle in transaction"),
    ] {
        assert!(line.contains(&part), "{part:?} not in {line}");
    }
    let health = crate::ha::health(&sluice);
    assert!(
        health["hint"].as_str().is_some_and(|h| h.contains(&named)),
        "{health}"
    );
    assert_eq!(health["state"], "starting", "{health}");

    holder.batch_execute("COMMIT").await.unwrap();
    // The creation completes at the next running-xacts record: asked for now, not in 15 s.
    client
        .batch_execute("SELECT pg_log_standby_snapshot()")
        .await
        .unwrap();
    let mut cleared = serde_json::Value::Null;
    wait_until("the hint cleared", Duration::from_secs(30), || {
        cleared = crate::ha::health(&sluice);
        cleared["hint"].is_null()
    });
    assert!(
        sluice
            .log_text()
            .contains("created replication slot with an exported snapshot"),
        "{}",
        sluice.log_text()
    );
    assert_ne!(cleared["state"], "streaming", "{cleared}");
    sluice.wait_streaming(Duration::from_secs(60));
    never_sluice.wait_streaming(Duration::from_secs(60));
    drop(sluice);
    drop(never_sluice);
    drop_slot_and_publication(&client, &name).await;
    drop_slot_and_publication(&client, &never).await;
}

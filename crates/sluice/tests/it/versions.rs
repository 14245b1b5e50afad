//! The CDC core against PostgreSQL 18 (the stack's server is 15): the mixed workload (over TLS
//! with SCRAM), the initial snapshot under concurrent writes and SIGKILL during load, on a
//! server of that version started once per run (`scripts/pg-versions`); and what is new in 18
//! (generated columns). `scripts/pg-matrix` runs the whole core against every version 14–18.

use std::time::Duration;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg_at, pg_version, pipeline_toml_at, read_topic,
    test_dir, unique,
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

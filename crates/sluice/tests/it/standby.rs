//! Decoding on a physical standby (PostgreSQL 16+), the smoke test: a PostgreSQL 18 primary
//! and its standby, made once per run (`scripts/pg-versions standby-up 18`, about 4 s, kept
//! like the stack's servers); sluice's URL is the standby's, `primary_url` the primary's.
//! The snapshot at scale, the primary's load during it and a promotion are
//! `scripts/standby-demo`'s.

use std::time::{Duration, Instant};

use crate::support::{
    Sluice, free_port, pg_at, pg_versions, pipeline_toml_at, read_topic, test_dir, unique,
};

/// A primary and its physical standby.
struct Pair {
    primary_url: String,
    standby_url: String,
}

/// The pair of major `version`, started once per test run.
fn pair(version: u32) -> &'static Pair {
    static PAIR: std::sync::OnceLock<Pair> = std::sync::OnceLock::new();
    PAIR.get_or_init(|| {
        let var = pg_versions("standby-up", version);
        Pair {
            primary_url: var("PG_STANDBY_PRIMARY_URL"),
            standby_url: var("PG_STANDBY_URL"),
        }
    })
}

/// sluice pointed at a standby: without `primary_url` a missing publication stops it with the
/// statement to run on the primary; with it, the publication is created there, the slot
/// on the standby (not on the primary), the initial snapshot read there; changes written on
/// the primary arrive; `/health` and the metrics show the standby's replay lag; heartbeats
/// (written on the primary) keep moving the standby slot's confirmed position.
#[tokio::test(flavor = "multi_thread")]
async fn snapshot_and_changes_arrive_from_a_standby() {
    let pair = pair(18);
    let primary = pg_at(&pair.primary_url).await;
    let standby = pg_at(&pair.standby_url).await;
    // What an earlier run that failed left (slots retain WAL on the pair).
    let _ = standby
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots \
             WHERE slot_name LIKE 'sluice\\_standby\\_%' AND NOT active",
            &[],
        )
        .await;
    let name = unique("standby");
    primary
        .batch_execute(&format!(
            "CREATE SCHEMA {name};
             CREATE TABLE {name}.t (id int PRIMARY KEY, v int NOT NULL);
             INSERT INTO {name}.t SELECT g, 1 FROM generate_series(1, 200) g;"
        ))
        .await
        .unwrap();
    let replayed = format!("SELECT to_regclass('{name}.t') IS NOT NULL");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !standby
        .query_one(&replayed, &[])
        .await
        .unwrap()
        .get::<_, bool>(0)
    {
        assert!(
            Instant::now() < deadline,
            "the standby did not replay the table"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Without primary_url the publication must already exist: a standby cannot create it.
    let plain = format!("{name}_plain");
    let port = free_port();
    let toml = pipeline_toml_at(&pair.standby_url, &plain, &name, &plain, port, "");
    let mut refused = Sluice::start(&test_dir(&plain), &toml, port);
    refused.wait_log("the publication's refusal", Duration::from_secs(60), |log| {
        log.contains(&format!(
            "publication \"sluice_{plain}\" does not exist on the standby (source.postgres.url), and a standby cannot create one"
        )) && log.contains("CREATE PUBLICATION")
    });
    refused.stop();

    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml_at(&pair.standby_url, &name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\nprimary_url = \"{}\"\n",
            pair.primary_url
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    let slot = format!("sluice_{name}");
    assert!(
        slot_on(&standby, &slot).await.is_some(),
        "no slot on the standby"
    );
    assert!(
        slot_on(&primary, &slot).await.is_none(),
        "the slot is on the primary"
    );
    let published: i64 = primary
        .query_one(
            "SELECT count(*) FROM pg_publication_tables WHERE pubname = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        published, 1,
        "the publication was not created on the primary"
    );

    primary
        .batch_execute(&format!(
            "UPDATE {name}.t SET v = 2 WHERE id <= 10;
             INSERT INTO {name}.t VALUES (201, 1);
             DELETE FROM {name}.t WHERE id = 200;"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| {
            r.iter().filter(|r| r.op() == Some("d")).count() == 1
        })
    })
    .await
    .unwrap();
    let count = |op: &str| records.iter().filter(|r| r.op() == Some(op)).count();
    assert_eq!(
        (count("r"), count("u"), count("c"), count("d")),
        (200, 10, 1, 1),
        "{records:?}"
    );
    let updated: Vec<i64> = records
        .iter()
        .filter(|r| r.op() == Some("u"))
        .map(|r| r.value.as_ref().unwrap()["after"]["v"].as_i64().unwrap())
        .collect();
    assert!(updated.iter().all(|v| *v == 2), "{updated:?}");

    // The replay lag, measured against the primary.
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        let health: serde_json::Value =
            serde_json::from_str(&sluice.get("/health").unwrap_or_default()).unwrap_or_default();
        if health["standby"].is_object() {
            break health;
        }
        assert!(Instant::now() < deadline, "no standby in /health: {health}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(health["standby"]["measured_against"], "primary", "{health}");
    assert!(
        health["standby"]["replay_lag_bytes"].as_i64().unwrap() >= 0,
        "{health}"
    );
    let metrics = sluice.get("/metrics").unwrap_or_default();
    assert!(
        metrics.contains("sluice_source_standby_replay_lag_bytes"),
        "{metrics}"
    );

    // Heartbeats written on the primary (every second) move the standby slot's position on
    // an idle database: three moves within 10 s. Without them only the primary's own
    // running-xacts records would, at most one per 15 s.
    let mut position = slot_on(&standby, &slot).await.unwrap();
    let mut moves = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while moves < 3 {
        assert!(
            Instant::now() < deadline,
            "the standby slot's confirmed position moved {moves} times in 10 s (at {position})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = slot_on(&standby, &slot).await.unwrap();
        if now != position {
            moves += 1;
            position = now;
        }
    }

    drop(sluice);
    let deadline = Instant::now() + Duration::from_secs(10);
    while standby
        .execute(
            "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
            &[&slot],
        )
        .await
        .unwrap()
        == 0
        && Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    primary
        .batch_execute(&format!(
            "DROP PUBLICATION IF EXISTS {slot}; DROP SCHEMA {name} CASCADE;"
        ))
        .await
        .unwrap();
}

/// The confirmed position of slot `slot` on the server of `client`, if it has one.
async fn slot_on(client: &tokio_postgres::Client, slot: &str) -> Option<String> {
    client
        .query_opt(
            "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .unwrap()
        .map(|row| row.get::<_, String>(0))
}

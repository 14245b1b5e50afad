//! Partitioned tables under `partitions = "root"` (the default): one topic under the root's
//! name; the snapshot reads each row once; a partition created while running is streamed,
//! not snapshotted; a table attached while running has its existing rows snapshotted once
//! into the root's topic; a detached partition's later changes stay out of it and it is left
//! out (no topic, no snapshot), also when detached while sluice was stopped. Multi-level
//! partitioning and the default partition are part of the tree.

use std::collections::HashMap;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::support::{
    Record, Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, stack,
    test_dir, unique, wait_until,
};

/// `id → v` of the topic's newest event per key (deleted keys are absent).
fn newest(records: &[Record]) -> HashMap<i64, i64> {
    let mut latest = HashMap::new();
    for record in records {
        let Some(id) = record.key.as_ref().and_then(|k| k["id"].as_i64()) else {
            continue;
        };
        match record.value.as_ref() {
            Some(value) if value["op"] != "d" => {
                latest.insert(id, value["after"]["v"].as_i64().unwrap());
            }
            _ => {
                latest.remove(&id);
            }
        }
    }
    latest
}

/// The ids of the snapshot reads (`op: "r"`), with repeats.
fn reads(records: &[Record]) -> Vec<i64> {
    let mut ids: Vec<i64> = records
        .iter()
        .filter(|r| r.op() == Some("r"))
        .filter_map(|r| r.key.as_ref().and_then(|k| k["id"].as_i64()))
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test(flavor = "multi_thread")]
async fn a_partitioned_table_is_one_topic_and_an_attached_table_is_snapshotted_once() {
    let name = unique("parts");
    let client = pg().await;
    // Ids: 1-100 in January, 101-200 in February, 201-250 in March (a sub-partitioned
    // partition), 251-260 in the default partition; 1001-1050 in a table attached later;
    // 2001-2020 in a partition created later.
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE SCHEMA {name}_x; \
             CREATE TABLE {name}.events (id bigint, at date, v bigint NOT NULL, \
                 PRIMARY KEY (id, at)) PARTITION BY RANGE (at); \
             CREATE TABLE {name}.events_01 PARTITION OF {name}.events \
                 FOR VALUES FROM ('2024-01-01') TO ('2024-02-01'); \
             CREATE TABLE {name}.events_02 PARTITION OF {name}.events \
                 FOR VALUES FROM ('2024-02-01') TO ('2024-03-01'); \
             CREATE TABLE {name}.events_03 PARTITION OF {name}.events \
                 FOR VALUES FROM ('2024-03-01') TO ('2024-04-01') PARTITION BY HASH (id); \
             CREATE TABLE {name}.events_03_a PARTITION OF {name}.events_03 \
                 FOR VALUES WITH (MODULUS 2, REMAINDER 0); \
             CREATE TABLE {name}.events_03_b PARTITION OF {name}.events_03 \
                 FOR VALUES WITH (MODULUS 2, REMAINDER 1); \
             CREATE TABLE {name}.events_other PARTITION OF {name}.events DEFAULT; \
             INSERT INTO {name}.events SELECT g, '2024-01-01'::date + (g % 28), 0 \
                 FROM generate_series(1, 100) g; \
             INSERT INTO {name}.events SELECT g, '2024-02-01'::date + (g % 28), 0 \
                 FROM generate_series(101, 200) g; \
             INSERT INTO {name}.events SELECT g, '2024-03-01'::date + (g % 28), 0 \
                 FROM generate_series(201, 250) g; \
             INSERT INTO {name}.events SELECT g, '2030-01-01', 0 FROM generate_series(251, 260) g; \
             CREATE TABLE {name}_x.events_05 (LIKE {name}.events INCLUDING ALL); \
             INSERT INTO {name}_x.events_05 SELECT g, '2024-05-01'::date + (g % 28), 7 \
                 FROM generate_series(1001, 1050) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\ntable_refresh_interval_ms = 300\nincremental_chunk_rows = 16\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    let publication: bool = client
        .query_one(
            "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
            &[&format!("sluice_{name}")],
        )
        .await
        .unwrap()
        .get(0);
    assert!(publication, "the publication publishes via the root");
    // Changes in every partition, a partition created and one attached while streaming, one
    // detached and changed afterwards.
    client
        .batch_execute(&format!(
            "UPDATE {name}.events SET v = 1 WHERE id IN (5, 105, 205, 255); \
             DELETE FROM {name}.events WHERE id IN (6, 106); \
             CREATE TABLE {name}.events_04 PARTITION OF {name}.events \
                 FOR VALUES FROM ('2024-04-01') TO ('2024-05-01'); \
             INSERT INTO {name}.events SELECT g, '2024-04-01'::date + (g % 28), 4 \
                 FROM generate_series(2001, 2020) g; \
             ALTER TABLE {name}.events ATTACH PARTITION {name}_x.events_05 \
                 FOR VALUES FROM ('2024-05-01') TO ('2024-06-01'); \
             UPDATE {name}.events SET v = 8 WHERE id = 1001;"
        ))
        .await
        .unwrap();
    let detached: HashMap<i64, i64> = client
        .query(&format!("SELECT id, v FROM {name}.events_02"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    client
        .batch_execute(&format!(
            "ALTER TABLE {name}.events DETACH PARTITION {name}.events_02; \
             UPDATE {name}.events_02 SET v = 99 WHERE id = 110; \
             UPDATE {name}.events SET v = 2 WHERE id IN (7, 1002);"
        ))
        .await
        .unwrap();
    // The topic's newest event per key is the table, plus the detached partition's rows as
    // they were when it was detached.
    let mut expected: HashMap<i64, i64> = client
        .query(&format!("SELECT id, v FROM {name}.events"), &[])
        .await
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    expected.extend(detached);
    let version: i32 = client
        .query_one(
            "SELECT current_setting('server_version_num')::int / 10000",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    if version < 15 {
        // PostgreSQL 14 still publishes a detached partition's changes under the root while
        // the walsender that decoded its changes before the detach runs (15 does not).
        expected.insert(110, 99);
    }
    let topic = format!("{name}.{name}.events");
    let records = tokio::task::spawn_blocking({
        let expected = expected.clone();
        move || {
            read_topic(&topic, Duration::from_secs(60), |records| {
                newest(records) == expected
            })
        }
    })
    .await
    .unwrap();
    assert_eq!(
        newest(&records),
        expected,
        "the topic's newest event per key"
    );
    let mut snapshotted: Vec<i64> = (1..=260).chain(1001..=1050).collect();
    snapshotted.sort_unstable();
    assert_eq!(
        reads(&records),
        snapshotted,
        "each row snapshotted once: the initial rows through the root, the attached table's rows after it was attached, none of the created partition's"
    );
    let created: Vec<&str> = records
        .iter()
        .filter(|r| r.key.as_ref().and_then(|k| k["id"].as_i64()) == Some(2001))
        .filter_map(Record::op)
        .collect();
    assert_eq!(created, ["c"], "a created partition's row is streamed once");
    for record in &records {
        if let Some(value) = &record.value {
            assert_eq!(value["source"]["table"], "events", "{value}");
        }
    }
    wait_until("the attach to be logged", Duration::from_secs(10), || {
        sluice
            .log_text()
            .contains("partitions attached: snapshotting their existing rows")
    });
    // The detached partition is left out: no topic, no snapshot of it.
    let left_out = |log: &str, table: &str| {
        log.lines().any(|line| {
            line.contains("a partition detached from a captured partitioned table is left out")
                && line.contains(&format!("{name}.{table}"))
        })
    };
    sluice.wait_log("the detach to be logged", Duration::from_secs(10), |log| {
        left_out(log, "events_02")
    });
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let partition_topics = || -> Vec<String> {
        let metadata = consumer
            .fetch_metadata(None, Duration::from_secs(10))
            .unwrap();
        metadata
            .topics()
            .iter()
            .map(|t| t.name().to_owned())
            .filter(|t| t.starts_with(&format!("{name}.{name}.events_")))
            .collect()
    };
    assert!(partition_topics().is_empty(), "{:?}", partition_topics());
    println!(
        "root topic: {} events for {} keys; {} snapshot reads",
        records.len(),
        expected.len(),
        reads(&records).len()
    );
    // Stopped, a sub-partitioned partition is changed and detached, and changed again: its
    // changes up to the detach reach the root's topic after the restart, the table is left
    // out (no topic, no snapshot), the later change is not published.
    let mut sluice = sluice;
    assert!(sluice.stop(), "a graceful stop");
    client
        .batch_execute(&format!(
            "UPDATE {name}.events SET v = 3 WHERE id = 210; \
             ALTER TABLE {name}.events DETACH PARTITION {name}.events_03; \
             UPDATE {name}.events_03 SET v = 98 WHERE id IN (210, 211);"
        ))
        .await
        .unwrap();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!("UPDATE {name}.events SET v = 5 WHERE id = 8"))
        .await
        .unwrap();
    expected.insert(210, 3);
    expected.insert(8, 5);
    if version < 15 {
        // PostgreSQL 14 again (see above): the restarted walsender decoded 210's partition
        // before the detach (211's, the other hash partition, it did not).
        expected.insert(210, 98);
    }
    let topic = format!("{name}.{name}.events");
    let records = tokio::task::spawn_blocking({
        let expected = expected.clone();
        move || {
            read_topic(&topic, Duration::from_secs(60), |records| {
                newest(records) == expected
            })
        }
    })
    .await
    .unwrap();
    assert_eq!(newest(&records), expected, "after the restart");
    assert_eq!(reads(&records), snapshotted, "no row snapshotted again");
    assert!(
        left_out(&sluice.log_text(), "events_03"),
        "the partition detached while stopped is logged"
    );
    assert!(partition_topics().is_empty(), "{:?}", partition_topics());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// `partitions = "leaves"`: each partition is its own topic, snapshotted once; a partition
/// created while running (published from its creation by the schema publication), or while
/// sluice was stopped, is streamed, not snapshotted; a column rule naming the partitioned
/// table covers its partitions.
#[tokio::test(flavor = "multi_thread")]
async fn under_leaves_each_partition_is_a_table_and_a_created_one_is_streamed_only() {
    let name = unique("leaves");
    let client = pg().await;
    // Before 15 the publication lists tables (no `TABLES IN SCHEMA`): a partition is published
    // from when sluice adds it, so it is snapshotted, once.
    let version: i32 = client
        .query_one(
            "SELECT current_setting('server_version_num')::int / 10000",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let snapshotted = |ids: std::ops::RangeInclusive<i64>| -> Vec<i64> {
        if version >= 15 {
            Vec::new()
        } else {
            ids.collect()
        }
    };
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.events (id bigint, at int, v bigint NOT NULL, \
                 secret text DEFAULT 's', PRIMARY KEY (id, at)) PARTITION BY RANGE (at); \
             CREATE TABLE {name}.events_1 PARTITION OF {name}.events FOR VALUES FROM (0) TO (10); \
             INSERT INTO {name}.events SELECT g, g % 10, 0 FROM generate_series(1, 20) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\npartitions = \"leaves\"\ntable_refresh_interval_ms = 300\n\
             columns = {{ mask = [\"{name}.events.secret\"] }}\n"
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    client
        .batch_execute(&format!(
            "CREATE TABLE {name}.events_2 PARTITION OF {name}.events FOR VALUES FROM (10) TO (20); \
             INSERT INTO {name}.events SELECT g, 10 + g % 10, 2 FROM generate_series(201, 210) g; \
             UPDATE {name}.events SET v = 1 WHERE id IN (1, 201);"
        ))
        .await
        .unwrap();
    let topic = |table: &str| format!("{name}.{name}.{table}");
    let read = |topic: String, done: fn(&[Record]) -> bool| {
        tokio::task::spawn_blocking(move || read_topic(&topic, Duration::from_secs(60), done))
    };
    let first = read(topic("events_1"), |r| {
        newest(r).get(&1) == Some(&1) && reads(r).len() == 20
    })
    .await
    .unwrap();
    assert_eq!(
        reads(&first),
        (1..=20).collect::<Vec<i64>>(),
        "the snapshot, once"
    );
    let created = read(topic("events_2"), |r| {
        newest(r).len() == 10 && newest(r).get(&201) == Some(&1)
    })
    .await
    .unwrap();
    assert_eq!(
        reads(&created),
        snapshotted(201..=210),
        "a created partition's rows were all streamed (15+): {created:?}"
    );
    assert_eq!(newest(&created).len(), 10);
    // A column rule naming the partitioned table covers its partitions, present and future.
    for record in first.iter().chain(&created) {
        if let Some(value) = &record.value {
            assert_eq!(value["after"]["secret"], "****", "{value}");
        }
    }
    // A partition created (and written) while sluice was stopped: its rows are streamed
    // from the slot's WAL after the restart, not snapshotted too.
    let mut sluice = sluice;
    assert!(sluice.stop(), "a graceful stop");
    client
        .batch_execute(&format!(
            "CREATE TABLE {name}.events_3 PARTITION OF {name}.events FOR VALUES FROM (20) TO (30); \
             INSERT INTO {name}.events SELECT g, 20 + g % 10, 3 FROM generate_series(301, 305) g;"
        ))
        .await
        .unwrap();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(60));
    if version >= 15 {
        sluice.wait_log("the join to be logged", Duration::from_secs(10), |log| {
            log.contains("partitions created while sluice was stopped joined the captured set")
        });
        assert!(
            !sluice
                .log_text()
                .contains("tables joined the captured set: snapshotting them"),
            "nothing is snapshotted"
        );
    }
    client
        .batch_execute(&format!("UPDATE {name}.events SET v = 4 WHERE id = 301"))
        .await
        .unwrap();
    let stopped = read(topic("events_3"), |r| {
        newest(r).len() == 5 && newest(r).get(&301) == Some(&4)
    })
    .await
    .unwrap();
    let mut once = reads(&stopped);
    once.dedup();
    assert_eq!(once, reads(&stopped), "no row read twice");
    if version >= 15 {
        assert!(
            once.is_empty(),
            "a partition created while stopped was streamed, not snapshotted: {stopped:?}"
        );
    }
    println!(
        "leaves: {} events in the first partition's topic, {} in the created one's, {} in the one created while stopped",
        first.len(),
        created.len(),
        stopped.len()
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

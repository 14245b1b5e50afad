//! Unchanged TOASTed values through the PostgreSQL sink (issue 51), and columns an event does
//! not carry.
//!
//! - [`unchanged_toast_values_survive_cdc_into_another_database`]: PostgreSQL → sluice (CDC,
//!   Debezium's placeholder for unchanged TOASTed values) → Kafka → sluice (`[sink.postgres]`)
//!   → another database, with updates that leave large out-of-line columns untouched; the
//!   target must equal the source, every large value included. Scaled by environment
//!   variables for the issue's run (`SLUICE_IT_PGSINK_TOAST_ROWS=100000
//!   SLUICE_IT_PGSINK_TOAST_BIG_BYTES=1048576`); small in the suite.
//! - [`placeholders_and_absent_columns_as_a_user_sees_them`]: events written by hand in every
//!   form Debezium writes the placeholder, and events without some columns.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use tokio_postgres::Client;

use crate::sink::create_topic;
use crate::sink_pg::{drop_database, sink_toml, target_database, wait_zero};
use crate::support::{Sluice, free_port, pg, pipeline_toml, stack, test_dir, unique};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `(id, n, md5(big), md5(blob), length(big))` of every row, by id.
async fn fingerprint(client: &Client, table: &str) -> BTreeMap<i64, (i32, String, String, i32)> {
    client
        .query(
            &format!(
                "SELECT id, n, coalesce(md5(big), '-'), coalesce(md5(blob), '-'), coalesce(length(big), -1) FROM {table}"
            ),
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
        .collect()
}

/// PostgreSQL → sluice → Kafka → sluice → PostgreSQL with updates that leave large TOASTed
/// columns untouched (Debezium's placeholder in the events): the target equals the source.
#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toast_values_survive_cdc_into_another_database() {
    let rows = env_u64("SLUICE_IT_PGSINK_TOAST_ROWS", 2_000) as i64;
    let big_bytes = env_u64("SLUICE_IT_PGSINK_TOAST_BIG_BYTES", 65_536) as i64;
    let big_every = env_u64("SLUICE_IT_PGSINK_TOAST_BIG_EVERY", 100) as i64;
    let name = unique("pgsink_toast");
    let schema = name.clone();
    // STORAGE EXTERNAL: out of line and uncompressed, so every value above ~2 kB is TOASTed.
    let ddl = format!(
        "CREATE SCHEMA {schema};
         CREATE TABLE {schema}.items (id bigint PRIMARY KEY, n integer NOT NULL, big text, blob bytea, note text DEFAULT 'dflt');
         ALTER TABLE {schema}.items ALTER COLUMN big SET STORAGE EXTERNAL, ALTER COLUMN blob SET STORAGE EXTERNAL;"
    );
    let source = pg().await;
    source.batch_execute(&ddl).await.unwrap();
    let (target_url, target) = target_database(&name).await;
    target.batch_execute(&ddl).await.unwrap();
    let topic = format!("{name}.{schema}.items");
    // Records up to 8 MiB: an insert of a 1 MB value is more than Kafka's default 1 MB.
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    for result in admin
        .create_topics(
            &[NewTopic::new(&topic, 2, TopicReplication::Fixed(1))
                .set("max.message.bytes", "8388608")],
            &AdminOptions::new(),
        )
        .await
        .unwrap()
    {
        result.unwrap();
    }
    let cdc_port = free_port();
    let cdc = Sluice::start(
        &test_dir(&format!("{name}_cdc")),
        &pipeline_toml(
            &name,
            &schema,
            &name,
            cdc_port,
            "\n[kafka.producer]\n\"message.max.bytes\" = \"8388608\"\n",
        ),
        cdc_port,
    );
    cdc.wait_streaming(Duration::from_secs(60));
    let sink_port = free_port();
    let sink = Sluice::start(
        &test_dir(&format!("{name}_sink")),
        &sink_toml(
            &format!("{name}_sink"),
            std::slice::from_ref(&topic),
            &target_url,
            sink_port,
            "",
        ),
        sink_port,
    );
    sink.wait_streaming(Duration::from_secs(60));

    let started = Instant::now();
    let t = format!("{schema}.items");
    // Every row has an out-of-line `big` (3 kB; `big_bytes` for every `big_every`-th row) and
    // `blob`, distinct per row (md5 chains, incompressible).
    let chunk = 10_000i64;
    for first in (1..=rows).step_by(chunk as usize) {
        let last = (first + chunk - 1).min(rows);
        source
            .batch_execute(&format!(
                "INSERT INTO {t} (id, n, big, blob)
                 SELECT g, 0,
                        (SELECT string_agg(md5(g::text || ':' || i), '') FROM generate_series(1, CASE WHEN g % {big_every} = 0 THEN {big_bytes} / 32 ELSE 96 END) i),
                        decode((SELECT string_agg(md5(i || ':' || g::text), '') FROM generate_series(1, 96) i), 'hex')
                 FROM generate_series({first}, {last}) g"
            ))
            .await
            .unwrap();
    }
    // Two rounds of updates that leave `big` and `blob` alone: every event of them carries
    // the placeholder for both.
    for round in 1..=2 {
        for first in (1..=rows).step_by(chunk as usize) {
            let last = (first + chunk - 1).min(rows);
            source
                .batch_execute(&format!(
                    "UPDATE {t} SET n = {round} WHERE id BETWEEN {first} AND {last}"
                ))
                .await
                .unwrap();
        }
    }
    // One key's full value and then a placeholder in the same sink batch: the full value
    // stays. And a row inserted and updated in one transaction.
    for id in (1..=rows).step_by((rows as usize / 50).max(1)) {
        source
            .batch_execute(&format!(
                "BEGIN;
                 UPDATE {t} SET big = big || 'changed' WHERE id = {id};
                 UPDATE {t} SET n = n + 10 WHERE id = {id};
                 COMMIT;"
            ))
            .await
            .unwrap();
    }
    let fresh = rows + 1;
    source
        .batch_execute(&format!(
            "BEGIN;
             INSERT INTO {t} (id, n, big) VALUES ({fresh}, 0, repeat('f', 5000));
             UPDATE {t} SET n = 99 WHERE id = {fresh};
             COMMIT;"
        ))
        .await
        .unwrap();
    let changed_in = started.elapsed();

    let expected = fingerprint(&source, &t).await;
    let deadline =
        Instant::now() + crate::support::bound(Duration::from_secs(60 + rows as u64 / 500));
    let mut actual = BTreeMap::new();
    while Instant::now() < deadline {
        actual = fingerprint(&target, &t).await;
        if actual == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let equal_in = started.elapsed();
    let wrong: Vec<_> = expected
        .iter()
        .filter(|(id, row)| actual.get(id) != Some(row))
        .take(5)
        .map(|(id, row)| (id, row, actual.get(id)))
        .collect();
    assert!(
        wrong.is_empty() && actual.len() == expected.len(),
        "{} rows in the target, {} in the source; first differences (source, target): {wrong:#?}\nsink log:\n{}",
        actual.len(),
        expected.len(),
        sink.log_text()
    );
    let placeholders: i64 = target
        .query_one(
            &format!("SELECT count(*) FROM {t} WHERE big LIKE '%debezium_unavailable%'"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(placeholders, 0);
    let bytes: i64 = source
        .query_one(
            &format!("SELECT sum(length(big) + coalesce(length(blob), 0))::bigint FROM {t}"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    let changes = rows * 3 + rows / (rows / 50).max(1) * 2 + 2;
    println!(
        "{} rows ({bytes} bytes of TOASTed values; {} of {big_bytes} bytes), ~{changes} changes: \
         made in {changed_in:?}; target equal to the source {equal_in:?} after the first change \
         ({:.0} changes/s end to end)",
        expected.len(),
        rows / big_every,
        changes as f64 / equal_in.as_secs_f64()
    );
    drop(cdc);
    drop(sink);
    crate::support::drop_slot_and_publication(&source, &name).await;
    source
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    drop(target);
    drop_database(&name).await;
}

/// Events written as Debezium writes them: the placeholder in each of its forms (text, every
/// `binary.handling.mode` of `bytea`, text and `bytea` arrays, `int[]` as numbers, `hstore`
/// as JSON) leaves the target's value alone, in one batch with the row's insert too; an
/// update whose row is not in the target is dead-lettered with the reason; columns an event
/// does not carry take their default on insert and keep their value on update.
#[tokio::test(flavor = "multi_thread")]
async fn placeholders_and_absent_columns_as_a_user_sees_them() {
    let name = unique("pgsink_ph");
    let (url, target) = target_database(&name).await;
    target
        .batch_execute(
            "CREATE SCHEMA app;
             CREATE TABLE app.docs (id bigint PRIMARY KEY, n integer, body text, raw bytea, tags text[],
                                    nums integer[], doc jsonb, note text NOT NULL DEFAULT 'dflt');",
        )
        .await
        .unwrap();
    let topic = format!("{name}.app.docs");
    let dead_letter_topic = format!("{name}_dlq");
    create_topic(&topic, 1).await;
    create_topic(&dead_letter_topic, 1).await;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let send = |id: i64, op: &str, after: &str| {
        let key = format!(r#"{{"id":{id}}}"#);
        let value =
            format!(r#"{{"before":null,"after":{after},"source":{{}},"op":"{op}","ts_ms":0}}"#);
        producer
            .send(BaseRecord::to(&topic).key(&key).payload(&value))
            .map_err(|(e, _)| e)
            .unwrap();
    };
    let ph = "__debezium_unavailable_value";
    let forms = [
        r#""raw":"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==""#.to_string(),
        r#""raw":"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ""#.to_string(),
        r#""raw":"5f5f646562657a69756d5f756e617661696c61626c655f76616c7565""#.to_string(),
        format!(r#""raw":"{ph}""#),
    ];
    let nums: Vec<String> = ph.bytes().map(|b| b.to_string()).collect();
    for (i, raw) in forms.iter().enumerate() {
        let id = i as i64 + 1;
        // The insert, with every value, then an update with the placeholder in every column
        // (one batch: the full values must survive it).
        send(
            id,
            "c",
            &format!(
                r#"{{"id":{id},"n":0,"body":"body {id}","raw":"AQID","tags":["a","b"],"nums":[1,2],"doc":"{{\"k\":{id}}}","note":"given"}}"#
            ),
        );
        send(
            id,
            "u",
            &format!(
                r#"{{"id":{id},"n":1,"body":"{ph}",{raw},"tags":["{ph}"],"nums":[{}],"doc":"{ph}","note":"given"}}"#,
                nums.join(",")
            ),
        );
    }
    // Inserts without `note`: its default. An update without `note` and `body`: unchanged.
    send(
        10,
        "c",
        r#"{"id":10,"n":0,"body":"ten","raw":null,"tags":null,"nums":null,"doc":null}"#,
    );
    send(11, "c", r#"{"id":11,"n":0,"body":"eleven","note":"mine"}"#);
    send(11, "u", r#"{"id":11,"n":5}"#);
    producer.flush(Duration::from_secs(30)).unwrap();

    let port = free_port();
    let toml = sink_toml(&name, std::slice::from_ref(&topic), &url, port, "")
        .replace("sub_partitions = 4", "sub_partitions = 1")
        .replace(
            "[admin]",
            &format!(
                "[delivery]\non_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\n\n[admin]"
            ),
        );
    let sink = Sluice::start(&test_dir(&name), &toml, port);
    let expected = "SELECT count(*) FROM (VALUES
           (1, 1, 'body 1', '\\x010203', '{a,b}', '{1,2}', '{\"k\": 1}', 'given'),
           (2, 1, 'body 2', '\\x010203', '{a,b}', '{1,2}', '{\"k\": 2}', 'given'),
           (3, 1, 'body 3', '\\x010203', '{a,b}', '{1,2}', '{\"k\": 3}', 'given'),
           (4, 1, 'body 4', '\\x010203', '{a,b}', '{1,2}', '{\"k\": 4}', 'given'),
           (10, 0, 'ten', NULL, NULL, NULL, NULL, 'dflt'),
           (11, 5, 'eleven', NULL, NULL, NULL, NULL, 'mine')
         ) AS e(id, n, body, raw, tags, nums, doc, note)
         FULL JOIN app.docs d USING (id)
         WHERE d.id IS NULL OR e.id IS NULL
            OR (d.n, d.body, d.raw::text, d.tags::text, d.nums::text, d.doc::text, d.note)
               IS DISTINCT FROM (e.n, e.body, e.raw, e.tags, e.nums, e.doc, e.note)";
    wait_zero(
        "the rows as the changes leave them",
        &target,
        expected,
        Duration::from_secs(60),
        &sink,
    )
    .await;

    // The same placeholder updates once the rows are there (their own batches now), and an
    // update with placeholders for a row the target has never had.
    for (i, raw) in forms.iter().enumerate() {
        let id = i as i64 + 1;
        send(
            id,
            "u",
            &format!(
                r#"{{"id":{id},"n":2,"body":"{ph}",{raw},"tags":["{ph}"],"nums":[{}],"doc":"{ph}","note":"given"}}"#,
                nums.join(",")
            ),
        );
    }
    send(20, "u", &format!(r#"{{"id":20,"n":2,"body":"{ph}"}}"#));
    producer.flush(Duration::from_secs(30)).unwrap();
    wait_zero(
        "the placeholder updates applied (n = 2), nothing else changed",
        &target,
        &expected
            .replace("(1, 1,", "(1, 2,")
            .replace("(2, 1,", "(2, 2,")
            .replace("(3, 1,", "(3, 2,")
            .replace("(4, 1,", "(4, 2,"),
        Duration::from_secs(60),
        &sink,
    )
    .await;
    let records = crate::support::read_topic(&dead_letter_topic, Duration::from_secs(60), |r| {
        !r.is_empty()
    });
    assert_eq!(records.len(), 1, "{records:?}");
    let reason = &records[0].headers["sluice.dlq.reason"];
    assert!(
        reason.contains("column(s) body") && reason.contains("not in the target table"),
        "{reason}"
    );
    drop(sink);
    drop(target);
    drop_database(&name).await;
}

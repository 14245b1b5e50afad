//! The dev stack itself: both servers reachable and doing their jobs.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{FutureProducer, FutureRecord};

use crate::support::{pg, read_topic, stack, unique};

/// Creates a topic, produces a record and reads it back; opens a logical replication slot and
/// reads one change from it.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_round_trip_and_logical_slot() {
    let stack = stack();
    let topic = unique("it_stack");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &stack.brokers)
        .create()
        .expect("admin client");
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))],
            &AdminOptions::new(),
        )
        .await
        .expect("create topic");
    assert!(created[0].is_ok(), "{created:?}");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", &stack.brokers)
        .create()
        .expect("producer");
    producer
        .send(
            FutureRecord::to(&topic)
                .key("{\"k\":1}")
                .payload("{\"hello\":1}"),
            Duration::from_secs(10),
        )
        .await
        .expect("delivered");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(30), |r| !r.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].value.as_ref().unwrap()["hello"], 1);

    let client = pg().await;
    let level: String = client
        .query_one("SHOW wal_level", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(level, "logical");
    let table = unique("it_stack_t");
    let slot = unique("it_stack_slot");
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id int primary key, v text)"
        ))
        .await
        .unwrap();
    client
        .query_one(
            "SELECT lsn FROM pg_create_logical_replication_slot($1, 'test_decoding')",
            &[&slot],
        )
        .await
        .unwrap();
    client
        .batch_execute(&format!("INSERT INTO {table} VALUES (1, 'one')"))
        .await
        .unwrap();
    let rows = client
        .query(
            "SELECT data FROM pg_logical_slot_get_changes($1, NULL, NULL)",
            &[&slot],
        )
        .await
        .unwrap();
    let changes: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
    client
        .execute("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    client
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
    assert!(
        changes.iter().any(|c| c.contains(&format!(
            "table public.{table}: INSERT: id[integer]:1 v[text]:'one'"
        ))),
        "{changes:?}"
    );
}

//! The transactional outbox: inserted rows become events routed by aggregate type.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::support::{
    Sluice, broker_shared, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic,
    stack, test_dir, unique,
};

/// Events of two aggregate types land on their own topics, keyed by aggregate id, with the
/// payload as value and the other columns as headers; the insert-then-delete pattern in one
/// transaction emits exactly the insert; the outbox table gets no change-event topic.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_rows_are_routed_by_aggregate_type() {
    let _broker = broker_shared().await;
    let name = unique("outbox");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.outbox (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), \
               aggregatetype text NOT NULL, aggregateid text NOT NULL, type text NOT NULL, \
               payload jsonb, created_at timestamptz NOT NULL DEFAULT now());"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    // Only the outbox is captured (no schemas): the [source.postgres] section is rewritten.
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        &format!("schemas = [\"{name}\"]\n"),
        &format!(
            "\n[source.postgres.outbox]\ntable = \"{name}.outbox\"\ntopic = \"{name}.events.{{aggregate_type}}\"\n\n[source.postgres.x]\n"
        ),
    );
    // Put the outbox section after the source's other keys.
    let toml = fix_sections(&toml);
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    client
        .batch_execute(&format!(
            "BEGIN; \
             INSERT INTO {name}.outbox (aggregatetype, aggregateid, type, payload) VALUES \
               ('order', 'o-1', 'OrderCreated', '{{\"id\": \"o-1\", \"total\": 10}}'), \
               ('customer', 'c-7', 'CustomerRenamed', '{{\"name\": \"Ada\"}}'); \
             INSERT INTO {name}.outbox (aggregatetype, aggregateid, type, payload) VALUES \
               ('order', 'o-1', 'OrderPaid', '{{\"id\": \"o-1\"}}'); \
             COMMIT; \
             BEGIN; \
             INSERT INTO {name}.outbox (aggregatetype, aggregateid, type, payload) VALUES \
               ('order', 'o-2', 'OrderCreated', '{{\"id\": \"o-2\"}}'); \
             DELETE FROM {name}.outbox WHERE aggregateid = 'o-2'; \
             COMMIT;"
        ))
        .await
        .unwrap();

    let orders = format!("{name}.events.order");
    let order_records = tokio::task::spawn_blocking(move || {
        read_topic(&orders, Duration::from_secs(60), |records| {
            records.len() >= 3
        })
    })
    .await
    .unwrap();
    let types: Vec<&str> = order_records
        .iter()
        .map(|r| r.headers["type"].as_str())
        .collect();
    assert_eq!(
        types,
        ["OrderCreated", "OrderPaid", "OrderCreated"],
        "in commit order"
    );
    let first = &order_records[0];
    // The key is the aggregate id's bytes (not JSON: read back as a string).
    assert_eq!(first.key, Some(serde_json::Value::String("o-1".into())));
    assert!(first.headers.contains_key("id") && first.headers.contains_key("created_at"));
    assert!(!first.headers.contains_key("payload") && !first.headers.contains_key("aggregateid"));
    assert_eq!(first.value.as_ref().unwrap()["total"], 10);
    // Exactly the insert of o-2: no record for its delete, no tombstone.
    let o2: Vec<_> = order_records
        .iter()
        .filter(|r| r.headers["type"] == "OrderCreated" && r.value.as_ref().unwrap()["id"] == "o-2")
        .collect();
    assert_eq!(o2.len(), 1);
    assert!(
        order_records.iter().all(|r| r.value.is_some()),
        "no tombstones"
    );

    let customers = format!("{name}.events.customer");
    let customer_records = tokio::task::spawn_blocking(move || {
        read_topic(&customers, Duration::from_secs(60), |records| {
            !records.is_empty()
        })
    })
    .await
    .unwrap();
    assert_eq!(customer_records.len(), 1);
    assert_eq!(customer_records[0].value.as_ref().unwrap()["name"], "Ada");
    assert!(
        customer_records[0]
            .headers
            .contains_key("sluice.commit_lsn")
    );

    // Nothing more arrives on the order topic (the delete emitted nothing), and the outbox
    // table has no change-event topic.
    let orders = format!("{name}.events.order");
    let again = tokio::task::spawn_blocking(move || {
        read_topic(&orders, Duration::from_secs(3), |records| records.len() > 3)
    })
    .await
    .unwrap();
    assert_eq!(again.len(), 3);
    let cdc_topic = format!("{name}.{name}.outbox");
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    assert!(
        metadata.topics().iter().all(|t| t.name() != cdc_topic),
        "no change-event topic for the outbox table itself"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Moves the `[source.postgres.outbox]` block written in place of `schemas` below the rest of
/// the `[source.postgres]` keys (TOML needs a table's keys before its sub-tables).
fn fix_sections(toml: &str) -> String {
    let start = toml
        .find("\n[source.postgres.outbox]")
        .expect("outbox block");
    let end = toml.find("[source.postgres.x]\n").expect("marker");
    let block = &toml[start..end];
    let rest = format!(
        "{}{}",
        &toml[..start],
        &toml[end + "[source.postgres.x]\n".len()..]
    );
    let kafka = rest.find("\n[kafka]").expect("kafka section");
    format!("{}{}\n{}", &rest[..kafka], block, &rest[kafka..])
}

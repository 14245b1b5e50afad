//! The transactional outbox: inserted rows become events routed by aggregate type.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, stack, test_dir,
    unique,
};

/// Events of two aggregate types land on their own topics, keyed by aggregate id, with the
/// payload as value and the other columns as headers; the insert-then-delete pattern in one
/// transaction emits exactly the insert; the outbox table gets no change-event topic.
#[tokio::test(flavor = "multi_thread")]
async fn outbox_rows_are_routed_by_aggregate_type() {
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

/// Debezium's `EventRouter` as a transform (its Debezium keys, its predicate naming the outbox
/// table's topic) routes the same records as `[source.postgres.outbox]` written with the same
/// settings: two pipelines read one outbox table, and their routed topics hold the same keys,
/// values and headers in the same order (the position headers included: the same commits).
#[tokio::test(flavor = "multi_thread")]
async fn event_router_transform_routes_as_the_outbox_section_does() {
    let name = unique("evrouter");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.outbox (event_id uuid PRIMARY KEY DEFAULT gen_random_uuid(), \
               kind text NOT NULL, agg text NOT NULL, type text NOT NULL, body jsonb, \
               tenant text);"
        ))
        .await
        .unwrap();
    // The transform form: Debezium's keys, the table named by the predicate's topic.
    let transform = format!(
        r#"
[transforms]
chain = ["outbox"]
[transforms.outbox]
type = "io.debezium.transforms.outbox.EventRouter"
"table.field.event.id" = "event_id"
"table.field.event.key" = "agg"
"table.field.event.payload" = "body"
"route.by.field" = "kind"
"route.topic.replacement" = "{name}.er.$${{routedByValue}}"
"table.fields.additional.placement" = "type:header:eventType,tenant:header"
predicate = "isOutbox"
[predicates.isOutbox]
type = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
pattern = "{name}\\.{name}\\.outbox"
"#
    );
    let er_name = format!("{name}_er");
    let er_port = free_port();
    let er_toml = pipeline_toml(&er_name, &name, &name, er_port, &transform);
    // The section form with the same settings.
    let ob_name = format!("{name}_ob");
    let ob_port = free_port();
    let ob_toml = pipeline_toml(&ob_name, &name, &name, ob_port, "").replace(
        &format!("schemas = [\"{name}\"]\n"),
        &format!(
            "\n[source.postgres.outbox]\ntable = \"{name}.outbox\"\ntopic = \"{name}.ob.{{aggregate_type}}\"\naggregate_type_column = \"kind\"\naggregate_id_column = \"agg\"\npayload_column = \"body\"\nheaders = [\"event_id:id\", \"type:eventType\", \"tenant\"]\n\n[source.postgres.x]\n"
        ),
    );
    let ob_toml = fix_sections(&ob_toml);
    let er = Sluice::start(&test_dir(&er_name), &er_toml, er_port);
    let ob = Sluice::start(&test_dir(&ob_name), &ob_toml, ob_port);
    er.wait_streaming(Duration::from_secs(60));
    ob.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "BEGIN; \
             INSERT INTO {name}.outbox (kind, agg, type, body, tenant) VALUES \
               ('order', 'o-1', 'OrderCreated', '{{\"id\": \"o-1\"}}', 'eu'), \
               ('order', 'o-1', 'OrderPaid', NULL, NULL); \
             UPDATE {name}.outbox SET type = 'X' WHERE agg = 'o-1'; \
             COMMIT; \
             INSERT INTO {name}.outbox (kind, agg, type, body, tenant) VALUES \
               ('order', 'o-2', 'OrderCreated', '{{\"id\": \"o-2\"}}', 'us');"
        ))
        .await
        .unwrap();
    let read = |topic: String| {
        tokio::task::spawn_blocking(move || {
            read_topic(&topic, Duration::from_secs(60), |records| {
                records.len() >= 3
            })
        })
    };
    let routed = read(format!("{name}.er.order")).await.unwrap();
    let section = read(format!("{name}.ob.order")).await.unwrap();
    let view = |records: &[crate::support::Record]| {
        records
            .iter()
            .map(|r| {
                let mut headers: Vec<(String, String)> = r
                    .headers
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                headers.sort();
                (r.key.clone(), r.value.clone(), headers)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(routed.len(), 3, "the inserts only");
    assert_eq!(view(&routed), view(&section));
    // Debezium's headers: the event id as `id`, the placed columns under their aliases, no
    // others (a NULL column has none); a NULL payload is a tombstone.
    let first = &routed[0];
    assert_eq!(first.headers["eventType"], "OrderCreated");
    assert_eq!(first.headers["tenant"], "eu");
    assert!(first.headers.contains_key("id"));
    assert!(!first.headers.contains_key("event_id") && !first.headers.contains_key("type"));
    assert_eq!(first.key, Some(serde_json::Value::String("o-1".into())));
    assert!(routed[1].value.is_none() && !routed[1].headers.contains_key("tenant"));
    drop(er);
    drop(ob);
    drop_slot_and_publication(&client, &er_name).await;
    drop_slot_and_publication(&client, &ob_name).await;
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

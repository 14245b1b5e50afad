//! Table exclusion and column rules (exclude, hash, mask), in the snapshot and in the stream.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sha2::Digest as _;

use crate::support::{
    Sluice, broker_shared, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic,
    stack, test_dir, unique,
};

fn sha256_hex(text: &str) -> String {
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A captured schema with an excluded table, and a users table whose password is left out,
/// email hashed and ssn masked: the snapshot row and the streamed update both follow the
/// rules, the key keeps its value, and the excluded table gets no topic.
#[tokio::test(flavor = "multi_thread")]
async fn excluded_tables_and_column_rules_apply_to_snapshot_and_stream() {
    let _broker = broker_shared().await;
    let name = unique("filters");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.users (id int PRIMARY KEY, email text, password text, ssn text, nick text); \
             CREATE TABLE {name}.audit_log (id int PRIMARY KEY, what text); \
             INSERT INTO {name}.users VALUES (1, 'ada@example.com', 'hunter2', '123-45-6789', 'ada'); \
             INSERT INTO {name}.audit_log VALUES (1, 'created');"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\nexclude_tables = [\"{name}.audit_*\"]\n\
             columns = {{ exclude = [\"*.*.password\"], hash = [\"{name}.users.email\"], mask = [\"{name}.users.ssn\"] }}\n"
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "UPDATE {name}.users SET nick = 'countess', email = 'ada@lovelace.dev' WHERE id = 1; \
             INSERT INTO {name}.audit_log VALUES (2, 'updated');"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.users");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 2)
    })
    .await
    .unwrap();
    let ops: Vec<_> = records.iter().map(|r| r.op()).collect();
    assert_eq!(ops, [Some("r"), Some("u")], "{records:?}");
    for (record, email) in records.iter().zip(["ada@example.com", "ada@lovelace.dev"]) {
        assert_eq!(
            record.key.as_ref().unwrap()["id"],
            1,
            "the key keeps its value"
        );
        let after = &record.value.as_ref().unwrap()["after"];
        assert!(
            after.get("password").is_none(),
            "password left out: {after}"
        );
        assert_eq!(after["ssn"], "****");
        assert_eq!(after["email"], sha256_hex(email).as_str());
        assert!(
            after["nick"].is_string(),
            "other columns as they are: {after}"
        );
    }
    // The excluded table: no topic.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .unwrap();
    let audit = format!("{name}.{name}.audit_log");
    assert!(
        metadata.topics().iter().all(|t| t.name() != audit),
        "no topic for the excluded table"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

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

/// Columns added, dropped and retyped mid-stream: the row events before and after carry the
/// columns of their time, and each change is an event on the schema-changes topic, in order.
#[tokio::test(flavor = "multi_thread")]
async fn schema_changes_are_events_on_their_own_topic() {
    let _broker = broker_shared().await;
    let name = unique("schemachg");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY, payload text, n int);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[kafka]\n",
        &format!("[kafka]\nschema_changes_topic = \"{name}.schema_changes\"\n"),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t VALUES (1, 'a', 1); \
             ALTER TABLE {name}.t ADD COLUMN extra text; \
             INSERT INTO {name}.t VALUES (2, 'b', 2, 'x'); \
             ALTER TABLE {name}.t DROP COLUMN payload, ALTER COLUMN n TYPE bigint; \
             INSERT INTO {name}.t VALUES (3, 3, 'y');"
        ))
        .await
        .unwrap();
    let rows_topic = format!("{name}.{name}.t");
    let rows = tokio::task::spawn_blocking(move || {
        read_topic(&rows_topic, Duration::from_secs(60), |r| r.len() >= 3)
    })
    .await
    .unwrap();
    let after = |i: usize| rows[i].value.as_ref().unwrap()["after"].clone();
    assert_eq!(
        after(0),
        serde_json::json!({"id": 1, "payload": "a", "n": 1})
    );
    assert_eq!(
        after(1),
        serde_json::json!({"id": 2, "payload": "b", "n": 2, "extra": "x"})
    );
    assert_eq!(after(2), serde_json::json!({"id": 3, "n": 3, "extra": "y"}));
    let topic = format!("{name}.schema_changes");
    let events = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 2)
    })
    .await
    .unwrap();
    assert_eq!(events.len(), 2, "{events:?}");
    let changes = |i: usize| events[i].value.as_ref().unwrap()["changes"].clone();
    assert_eq!(
        changes(0),
        serde_json::json!([{"column": "extra", "change": "added", "type_oid": 25}])
    );
    let second = changes(1);
    let second = second.as_array().unwrap();
    assert!(
        second
            .iter()
            .any(|c| c["column"] == "payload" && c["change"] == "dropped")
            && second.iter().any(|c| c["column"] == "n"
                && c["change"] == "type_changed"
                && c["type_oid"] == 20),
        "{second:?}"
    );
    assert_eq!(
        events[0].key.as_ref().unwrap()["table"],
        format!("{name}.t").as_str()
    );
    // The schema event precedes the row change that first uses the new columns.
    assert!(events[0].header_u64("sluice.commit_lsn") <= rows[1].header_u64("sluice.commit_lsn"));
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

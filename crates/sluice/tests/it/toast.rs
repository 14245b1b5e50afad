//! Unchanged TOASTed columns of an update: Debezium's placeholder by default, marked
//! unavailable per column with `[kafka.events] unavailable_columns = true` (never null, never a
//! placeholder), or re-read from the table with `unchanged_toast = "reread"`.

use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, test_dir, unique,
};

/// Creates a table with an out-of-line (EXTERNAL, uncompressed) 20 kB value, runs a pipeline
/// with `extra` keys (in `[source.postgres]`) and `events` (appended), updates another column,
/// and returns the update's event and the value.
async fn update_event(prefix: &str, extra: &str, events: &str) -> (Value, String) {
    let name = unique(prefix);
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.docs (id int PRIMARY KEY, v int NOT NULL, body text, note text); \
             ALTER TABLE {name}.docs ALTER COLUMN body SET STORAGE EXTERNAL; \
             INSERT INTO {name}.docs SELECT 1, 0, string_agg(md5(g::text), ''), 'short' FROM generate_series(1, 640) g;"
        ))
        .await
        .unwrap();
    let body: String = client
        .query_one(&format!("SELECT body FROM {name}.docs WHERE id = 1"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(body.len(), 20_480);
    let out_of_line: i32 = client
        .query_one(
            &format!("SELECT pg_column_size(body) FROM {name}.docs WHERE id = 1"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(out_of_line >= 20_000, "stored uncompressed: {out_of_line}");
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, events).replace(
        "[source.postgres]\n",
        &format!("[source.postgres]\n{extra}\n"),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "UPDATE {name}.docs SET v = 1, note = NULL WHERE id = 1"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.docs");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |records| {
            records.iter().any(|r| r.op() == Some("u"))
        })
    })
    .await
    .unwrap();
    let update = records
        .iter()
        .find(|r| r.op() == Some("u"))
        .and_then(|r| r.value.clone())
        .expect("the update's event");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
    (update, body)
}

#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toast_is_debezium_placeholder_by_default() {
    let (update, _) = update_event("toastdbz", "", "").await;
    let after = update["after"].as_object().unwrap();
    assert_eq!(after["v"], 1);
    assert_eq!(after["body"], "__debezium_unavailable_value", "{after:?}");
    assert!(after["note"].is_null(), "a real NULL stays null: {after:?}");
    assert!(update.get("unavailable_columns").is_none(), "{update}");
}

#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toast_is_marked_unavailable_per_column() {
    let (update, _) = update_event(
        "toastmark",
        "",
        "\n[kafka.events]\nunavailable_columns = true\n",
    )
    .await;
    let after = update["after"].as_object().unwrap();
    assert_eq!(after["v"], 1);
    assert!(
        !after.contains_key("body"),
        "the unchanged value is neither null nor made up: {after:?}"
    );
    assert!(after["note"].is_null(), "a real NULL stays null: {after:?}");
    assert_eq!(update["unavailable_columns"], serde_json::json!(["body"]));
}

#[tokio::test(flavor = "multi_thread")]
async fn unchanged_toast_is_reread_when_configured() {
    let (update, body) = update_event("toastread", "unchanged_toast = \"reread\"", "").await;
    let after = update["after"].as_object().unwrap();
    assert_eq!(after["v"], 1);
    assert_eq!(
        after["body"].as_str(),
        Some(body.as_str()),
        "the value re-read from the table"
    );
    assert!(after["note"].is_null());
    assert!(
        update.get("unavailable_columns").is_none(),
        "nothing is unavailable: {update}"
    );
}

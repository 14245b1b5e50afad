//! Incremental snapshot requests whose filters try to run SQL of their own: through the signal
//! table and through the admin API, each is refused (naming why) or harmless; a canary table is
//! untouched and the pipeline keeps streaming.

use std::time::Duration;

use serde_json::Value;

use crate::support::{
    Record, Sluice, drop_slot_and_publication, free_port, http_json, pg, pipeline_toml, read_topic,
    test_dir, unique, wait_until,
};

/// The ids an incremental snapshot published (`op: "r"`, `source.snapshot: "incremental"`).
fn incremental_ids(records: &[Record]) -> Vec<i64> {
    let mut ids: Vec<i64> = records
        .iter()
        .filter(|r| {
            r.value
                .as_ref()
                .is_some_and(|v| v["op"] == "r" && v["source"]["snapshot"] == "incremental")
        })
        .map(|r| r.key.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids
}

/// Inserts an `execute-snapshot` signal row for `table` with `filter`.
async fn signal(
    client: &tokio_postgres::Client,
    schema: &str,
    table: &str,
    id: &str,
    filter: &str,
) {
    let data = serde_json::json!({
        "data-collections": [table],
        "type": "incremental",
        "additional-conditions": [{"data-collection": table, "filter": filter}],
    });
    client
        .execute(
            &format!("INSERT INTO {schema}.sluice_signal VALUES ($1, 'execute-snapshot', $2)"),
            &[&id, &data.to_string()],
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_snapshot_filters_are_refused_or_harmless() {
    let name = unique("hostile");
    let client = pg().await;
    let canary = format!("{name}.canary");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id bigint PRIMARY KEY, v bigint NOT NULL); \
             INSERT INTO {name}.t SELECT g, 0 FROM generate_series(1, 50) g; \
             CREATE TABLE {canary} (n int PRIMARY KEY); INSERT INTO {canary} VALUES (1); \
             CREATE FUNCTION {name}.leak() RETURNS boolean LANGUAGE plpgsql VOLATILE AS \
             'BEGIN INSERT INTO {canary} VALUES (99); RETURN true; END';"
        ))
        .await
        .unwrap();
    // The control: the function writes when it is allowed to.
    let written: i64 = client
        .query_one(
            &format!("WITH l AS (SELECT {name}.leak()) SELECT count(*) FROM l"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(written, 1);
    client
        .batch_execute(&format!("DELETE FROM {canary} WHERE n = 99"))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\nsnapshot = \"never\"\nsignal_table = \"{name}.sluice_signal\"\nincremental_chunk_rows = 16\n"
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let table = format!("{name}.t");

    // Refused before they reach the database: (label, filter, why).
    let refused_early = [
        (
            "semicolon",
            format!("true; DELETE FROM {canary}"),
            "contains ';'",
        ),
        (
            "commit-and-delete",
            format!("true); COMMIT; DELETE FROM {canary}; SELECT * FROM {name}.t WHERE (true"),
            "')' without its '('",
        ),
        ("line-comment", "true --".to_owned(), "contains a comment"),
        (
            "block-comment",
            "true /* x */".to_owned(),
            "contains a comment",
        ),
        ("dollar-quote", "v = $$0$$".to_owned(), "dollar quote"),
        (
            "escape-string",
            format!("v = E'\\'' ; DELETE FROM {canary}; --'"),
            "contains ';'",
        ),
    ];
    // One condition each, so they reach the server, which refuses them in the read-only
    // transaction of one statement: (label, filter, the server's reason).
    let refused_by_server = [
        (
            "modifying-cte",
            format!("id IN (WITH x AS (DELETE FROM {canary} RETURNING n) SELECT n FROM x)"),
            "data-modifying",
        ),
        (
            "writing-function",
            format!("{name}.leak()"),
            "read-only transaction",
        ),
    ];
    let api = |id: String, filter: &str| {
        let body = serde_json::json!({"tables": [table], "filter": filter, "id": id});
        http_json(
            sluice.admin,
            "POST",
            &format!("/api/v1/pipelines/{name}/snapshots"),
            &body.to_string(),
        )
        .unwrap()
    };
    for (label, filter, _) in refused_early.iter().chain(&refused_by_server) {
        signal(&client, &name, &table, &format!("sig-{label}"), filter).await;
    }
    for (label, filter, why) in &refused_early {
        let (status, body) = api(format!("api-{label}"), filter);
        assert_eq!(status, 400, "{label}: {body}");
        assert!(body.contains(why), "{label}: {body}");
    }
    for (label, filter, _) in &refused_by_server {
        let (status, body) = api(format!("api-{label}"), filter);
        assert_eq!(status, 202, "{label}: {body}");
    }
    // Harmless: a slow filter reads its rows slowly (the statement timeout bounds it).
    let (status, body) = api(
        "api-sleep".into(),
        "id BETWEEN 6 AND 8 AND (SELECT true FROM pg_sleep(0.5))",
    );
    assert_eq!(status, 202, "{body}");
    signal(
        &client,
        &name,
        &table,
        "sig-sleep",
        "id <= 5 AND (SELECT true FROM pg_sleep(0.5))",
    )
    .await;

    // The requests run in order: once the last one's rows are in Kafka, every one before it
    // was read (or refused).
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || {
            read_topic(&topic, Duration::from_secs(120), |records| {
                incremental_ids(records).len() >= 8
            })
        }
    })
    .await
    .unwrap();
    let canary_rows: Vec<i32> = client
        .query(&format!("SELECT n FROM {canary} ORDER BY n"), &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(canary_rows, [1], "the canary table is untouched");
    assert_eq!(
        incremental_ids(&records),
        (1..=8).collect::<Vec<i64>>(),
        "only the slow filters' rows, once each"
    );

    // Every refused request is marked, with its reason, in the status (and the state file).
    let status = || -> Value {
        serde_json::from_str(
            &sluice
                .get(&format!("/api/v1/pipelines/{name}"))
                .unwrap_or_default(),
        )
        .unwrap_or(Value::Null)
    };
    let mut expected: Vec<(String, &str)> = refused_early
        .iter()
        .map(|(label, _, why)| (format!("sig-{label}"), *why))
        .collect();
    for (label, _, why) in &refused_by_server {
        expected.push((format!("sig-{label}"), why));
        expected.push((format!("api-{label}"), why));
    }
    wait_until(
        "every refused request in the status",
        Duration::from_secs(30),
        || {
            let refused = status()["refused_snapshot_requests"].clone();
            expected.iter().all(|(id, _)| {
                refused
                    .as_array()
                    .is_some_and(|r| r.iter().any(|r| r["id"] == id.as_str()))
            })
        },
    );
    let refused = status()["refused_snapshot_requests"].clone();
    for (id, why) in &expected {
        let entry = refused
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["id"] == id.as_str())
            .unwrap();
        assert!(
            entry["reason"].as_str().unwrap().contains(why),
            "{id}: {entry}"
        );
    }
    let log = sluice.log_text();
    assert!(
        log.contains("incremental snapshot request \"sig-semicolon\" refused"),
        "the log names the refusal"
    );

    // Still streaming: a new row arrives.
    client
        .batch_execute(&format!("INSERT INTO {name}.t VALUES (1000, 7)"))
        .await
        .unwrap();
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |records| {
            records.iter().any(|r| {
                r.value
                    .as_ref()
                    .is_some_and(|v| v["op"] == "c" && v["after"]["id"] == 1000)
            })
        })
    })
    .await
    .unwrap();
    assert!(
        records
            .iter()
            .any(|r| r.value.as_ref().is_some_and(|v| v["op"] == "c")),
        "the insert after the hostile requests is streamed"
    );
    assert_eq!(status()["state"], "streaming");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

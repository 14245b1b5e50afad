//! Table exclusion and column rules (exclude, hash, mask), in the snapshot and in the stream.

use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use sha2::Digest as _;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, stack, test_dir,
    unique,
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

/// The rows of `pg_publication_tables` for a publication: table → (columns, row filter).
async fn publication_tables(
    client: &tokio_postgres::Client,
    publication: &str,
) -> std::collections::BTreeMap<String, (Vec<String>, Option<String>)> {
    client
        .query(
            "SELECT tablename::text, attnames::text[], rowfilter FROM pg_publication_tables \
             WHERE pubname = $1",
            &[&publication],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

/// Row filters and an excluded column pushed down to the publication: `pg_publication_tables`
/// shows the filters and the column list; rows outside a filter reach Kafka neither from the
/// snapshot nor from the stream; an update that moves a row out of the filter arrives as a
/// delete and one that moves a row into it as a create (as PostgreSQL publishes them); the
/// excluded column's values never reach Kafka; `sluice check` shows the filters.
#[tokio::test(flavor = "multi_thread")]
async fn row_filters_and_column_lists_are_pushed_down_to_the_publication() {
    let name = unique("pushdown");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.orders (id int PRIMARY KEY, status text NOT NULL, note text); \
             ALTER TABLE {name}.orders REPLICA IDENTITY FULL; \
             CREATE TABLE {name}.users (id int PRIMARY KEY, email text, password text, nick text); \
             CREATE TABLE {name}.plain (id int PRIMARY KEY, v text); \
             INSERT INTO {name}.orders VALUES (1, 'paid', 'a'), (2, 'draft', 'secret-draft-2'), (3, 'paid', 'c'); \
             INSERT INTO {name}.users VALUES (1, 'ada@example.com', 'hunter2', 'ada'), (100, 'x@example.com', 'hunter2', 'x'); \
             INSERT INTO {name}.plain VALUES (1, 'p');"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\n\
             row_filters = {{ \"{name}.orders\" = \"status <> 'draft'\", \"{name}.users\" = \"id < 100\" }}\n\
             columns = {{ exclude = [\"{name}.users.password\"] }}\n"
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    let published = publication_tables(&client, &format!("sluice_{name}")).await;
    let strings = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    assert_eq!(
        published.get("orders"),
        Some(&(
            strings(&["id", "status", "note"]),
            Some("(status <> 'draft'::text)".to_owned())
        )),
        "{published:?}"
    );
    assert_eq!(
        published.get("users"),
        Some(&(
            strings(&["id", "email", "nick"]),
            Some("(id < 100)".to_owned())
        )),
        "{published:?}"
    );
    assert_eq!(
        published.get("plain"),
        Some(&(strings(&["id", "v"]), None)),
        "{published:?}"
    );

    client
        .batch_execute(&format!(
            "INSERT INTO {name}.orders VALUES (4, 'draft', 'secret-draft-4'), (5, 'paid', 'e'); \
             UPDATE {name}.orders SET status = 'draft', note = 'secret-draft-1' WHERE id = 1; \
             UPDATE {name}.orders SET status = 'paid', note = 'b' WHERE id = 2; \
             INSERT INTO {name}.users VALUES (5, 'bob@example.com', 'hunter2', 'bob'), (101, 'y@example.com', 'hunter2', 'y'); \
             UPDATE {name}.users SET password = 'hunter3', nick = 'countess' WHERE id = 1; \
             INSERT INTO {name}.orders VALUES (6, 'paid', 'last'); \
             INSERT INTO {name}.users VALUES (6, 'last@example.com', 'hunter2', 'last');"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.orders");
    let orders = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| {
            r.iter()
                .any(|r| r.key.as_ref().is_some_and(|k| k["id"] == 6))
        })
    })
    .await
    .unwrap();
    let events: Vec<(String, i64)> = orders
        .iter()
        .filter_map(|r| Some((r.op()?.to_owned(), r.key.as_ref()?["id"].as_i64()?)))
        .collect();
    let mut snapshot: Vec<i64> = events
        .iter()
        .filter(|(op, _)| op == "r")
        .map(|(_, id)| *id)
        .collect();
    snapshot.sort_unstable();
    assert_eq!(snapshot, [1, 3], "the draft is not snapshotted: {events:?}");
    let streamed: Vec<(&str, i64)> = events
        .iter()
        .filter(|(op, _)| op != "r")
        .map(|(op, id)| (op.as_str(), *id))
        .collect();
    assert_eq!(
        streamed,
        [("c", 5), ("d", 1), ("c", 2), ("c", 6)],
        "the draft insert is not streamed; leaving the filter is a delete, entering it a create"
    );
    let delete = orders
        .iter()
        .find(|r| r.op() == Some("d"))
        .and_then(|r| r.value.clone())
        .unwrap();
    assert_eq!(
        delete["before"]["status"], "paid",
        "the delete carries the row as it was: {delete}"
    );
    for record in &orders {
        let text = record
            .value
            .as_ref()
            .map(|v| v.to_string())
            .unwrap_or_default();
        assert!(
            !text.contains("secret-draft"),
            "a draft reached Kafka: {text}"
        );
    }

    let topic = format!("{name}.{name}.users");
    let users = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| {
            r.iter()
                .any(|r| r.key.as_ref().is_some_and(|k| k["id"] == 6))
        })
    })
    .await
    .unwrap();
    let events: Vec<(&str, i64)> = users
        .iter()
        .filter_map(|r| Some((r.op()?, r.key.as_ref()?["id"].as_i64()?)))
        .collect();
    assert_eq!(
        events,
        [("r", 1), ("c", 5), ("u", 1), ("c", 6)],
        "ids of 100 and over are filtered out"
    );
    for record in &users {
        let value = record.value.as_ref().unwrap();
        assert!(
            !value.to_string().contains("hunter"),
            "the excluded column reached Kafka: {value}"
        );
        assert!(value["after"]["email"].is_string(), "{value}");
    }
    assert_eq!(
        users[2].value.as_ref().unwrap()["after"]["nick"],
        "countess"
    );

    // `sluice check` shows the filters.
    let file = sluice.file.clone();
    let (code, output) = tokio::task::spawn_blocking(move || {
        crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(30))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(0), "{output}");
    assert!(
        output.contains(
            "row filter: status <> 'draft'  (publication now: (status <> 'draft'::text))"
        ),
        "{output}"
    );
    assert!(
        output.contains("columns left out by the publication: password"),
        "{output}"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A row filter on a column outside the replica identity would make PostgreSQL refuse every
/// UPDATE and DELETE of the table: sluice stops with the key and the fix, the publication is
/// not created, and the table still takes updates. Restarted with the filter changed, an
/// existing publication is brought in step (ALTER PUBLICATION) and the log says what changed.
#[tokio::test(flavor = "multi_thread")]
async fn a_row_filter_outside_the_replica_identity_is_refused_and_changes_are_applied() {
    let name = unique("badfilter");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.orders (id int PRIMARY KEY, status text NOT NULL); \
             INSERT INTO {name}.orders VALUES (1, 'paid'), (2, 'draft');"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let base = pipeline_toml(&name, &name, &name, port, "");
    let with_filter = |filter: &str| {
        base.replace(
            "[source.postgres]\n",
            &format!("[source.postgres]\nrow_filters = {{ \"{name}.orders\" = \"{filter}\" }}\n"),
        )
    };
    let file = dir.join("pipeline.toml");
    std::fs::write(&file, with_filter("status <> 'draft'")).unwrap();
    let path = file.clone();
    let (code, output) = tokio::task::spawn_blocking(move || {
        crate::faults::run_sluice(&["run", path.to_str().unwrap()], Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains(&format!("source.postgres.row_filters.\"{name}.orders\"")),
        "{output}"
    );
    assert!(output.contains("REPLICA IDENTITY FULL"), "{output}");
    let publication = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&format!("sluice_{name}")],
        )
        .await
        .unwrap();
    assert!(publication.is_none(), "the publication was not created");
    client
        .batch_execute(&format!("UPDATE {name}.orders SET status = 'paid'"))
        .await
        .unwrap();

    // A filter on the key is accepted; changed, the publication follows at the next start.
    std::fs::write(&file, with_filter("id > 1")).unwrap();
    let mut sluice = Sluice::start(&dir, &with_filter("id > 1"), port);
    sluice.wait_streaming(Duration::from_secs(60));
    let published = publication_tables(&client, &format!("sluice_{name}")).await;
    assert_eq!(published["orders"].1.as_deref(), Some("(id > 1)"));
    assert!(sluice.stop());
    std::fs::write(&sluice.file, with_filter("id > 5")).unwrap();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(60));
    let published = publication_tables(&client, &format!("sluice_{name}")).await;
    assert_eq!(published["orders"].1.as_deref(), Some("(id > 5)"));
    let log = sluice.log_text();
    assert!(
        log.contains("updated publication to match the pipeline file") && log.contains("(id > 5)"),
        "{log}"
    );
    // Without filters the publication goes back to the whole schema.
    assert!(sluice.stop());
    std::fs::write(&sluice.file, &base).unwrap();
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(60));
    let published = publication_tables(&client, &format!("sluice_{name}")).await;
    assert_eq!(published["orders"].1, None);
    let schemas: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_publication_namespace pn JOIN pg_publication p ON p.oid = pn.pnpubid \
             WHERE p.pubname = $1",
            &[&format!("sluice_{name}")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(schemas, 1, "published as TABLES IN SCHEMA again");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A table created while running in a schema that the publication lists table by table (it
/// holds a row-filtered table): sluice finds it, adds it to the publication and snapshots it —
/// with no change of its own streamed to trigger that —, and its later changes stream.
#[tokio::test(flavor = "multi_thread")]
async fn a_table_created_in_a_filtered_schema_is_published_and_snapshotted() {
    let name = unique("newfilt");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.orders (id int PRIMARY KEY, status text NOT NULL); \
             INSERT INTO {name}.orders VALUES (1, 'paid'), (2, 'draft');"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        &format!(
            "[source.postgres]\n\
             row_filters = {{ \"{name}.orders\" = \"id < 2\" }}\n\
             table_refresh_interval_ms = 500\n"
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "CREATE TABLE {name}.later (id int PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {name}.later SELECT g, 0 FROM generate_series(1, 50) g;"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.later");
    let records = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || {
            read_topic(&topic, Duration::from_secs(60), |records| {
                records.len() >= 50
            })
        }
    })
    .await
    .unwrap();
    assert_eq!(records.len(), 50, "every row of the new table, snapshotted");
    assert!(
        records
            .iter()
            .all(|r| r.value.as_ref().is_some_and(|v| v["op"] == "r")),
        "{records:?}"
    );
    let published = publication_tables(&client, &format!("sluice_{name}")).await;
    assert!(published.contains_key("later"), "{published:?}");
    assert_eq!(
        published
            .get("orders")
            .and_then(|(_, filter)| filter.clone()),
        Some("(id < 2)".to_owned()),
        "the filter stays"
    );
    client
        .batch_execute(&format!("UPDATE {name}.later SET v = 1 WHERE id = 7"))
        .await
        .unwrap();
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |records| {
            records.len() >= 51
        })
    })
    .await
    .unwrap();
    let last = records.last().unwrap().value.as_ref().unwrap();
    assert_eq!(last["op"], "u", "{last}");
    assert_eq!(last["after"]["v"], 1);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

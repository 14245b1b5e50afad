//! Kafka over TLS and SASL: the dev broker's `SASL_SSL` listener (SCRAM-SHA-512, the dev
//! CA's server certificate) and its `SSL` listener that requires client certificates.

use std::time::{Duration, Instant};

use crate::faults::run_sluice;
use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, test_dir, unique,
    wait_until,
};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `eval \"$(scripts/dev-stack env)\"` (a dev stack started by this version of scripts/dev-stack)")
    })
}

/// The usual CDC pipeline file of schema `name`, writing to `brokers` with `client_settings`
/// as its `[kafka.client]` lines.
fn cdc_toml(name: &str, port: u16, brokers: &str, client_settings: &str) -> String {
    let plain = pipeline_toml(name, name, name, port, "");
    let start = plain.find("[kafka]\n").unwrap();
    let end = plain.find("[admin]\n").unwrap();
    format!(
        "{}[kafka]\nbrokers = \"{brokers}\"\ntopic_prefix = \"{name}\"\n\n[kafka.client]\n{client_settings}\n{}",
        &plain[..start],
        &plain[end..]
    )
}

/// Streams `rows` inserted rows of a new table through a pipeline writing to `brokers` with
/// `client` as its `[kafka.client]` lines, and checks every row arrived (read back over the
/// plaintext listener).
async fn stream_through(name: &str, brokers: &str, client_settings: &str, rows: i64) {
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(name);
    let toml = cdc_toml(name, port, brokers, client_settings);
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(90));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'row ' || g FROM generate_series(1, {rows}) g"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(90), |r| {
            r.len() >= rows as usize
        })
    })
    .await
    .unwrap();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| r.key.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), rows as usize, "every row\n{}", sluice.log_text());
    drop(sluice);
    drop_slot_and_publication(&client, name).await;
}

/// PostgreSQL → Kafka through the SASL_SSL listener with SCRAM-SHA-512, the broker's
/// certificate checked against the dev CA: every producer, admin and metadata client sluice
/// makes takes `[kafka.client]`.
#[tokio::test(flavor = "multi_thread")]
async fn cdc_streams_over_sasl_ssl_with_scram_sha_512() {
    let name = unique("saslssl");
    let client = format!(
        "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
         \"sasl.username\" = \"{}\"\n\"sasl.password\" = \"{}\"\n\
         \"ssl.ca.location\" = \"{}/ca.crt\"\n",
        var("KAFKA_SCRAM_USER"),
        var("KAFKA_SCRAM_PASSWORD"),
        var("SLUICE_TLS_DIR"),
    );
    stream_through(&name, &var("KAFKA_SASL_SSL_BROKERS"), &client, 1000).await;
}

/// PostgreSQL → Kafka through the SSL listener that requires a client certificate (mTLS).
#[tokio::test(flavor = "multi_thread")]
async fn cdc_streams_over_ssl_with_a_client_certificate() {
    let name = unique("mtls");
    let tls = var("SLUICE_TLS_DIR");
    let client = format!(
        "\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{tls}/ca.crt\"\n\
         \"ssl.certificate.location\" = \"{tls}/client-kafka_client.crt\"\n\
         \"ssl.key.location\" = \"{tls}/client-kafka_client.key\"\n"
    );
    stream_through(&name, &var("KAFKA_SSL_BROKERS"), &client, 1000).await;
}

/// `[kafka.client]` lines for the SASL_SSL listener: SCRAM-SHA-512 with `password`, the
/// broker's certificate checked against the dev CA.
fn scram_settings(password: &str) -> String {
    format!(
        "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
         \"sasl.username\" = \"{}\"\n\"sasl.password\" = \"{password}\"\n\
         \"ssl.ca.location\" = \"{}/ca.crt\"\n",
        var("KAFKA_SCRAM_USER"),
        var("SLUICE_TLS_DIR"),
    )
}

/// A setting an operator got wrong, where it points, and what sluice must say about it.
struct WrongSetting {
    what: &'static str,
    brokers: String,
    client: String,
    /// The key the message names.
    key: &'static str,
    /// What the message says was found.
    found: &'static str,
}

fn wrong_settings() -> Vec<WrongSetting> {
    let user = var("KAFKA_SCRAM_USER");
    let ca = format!("{}/ca.crt", var("SLUICE_TLS_DIR"));
    vec![
        WrongSetting {
            what: "a wrong SCRAM password",
            brokers: var("KAFKA_SASL_SSL_BROKERS"),
            client: scram_settings("not-the-password"),
            key: "kafka.client.\"sasl.password\"",
            found: "refused the SASL credentials",
        },
        WrongSetting {
            what: "PLAIN against the SCRAM-only listener",
            brokers: var("KAFKA_SASL_SSL_BROKERS"),
            client: format!(
                "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"PLAIN\"\n\
                 \"sasl.username\" = \"{user}\"\n\"sasl.password\" = \"x\"\n\
                 \"ssl.ca.location\" = \"{ca}\"\n"
            ),
            key: "kafka.client.\"sasl.mechanism\"",
            found: "does not enable kafka.client.\"sasl.mechanism\" = \"PLAIN\"",
        },
        WrongSetting {
            what: "SASL_SSL against the PLAINTEXT listener",
            brokers: var("KAFKA_BROKERS"),
            client: scram_settings(&var("KAFKA_SCRAM_PASSWORD")),
            key: "kafka.client.\"security.protocol\"",
            found: "does not speak TLS but kafka.client.\"security.protocol\" = \"SASL_SSL\"",
        },
        WrongSetting {
            what: "PLAINTEXT against the SSL listener",
            brokers: var("KAFKA_SSL_BROKERS"),
            client: String::new(),
            key: "kafka.client.\"security.protocol\"",
            found: "expects TLS but kafka.client.\"security.protocol\" = not set (PLAINTEXT)",
        },
        WrongSetting {
            what: "the broker's CA not trusted (no ssl.ca.location)",
            brokers: var("KAFKA_SASL_SSL_BROKERS"),
            client: format!(
                "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
                 \"sasl.username\" = \"{user}\"\n\"sasl.password\" = \"{}\"\n",
                var("KAFKA_SCRAM_PASSWORD")
            ),
            key: "kafka.client.\"ssl.ca.location\"",
            found: "not signed by a CA sluice trusts",
        },
    ]
}

/// Each wrong Kafka setting makes `sluice check` and `sluice run` fail within seconds with
/// the key to change, what was found and the fix, and `run` stops (a configuration error is
/// not retried) before it creates a replication slot.
#[tokio::test(flavor = "multi_thread")]
async fn wrong_kafka_settings_fail_fast_with_the_key_to_change() {
    let client = pg().await;
    let cases = wrong_settings();
    let mut handles = Vec::new();
    for (i, case) in cases.into_iter().enumerate() {
        let name = unique(&format!("badkafka{i}"));
        client
            .batch_execute(&format!(
                "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY);"
            ))
            .await
            .unwrap();
        let dir = test_dir(&name);
        let file = dir.join("pipeline.toml");
        std::fs::write(
            &file,
            cdc_toml(&name, free_port(), &case.brokers, &case.client),
        )
        .unwrap();
        handles.push(tokio::task::spawn_blocking(move || {
            let file = file.to_str().unwrap().to_owned();
            for command in ["check", "run"] {
                let started = Instant::now();
                let (code, output) = run_sluice(&[command, &file], Duration::from_secs(40));
                let took = started.elapsed();
                assert_eq!(code, Some(1), "{}: {command} exits 1: {output}", case.what);
                assert!(
                    output.contains(case.key),
                    "{}: {command}: {output}",
                    case.what
                );
                assert!(
                    output.contains(case.found),
                    "{}: {command}: {output}",
                    case.what
                );
                assert!(output.contains("fix"), "{}: {command}: {output}", case.what);
                assert!(
                    !output.contains("restarting from"),
                    "{}: not retried: {output}",
                    case.what
                );
                assert!(
                    took < Duration::from_secs(20),
                    "{}: {command} took {took:?}: {output}",
                    case.what
                );
            }
            name
        }));
    }
    for handle in handles {
        let name = handle.await.unwrap();
        let slots: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1",
                &[&format!("%{name}%")],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            slots, 0,
            "{name}: no slot retains WAL for a pipeline that cannot run"
        );
        drop_slot_and_publication(&client, &name).await;
    }
}

/// A streaming pipeline restarted with a wrong SASL password stops with the key to change;
/// the changes made meanwhile are not lost: once the password is fixed, they arrive.
#[tokio::test(flavor = "multi_thread")]
async fn a_wrong_password_stops_the_pipeline_and_loses_nothing() {
    let name = unique("badpass");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let brokers = var("KAFKA_SASL_SSL_BROKERS");
    let good = cdc_toml(
        &name,
        port,
        &brokers,
        &scram_settings(&var("KAFKA_SCRAM_PASSWORD")),
    );
    let mut sluice = Sluice::start(&dir, &good, port);
    sluice.wait_streaming(Duration::from_secs(90));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'before' FROM generate_series(1, 100) g"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let read = topic.clone();
    tokio::task::spawn_blocking(move || {
        read_topic(&read, Duration::from_secs(60), |r| r.len() >= 100)
    })
    .await
    .unwrap();
    assert!(sluice.stop(), "graceful stop");

    // The password is now wrong: the process stops by itself, saying which key to fix.
    std::fs::write(
        &sluice.file,
        cdc_toml(&name, port, &brokers, &scram_settings("rotated-elsewhere")),
    )
    .unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'meanwhile' FROM generate_series(101, 200) g"
        ))
        .await
        .unwrap();
    let started = Instant::now();
    sluice.restart();
    wait_until("the pipeline to stop", Duration::from_secs(30), || {
        sluice.exited().is_some()
    });
    let log = sluice.log_text();
    assert!(log.contains("sasl.password"), "{log}");
    assert!(log.contains("refused the SASL credentials"), "{log}");
    assert!(log.contains("pipeline stopped"), "{log}");
    assert!(!log.contains("restarting from"), "not retried: {log}");
    assert!(
        !log.contains("rotated-elsewhere"),
        "the password is never logged: {log}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );

    // Fixed: the changes made while it was stopped arrive.
    std::fs::write(&sluice.file, &good).unwrap();
    sluice.restart();
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(90), |r| {
            r.iter()
                .filter_map(|r| r.key.as_ref()?["id"].as_i64())
                .collect::<std::collections::HashSet<_>>()
                .len()
                >= 200
        })
    })
    .await
    .unwrap();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| r.key.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids, (1..=200).collect::<Vec<_>>(), "{}", sluice.log_text());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Every committed output file under `dir` (staging and sluice's own files left out).
fn output_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("_sluice") || name.starts_with(".tmp") {
            continue;
        }
        if path.is_dir() {
            output_files(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// The lines of every committed output file under `root`.
fn output_lines(root: &std::path::Path) -> Vec<String> {
    let mut files = Vec::new();
    output_files(root, &mut files);
    files
        .iter()
        .flat_map(|file| {
            std::fs::read_to_string(file)
                .unwrap()
                .lines()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Kafka → files through the SASL_SSL listener with SCRAM-SHA-512 (`[source.kafka.client]`):
/// a wrong password first stops `sluice check` and `sluice run` with the key to change and
/// writes nothing; fixed, every record's value is in the output files, byte for byte.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_to_files_over_sasl_ssl_with_scram_sha_512() {
    use rdkafka::ClientConfig;
    use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

    let name = unique("sinkscram");
    crate::sink::create_topic(&name, 3).await;
    let values: Vec<String> = (0..600)
        .map(|i| {
            format!(
                r#"{{"id":"k{}","seq":{i},"created_at":"2026-11-2{}T10:00:00Z","note":"über {i} \"quoted\""}}"#,
                i % 7,
                i % 3
            )
        })
        .collect();
    let topic = name.clone();
    let produced = values.clone();
    tokio::task::spawn_blocking(move || {
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", crate::support::stack().brokers)
            .set("enable.idempotence", "true")
            .create()
            .unwrap();
        for (i, value) in produced.iter().enumerate() {
            let key = format!("k{}", i % 7);
            producer
                .send(BaseRecord::to(&topic).key(&key).payload(value))
                .map_err(|(e, _)| e)
                .unwrap();
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    })
    .await
    .unwrap();

    let port = free_port();
    let dir = test_dir(&name);
    let root = dir.join("out");
    let toml = |password: &str| {
        format!(
            r#"
name = "{name}"

[source.kafka]
brokers = "{brokers}"
topics = ["{name}"]
group_id = "{name}"
commit_interval_ms = 500
[source.kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"
[source.kafka.client]
{client}
[sink.files]
path = "{root}"
path_template = "{{topic}}/dt={{created_at:%Y-%m-%d}}/"
format = "jsonl"
metadata = false
roll_interval_ms = 500

[admin]
listen = "127.0.0.1:{port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
"#,
            brokers = var("KAFKA_SASL_SSL_BROKERS"),
            client = scram_settings(password),
            root = root.display(),
        )
    };

    // A wrong password: check and run both say which key to change; nothing is written.
    let mut sluice = Sluice::start(&dir, &toml("not-the-password"), port);
    let file = sluice.file.to_str().unwrap().to_owned();
    let (code, output) =
        tokio::task::spawn_blocking(move || run_sluice(&["check", &file], Duration::from_secs(30)))
            .await
            .unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output.contains("source.kafka.client.\"sasl.password\""),
        "{output}"
    );
    assert!(output.contains("refused the SASL credentials"), "{output}");
    wait_until("the sink to stop", Duration::from_secs(30), || {
        sluice.exited().is_some()
    });
    let log = sluice.log_text();
    assert!(log.contains("source.kafka.client"), "{log}");
    assert!(log.contains("refused the SASL credentials"), "{log}");
    assert!(log.contains("pipeline stopped"), "{log}");
    assert!(!log.contains("restarting from"), "not retried: {log}");
    assert!(output_lines(&root).is_empty(), "nothing written");

    // Fixed: every value arrives, byte for byte.
    std::fs::write(&sluice.file, toml(&var("KAFKA_SCRAM_PASSWORD"))).unwrap();
    sluice.restart();
    wait_until("every record in the files", Duration::from_secs(90), || {
        output_lines(&root).len() >= values.len()
    });
    let mut lines = output_lines(&root);
    lines.sort();
    let mut expected = values;
    expected.sort();
    assert_eq!(lines, expected, "{}", sluice.log_text());
}

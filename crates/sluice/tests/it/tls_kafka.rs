//! Kafka over TLS and SASL: the dev broker's `SASL_SSL` listener (SCRAM-SHA-512, the dev
//! CA's server certificate) and its `SSL` listener that requires client certificates.

use std::time::Duration;

use crate::support::{
    Sluice, broker_shared, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic,
    test_dir, unique,
};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `eval \"$(scripts/dev-stack env)\"` (a dev stack started by this version of scripts/dev-stack)")
    })
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
    let plain = pipeline_toml(name, name, name, port, "");
    let start = plain.find("[kafka]\n").unwrap();
    let end = plain.find("[admin]\n").unwrap();
    let toml = format!(
        "{}[kafka]\nbrokers = \"{brokers}\"\ntopic_prefix = \"{name}\"\n\n[kafka.client]\n{client_settings}\n{}",
        &plain[..start],
        &plain[end..]
    );
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
        read_topic(&topic, Duration::from_secs(90), |r| r.len() >= rows as usize)
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
    let _broker = broker_shared().await;
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
    let _broker = broker_shared().await;
    let name = unique("mtls");
    let tls = var("SLUICE_TLS_DIR");
    let client = format!(
        "\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = \"{tls}/ca.crt\"\n\
         \"ssl.certificate.location\" = \"{tls}/client-kafka_client.crt\"\n\
         \"ssl.key.location\" = \"{tls}/client-kafka_client.key\"\n"
    );
    stream_through(&name, &var("KAFKA_SSL_BROKERS"), &client, 1000).await;
}

/// Mistakes in the Kafka security settings stop the pipeline at once with the fix, instead of
/// retrying into a timeout with librdkafka's generic message: a wrong SCRAM password, a
/// plaintext client at the SASL_SSL listener, a TLS client that does not trust the broker's CA.
/// Nothing is lost: rows written while the settings were wrong arrive once they are fixed.
#[tokio::test(flavor = "multi_thread")]
async fn kafka_security_mistakes_stop_with_the_fix_and_lose_nothing() {
    let _broker = broker_shared().await;
    let name = unique("kafkasecerr");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let plain = pipeline_toml(&name, &name, &name, port, "");
    let start = plain.find("[kafka]\n").unwrap();
    let end = plain.find("[admin]\n").unwrap();
    let toml = |brokers: &str, client_settings: &str| {
        format!(
            "{}[kafka]\nbrokers = \"{brokers}\"\ntopic_prefix = \"{name}\"\n\n[kafka.client]\n{client_settings}\n{}",
            &plain[..start],
            &plain[end..]
        )
    };
    let sasl = var("KAFKA_SASL_SSL_BROKERS");
    let ca = format!("{}/ca.crt", var("SLUICE_TLS_DIR"));
    let scram = |password: &str, ca: Option<&str>| {
        format!(
            "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
             \"sasl.username\" = \"{}\"\n\"sasl.password\" = \"{password}\"\n{}",
            var("KAFKA_SCRAM_USER"),
            ca.map(|ca| format!("\"ssl.ca.location\" = \"{ca}\"\n"))
                .unwrap_or_default()
        )
    };
    let cases = [
        (
            "a wrong SCRAM password",
            toml(&sasl, &scram("not-the-password", Some(&ca))),
            "Kafka refused the credentials",
        ),
        (
            "a plaintext client at the SASL_SSL listener",
            toml(&sasl, ""),
            "the listener expects TLS",
        ),
        (
            "a CA that did not sign the broker's certificate",
            toml(&sasl, &scram(&var("KAFKA_SCRAM_PASSWORD"), None)),
            "not signed by a CA sluice trusts",
        ),
    ];
    let mut sluice: Option<Sluice> = None;
    for (case, pipeline, expected) in &cases {
        let mut run = match sluice.take() {
            None => Sluice::start(&dir, pipeline, port),
            Some(mut previous) => {
                std::fs::write(&previous.file, pipeline).unwrap();
                std::fs::write(&previous.log, "").unwrap();
                previous.restart();
                previous
            }
        };
        crate::support::wait_until(
            &format!("sluice to stop on {case}"),
            Duration::from_secs(60),
            || run.exited().is_some(),
        );
        let log = run.log_text();
        assert!(log.contains(expected), "{case}: expected {expected:?} in\n{log}");
        sluice = Some(run);
    }
    // Rows written meanwhile, then the right settings: every row arrives.
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'row ' || g FROM generate_series(1, 50) g"
        ))
        .await
        .unwrap();
    let mut run = sluice.unwrap();
    std::fs::write(&run.file, toml(&sasl, &scram(&var("KAFKA_SCRAM_PASSWORD"), Some(&ca)))).unwrap();
    run.restart();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(90), |r| r.len() >= 50)
    })
    .await
    .unwrap();
    assert_eq!(records.len(), 50, "{}", run.log_text());
    drop(run);
    drop_slot_and_publication(&client, &name).await;
}

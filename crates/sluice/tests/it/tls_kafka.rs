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

//! PostgreSQL over TLS: sluice streams a snapshot and changes over `sslmode=verify-full` with
//! SCRAM (channel-bound) and with a client certificate, every backend it opened is encrypted
//! (pg_stat_ssl, walsender included), and each TLS or authentication failure gives a message
//! that names the setting and the fix. Needs the dev stack's TLS roles (`PG_TLS_URL`,
//! `PG_CERT_URL` from `scripts/dev-stack env`).

use std::time::Duration;

use sluice::source::postgres::connect::connect_sql_url;

use crate::support::{
    Sluice, broker_shared, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic,
    stack, test_dir, unique,
};

fn env_var(name: &str) -> String {
    env_url(name)
}

fn env_url(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `scripts/dev-stack up && eval \"$(scripts/dev-stack env)\"`")
    })
}

/// Snapshot of 200 rows, then 100 inserts and 50 updates streamed, all through `url`; then the
/// server's view of sluice's backends.
async fn streams_over(url: &str, label: &str) {
    let _kafka = broker_shared().await;
    let client = pg().await;
    let name = unique(label);
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id bigint PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {name}.t SELECT g, 0 FROM generate_series(1, 200) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        &format!("url = \"{}\"", stack().pg_url),
        &format!("url = \"{url}\""),
    );
    assert!(toml.contains(url), "the pipeline uses the TLS URL");
    let dir = test_dir(&name);
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 1 FROM generate_series(201, 300) g; \
             UPDATE {name}.t SET v = v + 10 WHERE id <= 50;"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 350);
    let snapshot = records.iter().filter(|r| r.op() == Some("r")).count();
    let inserts = records.iter().filter(|r| r.op() == Some("c")).count();
    let updates = records.iter().filter(|r| r.op() == Some("u")).count();
    assert_eq!(
        (snapshot, inserts, updates),
        (200, 100, 50),
        "{}",
        sluice.log_text()
    );

    // Server-side evidence: every backend sluice has open is encrypted, the walsender too.
    let rows = client
        .query(
            "SELECT a.backend_type, coalesce(s.ssl, false), coalesce(s.version, '') \
             FROM pg_stat_activity a LEFT JOIN pg_stat_ssl s USING (pid) \
             WHERE a.application_name = $1",
            &[&format!("sluice-{name}")],
        )
        .await
        .unwrap();
    let backends: Vec<(String, bool, String)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert!(
        backends.iter().any(|(kind, _, _)| kind == "walsender"),
        "{backends:?}"
    );
    assert!(
        backends.iter().any(|(kind, _, _)| kind == "client backend"),
        "{backends:?}"
    );
    assert!(
        backends
            .iter()
            .all(|(_, ssl, version)| *ssl && version.starts_with("TLS")),
        "every sluice backend is encrypted: {backends:?}"
    );
    assert!(sluice.stop());
    drop_slot_and_publication(&client, &name).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_over_verify_full_with_scram() {
    streams_over(&env_url("PG_TLS_URL"), "tls_scram").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn streams_over_verify_full_with_a_client_certificate() {
    streams_over(&env_url("PG_CERT_URL"), "tls_cert").await;
}

/// The CDC suite's mixed workload (100,000+ inserts, updates, deletes, key changes; per-key
/// order checked) with sluice reading over verify-full + channel-bound SCRAM and writing to
/// Kafka over SASL_SSL with SCRAM-SHA-512 (the broker's certificate checked against the dev CA).
#[tokio::test(flavor = "multi_thread")]
async fn mixed_workload_over_verify_full_with_scram_into_sasl_ssl() {
    let client = format!(
        "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
         \"sasl.username\" = \"{}\"\n\"sasl.password\" = \"{}\"\n\
         \"ssl.ca.location\" = \"{}/ca.crt\"\n",
        env_var("KAFKA_SCRAM_USER"),
        env_var("KAFKA_SCRAM_PASSWORD"),
        env_var("SLUICE_TLS_DIR"),
    );
    crate::cdc::mixed_workload(
        &env_url("PG_TLS_URL"),
        Some((&env_var("KAFKA_SASL_SSL_BROKERS"), &client)),
    )
    .await;
}

async fn connect_error(url: &str) -> String {
    match connect_sql_url(url).await {
        Ok(_) => panic!("the connection succeeded where it must fail"),
        Err(error) => error.to_string(),
    }
}

#[tokio::test]
async fn tls_and_authentication_failures_name_the_setting_and_the_fix() {
    let tls_url = env_url("PG_TLS_URL");
    let tls_dir = env_url("SLUICE_TLS_DIR");
    let port = tls_url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    // A CA file that did not sign the server's certificate.
    let wrong_ca = format!("{tls_dir}/client-sluice_cert.crt");
    let text = connect_error(&tls_url.replace(&format!("{tls_dir}/ca.crt"), &wrong_ca)).await;
    assert!(
        text.contains("signed by an unknown CA") && text.contains("set sslrootcert"),
        "{text}"
    );
    // A host name the certificate does not list, reaching the same server.
    let text = connect_error(&format!(
        "host=db.example.invalid hostaddr=127.0.0.1 port={port} user=sluice_scram \
         password=sluice-scram-dev dbname=postgres sslmode=verify-full sslrootcert={tls_dir}/ca.crt"
    ))
    .await;
    assert!(
        text.contains("hostname mismatch under sslmode=verify-full") && text.contains("verify-ca"),
        "{text}"
    );
    // verify-ca accepts the same connection: the chain is good.
    connect_sql_url(&format!(
        "host=db.example.invalid hostaddr=127.0.0.1 port={port} user=sluice_scram \
         password=sluice-scram-dev dbname=postgres sslmode=verify-ca sslrootcert={tls_dir}/ca.crt"
    ))
    .await
    .expect("verify-ca does not check the host name");
    // A wrong password.
    let text = connect_error(&tls_url.replace("sluice-scram-dev", "not-the-password")).await;
    assert!(
        text.contains("refused user `sluice_scram`") && text.contains("PGPASSWORD"),
        "{text}"
    );
    // sslmode=require against a server that does not speak TLS.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let plain_port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 8];
        socket.read_exact(&mut request).await.unwrap();
        socket.write_all(b"N").await.unwrap();
    });
    let text = connect_error(&format!(
        "postgres://u@127.0.0.1:{plain_port}/db?sslmode=require"
    ))
    .await;
    assert!(
        text.contains("does not support TLS") && text.contains("sslmode=require"),
        "{text}"
    );
    server.await.unwrap();
}

/// A unix-socket host (never TLS, as libpq) and the password from PGPASSWORD's equivalent.
#[tokio::test]
async fn unix_socket_host() {
    let dev = env_url("SLUICE_DEV_DIR");
    let port = stack()
        .pg_url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    let (client, _task) = connect_sql_url(&format!(
        "host={dev}/pg port={port} user=postgres dbname=postgres sslmode=require"
    ))
    .await
    .expect("unix socket connection");
    let row = client
        .query_one(
            "SELECT coalesce(client_addr::text, 'local') FROM pg_stat_activity WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "local");
}

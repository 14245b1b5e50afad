//! PostgreSQL over TLS: sluice streams a snapshot and changes over `sslmode=verify-full` with
//! SCRAM (channel-bound) and with a client certificate, every backend it opened is encrypted
//! (pg_stat_ssl, walsender included), and each TLS or authentication failure (an expired
//! server certificate among them) gives a message that names the setting and the fix. It also
//! streams with `password`, `md5` and `trust` authentication, over TLS and without, and with
//! `sslmode=allow`. Needs the dev stack's roles (`PG_TLS_URL`, `PG_CERT_URL`,
//! `PG_PASSWORD_URL`, `PG_MD5_URL`, `PG_TRUST_URL` from `scripts/dev-stack env`).

use std::time::Duration;

use sluice::pg_connect::connect_sql_url;

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, stack, test_dir,
    unique,
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
    streams_over_with(url, "", label).await;
}

/// [`streams_over`] with `keys` (TOML lines) added to `[source.postgres]`.
async fn streams_over_with(url: &str, keys: &str, label: &str) {
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
        &format!("url = \"{url}\"\n{keys}"),
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

/// The same with the TLS parameters as keys of `[source.postgres]` instead of in the URL.
#[tokio::test(flavor = "multi_thread")]
async fn streams_with_the_tls_parameters_as_pipeline_keys() {
    let url = env_url("PG_TLS_URL");
    let (base, query) = url.split_once('?').expect("PG_TLS_URL has TLS parameters");
    let keys: String = query
        .split('&')
        .map(|pair| {
            let (key, value) = pair.split_once('=').unwrap();
            format!("{key} = \"{value}\"\n")
        })
        .collect();
    assert!(keys.contains("sslmode = \"verify-full\""), "{keys}");
    streams_over_with(base, &keys, "tls_keys").await;

    // The keys are what is checked: with `sslrootcert` naming a certificate that did not sign
    // the server's, verify-full refuses (were the keys ignored, `prefer` would connect).
    let tls_dir = std::path::PathBuf::from(env_var("SLUICE_TLS_DIR"));
    let wrong_ca = tls_dir.join("client-kafka_client.crt");
    let wrong_keys = format!(
        "sslmode = \"verify-full\"\nsslrootcert = \"{}\"\n",
        wrong_ca.display()
    );
    let name = unique("tls_keys_wrong");
    let toml = pipeline_toml(&name, &name, &name, free_port(), "").replace(
        &format!("url = \"{}\"", stack().pg_url),
        &format!("url = \"{base}\"\n{wrong_keys}"),
    );
    let file = test_dir(&name).join("pipeline.toml");
    std::fs::write(&file, toml).unwrap();
    let (code, output) = tokio::task::spawn_blocking(move || {
        crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert_ne!(code, Some(0), "{output}");
    assert!(
        output.contains("unknown CA") && output.contains("sslrootcert"),
        "{output}"
    );
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
        &stack().pg_url,
        &env_url("PG_TLS_URL"),
        Some((&env_var("KAFKA_SASL_SSL_BROKERS"), &client)),
        10_000,
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
    // The server's socket directory (another version's server has its own: scripts/pg-versions).
    let socket_dir = std::env::var("PG_SOCKET_DIR")
        .unwrap_or_else(|_| format!("{}/pg", env_url("SLUICE_DEV_DIR")));
    let port = stack()
        .pg_url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    let (client, _task) = connect_sql_url(&format!(
        "host={socket_dir} port={port} user=postgres dbname=postgres sslmode=require"
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

/// A short pipeline (3 snapshot rows, 3 streamed inserts) through `url`; checks whether each of
/// sluice's backends (the walsender included) is encrypted as `tls` says.
async fn streams_a_few_rows(url: &str, label: &str, tls: bool) {
    let client = pg().await;
    let name = unique(label);
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id bigint PRIMARY KEY, v int NOT NULL); \
             INSERT INTO {name}.t SELECT g, 0 FROM generate_series(1, 3) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        &format!("url = \"{}\"", stack().pg_url),
        &format!("url = \"{url}\""),
    );
    assert!(toml.contains(url));
    let dir = test_dir(&name);
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 1 FROM generate_series(4, 6) g"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 6);
    let ops: Vec<(i64, &str)> = records
        .iter()
        .map(|r| {
            (
                r.key.as_ref().unwrap()["id"].as_i64().unwrap(),
                r.op().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        ops,
        [(1, "r"), (2, "r"), (3, "r"), (4, "c"), (5, "c"), (6, "c")],
        "{}",
        sluice.log_text()
    );
    let rows = client
        .query(
            "SELECT a.backend_type, coalesce(s.ssl, false), a.usename::text \
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
    let user = url
        .split("://")
        .nth(1)
        .unwrap()
        .split([':', '@'])
        .next()
        .unwrap();
    assert!(
        backends
            .iter()
            .all(|(_, ssl, usename)| *ssl == tls && usename == user),
        "every backend of {user} with ssl = {tls}: {backends:?}"
    );
    assert!(sluice.stop());
    drop_slot_and_publication(&client, &name).await;
}

/// `url` with `sslmode` set.
fn with_sslmode(url: &str, mode: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sslmode={mode}")
}

/// The password is really checked (the rule is not `trust`): a wrong one is refused.
async fn wrong_password_is_refused(url: &str, password: &str) {
    let text = connect_error(&url.replace(password, "not-the-password")).await;
    assert!(
        text.contains("password authentication failed") && text.contains("PGPASSWORD"),
        "{text}"
    );
}

fn password_of(url: &str) -> String {
    url.split("://")
        .nth(1)
        .and_then(|rest| rest.split_once('@'))
        .and_then(|(info, _)| info.split_once(':'))
        .map(|(_, password)| password.to_owned())
        .expect("a password in the URL")
}

/// `password` (cleartext) authentication, over TLS (`sslmode=require`) and without.
#[tokio::test(flavor = "multi_thread")]
async fn streams_with_password_authentication() {
    let url = env_url("PG_PASSWORD_URL");
    wrong_password_is_refused(&url, &password_of(&url)).await;
    streams_a_few_rows(&with_sslmode(&url, "require"), "auth_pw_tls", true).await;
    streams_a_few_rows(&with_sslmode(&url, "disable"), "auth_pw_plain", false).await;
}

/// `md5` authentication (the role's password stored as an MD5 hash), over TLS and without.
#[tokio::test(flavor = "multi_thread")]
async fn streams_with_md5_authentication() {
    let url = env_url("PG_MD5_URL");
    wrong_password_is_refused(&url, &password_of(&url)).await;
    let client = pg().await;
    let stored: String = client
        .query_one(
            "SELECT rolpassword FROM pg_authid WHERE rolname = 'sluice_md5'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(stored.starts_with("md5"), "an MD5 hash is stored");
    streams_a_few_rows(&with_sslmode(&url, "require"), "auth_md5_tls", true).await;
    streams_a_few_rows(&with_sslmode(&url, "disable"), "auth_md5_plain", false).await;
}

/// `trust` authentication, over TLS (`prefer`, the default) and without.
#[tokio::test(flavor = "multi_thread")]
async fn streams_with_trust_authentication() {
    let url = env_url("PG_TRUST_URL");
    streams_a_few_rows(&url, "auth_trust_tls", true).await;
    streams_a_few_rows(&with_sslmode(&url, "disable"), "auth_trust_plain", false).await;
}

/// Runs `openssl` in `dir`; panics with its output when it fails.
fn openssl(dir: &std::path::Path, args: &[&str]) {
    let output = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (apt-get install openssl)");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA (`ca.crt`) and a server certificate it signed for 127.0.0.1 that expired in 2020
/// (`expired.crt`, `expired.key`), made with `openssl ca` (start and end dates in the past).
fn expired_server_certificate(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "3650",
            "-subj",
            "/CN=expired test CA",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
            "expired.key",
            "-out",
            "expired.csr",
        ],
    );
    std::fs::write(dir.join("index.txt"), "").unwrap();
    std::fs::write(dir.join("serial"), "1000\n").unwrap();
    std::fs::write(
        dir.join("ca.cnf"),
        "[ca]\ndefault_ca = test\n[test]\ndir = .\ndatabase = index.txt\nnew_certs_dir = .\n\
         serial = serial\ndefault_md = sha256\npolicy = any\ncopy_extensions = copy\n\
         [any]\ncommonName = supplied\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "ca",
            "-batch",
            "-config",
            "ca.cnf",
            "-cert",
            "ca.crt",
            "-keyfile",
            "ca.key",
            "-startdate",
            "20200101000000Z",
            "-enddate",
            "20200102000000Z",
            "-in",
            "expired.csr",
            "-out",
            "expired.crt",
        ],
    );
}

/// A server that answers PostgreSQL's SSLRequest with `S` and then does the TLS handshake
/// with `cert`/`key`, once per connection; returns its port.
async fn tls_listener(cert: &std::path::Path, key: &std::path::Path) -> u16 {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let mut request = [0u8; 8];
                if socket.read_exact(&mut request).await.is_err() {
                    return;
                }
                if socket.write_all(b"S").await.is_ok() {
                    // The client refuses the certificate: the handshake fails here.
                    let _ = acceptor.accept(socket).await;
                }
            });
        }
    });
    port
}

/// A server certificate that has expired: the message names the server certificate, that it
/// expired (and when), sslmode and sslrootcert, and the fix; for SQL connections, for the
/// replication connection, and as `sluice check` shows it.
#[tokio::test(flavor = "multi_thread")]
async fn an_expired_server_certificate_is_named_with_the_fix() {
    let dir = test_dir(&unique("expired_cert"));
    expired_server_certificate(&dir);
    let port = tls_listener(&dir.join("expired.crt"), &dir.join("expired.key")).await;
    let ca = dir.join("ca.crt");
    let url = format!(
        "postgres://u:pw@127.0.0.1:{port}/db?sslmode=verify-full&sslrootcert={}",
        ca.display()
    );
    let expected = |text: &str| {
        assert!(
            text.contains("the server certificate of 127.0.0.1")
                && text.contains("has expired on 2020-01-02 00:00:00 UTC")
                && text.contains("sslmode=verify-full")
                && text.contains(&format!("sslrootcert={}", ca.display()))
                && text.contains("renew the server's certificate"),
            "{text}"
        );
    };
    expected(&connect_error(&url).await);
    // verify-ca checks the dates too.
    let text = connect_error(&url.replace("verify-full", "verify-ca")).await;
    assert!(text.contains("has expired"), "{text}");
    // The replication connection (its own SSLRequest handshake).
    let config = sluice::pg_connect::PgConnectConfig::parse(&url).unwrap();
    let socket = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    match sluice::pg_connect::negotiate_tls(socket, "127.0.0.1", &config).await {
        Err(sluice::pg_connect::NegotiateError::Refused(text)) => expected(&text),
        Err(other) => panic!("expected a refusal, got {other:?}"),
        Ok(_) => panic!("an expired certificate was accepted"),
    }
    // What `sluice check` prints.
    let file = dir.join("check.toml");
    std::fs::write(
        &file,
        format!(
            "name = \"expired\"\n[source.postgres]\nurl = \"{url}\"\nschemas = [\"public\"]\n\
             [kafka]\nbrokers = \"{}\"\n",
            stack().brokers
        ),
    )
    .unwrap();
    let output = std::process::Command::new(crate::support::sluice_bin())
        .arg("check")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(printed.contains("postgresql: FAILED"), "{printed}");
    expected(&printed);
}

/// `sslmode=allow` as libpq: plaintext first, TLS when the server refuses plaintext. The dev
/// stack's `sluice_scram` may only log in over TLS (pg_hba.conf rejects it in plaintext), so
/// every connection sluice opens for it ends up encrypted; `sluice_trust` is let in without
/// TLS, so its connections stay plaintext.
#[tokio::test(flavor = "multi_thread")]
async fn allow_tries_plaintext_first_and_tls_when_refused() {
    let tls_only = env_url("PG_TLS_URL").replace("sslmode=verify-full", "sslmode=allow");
    let (client, _task) = connect_sql_url(&tls_only)
        .await
        .expect("allow falls back to TLS");
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the TLS attempt is the one that got in");
    streams_a_few_rows(&tls_only, "allow_tls", true).await;
    streams_a_few_rows(
        &with_sslmode(&env_url("PG_TRUST_URL"), "allow"),
        "allow_plain",
        false,
    )
    .await;
}

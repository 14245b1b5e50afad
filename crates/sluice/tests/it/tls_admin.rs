//! The admin server over HTTPS (`admin.tls_cert` / `admin.tls_key`, the dev CA's server
//! certificate) with its bearer token read from a file (`${file:PATH}`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::faults::run_sluice;
use crate::support::{
    Sluice, drop_slot_and_publication, free_port, http_request, pg, pipeline_toml, test_dir,
    unique, wait_until,
};

fn tls_dir() -> String {
    std::env::var("SLUICE_TLS_DIR").unwrap_or_else(|_| {
        panic!("SLUICE_TLS_DIR is not set: run `eval \"$(scripts/dev-stack env)\"`")
    })
}

/// An HTTPS/1.0 request to `addr` as `localhost`, trusting only the dev CA; (status, body),
/// `None` when no TLS connection or no response could be had.
async fn https_request(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in
        rustls::pki_types::CertificateDer::pem_file_iter(format!("{}/ca.crt", tls_dir())).ok()?
    {
        roots.add(cert.ok()?).ok()?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .ok()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await.ok()?;
    let name = rustls::pki_types::ServerName::try_from("localhost").ok()?;
    let mut tls = tokio::time::timeout(Duration::from_secs(5), connector.connect(name, tcp))
        .await
        .ok()?
        .ok()?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    tls.write_all(format!("GET {path} HTTP/1.0\r\nHost: localhost\r\n{auth}\r\n").as_bytes())
        .await
        .ok()?;
    let mut response = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), tls.read_to_end(&mut response)).await;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// With `admin.tls_cert` and `admin.tls_key`, `/health` answers over HTTPS (checked against
/// the dev CA), plain HTTP gets no answer, and the API takes the token read from a file.
#[tokio::test(flavor = "multi_thread")]
async fn the_admin_server_speaks_https_with_a_token_from_a_file() {
    let name = unique("admintls");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    let token = "0123456789abcdef-admin-token";
    let token_file = dir.join("admin-token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let tls = tls_dir();
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        &format!("listen = \"127.0.0.1:{port}\"\n"),
        &format!(
            "listen = \"127.0.0.1:{port}\"\ntls_cert = \"{tls}/server.crt\"\ntls_key = \"{tls}/server.key\"\ntoken = \"${{file:{}}}\"\n",
            token_file.display()
        ),
    );
    assert!(toml.contains("tls_cert"), "{toml}");
    let sluice = Sluice::start(&dir, &toml, port);
    let addr = sluice.admin;
    let deadline = std::time::Instant::now() + crate::support::bound(Duration::from_secs(60));
    let health = loop {
        if let Some((200, body)) = https_request(addr, "/health", None).await {
            break body;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no /health over https within {:?}; log:\n{}",
            crate::support::bound(Duration::from_secs(60)),
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(health.contains("\"state\""), "{health}");
    // Plain HTTP on the HTTPS port: no answer.
    let plain = tokio::task::spawn_blocking(move || http_request(addr, "GET", "/health", &[]))
        .await
        .unwrap();
    assert_eq!(plain, None, "plain http is refused");
    // The API: the token from the file (without its newline), and only it.
    let (status, _) = https_request(addr, "/api/v1/pipelines", None)
        .await
        .unwrap();
    assert_eq!(status, 401);
    let (status, _) = https_request(addr, "/api/v1/pipelines", Some("wrong-token-wrong-token"))
        .await
        .unwrap();
    assert_eq!(status, 401);
    let (status, body) = https_request(addr, "/api/v1/pipelines", Some(token))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&name), "{body}");
    assert!(
        !sluice.log_text().contains(token),
        "the token is never logged"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A missing or unreadable certificate or key stops `sluice run` (and `check` for a key
/// without a certificate) with the key to fix.
#[test]
fn bad_admin_tls_files_are_named() {
    let name = unique("admintlsbad");
    let dir = test_dir(&name);
    let port = free_port();
    let tls = tls_dir();
    let plain = pipeline_toml(&name, "public", &name, port, "");
    let listen = format!("listen = \"127.0.0.1:{port}\"\n");
    let cases = [
        (
            format!(
                "tls_cert = \"{tls}/server.crt\"\ntls_key = \"{}/no-such.key\"\n",
                dir.display()
            ),
            "admin.tls_key",
        ),
        (
            format!("tls_cert = \"{tls}/server.key\"\ntls_key = \"{tls}/server.key\"\n"),
            "admin.tls_cert",
        ),
        (
            format!(
                "tls_cert = \"{tls}/server.crt\"\ntls_key = \"{tls}/client-kafka_client.key\"\n"
            ),
            "admin.tls_key",
        ),
        (
            format!("tls_cert = \"{tls}/server.crt\"\n"),
            "admin.tls_key",
        ),
    ];
    for (i, (lines, key)) in cases.iter().enumerate() {
        let file = dir.join(format!("pipeline{i}.toml"));
        std::fs::write(&file, plain.replace(&listen, &format!("{listen}{lines}"))).unwrap();
        let (code, output) = run_sluice(&["run", file.to_str().unwrap()], Duration::from_secs(30));
        assert_eq!(code, Some(1), "case {i}: {output}");
        assert!(output.contains(key), "case {i}: {output}");
    }
    wait_until("nothing left listening", Duration::from_secs(5), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    });
}

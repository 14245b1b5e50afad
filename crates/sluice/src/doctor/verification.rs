//! The running pipeline's last scheduled verification (`verify_interval_s`, docs/verify.md):
//! read from its admin server's `/health` (`verification`), the one place that holds it. A
//! pipeline that is not running, or whose admin server doctor cannot reach, is reported as not
//! checked.

use std::time::Duration;

use serde_json::Value;

use super::finding::{Finding, Severity, finding};
use crate::config::AdminConfig;

/// How long doctor waits for `/health`.
const TIMEOUT: Duration = Duration::from_secs(3);

/// The most of `/health` read (it is a few KiB; anything longer is not the pipeline's).
const MAX_BODY: usize = 1 << 20;

/// The findings of the pipeline `name`'s last scheduled verification, when it has
/// `verify_interval_s` (`interval_s`); nothing otherwise.
pub(super) async fn checks(
    name: &str,
    admin: &AdminConfig,
    interval_s: Option<u64>,
    findings: &mut Vec<Finding>,
) {
    let Some(interval_s) = interval_s else {
        return;
    };
    let url = health_url(admin);
    match fetch(&url, admin).await {
        Ok(health) => findings.push(judge(name, &health, interval_s, now_ms())),
        Err(error) => findings.push(finding(
            "pipeline.verification",
            Severity::Info,
            format!(
                "the last scheduled verification was not checked: the pipeline's admin server does not answer ({error})"
            ),
            &[("url", url.into())],
            "run doctor on the pipeline's machine while it runs, or read /health's verification there",
        )),
    }
}

/// The finding for `/health`'s `verification` at `now_ms`.
fn judge(name: &str, health: &Value, interval_s: u64, now_ms: u64) -> Finding {
    let verification = &health["verification"];
    let status = verification["status"].as_str().unwrap_or("");
    let number = |field: &str| verification[field].as_u64().unwrap_or(0);
    let evidence = [
        ("pipeline", Value::from(name)),
        ("status", Value::from(status)),
        ("finished_unix_ms", verification["finished_unix_ms"].clone()),
        (
            "last_success_unix_ms",
            verification["last_success_unix_ms"].clone(),
        ),
        ("tables_differing", number("tables_differing").into()),
        ("ranges_differing", number("ranges_differing").into()),
        ("differences_found", number("differences_found").into()),
    ];
    let list = "`sluice verify <pipeline file>` lists the differing keys with both sides' values";
    match status {
        "" => finding(
            "pipeline.verification",
            Severity::Info,
            format!(
                "no scheduled verification has finished yet (one runs every {interval_s} s while the pipeline streams)"
            ),
            &evidence,
            "",
        ),
        "differences" => finding(
            "pipeline.verification_failed",
            Severity::Critical,
            format!(
                "the last scheduled verification found the topics different from the tables: {} table(s), {} key range(s), {} differing key(s)",
                number("tables_differing"),
                number("ranges_differing"),
                number("differences_found")
            ),
            &evidence,
            format!(
                "{list}; `sluice verify <pipeline file> --repair` (a Kafka → PostgreSQL sink's: with `--source-pipeline <the file of the pipeline writing its topics>`) requests an incremental snapshot of exactly those keys (docs/verify.md, Repair)"
            ),
        ),
        "equal" => {
            let finished = number("finished_unix_ms");
            // Finished long ago: the scheduled runs stopped (the pipeline does not stream).
            if now_ms.saturating_sub(finished) > 3 * interval_s * 1000 + 120_000 {
                finding(
                    "pipeline.verification_stale",
                    Severity::Warning,
                    format!(
                        "the last scheduled verification found the topics equal, but it finished {} s ago (every {interval_s} s is configured): verifications run only while the pipeline streams",
                        now_ms.saturating_sub(finished) / 1000
                    ),
                    &evidence,
                    "see /health's state: the pipeline is paused, snapshotting or failing",
                )
            } else {
                finding(
                    "pipeline.verification",
                    Severity::Ok,
                    format!(
                        "the last scheduled verification found the topics equal to the tables ({} rows compared)",
                        number("rows_compared")
                    ),
                    &evidence,
                    "",
                )
            }
        }
        other => finding(
            "pipeline.verification_failed",
            Severity::Warning,
            format!(
                "the last scheduled verification could not verify ({other}): {}",
                verification["error"].as_str().unwrap_or("no reason given")
            ),
            &evidence,
            format!("{list} and why a table could not be verified"),
        ),
    }
}

/// `/health` on the admin server's address (a wildcard address is reached on loopback).
fn health_url(admin: &AdminConfig) -> String {
    let scheme = if admin.tls_files().is_some() {
        "https"
    } else {
        "http"
    };
    let listen = match admin.listen.parse::<std::net::SocketAddr>() {
        Ok(addr) if addr.ip().is_unspecified() => {
            let loopback: std::net::IpAddr = if addr.is_ipv4() {
                std::net::Ipv4Addr::LOCALHOST.into()
            } else {
                std::net::Ipv6Addr::LOCALHOST.into()
            };
            std::net::SocketAddr::new(loopback, addr.port()).to_string()
        }
        _ => admin.listen.clone(),
    };
    format!("{scheme}://{listen}/health")
}

/// `/health` as JSON; with TLS, the admin certificate file's certificates are trusted besides
/// the system's roots.
async fn fetch(url: &str, admin: &AdminConfig) -> anyhow::Result<Value> {
    crate::crypto::install();
    let mut builder = reqwest::Client::builder().timeout(TIMEOUT);
    if let Some((cert, _)) = admin.tls_files() {
        let pem = std::fs::read(cert)?;
        for cert in reqwest::Certificate::from_pem_bundle(&pem)? {
            builder = builder.add_root_certificate(cert);
        }
    }
    let mut response = builder.build()?.get(url).send().await?;
    if !response.status().is_success() {
        anyhow::bail!("HTTP {}", response.status());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > MAX_BODY {
            anyhow::bail!("/health is longer than {MAX_BODY} bytes");
        }
        body.extend_from_slice(&chunk);
    }
    Ok(serde_json::from_slice(&body)?)
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(verification: Value) -> Value {
        serde_json::json!({"state": "streaming", "verification": verification})
    }

    #[test]
    fn differences_are_critical_with_the_repair_named() {
        let h = health(serde_json::json!({
            "status": "differences", "finished_unix_ms": 1000, "last_success_unix_ms": 500,
            "rows_compared": 200, "tables_differing": 1, "ranges_differing": 1,
            "differences_found": 1
        }));
        let f = judge("p", &h, 60, 2000);
        assert_eq!(
            (f.code, f.severity),
            ("pipeline.verification_failed", Severity::Critical)
        );
        assert!(f.fix.contains("--repair"), "{}", f.fix);
        assert!(f.summary.contains("1 differing key"), "{}", f.summary);
    }

    #[test]
    fn equal_is_ok_until_it_is_stale_and_other_outcomes_warn() {
        let equal = health(serde_json::json!({"status": "equal", "finished_unix_ms": 1_000_000}));
        assert_eq!(judge("p", &equal, 60, 1_001_000).severity, Severity::Ok);
        let stale = judge("p", &equal, 60, 1_000_000 + 400_000);
        assert_eq!(
            (stale.code, stale.severity),
            ("pipeline.verification_stale", Severity::Warning)
        );
        let error = health(serde_json::json!({"status": "error", "error": "no slot"}));
        let f = judge("p", &error, 60, 0);
        assert_eq!(f.severity, Severity::Warning);
        assert!(f.summary.contains("no slot"), "{}", f.summary);
        assert_eq!(
            judge("p", &health(Value::Null), 60, 0).severity,
            Severity::Info
        );
    }

    #[test]
    fn a_wildcard_listen_address_is_reached_on_loopback() {
        let admin = |listen: &str| AdminConfig {
            listen: listen.into(),
            token: None,
            tls_cert: None,
            tls_key: None,
        };
        assert_eq!(
            health_url(&admin("0.0.0.0:9000")),
            "http://127.0.0.1:9000/health"
        );
        assert_eq!(health_url(&admin("[::]:9000")), "http://[::1]:9000/health");
        assert_eq!(
            health_url(&admin("127.0.0.1:9000")),
            "http://127.0.0.1:9000/health"
        );
    }
}

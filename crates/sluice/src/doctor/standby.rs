//! Logical decoding on a standby (PostgreSQL 16+): when the URL doctor checks is a hot standby,
//! the pieces that decoding there needs, each named when missing — the version (16+),
//! `hot_standby_feedback` (without it the primary's VACUUM removes catalog rows the slot
//! needs, and the slot is invalidated), `primary_slot_name` (the feedback survives a
//! disconnection), `wal_level = logical` on the standby and on the primary (through
//! `source.postgres.primary_url` when set), the publication (which a standby cannot create)
//! and the standby's replay lag (the pipeline's floor).

use tokio_postgres::Client;

use super::target::{Target, setting};
use super::{Finding, Severity, finding};
use crate::pg_connect::{connect_sql_url, redact_url};
use crate::source::postgres::standby::SINCE;

/// Runs the checks (`version`: the server's major version); nothing on a primary.
pub(super) async fn checks(
    client: &Client,
    target: &Target,
    version: i64,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let in_recovery: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0);
    if !in_recovery {
        return Ok(());
    }
    let evidence = [("server_version", version.into())];
    if version < i64::from(SINCE) {
        findings.push(finding(
            "pg.standby_decoding",
            Severity::Critical,
            format!(
                "this server is a standby of PostgreSQL {version}: logical decoding on a standby needs PostgreSQL {SINCE} or later, and the pipeline refuses to start"
            ),
            &evidence,
            "point source.postgres.url at the primary, or upgrade the servers to 16+",
        ));
        return Ok(());
    }
    findings.push(finding(
        "pg.standby_decoding",
        Severity::Ok,
        format!(
            "this server is a standby of PostgreSQL {version}: the slot, the initial snapshot and the stream are on it"
        ),
        &evidence,
        "",
    ));

    let feedback = setting(client, "hot_standby_feedback").await?;
    let primary_slot = setting(client, "primary_slot_name").await?;
    let evidence = [
        ("hot_standby_feedback", feedback.clone().into()),
        ("primary_slot_name", primary_slot.clone().into()),
    ];
    findings.push(if feedback != "on" {
        finding(
            "pg.decoding_standby_feedback",
            Severity::Critical,
            "hot_standby_feedback is off on the standby: the primary's VACUUM removes catalog rows the slot still needs, and PostgreSQL then invalidates the slot (changes lost, a new snapshot)",
            &evidence,
            "ALTER SYSTEM SET hot_standby_feedback = on; SELECT pg_reload_conf(); on the standby (and give it a physical slot on the primary: primary_slot_name)",
        )
    } else if primary_slot.is_empty() {
        finding(
            "pg.decoding_standby_feedback",
            Severity::Warning,
            "hot_standby_feedback is on but the standby has no primary_slot_name: while it is disconnected the primary forgets its feedback, and VACUUM may remove catalog rows the slot needs (the slot is then invalidated)",
            &evidence,
            "SELECT pg_create_physical_replication_slot('<name>') on the primary and set primary_slot_name = '<name>' on the standby",
        )
    } else {
        finding(
            "pg.decoding_standby_feedback",
            Severity::Ok,
            "hot_standby_feedback is on, through a physical slot on the primary",
            &evidence,
            "",
        )
    });

    primary_checks(target, findings).await;

    let row = client
        .query_one(
            "SELECT coalesce(pg_last_wal_replay_lsn()::text, ''), \
                    coalesce(pg_last_wal_receive_lsn()::text, ''), \
                    coalesce((pg_last_wal_receive_lsn() - pg_last_wal_replay_lsn())::bigint, 0), \
                    coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, -1)",
            &[],
        )
        .await?;
    let replay: String = row.get(0);
    let receive: String = row.get(1);
    let behind: i64 = row.get(2);
    let since: f64 = row.get(3);
    findings.push(finding(
        "pg.decoding_standby_replay_lag",
        Severity::Info,
        format!(
            "the standby has replayed up to {replay} of the {receive} it received ({behind} bytes behind; its last replayed transaction {}): changes reach the pipeline only once replayed",
            if since < 0.0 {
                "none yet".to_owned()
            } else {
                format!("{since:.1} s ago")
            }
        ),
        &[
            ("replay_lsn", replay.into()),
            ("receive_lsn", receive.into()),
            ("replay_lag_bytes", behind.into()),
        ],
        "",
    ));
    Ok(())
}

/// The primary's side: `wal_level = logical` (the standby's slot needs the primary's WAL to
/// carry logical information), through `source.postgres.primary_url`.
async fn primary_checks(target: &Target, findings: &mut Vec<Finding>) {
    let Some(url) = target
        .pipeline
        .as_ref()
        .and_then(|p| p.source.primary_connection())
    else {
        findings.push(finding(
            "pg.decoding_standby_primary",
            Severity::Info,
            "source.postgres.primary_url is not set: the publication must be created on the primary by hand, no heartbeats are written, the slot's creation waits for the primary's next running-xacts record, and the primary's wal_level is not checked (the slot's creation fails if it is not logical)",
            &[],
            "set source.postgres.primary_url to the primary's URL",
        ));
        return;
    };
    let redacted = redact_url(&url);
    match connect_sql_url(&url).await {
        Ok((client, task)) => {
            let wal_level = setting(&client, "wal_level").await.unwrap_or_default();
            let evidence = [
                ("primary_url", redacted.into()),
                ("wal_level", wal_level.clone().into()),
            ];
            findings.push(if wal_level == "logical" {
                finding(
                    "pg.decoding_standby_primary",
                    Severity::Ok,
                    "the primary (source.postgres.primary_url) has wal_level = logical",
                    &evidence,
                    "",
                )
            } else {
                finding(
                    "pg.decoding_standby_primary",
                    Severity::Critical,
                    format!(
                        "the primary (source.postgres.primary_url) has wal_level = {wal_level}: a standby decodes only WAL the primary wrote with wal_level = logical"
                    ),
                    &evidence,
                    "ALTER SYSTEM SET wal_level = logical; on the primary, then restart it",
                )
            });
            drop(client);
            let _ = task.await;
        }
        Err(error) => findings.push(finding(
            "pg.decoding_standby_primary",
            Severity::Warning,
            format!("cannot connect to the primary (source.postgres.primary_url): {error}"),
            &[("primary_url", redacted.into())],
            "check source.postgres.primary_url; without it the publication must exist and no heartbeats are written",
        )),
    }
}

//! Failover slots (PostgreSQL 17+): the pipeline's slot is created — or altered — with
//! `FAILOVER`, so that a standby with `sync_replication_slots = on` keeps a copy of it and the
//! pipeline resumes on the standby once it is promoted, with neither a snapshot nor a gap.
//!
//! `source.postgres.failover` chooses: on by default where the server has it, off on request
//! (the slot is then altered back), and `true` on a server older than 17 is refused with the
//! key and the fix. The slot is brought in step on every start, before `START_REPLICATION`, on
//! the replication connection (`ALTER_REPLICATION_SLOT` is a replication command); what makes
//! a failover safe on the servers' side is doctor's (`crate::doctor::failover`).
//!
//! Reaching the new primary is the URL's: several hosts with `target_session_attrs=read-write`
//! (libpq's meaning; see [`crate::pg_connect`]).

use super::config::PgPipelineConfig;
use super::replication::ReplicationConnection;
use super::setup::PgCatalog;
use crate::error::{PipelineError, classify_pg};

/// The first major version with failover slots.
pub const SINCE: u32 = 17;

/// Whether the slot should be a failover slot on a server of major `version`: `None` before 17.
///
/// # Errors
///
/// Fatal when the pipeline file asks for it and the server is older than 17.
pub fn wanted(config: &PgPipelineConfig, version: u32) -> Result<Option<bool>, PipelineError> {
    match config.source.failover {
        Some(true) if version < SINCE => Err(PipelineError::fatal(
            format!(
                "source.postgres.failover = true needs PostgreSQL {SINCE} or later (the server is {version})"
            ),
            "remove source.postgres.failover (a slot does not survive a failover before 17: see docs/postgres-versions.md), or upgrade PostgreSQL",
        )),
        _ if version < SINCE => Ok(None),
        configured => Ok(Some(configured.unwrap_or(true))),
    }
}

/// `ALTER_REPLICATION_SLOT "slot" (FAILOVER …)`.
pub fn alter_command(slot: &str, failover: bool) -> String {
    format!(
        "ALTER_REPLICATION_SLOT \"{}\" (FAILOVER {failover})",
        slot.replace('"', "\"\"")
    )
}

/// Brings slot `slot`'s `failover` flag in step with the pipeline file; `connection` is the
/// replication connection that will stream from it (not streaming yet).
///
/// # Errors
///
/// Fatal when `failover = true` is asked of a server older than 17, or the server refuses the
/// change; retryable on connection trouble.
pub(crate) async fn apply(
    connection: &mut ReplicationConnection,
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
    slot: &str,
) -> Result<(), PipelineError> {
    let version = catalog.server_major_version().await?;
    let Some(want) = wanted(config, version)? else {
        return Ok(());
    };
    let Some(row) = catalog
        .client()
        .query_opt(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| classify_pg("cannot read replication slots", e))?
    else {
        return Ok(());
    };
    let now: bool = row.get(0);
    if now == want {
        return Ok(());
    }
    connection
        .simple_query(&alter_command(slot, want))
        .await
        .map_err(|e| {
            if e.is_retryable() {
                PipelineError::retryable("cannot alter the replication slot", e)
            } else {
                PipelineError::fatal_with(
                    format!("cannot make replication slot {slot:?} a failover slot ({want})"),
                    "see the server's message; or set source.postgres.failover = false",
                    e,
                )
            }
        })?;
    tracing::info!(
        slot,
        failover = want,
        "replication slot's failover flag set"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(failover: Option<bool>) -> PgPipelineConfig {
        let line = failover.map_or(String::new(), |f| format!("failover = {f}\n"));
        let text = format!(
            "name = \"p\"\n[source.postgres]\nurl = \"postgres://u@h/db\"\nschemas = [\"public\"]\n{line}[kafka]\nbrokers = \"b:9092\"\n"
        );
        PgPipelineConfig::from_toml(&text, "test.toml", &|_: &str| None).expect("valid config")
    }

    #[test]
    fn on_by_default_from_17_and_refused_before() {
        assert_eq!(wanted(&config(None), 17).unwrap(), Some(true));
        assert_eq!(wanted(&config(None), 18).unwrap(), Some(true));
        assert_eq!(wanted(&config(Some(false)), 17).unwrap(), Some(false));
        assert_eq!(wanted(&config(None), 16).unwrap(), None);
        assert_eq!(wanted(&config(Some(false)), 16).unwrap(), None);
        let error = wanted(&config(Some(true)), 16).unwrap_err().to_string();
        assert!(
            error.contains(
                "source.postgres.failover = true needs PostgreSQL 17 or later (the server is 16)"
            ),
            "{error}"
        );
    }

    #[test]
    fn alter_command_quotes_the_slot() {
        assert_eq!(
            alter_command("s\"x", false),
            "ALTER_REPLICATION_SLOT \"s\"\"x\" (FAILOVER false)"
        );
    }
}

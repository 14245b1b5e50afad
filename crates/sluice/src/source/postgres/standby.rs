//! Logical decoding on a physical standby (PostgreSQL 16+): the pipeline's `url` names a hot
//! standby, the slot lives there, the initial snapshot and the stream read there, and the
//! primary carries neither the walsender nor the snapshot's reads.
//!
//! # What a standby cannot do, and where it goes
//!
//! A standby writes no WAL: it cannot create or alter a publication, create the signal table,
//! write heartbeats (`pg_logical_emit_message`) or the watermarks of an incremental snapshot.
//! With `source.postgres.primary_url` set, those go to the primary (their WAL reaches the
//! standby's slot through replication); without it, the publication (and the signal table)
//! must already exist — created on the primary — and the run fails with the statement to run
//! when they do not; heartbeats are off and incremental snapshots are refused per table.
//!
//! # Creating the slot
//!
//! A logical slot on a standby becomes consistent only at a running-xacts record from the
//! primary, which the primary writes on its own every 15 s (`LOG_SNAPSHOT_INTERVAL_MS`) — and
//! only when it has written other WAL since. With a primary connection, sluice calls
//! `pg_log_standby_snapshot()` there every second while the slot is being created, so the
//! creation takes about one replication round trip; without one, the status's hint says what
//! the creation waits for.
//!
//! # The initial snapshot
//!
//! `CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT` works on a 16+ standby (verified on 16.14,
//! 17.10 and 18.4 by `scripts/standby-demo` and the standby smoke test): the exported snapshot
//! imports into `REPEATABLE READ READ ONLY` transactions on the same standby and sees exactly
//! the rows at the slot's consistent point. The initial snapshot is therefore consistent with
//! the slot as on a primary, and is read on the standby.
//!
//! # Promotion
//!
//! The slot is the standby's own (not a synchronized copy), so it stays when the standby is
//! promoted; the walsender keeps streaming across the timeline switch, and each run checks
//! `pg_is_in_recovery()` anew: once promoted, the server is a primary like any other
//! (`primary_url` is then not used).
//!
//! # Replay lag
//!
//! Changes reach the pipeline only once the standby has replayed them: the replay lag is the
//! pipeline's floor. It is measured against the primary's `pg_current_wal_lsn()` when a primary
//! connection exists, otherwise against the WAL the standby has received
//! (`pg_last_wal_receive_lsn()`); the seconds are `now() - pg_last_xact_replay_timestamp()`
//! while WAL is left to replay, and 0 once all of it is.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sluice_engine::Lsn;

use super::config::PgPipelineConfig;
use super::setup::PgCatalog;
use crate::error::{PipelineError, classify_pg};

/// The first major version that decodes on a standby.
pub const SINCE: u32 = 16;

/// The pipeline's server is a hot standby: what it needs beside the standby itself.
pub struct Standby {
    /// The standby's major version.
    pub version: u32,
    /// The primary (`source.postgres.primary_url`), when set and reachable.
    pub primary: Option<Arc<PgCatalog>>,
    /// `hot_standby_feedback` on the standby.
    pub hot_standby_feedback: bool,
    /// Set once the standby was seen promoted while the run goes on: it writes its own WAL
    /// from then on (heartbeats go to it, not to the old primary).
    promoted: AtomicBool,
}

/// Whether the server of `catalog` is in recovery (a standby).
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn in_recovery(catalog: &PgCatalog) -> Result<bool, PipelineError> {
    catalog
        .client()
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await
        .map(|row| row.get(0))
        .map_err(|e| classify_pg("cannot ask the server whether it is a standby", e))
}

/// The refusal of a standby older than [`SINCE`].
pub fn refuse_old(version: u32) -> PipelineError {
    PipelineError::fatal(
        format!(
            "source.postgres.url is a standby of PostgreSQL {version}: logical decoding on a standby needs PostgreSQL {SINCE} or later"
        ),
        "point source.postgres.url at the primary (or upgrade the servers to 16+); see docs/postgres-source.md#decoding-on-a-standby-postgresql-16",
    )
}

/// What the pipeline's server is: `None` for a primary, the [`Standby`] otherwise (with its
/// primary connected when `source.postgres.primary_url` is set).
///
/// # Errors
///
/// Fatal on a standby older than 16, or when `primary_url` names a standby; retryable on
/// connection trouble with the standby. An unreachable primary is logged and left out (the
/// publication must then already exist).
pub async fn detect(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
) -> Result<Option<Standby>, PipelineError> {
    if !in_recovery(catalog).await? {
        if config.source.primary_url.is_some() {
            tracing::info!(
                "source.postgres.url is a primary (not in recovery): source.postgres.primary_url is not used"
            );
        }
        return Ok(None);
    }
    let version = catalog.server_major_version().await?;
    if version < SINCE {
        return Err(refuse_old(version));
    }
    let hot_standby_feedback: bool = catalog
        .client()
        .query_one("SELECT current_setting('hot_standby_feedback')::bool", &[])
        .await
        .map(|row| row.get(0))
        .map_err(|e| classify_pg("cannot read hot_standby_feedback", e))?;
    if !hot_standby_feedback {
        tracing::warn!(
            "hot_standby_feedback is off on the standby: the primary's VACUUM may remove catalog rows the slot still needs, and PostgreSQL then invalidates the slot (a gap); set hot_standby_feedback = on there (and a physical slot, primary_slot_name)"
        );
    }
    let primary = match PgCatalog::connect_primary(config).await {
        Ok(None) => None,
        Ok(Some(primary)) => {
            if in_recovery(&primary).await? {
                return Err(PipelineError::fatal(
                    "source.postgres.primary_url is a standby too (in recovery)",
                    "set source.postgres.primary_url to the primary the standby of source.postgres.url replicates from",
                ));
            }
            Some(Arc::new(primary))
        }
        Err(error) if !error.is_retryable() => return Err(error),
        Err(error) => {
            tracing::warn!(
                error = %error.chain(),
                "cannot reach the primary (source.postgres.primary_url): going on with the standby alone (the publication must exist; no heartbeats)"
            );
            None
        }
    };
    tracing::info!(
        version,
        primary = primary.is_some(),
        hot_standby_feedback,
        "source.postgres.url is a standby: decoding on the standby"
    );
    if let Some(primary) = &primary {
        primary
            .check_wal_level()
            .await
            .map_err(|error| match error {
                PipelineError::Fatal { what, hint, .. } => PipelineError::fatal(
                    format!("on the primary (source.postgres.primary_url): {what}"),
                    hint,
                ),
                error => error,
            })?;
    }
    Ok(Some(Standby {
        version,
        primary,
        hot_standby_feedback,
        promoted: AtomicBool::new(false),
    }))
}

impl Standby {
    /// Whether the standby was seen promoted during this run.
    pub fn promoted(&self) -> bool {
        self.promoted.load(Ordering::Relaxed)
    }

    /// Records that the standby was promoted (its replay lag reads `None`).
    pub fn set_promoted(&self) {
        if !self.promoted.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "the standby was promoted: it is a primary now; the slot stays and streaming goes on (heartbeats are written on it from now on)"
            );
        }
    }

    /// Where the run writes WAL (heartbeats, the publication when new tables join): the
    /// primary connection, or the promoted standby itself (`standby`); `None` when neither.
    pub fn writer(&self, standby: &Arc<PgCatalog>) -> Option<Arc<PgCatalog>> {
        if self.promoted() {
            Some(Arc::clone(standby))
        } else {
            self.primary.clone()
        }
    }

    /// What the slot's creation waits for, for the status's hint and the log.
    pub fn creation_wait(&self) -> &'static str {
        if self.primary.is_some() {
            "creating the slot on the standby: it becomes consistent at the primary's next running-xacts record, which sluice asks for (pg_log_standby_snapshot() on source.postgres.primary_url) every second"
        } else {
            "creating the slot on the standby: it waits for the primary's next running-xacts record (written every 15 s while the primary writes other WAL; run SELECT pg_log_standby_snapshot() on the primary to make it now, or set source.postgres.primary_url)"
        }
    }

    /// Runs `creation` (a slot being created on the standby) while asking the primary for a
    /// running-xacts record every second, when there is a primary connection.
    pub async fn while_creating_slot<T>(&self, creation: impl Future<Output = T>) -> T {
        tracing::info!("{}", self.creation_wait());
        let Some(primary) = self.primary.clone() else {
            return creation.await;
        };
        let nudge = async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if let Err(error) = primary
                    .client()
                    .execute("SELECT pg_log_standby_snapshot()", &[])
                    .await
                {
                    tracing::warn!(error = %error, "pg_log_standby_snapshot() on the primary failed");
                }
            }
        };
        tokio::select! {
            out = creation => out,
            () = nudge => unreachable!("the nudge loop never ends"),
        }
    }
}

/// The standby's replay position against the WAL it could replay.
#[derive(Debug, Clone, PartialEq)]
pub struct ReplayLag {
    /// `pg_last_wal_replay_lsn()`.
    pub replay_lsn: Lsn,
    /// The position it is measured against: the primary's `pg_current_wal_lsn()`, or the
    /// standby's `pg_last_wal_receive_lsn()`.
    pub target_lsn: Lsn,
    /// `primary` or `received`.
    pub measured_against: &'static str,
    /// WAL bytes between the two.
    pub bytes: i64,
    /// `now() - pg_last_xact_replay_timestamp()` while WAL is left to replay, else 0.
    pub seconds: f64,
}

/// Reads the standby's replay lag (see the module's docs); `None` when the server is no
/// standby any more (promoted).
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn replay_lag(
    standby: &PgCatalog,
    primary: Option<&PgCatalog>,
) -> Result<Option<ReplayLag>, PipelineError> {
    let row = standby
        .client()
        .query_one(
            "SELECT pg_is_in_recovery(), coalesce(pg_last_wal_replay_lsn()::text, '0/0'), \
                    coalesce(pg_last_wal_receive_lsn()::text, '0/0'), \
                    coalesce(extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8, 0)",
            &[],
        )
        .await
        .map_err(|e| classify_pg("cannot read the standby's replay position", e))?;
    if !row.get::<_, bool>(0) {
        return Ok(None);
    }
    let parse = |i: usize| row.get::<_, String>(i).parse::<Lsn>().unwrap_or_default();
    let replay_lsn = parse(1);
    let received = parse(2);
    let since_replayed: f64 = row.get(3);
    let (target_lsn, measured_against) = match primary {
        Some(primary) => {
            let at: String = primary
                .client()
                .query_one("SELECT pg_current_wal_lsn()::text", &[])
                .await
                .map_err(|e| classify_pg("cannot read the primary's WAL position", e))?
                .get(0);
            (at.parse().unwrap_or(received), "primary")
        }
        None => (received, "received"),
    };
    Ok(Some(lag_of(
        replay_lsn,
        target_lsn,
        measured_against,
        since_replayed,
    )))
}

/// The lag of a standby that replayed up to `replay_lsn` of `target_lsn`, its last replayed
/// transaction `since_replayed` seconds ago.
fn lag_of(
    replay_lsn: Lsn,
    target_lsn: Lsn,
    measured_against: &'static str,
    since_replayed: f64,
) -> ReplayLag {
    let bytes = i64::try_from(target_lsn.0.saturating_sub(replay_lsn.0)).unwrap_or(i64::MAX);
    ReplayLag {
        replay_lsn,
        target_lsn,
        measured_against,
        bytes,
        // Caught up: the age of the last replayed transaction is the primary's idleness, not
        // a lag.
        seconds: if bytes > 0 {
            since_replayed.max(0.0)
        } else {
            0.0
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_that_caught_up_has_no_lag_however_old_its_last_transaction() {
        let lag = lag_of(Lsn(0x100), Lsn(0x100), "primary", 3600.0);
        assert_eq!((lag.bytes, lag.seconds), (0, 0.0));
        let lag = lag_of(Lsn(0x100), Lsn(0x180), "received", 2.5);
        assert_eq!((lag.bytes, lag.seconds), (0x80, 2.5));
        // A primary position read before the standby's (it moves on between the two queries).
        let lag = lag_of(Lsn(0x200), Lsn(0x180), "primary", 1.0);
        assert_eq!((lag.bytes, lag.seconds), (0, 0.0));
    }

    #[test]
    fn old_standbys_are_refused_with_the_fix() {
        let error = refuse_old(15).to_string();
        assert!(
            error.contains("standby of PostgreSQL 15: logical decoding on a standby needs PostgreSQL 16 or later"),
            "{error}"
        );
    }
}

//! Active/standby election for instances of one pipeline, with what PostgreSQL already
//! guarantees (see docs/high-availability.md):
//!
//! - **Who is active**: the instance whose session holds the pipeline's session-level advisory
//!   lock (`pg_try_advisory_lock`). The server releases it when that session ends: at once
//!   when the process dies (its sockets close), after `ha.failover_timeout_ms` when the
//!   instance falls silent (the session runs with that `idle_session_timeout` and the active
//!   instance queries it every second, so only a silent one is ever idle that long).
//! - **Who may stream**: the logical slot has at most one walsender. A new active instance
//!   waits until the old walsender is gone (`active_pid` null); the replication connection runs
//!   with `wal_sender_timeout = ha.failover_timeout_ms`, so a silent one goes within that time.
//! - **Who may write state**: with `state_store = "kafka"` the state topic is written in Kafka
//!   transactions under the pipeline's `transactional.id`; the new active instance's
//!   `init_transactions` fences every earlier writer.
//!
//! No lease, clock or coordinator of sluice's own: the server ends the sessions, and an
//! instance that lost its session stops its run (and asks again, as a standby).

use std::time::Duration;

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use super::config::PgPipelineConfig;
use crate::error::{PipelineError, classify_pg};
use crate::runtime::active::{self, ActiveRole};
use crate::runtime::status::{ActiveInstance, StatusBoard};

/// The advisory lock's first key: "sluice" in ASCII, so sluice's locks are easy to find in
/// `pg_locks` (`classid`); the second is `hashtext(<slot name>)`.
const LOCK_CLASS: i32 = 0x736c_7563;

/// How often the active instance proves its session alive (and so keeps it from idling out).
const PING_INTERVAL: Duration = Duration::from_secs(1);

/// Waits (as a standby, reporting so on `board`) until this instance holds the pipeline's
/// lock and the slot has no walsender left; `Ok(None)` when `shutdown` fires first.
///
/// # Errors
///
/// When the server cannot be reached (retryable) or refuses the session settings.
pub async fn acquire(
    config: &PgPipelineConfig,
    board: &StatusBoard,
    shutdown: &CancellationToken,
) -> Result<Option<ActiveRole>, PipelineError> {
    let ha = &config.ha;
    let instance = ha.instance_id();
    let slot = config.slot_name();
    let client = connect(config, &instance).await?;
    let poll = Duration::from_millis(ha.standby_poll_ms);
    let mut waited = false;
    loop {
        let locked: bool = client
            .query_one(
                "SELECT pg_try_advisory_lock($1, hashtext($2))",
                &[&LOCK_CLASS, &slot],
            )
            .await
            .map_err(|e| classify_pg("cannot ask for the pipeline's active role", e))?
            .get(0);
        if locked {
            break;
        }
        let active = holder(&client, &slot).await?;
        active::report_standby(board, active, &mut waited);
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = shutdown.cancelled() => return Ok(None),
        }
    }
    // The lock is ours; an old walsender (of an instance that fell silent) may still hold
    // the slot until wal_sender_timeout ends it.
    let deadline = tokio::time::Instant::now() + Duration::from_millis(ha.failover_timeout_ms) * 3;
    loop {
        let busy: Option<i32> = client
            .query_opt(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| classify_pg("cannot read the replication slot", e))?
            .and_then(|row| row.get(0));
        let Some(pid) = busy else { break };
        if tokio::time::Instant::now() > deadline {
            return Err(PipelineError::retryable(
                format!(
                    "replication slot {slot:?} is still used by walsender {pid} of a former active instance"
                ),
                SlotBusy,
            ));
        }
        tracing::info!(
            slot,
            pid,
            "waiting for the former active instance's walsender to end"
        );
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = shutdown.cancelled() => return Ok(None),
        }
    }
    let since_unix_ms = active::now_unix_ms();
    // Standbys read the active instance and its start from the session's name.
    client
        .execute(
            "SELECT set_config('application_name', $1, false)",
            &[&active::session_label(
                &config.name,
                &instance,
                since_unix_ms,
            )],
        )
        .await
        .map_err(|e| classify_pg("cannot name the active session", e))?;
    active::report_active(board, instance, since_unix_ms, waited);
    let lost = CancellationToken::new();
    let ping = tokio::spawn(keep_alive(client, lost.clone()));
    Ok(Some(ActiveRole::new(lost, ping)))
}

/// Queries the session every second; cancels `lost` when a query fails or takes longer than
/// the interval allows.
async fn keep_alive(client: Client, lost: CancellationToken) {
    loop {
        tokio::time::sleep(PING_INTERVAL).await;
        let ping = tokio::time::timeout(PING_INTERVAL * 3, client.simple_query("SELECT 1")).await;
        if !matches!(ping, Ok(Ok(_))) {
            tracing::warn!(
                "lost the PostgreSQL session that holds the pipeline's active role: stopping this run"
            );
            lost.cancel();
            return;
        }
    }
}

/// A SQL session named `sluice-<pipeline> <instance>` that the server ends after
/// `ha.failover_timeout_ms` of silence.
async fn connect(config: &PgPipelineConfig, instance: &str) -> Result<Client, PipelineError> {
    let mut pg_config = crate::pg_connect::PgConnectConfig::parse(&config.source.connection())
        .map_err(|e| {
            PipelineError::fatal(
                format!("source.postgres.url: {e}"),
                "expected postgres://user[:password]@host[:port]/database[?sslmode=...]",
            )
        })?;
    pg_config
        .pg
        .application_name(format!("sluice-{} {instance}", config.name))
        .connect_timeout(Duration::from_secs(10));
    let options = format!(
        "{} -c idle_session_timeout={} -c statement_timeout=10000",
        pg_config.pg.get_options().unwrap_or_default(),
        config.ha.failover_timeout_ms
    );
    pg_config.pg.options(options.trim_start());
    let (client, connection) =
        crate::pg_connect::connect_sql(&pg_config)
            .await
            .map_err(|e| match e {
                crate::pg_connect::ConnectError::Connect { message, source } => {
                    classify_pg(message, source)
                }
                e => PipelineError::fatal(
                    e.to_string(),
                    "fix the TLS parameters of source.postgres.url",
                ),
            })?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// The instance whose session holds the lock, from its `application_name`
/// (`sluice-<pipeline> <instance> <active since, Unix ms>`).
async fn holder(client: &Client, slot: &str) -> Result<Option<ActiveInstance>, PipelineError> {
    let row = client
        .query_opt(
            "SELECT a.application_name \
             FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
             WHERE l.locktype = 'advisory' AND l.granted AND l.classid = $1::int::oid \
               AND l.objid = hashtext($2)::oid AND l.objsubid = 2",
            &[&LOCK_CLASS, &slot],
        )
        .await
        .map_err(|e| classify_pg("cannot read who holds the pipeline's active role", e))?;
    Ok(row.map(|row| {
        let name: Option<String> = row.get(0);
        active::parse_session_label(name.as_deref())
    }))
}

/// The slot is still held by a walsender of a former active instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("slot busy")]
struct SlotBusy;

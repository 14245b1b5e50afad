//! Active/standby election for instances of one MySQL/MariaDB pipeline, with what the server
//! already guarantees (see docs/high-availability.md; the PostgreSQL source does the same with
//! an advisory lock):
//!
//! - **Who is active**: the instance whose session holds the pipeline's user-level lock
//!   (`GET_LOCK('sluice-<pipeline>', 0)`). The server releases it when that session ends: at
//!   once when the process dies (its socket closes), after `ha.failover_timeout_ms` when the
//!   instance falls silent (the session runs with that `wait_timeout`, rounded up to seconds;
//!   the active instance keeps it busy with a one-second `DO SLEEP(1), '<label>'` after
//!   another, so only a silent instance is ever idle that long).
//! - **Who is active, as the standbys see it**: the keep-alive statement carries the instance
//!   and its start ([`session_label`]); a standby reads it from `SHOW FULL PROCESSLIST` for
//!   the lock holder's connection (`IS_USED_LOCK`). The sessions of one user see each other
//!   without the `PROCESS` privilege.
//! - **Who may stream**: a binlog reader has no slot; the former active instance's dump thread
//!   ends with its process, and after `net_write_timeout` (set to the failover timeout with
//!   `state_store = "kafka"`) when it fell silent; MariaDB also ends an older dump of the same
//!   `server_id` when a new one starts.
//! - **Who may write state**: with `state_store = "kafka"` the state topic's
//!   `init_transactions` fences every earlier writer ([`crate::kafka_state`]); a fenced write
//!   ends the run as a lost role does.
//!
//! No lease, clock or coordinator of sluice's own: the server ends the sessions, and an
//! instance that lost its session stops its run (and asks again, as a standby).

use std::time::Duration;

use mysql_async::Conn;
use mysql_async::prelude::Queryable as _;
use tokio_util::sync::CancellationToken;

use super::config::MysqlPipelineConfig;
use super::server;
use crate::error::PipelineError;
use crate::runtime::active::{self, ActiveRole, session_label};
use crate::runtime::status::{ActiveInstance, StatusBoard};

/// Longest lock name the servers take (MySQL refuses longer ones).
const MAX_LOCK_NAME: usize = 64;

/// How long a keep-alive statement may take beyond its one-second sleep before the session
/// counts as lost.
const PING_TIMEOUT: Duration = Duration::from_secs(4);

/// The pipeline's lock name: `sluice-<pipeline>`, or, when longer than the servers take, its
/// start and a hash of the whole name.
pub fn lock_name(pipeline: &str) -> String {
    let name = format!("sluice-{pipeline}");
    if name.len() <= MAX_LOCK_NAME {
        return name;
    }
    // FNV-1a: the same on every build and machine (std's hasher is not).
    let hash = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut cut = MAX_LOCK_NAME - 17;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash:016x}", &name[..cut])
}

/// Waits (as a standby, reporting so on `board`) until this instance holds the pipeline's
/// lock; `Ok(None)` when `shutdown` fires first.
///
/// # Errors
///
/// When the server cannot be reached or refuses the session settings (retryable).
pub async fn acquire(
    config: &MysqlPipelineConfig,
    board: &StatusBoard,
    shutdown: &CancellationToken,
) -> Result<Option<ActiveRole>, PipelineError> {
    let ha = &config.ha;
    let instance = ha.instance_id();
    let lock = lock_name(&config.name);
    let mut conn = server::connect(&config.source).await?;
    conn.query_drop(format!(
        "SET SESSION wait_timeout = {}",
        ha.failover_timeout_ms.div_ceil(1000).max(1)
    ))
    .await
    .map_err(server::sql_error("SET SESSION wait_timeout failed"))?;
    let poll = Duration::from_millis(ha.standby_poll_ms);
    let mut waited = false;
    loop {
        let locked: Option<i64> = conn
            .exec_first("SELECT GET_LOCK(?, 0)", (lock.as_str(),))
            .await
            .map_err(server::sql_error(
                "cannot ask for the pipeline's active role",
            ))?
            .flatten();
        if locked == Some(1) {
            break;
        }
        let active = holder(&mut conn, &lock).await?;
        // This instance's own session of a run that just ended may hold the lock until the
        // server notices it is gone: not another instance to wait for as a standby.
        let own = active.as_ref().is_some_and(|a| a.instance == instance);
        if !own {
            active::report_standby(board, active, &mut waited);
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = shutdown.cancelled() => return Ok(None),
        }
    }
    let since_unix_ms = active::now_unix_ms();
    let label = session_label(&config.name, &instance, since_unix_ms);
    active::report_active(board, instance, since_unix_ms, waited);
    let lost = CancellationToken::new();
    let ping = tokio::spawn(keep_alive(conn, label, lost.clone()));
    Ok(Some(ActiveRole::new(lost, ping)))
}

/// Keeps the session busy with one-second sleeps that carry `label` (what standbys read);
/// cancels `lost` when a statement fails or takes longer than [`PING_TIMEOUT`].
async fn keep_alive(mut conn: Conn, label: String, lost: CancellationToken) {
    // A string literal: no quote or backslash may end it early.
    let label: String = label
        .chars()
        .map(|c| if c == '\'' || c == '\\' { '_' } else { c })
        .collect();
    let statement = format!("DO SLEEP(1), '{label}'");
    loop {
        let ping = tokio::time::timeout(PING_TIMEOUT, conn.query_drop(statement.as_str())).await;
        if !matches!(ping, Ok(Ok(()))) {
            tracing::warn!(
                "lost the MySQL/MariaDB session that holds the pipeline's active role: stopping this run"
            );
            lost.cancel();
            return;
        }
    }
}

/// The instance whose session holds `lock`, from its keep-alive statement (`None`: nobody
/// holds it any more; `unknown` between two statements or for a holder that is not sluice).
///
/// Two statements, not `information_schema.PROCESSLIST` joined to `IS_USED_LOCK(?)` in one
/// prepared statement: MariaDB 10.11.19 crashed once under the test suite while executing that
/// join (SIGSEGV in `ha_maria::drop_table`, freeing the join's temporary table at the end of
/// `Prepared_statement::execute`). `SHOW FULL PROCESSLIST` sends its rows without a temporary
/// table, and standbys run this every `standby_poll_ms` against the user's production server.
async fn holder(conn: &mut Conn, lock: &str) -> Result<Option<ActiveInstance>, PipelineError> {
    let id: Option<u64> = conn
        .exec_first("SELECT IS_USED_LOCK(?)", (lock,))
        .await
        .map_err(server::sql_error(
            "cannot read who holds the pipeline's active role",
        ))?
        .flatten();
    let Some(id) = id else {
        return Ok(None);
    };
    let sessions: Vec<mysql_async::Row> =
        conn.query("SHOW FULL PROCESSLIST")
            .await
            .map_err(server::sql_error(
                "cannot read who holds the pipeline's active role",
            ))?;
    // The holder's session may have ended between the two statements: then no label.
    let info: Option<String> = sessions
        .iter()
        .find(|session| session.get::<u64, _>("Id") == Some(id))
        .and_then(|session| session.get::<Option<String>, _>("Info"))
        .flatten();
    let label = info.as_deref().and_then(|statement| {
        let start = statement.find('\'')?;
        let end = statement.rfind('\'')?;
        (end > start).then(|| &statement[start + 1..end])
    });
    Ok(Some(active::parse_session_label(label)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_names_fit_the_servers_limit_and_stay_distinct() {
        assert_eq!(lock_name("orders"), "sluice-orders");
        let long = "a".repeat(100);
        let other = format!("{}b", "a".repeat(99));
        assert_eq!(lock_name(&long).len(), MAX_LOCK_NAME);
        assert_ne!(lock_name(&long), lock_name(&other));
        assert_eq!(lock_name(&long), lock_name(&long), "stable");
        assert!(lock_name(&"é".repeat(40)).len() <= MAX_LOCK_NAME);
    }
}

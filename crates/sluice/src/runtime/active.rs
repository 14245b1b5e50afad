//! The active role of an instance, whatever source elects it (see docs/high-availability.md):
//! each source proves it holds the role with its server's own exclusive session (PostgreSQL: a
//! session-level advisory lock; MySQL/MariaDB: a user-level lock, `GET_LOCK`), kept alive by a
//! task that notices the session's loss. This module holds what the sources share: the held
//! role ([`ActiveRole`]), the run that stops the moment the role is lost ([`run_while_active`])
//! and how the active instance names itself to the standbys ([`session_label`]).

use std::future::Future;
use std::time::{SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;

use super::status::{ActiveInstance, PipelineState, Role, StatusBoard};
use super::supervisor::RunEnd;
use crate::error::PipelineError;

/// The held active role: the source's session that holds it lives in `keep_alive`, which
/// cancels `lost` when the session is gone.
pub struct ActiveRole {
    lost: CancellationToken,
    keep_alive: tokio::task::JoinHandle<()>,
}

impl ActiveRole {
    /// The role held by the session that `keep_alive` owns; `keep_alive` cancels `lost` when
    /// the session is gone.
    pub fn new(lost: CancellationToken, keep_alive: tokio::task::JoinHandle<()>) -> Self {
        Self { lost, keep_alive }
    }

    /// Fires when the session with the role is gone (the role may be someone else's by now).
    pub fn lost(&self) -> &CancellationToken {
        &self.lost
    }
}

impl Drop for ActiveRole {
    fn drop(&mut self) {
        // Ending the task drops the session, which releases the role on the server.
        self.keep_alive.abort();
    }
}

/// Now, in Unix milliseconds (when an instance became active).
pub fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How the active instance names its session for the standbys:
/// `sluice-<pipeline> <instance> <active since, Unix ms>` (PostgreSQL's `application_name`,
/// MySQL's keep-alive statement); [`parse_session_label`] reads it back.
pub fn session_label(pipeline: &str, instance: &str, since_unix_ms: u64) -> String {
    format!("sluice-{pipeline} {instance} {since_unix_ms}")
}

/// The active instance from a [`session_label`] (`unknown` for a label that is not one).
pub fn parse_session_label(label: Option<&str>) -> ActiveInstance {
    let (instance, since) = label
        .and_then(|n| n.split_once(' '))
        .and_then(|(_, rest)| rest.rsplit_once(' '))
        .unwrap_or(("unknown", "0"));
    ActiveInstance {
        instance: instance.to_owned(),
        since_unix_ms: since.parse().unwrap_or(0),
    }
}

/// Reports on `board` that this instance waits as a standby while `active` streams, and logs
/// it the first time (`waited` remembers that it did).
pub fn report_standby(board: &StatusBoard, active: Option<ActiveInstance>, waited: &mut bool) {
    if !*waited {
        tracing::info!(
            active = active.as_ref().map_or("unknown", |a| a.instance.as_str()),
            "another instance of the pipeline is active: waiting as a standby"
        );
        *waited = true;
    }
    board.set_role(Role::Standby, active);
    board.set_state(PipelineState::Standby);
}

/// Reports on `board` that this instance (`instance`, active since `since_unix_ms`) holds the
/// role now, and logs it (`waited`: it took over from another instance).
pub fn report_active(board: &StatusBoard, instance: String, since_unix_ms: u64, waited: bool) {
    if waited {
        tracing::info!(instance, "took over as the active instance");
    } else {
        tracing::info!(instance, "active instance of the pipeline");
    }
    board.set_role(
        Role::Active,
        Some(ActiveInstance {
            instance,
            since_unix_ms,
        }),
    );
    board.set_state(PipelineState::Starting);
}

/// Runs `run` (one run of the pipeline, given its stop token) while `role` is held: the run is
/// stopped the moment the role is lost, and its end is then an error (never `Ok`: another
/// instance may be active by now, and this one must not go on as a second writer); the
/// supervisor's next run asks for the role again, as a standby if another instance took over.
///
/// # Errors
///
/// The run's, or the loss of the role (retryable).
pub async fn run_while_active<F>(
    role: ActiveRole,
    stop: &CancellationToken,
    server: &str,
    run: impl FnOnce(CancellationToken) -> F,
) -> Result<RunEnd, PipelineError>
where
    F: Future<Output = Result<(), PipelineError>>,
{
    let run_stop = stop.child_token();
    let watch = {
        let lost = role.lost().clone();
        let run_stop = run_stop.clone();
        tokio::spawn(async move {
            lost.cancelled().await;
            run_stop.cancel();
        })
    };
    let result = run(run_stop).await;
    watch.abort();
    if role.lost().is_cancelled() && !stop.is_cancelled() {
        return Err(PipelineError::retryable(
            format!(
                "lost the {server} session that holds the pipeline's active role; asking again (as a standby if another instance took over)"
            ),
            std::io::Error::from(std::io::ErrorKind::ConnectionAborted),
        ));
    }
    drop(role);
    result.map(|()| RunEnd::Finished)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_label_names_the_instance_and_its_start() {
        let label = session_label("orders", "host-1:42", 1_700_000_000_000);
        assert_eq!(label, "sluice-orders host-1:42 1700000000000");
        let active = parse_session_label(Some(&label));
        assert_eq!(active.instance, "host-1:42");
        assert_eq!(active.since_unix_ms, 1_700_000_000_000);
        assert_eq!(parse_session_label(None).instance, "unknown");
        assert_eq!(parse_session_label(Some("psql")).instance, "unknown");
    }

    #[tokio::test]
    async fn a_lost_role_stops_the_run_with_an_error() {
        let lost = CancellationToken::new();
        let role = ActiveRole::new(lost.clone(), tokio::spawn(std::future::pending()));
        let stop = CancellationToken::new();
        let result = run_while_active(role, &stop, "test", |run_stop| async move {
            lost.cancel();
            run_stop.cancelled().await;
            Ok(())
        })
        .await;
        let error = result.expect_err("a lost role is never a finished run");
        assert!(error.to_string().contains("active role"), "{error}");

        let role = ActiveRole::new(CancellationToken::new(), tokio::spawn(async {}));
        let result = run_while_active(role, &stop, "test", |_| async { Ok(()) }).await;
        assert_eq!(result.unwrap(), RunEnd::Finished);
    }
}

//! One supervisor for every kind of pipeline: runs it, restarts it after failures per the
//! restart policy with exponential backoff and jitter, follows the operator's pause, resume
//! and restart requests, and keeps the pipeline's state on the [`StatusBoard`].
//!
//! A pipeline plugs in through [`Supervised`]: one run, from connecting to the first error,
//! a stop or (for pipelines that cannot pause inside a run) an operator's request. What a run
//! resumes from (a slot's confirmed position, committed files) is the pipeline's business.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use super::metrics as m;
use super::status::{PipelineState, StatusBoard};
use crate::config::{RestartConfig, RestartPolicy};
use crate::error::PipelineError;

/// A run that lasted this long resets the count of failures in a row.
const HEALTHY_RUN: Duration = Duration::from_secs(60);

/// How a run ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// It ended by itself (e.g. `snapshot = "initial_only"`) or on shutdown: the pipeline
    /// stops.
    Finished,
    /// It stopped on an operator's request (a restart, or a pause for pipelines that pause by
    /// ending the run): the supervisor follows the request.
    Requested,
}

/// A pipeline the supervisor runs.
pub trait Supervised {
    /// Whether a paused pipeline keeps its run going (and pauses inside it, e.g. a consumer
    /// that stays in its group). When `false`, every operator request ends the run (through
    /// `stop`) and a paused pipeline waits here, with no run, until resumed.
    const PAUSES_IN_RUN: bool;

    /// Where the next run resumes, for the log (e.g. "the last confirmed position").
    fn resumes_from(&self) -> &'static str;

    /// Why the pipeline must not run again, whatever the restart policy says (`None`: it may).
    /// Asked before every restart, after a failure or an operator's request.
    fn restart_refused(&self) -> Option<PipelineError> {
        None
    }

    /// One run, until an error, `stop` or an operator's request.
    fn run_once(
        &mut self,
        stop: CancellationToken,
    ) -> impl Future<Output = Result<RunEnd, PipelineError>> + Send;
}

/// Runs `pipeline` until `shutdown` or a failure the restart policy does not restart.
///
/// # Errors
///
/// The failure that stopped the pipeline (its state is then `failed`).
pub async fn supervise<P: Supervised>(
    pipeline: &mut P,
    board: &Arc<StatusBoard>,
    restart: &RestartConfig,
    shutdown: &CancellationToken,
) -> Result<(), PipelineError> {
    let mut control = board.control();
    let mut consecutive_failures = 0u32;
    loop {
        // Requests from here on end the run; the pause check reads through the same receiver,
        // so a pause that arrives at any point is seen.
        let mut requests = board.control();
        if !P::PAUSES_IN_RUN && requests.borrow_and_update().paused {
            board.set_state(PipelineState::Paused);
            tokio::select! {
                () = shutdown.cancelled() => {
                    board.set_state(PipelineState::Stopped);
                    return Ok(());
                }
                _ = control.wait_for(|c| !c.paused) => {}
            }
            continue;
        }
        let run_stop = shutdown.child_token();
        // An operator's request ends the run gracefully (drain, confirm, close).
        let watcher = (!P::PAUSES_IN_RUN).then(|| {
            let run_stop = run_stop.clone();
            tokio::spawn(async move {
                if requests.changed().await.is_ok() {
                    run_stop.cancel();
                }
            })
        });
        board.set_state(PipelineState::Starting);
        let started = Instant::now();
        let requested_before = *control.borrow();
        let result = pipeline.run_once(run_stop).await;
        let request_seen = watcher.as_ref().is_some_and(|w| w.is_finished());
        if let Some(watcher) = watcher {
            watcher.abort();
        }
        if shutdown.is_cancelled() {
            if let Err(error) = &result {
                tracing::warn!(error = %error.chain(), "failure while stopping");
            }
            board.set_state(PipelineState::Stopped);
            return Ok(());
        }
        if started.elapsed() > HEALTHY_RUN {
            consecutive_failures = 0;
        }
        let error = match result {
            Ok(RunEnd::Finished) if !request_seen && *control.borrow() == requested_before => {
                board.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Ok(_) => {
                if let Some(refusal) = pipeline.restart_refused() {
                    return Err(refuse_restart(board, refusal, None));
                }
                // Stopped on an operator's request: pause (handled at the top) or restart.
                if !control.borrow().paused || P::PAUSES_IN_RUN {
                    board.record_restart("requested", None, 0, consecutive_failures);
                }
                continue;
            }
            Err(error) => error,
        };
        consecutive_failures += 1;
        if let Some(refusal) = pipeline.restart_refused() {
            return Err(refuse_restart(board, refusal, Some(&error)));
        }
        let Some(delay) = after_failure(
            board,
            restart,
            &error,
            consecutive_failures,
            pipeline.resumes_from(),
        ) else {
            return Err(error);
        };
        control.borrow_and_update();
        tokio::select! {
            () = shutdown.cancelled() => {
                board.set_state(PipelineState::Stopped);
                return Ok(());
            }
            () = tokio::time::sleep(delay) => {}
            // A resume, restart or pause request cuts the wait short.
            _ = control.changed() => {}
        }
        metrics::gauge!(m::RESTART_BACKOFF).set(0.0);
        board.update(|s| s.backoff_ms = None);
    }
}

/// What the supervisor does after a failed run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Wait the backoff, then run again.
    Restart,
    /// Stop the pipeline with the failure.
    Stop,
}

/// The restart policy: `consecutive_failures` counts this failure.
pub fn decide(restart: &RestartConfig, retryable: bool, consecutive_failures: u32) -> Decision {
    match restart.policy {
        RestartPolicy::Never => Decision::Stop,
        RestartPolicy::Always => Decision::Restart,
        RestartPolicy::OnFailure if !retryable => Decision::Stop,
        RestartPolicy::OnFailure
            if restart.max_restarts > 0 && consecutive_failures > restart.max_restarts =>
        {
            Decision::Stop
        }
        RestartPolicy::OnFailure => Decision::Restart,
    }
}

/// The delay before restart number `consecutive_failures` (1-based): the initial backoff
/// doubled per failure in a row, capped, times `jitter` (in 0.5..=1).
pub fn backoff_delay(restart: &RestartConfig, consecutive_failures: u32, jitter: f64) -> Duration {
    let initial = Duration::from_millis(restart.initial_backoff_ms);
    let max = Duration::from_millis(restart.max_backoff_ms);
    let doublings = consecutive_failures.saturating_sub(1).min(20);
    initial
        .saturating_mul(1 << doublings)
        .min(max)
        .mul_f64(jitter.clamp(0.5, 1.0))
}

/// The pipeline may not run again (see [`Supervised::restart_refused`]): it stops as failed,
/// with `refusal` as its error and hint; `last` is the failure of the run that just ended.
fn refuse_restart(
    board: &StatusBoard,
    refusal: PipelineError,
    last: Option<&PipelineError>,
) -> PipelineError {
    board.update(|s| {
        s.last_error = Some(refusal.chain());
        s.hint = refusal.hint().map(str::to_owned);
    });
    board.set_state(PipelineState::Failed);
    tracing::error!(
        error = %refusal.chain(),
        hint = refusal.hint().unwrap_or(""),
        last_failure = %last.map(PipelineError::chain).unwrap_or_default(),
        "pipeline stopped: it is not restarted"
    );
    refusal
}

/// After a failed run: show the error, apply the restart policy and either stop (`None`,
/// state `failed`) or record the restart and return the delay to wait (state `backoff`).
/// `resumes_from` says from where the next run resumes, for the log.
fn after_failure(
    board: &StatusBoard,
    restart: &RestartConfig,
    error: &PipelineError,
    consecutive_failures: u32,
    resumes_from: &str,
) -> Option<Duration> {
    board.update(|s| {
        s.last_error = Some(error.chain());
        s.hint = error.hint().map(str::to_owned);
        s.consecutive_failures = consecutive_failures;
    });
    if decide(restart, error.is_retryable(), consecutive_failures) == Decision::Stop {
        board.set_state(PipelineState::Failed);
        tracing::error!(
            error = %error.chain(),
            hint = error.hint().unwrap_or(""),
            policy = restart.policy.name(),
            consecutive_failures,
            "pipeline stopped"
        );
        return None;
    }
    let delay = backoff_delay(
        restart,
        consecutive_failures,
        rand::rng().random_range(0.5..=1.0),
    );
    let reason = if error.is_retryable() {
        "retryable"
    } else {
        "fatal"
    };
    board.record_restart(
        reason,
        Some(error.chain()),
        delay.as_millis() as u64,
        consecutive_failures,
    );
    board.set_state(PipelineState::Backoff);
    metrics::gauge!(m::RESTART_BACKOFF).set(delay.as_secs_f64());
    tracing::warn!(
        error = %error.chain(),
        hint = error.hint().unwrap_or(""),
        retry_in_ms = delay.as_millis() as u64,
        consecutive_failures,
        "pipeline failed; restarting from {resumes_from}"
    );
    Some(delay)
}

/// Cancels `shutdown` on SIGINT or SIGTERM. The signals are taken over when this is called,
/// not when the future is first polled: a stop requested while the pipeline starts is then a
/// graceful one, not the signal's default action.
pub fn stop_on_signal(shutdown: CancellationToken) -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let signals = {
        use tokio::signal::unix::{SignalKind, signal};
        signal(SignalKind::terminate())
            .and_then(|term| Ok((term, signal(SignalKind::interrupt())?)))
    };
    async move {
        #[cfg(unix)]
        match signals {
            Ok((mut term, mut interrupt)) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = interrupt.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!("stop requested");
        shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    fn restart(policy: RestartPolicy, max_restarts: u32) -> RestartConfig {
        RestartConfig {
            policy,
            max_restarts,
            initial_backoff_ms: 500,
            max_backoff_ms: 30_000,
        }
    }

    #[test]
    fn on_failure_restarts_retryable_failures_up_to_the_limit() {
        let limited = restart(RestartPolicy::OnFailure, 3);
        assert_eq!(decide(&limited, true, 1), Decision::Restart);
        assert_eq!(decide(&limited, true, 3), Decision::Restart);
        assert_eq!(decide(&limited, true, 4), Decision::Stop);
        assert_eq!(decide(&limited, false, 1), Decision::Stop);
        let unlimited = restart(RestartPolicy::OnFailure, 0);
        assert_eq!(decide(&unlimited, true, 10_000), Decision::Restart);
    }

    #[test]
    fn always_and_never_mean_what_they_say() {
        let always = restart(RestartPolicy::Always, 1);
        assert_eq!(decide(&always, false, 50), Decision::Restart);
        let never = restart(RestartPolicy::Never, 0);
        assert_eq!(decide(&never, true, 1), Decision::Stop);
    }

    #[test]
    fn backoff_doubles_per_failure_up_to_the_cap_with_jitter_below_it() {
        let r = restart(RestartPolicy::OnFailure, 0);
        let ms = |n, jitter| backoff_delay(&r, n, jitter).as_millis();
        assert_eq!(
            [ms(1, 1.0), ms(2, 1.0), ms(3, 1.0), ms(4, 1.0)],
            [500, 1000, 2000, 4000]
        );
        assert_eq!(ms(7, 1.0), 30_000);
        assert_eq!(ms(1000, 1.0), 30_000);
        assert_eq!(ms(2, 0.5), 500);
        assert_eq!(ms(2, 0.1), 500, "jitter is clamped to 0.5..=1");
    }

    /// A pipeline whose runs end as scripted.
    struct Scripted {
        ends: VecDeque<Result<RunEnd, PipelineError>>,
        runs: u32,
    }

    impl Supervised for Scripted {
        const PAUSES_IN_RUN: bool = true;

        fn resumes_from(&self) -> &'static str {
            "nowhere"
        }

        async fn run_once(&mut self, _stop: CancellationToken) -> Result<RunEnd, PipelineError> {
            self.runs += 1;
            self.ends.pop_front().unwrap_or(Ok(RunEnd::Finished))
        }
    }

    fn fast_restarts(policy: RestartPolicy, max_restarts: u32) -> RestartConfig {
        RestartConfig {
            policy,
            max_restarts,
            initial_backoff_ms: 1,
            max_backoff_ms: 2,
        }
    }

    #[tokio::test]
    async fn retryable_failures_restart_and_a_finished_run_stops() {
        let board = StatusBoard::new("p", "on-failure");
        let mut pipeline = Scripted {
            ends: VecDeque::from([
                Err(PipelineError::retryable("lost", std::io::Error::other("x"))),
                Err(PipelineError::retryable("lost", std::io::Error::other("x"))),
                Ok(RunEnd::Finished),
            ]),
            runs: 0,
        };
        let shutdown = CancellationToken::new();
        let restart = fast_restarts(RestartPolicy::OnFailure, 0);
        supervise(&mut pipeline, &board, &restart, &shutdown)
            .await
            .unwrap();
        assert_eq!(pipeline.runs, 3);
        let status = board.snapshot();
        assert_eq!(status.state, PipelineState::Stopped);
        assert_eq!(status.restarts, 2);
    }

    #[tokio::test]
    async fn a_fatal_failure_stops_the_pipeline_as_failed() {
        let board = StatusBoard::new("p", "on-failure");
        let mut pipeline = Scripted {
            ends: VecDeque::from([Err(PipelineError::fatal_with(
                "bad",
                "fix it",
                std::io::Error::other("x"),
            ))]),
            runs: 0,
        };
        let restart = fast_restarts(RestartPolicy::OnFailure, 0);
        let error = supervise(&mut pipeline, &board, &restart, &CancellationToken::new())
            .await
            .unwrap_err();
        assert!(!error.is_retryable());
        let status = board.snapshot();
        assert_eq!(status.state, PipelineState::Failed);
        assert_eq!(status.hint.as_deref(), Some("fix it"));
        assert_eq!(pipeline.runs, 1);
    }

    /// A pipeline that refuses to run again after its second run.
    struct Refusing {
        runs: u32,
    }

    impl Supervised for Refusing {
        const PAUSES_IN_RUN: bool = true;

        fn resumes_from(&self) -> &'static str {
            "nowhere"
        }

        fn restart_refused(&self) -> Option<PipelineError> {
            (self.runs >= 2).then(|| PipelineError::fatal("too many left behind", "look there"))
        }

        async fn run_once(&mut self, _stop: CancellationToken) -> Result<RunEnd, PipelineError> {
            self.runs += 1;
            Err(PipelineError::retryable("lost", std::io::Error::other("x")))
        }
    }

    #[tokio::test]
    async fn a_refused_restart_stops_the_pipeline_whatever_the_policy() {
        let board = StatusBoard::new("p", "always");
        let mut pipeline = Refusing { runs: 0 };
        let restart = fast_restarts(RestartPolicy::Always, 0);
        let error = supervise(&mut pipeline, &board, &restart, &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(pipeline.runs, 2);
        assert!(error.chain().contains("too many left behind"));
        let status = board.snapshot();
        assert_eq!(status.state, PipelineState::Failed);
        assert_eq!(status.hint.as_deref(), Some("look there"));
        assert_eq!(status.last_error.as_deref(), Some("too many left behind"));
    }

    #[tokio::test]
    async fn max_restarts_bounds_failures_in_a_row() {
        let board = StatusBoard::new("p", "on-failure");
        let mut pipeline = Scripted {
            ends: (0..10)
                .map(|_| Err(PipelineError::retryable("lost", std::io::Error::other("x"))))
                .collect(),
            runs: 0,
        };
        let restart = fast_restarts(RestartPolicy::OnFailure, 2);
        supervise(&mut pipeline, &board, &restart, &CancellationToken::new())
            .await
            .unwrap_err();
        assert_eq!(pipeline.runs, 3, "the first run and two restarts");
    }
}

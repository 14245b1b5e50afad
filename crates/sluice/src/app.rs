//! Wiring: commands, the runtime, supervision of pipeline runs, shutdown.
//!
//! A pipeline run ([`crate::source::postgres::stream::run_once`]) ends with an error or on
//! shutdown. The supervisor retries retryable errors with exponential backoff and full jitter,
//! resuming from the slot's confirmed position, and stops on fatal ones with the operator's fix.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use crate::admin::{self, PipelineState, StatusBoard, metrics as m};
use crate::cli::{Cli, Command, LogFormat};
use crate::config::{PipelineConfig, PipelineFile, RestartConfig, RestartPolicy};
use crate::error::PipelineError;
use crate::source::postgres::stream::{RunContext, run_once};

/// Installs the log subscriber.
pub fn init_tracing(cli: &Cli) {
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match cli.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

/// Runs a command.
///
/// # Errors
///
/// Whatever stopped the command; rendered by [`render_report`].
pub fn main(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run { pipeline } => {
            match PipelineFile::load(&pipeline)? {
                PipelineFile::Cdc(config) => {
                    let prometheus = admin::install_recorder(&config.name)?;
                    runtime()?.block_on(run_pipeline(Arc::new(*config), prometheus))?;
                }
                PipelineFile::Sink(config) => {
                    let prometheus = admin::install_recorder(&config.name)?;
                    runtime()?
                        .block_on(crate::sink::run_pipeline(Arc::new(*config), prometheus))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { pipeline } => match PipelineFile::load(&pipeline)? {
            PipelineFile::Cdc(config) => runtime()?.block_on(crate::check::check(&config)),
            PipelineFile::Sink(config) => crate::check::check_sink(&config),
        },
        Command::Doctor {
            pipeline,
            pg_url,
            brokers,
            json,
        } => {
            let pipeline = pipeline.as_deref().map(load_cdc).transpose()?;
            let target = crate::doctor::Target {
                pg_url: pipeline
                    .as_ref()
                    .map(|p| p.postgres().url.clone())
                    .or(pg_url),
                brokers: pipeline
                    .as_ref()
                    .map(|p| p.kafka.brokers.clone())
                    .or(brokers),
                pipeline,
            };
            let findings = runtime()?.block_on(crate::doctor::diagnose(&target));
            if json {
                println!("{}", serde_json::to_string_pretty(&findings)?);
            } else {
                print!("{}", crate::doctor::render(&findings));
            }
            Ok(crate::doctor::exit_code(&findings))
        }
        Command::Slots {
            pipeline,
            pg_url,
            json,
        } => {
            let pipeline = pipeline.as_deref().map(load_cdc).transpose()?;
            let url = pipeline
                .as_ref()
                .map(|p| p.postgres().url.clone())
                .or(pg_url)
                .context(
                    "no PostgreSQL to ask: pass --pipeline FILE or --pg-url URL (or set PG_URL)",
                )?;
            let rows = runtime()?.block_on(crate::doctor::slots(&url, pipeline.as_ref()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else {
                print!("{}", crate::doctor::render_slots(&rows));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Perf(command) => {
            crate::perf::run(command)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // Encoding runs on the blocking pool. Left at tokio's default (512 threads) the pool grows
    // under a backlog, and every new thread brings its own malloc arena: RSS then grows with the
    // backlog although the in-flight bytes stay within the budget. One encoder per core is all
    // the parallelism there is.
    let cores = std::thread::available_parallelism().map_or(2, usize::from);
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(cores + 2)
        .thread_name("sluice")
        .build()
        .context("cannot start the async runtime")
}

/// Renders an error with its causes and, for pipeline errors, the fix.
pub fn render_report(error: &anyhow::Error) -> String {
    let mut text = format!("error: {error}");
    for cause in error.chain().skip(1) {
        text.push_str(&format!("\n  caused by: {cause}"));
    }
    if let Some(hint) = error
        .downcast_ref::<PipelineError>()
        .and_then(PipelineError::hint)
    {
        text.push_str(&format!("\n  fix: {hint}"));
    }
    text
}

/// A PostgreSQL → Kafka pipeline file, for the commands that only know that kind.
fn load_cdc(path: &std::path::Path) -> anyhow::Result<PipelineConfig> {
    match PipelineFile::load(path)? {
        PipelineFile::Cdc(config) => Ok(*config),
        PipelineFile::Sink(_) => anyhow::bail!(
            "{} is a Kafka → files pipeline: `sluice doctor` and `sluice slots` inspect PostgreSQL → Kafka pipelines; use `sluice check` for this one",
            path.display()
        ),
    }
}

/// Runs one pipeline with its admin server until a signal or a failure the restart policy
/// does not restart.
///
/// # Errors
///
/// The failure that stopped the pipeline.
pub async fn run_pipeline(
    config: Arc<PipelineConfig>,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let board = StatusBoard::new(&config.name, config.restart.policy.name());
    board.take_snapshot_signals();
    let listen = SocketAddr::from_str(&config.admin.listen).context("admin.listen")?;
    let admin_shutdown = CancellationToken::new();
    let server = admin::serve(
        listen,
        prometheus,
        Arc::clone(&board),
        config.admin.token.clone(),
        Some(Arc::clone(&config)),
        admin_shutdown.clone(),
    )
    .await?;
    let result = supervise(&config, &board, &shutdown).await;
    admin_shutdown.cancel();
    let _ = server.await;
    result.map_err(anyhow::Error::from)
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

/// Runs the pipeline, restarting it per `restart.policy`, and follows the operator's pause,
/// resume and restart requests.
async fn supervise(
    config: &Arc<PipelineConfig>,
    board: &Arc<StatusBoard>,
    shutdown: &CancellationToken,
) -> Result<(), PipelineError> {
    let mut control = board.control();
    let mut consecutive_failures = 0u32;
    let metrics = m::PipelineMetrics::new();
    let progress = Arc::default();
    loop {
        // Requests from here on end the run; the pause check reads through the same receiver,
        // so a pause that arrives at any point is seen.
        let mut requests = board.control();
        if requests.borrow_and_update().paused {
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
        let run_shutdown = shutdown.child_token();
        let ctx = RunContext {
            config: Arc::clone(config),
            board: Arc::clone(board),
            shutdown: run_shutdown.clone(),
            metrics: metrics.clone(),
            progress: Arc::clone(&progress),
        };
        // An operator's request ends the run gracefully (drain, confirm, close).
        let watcher = tokio::spawn(async move {
            if requests.changed().await.is_ok() {
                run_shutdown.cancel();
            }
        });
        board.set_state(PipelineState::Starting);
        let started = Instant::now();
        let requested_before = *control.borrow();
        let result = run_once(&ctx).await;
        let requested = watcher.is_finished();
        watcher.abort();
        if shutdown.is_cancelled() {
            if let Err(error) = &result {
                tracing::warn!(error = %error.chain(), "failure while stopping");
            }
            board.set_state(PipelineState::Stopped);
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            consecutive_failures = 0;
        }
        let error = match result {
            Ok(()) if !requested && *control.borrow() == requested_before => {
                // The run ended by itself (snapshot = "initial_only").
                board.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Ok(()) => {
                // Stopped on an operator's request: pause (handled at the top) or restart.
                if !control.borrow().paused {
                    board.record_restart("requested", None, 0, consecutive_failures);
                }
                continue;
            }
            Err(error) => error,
        };
        consecutive_failures += 1;
        let Some(delay) = after_failure(
            board,
            &config.restart,
            &error,
            consecutive_failures,
            "restarting from the last confirmed position",
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

/// What both kinds of pipeline do after a failed run: show the error, apply the restart
/// policy and either stop (`None`, state `failed`) or record the restart and return the delay
/// to wait (state `backoff`). `restarting` says from where the next run resumes, for the log.
pub(crate) fn after_failure(
    board: &StatusBoard,
    restart: &RestartConfig,
    error: &PipelineError,
    consecutive_failures: u32,
    restarting: &str,
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
        "pipeline failed; {restarting}"
    );
    Some(delay)
}

pub(crate) async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    shutdown.cancel();
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("stop requested");
    shutdown.cancel();
}

#[cfg(test)]
mod tests {
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
}

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
use crate::config::{PipelineConfig, PipelineFile};
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
                    runtime()?.block_on(run_pipeline(Arc::new(config), prometheus))?;
                }
                PipelineFile::Sink(config) => {
                    let prometheus = admin::install_recorder(&config.name)?;
                    runtime()?.block_on(crate::sink::run_pipeline(Arc::new(config), prometheus))?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { pipeline } => match PipelineFile::load(&pipeline)? {
            PipelineFile::Cdc(config) => runtime()?.block_on(crate::check::check(&config)),
            PipelineFile::Sink(config) => crate::check::check_sink(&config),
        },
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

/// Runs one pipeline with its admin server until a signal or a fatal error.
///
/// # Errors
///
/// The fatal error that stopped the pipeline.
pub async fn run_pipeline(
    config: Arc<PipelineConfig>,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let board = StatusBoard::new(&config.name);
    let listen = SocketAddr::from_str(&config.admin.listen).context("admin.listen")?;
    let admin_shutdown = CancellationToken::new();
    let server = admin::serve(
        listen,
        prometheus,
        Arc::clone(&board),
        admin_shutdown.clone(),
    )
    .await?;
    let ctx = RunContext {
        config: Arc::clone(&config),
        board: Arc::clone(&board),
        shutdown: shutdown.clone(),
        metrics: m::PipelineMetrics::new(),
    };
    let result = supervise(&ctx).await;
    admin_shutdown.cancel();
    let _ = server.await;
    result.map_err(anyhow::Error::from)
}

/// Runs the pipeline, reconnecting after retryable failures.
async fn supervise(ctx: &RunContext) -> Result<(), PipelineError> {
    let restart = &ctx.config.restart;
    let initial = Duration::from_millis(restart.initial_backoff_ms);
    let max = Duration::from_millis(restart.max_backoff_ms);
    let mut backoff = initial;
    loop {
        ctx.board.set_state(PipelineState::Starting);
        let started = Instant::now();
        match run_once(ctx).await {
            Ok(()) => {
                ctx.board.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) if error.is_retryable() && !ctx.shutdown.is_cancelled() => {
                if started.elapsed() > Duration::from_secs(60) {
                    backoff = initial;
                }
                // Full jitter: a uniformly random delay up to the current backoff.
                let delay = backoff.mul_f64(rand::rng().random_range(0.5..=1.0));
                metrics::counter!(m::RECONNECTS).increment(1);
                ctx.board.set_state(PipelineState::Backoff);
                ctx.board.update(|s| {
                    s.reconnects += 1;
                    s.last_error = Some(error.chain());
                });
                tracing::warn!(
                    error = %error.chain(),
                    retry_in_ms = delay.as_millis() as u64,
                    "pipeline failed; reconnecting from the last confirmed position"
                );
                if ctx
                    .shutdown
                    .run_until_cancelled(tokio::time::sleep(delay))
                    .await
                    .is_none()
                {
                    ctx.board.set_state(PipelineState::Stopped);
                    return Ok(());
                }
                backoff = (backoff * 2).min(max);
            }
            Err(error) if error.is_retryable() => {
                ctx.board.set_state(PipelineState::Stopped);
                return Ok(());
            }
            Err(error) => {
                ctx.board.set_state(PipelineState::Failed);
                ctx.board.update(|s| {
                    s.last_error = Some(error.chain());
                    s.hint = error.hint().map(str::to_owned);
                });
                tracing::error!(error = %error.chain(), hint = error.hint().unwrap_or(""), "pipeline stopped");
                return Err(error);
            }
        }
    }
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

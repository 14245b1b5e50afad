//! Wiring: commands, the runtime, and each pipeline with its admin server under the one
//! supervisor of [`crate::runtime::supervisor`].

use std::net::SocketAddr;
use std::process::ExitCode;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::admin::Doctor;
use crate::cli::{Cli, Command, LogFormat};
use crate::config::{AdminConfig, RestartConfig};
use crate::error::PipelineError;
use crate::pipeline_file::PipelineFile;
use crate::runtime::allocator::set_purge_delay;
use crate::runtime::metrics::install_recorder;
use crate::runtime::status::StatusBoard;
use crate::runtime::supervisor::{Supervised, stop_on_signal, supervise};
use crate::sink::SinkPipeline;
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::mysql::stream::MysqlPipeline;
use crate::source::postgres::config::PgPipelineConfig;
use crate::source::postgres::stream::CdcPipeline;

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
                PipelineFile::Postgres(config) => {
                    let config = Arc::new(*config);
                    let doctor = Some(postgres_doctor(Arc::clone(&config)));
                    run_supervised(
                        &config.name,
                        &config.admin,
                        &config.restart,
                        doctor,
                        scheduled_verification(
                            &pipeline,
                            config.verify_interval_s,
                            config.verify_rate_limit,
                        ),
                        |board| {
                            board.take_snapshot_signals(true, crate::sql::SqlDialect::Postgres);
                            CdcPipeline::new(Arc::clone(&config), board)
                        },
                    )?;
                }
                PipelineFile::Mysql(config) => {
                    let config = Arc::new(*config);
                    run_supervised(
                        &config.name,
                        &config.admin,
                        &config.restart,
                        Some(mysql_doctor(Arc::clone(&config))),
                        scheduled_verification(
                            &pipeline,
                            config.verify_interval_s,
                            config.verify_rate_limit,
                        ),
                        |board| {
                            if config.source.signal_table.is_some() {
                                board.take_snapshot_signals(false, crate::sql::SqlDialect::Mysql);
                            }
                            MysqlPipeline::new(Arc::clone(&config), board)
                        },
                    )?;
                }
                PipelineFile::Files(config) => {
                    let config = Arc::new(*config);
                    // Before the runtime's threads start (see `runtime::allocator`).
                    if let Some(delay) = config.allocator_purge_delay_ms() {
                        let now = set_purge_delay(delay);
                        tracing::debug!("allocator purge delay: {now}");
                    }
                    run_supervised(
                        &config.name,
                        &config.admin,
                        &config.restart,
                        None,
                        scheduled_verification(
                            &pipeline,
                            config.verify_interval_s,
                            config.verify_rate_limit,
                        ),
                        |board| SinkPipeline::new(Arc::clone(&config), board),
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Check { pipeline } => match PipelineFile::load(&pipeline)? {
            PipelineFile::Postgres(config) => runtime()?.block_on(crate::check::check(&config)),
            PipelineFile::Mysql(config) => runtime()?.block_on(crate::check::check_mysql(&config)),
            PipelineFile::Files(config) => crate::check::check_sink(&config),
        },
        Command::Doctor {
            pipeline,
            pg_url,
            brokers,
            long_transaction_s,
            json,
        } => {
            let file = pipeline.as_deref().map(PipelineFile::load).transpose()?;
            let findings = match file {
                Some(PipelineFile::Mysql(config)) => {
                    runtime()?.block_on(crate::doctor::diagnose_mysql(&config, true))
                }
                Some(PipelineFile::Files(config)) => {
                    runtime()?.block_on(crate::doctor::diagnose_sink(&config))
                }
                file => {
                    let pipeline = match file {
                        Some(PipelineFile::Postgres(config)) => Some(*config),
                        _ => None,
                    };
                    let target = crate::doctor::Target {
                        pg_url: pipeline.as_ref().map(|p| p.source.connection()).or(pg_url),
                        brokers: pipeline
                            .as_ref()
                            .map(|p| p.kafka.brokers.clone())
                            .or(brokers),
                        pipeline,
                        kafka_client: None,
                        read_health: true,
                        long_transaction: Some(std::time::Duration::from_secs(long_transaction_s)),
                    };
                    runtime()?.block_on(crate::doctor::diagnose(&target))
                }
            };
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
            let file = pipeline.as_deref().map(PipelineFile::load).transpose()?;
            let pipeline = match file {
                Some(PipelineFile::Mysql(config)) => {
                    let place = runtime()?.block_on(crate::doctor::binlog_place(&config))?;
                    if json {
                        println!("{}", serde_json::to_string_pretty(&place)?);
                    } else {
                        print!("{}", crate::doctor::render_binlog_place(&place));
                    }
                    return Ok(ExitCode::SUCCESS);
                }
                Some(PipelineFile::Files(_)) => anyhow::bail!(
                    "{} is a Kafka → files pipeline: `sluice slots` inspects PostgreSQL and MySQL/MariaDB → Kafka pipelines",
                    pipeline.unwrap_or_default().display()
                ),
                Some(PipelineFile::Postgres(config)) => Some(*config),
                None => None,
            };
            let url = pipeline
                .as_ref()
                .map(|p| p.source.connection())
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
        Command::Compaction(command) => {
            crate::compaction::run(command)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Import(command) => crate::import::run(command),
        Command::Health { admin } => runtime()?.block_on(probe_health(&admin)),
        Command::Verify(args) => runtime()?.block_on(crate::verify::run(args)),
    }
}

/// `sluice health`: one GET of `/health` with a short deadline. The image's healthcheck runs
/// it inside the container, where there is no curl. An https:// admin server is asked without
/// verifying its certificate: the probe sends nothing secret and only reads the status.
async fn probe_health(admin: &str) -> anyhow::Result<ExitCode> {
    let base = if admin.starts_with("http://") || admin.starts_with("https://") {
        admin.trim_end_matches('/').to_owned()
    } else {
        format!("http://{}", admin.replacen("0.0.0.0:", "127.0.0.1:", 1))
    };
    let url = if base.ends_with("/health") {
        base
    } else {
        format!("{base}/health")
    };
    crate::crypto::install();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .danger_accept_invalid_certs(true)
        .build()?;
    let response = match client.get(&url).send().await {
        Ok(response) => response,
        Err(e) => {
            println!("{url}: no answer: {e}");
            return Ok(ExitCode::FAILURE);
        }
    };
    let status = response.status();
    let body: serde_json::Value = response
        .bytes()
        .await
        .ok()
        .and_then(|body| serde_json::from_slice(&body).ok())
        .unwrap_or_default();
    println!(
        "{url}: {status}, state {}",
        body["state"].as_str().unwrap_or("unknown")
    );
    Ok(if status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The admin API's doctor for a PostgreSQL pipeline: `sluice doctor <pipeline file>`.
fn postgres_doctor(config: Arc<PgPipelineConfig>) -> Doctor {
    Arc::new(move || {
        let config = Arc::clone(&config);
        Box::pin(async move {
            let target = crate::doctor::Target {
                pg_url: Some(config.source.connection()),
                brokers: Some(config.kafka.brokers.clone()),
                pipeline: Some((*config).clone()),
                kafka_client: None,
                read_health: false,
                long_transaction: None,
            };
            serde_json::to_value(crate::doctor::diagnose(&target).await).unwrap_or_default()
        })
    })
}

/// The admin API's doctor for a MySQL/MariaDB pipeline: `sluice doctor <pipeline file>`.
fn mysql_doctor(config: Arc<MysqlPipelineConfig>) -> Doctor {
    Arc::new(move || {
        let config = Arc::clone(&config);
        Box::pin(async move {
            serde_json::to_value(crate::doctor::diagnose_mysql(&config, false).await)
                .unwrap_or_default()
        })
    })
}

/// A task that runs beside a pipeline, on its status board (scheduled verification).
type Background = Box<
    dyn FnOnce(Arc<StatusBoard>) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        + Send,
>;

/// The scheduled verification of the pipeline file `file` every `interval_s` seconds (none
/// when it is not set).
fn scheduled_verification(
    file: &std::path::Path,
    interval_s: Option<u64>,
    rate: u64,
) -> Option<Background> {
    let interval = Duration::from_secs(interval_s?);
    let file = file.to_path_buf();
    Some(Box::new(move |board| {
        Box::pin(crate::verify::scheduled(file, interval, rate, board))
    }))
}

/// Installs the metrics recorder, makes the pipeline's status board, builds the pipeline over
/// it (`pipeline`) and runs [`serve_and_supervise`] on one of the runtime's worker threads
/// rather than on the main thread: a task on a worker is woken by the I/O driver directly, where the main thread blocked
/// in `block_on` is woken by a worker (a second context switch per wake-up, which preempted the
/// walsender; bench/PROFILE.md, "Backlog: the walsender preempted, and the loop's wake-ups").
fn run_supervised<P: Supervised + Send + 'static>(
    name: &str,
    admin: &AdminConfig,
    restart: &RestartConfig,
    doctor: Option<Doctor>,
    background: Option<Background>,
    pipeline: impl FnOnce(Arc<StatusBoard>) -> P,
) -> anyhow::Result<()> {
    let prometheus = install_recorder(name)?;
    let board = StatusBoard::new(name, restart.policy.name());
    let pipeline = pipeline(Arc::clone(&board));
    let (admin, restart) = (admin.clone(), restart.clone());
    let runtime = runtime()?;
    // Ends with the runtime, when the pipeline's task returns.
    let _background = background.map(|task| {
        runtime.spawn(
            task(Arc::clone(&board)).instrument(tracing::info_span!("pipeline", name = %name)),
        )
    });
    // Every line the pipeline's own task logs (and the sink's threads, which enter it) names
    // the pipeline, for logs gathered from several processes.
    let span = tracing::info_span!("pipeline", name = %name);
    let task =
        runtime.spawn(
            async move {
                serve_and_supervise(&admin, &restart, board, doctor, prometheus, pipeline).await
            }
            .instrument(span),
        );
    match runtime.block_on(task) {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => Err(anyhow::Error::new(error).context("the pipeline's task was cancelled")),
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

/// Runs one pipeline with its admin server until a signal or a failure the restart policy
/// does not restart: the admin server serves the pipeline's status board, the supervisor
/// ([`crate::runtime::supervisor`]) runs the pipeline.
///
/// # Errors
///
/// The failure that stopped the pipeline.
pub async fn serve_and_supervise<P: Supervised>(
    admin: &AdminConfig,
    restart: &RestartConfig,
    board: Arc<StatusBoard>,
    doctor: Option<Doctor>,
    prometheus: metrics_exporter_prometheus::PrometheusHandle,
    mut pipeline: P,
) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let listen = SocketAddr::from_str(&admin.listen).context("admin.listen")?;
    let tls = admin
        .tls_files()
        .map(|(cert, key)| crate::admin::tls_config(cert, key))
        .transpose()?;
    let admin_shutdown = CancellationToken::new();
    let server = crate::admin::serve(
        listen,
        prometheus,
        Arc::clone(&board),
        admin.token.clone(),
        doctor,
        tls,
        admin_shutdown.clone(),
    )
    .await?;
    let result = supervise(&mut pipeline, &board, restart, &shutdown).await;
    admin_shutdown.cancel();
    let _ = server.await;
    result.map_err(anyhow::Error::from)
}

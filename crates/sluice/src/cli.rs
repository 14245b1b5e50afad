//! The `sluice` command line.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// sluice: change data capture from PostgreSQL into Kafka, and Kafka into sinks.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "SLUICE_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter, e.g. `info` or `sluice=debug,info` (tracing's EnvFilter syntax).
    #[arg(long, global = true, default_value = "info", env = "SLUICE_LOG")]
    pub log: String,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a pipeline until stopped (SIGINT/SIGTERM stop it gracefully).
    Run {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
    },
    /// Validate a pipeline file and connectivity; report what would be captured.
    Check {
        /// The pipeline file (TOML).
        pipeline: PathBuf,
    },
    /// Diagnose PostgreSQL, Kafka and the pipeline: findings with evidence and the fix.
    /// Exit code: 0 = nothing worse than info, 1 = warnings, 2 = critical findings.
    Doctor {
        /// The pipeline file (TOML); without it, only server-wide checks run.
        #[arg(long)]
        pipeline: Option<PathBuf>,
        /// PostgreSQL URL when no pipeline file is given.
        #[arg(long, env = "PG_URL", hide_env_values = true)]
        pg_url: Option<String>,
        /// Kafka bootstrap servers when no pipeline file is given.
        #[arg(long, env = "KAFKA_BROKERS")]
        brokers: Option<String>,
        /// A transaction that wrote (or a prepared one) open this many seconds is named
        /// (pg.open_transactions): a new slot's creation waits for it.
        #[arg(long, default_value_t = crate::doctor::LONG_TRANSACTION.as_secs(), value_name = "SECONDS")]
        long_transaction_s: u64,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List replication slots: activity, retained and unconfirmed WAL, wal_status, owner. For a
    /// MySQL/MariaDB pipeline file: its saved binlog position, the server's, how far behind,
    /// and whether the server still has the saved position's binlog.
    Slots {
        /// The pipeline file (TOML), to mark its slot and take the connection from.
        #[arg(long)]
        pipeline: Option<PathBuf>,
        /// PostgreSQL URL when no pipeline file is given.
        #[arg(long, env = "PG_URL", hide_env_values = true)]
        pg_url: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Kafka load generation and consumer benchmarks.
    #[command(subcommand)]
    Perf(crate::perf::PerfCommand),
    /// Compacted topics: what they hold and what the log cleaner will do with them.
    #[command(subcommand)]
    Compaction(crate::compaction::CompactionCommand),
    /// Another tool's configuration as a sluice pipeline file (docs/migrating-from-debezium.md).
    #[command(subcommand)]
    Import(crate::import::ImportCommand),
    /// Compare the source tables with the newest record per key in their topics, while the
    /// pipeline runs (docs/verify.md). Exit code: 0 = equal, 1 = differences, 2 = could not
    /// verify.
    Verify(crate::verify::VerifyArgs),
    /// Ask a running sluice's admin server for `/health` (a container's healthcheck): prints its
    /// state; exit code 0 when it answers 200, 1 otherwise.
    Health {
        /// The admin server: host:port (0.0.0.0 is asked on 127.0.0.1) or an http(s):// URL.
        #[arg(long, env = "SLUICE_ADMIN", default_value = "127.0.0.1:8089")]
        admin: String,
    },
}

/// Log output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

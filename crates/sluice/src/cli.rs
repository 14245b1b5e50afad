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
    /// Kafka load generation and consumer benchmarks.
    #[command(subcommand)]
    Perf(crate::perf::PerfCommand),
}

/// Log output formats.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

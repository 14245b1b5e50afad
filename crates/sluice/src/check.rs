//! `sluice check`: validate the pipeline file and connectivity, and show what would be captured.

use std::process::ExitCode;
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::config::PipelineConfig;
use crate::error::PipelineError;
use crate::source::postgres::setup::PgCatalog;

/// Runs the checks, printing a report; the exit code is 0 when everything is ready.
///
/// # Errors
///
/// Never for failed checks (they are reported); only for broken output.
pub async fn check(config: &PipelineConfig) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    println!("pipeline {:?}: configuration is valid", config.name);
    match check_postgres(config).await {
        Ok(lines) => lines.iter().for_each(|line| println!("{line}")),
        Err(error) => {
            ok = false;
            report_failure("postgresql", &error);
        }
    }
    match check_kafka(config).await {
        Ok(line) => println!("{line}"),
        Err(error) => {
            ok = false;
            report_failure("kafka", &error);
        }
    }
    println!("{}", if ok { "ready" } else { "not ready" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn report_failure(what: &str, error: &PipelineError) {
    println!("{what}: FAILED: {}", error.chain());
    if let Some(hint) = error.hint() {
        println!("  fix: {hint}");
    }
}

async fn check_postgres(config: &PipelineConfig) -> Result<Vec<String>, PipelineError> {
    let catalog = PgCatalog::connect(config).await?;
    catalog.check_wal_level().await?;
    let version = catalog.server_major_version().await?;
    let mut lines = vec![format!(
        "postgresql: connected (server {version}, database {:?}), wal_level = logical",
        catalog.database().await?
    )];
    let slot = config.slot_name();
    lines.push(match catalog.slot(&slot).await? {
        Some(info) => format!(
            "slot {slot:?}: exists (plugin {}, confirmed {}, {})",
            info.plugin,
            info.confirmed_flush,
            if info.active { "active" } else { "inactive" }
        ),
        None => format!("slot {slot:?}: will be created"),
    });
    let publication = config.publication_name();
    let exists = catalog
        .client()
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| crate::error::classify_pg("cannot read publications", e))?
        .is_some();
    lines.push(format!(
        "publication {publication:?}: {}",
        if exists {
            "exists"
        } else if config.postgres().create_publication {
            "will be created"
        } else {
            "MISSING (create_publication = false)"
        }
    ));
    let tables = catalog.captured_tables(config).await?;
    lines.push(format!("tables: {} captured", tables.len()));
    for table in &tables {
        let identity = match table.replica_identity {
            'f' => "full",
            'i' => "index",
            'n' => "nothing (updates and deletes will fail on the server!)",
            _ => "default",
        };
        let key = if table.has_primary_key {
            "primary key"
        } else {
            "no primary key: records get null keys"
        };
        lines.push(format!(
            "  {} -> topic {}.{}  ({key}; replica identity {identity})",
            table.qualified(),
            config.kafka.topic_prefix,
            table.qualified()
        ));
    }
    Ok(lines)
}

async fn check_kafka(config: &PipelineConfig) -> Result<String, PipelineError> {
    let brokers = config.kafka.brokers.clone();
    let metadata = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()?;
        consumer.fetch_metadata(None, Duration::from_secs(10))
    })
    .await
    .map_err(|e| PipelineError::retryable("metadata task failed", e))?
    .map_err(|e| {
        PipelineError::fatal_with(
            format!("cannot reach Kafka at {}", config.kafka.brokers),
            "check kafka.brokers and that the brokers are up and reachable from here",
            e,
        )
    })?;
    Ok(format!(
        "kafka: connected to {} ({} broker(s), {} topic(s))",
        config.kafka.brokers,
        metadata.brokers().len(),
        metadata.topics().len()
    ))
}

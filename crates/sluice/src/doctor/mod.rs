//! `sluice doctor`: inspects PostgreSQL, Kafka and the pipeline, and reports findings, each
//! with a stable code, a severity, the evidence (the values read) and the concrete fix.
//! `sluice slots`: every replication slot with its lag and whether sluice owns it; for a
//! MySQL/MariaDB pipeline, its saved binlog position against the server's.
//!
//! The checks read catalogs and settings only; they never change anything. Every finding
//! code is listed with its check and fix in `docs/doctor.md`.
//!
//! - `mysql`: the MySQL/MariaDB source's server, retention and saved position.
//! - `failover`: failover slots (PostgreSQL 17+) on the primary and the URL's standbys.
//! - `target`: what doctor looks at, and how it reads a server's settings.
//! - `versions`: what the server's version cannot do that the pipeline asks for, and
//!   PostgreSQL 18's `idle_replication_slot_timeout`.
//! - `wal_budget`: the pipeline's WAL budget against `max_slot_wal_keep_size` and its slot.
//! - `postgres`: the PostgreSQL server's settings, slots, privileges and captured tables.
//! - `kafka`: the brokers and the pipeline's topics.
//! - `iceberg`: a Kafka → Iceberg sink's tables: small files, delete files and snapshots
//!   piling up.
//! - `pipeline`: the pipeline's own batching, in-flight budget and checkpoint interval.
//! - `report`: the exit code and the human output.
//! - `slots`: `sluice slots` for PostgreSQL.
//! - `verification`: the running pipeline's last scheduled verification (its `/health`).
//!
//! This file runs the checks a target allows ([`diagnose`], [`diagnose_mysql`]).

use crate::pg_connect::{connect_sql_url, redact_url};

use crate::source::mysql::config::MysqlPipelineConfig;

mod failover;
mod finding;
mod iceberg;
mod kafka;
mod mysql;
mod pipeline;
mod postgres;
mod registry;
mod report;
mod slots;
mod standby;
mod target;
mod verification;
mod versions;
mod wal_budget;
mod wal_disk;

use finding::finding;
pub use finding::{Finding, Severity};
use kafka::kafka_checks;
pub use mysql::{BinlogPlace, binlog_place, render_binlog_place};
use pipeline::pipeline_checks;
use postgres::{postgres_checks, tls_check};
pub use report::{exit_code, render};
pub use slots::{SlotRow, render_slots, slots};
pub use target::{LONG_TRANSACTION, Target};

/// The findings for a MySQL/MariaDB → Kafka pipeline: its server, binlog retention and saved
/// position, and the Kafka checks; with `read_health`, the running pipeline's last scheduled
/// verification (from its `/health`).
pub async fn diagnose_mysql(config: &MysqlPipelineConfig, read_health: bool) -> Vec<Finding> {
    let mut findings = Vec::new();
    mysql::checks(config, &mut findings).await;
    if read_health {
        verification::checks(
            &config.name,
            &config.admin,
            config.verify_interval_s,
            &mut findings,
        )
        .await;
    }
    let target = Target {
        brokers: Some(config.kafka.brokers.clone()),
        kafka_client: Some(config.kafka.client.clone()),
        ..Target::default()
    };
    kafka_checks(&config.kafka.brokers, &target, &mut findings).await;
    findings
}

/// The findings for a Kafka → sink pipeline (files, PostgreSQL, Iceberg): the running
/// pipeline's last scheduled verification (from its `/health`), an Iceberg sink's catalog and
/// the tables of its topics (small files, delete files, snapshots), and the Kafka checks
/// (`sluice check` covers the rest of its configuration).
pub async fn diagnose_sink(config: &crate::sink::config::SinkPipelineConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    verification::checks(
        &config.name,
        &config.admin,
        config.verify_interval_s,
        &mut findings,
    )
    .await;
    if config.iceberg().is_some() {
        iceberg::checks(config, &mut findings).await;
    }
    let kafka = config.kafka();
    let target = Target {
        brokers: Some(kafka.brokers.clone()),
        kafka_client: Some(kafka.client.clone()),
        ..Target::default()
    };
    kafka_checks(&kafka.brokers, &target, &mut findings).await;
    findings
}

/// Runs every check that the target allows.
pub async fn diagnose(target: &Target) -> Vec<Finding> {
    let mut findings = Vec::new();
    match &target.pg_url {
        Some(url) => match connect_sql_url(url).await {
            Ok((client, task)) => {
                tls_check(url, &mut findings);
                if let Err(error) = postgres_checks(&client, target, &mut findings).await {
                    findings.push(finding(
                        "pg.query_failed",
                        Severity::Critical,
                        format!("a PostgreSQL check failed: {error}"),
                        &[],
                        "see the server's message; the role may lack privileges to read pg_settings or pg_replication_slots (grant pg_monitor)",
                    ));
                }
                drop(client);
                let _ = task.await;
            }
            Err(error) => findings.push(finding(
                "pg.unreachable",
                Severity::Critical,
                format!("cannot connect to PostgreSQL: {error}"),
                &[("url", redact_url(url).into())],
                "check the URL (host, port, database, user, password) and pg_hba.conf",
            )),
        },
        None => findings.push(finding(
            "pg.not_checked",
            Severity::Info,
            "PostgreSQL not checked: no --pipeline, --pg-url or PG_URL",
            &[],
            "",
        )),
    }
    match &target.brokers {
        Some(brokers) => kafka_checks(brokers, target, &mut findings).await,
        None => findings.push(finding(
            "kafka.not_checked",
            Severity::Info,
            "Kafka not checked: no --pipeline, --brokers or KAFKA_BROKERS",
            &[],
            "",
        )),
    }
    if let Some(pipeline) = &target.pipeline {
        pipeline_checks(pipeline, &mut findings);
        if target.read_health {
            verification::checks(
                &pipeline.name,
                &pipeline.admin,
                pipeline.verify_interval_s,
                &mut findings,
            )
            .await;
        }
        if let Some(registry) = &pipeline.schema_registry
            && pipeline.kafka.events.uses_avro()
        {
            use crate::event::EventFormat;
            // The subjects of the captured tables' topics (the registry may hold thousands).
            let topics = match crate::source::postgres::setup::PgCatalog::connect(pipeline).await {
                Ok(catalog) => catalog
                    .captured_tables(pipeline)
                    .await
                    .map(|tables| {
                        tables
                            .iter()
                            .map(|t| format!("{}.{}", pipeline.kafka.topic_prefix, t.qualified()))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let events = &pipeline.kafka.events;
            let avro = (
                events.key_format() == EventFormat::Avro,
                events.value_format() == EventFormat::Avro,
            );
            registry::checks(registry, &topics, avro, &mut findings).await;
        }
    }
    findings
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::human_bytes;

    #[test]
    fn passwords_never_reach_the_output() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
}

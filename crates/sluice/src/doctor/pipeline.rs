//! Checks of the pipeline's own settings: producer batching, the in-flight budget and the
//! checkpoint interval.

use crate::config::human_bytes;
use crate::kafka;
use crate::source::postgres::config::PgPipelineConfig;

use super::finding::{Finding, Severity, finding};

/// Producer settings that cap records per request, and the checkpoint interval.
pub(super) fn pipeline_checks(pipeline: &PgPipelineConfig, findings: &mut Vec<Finding>) {
    let settings = kafka::effective_producer_settings(&pipeline.kafka);
    let batch_size: i64 = settings
        .get("batch.size")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let linger_ms: f64 = settings
        .get("linger.ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    // A Debezium envelope of a modest row is ~0.5–1 KiB; 1 KiB is the estimate used here.
    let records_per_batch = batch_size / 1024;
    let evidence = [
        ("batch.size", batch_size.into()),
        ("linger.ms", linger_ms.into()),
        ("records_per_batch_at_1KiB", records_per_batch.into()),
    ];
    findings.push(if records_per_batch < 100 {
        finding(
            "pipeline.batch_size",
            Severity::Warning,
            format!("batch.size = {batch_size} fits only ~{records_per_batch} change events of ~1 KiB per partition request: throughput is capped by round trips"),
            &evidence,
            "remove the batch.size override (sluice's default is 1000000) or raise it in [kafka.producer]",
        )
    } else if linger_ms <= 0.0 {
        finding(
            "pipeline.linger",
            Severity::Info,
            "linger.ms = 0: every record is sent as soon as possible, in small requests under load",
            &evidence,
            "\"linger.ms\" = \"5\" in [kafka.producer] batches better at ~5 ms added latency",
        )
    } else {
        finding("pipeline.batch_size", Severity::Ok, "producer batching is not capped", &evidence, "")
    });
    let budget = u64::from(pipeline.delivery.in_flight_bytes());
    let memory_limit = pipeline.delivery.memory_limit;
    let derived = if pipeline.delivery.max_in_flight_bytes.is_some() {
        "delivery.max_in_flight_bytes"
    } else {
        "from delivery.memory_limit"
    };
    findings.push(if budget < 4 * 1024 * 1024 {
        finding(
            "pipeline.inflight_budget",
            Severity::Warning,
            format!("in-flight budget {} ({derived}): with a broker 10 ms away this caps throughput near {}/s", human_bytes(budget as i64), human_bytes((budget * 100) as i64)),
            &[("max_in_flight_bytes", budget.into()), ("memory_limit", memory_limit.into())],
            "raise delivery.memory_limit (default 128 MiB; the budget is an eighth of it) or delivery.max_in_flight_bytes, unless memory is tight",
        )
    } else {
        finding("pipeline.inflight_budget", Severity::Ok, format!("in-flight budget {} ({derived}), memory limit {}", human_bytes(budget as i64), human_bytes(memory_limit as i64)), &[("max_in_flight_bytes", budget.into()), ("memory_limit", memory_limit.into())], "")
    });
    let status_ms = pipeline.source.status_interval_ms;
    findings.push(finding(
        "pipeline.checkpoint_interval",
        if status_ms > 10_000 { Severity::Warning } else { Severity::Ok },
        format!("checkpoints every {status_ms} ms"),
        &[("status_interval_ms", status_ms.into())],
        if status_ms > 10_000 { "lower source.postgres.status_interval_ms: the server's wal_sender_timeout (60 s) must see replies well within it, and WAL is released only at checkpoints" } else { "" },
    ));
}

//! `sluice perf`: the records it reports are in the topic, with the keys it was asked for.

use std::collections::HashSet;
use std::process::Command;
use std::time::Duration;

use crate::support::{read_topic, sluice_bin, stack, unique};

#[tokio::test(flavor = "multi_thread")]
async fn perf_produce_writes_keyed_records_and_consume_reads_them() {
    let topic = unique("perf");
    let output = Command::new(sluice_bin())
        .args([
            "perf",
            "produce",
            "--topic",
            &topic,
            "--records",
            "20000",
            "--keys",
            "100",
        ])
        .args([
            "--key-distribution",
            "zipf",
            "--value-size",
            "10-200",
            "--partitions",
            "2",
            "--json",
        ])
        .args(["-X", "linger.ms=2"])
        .env("KAFKA_BROKERS", stack().brokers)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["records"], 20000);
    assert_eq!(summary["failed"], 0);
    assert!(summary["latency_ms"]["p99"].as_f64().unwrap() > 0.0);
    assert!(summary["records_per_request"].as_f64().unwrap() >= 1.0);

    let records = {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || {
            read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 20000)
        })
        .await
        .unwrap()
    };
    assert_eq!(records.len(), 20000);
    let keys: HashSet<String> = records
        .iter()
        .map(|r| r.key.as_ref().unwrap().to_string())
        .collect();
    assert!(
        keys.len() <= 100 && keys.len() > 10,
        "{} distinct keys",
        keys.len()
    );

    let output = Command::new(sluice_bin())
        .args([
            "perf",
            "consume",
            "--topic",
            &topic,
            "--records",
            "20000",
            "--json",
        ])
        .env("KAFKA_BROKERS", stack().brokers)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(summary["records"], 20000);
}

//! The Kafka checks: reachability, encryption, the pipeline's topics (existence,
//! replication, `min.insync.replicas`, compaction) and the broker's record size limit.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::human_bytes;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::kafka;
use crate::source::postgres::config::PgPipelineConfig;

use super::finding::{Finding, Severity, finding};
use super::postgres::captured_table_names;
use super::target::Target;

/// Whether `host` (of `host:port`) is this machine.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `kafka.plaintext`: brokers off this machine reached without TLS (`PLAINTEXT` or
/// `SASL_PLAINTEXT`): records, and SASL passwords with PLAIN, cross the network readable.
fn unencrypted_kafka(
    brokers: &str,
    client: &std::collections::BTreeMap<String, String>,
) -> Option<Finding> {
    let protocol = client
        .get("security.protocol")
        .filter(|p| !p.is_empty())
        .map_or("PLAINTEXT".to_owned(), |p| p.to_ascii_uppercase());
    if protocol != "PLAINTEXT" && protocol != "SASL_PLAINTEXT" {
        return None;
    }
    let remote: Vec<&str> = brokers
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .filter(|b| {
            let host = b.rsplit_once(':').map_or(*b, |(host, _)| host);
            !is_loopback(host)
        })
        .collect();
    if remote.is_empty() {
        return None;
    }
    Some(finding(
        "kafka.plaintext",
        Severity::Warning,
        format!(
            "Kafka at {} is reached over {protocol}: records (and PLAIN passwords) cross the network unencrypted",
            remote.join(",")
        ),
        &[
            ("brokers", remote.join(",").into()),
            ("security.protocol", protocol.clone().into()),
        ],
        "use the brokers' TLS listener: [kafka.client] \"security.protocol\" = \"SASL_SSL\" (or \"SSL\"), with ssl.ca.location for a private CA",
    ))
}

/// The Kafka checks against `brokers`, with the target's pipeline topics when it has one.
pub(super) async fn kafka_checks(brokers: &str, target: &Target, findings: &mut Vec<Finding>) {
    // The pipeline's [kafka.client] (security) when a pipeline is given.
    let common = target
        .pipeline
        .as_ref()
        .map(|p| p.kafka.client.clone())
        .or_else(|| target.kafka_client.clone())
        .unwrap_or_default();
    if let Some(found) = unencrypted_kafka(brokers, &common) {
        findings.push(found);
    }
    let client = crate::kafka::client_config(brokers, &common);
    let metadata = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client.create()?;
        consumer.fetch_metadata(None, Duration::from_secs(10))
    })
    .await;
    let metadata = match metadata {
        Ok(Ok(metadata)) => metadata,
        Ok(Err(error)) => {
            findings.push(finding(
                "kafka.unreachable",
                Severity::Critical,
                format!("cannot reach Kafka at {brokers}: {error}"),
                &[("brokers", brokers.into())],
                "check the bootstrap servers and that the brokers are up and reachable from here",
            ));
            return;
        }
        Err(error) => {
            findings.push(finding(
                "kafka.unreachable",
                Severity::Critical,
                error.to_string(),
                &[],
                "",
            ));
            return;
        }
    };
    let partitions: BTreeMap<String, (usize, usize)> = metadata
        .topics()
        .iter()
        .map(|t| {
            let replicas = t.partitions().first().map_or(0, |p| p.replicas().len());
            (t.name().to_owned(), (t.partitions().len(), replicas))
        })
        .collect();
    let broker_id = metadata.brokers().first().map(|b| b.id());
    // The topics to look at: the pipeline's, else none (cluster-wide checks only).
    let mut topics: Vec<String> = Vec::new();
    if let Some(pipeline) = &target.pipeline
        && let Some(pg_url) = &target.pg_url
        && let Ok(tables) = captured_table_names(pg_url, pipeline).await
    {
        {
            for table in tables {
                let topic = format!("{}.{table}", pipeline.kafka.topic_prefix);
                if partitions.contains_key(&topic) {
                    topics.push(topic);
                } else {
                    findings.push(finding(
                        "kafka.topic_missing",
                        if pipeline.kafka.create_topics { Severity::Info } else { Severity::Critical },
                        if pipeline.kafka.create_topics {
                            format!("topic {topic} will be created with {} partition(s)", pipeline.kafka.topic_partitions)
                        } else {
                            format!("topic {topic} does not exist and kafka.create_topics = false: the pipeline stops at its first change")
                        },
                        &[("topic", topic.clone().into())],
                        if pipeline.kafka.create_topics { String::new() } else {
                            format!("create {topic} (partitions by your ordering and throughput needs) or set kafka.create_topics = true")
                        },
                    ));
                }
            }
        }
    }
    let admin: AdminClient<DefaultClientContext> =
        match crate::kafka::client_config(brokers, &common).create() {
            Ok(admin) => admin,
            Err(_) => return,
        };
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let broker_key = broker_id.map(|id| id.to_string());
    let mut resources: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    if let Some(id) = broker_id {
        resources.push(ResourceSpecifier::Broker(id));
    }
    let Ok(Ok(results)) = tokio::time::timeout(
        Duration::from_secs(30),
        admin.describe_configs(&resources, &options),
    )
    .await
    else {
        return;
    };
    let acks = target
        .pipeline
        .as_ref()
        .map(|p| kafka::effective_producer_settings(&p.kafka))
        .and_then(|s| s.get("acks").cloned())
        .unwrap_or_else(|| "all".into());
    let results: Vec<_> = results.into_iter().flatten().collect();
    let cleaner = results
        .iter()
        .find_map(|resource| match resource.specifier {
            rdkafka::admin::OwnedResourceSpecifier::Broker(_) => {
                let get = |key: &str| resource.get(key).and_then(|e| e.value.clone());
                crate::compaction::configs::cleaner_settings(&get).ok()
            }
            _ => None,
        });
    for resource in &results {
        let get = |key: &str| resource.get(key).and_then(|e| e.value.clone());
        match &resource.specifier {
            rdkafka::admin::OwnedResourceSpecifier::Topic(topic) => {
                let (_, replicas) = partitions.get(topic).copied().unwrap_or((0, 0));
                topic_findings(topic, replicas, &acks, &get, findings);
                if let Some(pipeline) = &target.pipeline {
                    let policy = get("cleanup.policy").unwrap_or_default();
                    compaction_findings(
                        brokers, &common, pipeline, topic, cleaner, policy, findings,
                    )
                    .await;
                }
            }
            rdkafka::admin::OwnedResourceSpecifier::Broker(_) => {
                let message_max: i64 = get("message.max.bytes")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                findings.push(finding(
                    "kafka.broker_message_max_bytes",
                    Severity::Info,
                    format!("broker {} accepts records up to {} (message.max.bytes); larger rows stop the pipeline or go to the dead-letter topic", broker_key.clone().unwrap_or_default(), human_bytes(message_max)),
                    &[("message_max_bytes", message_max.into())],
                    "",
                ));
            }
            _ => {}
        }
    }
}

/// Findings about compaction of one of the pipeline's topics: compaction requested in
/// `kafka.topic_config` but not in force, and a largest partition with more records (an upper
/// bound of its keys) than one pass of the cleaner maps.
async fn compaction_findings(
    brokers: &str,
    common: &BTreeMap<String, String>,
    pipeline: &PgPipelineConfig,
    topic: &str,
    cleaner: Option<crate::compaction::model::CleanerSettings>,
    policy: String,
    findings: &mut Vec<Finding>,
) {
    let compacted = policy.split(',').any(|p| p.trim() == "compact");
    let requested = pipeline
        .kafka
        .topic_configs(topic, true)
        .get("cleanup.policy")
        .is_some_and(|p| p.split(',').any(|p| p.trim() == "compact"));
    if requested && !compacted {
        findings.push(finding(
            "kafka.compaction_not_in_force",
            Severity::Warning,
            format!("{topic}: the pipeline asks for cleanup.policy = compact (kafka.topic_config), but the topic has cleanup.policy = {policy}: it was created before, or by someone else, and keeps every change instead of the newest per key"),
            &[("topic", topic.into()), ("cleanup_policy", policy.clone().into())],
            format!("kafka-configs --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact"),
        ));
    }
    let Some(cleaner) = cleaner.filter(|_| compacted) else {
        return;
    };
    let client = crate::kafka::client_config(brokers, common);
    let name = topic.to_owned();
    let largest = tokio::task::spawn_blocking(move || -> Option<(i32, i64)> {
        let consumer: BaseConsumer = client.create().ok()?;
        let metadata = consumer
            .fetch_metadata(Some(&name), Duration::from_secs(10))
            .ok()?;
        let partitions: Vec<i32> = metadata
            .topics()
            .first()?
            .partitions()
            .iter()
            .map(|p| p.id())
            .collect();
        partitions
            .into_iter()
            .filter_map(|p| {
                let (low, high) = consumer
                    .fetch_watermarks(&name, p, Duration::from_secs(10))
                    .ok()?;
                Some((p, high - low))
            })
            .max_by_key(|(_, records)| *records)
    })
    .await
    .ok()
    .flatten();
    let Some((partition, records)) = largest else {
        return;
    };
    let per_pass = cleaner.keys_per_pass();
    if records > 0 && records as u64 > per_pass {
        let passes = (records as u64).div_ceil(per_pass.max(1));
        findings.push(finding(
            "kafka.compaction_dedupe_buffer",
            Severity::Warning,
            format!("{topic}: partition {partition} holds {records} records and one pass of the log cleaner maps {per_pass} keys (log.cleaner.dedupe.buffer.size {} / {} thread(s)): if most of them are distinct keys, each clean takes up to {passes} passes and the log stays larger meanwhile", cleaner.dedupe_buffer_bytes, cleaner.threads),
            &[
                ("topic", topic.into()),
                ("partition", partition.into()),
                ("records", records.into()),
                ("keys_per_pass", per_pass.into()),
                ("dedupe_buffer_bytes", cleaner.dedupe_buffer_bytes.into()),
            ],
            format!("count the keys with `sluice compaction plan --topic {topic}`; if they exceed {per_pass}, {}", match cleaner.dedupe_buffer_for(records as u64) {
                Some(bytes) => format!("raise log.cleaner.dedupe.buffer.size to {bytes} (maps {records} keys in one pass) or spread the topic over more partitions"),
                None => "spread the topic over more partitions (no dedupe buffer maps that many keys in one pass)".to_owned(),
            }),
        ));
    }
}

/// Findings of one topic's configuration.
fn topic_findings(
    topic: &str,
    replicas: usize,
    acks: &str,
    get: &dyn Fn(&str) -> Option<String>,
    findings: &mut Vec<Finding>,
) {
    let min_isr: usize = get("min.insync.replicas")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let evidence = [
        ("topic", topic.into()),
        ("replication_factor", replicas.into()),
        ("min_insync_replicas", min_isr.into()),
        ("acks", acks.into()),
    ];
    if (acks == "all" || acks == "-1") && min_isr > replicas {
        findings.push(finding(
            "kafka.min_insync_replicas",
            Severity::Critical,
            format!("{topic}: min.insync.replicas = {min_isr} exceeds the replication factor {replicas}: every acks=all produce is refused (NOT_ENOUGH_REPLICAS)"),
            &evidence,
            format!("kafka-configs --alter --entity-type topics --entity-name {topic} --add-config min.insync.replicas={}", replicas.max(1)),
        ));
    } else if replicas > 1 && min_isr >= replicas {
        findings.push(finding(
            "kafka.min_insync_replicas",
            Severity::Warning,
            format!("{topic}: min.insync.replicas = {min_isr} equals the replication factor: one broker down stops the pipeline"),
            &evidence,
            format!("set min.insync.replicas = {} on {topic}", replicas - 1),
        ));
    } else if replicas <= 1 {
        findings.push(finding(
            "kafka.replication_factor",
            Severity::Info,
            format!("{topic}: replication factor {replicas}: one broker's loss loses the topic (fine for development)"),
            &evidence,
            "for production, create topics with kafka.topic_replication_factor = 3",
        ));
    }
    let policy = get("cleanup.policy").unwrap_or_default();
    if policy.contains("compact") {
        let ratio: f64 = get("min.cleanable.dirty.ratio")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.5);
        let delete_retention_ms: i64 = get("delete.retention.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(86_400_000);
        let segment_ms: i64 = get("segment.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(604_800_000);
        let evidence = [
            ("topic", topic.into()),
            ("cleanup_policy", policy.clone().into()),
            ("min_cleanable_dirty_ratio", ratio.into()),
            ("delete_retention_ms", delete_retention_ms.into()),
            ("segment_ms", segment_ms.into()),
        ];
        if delete_retention_ms < 3_600_000 {
            findings.push(finding(
                "kafka.compaction_tombstones",
                Severity::Warning,
                format!("{topic}: compacted with delete.retention.ms = {delete_retention_ms}: a consumer that is down longer than that misses the tombstones of deleted rows and keeps them forever"),
                &evidence,
                format!("set delete.retention.ms on {topic} above your consumers' longest outage (default 86400000 = 1 day)"),
            ));
        }
        if segment_ms >= 604_800_000 {
            findings.push(finding(
                "kafka.compaction_segment",
                Severity::Info,
                format!("{topic}: compacted, but the active segment rolls only every {} h (segment.ms): recent updates stay uncompacted that long", segment_ms / 3_600_000),
                &evidence,
                format!("lower segment.ms on {topic} (e.g. 3600000) if readers replay it from the start"),
            ));
        }
        if ratio > 0.5 {
            findings.push(finding(
                "kafka.compaction_dirty_ratio",
                Severity::Info,
                format!("{topic}: min.cleanable.dirty.ratio = {ratio}: more than half of the log may be obsolete before it is cleaned"),
                &evidence,
                format!("lower min.cleanable.dirty.ratio on {topic} (0.1–0.5) if replay time or disk matters"),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compacted_topics_with_short_tombstone_retention_are_flagged() {
        let mut findings = Vec::new();
        let config = |key: &str| match key {
            "cleanup.policy" => Some("compact".to_owned()),
            "delete.retention.ms" => Some("60000".to_owned()),
            "min.insync.replicas" => Some("2".to_owned()),
            _ => None,
        };
        topic_findings("t", 1, "all", &config, &mut findings);
        let codes: Vec<_> = findings.iter().map(|f| (f.code, f.severity)).collect();
        assert!(
            codes.contains(&("kafka.min_insync_replicas", Severity::Critical)),
            "{codes:?}"
        );
        assert!(
            codes.contains(&("kafka.compaction_tombstones", Severity::Warning)),
            "{codes:?}"
        );
        assert!(
            codes.contains(&("kafka.compaction_segment", Severity::Info)),
            "{codes:?}"
        );
    }

    #[test]
    fn plaintext_to_a_remote_broker_is_a_finding() {
        use std::collections::BTreeMap;
        let none = BTreeMap::new();
        assert!(unencrypted_kafka("127.0.0.1:9092,localhost:9093,[::1]:9094", &none).is_none());
        let found = unencrypted_kafka("127.0.0.1:9092,kafka-1.prod:9092", &none).expect("remote");
        assert_eq!(found.code, "kafka.plaintext");
        assert!(
            found.summary.contains("kafka-1.prod:9092"),
            "{}",
            found.summary
        );
        let sasl_plain: BTreeMap<String, String> =
            [("security.protocol".to_owned(), "sasl_plaintext".to_owned())].into();
        assert!(unencrypted_kafka("10.0.0.5:9092", &sasl_plain).is_some());
        let tls: BTreeMap<String, String> =
            [("security.protocol".to_owned(), "SASL_SSL".to_owned())].into();
        assert!(unencrypted_kafka("kafka-1.prod:9093", &tls).is_none());
    }
}

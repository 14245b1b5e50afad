//! Topic administration: the pipeline's topics, the compacted state and offsets topics, and the
//! brokers' and topics' message size limits.

use super::{admin_client, admin_request};
use crate::config::KafkaConfig;
use crate::error::PipelineError;
use rdkafka::admin::AdminOptions;
use rdkafka::admin::NewTopic;
use rdkafka::admin::ResourceSpecifier;
use rdkafka::admin::TopicReplication;
use rdkafka::error::KafkaError;
use rdkafka::error::RDKafkaErrorCode;
use std::collections::BTreeMap;
use std::time::Duration;

/// Creates the topics that do not exist yet, with the configured partitions and replication.
///
/// # Errors
///
/// Retryable when the cluster cannot be reached; fatal when it refuses the topic (policy,
/// authorization, invalid settings).
pub async fn ensure_topics(
    kafka: &KafkaConfig,
    topics: &[String],
    partitions: u32,
) -> Result<(), PipelineError> {
    let configs = topics
        .iter()
        .map(|t| kafka.topic_configs(t, true))
        .collect();
    create_topics(kafka, topics, partitions, configs).await
}

/// [`ensure_topics`] for topics that are not change-event topics (the dead-letter topic):
/// `kafka.topic_config` does not apply to them, `kafka.topic_config_by_topic` does.
///
/// # Errors
///
/// As [`ensure_topics`].
pub async fn ensure_other_topics(
    kafka: &KafkaConfig,
    topics: &[String],
    partitions: u32,
) -> Result<(), PipelineError> {
    let configs = topics
        .iter()
        .map(|t| kafka.topic_configs(t, false))
        .collect();
    create_topics(kafka, topics, partitions, configs).await
}

/// Creates `topic` when missing, compacted, with one partition (`state_topic`): its own
/// settings from `kafka.topic_config_by_topic` apply on top.
///
/// # Errors
///
/// As [`ensure_topics`].
pub async fn ensure_compacted_topic(kafka: &KafkaConfig, topic: &str) -> Result<(), PipelineError> {
    let mut configs = BTreeMap::from([("cleanup.policy".to_owned(), "compact".to_owned())]);
    configs.extend(kafka.topic_configs(topic, false));
    create_topics(kafka, &[topic.to_owned()], 1, vec![configs]).await
}

async fn create_topics(
    kafka: &KafkaConfig,
    topics: &[String],
    partitions: u32,
    configs: Vec<BTreeMap<String, String>>,
) -> Result<(), PipelineError> {
    if topics.is_empty() {
        return Ok(());
    }
    let admin = admin_client(kafka)?;
    let replication_factor = kafka.topic_replication_factor.map_or(-1, i32::from);
    let new_topics: Vec<NewTopic<'_>> = topics
        .iter()
        .zip(&configs)
        .map(|(topic, configs)| {
            configs.iter().fold(
                NewTopic::new(
                    topic,
                    partitions as i32,
                    TopicReplication::Fixed(replication_factor),
                ),
                |new, (key, value)| new.set(key, value),
            )
        })
        .collect();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin_request(
        &admin,
        format!("cannot reach Kafka at {} to create topics", kafka.brokers),
        admin.create_topics(&new_topics, &options),
    )
    .await?;
    for result in results {
        match result {
            Ok(topic) => tracing::info!(topic, partitions, "created topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((
                topic,
                code @ (RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::OperationTimedOut
                | RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::NotController),
            )) => {
                return Err(PipelineError::retryable(
                    format!("cannot create topic {topic}"),
                    KafkaError::AdminOp(code),
                ));
            }
            Err((topic, code)) => {
                return Err(PipelineError::fatal_with(
                    format!("Kafka refused to create topic {topic}"),
                    "create the topic yourself, or fix kafka.topic_partitions / kafka.topic_replication_factor / kafka.topic_config and the client's authorization",
                    KafkaError::AdminOp(code),
                ));
            }
        }
    }
    Ok(())
}

/// Creates the exactly-once offsets topic when it does not exist: one partition, compacted
/// (only the newest position per pipeline matters).
///
/// # Errors
///
/// As [`ensure_topics`].
pub async fn ensure_offsets_topic(kafka: &KafkaConfig, topic: &str) -> Result<(), PipelineError> {
    let admin = admin_client(kafka)?;
    let replication_factor = kafka.topic_replication_factor.map_or(-1, i32::from);
    let new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication_factor))
        .set("cleanup.policy", "compact");
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = admin_request(
        &admin,
        format!("cannot reach Kafka at {} to create topics", kafka.brokers),
        admin.create_topics([&new], &options),
    )
    .await?;
    for result in results {
        match result {
            Ok(topic) => tracing::info!(topic, "created the exactly-once offsets topic"),
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((topic, code)) => {
                return Err(PipelineError::retryable(
                    format!(
                        "cannot create the offsets topic {topic} (delivery.offsets_topic): create it yourself, compacted, one partition"
                    ),
                    KafkaError::AdminOp(code),
                ));
            }
        }
    }
    Ok(())
}

/// The smallest `max.message.bytes` among `topics`, if any could be read (a topic whose config
/// the client may not describe is left out).
///
/// # Errors
///
/// Retryable when the cluster cannot be reached or a topic is still unknown to it after 15 s.
pub async fn smallest_max_message_bytes(
    kafka: &KafkaConfig,
    topics: &[String],
) -> Result<Option<u64>, PipelineError> {
    if topics.is_empty() {
        return Ok(None);
    }
    let admin = admin_client(kafka)?;
    let resources: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    // A topic created a moment ago may not be in the answering broker's metadata yet
    // (UNKNOWN_TOPIC_OR_PARTITION): skipping it would leave the producer's batch.size above
    // its limit and have its first batch refused, so such answers are asked again, and a topic
    // still unknown fails the run (retried) rather than being assumed unlimited.
    let mut delay = Duration::from_millis(100);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let results = admin_request(
            &admin,
            format!(
                "cannot reach Kafka at {} to read topic configs",
                kafka.brokers
            ),
            admin.describe_configs(&resources, &options),
        )
        .await?;
        let mut smallest: Option<u64> = None;
        let mut unanswered = None;
        for (topic, result) in topics.iter().zip(results) {
            match result {
                Ok(resource) => {
                    let limit = resource
                        .get("max.message.bytes")
                        .and_then(|entry| entry.value.as_deref())
                        .and_then(|value| value.parse::<u64>().ok());
                    smallest = smallest.into_iter().chain(limit).min();
                }
                Err(code @ RDKafkaErrorCode::UnknownTopicOrPartition) => {
                    unanswered = Some((topic, code));
                }
                // Not allowed to describe it (a principal with write rights only): the limit
                // stays unknown, as it would be without this check.
                Err(code) => tracing::debug!(topic, %code, "cannot read the topic's config"),
            }
        }
        let Some((topic, code)) = unanswered else {
            return Ok(smallest);
        };
        if tokio::time::Instant::now() + delay > deadline {
            return Err(PipelineError::retryable(
                format!("cannot read max.message.bytes of topic {topic}"),
                KafkaError::AdminOp(code),
            ));
        }
        tracing::debug!(topic, %code, "topic config not readable yet; asking again");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(2));
    }
}

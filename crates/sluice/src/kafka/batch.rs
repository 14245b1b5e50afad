//! How many bytes a producer batch may hold: the configured size, capped by what the topics and the
//! brokers accept, and lowered when a broker refuses a batch as too large.

use super::producer::CDC_PRODUCER_DEFAULTS;
use super::topics::smallest_max_message_bytes;
use crate::config::KafkaConfig;
use crate::error::PipelineError;

/// The `batch.size` a producer made by [`producer_config`](super::producer_config) with `batch_size_cap` uses, unless
/// `batch.size` is set explicitly (then `None`: the operator's choice is kept).
pub fn effective_batch_size(kafka: &KafkaConfig, batch_size_cap: Option<u64>) -> Option<u64> {
    if kafka.producer.contains_key("batch.size") {
        return None;
    }
    let default = CDC_PRODUCER_DEFAULTS
        .iter()
        .find(|(key, _)| *key == "batch.size")
        .and_then(|(_, value)| value.parse::<u64>().ok())
        .unwrap_or(1_000_000);
    Some(batch_size_cap.map_or(default, |cap| cap.min(default)))
}

/// The kept `batch.size` cap, if one was learned (`0`: none yet).
pub fn learned_batch_cap(cap: &std::sync::atomic::AtomicU64) -> Option<u64> {
    Some(cap.load(std::sync::atomic::Ordering::Relaxed)).filter(|cap| *cap > 0)
}

/// Lowers the kept `batch.size` cap (`0`: none yet) to `limit`, a topic's `max.message.bytes`.
pub fn lower_batch_cap(cap: &std::sync::atomic::AtomicU64, limit: u64) {
    let _ = cap.fetch_update(
        std::sync::atomic::Ordering::Relaxed,
        std::sync::atomic::Ordering::Relaxed,
        |current| {
            Some(if current == 0 {
                limit
            } else {
                current.min(limit)
            })
        },
    );
}

/// The producer's `batch.size` cap for a run producing to `topics`: the smallest
/// `max.message.bytes` among them and the cap `learned` in earlier runs (`0`: none); with the
/// `batch.size` it leaves (`None`: set in `[kafka.producer]`, left alone).
///
/// The broker checks `max.message.bytes` against whole batches: a topic that takes less than
/// the producer's `batch.size` would refuse batches of small records.
///
/// # Errors
///
/// Retryable when the cluster cannot be reached or a topic is unknown to it (see
/// [`smallest_max_message_bytes`]).
pub async fn batch_size_for_topics(
    kafka: &KafkaConfig,
    topics: &[String],
    learned: &std::sync::atomic::AtomicU64,
) -> Result<(Option<u64>, Option<u64>), PipelineError> {
    // Topics created while running may accept smaller batches than these: the smallest limit
    // seen so far is kept across runs (see `check_new_topic_batch_size`).
    let cap = smallest_max_message_bytes(kafka, topics)
        .await?
        .into_iter()
        .chain(learned_batch_cap(learned))
        .min();
    let batch_size = effective_batch_size(kafka, cap);
    if let Some(cap) = cap.filter(|cap| batch_size == Some(*cap)) {
        tracing::info!(
            "the pipeline's topics take batches of at most {cap} bytes (max.message.bytes): batch.size = {cap}"
        );
    }
    Ok((cap, batch_size))
}

/// Reads the `max.message.bytes` of `topic`, created (or first used) while running, ahead of
/// its first batch: below the producer's `batch_size` (`None`: not sluice's to set), the cap
/// `learned` is lowered to it and the run is to restart with it (the producer's `batch.size`
/// is fixed).
///
/// # Errors
///
/// Retryable: the topic's limit is below `batch_size` (the run restarts with the lower cap),
/// or it cannot be read.
pub async fn check_new_topic_batch_size(
    kafka: &KafkaConfig,
    topic: &str,
    batch_size: Option<u64>,
    learned: &std::sync::atomic::AtomicU64,
) -> Result<(), PipelineError> {
    let Some(batch_size) = batch_size else {
        return Ok(());
    };
    let limit = smallest_max_message_bytes(kafka, &[topic.to_owned()]).await?;
    if let Some(limit) = limit.filter(|limit| *limit < batch_size) {
        lower_batch_cap(learned, limit);
        return Err(PipelineError::retryable(
            format!(
                "topic {topic} takes batches of at most {limit} bytes (max.message.bytes), less than the producer's batch.size {batch_size}: restarting with batch.size = {limit}"
            ),
            BatchAboveTopicLimit,
        ));
    }
    Ok(())
}

/// The producer's `batch.size` is above a new topic's `max.message.bytes`, so the run restarts
/// with the lower cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("batch.size above a new topic's max.message.bytes")]
struct BatchAboveTopicLimit;

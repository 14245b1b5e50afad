//! The Kafka layer: a producer with CDC defaults whose delivery reports feed the engine's
//! acknowledgement tracker, and topic administration.
//!
//! Delivery reports arrive on librdkafka's poll thread (the [`ThreadedProducer`](rdkafka::producer::ThreadedProducer)'s). The
//! context turns each into a [`DeliveryEvent`] on a channel to the pipeline loop, which owns
//! the [`sluice_engine::AckTracker`]. That channel is unbounded on purpose: it only ever holds
//! reports of records admitted by the in-flight budget, so the budget bounds it.
//!
//! Ordering: idempotence is on, so librdkafka keeps per-partition order with up to five
//! requests in flight, and `message.timeout.ms = 0` means a record is never given up on while
//! the broker is unreachable (librdkafka reconnects with exponential backoff; the pipeline is
//! back-pressured meanwhile). A record Kafka rejects for good (too large, not authorized, …)
//! comes back as [`DeliveryEvent::Failed`] and the pipeline applies its policy.
//!
//! The files: `producer.rs` (the producer, its defaults and delivery reports), `topics.rs`
//! (topic administration), `batch.rs` (batch sizes under the topics' and brokers' limits),
//! `diagnosis.rs` (librdkafka's errors explained); this one holds the client settings, the
//! connection probe and the admin client they share.

mod batch;
mod diagnosis;
pub mod keys;
mod producer;
mod topics;

pub use self::batch::{
    batch_size_for_topics, check_new_topic_batch_size, effective_batch_size, learned_batch_cap,
    lower_batch_cap,
};
use self::diagnosis::diagnosed_error;
pub use self::diagnosis::{ConnectionWatch, Diagnosis, connection_fix, diagnose};
pub use self::producer::{
    CDC_PRODUCER_DEFAULTS, Delivery, DeliveryEvent, HEADER_NAMES, KafkaHealth, PipelineProducer,
    PipelineProducerContext, SourceProducer, UNREPORTED, effective_producer_settings,
    producer_config, source_producer,
};
pub use self::topics::{
    ensure_compacted_topic, ensure_offsets_topic, ensure_other_topics, ensure_topics,
    smallest_max_message_bytes,
};
use crate::config::KafkaConfig;
use crate::error::PipelineError;
pub use crate::record::OutRecord;
use rdkafka::ClientConfig;
use rdkafka::admin::AdminClient;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::error::RDKafkaErrorCode;
pub use sluice_kafka_ffi::{Held, Refused, produce_zero_copy};
use std::collections::BTreeMap;
use std::time::Duration;

/// Connects to `brokers` with `client` (the settings of pipeline file section `section`) and
/// reads the cluster's metadata, within `timeout`: the check every command makes before it
/// uses Kafka, so a wrong setting stops it at once with the key to change.
///
/// # Errors
///
/// Fatal with a [`Diagnosis`] when librdkafka reports a problem only an operator can fix
/// (credentials, mechanism, TLS); fatal when the settings are not valid librdkafka
/// properties; retryable when the brokers do not answer within `timeout` or `stop` is
/// cancelled first.
pub fn probe(
    brokers: &str,
    client: &BTreeMap<String, String>,
    section: &str,
    timeout: Duration,
    stop: Option<&tokio_util::sync::CancellationToken>,
) -> Result<rdkafka::metadata::Metadata, PipelineError> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let watch = ConnectionWatch::new(section, client);
    let consumer: BaseConsumer<ConnectionWatch> = watched_config(brokers, client)
        .create_with_context(watch.clone())
        .map_err(|e| {
            PipelineError::fatal_with(
                format!("cannot create a Kafka client with the settings of [{section}]"),
                format!("each key in [{section}] must be a librdkafka property with a valid value"),
                e,
            )
        })?;
    let what = format!("cannot connect to Kafka at {brokers}");
    let deadline = std::time::Instant::now() + timeout;
    let mut last_error = None;
    loop {
        // Serves error events to the context.
        let _ = consumer.poll(Duration::ZERO);
        if let Some((reason, diagnosis)) = watch.fatal() {
            return Err(diagnosed_error(&what, reason, diagnosis));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            break;
        }
        if stop.is_some_and(tokio_util::sync::CancellationToken::is_cancelled) {
            return Err(PipelineError::Retryable {
                what: format!("{what}: stopped while waiting for the brokers"),
                source: None,
            });
        }
        match consumer.fetch_metadata(None, left.min(Duration::from_millis(500))) {
            Ok(metadata) => return Ok(metadata),
            Err(error) => last_error = Some(error),
        }
    }
    // An outage, not a setting: worded as the rest of sluice reports unreachable brokers.
    let unreachable = format!(
        "cannot reach Kafka at {brokers}: no answer within {} s",
        timeout.as_secs()
    );
    Err(match last_error {
        Some(error) => PipelineError::retryable(unreachable, error),
        None => PipelineError::Retryable {
            what: unreachable,
            source: None,
        },
    })
}

/// How long a run (CDC or sink) waits for the brokers' first answer before it fails
/// (retryable: an outage, restarted with backoff).
pub const RUN_PROBE_TIMEOUT: Duration = Duration::from_secs(15);

/// [`probe`] from async code.
///
/// # Errors
///
/// As [`probe`].
pub async fn probe_async(
    brokers: &str,
    client: &BTreeMap<String, String>,
    section: &str,
    timeout: Duration,
    stop: Option<tokio_util::sync::CancellationToken>,
) -> Result<rdkafka::metadata::Metadata, PipelineError> {
    let (brokers, client, section) = (brokers.to_owned(), client.clone(), section.to_owned());
    tokio::task::spawn_blocking(move || probe(&brokers, &client, &section, timeout, stop.as_ref()))
        .await
        .map_err(|e| PipelineError::retryable("the Kafka connection check failed", e))?
}

/// Runs an admin request (bounded by 45 s), failing at once when the client meets an error
/// only an operator can fix.
async fn admin_request<T, E: std::error::Error + Send + Sync + 'static>(
    admin: &AdminClient<ConnectionWatch>,
    what: String,
    request: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, PipelineError> {
    tokio::select! {
        result = tokio::time::timeout(Duration::from_secs(45), request) => {
            result
                .map_err(|elapsed| PipelineError::retryable(what.clone(), elapsed))?
                .map_err(|e| PipelineError::retryable(what, e))
        }
        (reason, diagnosis) = admin.inner().context().wait_fatal() => {
            Err(diagnosed_error(&what, reason, diagnosis))
        }
    }
}

/// A librdkafka client configuration: `bootstrap.servers` and the properties every client of
/// the pipeline shares (`[kafka.client]`: security and the like; empty values left out).
/// Role-specific properties (producer, consumer) go on top.
pub fn client_config(brokers: &str, client: &BTreeMap<String, String>) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    // Empty values are left out, so a file can take optional settings from the environment
    // (`"${KAFKA_SECURITY_PROTOCOL:-}"`).
    for (key, value) in client.iter().filter(|(_, v)| !v.is_empty()) {
        config.set(key, value);
    }
    config
}

/// [`client_config`] for a client with a [`ConnectionWatch`]: librdkafka's debug-level lines
/// reach the watch (the level, not the `debug` contexts: no extra lines are produced).
fn watched_config(brokers: &str, client: &BTreeMap<String, String>) -> ClientConfig {
    let mut config = client_config(brokers, client);
    config.set_log_level(RDKafkaLogLevel::Debug);
    config
}

/// Whether a delivery error will not go away by retrying the same record.
pub fn is_permanent(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::MessageSizeTooLarge
                | RDKafkaErrorCode::InvalidMessageSize
                | RDKafkaErrorCode::InvalidMessage
                | RDKafkaErrorCode::InvalidRecord
                | RDKafkaErrorCode::TopicAuthorizationFailed
                | RDKafkaErrorCode::ClusterAuthorizationFailed
                | RDKafkaErrorCode::UnknownTopicOrPartition
                | RDKafkaErrorCode::UnknownTopic
                | RDKafkaErrorCode::UnknownPartition
                | RDKafkaErrorCode::InvalidTopic
                | RDKafkaErrorCode::PolicyViolation
        )
    )
}

/// An admin client of the pipeline's brokers with its `[kafka.client]` settings.
fn admin_client(kafka: &KafkaConfig) -> Result<AdminClient<ConnectionWatch>, PipelineError> {
    watched_config(&kafka.brokers, &kafka.client)
        .create_with_context(ConnectionWatch::new("kafka.client", &kafka.client))
        .map_err(|e| {
            PipelineError::fatal_with(
                "cannot create a Kafka admin client",
                "check kafka.brokers and the properties in [kafka.client]: each must be a librdkafka property with a valid value",
                e,
            )
        })
}

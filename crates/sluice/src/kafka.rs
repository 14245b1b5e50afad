//! The Kafka layer: a producer with CDC defaults whose delivery reports feed the engine's
//! acknowledgement tracker, and topic administration.
//!
//! Delivery reports arrive on librdkafka's poll thread (the [`ThreadedProducer`]'s). The
//! context turns each into a [`DeliveryEvent`] on a channel to the pipeline loop, which owns
//! the [`sluice_engine::AckTracker`]. That channel is unbounded on purpose: it only ever holds
//! reports of records admitted by the in-flight budget, so the budget bounds it.
//!
//! Ordering: idempotence is on, so librdkafka keeps per-partition order with up to five
//! requests in flight, and `message.timeout.ms = 0` means a record is never given up on while
//! the broker is unreachable (librdkafka reconnects with exponential backoff; the pipeline is
//! back-pressured meanwhile). A record Kafka rejects for good (too large, not authorized, …)
//! comes back as [`DeliveryEvent::Failed`] and the pipeline applies its policy.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Headers, Message, OwnedHeaders};
use rdkafka::producer::{DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use sluice_engine::{InFlightPermit, Seq};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::KafkaConfig;
use crate::error::PipelineError;
use crate::runtime::metrics as m;

/// sluice's producer defaults for change data capture; every one can be overridden in the
/// pipeline file's `[kafka.producer]` by its librdkafka name.
pub const CDC_PRODUCER_DEFAULTS: &[(&str, &str)] = &[
    // Per-partition order with several requests in flight, no duplicates from retries.
    ("enable.idempotence", "true"),
    ("acks", "all"),
    ("max.in.flight.requests.per.connection", "5"),
    // Large batches, small linger: full requests under load, low latency when idle.
    ("batch.size", "1000000"),
    ("batch.num.messages", "100000"),
    ("linger.ms", "5"),
    ("compression.type", "lz4"),
    // Key -> partition as the Java client computes it.
    ("partitioner", "murmur2_random"),
    // Never give up on a record: back-pressure instead while the broker is away.
    ("message.timeout.ms", "0"),
    ("statistics.interval.ms", "5000"),
];

/// The `batch.size` a producer made by [`producer_config`] with `batch_size_cap` uses, unless
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

/// What an operator must change when librdkafka reports `reason` for a connection: bad
/// credentials, an untrusted or expired certificate, a name mismatch, a client and a listener
/// that disagree about TLS or SASL. `None` for errors that retrying may fix (a broker down).
pub fn connection_fix(reason: &str) -> Option<String> {
    let r = reason.to_ascii_lowercase();
    let fix = if r.contains("sasl authentication error") || r.contains("invalid credentials") {
        "Kafka refused the credentials: check sasl.username and sasl.password in [kafka.client] (or [source.kafka.client]), and that sasl.mechanism is one the broker enables (sasl.enabled.mechanisms)"
    } else if r.contains("unsupported sasl mechanism")
        || r.contains("mechanism") && r.contains("not enabled")
    {
        "the broker does not enable this sasl.mechanism: set [kafka.client] sasl.mechanism to one of the listener's sasl.enabled.mechanisms (e.g. SCRAM-SHA-512, PLAIN)"
    } else if r.contains("certificate has expired") || r.contains("certificate expired") {
        "the broker's certificate has expired: renew it on the broker (sluice checks its validity period)"
    } else if r.contains("hostname mismatch")
        || r.contains("does not match") && r.contains("certificate")
    {
        "the broker's certificate does not name the address sluice connects to: use a broker address the certificate names (kafka.brokers and the broker's advertised.listeners), or fix the certificate's subject alternative names"
    } else if r.contains("certificate verify failed") || r.contains("could not be verified") {
        "the broker's certificate is not signed by a CA sluice trusts: set [kafka.client] ssl.ca.location to the PEM file of the CA that signed it (managed services signed by a public CA need no setting)"
    } else if r.contains("incorrect security.protocol")
        || r.contains("connecting to a ssl listener")
    {
        "the listener expects TLS (and maybe SASL): set [kafka.client] security.protocol to the listener's (SSL or SASL_SSL) and kafka.brokers to its address"
    } else if r.contains("wrong version number")
        || r.contains("packet length too long")
        || r.contains("ssl handshake failed") && r.contains("eof")
    {
        "the listener does not speak TLS: set [kafka.client] security.protocol to PLAINTEXT or SASL_PLAINTEXT for it, or point kafka.brokers at the broker's TLS listener"
    } else {
        return None;
    };
    Some(fix.to_owned())
}

/// A client context that keeps the first connection error only an operator can fix (see
/// [`connection_fix`]), so a command fails at once with it instead of timing out.
#[derive(Debug, Default)]
pub struct ConnectionWatch {
    fatal: Mutex<Option<(String, String)>>,
}

impl ConnectionWatch {
    /// The first such error so far: (librdkafka's reason, the fix).
    pub fn fatal(&self) -> Option<(String, String)> {
        self.fatal.lock().ok().and_then(|f| f.clone())
    }

    /// Waits until an error only an operator can fix arrives.
    async fn wait_fatal(&self) -> (String, String) {
        loop {
            if let Some(fatal) = self.fatal() {
                return fatal;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl ConnectionWatch {
    fn note(&self, reason: &str) {
        if let (Some(fix), Ok(mut fatal)) = (connection_fix(reason), self.fatal.lock()) {
            fatal.get_or_insert_with(|| (reason.to_owned(), fix));
        }
    }
}

impl ClientContext for ConnectionWatch {
    // librdkafka reports failed authentications and TLS handshakes in its log (called from its
    // own threads); an admin client's error events are not always polled.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        if (level as i32) <= (RDKafkaLogLevel::Warning as i32) {
            tracing::warn!(facility, "librdkafka: {message}");
            self.note(message);
        } else {
            tracing::debug!(facility, "librdkafka: {message}");
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        tracing::warn!(error = %error, reason, "kafka client error");
        self.note(reason);
    }
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
        (reason, fix) = admin.inner().context().wait_fatal() => {
            Err(PipelineError::fatal_with(what, fix, std::io::Error::other(reason)))
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

/// The producer's librdkafka configuration: defaults, the pipeline's overrides, and the queue
/// limits derived from the in-flight budget (so that librdkafka's queue never fills before the
/// budget does).
///
/// `batch_size_cap` is the smallest `max.message.bytes` of the topics the producer writes to:
/// the broker checks that limit against whole batches, so a `batch.size` above it would get
/// batches of small records rejected along with a large one. Unless `batch.size` is set
/// explicitly, it is lowered to the cap.
pub fn producer_config(
    kafka: &KafkaConfig,
    client_id: &str,
    max_records: u32,
    batch_size_cap: Option<u64>,
) -> ClientConfig {
    let mut config = client_config(&kafka.brokers, &kafka.client);
    config.set("client.id", client_id);
    for (key, value) in CDC_PRODUCER_DEFAULTS {
        config.set(*key, *value);
    }
    // Deletes may become two records and key changes four.
    let queue = (u64::from(max_records) * 4 + 10_000).min(2_147_483_647);
    config.set("queue.buffering.max.messages", queue.to_string());
    config.set("queue.buffering.max.kbytes", "2097151");
    if let Some(cap) = batch_size_cap.filter(|cap| *cap < 1_000_000) {
        tracing::info!(
            batch_size = cap,
            "lowering the producer's batch.size to the topics' smallest max.message.bytes"
        );
        config.set("batch.size", cap.to_string());
    }
    for (key, value) in &kafka.producer {
        config.set(key, value);
    }
    config
}

/// What the pipeline attaches to each record it produces; handed back with its report.
#[derive(Debug)]
pub struct Delivery {
    /// The record's sequence number in the acknowledgement tracker.
    pub seq: Seq,
    /// The in-flight budget share of the row change the record belongs to; released when the
    /// last record of that change is reported.
    pub permit: Arc<InFlightPermit>,
    /// Source commit time, Unix microseconds, for the end-to-end latency histogram.
    pub commit_unix_micros: i64,
    /// Per-table counters.
    pub table: Arc<m::TableMetrics>,
    /// Key and value bytes, for the per-table byte counter.
    pub bytes: u32,
}

/// A record as the producer sends it (also how a failed record comes back).
#[derive(Debug, Clone)]
pub struct OutRecord {
    /// Destination topic.
    pub topic: Arc<str>,
    /// Key bytes (JSON), if any.
    pub key: Option<Vec<u8>>,
    /// Value bytes (JSON); `None` is a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers, name and value (names are static but for the outbox's column headers).
    pub headers: Vec<(std::borrow::Cow<'static, str>, String)>,
}

impl OutRecord {
    /// Serialized size as counted in metrics.
    pub fn len(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.value.as_ref().map_or(0, Vec::len)
    }

    /// Whether the record carries no key and no value bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The librdkafka headers.
    pub fn owned_headers(&self) -> OwnedHeaders {
        self.headers
            .iter()
            .fold(OwnedHeaders::new(), |headers, (name, value)| {
                headers.insert(rdkafka::message::Header {
                    key: name,
                    value: Some(value.as_bytes()),
                })
            })
    }
}

/// The outcome of one produced record.
#[derive(Debug)]
pub enum DeliveryEvent {
    /// Written and acknowledged by the broker (per `acks`).
    Acked(Box<Delivery>),
    /// Refused; the pipeline applies its policy.
    Failed {
        /// Why.
        error: KafkaError,
        /// The record, to dead-letter it.
        record: OutRecord,
        /// Its bookkeeping.
        delivery: Box<Delivery>,
    },
    /// A change could not be encoded (a bug in sluice, e.g. a value it cannot render): it
    /// produced no records; the pipeline applies its policy (stop with the change's position,
    /// or dead-letter a description of it) and acknowledges its bookkeeping.
    EncodeFailed {
        /// Why (the panic's message).
        reason: String,
        /// The topic its records were meant for.
        topic: Arc<str>,
        /// Where the change is in the source, as operators read it, e.g. `commit LSN 0/1A2B,
        /// index 3, table public.orders`.
        position: String,
        /// A JSON description of the change for the dead-letter topic (no values).
        description: Vec<u8>,
        /// The bookkeeping of each record the change was to become.
        deliveries: Vec<Delivery>,
    },
}

/// Broker reachability as librdkafka reports it.
#[derive(Debug, Default)]
pub struct KafkaHealth {
    all_brokers_down: AtomicBool,
    last_error: Mutex<Option<String>>,
}

impl KafkaHealth {
    /// Whether librdkafka last said all brokers are down.
    pub fn all_brokers_down(&self) -> bool {
        self.all_brokers_down.load(Ordering::Relaxed)
    }

    /// The last client-level error librdkafka reported.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().map(|e| e.clone()).unwrap_or(None)
    }
}

/// The producer's librdkafka context.
pub struct PipelineProducerContext {
    deliveries: UnboundedSender<DeliveryEvent>,
    health: Arc<KafkaHealth>,
    /// Totals at the previous statistics report: (messages sent, produce requests).
    last_totals: Mutex<(i64, i64)>,
}

impl PipelineProducerContext {
    /// A context that reports deliveries on `deliveries`.
    pub fn new(deliveries: UnboundedSender<DeliveryEvent>, health: Arc<KafkaHealth>) -> Self {
        Self {
            deliveries,
            health,
            last_totals: Mutex::new((0, 0)),
        }
    }
}

impl ClientContext for PipelineProducerContext {
    fn stats(&self, statistics: Statistics) {
        let requests: i64 = statistics
            .brokers
            .values()
            .map(|broker| broker.req.get("Produce").copied().unwrap_or(0))
            .sum();
        let Ok(mut last) = self.last_totals.lock() else {
            return;
        };
        let (messages, produce_requests) = (statistics.txmsgs - last.0, requests - last.1);
        if produce_requests > 0 {
            m::records_per_request().record(messages as f64 / produce_requests as f64);
        }
        *last = (statistics.txmsgs, requests);
        m::producer_queue_bytes().set(statistics.msg_size as f64);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        let down = error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown);
        if down {
            self.health.all_brokers_down.store(true, Ordering::Relaxed);
        }
        let fix = connection_fix(reason);
        tracing::warn!(error = %error, reason, fix = fix.as_deref().unwrap_or(""), "kafka client error");
        if let Ok(mut last) = self.health.last_error.lock() {
            *last = Some(match fix {
                Some(fix) => format!("{error}: {reason} (fix: {fix})"),
                None => format!("{error}: {reason}"),
            });
        }
    }
}

impl ProducerContext for PipelineProducerContext {
    type DeliveryOpaque = Box<Delivery>;

    fn delivery(&self, result: &DeliveryResult<'_>, delivery: Self::DeliveryOpaque) {
        let event = match result {
            Ok(_) => {
                self.health.all_brokers_down.store(false, Ordering::Relaxed);
                DeliveryEvent::Acked(delivery)
            }
            Err((error, message)) => DeliveryEvent::Failed {
                error: error.clone(),
                record: OutRecord {
                    topic: Arc::from(message.topic()),
                    key: message.key().map(<[u8]>::to_vec),
                    value: message.payload().map(<[u8]>::to_vec),
                    headers: message
                        .headers()
                        .map(|headers| {
                            headers
                                .iter()
                                .filter_map(|h| {
                                    let name = static_header_name(h.key).map_or_else(
                                        || std::borrow::Cow::Owned(h.key.to_owned()),
                                        std::borrow::Cow::Borrowed,
                                    );
                                    Some((name, String::from_utf8_lossy(h.value?).into_owned()))
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                },
                delivery,
            },
        };
        // The receiver is gone only when the pipeline run ended; its records are re-read
        // from the slot's confirmed position by the next run.
        let _ = self.deliveries.send(event);
    }
}

/// The producer type of a pipeline.
pub type PipelineProducer = ThreadedProducer<PipelineProducerContext>;

/// Header names sluice writes (so failed records can carry them back without allocating names).
pub const HEADER_NAMES: &[&str] = &[
    crate::event::HEADER_COMMIT_LSN,
    crate::event::HEADER_LSN,
    crate::event::HEADER_TX_INDEX,
    crate::dead_letter::HEADER_REASON,
    crate::dead_letter::HEADER_TOPIC,
    crate::dead_letter::HEADER_VALUE_OMITTED,
];

fn static_header_name(name: &str) -> Option<&'static str> {
    HEADER_NAMES.iter().copied().find(|known| *known == name)
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
    if topics.is_empty() {
        return Ok(());
    }
    let admin = admin_client(kafka)?;
    let replication_factor = kafka.topic_replication_factor.map_or(-1, i32::from);
    let new_topics: Vec<NewTopic<'_>> = topics
        .iter()
        .map(|topic| {
            NewTopic::new(
                topic,
                partitions as i32,
                TopicReplication::Fixed(replication_factor),
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
                    "create the topic yourself, or fix kafka.topic_partitions / kafka.topic_replication_factor and the client's authorization",
                    KafkaError::AdminOp(code),
                ));
            }
        }
    }
    Ok(())
}

/// An admin client of the pipeline's brokers with its `[kafka.client]` settings.
fn admin_client(kafka: &KafkaConfig) -> Result<AdminClient<ConnectionWatch>, PipelineError> {
    client_config(&kafka.brokers, &kafka.client)
        .create_with_context(ConnectionWatch::default())
        .map_err(|e| {
            PipelineError::fatal_with(
                "cannot create a Kafka admin client",
                "check kafka.brokers and the properties in [kafka.client]: each must be a librdkafka property with a valid value",
                e,
            )
        })
}

/// The smallest `max.message.bytes` among the existing `topics`, if any could be read.
///
/// # Errors
///
/// Retryable when the cluster cannot be reached.
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
    let results = admin_request(
        &admin,
        format!(
            "cannot reach Kafka at {} to read topic configs",
            kafka.brokers
        ),
        admin.describe_configs(&resources, &options),
    )
    .await?;
    Ok(results
        .into_iter()
        .filter_map(Result::ok)
        .filter_map(|resource| {
            resource
                .get("max.message.bytes")
                .and_then(|entry| entry.value.as_deref())
                .and_then(|value| value.parse::<u64>().ok())
        })
        .min())
}

/// The producer overrides in effect, for `sluice check`.
pub fn effective_producer_settings(kafka: &KafkaConfig) -> BTreeMap<String, String> {
    let mut settings: BTreeMap<String, String> = CDC_PRODUCER_DEFAULTS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    settings.extend(kafka.producer.clone());
    settings
}

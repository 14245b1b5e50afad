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
use rdkafka::message::{Headers, Message};
use rdkafka::producer::{DeliveryResult, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use sluice_engine::{InFlightPermit, Seq};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::KafkaConfig;
use crate::error::PipelineError;
use crate::runtime::metrics as m;

mod diagnosis;
use self::diagnosis::diagnosed_error;
pub use self::diagnosis::{ConnectionWatch, Diagnosis, connection_fix, diagnose};

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
            std::io::Error::other("batch.size above a new topic's max.message.bytes"),
        ));
    }
    Ok(())
}

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

/// The producer's librdkafka configuration: defaults, the pipeline's overrides, and the queue
/// limits derived from the in-flight budget (so that librdkafka's queue never fills before the
/// budget does).
///
/// `batch_size_cap` is the smallest `max.message.bytes` of the topics the producer writes to:
/// the broker checks that limit against whole batches, so a `batch.size` above it would get
/// batches of small records rejected along with a large one. Unless `batch.size` is set
/// explicitly, it is lowered to the cap.
///
/// With `transactional_id` (`delivery.guarantee = "exactly_once"`) the producer is
/// transactional, and a record is given up on once its transaction would time out
/// (`message.timeout.ms` = `transaction.timeout.ms`): the transaction is then aborted and the
/// run restarts, instead of waiting forever inside a transaction the broker aborts anyway.
pub fn producer_config(
    kafka: &KafkaConfig,
    client_id: &str,
    max_records: u32,
    max_bytes: u32,
    batch_size_cap: Option<u64>,
    transactional_id: Option<&str>,
) -> ClientConfig {
    let mut config = client_config(&kafka.brokers, &kafka.client);
    config.set("client.id", client_id);
    for (key, value) in CDC_PRODUCER_DEFAULTS {
        config.set(*key, *value);
    }
    if let Some(id) = transactional_id {
        config.set("transactional.id", id);
        let timeout = kafka
            .producer
            .get("transaction.timeout.ms")
            .map_or("60000", String::as_str);
        config.set("message.timeout.ms", timeout);
    }
    // Deletes may become two records and key changes four.
    let queue = (u64::from(max_records) * 4 + 10_000).min(2_147_483_647);
    config.set("queue.buffering.max.messages", queue.to_string());
    // The same four-fold margin over the byte budget (which counts a change's size once): a
    // bound on librdkafka's copies that the budget reaches first.
    let kbytes = (u64::from(max_bytes) * 4 / 1024).clamp(16 * 1024, 2_097_151);
    config.set("queue.buffering.max.kbytes", kbytes.to_string());
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

/// The sequence number of a record whose delivery is not reported (see
/// [`Delivery::unreported`]).
pub const UNREPORTED: Seq = Seq(u64::MAX);

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

impl Delivery {
    /// The bookkeeping of a record whose delivery report is dropped (an exactly-once offsets
    /// record: its fate is its transaction's).
    pub fn unreported() -> Box<Self> {
        static BUDGET: std::sync::LazyLock<sluice_engine::InFlightBudget> =
            std::sync::LazyLock::new(|| {
                sluice_engine::InFlightBudget::new(
                    std::num::NonZeroU32::MAX,
                    std::num::NonZeroU32::MAX,
                )
            });
        static TABLE: std::sync::LazyLock<Arc<m::TableMetrics>> =
            std::sync::LazyLock::new(|| Arc::new(m::TableMetrics::new("(offsets)")));
        let permit = BUDGET
            .try_acquire(1)
            .unwrap_or_else(|| unreachable!("a budget of u32::MAX bytes and records"));
        Box::new(Self {
            seq: UNREPORTED,
            permit: Arc::new(permit),
            commit_unix_micros: 0,
            table: Arc::clone(&TABLE),
            bytes: 0,
        })
    }
}

pub use crate::record::OutRecord;

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
    /// Exactly once: the Kafka transaction holding every record up to `through` (in the
    /// delivery core's order) and the position they lead to has committed.
    Committed {
        /// The newest record in the committed transaction.
        through: Seq,
    },
    /// Exactly once: a Kafka transaction could not be begun or committed (it was aborted).
    TransactionFailed {
        /// What failed.
        what: &'static str,
        /// Why.
        error: KafkaError,
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
        /// What the operator can do about it (`None`: it is a bug in sluice).
        hint: Option<String>,
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

/// A source pipeline's producer with the channel its deliveries come back on and its brokers'
/// health: what every source's delivery loop starts from.
pub struct SourceProducer {
    /// The producer.
    pub producer: Arc<PipelineProducer>,
    /// The sending side of the deliveries channel (the publisher reports refusals on it too).
    pub deliveries_tx: UnboundedSender<DeliveryEvent>,
    /// The deliveries, in the order librdkafka reports them.
    pub deliveries: tokio::sync::mpsc::UnboundedReceiver<DeliveryEvent>,
    /// Broker health as the producer's context sees it.
    pub health: Arc<KafkaHealth>,
}

/// Creates a source pipeline's producer (`batch_size_cap`: see [`producer_config`]).
///
/// # Errors
///
/// A `[kafka.producer]` property librdkafka refuses.
pub fn source_producer(
    kafka: &KafkaConfig,
    client_id: &str,
    max_in_flight_records: u32,
    max_in_flight_bytes: u32,
    batch_size_cap: Option<u64>,
    transactional_id: Option<&str>,
) -> Result<SourceProducer, PipelineError> {
    let (deliveries_tx, deliveries) = tokio::sync::mpsc::unbounded_channel();
    let health = Arc::new(KafkaHealth::default());
    let producer = producer_config(
        kafka,
        client_id,
        max_in_flight_records,
        max_in_flight_bytes,
        batch_size_cap,
        transactional_id,
    )
        .create_with_context(PipelineProducerContext::new(
            deliveries_tx.clone(),
            Arc::clone(&health),
        ))
        .map_err(|e| {
            PipelineError::fatal_with(
                "cannot create the Kafka producer",
                "check the [kafka.producer] properties: each must be a librdkafka producer property with a valid value",
                e,
            )
        })?;
    Ok(SourceProducer {
        producer: Arc::new(producer),
        deliveries_tx,
        deliveries,
        health,
    })
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

    /// Where the delivery reports go (a record refused before it reached librdkafka's queue
    /// is reported there too, so one place applies the policy).
    pub fn deliveries(&self) -> &UnboundedSender<DeliveryEvent> {
        &self.deliveries
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
        if delivery.seq == UNREPORTED {
            // An exactly-once offsets record: its fate is its transaction's.
            return;
        }
        let event = match result {
            Ok(_) => {
                self.health.all_brokers_down.store(false, Ordering::Relaxed);
                DeliveryEvent::Acked(delivery)
            }
            Err((error, message)) => DeliveryEvent::Failed {
                error: error.clone(),
                record: OutRecord {
                    partition: None,
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
    crate::dead_letter::HEADER_POSITION,
    crate::dead_letter::HEADER_VALUE_TRUNCATED,
    crate::dead_letter::HEADER_KEY_TRUNCATED,
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

/// The producer overrides in effect, for `sluice check`.
pub fn effective_producer_settings(kafka: &KafkaConfig) -> BTreeMap<String, String> {
    let mut settings: BTreeMap<String, String> = CDC_PRODUCER_DEFAULTS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    settings.extend(kafka.producer.clone());
    settings
}

//! The producer: sluice's CDC defaults, the delivery reports that feed the engine's acknowledgement
//! tracker (see the module above for the ordering and the unbounded channel), and the producer's
//! health as the runtime shows it.

use super::client_config;
use super::diagnosis::connection_fix;
use crate::config::KafkaConfig;
use crate::error::PipelineError;
use crate::runtime::metrics as m;
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::error::KafkaError;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::message::{Headers, Message};
use rdkafka::producer::DeliveryResult;
use rdkafka::producer::ProducerContext;
use rdkafka::producer::ThreadedProducer;
use rdkafka::statistics::Statistics;
use sluice_engine::InFlightPermit;
use sluice_engine::Seq;
use sluice_kafka_ffi::{Held, HoldsValue};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use tokio::sync::mpsc::UnboundedSender;

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
    /// The record's value while librdkafka points into it (the zero-copy produce).
    pub held: Held,
}

impl HoldsValue for Delivery {
    fn held(&mut self) -> &mut Held {
        &mut self.held
    }
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
            held: Held::NONE,
        })
    }
}

use crate::record::OutRecord;

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

    // The value of a record produced through `sluice_kafka_ffi::produce_zero_copy` is in
    // `delivery.held`: it is taken from there, and `message.payload()` is not read (see there).
    fn delivery(&self, result: &DeliveryResult<'_>, mut delivery: Self::DeliveryOpaque) {
        if delivery.seq == UNREPORTED {
            // An exactly-once offsets record: its fate is its transaction's.
            return;
        }
        let value = delivery.held.take();
        let event = match result {
            Ok(_) => {
                drop(value);
                self.health.all_brokers_down.store(false, Ordering::Relaxed);
                DeliveryEvent::Acked(delivery)
            }
            Err((error, message)) => DeliveryEvent::Failed {
                error: error.clone(),
                record: OutRecord {
                    partition: None,
                    topic: Arc::from(message.topic()),
                    key: message.key().map(<[u8]>::to_vec),
                    value,
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

/// The producer overrides in effect, for `sluice check`.
pub fn effective_producer_settings(kafka: &KafkaConfig) -> BTreeMap<String, String> {
    let mut settings: BTreeMap<String, String> = CDC_PRODUCER_DEFAULTS
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    settings.extend(kafka.producer.clone());
    settings
}

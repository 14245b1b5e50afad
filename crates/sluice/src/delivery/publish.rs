//! Handing encoded records to the producer, in the order they were dispatched.
//!
//! The publisher task awaits each encoded batch in dispatch order (batches are encoded in
//! parallel on the blocking pool) and hands its records to a [`RecordSink`] — librdkafka's
//! producer in production, a recording fake in the core's unit tests. Records that cannot be
//! handed over, and changes that could not be encoded, come back to the loop as
//! [`DeliveryEvent`]s on the same channel as the delivery reports, so the loop applies the
//! pipeline's policy in one place.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::kafka::{
    Delivery, DeliveryEvent, OutRecord, PipelineProducer, Refused, produce_zero_copy,
};

/// Why [`RecordSink::try_send`] did not take a record; the record comes back either way (this
/// is the slow path, so its size does not matter).
#[allow(clippy::large_enum_variant)]
pub enum SendError {
    /// The producer's queue is full: try again shortly.
    QueueFull(OutRecord, Box<Delivery>),
    /// Refused at once (e.g. larger than the producer's `message.max.bytes`).
    Refused(KafkaError, OutRecord, Box<Delivery>),
}

/// Where records go: a producer whose delivery reports (carrying the [`Delivery`]) come back on
/// the pipeline's delivery channel.
pub trait RecordSink: Send + Sync + 'static {
    /// Takes a record without waiting (the producer keeps its value until the delivery report).
    ///
    /// # Errors
    ///
    /// [`SendError`] with the record and its bookkeeping.
    #[allow(clippy::result_large_err)]
    fn try_send(&self, record: OutRecord, delivery: Box<Delivery>) -> Result<(), SendError>;

    /// Exactly once: begins a transaction.
    ///
    /// # Errors
    ///
    /// The producer's refusal (a sink without transactions refuses).
    fn begin_transaction(&self) -> KafkaResult<()> {
        Err(not_transactional())
    }

    /// Exactly once: commits the open transaction (blocking: call it on the blocking pool).
    ///
    /// # Errors
    ///
    /// The producer's refusal; the transaction must then be aborted.
    fn commit_transaction(&self, _timeout: Duration) -> KafkaResult<()> {
        Err(not_transactional())
    }

    /// Exactly once: aborts the open transaction (blocking).
    ///
    /// # Errors
    ///
    /// The producer's refusal.
    fn abort_transaction(&self, _timeout: Duration) -> KafkaResult<()> {
        Err(not_transactional())
    }

    /// Exactly once: sends a record whose delivery is not reported (its fate is its
    /// transaction's), waiting (blocking) while the producer's queue is full.
    ///
    /// # Errors
    ///
    /// The producer's refusal.
    fn send_unreported(&self, _topic: &str, _key: &[u8], _value: &[u8]) -> KafkaResult<()> {
        Err(not_transactional())
    }
}

/// The error of a transaction operation on a sink without transactions.
fn not_transactional() -> KafkaError {
    KafkaError::MessageProduction(RDKafkaErrorCode::NotImplemented)
}

impl RecordSink for PipelineProducer {
    /// Hands the value over without a copy (`kafka::produce_zero_copy`): it comes back in the
    /// delivery report, or here if librdkafka refuses the record.
    fn try_send(&self, mut record: OutRecord, delivery: Box<Delivery>) -> Result<(), SendError> {
        let refused = match produce_zero_copy(
            self,
            &record.topic,
            record.partition,
            record.key.as_deref(),
            record.value.take(),
            &record.headers,
            delivery,
        ) {
            Ok(()) => return Ok(()),
            Err(refused) => *refused,
        };
        let Refused {
            error,
            value,
            opaque: delivery,
        } = refused;
        record.value = value;
        match error {
            KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) => {
                Err(SendError::QueueFull(record, delivery))
            }
            error => Err(SendError::Refused(error, record, delivery)),
        }
    }

    fn begin_transaction(&self) -> KafkaResult<()> {
        Producer::begin_transaction(self)
    }

    fn commit_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::commit_transaction(self, timeout)
    }

    fn abort_transaction(&self, timeout: Duration) -> KafkaResult<()> {
        Producer::abort_transaction(self, timeout)
    }

    fn send_unreported(&self, topic: &str, key: &[u8], value: &[u8]) -> KafkaResult<()> {
        loop {
            let record = BaseRecord::with_opaque_to(topic, Delivery::unreported())
                .key(key)
                .payload(value);
            match self.send(record) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((error, _)) => return Err(error),
            }
        }
    }
}

/// Sends one record, waiting (asynchronously: the runtime's thread goes on with other tasks)
/// while the producer's queue is full.
///
/// # Errors
///
/// The producer's refusal, with the record and its bookkeeping.
pub async fn send<K: RecordSink + ?Sized>(
    sink: &K,
    record: OutRecord,
    delivery: Box<Delivery>,
) -> Result<(), (KafkaError, OutRecord, Box<Delivery>)> {
    let (mut record, mut delivery) = (record, delivery);
    loop {
        match sink.try_send(record, delivery) {
            Ok(()) => return Ok(()),
            Err(SendError::QueueFull(r, d)) => {
                // librdkafka's queue is sized above the in-flight budget, so this is rare: wait
                // for its poll thread to make room.
                (record, delivery) = (r, d);
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(SendError::Refused(error, record, delivery)) => {
                return Err((error, record, delivery));
            }
        }
    }
}

/// What encoding made of one admitted change.
pub(super) enum Encoded {
    /// A record with its bookkeeping.
    Record(OutRecord, Box<Delivery>),
    /// The change could not be encoded: what the loop needs to apply its policy. Boxed: rare,
    /// and unboxed it made every `Encoded` larger than 128 bytes, so each move of a record
    /// through the batch was a `memmove` call (3 % of the MySQL backlog's samples;
    /// bench/PROFILE.md, "MySQL backlog: the profile after…").
    Failed(Box<DeliveryEvent>),
    /// A transform dropped the record: its place is acknowledged at once.
    Skipped(Box<Delivery>),
    /// Exactly once: the source's commit point ([`super::Intake::commit_point`]), always the
    /// last item of its batch.
    CommitPoint(OffsetsRecords),
}

/// Offsets records (key, value) written to the offsets topic inside a transaction.
pub type OffsetsRecords = Vec<(Vec<u8>, Vec<u8>)>;

// The hot value stays small enough to be moved with a few register moves.
const _: () = assert!(std::mem::size_of::<Encoded>() <= 128);

/// A batch being encoded on the blocking pool.
pub(super) type EncodedBatch = JoinHandle<Vec<Encoded>>;

/// The publisher task: hands the records of each batch to `sink` in dispatch order; refusals
/// and encoding failures go to `events`.
pub(super) async fn publish<K: RecordSink>(
    sink: Arc<K>,
    mut batches: mpsc::Receiver<EncodedBatch>,
    events: mpsc::UnboundedSender<DeliveryEvent>,
) {
    while let Some(handle) = batches.recv().await {
        let Ok(encoded) = handle.await else {
            tracing::error!("an encoding task failed; stopping the publisher");
            return;
        };
        for item in encoded {
            let (record, delivery) = match item {
                Encoded::Record(record, delivery) => (record, delivery),
                Encoded::Failed(event) => {
                    let _ = events.send(*event);
                    continue;
                }
                Encoded::Skipped(delivery) => {
                    let _ = events.send(DeliveryEvent::Acked(delivery));
                    continue;
                }
                // At least once, no transaction to end.
                Encoded::CommitPoint(_) => continue,
            };
            if let Err((error, record, delivery)) = send(&*sink, record, delivery).await {
                let _ = events.send(DeliveryEvent::Failed {
                    error,
                    record,
                    delivery,
                });
            }
        }
    }
}

/// What to do about a record Kafka rejected for good, by the error.
pub fn rejection_hint(error: &KafkaError) -> String {
    match error.rdkafka_error_code() {
        Some(RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize) => {
            "the record is larger than the broker's or the topic's max.message.bytes (or the producer's message.max.bytes): raise max.message.bytes on the topic and message.max.bytes in [kafka.producer], or set delivery.on_permanent_error = \"dead_letter\" with a delivery.dead_letter_topic".into()
        }
        Some(RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic) => {
            "the topic does not exist: create it, or set kafka.create_topics = true".into()
        }
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => {
            "the producer is not authorized to write to the topic: grant WRITE on it".into()
        }
        _ => "fix the cause above, or set delivery.on_permanent_error = \"dead_letter\" with a delivery.dead_letter_topic".into(),
    }
}

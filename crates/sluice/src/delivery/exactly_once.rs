//! Exactly-once delivery (`delivery.guarantee = "exactly_once"`): records and the source
//! position they lead to are committed in one Kafka transaction.
//!
//! The producer is transactional, its `transactional.id` derived from the pipeline's name
//! ([`transactional_id`]), so a restarted instance fences the previous one and aborts the
//! transaction it left open ([`init_transactions`]). The publisher (`publish`) opens a
//! transaction before the first record it hands over, and commits it on a time and byte budget
//! (`delivery.transaction_interval_ms`, `delivery.transaction_max_bytes`), never inside a
//! change (only between encoding batches, which hold whole changes) nor inside a group of
//! changes the source needs committed whole (a [`Boundary`]: an incremental snapshot's chunk;
//! or, for a source that places them, only at its commit points: an initial snapshot's, see
//! [`super::Intake::commit_point`]):
//! before the commit it writes the offsets records — the position of the newest record in the
//! transaction, keyed by the pipeline, and whatever progress the source keeps with it — to a
//! compacted offsets topic, inside the transaction. The commit runs on the
//! blocking pool, so the delivery loop keeps answering the source's keepalives meanwhile; no
//! record is handed over until it ends (the budget fills and reads stop, as under any
//! backpressure).
//!
//! The delivery core acknowledges records in its tracker only once their transaction has
//! committed ([`DeliveryEvent::Committed`]), so the source is confirmed only up to committed
//! positions. On start, the source reads the committed position back ([`read_committed`],
//! `isolation.level = read_committed`) and skips every change at or below it: the records of a
//! transaction that committed after the source's last confirmation are not written twice, and
//! those of one that was aborted are written again.
//!
//! A failure while a transaction is open (a refused record, a failed commit, a fenced producer)
//! aborts it and ends the run; the supervisor restarts it from the committed position.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::Producer;
use rdkafka::{Offset, TopicPartitionList};
use sluice_engine::Seq;
use tokio::sync::mpsc;

use super::publish::{self, Encoded, EncodedBatch, RecordSink};
use crate::config::KafkaConfig;
use crate::error::PipelineError;
use crate::kafka::{DeliveryEvent, OutRecord, PipelineProducer};

/// How long initializing, committing or aborting a transaction may take.
pub const TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// The `transactional.id` of a pipeline's producer: the same for every instance of the
/// pipeline, so the newest one fences the others.
pub fn transactional_id(pipeline: &str) -> String {
    format!("sluice-{pipeline}")
}

/// The offsets topic's default name: `<topic_prefix>.sluice_offsets`.
pub fn default_offsets_topic(topic_prefix: &str) -> String {
    format!("{topic_prefix}.sluice_offsets")
}

/// The offsets records (key, value) for a transaction whose newest record is the argument
/// (none when the record carries no position). Within a transaction, a key's newest value wins.
pub type PositionValue = Arc<dyn Fn(&OutRecord) -> Vec<(Vec<u8>, Vec<u8>)> + Send + Sync>;

/// Whether a transaction may commit after the argument (the newest record of an encoding
/// batch): a source whose records form groups that must commit whole says no inside a group.
pub type Boundary = Arc<dyn Fn(&OutRecord) -> bool + Send + Sync>;

/// The snapshot record's value for the finished chunks given.
pub type ChunksValue = Box<dyn Fn(&[usize]) -> Vec<u8> + Send>;

/// What the publisher needs to run transactions.
#[derive(Clone)]
pub struct Transactions {
    /// The compacted topic of committed positions.
    pub offsets_topic: Arc<str>,
    /// The offsets records for a transaction whose newest record is the argument.
    pub position_value: PositionValue,
    /// Where a transaction may end (everywhere without one).
    pub boundary: Option<Boundary>,
    /// The longest a transaction stays open.
    pub interval: Duration,
    /// A transaction commits once it holds this many record bytes.
    pub max_bytes: u64,
}

/// Initializes the producer's transactions: fences every older producer with the same
/// `transactional.id` and completes (aborts) the transaction such a producer left open.
///
/// # Errors
///
/// Retryable (the broker may be unreachable for now); the message names the setting when the
/// broker refuses transactions.
pub async fn init_transactions(producer: &Arc<PipelineProducer>) -> Result<(), PipelineError> {
    let producer = Arc::clone(producer);
    tokio::task::spawn_blocking(move || producer.init_transactions(TRANSACTION_TIMEOUT))
        .await
        .map_err(|e| PipelineError::retryable("initializing Kafka transactions failed", e))?
        .map_err(|error| transaction_error("cannot initialize Kafka transactions", error))
}

/// The pipeline error for a failed transaction operation: always retryable (the next run starts
/// from the committed position); a fenced producer says so.
pub fn transaction_error(what: &str, error: KafkaError) -> PipelineError {
    let fenced = matches!(
        error.rdkafka_error_code(),
        Some(
            RDKafkaErrorCode::Fenced
                | RDKafkaErrorCode::ProducerFenced
                | RDKafkaErrorCode::InvalidProducerEpoch
        )
    );
    if fenced {
        return PipelineError::retryable(
            format!(
                "{what}: the producer was fenced — another instance of this pipeline started with the same transactional.id; its records are the ones committed (restarting from the committed position)"
            ),
            error,
        );
    }
    if error.rdkafka_error_code() == Some(RDKafkaErrorCode::ClusterAuthorizationFailed)
        || error.rdkafka_error_code() == Some(RDKafkaErrorCode::TransactionalIdAuthorizationFailed)
    {
        return PipelineError::fatal_with(
            format!("{what}: not authorized"),
            "grant the producer's principal WRITE and DESCRIBE on the transactional id (sluice-<pipeline name>) and IDEMPOTENT_WRITE on the cluster, or set delivery.guarantee = \"at_least_once\"",
            error,
        );
    }
    PipelineError::retryable(what.to_owned(), error)
}

/// The transaction being filled.
struct Open {
    /// When it must commit at the latest (`None` once due).
    deadline: Option<tokio::time::Instant>,
    /// Record bytes handed over in it.
    bytes: u64,
    /// Its newest record (`None`: it holds only a commit point's offsets records).
    last: Option<Seq>,
    /// The offsets records for its newest record (a key's newest value).
    values: Vec<(Vec<u8>, Vec<u8>)>,
    /// Whether it may commit after its newest record (see [`Boundary`]).
    at_boundary: bool,
    /// Its time or byte budget ran out while it could not commit: it commits at the next
    /// boundary.
    due: bool,
}

impl Open {
    /// Merges offsets records in: a key's newest value wins.
    fn set_values(&mut self, values: Vec<(Vec<u8>, Vec<u8>)>) {
        for (key, value) in values {
            match self.values.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => self.values.push((key, value)),
            }
        }
    }
}

/// The exactly-once publisher task: hands the records of each batch to `sink` in dispatch
/// order inside transactions, and commits them with their position (see the module docs).
/// Ends, after aborting the open transaction, when a record cannot be handed over or a change
/// could not be encoded (the loop ends the run on the event it gets) or a transaction fails.
pub(super) async fn publish<K: RecordSink>(
    sink: Arc<K>,
    mut batches: mpsc::Receiver<EncodedBatch>,
    events: mpsc::UnboundedSender<DeliveryEvent>,
    transactions: Transactions,
) {
    let mut open: Option<Open> = None;
    loop {
        let deadline = open.as_ref().and_then(|o| o.deadline);
        tokio::select! {
            biased;
            () = sleep_until(deadline), if deadline.is_some() => {
                if let Some(o) = open.as_mut()
                    && !o.at_boundary
                {
                    // Inside a group that commits whole: at its end.
                    o.due = true;
                    o.deadline = None;
                    continue;
                }
                if let Some(o) = open.take()
                    && !commit(&sink, &events, &transactions, o).await
                {
                    return;
                }
            }
            batch = batches.recv() => {
                let Some(handle) = batch else {
                    // The run ends: what was not committed is read again by the next one.
                    if open.is_some() {
                        abort(&sink).await;
                    }
                    return;
                };
                let Ok(encoded) = handle.await else {
                    tracing::error!("an encoding task failed; stopping the publisher");
                    abort(&sink).await;
                    return;
                };
                let last_record = encoded.iter().rposition(|e| matches!(e, Encoded::Record(..)));
                for (n, item) in encoded.into_iter().enumerate() {
                    let (record, delivery) = match item {
                        Encoded::Record(record, delivery) => (record, delivery),
                        // The source ends the transaction here (the batch's last item): its
                        // offsets records go in, begun for them if none is open.
                        Encoded::CommitPoint(offsets) => {
                            if open.is_none() {
                                match begin(&*sink, &events, transactions.interval) {
                                    Some(begun) => open = Some(begun),
                                    None => return,
                                }
                            }
                            if let Some(o) = open.as_mut() {
                                o.set_values(offsets);
                                o.at_boundary = true;
                                o.due = true;
                            }
                            continue;
                        }
                        Encoded::Failed(event) => {
                            let _ = events.send(*event);
                            abort(&sink).await;
                            return;
                        }
                        // A record a transform dropped: nothing to write, its place completes
                        // with the open transaction's commit, or at once when none is open
                        // (every record before it is committed then: the commit is awaited
                        // before the next batch), so a run of dropped changes still moves the
                        // source's confirmed position.
                        Encoded::Skipped(delivery) => {
                            let seq = delivery.seq;
                            let _ = events.send(DeliveryEvent::Acked(delivery));
                            match open.as_mut() {
                                Some(o) => o.last = Some(seq),
                                None => {
                                    let _ = events.send(DeliveryEvent::Committed { through: seq });
                                }
                            }
                            continue;
                        }
                    };
                    if open.is_none() {
                        match begin(&*sink, &events, transactions.interval) {
                            Some(begun) => open = Some(begun),
                            None => return,
                        }
                    }
                    if let Some(o) = open.as_mut() {
                        o.bytes += record.len() as u64;
                        o.last = Some(delivery.seq);
                        if Some(n) == last_record {
                            o.set_values((transactions.position_value)(&record));
                            o.at_boundary =
                                transactions.boundary.as_ref().is_none_or(|b| b(&record));
                        }
                    }
                    if let Err((error, record, delivery)) =
                        publish::send(&*sink, record, delivery).await
                    {
                        let _ = events.send(DeliveryEvent::Failed {
                            error,
                            record,
                            delivery,
                        });
                        abort(&sink).await;
                        return;
                    }
                }
                if open.as_ref().is_some_and(|o| {
                    o.at_boundary && (o.due || o.bytes >= transactions.max_bytes)
                }) && let Some(o) = open.take()
                    && !commit(&sink, &events, &transactions, o).await
                {
                    return;
                }
            }
        }
    }
}

/// Begins a transaction (reporting a failure to the loop): the one the publisher fills next.
fn begin<K: RecordSink>(
    sink: &K,
    events: &mpsc::UnboundedSender<DeliveryEvent>,
    interval: Duration,
) -> Option<Open> {
    if let Err(error) = sink.begin_transaction() {
        let _ = events.send(DeliveryEvent::TransactionFailed {
            what: "cannot begin a Kafka transaction",
            error,
        });
        return None;
    }
    Some(Open {
        deadline: Some(tokio::time::Instant::now() + interval),
        bytes: 0,
        last: None,
        values: Vec::new(),
        at_boundary: true,
        due: false,
    })
}

/// Waits until `deadline` (forever without one).
async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Writes the offsets record and commits `open` on the blocking pool; reports the outcome to
/// the loop. Returns whether the publisher may go on.
async fn commit<K: RecordSink>(
    sink: &Arc<K>,
    events: &mpsc::UnboundedSender<DeliveryEvent>,
    transactions: &Transactions,
    open: Open,
) -> bool {
    let Open { last, values, .. } = open;
    let (producer, topic) = (Arc::clone(sink), Arc::clone(&transactions.offsets_topic));
    let committed = tokio::task::spawn_blocking(move || {
        for (key, value) in values {
            producer.send_unreported(&topic, &key, &value)?;
        }
        crate::crash_point!("exactly_once::before_commit");
        producer.commit_transaction(TRANSACTION_TIMEOUT)
    })
    .await;
    match committed {
        Ok(Ok(())) => {
            crate::crash_point!("exactly_once::after_commit");
            if let Some(through) = last {
                let _ = events.send(DeliveryEvent::Committed { through });
            }
            true
        }
        Ok(Err(error)) => {
            abort(sink).await;
            let _ = events.send(DeliveryEvent::TransactionFailed {
                what: "cannot commit a Kafka transaction (it was aborted)",
                error,
            });
            false
        }
        Err(join) => {
            tracing::error!(error = %join, "the commit task failed");
            abort(sink).await;
            false
        }
    }
}

/// Aborts the open transaction (on the blocking pool); a failure is only logged: the next
/// run's [`init_transactions`] aborts it, or the broker does after `transaction.timeout.ms`.
async fn abort<K: RecordSink>(sink: &Arc<K>) {
    let producer = Arc::clone(sink);
    match tokio::task::spawn_blocking(move || producer.abort_transaction(TRANSACTION_TIMEOUT)).await
    {
        Ok(Ok(())) => tracing::info!("aborted the open Kafka transaction"),
        Ok(Err(error)) => tracing::warn!(error = %error, "cannot abort the Kafka transaction"),
        Err(error) => tracing::warn!(error = %error, "cannot abort the Kafka transaction"),
    }
}

/// Reads the newest committed value of each key in `topic` (partition 0), as a consumer with
/// `isolation.level = read_committed` sees it, up to the end of the partition (the producer's
/// transactions must have been initialized first, so no transaction of this pipeline is open).
/// An absent topic reads as empty.
///
/// # Errors
///
/// Retryable when Kafka cannot be reached or the end is not reached within 30 s.
pub async fn read_committed(
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<HashMap<Vec<u8>, Vec<u8>>, PipelineError> {
    let kafka = kafka.clone();
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || read_committed_blocking(&kafka, &topic))
        .await
        .map_err(|e| PipelineError::retryable("reading the offsets topic failed", e))?
}

fn read_committed_blocking(
    kafka: &KafkaConfig,
    topic: &str,
) -> Result<HashMap<Vec<u8>, Vec<u8>>, PipelineError> {
    let what = || format!("cannot read the committed positions from {topic}");
    let consumer: BaseConsumer = crate::kafka::client_config(&kafka.brokers, &kafka.client)
        .set(
            "group.id",
            format!("sluice-offsets-reader-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| PipelineError::fatal_with(what(), "check [kafka.client]", e))?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (low, high) = consumer
        .fetch_watermarks(topic, 0, Duration::from_secs(10))
        .map_err(|e| PipelineError::retryable(what(), e))?;
    let mut values = HashMap::new();
    if high <= low {
        return Ok(values);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(|e| PipelineError::retryable(what(), e))?;
    consumer
        .assign(&assignment)
        .map_err(|e| PipelineError::retryable(what(), e))?;
    loop {
        if std::time::Instant::now() > deadline {
            return Err(PipelineError::retryable(
                what(),
                std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!(
                        "the end of the offsets topic (offset {high}) was not reached within 30 s (a transaction of another writer still open?)"
                    ),
                ),
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                if let Some(key) = message.key() {
                    match message.payload() {
                        Some(value) => values.insert(key.to_vec(), value.to_vec()),
                        None => values.remove(key),
                    };
                }
                if message.offset() + 1 >= high {
                    return Ok(values);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {
                // The end a read_committed consumer sees: past every committed record once
                // no transaction is open before it. Transaction markers take offsets too, so
                // the position may stop short of `high` by them.
                let position = consumer
                    .position()
                    .ok()
                    .and_then(|p| p.find_partition(topic, 0).and_then(|p| p.offset().to_raw()))
                    .unwrap_or(0);
                if position + 1 >= high {
                    return Ok(values);
                }
                tracing::debug!(position, high, "offsets topic: not at its end yet");
            }
            Some(Err(error)) => return Err(PipelineError::retryable(what(), error)),
            None => {}
        }
    }
}

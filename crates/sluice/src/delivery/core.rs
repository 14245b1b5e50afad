//! The delivery core's state: the steps waiting for the budget, the acknowledgement tracker,
//! the encode-and-publish pipeline, and the policy for records that cannot be delivered.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use futures::future::BoxFuture;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use sluice_engine::{AckTracker, InFlightBudget, InFlightPermit, Seq};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::publish::{self, Encoded, EncodedBatch, OffsetsRecords, RecordSink};
use super::{ENCODE_BATCH, Encode, Position, unix_micros_now};
use crate::config::{DeliveryConfig, PermanentErrorPolicy};
use crate::dead_letter;
use crate::error::{Interruption, PipelineError, Unencodable};
use crate::kafka::{Delivery, DeliveryEvent, Held, OutRecord};
use crate::runtime::metrics::PipelineMetrics;
use crate::runtime::status::StatusBoard;
use crate::transform::{Chain, TransformError};

/// Encoding batches between the loop and the publisher.
const ENCODE_QUEUE: usize = 16;
/// How long a graceful shutdown waits for in-flight records.
const DRAIN_DEADLINE: Duration = Duration::from_secs(10);

/// A step the loop takes in source order.
enum Step<C, P> {
    /// Admit a change once the budget has room.
    Admit {
        change: C,
        size: usize,
        records: u32,
    },
    /// Push a checkpoint: every record before it is of positions at or below it.
    Checkpoint(P),
    /// Exactly once: end the open transaction here, with these offsets records.
    CommitPoint(OffsetsRecords),
}

/// Where a source hands over what it read, in source order: changes (each becoming a known
/// number of records) and checkpoints (positions the source may be confirmed at once every
/// record before them is acknowledged).
pub struct Intake<C, P> {
    steps: VecDeque<Step<C, P>>,
    /// The newest checkpoint taken into the tracker.
    last_checkpoint: P,
}

impl<C, P: Position> Intake<C, P> {
    fn new(start: P) -> Self {
        Self {
            steps: VecDeque::new(),
            last_checkpoint: start,
        }
    }

    /// Queues `change`, which becomes exactly `records` records and weighs `size` bytes in the
    /// in-flight budget.
    pub fn admit(&mut self, change: C, size: usize, records: u32) {
        self.steps.push_back(Step::Admit {
            change,
            size: size.max(1),
            records,
        });
    }

    /// Queues a checkpoint after the changes queued so far.
    pub fn checkpoint(&mut self, position: P) {
        self.steps.push_back(Step::Checkpoint(position));
    }

    /// Exactly once: ends the open transaction after the changes queued so far, writing
    /// `offsets` (the source's progress at this point) to the offsets topic in it (a
    /// transaction is begun for them when none is open). A source whose records form groups
    /// that must commit whole (an initial snapshot's chunks) places these between groups;
    /// at least once, they are ignored.
    pub fn commit_point(&mut self, offsets: OffsetsRecords) {
        self.steps.push_back(Step::CommitPoint(offsets));
    }

    /// The newest checkpoint taken into the tracker (changes queued behind it are not).
    pub fn last_checkpoint(&self) -> P {
        self.last_checkpoint
    }
}

/// A change admitted under the budget, ready to encode.
struct Admitted<C> {
    change: C,
    first_seq: u64,
    records: u32,
    permit: Arc<InFlightPermit>,
}

/// Exactly once: a record delivered in a transaction that has not committed yet (its budget
/// share is released; its place in the tracker waits for the commit).
struct Uncommitted {
    seq: u64,
    commit_unix_micros: i64,
    bytes: u32,
    table: Arc<crate::runtime::metrics::TableMetrics>,
}

/// Reads a topic's `max.message.bytes` (`None` when it cannot be known).
pub type TopicLimit =
    Arc<dyn Fn(Arc<str>) -> BoxFuture<'static, Result<Option<u64>, PipelineError>> + Send + Sync>;

/// The producer's `batch.size`, for telling a batch the broker refused from a record it
/// refused (see [`DeliveryCore::set_batch_limit`]).
pub struct BatchLimit {
    /// The producer's `batch.size`.
    pub batch_size: u64,
    /// The smallest topic limit learned, kept across runs (`0`: none yet); the next run's
    /// producer takes `batch.size` from it.
    pub learned: Arc<AtomicU64>,
    /// Reads a topic's limit again.
    pub topic_limit: TopicLimit,
}

impl BatchLimit {
    /// The limit of a producer with `batch_size` writing through `kafka`: a topic's limit is
    /// read from the cluster (`describe_configs`).
    pub fn from_cluster(
        kafka: crate::config::KafkaConfig,
        batch_size: u64,
        learned: Arc<AtomicU64>,
    ) -> Self {
        let kafka = Arc::new(kafka);
        Self {
            batch_size,
            learned,
            topic_limit: Arc::new(move |topic| {
                let kafka = Arc::clone(&kafka);
                Box::pin(async move {
                    crate::kafka::smallest_max_message_bytes(&kafka, &[topic.to_string()]).await
                })
            }),
        }
    }
}

/// Acknowledged records, bytes and latencies between two status ticks.
struct AckWindow {
    records: u64,
    bytes: u64,
    latency_micros: hdrhistogram::Histogram<u64>,
}

/// Admit → encode → publish in order → acknowledge → watermark → dead-letter → drain, for
/// changes `C` at positions `P`, into `K`.
pub struct DeliveryCore<C, P, K> {
    /// What the source hands over.
    pub intake: Intake<C, P>,
    tracker: AckTracker<P>,
    budget: InFlightBudget,
    batch: Vec<Admitted<C>>,
    /// Exactly once: commit points among the admitted changes, each after the first `n` of
    /// `batch` (in order).
    commit_points: VecDeque<(usize, OffsetsRecords)>,
    publish_tx: mpsc::Sender<EncodedBatch>,
    sink: Arc<K>,
    delivery: DeliveryConfig,
    /// Tracker entries allowed before reads stop.
    max_pending: usize,
    metrics: PipelineMetrics,
    window: AckWindow,
    /// Where a record came from in the source, as operators read it (from its headers).
    position_of: fn(&OutRecord) -> String,
    /// How long a graceful stop waits for in-flight records.
    pub(super) drain_deadline: Duration,
    /// Exactly once: records are acknowledged when their transaction commits.
    exactly_once: bool,
    /// Exactly once: delivered records waiting for their transaction's commit.
    uncommitted: Vec<Uncommitted>,
    /// Exactly once: the newest record of the last committed transaction.
    committed_through: Option<u64>,
    /// The producer's `batch.size`, when sluice chose it.
    batch_limit: Option<BatchLimit>,
    /// `[transforms]`, applied to each record as it is encoded.
    transforms: Option<Arc<Chain>>,
}

impl<C: Send + 'static, P: Position, K: RecordSink> DeliveryCore<C, P, K> {
    /// A core resuming after `start` (the source's confirmed position), with its publisher
    /// task, which reports refusals and encoding failures on `events` (the delivery reports'
    /// channel).
    pub fn start(
        sink: Arc<K>,
        budget: InFlightBudget,
        start: P,
        delivery: &DeliveryConfig,
        metrics: PipelineMetrics,
        events: mpsc::UnboundedSender<DeliveryEvent>,
        position_of: fn(&OutRecord) -> String,
    ) -> (Self, JoinHandle<()>) {
        let (publish_tx, publish_rx) = mpsc::channel(ENCODE_QUEUE);
        let publisher = tokio::spawn(publish::publish(Arc::clone(&sink), publish_rx, events));
        let core = Self::new(
            sink,
            budget,
            start,
            delivery,
            metrics,
            position_of,
            publish_tx,
        );
        (core, publisher)
    }

    /// [`DeliveryCore::start`] for exactly-once delivery: the publisher hands records over
    /// inside Kafka transactions that commit with their position (see
    /// [`super::exactly_once`]), and records are acknowledged once their transaction commits.
    #[allow(clippy::too_many_arguments)]
    pub fn start_exactly_once(
        sink: Arc<K>,
        budget: InFlightBudget,
        start: P,
        delivery: &DeliveryConfig,
        metrics: PipelineMetrics,
        events: mpsc::UnboundedSender<DeliveryEvent>,
        position_of: fn(&OutRecord) -> String,
        transactions: super::exactly_once::Transactions,
    ) -> (Self, JoinHandle<()>) {
        let (publish_tx, publish_rx) = mpsc::channel(ENCODE_QUEUE);
        let publisher = tokio::spawn(super::exactly_once::publish(
            Arc::clone(&sink),
            publish_rx,
            events,
            transactions,
        ));
        let mut core = Self::new(
            sink,
            budget,
            start,
            delivery,
            metrics,
            position_of,
            publish_tx,
        );
        core.exactly_once = true;
        (core, publisher)
    }

    fn new(
        sink: Arc<K>,
        budget: InFlightBudget,
        start: P,
        delivery: &DeliveryConfig,
        metrics: PipelineMetrics,
        position_of: fn(&OutRecord) -> String,
        publish_tx: mpsc::Sender<EncodedBatch>,
    ) -> Self {
        Self {
            intake: Intake::new(start),
            tracker: AckTracker::new(Some(start)),
            budget,
            batch: Vec::new(),
            commit_points: VecDeque::new(),
            publish_tx,
            sink,
            delivery: delivery.clone(),
            max_pending: delivery.max_in_flight_records as usize * 4,
            metrics,
            window: AckWindow {
                records: 0,
                bytes: 0,
                latency_micros: crate::runtime::status::latency_histogram(),
            },
            position_of,
            drain_deadline: DRAIN_DEADLINE,
            exactly_once: false,
            uncommitted: Vec::new(),
            committed_through: None,
            batch_limit: None,
            transforms: None,
        }
    }

    /// Tells a refused batch from a refused record: a record smaller than `batch.size` that
    /// Kafka refuses as too large has its topic's limit read again, and when that is below
    /// `batch.size` the run restarts with the lower cap instead of stopping (or dead-lettering
    /// a record that was never too large).
    pub fn set_batch_limit(&mut self, limit: BatchLimit) {
        self.batch_limit = Some(limit);
    }

    /// The `[transforms]` the encoding stage applies (see [`DeliveryCore::set_transforms`]).
    pub fn transforms(&self) -> Option<&Arc<Chain>> {
        self.transforms.as_ref()
    }

    /// Applies `transforms` to every record from now on (in the encoding stage).
    pub fn set_transforms(&mut self, transforms: Option<Arc<Chain>>) {
        self.transforms = transforms;
    }

    /// The in-flight budget.
    pub fn budget(&self) -> &InFlightBudget {
        &self.budget
    }

    /// The newest position whose records, and all before, are acknowledged.
    pub fn watermark(&self) -> P {
        self.tracker.watermark().copied().unwrap_or_default()
    }

    /// Admitted changes not yet sent to be encoded.
    pub fn undispatched(&self) -> usize {
        self.batch.len()
    }

    /// Whether the source may read more: nothing waits for the budget and the tracker is
    /// below its limit (so a full budget stops reads and the backpressure reaches the server).
    pub fn can_read(&self) -> bool {
        self.intake.steps.is_empty() && self.tracker.pending() < self.max_pending
    }

    /// The budget share the change at the front waits for, if one does.
    pub fn waiting_size(&self) -> Option<usize> {
        match self.intake.steps.front() {
            Some(Step::Admit { size, .. }) => Some(*size),
            _ => None,
        }
    }

    /// Takes queued steps in order while the budget has room.
    ///
    /// # Errors
    ///
    /// An internal error when the tracker refuses a step (a bug).
    pub fn process_steps(&mut self) -> Result<(), PipelineError> {
        while let Some(step) = self.intake.steps.front() {
            match step {
                Step::Checkpoint(position) => {
                    let position = *position;
                    self.intake.steps.pop_front();
                    if position > self.intake.last_checkpoint {
                        self.intake.last_checkpoint = position;
                        self.tracker
                            .push_checkpoint(position)
                            .map_err(|e| internal("checkpoint order", e))?;
                    }
                }
                Step::Admit { size, .. } => match self.budget.try_acquire(*size) {
                    Some(permit) => self.admit_front(permit)?,
                    None => break,
                },
                Step::CommitPoint(_) => {
                    if let Some(Step::CommitPoint(offsets)) = self.intake.steps.pop_front()
                        && self.exactly_once
                    {
                        self.commit_points.push_back((self.batch.len(), offsets));
                    }
                }
            }
        }
        Ok(())
    }

    /// Admits the change at the front of the queue with its budget share (`permit`).
    ///
    /// # Errors
    ///
    /// An internal error when the tracker refuses the records (a bug).
    pub fn admit_front(&mut self, permit: InFlightPermit) -> Result<(), PipelineError> {
        let Some(Step::Admit {
            change, records, ..
        }) = self.intake.steps.pop_front()
        else {
            return Ok(());
        };
        let first_seq = self.tracker.next_seq().0;
        for _ in 0..records {
            self.tracker
                .push(None)
                .map_err(|e| internal("tracker push", e))?;
        }
        self.batch.push(Admitted {
            change,
            first_seq,
            records,
            permit: Arc::new(permit),
        });
        Ok(())
    }

    /// Sends the admitted changes to be encoded (in parallel, by encoders `encoder` makes) and
    /// published (in order). An encoding batch ends at each commit point, which it carries.
    ///
    /// # Errors
    ///
    /// Retryable when the publisher has stopped.
    pub async fn dispatch<E: Encode<C>>(
        &mut self,
        mut encoder: impl FnMut() -> E,
    ) -> Result<(), PipelineError> {
        while !self.batch.is_empty() || !self.commit_points.is_empty() {
            let next_point = self.commit_points.front().map(|(at, _)| *at);
            let take = self
                .batch
                .len()
                .min(ENCODE_BATCH)
                .min(next_point.unwrap_or(usize::MAX));
            let batch: Vec<Admitted<C>> = self.batch.drain(..take).collect();
            for (at, _) in &mut self.commit_points {
                *at -= take;
            }
            let commit_point = match next_point {
                Some(at) if at == take => self.commit_points.pop_front().map(|(_, o)| o),
                _ => None,
            };
            let encoder = encoder();
            let transforms = self.transforms.clone();
            let position_of = self.position_of;
            let handle = tokio::task::spawn_blocking(move || {
                let mut out = encode_batch(batch, &encoder, transforms.as_deref(), position_of);
                out.extend(commit_point.map(Encoded::CommitPoint));
                out
            });
            self.publish_tx.send(handle).await.map_err(|_| {
                PipelineError::retryable(
                    "the publisher stopped",
                    Interruption::PublishChannelClosed,
                )
            })?;
        }
        Ok(())
    }

    /// Applies delivery reports (`events`, emptied), then shows the watermark in the metrics.
    ///
    /// # Errors
    ///
    /// As [`DeliveryCore::on_delivery`].
    pub async fn on_deliveries(
        &mut self,
        events: &mut Vec<DeliveryEvent>,
    ) -> Result<(), PipelineError> {
        for event in events.drain(..) {
            self.on_delivery(event).await?;
        }
        if let Some(watermark) = self.tracker.watermark() {
            self.metrics.watermark.set(watermark.gauge());
        }
        Ok(())
    }

    /// Applies a delivery report (or a refusal, or an encoding failure).
    ///
    /// # Errors
    ///
    /// Retryable for a transient refusal; fatal when the policy is to stop.
    pub async fn on_delivery(&mut self, event: DeliveryEvent) -> Result<(), PipelineError> {
        match event {
            DeliveryEvent::Acked(delivery) if self.exactly_once => {
                let Delivery {
                    seq,
                    permit,
                    commit_unix_micros,
                    table,
                    bytes,
                    held: _,
                } = *delivery;
                drop(permit);
                let record = Uncommitted {
                    seq: seq.0,
                    commit_unix_micros,
                    bytes,
                    table,
                };
                if self
                    .committed_through
                    .is_some_and(|through| seq.0 <= through)
                {
                    self.acknowledge(&record)?;
                } else {
                    self.uncommitted.push(record);
                }
                Ok(())
            }
            DeliveryEvent::Acked(delivery) => self.acknowledge(&Uncommitted {
                seq: delivery.seq.0,
                commit_unix_micros: delivery.commit_unix_micros,
                bytes: delivery.bytes,
                table: delivery.table,
            }),
            DeliveryEvent::Committed { through } => {
                self.committed_through = Some(through.0);
                let (committed, open): (Vec<_>, Vec<_>) = std::mem::take(&mut self.uncommitted)
                    .into_iter()
                    .partition(|r| r.seq <= through.0);
                self.uncommitted = open;
                committed
                    .iter()
                    .try_for_each(|record| self.acknowledge(record))
            }
            DeliveryEvent::TransactionFailed { what, error } => {
                Err(super::exactly_once::transaction_error(what, error))
            }
            DeliveryEvent::Failed {
                error,
                record,
                delivery,
            } => self.on_failed(error, record, delivery).await,
            DeliveryEvent::EncodeFailed {
                reason,
                topic,
                position,
                description,
                deliveries,
                hint,
            } => {
                self.on_encode_failed(reason, topic, position, description, deliveries, hint)
                    .await
            }
        }
    }

    /// Acknowledges a record: at least once when Kafka acknowledged it, exactly once when its
    /// transaction committed (its latency is then to the commit: when read_committed consumers
    /// can see it).
    fn acknowledge(&mut self, record: &Uncommitted) -> Result<(), PipelineError> {
        let latency_micros = (unix_micros_now() - record.commit_unix_micros).max(0);
        self.metrics.latency.record(latency_micros as f64 / 1e6);
        self.window.records += 1;
        self.window.bytes += u64::from(record.bytes);
        self.window
            .latency_micros
            .saturating_record(latency_micros.max(1) as u64);
        record.table.records.increment(1);
        record.table.bytes.increment(u64::from(record.bytes));
        self.tracker
            .ack(Seq(record.seq))
            .map_err(|e| internal("acknowledgement", e))?;
        Ok(())
    }

    /// A change that could not be encoded: stop with its position, or dead-letter a
    /// description of it, per `delivery.on_permanent_error`.
    async fn on_encode_failed(
        &mut self,
        reason: String,
        topic: Arc<str>,
        position: String,
        description: Vec<u8>,
        mut deliveries: Vec<Delivery>,
        hint: Option<String>,
    ) -> Result<(), PipelineError> {
        let dead_letter = match (
            self.delivery.on_permanent_error,
            self.delivery.dead_letter_topic.as_deref(),
        ) {
            (PermanentErrorPolicy::DeadLetter, Some(topic)) => topic.to_owned(),
            _ => {
                return Err(PipelineError::fatal_with(
                    format!(
                        "cannot encode the change at {position}: {reason}; nothing after it is confirmed to the source, so no data is lost"
                    ),
                    hint.unwrap_or_else(|| "this is a bug in sluice: report it with the table's column types; to go on past such changes, set delivery.on_permanent_error = \"dead_letter\" with a delivery.dead_letter_topic".into()),
                    Unencodable(reason),
                ));
            }
        };
        tracing::error!(
            position,
            reason,
            dead_letter,
            "a change could not be encoded: dead-lettering a description of it"
        );
        self.metrics.dead_lettered.increment(1);
        // Its other records (a tombstone, a key change's create) are not written: acknowledge
        // their places in the watermark now; the first place waits for the dead letter.
        if deliveries.is_empty() {
            return Ok(());
        }
        let first = deliveries.remove(0);
        for delivery in deliveries {
            self.tracker
                .ack(delivery.seq)
                .map_err(|e| internal("acknowledgement", e))?;
        }
        let record = dead_letter_record(
            &dead_letter,
            dead_letter::build(
                None,
                Some(&description),
                [],
                dead_letter::Origin::Produced {
                    topic: &topic,
                    position: &position,
                },
                &format!("cannot encode the change: {reason}"),
                self.delivery.dead_letter_max_value_bytes,
            ),
        );
        self.send_dead_letter(record, Box::new(first)).await
    }

    /// A record the producer refused: retry (transient), stop, or dead-letter it.
    async fn on_failed(
        &mut self,
        error: rdkafka::error::KafkaError,
        record: OutRecord,
        delivery: Box<Delivery>,
    ) -> Result<(), PipelineError> {
        let position = (self.position_of)(&record);
        if !crate::kafka::is_permanent(&error) {
            return Err(PipelineError::retryable(
                format!(
                    "Kafka did not accept a record for {} ({position})",
                    record.topic
                ),
                error,
            ));
        }
        self.check_batch_refusal(&error, &record).await?;
        let dlq = refused_record(&self.delivery, &error, &record, &position)?;
        self.send_dead_letter(dlq, delivery).await
    }

    /// The broker checks a topic's `max.message.bytes` against whole batches, and that limit
    /// can drop below the producer's `batch.size` while the pipeline runs (the topic or the
    /// brokers' default altered, or a topic created while a new default was on its way to the
    /// broker that answered for it). A record smaller than `batch.size` refused as too large is
    /// then a refused batch: the topic's limit is read again and, when it is below
    /// `batch.size`, the run restarts with `batch.size` lowered to it. Nothing after the record
    /// was confirmed to the source, so nothing is lost.
    async fn check_batch_refusal(
        &self,
        error: &KafkaError,
        record: &OutRecord,
    ) -> Result<(), PipelineError> {
        let Some(limit) = &self.batch_limit else {
            return Ok(());
        };
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::MessageSizeTooLarge)
            || record.len() as u64 >= limit.batch_size
        {
            return Ok(());
        }
        let Some(topic_limit) = (limit.topic_limit)(Arc::clone(&record.topic)).await? else {
            return Ok(());
        };
        if topic_limit >= limit.batch_size {
            return Ok(());
        }
        crate::kafka::lower_batch_cap(&limit.learned, topic_limit);
        Err(PipelineError::retryable(
            format!(
                "topic {} takes batches of at most {topic_limit} bytes (max.message.bytes), less than the producer's batch.size {}: a batch of its records was refused; restarting with batch.size = {topic_limit}",
                record.topic, limit.batch_size
            ),
            error.clone(),
        ))
    }

    /// Sends a dead-letter record; its delivery report acknowledges `delivery`'s place.
    async fn send_dead_letter(
        &mut self,
        dlq: OutRecord,
        delivery: Box<Delivery>,
    ) -> Result<(), PipelineError> {
        publish::send(&*self.sink, dlq, delivery)
            .await
            .map_err(|(error, record, _)| {
                PipelineError::fatal_with(
                    format!("cannot write to the dead-letter topic {}", record.topic),
                    "check that the dead-letter topic exists and the producer may write to it",
                    error,
                )
            })
    }

    /// Records a confirmed checkpoint's duration and position in the metrics.
    pub fn checkpointed(&self, watermark: P, took: Duration) {
        self.metrics.checkpoint_duration.record(took.as_secs_f64());
        self.metrics.watermark.set(watermark.gauge());
    }

    /// Counts a checkpoint that could not be made.
    pub fn checkpoint_failed(&self) {
        self.metrics.checkpoint_failures.increment(1);
    }

    /// Hands the acknowledgements since the last call, and the watermark, to the status board.
    pub fn report(&mut self, board: &StatusBoard) {
        board.add_acknowledged(
            std::mem::take(&mut self.window.records),
            std::mem::take(&mut self.window.bytes),
            &self.window.latency_micros,
        );
        self.window.latency_micros.reset();
        let watermark = self.tracker.watermark().map(ToString::to_string);
        board.update(|s| s.watermark_lsn = watermark);
    }

    /// Graceful stop: drops what was not admitted, and waits (at most `DRAIN_DEADLINE`) for
    /// the delivery reports of what was. The caller confirms the resulting watermark.
    pub async fn drain(&mut self, deliveries: &mut mpsc::UnboundedReceiver<DeliveryEvent>) {
        tracing::info!(
            inflight_records = self.budget.in_flight_records(),
            "stopping: draining in-flight records"
        );
        self.intake.steps.clear();
        self.batch.clear();
        self.commit_points.clear();
        let deadline = tokio::time::Instant::now() + self.drain_deadline;
        let mut events = Vec::new();
        // Exactly once: the publisher commits the open transaction on its timer.
        while self.budget.in_flight_records() > 0 || !self.uncommitted.is_empty() {
            match tokio::time::timeout_at(deadline, deliveries.recv_many(&mut events, 4096)).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    for event in events.drain(..) {
                        match event {
                            DeliveryEvent::Acked(_) | DeliveryEvent::Committed { .. }
                                if self.exactly_once =>
                            {
                                let applied = self.on_delivery(event).await;
                                if applied.is_err() {
                                    return;
                                }
                            }
                            DeliveryEvent::Acked(delivery) => {
                                let _ = self.tracker.ack(delivery.seq);
                            }
                            DeliveryEvent::TransactionFailed { .. } => return,
                            _ => {}
                        }
                    }
                }
            }
        }
    }
}

/// What the delivery policy makes of a record Kafka refused for `error`, streamed or read by
/// a snapshot (`position`: where its change is in the source): the run is retried (a transient
/// refusal: nothing after the record was confirmed), stopped (`on_permanent_error = "stop"`,
/// or the record was a dead letter itself), or the record's dead letter comes back, to be sent
/// in its place (its delivery report then acknowledges the record's place).
///
/// # Errors
///
/// Retryable for a transient refusal; fatal when the policy is to stop, naming the topic, the
/// position and Kafka's reason.
pub fn refused_record(
    delivery: &DeliveryConfig,
    error: &KafkaError,
    record: &OutRecord,
    position: &str,
) -> Result<OutRecord, PipelineError> {
    if !crate::kafka::is_permanent(error) {
        return Err(PipelineError::retryable(
            format!(
                "Kafka did not accept a record for {} ({position})",
                record.topic
            ),
            error.clone(),
        ));
    }
    let dead_letter = match (
        delivery.on_permanent_error,
        delivery.dead_letter_topic.as_deref(),
    ) {
        (PermanentErrorPolicy::DeadLetter, Some(topic)) if topic != &*record.topic => topic,
        _ => {
            let size = record.len();
            return Err(PipelineError::fatal_with(
                format!(
                    "Kafka rejected a {size}-byte record for topic {} (change at {position}): {error}; nothing after it is confirmed to the source, so no data is lost",
                    record.topic
                ),
                publish::rejection_hint(error),
                error.clone(),
            ));
        }
    };
    tracing::warn!(topic = %record.topic, position, error = %error, dead_letter, "dead-lettering a record");
    metrics::counter!(crate::runtime::metrics::DEAD_LETTERED).increment(1);
    let built = dead_letter::build(
        record.key.as_deref(),
        record.value.as_deref(),
        record
            .headers
            .iter()
            .map(|(name, value)| (&**name, Some(value.as_bytes()))),
        dead_letter::Origin::Produced {
            topic: &record.topic,
            position,
        },
        &error.to_string(),
        delivery.dead_letter_max_value_bytes,
    );
    Ok(dead_letter_record(dead_letter, built))
}

/// A source's dead letter as a record for `topic` (a source's headers are text).
fn dead_letter_record(topic: &str, built: dead_letter::DeadLetterRecord) -> OutRecord {
    OutRecord {
        partition: None,
        topic: Arc::from(topic),
        key: built.key,
        value: built.value,
        headers: built
            .headers
            .into_iter()
            .map(|(name, value)| {
                let value = value.map_or_else(String::new, |v| {
                    String::from_utf8(v)
                        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
                });
                (std::borrow::Cow::Owned(name), value)
            })
            .collect(),
    }
}

/// Encodes a batch into records, each with its bookkeeping. A panic while encoding one change
/// (a bug: a value sluice cannot render) must not kill the publisher or come back at the same
/// position on every restart: it becomes an `EncodeFailed` event, and the policy decides.
///
/// `transforms` apply to each record in turn: a record they drop completes its place at once
/// (`Encoded::Skipped`), one they refuse follows `delivery.on_permanent_error` with the
/// untransformed value as the dead letter's.
fn encode_batch<C, E: Encode<C>>(
    batch: Vec<Admitted<C>>,
    encoder: &E,
    transforms: Option<&Chain>,
    position_of: fn(&OutRecord) -> String,
) -> Vec<Encoded> {
    let mut out = Vec::with_capacity(batch.len() + batch.len() / 4);
    let mut records = Vec::with_capacity(4);
    for admitted in batch {
        let applied = transforms.is_some() && encoder.transforms_applied(&admitted.change);
        let transforms = transforms.filter(|_| !applied);
        let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            encoder.encode(&admitted.change, &mut records)
        }));
        let origin = match encoded {
            Ok(origin) => origin,
            Err(panic) => {
                records.clear();
                let failed = encoder.describe(&admitted.change, &panic_message(panic.as_ref()));
                let deliveries = (0..u64::from(admitted.records))
                    .map(|offset| Delivery {
                        seq: Seq(admitted.first_seq + offset),
                        permit: Arc::clone(&admitted.permit),
                        commit_unix_micros: failed.origin.commit_unix_micros,
                        table: Arc::clone(&failed.origin.table),
                        bytes: 0,
                        held: Held::NONE,
                    })
                    .collect();
                out.push(Encoded::Failed(Box::new(DeliveryEvent::EncodeFailed {
                    reason: failed.reason,
                    topic: failed.topic,
                    position: failed.position,
                    description: failed.description,
                    deliveries,
                    hint: None,
                })));
                continue;
            }
        };
        let produced = records.len() as u64;
        for (offset, record) in records.drain(..).enumerate() {
            let mut delivery = Box::new(Delivery {
                seq: Seq(admitted.first_seq + offset as u64),
                permit: Arc::clone(&admitted.permit),
                commit_unix_micros: origin.commit_unix_micros,
                table: Arc::clone(&origin.table),
                bytes: 0,
                held: Held::NONE,
            });
            let record = match transforms.map(|chain| chain.apply(&record)) {
                None => record,
                Some(Ok(Some(transformed))) => transformed,
                Some(Ok(None)) => {
                    out.push(Encoded::Skipped(delivery));
                    continue;
                }
                Some(Err(error)) => {
                    out.push(Encoded::Failed(Box::new(DeliveryEvent::EncodeFailed {
                        reason: error.to_string(),
                        position: position_of(&record),
                        topic: record.topic,
                        description: record.value.unwrap_or_default(),
                        deliveries: vec![*delivery],
                        hint: Some(transform_hint(&error)),
                    })));
                    continue;
                }
            };
            delivery.bytes = u32::try_from(record.len()).unwrap_or(u32::MAX);
            out.push(Encoded::Record(record, delivery));
        }
        // The records a directly applied chain dropped: their places complete at once (the
        // order of places is only the order of completion, and a change's records complete
        // together or its position is not confirmed).
        if applied {
            for offset in produced..u64::from(admitted.records) {
                out.push(Encoded::Skipped(Box::new(Delivery {
                    seq: Seq(admitted.first_seq + offset),
                    permit: Arc::clone(&admitted.permit),
                    commit_unix_micros: origin.commit_unix_micros,
                    table: Arc::clone(&origin.table),
                    bytes: 0,
                    held: Held::NONE,
                })));
            }
        }
    }
    out
}

/// What to do about a record a transform refused.
fn transform_hint(error: &TransformError) -> String {
    format!(
        "fix [transforms.{}] for such records (e.g. a predicate that leaves them out), or set delivery.on_permanent_error = \"dead_letter\" with a delivery.dead_letter_topic to go on past them",
        error.name
    )
}

/// The text of a panic's payload.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

/// An internal error: a bug in sluice.
fn internal(what: &str, error: impl std::error::Error + Send + Sync + 'static) -> PipelineError {
    PipelineError::fatal_with(
        format!("internal error in {what}"),
        "this is a bug in sluice: please report it with the log",
        error,
    )
}

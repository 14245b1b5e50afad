//! The part of an initial snapshot every source shares: chunks read by workers in parallel and
//! delivered through the delivery core ([`crate::delivery`]), a chunk finished once Kafka
//! acknowledged all of its records (only then is it recorded as done, so a restart reads the
//! unfinished ones).
//!
//! A source's snapshot is an adapter: its workers read chunks and hand their changes over, in
//! each chunk's order, as [`ChunkMessage`]s on a bounded channel, followed by the chunk's
//! [`ChunkMessage::Read`]; [`deliver`] runs them through a [`DeliveryCore`] as a [`Source`]
//! whose positions count the chunks read ([`ChunksRead`]). Each chunk read is a checkpoint
//! after its changes, so the watermark passes it once its records, and those handed over
//! before them, are acknowledged: the chunk is then recorded as finished (at once, not on a
//! timer: [`Source::CONFIRMS_ON_ACK`]). Admission under the in-flight budget, parallel
//! encoding, `[transforms]`, the delivery policy for refused records (retry, stop or dead
//! letter) and the drain on shutdown are the core's, as for a streamed change.
//!
//! Exactly once, chunks are committed in Kafka transactions holding whole chunks only
//! ([`drive_transactional`]): the workers produce their records themselves ([`publish`]),
//! under a gate the committer takes.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use sluice_engine::{InFlightBudget, Seq};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::delivery::{DeliveryCore, Encode, Intake, LoopContext, Position, Source};
use crate::error::{Interruption, PipelineError, Unencodable};
use crate::event::SnapshotMarker;
use crate::kafka::{Delivery, DeliveryEvent, Held, OutRecord, PipelineProducer};
use crate::runtime::metrics::{PipelineMetrics, TableMetrics};
use crate::runtime::status::{SnapshotStatus, StatusBoard};

/// A chunk's place in its table and in the snapshot, for Debezium's `source.snapshot` markers.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkPlace {
    /// It holds the snapshot's first row.
    pub first_of_all: bool,
    /// It holds the snapshot's last row.
    pub last_of_all: bool,
    /// It is its table's first chunk.
    pub first_in_table: bool,
    /// It is its table's last chunk.
    pub last_in_table: bool,
}

impl ChunkPlace {
    /// The marker of the chunk's first and/or last row (or of another row: both false).
    pub fn marker(&self, first_of_chunk: bool, last_of_chunk: bool) -> SnapshotMarker {
        SnapshotMarker::of(
            first_of_chunk && self.first_of_all,
            last_of_chunk && self.last_of_all,
            first_of_chunk && self.first_in_table,
            last_of_chunk && self.last_in_table,
        )
    }
}

/// Hands `changes` to [`deliver`] (waiting while its channel is full).
///
/// # Errors
///
/// Retryable when the delivery has ended (its own error is the run's).
pub async fn hand_over<C>(
    channel: &mpsc::Sender<ChunkMessage<C>>,
    changes: Vec<(C, usize, u32)>,
) -> Result<(), PipelineError> {
    channel
        .send(ChunkMessage::Changes(changes))
        .await
        .map_err(|_| {
            PipelineError::retryable(
                "the snapshot's delivery stopped",
                Interruption::PublishChannelClosed,
            )
        })
}

/// What a snapshot worker hands over to [`deliver`].
pub enum ChunkMessage<C> {
    /// Changes of one chunk, in the chunk's order: each with its share of the in-flight budget
    /// (bytes) and the number of records it becomes.
    Changes(Vec<(C, usize, u32)>),
    /// Every change of `chunk` was handed over; `rows` rows were read.
    Read {
        /// The chunk's number in the plan.
        chunk: usize,
        /// Rows read.
        rows: u64,
    },
}

/// A position of [`deliver`]'s delivery core: the number of chunks read before it, in the
/// order they were handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ChunksRead(pub u64);

impl std::fmt::Display for ChunksRead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} snapshot chunks read", self.0)
    }
}

impl Position for ChunksRead {
    fn gauge(&self) -> f64 {
        self.0 as f64
    }
}

/// How often [`deliver`] logs its progress (and checkpoints, besides on acknowledgements).
const PROGRESS_TICK: Duration = Duration::from_secs(1);
/// How often the progress is logged.
const PROGRESS_LOG: Duration = Duration::from_secs(10);

/// What [`deliver`] delivers with (the pipeline's producer, `K`) and shows progress on.
pub struct ChunkDelivery<'a, K> {
    /// The producer (shared with the stream that follows).
    pub producer: &'a Arc<K>,
    /// Its delivery reports.
    pub deliveries: &'a mut mpsc::UnboundedReceiver<DeliveryEvent>,
    /// Where its delivery reports go (refusals and encoding failures are reported there too).
    pub events: mpsc::UnboundedSender<DeliveryEvent>,
    /// The in-flight budget.
    pub budget: &'a InFlightBudget,
    /// The pipeline's `[delivery]`: what a record Kafka refuses becomes.
    pub delivery: &'a crate::config::DeliveryConfig,
    /// Where a record came from in the source, as operators read it (from its headers).
    pub position_of: fn(&OutRecord) -> String,
    /// `[transforms]`.
    pub transforms: Option<Arc<crate::transform::Chain>>,
    /// Stop early.
    pub shutdown: &'a tokio_util::sync::CancellationToken,
    /// The status board (progress).
    pub board: &'a StatusBoard,
    /// Chunks in the plan.
    pub chunks_total: usize,
    /// Chunks already finished (by an earlier run).
    pub chunks_done: usize,
}

/// Runs the workers' chunks through a delivery core until every chunk is finished: `changes`
/// carries what the `workers` read, `encoder` makes an encoder per encoding batch, and
/// `finished` is called with each batch of chunks that finished together (to record them; the
/// crash point `snapshot::chunks_recorded` follows it). Returns the rows read by this run.
///
/// # Errors
///
/// A worker's error, the producer's end, a record Kafka refused per the delivery policy, or
/// shutdown (retryable: the unfinished chunks are read on the next start).
pub async fn deliver<K, C, E, N, F>(
    kafka: ChunkDelivery<'_, K>,
    workers: JoinSet<Result<(), PipelineError>>,
    changes: mpsc::Receiver<ChunkMessage<C>>,
    encoder: N,
    finished: F,
) -> Result<u64, PipelineError>
where
    K: crate::delivery::RecordSink,
    C: Send + 'static,
    E: Encode<C>,
    N: FnMut() -> E,
    F: FnMut(&[usize]) -> Result<(), PipelineError>,
{
    let ChunkDelivery {
        producer,
        deliveries,
        events,
        budget,
        delivery,
        position_of,
        transforms,
        shutdown,
        board,
        chunks_total,
        chunks_done,
    } = kafka;
    let started = Instant::now();
    let mut source = ChunkSource {
        changes,
        changes_open: true,
        workers,
        read: VecDeque::new(),
        handed_over: 0,
        confirmed: 0,
        rows: 0,
        chunks_total,
        chunks_done,
        board,
        encoder,
        finished,
        started,
        last_log: started,
    };
    if !source.finished() {
        let (mut core, publisher) = DeliveryCore::start(
            Arc::clone(producer),
            budget.clone(),
            ChunksRead(0),
            delivery,
            unshown_metrics(),
            events,
            position_of,
        );
        core.set_transforms(transforms);
        let result = crate::delivery::run(
            &mut source,
            &mut core,
            deliveries,
            LoopContext {
                shutdown,
                status_interval: PROGRESS_TICK,
                status: None,
            },
        )
        .await;
        drop(core);
        publisher.abort();
        result?;
        if !source.finished() {
            return Err(PipelineError::retryable(
                "stopped during the snapshot (its unfinished chunks are read on the next start)",
                Interruption::Shutdown,
            ));
        }
    }
    while source.workers.join_next().await.is_some() {}
    tracing::info!(
        rows = source.rows,
        chunks = chunks_total,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot: done; streaming from the consistent point"
    );
    Ok(source.rows)
}

/// The snapshot's metrics in the delivery core: none of the pipeline's gauges and histograms
/// (the watermark shown is the source's, the latency the stream's), only dead letters counted.
fn unshown_metrics() -> PipelineMetrics {
    PipelineMetrics {
        latency: metrics::Histogram::noop(),
        checkpoint_duration: metrics::Histogram::noop(),
        checkpoint_failures: metrics::Counter::noop(),
        watermark: metrics::Gauge::noop(),
        received_bytes: metrics::Counter::noop(),
        transactions: metrics::Counter::noop(),
        dead_lettered: metrics::counter!(crate::runtime::metrics::DEAD_LETTERED),
    }
}

/// The snapshot as a [`Source`] of the delivery core: its messages are the workers'.
struct ChunkSource<'a, C, N, F> {
    changes: mpsc::Receiver<ChunkMessage<C>>,
    /// Some worker may still hand something over.
    changes_open: bool,
    workers: JoinSet<Result<(), PipelineError>>,
    /// Chunks read and not yet recorded as finished, in the order they were handed over.
    read: VecDeque<usize>,
    /// Chunks read by this run (the newest checkpoint).
    handed_over: u64,
    /// Chunks read by this run and recorded as finished (the watermark last confirmed).
    confirmed: u64,
    /// Rows read by this run.
    rows: u64,
    chunks_total: usize,
    chunks_done: usize,
    board: &'a StatusBoard,
    encoder: N,
    finished: F,
    started: Instant,
    last_log: Instant,
}

/// What [`ChunkSource`] reads.
enum ChunkEvent<C> {
    /// A worker's message.
    Message(ChunkMessage<C>),
    /// Every worker dropped its sender.
    AllRead,
    /// A worker ended.
    Worker(Result<Result<(), PipelineError>, tokio::task::JoinError>),
}

impl<C, N, F> ChunkSource<'_, C, N, F> {
    /// The workers ended without handing every chunk over (they stop early only on shutdown).
    fn check_complete(&self) -> Result<(), PipelineError> {
        if !self.changes_open
            && self.workers.is_empty()
            && self.chunks_done + self.read.len() < self.chunks_total
        {
            return Err(PipelineError::retryable(
                "the snapshot's workers ended before every chunk was read",
                Interruption::SnapshotIncomplete,
            ));
        }
        Ok(())
    }

    fn log_progress(&mut self) {
        if self.last_log.elapsed() < PROGRESS_LOG {
            return;
        }
        self.last_log = Instant::now();
        let (rows, chunks_done, chunks_total) = (self.rows, self.chunks_done, self.chunks_total);
        let rate = rows as f64 / self.started.elapsed().as_secs_f64().max(0.001);
        let per_chunk = if chunks_done > 0 {
            rows as f64 / chunks_done as f64
        } else {
            0.0
        };
        let eta = if rate > 0.0 {
            per_chunk * (chunks_total - chunks_done) as f64 / rate
        } else {
            0.0
        };
        tracing::info!(
            chunks_done,
            chunks_total,
            rows,
            rows_per_s = rate as u64,
            eta_s = eta as u64,
            "snapshot: progress"
        );
    }
}

impl<C, E, N, F> Source for ChunkSource<'_, C, N, F>
where
    C: Send + 'static,
    E: Encode<C>,
    N: FnMut() -> E,
    F: FnMut(&[usize]) -> Result<(), PipelineError>,
{
    type Change = C;
    type Position = ChunksRead;
    type Message = ChunkEvent<C>;
    type Encoder = E;

    const CONFIRMS_ON_ACK: bool = true;

    async fn read(&mut self) -> ChunkEvent<C> {
        tokio::select! {
            message = self.changes.recv(), if self.changes_open => match message {
                Some(message) => ChunkEvent::Message(message),
                None => ChunkEvent::AllRead,
            },
            Some(joined) = self.workers.join_next() => ChunkEvent::Worker(joined),
            else => std::future::pending().await,
        }
    }

    async fn on_message(
        &mut self,
        message: ChunkEvent<C>,
        intake: &mut Intake<C, ChunksRead>,
    ) -> Result<bool, PipelineError> {
        match message {
            ChunkEvent::Message(ChunkMessage::Changes(changes)) => {
                for (change, size, records) in changes {
                    intake.admit(change, size, records);
                }
            }
            ChunkEvent::Message(ChunkMessage::Read { chunk, rows }) => {
                self.read.push_back(chunk);
                self.handed_over += 1;
                self.rows += rows;
                intake.checkpoint(ChunksRead(self.handed_over));
            }
            ChunkEvent::AllRead => {
                self.changes_open = false;
                self.check_complete()?;
            }
            ChunkEvent::Worker(Ok(Ok(()))) => self.check_complete()?,
            ChunkEvent::Worker(Ok(Err(error))) => return Err(error),
            ChunkEvent::Worker(Err(error)) => {
                return Err(PipelineError::retryable("a snapshot worker failed", error));
            }
        }
        Ok(false)
    }

    async fn before_checkpoint(
        &mut self,
        _intake: &mut Intake<C, ChunksRead>,
    ) -> Result<bool, PipelineError> {
        self.log_progress();
        Ok(false)
    }

    async fn confirm(&mut self, watermark: ChunksRead, _reply: bool) -> Result<(), PipelineError> {
        let Some(newly) = watermark.0.checked_sub(self.confirmed).filter(|n| *n > 0) else {
            return Ok(());
        };
        let newly = usize::try_from(newly)
            .unwrap_or(usize::MAX)
            .min(self.read.len());
        let chunks: Vec<usize> = self.read.drain(..newly).collect();
        self.confirmed = watermark.0;
        self.chunks_done += chunks.len();
        (self.finished)(&chunks)?;
        crate::crash_point!("snapshot::chunks_recorded");
        let (chunks_total, chunks_done, rows) = (self.chunks_total, self.chunks_done, self.rows);
        self.board.update(|s| {
            s.snapshot = Some(SnapshotStatus {
                chunks_total,
                chunks_done,
                rows,
            });
        });
        Ok(())
    }

    async fn after_checkpoint(
        &mut self,
        _intake: &mut Intake<C, ChunksRead>,
        _watermark: ChunksRead,
    ) -> Result<(), PipelineError> {
        Ok(())
    }

    fn encoder(&mut self) -> E {
        (self.encoder)()
    }

    fn finished(&self) -> bool {
        self.chunks_done >= self.chunks_total
    }
}

/// What [`drive_transactional`] watches.
pub struct Progress<'a> {
    /// The producer's delivery reports.
    pub deliveries: &'a mut mpsc::UnboundedReceiver<DeliveryEvent>,
    /// Stop early.
    pub shutdown: &'a tokio_util::sync::CancellationToken,
    /// The status board (progress).
    pub board: &'a StatusBoard,
    /// Chunks in the plan.
    pub chunks_total: usize,
    /// Chunks already finished (by an earlier run).
    pub chunks_done: usize,
    /// What a refused record becomes, and where its dead letter goes.
    pub policy: RefusalPolicy<'a>,
}

/// What [`drive_transactional`] does with a record Kafka refuses: the pipeline's delivery
/// policy decides whether the run is retried or stopped (exactly once takes no dead letters).
pub struct RefusalPolicy<'a> {
    /// The pipeline's `[delivery]`.
    pub delivery: &'a crate::config::DeliveryConfig,
    /// Where a record came from in the source, as operators read it (from its headers).
    pub position_of: fn(&OutRecord) -> String,
}

/// Exactly once: what [`drive_transactional`] needs to commit chunks.
pub struct ChunkTransactions {
    /// The transactional producer the workers produce with.
    pub producer: Arc<PipelineProducer>,
    /// Held shared by each worker while it reads a chunk; the committer holds it exclusively,
    /// so a transaction holds whole chunks only.
    pub gate: Arc<tokio::sync::RwLock<()>>,
    /// The compacted topic of committed positions.
    pub offsets_topic: Arc<str>,
    /// The snapshot record's key.
    pub key: Arc<[u8]>,
    /// The snapshot record's value for the finished chunks.
    pub value: crate::delivery::exactly_once::ChunksValue,
    /// How often a transaction commits.
    pub interval: Duration,
    /// The chunks finished by earlier runs.
    pub done: Vec<usize>,
}

/// Exactly once: begins a transaction for the snapshot's records.
///
/// # Errors
///
/// Retryable (the run restarts from what is committed).
pub async fn begin(producer: &Arc<PipelineProducer>) -> Result<(), PipelineError> {
    use rdkafka::producer::Producer as _;
    producer.begin_transaction().map_err(|e| {
        crate::delivery::exactly_once::transaction_error("cannot begin a Kafka transaction", e)
    })
}

/// The snapshot exactly once: the workers produce their chunks' records ([`publish`]) in the
/// open transaction; every `interval`, the committer takes the gate (workers finish the
/// chunks they are reading and wait), writes the snapshot record — every finished chunk —
/// to the offsets topic and commits the transaction holding those chunks' records and the
/// record together; only then are the chunks recorded as finished (`finished`) and counted.
/// A crash before the commit aborts the transaction, so no record of a chunk that is read
/// again is ever visible to `read_committed` consumers.
///
/// # Errors
///
/// A worker's error, the producer's end, a record Kafka refused, shutdown, and a transaction
/// that cannot be committed (it is aborted).
pub async fn drive_transactional(
    progress: Progress<'_>,
    mut workers: JoinSet<Result<(), PipelineError>>,
    mut sent: mpsc::UnboundedReceiver<(usize, u64)>,
    mut finished: impl FnMut(&[usize]) -> Result<(), PipelineError>,
    transactions: ChunkTransactions,
) -> Result<u64, PipelineError> {
    let Progress {
        deliveries,
        shutdown,
        board,
        chunks_total,
        mut chunks_done,
        policy,
    } = progress;
    let ChunkTransactions {
        producer,
        gate,
        offsets_topic,
        key,
        value,
        interval,
        mut done,
    } = transactions;
    let started = Instant::now();
    let mut rows = 0u64;
    let mut read: Vec<usize> = Vec::new();
    let mut events = Vec::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut workers_running = true;
    loop {
        let last_round = !workers_running && workers.is_empty();
        if !last_round {
            tokio::select! {
                count = deliveries.recv_many(&mut events, 4096) => {
                    if count == 0 {
                        return Err(PipelineError::retryable("the producer stopped", Interruption::DeliveryChannelClosed));
                    }
                    delivered(&mut events, &policy)?;
                    continue;
                }
                message = sent.recv(), if workers_running => {
                    match message {
                        Some((chunk, records)) => {
                            rows += records;
                            read.push(chunk);
                        }
                        None => workers_running = false,
                    }
                    continue;
                }
                Some(result) = workers.join_next() => {
                    match result {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => return Err(error),
                        Err(error) => return Err(PipelineError::retryable("a snapshot worker failed", error)),
                    }
                    continue;
                }
                () = shutdown.cancelled() => {
                    return Err(PipelineError::retryable(
                        "stopped during the snapshot (its uncommitted chunks are read on the next start)",
                        Interruption::Shutdown,
                    ));
                }
                _ = tick.tick() => {}
            }
        }
        // Commit: take the gate (draining delivery reports meanwhile: they free the budget the
        // workers wait for), so no chunk is half in the transaction.
        let exclusive = Arc::clone(&gate).write_owned();
        tokio::pin!(exclusive);
        let guard = loop {
            tokio::select! {
                guard = &mut exclusive => break guard,
                count = deliveries.recv_many(&mut events, 4096) => {
                    if count == 0 {
                        return Err(PipelineError::retryable("the producer stopped", Interruption::DeliveryChannelClosed));
                    }
                    delivered(&mut events, &policy)?;
                }
            }
        };
        while let Ok((chunk, records)) = sent.try_recv() {
            rows += records;
            read.push(chunk);
        }
        if !read.is_empty() {
            done.extend(read.iter().copied());
            let record = value(&done);
            let (producer, topic, key) = (
                Arc::clone(&producer),
                Arc::clone(&offsets_topic),
                Arc::clone(&key),
            );
            let last = last_round;
            let committed = tokio::task::spawn_blocking(move || {
                use crate::delivery::RecordSink;
                RecordSink::send_unreported(&*producer, &topic, &key, &record)?;
                crate::crash_point!("exactly_once::before_commit");
                RecordSink::commit_transaction(
                    &*producer,
                    crate::delivery::exactly_once::TRANSACTION_TIMEOUT,
                )?;
                if !last {
                    RecordSink::begin_transaction(&*producer)?;
                }
                Ok::<(), KafkaError>(())
            })
            .await
            .map_err(|e| PipelineError::retryable("the commit task failed", e))?;
            if let Err(error) = committed {
                return Err(crate::delivery::exactly_once::transaction_error(
                    "cannot commit the snapshot's Kafka transaction",
                    error,
                ));
            }
            crate::crash_point!("exactly_once::after_commit");
            chunks_done += read.len();
            finished(&read)?;
            read.clear();
            crate::crash_point!("snapshot::chunks_recorded");
            board.update(|s| {
                s.snapshot = Some(SnapshotStatus {
                    chunks_total,
                    chunks_done,
                    rows,
                });
            });
        } else if last_round {
            // Nothing left to commit: end the (empty) transaction begun after the last commit.
            let producer = Arc::clone(&producer);
            let aborted = tokio::task::spawn_blocking(move || {
                use rdkafka::producer::Producer as _;
                producer.abort_transaction(crate::delivery::exactly_once::TRANSACTION_TIMEOUT)
            })
            .await
            .map_err(|e| PipelineError::retryable("the abort task failed", e))?;
            aborted.map_err(|e| {
                crate::delivery::exactly_once::transaction_error(
                    "cannot end the snapshot's Kafka transaction",
                    e,
                )
            })?;
        }
        drop(guard);
        if last_round {
            break;
        }
    }
    if chunks_done < chunks_total {
        return Err(PipelineError::retryable(
            "the snapshot's workers ended before every chunk was read",
            Interruption::SnapshotIncomplete,
        ));
    }
    tracing::info!(
        rows,
        chunks = chunks_total,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot: done (exactly once); streaming from the consistent point"
    );
    Ok(rows)
}

/// Exactly once: applies the snapshot's delivery reports (counters; a refused record ends the
/// run, and its transaction can never commit: exactly once takes no dead-letter policy).
fn delivered(
    events: &mut Vec<DeliveryEvent>,
    policy: &RefusalPolicy<'_>,
) -> Result<(), PipelineError> {
    for event in events.drain(..) {
        match event {
            DeliveryEvent::Acked(delivery) => {
                delivery.table.records.increment(1);
                delivery.table.bytes.increment(u64::from(delivery.bytes));
            }
            DeliveryEvent::Failed { error, record, .. } => {
                let position = (policy.position_of)(&record);
                crate::delivery::refused_record(policy.delivery, &error, &record, &position)?;
                return Err(PipelineError::fatal(
                    format!(
                        "Kafka refused a snapshot record for topic {} ({position}): {error}",
                        record.topic
                    ),
                    "exactly once takes no dead-letter topic: a refused record aborts its transaction",
                ));
            }
            DeliveryEvent::EncodeFailed {
                reason, position, ..
            } => {
                return Err(PipelineError::fatal_with(
                    format!("cannot encode the snapshot row at {position}"),
                    "this is a bug in sluice: report it with the table's column types",
                    Unencodable(reason),
                ));
            }
            DeliveryEvent::Committed { .. } => {}
            DeliveryEvent::TransactionFailed { what, error } => {
                return Err(crate::delivery::exactly_once::transaction_error(
                    what, error,
                ));
            }
        }
    }
    Ok(())
}

/// Exactly once: produces `records` within the budget, inside the open transaction (their
/// fate is the transaction's, so their delivery reports only count). A record the producer
/// refuses at once (larger than its `message.max.bytes`) is reported on the delivery channel
/// like one the broker refuses. Returns how many were produced.
///
/// `transforms` apply to the records first; those they drop are not produced (nor counted).
/// A record they refuse stops the snapshot (reported as an encoding failure).
///
/// # Errors
///
/// None: refusals are reported, not returned (the `Result` is kept for the callers' `?`).
pub async fn publish(
    producer: &PipelineProducer,
    budget: &InFlightBudget,
    records: Vec<OutRecord>,
    table: &Arc<TableMetrics>,
    commit_unix_micros: i64,
    transforms: Option<&crate::transform::Chain>,
) -> Result<u64, PipelineError> {
    use rdkafka::producer::Producer as _;
    let records = match crate::transform::apply_all(transforms, records) {
        Ok(records) => records,
        Err(refused) => {
            let (error, record) = *refused;
            let _ = producer
                .context()
                .deliveries()
                .send(DeliveryEvent::EncodeFailed {
                    reason: error.to_string(),
                    topic: Arc::clone(&record.topic),
                    position: format!("a snapshot record of topic {}", record.topic),
                    description: Vec::new(),
                    deliveries: Vec::new(),
                    hint: Some(format!(
                        "fix [transforms.{}] for such records (e.g. a predicate that leaves them out)",
                        error.name
                    )),
                });
            return Ok(0);
        }
    };
    let count = records.len() as u64;
    for record in records {
        let permit = budget.acquire(record.len().max(1)).await;
        let delivery = Box::new(Delivery {
            seq: Seq(0),
            permit: Arc::new(permit),
            commit_unix_micros,
            table: Arc::clone(table),
            bytes: u32::try_from(record.len()).unwrap_or(u32::MAX),
            held: Held::NONE,
        });
        if let Err((error, record, delivery)) =
            crate::delivery::send(producer, record, delivery).await
        {
            // The receiver is gone only when the run ended.
            let _ = producer.context().deliveries().send(DeliveryEvent::Failed {
                error,
                record,
                delivery,
            });
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::Mutex;

    use super::*;
    use crate::delivery::{FailedChange, Origin, SendError};

    /// A producer that keeps what it is given; the test acknowledges it.
    #[derive(Default)]
    struct Kept(Mutex<Vec<(OutRecord, Box<Delivery>)>>);

    impl crate::delivery::RecordSink for Kept {
        fn try_send(&self, record: OutRecord, delivery: Box<Delivery>) -> Result<(), SendError> {
            self.0.lock().unwrap().push((record, delivery));
            Ok(())
        }
    }

    impl Kept {
        /// Waits (bounded) for `count` records and takes them, by their value.
        async fn take(&self, count: usize) -> Vec<(String, Box<Delivery>)> {
            for _ in 0..10_000 {
                {
                    let mut kept = self.0.lock().unwrap();
                    if kept.len() >= count {
                        return kept
                            .drain(..)
                            .map(|(r, d)| (String::from_utf8(r.value.unwrap()).unwrap(), d))
                            .collect();
                    }
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            panic!("fewer than {count} records were produced");
        }
    }

    /// Rows are `chunk:row` strings; each is one record.
    struct Rows(Arc<TableMetrics>);

    impl Encode<String> for Rows {
        fn encode(&self, row: &String, out: &mut Vec<OutRecord>) -> Origin {
            out.push(OutRecord {
                partition: None,
                topic: Arc::from("rows"),
                key: None,
                value: Some(row.clone().into_bytes()),
                headers: Vec::new(),
            });
            Origin {
                commit_unix_micros: 0,
                table: Arc::clone(&self.0),
            }
        }

        fn describe(&self, row: &String, reason: &str) -> FailedChange {
            FailedChange {
                reason: reason.to_owned(),
                topic: Arc::from("rows"),
                position: row.clone(),
                description: Vec::new(),
                origin: Origin {
                    commit_unix_micros: 0,
                    table: Arc::clone(&self.0),
                },
            }
        }
    }

    fn rows(names: &[&str]) -> ChunkMessage<String> {
        ChunkMessage::Changes(names.iter().map(|n| ((*n).to_owned(), 10, 1)).collect())
    }

    /// Two chunks read interleaved, acknowledged out of order: a chunk is recorded as finished
    /// only once its records and every record handed over before its end are acknowledged,
    /// and the snapshot ends once both are.
    #[tokio::test]
    async fn a_chunk_finishes_once_everything_before_its_end_is_acknowledged() {
        let producer = Arc::new(Kept::default());
        let (events, mut deliveries) = mpsc::unbounded_channel();
        let acks = events.clone();
        let budget = InFlightBudget::new(
            NonZeroU32::new(1 << 20).unwrap(),
            NonZeroU32::new(100).unwrap(),
        );
        let board = StatusBoard::new("chunks", "never");
        let shutdown = tokio_util::sync::CancellationToken::new();
        let (changes, received) = mpsc::channel(4);
        let mut workers = JoinSet::new();
        workers.spawn(async move {
            // Chunk 7's rows, chunk 3's, chunk 3 ends, chunk 7's last, chunk 7 ends.
            for message in [
                rows(&["7:a", "7:b"]),
                rows(&["3:a"]),
                ChunkMessage::Read { chunk: 3, rows: 1 },
                rows(&["7:c"]),
                ChunkMessage::Read { chunk: 7, rows: 3 },
            ] {
                changes.send(message).await.unwrap();
            }
            Ok(())
        });
        let finished = Arc::new(Mutex::new(Vec::<Vec<usize>>::new()));
        let recorded = Arc::clone(&finished);
        let table = Arc::new(TableMetrics::new("test.rows"));
        let config = crate::config::DeliveryConfig::default();
        let delivered = deliver(
            ChunkDelivery {
                producer: &producer,
                deliveries: &mut deliveries,
                events,
                budget: &budget,
                delivery: &config,
                position_of: |_| String::new(),
                transforms: None,
                shutdown: &shutdown,
                board: &board,
                chunks_total: 12,
                chunks_done: 10,
            },
            workers,
            received,
            move || Rows(Arc::clone(&table)),
            move |chunks| {
                recorded.lock().unwrap().push(chunks.to_vec());
                Ok(())
            },
        );
        let script = async {
            let mut kept = producer.take(4).await;
            let values: Vec<&str> = kept.iter().map(|(v, _)| v.as_str()).collect();
            assert_eq!(
                values,
                ["7:a", "7:b", "3:a", "7:c"],
                "in the order handed over"
            );
            let ack = |delivery| acks.send(DeliveryEvent::Acked(delivery)).unwrap();
            let settle = || tokio::time::sleep(Duration::from_millis(50));
            let seven_c = kept.pop().unwrap().1;
            let three_a = kept.pop().unwrap().1;
            let seven_b = kept.pop().unwrap().1;
            let seven_a = kept.pop().unwrap().1;
            // A status tick (every second) checkpoints while nothing is acknowledged.
            tokio::time::sleep(PROGRESS_TICK + Duration::from_millis(100)).await;
            assert!(finished.lock().unwrap().is_empty(), "{finished:?}");
            // Chunk 3's record: chunk 7's first two were handed over before chunk 3 ended.
            ack(three_a);
            ack(seven_c);
            settle().await;
            assert!(finished.lock().unwrap().is_empty(), "{finished:?}");
            ack(seven_a);
            settle().await;
            assert!(finished.lock().unwrap().is_empty(), "{finished:?}");
            ack(seven_b);
        };
        let (delivered, ()) = tokio::join!(delivered, script);
        assert_eq!(delivered.unwrap(), 4, "rows read");
        assert_eq!(*finished.lock().unwrap(), [vec![3, 7]], "recorded together");
        let snapshot = board.snapshot().snapshot.unwrap();
        assert_eq!((snapshot.chunks_done, snapshot.chunks_total), (12, 12));
    }
}

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
//! Exactly once ([`ChunkCommits`]), the same core runs Kafka transactions that hold whole
//! chunks only: each worker holds a gate shared while it reads a chunk; every transaction
//! interval the snapshot takes the gate exclusively (the chunks being read finish, no new one
//! starts), places a commit point there (the snapshot record listing every finished chunk,
//! written to the offsets topic in the transaction) and releases the gate. The chunks are
//! recorded as finished once that transaction has committed (the core acknowledges records
//! only at commits), so a crash never leaves a chunk half visible to `read_committed`
//! consumers nor recorded before its records.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::FutureExt;
use sluice_engine::InFlightBudget;
use tokio::sync::{OwnedRwLockWriteGuard, RwLock, mpsc};
use tokio::task::JoinSet;

use crate::delivery::exactly_once::{ChunksValue, Transactions};
use crate::delivery::{DeliveryCore, Encode, Intake, LoopContext, Position, Source};
use crate::error::{Interruption, PipelineError};
use crate::event::SnapshotMarker;
use crate::kafka::{DeliveryEvent, OutRecord};
use crate::runtime::metrics::PipelineMetrics;
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
    /// Exactly once: how chunks are committed (`None`: at least once).
    pub commits: Option<ChunkCommits>,
}

/// Exactly once: what [`deliver`] needs to commit chunks in transactions holding whole chunks.
pub struct ChunkCommits {
    /// Held shared by each worker while it reads a chunk (from before its first change is
    /// handed over until after its [`ChunkMessage::Read`]); taken exclusively for a commit
    /// point, so no chunk is ever half in a transaction.
    pub gate: Arc<RwLock<()>>,
    /// The compacted topic of committed positions.
    pub offsets_topic: Arc<str>,
    /// The snapshot record's key.
    pub key: Arc<[u8]>,
    /// The snapshot record's value for the finished chunks.
    pub value: ChunksValue,
    /// How often a commit point is placed (`delivery.transaction_interval_ms`).
    pub interval: Duration,
    /// The chunks committed as finished by earlier runs.
    pub done: Vec<usize>,
}

/// Exactly once: a [`ChunkSource`]'s commit points.
struct Commits {
    gate: Arc<RwLock<()>>,
    key: Arc<[u8]>,
    value: ChunksValue,
    /// Every chunk finished, committed or in the open transaction (the snapshot record's list).
    done: Vec<usize>,
    /// Chunks read since the last commit point.
    since_commit: usize,
    /// The exclusive hold on the gate being waited for.
    closing: Option<Pin<Box<dyn Future<Output = OwnedRwLockWriteGuard<()>> + Send>>>,
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
        commits,
    } = kafka;
    let started = Instant::now();
    let mut status_interval = PROGRESS_TICK;
    let mut transactions = None;
    let commits = commits.map(|c| {
        status_interval = c.interval.clamp(Duration::from_millis(1), PROGRESS_TICK);
        transactions = Some(Transactions {
            offsets_topic: c.offsets_topic,
            // The snapshot record is written at the commit points only, and a transaction
            // ends at those only.
            position_value: Arc::new(|_| Vec::new()),
            boundary: Some(Arc::new(|_| false)),
            interval: c.interval,
            max_bytes: u64::MAX,
        });
        Commits {
            gate: c.gate,
            key: c.key,
            value: c.value,
            done: c.done,
            since_commit: 0,
            closing: None,
        }
    });
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
        commits,
    };
    if !source.finished() {
        let (mut core, publisher) = match transactions {
            None => DeliveryCore::start(
                Arc::clone(producer),
                budget.clone(),
                ChunksRead(0),
                delivery,
                unshown_metrics(),
                events,
                position_of,
            ),
            Some(transactions) => DeliveryCore::start_exactly_once(
                Arc::clone(producer),
                budget.clone(),
                ChunksRead(0),
                delivery,
                unshown_metrics(),
                events,
                position_of,
                transactions,
            ),
        };
        core.set_transforms(transforms);
        let result = crate::delivery::run(
            &mut source,
            &mut core,
            deliveries,
            LoopContext {
                shutdown,
                status_interval,
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
    /// Exactly once: the commit points.
    commits: Option<Commits>,
}

/// What [`ChunkSource`] reads.
enum ChunkEvent<C> {
    /// A worker's message.
    Message(ChunkMessage<C>),
    /// Every worker dropped its sender.
    AllRead,
    /// A worker ended.
    Worker(Result<Result<(), PipelineError>, tokio::task::JoinError>),
    /// Exactly once: the gate is held exclusively (no chunk is being read).
    Closed(OwnedRwLockWriteGuard<()>),
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

    /// Takes a worker's message in: changes are admitted; a chunk read is a checkpoint after
    /// them (exactly once, it waits for the next commit point instead).
    fn take(&mut self, message: ChunkMessage<C>, intake: &mut Intake<C, ChunksRead>) {
        match message {
            ChunkMessage::Changes(changes) => {
                for (change, size, records) in changes {
                    intake.admit(change, size, records);
                }
            }
            ChunkMessage::Read { chunk, rows } => {
                self.read.push_back(chunk);
                self.handed_over += 1;
                self.rows += rows;
                match &mut self.commits {
                    Some(commits) => {
                        commits.done.push(chunk);
                        commits.since_commit += 1;
                    }
                    None => intake.checkpoint(ChunksRead(self.handed_over)),
                }
            }
        }
    }

    /// Exactly once, with the gate held exclusively (`_closed`) or every worker gone: takes in
    /// what the workers handed over before, then places a commit point (the snapshot record
    /// with every finished chunk) and the checkpoint of the chunks read since the last one.
    fn commit_point(
        &mut self,
        _closed: Option<OwnedRwLockWriteGuard<()>>,
        intake: &mut Intake<C, ChunksRead>,
    ) {
        loop {
            match self.changes.try_recv() {
                Ok(message) => self.take(message, intake),
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    self.changes_open = false;
                    break;
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
            }
        }
        let Some(commits) = self.commits.as_mut() else {
            return;
        };
        if commits.since_commit == 0 {
            return;
        }
        commits.since_commit = 0;
        intake.commit_point(vec![(commits.key.to_vec(), (commits.value)(&commits.done))]);
        intake.checkpoint(ChunksRead(self.handed_over));
    }

    /// Exactly once: once every worker is gone, the last chunks' commit point (no gate needed).
    fn commit_the_rest(&mut self, intake: &mut Intake<C, ChunksRead>) {
        if self.commits.is_some() && !self.changes_open && self.workers.is_empty() {
            self.commit_point(None, intake);
        }
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
        let closing = self.commits.as_mut().and_then(|c| c.closing.as_mut());
        let closed = async {
            match closing {
                Some(closing) => closing.await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            message = self.changes.recv(), if self.changes_open => match message {
                Some(message) => ChunkEvent::Message(message),
                None => ChunkEvent::AllRead,
            },
            Some(joined) = self.workers.join_next() => ChunkEvent::Worker(joined),
            guard = closed => ChunkEvent::Closed(guard),
        }
    }

    async fn on_message(
        &mut self,
        message: ChunkEvent<C>,
        intake: &mut Intake<C, ChunksRead>,
    ) -> Result<bool, PipelineError> {
        match message {
            ChunkEvent::Message(message) => self.take(message, intake),
            ChunkEvent::AllRead => {
                self.changes_open = false;
                self.check_complete()?;
                self.commit_the_rest(intake);
            }
            ChunkEvent::Worker(Ok(Ok(()))) => {
                self.check_complete()?;
                self.commit_the_rest(intake);
            }
            ChunkEvent::Worker(Ok(Err(error))) => return Err(error),
            ChunkEvent::Worker(Err(error)) => {
                return Err(PipelineError::retryable("a snapshot worker failed", error));
            }
            ChunkEvent::Closed(guard) => {
                if let Some(commits) = self.commits.as_mut() {
                    commits.closing = None;
                }
                self.commit_point(Some(guard), intake);
            }
        }
        Ok(false)
    }

    /// Exactly once, every transaction interval (the status timer's): asks for the gate
    /// exclusively, which [`Source::read`] then sees held. While reads are held back (the
    /// tracker full of records waiting for their commit), the workers' changes are taken in
    /// here, so that the chunks being read can finish and the commit point come.
    async fn before_checkpoint(
        &mut self,
        intake: &mut Intake<C, ChunksRead>,
    ) -> Result<bool, PipelineError> {
        self.log_progress();
        let Some(commits) = self.commits.as_mut() else {
            return Ok(false);
        };
        let closing = commits
            .closing
            .get_or_insert_with(|| Box::pin(Arc::clone(&commits.gate).write_owned()));
        if let Some(guard) = closing.as_mut().now_or_never() {
            commits.closing = None;
            self.commit_point(Some(guard), intake);
        } else {
            while let Ok(message) = self.changes.try_recv() {
                self.take(message, intake);
            }
        }
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

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;
    use std::sync::Mutex;

    use super::*;
    use crate::delivery::{FailedChange, Origin, SendError};
    use crate::kafka::Delivery;
    use crate::runtime::metrics::TableMetrics;

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
                commits: None,
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

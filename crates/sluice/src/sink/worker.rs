//! A sub-partition worker: one thread per (partition, sub-partition) that hands records to
//! its [`SubPartitionWriter`] (files: [`FilesWriter`]; PostgreSQL:
//! [`crate::sink::postgres::apply::PgWriter`]), in offset order, and reports each committed
//! epoch's records to the intake.
//!
//! The writer owns its open epoch (files: an [`Epoch`]; PostgreSQL: a batch). A record's queue
//! budget is released as soon as it is written into the epoch; its acknowledgement (the
//! sequence number in the partition's [`sluice_engine::AckTracker`]) is reported only when its
//! epoch commits, i.e. when the file that holds it has its final name or the transaction that
//! applied it has committed. A record that cannot be written follows the failure policy; a
//! failure of the destination ends the run (the supervisor restarts it from what committed).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SendError, Sender};
use std::thread::Thread;
use std::time::{Duration, Instant};

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use sluice_engine::{InFlightPermit, Seq, SeqList};

use crate::dead_letter;
use crate::error::PipelineError;
use crate::sink::config::{FailurePolicy, FileFormat};
use crate::sink::files::{
    CommitError, Epoch, FileSettings, OutputRecord, OutputRoot, Ownership, SubPartitionId,
    WriteError,
};
use crate::sink::metrics as m;
use crate::sink::parquet::ParquetRow;
use crate::sink::template::{PathTemplate, RenderInput, parse_object};
use crate::sink::typed::cells::Cell;
use crate::sink::typed::event::{SchemaCache, decode_event};
use crate::sink::typed::file::{Layout, Place, TypedRow};

/// A record as consumed: offsets and bytes, nothing decoded. Key, value and headers share one
/// allocation (the headers kept as their bytes, read only when the record is dead-lettered).
#[derive(Debug, Clone)]
pub struct RecordData {
    /// Offset.
    pub offset: i64,
    /// Kafka timestamp, Unix milliseconds.
    pub timestamp_ms: Option<i64>,
    /// The key's bytes, then the value's, then the headers' (see [`RecordData::headers`]).
    bytes: Vec<u8>,
    /// The key's length; `None`: no key.
    key_len: Option<usize>,
    /// Whether there is a value (`false`: a tombstone).
    has_value: bool,
    /// Where the headers start in `bytes`.
    headers_at: usize,
    /// When this record is the decoded form of another (Avro as JSON, [`crate::sink::avro`]):
    /// that one, and what its schema says.
    decoded: Option<Arc<Decoded>>,
}

/// Where the key, value and headers lie in a record's bytes ([`RecordData::parts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordLayout {
    key_len: Option<usize>,
    has_value: bool,
    headers_at: usize,
}

/// What a decoded record came from.
#[derive(Debug)]
struct Decoded {
    /// The record as consumed: what a dead-lettered record carries.
    original: RecordData,
    /// The kinds of the value's top-level fields (Parquet's columns).
    value_kinds: Option<Arc<[(String, crate::sink::parquet::Kind)]>>,
}

/// A header value's length that stands for a null value.
const NULL_HEADER: u32 = u32::MAX;

/// The first `len` bytes of `rest`, which moves past them.
fn take<'a>(rest: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    let (head, tail) = rest.split_at_checked(len)?;
    *rest = tail;
    Some(head)
}

impl RecordData {
    /// A record of `key` and `value` (`None` is a tombstone), without headers.
    pub fn new(
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: Option<i64>,
    ) -> Self {
        Self::with_headers(offset, key, value, timestamp_ms, |_| {})
    }

    /// A record of `key`, `value` and the headers `headers` hands to its callback (name bytes,
    /// value; as [`sluice_kafka_ffi::BatchMessage::for_each_header`] does).
    pub fn with_headers(
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: Option<i64>,
        headers: impl FnOnce(&mut dyn FnMut(&[u8], Option<&[u8]>)),
    ) -> Self {
        let mut bytes =
            Vec::with_capacity(key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len));
        bytes.extend_from_slice(key.unwrap_or_default());
        bytes.extend_from_slice(value.unwrap_or_default());
        let headers_at = bytes.len();
        headers(&mut |name: &[u8], value: Option<&[u8]>| {
            // Names and values are far below 4 GiB (Kafka's records are).
            bytes.extend_from_slice(&(name.len() as u32).to_le_bytes());
            bytes.extend_from_slice(name);
            match value {
                Some(value) => {
                    bytes.extend_from_slice(&(value.len() as u32).to_le_bytes());
                    bytes.extend_from_slice(value);
                }
                None => bytes.extend_from_slice(&NULL_HEADER.to_le_bytes()),
            }
        });
        Self {
            offset,
            timestamp_ms,
            bytes,
            key_len: key.map(<[u8]>::len),
            has_value: value.is_some(),
            headers_at,
            decoded: None,
        }
    }

    /// This record as the decoded form of `original`, whose value's top-level fields have
    /// `value_kinds`.
    #[must_use]
    pub fn decoded_from(
        mut self,
        original: RecordData,
        value_kinds: Option<Arc<[(String, crate::sink::parquet::Kind)]>>,
    ) -> Self {
        self.decoded = Some(Arc::new(Decoded {
            original,
            value_kinds,
        }));
        self
    }

    /// The record as consumed: itself, or what it was decoded from.
    pub fn original(&self) -> &RecordData {
        self.decoded.as_ref().map_or(self, |d| &d.original)
    }

    /// The kinds of the value's top-level fields, when its schema gives them.
    pub fn value_kinds(&self) -> Option<&[(String, crate::sink::parquet::Kind)]> {
        self.decoded.as_ref()?.value_kinds.as_deref()
    }

    /// The key's bytes.
    pub fn key(&self) -> Option<&[u8]> {
        self.key_len.map(|len| &self.bytes[..len])
    }

    /// The value's bytes; `None` is a tombstone.
    pub fn value(&self) -> Option<&[u8]> {
        self.has_value
            .then(|| &self.bytes[self.key_len.unwrap_or(0)..self.headers_at])
    }

    /// The headers, in order: name bytes and value (`None`: a null value).
    pub fn headers(&self) -> Vec<(&[u8], Option<&[u8]>)> {
        let mut out = Vec::new();
        let mut rest = &self.bytes[self.headers_at..];
        while !rest.is_empty() {
            let Some(len) = take(&mut rest, 4) else { break };
            let name_len = u32::from_le_bytes(len.try_into().unwrap_or_default()) as usize;
            let Some(name) = take(&mut rest, name_len) else {
                break;
            };
            let Some(len) = take(&mut rest, 4) else { break };
            let value_len = u32::from_le_bytes(len.try_into().unwrap_or_default());
            let value = if value_len == NULL_HEADER {
                None
            } else {
                let Some(value) = take(&mut rest, value_len as usize) else {
                    break;
                };
                Some(value)
            };
            out.push((name, value));
        }
        out
    }

    /// Key, value and header bytes, as the queue budget counts them.
    pub fn size(&self) -> usize {
        self.bytes.len()
    }

    /// The record's stored form, to keep it elsewhere without a `RecordData` of its own (a
    /// writer's arena) and to rebuild it with [`RecordData::from_parts`]: its bytes (key,
    /// value, headers) and their layout. `None` for a decoded record (its original is what a
    /// dead-lettered record carries).
    pub fn parts(&self) -> Option<(&[u8], RecordLayout)> {
        self.decoded.is_none().then_some((
            self.bytes.as_slice(),
            RecordLayout {
                key_len: self.key_len,
                has_value: self.has_value,
                headers_at: self.headers_at,
            },
        ))
    }

    /// The record of `bytes` laid out as `layout` (from [`RecordData::parts`]).
    pub fn from_parts(
        offset: i64,
        timestamp_ms: Option<i64>,
        bytes: &[u8],
        layout: RecordLayout,
    ) -> Self {
        Self {
            offset,
            timestamp_ms,
            bytes: bytes.to_vec(),
            key_len: layout.key_len,
            has_value: layout.has_value,
            headers_at: layout.headers_at,
            decoded: None,
        }
    }
}

/// What the intake sends a worker.
#[derive(Debug)]
pub enum WorkerMsg {
    /// Records to write, in offset order, with their tracker sequences and their queue
    /// budget share (given back when the batch is written).
    Records(Vec<(RecordData, Seq)>, InFlightPermit),
    /// Commit the open epoch now and go on (a pause through the admin API).
    Flush,
    /// Commit the open epoch and stop (revocation, shutdown).
    Finish,
    /// Drop the open epoch and stop.
    Abort,
}

/// What a worker reports to the intake.
#[derive(Debug)]
pub enum WorkerEvent {
    /// An epoch committed: these records are durable.
    Committed {
        /// Topic.
        topic: Arc<str>,
        /// Partition.
        partition: i32,
        /// The partition assignment's generation.
        generation: u64,
        /// The records' tracker sequences.
        seqs: SeqList,
    },
    /// The worker failed; the run ends with this error.
    Failed(PipelineError),
    /// The worker's thread is ending.
    Stopped {
        /// Topic.
        topic: Arc<str>,
        /// Partition.
        partition: i32,
        /// The partition assignment's generation.
        generation: u64,
    },
}

/// Why a record could not be written.
#[derive(Debug)]
pub enum WriteFailure {
    /// The record cannot be written (the failure policy decides).
    Record(String),
    /// The destination failed: the run ends (and restarts from what committed).
    Run(PipelineError),
}

/// The writer of one sub-partition: it appends records to an open epoch, commits the epoch
/// atomically (then its records are durable) and is created from what a recovery of its
/// sub-partition found (see `Destination` in [`crate::sink`]).
pub trait SubPartitionWriter: Send {
    /// Appends one record to the open epoch.
    ///
    /// # Errors
    ///
    /// [`WriteFailure`].
    fn write(&mut self, data: &RecordData) -> Result<(), WriteFailure>;
    /// Counts a record that has no output (dead-lettered, skipped) into the open epoch.
    fn note(&mut self, offset: i64);
    /// Records in the open epoch.
    fn records(&self) -> u64;
    /// When the open epoch took its first record.
    fn opened_at(&self) -> Option<Instant>;
    /// Whether the open epoch must commit now (its size limits).
    fn is_full(&self) -> bool;
    /// Whether the open epoch must commit once the records at hand are written, though more
    /// keep coming: when it is [`SubPartitionWriter::max_age`] old. (The worker's idle wait
    /// commits it at that age too, but under a backlog its queue is never empty: without this
    /// an epoch would grow to its size limits, and its partition's unacknowledged records —
    /// the tracker's entries, the worker's seqs — with it.)
    fn due_after_batch(&self) -> bool {
        self.opened_at()
            .is_some_and(|opened| opened.elapsed() >= self.max_age())
    }
    /// The age at which an open epoch commits.
    fn max_age(&self) -> Duration;
    /// Commits the open epoch: its records are durable afterwards.
    ///
    /// # Errors
    ///
    /// The run ends.
    fn commit(&mut self) -> Result<(), PipelineError>;
    /// Drops the open epoch without cleaning anything up (another worker may own the names).
    fn forget(&mut self);
    /// Drops the open epoch and what it staged.
    fn discard(&mut self);
    /// What closes this writer's hold on its destination (a PostgreSQL session) when the
    /// intake gives up on its worker; `None`: nothing to close.
    fn reclaimer(&self) -> Option<Arc<dyn Reclaim>> {
        None
    }
}

/// Closes what a writer holds at its destination, so that a worker blocked on it (a statement
/// waiting on someone's lock) returns, and the destination frees its side (the server's
/// backend). Called on the intake thread while the worker may be blocked; never blocks long.
pub trait Reclaim: Send + Sync + std::fmt::Debug {
    /// Closes it; the worker's next use of it fails.
    fn reclaim(&self);
}

/// Worker threads the intake gave up on that still run (detached: nothing joins them), over
/// every run of a pipeline; `sluice_sink_abandoned_workers` sums them over the process.
#[derive(Debug, Default)]
pub struct AbandonedWorkers {
    alive: AtomicUsize,
}

impl AbandonedWorkers {
    /// Detached worker threads still running.
    pub fn alive(&self) -> usize {
        self.alive.load(Ordering::Acquire)
    }

    fn detached(&self) {
        self.alive.fetch_add(1, Ordering::AcqRel);
        m::abandoned_workers().increment(1.0);
    }

    fn ended(&self) {
        self.alive.fetch_sub(1, Ordering::AcqRel);
        m::abandoned_workers().decrement(1.0);
    }
}

/// A worker thread's life, as the intake and the thread itself see it.
const RUNNING: u8 = 0;
/// The intake stopped waiting for it (counted in [`AbandonedWorkers`]).
const DETACHED: u8 = 1;
/// The thread is done.
const ENDED: u8 = 2;

/// Held by a worker thread: when it ends, a detached thread leaves the abandoned count.
struct ThreadEnd {
    life: Arc<AtomicU8>,
    tally: Arc<AbandonedWorkers>,
}

impl Drop for ThreadEnd {
    fn drop(&mut self) {
        if self.life.swap(ENDED, Ordering::AcqRel) == DETACHED {
            self.tally.ended();
        }
    }
}

/// What every worker does with a failing record.
#[derive(Debug, Clone, Copy)]
pub struct FailureSettings {
    /// Failure policy.
    pub policy: FailurePolicy,
    /// Attempts with `policy = Retry`.
    pub retry_max_attempts: u32,
    /// First retry delay.
    pub retry_backoff: Duration,
}

/// Settings every files writer shares.
#[derive(Debug)]
pub struct WorkerSettings {
    /// File format and compression.
    pub files: FileSettings,
    /// Directory per record.
    pub template: PathTemplate,
    /// Roll after this many records.
    pub roll_records: u64,
    /// Roll when a file reaches this size.
    pub roll_bytes: u64,
    /// Roll when the epoch is this old.
    pub roll_interval: Duration,
    /// Skip null values instead of failing them.
    pub skip_tombstones: bool,
    /// Parquet columns typed from each record's Connect schema (`parquet_columns = "typed"`).
    pub typed_columns: bool,
}

/// The dead-letter topic's producer.
pub struct DeadLetter {
    /// Producer.
    pub producer: FutureProducer,
    /// Topic.
    pub topic: String,
    /// The runtime the delivery futures run on.
    pub runtime: tokio::runtime::Handle,
    /// `delivery.dead_letter_max_value_bytes`: keys and values are cut to it.
    pub max_value_bytes: u32,
}

impl std::fmt::Debug for DeadLetter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeadLetter")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl DeadLetter {
    /// Sends the record's dead letter ([`dead_letter::build`]: original key, value and
    /// headers, the reason and where it was read); returns once Kafka has acknowledged it.
    ///
    /// # Errors
    ///
    /// Retryable when Kafka does not take the record.
    pub fn send(
        &self,
        topic: &str,
        partition: i32,
        data: &RecordData,
        reason: &str,
    ) -> Result<(), PipelineError> {
        // The bytes as consumed, not a decoded form.
        let data = data.original();
        let original = data.headers();
        let names: Vec<std::borrow::Cow<'_, str>> = original
            .iter()
            .map(|(name, _)| String::from_utf8_lossy(name))
            .collect();
        let built = dead_letter::build(
            data.key(),
            data.value(),
            names
                .iter()
                .zip(&original)
                .map(|(name, (_, value))| (&**name, *value)),
            dead_letter::Origin::Consumed {
                topic,
                partition,
                offset: data.offset,
            },
            reason,
            self.max_value_bytes,
        );
        let mut headers = OwnedHeaders::new_with_capacity(built.headers.len());
        for (name, value) in &built.headers {
            headers = headers.insert(Header {
                key: name,
                value: value.as_deref(),
            });
        }
        let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic).headers(headers);
        if let Some(key) = &built.key {
            record = record.key(key);
        }
        if let Some(value) = &built.value {
            record = record.payload(value);
        }
        self.runtime
            .block_on(self.producer.send(record, Duration::from_secs(30)))
            .map(|_| ())
            .map_err(|(error, _)| {
                PipelineError::retryable(
                    format!("cannot write to the dead-letter topic {}", self.topic),
                    error,
                )
            })?;
        metrics::counter!(crate::runtime::metrics::DEAD_LETTERED).increment(1);
        Ok(())
    }
}

/// The intake's handle on a worker.
#[derive(Debug)]
pub struct WorkerHandle {
    /// Sends records and commands.
    pub tx: Sender<WorkerMsg>,
    /// Milliseconds since `clock` at which the current commit started; 0 otherwise.
    pub busy_since_ms: Arc<AtomicU64>,
    /// The offset of the record being processed; -1 during a commit or when idle.
    pub busy_offset: Arc<AtomicI64>,
    /// The intake's own note of `busy_offset`: the offset, and when (ms since its clock) it
    /// first saw the worker on it. The intake times records itself, so that the worker
    /// reads no clock per record (a clock read per record was 4 % of the files sink's CPU).
    pub seen: (i64, u64),
    /// Set when the intake gives up on the worker: it must not commit any more.
    pub abandoned: Arc<AtomicBool>,
    /// Closes the writer's hold on its destination (see [`Reclaim`]).
    pub reclaim: Option<Arc<dyn Reclaim>>,
    /// The thread.
    pub thread: Option<std::thread::JoinHandle<()>>,
    /// Running, detached or ended (this module's `RUNNING`, `DETACHED`, `ENDED`).
    pub life: Arc<AtomicU8>,
    /// Where a detached thread is counted.
    pub tally: Arc<AbandonedWorkers>,
}

impl WorkerHandle {
    /// Gives up on the worker: it must not commit any more, is asked to stop, and its hold on
    /// the destination is closed (a worker blocked on it returns with an error and ends).
    pub fn give_up(&self) {
        self.abandoned.store(true, Ordering::Release);
        let _ = self.tx.send(WorkerMsg::Abort);
        if let Some(reclaim) = &self.reclaim {
            reclaim.reclaim();
        }
    }

    /// Whether the thread is still running (not yet joined or detached, and not ended).
    pub fn running(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// Joins the thread if it has ended; otherwise detaches it, counted in the pipeline's
    /// [`AbandonedWorkers`] until it ends. Returns whether it was detached.
    pub fn join_or_detach(&mut self) -> bool {
        let Some(thread) = self.thread.take() else {
            return false;
        };
        if self
            .life
            .compare_exchange(RUNNING, DETACHED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            self.tally.detached();
            tracing::warn!(
                thread = thread.thread().name().unwrap_or("?"),
                alive = self.tally.alive(),
                "a sink worker does not end: its thread is left running, counted in sluice_sink_abandoned_workers"
            );
            return true;
        }
        let _ = thread.join();
        false
    }
}

/// Everything a worker needs.
pub struct Worker {
    id: SubPartitionId,
    topic: Arc<str>,
    generation: u64,
    failure: FailureSettings,
    intake: IntakeLink,
    dead_letter: Option<Arc<DeadLetter>>,
    writer: Box<dyn SubPartitionWriter>,
    /// The open epoch's tracker sequences (about a byte each: see [`SeqList`]).
    seqs: SeqList,
    busy_since_ms: Arc<AtomicU64>,
    busy_offset: Arc<AtomicI64>,
    abandoned: Arc<AtomicBool>,
    clock: Instant,
}

/// A worker's way back to the intake thread: its reports, and a wake-up. The intake parks
/// when it has nothing to move (no records in its partition queues, or no room in their
/// budgets), so a worker that gives budget back or reports wakes it.
#[derive(Clone)]
pub struct IntakeLink {
    events: Sender<WorkerEvent>,
    thread: Thread,
}

impl IntakeLink {
    /// Reports go to `events`; `thread` is the intake thread, unparked after each.
    pub fn new(events: Sender<WorkerEvent>, thread: Thread) -> Self {
        Self { events, thread }
    }

    /// The intake thread.
    pub fn thread(&self) -> &Thread {
        &self.thread
    }

    /// Sends a report and wakes the intake.
    fn send(&self, event: WorkerEvent) -> Result<(), SendError<WorkerEvent>> {
        let sent = self.events.send(event);
        self.wake();
        sent
    }

    /// Wakes the intake (an atomic swap unless it is parked).
    fn wake(&self) {
        self.thread.unpark();
    }
}

/// Starts a worker thread.
///
/// # Errors
///
/// When the thread cannot be spawned.
#[allow(clippy::too_many_arguments)]
pub fn spawn(
    id: SubPartitionId,
    generation: u64,
    writer: Box<dyn SubPartitionWriter>,
    failure: FailureSettings,
    intake: IntakeLink,
    dead_letter: Option<Arc<DeadLetter>>,
    clock: Instant,
    tally: Arc<AbandonedWorkers>,
) -> std::io::Result<WorkerHandle> {
    let (tx, rx) = std::sync::mpsc::channel();
    let reclaim = writer.reclaimer();
    let life = Arc::new(AtomicU8::new(RUNNING));
    let end = ThreadEnd {
        life: Arc::clone(&life),
        tally: Arc::clone(&tally),
    };
    let busy_since_ms = Arc::new(AtomicU64::new(0));
    let busy_offset = Arc::new(AtomicI64::new(-1));
    let abandoned = Arc::new(AtomicBool::new(false));
    let worker = Worker {
        topic: Arc::from(id.topic.as_str()),
        id,
        generation,
        failure,
        intake,
        dead_letter,
        writer,
        seqs: SeqList::new(),
        busy_since_ms: Arc::clone(&busy_since_ms),
        busy_offset: Arc::clone(&busy_offset),
        abandoned: Arc::clone(&abandoned),
        clock,
    };
    let name = format!("sink-{}-{}", worker.id.partition, worker.id.sub);
    // The worker's log lines carry its sub-partition through this span, under the intake's.
    let span = tracing::info_span!(
        "sink_worker",
        topic = %worker.id.topic,
        partition = worker.id.partition,
        sub = worker.id.sub
    );
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let _entered = span.entered();
        // Dropped after the worker (and its writer's connection): then the thread counts
        // as ended.
        let _end = end;
        worker.run(&rx);
    })?;
    Ok(WorkerHandle {
        tx,
        busy_since_ms,
        busy_offset,
        seen: (-1, 0),
        abandoned,
        reclaim,
        thread: Some(thread),
        life,
        tally,
    })
}

impl Worker {
    fn run(mut self, rx: &Receiver<WorkerMsg>) {
        if let Err(error) = self.work(rx) {
            if self.abandoned.load(Ordering::Acquire) {
                self.writer.forget();
            } else {
                self.writer.discard();
            }
            let _ = self.intake.send(WorkerEvent::Failed(error));
        }
        let _ = self.intake.send(WorkerEvent::Stopped {
            topic: Arc::clone(&self.topic),
            partition: self.id.partition,
            generation: self.generation,
        });
    }

    fn work(&mut self, rx: &Receiver<WorkerMsg>) -> Result<(), PipelineError> {
        loop {
            let wait = match self.writer.opened_at() {
                Some(opened) => self.writer.max_age().saturating_sub(opened.elapsed()),
                None => Duration::from_secs(1),
            };
            match rx.recv_timeout(wait) {
                Ok(WorkerMsg::Records(batch, permit)) => {
                    for (data, seq) in batch {
                        // The intake times a record from when it first sees its offset here.
                        self.busy_offset.store(data.offset, Ordering::Relaxed);
                        self.handle(&data)?;
                        self.busy_offset.store(-1, Ordering::Relaxed);
                        if self.abandoned.load(Ordering::Acquire) {
                            // Timed out on this record: the intake has moved on without us.
                            self.writer.forget();
                            return Ok(());
                        }
                        self.seqs.push(seq);
                        if self.writer.is_full() {
                            self.set_busy(true);
                            self.commit()?;
                            self.set_busy(false);
                        }
                    }
                    // The intake may be parked on a full budget: this batch's share is free.
                    drop(permit);
                    self.intake.wake();
                    if self.writer.due_after_batch() {
                        self.set_busy(true);
                        self.commit()?;
                        self.set_busy(false);
                    }
                }
                Ok(WorkerMsg::Flush) => {
                    self.set_busy(true);
                    self.commit()?;
                    self.set_busy(false);
                }
                Ok(WorkerMsg::Finish) => {
                    self.set_busy(true);
                    self.commit()?;
                    self.set_busy(false);
                    return Ok(());
                }
                Ok(WorkerMsg::Abort) | Err(RecvTimeoutError::Disconnected) => {
                    // The next recovery of this sub-partition deletes the staged files; an
                    // abandoned worker must not delete names a new worker may use again.
                    self.writer.forget();
                    return Ok(());
                }
                Err(RecvTimeoutError::Timeout) => {
                    let max_age = self.writer.max_age();
                    if self
                        .writer
                        .opened_at()
                        .is_some_and(|opened| opened.elapsed() >= max_age)
                    {
                        self.set_busy(true);
                        self.commit()?;
                        self.set_busy(false);
                    }
                }
            }
        }
    }

    fn set_busy(&self, busy: bool) {
        let value = if busy {
            (self.clock.elapsed().as_millis() as u64).max(1)
        } else {
            0
        };
        self.busy_since_ms.store(value, Ordering::Relaxed);
    }

    fn commit(&mut self) -> Result<(), PipelineError> {
        if self.abandoned.load(Ordering::Acquire) {
            // The intake gave up on this worker (revocation deadline, processing timeout):
            // the next owner rewrites these records, so this epoch must never commit.
            self.writer.forget();
            self.seqs.clear();
            return Ok(());
        }
        self.writer.commit()?;
        if !self.seqs.is_empty() {
            let _ = self.intake.send(WorkerEvent::Committed {
                topic: Arc::clone(&self.topic),
                partition: self.id.partition,
                generation: self.generation,
                seqs: std::mem::take(&mut self.seqs),
            });
        }
        Ok(())
    }

    /// Writes one record, applying the failure policy.
    fn handle(&mut self, data: &RecordData) -> Result<(), PipelineError> {
        #[cfg(feature = "failpoints")]
        hang_hook(data);
        let mut attempt = 1;
        loop {
            let reason = match self.writer.write(data) {
                Ok(()) => return Ok(()),
                Err(WriteFailure::Run(error)) => return Err(error),
                Err(WriteFailure::Record(reason)) => reason,
            };
            let what = format!(
                "record {}/{} offset {} cannot be written: {reason}",
                self.id.topic, self.id.partition, data.offset
            );
            match self.failure.policy {
                FailurePolicy::Retry if attempt < self.failure.retry_max_attempts => {
                    tracing::warn!(
                        offset = data.offset,
                        attempt,
                        reason = %reason,
                        "record failed; retrying"
                    );
                    let delay = self.failure.retry_backoff * 2u32.saturating_pow(attempt - 1);
                    std::thread::sleep(delay.min(Duration::from_secs(30)));
                    attempt += 1;
                }
                FailurePolicy::Stop | FailurePolicy::Retry => {
                    return Err(PipelineError::fatal(
                        format!("{what} (after {attempt} attempt(s))"),
                        "fix the record's producer or the path template, or set delivery.on_failure = \"dead_letter\" with a delivery.dead_letter_topic",
                    ));
                }
                FailurePolicy::DeadLetter => {
                    let Some(dead_letter) = &self.dead_letter else {
                        return Err(PipelineError::fatal(what, "set delivery.dead_letter_topic"));
                    };
                    tracing::warn!(
                        offset = data.offset,
                        reason = %reason,
                        dead_letter_topic = %dead_letter.topic,
                        "record sent to the dead-letter topic"
                    );
                    dead_letter.send(&self.id.topic, self.id.partition, data, &reason)?;
                    self.writer.note(data.offset);
                    return Ok(());
                }
            }
        }
    }
}

/// The files writer: a sub-partition's records in epochs of files (see [`crate::sink::files`]).
pub struct FilesWriter {
    id: SubPartitionId,
    topic_json: String,
    root: Arc<OutputRoot>,
    settings: Arc<WorkerSettings>,
    epoch: Epoch,
    /// The directory of the record being written (one buffer for every record).
    dir: String,
    /// Whether a value's top-level fields are split out: for Parquet's columns or a path
    /// template that names a field. Otherwise a value is only checked to be JSON.
    split_fields: bool,
    /// `parquet_columns = "typed"`: the last schema seen and its layout.
    typed: Option<TypedState>,
}

/// A record's typed row: its file layout and its cells.
type LaidOut = (Arc<Layout>, Vec<Cell>);

/// The typed Parquet columns of a writer's records (`parquet_columns = "typed"`).
#[derive(Default)]
struct TypedState {
    schemas: SchemaCache,
    layout: Option<Arc<Layout>>,
}

impl TypedState {
    /// `value` as its layout and cells; `None`: no row (a null payload, which goes as a
    /// tombstone).
    fn row(&mut self, value: &[u8], at: &Place<'_>) -> Result<Option<LaidOut>, String> {
        let event = decode_event(value, &mut self.schemas)?;
        if event.null_payload {
            return Ok(None);
        }
        let Some((_, row)) = &event.schema else {
            return Err(
                "the value has no Connect schema: sink.files.parquet_columns = \"typed\" needs JSON with schemas ({\"schema\":…,\"payload\":…}: sluice's kafka.events.format = \"json_with_schemas\", Connect's value.converter.schemas.enable=true)".into(),
            );
        };
        let envelope = event.op.is_some();
        let layout = match &self.layout {
            Some(layout) if layout.is_for(row, envelope) => Arc::clone(layout),
            _ => {
                let layout = Arc::new(Layout::new(row, envelope)?);
                self.layout = Some(Arc::clone(&layout));
                layout
            }
        };
        let cells = layout.cells(&event, at)?;
        Ok(Some((layout, cells)))
    }
}

impl FilesWriter {
    /// The writer of `id` after a recovery whose last committed epoch was `last_epoch`, whose
    /// state lists `skipped` offsets and whose claim gave `ownership`.
    pub fn new(
        id: SubPartitionId,
        last_epoch: u64,
        skipped: Vec<i64>,
        ownership: Ownership,
        root: Arc<OutputRoot>,
        settings: Arc<WorkerSettings>,
    ) -> Self {
        let epoch = Epoch::new(&root, id.clone(), last_epoch, skipped, ownership);
        let typed = (settings.typed_columns && settings.files.format == FileFormat::Parquet)
            .then(TypedState::default);
        let split_fields = (settings.files.format == FileFormat::Parquet && typed.is_none())
            || settings.template.uses_fields();
        Self {
            topic_json: serde_json::to_string(&id.topic).unwrap_or_else(|_| "\"\"".into()),
            id,
            root,
            settings,
            epoch,
            dir: String::new(),
            split_fields,
            typed,
        }
    }

    fn io_error(&self, error: impl std::error::Error + Send + Sync + 'static) -> PipelineError {
        PipelineError::retryable(
            format!(
                "cannot write files of {}/{} sub-partition {} under {}",
                self.id.topic,
                self.id.partition,
                self.id.sub,
                self.root.describe()
            ),
            error,
        )
    }

    /// One attempt: parse once, render the directory, append to the open file.
    fn write_file(&mut self, data: &RecordData) -> Result<(), WriteError> {
        let Some(value) = data.value() else {
            if self.settings.skip_tombstones {
                self.epoch.note(data.offset);
                return Ok(());
            }
            return Err(WriteError::Record(
                "null value (tombstone) and sink.files.skip_tombstones = false".into(),
            ));
        };
        let typed = match &mut self.typed {
            Some(state) => {
                let at = Place {
                    topic: &self.id.topic,
                    partition: self.id.partition,
                    offset: data.offset,
                    timestamp_ms: data.timestamp_ms,
                    key: data.key(),
                };
                match state.row(value, &at).map_err(WriteError::Record)? {
                    Some(row) => Some(row),
                    // A null payload: a delete unwrapped in `tombstone` mode.
                    None if self.settings.skip_tombstones => {
                        self.epoch.note(data.offset);
                        return Ok(());
                    }
                    None => {
                        return Err(WriteError::Record(
                            "null payload (ExtractNewRecordState's delete in `tombstone` mode) and sink.files.skip_tombstones = false".into(),
                        ));
                    }
                }
            }
            None => None,
        };
        // simdutf8: vectorised; std's check was ~2.5 % of a worker's time.
        let text = simdutf8::basic::from_utf8(value)
            .map_err(|_| WriteError::Record("value is not UTF-8, so not JSON".into()))?;
        let invalid =
            |e: serde_json::Error| WriteError::Record(format!("value is not valid JSON: {e}"));
        let object = text.trim_start().starts_with('{');
        let fields = if object && self.split_fields {
            Some(parse_object(text).map_err(invalid)?)
        } else if typed.is_some() {
            // Parsed whole into its typed row already; a typed file reads nothing else of it.
            None
        } else {
            // Checked without keeping anything: no list of fields to build.
            serde_json::from_str::<serde::de::IgnoredAny>(text).map_err(invalid)?;
            // A JSON Lines line splices an object's fields after the metadata: `Some` (here
            // empty: the fields were not split out) marks the value as an object.
            object.then(Vec::new)
        };
        self.settings
            .template
            .render(
                &RenderInput {
                    topic: &self.id.topic,
                    partition: self.id.partition,
                    timestamp_ms: data.timestamp_ms,
                    fields: fields.as_deref().unwrap_or_default(),
                },
                &mut self.dir,
            )
            .map_err(WriteError::Record)?;
        let record = OutputRecord {
            row: ParquetRow {
                topic: &self.id.topic,
                partition: self.id.partition,
                offset: data.offset,
                timestamp_ms: data.timestamp_ms,
                key: data.key(),
                value: text,
                fields: fields.as_deref(),
                kinds: data.value_kinds(),
            },
            topic_json: &self.topic_json,
            typed: typed
                .as_ref()
                .map(|(layout, cells)| TypedRow { layout, cells }),
        };
        self.epoch.write(&self.dir, &record, &self.settings.files)?;
        Ok(())
    }
}

impl SubPartitionWriter for FilesWriter {
    fn write(&mut self, data: &RecordData) -> Result<(), WriteFailure> {
        match self.write_file(data) {
            Ok(()) => Ok(()),
            Err(WriteError::Record(reason)) => Err(WriteFailure::Record(reason)),
            Err(WriteError::Io(error)) => Err(WriteFailure::Run(self.io_error(error))),
        }
    }

    fn note(&mut self, offset: i64) {
        self.epoch.note(offset);
    }

    fn records(&self) -> u64 {
        self.epoch.records()
    }

    fn opened_at(&self) -> Option<Instant> {
        self.epoch.opened_at()
    }

    fn is_full(&self) -> bool {
        self.epoch.records() >= self.settings.roll_records
            || self.epoch.largest_file_bytes() >= self.settings.roll_bytes
    }

    fn max_age(&self) -> Duration {
        self.settings.roll_interval
    }

    fn commit(&mut self) -> Result<(), PipelineError> {
        let records = self.epoch.records();
        let files = match self.epoch.commit(&self.root, &self.settings.files) {
            Ok(files) => files,
            Err(CommitError::Store(error)) => return Err(self.io_error(error)),
            Err(CommitError::Refused(refused)) => {
                tracing::warn!(
                    epoch = refused.epoch,
                    owner = refused.generation,
                    reason = %refused.reason,
                    cleaned = refused.cleaned,
                    "zombie commit refused: the sub-partition has a newer owner"
                );
                return Err(PipelineError::retryable(
                    format!(
                        "{}/{} sub-partition {} lost its partition: a newer owner took it over",
                        self.id.topic, self.id.partition, self.id.sub
                    ),
                    refused,
                ));
            }
        };
        if records > 0 {
            m::records_committed().increment(records);
            m::files_committed().increment(files.len() as u64);
            tracing::debug!(records, files = files.len(), "epoch committed");
        }
        Ok(())
    }

    fn forget(&mut self) {
        self.epoch.forget();
    }

    fn discard(&mut self) {
        self.epoch.discard();
    }
}

/// Test hook, compiled in only with the `failpoints` feature (see [`crate::failpoint`]): with
/// `SLUICE_TEST_HANG_ON_VALUE=TEXT` in the environment, a worker given a record whose value
/// contains `TEXT` hangs on it for an hour (the integration tests use it to exercise
/// `delivery.processing_timeout_ms`).
#[cfg(feature = "failpoints")]
fn hang_hook(data: &RecordData) {
    use std::sync::OnceLock;
    static NEEDLE: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    let needle = NEEDLE.get_or_init(|| {
        std::env::var("SLUICE_TEST_HANG_ON_VALUE")
            .ok()
            .filter(|v| !v.is_empty())
            .map(String::into_bytes)
    });
    if let (Some(needle), Some(value)) = (needle, data.value())
        && value.windows(needle.len()).any(|w| w == needle)
    {
        tracing::warn!(
            offset = data.offset,
            "SLUICE_TEST_HANG_ON_VALUE: hanging on this record"
        );
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The sub-partition of a record: a hash of its key (so one key always goes to one worker and
/// keeps its order), or its offset when it has no key (no order to keep).
pub fn sub_partition(key: Option<&[u8]>, offset: i64, sub_partitions: u32) -> u32 {
    let n = u64::from(sub_partitions.max(1));
    match key {
        // FNV-1a, 64 bits: fast, stable across versions and platforms.
        Some(key) => {
            let hash = key.iter().fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
                (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
            });
            (hash % n) as u32
        }
        None => (offset.unsigned_abs() % n) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::sink::config::FileCompression;
    use sluice_engine::InFlightBudget;
    use std::num::NonZeroU32;

    fn settings() -> Arc<WorkerSettings> {
        settings_with(Duration::from_secs(60))
    }

    fn settings_with(roll_interval: Duration) -> Arc<WorkerSettings> {
        Arc::new(WorkerSettings {
            files: FileSettings {
                format: FileFormat::Jsonl,
                compression: FileCompression::None,
                metadata: true,
                parquet_row_group_records: 100,
                parquet_row_group_bytes: 1 << 20,
            },
            template: PathTemplate::parse("{topic}/d={created:%Y-%m-%d}").unwrap(),
            roll_records: 1_000,
            roll_bytes: 1 << 30,
            roll_interval,
            skip_tombstones: true,
            typed_columns: false,
        })
    }

    fn failure(policy: FailurePolicy) -> FailureSettings {
        FailureSettings {
            policy,
            retry_max_attempts: 3,
            retry_backoff: Duration::from_millis(1),
        }
    }

    /// Runs a worker over `values` (None = tombstone), then asks it to finish; returns its
    /// events and the root.
    fn run_worker(
        name: &str,
        policy: FailurePolicy,
        values: &[Option<&str>],
    ) -> (Vec<WorkerEvent>, std::path::PathBuf) {
        run_worker_with(name, policy, values, settings())
    }

    /// A files worker of sub-partition t/0/0 writing under a fresh directory, the calling
    /// thread as its intake; returns it, its events and the directory.
    fn start_worker(
        name: &str,
        policy: FailurePolicy,
        settings: Arc<WorkerSettings>,
    ) -> (WorkerHandle, Receiver<WorkerEvent>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("sluice-worker-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = Arc::new(OutputRoot::open(&dir, 1).unwrap());
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        let id = SubPartitionId {
            topic: "t".into(),
            partition: 0,
            sub: 0,
        };
        let (_, ownership) = root.recover(&id).unwrap();
        let writer = FilesWriter::new(id.clone(), 0, Vec::new(), ownership, root, settings);
        let worker = spawn(
            id,
            1,
            Box::new(writer),
            failure(policy),
            IntakeLink::new(events_tx, std::thread::current()),
            None,
            Instant::now(),
            Arc::default(),
        )
        .unwrap();
        (worker, events_rx, dir)
    }

    fn run_worker_with(
        name: &str,
        policy: FailurePolicy,
        values: &[Option<&str>],
        settings: Arc<WorkerSettings>,
    ) -> (Vec<WorkerEvent>, std::path::PathBuf) {
        let (mut worker, events_rx, dir) = start_worker(name, policy, settings);
        let budget = InFlightBudget::new(
            NonZeroU32::new(1 << 20).unwrap(),
            NonZeroU32::new(100).unwrap(),
        );
        let mut tracker = sluice_engine::AckTracker::new(None);
        for (offset, value) in values.iter().enumerate() {
            let seq = tracker.push(Some(offset as i64 + 1)).unwrap();
            let data =
                RecordData::new(offset as i64, Some(b"k"), value.map(str::as_bytes), Some(0));
            let permit = budget.try_acquire(data.size()).unwrap();
            worker
                .tx
                .send(WorkerMsg::Records(vec![(data, seq)], permit))
                .unwrap();
        }
        worker.tx.send(WorkerMsg::Finish).unwrap();
        let mut events = Vec::new();
        while let Ok(event) = events_rx.recv_timeout(Duration::from_secs(10)) {
            let stopped = matches!(event, WorkerEvent::Stopped { .. });
            events.push(event);
            if stopped {
                break;
            }
        }
        worker.thread.take().unwrap().join().unwrap();
        // Every record's budget share was given back.
        assert_eq!(budget.in_flight_records(), 0);
        (events, dir)
    }

    #[test]
    fn values_that_are_not_json_fail_when_no_field_is_split_out() {
        // A template without fields: JSON Lines only checks that a value is JSON.
        let mut settings = Arc::try_unwrap(settings()).unwrap();
        settings.template = PathTemplate::parse("{topic}").unwrap();
        let settings = Arc::new(settings);
        for bad in ["{oops", "[1,", "12 13"] {
            let (events, dir) = run_worker_with(
                "not-json",
                FailurePolicy::Stop,
                &[Some(r#"{"a":1}"#), Some(bad)],
                Arc::clone(&settings),
            );
            let failure = events
                .iter()
                .find_map(|e| match e {
                    WorkerEvent::Failed(error) => Some(error.chain()),
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{bad:?} was written: {events:?}"));
            assert!(
                failure.contains("offset 1") && failure.contains("not valid JSON"),
                "{failure}"
            );
            let _ = std::fs::remove_dir_all(&dir);
        }
    }

    #[test]
    fn a_written_batch_wakes_the_parked_intake() {
        // An epoch that does not commit during the test: no report wakes the intake.
        let mut settings = Arc::try_unwrap(settings_with(Duration::from_secs(3600))).unwrap();
        settings.roll_records = u64::MAX;
        let (mut worker, _events_rx, dir) =
            start_worker("wake", FailurePolicy::Stop, Arc::new(settings));
        // A batch large enough that the intake parks before the worker is through it.
        const RECORDS: u32 = 20_000;
        let budget = InFlightBudget::new(
            NonZeroU32::new(1 << 30).unwrap(),
            NonZeroU32::new(RECORDS).unwrap(),
        );
        let mut tracker = sluice_engine::AckTracker::new(None);
        let mut batch = Vec::new();
        let mut held: Option<InFlightPermit> = None;
        for offset in 0..i64::from(RECORDS) {
            let seq = tracker.push(Some(offset + 1)).unwrap();
            let value = format!(r#"{{"created":"2026-11-23","v":{offset}}}"#);
            let data = RecordData::new(offset, Some(b"k"), Some(value.as_bytes()), Some(0));
            let permit = budget.try_acquire(data.size()).unwrap();
            match &mut held {
                Some(held) => held.merge(permit),
                None => held = Some(permit),
            }
            batch.push((data, seq));
        }
        // No wake-up token left over from anything before.
        std::thread::park_timeout(Duration::ZERO);
        let started = Instant::now();
        worker
            .tx
            .send(WorkerMsg::Records(batch, held.unwrap()))
            .unwrap();
        while budget.in_flight_records() > 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the batch was not written"
            );
            // Only the worker's wake-up ends this wait early.
            std::thread::park_timeout(Duration::from_secs(20));
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the intake slept out its wait: {:?}",
            started.elapsed()
        );
        worker.tx.send(WorkerMsg::Finish).unwrap();
        worker.thread.take().unwrap().join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn records_become_files_and_acks_only_when_committed() {
        let good = r#"{"created":"2026-11-23","v":1}"#;
        let (events, dir) = run_worker(
            "good",
            FailurePolicy::Stop,
            &[
                Some(good),
                None,
                Some(good),
                Some(r#"{"created":"2026-11-24"}"#),
            ],
        );
        let seqs: Vec<u64> = events
            .iter()
            .flat_map(|e| match e {
                WorkerEvent::Committed { seqs, .. } => seqs.iter().map(|s| s.0).collect(),
                _ => Vec::new(),
            })
            .collect();
        assert_eq!(seqs, [0, 1, 2, 3], "{events:?}");
        let day1 =
            std::fs::read_to_string(dir.join("t/d=2026-11-23/part-t+0+s0+0-2.jsonl")).unwrap();
        assert_eq!(day1.lines().count(), 2);
        assert!(dir.join("t/d=2026-11-24/part-t+0+s0+3-3.jsonl").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_poison_record_stops_without_committing() {
        for policy in [FailurePolicy::Stop, FailurePolicy::Retry] {
            let (events, dir) = run_worker(
                "poison",
                policy,
                &[Some(r#"{"created":"2026-11-23"}"#), Some("{oops")],
            );
            assert!(
                events
                    .iter()
                    .all(|e| !matches!(e, WorkerEvent::Committed { .. })),
                "{events:?}"
            );
            let failure = events
                .iter()
                .find_map(|e| match e {
                    WorkerEvent::Failed(error) => Some(error),
                    _ => None,
                })
                .expect("a failure");
            assert!(!failure.is_retryable());
            let text = failure.chain();
            assert!(
                text.contains("offset 1") && text.contains("not valid JSON"),
                "{text}"
            );
            let attempts = if policy == FailurePolicy::Retry { 3 } else { 1 };
            assert!(
                text.contains(&format!("after {attempts} attempt(s)")),
                "{text}"
            );
            let mut files = Vec::new();
            for entry in walk(&dir) {
                if entry
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("part-"))
                {
                    files.push(entry);
                }
            }
            assert!(files.is_empty(), "{files:?}");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }

    fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                out.extend(walk(&path));
            } else {
                out.push(path);
            }
        }
        out
    }

    #[test]
    fn an_epoch_is_due_at_roll_interval_though_records_keep_coming() {
        let dir = std::env::temp_dir().join(format!("sluice-worker-due-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let root = Arc::new(OutputRoot::open(&dir, 1).unwrap());
        let id = SubPartitionId {
            topic: "t".into(),
            partition: 0,
            sub: 0,
        };
        let record = RecordData::new(0, Some(b"k"), Some(br#"{"created":"2026-11-23"}"#), None);
        for (interval, due) in [(Duration::ZERO, true), (Duration::from_secs(3600), false)] {
            let (_, ownership) = root.recover(&id).unwrap();
            let mut writer = FilesWriter::new(
                id.clone(),
                0,
                Vec::new(),
                ownership,
                Arc::clone(&root),
                settings_with(interval),
            );
            assert!(!writer.due_after_batch(), "no epoch open yet");
            writer.write(&record).unwrap();
            assert_eq!(writer.due_after_batch(), due, "roll_interval {interval:?}");
            writer.forget();
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn record_data_keeps_key_and_value_apart_in_one_buffer() {
        let both = RecordData::new(1, Some(b"key"), Some(b"{}"), None);
        assert_eq!(
            (both.key(), both.value(), both.size()),
            (Some(&b"key"[..]), Some(&b"{}"[..]), 5)
        );
        let tombstone = RecordData::new(2, Some(b"key"), None, None);
        assert_eq!(
            (tombstone.key(), tombstone.value()),
            (Some(&b"key"[..]), None)
        );
        let unkeyed = RecordData::new(3, None, Some(b""), None);
        assert_eq!((unkeyed.key(), unkeyed.value()), (None, Some(&b""[..])));
    }

    #[test]
    fn record_data_keeps_headers_after_the_value_with_null_values_and_any_name_bytes() {
        let record = RecordData::with_headers(4, Some(b"k"), Some(b"v"), None, |f| {
            f(b"trace", Some(b"abc"));
            f(b"\xff name", None);
            f(b"", Some(b""));
        });
        assert_eq!(
            (record.key(), record.value()),
            (Some(&b"k"[..]), Some(&b"v"[..]))
        );
        assert_eq!(
            record.headers(),
            [
                (&b"trace"[..], Some(&b"abc"[..])),
                (&b"\xff name"[..], None),
                (&b""[..], Some(&b""[..])),
            ]
        );
        let headers_only = RecordData::with_headers(5, None, None, None, |f| f(b"h", Some(b"1")));
        assert_eq!((headers_only.key(), headers_only.value()), (None, None));
        assert_eq!(headers_only.headers(), [(&b"h"[..], Some(&b"1"[..]))]);
        assert!(
            RecordData::new(6, None, Some(b"x"), None)
                .headers()
                .is_empty()
        );
    }

    #[test]
    fn keys_spread_and_stay_put() {
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            let key = format!("k{i}");
            let sub = sub_partition(Some(key.as_bytes()), i, 8);
            assert_eq!(sub, sub_partition(Some(key.as_bytes()), i + 1, 8));
            counts[sub as usize] += 1;
        }
        assert!(counts.iter().all(|c| *c > 700), "{counts:?}");
        assert_eq!(sub_partition(None, 13, 4), 1);
        assert_eq!(sub_partition(Some(b"x"), 0, 1), 0);
    }

    /// The key → sub-partition mapping is an on-disk contract: a root's committed files and
    /// state are per sub-partition, so a changed hash would route a key to another worker's
    /// files after an upgrade (and break per-key order across the restart). These values were
    /// computed independently (FNV-1a 64, by a Python one-liner) and must never change.
    #[test]
    fn sub_partition_hash_is_pinned() {
        let cases: [(&[u8], [u32; 6]); 5] = [
            (b"", [0, 1, 2, 1, 2, 5]),
            (b"a", [0, 0, 1, 0, 5, 12]),
            (b"order-1", [0, 1, 0, 1, 5, 13]),
            (br#"{"id":42}"#, [0, 0, 0, 2, 6, 2]),
            (&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [0, 1, 0, 1, 6, 9]),
        ];
        for (key, expected) in cases {
            let got: Vec<u32> = [1, 2, 3, 4, 7, 16]
                .iter()
                .map(|n| sub_partition(Some(key), 0, *n))
                .collect();
            assert_eq!(got, expected, "key {key:?}");
        }
        // Keyless records spread by offset.
        assert_eq!(sub_partition(None, 1_000_003, 16), 3);
        assert_eq!(sub_partition(None, -5, 4), 1);
    }
}

//! The intake thread: one consumer, its partitions' queues and budgets, the rebalance
//! callbacks, admission to the workers and the watermark committed to Kafka (see the module
//! docs of [`super`]).

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroI64;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::producer::FutureProducer;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use rustc_hash::FxHashMap;
use sluice_engine::{AckTracker, InFlightBudget, InFlightPermit, Seq};
use sluice_kafka_ffi::PartitionBatchQueue;
use tokio_util::sync::CancellationToken;

use crate::error::PipelineError;
use crate::runtime::status::{PipelineState, StatusBoard};
use crate::sink::config::{FailurePolicy, SinkPipelineConfig, consumer_config};
use crate::sink::destination::{Destination, failure_settings, open_destination};
use crate::sink::files::{Recovered, SubPartitionId};
use crate::sink::worker::{
    AbandonedWorkers, DeadLetter, FailureSettings, IntakeLink, RecordData, SubPartitionWriter,
    WorkerEvent, WorkerHandle, WorkerMsg,
};
use crate::sink::{avro, metrics, worker};
/// How a run ended without failing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RunEnd {
    /// Shutdown (a signal): the process exits.
    Stopped,
    /// An operator asked for a restart through the admin API.
    RestartRequested,
}

/// One run: from subscribing until shutdown, a restart request or an error.
pub(super) fn run_once(
    config: &Arc<SinkPipelineConfig>,
    board: &StatusBoard,
    shutdown: &CancellationToken,
    runtime: tokio::runtime::Handle,
    timeouts: &TimeoutAttempts,
    abandoned: &Arc<AbandonedWorkers>,
    avro: Option<Arc<avro::AvroDecoder>>,
) -> Result<RunEnd, PipelineError> {
    // A wrong [source.kafka.client] setting (password, mechanism, TLS) stops the pipeline
    // with the key to change, instead of a consumer retrying forever.
    let kafka = config.kafka();
    crate::kafka::probe(
        &kafka.brokers,
        &kafka.client,
        "source.kafka.client",
        crate::kafka::RUN_PROBE_TIMEOUT,
        Some(shutdown),
    )?;
    let destination = open_destination(config, &runtime)?;
    let root_description = destination.describe();
    let dead_letter = dead_letter_producer(config, runtime)?;
    let (events_tx, events_rx) = std::sync::mpsc::channel();
    // Pause and restart requests through the admin API, seen by the poll loop.
    let mut control = board.control();
    let requested = *control.borrow_and_update();
    let context = SinkContext {
        intake: Mutex::new(Intake {
            admin_paused: requested.paused,
            timeouts: Arc::clone(timeouts),
            abandoned: Arc::clone(abandoned),
            assignments: 0,
            config: Arc::clone(config),
            destination,
            failure_settings: failure_settings(config),
            dead_letter,
            avro,
            partitions: FxHashMap::default(),
            link: IntakeLink::new(events_tx, std::thread::current()),
            events_rx,
            generation: 0,
            failure: None,
            clock: Instant::now(),
            topics: config
                .kafka()
                .topic_names()
                .iter()
                .map(|t| Arc::from(t.as_str()))
                .collect(),
            consumed: ::metrics::counter!(metrics::RECORDS_CONSUMED),
        }),
    };
    let consumer = subscribe(config, context)?;
    board.set_state(if requested.paused {
        PipelineState::Paused
    } else {
        PipelineState::Streaming
    });
    tracing::info!(
        topics = ?config.kafka().subscription(),
        group = %config.group_id(),
        root = %root_description,
        "sink started"
    );
    let commit_interval = Duration::from_millis(config.kafka().commit_interval_ms);
    let mut last_commit = Instant::now();
    let mut last_check = Instant::now();
    let mut queues = PartitionQueues::default();
    let result = loop {
        if shutdown.is_cancelled() {
            break Ok(RunEnd::Stopped);
        }
        // Records come from the partition queues; the main queue brings rebalance events,
        // errors and the few records fetched before a partition's queue was split.
        let message = consumer.poll(Duration::ZERO);
        let from_main_queue = message.is_some();
        let mut intake = lock(consumer.context());
        if control.has_changed().unwrap_or(false) {
            let now = *control.borrow_and_update();
            if now.restart_requests != requested.restart_requests {
                tracing::info!("restart requested through the admin API: committing open files");
                break Ok(RunEnd::RestartRequested);
            }
            intake.set_admin_paused(&consumer, now.paused, board);
        }
        match message {
            Some(Ok(message)) => intake.on_message(&consumer, &message, true),
            Some(Err(error)) => {
                tracing::warn!(error = %error, "consumer error (librdkafka retries by itself)")
            }
            None => {}
        }
        intake.drain_events();
        if let Err(error) = intake.admit_waiting() {
            intake.fail(error);
        }
        let mut moved = 0;
        if queues.follow(&consumer, &mut intake) {
            // Records fetched before a partition's queue was split are in the main queue, and
            // all of them are older than any in the partition queue: take them first.
            drop(intake);
            while let Some(message) = consumer.poll(Duration::ZERO) {
                let mut intake = lock(consumer.context());
                match message {
                    Ok(message) => intake.on_message(&consumer, &message, true),
                    Err(error) => {
                        tracing::warn!(error = %error, "consumer error (librdkafka retries by itself)")
                    }
                }
            }
            intake = lock(consumer.context());
        }
        if queues.current(&intake) {
            drop(intake);
            moved = queues.drain(&consumer);
            intake = lock(consumer.context());
        }
        if last_check.elapsed() >= Duration::from_millis(50) {
            intake.resume_drained(&consumer);
            intake.check_workers();
            last_check = Instant::now();
        }
        if last_commit.elapsed() >= commit_interval {
            intake.commit_offsets(&consumer, CommitMode::Async, None);
            last_commit = Instant::now();
        }
        if let Some(failure) = intake.failure.take() {
            break Err(failure);
        }
        drop(intake);
        if !from_main_queue && moved == 0 {
            // Nothing came and nothing could be moved: park until records reach an empty
            // partition queue (librdkafka's callback, `PartitionBatchQueue::wake_on_records`)
            // or a worker frees budget or reports (`IntakeLink`), at most `IDLE_WAIT` (the main
            // queue's events and the periodic checks wait that long). Waiting on the main
            // queue instead slept through both: the workers ran dry while the intake slept
            // (bench/PROFILE.md, "Sink: why JSON Lines does not rise with sub-partitions").
            std::thread::park_timeout(IDLE_WAIT);
        }
    };
    // The partition queues hold the consumer: they go first.
    drop(queues);
    end_run(consumer, result)
}

/// The dead-letter producer, when failed records go to a dead-letter topic.
fn dead_letter_producer(
    config: &SinkPipelineConfig,
    runtime: tokio::runtime::Handle,
) -> Result<Option<Arc<DeadLetter>>, PipelineError> {
    let (Some(topic), FailurePolicy::DeadLetter) = (
        &config.delivery.dead_letter_topic,
        config.delivery.on_failure,
    ) else {
        return Ok(None);
    };
    let kafka = config.kafka();
    let producer: FutureProducer = crate::kafka::client_config(&kafka.brokers, &kafka.client)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "5")
        // A dead-letter topic that cannot be written fails the record within
        // processing_timeout_ms's default rather than librdkafka's 5 minutes.
        .set("message.timeout.ms", "30000")
        .create()
        .map_err(|e| {
            PipelineError::fatal_with(
                "cannot create the dead-letter producer",
                "check source.kafka.brokers",
                e,
            )
        })?;
    Ok(Some(Arc::new(DeadLetter {
        producer,
        topic: topic.clone(),
        runtime,
        max_value_bytes: config.delivery.dead_letter_max_value_bytes,
    })))
}

/// The run's consumer, with `context`, subscribed to the source topics.
fn subscribe(
    config: &SinkPipelineConfig,
    context: SinkContext,
) -> Result<Arc<BaseConsumer<SinkContext>>, PipelineError> {
    let consumer: Arc<BaseConsumer<SinkContext>> = Arc::new(
        consumer_config(config)
            .create_with_context(context)
            .map_err(|e| {
                PipelineError::fatal_with(
                    "cannot create the Kafka consumer",
                    "check source.kafka.brokers and source.kafka.properties",
                    e,
                )
            })?,
    );
    let subscription = config.kafka().subscription();
    let topics: Vec<&str> = subscription.iter().map(String::as_str).collect();
    consumer.subscribe(&topics).map_err(|e| {
        PipelineError::fatal_with(
            "cannot subscribe to the source topics",
            "check source.kafka.topics",
            e,
        )
    })?;
    Ok(consumer)
}

/// Ends a run: a clean end commits every open file (or batch) and releases the partitions, a
/// failed one aborts them; then the destination closes and the consumer leaves the group.
fn end_run(
    consumer: Arc<BaseConsumer<SinkContext>>,
    result: Result<RunEnd, PipelineError>,
) -> Result<RunEnd, PipelineError> {
    let mut intake = lock(consumer.context());
    match result {
        Ok(_) => {
            tracing::info!("stopping: committing open files");
            let all: Vec<(Arc<str>, i32)> = intake.partitions.keys().cloned().collect();
            intake.release(&consumer, &all);
        }
        Err(_) => intake.abort_all(),
    }
    intake.destination.close();
    let failure = intake.failure.take();
    drop(intake);
    // Leaving the group runs the revoke callback, which finds nothing left to finish.
    drop(consumer);
    match (result, failure) {
        (Err(error), _) | (Ok(_), Some(error)) => Err(error),
        (Ok(end), None) => Ok(end),
    }
}

/// A partition: its topic's shared name and its number.
type PartitionKey = (Arc<str>, i32);

/// How long a failed run waits for its workers to end by themselves before it closes their
/// sessions on the destination.
const ABORT_GRACE: Duration = Duration::from_secs(1);

/// How long released workers that were not given up on have to end their threads.
const END_WAIT: Duration = Duration::from_millis(200);

/// How long the runtime waits for workers whose sessions it closed to end before it detaches
/// them (a worker blocked on a statement returns as soon as its connection is closed).
const RECLAIM_WAIT: Duration = Duration::from_secs(4);

/// Waits until none of `workers` is running, or `deadline`.
fn wait_for_threads<'a>(
    workers: impl IntoIterator<Item = &'a WorkerHandle> + Clone,
    deadline: Instant,
) {
    while workers.clone().into_iter().any(WorkerHandle::running) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Records on their way to one worker, with their budget share.
type WorkerBatch = (Vec<(RecordData, Seq)>, InFlightPermit);

/// The longest the intake parks when it has nothing to move.
const IDLE_WAIT: Duration = Duration::from_millis(5);

/// Records a partition queue may hand over per loop iteration (in one batch call), so that
/// events, worker reports and the other partitions are served in between.
const QUEUE_BATCH: usize = 2048;

/// The assigned partitions' own librdkafka queues (`rd_kafka_queue_get_partition`), read in
/// batches ([`PartitionBatchQueue`]: `rd_kafka_consume_batch_queue`, which the binding lacks;
/// one poll per record cost the intake thread about three clock reads per record).
///
/// Backpressure without pausing: a partition whose queue budget is full is simply not polled.
/// librdkafka then stops fetching it once its local queue holds `queued.min.messages` records
/// or `queued.max.messages.kbytes`, and fetches again within `fetch.queue.backoff.ms` of the
/// queue draining. Pausing instead (`rd_kafka_pause_partitions`) drops the records librdkafka
/// has already fetched, and a resumed partition is fetched again only when the broker thread
/// next wakes up, up to about a second later.
#[derive(Default)]
struct PartitionQueues {
    /// The intake's assignment count the queues were split for (`assign` deactivates them).
    assignments: u64,
    /// The number of assigned partitions then.
    partitions: usize,
    queues: Vec<(PartitionKey, PartitionBatchQueue)>,
}

impl PartitionQueues {
    /// Whether the queues match the intake's assignment.
    fn current(&self, intake: &Intake) -> bool {
        self.assignments == intake.assignments && self.partitions == intake.partitions.len()
    }

    /// Splits the queues of the assigned partitions again after an assignment changed;
    /// returns whether it did. (Rebalance callbacks cannot split: it needs the consumer's
    /// `Arc`.)
    fn follow(&mut self, consumer: &Arc<BaseConsumer<SinkContext>>, intake: &mut Intake) -> bool {
        if self.current(intake) {
            return false;
        }
        self.assignments = intake.assignments;
        self.partitions = intake.partitions.len();
        self.queues.clear();
        for (key, state) in &mut intake.partitions {
            state.split = false;
            if let Some(mut queue) = PartitionBatchQueue::split(consumer, &key.0, key.1) {
                queue.wake_on_records(intake.link.thread().clone());
                self.queues.push((key.clone(), queue));
                state.split = true;
                if state.paused && !intake.admin_paused {
                    // Paused while its records came through the main queue.
                    let mut list = TopicPartitionList::new();
                    list.add_partition(&key.0, key.1);
                    if consumer.resume(&list).is_ok() {
                        state.paused = false;
                    }
                }
            }
        }
        true
    }

    /// Moves records from the partition queues whose budget has room to the intake; returns
    /// how many.
    fn drain(&mut self, consumer: &BaseConsumer<SinkContext>) -> usize {
        let mut moved = 0;
        for (key, queue) in &mut self.queues {
            let mut intake = lock(consumer.context());
            if !intake.has_room(key) {
                continue;
            }
            // Up to a batch beyond the budget may wait in the intake, in offset order.
            moved += intake.take_batch(key, queue);
            intake.admit_partition(consumer, key);
        }
        moved
    }
}

fn lock(context: &SinkContext) -> MutexGuard<'_, Intake> {
    context
        .intake
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The consumer's context: the intake state, reached from the poll loop and from rebalance
/// callbacks (which run inside `poll`, on the same thread, so the lock is never contended).
struct SinkContext {
    intake: Mutex<Intake>,
}

impl ClientContext for SinkContext {}

impl ConsumerContext for SinkContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        let mut intake = lock(self);
        let partitions: Vec<(Arc<str>, i32)> = tpl
            .elements()
            .iter()
            .map(|e| {
                let known = intake.topics.iter().find(|t| ***t == *e.topic()).cloned();
                // A topic a pattern matched: known from its first assignment on.
                let topic = known.unwrap_or_else(|| {
                    let topic: Arc<str> = Arc::from(e.topic());
                    intake.topics.push(Arc::clone(&topic));
                    topic
                });
                (topic, e.partition())
            })
            .collect();
        let result = match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                intake.assignments += 1;
                let assignment = intake.assign(consumer, &partitions);
                let assigned = if cooperative {
                    consumer.incremental_assign(&assignment)
                } else {
                    consumer.assign(&assignment)
                };
                // librdkafka keeps an application pause on a partition across unassign and
                // assign: a partition paused before a rebalance would never be fetched again.
                // While the pipeline is paused through the admin API new partitions stay
                // paused too.
                let applied = if intake.admin_paused {
                    consumer.pause(&assignment)
                } else {
                    consumer.resume(&assignment)
                };
                if let Err(error) = applied {
                    tracing::debug!(error = %error, "pausing or resuming newly assigned partitions");
                }
                assigned
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                intake.release(consumer, &partitions);
                if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                }
            }
            other => {
                tracing::error!(error = ?other, "rebalance failed; releasing every partition");
                let all: Vec<(Arc<str>, i32)> = intake.partitions.keys().cloned().collect();
                intake.release(consumer, &all);
                consumer.unassign()
            }
        };
        if let Err(error) = result {
            intake.fail(PipelineError::retryable(
                "cannot apply the consumer group's assignment",
                error,
            ));
        }
        ::metrics::gauge!(metrics::ASSIGNED_PARTITIONS).set(intake.partitions.len() as f64);
    }

    fn commit_callback(&self, result: rdkafka::error::KafkaResult<()>, _: &TopicPartitionList) {
        if let Err(error) = result {
            tracing::warn!(error = %error, "offset commit failed (the files stay the truth)");
        }
    }
}

/// The intake's view of one assigned partition.
struct PartitionState {
    generation: u64,
    /// Checkpoints are the next offset to read (`offset + 1`, never 0): as a `NonZeroI64` an
    /// entry takes 9 bytes, and a files epoch under a backlog holds up to `roll_records` of them.
    tracker: AckTracker<NonZeroI64>,
    budget: InFlightBudget,
    workers: Vec<WorkerHandle>,
    /// Per sub-partition: records up to this offset are already in committed files.
    skip: Vec<i64>,
    /// Per sub-partition: later offsets that went to the dead-letter topic after a
    /// processing timeout (usually empty).
    dead_lettered: Vec<Vec<i64>>,
    /// Records fetched but not yet admitted (the budget was full), in offset order.
    waiting: VecDeque<RecordData>,
    paused: bool,
    /// Its records come from its own queue (see [`PartitionQueues`]): a full budget stops
    /// polling that queue instead of pausing the partition.
    split: bool,
    /// Times its budget was found full since the partition's queue last had room.
    full: bool,
    /// The next offset expected (older ones are redeliveries and are dropped).
    next_offset: Option<i64>,
    /// The watermark last committed to Kafka.
    committed: Option<i64>,
    /// Workers whose thread has ended.
    stopped: usize,
}

struct Intake {
    /// Paused through the admin API: every assigned partition is paused in the consumer.
    admin_paused: bool,
    /// Processing-timeout attempts per record (`on_failure = "retry"`).
    timeouts: TimeoutAttempts,
    /// Worker threads given up on that still run (the pipeline's, over its runs).
    abandoned: Arc<AbandonedWorkers>,
    /// Assignments so far (each deactivates the partition queues).
    assignments: u64,
    config: Arc<SinkPipelineConfig>,
    destination: Destination,
    failure_settings: FailureSettings,
    dead_letter: Option<Arc<DeadLetter>>,
    /// Decodes Avro keys and values before the writers see them.
    avro: Option<Arc<avro::AvroDecoder>>,
    /// Looked up for every record consumed: hashed with FxHash (rustc-hash), not the default
    /// SipHash, which was 4–5 % of the intake thread (bench/PROFILE.md, "Sink on the AMD host").
    partitions: FxHashMap<(Arc<str>, i32), PartitionState>,
    /// The workers' way back to this thread (the intake's: the pipeline's intake is created
    /// on the thread that runs its loop).
    link: IntakeLink,
    events_rx: Receiver<WorkerEvent>,
    generation: u64,
    failure: Option<PipelineError>,
    clock: Instant,
    /// The source topics' names, shared by the partition keys.
    topics: Vec<Arc<str>>,
    consumed: ::metrics::Counter,
}

impl Intake {
    fn fail(&mut self, error: PipelineError) {
        // The first failure is the cause; later ones are usually its consequences.
        if self.failure.is_none() {
            self.failure = Some(error);
        }
    }

    fn sub_partitions(&self) -> u32 {
        self.config.sub_partitions()
    }

    /// Recovers the assigned partitions from the files and starts their workers; returns the
    /// assignment with the offsets to start from.
    fn assign(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        partitions: &[(Arc<str>, i32)],
    ) -> TopicPartitionList {
        let mut assignment = TopicPartitionList::new();
        let mut lookup = TopicPartitionList::new();
        for (topic, partition) in partitions {
            lookup.add_partition(topic, *partition);
        }
        // The group's committed offsets: every record before them is durable.
        let group_committed: HashMap<(String, i32), i64> = match consumer
            .committed_offsets(lookup, Duration::from_secs(30))
        {
            Ok(list) => list
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(offset) => Some(((e.topic().to_owned(), e.partition()), offset)),
                    _ => None,
                })
                .collect(),
            Err(error) => {
                self.fail(PipelineError::retryable(
                    "cannot read the consumer group's committed offsets",
                    error,
                ));
                HashMap::new()
            }
        };
        for (topic, partition) in partitions {
            let committed = group_committed
                .get(&(topic.to_string(), *partition))
                .copied();
            let start = match self.start_partition(topic, *partition, committed) {
                Ok(start) => start,
                Err(error) => {
                    self.fail(error);
                    Offset::Stored
                }
            };
            let _ = assignment.add_partition_offset(topic, *partition, start);
        }
        assignment
    }

    fn start_partition(
        &mut self,
        topic: &Arc<str>,
        partition: i32,
        group_committed: Option<i64>,
    ) -> Result<Offset, PipelineError> {
        self.generation += 1;
        let generation = self.generation;
        let subs = self.sub_partitions();
        let mut skip = Vec::with_capacity(subs as usize);
        let mut dead_lettered = Vec::with_capacity(subs as usize);
        let mut workers = Vec::with_capacity(subs as usize);
        let mut any_state = false;
        for sub in 0..subs {
            let id = SubPartitionId {
                topic: topic.to_string(),
                partition,
                sub,
            };
            let (recovered, ownership) = self.destination.recover(&id)?;
            any_state |= recovered.is_some();
            let recovered = recovered.unwrap_or(Recovered {
                last_offset: -1,
                epoch: 0,
                skipped: Vec::new(),
            });
            skip.push(
                recovered
                    .last_offset
                    .max(group_committed.map_or(-1, |c| c - 1)),
            );
            dead_lettered.push(recovered.skipped.clone());
            let writer = self.destination.writer(
                id.clone(),
                &recovered,
                ownership,
                self.failure_settings,
                self.dead_letter.clone(),
            )?;
            let writer: Box<dyn SubPartitionWriter> = match &self.avro {
                Some(decoder) => Box::new(avro::AvroWriter::new(writer, Arc::clone(decoder))),
                None => writer,
            };
            workers.push(
                worker::spawn(
                    id,
                    generation,
                    writer,
                    self.failure_settings,
                    self.link.clone(),
                    self.dead_letter.clone(),
                    self.clock,
                    Arc::clone(&self.abandoned),
                )
                .map_err(|e| PipelineError::retryable("cannot start a sink worker", e))?,
            );
        }
        let min_skip = skip.iter().copied().min().unwrap_or(-1);
        let (start, initial) = if min_skip >= 0 {
            (Offset::Offset(min_skip + 1), NonZeroI64::new(min_skip + 1))
        } else if any_state || group_committed.is_some() {
            // Some sub-partition has committed nothing: read the partition from its start.
            (Offset::Beginning, None)
        } else {
            (Offset::Stored, None)
        };
        tracing::info!(
            topic = %topic,
            partition,
            start = ?start,
            group_committed = ?group_committed,
            skip = ?skip,
            dead_lettered = ?dead_lettered,
            "partition assigned"
        );
        self.partitions.insert(
            (Arc::clone(topic), partition),
            PartitionState {
                generation,
                tracker: AckTracker::new(initial),
                budget: InFlightBudget::new(
                    self.config.queued_bytes(),
                    self.config.queued_records(),
                ),
                workers,
                skip,
                dead_lettered,
                waiting: VecDeque::new(),
                paused: false,
                split: false,
                full: false,
                next_offset: initial.map(NonZeroI64::get),
                committed: initial.map(NonZeroI64::get),
                stopped: 0,
            },
        );
        Ok(start)
    }

    /// Takes one record; `admit_now` false leaves it waiting for [`Intake::admit_partition`]
    /// (the partition queues hand over records in batches).
    fn on_message(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        message: &BorrowedMessage<'_>,
        admit_now: bool,
    ) {
        // The topic's shared name: no allocation per record.
        let Some(topic) = self.topics.iter().find(|t| ***t == *message.topic()) else {
            return;
        };
        let key = (Arc::clone(topic), message.partition());
        let Some(state) = self.partitions.get_mut(&key) else {
            return;
        };
        if !state.take(
            message.offset(),
            message.key(),
            message.payload(),
            message.timestamp().to_millis(),
            |f| sluice_kafka_ffi::borrowed_message_headers(message, f),
        ) {
            return;
        }
        self.consumed.increment(1);
        if !admit_now {
            return;
        }
        let subs = self.config.sub_partitions();
        if let Err(error) = admit(state, subs) {
            self.fail(error);
            return;
        }
        self.note_full(consumer, &key);
    }

    /// Takes up to [`QUEUE_BATCH`] records from the partition's own queue, as
    /// [`Intake::on_message`] without admitting them, with one partition lookup for the batch;
    /// returns how many records came. An error librdkafka reports on the partition is logged
    /// (the records of the batch around it are taken all the same: they have left the queue).
    fn take_batch(&mut self, key: &PartitionKey, queue: &mut PartitionBatchQueue) -> usize {
        let Some(state) = self.partitions.get_mut(key) else {
            return 0;
        };
        let mut records = 0;
        let mut taken = 0;
        let polled = queue.consume_batch(QUEUE_BATCH, |message| match message {
            Ok(message) => {
                debug_assert_eq!(message.partition(), key.1);
                records += 1;
                taken += u64::from(state.take(
                    message.offset(),
                    message.key(),
                    message.payload(),
                    message.timestamp_millis(),
                    |f| message.for_each_header(f),
                ));
            }
            Err(error) => {
                tracing::warn!(error = %error, "consumer error (librdkafka retries by itself)")
            }
        });
        if let Err(error) = polled {
            tracing::warn!(error = %error, "consumer error (librdkafka retries by itself)");
        }
        self.consumed.increment(taken);
        records
    }

    /// After an admission: marks (and counts) a partition whose budget is full, and pauses it
    /// when its records come through the main queue.
    fn note_full(&mut self, consumer: &BaseConsumer<SinkContext>, key: &(Arc<str>, i32)) {
        let Some(state) = self.partitions.get_mut(key) else {
            return;
        };
        if state.waiting.is_empty() {
            state.full = false;
            return;
        }
        if !state.full {
            state.full = true;
            ::metrics::counter!(metrics::PARTITION_PAUSES).increment(1);
        }
        if !state.paused && !state.split {
            let mut list = TopicPartitionList::new();
            list.add_partition(&key.0, key.1);
            match consumer.pause(&list) {
                Ok(()) => {
                    state.paused = true;
                    tracing::debug!(topic = %key.0, partition = key.1, "queue full: partition paused");
                }
                Err(error) => tracing::warn!(error = %error, "cannot pause a partition"),
            }
        }
    }

    /// Whether the partition's records may be taken from its queue: its budget is not full
    /// and the pipeline is not paused through the admin API.
    fn has_room(&self, key: &(Arc<str>, i32)) -> bool {
        !self.admin_paused
            && self
                .partitions
                .get(key)
                .is_some_and(|state| state.waiting.is_empty())
    }

    /// Admits a partition's waiting records as far as its budget has room; counts (and, when
    /// its records come through the main queue, pauses) a partition whose budget is full.
    fn admit_partition(&mut self, consumer: &BaseConsumer<SinkContext>, key: &(Arc<str>, i32)) {
        let subs = self.sub_partitions();
        let Some(state) = self.partitions.get_mut(key) else {
            return;
        };
        if let Err(error) = admit(state, subs) {
            self.fail(error);
            return;
        }
        self.note_full(consumer, key);
    }

    /// Admits the waiting records of partitions whose budget was full, as far as it has room.
    fn admit_waiting(&mut self) -> Result<(), PipelineError> {
        let subs = self.sub_partitions();
        for state in self.partitions.values_mut() {
            if !state.waiting.is_empty() {
                admit(state, subs)?;
                if state.waiting.is_empty() {
                    state.full = false;
                }
            }
        }
        Ok(())
    }

    /// Pauses every assigned partition and commits the open files (`paused`), or resumes
    /// the partitions whose queue is not full; see "Admin API" in the [module docs](self).
    fn set_admin_paused(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        paused: bool,
        board: &StatusBoard,
    ) {
        if paused == self.admin_paused {
            return;
        }
        self.admin_paused = paused;
        let mut list = TopicPartitionList::new();
        for ((topic, partition), state) in &self.partitions {
            // A partition whose queue is full stays paused until it drains.
            if paused || !state.paused {
                list.add_partition(topic, *partition);
            }
        }
        if paused {
            if let Err(error) = consumer.pause(&list) {
                tracing::warn!(error = %error, "cannot pause the assigned partitions");
            }
            for state in self.partitions.values() {
                for worker in &state.workers {
                    let _ = worker.tx.send(WorkerMsg::Flush);
                }
            }
            board.set_state(PipelineState::Paused);
            tracing::info!(
                partitions = self.partitions.len(),
                "paused through the admin API: partitions paused, open files committed"
            );
        } else {
            if let Err(error) = consumer.resume(&list) {
                tracing::warn!(error = %error, "cannot resume the assigned partitions");
            }
            board.set_state(PipelineState::Streaming);
            tracing::info!("resumed through the admin API");
        }
    }

    /// Admits waiting records of paused partitions and resumes those that drained (unless
    /// the pipeline is paused through the admin API).
    fn resume_drained(&mut self, consumer: &BaseConsumer<SinkContext>) {
        let subs = self.sub_partitions();
        let admin_paused = self.admin_paused;
        let mut failure = None;
        for ((topic, partition), state) in &mut self.partitions {
            if !state.paused {
                continue;
            }
            if let Err(error) = admit(state, subs) {
                failure = Some(error);
            }
            if state.waiting.is_empty() && !admin_paused {
                let mut list = TopicPartitionList::new();
                list.add_partition(topic, *partition);
                match consumer.resume(&list) {
                    Ok(()) => {
                        state.paused = false;
                        tracing::debug!(topic = %topic, partition, "queue drained: partition resumed");
                    }
                    Err(error) => tracing::warn!(error = %error, "cannot resume a partition"),
                }
            }
        }
        if let Some(error) = failure {
            self.fail(error);
        }
    }

    /// Applies worker events without waiting.
    fn drain_events(&mut self) {
        while let Ok(event) = self.events_rx.try_recv() {
            self.apply(event);
        }
    }

    fn apply(&mut self, event: WorkerEvent) {
        match event {
            WorkerEvent::Committed {
                topic,
                partition,
                generation,
                seqs,
            } => {
                let Some(state) = self.partitions.get_mut(&(topic, partition)) else {
                    return;
                };
                if state.generation != generation {
                    return;
                }
                for seq in &seqs {
                    if let Err(error) = state.tracker.ack(seq) {
                        self.failure.get_or_insert(PipelineError::fatal_with(
                            "acknowledgement bookkeeping failed",
                            "this is a bug in sluice: please report it with the log",
                            error,
                        ));
                        return;
                    }
                }
            }
            WorkerEvent::Failed(error) => self.fail(error),
            WorkerEvent::Stopped {
                topic,
                partition,
                generation,
            } => {
                if let Some(state) = self.partitions.get_mut(&(topic, partition))
                    && state.generation == generation
                {
                    state.stopped += 1;
                }
            }
        }
    }

    /// Fails the run when a worker is stuck on a file commit or has ended; a worker stuck
    /// on one record makes that record a failure (`Intake::record_timed_out`).
    fn check_workers(&mut self) {
        // A worker reports its failure before its thread ends: take that report first.
        self.drain_events();
        let timeout = self.config.delivery.processing_timeout_ms;
        let now = self.clock.elapsed().as_millis() as u64;
        let mut stuck = None;
        let mut stuck_on_commit = Vec::new();
        let mut timed_out = None;
        for ((topic, partition), state) in &mut self.partitions {
            for (sub, worker) in state.workers.iter_mut().enumerate() {
                if worker.thread.as_ref().is_some_and(|t| t.is_finished()) {
                    // Workers end on Finish/Abort or after reporting a failure; anything else
                    // is a panic, and its records would never be acknowledged.
                    stuck.get_or_insert(format!(
                        "the worker of {topic}/{partition} sub-partition {sub} ended unexpectedly"
                    ));
                }
                // A record is timed from the first check that saw the worker on it (so up
                // to one check interval late); a commit from when the worker started it.
                let offset = worker.busy_offset.load(Ordering::Relaxed);
                if offset >= 0 {
                    if worker.seen.0 != offset {
                        worker.seen = (offset, now);
                    } else if now.saturating_sub(worker.seen.1) > timeout {
                        timed_out.get_or_insert((Arc::clone(topic), *partition, sub, offset));
                    }
                    continue;
                }
                let since = worker.busy_since_ms.load(Ordering::Relaxed);
                if since > 0 && now.saturating_sub(since) > timeout {
                    let commit = match self.destination {
                        Destination::Files { .. } => "a file commit",
                        Destination::Postgres(_) => "a batch's transaction",
                        Destination::Iceberg(_) => "an Iceberg commit",
                    };
                    stuck = Some(format!(
                        "the worker of {topic}/{partition} sub-partition {sub} has been busy on {commit} for more than delivery.processing_timeout_ms = {timeout}"
                    ));
                    if !worker.abandoned.load(Ordering::Acquire) {
                        stuck_on_commit.push((Arc::clone(topic), *partition, sub));
                    }
                }
            }
        }
        for (topic, partition, sub) in stuck_on_commit {
            // The watchdog gives up on it: its epoch never commits, and its session on the
            // destination is closed now, so that the server side (a backend waiting on a
            // lock) goes away and the thread ends (see `Intake::abort_all`).
            if let Some(state) = self.partitions.get(&(Arc::clone(&topic), partition))
                && let Some(worker) = state.workers.get(sub)
            {
                tracing::warn!(topic = %topic, partition, sub, timeout_ms = timeout, "a worker is stuck on a commit: giving up on it");
                worker.give_up();
            }
        }
        if self.failure.is_some() {
            return;
        }
        if let Some((topic, partition, sub, offset)) = timed_out {
            self.record_timed_out(&topic, partition, sub as u32, offset);
        } else if let Some(what) = stuck {
            self.fail(PipelineError::Retryable { what, source: None });
        }
    }

    /// A record has been processed for longer than `processing_timeout_ms`: its worker is
    /// abandoned (it commits nothing any more, so its open epoch is read again after the
    /// restart) and the record follows the failure policy: `stop` stops the pipeline,
    /// `retry` restarts the run from the committed files (with the restart backoff) until
    /// the record has timed out `retry_max_attempts` times, `dead_letter` sends it to the
    /// dead-letter topic, records its offset in the sub-partition's state (so the next run
    /// skips it) and restarts the run.
    fn record_timed_out(&mut self, topic: &Arc<str>, partition: i32, sub: u32, offset: i64) {
        let delivery = &self.config.delivery;
        let timeout = delivery.processing_timeout_ms;
        if let Some(state) = self.partitions.get(&(Arc::clone(topic), partition))
            && let Some(worker) = state.workers.get(sub as usize)
        {
            worker.give_up();
        }
        let reason =
            format!("processing took longer than delivery.processing_timeout_ms = {timeout}");
        let what =
            format!("record {topic}/{partition} offset {offset} cannot be written: {reason}");
        tracing::warn!(topic = %topic, partition, sub, offset, timeout_ms = timeout, policy = ?delivery.on_failure, "record processing timed out");
        let error = match delivery.on_failure {
            FailurePolicy::Stop => PipelineError::fatal(
                format!("{what} (after 1 attempt(s))"),
                "find out why the record hangs (its size, the path template, the file system), raise delivery.processing_timeout_ms, or set delivery.on_failure = \"dead_letter\"",
            ),
            FailurePolicy::Retry => {
                let mut attempts = lock_timeouts(&self.timeouts);
                let attempt = attempts
                    .entry((topic.to_string(), partition, offset))
                    .or_insert(0);
                *attempt += 1;
                if *attempt >= delivery.retry_max_attempts {
                    PipelineError::fatal(
                        format!("{what} (after {attempt} attempt(s))"),
                        "find out why the record hangs, raise delivery.processing_timeout_ms, or set delivery.on_failure = \"dead_letter\"",
                    )
                } else {
                    PipelineError::Retryable {
                        what: format!(
                            "{what} (attempt {attempt} of {}): retrying from the committed files",
                            delivery.retry_max_attempts
                        ),
                        source: None,
                    }
                }
            }
            FailurePolicy::DeadLetter => {
                match self.dead_letter_timed_out(topic, partition, sub, offset, &reason) {
                    Ok(()) => PipelineError::Retryable {
                        what: format!(
                            "{what}: sent to the dead-letter topic; restarting from the committed files"
                        ),
                        source: None,
                    },
                    Err(error) => error,
                }
            }
        };
        self.fail(error);
    }

    /// Reads the timed-out record back from Kafka, sends it to the dead-letter topic and
    /// records its offset in the sub-partition's state.
    fn dead_letter_timed_out(
        &self,
        topic: &str,
        partition: i32,
        sub: u32,
        offset: i64,
        reason: &str,
    ) -> Result<(), PipelineError> {
        let Some(dead_letter) = &self.dead_letter else {
            return Err(PipelineError::fatal(
                format!("record {topic}/{partition} offset {offset} timed out"),
                "set delivery.dead_letter_topic",
            ));
        };
        let record = fetch_record(&self.config, topic, partition, offset)?;
        dead_letter.send(topic, partition, &record, reason)?;
        let id = SubPartitionId {
            topic: topic.to_owned(),
            partition,
            sub,
        };
        self.destination.add_skipped(&id, offset)
    }

    /// Commits the watermark of `only` (or of every partition) where it moved.
    fn commit_offsets(
        &mut self,
        consumer: &BaseConsumer<SinkContext>,
        mode: CommitMode,
        only: Option<&[(Arc<str>, i32)]>,
    ) {
        let mut list = TopicPartitionList::new();
        let mut moved = Vec::new();
        for ((topic, partition), state) in &self.partitions {
            if only.is_some_and(|only| !only.iter().any(|(t, p)| t == topic && p == partition)) {
                continue;
            }
            let Some(watermark) = state.tracker.watermark().map(|next| next.get()) else {
                continue;
            };
            if state.committed.is_some_and(|c| c >= watermark) {
                continue;
            }
            let _ = list.add_partition_offset(topic, *partition, Offset::Offset(watermark));
            moved.push(((Arc::clone(topic), *partition), watermark));
        }
        if moved.is_empty() {
            return;
        }
        match consumer.commit(&list, mode) {
            Ok(()) => {
                ::metrics::counter!(metrics::OFFSET_COMMITS).increment(1);
                for (key, watermark) in moved {
                    if let Some(state) = self.partitions.get_mut(&key) {
                        state.committed = Some(watermark);
                    }
                }
            }
            Err(KafkaError::ConsumerCommit(code)) => {
                tracing::warn!(error = %code, "offset commit failed (the files stay the truth)");
            }
            Err(error) => {
                tracing::warn!(error = %error, "offset commit failed (the files stay the truth)");
            }
        }
    }

    /// Finishes the partitions' workers (bounded by `revoke_timeout_ms`), commits their
    /// watermark and forgets them.
    fn release(&mut self, consumer: &BaseConsumer<SinkContext>, partitions: &[(Arc<str>, i32)]) {
        let mut expected = 0;
        let mut late = false;
        for key in partitions {
            if let Some(state) = self.partitions.get_mut(key) {
                for worker in &state.workers {
                    let _ = worker.tx.send(WorkerMsg::Finish);
                }
                state.waiting.clear();
                expected += state.workers.len();
            }
        }
        if expected > 0 {
            let deadline =
                Instant::now() + Duration::from_millis(self.config.delivery.revoke_timeout_ms);
            loop {
                let stopped: usize = partitions
                    .iter()
                    .filter_map(|key| self.partitions.get(key))
                    .map(|state| state.stopped)
                    .sum();
                if stopped >= expected {
                    break;
                }
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    tracing::warn!(
                        finished = stopped,
                        workers = expected,
                        "revoke_timeout_ms passed: abandoning the unfinished workers' open files (the next owner reads those records again)"
                    );
                    late = true;
                    break;
                }
                match self.events_rx.recv_timeout(left) {
                    Ok(event) => self.apply(event),
                    Err(_) => continue,
                }
            }
        }
        self.commit_offsets(consumer, CommitMode::Sync, Some(partitions));
        for key in partitions {
            if let Some(mut state) = self.partitions.remove(key) {
                if state.paused {
                    // The pause outlives the assignment in librdkafka (see `rebalance`).
                    let mut list = TopicPartitionList::new();
                    list.add_partition(&key.0, key.1);
                    let _ = consumer.resume(&list);
                }
                tracing::info!(
                    topic = %key.0,
                    partition = key.1,
                    committed = ?state.committed,
                    lost = consumer.assignment_lost(),
                    "partition released"
                );
                // Past the deadline: the unfinished ones are given up on (their sessions
                // closed), then joined or, when they still do not end, detached and counted.
                let mut reclaimed = false;
                for worker in &mut state.workers {
                    let running = worker.running();
                    worker.abandoned.store(true, Ordering::Release);
                    let _ = worker.tx.send(WorkerMsg::Abort);
                    if late && running && worker.reclaim.is_some() {
                        worker.give_up();
                        reclaimed = true;
                    }
                }
                // Workers that reported their end are gone within moments.
                let wait = if reclaimed { RECLAIM_WAIT } else { END_WAIT };
                wait_for_threads(&state.workers, Instant::now() + wait);
                for worker in &mut state.workers {
                    worker.join_or_detach();
                }
            }
        }
    }

    /// Stops every worker without committing (the run failed). A worker that does not end
    /// within [`ABORT_GRACE`] is given up on: its session on the destination is closed (a
    /// statement blocked on a lock returns at once), and one that still does not end within
    /// [`RECLAIM_WAIT`] is detached and counted in [`AbandonedWorkers`].
    fn abort_all(&mut self) {
        for state in self.partitions.values_mut() {
            for worker in &mut state.workers {
                worker.abandoned.store(true, Ordering::Release);
                let _ = worker.tx.send(WorkerMsg::Abort);
            }
        }
        let workers = || self.partitions.values().flat_map(|s| s.workers.iter());
        wait_for_threads(workers(), Instant::now() + ABORT_GRACE);
        let mut reclaimed = false;
        for worker in workers() {
            if worker.running() && worker.reclaim.is_some() {
                worker.give_up();
                reclaimed = true;
            }
        }
        if reclaimed {
            wait_for_threads(workers(), Instant::now() + RECLAIM_WAIT);
        }
        for state in self.partitions.values_mut() {
            for worker in &mut state.workers {
                worker.join_or_detach();
            }
        }
        self.partitions.clear();
    }
}

impl PartitionState {
    /// Queues a consumed record for admission, unless it is a redelivery of an offset already
    /// taken (older than the next one expected); returns whether it was taken.
    fn take(
        &mut self,
        offset: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: Option<i64>,
        headers: impl FnOnce(&mut dyn FnMut(&[u8], Option<&[u8]>)),
    ) -> bool {
        if self.next_offset.is_some_and(|next| offset < next) {
            return false;
        }
        self.next_offset = Some(offset + 1);
        self.waiting.push_back(RecordData::with_headers(
            offset,
            key,
            value,
            timestamp_ms,
            headers,
        ));
        true
    }
}

/// Moves waiting records to their workers while the budget has room, in order: one message
/// per sub-partition with all of its records (channel sends and budget releases per batch,
/// not per record).
fn admit(state: &mut PartitionState, subs: u32) -> Result<(), PipelineError> {
    let mut batches: Vec<Option<WorkerBatch>> = (0..subs).map(|_| None).collect();
    let result = admit_into(state, subs, &mut batches);
    for (sub, batch) in batches.into_iter().enumerate() {
        if let Some((records, permit)) = batch {
            // A worker that is gone has reported why; its records are read again after restart.
            let _ = state.workers[sub]
                .tx
                .send(WorkerMsg::Records(records, permit));
        }
    }
    result
}

fn admit_into(
    state: &mut PartitionState,
    subs: u32,
    batches: &mut [Option<WorkerBatch>],
) -> Result<(), PipelineError> {
    while let Some(front) = state.waiting.front() {
        let sub = worker::sub_partition(front.key(), front.offset, subs) as usize;
        // A Kafka offset is never negative, so its successor is never 0.
        let checkpoint = NonZeroI64::new(front.offset + 1);
        if front.offset <= state.skip[sub] || state.dead_lettered[sub].contains(&front.offset) {
            // Already in a committed file of this sub-partition, or dead-lettered.
            let seq = state.tracker.push(checkpoint).map_err(bookkeeping)?;
            state.tracker.ack(seq).map_err(bookkeeping)?;
            state.waiting.pop_front();
            continue;
        }
        let Some(permit) = state.budget.try_acquire(front.size()) else {
            return Ok(());
        };
        let seq = state.tracker.push(checkpoint).map_err(bookkeeping)?;
        let Some(record) = state.waiting.pop_front() else {
            break;
        };
        match &mut batches[sub] {
            Some((records, held)) => {
                records.push((record, seq));
                held.merge(permit);
            }
            empty => *empty = Some((vec![(record, seq)], permit)),
        }
    }
    Ok(())
}

/// Processing-timeout attempts per record (topic, partition, offset), across the runs of one
/// process.
pub(super) type TimeoutAttempts = Arc<Mutex<HashMap<(String, i32, i64), u32>>>;

fn lock_timeouts(attempts: &TimeoutAttempts) -> MutexGuard<'_, HashMap<(String, i32, i64), u32>> {
    attempts
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Reads one record back from Kafka (the worker that had it is stuck).
fn fetch_record(
    config: &SinkPipelineConfig,
    topic: &str,
    partition: i32,
    offset: i64,
) -> Result<RecordData, PipelineError> {
    let failed = |what: &str, source: KafkaError| {
        PipelineError::retryable(
            format!(
                "cannot read {topic}/{partition} offset {offset} back for the dead-letter topic: {what}"
            ),
            source,
        )
    };
    let mut client = crate::kafka::client_config(&config.kafka().brokers, &config.kafka().client);
    client
        .set(
            "group.id",
            format!("{}-dead-letter-fetch", config.group_id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false");
    for (key, value) in &config.kafka().properties {
        client.set(key, value);
    }
    let consumer: BaseConsumer = client.create().map_err(|e| failed("consumer", e))?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(topic, partition, Offset::Offset(offset))
        .map_err(|e| failed("assignment", e))?;
    consumer
        .assign(&list)
        .map_err(|e| failed("assignment", e))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) if message.offset() >= offset => {
                if message.offset() > offset {
                    break;
                }
                return Ok(RecordData::with_headers(
                    offset,
                    message.key(),
                    message.payload(),
                    message.timestamp().to_millis(),
                    |f| sluice_kafka_ffi::borrowed_message_headers(&message, f),
                ));
            }
            Some(Err(error)) => return Err(failed("fetch", error)),
            _ => {}
        }
    }
    Err(PipelineError::Retryable {
        what: format!(
            "cannot read {topic}/{partition} offset {offset} back for the dead-letter topic within 30 s"
        ),
        source: None,
    })
}

fn bookkeeping(error: sluice_engine::WatermarkError) -> PipelineError {
    PipelineError::fatal_with(
        "acknowledgement bookkeeping failed",
        "this is a bug in sluice: please report it with the log",
        error,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::destination::worker_settings;
    use crate::sink::files::OutputRoot;
    use std::num::NonZeroU32;
    use std::sync::atomic::{AtomicBool, AtomicU64};

    /// A test's intake with its output directory, which is removed when the test ends.
    struct Scratch {
        intake: Intake,
        dir: std::path::PathBuf,
    }

    impl std::ops::Deref for Scratch {
        type Target = Intake;
        fn deref(&self) -> &Intake {
            &self.intake
        }
    }

    impl std::ops::DerefMut for Scratch {
        fn deref_mut(&mut self) -> &mut Intake {
            &mut self.intake
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    fn intake(name: &str) -> Scratch {
        intake_with(name, "")
    }

    /// An intake whose `[delivery]` section also has `delivery` (TOML lines).
    fn intake_with(name: &str, delivery: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("sluice-intake-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let text = format!(
            "name = \"t\"\n[source.kafka]\nbrokers = \"127.0.0.1:1\"\ntopics = [\"t\"]\n\
             [sink.files]\npath = \"{}\"\nformat = \"jsonl\"\nsub_partitions = 1\n\
             [delivery]\nprocessing_timeout_ms = 100\n{delivery}",
            dir.display()
        );
        let config = SinkPipelineConfig::from_toml(&text, "test.toml", &|_| None).unwrap();
        let (events_tx, events_rx) = std::sync::mpsc::channel();
        let intake = Intake {
            admin_paused: false,
            timeouts: TimeoutAttempts::default(),
            abandoned: Arc::default(),
            assignments: 0,
            destination: Destination::Files {
                settings: Arc::new(worker_settings(&config, config.files().unwrap()).unwrap()),
                root: Arc::new(OutputRoot::open(&dir, 1).unwrap()),
            },
            failure_settings: failure_settings(&config),
            config: Arc::new(config),
            dead_letter: None,
            avro: None,
            partitions: FxHashMap::default(),
            link: IntakeLink::new(events_tx, std::thread::current()),
            events_rx,
            generation: 0,
            failure: None,
            clock: Instant::now(),
            topics: vec![Arc::from("t")],
            consumed: ::metrics::Counter::noop(),
        };
        Scratch { intake, dir }
    }

    /// A partition with one sub-partition whose worker is the returned channel.
    fn partition(skip: i64, records: u32) -> (PartitionState, Receiver<WorkerMsg>) {
        let (tx, rx) = std::sync::mpsc::channel();
        let state = PartitionState {
            generation: 1,
            tracker: AckTracker::new(None),
            budget: InFlightBudget::new(
                NonZeroU32::new(1 << 20).unwrap(),
                NonZeroU32::new(records).unwrap(),
            ),
            workers: vec![WorkerHandle {
                tx,
                busy_since_ms: Arc::new(AtomicU64::new(0)),
                busy_offset: Arc::new(std::sync::atomic::AtomicI64::new(-1)),
                seen: (-1, 0),
                abandoned: Arc::new(AtomicBool::new(false)),
                reclaim: None,
                thread: None,
                life: Arc::default(),
                tally: Arc::default(),
            }],
            skip: vec![skip],
            dead_lettered: vec![Vec::new()],
            waiting: VecDeque::new(),
            paused: false,
            split: false,
            full: false,
            next_offset: None,
            committed: None,
            stopped: 0,
        };
        (state, rx)
    }

    fn record(offset: i64) -> RecordData {
        RecordData::new(offset, Some(b"k"), Some(b"{}"), None)
    }

    #[test]
    fn admission_skips_committed_records_and_stops_at_the_budget() {
        let (mut state, rx) = partition(5, 2);
        state.waiting.extend((3..=10).map(record));
        admit(&mut state, 1).unwrap();
        // 3..=5 are already in files: acknowledged at once; 6 and 7 fill the budget.
        assert_eq!(state.tracker.watermark().map(|w| w.get()), Some(6));
        let admitted: Vec<WorkerMsg> = rx.try_iter().collect();
        assert_eq!(
            admitted.len(),
            1,
            "one message per sub-partition and admission"
        );
        let offsets: Vec<i64> = admitted
            .iter()
            .flat_map(|m| match m {
                WorkerMsg::Records(records, _) => records.iter().map(|(d, _)| d.offset),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(offsets, [6, 7]);
        assert_eq!(state.waiting.len(), 3);
        // The worker is done with them: the budget frees, the rest goes in order.
        drop(admitted);
        admit(&mut state, 1).unwrap();
        let offsets: Vec<i64> = rx
            .try_iter()
            .flat_map(|m| match m {
                WorkerMsg::Records(records, _) => records
                    .into_iter()
                    .map(|(d, _)| d.offset)
                    .collect::<Vec<_>>(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(offsets, [8, 9]);
        assert_eq!(state.waiting.len(), 1);
    }

    #[test]
    fn committed_epochs_move_the_watermark_in_order() {
        let mut intake = intake("acks");
        let (mut state, rx) = partition(-1, 10);
        state.waiting.extend((0..3).map(record));
        admit(&mut state, 1).unwrap();
        intake.partitions.insert((Arc::from("t"), 0), state);
        let seqs: Vec<sluice_engine::Seq> = rx
            .try_iter()
            .flat_map(|m| match m {
                WorkerMsg::Records(records, _) => {
                    records.into_iter().map(|(_, seq)| seq).collect::<Vec<_>>()
                }
                other => panic!("{other:?}"),
            })
            .collect();
        let committed = |seqs: Vec<sluice_engine::Seq>, generation| WorkerEvent::Committed {
            topic: Arc::from("t"),
            partition: 0,
            generation,
            seqs: seqs.into_iter().collect(),
        };
        // A stale generation is ignored; a later record alone does not move the watermark.
        intake.apply(committed(vec![seqs[0]], 7));
        intake.apply(committed(vec![seqs[2]], 1));
        let watermark = |intake: &Intake| {
            intake.partitions[&(Arc::from("t"), 0)]
                .tracker
                .watermark()
                .map(|w| w.get())
        };
        assert_eq!(watermark(&intake), None);
        intake.apply(committed(vec![seqs[0], seqs[1]], 1));
        assert_eq!(watermark(&intake), Some(3));
        assert!(intake.failure.is_none());
    }

    #[test]
    fn a_worker_stuck_past_the_processing_timeout_fails_the_run() {
        let mut intake = intake("stuck");
        let (state, _rx) = partition(-1, 10);
        let busy = Arc::clone(&state.workers[0].busy_since_ms);
        intake.partitions.insert((Arc::from("t"), 0), state);
        intake.check_workers();
        assert!(intake.failure.is_none(), "idle is not stuck");
        busy.store(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(150));
        intake.check_workers();
        let failure = intake.failure.take().expect("a failure");
        assert!(failure.is_retryable());
        assert!(
            failure.chain().contains("processing_timeout_ms = 100"),
            "{}",
            failure.chain()
        );
    }

    #[test]
    fn a_record_past_the_processing_timeout_follows_the_failure_policy() {
        let stuck_on = |intake: &mut Intake, offset: i64| {
            let (state, _rx) = partition(-1, 10);
            let worker = &state.workers[0];
            let (at, abandoned) = (
                Arc::clone(&worker.busy_offset),
                Arc::clone(&worker.abandoned),
            );
            intake.partitions.insert((Arc::from("t"), 0), state);
            at.store(offset, Ordering::Relaxed);
            intake.check_workers();
            assert!(
                !abandoned.load(Ordering::Acquire) && intake.failure.is_none(),
                "a record is not late when first seen"
            );
            std::thread::sleep(Duration::from_millis(150));
            intake.check_workers();
            assert!(
                abandoned.load(Ordering::Acquire),
                "the stuck worker is abandoned"
            );
            intake.failure.take().expect("a failure")
        };
        // stop: the pipeline stops, naming the record.
        let failure = stuck_on(&mut intake("timeout_stop"), 7);
        assert!(!failure.is_retryable());
        let text = failure.chain();
        assert!(
            text.contains("t/0 offset 7") && text.contains("processing_timeout_ms = 100"),
            "{text}"
        );
        // retry: the run restarts until the record has timed out retry_max_attempts times.
        let mut intake = intake_with(
            "timeout_retry",
            "on_failure = \"retry\"\nretry_max_attempts = 2\n",
        );
        let first = stuck_on(&mut intake, 9);
        assert!(first.is_retryable(), "{}", first.chain());
        assert!(
            first.chain().contains("attempt 1 of 2"),
            "{}",
            first.chain()
        );
        let second = stuck_on(&mut intake, 9);
        assert!(!second.is_retryable());
        assert!(
            second.chain().contains("after 2 attempt(s)"),
            "{}",
            second.chain()
        );
    }

    #[test]
    fn a_worker_thread_that_ends_on_its_own_fails_the_run() {
        let mut intake = intake("panicked");
        let (mut state, _rx) = partition(-1, 10);
        let thread = std::thread::spawn(|| {});
        while !thread.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        state.workers[0].thread = Some(thread);
        intake.partitions.insert((Arc::from("t"), 0), state);
        intake.check_workers();
        let failure = intake.failure.take().expect("a failure");
        assert!(
            failure.chain().contains("ended unexpectedly"),
            "{}",
            failure.chain()
        );
    }
}

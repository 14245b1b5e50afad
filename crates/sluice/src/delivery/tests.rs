//! Deterministic tests of the delivery core with a fake producer and a scripted source: no
//! server; the order of acknowledgements is the test's.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use sluice_engine::{InFlightBudget, Lsn};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::config::{DeliveryConfig, PermanentErrorPolicy};
use crate::dead_letter;
use crate::kafka::Delivery;
use crate::runtime::metrics::PipelineMetrics;

/// A change of the test source: `records` records of key `key`, at `position`.
#[derive(Debug, Clone)]
struct TestChange {
    key: u32,
    position: u64,
    records: u32,
    /// Encoding it panics (a bug in an encoder).
    panics: bool,
}

fn change(key: u32, position: u64) -> TestChange {
    TestChange {
        key,
        position,
        records: 1,
        panics: false,
    }
}

struct TestEncoder {
    table: Arc<TableMetrics>,
}

impl Encode<TestChange> for TestEncoder {
    fn encode(&self, change: &TestChange, out: &mut Vec<OutRecord>) -> Origin {
        assert!(!change.panics, "a value the encoder cannot render");
        for n in 0..change.records {
            out.push(OutRecord {
                partition: None,
                topic: Arc::from("events"),
                key: Some(change.key.to_string().into_bytes()),
                value: Some(format!("{}#{n}", change.key).into_bytes()),
                headers: vec![(crate::event::HEADER_LSN.into(), change.position.to_string())],
            });
        }
        Origin {
            commit_unix_micros: unix_micros_now(),
            table: Arc::clone(&self.table),
        }
    }

    fn describe(&self, change: &TestChange, reason: &str) -> FailedChange {
        FailedChange {
            reason: reason.to_owned(),
            topic: Arc::from("events"),
            position: format!("position {}", change.position),
            description: format!("{{\"key\":{}}}", change.key).into_bytes(),
            origin: Origin {
                commit_unix_micros: 0,
                table: Arc::clone(&self.table),
            },
        }
    }
}

fn encoder() -> TestEncoder {
    TestEncoder {
        table: Arc::new(TableMetrics::new("test.events")),
    }
}

fn position_of(record: &OutRecord) -> String {
    let at = record
        .headers
        .iter()
        .find(|(name, _)| *name == crate::event::HEADER_LSN)
        .map_or("?", |(_, v)| v.as_str());
    format!("position {at}")
}

/// A producer that keeps what it is given, and says its queue is full `full` times first.
#[derive(Default)]
struct FakeProducer {
    sent: Mutex<Vec<(OutRecord, Box<Delivery>)>>,
    full: AtomicUsize,
    attempts: AtomicUsize,
}

impl RecordSink for FakeProducer {
    fn try_send(&self, record: OutRecord, delivery: Box<Delivery>) -> Result<(), SendError> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        if self
            .full
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
            .is_ok()
        {
            return Err(SendError::QueueFull(record, delivery));
        }
        self.sent.lock().unwrap().push((record, delivery));
        Ok(())
    }
}

impl FakeProducer {
    /// Waits (bounded) until `count` records were handed over, and takes them.
    async fn take(&self, count: usize) -> Vec<(OutRecord, Box<Delivery>)> {
        let started = std::time::Instant::now();
        loop {
            {
                let mut sent = self.sent.lock().unwrap();
                if sent.len() >= count {
                    return sent.drain(..).collect();
                }
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "the publisher handed over {} records, expected {count}",
                    sent.len()
                );
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

fn delivery_config(
    policy: PermanentErrorPolicy,
    dead_letter_topic: Option<&str>,
) -> DeliveryConfig {
    DeliveryConfig {
        on_permanent_error: policy,
        dead_letter_topic: dead_letter_topic.map(str::to_owned),
        ..DeliveryConfig::default()
    }
}

type TestCore = DeliveryCore<TestChange, Lsn, FakeProducer>;

struct Harness {
    core: TestCore,
    producer: Arc<FakeProducer>,
    events: mpsc::UnboundedReceiver<DeliveryEvent>,
    events_tx: mpsc::UnboundedSender<DeliveryEvent>,
}

fn harness(config: &DeliveryConfig) -> Harness {
    let producer = Arc::new(FakeProducer::default());
    let (events_tx, events) = mpsc::unbounded_channel();
    let budget = InFlightBudget::new(
        NonZeroU32::new(1 << 20).unwrap(),
        NonZeroU32::new(1000).unwrap(),
    );
    let (core, _publisher) = DeliveryCore::start(
        Arc::clone(&producer),
        budget,
        Lsn(1),
        config,
        PipelineMetrics::new(),
        events_tx.clone(),
        position_of,
    );
    Harness {
        core,
        producer,
        events,
        events_tx,
    }
}

impl Harness {
    /// Admits `changes`, each followed by a checkpoint at its position, and publishes them.
    async fn send(&mut self, changes: &[TestChange]) {
        for change in changes {
            let records = change.records;
            self.core.intake.admit(change.clone(), 100, records);
            self.core.intake.checkpoint(Lsn(change.position));
        }
        self.core.process_steps().unwrap();
        self.core.dispatch(encoder).await.unwrap();
    }

    async fn ack(&mut self, delivery: Box<Delivery>) {
        self.core
            .on_delivery(DeliveryEvent::Acked(delivery))
            .await
            .unwrap();
    }
}

#[tokio::test]
async fn acknowledgements_out_of_order_advance_the_watermark_only_over_a_contiguous_prefix() {
    let mut h = harness(&DeliveryConfig::default());
    // Keys 1 and 3 on one partition, key 2 on another: the second partition's broker answers
    // first, then the first partition's, in its own order.
    h.send(&[change(1, 10), change(2, 20), change(3, 30)]).await;
    let mut sent = h.producer.take(3).await;
    let keys: Vec<_> = sent.iter().map(|(r, _)| r.key.clone().unwrap()).collect();
    assert_eq!(
        keys,
        [b"1".to_vec(), b"2".to_vec(), b"3".to_vec()],
        "published in order"
    );
    let (_, third) = sent.pop().unwrap();
    let (_, second) = sent.pop().unwrap();
    let (_, first) = sent.pop().unwrap();

    h.ack(second).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(1),
        "position 20 waits for position 10"
    );
    h.ack(third).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(1),
        "position 30 waits for position 10"
    );
    h.ack(first).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(30),
        "all acknowledged: the newest checkpoint"
    );
    assert_eq!(
        h.core.budget().in_flight_records(),
        0,
        "the budget is released"
    );
}

#[tokio::test]
async fn a_change_of_several_records_is_confirmed_only_when_all_are_acknowledged() {
    let mut h = harness(&DeliveryConfig::default());
    let mut delete = change(7, 10);
    delete.records = 2; // a delete and its tombstone
    h.send(&[delete, change(8, 20)]).await;
    let mut sent = h.producer.take(3).await;
    let (_, after) = sent.pop().unwrap();
    let (_, tombstone) = sent.pop().unwrap();
    let (_, first) = sent.pop().unwrap();
    h.ack(first).await;
    h.ack(after).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(1),
        "the tombstone is still in flight"
    );
    assert_eq!(
        h.core.budget().in_flight_records(),
        1,
        "the delete's share is held"
    );
    h.ack(tombstone).await;
    assert_eq!(h.core.watermark(), Lsn(20));
}

#[tokio::test]
async fn a_dead_lettered_record_keeps_its_place_in_the_watermark() {
    let mut h = harness(&delivery_config(
        PermanentErrorPolicy::DeadLetter,
        Some("dead-letters"),
    ));
    h.send(&[change(1, 10), change(2, 20)]).await;
    let mut sent = h.producer.take(2).await;
    let (_, second) = sent.pop().unwrap();
    let (record, first) = sent.pop().unwrap();
    h.core
        .on_delivery(DeliveryEvent::Failed {
            error: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
            record,
            delivery: first,
        })
        .await
        .unwrap();
    let (letter, letter_delivery) = h.producer.take(1).await.pop().unwrap();
    assert_eq!(&*letter.topic, "dead-letters");
    assert_eq!(letter.key.as_deref(), Some(&b"1"[..]));
    let header = |name: &str| {
        letter
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(header(dead_letter::HEADER_TOPIC).as_deref(), Some("events"));
    assert!(
        header(dead_letter::HEADER_REASON).is_some_and(|r| r.contains("too large")),
        "{:?}",
        letter.headers
    );
    h.ack(second).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(1),
        "the dead letter is not written yet: position 10 is not done"
    );
    h.ack(letter_delivery).await;
    assert_eq!(h.core.watermark(), Lsn(20));
}

/// A batch limit whose topic answers `topic_limit`, counting the look-ups.
fn batch_limit(
    batch_size: u64,
    topic_limit: Option<u64>,
) -> (
    super::BatchLimit,
    Arc<std::sync::atomic::AtomicU64>,
    Arc<AtomicUsize>,
) {
    let learned = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let lookups = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&lookups);
    let limit = super::BatchLimit {
        batch_size,
        learned: Arc::clone(&learned),
        topic_limit: Arc::new(move |topic| {
            assert_eq!(&*topic, "events");
            counted.fetch_add(1, Ordering::SeqCst);
            Box::pin(async move { Ok(topic_limit) })
        }),
    };
    (limit, learned, lookups)
}

/// The broker refuses whole batches above a topic's max.message.bytes: a small record refused
/// as too large, on a topic whose limit is now below batch.size, restarts the run with the
/// lower cap (retryable, the cap learned) instead of stopping; nothing past it is confirmed.
#[tokio::test]
async fn a_refused_batch_restarts_with_the_topics_lower_limit() {
    let mut h = harness(&DeliveryConfig::default());
    let (limit, learned, _) = batch_limit(1_000_000, Some(150_000));
    h.core.set_batch_limit(limit);
    h.send(&[change(1, 10), change(2, 20)]).await;
    let mut sent = h.producer.take(2).await;
    let (_, second) = sent.pop().unwrap();
    let (record, first) = sent.pop().unwrap();
    let error = h
        .core
        .on_delivery(DeliveryEvent::Failed {
            error: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
            record,
            delivery: first,
        })
        .await
        .unwrap_err();
    assert!(error.is_retryable(), "{}", error.chain());
    assert!(
        error
            .chain()
            .contains("takes batches of at most 150000 bytes"),
        "{}",
        error.chain()
    );
    assert_eq!(learned.load(Ordering::SeqCst), 150_000);
    h.ack(second).await;
    assert_eq!(h.core.watermark(), Lsn(1), "nothing past the refused batch");
}

/// A refusal stays the record's when its topic's limit is not below batch.size (or the record
/// is not smaller than batch.size: then it is not looked up at all).
#[tokio::test]
async fn a_refused_record_on_a_topic_within_batch_size_still_stops() {
    for (batch_size, topic_limit, lookups_expected) in [
        (1_000_000, Some(1_048_588), 1),
        (1_000_000, None, 1),
        (2, Some(1), 0),
    ] {
        let mut h = harness(&DeliveryConfig::default());
        let (limit, learned, lookups) = batch_limit(batch_size, topic_limit);
        h.core.set_batch_limit(limit);
        h.send(&[change(1, 10)]).await;
        let (record, first) = h.producer.take(1).await.pop().unwrap();
        let error = h
            .core
            .on_delivery(DeliveryEvent::Failed {
                error: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
                record,
                delivery: first,
            })
            .await
            .unwrap_err();
        assert!(!error.is_retryable(), "{}", error.chain());
        assert_eq!(learned.load(Ordering::SeqCst), 0);
        assert_eq!(lookups.load(Ordering::SeqCst), lookups_expected);
    }
}

#[tokio::test]
async fn a_refused_record_stops_the_pipeline_with_its_position_under_the_stop_policy() {
    let mut h = harness(&DeliveryConfig::default());
    h.send(&[change(1, 10), change(2, 20)]).await;
    let mut sent = h.producer.take(2).await;
    let (_, second) = sent.pop().unwrap();
    let (record, first) = sent.pop().unwrap();
    let error = h
        .core
        .on_delivery(DeliveryEvent::Failed {
            error: KafkaError::MessageProduction(RDKafkaErrorCode::MessageSizeTooLarge),
            record,
            delivery: first,
        })
        .await
        .unwrap_err();
    assert!(!error.is_retryable());
    let text = error.chain();
    assert!(text.contains("position 10"), "{text}");
    assert!(
        error
            .hint()
            .is_some_and(|h| h.contains("max.message.bytes")),
        "{:?}",
        error.hint()
    );
    h.ack(second).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(1),
        "nothing past the refused record"
    );
}

#[tokio::test]
async fn a_transient_refusal_is_retried_by_a_restart() {
    let mut h = harness(&DeliveryConfig::default());
    h.send(&[change(1, 10)]).await;
    let (record, delivery) = h.producer.take(1).await.pop().unwrap();
    let error = h
        .core
        .on_delivery(DeliveryEvent::Failed {
            error: KafkaError::MessageProduction(RDKafkaErrorCode::RequestTimedOut),
            record,
            delivery,
        })
        .await
        .unwrap_err();
    assert!(error.is_retryable(), "{}", error.chain());
    assert_eq!(h.core.watermark(), Lsn(1));
}

#[tokio::test]
async fn an_encoder_failure_is_dead_lettered_and_its_other_places_released() {
    let mut h = harness(&delivery_config(
        PermanentErrorPolicy::DeadLetter,
        Some("dead-letters"),
    ));
    let mut broken = change(5, 20);
    broken.records = 2;
    broken.panics = true;
    h.send(&[change(4, 10), broken, change(6, 30)]).await;
    // The broken change becomes an event for the loop, the others records, in order.
    let mut sent = h.producer.take(2).await;
    let keys: Vec<_> = sent.iter().map(|(r, _)| r.key.clone().unwrap()).collect();
    assert_eq!(keys, [b"4".to_vec(), b"6".to_vec()]);
    let failed = h.events.recv().await.unwrap();
    assert!(
        matches!(failed, DeliveryEvent::EncodeFailed { ref position, .. } if position == "position 20")
    );
    h.core.on_delivery(failed).await.unwrap();
    let (letter, letter_delivery) = h.producer.take(1).await.pop().unwrap();
    assert_eq!(&*letter.topic, "dead-letters");
    assert_eq!(letter.value.as_deref(), Some(&b"{\"key\":5}"[..]));
    let (_, last) = sent.pop().unwrap();
    let (_, first) = sent.pop().unwrap();
    h.ack(first).await;
    h.ack(last).await;
    assert_eq!(
        h.core.watermark(),
        Lsn(10),
        "position 20 waits for its dead letter"
    );
    h.ack(letter_delivery).await;
    assert_eq!(h.core.watermark(), Lsn(30));
    assert_eq!(h.core.budget().in_flight_records(), 0);
}

#[tokio::test]
async fn an_encoder_failure_stops_with_the_change_position_under_the_stop_policy() {
    let mut h = harness(&DeliveryConfig::default());
    let mut broken = change(5, 20);
    broken.panics = true;
    h.send(&[broken]).await;
    let failed = h.events.recv().await.unwrap();
    let error = h.core.on_delivery(failed).await.unwrap_err();
    assert!(!error.is_retryable());
    let text = error.chain();
    assert!(
        text.contains("cannot encode the change at position 20"),
        "{text}"
    );
    assert!(text.contains("cannot render"), "{text}");
    assert_eq!(h.core.watermark(), Lsn(1));
}

#[tokio::test]
async fn a_full_producer_queue_is_waited_out_in_order_without_loss() {
    let mut h = harness(&DeliveryConfig::default());
    h.producer.full.store(50, Ordering::Relaxed);
    let changes: Vec<_> = (0..20).map(|n| change(n, 10 + u64::from(n))).collect();
    h.send(&changes).await;
    let sent = h.producer.take(20).await;
    assert!(
        h.producer.attempts.load(Ordering::Relaxed) >= 70,
        "the queue was full"
    );
    let keys: Vec<u32> = sent
        .iter()
        .map(|(r, _)| {
            String::from_utf8_lossy(r.key.as_ref().unwrap())
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(keys, (0..20).collect::<Vec<_>>(), "every record, in order");
    for (_, delivery) in sent {
        h.ack(delivery).await;
    }
    assert_eq!(h.core.watermark(), Lsn(29));
    drop(h.events_tx);
}

#[tokio::test]
async fn a_change_larger_than_the_budget_waits_for_an_empty_pipeline_then_passes_alone() {
    let producer = Arc::new(FakeProducer::default());
    let (events_tx, _events) = mpsc::unbounded_channel();
    let budget = InFlightBudget::new(
        NonZeroU32::new(1024).unwrap(),
        NonZeroU32::new(1000).unwrap(),
    );
    let (mut core, _publisher): (TestCore, _) = DeliveryCore::start(
        Arc::clone(&producer),
        budget,
        Lsn(1),
        &DeliveryConfig::default(),
        PipelineMetrics::new(),
        events_tx,
        position_of,
    );
    core.intake.admit(change(1, 10), 600, 1);
    core.intake.admit(change(2, 20), 5000, 1);
    core.process_steps().unwrap();
    assert_eq!(core.waiting_size(), Some(5000), "the large change waits");
    assert!(
        !core.can_read(),
        "reads stop while a change waits for the budget"
    );
    core.dispatch(encoder).await.unwrap();
    let (_, first) = producer.take(1).await.pop().unwrap();
    core.on_delivery(DeliveryEvent::Acked(first)).await.unwrap();
    let permit = core.budget().acquire(5000).await;
    core.admit_front(permit).unwrap();
    assert!(core.can_read());
    assert_eq!(core.budget().in_flight_records(), 1, "alone");
    assert_eq!(
        core.budget().in_flight_bytes(),
        1024,
        "holding the whole budget"
    );
}

// ------------------------------------------------------------------ the loop, with a source

/// What the scripted source reads.
enum Read {
    Change(TestChange),
    Checkpoint(u64),
    /// A transaction starts: the source is mid-transaction until `Commit`.
    Begin,
    Commit,
    /// Nothing arrives for this long (the next read waits).
    Gap(Duration),
    /// The next message is not there when a read burst asks for it, but arrives at once: the
    /// read after the burst finds it (a server whose messages trickle in).
    Later,
}

/// A second source on the same boundary: reads a script, confirms into a list.
struct ScriptedSource {
    script: VecDeque<Read>,
    confirmed: Arc<Mutex<Vec<Lsn>>>,
    /// The end of the gap being waited out (kept when a read is dropped).
    gap_until: Option<tokio::time::Instant>,
    in_transaction: bool,
    /// Encoders made: one per dispatched batch.
    batches: Arc<AtomicUsize>,
    /// A `Later` was found (and yielded on) by a read that was then dropped.
    later_seen: bool,
    /// When each change was taken: (key, time).
    taken: Arc<Mutex<Vec<(u32, tokio::time::Instant)>>>,
}

impl Source for ScriptedSource {
    type Change = TestChange;
    type Position = Lsn;
    type Message = Read;
    type Encoder = TestEncoder;

    /// Takes a message only when returning it, so a dropped read loses nothing (a gap's end is
    /// kept); at the script's end it never returns (a quiet server).
    async fn read(&mut self) -> Read {
        if let Some(Read::Gap(gap)) = self.script.front() {
            self.gap_until = Some(tokio::time::Instant::now() + *gap);
            self.script.pop_front();
        }
        if let Some(until) = self.gap_until {
            tokio::time::sleep_until(until).await;
            self.gap_until = None;
        }
        if let Some(Read::Later) = self.script.front() {
            if !self.later_seen {
                self.later_seen = true;
                tokio::task::yield_now().await;
            }
            self.later_seen = false;
            self.script.pop_front();
        }
        std::future::poll_fn(|_| match self.script.pop_front() {
            Some(read) => Poll::Ready(read),
            None => Poll::Pending,
        })
        .await
    }

    fn mid_transaction(&self) -> bool {
        self.in_transaction
    }

    async fn on_message(
        &mut self,
        message: Read,
        intake: &mut Intake<TestChange, Lsn>,
    ) -> Result<bool, PipelineError> {
        match message {
            Read::Change(change) => {
                self.taken
                    .lock()
                    .unwrap()
                    .push((change.key, tokio::time::Instant::now()));
                let records = change.records;
                intake.admit(change, 100, records);
            }
            Read::Checkpoint(at) => intake.checkpoint(Lsn(at)),
            Read::Begin => self.in_transaction = true,
            Read::Commit => self.in_transaction = false,
            Read::Gap(_) | Read::Later => unreachable!("gaps are waited out by read"),
        }
        Ok(false)
    }

    async fn before_checkpoint(
        &mut self,
        _intake: &mut Intake<TestChange, Lsn>,
    ) -> Result<bool, PipelineError> {
        Ok(false)
    }

    async fn confirm(&mut self, watermark: Lsn, _reply: bool) -> Result<(), PipelineError> {
        self.confirmed.lock().unwrap().push(watermark);
        Ok(())
    }

    async fn after_checkpoint(
        &mut self,
        _intake: &mut Intake<TestChange, Lsn>,
        _watermark: Lsn,
    ) -> Result<(), PipelineError> {
        Ok(())
    }

    fn encoder(&mut self) -> TestEncoder {
        self.batches.fetch_add(1, Ordering::Relaxed);
        encoder()
    }
}

/// A running loop over a script: the test acknowledges on `acks` and stops with `shutdown`.
struct Running {
    producer: Arc<FakeProducer>,
    acks: mpsc::UnboundedSender<DeliveryEvent>,
    shutdown: CancellationToken,
    confirmed: Arc<Mutex<Vec<Lsn>>>,
    batches: Arc<AtomicUsize>,
    taken: Arc<Mutex<Vec<(u32, tokio::time::Instant)>>>,
    task: tokio::task::JoinHandle<Result<(), PipelineError>>,
}

fn run_script(script: Vec<Read>) -> Running {
    let Harness {
        mut core,
        producer,
        mut events,
        events_tx,
    } = harness(&DeliveryConfig::default());
    core.drain_deadline = Duration::from_millis(300);
    let confirmed = Arc::new(Mutex::new(Vec::new()));
    let batches = Arc::new(AtomicUsize::new(0));
    let taken = Arc::new(Mutex::new(Vec::new()));
    let mut source = ScriptedSource {
        script: script.into(),
        confirmed: Arc::clone(&confirmed),
        gap_until: None,
        in_transaction: false,
        batches: Arc::clone(&batches),
        later_seen: false,
        taken: Arc::clone(&taken),
    };
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let task = tokio::spawn(async move {
        let board = crate::runtime::status::StatusBoard::new("test", "always");
        let health = crate::kafka::KafkaHealth::default();
        run(
            &mut source,
            &mut core,
            &mut events,
            LoopContext {
                shutdown: &stop,
                status_interval: Duration::from_millis(100),
                status: Some((&board, &health)),
            },
        )
        .await
    });
    Running {
        producer,
        acks: events_tx,
        shutdown,
        confirmed,
        batches,
        taken,
        task,
    }
}

fn script(changes: &[(u32, u64)]) -> Vec<Read> {
    changes
        .iter()
        .flat_map(|&(key, at)| [Read::Change(change(key, at)), Read::Checkpoint(at)])
        .collect()
}

#[tokio::test]
async fn the_loop_confirms_the_watermark_at_each_tick_never_waiting_for_in_flight_records() {
    let Running {
        producer,
        acks,
        shutdown,
        confirmed,
        task,
        ..
    } = run_script(script(&[(1, 10), (2, 20), (3, 30)]));
    let mut sent = producer.take(3).await;
    let (_, third) = sent.pop().unwrap();
    let (_, _second) = sent.pop().unwrap();
    let (_, first) = sent.pop().unwrap();
    acks.send(DeliveryEvent::Acked(first)).unwrap();
    acks.send(DeliveryEvent::Acked(third)).unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    let seen = confirmed.lock().unwrap().clone();
    assert!(
        seen.len() >= 2,
        "a checkpoint per tick while a record is in flight: {seen:?}"
    );
    assert_eq!(seen.last(), Some(&Lsn(10)), "{seen:?}");
    shutdown.cancel();
    // The drain waits (bounded) for the record still in flight, which never comes.
    task.await.unwrap().unwrap();
    assert_eq!(confirmed.lock().unwrap().last(), Some(&Lsn(10)));
}

#[tokio::test]
async fn shutdown_drains_in_flight_records_then_confirms() {
    let Running {
        producer,
        acks,
        shutdown,
        confirmed,
        task,
        ..
    } = run_script(script(&[(1, 10), (2, 20)]));
    let mut sent = producer.take(2).await;
    let (_, second) = sent.pop().unwrap();
    let (_, first) = sent.pop().unwrap();
    acks.send(DeliveryEvent::Acked(first)).unwrap();
    shutdown.cancel();
    // Reported after the stop was asked for: the drain still takes it.
    acks.send(DeliveryEvent::Acked(second)).unwrap();
    task.await.unwrap().unwrap();
    assert_eq!(
        confirmed.lock().unwrap().last(),
        Some(&Lsn(20)),
        "the last confirmation covers what the drain received"
    );
}

/// A transaction's changes read a few at a time (as a client that keeps up reads a server's
/// commit burst) are encoded as one batch at the commit, not one batch per read.
#[tokio::test(start_paused = true)]
async fn a_transaction_read_a_few_changes_at_a_time_is_dispatched_as_one_batch() {
    // Tokio's timers tick in milliseconds: one gap of 1 ms fits in the linger.
    assert!(DISPATCH_LINGER >= Duration::from_millis(2));
    let Running {
        producer,
        shutdown,
        batches,
        task,
        ..
    } = run_script(vec![
        Read::Begin,
        Read::Change(change(1, 10)),
        Read::Change(change(2, 20)),
        Read::Gap(Duration::from_millis(1)),
        Read::Change(change(3, 30)),
        Read::Change(change(4, 40)),
        Read::Commit,
        Read::Checkpoint(40),
    ]);
    let sent = producer.take(4).await;
    let keys: Vec<_> = sent
        .iter()
        .map(|(record, _)| record.key.clone().unwrap())
        .collect();
    assert_eq!(keys, [b"1", b"2", b"3", b"4"].map(|k| k.to_vec()));
    assert_eq!(batches.load(Ordering::Relaxed), 1, "one encoding batch");
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// Changes of a transaction whose rest does not arrive wait at most `DISPATCH_LINGER`.
#[tokio::test(start_paused = true)]
async fn changes_mid_transaction_wait_for_the_rest_at_most_the_linger() {
    let started = tokio::time::Instant::now();
    let Running {
        producer,
        shutdown,
        task,
        ..
    } = run_script(vec![
        Read::Begin,
        Read::Change(change(1, 10)),
        Read::Change(change(2, 20)),
        Read::Gap(Duration::from_secs(5)),
        Read::Commit,
    ]);
    producer.take(2).await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(1),
        "dispatched after {waited:?}, not before the rest of the transaction"
    );
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// When each of `keys` was taken, relative to the first change taken.
fn taken_after_start(
    taken: &Mutex<Vec<(u32, tokio::time::Instant)>>,
    keys: &[u32],
) -> Vec<Duration> {
    let taken = taken.lock().unwrap();
    let start = taken[0].1;
    keys.iter()
        .map(|key| {
            let (_, at) = taken.iter().find(|(k, _)| k == key).unwrap();
            *at - start
        })
        .collect()
}

/// A transaction of `held` changes in one burst, then two changes that trickle in.
fn trickling_transaction(held: u32) -> Vec<Read> {
    let mut script = vec![Read::Begin];
    script.extend((1..=held).map(|key| Read::Change(change(key, u64::from(key)))));
    script.extend([
        Read::Later,
        Read::Change(change(1001, 1001)),
        Read::Later,
        Read::Change(change(1002, 1002)),
        Read::Commit,
        Read::Checkpoint(1002),
    ]);
    script
}

/// Deep in a long transaction, a read that finds only a few messages makes the next one wait
/// `READ_PACE`, so the socket gathers a burst instead of waking the loop every few rows.
#[tokio::test(start_paused = true)]
async fn a_short_read_deep_in_a_long_transaction_paces_the_next() {
    let held = u32::try_from(PACE_AFTER).unwrap() + 6;
    let Running {
        producer,
        shutdown,
        taken,
        task,
        ..
    } = run_script(trickling_transaction(held));
    producer.take(held as usize + 2).await;
    let after = taken_after_start(&taken, &[1001, 1002]);
    // 1001 follows the long burst at once; the read after it (one message) paced the next.
    assert_eq!(after[0], Duration::ZERO, "{after:?}");
    assert!(after[1] >= READ_PACE, "{after:?}");
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// Short transactions are never paced: their commit is not held back.
#[tokio::test(start_paused = true)]
async fn a_short_transaction_is_never_paced() {
    let Running {
        producer,
        shutdown,
        taken,
        task,
        ..
    } = run_script(trickling_transaction(3));
    producer.take(5).await;
    let after = taken_after_start(&taken, &[1001, 1002]);
    assert_eq!(after, [Duration::ZERO, Duration::ZERO]);
    shutdown.cancel();
    task.await.unwrap().unwrap();
}

/// A chain of `[transforms]` from its TOML.
fn transforms(toml_text: &str) -> Arc<crate::transform::Chain> {
    #[derive(serde::Deserialize)]
    struct File {
        transforms: crate::transform::TransformsConfig,
        #[serde(default)]
        predicates: crate::transform::PredicatesConfig,
    }
    let file: File = toml::from_str(toml_text).unwrap();
    let chain = crate::transform::config::build(
        &file.transforms,
        &file.predicates,
        &crate::event::EventOptions::default(),
    )
    .unwrap()
    .unwrap();
    Arc::new(chain)
}

#[tokio::test]
async fn records_a_transform_drops_complete_their_places_so_the_watermark_moves_past_them() {
    let mut h = harness(&DeliveryConfig::default());
    h.core.set_transforms(Some(transforms(
        "[transforms]\nchain = \"f\"\n[transforms.f]\ntype = \"Filter\"\npredicate = \"odd\"\n\
         [predicates.odd]\ntype = \"HasHeaderKey\"\nname = \"sluice.lsn\"\n",
    )));
    // Every record carries the lsn header: all are dropped, none reaches the producer.
    let mut delete = change(7, 10);
    delete.records = 2;
    h.send(&[delete, change(8, 20)]).await;
    let mut acked = 0;
    while acked < 3 {
        let event = tokio::time::timeout(Duration::from_secs(10), h.events.recv())
            .await
            .expect("the dropped records' places are completed")
            .unwrap();
        assert!(matches!(event, DeliveryEvent::Acked(_)));
        h.core.on_delivery(event).await.unwrap();
        acked += 1;
    }
    assert_eq!(h.core.watermark(), Lsn(20), "past the dropped records");
    assert!(h.producer.sent.lock().unwrap().is_empty());
    assert_eq!(h.core.budget().in_flight_records(), 0);
}

#[tokio::test]
async fn a_record_a_transform_refuses_stops_the_pipeline_naming_the_transform() {
    let mut h = harness(&DeliveryConfig::default());
    // The test encoder's values are not JSON objects: ValueToKey refuses them.
    h.core.set_transforms(Some(transforms(
        "[transforms]\nchain = \"tokey\"\n[transforms.tokey]\ntype = \"ValueToKey\"\nfields = \"id\"\n",
    )));
    h.send(&[change(1, 10)]).await;
    let event = tokio::time::timeout(Duration::from_secs(10), h.events.recv())
        .await
        .unwrap()
        .unwrap();
    let error = h.core.on_delivery(event).await.unwrap_err().to_string();
    assert!(
        error.contains("transform \"tokey\" failed") && error.contains("position 10"),
        "{error}"
    );
    assert_eq!(h.core.watermark(), Lsn(1));
}

/// Exactly once: records a transform drops complete their places without a transaction to
/// carry them (none opens for them), so a run of dropped changes still moves the watermark.
#[tokio::test]
async fn exactly_once_records_a_transform_drops_complete_their_places_without_a_transaction() {
    let producer = Arc::new(FakeProducer::default());
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let budget = InFlightBudget::new(
        NonZeroU32::new(1 << 20).unwrap(),
        NonZeroU32::new(1000).unwrap(),
    );
    let transactions = super::exactly_once::Transactions {
        offsets_topic: Arc::from("offsets"),
        position_value: Arc::new(|_: &OutRecord| Vec::new()),
        boundary: None,
        interval: Duration::from_millis(10),
        max_bytes: 1 << 20,
    };
    let (mut core, _publisher) = TestCore::start_exactly_once(
        Arc::clone(&producer),
        budget,
        Lsn(1),
        &DeliveryConfig::default(),
        PipelineMetrics::new(),
        events_tx,
        position_of,
        transactions,
    );
    core.set_transforms(Some(transforms(
        "[transforms]\nchain = \"f\"\n[transforms.f]\ntype = \"Filter\"\npredicate = \"all\"\n\
         [predicates.all]\ntype = \"HasHeaderKey\"\nname = \"sluice.lsn\"\n",
    )));
    let mut delete = change(7, 10);
    delete.records = 2;
    for c in [delete, change(8, 20)] {
        let records = c.records;
        let position = c.position;
        core.intake.admit(c, 100, records);
        core.intake.checkpoint(Lsn(position));
    }
    core.process_steps().unwrap();
    core.dispatch(encoder).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while core.watermark() != Lsn(20) {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped records' places were not completed: watermark {:?}",
            core.watermark()
        );
        if let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(100), events.recv()).await
        {
            core.on_delivery(event).await.unwrap();
        }
    }
    assert!(producer.sent.lock().unwrap().is_empty());
    assert_eq!(core.budget().in_flight_records(), 0);
}

/// An encoder that applies the chain itself (as the PostgreSQL encoder's direct path does):
/// writes each change's first record only.
struct DirectEncoder(TestEncoder);

impl Encode<TestChange> for DirectEncoder {
    fn encode(&self, change: &TestChange, out: &mut Vec<OutRecord>) -> Origin {
        let origin = self.0.encode(change, out);
        out.truncate(1);
        origin
    }

    fn describe(&self, change: &TestChange, reason: &str) -> FailedChange {
        self.0.describe(change, reason)
    }

    fn transforms_applied(&self, _change: &TestChange) -> bool {
        true
    }
}

#[tokio::test]
async fn an_encoder_that_applies_the_chain_itself_gets_no_chain_and_its_dropped_places_complete() {
    let mut h = harness(&DeliveryConfig::default());
    // The test encoder's values are not JSON objects: ValueToKey would refuse every record.
    h.core.set_transforms(Some(transforms(
        "[transforms]\nchain = \"tokey\"\n[transforms.tokey]\ntype = \"ValueToKey\"\nfields = \"id\"\n",
    )));
    let mut key_change = change(7, 10);
    key_change.records = 3;
    for change in [key_change, change(8, 20)] {
        let records = change.records;
        h.core.intake.admit(change.clone(), 100, records);
        h.core.intake.checkpoint(Lsn(change.position));
    }
    h.core.process_steps().unwrap();
    h.core.dispatch(|| DirectEncoder(encoder())).await.unwrap();
    // The two records the encoder left out complete at once; the two it wrote are sent as
    // written (not through the chain).
    let mut skipped = 0;
    while skipped < 2 {
        let event = tokio::time::timeout(Duration::from_secs(10), h.events.recv())
            .await
            .expect("the left-out records' places are completed")
            .unwrap();
        assert!(matches!(event, DeliveryEvent::Acked(_)), "{event:?}");
        h.core.on_delivery(event).await.unwrap();
        skipped += 1;
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while h.producer.sent.lock().unwrap().len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the written records were not sent"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        h.core.watermark(),
        Lsn(1),
        "the written records are not acknowledged yet"
    );
    let sent: Vec<_> = std::mem::take(&mut *h.producer.sent.lock().unwrap());
    let values: Vec<_> = sent
        .iter()
        .map(|(r, _)| String::from_utf8(r.value.clone().unwrap()).unwrap())
        .collect();
    assert_eq!(values, ["7#0", "8#0"]);
    for (_, delivery) in sent {
        h.ack(delivery).await;
    }
    assert_eq!(h.core.watermark(), Lsn(20));
    assert_eq!(h.core.budget().in_flight_records(), 0);
}

/// A transactional producer that logs what it is asked, in order (and keeps the records'
/// bookkeeping for the test to acknowledge).
#[derive(Default)]
struct TransactionLog(Mutex<Vec<String>>, Mutex<Vec<Delivery>>);

impl RecordSink for TransactionLog {
    fn try_send(&self, record: OutRecord, delivery: Box<Delivery>) -> Result<(), SendError> {
        let value = String::from_utf8_lossy(record.value.as_deref().unwrap_or_default());
        self.0
            .lock()
            .unwrap()
            .push(format!("send {value} #{}", delivery.seq.0));
        self.1.lock().unwrap().push(*delivery);
        Ok(())
    }

    fn begin_transaction(&self) -> rdkafka::error::KafkaResult<()> {
        self.0.lock().unwrap().push("begin".into());
        Ok(())
    }

    fn commit_transaction(&self, _timeout: Duration) -> rdkafka::error::KafkaResult<()> {
        self.0.lock().unwrap().push("commit".into());
        Ok(())
    }

    fn abort_transaction(&self, _timeout: Duration) -> rdkafka::error::KafkaResult<()> {
        self.0.lock().unwrap().push("abort".into());
        Ok(())
    }

    fn send_unreported(
        &self,
        topic: &str,
        key: &[u8],
        value: &[u8],
    ) -> rdkafka::error::KafkaResult<()> {
        let (key, value) = (String::from_utf8_lossy(key), String::from_utf8_lossy(value));
        self.0
            .lock()
            .unwrap()
            .push(format!("offsets {topic} {key}={value}"));
        Ok(())
    }
}

impl TransactionLog {
    /// Waits (bounded) until the log holds `count` entries, and returns it.
    async fn wait(&self, count: usize) -> Vec<String> {
        for _ in 0..10_000 {
            {
                let log = self.0.lock().unwrap();
                if log.len() >= count {
                    return log.clone();
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!(
            "the log never reached {count} entries: {:?}",
            self.0.lock().unwrap()
        );
    }
}

/// Exactly once: a transaction ends exactly at a source's commit point, holding the offsets
/// records given there, and never elsewhere (the source says no record is a boundary); the
/// checkpoint after the point passes only once that transaction has committed; a commit point
/// with no record before it still writes its offsets records in a transaction of their own.
#[tokio::test]
async fn exactly_once_transactions_end_at_the_sources_commit_points() {
    let producer = Arc::new(TransactionLog::default());
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let budget = InFlightBudget::new(
        NonZeroU32::new(1 << 20).unwrap(),
        NonZeroU32::new(1000).unwrap(),
    );
    let transactions = super::exactly_once::Transactions {
        offsets_topic: Arc::from("offsets"),
        position_value: Arc::new(|_: &OutRecord| Vec::new()),
        boundary: Some(Arc::new(|_: &OutRecord| false)),
        interval: Duration::from_millis(1),
        max_bytes: 1,
    };
    let (mut core, _publisher) =
        DeliveryCore::<TestChange, Lsn, TransactionLog>::start_exactly_once(
            Arc::clone(&producer),
            budget,
            Lsn(1),
            &DeliveryConfig::default(),
            PipelineMetrics::new(),
            events_tx,
            position_of,
            transactions,
        );
    let offsets = |value: &str| vec![(b"p.snapshot".to_vec(), value.as_bytes().to_vec())];
    core.intake.admit(change(1, 10), 100, 1);
    core.intake.admit(change(2, 10), 100, 1);
    core.intake.commit_point(offsets("chunks 0"));
    core.intake.checkpoint(Lsn(10));
    core.intake.admit(change(3, 20), 100, 1);
    core.intake.checkpoint(Lsn(20));
    core.process_steps().unwrap();
    core.dispatch(encoder).await.unwrap();
    let log = producer.wait(6).await;
    assert_eq!(
        log[..6],
        [
            "begin",
            "send 1#0 #0",
            "send 2#0 #1",
            "offsets offsets p.snapshot=chunks 0",
            "commit",
            "begin"
        ],
        "{log:?}"
    );
    // Its time and byte budgets ran out long ago: still no commit without a commit point.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(producer.wait(7).await[6..], ["send 3#0 #3"]);
    assert_eq!(
        producer.0.lock().unwrap().len(),
        7,
        "a commit without a commit point"
    );
    // Every record acknowledged by Kafka: the watermark passes the committed point only.
    let delivered: Vec<Delivery> = producer.1.lock().unwrap().drain(..).collect();
    for delivery in delivered {
        core.on_delivery(DeliveryEvent::Acked(Box::new(delivery)))
            .await
            .unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while core.watermark() != Lsn(10) {
        assert!(
            std::time::Instant::now() < deadline,
            "watermark {:?}",
            core.watermark()
        );
        if let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(20), events.recv()).await
        {
            core.on_delivery(event).await.unwrap();
        }
    }
    for _ in 0..5 {
        if let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(20), events.recv()).await
        {
            core.on_delivery(event).await.unwrap();
        }
    }
    assert_eq!(
        core.watermark(),
        Lsn(10),
        "past a record whose transaction is open"
    );
    // A commit point with nothing before it in its transaction: the third record's
    // transaction ends there, and a second point is a transaction of its own.
    core.intake.commit_point(offsets("chunks 0,1"));
    core.intake.checkpoint(Lsn(30));
    core.intake.commit_point(offsets("chunks 0,1,2"));
    core.process_steps().unwrap();
    core.dispatch(encoder).await.unwrap();
    let log = producer.wait(12).await;
    assert_eq!(
        log[7..12],
        [
            "offsets offsets p.snapshot=chunks 0,1",
            "commit",
            "begin",
            "offsets offsets p.snapshot=chunks 0,1,2",
            "commit"
        ],
        "{log:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while core.watermark() != Lsn(30) {
        assert!(
            std::time::Instant::now() < deadline,
            "watermark {:?}",
            core.watermark()
        );
        if let Ok(Some(event)) =
            tokio::time::timeout(Duration::from_millis(20), events.recv()).await
        {
            core.on_delivery(event).await.unwrap();
        }
    }
}

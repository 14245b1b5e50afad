//! Batch consume, and producing through a topic handle, against librdkafka's mock cluster (no
//! broker needed). `scripts/test` also runs these under AddressSanitizer, which catches a
//! message destroyed twice or read after it was destroyed, and an opaque freed twice or never.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::sleep;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::PartitionBatchQueue;

const TOPIC: &str = "batch";

/// A record as the test produces and expects it back.
#[derive(Debug, PartialEq, Eq)]
struct Record {
    offset: i64,
    key: Option<Vec<u8>>,
    payload: Option<Vec<u8>>,
}

/// Keys and values with and without bytes: no key, no value (a tombstone), empty ones.
fn records(count: i64) -> Vec<Record> {
    (0..count)
        .map(|offset| Record {
            offset,
            key: match offset % 3 {
                0 => None,
                1 => Some(Vec::new()),
                _ => Some(format!("key-{offset}").into_bytes()),
            },
            payload: match offset % 4 {
                0 => None,
                1 => Some(Vec::new()),
                _ => Some(format!("value-{offset}-{}", "x".repeat(offset as usize)).into_bytes()),
            },
        })
        .collect()
}

fn produce(cluster: &MockCluster<'_, impl rdkafka::producer::ProducerContext>, records: &[Record]) {
    produce_to(&cluster.bootstrap_servers(), records);
}

fn produce_to(bootstrap_servers: &str, records: &[Record]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap_servers)
        .create()
        .expect("producer");
    for record in records {
        let mut message = BaseRecord::<[u8], [u8]>::to(TOPIC).partition(0);
        if let Some(key) = &record.key {
            message = message.key(key);
        }
        if let Some(payload) = &record.payload {
            message = message.payload(payload);
        }
        producer.send(message).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
}

fn consumer(
    cluster: &MockCluster<'_, impl rdkafka::producer::ProducerContext>,
    start: Offset,
    reset: &str,
) -> Arc<BaseConsumer> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .set("group.id", "batch-test")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("auto.offset.reset", reset)
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(TOPIC, 0, start)
        .expect("assignment");
    consumer.assign(&assignment).expect("assign");
    Arc::new(consumer)
}

fn cluster() -> MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 1, 1).expect("topic");
    cluster
}

/// Takes one batch, copying what it returns.
fn take(queue: &mut PartitionBatchQueue, max: usize, into: &mut Vec<Record>) -> usize {
    let count = queue
        .consume_batch(max, |message| {
            let message = message.expect("a record, not an error");
            assert_eq!(message.partition(), 0);
            assert!(message.timestamp_millis().is_some_and(|t| t > 0));
            into.push(Record {
                offset: message.offset(),
                key: message.key().map(<[u8]>::to_vec),
                payload: message.payload().map(<[u8]>::to_vec),
            });
        })
        .expect("batch call");
    assert!(count <= max);
    count
}

#[test]
fn batches_return_every_record_in_order() {
    let cluster = cluster();
    let expected = records(40);
    produce(&cluster, &expected);
    let consumer = consumer(&cluster, Offset::Beginning, "earliest");
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");
    assert!(PartitionBatchQueue::split(&consumer, "no\0such", 0).is_none());
    // The queue keeps its consumer alive: the test's own reference can go first.
    drop(consumer);

    let mut got = Vec::new();
    // Batch sizes in turn, the last larger than what is left.
    let sizes = [1, 3, 7, 2, 100];
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut turn = 0;
    while got.len() < expected.len() {
        assert!(Instant::now() < deadline, "only {} records came", got.len());
        if take(&mut queue, sizes[turn % sizes.len()], &mut got) == 0 {
            sleep(Duration::from_millis(10));
        } else {
            turn += 1;
        }
    }
    assert_eq!(got, expected);
    // Nothing more: an empty batch, and a batch of none.
    assert_eq!(take(&mut queue, 64, &mut got), 0);
    assert_eq!(queue.consume_batch(0, |_| panic!("no message")), Ok(0));
    drop(queue);
}

#[test]
fn a_panicking_callback_loses_only_its_batch() {
    let cluster = cluster();
    let expected = records(30);
    produce(&cluster, &expected);
    let consumer = consumer(&cluster, Offset::Beginning, "earliest");
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");

    // The callback fails at offset 2, in the middle of a batch of up to 10.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    let mut panicked = false;
    while !panicked {
        assert!(Instant::now() < deadline, "no records came");
        sleep(Duration::from_millis(10));
        panicked = catch_unwind(AssertUnwindSafe(|| {
            queue.consume_batch(10, |message| {
                let offset = message.expect("a record").offset();
                seen.push(offset);
                assert_ne!(offset, 2, "the callback fails");
            })
        }))
        .is_err();
    }
    assert_eq!(seen, vec![0, 1, 2]);

    // The rest of that batch is gone (destroyed with it); the next batch goes on after it.
    let mut got = Vec::new();
    while got.last().is_none_or(|last: &Record| last.offset < 29) {
        assert!(Instant::now() < deadline, "only {} records came", got.len());
        if take(&mut queue, 20, &mut got) == 0 {
            sleep(Duration::from_millis(10));
        }
    }
    let resumed = got[0].offset as usize;
    assert!((3..=10).contains(&resumed), "went on at {resumed}");
    assert_eq!(got, expected[resumed..]);
    drop(queue);
    drop(consumer);
}

#[test]
fn partition_errors_come_as_errors() {
    let cluster = cluster();
    produce(&cluster, &records(5));
    // An offset past the end with no automatic reset: librdkafka reports the partition's
    // error on its queue.
    let consumer = consumer(&cluster, Offset::Offset(1000), "error");
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut errors = Vec::new();
    while errors.is_empty() {
        assert!(Instant::now() < deadline, "no error came");
        sleep(Duration::from_millis(10));
        queue
            .consume_batch(8, |message| match message {
                Ok(message) => panic!("a record at offset {}", message.offset()),
                Err(error) => errors.push(error),
            })
            .expect("batch call");
    }
    assert!(
        matches!(
            errors[0],
            KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)
        ),
        "{errors:?}"
    );
    drop(queue);
    drop(consumer);
}

/// Delivery reports as the producer's context gets them: the opaque (a `Box`, so that
/// AddressSanitizer sees one freed twice or never) with the partition and offset, or the
/// error.
#[derive(Default)]
struct Reports(std::sync::Mutex<Vec<Report>>);

/// A delivery report: the opaque's number, and the partition and offset or the error.
type Report = (u64, Result<(i32, i64), KafkaError>);

impl rdkafka::ClientContext for Reports {}

impl rdkafka::producer::ProducerContext for Reports {
    type DeliveryOpaque = Box<u64>;

    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, opaque: Box<u64>) {
        use rdkafka::Message;
        let result = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((error, _)) => Err(error.clone()),
        };
        self.0.lock().expect("reports").push((*opaque, result));
    }
}

fn reporting_producer(
    cluster: &MockCluster<'_, impl rdkafka::producer::ProducerContext>,
    extra: &[(&str, &str)],
) -> BaseProducer<Reports> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", cluster.bootstrap_servers());
    for (key, value) in extra {
        config.set(*key, *value);
    }
    config
        .create_with_context(Reports::default())
        .expect("producer")
}

#[test]
fn a_topic_handle_produces_with_and_without_keys() {
    let cluster = cluster();
    let expected = records(60);
    let producer = reporting_producer(&cluster, &[]);
    let topic = crate::TopicProducer::new(&producer, TOPIC).expect("topic handle");
    assert!(crate::TopicProducer::new(&producer, "no\0such").is_err());
    for record in &expected {
        // Half to the partition named, half to where the partitioner puts it (the only one).
        let partition = (record.offset % 2 == 0).then_some(0);
        let opaque = Box::new(1000 + record.offset as u64);
        topic
            .send(
                partition,
                record.key.as_deref(),
                record.payload.as_deref(),
                opaque,
            )
            .map_err(|(e, _)| e)
            .expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    drop(topic);

    let mut reports = std::mem::take(&mut *producer.context().0.lock().expect("reports"));
    reports.sort_by_key(|(opaque, _)| *opaque);
    let want: Vec<_> = expected
        .iter()
        .map(|r| (1000 + r.offset as u64, Ok::<_, KafkaError>((0, r.offset))))
        .collect();
    assert_eq!(reports, want);
    drop(producer);

    let consumer = consumer(&cluster, Offset::Beginning, "earliest");
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < expected.len() {
        assert!(Instant::now() < deadline, "only {} records came", got.len());
        if take(&mut queue, 100, &mut got) == 0 {
            sleep(Duration::from_millis(10));
        }
    }
    assert_eq!(got, expected);
}

#[test]
fn a_full_queue_hands_the_opaque_back() {
    let cluster = cluster();
    // Five records at most in the queue, and none sent for a second: the sixth, sent right
    // after, finds it full. (A linger of a minute, counting on the flush to override it, made
    // the flush take ~20 s under AddressSanitizer and once time out in CI.)
    let producer = reporting_producer(
        &cluster,
        &[("queue.buffering.max.messages", "5"), ("linger.ms", "1000")],
    );
    let topic = crate::TopicProducer::new(&producer, TOPIC).expect("topic handle");
    for n in 0..5 {
        topic
            .send(None, None, Some(b"v"), Box::new(n))
            .map_err(|(e, _)| e)
            .expect("send");
    }
    let (error, opaque) = topic
        .send(Some(0), Some(b"k"), Some(b"v"), Box::new(77))
        .expect_err("the queue is full");
    assert!(
        matches!(
            error,
            KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
        ),
        "{error:?}"
    );
    assert_eq!(*opaque, 77);
    producer.flush(Duration::from_secs(30)).expect("flush");
    let mut opaques: Vec<u64> = producer
        .context()
        .0
        .lock()
        .expect("reports")
        .iter()
        .map(|(opaque, result)| {
            assert!(result.is_ok(), "{result:?}");
            *opaque
        })
        .collect();
    opaques.sort_unstable();
    assert_eq!(opaques, vec![0, 1, 2, 3, 4]);
    drop(topic);
    drop(producer);
}

#[test]
fn records_reaching_an_empty_queue_wake_the_reader() {
    let cluster = cluster();
    let consumer = consumer(&cluster, Offset::Beginning, "earliest");
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");
    // A first target, replaced: its box is freed while the second one is registered.
    let other = std::thread::spawn(|| {});
    queue.wake_on_records(other.thread().clone());
    other.join().expect("thread");
    queue.wake_on_records(std::thread::current());
    // No wake-up token left over from anything before.
    std::thread::park_timeout(Duration::ZERO);

    let expected = records(5);
    let bootstrap_servers = cluster.bootstrap_servers();
    let started = Instant::now();
    std::thread::scope(|scope| {
        scope.spawn(|| produce_to(&bootstrap_servers, &expected));
        let mut got = Vec::new();
        while got.len() < expected.len() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "only {} records came",
                got.len()
            );
            if take(&mut queue, 100, &mut got) == 0 {
                // Only the queue's callback ends this wait early.
                std::thread::park_timeout(Duration::from_secs(20));
            }
        }
        assert_eq!(got, expected);
    });
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the reader slept out its wait: {:?}",
        started.elapsed()
    );

    // Dropped, the queue's callback is gone with its target: records that reach the partition
    // afterwards call nothing (AddressSanitizer would see a freed target read).
    drop(queue);
    let more = records(10);
    produce(&cluster, &more[5..]);
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 5 {
        assert!(Instant::now() < deadline, "only {} records came", got.len());
        if take(&mut queue, 100, &mut got) == 0 {
            sleep(Duration::from_millis(10));
        }
    }
    assert_eq!(got, more[5..]);
}

#[test]
fn headers_come_back_in_order_with_null_values() {
    use rdkafka::message::{Header, OwnedHeaders};
    let cluster = cluster();
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .expect("producer");
    let headers = OwnedHeaders::new()
        .insert(Header {
            key: "a",
            value: Some(&b"1"[..]),
        })
        .insert(Header::<&[u8]> {
            key: "null",
            value: None,
        })
        .insert(Header {
            key: "a",
            value: Some(&b"\xff\x00"[..]),
        });
    producer
        .send(
            BaseRecord::<[u8], [u8]>::to(TOPIC)
                .partition(0)
                .payload(&b"with"[..])
                .headers(headers),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    producer
        .send(
            BaseRecord::<[u8], [u8]>::to(TOPIC)
                .partition(0)
                .payload(&b"without"[..]),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(30)).expect("flush");
    let consumer = consumer(&cluster, Offset::Beginning, "earliest");
    let mut queue = PartitionBatchQueue::split(&consumer, TOPIC, 0).expect("partition queue");
    type Headers = Vec<(Vec<u8>, Option<Vec<u8>>)>;
    let mut got: Vec<Headers> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.len() < 2 {
        assert!(Instant::now() < deadline, "only {} records came", got.len());
        queue
            .consume_batch(10, |message| {
                let message = message.expect("a record");
                let mut headers = Vec::new();
                message.for_each_header(|name, value| {
                    headers.push((name.to_vec(), value.map(<[u8]>::to_vec)));
                });
                got.push(headers);
            })
            .expect("batch call");
        sleep(Duration::from_millis(10));
    }
    assert_eq!(
        got[0],
        [
            (b"a".to_vec(), Some(b"1".to_vec())),
            (b"null".to_vec(), None),
            (b"a".to_vec(), Some(b"\xff\x00".to_vec())),
        ]
    );
    assert!(got[1].is_empty());
}

//! Producing a record's value without copying it.
//!
//! The binding's `BaseRecord` send passes `RD_KAFKA_MSG_F_COPY`: librdkafka copies every value into
//! a buffer of its own, and the encoded `Vec` is freed right after — one allocation, one
//! `memcpy` and one free per record for nothing (bench/PROFILE.md, "Zero-copy produce"). Here the value is
//! produced with no flag at all, which librdkafka documents (`rd_kafka_produce` in `rdkafka.h`)
//! as: "If neither of these are set, the caller must ensure that the memory backing `payload`
//! remains valid and is not modified or reused until the delivery callback is invoked." So the
//! `Vec` itself travels with the record: it is moved into the record's delivery opaque (a
//! [`Held`] inside the boxed bookkeeping that librdkafka already carries to the delivery
//! report), and librdkafka gets a pointer to its bytes.
//!
//! Why that is sound:
//! - The opaque is a `Box<D>` turned into a raw pointer with rdkafka's own
//!   [`IntoOpaque::into_ptr`] and turned back with [`IntoOpaque::from_ptr`] exactly once:
//!   either here, when `rd_kafka_producev` refuses the record (it then did not enqueue it and
//!   keeps no pointer to the value or the opaque), or by rdkafka when it serves the record's
//!   delivery report (the context's `DeliveryOpaque` is `Box<D>`, so rdkafka's poll calls
//!   `Box::from_raw` on the same pointer). librdkafka reports every enqueued record exactly once:
//!   delivered, failed, timed out or purged — the producer's drop purges what is still queued or
//!   in flight and polls the reports.
//! - The value's heap buffer does not move when the `Vec` is moved into the box, and nothing
//!   reads or writes the `Vec` while librdkafka holds the pointer: the box is a raw pointer in
//!   librdkafka's hands until the report, so no Rust code can reach it.
//! - After the delivery report librdkafka reads the value no more (the contract above; without
//!   `RD_KAFKA_MSG_F_FREE` it does not free it either), so the report's receiver owns the value
//!   again and may drop it or, for a failed record, hand it on (no copy there either).
//!   The one rule for the receiver: the report's borrowed message still points at the value, so
//!   do not read `message.payload()` once the value was taken — take it from the [`Held`]
//!   instead (sluice's `PipelineProducerContext::delivery` does).
//! - Keys and headers are copied by librdkafka as before (keys are small; `rdkafka.h`: "Other
//!   buffers passed to `rd_kafka_produce()` don't have this restriction"). The headers list is
//!   made here (the binding's `OwnedHeaders` does not give its pointer out) and is owned by
//!   librdkafka once the call succeeds; when it fails, it is destroyed here, once.
//!
//! If the producer is destroyed with records whose reports never got polled (the drop's flush
//! timed out), their boxes leak, as the binding's own boxed opaques do; nothing is freed twice.
//! The tests below run under AddressSanitizer in `scripts/test` (a value or an opaque freed twice,
//! read after it was freed, or never freed fails them).

#![allow(unsafe_code)]

use std::ffi::{CString, c_int, c_void};
use std::ptr::{self, NonNull};

use rdkafka::bindings as rdsys;
use rdkafka::bindings::rd_kafka_vtype_t::{
    RD_KAFKA_VTYPE_END, RD_KAFKA_VTYPE_HEADERS, RD_KAFKA_VTYPE_KEY, RD_KAFKA_VTYPE_MSGFLAGS,
    RD_KAFKA_VTYPE_OPAQUE, RD_KAFKA_VTYPE_PARTITION, RD_KAFKA_VTYPE_TOPIC, RD_KAFKA_VTYPE_VALUE,
};
use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, ProducerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::util::IntoOpaque;

/// A record's value while librdkafka points into it (from [`produce_zero_copy`] to the delivery report).
#[derive(Debug, Default)]
pub struct Held(Option<Vec<u8>>);

impl Held {
    /// No value held (the bookkeeping of a record not produced through [`produce_zero_copy`]).
    pub const NONE: Self = Self(None);

    /// The value back. Only the owner of the bookkeeping can call it, and it owns it only
    /// before [`produce_zero_copy`] or after librdkafka let go of the value (see the module's comment).
    pub fn take(&mut self) -> Option<Vec<u8>> {
        self.0.take()
    }
}

/// Delivery bookkeeping that can carry the value of its record.
pub trait HoldsValue: Send + Sync {
    /// Where the value waits for the delivery report.
    fn held(&mut self) -> &mut Held;
}

/// A record librdkafka did not take: why, and its value and bookkeeping, untouched.
#[derive(Debug)]
pub struct Refused<D> {
    /// librdkafka's refusal (queue full, too large, unknown partition, …).
    pub error: KafkaError,
    /// The value, as given.
    pub value: Option<Vec<u8>>,
    /// The bookkeeping, as given.
    pub opaque: Box<D>,
}

/// The address librdkafka gets for an empty value: a valid pointer, never read (length 0).
static EMPTY: [u8; 1] = [0];

/// A librdkafka headers list we own until `rd_kafka_producev` takes it.
struct NativeHeaders(NonNull<rdsys::rd_kafka_headers_t>);

impl NativeHeaders {
    /// The list of `headers` (names and values copied), or `None` when there are none.
    fn new<H: AsRef<str>, V: AsRef<[u8]>>(headers: &[(H, V)]) -> Option<Self> {
        if headers.is_empty() {
            return None;
        }
        // SAFETY: allocates a new, empty list that we own (never NULL: librdkafka aborts
        // when out of memory).
        let list = unsafe { rdsys::rd_kafka_headers_new(headers.len()) };
        let list = Self(NonNull::new(list)?);
        for (name, value) in headers {
            let (name, value) = (name.as_ref(), value.as_ref());
            // SAFETY: the list is ours and writable (not yet a message's); name and value are
            // valid for their lengths during the call, and librdkafka copies both. It fails only
            // for a read-only list.
            unsafe {
                rdsys::rd_kafka_header_add(
                    list.0.as_ptr(),
                    name.as_ptr().cast(),
                    name.len() as isize,
                    value.as_ptr().cast(),
                    value.len() as isize,
                )
            };
        }
        Some(list)
    }

    /// The pointer to pass to librdkafka (`None`: NULL).
    fn ptr(list: Option<&Self>) -> *mut rdsys::rd_kafka_headers_t {
        list.map_or(ptr::null_mut(), |list| list.0.as_ptr())
    }
}

impl Drop for NativeHeaders {
    fn drop(&mut self) {
        // SAFETY: still ours (a list librdkafka took is forgotten, not dropped): destroyed once.
        unsafe { rdsys::rd_kafka_headers_destroy(self.0.as_ptr()) };
    }
}

/// Enqueues a record in `producer` without copying `value`: the value waits in `opaque` for
/// the record's delivery report, which hands `opaque` (with the value in its [`Held`]) to the
/// producer context's `delivery`. `partition` `None`: the producer's partitioner. The key,
/// the topic name and the headers (name, value) are copied as with the binding's `send`.
///
/// # Errors
///
/// [`Refused`] when librdkafka does not enqueue the record; nothing of it stays with
/// librdkafka then.
#[allow(clippy::too_many_arguments)]
pub fn produce_zero_copy<P, C, D, H, V>(
    producer: &P,
    topic: &str,
    partition: Option<i32>,
    key: Option<&[u8]>,
    value: Option<Vec<u8>>,
    headers: &[(H, V)],
    mut opaque: Box<D>,
) -> Result<(), Box<Refused<D>>>
where
    P: Producer<C>,
    C: ProducerContext<DeliveryOpaque = Box<D>>,
    D: HoldsValue,
    H: AsRef<str>,
    V: AsRef<[u8]>,
{
    let topic = match CString::new(topic) {
        Ok(topic) => topic,
        Err(error) => {
            return Err(Box::new(Refused {
                error: error.into(),
                value,
                opaque,
            }));
        }
    };
    let held = opaque.held();
    *held = Held(value);
    let (value_ptr, value_len) = match &held.0 {
        None => (ptr::null_mut(), 0),
        Some(bytes) if bytes.is_empty() => (EMPTY.as_ptr().cast_mut().cast::<c_void>(), 0),
        Some(bytes) => (bytes.as_ptr().cast_mut().cast::<c_void>(), bytes.len()),
    };
    let (key_ptr, key_len) = key.map_or((ptr::null_mut(), 0), |key| {
        (key.as_ptr().cast_mut().cast::<c_void>(), key.len())
    });
    let headers = NativeHeaders::new(headers);
    let headers_ptr = NativeHeaders::ptr(headers.as_ref());
    let opaque_ptr = opaque.into_ptr();
    // SAFETY: the handle is the producer's, alive for the call; the topic and the key are
    // valid for the call (librdkafka copies them); the value's bytes live in the boxed opaque
    // until its delivery report (module comment); `headers_ptr` is null or a live list of ours
    // whose ownership passes to librdkafka on success only (below); the tags and their argument
    // types are those of `rdkafka.h` (`RD_KAFKA_V_*`), as the binding's `BaseProducer::send`
    // passes them.
    let err = unsafe {
        rdsys::rd_kafka_producev(
            producer.client().native_ptr(),
            RD_KAFKA_VTYPE_TOPIC,
            topic.as_ptr(),
            RD_KAFKA_VTYPE_PARTITION,
            partition.unwrap_or(-1),
            RD_KAFKA_VTYPE_MSGFLAGS,
            0 as c_int,
            RD_KAFKA_VTYPE_VALUE,
            value_ptr,
            value_len,
            RD_KAFKA_VTYPE_KEY,
            key_ptr,
            key_len,
            RD_KAFKA_VTYPE_OPAQUE,
            opaque_ptr,
            RD_KAFKA_VTYPE_HEADERS,
            headers_ptr,
            RD_KAFKA_VTYPE_END,
        )
    };
    if err == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        // librdkafka owns the headers list now.
        std::mem::forget(headers);
        return Ok(());
    }
    // SAFETY: refused, so librdkafka did not keep the opaque (nor the value): this is the one
    // conversion back of the pointer made above.
    let mut opaque = unsafe { Box::<D>::from_ptr(opaque_ptr) };
    let value = opaque.held().take();
    Err(Box::new(Refused {
        error: KafkaError::MessageProduction(err.into()),
        value,
        opaque,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::ClientConfig;
    use rdkafka::ClientContext;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::error::RDKafkaErrorCode;
    use rdkafka::message::{Headers, Message};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{DeliveryResult, ThreadedProducer};
    use rdkafka::types::RDKafkaApiKey;
    use std::sync::Arc;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// Bookkeeping that counts its drops (a box freed twice would count twice, one leaked
    /// would not count).
    struct Tracked {
        id: usize,
        held: Held,
        drops: Arc<AtomicUsize>,
    }

    impl HoldsValue for Tracked {
        fn held(&mut self) -> &mut Held {
            &mut self.held
        }
    }

    impl Drop for Tracked {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    const NO_HEADERS: &[(&str, &[u8])] = &[];

    /// A report as the test sees it: the record's id, the error if any, the value taken back.
    type Report = (usize, Option<RDKafkaErrorCode>, Option<Vec<u8>>);

    struct Recorder(Mutex<Vec<Report>>);

    impl ClientContext for Recorder {}

    impl ProducerContext for Recorder {
        type DeliveryOpaque = Box<Tracked>;

        fn delivery(&self, result: &DeliveryResult<'_>, mut opaque: Box<Tracked>) {
            let error = result
                .as_ref()
                .err()
                .and_then(|(error, _)| error.rdkafka_error_code());
            let value = opaque.held.take();
            self.0.lock().unwrap().push((opaque.id, error, value));
        }
    }

    fn producer(bootstrap: &str, extra: &[(&str, &str)]) -> ThreadedProducer<Recorder> {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", bootstrap)
            .set("linger.ms", "1")
            .set("compression.type", "none");
        for (key, value) in extra {
            config.set(*key, *value);
        }
        config
            .create_with_context(Recorder(Mutex::new(Vec::new())))
            .unwrap()
    }

    fn tracked(id: usize, drops: &Arc<AtomicUsize>) -> Box<Tracked> {
        Box::new(Tracked {
            id,
            held: Held::NONE,
            drops: Arc::clone(drops),
        })
    }

    /// Record `i`'s value: sizes on both sides of librdkafka's 64 KiB copy threshold
    /// (`message.copy.max.bytes`: larger values are sent straight from the buffer).
    fn value_of(i: usize) -> Vec<u8> {
        let len = if i.is_multiple_of(4) {
            100_000 + i
        } else {
            10 + i
        };
        (0..len).map(|b| (b * 31 + i) as u8).collect()
    }

    fn wait_for_reports(producer: &ThreadedProducer<Recorder>, count: usize) -> Vec<Report> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let reports = producer.context().0.lock().unwrap();
            if reports.len() >= count || Instant::now() > deadline {
                return reports
                    .iter()
                    .map(|(i, e, v)| (*i, *e, v.clone()))
                    .collect();
            }
            drop(reports);
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Delivered: each value comes back exactly once, untouched, and what a consumer reads
    /// from the topic is the bytes given (the key, the headers and the partition too).
    #[test]
    fn delivered_values_arrive_intact_and_come_back_once() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("zc", 2, 1).unwrap();
        let drops = Arc::new(AtomicUsize::new(0));
        let producer = producer(&cluster.bootstrap_servers(), &[]);
        let count = 40;
        for i in 0..count {
            let key = format!("k{i}");
            let headers = [("h", key.as_bytes())];
            let value = (i % 10 != 9).then(|| value_of(i));
            produce_zero_copy(
                &producer,
                "zc",
                Some((i % 2) as i32),
                Some(key.as_bytes()),
                value,
                &headers,
                tracked(i, &drops),
            )
            .map_err(|refused| refused.error)
            .unwrap();
        }
        let mut reports = wait_for_reports(&producer, count);
        reports.sort_by_key(|report| report.0);
        assert_eq!(reports.len(), count);
        for (i, (id, error, value)) in reports.into_iter().enumerate() {
            assert_eq!((id, error), (i, None));
            assert_eq!(value, (i % 10 != 9).then(|| value_of(i)), "record {i}");
        }
        assert_eq!(drops.load(Ordering::SeqCst), count);

        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("group.id", "zc")
            .set("auto.offset.reset", "earliest")
            .create()
            .unwrap();
        consumer.subscribe(&["zc"]).unwrap();
        let mut seen = 0;
        let deadline = Instant::now() + Duration::from_secs(30);
        while seen < count && Instant::now() < deadline {
            let Some(message) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let message = message.unwrap();
            let key = std::str::from_utf8(message.key().unwrap()).unwrap();
            let i: usize = key[1..].parse().unwrap();
            assert_eq!(message.partition(), (i % 2) as i32);
            assert_eq!(
                message.payload(),
                (i % 10 != 9).then(|| value_of(i)).as_deref()
            );
            let header = message.headers().unwrap().get(0);
            assert_eq!((header.key, header.value), ("h", Some(key.as_bytes())));
            seen += 1;
        }
        assert_eq!(seen, count);
    }

    /// Failed after being enqueued (the broker rejects the produce request for good): the
    /// report carries the value back, once.
    #[test]
    fn a_failed_delivery_hands_the_value_back() {
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("zc", 1, 1).unwrap();
        cluster.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 8],
        );
        let drops = Arc::new(AtomicUsize::new(0));
        let producer = producer(&cluster.bootstrap_servers(), &[]);
        for i in 0..3 {
            produce_zero_copy(
                &producer,
                "zc",
                None,
                Some(b"k"),
                Some(value_of(i)),
                NO_HEADERS,
                tracked(i, &drops),
            )
            .map_err(|refused| refused.error)
            .unwrap();
        }
        let mut reports = wait_for_reports(&producer, 3);
        reports.sort_by_key(|report| report.0);
        assert_eq!(reports.len(), 3);
        for (i, (id, error, value)) in reports.into_iter().enumerate() {
            assert_eq!(id, i);
            assert_eq!(error, Some(RDKafkaErrorCode::TopicAuthorizationFailed));
            assert_eq!(value, Some(value_of(i)));
        }
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }

    /// Refused at once (larger than `message.max.bytes`, or the queue is full): the value and
    /// the bookkeeping come back untouched, and librdkafka reports nothing for them.
    #[test]
    fn a_refused_record_comes_back_whole() {
        let drops = Arc::new(AtomicUsize::new(0));
        // No broker: records stay queued.
        let producer = producer(
            "127.0.0.1:9",
            &[
                ("message.max.bytes", "1000"),
                ("queue.buffering.max.messages", "1"),
            ],
        );
        let too_large = vec![7_u8; 5000];
        let refused = produce_zero_copy(
            &producer,
            "zc",
            None,
            None,
            Some(too_large.clone()),
            NO_HEADERS,
            tracked(1, &drops),
        )
        .unwrap_err();
        assert_eq!(
            refused.error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::MessageSizeTooLarge)
        );
        let Refused { value, opaque, .. } = *refused;
        assert_eq!((opaque.id, value), (1, Some(too_large)));
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        drop(opaque);

        produce_zero_copy(
            &producer,
            "zc",
            None,
            None,
            Some(vec![1]),
            NO_HEADERS,
            tracked(2, &drops),
        )
        .map_err(|refused| refused.error)
        .unwrap();
        let refused = produce_zero_copy(
            &producer,
            "zc",
            None,
            None,
            Some(vec![3, 4]),
            NO_HEADERS,
            tracked(3, &drops),
        )
        .unwrap_err();
        assert_eq!(
            refused.error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::QueueFull)
        );
        let Refused { value, opaque, .. } = *refused;
        assert_eq!((opaque.id, value), (3, Some(vec![3, 4])));
        drop(opaque);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
        drop(producer);
        // Record 2 was purged at the drop: its bookkeeping too is freed, once.
        assert_eq!(drops.load(Ordering::SeqCst), 3);
    }

    /// Shut down with records queued (no broker reachable): the producer's drop purges them
    /// and every one is reported with its value, once — none leaks, none is freed twice.
    #[test]
    fn shutdown_purges_queued_records_and_frees_each_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let producer = producer("127.0.0.1:9", &[]);
        let count = 25;
        for i in 0..count {
            produce_zero_copy(
                &producer,
                "zc",
                None,
                Some(b"k"),
                Some(value_of(i)),
                NO_HEADERS,
                tracked(i, &drops),
            )
            .map_err(|refused| refused.error)
            .unwrap();
        }
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        let context = Arc::clone(producer.context());
        drop(producer);
        let mut reports = context.0.lock().unwrap().clone();
        reports.sort_by_key(|report| report.0);
        assert_eq!(reports.len(), count);
        for (i, (id, error, value)) in reports.into_iter().enumerate() {
            assert_eq!(id, i);
            assert_eq!(error, Some(RDKafkaErrorCode::PurgeQueue));
            assert_eq!(value, Some(value_of(i)));
        }
        assert_eq!(drops.load(Ordering::SeqCst), count);
    }
}

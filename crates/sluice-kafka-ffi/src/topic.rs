//! A producer's handle on one topic, for producing without a topic lookup per record.
//!
//! The binding's `send` makes a `CString` of the topic name for every record and passes it to
//! `rd_kafka_producev`, which looks the topic up by name under the client's lock each time.
//! [`TopicProducer`] creates the topic handle once (`rd_kafka_topic_new`) and produces through
//! it with `rd_kafka_produce`, as kcat does.
//!
//! # Invariants
//!
//! - **The handle never outlives its producer.** librdkafka requires every application-held
//!   topic handle to be destroyed before the client is destroyed. [`TopicProducer`] borrows
//!   the producer's client for its lifetime `'p`, so the producer cannot be dropped first, and
//!   destroys the handle (its one reference, taken by `rd_kafka_topic_new`) exactly once, in
//!   `drop`.
//! - **Every delivery opaque is handed back exactly once.** `send` turns the opaque into a
//!   pointer with `IntoOpaque::into_ptr`. When librdkafka takes the message, the pointer is
//!   the message's `_private` field, and the binding's delivery-report handler rebuilds the
//!   opaque from it (`from_ptr`) and passes it to the context's `delivery`, as for the
//!   binding's own `send`. When librdkafka refuses the message (it returns -1 and keeps
//!   nothing), `send` rebuilds it and returns it; it never rebuilds it after a success.
//! - **Keys and values are only borrowed for the call.** `send` passes
//!   `RD_KAFKA_MSG_F_COPY`: librdkafka copies the payload (and always copies the key) before
//!   it returns.

#![allow(unsafe_code)]

use std::ffi::{CString, c_void};
use std::marker::PhantomData;
use std::ptr::{self, NonNull};

use rdkafka::bindings as rdsys;
use rdkafka::client::Client;
use rdkafka::error::KafkaError;
use rdkafka::producer::{NoCustomPartitioner, Partitioner, Producer, ProducerContext};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::IntoOpaque;

/// librdkafka's `RD_KAFKA_PARTITION_UA`: no partition chosen, the partitioner picks one.
const PARTITION_UNASSIGNED: i32 = -1;

/// A topic handle of a producer: records produced through it go to that topic.
///
/// What the binding's `BaseRecord` + `send` does for a record with a topic, key, value,
/// optional partition and delivery opaque (no timestamp, no headers), without looking the
/// topic up by name per record. Delivery reports arrive through the producer's context, as
/// for the binding's `send`.
pub struct TopicProducer<'p, C, Part = NoCustomPartitioner>
where
    C: ProducerContext<Part>,
    Part: Partitioner,
{
    topic: NonNull<rdsys::rd_kafka_topic_t>,
    /// The producer's client, borrowed so that the producer outlives the handle.
    _client: &'p Client<C>,
    _partitioner: PhantomData<Part>,
}

impl<'p, C, Part> TopicProducer<'p, C, Part>
where
    C: ProducerContext<Part>,
    Part: Partitioner,
{
    /// Creates `producer`'s handle on `topic` (with the producer's default topic
    /// configuration).
    ///
    /// # Errors
    ///
    /// A topic name holding a NUL byte, or the error librdkafka reports when it cannot create
    /// the handle (an invalid name, for one).
    pub fn new<P: Producer<C, Part>>(producer: &'p P, topic: &str) -> Result<Self, KafkaError> {
        let name = CString::new(topic)?;
        let client = producer.client();
        // SAFETY: `client` is the live handle of `producer` (borrowed for 'p); `name` is a
        // NUL-terminated string that outlives the call (librdkafka copies it); a NULL
        // configuration means the producer's default topic configuration. The result is a new
        // topic reference we own, or NULL.
        let topic = unsafe {
            rdsys::rd_kafka_topic_new(client.native_ptr(), name.as_ptr(), ptr::null_mut())
        };
        let Some(topic) = NonNull::new(topic) else {
            return Err(KafkaError::ClientCreation(last_error().to_string()));
        };
        Ok(Self {
            topic,
            _client: client,
            _partitioner: PhantomData,
        })
    }

    /// Enqueues a record (the binding's `send`, with the topic already looked up): to
    /// `partition`, or where the producer's partitioner puts it when `None`. `key` and
    /// `payload` are copied before the call returns. The opaque comes back through the
    /// context's `delivery` once the record is delivered or has failed.
    ///
    /// # Errors
    ///
    /// When librdkafka does not take the record, the error (`QueueFull` as
    /// `KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)`, like the binding's) and
    /// the opaque, handed back.
    #[allow(clippy::result_large_err)]
    pub fn send(
        &self,
        partition: Option<i32>,
        key: Option<&[u8]>,
        payload: Option<&[u8]>,
        opaque: C::DeliveryOpaque,
    ) -> Result<(), (KafkaError, C::DeliveryOpaque)> {
        let (key_ptr, key_len) = key.map_or((ptr::null(), 0), |k| (k.as_ptr(), k.len()));
        let (payload_ptr, payload_len) =
            payload.map_or((ptr::null(), 0), |p| (p.as_ptr(), p.len()));
        let opaque = opaque.into_ptr();
        // SAFETY: the topic reference is live (owned; its producer is borrowed for 'p). Key
        // and payload are NULL with length 0 or point to that many bytes, borrowed for the
        // call; with `RD_KAFKA_MSG_F_COPY` librdkafka copies them and never writes through the
        // payload pointer (its parameter is `void *` only for the `F_FREE` case). `opaque` is
        // only stored in the message, for the delivery report.
        let status = unsafe {
            rdsys::rd_kafka_produce(
                self.topic.as_ptr(),
                partition.unwrap_or(PARTITION_UNASSIGNED),
                rdsys::RD_KAFKA_MSG_F_COPY,
                payload_ptr.cast::<c_void>().cast_mut(),
                payload_len,
                key_ptr.cast::<c_void>(),
                key_len,
                opaque,
            )
        };
        if status == 0 {
            return Ok(());
        }
        let error = last_error();
        // SAFETY: made by `into_ptr` above, and librdkafka refused the message, so it keeps no
        // copy of the pointer and no delivery report will rebuild it: it is rebuilt once,
        // here.
        let opaque = unsafe { C::DeliveryOpaque::from_ptr(opaque) };
        Err((KafkaError::MessageProduction(error), opaque))
    }
}

impl<C, Part> Drop for TopicProducer<'_, C, Part>
where
    C: ProducerContext<Part>,
    Part: Partitioner,
{
    fn drop(&mut self) {
        // SAFETY: our own topic reference, destroyed once, here; the producer is still alive
        // (borrowed for 'p). Messages already enqueued hold their own references.
        unsafe { rdsys::rd_kafka_topic_destroy(self.topic.as_ptr()) };
    }
}

/// librdkafka's last error on this thread (set by the failed call just before).
fn last_error() -> RDKafkaErrorCode {
    // SAFETY: reads librdkafka's thread-local last error; no pointers involved.
    let code = unsafe { rdsys::rd_kafka_last_error() };
    code.into()
}

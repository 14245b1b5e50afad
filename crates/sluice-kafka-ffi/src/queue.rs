//! A partition's own librdkafka queue, read in batches.
//!
//! # Invariants
//!
//! - **The queue never outlives its consumer.** librdkafka requires every queue reference to
//!   be destroyed before the consumer is closed and destroyed. [`PartitionBatchQueue`] holds
//!   an `Arc` of the consumer it was split from and destroys its queue reference in `drop`,
//!   before that `Arc` is released (fields drop after `Drop::drop` returns).
//! - **Every message returned is destroyed exactly once, and never read after.** A batch's
//!   messages are destroyed by a guard when the call returns or the callback panics; the
//!   callback sees each one only through a [`BatchMessage`] whose lifetime ends with its call.
//! - **A wake-up target outlives its registration.** The thread [`PartitionBatchQueue::wake_on_records`]
//!   registers is boxed and owned by the queue; librdkafka calls the callback with the queue's
//!   lock held, and disabling the callback takes that lock, so once the callback is disabled
//!   (before a new target replaces the box, and in `drop` before the queue reference goes) no
//!   call is running or can start, and the box may be freed.
//! - **One caller at a time.** librdkafka's batch consume is not safe to call concurrently,
//!   nor concurrently with seek, pause, resume or a rebalance on the same consumer
//!   (librdkafka's INTRODUCTION.md, "Note on Batch consume APIs"). `consume_batch` takes
//!   `&mut self` and the type is neither `Send` nor `Sync` (it holds raw pointers), so one
//!   thread uses it; that thread must also be the one that pauses, resumes and serves the
//!   consumer's rebalance callbacks, between batches.

#![allow(unsafe_code)]

use std::any::Any;
use std::ffi::CString;
use std::marker::PhantomData;
use std::ptr::{self, NonNull};
use std::slice;
use std::sync::Arc;
use std::thread::Thread;

use rdkafka::bindings as rdsys;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

/// A partition's librdkafka queue, split from its consumer's queue and read in batches.
///
/// What `BaseConsumer::split_partition_queue` does (`rd_kafka_queue_get_partition`, then
/// `rd_kafka_queue_forward(queue, NULL)`), with [`PartitionBatchQueue::consume_batch`] in
/// place of one poll per message. Like the binding's partition queue, splitting after an
/// assignment is the caller's job: an assignment forwards the partition to the consumer
/// queue again.
pub struct PartitionBatchQueue {
    queue: NonNull<rdsys::rd_kafka_queue_t>,
    /// The messages of the batch being handed out; reused from call to call, empty between
    /// calls.
    messages: Vec<*mut rdsys::rd_kafka_message_t>,
    /// The thread woken when records reach the empty queue, if any; librdkafka holds a pointer
    /// to it while the callback is enabled (see the module's invariants).
    wake: Option<Box<Thread>>,
    /// The consumer the queue belongs to, kept alive until the queue is destroyed. Declared
    /// last: it is released after `Drop::drop` has destroyed the queue.
    _consumer: Arc<dyn Any + Send + Sync>,
}

impl PartitionBatchQueue {
    /// Splits `topic`/`partition`'s queue from `consumer`'s: its records are then read only
    /// through the returned queue. `None` when librdkafka has no such partition (or the topic
    /// name holds a NUL byte).
    pub fn split<C: ConsumerContext + 'static>(
        consumer: &Arc<BaseConsumer<C>>,
        topic: &str,
        partition: i32,
    ) -> Option<Self> {
        let topic = CString::new(topic).ok()?;
        let client = consumer.client().native_ptr();
        // SAFETY: `client` is the live handle of `consumer` (borrowed for the whole call);
        // `topic` is a NUL-terminated string that outlives the call and librdkafka does not
        // keep. The result is a new queue reference we own, or NULL.
        let queue =
            unsafe { rdsys::rd_kafka_queue_get_partition(client, topic.as_ptr(), partition) };
        let queue = NonNull::new(queue)?;
        // SAFETY: `queue` is a live reference we own; a NULL destination removes the
        // forwarding to the consumer queue (librdkafka keeps no pointer to our arguments).
        unsafe { rdsys::rd_kafka_queue_forward(queue.as_ptr(), ptr::null_mut()) };
        let consumer: Arc<dyn Any + Send + Sync> = Arc::<BaseConsumer<C>>::clone(consumer);
        Some(Self {
            queue,
            messages: Vec::new(),
            wake: None,
            _consumer: consumer,
        })
    }

    /// Unparks `thread` ([`Thread::unpark`]) whenever records (or an error) reach the queue
    /// while it is empty, so that a reader parked between batches wakes as soon as there is
    /// something to take, instead of sleeping out its timeout. Replaces an earlier target.
    ///
    /// librdkafka calls it from its broker thread on every empty → non-empty transition of
    /// the queue (`rd_kafka_queue_cb_event_enable`); a queue that still holds records after a
    /// batch call does not call it again until it has been emptied.
    pub fn wake_on_records(&mut self, thread: Thread) {
        self.disable_wake();
        let thread = Box::new(thread);
        let target: *const Thread = &raw const *thread;
        // SAFETY: the queue reference is live. `target` points into a box the queue owns from
        // here on and frees only after `disable_wake` has returned (see the module's
        // invariants); `unpark_thread` reads it as a `&Thread` and nothing else.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(
                self.queue.as_ptr(),
                Some(unpark_thread),
                target.cast_mut().cast(),
            );
        }
        self.wake = Some(thread);
    }

    /// Stops the wake-up callback; afterwards librdkafka holds no pointer to the target.
    fn disable_wake(&mut self) {
        if self.wake.is_none() {
            return;
        }
        // SAFETY: the queue reference is live; a NULL callback frees librdkafka's record of
        // the callback under the queue's lock, which every call of the callback holds, so
        // when this returns no call is running and none will start.
        unsafe {
            rdsys::rd_kafka_queue_cb_event_enable(self.queue.as_ptr(), None, ptr::null_mut())
        };
        self.wake = None;
    }

    /// Takes up to `max` messages already in the queue (it does not wait) and hands each to
    /// `f`, in queue order: `Ok` for a record, `Err` for an error librdkafka reports on the
    /// partition (the same `KafkaError` the binding's poll returns). Returns how many
    /// messages there were.
    ///
    /// The messages are destroyed when the call returns, so `f` copies what it keeps. If `f`
    /// panics, the messages of the batch it has not seen yet are lost (destroyed too): they
    /// were taken from the queue already.
    ///
    /// # Errors
    ///
    /// The error librdkafka reports when the batch call itself fails (it returns -1).
    pub fn consume_batch<F>(&mut self, max: usize, mut f: F) -> Result<usize, RDKafkaErrorCode>
    where
        F: FnMut(Result<BatchMessage<'_>, KafkaError>),
    {
        if max == 0 {
            return Ok(0);
        }
        self.messages.clear();
        self.messages.reserve(max);
        // SAFETY: the queue reference is live (owned; its consumer is kept alive by
        // `_consumer`), and `&mut self` rules out a concurrent batch call on it. The buffer
        // has room for `max` pointers (capacity ≥ len 0 + max); librdkafka writes at most
        // `max` of them, from the start, and returns how many (or -1). Timeout 0: it does
        // not block.
        let count = unsafe {
            rdsys::rd_kafka_consume_batch_queue(
                self.queue.as_ptr(),
                0,
                self.messages.as_mut_ptr(),
                max,
            )
        };
        let Ok(count) = usize::try_from(count) else {
            // SAFETY: reads librdkafka's thread-local last error; no pointers involved.
            let code = unsafe { rdsys::rd_kafka_last_error() };
            return Err(code.into());
        };
        assert!(
            count <= max,
            "librdkafka returned more messages than asked for"
        );
        // SAFETY: librdkafka initialised the first `count` entries (`count` ≤ `max` ≤
        // capacity); each is a message we now own.
        unsafe { self.messages.set_len(count) };
        let batch = Batch {
            messages: &mut self.messages,
        };
        for &message in batch.messages.iter() {
            // `message` stays valid until `batch` is dropped, after this loop; the
            // `BatchMessage` handed to `f` cannot outlive the call (its lifetime is chosen
            // anew for each call of `f`).
            let Some(message) = NonNull::new(message) else {
                continue;
            };
            let message = BatchMessage {
                message,
                _borrow: PhantomData,
            };
            f(message.into_result());
        }
        Ok(count)
    }
}

/// The queue's wake-up callback: unparks the thread `target` points to.
///
/// # Safety
///
/// `target` is the pointer [`PartitionBatchQueue::wake_on_records`] registered, to a `Thread`
/// that stays alive until the callback is disabled.
unsafe extern "C" fn unpark_thread(_client: *mut rdsys::rd_kafka_t, target: *mut std::ffi::c_void) {
    // SAFETY: the caller's promise: a live `Thread`, only read. `unpark` does not panic (no
    // unwinding into librdkafka's C frames) and does not call librdkafka (whose queue lock is
    // held here).
    let thread = unsafe { &*target.cast_const().cast::<Thread>() };
    thread.unpark();
}

impl Drop for PartitionBatchQueue {
    fn drop(&mut self) {
        self.disable_wake();
        // SAFETY: our own queue reference, destroyed once, here; the consumer is still alive
        // (`_consumer` is released after this function), and no message of this queue is
        // outstanding (each `consume_batch` destroys its batch before it returns).
        unsafe { rdsys::rd_kafka_queue_destroy(self.queue.as_ptr()) };
    }
}

/// The messages of one batch call; destroys them when dropped (also while unwinding from a
/// panic in the callback).
struct Batch<'a> {
    messages: &'a mut Vec<*mut rdsys::rd_kafka_message_t>,
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for message in self.messages.drain(..) {
            if !message.is_null() {
                // SAFETY: a message librdkafka returned to us from `consume_batch_queue` and
                // not destroyed yet: `drain` removes it from the buffer, so it is destroyed
                // exactly once, and no `BatchMessage` borrowing it is alive any more.
                unsafe { rdsys::rd_kafka_message_destroy(message) };
            }
        }
    }
}

/// A record of a batch, borrowed from librdkafka for one call of the callback.
pub struct BatchMessage<'a> {
    message: NonNull<rdsys::rd_kafka_message_t>,
    _borrow: PhantomData<&'a rdsys::rd_kafka_message_t>,
}

impl<'a> BatchMessage<'a> {
    /// The message itself, or the error it carries (`err` is not 0).
    fn into_result(self) -> Result<Self, KafkaError> {
        // SAFETY: the message is live for 'a (see `consume_batch`); only the field's address
        // is taken.
        let err = unsafe { &raw const (*self.message.as_ptr()).err };
        // SAFETY: `err` points to the field, a C enum (an `int`). Read as a plain `i32`, not
        // as the binding's Rust enum: a broker error code newer than the binding would not be
        // one of that enum's values.
        let code = unsafe { err.cast::<i32>().read() };
        if code == 0 {
            return Ok(self);
        }
        let code = rdsys::rd_kafka_resp_err_t::try_from(code);
        Err(match code {
            Ok(rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF) => {
                KafkaError::PartitionEOF(self.partition())
            }
            Ok(code) => KafkaError::MessageConsumption(code.into()),
            Err(_) => KafkaError::MessageConsumption(RDKafkaErrorCode::Unknown),
        })
    }

    /// The record's offset.
    pub fn offset(&self) -> i64 {
        // SAFETY: the message is live and unchanged for 'a (see `consume_batch`). Fields are
        // read through the raw pointer, never through a reference to the whole struct, whose
        // `err` field is not read as the binding's enum (see `into_result`).
        unsafe { (*self.message.as_ptr()).offset }
    }

    /// The record's partition.
    pub fn partition(&self) -> i32 {
        // SAFETY: as in `offset`.
        unsafe { (*self.message.as_ptr()).partition }
    }

    /// The record's key; `None` when it has none.
    pub fn key(&self) -> Option<&'a [u8]> {
        let message = self.message.as_ptr();
        // SAFETY: as in `offset`.
        let data = unsafe { (*message).key };
        // SAFETY: as in `offset`.
        let len = unsafe { (*message).key_len };
        // SAFETY: the message's own key, which lives as long as the message.
        unsafe { bytes(data, len) }
    }

    /// The record's value; `None` when it has none (a tombstone).
    pub fn payload(&self) -> Option<&'a [u8]> {
        let message = self.message.as_ptr();
        // SAFETY: as in `offset`.
        let data = unsafe { (*message).payload };
        // SAFETY: as in `offset`.
        let len = unsafe { (*message).len };
        // SAFETY: the message's own payload, which lives as long as the message.
        unsafe { bytes(data, len) }
    }

    /// The record's timestamp in Unix milliseconds (create time or log-append time); `None`
    /// when it has none.
    pub fn timestamp_millis(&self) -> Option<i64> {
        let mut kind = rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is live for 'a; `kind` is a valid place librdkafka writes one
        // of the three timestamp types to.
        let timestamp =
            unsafe { rdsys::rd_kafka_message_timestamp(self.message.as_ptr(), &mut kind) };
        match kind {
            _ if timestamp == -1 => None,
            rdsys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE => None,
            _ => Some(timestamp),
        }
    }
}

impl BatchMessage<'_> {
    /// Calls `f` with each of the record's headers, in order: its name's bytes (any bytes:
    /// a producer need not write UTF-8) and its value (`None`: a null value).
    pub fn for_each_header(&self, f: impl FnMut(&[u8], Option<&[u8]>)) {
        // SAFETY: the message is live and only this thread reads it for 'a (see
        // `consume_batch`).
        unsafe { message_headers(self.message.as_ptr(), f) }
    }
}

/// Calls `f` with each header of a message the binding consumed, in order: its name's bytes
/// and its value (`None`: null). The binding's own header reader panics on a name that is not
/// UTF-8 (a producer may write any bytes); this one does not look at them.
pub fn borrowed_message_headers(
    message: &rdkafka::message::BorrowedMessage<'_>,
    f: impl FnMut(&[u8], Option<&[u8]>),
) {
    // SAFETY: the binding keeps the message alive while it is borrowed; the binding's own
    // `Message::headers` makes the same lazy-parsing call through `&self`.
    unsafe { message_headers(message.ptr(), f) }
}

/// Calls `f` with each header of `message`, in order: its name's bytes and its value (`None`:
/// null).
///
/// # Safety
///
/// `message` points to a live consumed message that no other thread uses during the call (its
/// headers are parsed lazily into the message on the first call).
unsafe fn message_headers(
    message: *mut rdsys::rd_kafka_message_t,
    mut f: impl FnMut(&[u8], Option<&[u8]>),
) {
    let mut headers: *mut rdsys::rd_kafka_headers_t = ptr::null_mut();
    // SAFETY: the caller's promise; `headers` is a valid place for the pointer librdkafka
    // writes (owned by the message: not freed here).
    let err = unsafe { rdsys::rd_kafka_message_headers(message, &mut headers) };
    if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
        return;
    }
    let mut index = 0;
    loop {
        let mut name: *const std::ffi::c_char = ptr::null();
        let mut value: *const std::ffi::c_void = ptr::null();
        let mut size: usize = 0;
        // SAFETY: `headers` is the message's live header list; the three out-pointers are
        // valid places; an index past the end returns an error and writes nothing we read.
        let err = unsafe {
            rdsys::rd_kafka_header_get_all(headers, index, &mut name, &mut value, &mut size)
        };
        if err != rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            return;
        }
        // SAFETY: librdkafka's header names are NUL-terminated and live as long as the list.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        // SAFETY: a non-NULL value points to `size` bytes of the header list.
        let value = unsafe { bytes(value.cast_mut(), size) };
        f(name, value);
        index += 1;
    }
}

/// A message's key or value: `None` for a NULL pointer.
///
/// # Safety
///
/// `data` is NULL or points to `len` initialised bytes that stay valid and unchanged for 'a.
unsafe fn bytes<'a>(data: *mut std::ffi::c_void, len: usize) -> Option<&'a [u8]> {
    if data.is_null() {
        return None;
    }
    // SAFETY: the caller's promise; bytes need no alignment, and librdkafka's buffers are far
    // smaller than `isize::MAX`.
    Some(unsafe { slice::from_raw_parts(data.cast::<u8>(), len) })
}

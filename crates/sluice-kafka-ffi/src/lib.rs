//! librdkafka calls that the `rdkafka` binding (0.39) does not expose, behind a safe API.
//!
//! Hand-written because the binding lacks them: it consumes one message per poll
//! (`rd_kafka_queue_poll`), and each poll reads the clock about three times inside librdkafka
//! and once more in the binding. The files sink's intake thread takes every record of a
//! partition this way, and it is the sink's limit (bench/PROFILE.md, "Sink on the AMD host").
//! [`PartitionBatchQueue`] takes up to a batch of a partition's records in one
//! `rd_kafka_consume_batch_queue` call instead, and
//! [`PartitionBatchQueue::wake_on_records`] has librdkafka unpark the reading thread when
//! records reach the empty queue (`rd_kafka_queue_cb_event_enable`), so that it can park
//! between batches instead of sleeping on another queue.
//!
//! The binding's `send` also looks the topic up by name per record (a `CString` and a lookup under the
//! client's lock inside `rd_kafka_producev`); [`TopicProducer`] holds a topic handle and
//! produces through it with `rd_kafka_produce`, for `sluice perf produce`.
//!
//! The binding's `send` copies every value (`RD_KAFKA_MSG_F_COPY`); [`produce_zero_copy`] hands
//! librdkafka the encoded buffer itself and keeps it alive in the record's delivery opaque until
//! the delivery report, for the CDC stream's and the snapshots' records.
//!
//! This crate and `sluice-alloc` (mimalloc's purge delay) hold the workspace's only unsafe
//! code. Here unsafe code is denied except in the `queue`, `topic` and `zero_copy` modules, and each unsafe
//! block there carries a `SAFETY:` argument. Its tests run under AddressSanitizer in
//! `scripts/test`.

#![deny(unsafe_code)]

mod queue;
#[cfg(test)]
mod tests;
mod topic;
mod zero_copy;

pub use queue::{BatchMessage, PartitionBatchQueue, borrowed_message_headers};
pub use topic::TopicProducer;
pub use zero_copy::{Held, HoldsValue, Refused, produce_zero_copy};

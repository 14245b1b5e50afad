//! librdkafka calls that the `rdkafka` binding (0.39) does not expose, behind a safe API.
//!
//! Hand-written because the binding lacks them: it consumes one message per poll
//! (`rd_kafka_queue_poll`), and each poll reads the clock about three times inside librdkafka
//! and once more in the binding. The files sink's intake thread takes every record of a
//! partition this way, and it is the sink's limit (bench/PROFILE.md, "Sink on the AMD host").
//! [`PartitionBatchQueue`] takes up to a batch of a partition's records in one
//! `rd_kafka_consume_batch_queue` call instead.
//!
//! This crate is the workspace's only unsafe code: unsafe code is denied here except in the
//! `queue` module, and each unsafe block there carries a `SAFETY:` argument. Its test runs
//! under AddressSanitizer in `scripts/test`.

#![deny(unsafe_code)]

mod queue;
#[cfg(test)]
mod tests;

pub use queue::{BatchMessage, PartitionBatchQueue};

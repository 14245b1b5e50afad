//! sluice: change data capture from PostgreSQL into Kafka, and Kafka into sinks.
//!
//! The data flow (docs/architecture.md follows a record through each pipeline kind, file by
//! file):
//!
//! ```text
//! source::postgres  -> decode (pgoutput)  -> event (Debezium JSON, encoded in parallel)
//!   -> kafka::producer (rdkafka) -> delivery reports -> sluice_engine::AckTracker
//!   -> checkpoint: the slot's confirmed flush LSN = the watermark
//!
//! kafka consumer (sink intake) -> per-partition queues -> sub-partition workers (by key)
//!   -> epochs of JSON Lines / Parquet files, committed atomically -> sluice_engine::AckTracker
//!   -> checkpoint: the group's committed offsets = the watermark (the files are the truth)
//! ```
//!
//! Module map: [`config`] (the pipeline file), [`cli`] (the `sluice` command line), [`app`]
//! (wiring and supervision), [`delivery`] (the delivery core every source is an adapter over),
//! [`source`] (sources), [`event`] (the change-event format),
//! [`kafka`] (the Kafka layer), [`sink`] (Kafka → files), [`runtime`] (pipeline status and metrics), [`admin`] (the HTTP
//! admin server, which serves what the runtime holds),
//! [`doctor`] (`sluice doctor` and `sluice slots`), [`compaction`] (`sluice compaction scan|plan`),
//! [`import`] (`sluice import debezium`: a Debezium connector's configuration and offsets),
//! [`verify`] (`sluice verify`: the source tables against their topics, a sink's tables against
//! the records it applied).

pub mod admin;
pub mod app;
pub mod check;
pub mod cli;
pub mod compaction;
pub mod config;
pub mod crypto;
pub mod dead_letter;
pub mod delivery;
pub mod doctor;
pub mod error;
pub mod event;
pub mod failpoint;
#[cfg(test)]
mod hostile;
pub mod import;
pub mod kafka;
pub mod kafka_state;
pub mod perf;
pub mod pg_connect;
pub mod pipeline_file;
pub mod record;
pub mod registry;
pub mod runtime;
pub mod sink;
pub mod source;
pub mod sql;
pub mod transform;
pub mod verify;

//! The PostgreSQL source: logical replication with the `pgoutput` plugin.
//!
//! - [`active`]: active/standby election of the pipeline's instances (advisory lock + slot).
//! - [`config`]: the `[source.postgres]` section of the pipeline file, its defaults and rules.
//! - [`setup`]: SQL checks, publication, slot, primary keys, heartbeats.
//! - [`publication`]: the publication, with row filters and column lists pushed down.
//! - [`generated`]: stored generated columns in the publication (PostgreSQL 18).
//! - [`failover`]: failover slots (PostgreSQL 17), which standbys keep a copy of.
//! - [`standby`]: logical decoding on a physical standby (PostgreSQL 16+).
//! - [`partition`]: partitioned tables: their leaves, and partitions that join while running.
//! - Connection strings with libpq's TLS semantics and SQL connections over rustls are in
//!   [`crate::pg_connect`] (the PostgreSQL sink uses them too).
//! - [`replication`]: the replication protocol connection (START_REPLICATION, CopyBoth).
//! - [`pgoutput`]: the decoder of pgoutput messages.
//! - [`value`]: PostgreSQL text values to JSON, as Debezium maps them.
//! - [`encode`]: row changes to Debezium envelopes.
//! - `outbox`: the outbox router: outbox rows as routed events, their schemas per topic.
//! - [`avro`]: row changes as Avro binary, written straight from the tuples.
//! - [`slot_wait`]: what a new slot's creation waits for (open transactions), named.
//! - [`slot_state`]: slot safety: the slot's identity and last confirmed position between runs.
//! - [`snapshot`]: the initial snapshot (`op: "r"`), consistent with the stream.
//! - [`resumed`]: a resumed snapshot leaves the rows changed since its start to the stream.
//! - [`incremental`]: incremental snapshots while streaming (DBLog watermarks), signals.
//! - `deadline`: the longest the replication loop waits for anything but the stream.
//! - [`stream`]: one run of the pipeline: the loop, acknowledgements and checkpoints.
//! - [`wal_budget`]: the WAL budget: the WAL the slot retains, checked beside the stream.

pub mod active;
pub mod avro;
mod cell;
pub mod change;
pub mod column;
pub mod config;
mod deadline;
pub mod encode;
pub mod exactly_once;
pub mod failover;
pub mod generated;
pub mod incremental;
mod outbox;
pub mod partition;
pub mod pgoutput;
pub mod publication;
pub mod relation;
pub mod replication;
pub mod resumed;
pub mod schema;
pub mod setup;
mod silence;
pub mod slot_state;
pub mod slot_wait;
pub mod snapshot;
pub mod standby;
pub mod stream;
mod unwrapped;
pub mod value;
pub mod wal_budget;

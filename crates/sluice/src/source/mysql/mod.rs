//! The MySQL/MariaDB source: the binlog read as a replica (`mysql_async`'s binlog stream),
//! row events into Debezium MySQL envelopes on the delivery core. See `docs/mysql-source.md`
//! for what works and what does not yet.
//!
//! - [`active`]: which instance of the pipeline streams (a user-level lock), the others wait.
//! - [`config`]: the `[source.mysql]` section of the pipeline file.
//! - [`lag`]: bytes and seconds behind the server's binary log, for `/health` and `/metrics`.
//! - [`server`]: connections, required settings, GTID sets and positions, the dump request.
//! - [`encode`]: row changes to Debezium envelopes, values as Debezium maps them.
//! - [`rows`]: row images decoded with a plan kept per TABLE_MAP.
//! - [`schema`]: the Connect schemas of a table's events (JSON with schemas, Avro).
//! - [`ddl`]: schema-change events (the snapshot's definitions, DDL from QUERY events).
//! - [`snapshot`]: the initial snapshot (consistent, chunked, resumable).
//! - [`incremental`]: incremental snapshots while streaming (DBLog watermarks in the signal
//!   table).
//! - [`stream`]: one run of the pipeline: the loop, checkpoints in the state store.

pub mod active;
mod change;
pub mod config;
pub mod ddl;
pub mod encode;
pub mod incremental;
pub mod lag;
pub mod rows;
pub mod schema;
pub mod server;
pub mod snapshot;
mod state;
pub mod stream;

//! Kafka → Apache Iceberg: change events written as rows of Iceberg tables, exactly once, on
//! the sink runtime (docs/kafka-to-iceberg.md).
//!
//! - [`config`]: the `[sink.iceberg]` section.
//! - [`client`]: the catalog a sink writes through, SQL or REST, and commits pinned to the
//!   metadata the writer read.
//! - [`catalog`]: the SQL catalog in PostgreSQL (the JDBC layout pyiceberg's `SqlCatalog` and
//!   Java's `JdbcCatalog` read), with commits that lose an optimistic-concurrency race
//!   reported, never rebased in silence.
//! - [`rest`]: the REST catalog protocol: updates with requirements, a 409 a lost race.
//! - [`storage`]: the warehouse's files on the local file system or S3.
//! - [`convert`]: Connect schemas to Iceberg table schemas (the events' rows and their values'
//!   conversion are [`crate::sink::typed`]'s, shared with the files sink).
//! - [`upsert`]: `mode = "upsert"`: the key index and the snapshots that add position
//!   deletes.
//! - [`writer`]: a sub-partition's writer: Parquet data files through the `iceberg` crate's
//!   writer, one snapshot per epoch whose summary records the Kafka offsets it covers.

pub mod catalog;
pub mod client;
pub mod config;
pub mod convert;
pub mod rest;
pub mod storage;
pub mod upsert;
pub mod writer;

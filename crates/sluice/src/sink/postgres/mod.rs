//! Kafka → PostgreSQL: change events applied to tables, exactly once, on the sink runtime.
//!
//! - [`config`]: the `[sink.postgres]` section.
//! - [`decode`]: a record as the change it stands for (events with and without schemas).
//! - [`convert`]: Debezium's value encodings back into PostgreSQL's input forms.
//! - [`ddl`]: `auto_create` and `auto_evolve`.
//! - [`apply`]: a sub-partition's writer: applies the changes in batches, one transaction per
//!   batch with the sub-partition's progress.

pub mod apply;
pub mod config;
pub mod convert;
pub mod ddl;
pub mod decode;

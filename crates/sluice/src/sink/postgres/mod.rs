//! Kafka → PostgreSQL: change events applied to tables, exactly once, on the sink runtime.
//!
//! - [`config`]: the `[sink.postgres]` section.
//! - [`apply`]: a sub-partition's writer: decodes change events, applies them in batches,
//!   one transaction per batch with the sub-partition's progress.

pub mod apply;
pub mod config;

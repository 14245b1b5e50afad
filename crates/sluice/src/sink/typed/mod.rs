//! Change events as typed rows, shared by the sinks that write columns of types (the Iceberg
//! sink, the files sink's typed Parquet).
//!
//! - [`event`]: a record as the row it holds (a Debezium envelope unwrapped to its `after`
//!   row, `before` for a delete) with the row's Connect schema when the value carries one.
//! - [`cells`]: Connect fields → column types by their Debezium logical types, JSON values →
//!   [`cells::Cell`]s → Arrow builders.
//! - [`mod@file`]: a Parquet file of typed columns (the files sink's `parquet_columns = "typed"`).

pub mod cells;
pub mod event;
pub mod file;

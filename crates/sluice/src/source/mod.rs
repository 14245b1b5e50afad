//! Sources: where change events come from.

pub mod chunked;
pub mod incremental;
pub mod mysql;
pub mod postgres;

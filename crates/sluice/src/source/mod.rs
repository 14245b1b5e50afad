//! Sources: where change events come from.

pub mod mysql;
pub mod postgres;

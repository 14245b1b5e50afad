//! Sources: where change events come from.

pub mod postgres;

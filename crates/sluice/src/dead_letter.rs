//! The dead-letter convention, the same for every source and sink.
//!
//! A record that cannot be delivered and is dead-lettered (per the pipeline's `delivery`
//! policy) goes to the dead-letter topic with its original key and value (the value may be
//! left out when it is larger than `delivery.dead_letter_max_value_bytes`; a header then says
//! how large it was) and these headers, all UTF-8 text:
//!
//! | header | meaning |
//! |---|---|
//! | `sluice.dlq.reason` | why the record could not be delivered |
//! | `sluice.dlq.topic` | the topic it was meant for (a source) or read from (a sink) |
//! | `sluice.dlq.partition` | the partition it was read from (a sink) |
//! | `sluice.dlq.offset` | the offset it was read from (a sink) |
//! | `sluice.dlq.value_omitted_bytes` | the size of a value left out |
//!
//! A source's records keep their own headers too (e.g. `sluice.commit_lsn`: where the change
//! came from).

/// Why the record could not be delivered.
pub const HEADER_REASON: &str = "sluice.dlq.reason";
/// The topic the record was meant for (a source) or read from (a sink).
pub const HEADER_TOPIC: &str = "sluice.dlq.topic";
/// The partition the record was read from (a sink).
pub const HEADER_PARTITION: &str = "sluice.dlq.partition";
/// The offset the record was read from (a sink).
pub const HEADER_OFFSET: &str = "sluice.dlq.offset";
/// The size in bytes of a value left out of the dead-letter record.
pub const HEADER_VALUE_OMITTED: &str = "sluice.dlq.value_omitted_bytes";

//! The change-event format: Debezium's envelope, as JSON.
//!
//! Key: a JSON object of the primary-key columns (`null` for tables without one). Value:
//! `{"before":…,"after":…,"source":{…},"op":"c|u|d|r|t","ts_ms":…}`; a delete is followed by
//! a tombstone (null value) unless `kafka.tombstones_on_delete = false`. Unchanged TOASTed
//! columns are left out of `after` and named in `"unavailable_columns"`, never sent as null or
//! as a placeholder. Topics are `<prefix>.<schema>.<table>`.
//!
//! Every record also carries its source position in headers, so consumers can drop the
//! duplicates an at-least-once pipeline may write after a crash: the position
//! (`sluice.commit_lsn`, `sluice.tx_index`) strictly increases per key.

/// Header: the LSN of the source transaction's commit record (decimal).
pub const HEADER_COMMIT_LSN: &str = "sluice.commit_lsn";
/// Header: the LSN of the change itself (decimal).
pub const HEADER_LSN: &str = "sluice.lsn";
/// Header: the record's index within its transaction (decimal, from 0).
pub const HEADER_TX_INDEX: &str = "sluice.tx_index";

/// Debezium's operation codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Insert.
    Create,
    /// Update.
    Update,
    /// Delete.
    Delete,
    /// Snapshot read.
    Read,
    /// Truncate.
    Truncate,
    /// Logical decoding message.
    Message,
}

impl Op {
    /// The code as Debezium writes it.
    pub fn code(self) -> &'static str {
        match self {
            Op::Create => "c",
            Op::Update => "u",
            Op::Delete => "d",
            Op::Read => "r",
            Op::Truncate => "t",
            Op::Message => "m",
        }
    }
}

/// Appends `text` as a JSON string.
pub fn write_json_str(out: &mut Vec<u8>, text: &str) {
    // serde_json's escaper is exact and fast; writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Appends an integer in decimal.
pub fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

//! The change-event format: Debezium's envelope, as JSON.
//!
//! Key: a JSON object of the primary-key columns (`null` for tables without one). Value:
//! `{"before":…,"after":…,"source":{…},"transaction":null,"op":"c|u|d|r|t","ts_ms":…,
//! "ts_us":…,"ts_ns":…}`, field for field the Debezium PostgreSQL connector's (a second source
//! reuses these rules: [`geometry`], [`temporal`]); a delete is followed by a tombstone (null
//! value; null key for a keyless table, as Debezium) unless
//! `kafka.tombstones_on_delete = false`. Unchanged TOASTed
//! columns are left out of `after` and named in `"unavailable_columns"`, never sent as null or
//! as a placeholder. Topics are `<prefix>.<schema>.<table>`.
//!
//! Every record also carries its source position in headers, so consumers can drop the
//! duplicates an at-least-once pipeline may write after a crash: the position
//! (`sluice.commit_lsn`, `sluice.tx_index`) strictly increases per key.

pub mod geometry;
pub mod temporal;

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

/// What ends every change event's `source` block after `lsn`, and the envelope's
/// `transaction` (Debezium's, with transaction metadata off): `xmin`, `origin`, `origin_lsn`.
pub const SOURCE_END_TRANSACTION: &[u8] =
    b",\"xmin\":null,\"origin\":null,\"origin_lsn\":null},\"transaction\":null";

/// `source.snapshot`: where a record is in a snapshot, as Debezium marks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnapshotMarker {
    /// Not a snapshot record (streamed).
    False,
    /// The first record of the initial snapshot.
    First,
    /// The first record of a table (not the snapshot's first).
    FirstInDataCollection,
    /// Any other snapshot record.
    True,
    /// The last record of a table (not the snapshot's last); also a table's only record.
    LastInDataCollection,
    /// The last record of the initial snapshot.
    Last,
    /// A record of an incremental snapshot.
    Incremental,
}

impl SnapshotMarker {
    /// Debezium's marker of a snapshot record by its position: in the whole snapshot
    /// (`first_of_all`, `last_of_all`) and in its table. Last wins over first (a table's only
    /// row is `last_in_data_collection`; the snapshot's only row is `last`).
    pub fn of(
        first_of_all: bool,
        last_of_all: bool,
        first_in_table: bool,
        last_in_table: bool,
    ) -> Self {
        if last_of_all {
            SnapshotMarker::Last
        } else if first_of_all {
            SnapshotMarker::First
        } else if last_in_table {
            SnapshotMarker::LastInDataCollection
        } else if first_in_table {
            SnapshotMarker::FirstInDataCollection
        } else {
            SnapshotMarker::True
        }
    }

    /// The value as Debezium writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotMarker::False => "false",
            SnapshotMarker::First => "first",
            SnapshotMarker::FirstInDataCollection => "first_in_data_collection",
            SnapshotMarker::True => "true",
            SnapshotMarker::LastInDataCollection => "last_in_data_collection",
            SnapshotMarker::Last => "last",
            SnapshotMarker::Incremental => "incremental",
        }
    }
}

/// `[kafka.events]`: how change events are written. Everything off (the default) is exactly
/// the Debezium connector's default output (JSON, schemas disabled); each key turns on one of
/// sluice's own additions, or one of Debezium's options by its name (`decimal.handling.mode` →
/// `decimal_handling_mode`). Shared by every source.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventOptions {
    /// Debezium's `decimal.handling.mode`.
    #[serde(default)]
    pub decimal_handling_mode: DecimalHandlingMode,
    /// sluice: `json`/`jsonb` values as the document itself (embedded JSON) instead of
    /// Debezium's string holding the document.
    #[serde(default)]
    pub embed_json: bool,
    /// sluice: leave an unchanged TOASTed column out of `after` and name it in the event's
    /// `"unavailable_columns"` instead of Debezium's placeholder
    /// (`"__debezium_unavailable_value"`) in the column.
    #[serde(default)]
    pub unavailable_columns: bool,
    /// sluice: write `TRUNCATE` as an `op: "t"` event (Debezium's default
    /// `skipped.operations=t` leaves it out).
    #[serde(default)]
    pub truncate: bool,
}

/// Debezium's `decimal.handling.mode`: how `numeric` (and `money`) values are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum DecimalHandlingMode {
    /// Debezium's default: the unscaled value as big-endian two's-complement bytes in base64
    /// (`org.apache.kafka.connect.data.Decimal`); a `numeric` without a scale is
    /// `{"scale":…,"value":…}` (`io.debezium.data.VariableScaleDecimal`); NaN and the
    /// infinities are `null`.
    #[default]
    #[serde(rename = "precise")]
    Precise,
    /// A string of the exact decimal (`"NaN"`, `"Infinity"`, `"-Infinity"` as such).
    #[serde(rename = "string")]
    String,
}

/// Debezium's placeholder for a value the server did not send (an unchanged TOASTed column).
pub const UNAVAILABLE_VALUE_PLACEHOLDER: &str = "__debezium_unavailable_value";

/// Appends `text` as a JSON string.
pub fn write_json_str(out: &mut Vec<u8>, text: &str) {
    // serde_json's escaper is exact and fast; writing into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, text);
}

/// Appends an integer in decimal.
pub fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

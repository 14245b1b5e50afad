//! The change-event format: Debezium's envelope, as JSON.
//!
//! Key: a JSON object of the primary-key columns (`null` for tables without one). Value:
//! `{"before":…,"after":…,"source":{…},"transaction":null,"op":"c|u|d|r|t","ts_ms":…,
//! "ts_us":…,"ts_ns":…}`, field for field the Debezium PostgreSQL connector's (a second source
//! reuses these rules: [`geometry`], [`temporal`], [`options`], [`schema`]); a delete
//! is followed by a tombstone (null value; null key for a keyless table, as Debezium) unless
//! `[kafka.events] tombstones_on_delete = false`. An unchanged TOASTed column is Debezium's
//! placeholder (or, with `unavailable_columns`, left out and named in `"unavailable_columns"`).
//! Topics are `<prefix>.<schema>.<table>`. Debezium's options that change a column's form are
//! in [`options`], one deciding function each.
//!
//! Every record also carries its source position in headers, so consumers can drop the
//! duplicates an at-least-once pipeline may write after a crash: the position
//! (`sluice.commit_lsn`, `sluice.tx_index`) strictly increases per key.
//!
//! With `kafka.events.schemas_enable` (`JsonConverter`'s `schemas.enable=true`), key and value
//! are `{"schema":…,"payload":…}` with the schemas Debezium's connector declares ([`schema`]).

pub mod avro;
pub mod decimal;
pub mod geometry;
pub mod options;
pub mod schema;
pub mod temporal;
mod wire;

pub use options::{
    BinaryHandlingMode, HstoreHandlingMode, IntervalHandlingMode, SkippedOperations, TemporalUnit,
    TimePrecisionMode,
};

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

/// Debezium's `transaction` block of a streamed change event
/// (`provide.transaction.metadata`): `{"id":"<txId>:<lsn>","total_order":n,
/// "data_collection_order":m}`, the orders counting the transaction's events from 1, in all and
/// per table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransactionOrder {
    /// The transaction's id (`txId`).
    pub xid: u32,
    /// The event's position among the transaction's events, from 1.
    pub total_order: u64,
    /// The event's position among the transaction's events of its table, from 1.
    pub data_collection_order: u64,
}

impl TransactionOrder {
    /// Appends the block of the event at `lsn` (Debezium's id: the transaction id and the
    /// position of the event).
    pub fn write(&self, lsn: u64, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"id\":\"");
        write_int(out, self.xid);
        out.push(b':');
        write_int(out, lsn);
        out.extend_from_slice(b"\",\"total_order\":");
        write_int(out, self.total_order);
        out.extend_from_slice(b",\"data_collection_order\":");
        write_int(out, self.data_collection_order);
        out.push(b'}');
    }

    /// The same for the event after this one in the same table (the create of a key change).
    pub fn next(self) -> Self {
        Self {
            total_order: self.total_order + 1,
            data_collection_order: self.data_collection_order + 1,
            ..self
        }
    }
}

/// Debezium's `transaction` block of an event whose transaction id is a string (MySQL: the
/// GTID): `{"id":…,"total_order":n,"data_collection_order":m}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionBlock {
    /// The transaction's id.
    pub id: std::sync::Arc<str>,
    /// The event's position among the transaction's events, from 1.
    pub total_order: u64,
    /// The event's position among the transaction's events of its table, from 1.
    pub data_collection_order: u64,
}

impl TransactionBlock {
    /// Appends the block as JSON.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"id\":");
        write_json_str(out, &self.id);
        out.extend_from_slice(b",\"total_order\":");
        write_int(out, self.total_order);
        out.extend_from_slice(b",\"data_collection_order\":");
        write_int(out, self.data_collection_order);
        out.push(b'}');
    }

    /// The same for the event after this one in the same table (the create of a key change).
    pub fn next(&self) -> Self {
        Self {
            id: std::sync::Arc::clone(&self.id),
            total_order: self.total_order + 1,
            data_collection_order: self.data_collection_order + 1,
        }
    }
}

/// A transaction boundary event whose id is a string (MySQL's), as [`transaction_event`].
pub fn transaction_event_with_id(
    id: &str,
    commit_unix_ms: i64,
    collections: Option<&[(String, u64)]>,
) -> (Vec<u8>, Vec<u8>) {
    let mut quoted = Vec::with_capacity(id.len() + 2);
    write_json_str(&mut quoted, id);
    transaction_event_of(&quoted, commit_unix_ms, collections)
}

/// A transaction boundary event on `<prefix>.transaction` (`provide.transaction.metadata`),
/// as Debezium writes it: key `{"id":…}`, value `{"status":"BEGIN"|"END","id":…,
/// "event_count":…,"data_collections":[{"data_collection":"<schema>.<table>",
/// "event_count":…}],"ts_ms":<commit time>}` (`event_count` and `data_collections` `null` for
/// BEGIN). `collections` is `None` for BEGIN.
pub fn transaction_event(
    xid: u32,
    lsn: u64,
    commit_unix_ms: i64,
    collections: Option<&[(String, u64)]>,
) -> (Vec<u8>, Vec<u8>) {
    let mut id = Vec::with_capacity(24);
    id.push(b'"');
    write_int(&mut id, xid);
    id.push(b':');
    write_int(&mut id, lsn);
    id.push(b'"');
    transaction_event_of(&id, commit_unix_ms, collections)
}

/// [`transaction_event`] of an id already written as a JSON string.
fn transaction_event_of(
    id: &[u8],
    commit_unix_ms: i64,
    collections: Option<&[(String, u64)]>,
) -> (Vec<u8>, Vec<u8>) {
    let mut key = b"{\"id\":".to_vec();
    key.extend_from_slice(id);
    key.push(b'}');
    let mut value = Vec::with_capacity(128);
    value.extend_from_slice(match collections {
        None => b"{\"status\":\"BEGIN\",\"id\":".as_slice(),
        Some(_) => b"{\"status\":\"END\",\"id\":".as_slice(),
    });
    value.extend_from_slice(id);
    match collections {
        None => value.extend_from_slice(b",\"event_count\":null,\"data_collections\":null"),
        Some(collections) => {
            value.extend_from_slice(b",\"event_count\":");
            write_int(&mut value, collections.iter().map(|(_, n)| n).sum::<u64>());
            value.extend_from_slice(b",\"data_collections\":[");
            for (n, (name, count)) in collections.iter().enumerate() {
                if n > 0 {
                    value.push(b',');
                }
                value.extend_from_slice(b"{\"data_collection\":");
                write_json_str(&mut value, name);
                value.extend_from_slice(b",\"event_count\":");
                write_int(&mut value, *count);
                value.push(b'}');
            }
            value.push(b']');
        }
    }
    value.extend_from_slice(b",\"ts_ms\":");
    write_int(&mut value, commit_unix_ms);
    value.push(b'}');
    (key, value)
}

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

/// `[kafka.events]`: how change events are written. The defaults are exactly the Debezium
/// connector's default output (JSON, schemas disabled); Debezium's options go by their names
/// (`decimal.handling.mode` → `decimal_handling_mode`) and values, and a few keys turn on
/// sluice's own additions. Shared by every source.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventOptions {
    /// Debezium's `decimal.handling.mode`.
    #[serde(default)]
    pub decimal_handling_mode: DecimalHandlingMode,
    /// Debezium's `time.precision.mode`.
    #[serde(default)]
    pub time_precision_mode: TimePrecisionMode,
    /// Debezium's `binary.handling.mode`.
    #[serde(default)]
    pub binary_handling_mode: BinaryHandlingMode,
    /// Debezium's `interval.handling.mode`.
    #[serde(default)]
    pub interval_handling_mode: IntervalHandlingMode,
    /// Debezium's `hstore.handling.mode`.
    #[serde(default)]
    pub hstore_handling_mode: HstoreHandlingMode,
    /// Debezium's `money.fraction.digits`: the scale of `money` amounts.
    #[serde(default = "default_money_fraction_digits")]
    pub money_fraction_digits: u8,
    /// Debezium's `tombstones.on.delete` (`kafka.tombstones_on_delete` is its older name);
    /// unset = true. Read it with `KafkaConfig::tombstones_on_delete`.
    #[serde(default)]
    pub tombstones_on_delete: Option<bool>,
    /// Debezium's `skipped.operations` (default `"t"`: no event for a TRUNCATE).
    #[serde(default)]
    pub skipped_operations: SkippedOperations,
    /// Debezium's `unavailable.value.placeholder`: the value of an unchanged TOASTed column
    /// the server did not send (its UTF-8 bytes for a binary column under
    /// `binary_handling_mode = "bytes"`).
    #[serde(default = "default_unavailable_value_placeholder")]
    pub unavailable_value_placeholder: String,
    /// Debezium's `provide.transaction.metadata`: a `transaction` block in each streamed
    /// change event and BEGIN/END events on `<topic_prefix>.transaction`.
    #[serde(default)]
    pub provide_transaction_metadata: bool,
    /// sluice: `json`/`jsonb` values as the document itself (embedded JSON) instead of
    /// Debezium's string holding the document.
    #[serde(default)]
    pub embed_json: bool,
    /// sluice: leave an unchanged TOASTed column out of `after` and name it in the event's
    /// `"unavailable_columns"` instead of Debezium's placeholder
    /// (`"__debezium_unavailable_value"`) in the column.
    #[serde(default)]
    pub unavailable_columns: bool,
    /// Replaced by `skipped_operations` (refused with a message saying so).
    #[serde(default)]
    pub truncate: Option<bool>,
    /// Kafka Connect's `JsonConverter` `schemas.enable`: write keys and values as
    /// `{"schema":…,"payload":…}` with Debezium's schemas (off: the bare payload, as
    /// `schemas.enable=false`).
    #[serde(default)]
    pub schemas_enable: bool,
    /// The form of keys and values, as Kafka Connect's converters: `"json"` (the bare payload,
    /// the default), `"json_with_schemas"` (`{"schema":…,"payload":…}`, as `schemas_enable`)
    /// or `"avro"` (Confluent's wire format through the `[schema_registry]`). `key_format` and
    /// `value_format` choose each apart (Connect's `key.converter` / `value.converter`).
    #[serde(default)]
    pub format: Option<EventFormat>,
    /// The keys' form (default: `format`).
    #[serde(default)]
    pub key_format: Option<EventFormat>,
    /// The values' form (default: `format`).
    #[serde(default)]
    pub value_format: Option<EventFormat>,
    /// Debezium's `column.propagate.source.type`: regular expressions (a comma-separated
    /// string, as Debezium's, or an array) matched against `schema.table.column`; a matching
    /// column's schema gets `__debezium.source.column.type` / `.length` / `.scale` parameters
    /// (with `schemas_enable`).
    #[serde(default)]
    pub column_propagate_source_type: ColumnPatterns,
}

impl Default for EventOptions {
    fn default() -> Self {
        Self {
            decimal_handling_mode: DecimalHandlingMode::default(),
            time_precision_mode: TimePrecisionMode::default(),
            binary_handling_mode: BinaryHandlingMode::default(),
            interval_handling_mode: IntervalHandlingMode::default(),
            hstore_handling_mode: HstoreHandlingMode::default(),
            money_fraction_digits: default_money_fraction_digits(),
            tombstones_on_delete: None,
            skipped_operations: SkippedOperations::default(),
            unavailable_value_placeholder: default_unavailable_value_placeholder(),
            provide_transaction_metadata: false,
            embed_json: false,
            unavailable_columns: false,
            truncate: None,
            schemas_enable: false,
            format: None,
            key_format: None,
            value_format: None,
            column_propagate_source_type: ColumnPatterns::NONE,
        }
    }
}

/// The form of a record's key or value (`[kafka.events] format`, `key_format`, `value_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventFormat {
    /// The payload as JSON (`JsonConverter`, `schemas.enable=false`).
    Json,
    /// `{"schema":…,"payload":…}` (`JsonConverter`, `schemas.enable=true`).
    JsonWithSchemas,
    /// Avro in Confluent's wire format, schemas in the schema registry (the Avro converters).
    Avro,
}

impl EventOptions {
    fn default_format(&self) -> EventFormat {
        self.format.unwrap_or(if self.schemas_enable {
            EventFormat::JsonWithSchemas
        } else {
            EventFormat::Json
        })
    }

    /// The keys' form.
    pub fn key_format(&self) -> EventFormat {
        self.key_format.unwrap_or_else(|| self.default_format())
    }

    /// The values' form.
    pub fn value_format(&self) -> EventFormat {
        self.value_format.unwrap_or_else(|| self.default_format())
    }

    /// Whether events need their Connect schemas (JSON with schemas, or Avro).
    pub fn needs_schemas(&self) -> bool {
        self.key_format() != EventFormat::Json || self.value_format() != EventFormat::Json
    }

    /// Whether keys or values are Avro (and need the schema registry).
    pub fn uses_avro(&self) -> bool {
        self.key_format() == EventFormat::Avro || self.value_format() == EventFormat::Avro
    }
}

fn default_money_fraction_digits() -> u8 {
    2
}

fn default_unavailable_value_placeholder() -> String {
    UNAVAILABLE_VALUE_PLACEHOLDER.to_owned()
}

/// Regular expressions over column names (`schema.table.column`), each matching the whole name,
/// case-insensitively, as Debezium's column options. Compiled once when the configuration is
/// read and kept for the process's life (so the options stay `Copy`).
#[derive(Clone, Copy, Default)]
pub struct ColumnPatterns(&'static [(String, regex_automata::meta::Regex)]);

impl ColumnPatterns {
    /// No pattern.
    pub const NONE: ColumnPatterns = ColumnPatterns(&[]);

    /// Compiles the patterns.
    ///
    /// # Errors
    ///
    /// The first pattern that is not a valid regular expression, with why.
    pub fn new<S: AsRef<str>>(patterns: &[S]) -> Result<Self, String> {
        if patterns.is_empty() {
            return Ok(Self::NONE);
        }
        let mut compiled = Vec::with_capacity(patterns.len());
        for pattern in patterns {
            let pattern = pattern.as_ref().trim();
            let regex = regex_automata::meta::Regex::builder()
                .syntax(
                    regex_automata::util::syntax::Config::new()
                        .case_insensitive(true)
                        .unicode(false)
                        .utf8(false),
                )
                .build(&format!("^(?:{pattern})$"))
                .map_err(|e| format!("{pattern:?} is not a valid regular expression: {e}"))?;
            compiled.push((pattern.to_owned(), regex));
        }
        Ok(Self(Box::leak(compiled.into_boxed_slice())))
    }

    /// Whether a pattern matches the whole `name`.
    pub fn matches(&self, name: &str) -> bool {
        self.0
            .iter()
            .any(|(_, regex)| regex.is_match(name.as_bytes()))
    }

    /// Whether there is no pattern.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Debug for ColumnPatterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|(p, _)| p))
            .finish()
    }
}

impl PartialEq for ColumnPatterns {
    fn eq(&self, other: &Self) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(other.0).all(|(a, b)| a.0 == b.0)
    }
}

impl Eq for ColumnPatterns {}

impl<'de> serde::Deserialize<'de> for ColumnPatterns {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Form {
            Text(String),
            List(Vec<String>),
        }
        let patterns: Vec<String> = match Form::deserialize(deserializer)? {
            Form::Text(text) => text
                .split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
            Form::List(list) => list,
        };
        Self::new(&patterns).map_err(serde::de::Error::custom)
    }
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
    /// A JSON number (a 64-bit float: may lose digits); NaN and the infinities are the
    /// strings `"NaN"`, `"Infinity"`, `"-Infinity"`, as Kafka's JSON converter writes them.
    #[serde(rename = "double")]
    Double,
}

/// Debezium's placeholder for a value the server did not send (an unchanged TOASTed column).
pub const UNAVAILABLE_VALUE_PLACEHOLDER: &str = "__debezium_unavailable_value";

/// Appends `text` as a JSON string.
pub fn write_json_str(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    write_escaped(text.as_bytes(), out);
    out.push(b'"');
}

/// Whether a byte must be escaped inside a JSON string.
pub fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == b'"' || byte == b'\\'
}

/// Appends the JSON escape of one byte that [`needs_escape`] (serde_json's escapes: the short
/// forms where JSON has one, else `\u00xx`).
pub fn push_escape(byte: u8, out: &mut Vec<u8>) {
    /// Hexadecimal digits for `\u00XX` escapes.
    const HEX: &[u8; 16] = b"0123456789abcdef";
    match byte {
        b'"' => out.extend_from_slice(b"\\\""),
        b'\\' => out.extend_from_slice(b"\\\\"),
        b'\n' => out.extend_from_slice(b"\\n"),
        b'\r' => out.extend_from_slice(b"\\r"),
        b'\t' => out.extend_from_slice(b"\\t"),
        0x08 => out.extend_from_slice(b"\\b"),
        0x0c => out.extend_from_slice(b"\\f"),
        _ => {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0x0f)]);
        }
    }
}

/// Appends the body of a JSON string (without quotes) for `text`, which must be UTF-8.
///
/// Escaping works byte by byte: every byte that needs an escape is ASCII, and the bytes of
/// multi-byte UTF-8 sequences are all at least 0x80, so they pass through untouched. Runs
/// of eight bytes none of which needs an escape (most text) are skipped a word at a time.
pub fn write_escaped(text: &[u8], out: &mut Vec<u8>) {
    out.reserve(text.len());
    let mut copied = 0;
    let mut at = 0;
    while at < text.len() {
        if let Some(word) = text
            .get(at..at + 8)
            .and_then(|w| <[u8; 8]>::try_from(w).ok())
            && !word_needs_escape(u64::from_le_bytes(word))
        {
            at += 8;
            continue;
        }
        let byte = text[at];
        if needs_escape(byte) {
            out.extend_from_slice(&text[copied..at]);
            push_escape(byte, out);
            copied = at + 1;
        }
        at += 1;
    }
    out.extend_from_slice(&text[copied..]);
}

/// Whether any of a word's eight bytes [`needs_escape`] (the classic bit tricks: `has_zero`
/// of the word XOR a repeated byte finds that byte; subtracting 0x20 from every byte sets
/// the high bit of each byte below 0x20 that had it clear). A byte can only be flagged
/// wrongly by the borrow of a lower byte that matched, so the answer for the word is exact.
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let has_zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    let control = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    control | has_zero(word ^ (ONES * u64::from(b'"'))) | has_zero(word ^ (ONES * u64::from(b'\\')))
        != 0
}

/// Appends an integer in decimal.
pub fn write_int(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_serde_json_does() {
        // Every byte below 0x80 at every offset of a 17-byte run (both the word-at-a-time
        // path and the byte path), next to multi-byte characters.
        for byte in 0u8..0x80 {
            for at in 0..17 {
                let mut text: Vec<char> = "ab€cdefghijklmnop".chars().collect();
                let len = text.len();
                text[at % len] = char::from(byte);
                let text: String = text.into_iter().collect();
                let mut ours = Vec::new();
                write_json_str(&mut ours, &text);
                assert_eq!(
                    String::from_utf8(ours).unwrap(),
                    serde_json::to_string(&text).unwrap(),
                    "byte {byte:#04x} at {at}"
                );
            }
        }
        let mut ours = Vec::new();
        write_json_str(&mut ours, "");
        assert_eq!(ours, b"\"\"");
    }

    #[test]
    fn transaction_events_are_debeziums() {
        let (key, value) = transaction_event(571, 53195829, 1_580_390_884_335, None);
        assert_eq!(key, br#"{"id":"571:53195829"}"#);
        assert_eq!(
            String::from_utf8(value).unwrap(),
            r#"{"status":"BEGIN","id":"571:53195829","event_count":null,"data_collections":null,"ts_ms":1580390884335}"#
        );
        let collections = [("s1.a".to_owned(), 1), ("s2.a".to_owned(), 2)];
        let (_, value) = transaction_event(571, 53195900, 1_580_390_884_335, Some(&collections));
        assert_eq!(
            String::from_utf8(value).unwrap(),
            r#"{"status":"END","id":"571:53195900","event_count":3,"data_collections":[{"data_collection":"s1.a","event_count":1},{"data_collection":"s2.a","event_count":2}],"ts_ms":1580390884335}"#
        );
    }
}

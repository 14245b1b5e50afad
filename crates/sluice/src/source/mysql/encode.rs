//! Row changes to Debezium MySQL envelopes: values mapped as Debezium's MySQL connector does
//! by default (`decimal.handling.mode=precise`, `time.precision.mode=adaptive_time_microseconds`,
//! `binary.handling.mode=bytes`), keys of the primary-key columns, tombstones after deletes.
//!
//! The envelope: `{"before":…,"after":…,"source":{"version","connector":"mysql","name","ts_ms",
//! "snapshot","db","sequence","ts_us","ts_ns","table","server_id","gtid","file","pos","row",
//! "thread","query"},"transaction":null,"op":…,"ts_ms":…,"ts_us":…,"ts_ns":…}` (Debezium 3's).

use crate::event::decimal::write_unscaled;
use crate::event::temporal::{civil_from_days, days_from_civil, write_padded};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use mysql_async::Value;
use mysql_async::binlog::events::OptionalMetadataField;
use mysql_async::binlog::jsonb::{ObjectKey as JsonbKey, Value as JsonbValue};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::consts::{ColumnFlags, ColumnType, GeometryType};

use crate::error::PipelineError;
use crate::event::options::BinaryHandlingMode;
use crate::event::schema::RenderedSchemas;
use crate::event::{
    DecimalHandlingMode, EventFormat, EventOptions, Op, SnapshotMarker, write_escaped, write_int,
    write_json_str,
};
use crate::kafka::OutRecord;
use crate::runtime::metrics::TableMetrics;

/// Header: the binlog file of the record's row event.
pub const HEADER_BINLOG_FILE: &str = "sluice.binlog_file";
/// Header: the position of the record's row event in its file (decimal).
pub const HEADER_BINLOG_POS: &str = "sluice.binlog_pos";
/// Header: the row's index in its row event (decimal, from 0).
pub const HEADER_BINLOG_ROW: &str = "sluice.binlog_row";

/// How a column's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// TINYINT … BIGINT, signed or unsigned: a JSON integer (BIGINT UNSIGNED exact up to
    /// 2^64-1).
    Integer,
    /// A signed MEDIUMINT from the binlog: a JSON integer, sign-extended from its 24 bits (the
    /// decoder reads -8388608 as 8388608).
    Int24,
    /// YEAR: a JSON integer; the zero year as Debezium writes it (a snapshot's `0` is 2000, the
    /// binlog's is 1900).
    Year,
    /// FLOAT / DOUBLE: a JSON number (`null` for NaN and the infinities, which MySQL does not
    /// store).
    Float,
    /// DECIMAL(p,s): base64 of the unscaled value's big-endian two's-complement bytes.
    Decimal {
        /// Digits after the point.
        scale: u8,
    },
    /// CHAR / VARCHAR / TEXT: a JSON string.
    Text,
    /// CHAR / VARCHAR / TEXT in `latin1` from the binlog (the server's bytes in that
    /// character set, which is Windows-1252): a JSON string.
    Latin1,
    /// BINARY / VARBINARY / BLOB: base64.
    Bytes,
    /// BINARY(n) from the binlog, which drops the trailing zero bytes: base64 of the value
    /// padded with zero bytes to `len`, as the column holds it.
    Binary {
        /// The column's length in bytes.
        len: u16,
    },
    /// JSON: a string holding the document.
    Json,
    /// DATE: days since 1970-01-01 (`io.debezium.time.Date`).
    Date,
    /// DATETIME(0-3): milliseconds since the epoch (`io.debezium.time.Timestamp`);
    /// DATETIME(4-6): microseconds (`io.debezium.time.MicroTimestamp`).
    DateTime {
        /// Fractional digits.
        fsp: u8,
    },
    /// TIMESTAMP(fsp): an ISO-8601 string in UTC with `fsp` fractional digits
    /// (`io.debezium.time.ZonedTimestamp`).
    Timestamp {
        /// Fractional digits.
        fsp: u8,
    },
    /// TIME(fsp): microseconds (`io.debezium.time.MicroTime`), negative or past 24 h as MySQL
    /// allows.
    Time,
    /// BIT(1): a JSON boolean.
    Bool,
    /// BIT(n), n > 1: base64 of the bits in little-endian byte order, `bytes` long
    /// (`io.debezium.data.Bits`).
    Bits {
        /// (n + 7) / 8.
        bytes: usize,
    },
    /// ENUM in the binlog (its value's 1-based index): the label, from the TABLE_MAP's
    /// metadata ([`ColumnInfo::labels`]).
    Enum,
    /// SET in the binlog (a bit mask): the labels of its bits, in definition order, joined by
    /// commas.
    Set,
    /// GEOMETRY and the other spatial types: `{"wkb":…,"srid":…}`
    /// (`io.debezium.data.geometry.Geometry`): base64 of the WKB, the SRID (null for 0).
    Geometry,
    /// POINT: `{"x":…,"y":…,"wkb":…,"srid":…}` (`io.debezium.data.geometry.Point`).
    Point,
}

/// The `[kafka.events]` options that decide how a table's values and records are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueModes {
    /// `decimal_handling_mode`: DECIMAL values.
    pub decimal: DecimalHandlingMode,
    /// `binary_handling_mode`: BINARY, VARBINARY and BLOB values.
    pub binary: BinaryHandlingMode,
    /// BIGINT UNSIGNED above 2^63-1 written wrapped to a negative number, as Debezium
    /// (`bigint.unsigned.handling.mode=long`): on when events carry schemas, whose `int64`
    /// cannot hold the exact value; off, the exact value (sluice's JSON).
    pub wrap_unsigned: bool,
    /// The keys' form.
    pub key_format: EventFormat,
    /// The values' form.
    pub value_format: EventFormat,
}

impl ValueModes {
    /// The modes `events` asks for.
    pub fn of(events: &EventOptions) -> Self {
        Self {
            decimal: events.decimal_handling_mode,
            binary: events.binary_handling_mode,
            wrap_unsigned: events.needs_schemas(),
            key_format: events.key_format(),
            value_format: events.value_format(),
        }
    }
}

impl Default for ValueModes {
    fn default() -> Self {
        Self::of(&EventOptions::default())
    }
}

/// One column of a captured table, as the TABLE_MAP event describes it.
#[derive(Debug, Clone)]
pub struct ColumnInfo {
    /// Its name.
    pub name: String,
    /// `"name":`, ready to write.
    json_label: Vec<u8>,
    /// How its values are written.
    pub kind: Kind,
    /// An ENUM's or SET's labels, in definition order (binlog only).
    pub labels: Arc<[String]>,
}

/// A captured table at one version of its definition.
#[derive(Debug)]
pub struct TableInfo {
    /// Its database.
    pub database: String,
    /// Its name.
    pub table: String,
    /// `<prefix>.<database>.<table>`.
    pub topic: Arc<str>,
    /// Its columns, in order.
    pub columns: Vec<ColumnInfo>,
    /// The indexes of the primary-key columns (empty: no key; records have a null key).
    pub key_columns: Vec<usize>,
    /// Its counters.
    pub metrics: Arc<TableMetrics>,
    /// `,"db":…,"sequence":null`, ready to write.
    source_db: Vec<u8>,
    /// `,"table":…`, ready to write.
    source_table: Vec<u8>,
    /// The size of the largest event value written for it so far (up to
    /// [`VALUE_SIZE_HINT_MAX`]): the next one's buffer is made that large, so a value is
    /// written without growing (and copying) its buffer.
    value_size_hint: AtomicUsize,
    /// How values and records are written.
    pub modes: ValueModes,
    /// The key and envelope schemas (JSON with schemas, Avro), rendered once.
    pub schemas: Option<RenderedSchemas>,
}

/// The column types of this step, by their binlog type, metadata and flags; the others are
/// named in the error.
fn kind_of(column_type: ColumnType, meta: &[u8], charset: u16) -> Result<Kind, &'static str> {
    use ColumnType::*;
    Ok(match column_type {
        MYSQL_TYPE_TINY | MYSQL_TYPE_SHORT | MYSQL_TYPE_INT24 | MYSQL_TYPE_LONG
        | MYSQL_TYPE_LONGLONG => Kind::Integer,
        MYSQL_TYPE_YEAR => Kind::Year,
        MYSQL_TYPE_FLOAT | MYSQL_TYPE_DOUBLE => Kind::Float,
        MYSQL_TYPE_NEWDECIMAL => Kind::Decimal {
            scale: meta.get(1).copied().unwrap_or(0),
        },
        MYSQL_TYPE_STRING if charset == BINARY_CHARSET => {
            // Metadata: the real type and the length in bytes, its two high bits folded into
            // the first byte (as the server writes lengths above 255). A snapshot's result
            // has none (its values come padded).
            match meta {
                [real, low, ..] if *real != 0 => Kind::Binary {
                    len: if real & 0x30 != 0x30 {
                        u16::from(*low) | (u16::from((real & 0x30) ^ 0x30) << 4)
                    } else {
                        u16::from(*low)
                    },
                },
                _ => Kind::Bytes,
            }
        }
        MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING | MYSQL_TYPE_STRING => {
            if charset == BINARY_CHARSET {
                Kind::Bytes
            } else if LATIN1_CHARSETS.contains(&charset) {
                Kind::Latin1
            } else {
                Kind::Text
            }
        }
        MYSQL_TYPE_TINY_BLOB | MYSQL_TYPE_MEDIUM_BLOB | MYSQL_TYPE_LONG_BLOB | MYSQL_TYPE_BLOB => {
            if charset == BINARY_CHARSET {
                Kind::Bytes
            } else if LATIN1_CHARSETS.contains(&charset) {
                Kind::Latin1
            } else {
                Kind::Text
            }
        }
        MYSQL_TYPE_JSON => Kind::Json,
        MYSQL_TYPE_NEWDATE | MYSQL_TYPE_DATE => Kind::Date,
        MYSQL_TYPE_DATETIME2 => Kind::DateTime {
            fsp: meta.first().copied().unwrap_or(0),
        },
        MYSQL_TYPE_DATETIME => Kind::DateTime { fsp: 0 },
        MYSQL_TYPE_TIMESTAMP2 => Kind::Timestamp {
            fsp: meta.first().copied().unwrap_or(0),
        },
        MYSQL_TYPE_TIMESTAMP => Kind::Timestamp { fsp: 0 },
        MYSQL_TYPE_TIME2 | MYSQL_TYPE_TIME => Kind::Time,
        MYSQL_TYPE_BIT => {
            // Metadata: bits in the last byte, whole bytes.
            let bits = usize::from(meta.get(1).copied().unwrap_or(0)) * 8
                + usize::from(meta.first().copied().unwrap_or(0));
            if bits <= 1 {
                Kind::Bool
            } else {
                Kind::Bits {
                    bytes: bits.div_ceil(8),
                }
            }
        }
        MYSQL_TYPE_ENUM => Kind::Enum,
        MYSQL_TYPE_SET => Kind::Set,
        MYSQL_TYPE_GEOMETRY => Kind::Geometry,
        MYSQL_TYPE_DECIMAL => return Err("old DECIMAL (pre-5.0)"),
        _ => return Err("this column type"),
    })
}

fn bad_metadata(error: std::io::Error) -> PipelineError {
    PipelineError::retryable("undecodable TABLE_MAP metadata", error)
}

/// The `binary` character set's id: BLOB and BINARY columns carry it, TEXT and CHAR do not.
const BINARY_CHARSET: u16 = 63;

/// The ids of `latin1`'s collations (the same on MySQL and MariaDB).
const LATIN1_CHARSETS: [u16; 8] = [5, 8, 15, 31, 47, 48, 49, 94];

/// Windows-1252's characters for the bytes 0x80 to 0x9F (MySQL's `latin1`); the five bytes
/// it leaves undefined map to the C1 controls, as Java's decoder does.
const CP1252_HIGH: [char; 32] = [
    '\u{20AC}', '\u{81}', '\u{201A}', '\u{192}', '\u{201E}', '\u{2026}', '\u{2020}', '\u{2021}',
    '\u{2C6}', '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8D}', '\u{17D}', '\u{8F}',
    '\u{90}', '\u{2018}', '\u{2019}', '\u{201C}', '\u{201D}', '\u{2022}', '\u{2013}', '\u{2014}',
    '\u{2DC}', '\u{2122}', '\u{161}', '\u{203A}', '\u{153}', '\u{9D}', '\u{17E}', '\u{178}',
];

/// `latin1` (Windows-1252) bytes as text.
fn latin1_text(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|&b| match b {
            0x80..=0x9F => CP1252_HIGH[usize::from(b - 0x80)],
            _ => char::from(b),
        })
        .collect()
}

/// Appends `latin1` bytes as a JSON string: ASCII (most text) as it is, without a copy.
fn write_latin1_str(out: &mut Vec<u8>, bytes: &[u8]) {
    if bytes.is_ascii() {
        out.push(b'"');
        write_escaped(bytes, out);
        out.push(b'"');
    } else {
        write_json_str(out, &latin1_text(bytes));
    }
}

/// Appends text from the binlog as a JSON string: valid UTF-8 without a copy, anything else
/// with U+FFFD for what is not.
fn write_utf8_str(out: &mut Vec<u8>, bytes: &[u8]) {
    match std::str::from_utf8(bytes) {
        Ok(text) => write_json_str(out, text),
        Err(_) => write_json_str(out, &String::from_utf8_lossy(bytes)),
    }
}

/// The largest buffer [`TableInfo`]'s size hint makes for an event value: a few large rows
/// must not make every later value of the table take that much memory while in flight.
const VALUE_SIZE_HINT_MAX: usize = 16 * 1024;

impl TableInfo {
    /// The table of a TABLE_MAP event, from the columns of a decoded row (names, flags,
    /// character sets from the event's optional metadata) and the event's type metadata.
    ///
    /// # Errors
    ///
    /// A fatal error naming the column whose type is not mapped yet, or a table whose binlog
    /// has no column names (`binlog_row_metadata` is not FULL).
    pub fn new(
        prefix: &str,
        tme: &mysql_async::binlog::events::TableMapEvent<'_>,
        row_columns: &[mysql_async::Column],
        metrics: Arc<TableMetrics>,
        events: &EventOptions,
    ) -> Result<Self, PipelineError> {
        let database = tme.database_name().into_owned();
        let table = tme.table_name().into_owned();
        if row_columns.iter().any(|c| c.name_str().starts_with('@')) {
            return Err(PipelineError::fatal(
                format!("the binlog has no column names for {database}.{table}"),
                "SET GLOBAL binlog_row_metadata = 'FULL' (and in the server's configuration file); rows written before it cannot be captured",
            ));
        }
        let kinds = row_columns.iter().enumerate().map(|(i, column)| {
            let meta = tme.get_column_metadata(i).unwrap_or(&[]);
            let kind = kind_of(column.column_type(), meta, column.character_set());
            if column.column_type() == ColumnType::MYSQL_TYPE_INT24
                && !column.flags().contains(ColumnFlags::UNSIGNED_FLAG)
            {
                return kind.map(|_| Kind::Int24);
            }
            kind
        });
        let mut info = Self::build(prefix, database, table, row_columns, kinds, metrics, events)?;
        // ENUM and SET labels: the optional metadata lists them per ENUM (per SET) column, in
        // column order; the geometry types per spatial column; the primary key's columns in
        // the key's order (which the decoder's column flags miss when it is not the columns').
        let (mut enums, mut sets) = (Vec::new(), Vec::new());
        let mut geometry_types = Vec::new();
        let mut key: Option<Vec<usize>> = None;
        let index = |i: u64| usize::try_from(i).unwrap_or(usize::MAX);
        for field in tme.iter_optional_meta() {
            match field {
                Ok(OptionalMetadataField::SimplePrimaryKey(pk)) => {
                    let columns: Result<Vec<usize>, _> =
                        pk.iter_indexes().map(|i| i.map(index)).collect();
                    key = Some(columns.map_err(bad_metadata)?);
                }
                Ok(OptionalMetadataField::PrimaryKeyWithPrefix(pk)) => {
                    let columns: Result<Vec<usize>, _> = pk
                        .iter_keys()
                        .map(|k| k.map(|k| index(k.column_index())))
                        .collect();
                    key = Some(columns.map_err(bad_metadata)?);
                }
                Ok(OptionalMetadataField::GeometryType(types)) => {
                    for geometry in types.iter_geometry_types() {
                        // An unknown type is an error here: a geometry, not a point.
                        geometry_types.push(geometry.ok());
                    }
                }
                Ok(OptionalMetadataField::EnumStrValue(values)) => {
                    for column in values.iter_values() {
                        let column = column.map_err(bad_metadata)?;
                        enums.push(
                            column
                                .values()
                                .iter()
                                .map(|v| v.value().into_owned())
                                .collect(),
                        );
                    }
                }
                Ok(OptionalMetadataField::SetStrValue(values)) => {
                    for column in values.iter_values() {
                        let column = column.map_err(bad_metadata)?;
                        sets.push(
                            column
                                .values()
                                .iter()
                                .map(|v| v.value().into_owned())
                                .collect(),
                        );
                    }
                }
                Ok(_) => {}
                Err(e) => return Err(bad_metadata(e)),
            }
        }
        if let Some(key) = key
            && key.iter().all(|&i| i < info.columns.len())
        {
            info.key_columns = key;
        }
        let mut geometry_types = geometry_types.into_iter();
        for column in &mut info.columns {
            if column.kind == Kind::Geometry
                && geometry_types.next().flatten() == Some(GeometryType::GEOM_POINT)
            {
                column.kind = Kind::Point;
            }
        }
        let (mut enums, mut sets) = (enums.into_iter(), sets.into_iter());
        for column in &mut info.columns {
            let labels: Option<Vec<String>> = match column.kind {
                Kind::Enum => enums.next(),
                Kind::Set => sets.next(),
                _ => continue,
            };
            let Some(labels) = labels else {
                return Err(PipelineError::fatal(
                    format!(
                        "the binlog has no ENUM/SET values for {}.{}.{}",
                        info.database, info.table, column.name
                    ),
                    "SET GLOBAL binlog_row_metadata = 'FULL' (and in the server's configuration file)",
                ));
            };
            column.labels = Arc::from(labels);
        }
        Ok(info)
    }

    /// The table of a snapshot query's result (`SELECT` of every column): the result's column
    /// definitions give the same kinds as the binlog's metadata; `key` names the primary key's
    /// columns in the key's order and `points` the columns declared `POINT` (a result says
    /// neither).
    ///
    /// # Errors
    ///
    /// A fatal error naming the column whose type is not mapped yet.
    #[allow(clippy::too_many_arguments)]
    pub fn of_result(
        prefix: &str,
        database: &str,
        table: &str,
        columns: &[mysql_async::Column],
        key: &[String],
        points: &[String],
        metrics: Arc<TableMetrics>,
        events: &EventOptions,
    ) -> Result<Self, PipelineError> {
        let kinds = columns.iter().map(kind_of_result_column);
        let mut info = Self::build(
            prefix,
            database.to_owned(),
            table.to_owned(),
            columns,
            kinds,
            metrics,
            events,
        )?;
        let position = |name: &String| info.columns.iter().position(|c| &c.name == name);
        if let Some(key) = key.iter().map(position).collect::<Option<Vec<usize>>>() {
            info.key_columns = key;
        }
        for column in &mut info.columns {
            if column.kind == Kind::Geometry && points.contains(&column.name) {
                column.kind = Kind::Point;
            }
        }
        Ok(info)
    }

    fn build(
        prefix: &str,
        database: String,
        table: String,
        row_columns: &[mysql_async::Column],
        kinds: impl Iterator<Item = Result<Kind, &'static str>>,
        metrics: Arc<TableMetrics>,
        events: &EventOptions,
    ) -> Result<Self, PipelineError> {
        let mut columns = Vec::with_capacity(row_columns.len());
        let mut key_columns = Vec::new();
        for (i, (column, kind)) in row_columns.iter().zip(kinds).enumerate() {
            let name = column.name_str().into_owned();
            let kind = kind.map_err(|what| {
                PipelineError::fatal(
                    format!(
                        "column {database}.{table}.{name} is of a type sluice does not map yet ({what})"
                    ),
                    format!(
                        "leave the table out (source.mysql.exclude_tables = [\"{database}.{table}\"]); see docs/mysql-source.md for the types mapped"
                    ),
                )
            })?;
            if column.flags().contains(ColumnFlags::PRI_KEY_FLAG) {
                key_columns.push(i);
            }
            let mut json_label = Vec::with_capacity(name.len() + 3);
            write_json_str(&mut json_label, &name);
            json_label.push(b':');
            columns.push(ColumnInfo {
                name,
                json_label,
                kind,
                labels: Arc::from([]),
            });
        }
        let mut source_db = Vec::new();
        source_db.extend_from_slice(b",\"db\":");
        write_json_str(&mut source_db, &database);
        source_db.extend_from_slice(b",\"sequence\":null");
        let mut source_table = b",\"table\":".to_vec();
        write_json_str(&mut source_table, &table);
        Ok(Self {
            topic: Arc::from(format!("{prefix}.{database}.{table}")),
            database,
            table,
            columns,
            key_columns,
            metrics,
            source_db,
            source_table,
            value_size_hint: AtomicUsize::new(512),
            modes: ValueModes::of(events),
            schemas: None,
        })
    }
}

/// A result-set column's kind: its type and flags stand for the binlog's type and metadata
/// (DATETIME and TIMESTAMP are the fractional `…2` types, their precision in `decimals`; a
/// BIT's width is its length; ENUM and SET are strings with a flag, and their values text).
fn kind_of_result_column(column: &mysql_async::Column) -> Result<Kind, &'static str> {
    use ColumnType::*;
    let flags = column.flags();
    // A query returns ENUM and SET values as their text.
    if flags.contains(ColumnFlags::ENUM_FLAG) || flags.contains(ColumnFlags::SET_FLAG) {
        return Ok(Kind::Text);
    }
    let decimals = column.decimals();
    let (column_type, meta) = match column.column_type() {
        MYSQL_TYPE_BIT => {
            // The column's length is its number of bits.
            let bits = column.column_length();
            (MYSQL_TYPE_BIT, [(bits % 8) as u8, (bits / 8) as u8])
        }
        MYSQL_TYPE_DATETIME | MYSQL_TYPE_DATETIME2 => (MYSQL_TYPE_DATETIME2, [decimals, 0]),
        MYSQL_TYPE_TIMESTAMP | MYSQL_TYPE_TIMESTAMP2 => (MYSQL_TYPE_TIMESTAMP2, [decimals, 0]),
        MYSQL_TYPE_NEWDECIMAL => (MYSQL_TYPE_NEWDECIMAL, [0, decimals]),
        other => (other, [0, 0]),
    };
    kind_of(column_type, &meta, column.character_set())
}

/// Where a change is in the binlog, as `source` shows it.
#[derive(Debug, Clone)]
pub struct BinlogSource {
    /// The server that wrote the event.
    pub server_id: u32,
    /// The event's timestamp (seconds).
    pub ts_sec: u32,
    /// The transaction's GTID (`uuid:n` on MySQL, `domain-server-seq` on MariaDB).
    pub gtid: Option<Arc<str>>,
    /// The binlog file.
    pub file: Arc<str>,
    /// The row event's position in it.
    pub pos: u64,
    /// The row's index in the event.
    pub row: u32,
    /// The thread that made the change (from the transaction's `BEGIN`), when known.
    pub thread: Option<u32>,
    /// `source.snapshot`: `False` for streamed changes, Debezium's marker for snapshot reads.
    pub snapshot: SnapshotMarker,
}

/// One row change: the MySQL source's change type in the delivery core.
pub struct RowChange {
    /// Its table.
    pub table: Arc<TableInfo>,
    /// Insert, update or delete.
    pub op: Op,
    /// The row before (updates, deletes).
    pub before: Option<Vec<BinlogValue<'static>>>,
    /// The row after (inserts, updates).
    pub after: Option<Vec<BinlogValue<'static>>>,
    /// Where it is in the binlog.
    pub source: BinlogSource,
    /// Debezium's `transaction` block (`provide_transaction_metadata`; a key change's create
    /// gets the next one); `None`: `"transaction":null`.
    pub transaction: Option<crate::event::TransactionBlock>,
}

impl RowChange {
    /// The records it becomes: one, and a tombstone after a delete when they are on.
    pub fn records(&self, tombstones: bool) -> u32 {
        if self.key_changed() {
            // A delete (and its tombstone), then a create.
            if tombstones { 3 } else { 2 }
        } else if self.op == Op::Delete && tombstones {
            2
        } else {
            1
        }
    }

    /// The change events it becomes (a key change: a delete and a create), as the
    /// transaction's `event_count` counts them.
    pub fn events(&self) -> u64 {
        if self.key_changed() { 2 } else { 1 }
    }

    /// An update of a primary-key column: Debezium writes it as a delete of the old key (and
    /// its tombstone) and a create of the new one.
    fn key_changed(&self) -> bool {
        match (self.op, &self.before, &self.after) {
            (Op::Update, Some(before), Some(after)) => self
                .table
                .key_columns
                .iter()
                .any(|&i| before.get(i) != after.get(i)),
            _ => false,
        }
    }
}

/// A value this step cannot write (a bug or a server sending what its metadata did not say).
#[derive(Debug)]
struct ValueError(String);

/// Encodes `change` into `out`: the change event, then the tombstone after a delete; an
/// update of the primary key as a delete (and tombstone) and a create, as Debezium.
///
/// # Panics
///
/// On a value that does not fit its column's kind (the core applies
/// `delivery.on_permanent_error`).
pub fn encode(
    change: &RowChange,
    prefix_name: &str,
    tombstones: bool,
    now_micros: i64,
    out: &mut Vec<OutRecord>,
) {
    if change.key_changed() {
        let part =
            |op, before: &Option<Vec<BinlogValue<'static>>>, after: &Option<_>, transaction| {
                RowChange {
                    table: Arc::clone(&change.table),
                    op,
                    before: before.clone(),
                    after: after.clone(),
                    source: change.source.clone(),
                    transaction,
                }
            };
        let delete = part(
            Op::Delete,
            &change.before,
            &None,
            change.transaction.clone(),
        );
        encode_one(&delete, prefix_name, tombstones, now_micros, out);
        let next = change
            .transaction
            .as_ref()
            .map(crate::event::TransactionBlock::next);
        let create = part(Op::Create, &None, &change.after, next);
        encode_one(&create, prefix_name, tombstones, now_micros, out);
    } else {
        encode_one(change, prefix_name, tombstones, now_micros, out);
    }
}

/// Encodes one change event (and the tombstone after a delete).
fn encode_one(
    change: &RowChange,
    prefix_name: &str,
    tombstones: bool,
    now_micros: i64,
    out: &mut Vec<OutRecord>,
) {
    let table = &change.table;
    let key_row = change.after.as_ref().or(change.before.as_ref());
    let key = key_row.and_then(|row| write_key(table, row));
    let size_hint = table.value_size_hint.load(Ordering::Relaxed);
    let head = table
        .schemas
        .as_ref()
        .filter(|_| table.modes.value_format == EventFormat::JsonWithSchemas)
        .map(|s| &*s.value_head);
    let mut value = Vec::with_capacity(size_hint + head.map_or(0, <[u8]>::len));
    if let Some(head) = head {
        value.extend_from_slice(head);
    }
    value.extend_from_slice(b"{\"before\":");
    write_row(table, change.before.as_ref(), &mut value);
    value.extend_from_slice(b",\"after\":");
    write_row(table, change.after.as_ref(), &mut value);
    let source = &change.source;
    value.extend_from_slice(b",\"source\":");
    write_source_head(&mut value, prefix_name, source);
    value.extend_from_slice(&table.source_db);
    value.extend_from_slice(b",\"ts_us\":");
    write_int(&mut value, i64::from(source.ts_sec) * 1_000_000);
    value.extend_from_slice(b",\"ts_ns\":");
    write_int(&mut value, i64::from(source.ts_sec) * 1_000_000_000);
    value.extend_from_slice(&table.source_table);
    value.extend_from_slice(b",\"server_id\":");
    write_int(&mut value, source.server_id);
    value.extend_from_slice(b",\"gtid\":");
    match &source.gtid {
        Some(gtid) => write_json_str(&mut value, gtid),
        None => value.extend_from_slice(b"null"),
    }
    value.extend_from_slice(b",\"file\":");
    write_json_str(&mut value, &source.file);
    value.extend_from_slice(b",\"pos\":");
    write_int(&mut value, source.pos);
    value.extend_from_slice(b",\"row\":");
    write_int(&mut value, source.row);
    value.extend_from_slice(b",\"thread\":");
    match source.thread {
        Some(thread) => write_int(&mut value, thread),
        None => value.extend_from_slice(b"null"),
    }
    value.extend_from_slice(b",\"query\":null},\"transaction\":");
    match &change.transaction {
        Some(block) => block.write(&mut value),
        None => value.extend_from_slice(b"null"),
    }
    value.extend_from_slice(b",\"op\":\"");
    value.extend_from_slice(change.op.code().as_bytes());
    value.extend_from_slice(b"\",\"ts_ms\":");
    write_int(&mut value, now_micros.div_euclid(1000));
    value.extend_from_slice(b",\"ts_us\":");
    write_int(&mut value, now_micros);
    value.extend_from_slice(b",\"ts_ns\":");
    write_int(&mut value, now_micros.saturating_mul(1000));
    value.push(b'}');
    if head.is_some() {
        value.push(b'}');
    }
    if value.len() > size_hint && value.len() <= VALUE_SIZE_HINT_MAX {
        table.value_size_hint.store(value.len(), Ordering::Relaxed);
    }
    if table.modes.value_format == EventFormat::Avro {
        let (schema, id) = table
            .schemas
            .as_ref()
            .and_then(|s| Some((&s.envelope, s.registered?.value)))
            .unwrap_or_else(|| panic!("{}: no registered Avro value schema (a bug)", table.topic));
        value = crate::event::avro::to_wire(&table.topic, schema, id, &value);
    }
    let headers = vec![
        (HEADER_BINLOG_FILE.into(), source.file.to_string()),
        (HEADER_BINLOG_POS.into(), source.pos.to_string()),
        (HEADER_BINLOG_ROW.into(), source.row.to_string()),
    ];
    if change.op == Op::Delete && tombstones {
        out.push(OutRecord {
            partition: None,
            topic: Arc::clone(&table.topic),
            key: key.clone(),
            value: Some(value),
            headers: headers.clone(),
        });
        out.push(OutRecord {
            partition: None,
            topic: Arc::clone(&table.topic),
            key,
            value: None,
            headers,
        });
    } else {
        out.push(OutRecord {
            partition: None,
            topic: Arc::clone(&table.topic),
            key,
            value: Some(value),
            headers,
        });
    }
}

/// The `source` block's opening, the same in row and schema-change events: `{"version": …,
/// "connector": "mysql", "name": …, "ts_ms": …, "snapshot": …` (no closing brace).
pub fn write_source_head(value: &mut Vec<u8>, prefix_name: &str, source: &BinlogSource) {
    value.extend_from_slice(b"{\"version\":");
    write_json_str(value, env!("CARGO_PKG_VERSION"));
    value.extend_from_slice(b",\"connector\":\"mysql\",\"name\":");
    write_json_str(value, prefix_name);
    value.extend_from_slice(b",\"ts_ms\":");
    write_int(value, i64::from(source.ts_sec) * 1000);
    value.extend_from_slice(b",\"snapshot\":\"");
    value.extend_from_slice(source.snapshot.as_str().as_bytes());
    value.push(b'"');
}

/// The event key `row` has in `table`'s topic (the bytes [`encode`] writes), without
/// panicking: `None` for a table without a primary key or a value that cannot be written.
/// Incremental snapshots compare streamed changes and chunk rows by it.
pub fn event_key(table: &TableInfo, row: &[BinlogValue<'static>]) -> Option<Vec<u8>> {
    if table.key_columns.is_empty() {
        return None;
    }
    let mut key = Vec::with_capacity(64);
    key.push(b'{');
    for (n, &i) in table.key_columns.iter().enumerate() {
        if n > 0 {
            key.push(b',');
        }
        let column = table.columns.get(i)?;
        key.extend_from_slice(&column.json_label);
        write_value_checked(
            column.kind,
            &column.labels,
            table.modes,
            row.get(i),
            &mut key,
        )
        .ok()?;
    }
    key.push(b'}');
    Some(key)
}

/// The key: the primary-key columns as a JSON object (in the key format); `None` for a table
/// without one.
fn write_key(table: &TableInfo, row: &[BinlogValue<'static>]) -> Option<Vec<u8>> {
    if table.key_columns.is_empty() {
        return None;
    }
    let head = table
        .schemas
        .as_ref()
        .filter(|_| table.modes.key_format == EventFormat::JsonWithSchemas)
        .and_then(|s| s.key_head.as_deref());
    let mut key = Vec::with_capacity(64 + head.map_or(0, <[u8]>::len));
    if let Some(head) = head {
        key.extend_from_slice(head);
    }
    key.push(b'{');
    for (n, &i) in table.key_columns.iter().enumerate() {
        if n > 0 {
            key.push(b',');
        }
        let column = &table.columns[i];
        key.extend_from_slice(&column.json_label);
        write_value(table, column, row.get(i), &mut key);
    }
    key.push(b'}');
    if head.is_some() {
        key.push(b'}');
    }
    if table.modes.key_format == EventFormat::Avro {
        let (schema, id) = table
            .schemas
            .as_ref()
            .and_then(|s| Some((s.key.as_ref()?, s.registered?.key?)))
            .unwrap_or_else(|| panic!("{}: no registered Avro key schema (a bug)", table.topic));
        return Some(crate::event::avro::to_wire(&table.topic, schema, id, &key));
    }
    Some(key)
}

fn write_row(table: &TableInfo, row: Option<&Vec<BinlogValue<'static>>>, out: &mut Vec<u8>) {
    let Some(row) = row else {
        out.extend_from_slice(b"null");
        return;
    };
    out.push(b'{');
    for (i, column) in table.columns.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(&column.json_label);
        write_value(table, column, row.get(i), out);
    }
    out.push(b'}');
}

fn write_value(
    table: &TableInfo,
    column: &ColumnInfo,
    value: Option<&BinlogValue<'static>>,
    out: &mut Vec<u8>,
) {
    if let Err(ValueError(problem)) =
        write_value_checked(column.kind, &column.labels, table.modes, value, out)
    {
        // A panic: the core applies delivery.on_permanent_error with this message.
        panic!(
            "column {}.{}.{}: {problem}",
            table.database, table.table, column.name
        );
    }
}

fn write_value_checked(
    kind: Kind,
    labels: &[String],
    modes: ValueModes,
    value: Option<&BinlogValue<'static>>,
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    let value = match value {
        None | Some(BinlogValue::Value(Value::NULL)) => {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        Some(BinlogValue::Jsonb(jsonb)) if kind == Kind::Json => {
            let mut text = Vec::with_capacity(64);
            write_jsonb(jsonb, &mut text)?;
            write_json_str(out, &String::from_utf8_lossy(&text));
            return Ok(());
        }
        Some(BinlogValue::Value(value)) => value,
        Some(other) => return Err(ValueError(format!("unexpected value {other:?}"))),
    };
    let unexpected = || ValueError(format!("unexpected value {value:?} for {kind:?}"));
    match (kind, value) {
        (Kind::Integer, Value::Int(n)) => write_int(out, *n),
        // BIGINT UNSIGNED past i64: wrapped when the schema says int64 (as Debezium).
        (Kind::Integer, Value::UInt(n)) if modes.wrap_unsigned => write_int(out, *n as i64),
        (Kind::Integer, Value::UInt(n)) => write_int(out, *n),
        // Sign-extended from the value's low 24 bits.
        (Kind::Int24, Value::Int(n)) => write_int(out, (*n << 40) >> 40),
        (Kind::Int24, Value::UInt(n)) => write_int(out, *n),
        (Kind::Year, Value::Bytes(text)) => {
            // The binlog's zero year is read as 1900 (1900 + the stored 0): Debezium writes
            // 1900 too.
            let year: i64 = std::str::from_utf8(text)
                .ok()
                .and_then(|t| t.parse().ok())
                .ok_or_else(unexpected)?;
            write_int(out, year);
        }
        // A snapshot's YEAR (binary protocol): the year itself; for the zero year Debezium's
        // snapshot writes 2000 (the JDBC driver reads YEAR 0 as a two-digit year).
        (Kind::Year, Value::Int(0) | Value::UInt(0)) => write_int(out, 2000),
        (Kind::Year, Value::Int(n)) => write_int(out, *n),
        (Kind::Year, Value::UInt(n)) => write_int(out, *n),
        (Kind::Float, Value::Float(f)) => write_float(f64::from(*f), Some(*f), out),
        (Kind::Float, Value::Double(f)) => write_float(*f, None, out),
        (Kind::Decimal { scale }, Value::Bytes(text)) => {
            let text = std::str::from_utf8(text).map_err(|_| unexpected())?;
            write_decimal(text, scale, modes.decimal, out).map_err(|()| unexpected())?;
        }
        (Kind::Text, Value::Bytes(bytes)) => write_utf8_str(out, bytes),
        (Kind::Latin1, Value::Bytes(bytes)) => write_latin1_str(out, bytes),
        (Kind::Binary { len }, Value::Bytes(bytes)) => {
            let mut padded = bytes.clone();
            if padded.len() < usize::from(len) {
                padded.resize(usize::from(len), 0);
            }
            modes.binary.write(&padded, out);
        }
        (Kind::Json, Value::Bytes(bytes)) => {
            // MariaDB's JSON is LONGTEXT: the document's text as written.
            write_json_str(out, &String::from_utf8_lossy(bytes));
        }
        (Kind::Bytes, Value::Bytes(bytes)) => modes.binary.write(bytes, out),
        (Kind::Date, Value::Date(year, month, day, ..)) => {
            if *month == 0 || *day == 0 {
                // A zero date ('0000-00-00' or a zero part) has no day: Debezium writes null.
                out.extend_from_slice(b"null");
            } else {
                write_int(
                    out,
                    days_from_civil(i64::from(*year), u32::from(*month), u32::from(*day)),
                );
            }
        }
        (Kind::DateTime { fsp }, Value::Date(year, month, day, hour, minute, second, micros)) => {
            if *month == 0 || *day == 0 {
                out.extend_from_slice(b"null");
            } else {
                let days = days_from_civil(i64::from(*year), u32::from(*month), u32::from(*day));
                let micros = days * 86_400_000_000
                    + (i64::from(*hour) * 3600 + i64::from(*minute) * 60 + i64::from(*second))
                        * 1_000_000
                    + i64::from(*micros);
                if fsp <= 3 {
                    write_int(out, micros.div_euclid(1000));
                } else {
                    write_int(out, micros);
                }
            }
        }
        (Kind::Timestamp { fsp }, Value::Bytes(text)) => {
            // The decoder writes `seconds[.micros]` since the epoch, UTC.
            let text = std::str::from_utf8(text).map_err(|_| unexpected())?;
            let (seconds, fraction) = text.split_once('.').unwrap_or((text, "0"));
            let seconds: i64 = seconds.parse().map_err(|_| unexpected())?;
            let fraction: u64 = format!("{fraction:0<6}")
                .get(..6)
                .and_then(|f| f.parse().ok())
                .ok_or_else(unexpected)?;
            if seconds == 0 && fraction == 0 {
                // The zero timestamp: Debezium writes null.
                out.extend_from_slice(b"null");
            } else {
                write_zoned(seconds, fraction, fsp, out);
            }
        }
        // A snapshot's TIMESTAMP (binary protocol, the session in UTC): the date and time.
        (Kind::Timestamp { fsp }, Value::Date(year, month, day, hour, minute, second, micros)) => {
            if *month == 0 || *day == 0 {
                out.extend_from_slice(b"null");
            } else {
                let days = days_from_civil(i64::from(*year), u32::from(*month), u32::from(*day));
                let seconds = days * 86_400
                    + i64::from(*hour) * 3600
                    + i64::from(*minute) * 60
                    + i64::from(*second);
                write_zoned(seconds, u64::from(*micros), fsp, out);
            }
        }
        (Kind::Bool, Value::Bytes(bytes)) => {
            out.extend_from_slice(if bytes.iter().any(|b| *b != 0) {
                b"true"
            } else {
                b"false"
            });
        }
        (Kind::Bits { bytes: width }, Value::Bytes(bytes)) => {
            // Big-endian from the server; Debezium writes little-endian, `width` bytes.
            let mut little: Vec<u8> = bytes.iter().rev().copied().collect();
            little.resize(width.max(little.len()), 0);
            write_base64(&little, out);
        }
        (Kind::Enum, Value::Int(index)) => {
            // 0 is the empty string MySQL stores for an invalid value.
            let label = usize::try_from(*index)
                .ok()
                .and_then(|i| i.checked_sub(1))
                .map(|i| labels.get(i).ok_or_else(unexpected))
                .transpose()?
                .map_or("", String::as_str);
            write_json_str(out, label);
        }
        (Kind::Set, Value::Bytes(mask)) => {
            let mut text = String::new();
            for (i, label) in labels.iter().enumerate() {
                if mask
                    .get(i / 8)
                    .is_some_and(|byte| byte & (1 << (i % 8)) != 0)
                {
                    if !text.is_empty() {
                        text.push(',');
                    }
                    text.push_str(label);
                }
            }
            write_json_str(out, &text);
        }
        (Kind::Geometry | Kind::Point, Value::Bytes(bytes)) => {
            // MySQL's internal form: the SRID (4 bytes, little-endian), then the WKB.
            let (Some(srid), Some(wkb)) = (bytes.get(..4), bytes.get(4..)) else {
                return Err(unexpected());
            };
            let srid = u32::from_le_bytes([srid[0], srid[1], srid[2], srid[3]]);
            out.push(b'{');
            if kind == Kind::Point {
                // WKB: byte order, type (4 bytes), then x and y (8 bytes each).
                let coordinate = |at: usize| -> Result<f64, ValueError> {
                    let raw: [u8; 8] = wkb
                        .get(at..at + 8)
                        .and_then(|b| b.try_into().ok())
                        .ok_or_else(unexpected)?;
                    Ok(match wkb.first() {
                        Some(0) => f64::from_be_bytes(raw),
                        _ => f64::from_le_bytes(raw),
                    })
                };
                out.extend_from_slice(b"\"x\":");
                out.extend_from_slice(java_double(coordinate(5)?).as_bytes());
                out.extend_from_slice(b",\"y\":");
                out.extend_from_slice(java_double(coordinate(13)?).as_bytes());
                out.push(b',');
            }
            out.extend_from_slice(b"\"wkb\":");
            write_base64(wkb, out);
            out.extend_from_slice(b",\"srid\":");
            if srid == 0 {
                out.extend_from_slice(b"null");
            } else {
                write_int(out, srid);
            }
            out.push(b'}');
        }
        (Kind::Time, Value::Time(negative, days, hours, minutes, seconds, micros)) => {
            let total = ((i64::from(*days) * 24 + i64::from(*hours)) * 3600
                + i64::from(*minutes) * 60
                + i64::from(*seconds))
                * 1_000_000
                + i64::from(*micros);
            write_int(out, if *negative { -total } else { total });
        }
        _ => return Err(unexpected()),
    }
    Ok(())
}

/// Appends a DECIMAL's text (`-123.45`, as the server or the decoder prints it) in `mode`:
/// base64 of the unscaled value at exactly `scale` digits (`precise`), that decimal as a
/// string (`string`), or a JSON number (`double`).
///
/// # Errors
///
/// The text is not a decimal.
pub(super) fn write_decimal(
    text: &str,
    scale: u8,
    mode: DecimalHandlingMode,
    out: &mut Vec<u8>,
) -> Result<(), ()> {
    let (negative, unsigned) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let scale = usize::from(scale);
    let mut digits = String::with_capacity(int.len() + scale);
    digits.push_str(int);
    // Exactly `scale` fractional digits (the decoder may print fewer or more).
    digits.extend(frac.chars().take(scale));
    for _ in frac.len()..scale {
        digits.push('0');
    }
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(());
    }
    match mode {
        DecimalHandlingMode::Precise => write_unscaled(negative, &digits, out),
        DecimalHandlingMode::String => {
            let split = digits.len() - scale;
            let (whole, fraction) = digits.split_at(split);
            let whole = whole.trim_start_matches('0');
            let zero = digits.bytes().all(|b| b == b'0');
            out.push(b'"');
            if negative && !zero {
                out.push(b'-');
            }
            out.extend_from_slice(if whole.is_empty() {
                b"0"
            } else {
                whole.as_bytes()
            });
            if scale > 0 {
                out.push(b'.');
                out.extend_from_slice(fraction.as_bytes());
            }
            out.push(b'"');
        }
        DecimalHandlingMode::Double => {
            let value: f64 = text.parse().map_err(|_| ())?;
            write_float(value, None, out);
        }
    }
    Ok(())
}

/// Bytes as a base64 JSON string.
fn write_base64(bytes: &[u8], out: &mut Vec<u8>) {
    out.push(b'"');
    out.extend_from_slice(
        base64::engine::general_purpose::STANDARD
            .encode(bytes)
            .as_bytes(),
    );
    out.push(b'"');
}

/// MySQL's binary JSON as text the way Debezium writes it: compact, object members in MySQL's
/// storage order (shorter keys first, then bytewise), doubles as Java prints them.
fn write_jsonb(value: &JsonbValue<'_>, out: &mut Vec<u8>) -> Result<(), ValueError> {
    let bad = |e: std::io::Error| ValueError(format!("undecodable binary JSON ({e})"));
    match value {
        JsonbValue::Null => out.extend_from_slice(b"null"),
        JsonbValue::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        JsonbValue::I16(n) => write_int(out, *n),
        JsonbValue::U16(n) => write_int(out, *n),
        JsonbValue::I32(n) => write_int(out, *n),
        JsonbValue::U32(n) => write_int(out, *n),
        JsonbValue::I64(n) => write_int(out, *n),
        JsonbValue::U64(n) => write_int(out, *n),
        JsonbValue::F64(f) => out.extend_from_slice(java_double(*f).as_bytes()),
        JsonbValue::String(text) => write_json_str(out, &String::from_utf8_lossy(text.str_raw())),
        JsonbValue::SmallArray(array) => {
            write_array(array.iter().map(|v| v.map_err(bad)), out)?;
        }
        JsonbValue::LargeArray(array) => {
            write_array(array.iter().map(|v| v.map_err(bad)), out)?;
        }
        JsonbValue::SmallObject(object) => {
            write_object(object.iter().map(|e| e.map_err(bad)), out)?;
        }
        JsonbValue::LargeObject(object) => {
            write_object(object.iter().map(|e| e.map_err(bad)), out)?;
        }
        JsonbValue::Opaque(opaque) => {
            return Err(ValueError(format!(
                "a JSON document holds a MySQL {:?} value, not mapped yet",
                opaque.value_type()
            )));
        }
    }
    Ok(())
}

fn write_array<'a>(
    items: impl Iterator<Item = Result<JsonbValue<'a>, ValueError>>,
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_jsonb(&item?, out)?;
    }
    out.push(b']');
    Ok(())
}

fn write_object<'a>(
    members: impl Iterator<Item = Result<(JsonbKey<'a>, JsonbValue<'a>), ValueError>>,
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    out.push(b'{');
    for (i, member) in members.enumerate() {
        let (key, value) = member?;
        if i > 0 {
            out.push(b',');
        }
        write_json_str(out, &String::from_utf8_lossy(key.value_raw()));
        out.push(b':');
        write_jsonb(&value, out)?;
    }
    out.push(b'}');
    Ok(())
}

/// A double as Java's `Double.toString`: `2.5`, `1.0`, `1.0E20`, `1.0E-4`.
fn java_double(value: f64) -> String {
    let magnitude = value.abs();
    if magnitude == 0.0 || (1e-3..1e7).contains(&magnitude) {
        // Debug keeps a fractional digit (`1.0`) and is the shortest round-trip form.
        return format!("{value:?}");
    }
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific.split_once('e').unwrap_or((&scientific, "0"));
    if mantissa.contains('.') {
        format!("{mantissa}E{exponent}")
    } else {
        format!("{mantissa}.0E{exponent}")
    }
}

/// A float as Java prints it for JSON (shortest round-trip form); `null` when not finite.
fn write_float(value: f64, single: Option<f32>, out: &mut Vec<u8>) {
    if !value.is_finite() {
        out.extend_from_slice(b"null");
        return;
    }
    let _ = match single {
        Some(single) => serde_json::to_writer(&mut *out, &single),
        None => serde_json::to_writer(&mut *out, &value),
    };
}

/// `seconds.fraction` since the epoch as `YYYY-MM-DDTHH:MM:SS[.f…]Z` with `fsp` digits.
fn write_zoned(seconds: i64, micros: u64, fsp: u8, out: &mut Vec<u8>) {
    let days = seconds.div_euclid(86_400);
    let secs = seconds.rem_euclid(86_400) as u64;
    let (year, month, day) = civil_from_days(days);
    out.push(b'"');
    write_padded(year.unsigned_abs(), 4, out);
    out.push(b'-');
    write_padded(u64::from(month), 2, out);
    out.push(b'-');
    write_padded(u64::from(day), 2, out);
    out.push(b'T');
    write_padded(secs / 3600, 2, out);
    out.push(b':');
    write_padded(secs / 60 % 60, 2, out);
    out.push(b':');
    write_padded(secs % 60, 2, out);
    let fsp = u32::from(fsp.min(6));
    if fsp > 0 {
        out.push(b'.');
        write_padded(micros / 10u64.pow(6 - fsp), fsp as usize, out);
    }
    out.extend_from_slice(b"Z\"");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(kind: Kind, value: Value) -> String {
        let mut out = Vec::new();
        write_value_checked(
            kind,
            &[],
            ValueModes::default(),
            Some(&BinlogValue::Value(value)),
            &mut out,
        )
        .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn integers_are_exact_up_to_bigint_unsigned_max() {
        assert_eq!(
            text(Kind::Integer, Value::UInt(u64::MAX)),
            "18446744073709551615"
        );
        assert_eq!(
            text(Kind::Integer, Value::Int(i64::MIN)),
            "-9223372036854775808"
        );
    }

    #[test]
    fn decimals_are_base64_unscaled_twos_complement() {
        let dec = |s: &str, scale| text(Kind::Decimal { scale }, Value::Bytes(s.into()));
        // 12345 = 0x3039.
        assert_eq!(dec("123.45", 2), "\"MDk=\"");
        // -12345 = 0xCFC7.
        assert_eq!(dec("-123.45", 2), "\"z8c=\"");
        // 1.5 at scale 3 = 1500 = 0x05DC.
        assert_eq!(dec("1.5", 3), "\"Bdw=\"");
        assert_eq!(dec("0.00", 2), "\"AA==\"");
        // 128 needs a sign byte: 0x0080.
        assert_eq!(dec("128", 0), "\"AIA=\"");
    }

    /// `decimal_handling_mode`, `binary_handling_mode` and the wrapped BIGINT UNSIGNED of the
    /// schema'd formats.
    #[test]
    fn the_modes_change_decimals_binaries_and_unsigned_bigints() {
        let with = |modes: ValueModes, kind, value| {
            let mut out = Vec::new();
            write_value_checked(kind, &[], modes, Some(&BinlogValue::Value(value)), &mut out)
                .unwrap();
            String::from_utf8(out).unwrap()
        };
        let string = ValueModes {
            decimal: DecimalHandlingMode::String,
            ..ValueModes::default()
        };
        let dec =
            |modes, s: &str, scale| with(modes, Kind::Decimal { scale }, Value::Bytes(s.into()));
        assert_eq!(dec(string, "123.45", 2), "\"123.45\"");
        assert_eq!(dec(string, "-0.5", 2), "\"-0.50\"");
        assert_eq!(dec(string, "0", 2), "\"0.00\"");
        assert_eq!(
            dec(string, "-12345678901234567890", 0),
            "\"-12345678901234567890\""
        );
        let double = ValueModes {
            decimal: DecimalHandlingMode::Double,
            ..ValueModes::default()
        };
        assert_eq!(dec(double, "12345.67", 2), "12345.67");
        assert_eq!(
            dec(double, "-0.000000000000000000000000000001", 30),
            "-1e-30"
        );
        let hex = ValueModes {
            binary: BinaryHandlingMode::Hex,
            ..ValueModes::default()
        };
        assert_eq!(
            with(hex, Kind::Bytes, Value::Bytes(vec![0, 255])),
            "\"00ff\""
        );
        assert_eq!(
            with(hex, Kind::Binary { len: 3 }, Value::Bytes(vec![16])),
            "\"100000\""
        );
        // BIT values stay bytes whatever the binary mode (as Debezium).
        assert_eq!(
            with(hex, Kind::Bits { bytes: 1 }, Value::Bytes(vec![3])),
            "\"Aw==\""
        );
        let schemas = ValueModes::of(&EventOptions {
            format: Some(EventFormat::Avro),
            ..EventOptions::default()
        });
        assert!(schemas.wrap_unsigned);
        assert_eq!(with(schemas, Kind::Integer, Value::UInt(u64::MAX)), "-1");
        assert_eq!(
            with(ValueModes::default(), Kind::Integer, Value::UInt(u64::MAX)),
            "18446744073709551615"
        );
    }

    #[test]
    fn times_follow_adaptive_time_microseconds() {
        assert_eq!(
            text(Kind::Date, Value::Date(2024, 2, 29, 0, 0, 0, 0)),
            "19782"
        );
        assert_eq!(text(Kind::Date, Value::Date(0, 0, 0, 0, 0, 0, 0)), "null");
        let dt = Value::Date(2024, 2, 29, 13, 14, 15, 123_456);
        assert_eq!(text(Kind::DateTime { fsp: 3 }, dt.clone()), "1709212455123");
        assert_eq!(text(Kind::DateTime { fsp: 6 }, dt), "1709212455123456");
        assert_eq!(
            text(
                Kind::Timestamp { fsp: 3 },
                Value::Bytes(b"1709212455.123000".to_vec())
            ),
            "\"2024-02-29T13:14:15.123Z\""
        );
        assert_eq!(
            text(
                Kind::Timestamp { fsp: 0 },
                Value::Bytes(b"1709212455".to_vec())
            ),
            "\"2024-02-29T13:14:15Z\""
        );
        assert_eq!(
            text(Kind::Time, Value::Time(true, 1, 2, 3, 4, 5)),
            "-93784000005"
        );
    }

    fn table() -> Arc<TableInfo> {
        let column = |name: &str, kind| {
            let mut json_label = Vec::new();
            write_json_str(&mut json_label, name);
            json_label.push(b':');
            ColumnInfo {
                name: name.to_owned(),
                json_label,
                kind,
                labels: Arc::from([]),
            }
        };
        Arc::new(TableInfo {
            database: "shop".into(),
            table: "orders".into(),
            topic: Arc::from("p.shop.orders"),
            columns: vec![column("id", Kind::Integer), column("note", Kind::Text)],
            key_columns: vec![0],
            metrics: Arc::new(TableMetrics::new("shop.orders")),
            source_db: b",\"db\":\"shop\",\"sequence\":null".to_vec(),
            source_table: b",\"table\":\"orders\"".to_vec(),
            value_size_hint: AtomicUsize::new(512),
            modes: ValueModes::default(),
            schemas: None,
        })
    }

    /// The envelope field for field, in Debezium's order, then the tombstone.
    #[test]
    fn a_delete_is_the_debezium_mysql_envelope_then_a_tombstone() {
        let row = vec![
            BinlogValue::Value(Value::UInt(7)),
            BinlogValue::Value(Value::Bytes(b"x".to_vec())),
        ];
        let change = RowChange {
            table: table(),
            op: Op::Delete,
            before: Some(row),
            after: None,
            source: BinlogSource {
                server_id: 1,
                ts_sec: 1_700_000_000,
                gtid: Some(Arc::from("0-1-9")),
                file: Arc::from("binlog.000002"),
                pos: 1234,
                row: 3,
                thread: None,
                snapshot: SnapshotMarker::False,
            },
            transaction: None,
        };
        let mut out = Vec::new();
        encode(&change, "p", true, 1_700_000_000_500_250, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].key.as_deref(), Some(&b"{\"id\":7}"[..]));
        let value = String::from_utf8(out[0].value.clone().unwrap()).unwrap();
        assert_eq!(
            value,
            format!(
                "{{\"before\":{{\"id\":7,\"note\":\"x\"}},\"after\":null,\"source\":{{\"version\":\"{}\",\"connector\":\"mysql\",\"name\":\"p\",\"ts_ms\":1700000000000,\"snapshot\":\"false\",\"db\":\"shop\",\"sequence\":null,\"ts_us\":1700000000000000,\"ts_ns\":1700000000000000000,\"table\":\"orders\",\"server_id\":1,\"gtid\":\"0-1-9\",\"file\":\"binlog.000002\",\"pos\":1234,\"row\":3,\"thread\":null,\"query\":null}},\"transaction\":null,\"op\":\"d\",\"ts_ms\":1700000000500,\"ts_us\":1700000000500250,\"ts_ns\":1700000000500250000}}",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(out[1].key, out[0].key);
        assert!(out[1].value.is_none());
        assert_eq!(
            out[1].headers[1],
            (HEADER_BINLOG_POS.into(), "1234".to_owned())
        );
    }

    /// `provide_transaction_metadata`: the change's `transaction` block; a key change's delete
    /// and create are two events of the transaction, numbered in turn.
    #[test]
    fn a_key_change_carries_two_numbered_transaction_blocks() {
        let row = |id| {
            vec![
                BinlogValue::Value(Value::UInt(id)),
                BinlogValue::Value(Value::Bytes(b"x".to_vec())),
            ]
        };
        let change = RowChange {
            table: table(),
            op: Op::Update,
            before: Some(row(7)),
            after: Some(row(8)),
            source: BinlogSource {
                server_id: 1,
                ts_sec: 1_700_000_000,
                gtid: Some(Arc::from("3e11fa47-71ca-11e1-9e33-c80aa9429562:23")),
                file: Arc::from("binlog.000002"),
                pos: 1234,
                row: 0,
                thread: None,
                snapshot: SnapshotMarker::False,
            },
            transaction: Some(crate::event::TransactionBlock {
                id: Arc::from("3e11fa47-71ca-11e1-9e33-c80aa9429562:23"),
                total_order: 4,
                data_collection_order: 2,
            }),
        };
        assert_eq!(change.events(), 2);
        let mut out = Vec::new();
        encode(&change, "p", true, 1_700_000_000_500_250, &mut out);
        let blocks: Vec<serde_json::Value> = out
            .iter()
            .filter_map(|r| r.value.as_ref())
            .map(|v| serde_json::from_slice::<serde_json::Value>(v).unwrap()["transaction"].clone())
            .collect();
        let id = "3e11fa47-71ca-11e1-9e33-c80aa9429562:23";
        assert_eq!(
            blocks,
            [
                serde_json::json!({"id": id, "total_order": 4, "data_collection_order": 2}),
                serde_json::json!({"id": id, "total_order": 5, "data_collection_order": 3}),
            ]
        );
    }

    #[test]
    fn bits_enums_sets_and_geometries_are_written_as_debezium_does() {
        assert_eq!(text(Kind::Bool, Value::Bytes(vec![1])), "true");
        assert_eq!(text(Kind::Bool, Value::Bytes(vec![0])), "false");
        // b'0000000100000010' (0x0102) little-endian: 02 01.
        assert_eq!(
            text(Kind::Bits { bytes: 2 }, Value::Bytes(vec![1, 2])),
            "\"AgE=\""
        );
        // BIT(10) holding 3, sent in 2 bytes: 03 00.
        assert_eq!(
            text(Kind::Bits { bytes: 2 }, Value::Bytes(vec![0, 3])),
            "\"AwA=\""
        );
        let labels: Vec<String> = ["a", "b", "c"].map(String::from).to_vec();
        let labelled = |kind, value| {
            let mut out = Vec::new();
            write_value_checked(
                kind,
                &labels,
                ValueModes::default(),
                Some(&BinlogValue::Value(value)),
                &mut out,
            )
            .unwrap();
            String::from_utf8(out).unwrap()
        };
        assert_eq!(labelled(Kind::Enum, Value::Int(2)), "\"b\"");
        assert_eq!(labelled(Kind::Enum, Value::Int(0)), "\"\"");
        assert_eq!(labelled(Kind::Set, Value::Bytes(vec![0b101])), "\"a,c\"");
        assert_eq!(labelled(Kind::Set, Value::Bytes(vec![0])), "\"\"");
        // POINT(1 2) with SRID 4326: the SRID, then the WKB.
        let mut point = 4326u32.to_le_bytes().to_vec();
        point.extend_from_slice(&[1, 1, 0, 0, 0]);
        point.extend_from_slice(&1f64.to_le_bytes());
        point.extend_from_slice(&2f64.to_le_bytes());
        assert_eq!(
            text(Kind::Geometry, Value::Bytes(point.clone())),
            "{\"wkb\":\"AQEAAAAAAAAAAADwPwAAAAAAAABA\",\"srid\":4326}"
        );
        point[..4].copy_from_slice(&[0; 4]);
        assert!(text(Kind::Geometry, Value::Bytes(point)).ends_with(",\"srid\":null}"));
    }

    #[test]
    fn doubles_print_as_java_does() {
        assert_eq!(java_double(2.5), "2.5");
        assert_eq!(java_double(1.0), "1.0");
        assert_eq!(java_double(-0.0), "-0.0");
        assert_eq!(java_double(1e20), "1.0E20");
        assert_eq!(java_double(1.5e-4), "1.5E-4");
    }

    #[test]
    fn bytes_are_base64_and_text_is_a_string() {
        assert_eq!(text(Kind::Bytes, Value::Bytes(vec![0, 255])), "\"AP8=\"");
        assert_eq!(text(Kind::Text, Value::Bytes("é\"".into())), "\"é\\\"\"");
        // latin1 is Windows-1252: 0xE9 is é, 0x80 the euro sign.
        assert_eq!(
            text(Kind::Latin1, Value::Bytes(vec![b'c', 0xE9, 0x80, 0xFF])),
            "\"cé€ÿ\""
        );
        // BINARY(4) from the binlog, trailing zero bytes dropped: put back.
        assert_eq!(
            text(Kind::Binary { len: 4 }, Value::Bytes(vec![0, 255, 16])),
            "\"AP8QAA==\""
        );
    }

    #[test]
    fn signed_mediumint_is_sign_extended_and_year_zero_is_debeziums() {
        assert_eq!(text(Kind::Int24, Value::Int(8_388_608)), "-8388608");
        assert_eq!(text(Kind::Int24, Value::Int(-5)), "-5");
        assert_eq!(text(Kind::Int24, Value::Int(8_388_607)), "8388607");
        assert_eq!(text(Kind::Year, Value::UInt(0)), "2000");
        assert_eq!(text(Kind::Year, Value::Bytes(b"1900".to_vec())), "1900");
        assert_eq!(text(Kind::Year, Value::UInt(2024)), "2024");
    }

    /// A key change: the delete of the old key, its tombstone, the create of the new one.
    #[test]
    fn a_key_change_is_a_delete_a_tombstone_and_a_create() {
        let row = |id: u64| {
            vec![
                BinlogValue::Value(Value::UInt(id)),
                BinlogValue::Value(Value::Bytes(b"x".to_vec())),
            ]
        };
        let change = RowChange {
            table: table(),
            op: Op::Update,
            before: Some(row(1)),
            after: Some(row(2)),
            source: BinlogSource {
                server_id: 1,
                ts_sec: 1_700_000_000,
                gtid: None,
                file: Arc::from("binlog.000002"),
                pos: 1234,
                row: 0,
                thread: None,
                snapshot: SnapshotMarker::False,
            },
            transaction: None,
        };
        assert_eq!(change.records(true), 3);
        assert_eq!(change.records(false), 2);
        let mut out = Vec::new();
        encode(&change, "p", true, 1_700_000_000_500_250, &mut out);
        let keys: Vec<&[u8]> = out.iter().map(|r| r.key.as_deref().unwrap()).collect();
        assert_eq!(keys, [&b"{\"id\":1}"[..], b"{\"id\":1}", b"{\"id\":2}"]);
        let value = |i: usize| String::from_utf8(out[i].value.clone().unwrap()).unwrap();
        assert!(value(0).starts_with("{\"before\":{\"id\":1,\"note\":\"x\"},\"after\":null,"));
        assert!(value(0).contains("\"op\":\"d\""));
        assert!(out[1].value.is_none());
        assert!(value(2).starts_with("{\"before\":null,\"after\":{\"id\":2,\"note\":\"x\"},"));
        assert!(value(2).contains("\"op\":\"c\""));
        let mut same = change;
        same.after = Some(vec![
            BinlogValue::Value(Value::UInt(1)),
            BinlogValue::Value(Value::Bytes(b"y".to_vec())),
        ]);
        assert_eq!(same.records(true), 1);
    }
}

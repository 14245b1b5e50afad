//! The Connect schemas of a PostgreSQL table's events (`kafka.events.schemas_enable`), as
//! Debezium's PostgreSQL connector declares them.
//!
//! A column's schema follows the kind the value writer uses for it (`value::column_kind`, so an
//! option such as `decimal_handling_mode` changes both together); what pgoutput's Relation
//! message lacks (NOT NULL, defaults, a domain's base type and modifier, enum labels, extension
//! type names) comes from the catalog, read once per relation ([`column_catalog`]), and the
//! schemas are rendered once per relation ([`render`]) and spliced before every payload.

use super::encode::{ColumnInfo, ColumnTreatment, RelationInfo};
use super::setup::PgCatalog;
use super::value::{self, ColumnKind, Kind};
use crate::error::PipelineError;
use crate::event::EventOptions;
use crate::event::options::{HstoreHandlingMode, IntervalHandlingMode, TemporalUnit};
use crate::event::schema::{Field, RenderedSchemas, Schema, SchemaType, source_common_fields};

/// What the catalog says about a column beyond the Relation message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnCatalog {
    /// The column name.
    pub name: String,
    /// `NOT NULL`.
    pub not_null: bool,
    /// The default expression (`pg_get_expr`), if any.
    pub default: Option<String>,
    /// The type, or a domain's base type.
    pub base_oid: u32,
    /// The column's type modifier, or a domain's.
    pub base_modifier: i32,
    /// The base type's name (`ltree`, `hstore`, … for extension types).
    pub type_name: String,
    /// The column's declared type's name (a domain's own name; `_int4` for `integer[]`).
    pub declared_type_name: String,
    /// The base type's `typtype` (`e` for enums, `c` composites, …).
    pub type_type: char,
    /// For an array: its element type's `typtype`.
    pub element_type_type: Option<char>,
    /// Enum labels in order (of the type, or of an array's element type).
    pub enum_labels: Vec<String>,
    /// The column's declared type (`atttypid`, a domain's own OID), as the Relation message
    /// sends it; `None` when not read (tests).
    pub type_oid: Option<u32>,
}

impl ColumnCatalog {
    /// Whether this entry describes `column` as the decoded Relation message does. The catalog
    /// is read now, the Relation message describes the table where decoding is: when the
    /// column's type changed between the two (an `ALTER … TYPE` committed after the changes
    /// being decoded, or a catalog read that saw an older table), the Relation message is the
    /// truth for the tuples that follow it, and this entry must not shape their schema.
    pub fn describes(&self, column: &ColumnInfo) -> bool {
        self.name == column.name && self.type_oid.is_none_or(|oid| oid == column.type_oid)
    }
}

/// The catalog's view of a relation's columns (one query).
///
/// # Errors
///
/// Retryable on connection trouble.
pub async fn column_catalog(
    catalog: &PgCatalog,
    relation_oid: u32,
) -> Result<Vec<ColumnCatalog>, PipelineError> {
    let rows = catalog
        .client()
        .query(
            "SELECT a.attname::text, a.attnotnull, pg_get_expr(d.adbin, d.adrelid), \
                    b.oid, CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, \
                    b.typname::text, b.typtype::text, e.typtype::text, \
                    ARRAY(SELECT l.enumlabel::text FROM pg_enum l \
                          WHERE l.enumtypid = COALESCE(e.oid, b.oid) ORDER BY l.enumsortorder), \
                    t.typname::text, a.atttypid \
             FROM pg_attribute a \
             JOIN pg_type t ON t.oid = a.atttypid \
             JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END \
             LEFT JOIN pg_type e ON b.typcategory = 'A' AND e.oid = b.typelem \
             LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum \
             WHERE a.attrelid = $1::oid AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&relation_oid],
        )
        .await
        .map_err(|e| crate::error::classify_pg("cannot read the table's column types", e))?;
    let first_char = |s: Option<String>| s.and_then(|s| s.chars().next());
    let text = |row: &tokio_postgres::Row, i: usize| row.get::<_, Option<String>>(i);
    Ok(rows
        .iter()
        .map(|row| ColumnCatalog {
            name: row.get(0),
            not_null: row.get(1),
            default: row.get(2),
            base_oid: row.get(3),
            base_modifier: row.get(4),
            type_name: row.get(5),
            type_type: first_char(text(row, 6)).unwrap_or('b'),
            element_type_type: first_char(text(row, 7)),
            enum_labels: row.get(8),
            declared_type_name: row.get(9),
            type_oid: Some(row.get(10)),
        })
        .collect())
}

/// `io.debezium.connector.postgresql.Source`.
pub fn source_schema() -> Schema {
    let mut fields = source_common_fields();
    let string = |optional| Schema::of(SchemaType::String, optional);
    let int64 = || Schema::of(SchemaType::Int64, true);
    fields.extend([
        Field::new("schema", string(false)),
        Field::new("table", string(false)),
        Field::new("txId", int64()),
        Field::new("lsn", int64()),
        Field::new("xmin", int64()),
        Field::new("origin", string(true)),
        Field::new("origin_lsn", int64()),
    ]);
    Schema::of(SchemaType::Struct(fields), false)
        .named("io.debezium.connector.postgresql.Source", Some(1))
}

/// The logical decoding message topic's (`<prefix>.message`) key and value schemas, as
/// Debezium's PostgreSQL connector registers them: `io.debezium.connector.postgresql.MessageKey`
/// (`prefix`) and `MessageValue` (`op`, `ts_ms`, the connector's `source`, the `transaction`
/// block, and `message`: `io.debezium.connector.postgresql.Message` of `prefix` and `content`,
/// bytes or, under another `binary_handling_mode`, the string it writes).
pub fn message_topic_schemas(events: &EventOptions) -> RenderedSchemas {
    let string = |optional| Schema::of(SchemaType::String, optional);
    let key = Schema::of(
        SchemaType::Struct(vec![Field::new("prefix", string(true))]),
        false,
    )
    .named("io.debezium.connector.postgresql.MessageKey", Some(1));
    let content = match events.binary_handling_mode {
        crate::event::BinaryHandlingMode::Bytes => Schema::of(SchemaType::Bytes, true),
        _ => string(true),
    };
    let message = Schema::of(
        SchemaType::Struct(vec![
            Field::new("prefix", string(true)),
            Field::new("content", content),
        ]),
        false,
    )
    .named("io.debezium.connector.postgresql.Message", Some(1));
    let value = Schema::of(
        SchemaType::Struct(vec![
            Field::new("op", string(false)),
            Field::new("ts_ms", Schema::of(SchemaType::Int64, true)),
            Field::new("source", source_schema()),
            Field::new("transaction", crate::event::schema::transaction_block()),
            Field::new("message", message),
        ]),
        false,
    )
    .named("io.debezium.connector.postgresql.MessageValue", Some(1));
    RenderedSchemas::of(Some(key), value)
}

/// The outbox router's key and value schemas: the aggregate id column's and the payload
/// column's Connect schemas in the outbox table's row (`catalog`: [`column_catalog`]'s
/// answer), as Debezium's `EventRouter` takes them from the `after` struct.
pub fn outbox_schemas(
    rel: &RelationInfo,
    catalog: &[ColumnCatalog],
    events: &EventOptions,
    outbox: &super::outbox::OutboxLayout,
) -> RenderedSchemas {
    let rendered = render(rel, catalog, events);
    let row = match &rendered.envelope.schema_type {
        SchemaType::Struct(fields) => fields
            .iter()
            .find(|f| f.name == "after")
            .map(|f| f.schema.clone()),
        _ => None,
    };
    let column = |index: usize| {
        let name = &rel.columns[index].name;
        match row.as_ref().map(|r| &r.schema_type) {
            Some(SchemaType::Struct(fields)) => fields
                .iter()
                .find(|f| &f.name == name)
                .map(|f| f.schema.clone()),
            _ => None,
        }
        // A column the rules leave out: a null of an optional string.
        .unwrap_or_else(|| Schema::of(SchemaType::String, true))
    };
    RenderedSchemas::of(Some(column(outbox.aggregate_id)), column(outbox.payload))
}

/// Renders a relation's key and envelope schemas; `catalog` is [`column_catalog`]'s answer
/// (columns it does not name get the Relation message's type, nullable unless a key).
pub fn render(
    rel: &RelationInfo,
    catalog: &[ColumnCatalog],
    events: &EventOptions,
) -> RenderedSchemas {
    let field = |index: usize| {
        let column = &rel.columns[index];
        let info = catalog.iter().find(|c| c.describes(column));
        let is_key = rel.key_columns.contains(&index);
        let optional = !(is_key || info.is_some_and(|c| c.not_null));
        let mut schema = column_schema(column, info, optional, events);
        if let Some(info) = info
            && events
                .column_propagate_source_type
                .matches(&format!("{}.{}", rel.name, column.name))
        {
            propagate_source_type(info, &mut schema);
        }
        Field::new(column.name.clone(), schema)
    };
    let columns = (0..rel.columns.len())
        // As the value writer: excluded columns and those Debezium leaves out are not fields.
        .filter(|&i| {
            rel.columns[i].treatment != ColumnTreatment::Exclude && !rel.columns[i].left_out
        })
        .map(field)
        .collect();
    let key =
        (!rel.key_columns.is_empty()).then(|| rel.key_columns.iter().map(|&i| field(i)).collect());
    let mut extra = Vec::new();
    if events.unavailable_columns {
        extra.push(Field::new(
            "unavailable_columns",
            Schema::of(
                SchemaType::Array(Box::new(Schema::of(SchemaType::String, false))),
                true,
            ),
        ));
    }
    RenderedSchemas::render(&rel.topic, columns, key, source_schema(), extra)
}

/// Debezium's `column.propagate.source.type` parameters: the declared type's name in upper case,
/// its length and scale as the JDBC driver reports them (column size, decimal digits).
fn propagate_source_type(info: &ColumnCatalog, schema: &mut Schema) {
    let (length, scale) = jdbc_length_scale(info.base_oid, info.base_modifier);
    schema.parameters.extend([
        (
            "__debezium.source.column.type".to_owned(),
            info.declared_type_name.to_uppercase(),
        ),
        (
            "__debezium.source.column.length".to_owned(),
            length.to_string(),
        ),
        (
            "__debezium.source.column.scale".to_owned(),
            scale.to_string(),
        ),
    ]);
}

/// The JDBC driver's (pgjdbc `TypeInfoCache`) column size and decimal digits of a type with a
/// modifier, which Debezium takes as the column's length and scale: the precision, or the
/// display size where the precision is 0; `i32::MAX` for unbounded lengths.
fn jdbc_length_scale(type_oid: u32, modifier: i32) -> (i32, i32) {
    const UNKNOWN_LENGTH: i32 = i32::MAX;
    let unset = modifier == -1;
    // Fractional second digits of the temporal types' display size.
    let second_size = match modifier {
        -1 => 7,
        0 => 0,
        n => n + 1,
    };
    let length = match type_oid {
        21 => 5,
        23 | 26 => 10,
        20 => 19,
        700 => 8,
        701 => 17,
        // numeric: its precision, or the display size of an unconstrained one.
        1700 if unset => 131_089,
        1700 => ((modifier - 4) >> 16) & 0xffff,
        16 | 18 => 1,
        1042 | 1043 if unset => UNKNOWN_LENGTH,
        1042 | 1043 => modifier - 4,
        1082 => 13,
        1083 => 8 + second_size,
        1266 => 14 + second_size,
        1114 => 22 + second_size,
        1184 => 28 + second_size,
        1186 => 49,
        1560 => modifier,
        1562 if unset => UNKNOWN_LENGTH,
        1562 => modifier,
        _ => UNKNOWN_LENGTH,
    };
    let scale = match type_oid {
        700 => 8,
        701 => 17,
        1700 if unset => 0,
        1700 => (modifier - 4) & 0xffff,
        1083 | 1266 | 1114 | 1184 if unset => 6,
        1083 | 1266 | 1114 | 1184 => modifier,
        1186 if unset => 6,
        1186 => modifier & 0xffff,
        _ => 0,
    };
    (length, scale)
}

/// The element type of the array types the value writer maps element by element.
fn array_element_oid(type_oid: u32) -> u32 {
    match type_oid {
        1000 => 16,
        1005 => 21,
        1007 => 23,
        1016 => 20,
        1028 => 26,
        1021 => 700,
        1022 => 701,
        1231 => 1700,
        1009 => 25,
        1015 => 1043,
        1014 => 1042,
        2951 => 2950,
        1002 => 18,
        1041 => 869,
        651 => 650,
        1040 => 829,
        775 => 774,
        199 => 114,
        3807 => 3802,
        1001 => 17,
        1182 => 1082,
        1183 => 1083,
        1270 => 1266,
        1115 => 1114,
        1185 => 1184,
        1187 => 1186,
        _ => 0,
    }
}

/// A column's schema: Debezium's for the kind its values are written as.
fn column_schema(
    column: &ColumnInfo,
    info: Option<&ColumnCatalog>,
    optional: bool,
    events: &EventOptions,
) -> Schema {
    if matches!(
        column.treatment,
        ColumnTreatment::Mask | ColumnTreatment::Hash
    ) {
        return Schema::of(SchemaType::String, optional);
    }
    let (oid, modifier) = info.map_or((column.type_oid, column.type_modifier), |c| {
        (c.base_oid, c.base_modifier)
    });
    let mut schema = match value::column_kind(oid, modifier, events) {
        ColumnKind::Array(kind) => {
            let element = scalar_schema(kind, array_element_oid(oid), modifier, None, true, events);
            Schema::of(SchemaType::Array(Box::new(element)), optional)
        }
        ColumnKind::Scalar(_) if info.is_some_and(|c| c.element_type_type == Some('e')) => {
            // An array of an enum: Debezium's elements are required Enums.
            let labels = info.map(|c| c.enum_labels.as_slice()).unwrap_or_default();
            Schema::of(
                SchemaType::Array(Box::new(Schema::enumeration(labels, false))),
                optional,
            )
        }
        ColumnKind::Scalar(kind) => scalar_schema(kind, oid, modifier, info, optional, events),
    };
    if let Some(default) = info.and_then(|c| c.default.as_deref()) {
        schema.default = default_value(&schema.schema_type, schema.name.as_deref(), default);
    }
    schema
}

/// The schema of a scalar value of a kind (`type_oid`: the type, for the integer widths and
/// the logical names of text-like types).
fn scalar_schema(
    kind: Kind,
    type_oid: u32,
    modifier: i32,
    info: Option<&ColumnCatalog>,
    optional: bool,
    events: &EventOptions,
) -> Schema {
    let plain = |t| Schema::of(t, optional);
    let precision = u32::try_from(modifier).ok();
    let time_mode = events.time_precision_mode;
    let logical = |t, name| Schema::logical(t, name, optional);
    match kind {
        Kind::Bool => plain(SchemaType::Boolean),
        Kind::Integer => plain(match type_oid {
            21 => SchemaType::Int16,
            23 => SchemaType::Int32,
            _ => SchemaType::Int64,
        }),
        Kind::Float4 => plain(SchemaType::Float32),
        Kind::Float => plain(SchemaType::Float64),
        Kind::Bit if modifier == 1 => plain(SchemaType::Boolean),
        Kind::Bit | Kind::VarBit => {
            let schema = logical(SchemaType::Bytes, "io.debezium.data.Bits");
            if modifier > 0 {
                schema.parameter("length", modifier.to_string())
            } else {
                schema
            }
        }
        Kind::Numeric | Kind::Money(_) => plain(SchemaType::String),
        Kind::NumericDouble | Kind::MoneyDouble => plain(SchemaType::Float64),
        Kind::NumericPrecise if modifier < 4 => Schema::variable_scale_decimal(optional),
        Kind::NumericPrecise => {
            let packed = modifier - 4;
            Schema::decimal(packed & 0xffff, Some(packed >> 16), optional)
        }
        Kind::MoneyPrecise(digits) => Schema::decimal(i32::from(digits), None, optional),
        Kind::Bytea(mode) if mode.is_string() => plain(SchemaType::String),
        Kind::Bytea(_) => plain(SchemaType::Bytes),
        Kind::Json => logical(SchemaType::String, "io.debezium.data.Json"),
        Kind::Date => logical(SchemaType::Int32, time_mode.date_schema_name()),
        Kind::Time(unit) => logical(
            match unit {
                TemporalUnit::Millis => SchemaType::Int32,
                TemporalUnit::Micros => SchemaType::Int64,
            },
            time_mode.time_schema_name(precision),
        ),
        Kind::TimeTz => logical(SchemaType::String, "io.debezium.time.ZonedTime"),
        Kind::Point => Schema::point(optional),
        // Debezium declares a box optional even when the column is NOT NULL.
        Kind::Box => Schema::geometry(true),
        // Only an array's elements (enum arrays): the array's schema names the labels.
        Kind::EnumText => plain(SchemaType::String),
        Kind::Timestamp(_) => logical(
            SchemaType::Int64,
            time_mode.timestamp_schema_name(precision),
        ),
        Kind::TimestampTz => logical(SchemaType::String, "io.debezium.time.ZonedTimestamp"),
        Kind::Interval(IntervalHandlingMode::Numeric) => {
            logical(SchemaType::Int64, "io.debezium.time.MicroDuration")
        }
        Kind::Interval(IntervalHandlingMode::String) => {
            logical(SchemaType::String, "io.debezium.time.Interval")
        }
        Kind::Text => match (type_oid, info) {
            // json, jsonb written as Debezium's string (not embedded).
            (114 | 3802, _) => logical(SchemaType::String, "io.debezium.data.Json"),
            (142, _) => logical(SchemaType::String, "io.debezium.data.Xml"),
            (2950, _) => logical(SchemaType::String, "io.debezium.data.Uuid"),
            (3614, _) => logical(SchemaType::String, "io.debezium.data.Tsvector"),
            (600, _) => Schema::point(optional),
            (603, _) => Schema::geometry(optional),
            (_, Some(c)) if c.type_type == 'e' => Schema::enumeration(&c.enum_labels, optional),
            (_, Some(c)) if c.type_name == "ltree" => {
                logical(SchemaType::String, "io.debezium.data.Ltree")
            }
            (_, Some(c)) if c.type_name == "hstore" => match events.hstore_handling_mode {
                HstoreHandlingMode::Json => logical(SchemaType::String, "io.debezium.data.Json"),
                HstoreHandlingMode::Map => plain(SchemaType::Map(
                    Box::new(Schema::of(SchemaType::String, false)),
                    Box::new(Schema::of(SchemaType::String, true)),
                )),
            },
            _ => plain(SchemaType::String),
        },
    }
}

/// A column default as Debezium declares it: the constant of a literal default expression of
/// a plain type (`7`, `'x'::text`, `true`); `None` for expressions (`nextval(…)`, `now()`) and
/// logical types.
fn default_value(schema_type: &SchemaType, name: Option<&str>, expression: &str) -> Option<String> {
    let logical = name.is_some();
    let literal = expression.trim();
    let literal = literal
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .unwrap_or(literal);
    // `'…'::type` → the quoted text.
    let quoted = literal.strip_prefix('\'').and_then(|rest| {
        let end = rest
            .rfind("'::")
            .or_else(|| rest.strip_suffix('\'').map(str::len))?;
        let text = &rest[..end];
        (!text.replace("''", "").contains('\'')).then(|| text.replace("''", "'"))
    });
    let bare = quoted.as_deref().unwrap_or(literal);
    match schema_type {
        SchemaType::Int16 | SchemaType::Int32 | SchemaType::Int64 if !logical => {
            bare.parse::<i64>().ok().map(|n| n.to_string())
        }
        SchemaType::Float32 | SchemaType::Float64 if !logical => bare
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(|f| serde_json::to_string(&f).unwrap_or_default()),
        SchemaType::Boolean => match bare {
            "true" => Some("true".into()),
            "false" => Some("false".into()),
            _ => None,
        },
        SchemaType::String if !logical || name == Some("io.debezium.data.Enum") => {
            quoted.map(|text| {
                let mut out = Vec::new();
                crate::event::write_json_str(&mut out, &text);
                String::from_utf8(out).unwrap_or_default()
            })
        }
        _ => None,
    }
}

/// The schema steps of a relation: they need the catalog and the renderer, which the relation
/// model (relation.rs) does not know.
impl RelationInfo {
    /// Renders the relation's schemas when its events need them (JSON with schemas, Avro) and,
    /// for Avro, registers them (one registration per schema and process: the registry
    /// client caches ids). `catalog` is [`column_catalog`]'s answer.
    ///
    /// # Errors
    ///
    /// What the schema registry refused (e.g. a change its compatibility rule forbids), or a
    /// name Avro does not allow: the pipeline stops with the fix.
    pub async fn prepare_schemas(
        &mut self,
        catalog: &[ColumnCatalog],
        events: &EventOptions,
        registry: Option<&crate::registry::Registry>,
    ) -> Result<(), crate::error::PipelineError> {
        let mut schemas = render(self, catalog, events);
        schemas.registered =
            crate::registry::register_schemas(registry, &self.topic, &schemas, events, &self.name)
                .await?;
        self.set_schemas(schemas);
        Ok(())
    }

    /// Marks the columns the catalog says are `NOT NULL` (`catalog`: the relation's columns,
    /// by name).
    pub fn mark_not_null(&mut self, catalog: &[ColumnCatalog]) {
        for column in &mut self.columns {
            column.not_null = catalog.iter().any(|c| c.describes(column) && c.not_null);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use serde_json::{Value, json};

    use super::super::encode::{
        ChangeKind, EncodeOptions, RowChange, SourceIdentity, encode_change,
    };
    use super::super::pgoutput::{Datum, ReplicaIdentity, TupleData};
    use super::*;
    use crate::event::DecimalHandlingMode;
    use crate::runtime::metrics::TableMetrics;

    /// `numeric(10,4)`'s type modifier.
    const NUMERIC_10_4: i32 = ((10 << 16) | 4) + 4;

    fn relation(events: &EventOptions) -> RelationInfo {
        let mut rel = RelationInfo::new(
            &SourceIdentity {
                server_name: "app".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "prices",
            vec![
                ("id".into(), 23, -1),
                ("amount".into(), 1700, NUMERIC_10_4),
                ("note".into(), 25, -1),
            ],
            &["id".to_owned()],
            ReplicaIdentity::Default,
            Arc::new(TableMetrics::new("public.prices")),
        );
        let catalog = vec![
            ColumnCatalog {
                name: "amount".into(),
                not_null: true,
                base_oid: 1700,
                base_modifier: NUMERIC_10_4,
                type_name: "numeric".into(),
                type_type: 'b',
                ..ColumnCatalog::default()
            },
            ColumnCatalog {
                name: "note".into(),
                default: Some("'n/a'::text".into()),
                base_oid: 25,
                base_modifier: -1,
                type_name: "text".into(),
                type_type: 'b',
                ..ColumnCatalog::default()
            },
        ];
        let rendered = render(&rel, &catalog, events);
        rel.set_schemas(rendered);
        rel
    }

    fn encode(events: EventOptions) -> (Value, Value) {
        let change = RowChange {
            relation: Arc::new(relation(&events)),
            kind: ChangeKind::Insert {
                new: TupleData(vec![
                    Datum::Text(Bytes::from_static(b"1")),
                    Datum::Text(Bytes::from_static(b"12.5000")),
                    Datum::Null,
                ]),
            },
            commit_lsn: sluice_engine::Lsn(2),
            lsn: sluice_engine::Lsn(1),
            tx_index: 0,
            xid: 7,
            commit_unix_micros: 1_000_000,
            size_hint: 1,
            transaction: None,
            last_commit_end: None,
        };
        let mut out = Vec::new();
        let options = EncodeOptions {
            tombstones: true,
            events,
            now_unix_nanos: 5_000_000,
        };
        encode_change(&change, &options, &mut out);
        let parse = |b: &Option<Vec<u8>>| serde_json::from_slice(b.as_ref().unwrap()).unwrap();
        (parse(&out[0].key), parse(&out[0].value))
    }

    #[test]
    fn schemas_wrap_the_same_payload_and_follow_the_decimal_mode() {
        let off = EventOptions::default();
        let on = EventOptions {
            schemas_enable: true,
            ..off.clone()
        };
        let (plain_key, plain_value) = encode(off);
        let (key, value) = encode(on.clone());
        assert_eq!(key["payload"], plain_key);
        assert_eq!(value["payload"], plain_value);
        assert_eq!(
            key["schema"],
            json!({"type": "struct", "fields": [{"type": "int32", "optional": false, "field": "id"}],
                   "optional": false, "name": "app.public.prices.Key"})
        );
        let after = &value["schema"]["fields"][1];
        assert_eq!(after["name"], "app.public.prices.Value");
        assert_eq!(
            after["fields"],
            json!([
                {"type": "int32", "optional": false, "field": "id"},
                {"type": "bytes", "optional": false, "name": "org.apache.kafka.connect.data.Decimal",
                 "version": 1, "parameters": {"scale": "4", "connect.decimal.precision": "10"},
                 "field": "amount"},
                {"type": "string", "optional": true, "default": "n/a", "field": "note"}
            ])
        );
        assert_eq!(value["schema"]["name"], "app.public.prices.Envelope");
        let string = EventOptions {
            decimal_handling_mode: DecimalHandlingMode::String,
            ..on
        };
        let (_, value) = encode(string);
        assert_eq!(
            value["schema"]["fields"][1]["fields"][1],
            json!({"type": "string", "optional": false, "field": "amount"})
        );
        assert_eq!(value["payload"]["after"]["amount"], "12.5000");
    }

    /// A catalog read that disagrees with the Relation message on a column's type (the type
    /// changed after the changes being decoded) does not shape that column's schema: its type,
    /// `NOT NULL` and default come from the Relation message alone; an agreeing entry still
    /// gives them.
    #[test]
    fn a_catalog_type_the_relation_message_disagrees_with_is_not_used() {
        let events = EventOptions {
            schemas_enable: true,
            ..EventOptions::default()
        };
        let mut rel = relation(&events);
        let entry = |type_oid: u32| ColumnCatalog {
            name: "note".into(),
            not_null: true,
            default: Some("7".into()),
            base_oid: type_oid,
            base_modifier: -1,
            type_name: "int4".into(),
            type_type: 'b',
            type_oid: Some(type_oid),
            ..ColumnCatalog::default()
        };
        let note = |rendered: &RenderedSchemas| {
            let SchemaType::Struct(fields) = &rendered.envelope.schema_type else {
                panic!("an envelope is a struct")
            };
            let after = &fields.iter().find(|f| f.name == "after").unwrap().schema;
            let SchemaType::Struct(columns) = &after.schema_type else {
                panic!("a row is a struct")
            };
            columns
                .iter()
                .find(|f| f.name == "note")
                .unwrap()
                .schema
                .clone()
        };
        // The Relation message says text (25); the catalog, read later, says int4.
        let later = vec![entry(23)];
        rel.mark_not_null(&later);
        let schema = note(&render(&rel, &later, &events));
        assert_eq!(schema.schema_type, SchemaType::String);
        assert!(schema.optional && schema.default.is_none(), "{schema:?}");
        // An entry of the same type as the Relation message's is used.
        let mut agreeing = entry(25);
        agreeing.default = Some("'n/a'::text".into());
        rel.mark_not_null(std::slice::from_ref(&agreeing));
        let schema = note(&render(&rel, &[agreeing], &events));
        assert_eq!(schema.schema_type, SchemaType::String);
        assert!(!schema.optional && schema.default.is_some(), "{schema:?}");
    }

    #[test]
    fn defaults_are_literal_constants_only() {
        assert_eq!(
            default_value(&SchemaType::Int32, None, "7").as_deref(),
            Some("7")
        );
        assert_eq!(
            default_value(&SchemaType::Int32, None, "'-5'::integer").as_deref(),
            Some("-5")
        );
        assert_eq!(
            default_value(&SchemaType::Int32, None, "nextval('t_id_seq'::regclass)"),
            None
        );
        assert_eq!(
            default_value(&SchemaType::String, None, "'it''s'::text").as_deref(),
            Some("\"it's\"")
        );
        assert_eq!(
            default_value(
                &SchemaType::String,
                Some("io.debezium.time.ZonedTimestamp"),
                "'now'::text"
            ),
            None
        );
        assert_eq!(
            default_value(&SchemaType::Boolean, None, "true").as_deref(),
            Some("true")
        );
    }

    /// The registered text of `subject`'s first version in an Avro capture
    /// (`tests/debezium/avro/<combination>/schemas.json`), parsed.
    fn captured(combination: &str, subject: &str) -> Value {
        let path = format!(
            "{}/tests/debezium/avro/{combination}/schemas.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let schemas: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let entry = schemas
            .as_object()
            .unwrap()
            .values()
            .find(|e| {
                e["subjects"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|s| s == &json!(format!("{subject} v1")))
            })
            .unwrap_or_else(|| panic!("{path}: no {subject}"));
        serde_json::from_str(entry["text"].as_str().unwrap()).unwrap()
    }

    fn avro(schema: &Schema) -> Value {
        serde_json::from_str(&crate::event::avro::schema_text(schema).unwrap()).unwrap()
    }

    #[test]
    fn message_schemas_are_debeziums() {
        let schemas = message_topic_schemas(&EventOptions::default());
        assert_eq!(
            avro(schemas.key.as_ref().unwrap()),
            captured("message", "dbzcap.message-key")
        );
        assert_eq!(
            avro(&schemas.envelope),
            captured("message", "dbzcap.message-value")
        );
    }

    #[test]
    fn outbox_schemas_are_the_event_routers() {
        let events = EventOptions::default();
        let varchar = |name: &str, not_null| ColumnCatalog {
            name: name.into(),
            not_null,
            base_oid: 1043,
            base_modifier: 259,
            type_name: "varchar".into(),
            type_type: 'b',
            ..ColumnCatalog::default()
        };
        let catalog = vec![
            ColumnCatalog {
                name: "id".into(),
                not_null: true,
                base_oid: 2950,
                base_modifier: -1,
                type_name: "uuid".into(),
                type_type: 'b',
                ..ColumnCatalog::default()
            },
            varchar("aggregatetype", true),
            varchar("aggregateid", true),
            varchar("type", true),
            ColumnCatalog {
                name: "payload".into(),
                base_oid: 3802,
                base_modifier: -1,
                type_name: "jsonb".into(),
                type_type: 'b',
                ..ColumnCatalog::default()
            },
        ];
        let rel = RelationInfo::new(
            &SourceIdentity {
                server_name: "dbzcap".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "outbox",
            catalog
                .iter()
                .map(|c| (c.name.clone(), c.base_oid, c.base_modifier))
                .collect(),
            &["id".to_owned()],
            ReplicaIdentity::Default,
            Arc::new(TableMetrics::new("public.outbox")),
        );
        let config: super::super::config::OutboxConfig =
            toml::from_str("table = \"public.outbox\"").unwrap();
        let mut layout =
            super::super::outbox::OutboxLayout::resolve(&rel.columns, &config).unwrap();
        let mut schemas = outbox_schemas(&rel, &catalog, &events, &layout);
        assert_eq!(
            avro(schemas.key.as_ref().unwrap()),
            captured("outbox", "dbzcap.outbox.order-key")
        );
        assert_eq!(
            avro(&schemas.envelope),
            captured("outbox", "dbzcap.outbox.order-value")
        );
        // The bytes of the capture's records, under its ids (39, 40): an event and a NULL
        // payload's tombstone.
        let events = EventOptions {
            format: Some(crate::event::EventFormat::Avro),
            ..EventOptions::default()
        };
        layout.schemas = Some(schemas.clone());
        schemas.registered = Some(crate::event::schema::RegisteredIds {
            key: Some(39),
            value: 40,
        });
        layout.set_registered("outbox.event.order", schemas);
        let path = format!(
            "{}/tests/debezium/avro/outbox/dbzcap.outbox.order.jsonl",
            env!("CARGO_MANIFEST_DIR")
        );
        let golden: Vec<Value> = std::fs::read_to_string(&path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let hex = |bytes: Option<Vec<u8>>| {
            bytes.map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
        };
        let text = |t: &str| Datum::Text(Bytes::from(t.to_owned()));
        for captured in [&golden[0], &golden[2]] {
            let payload = match &captured["value"] {
                Value::String(p) => text(p),
                _ => Datum::Null,
            };
            let row = TupleData(vec![
                text("00000000-0000-0000-0000-000000000001"),
                text("order"),
                text(captured["key"].as_str().unwrap()),
                text("OrderCreated"),
                payload,
            ]);
            let record = layout
                .encode(
                    &row,
                    Vec::new(),
                    ("public.outbox", &rel.columns, &events, true),
                )
                .unwrap();
            assert_eq!(&*record.topic, "outbox.event.order");
            assert_eq!(hex(record.key).as_deref(), captured["key_hex"].as_str());
            assert_eq!(hex(record.value).as_deref(), captured["value_hex"].as_str());
            assert_eq!(record.headers.len(), 2, "id and type as headers");
        }
    }
}

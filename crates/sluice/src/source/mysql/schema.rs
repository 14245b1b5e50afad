//! The Connect schemas of a MySQL/MariaDB table's events (`kafka.events.format =
//! "json_with_schemas"` or `"avro"`), as Debezium's MySQL connector declares them.
//!
//! A column's schema follows the kind the value writer uses for it ([`Kind`], so an option such
//! as `decimal_handling_mode` changes both together); what the binlog's TABLE_MAP and a
//! snapshot's result set do not say (an integer's declared width, NOT NULL, the default, a
//! DECIMAL's precision, ENUM/SET labels in a snapshot) comes from `information_schema.COLUMNS`,
//! read once per table definition ([`column_catalog`]) when the table's first row is read. The
//! schemas are rendered once per table definition ([`render`]) and spliced before (JSON) or
//! used to encode (Avro) every payload.
//!
//! `information_schema` describes the table as it is when it is read: when sluice reads the
//! binlog behind a later `ALTER TABLE`, columns are matched by name and a column it no longer
//! names gets the binlog's type, optional and without a default (Debezium parses the DDL of
//! the binlog instead).

use mysql_async::Conn;
use mysql_async::prelude::Queryable;

use super::encode::{Kind, TableInfo};
use super::server::{Flavor, sql_error};
use crate::error::PipelineError;
use crate::event::options::BinaryHandlingMode;
use crate::event::schema::{Field, RenderedSchemas, Schema, SchemaType, source_common_fields};
use crate::event::{DecimalHandlingMode, EventOptions};

/// What `information_schema.COLUMNS` says about a column.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ColumnCatalog {
    /// The column name.
    pub name: String,
    /// `DATA_TYPE`, lowercase (`int`, `decimal`, `enum`, …; MariaDB's JSON is `json`).
    pub data_type: String,
    /// `COLUMN_TYPE` (`int unsigned`, `enum('a','b')`, `bit(10)`).
    pub column_type: String,
    /// `IS_NULLABLE`.
    pub nullable: bool,
    /// The default value as text (MariaDB's SQL literal unquoted); `None`: no default, or NULL.
    pub default: Option<String>,
    /// `NUMERIC_PRECISION` (a DECIMAL's digits).
    pub precision: Option<u64>,
}

impl ColumnCatalog {
    fn unsigned(&self) -> bool {
        self.column_type.to_ascii_lowercase().contains("unsigned")
    }

    /// An ENUM's or SET's labels, unquoted, in definition order.
    fn labels(&self) -> Vec<String> {
        let Some(inner) = self
            .column_type
            .split_once('(')
            .map(|(_, rest)| rest.strip_suffix(')').unwrap_or(rest))
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut current = String::new();
        let mut quoted = false;
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' if quoted && chars.peek() == Some(&'\'') => {
                    current.push('\'');
                    chars.next();
                }
                '\'' => quoted = !quoted,
                ',' if !quoted => out.push(std::mem::take(&mut current)),
                _ => current.push(c),
            }
        }
        out.push(current);
        out
    }

    /// The first number in `COLUMN_TYPE`'s parentheses (`bit(10)` → 10).
    fn length(&self) -> Option<u64> {
        let inner = self.column_type.split_once('(')?.1.split_once(')')?.0;
        inner.split(',').next()?.trim().parse().ok()
    }
}

/// A column default as `information_schema` shows it, as its value's text: MariaDB writes an
/// SQL expression (`'text'`, `NULL`, `5`), MySQL the value itself.
pub fn default_text(flavor: Flavor, default: Option<&str>) -> Option<String> {
    match (flavor, default) {
        (_, None) => None,
        (Flavor::Mariadb, Some("NULL")) => None,
        (Flavor::Mariadb, Some(v)) if v.len() >= 2 && v.starts_with('\'') && v.ends_with('\'') => {
            Some(v[1..v.len() - 1].replace("''", "'"))
        }
        (_, Some(v)) => Some(v.to_owned()),
    }
}

/// The columns of `database.table` as `information_schema` describes them now (empty: no such
/// table, e.g. dropped since).
///
/// # Errors
///
/// Retryable when a query fails.
pub async fn column_catalog(
    conn: &mut Conn,
    flavor: Flavor,
    database: &str,
    table: &str,
) -> Result<Vec<ColumnCatalog>, PipelineError> {
    let fail = || sql_error("cannot read a table's columns from information_schema");
    type Row = (String, String, String, String, Option<String>, Option<u64>);
    let rows: Vec<Row> = conn
        .exec(
            "SELECT COLUMN_NAME, DATA_TYPE, COLUMN_TYPE, IS_NULLABLE, COLUMN_DEFAULT, \
             NUMERIC_PRECISION FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
            (database, table),
        )
        .await
        .map_err(fail())?;
    let json = JsonChecks::read(conn, flavor, database, table)
        .await
        .map_err(fail())?;
    Ok(rows
        .into_iter()
        .map(
            |(name, data_type, column_type, nullable, default, precision)| {
                let mut data_type = data_type.to_ascii_lowercase();
                if json.is_json(&name, &data_type) {
                    data_type = "json".to_owned();
                }
                ColumnCatalog {
                    name,
                    data_type,
                    column_type,
                    nullable: nullable.eq_ignore_ascii_case("YES"),
                    default: default_text(flavor, default.as_deref()),
                    precision,
                }
            },
        )
        .collect())
}

/// `io.debezium.connector.mysql.Source`.
pub fn source_schema() -> Schema {
    let mut fields = source_common_fields();
    let string = |optional| Schema::of(SchemaType::String, optional);
    let int64 = |optional| Schema::of(SchemaType::Int64, optional);
    fields.extend([
        Field::new("table", string(true)),
        Field::new("server_id", int64(false)),
        Field::new("gtid", string(true)),
        Field::new("file", string(false)),
        Field::new("pos", int64(false)),
        Field::new("row", Schema::of(SchemaType::Int32, false)),
        Field::new("thread", int64(true)),
        Field::new("query", string(true)),
    ]);
    Schema::of(SchemaType::Struct(fields), false)
        .named("io.debezium.connector.mysql.Source", Some(1))
}

/// The schema-change topic's key and value schemas (`io.debezium.connector.mysql.
/// SchemaChangeKey` / `SchemaChangeValue`, with `tableChanges[]` of
/// `io.debezium.connector.schema.Change`), as Debezium's MySQL connector declares them.
pub fn schema_change_schemas() -> RenderedSchemas {
    let string = |optional| Schema::of(SchemaType::String, optional);
    let int32 = |optional| Schema::of(SchemaType::Int32, optional);
    let boolean = || Schema::of(SchemaType::Boolean, true);
    let strings = || Schema::of(SchemaType::Array(Box::new(string(false))), true);
    let key = Schema::of(
        SchemaType::Struct(vec![Field::new("databaseName", string(false))]),
        false,
    )
    .named("io.debezium.connector.mysql.SchemaChangeKey", Some(1));
    let column = Schema::of(
        SchemaType::Struct(vec![
            Field::new("name", string(false)),
            Field::new("jdbcType", int32(false)),
            Field::new("nativeType", int32(true)),
            Field::new("typeName", string(false)),
            Field::new("typeExpression", string(true)),
            Field::new("charsetName", string(true)),
            Field::new("length", int32(true)),
            Field::new("scale", int32(true)),
            Field::new("position", int32(false)),
            Field::new("optional", boolean()),
            Field::new("autoIncremented", boolean()),
            Field::new("generated", boolean()),
            Field::new("comment", string(true)),
            Field::new("defaultValueExpression", string(true)),
            Field::new("enumValues", strings()),
        ]),
        false,
    )
    .named("io.debezium.connector.schema.Column", Some(1));
    let table = Schema::of(
        SchemaType::Struct(vec![
            Field::new("defaultCharsetName", string(true)),
            Field::new("primaryKeyColumnNames", strings()),
            Field::new(
                "columns",
                Schema::of(SchemaType::Array(Box::new(column)), false),
            ),
            Field::new("comment", string(true)),
        ]),
        true,
    )
    .named("io.debezium.connector.schema.Table", Some(1));
    let change = Schema::of(
        SchemaType::Struct(vec![
            Field::new("type", string(false)),
            Field::new("id", string(false)),
            Field::new("table", table),
        ]),
        false,
    )
    .named("io.debezium.connector.schema.Change", Some(1));
    let value = Schema::of(
        SchemaType::Struct(vec![
            Field::new("source", source_schema()),
            Field::new("ts_ms", Schema::of(SchemaType::Int64, false)),
            Field::new("databaseName", string(true)),
            Field::new("schemaName", string(true)),
            Field::new("ddl", string(true)),
            Field::new(
                "tableChanges",
                Schema::of(SchemaType::Array(Box::new(change)), false),
            ),
        ]),
        false,
    )
    .named("io.debezium.connector.mysql.SchemaChangeValue", Some(1));
    RenderedSchemas::of(Some(key), value)
}

/// The schema-change topic's schemas when its records need them (JSON with schemas, Avro),
/// for Avro registered under `topic`'s subjects.
///
/// # Errors
///
/// What the schema registry refused.
pub async fn prepare_schema_change_schemas(
    topic: &str,
    events: &EventOptions,
    registry: Option<&crate::registry::Registry>,
) -> Result<Option<std::sync::Arc<RenderedSchemas>>, PipelineError> {
    if !events.needs_schemas() {
        return Ok(None);
    }
    let mut schemas = schema_change_schemas();
    schemas.registered =
        crate::registry::register_schemas(registry, topic, &schemas, events, topic).await?;
    Ok(Some(std::sync::Arc::new(schemas)))
}

/// A schema-change record (bare JSON from [`super::ddl`]) in the events' formats.
pub fn wrap_schema_change(
    schemas: Option<&RenderedSchemas>,
    events: &EventOptions,
    record: crate::kafka::OutRecord,
) -> crate::kafka::OutRecord {
    match schemas {
        Some(schemas) => schemas.wrap_record(events, record),
        None => record,
    }
}

/// Renders a table's key and envelope schemas; `catalog` is [`column_catalog`]'s answer.
pub fn render(
    table: &TableInfo,
    catalog: &[ColumnCatalog],
    events: &EventOptions,
) -> RenderedSchemas {
    let field = |index: usize| {
        let column = &table.columns[index];
        let info = catalog.iter().find(|c| c.name == column.name);
        let is_key = table.key_columns.contains(&index);
        Field::new(
            column.name.clone(),
            column_schema(column.kind, &column.labels, info, is_key, events),
        )
    };
    let columns = (0..table.columns.len()).map(field).collect();
    let key = (!table.key_columns.is_empty())
        .then(|| table.key_columns.iter().map(|&i| field(i)).collect());
    RenderedSchemas::render(&table.topic, columns, key, source_schema(), Vec::new())
}

/// Debezium MySQL's `io.debezium.data.geometry.Geometry` (version 1: no `extensions`).
fn geometry() -> Schema {
    let mut schema = Schema::logical(
        SchemaType::Struct(vec![
            Field::new("wkb", Schema::of(SchemaType::Bytes, false)),
            Field::new("srid", Schema::of(SchemaType::Int32, true)),
        ]),
        "io.debezium.data.geometry.Geometry",
        // Optional even for a NOT NULL column, as Debezium declares it (the capture shows it).
        true,
    );
    schema.doc = Some("Geometry".into());
    schema
}

/// A column's schema: the writer's kind, `information_schema`'s details when it has the column.
fn column_schema(
    kind: Kind,
    labels: &[String],
    info: Option<&ColumnCatalog>,
    is_key: bool,
    events: &EventOptions,
) -> Schema {
    let optional = !is_key && info.is_none_or(|c| c.nullable);
    let data_type = info.map_or("", |c| c.data_type.as_str());
    let of = |t| Schema::of(t, optional);
    let logical = |t, name: &str| Schema::logical(t, name, optional);
    let labelled = |name: &str| {
        let labels = match info {
            Some(c) if labels.is_empty() => c.labels(),
            _ => labels.to_vec(),
        };
        logical(SchemaType::String, name).parameter("allowed", labels.join(","))
    };
    let mut schema = match kind {
        // A snapshot reads ENUM and SET as text: the catalog tells.
        Kind::Enum => labelled("io.debezium.data.Enum"),
        Kind::Set => labelled("io.debezium.data.EnumSet"),
        Kind::Text if data_type == "enum" => labelled("io.debezium.data.Enum"),
        Kind::Text if data_type == "set" => labelled("io.debezium.data.EnumSet"),
        // MariaDB's JSON: LONGTEXT with a `json_valid` check, text in the binlog.
        Kind::Text if data_type == "json" => logical(SchemaType::String, "io.debezium.data.Json"),
        Kind::Integer | Kind::Int24 => {
            let unsigned = info.is_some_and(ColumnCatalog::unsigned);
            of(match (data_type, unsigned) {
                ("tinyint", _) | ("smallint", false) => SchemaType::Int16,
                ("smallint", true) | ("mediumint", _) | ("int" | "integer", false) => {
                    SchemaType::Int32
                }
                _ => SchemaType::Int64,
            })
        }
        Kind::Year => logical(SchemaType::Int32, "io.debezium.time.Year"),
        Kind::Float if data_type == "float" => of(SchemaType::Float32),
        Kind::Float => of(SchemaType::Float64),
        Kind::Decimal { scale } => match events.decimal_handling_mode {
            DecimalHandlingMode::Precise => Schema::decimal(
                i32::from(scale),
                info.and_then(|c| c.precision)
                    .and_then(|p| i32::try_from(p).ok()),
                optional,
            ),
            DecimalHandlingMode::String => of(SchemaType::String),
            DecimalHandlingMode::Double => of(SchemaType::Float64),
        },
        Kind::Text | Kind::Latin1 => of(SchemaType::String),
        Kind::Bytes | Kind::Binary { .. } => match events.binary_handling_mode {
            BinaryHandlingMode::Bytes => of(SchemaType::Bytes),
            _ => of(SchemaType::String),
        },
        Kind::Json => logical(SchemaType::String, "io.debezium.data.Json"),
        Kind::Date => logical(SchemaType::Int32, "io.debezium.time.Date"),
        Kind::DateTime { fsp } if fsp <= 3 => {
            logical(SchemaType::Int64, "io.debezium.time.Timestamp")
        }
        Kind::DateTime { .. } => logical(SchemaType::Int64, "io.debezium.time.MicroTimestamp"),
        Kind::Timestamp { .. } => logical(SchemaType::String, "io.debezium.time.ZonedTimestamp"),
        Kind::Time => logical(SchemaType::Int64, "io.debezium.time.MicroTime"),
        Kind::Bool => of(SchemaType::Boolean),
        Kind::Bits { bytes } => {
            let length = info
                .and_then(ColumnCatalog::length)
                .unwrap_or(bytes as u64 * 8);
            logical(SchemaType::Bytes, "io.debezium.data.Bits")
                .parameter("length", length.to_string())
        }
        Kind::Geometry => geometry(),
        Kind::Point => Schema::point(optional),
    };
    schema.default = info.and_then(|c| default_json(kind, c, events));
    schema
}

/// A column default as Debezium writes it in the schema (the value converted as a row's
/// would be), for the kinds whose text `information_schema` gives plainly: numbers, strings,
/// ENUM/SET, BIT(1), DECIMAL. Other defaults (temporal, binary, JSON, spatial, expressions)
/// are left out of the schema (a difference with Debezium, see docs/avro.md).
fn default_json(kind: Kind, info: &ColumnCatalog, events: &EventOptions) -> Option<String> {
    let text = info.default.as_deref()?;
    let mut out = Vec::new();
    match kind {
        Kind::Integer | Kind::Int24 | Kind::Year => {
            if let Ok(n) = text.parse::<i64>() {
                crate::event::write_int(&mut out, n);
            } else {
                // BIGINT UNSIGNED above 2^63-1: wrapped, as Debezium's `long` mode.
                crate::event::write_int(&mut out, text.parse::<u64>().ok()? as i64);
            }
        }
        Kind::Float => {
            let value: f64 = text.parse().ok()?;
            if !value.is_finite() {
                return None;
            }
            serde_json::to_writer(&mut out, &value).ok()?;
        }
        Kind::Text | Kind::Latin1 | Kind::Enum | Kind::Set => {
            crate::event::write_json_str(&mut out, text);
        }
        Kind::Bool => {
            let on = matches!(text, "b'1'" | "1" | "b'01'");
            out.extend_from_slice(if on { b"true" } else { b"false" });
        }
        Kind::Decimal { scale } => {
            super::encode::write_decimal(text, scale, events.decimal_handling_mode, &mut out)
                .ok()?;
        }
        _ => return None,
    }
    String::from_utf8(out).ok()
}

impl TableInfo {
    /// Renders the table's schemas when its events need them (JSON with schemas, Avro) and,
    /// for Avro, registers them (the registry client caches ids: one registration per schema
    /// and process). `catalog` is [`column_catalog`]'s answer.
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
    ) -> Result<(), PipelineError> {
        if !events.needs_schemas() {
            return Ok(());
        }
        let mut schemas = render(self, catalog, events);
        let name = format!("{}.{}", self.database, self.table);
        schemas.registered =
            crate::registry::register_schemas(registry, &self.topic, &schemas, events, &name)
                .await?;
        self.schemas = Some(schemas);
        Ok(())
    }
}

/// MariaDB's JSON columns: its JSON is LONGTEXT with a `json_valid(<column>)` check, and
/// information_schema says `longtext`. Empty on MySQL, whose JSON is a type of its own.
pub(super) struct JsonChecks(Vec<String>);

impl JsonChecks {
    /// The table's check clauses (MariaDB only).
    pub(super) async fn read(
        conn: &mut Conn,
        flavor: Flavor,
        database: &str,
        table: &str,
    ) -> Result<Self, mysql_async::Error> {
        if flavor != Flavor::Mariadb {
            return Ok(Self(Vec::new()));
        }
        conn.exec(
            "SELECT CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS \
             WHERE CONSTRAINT_SCHEMA = ? AND TABLE_NAME = ?",
            (database, table),
        )
        .await
        .map(Self)
    }

    /// Whether the column `name` of information_schema type `data_type` holds JSON.
    pub(super) fn is_json(&self, name: &str, data_type: &str) -> bool {
        data_type.eq_ignore_ascii_case("longtext")
            && self.0.contains(&format!(
                "json_valid({})",
                crate::sql::quote_mysql_ident(name)
            ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog(data_type: &str, column_type: &str, nullable: bool) -> ColumnCatalog {
        ColumnCatalog {
            name: "c".into(),
            data_type: data_type.into(),
            column_type: column_type.into(),
            nullable,
            default: None,
            precision: None,
        }
    }

    fn json(schema: &Schema) -> String {
        String::from_utf8(schema.to_json()).unwrap()
    }

    #[test]
    fn integers_take_debeziums_widths() {
        let events = EventOptions::default();
        let width = |data_type: &str, column_type: &str| {
            let info = catalog(data_type, column_type, true);
            column_schema(Kind::Integer, &[], Some(&info), false, &events).schema_type
        };
        assert_eq!(width("tinyint", "tinyint unsigned"), SchemaType::Int16);
        assert_eq!(width("smallint", "smallint"), SchemaType::Int16);
        assert_eq!(width("smallint", "smallint unsigned"), SchemaType::Int32);
        assert_eq!(width("mediumint", "mediumint unsigned"), SchemaType::Int32);
        assert_eq!(width("int", "int"), SchemaType::Int32);
        assert_eq!(width("int", "int unsigned"), SchemaType::Int64);
        assert_eq!(width("bigint", "bigint unsigned"), SchemaType::Int64);
    }

    #[test]
    fn enums_defaults_and_decimals_follow_the_catalog_and_the_options() {
        let events = EventOptions::default();
        let mut info = catalog("enum", "enum('a','it''s')", false);
        info.default = Some("a".into());
        assert_eq!(
            json(&column_schema(Kind::Text, &[], Some(&info), false, &events)),
            "{\"type\":\"string\",\"optional\":false,\"name\":\"io.debezium.data.Enum\",\
             \"version\":1,\"parameters\":{\"allowed\":\"a,it's\"},\"default\":\"a\"}"
        );
        let mut info = catalog("decimal", "decimal(10,2)", true);
        info.precision = Some(10);
        info.default = Some("1.5".into());
        let decimal = Kind::Decimal { scale: 2 };
        assert_eq!(
            json(&column_schema(decimal, &[], Some(&info), false, &events)),
            "{\"type\":\"bytes\",\"optional\":true,\"name\":\"org.apache.kafka.connect.data.\
             Decimal\",\"version\":1,\"parameters\":{\"scale\":\"2\",\"connect.decimal.\
             precision\":\"10\"},\"default\":\"AJY=\"}"
        );
        let string = EventOptions {
            decimal_handling_mode: DecimalHandlingMode::String,
            ..EventOptions::default()
        };
        assert_eq!(
            json(&column_schema(decimal, &[], Some(&info), false, &string)),
            "{\"type\":\"string\",\"optional\":true,\"default\":\"1.50\"}"
        );
        // A key column is required whatever the catalog says; a geometry is optional.
        let info = catalog("int", "int", true);
        assert!(!column_schema(Kind::Integer, &[], Some(&info), true, &events).optional);
        let info = catalog("linestring", "linestring", false);
        assert!(column_schema(Kind::Geometry, &[], Some(&info), false, &events).optional);
        assert_eq!(
            default_text(Flavor::Mariadb, Some("'it''s'")),
            Some("it's".into())
        );
        assert_eq!(default_text(Flavor::Mariadb, Some("NULL")), None);
    }
}

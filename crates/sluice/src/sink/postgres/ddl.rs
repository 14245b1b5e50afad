//! `auto_create` and `auto_evolve`: target tables and columns from the events.
//!
//! A column's type comes from the field's Connect schema when the events carry schemas
//! (`schemas_enable`), as the Debezium JDBC sink maps them; without schemas only the JSON
//! value's kind is known (a number, a string, …), so the types are coarse (`bigint`, `double
//! precision`, `text`, `boolean`, `jsonb`) — create the tables yourself, or produce events with
//! schemas, when the exact types matter. Columns are added, never dropped or narrowed; an added
//! column is always nullable (the rows already in the table have no value for it).

use serde_json::Value;

use super::config::{TableName, quote_ident};
use super::decode::ConnectSchema;

/// The PostgreSQL type of a field with Connect schema `schema`.
pub fn type_from_schema(schema: &ConnectSchema) -> String {
    let decimal = || match (
        schema.int_parameter("connect.decimal.precision"),
        schema.int_parameter("scale"),
    ) {
        (Some(precision), Some(scale)) if precision >= scale && precision > 0 => {
            format!("numeric({precision},{scale})")
        }
        _ => "numeric".to_owned(),
    };
    let named = match schema.name.as_deref() {
        Some("io.debezium.time.Date" | "org.apache.kafka.connect.data.Date") => Some("date".into()),
        Some("io.debezium.time.Timestamp" | "org.apache.kafka.connect.data.Timestamp") => {
            Some("timestamp(3)".into())
        }
        Some("io.debezium.time.MicroTimestamp" | "io.debezium.time.NanoTimestamp") => {
            Some("timestamp".into())
        }
        Some("io.debezium.time.ZonedTimestamp") => Some("timestamptz".into()),
        Some("io.debezium.time.Time" | "org.apache.kafka.connect.data.Time") => {
            Some("time(3)".into())
        }
        Some("io.debezium.time.MicroTime" | "io.debezium.time.NanoTime") => Some("time".into()),
        Some("io.debezium.time.ZonedTime") => Some("timetz".into()),
        Some("org.apache.kafka.connect.data.Decimal") => Some(decimal()),
        Some("io.debezium.data.VariableScaleDecimal") => Some("numeric".into()),
        Some("io.debezium.data.Json") => Some("jsonb".into()),
        Some("io.debezium.data.Uuid") => Some("uuid".into()),
        Some("io.debezium.data.Xml") => Some("xml".into()),
        Some("io.debezium.time.MicroDuration") => Some("interval".into()),
        Some("io.debezium.data.geometry.Point") => Some("point".into()),
        _ => None,
    };
    if let Some(named) = named {
        return named;
    }
    match schema.kind.as_str() {
        "int8" | "int16" => "smallint".into(),
        "int32" => "integer".into(),
        "int64" => "bigint".into(),
        "float32" => "real".into(),
        "float64" => "double precision".into(),
        "boolean" => "boolean".into(),
        "bytes" => "bytea".into(),
        "array" => match schema.items.as_deref().map(type_from_schema) {
            Some(item) if !item.ends_with("[]") && item != "jsonb" => format!("{item}[]"),
            _ => "jsonb".into(),
        },
        "map" | "struct" => "jsonb".into(),
        _ => "text".into(),
    }
}

/// The PostgreSQL type of a field known only by a JSON value.
pub fn type_from_value(value: &Value) -> &'static str {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => "bigint",
        Value::Number(_) => "double precision",
        Value::Bool(_) => "boolean",
        Value::Object(_) | Value::Array(_) => "jsonb",
        Value::String(_) | Value::Null => "text",
    }
}

/// A column to create or add.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewColumn {
    /// Its name.
    pub name: String,
    /// Its SQL type.
    pub sql_type: String,
    /// `NOT NULL` (only when the table is created).
    pub not_null: bool,
}

/// The columns of `row` (a JSON object's text) with their types: from `schema`'s fields where
/// it has them, else from the values.
pub fn columns_of(
    row: &str,
    schema: Option<&ConnectSchema>,
    key: &[String],
) -> Result<Vec<NewColumn>, String> {
    let object: serde_json::Map<String, Value> =
        serde_json::from_str(row).map_err(|e| format!("the row is not a JSON object: {e}"))?;
    let mut columns = Vec::with_capacity(object.len());
    // Schema order (the source table's column order) when there is one.
    if let Some(schema) = schema {
        for field in &schema.fields {
            columns.push(NewColumn {
                name: field.field.clone(),
                sql_type: type_from_schema(&field.schema),
                not_null: !field.schema.optional || key.contains(&field.field),
            });
        }
    }
    for (name, value) in &object {
        if columns.iter().any(|c| &c.name == name) {
            continue;
        }
        columns.push(NewColumn {
            name: name.clone(),
            sql_type: type_from_value(value).to_owned(),
            not_null: key.contains(name),
        });
    }
    Ok(columns)
}

/// `CREATE TABLE IF NOT EXISTS` of `table` with `columns` and the primary key `key` (and its
/// schema when missing).
pub fn create_table(table: &TableName, columns: &[NewColumn], key: &[String]) -> String {
    let mut sql = String::new();
    if let Some(schema) = &table.schema {
        sql.push_str(&format!(
            "CREATE SCHEMA IF NOT EXISTS {};\n",
            quote_ident(schema)
        ));
    }
    let definitions: Vec<String> = columns
        .iter()
        .map(|c| {
            format!(
                "{} {}{}",
                quote_ident(&c.name),
                c.sql_type,
                if c.not_null { " NOT NULL" } else { "" }
            )
        })
        .collect();
    let key: Vec<String> = key.iter().map(|k| quote_ident(k)).collect();
    sql.push_str(&format!(
        "CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({}))",
        table.quoted(),
        definitions.join(", "),
        key.join(", ")
    ));
    sql
}

/// `ALTER TABLE … ADD COLUMN IF NOT EXISTS` for `columns` (always nullable).
pub fn add_columns(table: &TableName, columns: &[NewColumn]) -> String {
    let additions: Vec<String> = columns
        .iter()
        .map(|c| {
            format!(
                "ADD COLUMN IF NOT EXISTS {} {}",
                quote_ident(&c.name),
                c.sql_type
            )
        })
        .collect();
    format!("ALTER TABLE {} {}", table.quoted(), additions.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema(value: Value) -> ConnectSchema {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn types_follow_the_schema_or_the_value() {
        let cases = [
            (json!({"type": "int16"}), "smallint"),
            (json!({"type": "int32"}), "integer"),
            (json!({"type": "int64"}), "bigint"),
            (json!({"type": "float64"}), "double precision"),
            (json!({"type": "string"}), "text"),
            (json!({"type": "bytes"}), "bytea"),
            (
                json!({"type": "int32", "name": "io.debezium.time.Date"}),
                "date",
            ),
            (
                json!({"type": "int64", "name": "io.debezium.time.MicroTimestamp"}),
                "timestamp",
            ),
            (
                json!({"type": "string", "name": "io.debezium.time.ZonedTimestamp"}),
                "timestamptz",
            ),
            (
                json!({"type": "bytes", "name": "org.apache.kafka.connect.data.Decimal",
                       "parameters": {"scale": "2", "connect.decimal.precision": "10"}}),
                "numeric(10,2)",
            ),
            (
                json!({"type": "string", "name": "io.debezium.data.Json"}),
                "jsonb",
            ),
            (
                json!({"type": "string", "name": "io.debezium.data.Uuid"}),
                "uuid",
            ),
            (
                json!({"type": "array", "items": {"type": "int32"}}),
                "integer[]",
            ),
        ];
        for (field, expected) in cases {
            assert_eq!(
                type_from_schema(&schema(field.clone())),
                expected,
                "{field}"
            );
        }
        assert_eq!(type_from_value(&json!(1)), "bigint");
        assert_eq!(type_from_value(&json!(1.5)), "double precision");
        assert_eq!(type_from_value(&json!({"a": 1})), "jsonb");
    }

    #[test]
    fn tables_and_columns_are_created_as_the_events_say() {
        let table = TableName {
            schema: Some("app".into()),
            name: "orders".into(),
        };
        let after = schema(json!({"type": "struct", "fields": [
            {"field": "id", "type": "int64", "optional": false},
            {"field": "note", "type": "string", "optional": true}
        ]}));
        let columns = columns_of(
            r#"{"id":1,"note":null,"extra":true}"#,
            Some(&after),
            &["id".to_owned()],
        )
        .unwrap();
        assert_eq!(
            create_table(&table, &columns, &["id".to_owned()]),
            "CREATE SCHEMA IF NOT EXISTS \"app\";\nCREATE TABLE IF NOT EXISTS \"app\".\"orders\" (\"id\" bigint NOT NULL, \"note\" text, \"extra\" boolean, PRIMARY KEY (\"id\"))"
        );
        assert_eq!(
            add_columns(&table, &columns[1..]),
            "ALTER TABLE \"app\".\"orders\" ADD COLUMN IF NOT EXISTS \"note\" text, ADD COLUMN IF NOT EXISTS \"extra\" boolean"
        );
    }
}

//! Connect schemas → the Iceberg sink's table schemas: `append` and `upsert` tables, and
//! `auto_evolve`'s additions. A field's column type and its values' conversion are shared with
//! the files sink's typed Parquet ([`crate::sink::typed::cells`]).

use std::sync::Arc;

use iceberg::spec::{NestedField, PrimitiveType, Schema, Type};

use crate::sink::postgres::decode::ConnectSchema;
use crate::sink::typed::cells::iceberg_type;

/// The columns sluice adds to an `append` table after the row's: the event's operation, its
/// timestamps, the source position and where in Kafka it was.
pub const OP_COLUMN: &str = "_op";
/// The event's `ts_ms` (when sluice or Debezium processed it).
pub const EVENT_TS_COLUMN: &str = "_event_ts";
/// The source's `ts_ms` (when the change was committed in the source database).
pub const SOURCE_TS_COLUMN: &str = "_source_ts";
/// The source position: PostgreSQL's `lsn`, MySQL's `file:pos`.
pub const SOURCE_POSITION_COLUMN: &str = "_source_position";
/// The Kafka partition of the record.
pub const KAFKA_PARTITION_COLUMN: &str = "_kafka_partition";
/// The Kafka offset of the record.
pub const KAFKA_OFFSET_COLUMN: &str = "_kafka_offset";

/// The schema of a new `append` table: the row's fields (all optional: a delete's `before`
/// may hold only the key), then sluice's columns.
///
/// # Errors
///
/// A row field named like one of sluice's columns.
pub fn append_schema(row: &ConnectSchema) -> Result<Schema, String> {
    let mut fields = Vec::with_capacity(row.fields.len() + 6);
    let mut id = 0;
    let mut next = || {
        id += 1;
        id
    };
    for field in &row.fields {
        if field.field.starts_with('_') && metadata_columns().any(|c| c == field.field) {
            return Err(format!(
                "the row has a column {:?}, a name sluice's append columns use",
                field.field
            ));
        }
        fields.push(Arc::new(NestedField::optional(
            next(),
            &field.field,
            iceberg_type(&field.schema),
        )));
    }
    let string = || Type::Primitive(PrimitiveType::String);
    let tstz = || Type::Primitive(PrimitiveType::Timestamptz);
    fields.push(Arc::new(NestedField::optional(next(), OP_COLUMN, string())));
    fields.push(Arc::new(NestedField::optional(
        next(),
        EVENT_TS_COLUMN,
        tstz(),
    )));
    fields.push(Arc::new(NestedField::optional(
        next(),
        SOURCE_TS_COLUMN,
        tstz(),
    )));
    fields.push(Arc::new(NestedField::optional(
        next(),
        SOURCE_POSITION_COLUMN,
        string(),
    )));
    fields.push(Arc::new(NestedField::required(
        next(),
        KAFKA_PARTITION_COLUMN,
        Type::Primitive(PrimitiveType::Int),
    )));
    fields.push(Arc::new(NestedField::required(
        next(),
        KAFKA_OFFSET_COLUMN,
        Type::Primitive(PrimitiveType::Long),
    )));
    Schema::builder()
        .with_fields(fields)
        .build()
        .map_err(|e| format!("cannot make the table's schema: {e}"))
}

/// The schema of a new `upsert` table: the row's fields, the record key's (`key`) required and
/// the table's identifier fields, the others optional.
///
/// # Errors
///
/// A key field the row lacks, or one whose type cannot be an identifier field.
pub fn upsert_schema(row: &ConnectSchema, key: &[String]) -> Result<Schema, String> {
    if key.is_empty() {
        return Err(
            "upsert makes a table's identifier fields from the record key, and this record's key has no fields (expected a JSON object of the key columns)".into(),
        );
    }
    let mut fields = Vec::with_capacity(row.fields.len());
    let mut identifiers = Vec::with_capacity(key.len());
    for (id, field) in (1..).zip(&row.fields) {
        let ty = iceberg_type(&field.schema);
        if key.contains(&field.field) {
            if matches!(
                ty,
                Type::Primitive(PrimitiveType::Float | PrimitiveType::Double)
            ) {
                return Err(format!(
                    "key column {:?} is a floating-point number, which Iceberg does not allow as an identifier field",
                    field.field
                ));
            }
            identifiers.push(id);
            fields.push(Arc::new(NestedField::required(id, &field.field, ty)));
        } else {
            fields.push(Arc::new(NestedField::optional(id, &field.field, ty)));
        }
    }
    if let Some(missing) = key
        .iter()
        .find(|k| !row.fields.iter().any(|f| &f.field == *k))
    {
        return Err(format!(
            "the record key has a field {missing:?} that the row lacks: expected the key's fields to be columns of the row"
        ));
    }
    Schema::builder()
        .with_fields(fields)
        .with_identifier_field_ids(identifiers)
        .build()
        .map_err(|e| format!("cannot make the table's schema: {e}"))
}

/// The Connect schema of a row that has none (plain JSON), inferred from its values by the
/// rules of the files sink's inferred Parquet (docs/kafka-to-iceberg.md, "Events without
/// schemas"): a string → `string`, an integer that fits 64 bits → `int64` (`long`), another
/// number → `float64` (`double`), a boolean → `boolean`, an object or an array → `string` (its
/// JSON text). Fields whose value is null have nothing to type them by and are left out (a
/// later event's value adds them with `auto_evolve`), as are those `wanted` refuses.
pub fn inferred_row_schema(
    row: &serde_json::Map<String, serde_json::Value>,
    wanted: impl Fn(&str) -> bool,
) -> ConnectSchema {
    use crate::sink::postgres::decode::ConnectField;
    use serde_json::Value;
    let fields = row
        .iter()
        .filter(|(name, _)| wanted(name))
        .filter_map(|(name, value)| {
            let kind = match value {
                Value::Null => return None,
                Value::Bool(_) => "boolean",
                Value::Number(n) if n.is_i64() => "int64",
                Value::Number(_) => "float64",
                Value::String(_) | Value::Array(_) | Value::Object(_) => "string",
            };
            Some(ConnectField {
                field: name.clone(),
                schema: ConnectSchema {
                    kind: kind.to_owned(),
                    optional: true,
                    name: None,
                    parameters: None,
                    fields: Vec::new(),
                    items: None,
                },
            })
        })
        .collect();
    ConnectSchema {
        kind: "struct".to_owned(),
        optional: true,
        name: None,
        parameters: None,
        fields,
        items: None,
    }
}

/// `auto_evolve`: `table`'s schema with what `row` has that it lacks — a new optional column
/// (after the table's, with new field ids) for each field it lacks, and a column widened
/// where the row's type is the spec's allowed promotion of the table's (`int` to `long`,
/// `float` to `double`, a decimal to a larger precision of the same scale; not an identifier
/// field, whose values the upsert key index holds in their type). Never drops,
/// narrows or retypes otherwise (a value that does not fit its column fails its record as
/// before). `None` when the table has all of it.
///
/// # Errors
///
/// A new field named like one of sluice's append columns; a schema the crate refuses.
pub fn evolved_schema(table: &Schema, row: &ConnectSchema) -> Result<Option<Schema>, String> {
    let mut fields: Vec<_> = table.as_struct().fields().to_vec();
    let mut next_id = table.highest_field_id();
    let mut changed = false;
    for field in &row.fields {
        let wanted = iceberg_type(&field.schema);
        match fields.iter_mut().find(|f| f.name == field.field) {
            // Identifier fields keep their types: the upsert key index encodes keys by them.
            Some(existing) if table.identifier_field_ids().any(|id| id == existing.id) => {}
            Some(existing) => {
                let widened = match (existing.field_type.as_ref(), &wanted) {
                    (Type::Primitive(PrimitiveType::Int), Type::Primitive(PrimitiveType::Long))
                    | (
                        Type::Primitive(PrimitiveType::Float),
                        Type::Primitive(PrimitiveType::Double),
                    ) => true,
                    (
                        Type::Primitive(PrimitiveType::Decimal {
                            precision: had,
                            scale: s1,
                        }),
                        Type::Primitive(PrimitiveType::Decimal {
                            precision: wants,
                            scale: s2,
                        }),
                    ) => s1 == s2 && wants > had,
                    _ => false,
                };
                if widened {
                    let mut new = existing.as_ref().clone();
                    new.field_type = Box::new(wanted);
                    *existing = Arc::new(new);
                    changed = true;
                }
            }
            None => {
                if metadata_columns().any(|c| c == field.field) {
                    return Err(format!(
                        "the row has a new column {:?}, a name sluice's append columns use",
                        field.field
                    ));
                }
                next_id += 1;
                fields.push(Arc::new(NestedField::optional(
                    next_id,
                    &field.field,
                    wanted,
                )));
                changed = true;
            }
        }
    }
    if !changed {
        return Ok(None);
    }
    Schema::builder()
        .with_schema_id(table.schema_id() + 1)
        .with_fields(fields)
        .with_identifier_field_ids(table.identifier_field_ids())
        .build()
        .map(Some)
        .map_err(|e| format!("cannot make the table's evolved schema: {e}"))
}

fn metadata_columns() -> impl Iterator<Item = &'static str> {
    [
        OP_COLUMN,
        EVENT_TS_COLUMN,
        SOURCE_TS_COLUMN,
        SOURCE_POSITION_COLUMN,
        KAFKA_PARTITION_COLUMN,
        KAFKA_OFFSET_COLUMN,
    ]
    .into_iter()
}

/// Whether `name` is one of sluice's append columns.
pub fn is_metadata_column(name: &str) -> bool {
    metadata_columns().any(|c| c == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::postgres::decode::ConnectField;
    use crate::sink::typed::cells::test_field as field;

    fn row_of(fields: &[(&str, &str)]) -> ConnectSchema {
        let mut row = field("struct", None, &[]);
        row.fields = fields
            .iter()
            .map(|(name, kind)| ConnectField {
                field: (*name).to_owned(),
                schema: field(kind, None, &[]),
            })
            .collect();
        row
    }

    /// `auto_evolve`: new fields become optional columns after the table's, with new ids;
    /// `int` widens to `long` (not in a key column); nothing is dropped (a column the row lacks stays), narrowed or
    /// retyped; the identifier fields stay; a row the table already covers changes nothing.
    #[test]
    fn evolution_adds_optional_columns_and_widens_only() {
        let table = upsert_schema(
            &row_of(&[
                ("id", "int32"),
                ("n", "int32"),
                ("x", "float64"),
                ("gone", "string"),
            ]),
            &["id".to_owned()],
        )
        .unwrap();
        let row = row_of(&[
            ("id", "int64"),
            ("n", "int64"),
            ("x", "float32"),
            ("note", "string"),
            ("flag", "boolean"),
        ]);
        let evolved = evolved_schema(&table, &row).unwrap().unwrap();
        let columns: Vec<(i32, &str, String, bool)> = evolved
            .as_struct()
            .fields()
            .iter()
            .map(|f| (f.id, f.name.as_str(), f.field_type.to_string(), f.required))
            .collect();
        assert_eq!(
            columns,
            [
                (1, "id", "int".to_owned(), true),
                (2, "n", "long".to_owned(), false),
                (3, "x", "double".to_owned(), false),
                (4, "gone", "string".to_owned(), false),
                (5, "note", "string".to_owned(), false),
                (6, "flag", "boolean".to_owned(), false),
            ]
        );
        assert_eq!(evolved.identifier_field_ids().collect::<Vec<_>>(), [1]);
        assert_eq!(evolved.schema_id(), table.schema_id() + 1);
        assert!(evolved_schema(&evolved, &row).unwrap().is_none());
        assert!(
            evolved_schema(&table, &row_of(&[("id", "int64"), ("n", "int32")]))
                .unwrap()
                .is_none()
        );
        let append = append_schema(&row_of(&[("id", "int64")])).unwrap();
        assert!(
            evolved_schema(&append, &row_of(&[("_op", "int32")]))
                .unwrap()
                .is_none()
        );
    }
}

//! Debezium's `ExtractNewRecordState` ("unwrap"): a change event's `after` row as the value,
//! deletes and tombstones handled per `delete.tombstone.handling.mode`, Debezium's metadata
//! added as fields (`add.fields`) and headers (`add.headers`). Follows Debezium 3.x's
//! `ExtractNewRecordState` and `DefaultDeleteHandlingStrategy`.

use std::borrow::Cow;

use super::json::{Data, Members, ObjectWriter, Schema, header_text, string};
use super::record::Record;
use super::schema;

/// The prefix of added fields and headers by default (`add.fields.prefix`,
/// `add.headers.prefix`).
pub const DEFAULT_PREFIX: &str = "__";

/// `delete.tombstone.handling.mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteMode {
    /// Deletes and tombstones dropped.
    Drop,
    /// A delete becomes a null value (with the row's schema); tombstones dropped (the default).
    Tombstone,
    /// A delete becomes its `before` row with `__deleted: "true"` (`"false"` on the others);
    /// tombstones dropped.
    Rewrite,
    /// As `Rewrite`, tombstones kept.
    RewriteWithTombstone,
    /// A delete becomes a tombstone (null value, no schema); tombstones dropped.
    DeleteToTombstone,
}

impl DeleteMode {
    /// The modes by Debezium's names.
    pub const NAMES: [(&'static str, DeleteMode); 5] = [
        ("drop", DeleteMode::Drop),
        ("tombstone", DeleteMode::Tombstone),
        ("rewrite", DeleteMode::Rewrite),
        ("rewrite-with-tombstone", DeleteMode::RewriteWithTombstone),
        ("delete-to-tombstone", DeleteMode::DeleteToTombstone),
    ];

    fn rewrites(self) -> bool {
        matches!(self, DeleteMode::Rewrite | DeleteMode::RewriteWithTombstone)
    }
}

/// A field of the change event named in `add.fields` / `add.headers`: `field`,
/// `struct.field`, either optionally `:new_name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRef {
    /// The struct holding it (`None`: the envelope itself).
    parent: Option<String>,
    /// The field.
    field: String,
    /// The added field's or header's name.
    new_name: String,
}

impl FieldRef {
    /// Parses one entry of the list as Debezium's `FieldReference` does.
    ///
    /// # Errors
    ///
    /// More than one `:`.
    pub fn parse(prefix: &str, entry: &str) -> Result<Self, String> {
        let parts: Vec<&str> = entry.split(':').collect();
        if parts.len() > 2 {
            return Err(format!(
                "{entry:?}: expected field, struct.field, or either followed by :new_name"
            ));
        }
        let splits: Vec<&str> = parts[0].split('.').collect();
        let field = if splits.len() == 1 {
            splits[0]
        } else {
            splits[1]
        };
        let parent = if splits.len() == 1 {
            match field {
                "id" | "total_order" | "data_collection_order" => Some("transaction".to_owned()),
                "op" | "ts_ms" | "ts_us" | "ts_ns" => None,
                "updateDescription" => Some("updateDescription".to_owned()),
                _ => Some("source".to_owned()),
            }
        } else {
            Some(splits[0].to_owned())
        };
        let new_name = match parts.get(1) {
            Some(name) => format!("{prefix}{name}"),
            None if splits.len() == 1 => format!("{prefix}{field}"),
            None => format!("{prefix}{}_{field}", splits[0]),
        };
        Ok(Self {
            parent,
            field: field.to_owned(),
            new_name,
        })
    }

    /// The field's value (JSON text) in `envelope`, `None` when the event has no such field;
    /// `Some("null")` when it has one holding null.
    fn value<'a>(&self, envelope: &Members<'a>) -> Option<Cow<'a, str>> {
        if let Some(parent) = &self.parent
            && let Some(holder) = envelope.get(parent)
        {
            if holder.get() == "null" {
                // Debezium's schema has the field; the struct is absent (e.g. `transaction`
                // while the transaction metadata is off).
                return Some(Cow::Borrowed("null"));
            }
            if let Ok(members) = Members::parse(holder.get())
                && let Some(value) = members.get(&self.field)
            {
                return Some(Cow::Owned(value.get().to_owned()));
            }
        }
        // A field another transform added to the event itself.
        envelope.get(&self.field).map(|v| Cow::Borrowed(v.get()))
    }

    /// The field's schema in the envelope's schema, as the added field
    /// (`copySchemaBasics(…).optional()`).
    fn schema(&self, envelope_schema: &str) -> Option<String> {
        let found = self
            .parent
            .as_deref()
            .and_then(|parent| schema::field(envelope_schema, parent))
            .and_then(|holder| schema::field(&holder, &self.field))
            .or_else(|| schema::field(envelope_schema, &self.field))?;
        Some(schema::optional_field(&found, &self.new_name))
    }
}

/// `ExtractNewRecordState`.
#[derive(Debug)]
pub struct Unwrap {
    /// `delete.tombstone.handling.mode`.
    pub mode: DeleteMode,
    /// `add.fields`.
    pub add_fields: Vec<FieldRef>,
    /// `add.headers`.
    pub add_headers: Vec<FieldRef>,
}

impl Unwrap {
    /// Applies the transform; `Ok(None)` drops the record.
    pub fn apply(&self, mut record: Record) -> Result<Option<Record>, String> {
        let Some(text) = record.value.value.take() else {
            if !self.add_headers.is_empty() {
                for field in self.add_headers.iter().filter(|f| f.field == "op") {
                    record
                        .headers
                        .push((Cow::Owned(field.new_name.clone()), "d".to_owned()));
                }
            }
            return Ok((self.mode == DeleteMode::RewriteWithTombstone).then_some(record));
        };
        let envelope = Members::parse(&text)?;
        if !is_envelope(&envelope, &record.value.schema) {
            record.value.value = Some(text.clone());
            return Ok(Some(record));
        }
        for field in &self.add_headers {
            if let Some(value) = field.value(&envelope) {
                // A null header value cannot be written through sluice's text headers: left
                // out (docs/transforms.md).
                if let Some(text) = header_text(&value) {
                    record
                        .headers
                        .push((Cow::Owned(field.new_name.clone()), text));
                }
            }
        }
        let envelope_schema = match &record.value.schema {
            Schema::Json(text) => Some(text.clone()),
            _ => None,
        };
        let row_schema = |name: &str| -> Schema {
            match &envelope_schema {
                Some(s) => schema::field(s, name)
                    .map_or(Schema::Opaque, |f| Schema::Json(schema::extracted(&f))),
                None => Schema::Opaque,
            }
        };
        let after = envelope.get("after").filter(|v| v.get() != "null");
        let before = envelope.get("before").filter(|v| v.get() != "null");
        let (row, row_schema, deleted) = match (after, before) {
            // A truncate (Debezium drops it).
            (None, None) => return Ok(None),
            (None, Some(before)) => match self.mode {
                DeleteMode::Drop => return Ok(None),
                DeleteMode::Tombstone => {
                    record.value = Data::null_with(row_schema("after"));
                    return Ok(Some(record));
                }
                DeleteMode::DeleteToTombstone => {
                    record.value = Data::null_with(Schema::None);
                    return Ok(Some(record));
                }
                DeleteMode::Rewrite | DeleteMode::RewriteWithTombstone => {
                    (before, row_schema("before"), Some("true"))
                }
            },
            (Some(after), _) => (
                after,
                row_schema("after"),
                self.mode.rewrites().then_some("false"),
            ),
        };
        if deleted.is_none() && self.add_fields.is_empty() {
            // Debezium rebuilds the row's schema as a required struct (`copySchemaBasics`):
            // the envelope's `after` field is optional, the unwrapped row is not.
            let schema = match row_schema {
                Schema::Json(s) => Schema::Json(schema::copied_struct(&s, &schema::fields(&s))),
                other => other,
            };
            record.value = Data {
                schema,
                value: Some(row.get().to_owned()),
            };
            return Ok(Some(record));
        }
        let row_members = Members::parse(row.get())?;
        let mut value = ObjectWriter::new();
        for (name, v) in &row_members.0 {
            value.member(name, v.get());
        }
        let mut added_schemas = Vec::new();
        if let Some(deleted) = deleted {
            value.member("__deleted", &string(deleted));
            added_schemas.push(r#"{"type":"string","optional":true,"field":"__deleted"}"#.into());
        }
        for field in &self.add_fields {
            match &envelope_schema {
                Some(s) => {
                    let Some(field_schema) = field.schema(s) else {
                        continue;
                    };
                    added_schemas.push(field_schema);
                    let v = field.value(&envelope);
                    value.member(&field.new_name, v.as_deref().unwrap_or("null"));
                }
                None => {
                    if let Some(v) = field.value(&envelope) {
                        value.member(&field.new_name, &v);
                    }
                }
            }
        }
        let schema = match row_schema {
            Schema::Json(row_schema) => {
                let mut fields = schema::fields(&row_schema);
                fields.extend(added_schemas);
                Schema::Json(schema::copied_struct(&row_schema, &fields))
            }
            other => other,
        };
        record.value = Data {
            schema,
            value: Some(value.finish()),
        };
        Ok(Some(record))
    }
}

/// Whether a value is a Debezium change event (its schema's name ends with `.Envelope`; without
/// schemas: it has `op` and `source`).
fn is_envelope(value: &Members<'_>, value_schema: &Schema) -> bool {
    match value_schema {
        Schema::Json(text) => schema::name(text).is_some_and(|n| n.ends_with(".Envelope")),
        _ => value.get("op").is_some() && value.get("source").is_some(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_references_are_named_as_debezium_names_them() {
        let r = FieldRef::parse("__", "op").unwrap();
        assert_eq!((r.parent.as_deref(), r.new_name.as_str()), (None, "__op"));
        let r = FieldRef::parse("__", "lsn").unwrap();
        assert_eq!(
            (r.parent.as_deref(), r.new_name.as_str()),
            (Some("source"), "__lsn")
        );
        let r = FieldRef::parse("__", "source.ts_ms").unwrap();
        assert_eq!(r.new_name, "__source_ts_ms");
        let r = FieldRef::parse("x_", "source.ts_ms:src").unwrap();
        assert_eq!(r.new_name, "x_src");
        let r = FieldRef::parse("__", "id").unwrap();
        assert_eq!(r.parent.as_deref(), Some("transaction"));
        assert!(FieldRef::parse("__", "a:b:c").is_err());
    }
}

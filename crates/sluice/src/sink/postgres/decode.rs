//! A Kafka record as the change it stands for: sluice's and Debezium's change events, with or
//! without schemas (`schemas.enable`), and plain JSON rows.
//!
//! - `op` `c`, `r`, `u`: upsert the row in `after`; `d` and tombstones: delete the row of the
//!   record key; `t`: truncate the table (applied when `sink.postgres.truncate = true`).
//! - A value without `op` is a plain JSON row, upserted as it is.
//! - `{"schema": …, "payload": …}` (JsonConverter with schemas) is unwrapped, key and value;
//!   the `after` field's Connect schema travels with the row so that its values are converted
//!   by their logical types ([`super::convert`]) and tables can be created from it
//!   ([`super::ddl`]).

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;

/// A Connect schema as JsonConverter writes it (the parts the sink reads).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ConnectSchema {
    /// `int8` … `int64`, `float32`, `float64`, `boolean`, `string`, `bytes`, `array`, `map`,
    /// `struct`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether the value may be null.
    #[serde(default)]
    pub optional: bool,
    /// The logical type (`io.debezium.time.Date`, `org.apache.kafka.connect.data.Decimal`, …).
    #[serde(default)]
    pub name: Option<String>,
    /// The logical type's parameters (`scale`, …).
    #[serde(default)]
    pub parameters: Option<std::collections::BTreeMap<String, String>>,
    /// A struct's fields.
    #[serde(default)]
    pub fields: Vec<ConnectField>,
    /// An array's elements.
    #[serde(default)]
    pub items: Option<Box<ConnectSchema>>,
}

/// A field of a Connect struct schema.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ConnectField {
    /// The field's (column's) name.
    pub field: String,
    /// Its schema.
    #[serde(flatten)]
    pub schema: ConnectSchema,
}

impl ConnectSchema {
    /// A parameter as an integer (`scale`, `connect.decimal.precision`).
    pub fn int_parameter(&self, name: &str) -> Option<i32> {
        self.parameters.as_ref()?.get(name)?.parse().ok()
    }

    /// The field `name` of a struct schema.
    pub fn field(&self, name: &str) -> Option<&ConnectSchema> {
        self.fields
            .iter()
            .find(|f| f.field == name)
            .map(|f| &f.schema)
    }
}

/// One change of a table, its key and row borrowed from the record.
#[derive(Debug)]
pub enum Change<'a> {
    /// Insert or update the row (JSON text of an object) of `key`.
    Upsert {
        /// The record key: a JSON object of the key columns.
        key: &'a [u8],
        /// The row.
        row: &'a str,
        /// Whether the row comes from a change event (its values in Debezium's encodings,
        /// converted before applying) rather than a plain JSON row (applied as it is).
        event: bool,
        /// The row's Connect schema (input with schemas).
        schema: Option<Arc<ConnectSchema>>,
        /// The columns the event lists as unavailable (sluice's `unavailable_columns`:
        /// unchanged TOASTed values left out of `after`).
        unavailable: Vec<String>,
    },
    /// Delete the row of `key`.
    Delete {
        /// The record key.
        key: &'a [u8],
    },
    /// Empty the table.
    Truncate,
}

impl Change<'_> {
    /// The record key (empty for a truncate).
    pub fn key(&self) -> &[u8] {
        match self {
            Self::Upsert { key, .. } | Self::Delete { key } => key,
            Self::Truncate => &[],
        }
    }
}

/// The fields of a change event the writer reads.
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow)]
    op: Option<&'a str>,
    #[serde(borrow)]
    after: Option<&'a RawValue>,
    #[serde(default)]
    unavailable_columns: Option<Vec<String>>,
    // `present`: a JSON null is `Some("null")` here (a tombstone with schemas), not `None`.
    #[serde(borrow, default, deserialize_with = "present")]
    schema: Option<&'a RawValue>,
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&RawValue>::deserialize(d).map(Some)
}

/// A value with schemas: `{"schema": …, "payload": …}`.
#[derive(Deserialize)]
struct WithSchema<'a> {
    /// Required (a key with schemas has both), not read.
    #[serde(rename = "schema")]
    _schema: serde::de::IgnoredAny,
    #[serde(borrow)]
    payload: &'a RawValue,
}

/// Remembers the last Connect schema parsed, so that a stream of records with the same schema
/// text parses it once.
#[derive(Default)]
pub struct SchemaCache {
    last: Option<(String, Option<Arc<ConnectSchema>>)>,
}

impl SchemaCache {
    /// The `after` (or, for a plain row, the whole) struct schema of the value schema `text`.
    fn row_schema(
        &mut self,
        text: &str,
        envelope: bool,
    ) -> Result<Option<Arc<ConnectSchema>>, String> {
        if text == "null" {
            return Ok(None);
        }
        if let Some((last, schema)) = &self.last
            && last == text
        {
            return Ok(schema.clone());
        }
        let schema: ConnectSchema = serde_json::from_str(text)
            .map_err(|e| format!("the value's schema is not a Connect schema: {e}"))?;
        let row = if envelope {
            schema.field("after").cloned()
        } else {
            Some(schema)
        };
        let row = row.filter(|s| s.kind == "struct").map(Arc::new);
        self.last = Some((text.to_owned(), row.clone()));
        Ok(row)
    }
}

/// The record key's JSON object of key columns (a key with schemas is unwrapped).
fn key_object(key: &[u8]) -> Result<&[u8], String> {
    let trimmed = key.trim_ascii_start();
    if !trimmed.starts_with(b"{") {
        return Err("the record key is not a JSON object of the key columns".into());
    }
    if let Ok(with) = serde_json::from_slice::<WithSchema<'_>>(trimmed) {
        let payload = with.payload.get();
        if !payload.starts_with('{') {
            return Err("the record key's payload is not a JSON object of the key columns".into());
        }
        return Ok(payload.as_bytes());
    }
    // A key that only starts like an object (`{"id":`) is no key: without this check an
    // upsert went ahead on its value's row alone.
    serde_json::from_slice::<serde::de::IgnoredAny>(trimmed)
        .map_err(|e| format!("the record key is not a JSON object of the key columns: {e}"))?;
    Ok(key)
}

/// A record as the change it stands for; `Err`: why it is none (the failure policy decides).
pub fn decode<'a>(
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    schemas: &mut SchemaCache,
) -> Result<Change<'a>, String> {
    let Some(value) = value else {
        let key = key.ok_or_else(|| {
            "the record has no key: the PostgreSQL sink applies changes by key".to_owned()
        })?;
        return Ok(Change::Delete {
            key: key_object(key)?,
        });
    };
    let text =
        std::str::from_utf8(value).map_err(|_| "the value is not UTF-8, so not JSON".to_owned())?;
    let outer: Envelope<'_> =
        serde_json::from_str(text).map_err(|e| format!("the value is not a JSON object: {e}"))?;
    // With schemas: the payload is the event (or the plain row).
    let (envelope, body, schema) = match (outer.schema, outer.payload, outer.op) {
        (Some(schema), Some(payload), None) => {
            let payload = payload.get();
            if payload == "null" {
                // JsonConverter writes a tombstone's value as a null payload.
                let key = key.ok_or_else(|| "the record has no key".to_owned())?;
                return Ok(Change::Delete {
                    key: key_object(key)?,
                });
            }
            let inner: Envelope<'_> = serde_json::from_str(payload)
                .map_err(|e| format!("the value's payload is not a JSON object: {e}"))?;
            (inner, payload, Some(schema.get()))
        }
        _ => (outer, text, None),
    };
    if envelope.op == Some("t") {
        return Ok(Change::Truncate);
    }
    let key = key.ok_or_else(|| {
        "the record has no key: the PostgreSQL sink applies changes by key".to_owned()
    })?;
    let key = key_object(key)?;
    match envelope.op {
        Some("c" | "r" | "u") => match envelope.after {
            Some(after) if after.get().starts_with('{') => Ok(Change::Upsert {
                key,
                row: after.get(),
                event: true,
                schema: match schema {
                    Some(schema) => schemas.row_schema(schema, true)?,
                    None => None,
                },
                unavailable: envelope.unavailable_columns.unwrap_or_default(),
            }),
            _ => Err("a create/read/update event without an `after` row".into()),
        },
        Some("d") => Ok(Change::Delete { key }),
        Some(other) => Err(format!(
            "an event with op {other:?}: expected c, r, u, d or t"
        )),
        None => Ok(Change::Upsert {
            key,
            row: body,
            event: false,
            schema: match schema {
                Some(schema) => schemas.row_schema(schema, false)?,
                None => None,
            },
            unavailable: Vec::new(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change<'a>(key: Option<&'a str>, value: Option<&'a str>) -> Result<Change<'a>, String> {
        decode(
            key.map(str::as_bytes),
            value.map(str::as_bytes),
            &mut SchemaCache::default(),
        )
    }

    #[test]
    fn change_events_become_upserts_deletes_and_truncates() {
        let key = Some(r#"{"id":1}"#);
        for op in ["c", "r", "u"] {
            let value =
                format!(r#"{{"before":null,"after":{{"id":1,"n":2}},"source":{{}},"op":"{op}"}}"#);
            match change(key, Some(&value)).unwrap() {
                Change::Upsert {
                    key,
                    row,
                    event,
                    schema,
                    unavailable,
                } => {
                    assert!(unavailable.is_empty());
                    assert_eq!(key, br#"{"id":1}"#);
                    assert_eq!(row, r#"{"id":1,"n":2}"#);
                    assert!(event);
                    assert!(schema.is_none());
                }
                other => panic!("{op}: {other:?}"),
            }
        }
        let delete = r#"{"before":{"id":1},"after":null,"op":"d"}"#;
        assert!(matches!(
            change(key, Some(delete)).unwrap(),
            Change::Delete { .. }
        ));
        assert!(matches!(change(key, None).unwrap(), Change::Delete { .. }));
        // Debezium's truncate events have no key.
        assert!(matches!(
            change(None, Some(r#"{"before":null,"after":null,"op":"t"}"#)).unwrap(),
            Change::Truncate
        ));
        // A plain JSON row is upserted as it is.
        match change(key, Some(r#"{"id":1,"n":3}"#)).unwrap() {
            Change::Upsert { row, event, .. } => {
                assert_eq!(row, r#"{"id":1,"n":3}"#);
                assert!(!event);
            }
            other => panic!("{other:?}"),
        }
    }

    /// Regression (hostile topics): a key that only starts like an object was taken, and its
    /// record's row upserted from the value alone.
    #[test]
    fn a_key_that_is_not_a_json_object_is_refused_naming_the_key() {
        let value = r#"{"before":null,"after":{"id":1},"source":{},"op":"c"}"#;
        for key in [r#"{"id":"#, "[1]", "42", r#""1""#, "{not json}"] {
            let error = change(Some(key), Some(value)).unwrap_err();
            assert!(
                error.contains("the record key is not a JSON object of the key columns"),
                "{key}: {error}"
            );
            let error = change(Some(key), None).unwrap_err();
            assert!(error.contains("record key"), "tombstone {key}: {error}");
        }
    }

    #[test]
    fn values_and_keys_with_schemas_are_unwrapped() {
        let key = r#"{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":false,"name":"x.Key"},"payload":{"id":7}}"#;
        let value = r#"{"schema":{"type":"struct","fields":[
            {"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"}],"optional":true,"name":"x.Value","field":"before"},
            {"type":"struct","fields":[{"type":"int64","optional":false,"field":"id"},
              {"type":"int32","optional":true,"name":"io.debezium.time.Date","version":1,"field":"d"},
              {"type":"bytes","optional":true,"name":"org.apache.kafka.connect.data.Decimal","version":1,"parameters":{"scale":"2","connect.decimal.precision":"10"},"field":"price"}],
             "optional":true,"name":"x.Value","field":"after"},
            {"type":"string","optional":false,"field":"op"}],"optional":false,"name":"x.Envelope"},
          "payload":{"before":null,"after":{"id":7,"d":19000,"price":"AeI="},"op":"c"}}"#;
        match change(Some(key), Some(value)).unwrap() {
            Change::Upsert {
                key, row, schema, ..
            } => {
                assert_eq!(key, br#"{"id":7}"#);
                assert_eq!(row, r#"{"id":7,"d":19000,"price":"AeI="}"#);
                let schema = schema.expect("the after schema");
                assert_eq!(
                    schema.field("d").unwrap().name.as_deref(),
                    Some("io.debezium.time.Date")
                );
                assert_eq!(
                    schema.field("price").unwrap().int_parameter("scale"),
                    Some(2)
                );
            }
            other => panic!("{other:?}"),
        }
        // A tombstone with schemas: a null payload.
        assert!(matches!(
            change(Some(key), Some(r#"{"schema":null,"payload":null}"#)).unwrap(),
            Change::Delete { .. }
        ));
        let delete = r#"{"schema":{"type":"struct","fields":[]},"payload":{"before":{"id":7},"after":null,"op":"d"}}"#;
        match change(Some(key), Some(delete)).unwrap() {
            Change::Delete { key } => assert_eq!(key, br#"{"id":7}"#),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn records_that_are_no_change_say_why() {
        let key = Some(r#"{"id":1}"#);
        let cases = [
            (None, Some(r#"{"op":"c","after":{"id":1}}"#), "no key"),
            (
                Some("42"),
                Some(r#"{"op":"c","after":{"id":1}}"#),
                "not a JSON object",
            ),
            (key, Some(r#"{"op":"x"}"#), "op \"x\""),
            (
                key,
                Some(r#"{"op":"u","after":null}"#),
                "without an `after`",
            ),
            (
                key,
                Some(r#"{"schema":{"type":7},"payload":{"op":"c","after":{"id":1}}}"#),
                "not a Connect schema",
            ),
            (key, Some("{oops"), "not a JSON object"),
        ];
        for (key, value, expected) in cases {
            let error = change(key, value).unwrap_err();
            assert!(error.contains(expected), "{value:?}: {error}");
        }
    }
}

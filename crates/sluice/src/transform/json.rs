//! The JSON the transforms work on: a key or a value as Connect's `JsonConverter` wrote it,
//! split into its Connect schema and its value, and objects read one level deep with their
//! members' JSON text kept as it is.
//!
//! Written over `serde_json`'s `RawValue` rather than `serde_json::Value`: a `Value` would sort
//! object members (without the crate-wide `preserve_order` feature, which would change every
//! other JSON sluice writes) and reprint numbers (`1.0E-5` from Debezium's doubles would come
//! out as `1e-5`); a transform only moves whole members, so their text is copied unchanged and
//! nothing below the level a transform touches is parsed at all.

use std::borrow::Cow;
use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_json::value::RawValue;

/// A record's key or value as Connect holds it: a schema and a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Data {
    /// Its Connect schema.
    pub schema: Schema,
    /// The value's JSON text; `None`: null.
    pub value: Option<String>,
}

/// A key's or value's Connect schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schema {
    /// None (a tombstone's value: Kafka's null).
    None,
    /// One that the converter does not write (schemas disabled): only its presence matters, a
    /// null value with a schema being written as the JSON text `null`, not as Kafka's null.
    Opaque,
    /// The schema as JsonConverter writes it (schemas enabled).
    Json(String),
}

impl Data {
    /// Reads `bytes` as written with (`schemas`) or without Connect's schema envelope.
    ///
    /// # Errors
    ///
    /// The bytes are not JSON of that form.
    pub fn read(bytes: Option<&[u8]>, schemas: bool) -> Result<Self, String> {
        let Some(bytes) = bytes else {
            return Ok(Data {
                schema: Schema::None,
                value: None,
            });
        };
        let text = std::str::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        if !schemas {
            let value = (text.trim() != "null").then(|| text.to_owned());
            return Ok(Data {
                schema: Schema::Opaque,
                value,
            });
        }
        let members = Members::parse(text)?;
        let (Some(schema), Some(payload)) = (members.get("schema"), members.get("payload")) else {
            return Err("expected {\"schema\":…,\"payload\":…}".into());
        };
        let schema = match schema.get() {
            "null" => Schema::None,
            text => Schema::Json(text.to_owned()),
        };
        let value = (payload.get() != "null").then(|| payload.get().to_owned());
        Ok(Data { schema, value })
    }

    /// The bytes to write (`None`: Kafka's null), with (`schemas`) or without the envelope.
    pub fn write(&self, schemas: bool) -> Option<Vec<u8>> {
        match (&self.schema, &self.value) {
            (Schema::None, None) => None,
            (_, value) if !schemas => Some(value.as_deref().unwrap_or("null").as_bytes().to_vec()),
            (schema, value) => {
                let schema = match schema {
                    Schema::Json(text) => text.as_str(),
                    _ => "null",
                };
                let value = value.as_deref().unwrap_or("null");
                let mut out = Vec::with_capacity(schema.len() + value.len() + 24);
                out.extend_from_slice(b"{\"schema\":");
                out.extend_from_slice(schema.as_bytes());
                out.extend_from_slice(b",\"payload\":");
                out.extend_from_slice(value.as_bytes());
                out.push(b'}');
                Some(out)
            }
        }
    }

    /// A null value with this schema kind (Connect's `newRecord(…, schema, null)`).
    pub fn null_with(schema: Schema) -> Self {
        Data {
            schema,
            value: None,
        }
    }
}

/// An object's members in their order, each member's value as its JSON text.
#[derive(Debug, Default)]
pub struct Members<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// Reads the object `text`.
    ///
    /// # Errors
    ///
    /// `text` is not a JSON object.
    pub fn parse(text: &'a str) -> Result<Self, String> {
        serde_json::from_str(text).map_err(|e| format!("expected a JSON object: {e}"))
    }

    /// The member `name`'s JSON text.
    pub fn get(&self, name: &str) -> Option<&'a RawValue> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }

    /// The object's JSON text.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push('{');
        for (n, (name, value)) in self.0.iter().enumerate() {
            if n > 0 {
                out.push(',');
            }
            push_string(&mut out, name);
            out.push(':');
            out.push_str(value.get());
        }
        out.push('}');
        out
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Members<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for MembersVisitor<'a> {
            type Value = Members<'a>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut map: M) -> Result<Self::Value, M::Error> {
                let mut members = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(name) = map.next_key::<Cow<'de, str>>()? {
                    let value: &'de RawValue = map.next_value()?;
                    members.push((name, value));
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor(std::marker::PhantomData))
    }
}

/// An object built member by member, each value given as JSON text.
#[derive(Debug, Default)]
pub struct ObjectWriter {
    out: String,
    empty: bool,
}

impl ObjectWriter {
    /// An empty object.
    pub fn new() -> Self {
        let mut out = String::with_capacity(256);
        out.push('{');
        ObjectWriter { out, empty: true }
    }

    /// Appends the member `name` with the JSON text `value`.
    pub fn member(&mut self, name: &str, value: &str) {
        if !self.empty {
            self.out.push(',');
        }
        self.empty = false;
        push_string(&mut self.out, name);
        self.out.push(':');
        self.out.push_str(value);
    }

    /// The object's JSON text.
    pub fn finish(mut self) -> String {
        self.out.push('}');
        self.out
    }
}

/// Appends `text` as a JSON string.
pub fn push_string(out: &mut String, text: &str) {
    // serde_json's escaping (the same as Connect's Jackson for the characters JSON requires).
    out.push_str(&serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into()));
}

/// `text` as a JSON string.
pub fn string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_string(&mut out, text);
    out
}

/// The text of a JSON value as a header carries it (Connect's `SimpleHeaderConverter`): a
/// string's characters, other values' JSON text; `None` for null.
pub fn header_text(value: &RawValue) -> Option<String> {
    match value.get() {
        "null" => None,
        text if text.starts_with('"') => serde_json::from_str::<String>(text).ok(),
        text => Some(text.to_owned()),
    }
}

/// A JSON string's characters (`None` when `value` is not a string).
pub fn as_str(value: &RawValue) -> Option<Cow<'_, str>> {
    let text = value.get();
    if !text.starts_with('"') {
        return None;
    }
    serde_json::from_str::<Cow<'_, str>>(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_keep_their_order_and_their_text() {
        let text = r#"{"b":1.0E-5,"a":{"x":[1, 2]},"c\"":"v"}"#;
        let members = Members::parse(text).unwrap();
        let names: Vec<&str> = members.0.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["b", "a", "c\""]);
        assert_eq!(members.get("b").unwrap().get(), "1.0E-5");
        assert_eq!(
            members.render(),
            r#"{"b":1.0E-5,"a":{"x":[1, 2]},"c\"":"v"}"#
        );
    }

    #[test]
    fn data_reads_and_writes_both_forms() {
        let plain = Data::read(Some(b"{\"a\":1}"), false).unwrap();
        assert_eq!(plain.schema, Schema::Opaque);
        assert_eq!(plain.write(false).unwrap(), b"{\"a\":1}");
        let tombstone = Data::read(None, false).unwrap();
        assert_eq!(tombstone.write(false), None);
        assert_eq!(
            Data::null_with(Schema::Opaque).write(false).unwrap(),
            b"null"
        );
        let with = Data::read(Some(br#"{"schema":{"type":"int32"},"payload":5}"#), true).unwrap();
        assert_eq!(with.schema, Schema::Json(r#"{"type":"int32"}"#.into()));
        assert_eq!(with.value.as_deref(), Some("5"));
        assert_eq!(
            with.write(true).unwrap(),
            br#"{"schema":{"type":"int32"},"payload":5}"#
        );
    }

    #[test]
    fn header_text_is_a_strings_characters() {
        let v: &RawValue = serde_json::from_str("\"a\\\"b\"").unwrap();
        assert_eq!(header_text(v).as_deref(), Some("a\"b"));
        let n: &RawValue = serde_json::from_str("12").unwrap();
        assert_eq!(header_text(n).as_deref(), Some("12"));
    }
}

//! A record as the row it holds: the row image of a change event (`after`, or `before` for
//! a delete), its operation, timestamps and source position, and the row's Connect schema
//! when the value carries one (JsonConverter with schemas). A value that is not a change event
//! (a row unwrapped upstream by `ExtractNewRecordState`) is the row itself.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::sink::postgres::decode::ConnectSchema;

/// `{"schema": …, "payload": …}` (JsonConverter with schemas); both absent otherwise.
#[derive(Deserialize)]
struct WithSchema<'a> {
    #[serde(borrow, default)]
    schema: Option<&'a RawValue>,
    /// `Some(None)`: a null payload.
    #[serde(borrow, default, deserialize_with = "present")]
    payload: Option<Option<&'a RawValue>>,
}

/// A member that is present, null or not (serde reads a null `Option` as absent).
fn present<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Option<&'de RawValue>>, D::Error> {
    Option::<&'de RawValue>::deserialize(deserializer).map(Some)
}

/// A record as the row it appends.
pub struct Event {
    /// The row's columns (`after`; `before` for a delete; the value itself when it is not a
    /// change event). `None`: the event carries no row (a truncate).
    pub row: Option<serde_json::Map<String, Value>>,
    /// `op`, when the value is a change event.
    pub op: Option<String>,
    /// `ts_ms` (µs).
    pub event_ts: Option<i64>,
    /// `source.ts_ms` (µs).
    pub source_ts: Option<i64>,
    /// PostgreSQL's `source.lsn`, MySQL's `source.file:source.pos`.
    pub source_position: Option<String>,
    /// The row's Connect schema (`after`'s, or the value's), when the value has one.
    pub schema: Option<RowSchema>,
    /// The value has a schema and a null payload (`{"schema":…,"payload":null}`: what
    /// `ExtractNewRecordState` makes of a delete in its `tombstone` mode): no row, no
    /// operation.
    pub null_payload: bool,
}

/// Decodes a record's value (`None`: a tombstone, which appends nothing).
///
/// # Errors
///
/// What is wrong with the value.
pub fn decode_event(value: &[u8], schemas: &mut SchemaCache) -> Result<Event, String> {
    let text =
        std::str::from_utf8(value).map_err(|_| "the value is not UTF-8, so not JSON".to_owned())?;
    let outer: WithSchema<'_> =
        serde_json::from_str(text).map_err(|e| format!("the value is not a JSON object: {e}"))?;
    let (body, schema_text) = match (outer.schema, outer.payload) {
        (Some(schema), Some(Some(payload))) => (payload.get(), Some(schema.get())),
        (Some(schema), Some(None)) => {
            let schema = match schema.get() {
                "null" => None,
                text => schemas.row_schema(text, false)?,
            };
            return Ok(Event {
                row: None,
                op: None,
                event_ts: None,
                source_ts: None,
                source_position: None,
                schema,
                null_payload: true,
            });
        }
        _ => (text, None),
    };
    let Value::Object(mut body) =
        serde_json::from_str(body).map_err(|e| format!("the value is not JSON: {e}"))?
    else {
        return Err("the value (or its payload) is not a JSON object".into());
    };
    let op = match body.get("op") {
        Some(Value::String(op)) if body.contains_key("source") || body.contains_key("after") => {
            Some(op.clone())
        }
        _ => None,
    };
    let schema = match schema_text {
        Some(text) if text != "null" => schemas.row_schema(text, op.is_some())?,
        _ => None,
    };
    let Some(op) = op else {
        return Ok(Event {
            row: Some(body),
            op: None,
            event_ts: None,
            source_ts: None,
            source_position: None,
            schema,
            null_payload: false,
        });
    };
    let micros = |v: Option<&Value>| v.and_then(Value::as_i64).map(|ms| ms.saturating_mul(1000));
    let source = body.get("source");
    let source_ts = micros(source.and_then(|s| s.get("ts_ms")));
    let source_position = source.and_then(|s| match (s.get("lsn"), s.get("file"), s.get("pos")) {
        (Some(lsn), _, _) if !lsn.is_null() => Some(lsn.to_string()),
        (_, Some(Value::String(file)), Some(pos)) => Some(format!("{file}:{pos}")),
        _ => None,
    });
    let event_ts = micros(body.get("ts_ms"));
    let image = if op == "d" { "before" } else { "after" };
    let row = match body.remove(image) {
        Some(Value::Object(row)) => Some(row),
        Some(Value::Null) | None if op == "t" => None,
        _ => {
            return Err(format!("an event with op {op:?} without its {image:?} row"));
        }
    };
    Ok(Event {
        row,
        op: Some(op),
        event_ts,
        source_ts,
        source_position,
        schema,
        null_payload: false,
    })
}

/// The last value schema seen and its row schema: the events of a table repeat the same
/// schema text, parsed once.
#[derive(Default)]
pub struct SchemaCache {
    last: Option<(String, Option<RowSchema>)>,
}

/// A value schema's text and the row schema in it.
pub type RowSchema = (String, Arc<ConnectSchema>);

impl SchemaCache {
    fn row_schema(&mut self, text: &str, envelope: bool) -> Result<Option<RowSchema>, String> {
        if let Some((last, row)) = &self.last
            && last == text
        {
            return Ok(row.clone());
        }
        let schema: ConnectSchema = serde_json::from_str(text)
            .map_err(|e| format!("the value's schema is not a Connect schema: {e}"))?;
        let row = if envelope {
            schema
                .field("after")
                .or_else(|| schema.field("before"))
                .cloned()
        } else {
            Some(schema)
        };
        let row = row
            .filter(|s| s.kind == "struct")
            .map(|row| (text.to_owned(), Arc::new(row)));
        self.last = Some((text.to_owned(), row.clone()));
        Ok(row)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(value: &[u8]) -> Result<Event, String> {
        decode_event(value, &mut SchemaCache::default())
    }

    #[test]
    fn change_events_decode_to_their_rows() {
        let event = decode(
            br#"{"before":null,"after":{"id":1,"n":"x"},"source":{"ts_ms":5,"lsn":123},"op":"c","ts_ms":7}"#,
        )
        .unwrap();
        assert_eq!(event.op.as_deref(), Some("c"));
        assert_eq!(event.row.unwrap()["n"], "x");
        assert_eq!(event.event_ts, Some(7000));
        assert_eq!(event.source_ts, Some(5000));
        assert_eq!(event.source_position.as_deref(), Some("123"));
        let event = decode(
            br#"{"schema":{"type":"struct","fields":[{"field":"before","type":"struct","optional":true,"fields":[{"field":"id","type":"int32"}]},{"field":"after","type":"struct","optional":true,"fields":[{"field":"id","type":"int32"}]}]},"payload":{"before":{"id":3},"after":null,"source":{"file":"b.000001","pos":4},"op":"d"}}"#,
        )
        .unwrap();
        assert_eq!(event.row.unwrap()["id"], 3);
        assert_eq!(event.source_position.as_deref(), Some("b.000001:4"));
        assert_eq!(event.schema.unwrap().1.fields[0].field, "id");
        let plain = decode(br#"{"id":1,"op":"not an event"}"#).unwrap();
        assert_eq!(plain.op, None);
        assert!(decode(br#"{"after":null,"source":{},"op":"u"}"#).is_err());
        let deleted = decode(
            br#"{"schema":{"type":"struct","fields":[{"field":"id","type":"int32"}]},"payload":null}"#,
        )
        .unwrap();
        assert!(deleted.null_payload && deleted.row.is_none() && deleted.op.is_none());
        assert_eq!(deleted.schema.unwrap().1.fields[0].field, "id");
        assert!(decode(b"[1]").is_err());
    }
}

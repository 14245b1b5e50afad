//! The sinks' record decoders: what a topic may hold (any bytes, truncated or deep JSON,
//! wrong kinds) reaches the PostgreSQL sink's event decoder (Debezium JSON, JSON with schemas,
//! plain rows) and value conversion, and the files sink's JSON checks; a record is a change or
//! an error (the failure policy's), never a panic, a stack overflow or an allocation a field
//! asks for.

use proptest::prelude::*;
use serde_json::Value;

use super::{json_like, nested_arrays, nested_objects, on_small_stack};
use crate::event::options::BinaryHandlingMode;
use crate::sink::postgres::convert::{
    ColumnConversion, Conversion, Placeholders, Unit, convert, prepare_row,
};
use crate::sink::postgres::decode::{Change, SchemaCache, decode};
use crate::sink::template::parse_object;

/// Bytes a topic may hold: anything, JSON-ish text, or JSON with a hostile part.
fn record_bytes() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        1 => Just(None),
        2 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Some),
        4 => json_like().prop_map(|t| Some(t.into_bytes())),
        3 => json_value().prop_map(|v| Some(v.to_string().into_bytes())),
        3 => event().prop_map(|(_, value)| Some(value.into_bytes())),
    ]
}

/// Arbitrary JSON documents, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |n| n.is_finite())
            .prop_map(Value::from),
        prop::sample::select(vec![
            "c", "r", "u", "d", "t", "after", "payload", "schema", "op"
        ])
        .prop_map(|s| Value::String(s.to_owned())),
        ".{0,6}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(
                prop::sample::select(vec![
                    "op", "after", "before", "payload", "schema", "id", "x"
                ])
                .prop_map(str::to_owned),
                inner,
                0..4
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A change event's key and value, perhaps wrapped with a schema: (after row, value).
fn event() -> impl Strategy<Value = (Value, String)> {
    let row = proptest::collection::btree_map("[a-z]{1,4}", json_value(), 1..4)
        .prop_map(|m| Value::Object(m.into_iter().collect()));
    (
        row,
        prop::sample::select(vec!["c", "r", "u"]),
        any::<bool>(),
    )
        .prop_map(|(after, op, with_schema)| {
            let event = serde_json::json!({"before": null, "after": after, "source": {}, "op": op});
            let value = if with_schema {
                serde_json::json!({"schema": {"type": "struct", "fields": []}, "payload": event})
            } else {
                event
            };
            (after, value.to_string())
        })
}

fn conversion() -> impl Strategy<Value = Conversion> {
    let unit = prop::sample::select(vec![Unit::Millis, Unit::Micros, Unit::Nanos]);
    prop_oneof![
        Just(Conversion::Date),
        unit.clone().prop_map(Conversion::Timestamp),
        unit.prop_map(Conversion::Time),
        prop_oneof![0..40u32, any::<u32>()].prop_map(|scale| Conversion::Decimal { scale }),
        Just(Conversion::VariableDecimal),
        prop::sample::select(vec![
            BinaryHandlingMode::Bytes,
            BinaryHandlingMode::Base64,
            BinaryHandlingMode::Base64UrlSafe,
            BinaryHandlingMode::Hex,
        ])
        .prop_map(Conversion::Bytes),
        Just(Conversion::Json),
        Just(Conversion::MicroDuration),
        Just(Conversion::Point),
    ]
}

/// Values of the kinds the conversions read, with hostile contents.
fn converted_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        json_value(),
        any::<i64>().prop_map(Value::from),
        prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(-1)].prop_map(Value::from),
        "[A-Za-z0-9+/=]{0,24}".prop_map(Value::String),
        (prop_oneof![0..40u64, any::<u64>()], "[A-Za-z0-9+/=]{0,16}")
            .prop_map(|(scale, value)| serde_json::json!({"scale": scale, "value": value})),
        (any::<f64>(), any::<f64>()).prop_map(|(x, y)| serde_json::json!({"x": x, "y": y})),
    ]
}

proptest! {
    #![proptest_config(super::config())]

    /// Any key and value: a change or an error.
    #[test]
    fn postgres_sink_records_decode_or_fail(key in record_bytes(), value in record_bytes()) {
        let _ = decode(key.as_deref(), value.as_deref(), &mut SchemaCache::default());
    }

    /// A change event (with or without a schema) becomes the upsert of its `after` row, as
    /// written.
    #[test]
    fn postgres_sink_events_round_trip((after, value) in event(), id in any::<i64>()) {
        let key = format!("{{\"id\":{id}}}");
        match decode(Some(key.as_bytes()), Some(value.as_bytes()), &mut SchemaCache::default()) {
            Ok(Change::Upsert { key: k, row, event: true, .. }) => {
                prop_assert_eq!(k, key.as_bytes());
                // The row's text as the event has it (not re-parsed: floats would round).
                prop_assert_eq!(row, after.to_string());
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    /// Any value under any conversion: a value, left as it is, or an error; and the text of a
    /// converted row is JSON.
    #[test]
    fn postgres_sink_conversions_never_panic(conversion in conversion(), value in converted_value()) {
        let _ = convert(conversion, &value);
        let row = serde_json::json!({"c": value}).to_string();
        let placeholders = Placeholders::default();
        for elements in [false, true] {
            let plan = [("c".to_owned(), ColumnConversion { conversion, elements })];
            if let Ok(prepared) = prepare_row(&row, &plan, Some(&placeholders), &[]) {
                prop_assert!(serde_json::from_str::<Value>(&prepared.json).is_ok());
            }
        }
    }

    /// The files sink's checks of a value: its top-level fields, or that it is JSON.
    #[test]
    fn files_sink_values_parse_or_fail(text in prop_oneof![json_like(), json_value().prop_map(|v| v.to_string()), any::<String>()]) {
        if let Ok(fields) = parse_object(&text) {
            // The fields are the object's, in order.
            let object: serde_json::Map<String, Value> = serde_json::from_str(&text).expect("an object");
            prop_assert!(fields.len() >= object.len());
        }
        let _ = serde_json::from_str::<serde::de::IgnoredAny>(&text);
    }
}

/// 100,000 levels of nesting in every place a record's JSON is read: an error or a value,
/// on a small stack (serde_json's recursion limit of 128 holds for borrowed raw values and
/// ignored values too).
#[test]
fn deeply_nested_records_do_not_overflow_the_stack() {
    on_small_stack(|| {
        for deep in [
            nested_arrays(100_000, "1"),
            nested_objects(100_000, "1"),
            format!(
                "{{\"op\":\"c\",\"after\":{}}}",
                nested_objects(100_000, "1")
            ),
            format!(
                "{{\"schema\":{},\"payload\":{{\"op\":\"c\",\"after\":{{\"a\":1}}}}}}",
                nested_objects(100_000, "null")
            ),
            format!("{{\"a\":{}}}", nested_arrays(100_000, "")),
        ] {
            let bytes = deep.as_bytes();
            let _ = decode(
                Some(b"{\"id\":1}"),
                Some(bytes),
                &mut SchemaCache::default(),
            );
            let _ = decode(
                Some(bytes),
                Some(b"{\"op\":\"c\",\"after\":{\"a\":1}}"),
                &mut SchemaCache::default(),
            );
            let _ = decode(Some(bytes), None, &mut SchemaCache::default());
            let _ = parse_object(&deep);
            let _ = serde_json::from_str::<serde::de::IgnoredAny>(&deep);
            let plan = [(
                "a".to_owned(),
                ColumnConversion {
                    conversion: Conversion::Json,
                    elements: false,
                },
            )];
            let _ = prepare_row(&deep, &plan, Some(&Placeholders::default()), &[]);
            let string = Value::String(deep.clone());
            let _ = convert(Conversion::Json, &string);
        }
    });
}

/// Found by `postgres_sink_conversions_never_panic`: a date of `i64::MAX` days overflowed the
/// calendar arithmetic (a panic in a debug build, a wrong date in a release build). Dates
/// beyond PostgreSQL's 32-bit day numbers are now an error.
#[test]
fn a_date_out_of_range_is_an_error() {
    for days in [i64::MAX, i64::MIN, 1 << 31, -(1 << 31) - 1] {
        assert!(
            convert(Conversion::Date, &Value::from(days)).is_err(),
            "{days}"
        );
    }
    assert_eq!(
        convert(Conversion::Date, &Value::from(0)),
        Ok(Some(Value::String("1970-01-01".into())))
    );
}

/// Found by `postgres_sink_conversions_never_panic`: a variable-scale decimal's scale (from
/// the record) was the number of zeros written, so `{"scale": 4294967295, "value": "AQ=="}`
/// asked for 4 GB. Scales beyond PostgreSQL's (16383) are now an error.
#[test]
fn a_huge_decimal_scale_is_an_error() {
    let value = serde_json::json!({"scale": 4_294_967_295_u64, "value": "AQ=="});
    assert!(convert(Conversion::VariableDecimal, &value).is_err());
    let text = Value::String("AQ==".into());
    assert!(convert(Conversion::Decimal { scale: u32::MAX }, &text).is_err());
    // A scale PostgreSQL has still converts.
    let value = serde_json::json!({"scale": 3, "value": "AQ=="});
    assert_eq!(
        convert(Conversion::VariableDecimal, &value),
        Ok(Some(Value::String("0.001".into())))
    );
}

//! The PostgreSQL text-to-JSON mappings, value by value, against Debezium's forms.

use super::cursor::*;
use super::json::*;
use super::kind::*;
use super::text::*;
use super::*;
use crate::event::temporal::{civil_from_days, days_from_civil};
use crate::event::{EventOptions, HstoreHandlingMode, IntervalHandlingMode};
use base64::Engine as _;
use proptest::prelude::*;

/// The options these tests map values with: sluice's embedded JSON, numerics as strings.
fn sluice() -> EventOptions {
    EventOptions {
        decimal_handling_mode: crate::event::DecimalHandlingMode::String,
        embed_json: true,
        unavailable_columns: true,
        ..EventOptions::default()
    }
}

/// The JSON for a value under `events`.
fn with(events: &EventOptions, type_oid: u32, type_modifier: i32, text: &str) -> String {
    let mut out = Vec::new();
    write_json(type_oid, type_modifier, text.as_bytes(), &mut out, events)
        .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"));
    String::from_utf8(out).expect("UTF-8")
}

/// A NOT NULL column's value where there is none: Debezium's zero of the type, under
/// Debezium's default options (`tests/debezium/defaults/dbzcap.public.nn_default.jsonl`, the
/// delete's `before`) and with `decimal.handling.mode=string`.
#[test]
fn required_defaults_are_debeziums_zeros() {
    let zero = |events: &EventOptions, oid: u32, modifier: i32| {
        let mut out = Vec::new();
        write_required_default(oid, modifier, &mut out, events).unwrap();
        String::from_utf8(out).unwrap()
    };
    let debezium = EventOptions::default();
    let numeric_10_4 = ((10 << 16) | 4) + 4;
    for (oid, modifier, expected) in [
        (16, -1, "false"),
        (23, -1, "0"),
        (701, -1, "0"),
        (25, -1, r#""""#),
        (2950, -1, r#""""#),
        (17, -1, r#""""#),
        (1560, 3, r#""""#),
        (1560, 1, "false"),
        (1700, -1, r#"{"scale":0,"value":"AA=="}"#),
        (1700, numeric_10_4, r#""AA==""#),
        (1082, -1, "0"),
        (1083, -1, "0"),
        (1266, -1, r#""00:00:00Z""#),
        (1114, -1, "0"),
        (1184, 6, r#""1970-01-01T00:00:00Z""#),
        (1186, -1, "0"),
        (1007, -1, "[]"),
    ] {
        assert_eq!(
            zero(&debezium, oid, modifier),
            expected,
            "type {oid}({modifier})"
        );
    }
    let string = events(|e| e.decimal_handling_mode = crate::event::DecimalHandlingMode::String);
    assert_eq!(zero(&string, 1700, numeric_10_4), r#""0.0000""#);
    assert_eq!(zero(&string, 1700, -1), r#""0""#);
    assert_eq!(zero(&string, 790, -1), r#""0.00""#);
}

/// The JSON for a value, or the error.
fn json(type_oid: u32, type_modifier: i32, text: &str) -> Result<String, ValueError> {
    json_bytes(type_oid, type_modifier, text.as_bytes())
}

fn json_bytes(type_oid: u32, type_modifier: i32, text: &[u8]) -> Result<String, ValueError> {
    let mut out = b"prefix".to_vec();
    let result = write_json(type_oid, type_modifier, text, &mut out, &sluice());
    let written = out.strip_prefix(b"prefix").expect("the prefix is kept");
    match result {
        Ok(()) => {
            let written = String::from_utf8(written.to_vec()).expect("UTF-8");
            serde_json::from_str::<serde::de::IgnoredAny>(&written).expect("valid JSON");
            Ok(written)
        }
        Err(error) => {
            assert!(written.is_empty(), "nothing written on error");
            Err(error)
        }
    }
}

/// The JSON of a value in a streamed change (Debezium's defaults).
fn streamed(type_oid: u32, text: &str) -> String {
    let mut out = Vec::new();
    write_streamed_json(
        type_oid,
        -1,
        text.as_bytes(),
        &mut out,
        &EventOptions::default(),
    )
    .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"));
    String::from_utf8(out).unwrap()
}

fn ok(type_oid: u32, type_modifier: i32, text: &str) -> String {
    json(type_oid, type_modifier, text)
        .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"))
}

fn invalid(type_name: &'static str) -> Result<String, ValueError> {
    Err(ValueError::Invalid { type_name })
}

const BOOL: u32 = 16;
const BYTEA: u32 = 17;
const INT8: u32 = 20;
const INT2: u32 = 21;
const INT4: u32 = 23;
const TEXT: u32 = 25;
const OID: u32 = 26;
const JSON: u32 = 114;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;
const VARCHAR: u32 = 1043;
const DATE: u32 = 1082;
const TIME: u32 = 1083;
const TIMESTAMP: u32 = 1114;
const TIMESTAMPTZ: u32 = 1184;
const INTERVAL: u32 = 1186;
const TIMETZ: u32 = 1266;
const NUMERIC: u32 = 1700;
const UUID: u32 = 2950;
const JSONB: u32 = 3802;

#[test]
fn booleans() {
    assert_eq!(ok(BOOL, -1, "t"), "true");
    assert_eq!(ok(BOOL, -1, "f"), "false");
    assert_eq!(json(BOOL, -1, "true"), invalid("boolean"));
    assert_eq!(json(BOOL, -1, ""), invalid("boolean"));
}

#[test]
fn integers() {
    assert_eq!(ok(INT2, -1, "-32768"), "-32768");
    assert_eq!(ok(INT4, -1, "0"), "0");
    assert_eq!(ok(INT8, -1, "9223372036854775807"), "9223372036854775807");
    assert_eq!(ok(INT8, -1, "-9223372036854775808"), "-9223372036854775808");
    assert_eq!(ok(OID, -1, "4294967295"), "4294967295");
    for bad in [
        "",
        "-",
        "+1",
        "01",
        "-01",
        "1.0",
        "1e3",
        "12a",
        " 1",
        "9223372036854775808",
    ] {
        assert_eq!(json(INT8, -1, bad), invalid("integer"), "{bad:?}");
    }
}

#[test]
fn floats() {
    assert_eq!(ok(FLOAT8, -1, "1.5"), "1.5");
    assert_eq!(ok(FLOAT8, -1, "-0"), "-0");
    assert_eq!(ok(FLOAT8, -1, "1e+20"), "1e+20");
    assert_eq!(
        ok(FLOAT8, -1, "1.2345678901234567e-05"),
        "1.2345678901234567e-05"
    );
    assert_eq!(
        ok(FLOAT8, -1, "1.7976931348623157e+308"),
        "1.7976931348623157e+308"
    );
    assert_eq!(ok(FLOAT4, -1, "3.4028235e+38"), "3.4028235e+38");
    assert_eq!(ok(FLOAT4, -1, "NaN"), "\"NaN\"");
    assert_eq!(ok(FLOAT8, -1, "Infinity"), "\"Infinity\"");
    assert_eq!(ok(FLOAT8, -1, "-Infinity"), "\"-Infinity\"");
    for bad in [
        "", "1e400", ".5", "1.", "inf", "nan", "0x10", "+1", "01", "1e", "1 ",
    ] {
        assert_eq!(json(FLOAT8, -1, bad), invalid("floating-point"), "{bad:?}");
    }
}

/// The JSON for a value with Debezium's default options.
fn debezium(type_oid: u32, type_modifier: i32, text: &str) -> String {
    let mut out = Vec::new();
    write_json(
        type_oid,
        type_modifier,
        text.as_bytes(),
        &mut out,
        &EventOptions::default(),
    )
    .unwrap_or_else(|error| panic!("{text:?} as {type_oid}: {error}"));
    String::from_utf8(out).unwrap()
}

#[test]
fn numerics_and_money_are_debezium_precise_decimals_by_default() {
    // numeric(10,4): base64 of the unscaled value (1234500), two's complement.
    assert_eq!(
        debezium(NUMERIC, (10 << 16) + 4 + 4, "123.4500"),
        "\"EtZE\""
    );
    assert_eq!(
        debezium(NUMERIC, (10 << 16) + 2 + 4, "-99999999.99"),
        "\"/av0HAE=\""
    );
    assert_eq!(debezium(NUMERIC, (38 << 16) + 4, "0"), "\"AA==\"");
    assert_eq!(
        debezium(NUMERIC, (38 << 16) + 4, "12345678901234567890"),
        "\"AKtUqYzrHwrS\""
    );
    assert_eq!(debezium(NUMERIC, (5 << 16) + 2 + 4, "-0.01"), "\"/w==\"");
    // No declared scale: VariableScaleDecimal, trailing fraction zeros dropped.
    assert_eq!(
        debezium(NUMERIC, -1, "123.4500"),
        r#"{"scale":2,"value":"MDk="}"#
    );
    assert_eq!(
        debezium(NUMERIC, -1, "0.000"),
        r#"{"scale":0,"value":"AA=="}"#
    );
    assert_eq!(
        debezium(NUMERIC, -1, "-99999999999999999999.999999999999"),
        r#"{"scale":12,"value":"+xHSkr6kelMQfwAAAAE="}"#
    );
    for special in ["NaN", "Infinity", "-Infinity"] {
        assert_eq!(debezium(NUMERIC, -1, special), "null");
    }
    assert_eq!(debezium(790, -1, "-$1,234.56"), "\"/h3A\"");
    assert_eq!(
        debezium(790, -1, "-$92,233,720,368,547,758.08"),
        "\"gAAAAAAAAAA=\""
    );
    assert_eq!(debezium(790, -1, "$0.00"), "\"AA==\"");
}

#[test]
fn json_is_a_string_by_default_and_embedded_on_request() {
    assert_eq!(
        debezium(JSON, -1, r#"{"a": [1, 2]}"#),
        r#""{\"a\": [1, 2]}""#
    );
    assert_eq!(debezium(JSONB, -1, "null"), r#""null""#);
    assert_eq!(
        debezium(3807, -1, r#"{"{\"a\": 1}",NULL}"#),
        r#"["{\"a\": 1}",null]"#
    );
    assert_eq!(ok(JSON, -1, r#"{"a": [1, 2]}"#), r#"{"a": [1, 2]}"#);
}

#[test]
fn bits_are_debezium_booleans_and_bitset_bytes() {
    assert_eq!(ok(1560, 1, "1"), "true");
    assert_eq!(ok(1560, 1, "0"), "false");
    assert_eq!(ok(1560, 3, "101"), "\"BQ==\"");
    assert_eq!(ok(1560, 3, "000"), "\"\"");
    assert_eq!(ok(1562, 10, "1100"), "\"DA==\"");
    assert_eq!(ok(1562, 10, "1000000001"), "\"AQI=\"");
    assert_eq!(ok(1562, -1, ""), "\"\"");
    assert_eq!(json(1562, -1, "12"), invalid("bit"));
}

#[test]
fn intervals_past_i64_saturate_as_debezium() {
    assert_eq!(ok(INTERVAL, -1, "P178000000Y"), "9223372036854775807");
    assert_eq!(ok(INTERVAL, -1, "P-178000000Y"), "-9223372036854775808");
}

#[test]
fn floats_with_one_significant_digit_take_javas_two() {
    assert_eq!(ok(FLOAT8, -1, "5e-324"), "4.9e-324");
    assert_eq!(ok(700, -1, "1e-45"), "1.4e-45");
    assert_eq!(ok(FLOAT8, -1, "0.5"), "0.5");
    assert_eq!(ok(700, -1, "3e+38"), "3e+38");
    assert_eq!(ok(FLOAT8, -1, "1.5e-05"), "1.5e-05");
}

#[test]
fn numerics_are_exact_strings() {
    assert_eq!(ok(NUMERIC, -1, "123.4500"), "\"123.4500\"");
    assert_eq!(ok(NUMERIC, 655366, "-0.5"), "\"-0.5\"");
    assert_eq!(
        ok(NUMERIC, -1, "123456789012345678901234567890.123456789"),
        "\"123456789012345678901234567890.123456789\""
    );
    // Debezium's spelling of the specials (decimal.handling.mode=string).
    assert_eq!(ok(NUMERIC, -1, "NaN"), "\"NAN\"");
    assert_eq!(ok(NUMERIC, -1, "Infinity"), "\"POSITIVE_INFINITY\"");
    assert_eq!(ok(NUMERIC, -1, "-Infinity"), "\"NEGATIVE_INFINITY\"");
    for bad in ["", "1e5", "abc", "1.", ".1", "--1", "1.2.3"] {
        assert_eq!(json(NUMERIC, -1, bad), invalid("numeric"), "{bad:?}");
    }
}

#[test]
fn text_types_are_escaped_strings() {
    assert_eq!(ok(TEXT, -1, "plain"), "\"plain\"");
    assert_eq!(ok(TEXT, -1, ""), "\"\"");
    assert_eq!(
        ok(TEXT, -1, "a \"q\" \\ b\nc\rd\te\u{8}f\u{c}g\u{1}h\u{1f}"),
        r#""a \"q\" \\ b\nc\rd\te\bf\fg\u0001h\u001f""#
    );
    assert_eq!(ok(VARCHAR, 14, "héllo wörld ✓ 🎉"), "\"héllo wörld ✓ 🎉\"");
    // bpchar, name, "char", xml, money, inet, cidr, macaddr, uuid, an enum, unknown types.
    for oid in [1042, 19, 18, 142, 869, 650, 829, UUID, 91_234, u32::MAX] {
        assert_eq!(ok(oid, -1, "x y"), "\"x y\"", "{oid}");
    }
    assert_eq!(
        ok(UUID, -1, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        "\"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11\""
    );
    // money: the amount (decimal.handling.mode=string), as Debezium.
    assert_eq!(ok(790, -1, "-$1,234.56"), "\"-1234.56\"");
    assert_eq!(ok(790, -1, "$0.00"), "\"0.00\"");
    assert_eq!(
        json_bytes(TEXT, -1, b"ab\xffcd"),
        Err(ValueError::InvalidUtf8)
    );
    assert_eq!(
        json_bytes(91_234, -1, b"\xc3"),
        Err(ValueError::InvalidUtf8)
    );
}

#[test]
fn bytea_is_base64() {
    assert_eq!(ok(BYTEA, -1, "\\x"), "\"\"");
    assert_eq!(ok(BYTEA, -1, "\\x0a0b0c"), "\"CgsM\"");
    assert_eq!(ok(BYTEA, -1, "\\xff"), "\"/w==\"");
    assert_eq!(ok(BYTEA, -1, "\\xDEADbeef"), "\"3q2+7w==\"");
    // Longer than one chunk, with a length that needs padding.
    let bytes: Vec<u8> = (0..2000u32).map(|i| (i * 7 % 256) as u8).collect();
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    let expected = base64::engine::general_purpose::STANDARD.encode(&bytes);
    assert_eq!(
        ok(BYTEA, -1, &format!("\\x{hex}")),
        format!("\"{expected}\"")
    );
    for bad in ["", "\\x0", "\\xzz", "abc", "\\x0g", "\\\\x00", "\\x 00"] {
        assert_eq!(json(BYTEA, -1, bad), invalid("bytea"), "{bad:?}");
    }
}

#[test]
fn json_is_embedded() {
    let document = r#"{"a": [1, -2.5e10, "x\u00e9\n", true, false, null], "b": {}, "c": []}"#;
    assert_eq!(ok(JSON, -1, document), document);
    assert_eq!(ok(JSONB, -1, "[]"), "[]");
    assert_eq!(ok(JSONB, -1, " \"s\" "), " \"s\" ");
    assert_eq!(ok(JSONB, -1, "-0.0e-7"), "-0.0e-7");
    assert_eq!(ok(JSON, -1, "1e400"), "1e400");
    // An empty innermost container is never pushed on the stack.
    let deep = format!(
        "{}{}",
        "[".repeat(MAX_JSON_DEPTH + 1),
        "]".repeat(MAX_JSON_DEPTH + 1)
    );
    assert_eq!(ok(JSON, -1, &deep), deep);
    let deeper = format!("[{deep}]");
    assert_eq!(json(JSON, -1, &deeper), invalid("json"));
    for bad in [
        "",
        "{",
        "[1,]",
        "{'a':1}",
        "tru",
        "01",
        "\"\u{1}\"",
        "1 2",
        "{\"a\"}",
        "{\"a\":}",
        "[}",
        "{]",
        "\"\\x\"",
        "\"\\u12g4\"",
        "[1]]",
        "{\"a\":1,}",
        "nul",
        "+1",
        "NaN",
    ] {
        assert_eq!(json(JSON, -1, bad), invalid("json"), "{bad:?}");
    }
    assert_eq!(
        json_bytes(JSONB, -1, b"\"\xff\""),
        Err(ValueError::InvalidUtf8)
    );
}

#[test]
fn names_are_null_when_streamed_as_debezium() {
    assert_eq!(ok(19, -1, "a_name"), "\"a_name\"");
    assert_eq!(streamed(19, "a_name"), "null");
}

#[test]
fn points_and_boxes_are_debezium_geometries() {
    assert_eq!(
        debezium(600, -1, "(1.5,2.5)"),
        r#"{"x":1.5,"y":2.5,"wkb":"AQEAAAAAAAAAAAD4PwAAAAAAAARA","srid":null}"#
    );
    assert_eq!(
        debezium(600, -1, "(-0,1e+300)"),
        r#"{"x":-0,"y":1e+300,"wkb":"AQEAAAAAAAAAAAAAgJx1AIg85Dd+","srid":null}"#
    );
    let text = debezium(603, -1, "(1,1),(-1,-1)");
    assert_eq!(
        text,
        r#"{"wkb":"AQMAAAABAAAABQAAAAAAAAAAAPA/AAAAAAAA8D8AAAAAAADwPwAAAAAAAPC/AAAAAAAA8L8AAAAAAADwvwAAAAAAAPC/AAAAAAAA8D8AAAAAAADwPwAAAAAAAPA/","srid":null,"extensions":{"type":"box"}}"#
    );
    assert_eq!(json(600, -1, "(1,2"), invalid("point"));
    assert_eq!(json(603, -1, "(1,1)"), invalid("box"));
}

#[test]
fn arrays_debezium_cannot_convert_are_null() {
    // A numeric NaN or infinity element, an enum array's NULL element: the whole array.
    assert_eq!(debezium(1231, -1, "{1.50,NaN,NULL}"), "null");
    assert_eq!(ok(1231, -1, "{1.50,Infinity}"), "null");
    assert_eq!(ok(1231, -1, "{1.50,NULL}"), r#"["1.50",null]"#);
    assert_eq!(debezium(ENUM_ARRAY_OID, -1, "{happy,NULL}"), "null");
    assert_eq!(
        debezium(ENUM_ARRAY_OID, -1, "{happy,\"NULL\"}"),
        r#"["happy","NULL"]"#
    );
    assert_eq!(debezium(ENUM_ARRAY_OID, -1, "{}"), "[]");
    // A multi-dimensional array: its outer list, each sub-array null.
    assert_eq!(debezium(1007, -1, "{{1,2},{3,NULL}}"), "[null,null]");
    assert_eq!(
        debezium(1009, -1, "{{\"}\",b},{c,d},{e,f}}"),
        "[null,null,null]"
    );
    assert_eq!(debezium(1007, -1, "[0:1]={7,8}"), "[7,8]");
    assert!(is_left_out(1187) && is_left_out(791) && is_left_out(1003) && is_left_out(143));
    assert!(!is_left_out(1007));
}

#[test]
fn timestamps_past_i64_micros_are_debeziums_java_arithmetic() {
    assert_eq!(
        debezium(TIMESTAMP, -1, "294276-12-31 23:59:59.999999"),
        "-9223372036853775810"
    );
    assert_eq!(
        debezium(TIMESTAMP, -1, "4713-01-01 00:00:00 BC"),
        "-210863520000000000"
    );
}

#[test]
fn dates_are_epoch_days() {
    assert_eq!(ok(DATE, -1, "1970-01-01"), "0");
    assert_eq!(ok(DATE, -1, "1969-12-31"), "-1");
    assert_eq!(ok(DATE, -1, "2016-11-04"), "17109");
    assert_eq!(ok(DATE, -1, "2024-02-29"), "19782");
    assert_eq!(ok(DATE, -1, "0001-01-01"), "-719162");
    // Streamed (pgoutput), Debezium keeps the era: 1 BC is year 0, a leap year.
    assert_eq!(streamed(DATE, "0001-12-31 BC"), "-719163");
    assert_eq!(streamed(DATE, "0001-01-01 BC"), "-719528");
    assert_eq!(streamed(DATE, "0005-02-29 BC"), "-720930");
    assert_eq!(json(DATE, -1, "0004-02-29 BC"), invalid("date"));
    assert_eq!(streamed(DATE, "4713-01-01 BC"), "-2440550");
    assert_eq!(streamed(DATE, "5874897-12-31"), "2145042905");
    // Read by a snapshot (the JDBC driver), the era is lost (tests/debezium golden files).
    assert_eq!(ok(DATE, -1, "0001-01-01 BC"), "-719162");
    assert_eq!(ok(DATE, -1, "4713-01-01 BC"), "1001860");
    assert_eq!(ok(DATE, -1, "5874897-12-31"), "2145042905");
    // Debezium's day numbers for the infinities (golden files), read and streamed.
    assert_eq!(ok(DATE, -1, "infinity"), "-622191234");
    assert_eq!(ok(DATE, -1, "-infinity"), "-625821272");
    assert_eq!(streamed(DATE, "infinity"), "2146033979");
    assert_eq!(streamed(DATE, "-infinity"), "-2147472691");
    for bad in [
        "",
        "2023-02-29",
        "2024-13-01",
        "2024-00-10",
        "2024-01-32",
        "2024-1-01",
        "0000-01-01",
        "2024-01-01 AD",
        "2024-01-01 ",
        "2024/01/01",
        " BC",
        "0000-01-01 BC",
    ] {
        assert_eq!(json(DATE, -1, bad), invalid("date"), "{bad:?}");
    }
}

#[test]
fn times_follow_the_precision() {
    assert_eq!(ok(TIME, -1, "00:00:00"), "0");
    assert_eq!(ok(TIME, -1, "13:51:30"), "49890000000");
    assert_eq!(ok(TIME, -1, "13:51:30.123456"), "49890123456");
    assert_eq!(ok(TIME, 6, "13:51:30.123456"), "49890123456");
    assert_eq!(ok(TIME, 4, "13:51:30.1235"), "49890123500");
    assert_eq!(ok(TIME, 3, "13:51:30.123"), "49890123");
    assert_eq!(ok(TIME, 0, "13:51:30"), "49890000");
    assert_eq!(ok(TIME, -1, "24:00:00"), "86400000000");
    assert_eq!(ok(TIME, 2, "24:00:00"), "86400000");
    // One to six fractional digits.
    for (fraction, micros) in [
        ("1", 100_000),
        ("12", 120_000),
        ("123", 123_000),
        ("1234", 123_400),
        ("12345", 123_450),
        ("123456", 123_456),
        ("000001", 1),
    ] {
        assert_eq!(
            ok(TIME, -1, &format!("00:00:00.{fraction}")),
            micros.to_string()
        );
    }
    for bad in [
        "",
        "24:00:01",
        "24:00:00.000001",
        "25:00:00",
        "12:60:00",
        "12:00:60",
        "12:00",
        "12:00:00.1234567",
        "12:00:00.",
        "1:00:00",
        "12:00:00+00",
        "12:00:00 ",
    ] {
        assert_eq!(json(TIME, -1, bad), invalid("time"), "{bad:?}");
    }
}

#[test]
fn timetz_is_utc_text() {
    assert_eq!(ok(TIMETZ, -1, "13:51:30.123789+02"), "\"11:51:30.123789Z\"");
    assert_eq!(ok(TIMETZ, 3, "13:51:30.12+02"), "\"11:51:30.12Z\"");
    assert_eq!(ok(TIMETZ, -1, "11:51:02+00"), "\"11:51:02Z\"");
    assert_eq!(ok(TIMETZ, -1, "13:51:30.100000+00"), "\"13:51:30.1Z\"");
    assert_eq!(ok(TIMETZ, -1, "00:30:00-01:30"), "\"02:00:00Z\"");
    assert_eq!(ok(TIMETZ, -1, "01:00:00+02"), "\"23:00:00Z\"");
    assert_eq!(ok(TIMETZ, -1, "12:00:00+05:30:15"), "\"06:29:45Z\"");
    assert_eq!(
        ok(TIMETZ, -1, "00:00:00.000001-15:59"),
        "\"15:59:00.000001Z\""
    );
    assert_eq!(ok(TIMETZ, -1, "24:00:00+00"), "\"24:00:00Z\"");
    assert_eq!(ok(TIMETZ, -1, "24:00:00+02"), "\"22:00:00Z\"");
    for bad in [
        "",
        "12:00:00",
        "12:00:00Z",
        "12:00:00+1",
        "12:00:00+01:60",
        "12:00:00 +01",
    ] {
        assert_eq!(json(TIMETZ, -1, bad), invalid("timetz"), "{bad:?}");
    }
}

#[test]
fn timestamps_are_epoch_micros_or_millis() {
    assert_eq!(ok(TIMESTAMP, -1, "1970-01-01 00:00:00"), "0");
    assert_eq!(
        ok(TIMESTAMP, -1, "2016-11-04 13:51:30.123456"),
        "1478267490123456"
    );
    assert_eq!(
        ok(TIMESTAMP, 6, "2016-11-04 13:51:30.5"),
        "1478267490500000"
    );
    assert_eq!(ok(TIMESTAMP, 3, "2016-11-04 13:51:30.123"), "1478267490123");
    assert_eq!(ok(TIMESTAMP, 0, "2016-11-04 13:51:30"), "1478267490000");
    assert_eq!(
        ok(TIMESTAMP, -1, "1936-10-25 22:10:12.608"),
        "-1047174587392000"
    );
    assert_eq!(
        ok(TIMESTAMP, 3, "1936-10-25 22:10:12.608"),
        "-1047174587392"
    );
    assert_eq!(ok(TIMESTAMP, -1, "1969-12-31 23:59:59.999999"), "-1");
    assert_eq!(ok(TIMESTAMP, 1, "1969-12-31 23:59:59.9"), "-100");
    assert_eq!(
        ok(TIMESTAMP, -1, "0001-01-01 00:00:00 BC"),
        (-719_528i64 * 86_400_000_000).to_string()
    );
    assert_eq!(
        ok(TIMESTAMP, -1, "294247-01-10 04:00:54.775807"),
        i64::MAX.to_string()
    );
    // Past `i64` microseconds: Debezium's Java arithmetic (saturated, then wrapped).
    assert_eq!(
        ok(TIMESTAMP, -1, "294247-01-10 04:00:54.775808"),
        i64::MIN.to_string()
    );
    // Milliseconds reach further than microseconds: Debezium's value (time-connect capture).
    assert_eq!(
        ok(TIMESTAMP, 3, "294276-12-31 23:59:59.999"),
        "9224318015999999"
    );
    // Debezium's: the i64 limits in microseconds, the driver's sentinels as they are in
    // milliseconds.
    assert_eq!(ok(TIMESTAMP, -1, "infinity"), "9223372036854775807");
    assert_eq!(ok(TIMESTAMP, -1, "-infinity"), "-9223372036854775808");
    assert_eq!(ok(TIMESTAMP, 3, "infinity"), "9223372036825200000");
    assert_eq!(ok(TIMESTAMP, 0, "-infinity"), "-9223372036832400000");
    for bad in [
        "",
        "2016-11-04",
        "2016-11-04T13:51:30",
        "2016-11-04 13:51",
        "2016-11-04 13:51:30+00",
        "2016-02-30 00:00:00",
        "infinity ",
        "2016-11-04 13:51:30 AD",
    ] {
        assert_eq!(json(TIMESTAMP, -1, bad), invalid("timestamp"), "{bad:?}");
    }
}

#[test]
fn timestamptz_is_iso_text_in_utc() {
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "2016-11-04 13:51:30.123456+02"),
        "\"2016-11-04T11:51:30.123456Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "2020-04-01 11:51:02+00"),
        "\"2020-04-01T11:51:02.000000Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, 6, "2020-04-01 11:51:02.5+00"),
        "\"2020-04-01T11:51:02.500000Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, 3, "2020-04-01 11:51:02.1+00"),
        "\"2020-04-01T11:51:02.100Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, 1, "2020-04-01 11:51:02.1+00"),
        "\"2020-04-01T11:51:02.1Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, 0, "2020-04-01 11:51:02+00"),
        "\"2020-04-01T11:51:02Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "2000-01-01 00:30:00+01"),
        "\"1999-12-31T23:30:00.000000Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "2000-01-01 00:00:00-05:30:10"),
        "\"2000-01-01T05:30:10.000000Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "21016-11-04 06:51:30.123456+00"),
        "\"+21016-11-04T06:51:30.123456Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "294276-12-31 23:59:59.999999+00"),
        "\"+294276-12-31T23:59:59.999999Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "9999-12-31 23:59:59.999999+00"),
        "\"9999-12-31T23:59:59.999999Z\""
    );
    // Astronomical years, as Java's formatter writes them: 1 BC is 0000, 4714 BC is -4713.
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "0001-01-01 00:00:00+00 BC"),
        "\"0000-01-01T00:00:00.000000Z\""
    );
    assert_eq!(
        ok(TIMESTAMPTZ, -1, "4714-12-31 23:59:59.999999+00 BC"),
        "\"-4713-12-31T23:59:59.999999Z\""
    );
    assert_eq!(ok(TIMESTAMPTZ, -1, "infinity"), "\"infinity\"");
    assert_eq!(ok(TIMESTAMPTZ, -1, "-infinity"), "\"-infinity\"");
    for bad in [
        "",
        "2016-11-04 13:51:30",
        "2016-11-04 13:51:30Z",
        "2016-11-04 13:51:30 +00",
        "2016-11-04 13:51:30+00 AD",
        "2016-11-04 13:51:30 BC+00",
    ] {
        assert_eq!(
            json(TIMESTAMPTZ, -1, bad),
            invalid("timestamptz"),
            "{bad:?}"
        );
    }
}

#[test]
fn intervals_are_micros() {
    assert_eq!(ok(INTERVAL, -1, "PT0S"), "0");
    // Debezium's own expectation for 1 year 2 months 3 days 04:05:06.78.
    assert_eq!(ok(INTERVAL, -1, "P1Y2M3DT4H5M6.78S"), "37091106780000");
    assert_eq!(ok(INTERVAL, -1, "P1M"), "2629800000000");
    assert_eq!(ok(INTERVAL, -1, "P1Y"), "31557600000000");
    assert_eq!(ok(INTERVAL, -1, "P1W"), "604800000000");
    assert_eq!(ok(INTERVAL, -1, "P1D"), "86400000000");
    assert_eq!(ok(INTERVAL, -1, "PT1H"), "3600000000");
    assert_eq!(ok(INTERVAL, -1, "PT1M"), "60000000");
    assert_eq!(ok(INTERVAL, -1, "PT-0.000001S"), "-1");
    assert_eq!(ok(INTERVAL, -1, "PT6.5S"), "6500000");
    assert_eq!(ok(INTERVAL, -1, "P-1Y-2M3DT-4H-5M-6.5S"), "-36572706500000");
    assert_eq!(ok(INTERVAL, -1, "P-1DT2H"), "-79200000000");
    assert_eq!(ok(INTERVAL, -1, "PT2562047788H"), "9223372036800000000");
    for bad in [
        "",
        "P",
        "PT",
        "P1DT",
        "1Y",
        "P1.5Y",
        "P1X",
        "PT1D",
        "P1H",
        "PT1.1234567S",
        "PT1.5H",
        "P 1D",
        "PT1S ",
        "@ 1 day",
        "1 day",
    ] {
        assert_eq!(json(INTERVAL, -1, bad), invalid("interval"), "{bad:?}");
    }
    // Past the i64 range: Debezium's saturation.
    assert_eq!(
        ok(INTERVAL, -1, "P999999999999999999Y"),
        "9223372036854775807"
    );
}

#[test]
fn arrays_of_scalars() {
    assert_eq!(ok(1007, -1, "{1,2,NULL}"), "[1,2,null]");
    assert_eq!(ok(1007, -1, "{}"), "[]");
    assert_eq!(
        ok(1016, -1, "{-9223372036854775808}"),
        "[-9223372036854775808]"
    );
    // Multi-dimensional: Debezium's outer list of nulls.
    assert_eq!(ok(1005, -1, "{{1,2},{3,4}}"), "[null,null]");
    assert_eq!(ok(1005, -1, "{{{1},{2}},{{3},{4}}}"), "[null,null]");
    assert_eq!(ok(1007, -1, "[0:1]={7,8}"), "[7,8]");
    assert_eq!(ok(1007, -1, "[-2:-1][1:1]={{1},{2}}"), "[null,null]");
    assert_eq!(ok(1007, -1, " { 1 , 2 , null } "), "[1,2,null]");
    assert_eq!(ok(1028, -1, "{1,4294967295}"), "[1,4294967295]");
    assert_eq!(ok(1000, -1, "{t,f,NULL}"), "[true,false,null]");
    assert_eq!(
        ok(1022, -1, "{1.5,NaN,-Infinity,1e-05}"),
        r#"[1.5,"NaN","-Infinity",1e-05]"#
    );
    assert_eq!(ok(1021, -1, "{Infinity}"), r#"["Infinity"]"#);
    // Debezium cannot convert a NaN element: the array is null (golden files).
    assert_eq!(ok(1231, 655366, "{1.20,3.40,NaN}"), "null");
    assert_eq!(ok(1231, 655366, "{1.20,3.40}"), r#"["1.20","3.40"]"#);
    assert_eq!(
        ok(2951, -1, "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11,NULL}"),
        r#"["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",null]"#
    );
}

#[test]
fn arrays_of_strings() {
    assert_eq!(
        ok(1009, -1, r#"{a,"b c","d\"e","f\\g",NULL,"NULL","",null}"#),
        r#"["a","b c","d\"e","f\\g",null,"NULL","",null]"#
    );
    assert_eq!(
        ok(
            1015,
            -1,
            r#"{héllo,"wörld ✓","tab	and
newline"}"#
        ),
        "[\"héllo\",\"wörld ✓\",\"tab\\tand\\nnewline\"]"
    );
    assert_eq!(
        ok(1014, 14, r#"{"cone      ","ctwo      "}"#),
        r#"["cone      ","ctwo      "]"#
    );
    assert_eq!(ok(1009, -1, r"{a\,b}"), r#"["a,b"]"#);
    assert_eq!(ok(1009, -1, "{{a,b},{c,d}}"), "[null,null]");
    assert_eq!(
        json_bytes(1009, -1, b"{\xff}"),
        Err(ValueError::InvalidUtf8)
    );
}

#[test]
fn arrays_of_temporal_values() {
    assert_eq!(
        ok(1182, -1, "{2016-11-04,infinity,NULL}"),
        r#"[17109,-622191234,null]"#
    );
    assert_eq!(
        ok(1115, -1, r#"{"2020-04-01 00:01:02","2020-04-01 01:02:03"}"#),
        "[1585699262000000,1585702923000000]"
    );
    assert_eq!(
        ok(1115, 3, r#"{"2020-04-01 00:01:02.123"}"#),
        "[1585699262123]"
    );
    assert_eq!(
        ok(
            1185,
            -1,
            r#"{"2020-04-01 11:51:02+00","2020-04-01 12:51:03+00"}"#
        ),
        r#"["2020-04-01T11:51:02.000000Z","2020-04-01T12:51:03.000000Z"]"#
    );
    assert_eq!(ok(1183, -1, "{00:01:02,01:02:03}"), "[62000000,3723000000]");
    assert_eq!(
        ok(1270, -1, "{11:51:02+00,13:51:03+01}"),
        r#"["11:51:02Z","12:51:03Z"]"#
    );
    assert_eq!(
        ok(1187, -1, "{PT1S,P1D,NULL}"),
        "[1000000,86400000000,null]"
    );
}

#[test]
fn arrays_of_escaped_values() {
    assert_eq!(
        ok(1001, -1, r#"{"\\x0102",NULL,"\\x"}"#),
        r#"["AQI=",null,""]"#
    );
    assert_eq!(
        ok(199, -1, r#"{"{\"a\": 1}","[1, \"x\\\\y\"]",NULL,3}"#),
        r#"[{"a": 1},[1, "x\\y"],null,3]"#
    );
    assert_eq!(ok(3807, -1, r#"{"\"s\""}"#), r#"["s"]"#);
    assert_eq!(ok(1007, -1, r#"{"1","2"}"#), "[1,2]");
    assert_eq!(ok(1007, -1, r#"{\1}"#), "[1]");
}

#[test]
fn arrays_of_unknown_elements_are_strings() {
    // _money, _xml, an array of an enum.
    assert_eq!(ok(791, -1, "{$1.00,$2.00}"), r#""{$1.00,$2.00}""#);
    assert_eq!(ok(143, -1, "{<a/>}"), r#""{<a/>}""#);
    assert_eq!(
        ok(91_235, -1, r#"{happy,"so sad"}"#),
        r#""{happy,\"so sad\"}""#
    );
}

#[test]
fn malformed_arrays_are_errors() {
    let array = invalid("array");
    for bad in [
        "",
        "1,2",
        "{1,2",
        "{1,,2}",
        "{,1}",
        "{1,}",
        "1,2}",
        "{1}x",
        "{{1},2",
        "{\"1}",
        "{1\"2\"}",
        "{1{2}}",
        "{{1}{2}}",
        "[1:2]{1,2}",
        "[1]={1}",
        "[1:2=]{1}",
        "{1}}",
        "{{{{{{{1}}}}}}}",
        "{\\",
    ] {
        assert_eq!(json(1007, -1, bad), array, "{bad:?}");
    }
    assert_eq!(json(1007, -1, "{1,a}"), invalid("integer"));
    assert_eq!(json(1182, -1, "{2024-02-30}"), invalid("date"));
    assert_eq!(json(199, -1, r#"{"{"}"#), invalid("json"));
    assert_eq!(ok(1007, -1, "{{{{{{1}}}}}}"), "[null]");
}

#[test]
fn civil_dates_round_trip() {
    for days in (-3_000_000..3_000_000).step_by(997) {
        let (year, month, day) = civil_from_days(days);
        assert!((1..=12).contains(&month) && (1..=days_in_month(year, month)).contains(&day));
        assert_eq!(days_from_civil(year, month, day), days);
    }
    assert_eq!(civil_from_days(0), (1970, 1, 1));
    assert_eq!(civil_from_days(-719_528), (0, 1, 1));
    assert_eq!(
        days_from_civil(2000, 3, 1) - days_from_civil(2000, 2, 28),
        2
    );
    assert_eq!(
        days_from_civil(1900, 3, 1) - days_from_civil(1900, 2, 28),
        1
    );
}

/// Type OIDs worth generating: everything the module knows, and a few it does not.
fn type_oid() -> impl Strategy<Value = u32> {
    prop_oneof![
        proptest::sample::select(vec![
            16, 17, 18, 19, 20, 21, 23, 25, 26, 114, 142, 700, 701, 790, 1042, 1043, 1082, 1083,
            1114, 1184, 1186, 1266, 1700, 2950, 3802, 1000, 1001, 1002, 1005, 1007, 1009, 1014,
            1015, 1016, 1021, 1022, 1028, 1115, 1182, 1183, 1185, 1187, 1231, 1270, 199, 2951,
            3807, 651, 775, 1040, 1041, 791,
        ]),
        any::<u32>(),
    ]
}

fn type_modifier() -> impl Strategy<Value = i32> {
    prop_oneof![Just(-1), 0..=6, any::<i32>()]
}

/// Text made of the characters PostgreSQL values are made of.
fn value_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..48),
            "[-+0-9:. TPYMWDHSZBCx{}\\[\\]=,\"\\\\NUaninfty]{0,40}".prop_map(String::into_bytes),
            "[-0-9]{1,6}-[0-9]{2}-[0-9]{2}( [0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]{1,7})?)?([+-][0-9]{2}(:[0-9]{2})?)?( BC)?"
                .prop_map(String::into_bytes),
            "[\\[\\]{}\",:0-9a-z\\\\ .eE+-]{0,40}".prop_map(String::into_bytes),
        ]
}

/// Arbitrary JSON documents.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |number| number.is_finite())
            .prop_map(Value::from),
        ".{0,8}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(".{0,4}", inner, 0..4)
                .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

proptest! {
    #[test]
    fn write_json_never_panics_and_writes_valid_json(
        oid in type_oid(),
        modifier in type_modifier(),
        text in value_text(),
    ) {
        let mut out = b"[".to_vec();
        match write_json(oid, modifier, &text, &mut out, &sluice()) {
            Ok(()) => {
                out.push(b']');
                let written = std::str::from_utf8(&out).expect("UTF-8");
                serde_json::from_str::<serde::de::IgnoredAny>(written).expect("valid JSON");
                if !matches!(oid, 114 | 3802 | 199 | 3807) {
                    serde_json::from_str::<serde_json::Value>(written).expect("parses fully");
                }
            }
            Err(_) => prop_assert_eq!(out, b"[".to_vec()),
        }
    }

    #[test]
    fn strings_round_trip(text in any::<String>()) {
        let written = json(TEXT, -1, &text).expect("any string");
        prop_assert_eq!(serde_json::from_str::<String>(&written).expect("a string"), text);
    }

    #[test]
    fn json_checker_agrees_with_serde_json(text in "[\\[\\]{}\",:0-9tfrulsena\\\\ .eE+-]{0,24}") {
        let ours = JsonChecker::new(text.as_bytes()).check();
        let theirs = serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok();
        prop_assert_eq!(ours, theirs, "{:?}", text);
    }

    #[test]
    fn json_checker_accepts_json_and_agrees_on_edits(
        value in json_value(),
        pretty in any::<bool>(),
        cut in any::<prop::sample::Index>(),
    ) {
        let text = if pretty {
            serde_json::to_string_pretty(&value)
        } else {
            serde_json::to_string(&value)
        }
        .expect("serializable");
        prop_assert!(JsonChecker::new(text.as_bytes()).check(), "{}", text);
        let mut edited: Vec<char> = text.chars().collect();
        edited.remove(cut.index(edited.len()));
        let edited: String = edited.into_iter().collect();
        let ours = JsonChecker::new(edited.as_bytes()).check();
        let theirs = serde_json::from_str::<serde::de::IgnoredAny>(&edited).is_ok();
        prop_assert_eq!(ours, theirs, "{:?}", edited);
    }

    #[test]
    fn timestamps_round_trip(micros in -210_863_520_000_000_000i64..i64::MAX) {
        let days = micros.div_euclid(DAY_MICROS);
        let (year, month, day) = civil_from_days(days);
        let mut time = Vec::new();
        write_clock(micros.rem_euclid(DAY_MICROS), None, &mut time);
        let time = String::from_utf8(time).expect("ASCII");
        let date = if year <= 0 {
            format!("{:04}-{month:02}-{day:02} BC", 1 - year)
        } else {
            format!("{year:04}-{month:02}-{day:02}")
        };
        let timestamp = match date.strip_suffix(" BC") {
            Some(date) => format!("{date} {time} BC"),
            None => format!("{date} {time}"),
        };
        prop_assert_eq!(ok(TIMESTAMP, -1, &timestamp), micros.to_string());
        prop_assert_eq!(streamed(DATE, &date), days.to_string());
    }
}
// ---- Debezium's options (`[kafka.events]`), exact bytes ----

const MONEY: u32 = 790;
const BYTEA_ARRAY: u32 = 1001;
const TIME_ARRAY: u32 = 1183;
const TIMESTAMP_ARRAY: u32 = 1115;

fn events(edit: impl FnOnce(&mut EventOptions)) -> EventOptions {
    let mut events = EventOptions::default();
    edit(&mut events);
    events
}

#[test]
fn time_precision_modes() {
    use crate::event::TimePrecisionMode::*;
    let connect = events(|e| e.time_precision_mode = Connect);
    let micro = events(|e| e.time_precision_mode = AdaptiveTimeMicroseconds);
    let adaptive = EventOptions::default();
    // connect: milliseconds whatever the precision (golden `time-connect`).
    assert_eq!(with(&connect, TIME, -1, "13:51:30.123456"), "49890123");
    assert_eq!(with(&connect, TIME, 6, "13:51:30.123456"), "49890123");
    assert_eq!(
        with(&connect, TIMESTAMP, -1, "2016-11-04 13:51:30.123456"),
        "1478267490123"
    );
    assert_eq!(
        with(&connect, TIMESTAMP, -1, "-infinity"),
        "-9223372036832400000"
    );
    assert_eq!(
        with(&connect, TIME_ARRAY, -1, "{13:51:30.5,NULL}"),
        "[49890500,null]"
    );
    assert_eq!(
        with(
            &connect,
            TIMESTAMP_ARRAY,
            6,
            "{\"2016-11-04 13:51:30.123456\"}"
        ),
        "[1478267490123]"
    );
    assert_eq!(with(&connect, DATE, -1, "1970-01-02"), "1");
    // adaptive_time_microseconds: time always in microseconds, timestamps adaptive.
    assert_eq!(with(&micro, TIME, 0, "13:51:30"), "49890000000");
    assert_eq!(
        with(&micro, TIMESTAMP, 3, "2016-11-04 13:51:30.123"),
        "1478267490123"
    );
    assert_eq!(with(&adaptive, TIME, 0, "13:51:30"), "49890000");
    // timetz/timestamptz are strings in every mode.
    assert_eq!(with(&connect, TIMETZ, -1, "13:51:30+00"), "\"13:51:30Z\"");
}

#[test]
fn binary_handling_modes() {
    use crate::event::BinaryHandlingMode::*;
    let w = |mode, oid, text| with(&events(|e| e.binary_handling_mode = mode), oid, -1, text);
    assert_eq!(w(Bytes, BYTEA, "\\xfbff000a"), "\"+/8ACg==\"");
    assert_eq!(w(Base64, BYTEA, "\\xfbff000a"), "\"+/8ACg==\"");
    assert_eq!(w(Base64UrlSafe, BYTEA, "\\xfbff000a"), "\"-_8ACg==\"");
    assert_eq!(w(Hex, BYTEA, "\\xFBff000a"), "\"fbff000a\"");
    assert_eq!(w(Hex, BYTEA, "\\x"), "\"\"");
    assert_eq!(
        w(Hex, BYTEA_ARRAY, "{\"\\\\x0a0b\",NULL}"),
        "[\"0a0b\",null]"
    );
    // bit/varbit stay io.debezium.data.Bits bytes (golden `binary-hex`).
    assert_eq!(w(Hex, 1560, "101"), "\"BQ==\"");
    let mut out = Vec::new();
    assert!(
        write_json(
            BYTEA,
            -1,
            b"\\x0g",
            &mut out,
            &events(|e| e.binary_handling_mode = Hex)
        )
        .is_err()
    );
}

#[test]
fn unavailable_placeholders_follow_the_options() {
    let placeholder = |events: &EventOptions, oid| {
        let mut out = Vec::new();
        write_unavailable(oid, events, &mut out);
        String::from_utf8(out).unwrap()
    };
    let default = EventOptions::default();
    assert_eq!(
        placeholder(&default, BYTEA),
        "\"X19kZWJleml1bV91bmF2YWlsYWJsZV92YWx1ZQ==\""
    );
    assert_eq!(
        placeholder(&default, TEXT),
        "\"__debezium_unavailable_value\""
    );
    let custom = events(|e| e.unavailable_value_placeholder = "gone".into());
    assert_eq!(placeholder(&custom, TEXT), "\"gone\"");
    assert_eq!(placeholder(&custom, BYTEA), "\"Z29uZQ==\"");
    assert_eq!(placeholder(&custom, 1009), "[\"gone\"]");
    let hex = events(|e| e.binary_handling_mode = crate::event::BinaryHandlingMode::Hex);
    assert_eq!(placeholder(&hex, BYTEA), "\"__debezium_unavailable_value\"");
}

#[test]
fn interval_handling_modes() {
    let string = events(|e| e.interval_handling_mode = IntervalHandlingMode::String);
    let w = |text| with(&string, INTERVAL, -1, text);
    assert_eq!(w("P1Y2M3DT4H5M6.78S"), "\"P1Y2M3DT4H5M6.78S\"");
    assert_eq!(w("PT0S"), "\"P0Y0M0DT0H0M0S\"");
    assert_eq!(w("P-1Y-2M3DT-4H-5M-6.5S"), "\"P-1Y-2M3DT-4H-5M-6.5S\"");
    assert_eq!(w("PT27H"), "\"P0Y0M0DT27H0M0S\"");
    assert_eq!(w("P3D"), "\"P0Y0M3DT0H0M0S\"");
    assert_eq!(
        with(&string, 1187, -1, "{P1D,NULL}"),
        "[\"P0Y0M1DT0H0M0S\",null]"
    );
    assert_eq!(
        with(&EventOptions::default(), INTERVAL, -1, "P1D"),
        "86400000000"
    );
    for bad in ["", "P", "1D", "P1X", "PT1.5H", "PTS"] {
        let mut out = Vec::new();
        assert!(
            write_json(INTERVAL, -1, bad.as_bytes(), &mut out, &string).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn decimal_double_and_money_fraction_digits() {
    use crate::event::DecimalHandlingMode::*;
    let double = events(|e| e.decimal_handling_mode = Double);
    assert_eq!(with(&double, NUMERIC, -1, "1234.5"), "1234.5");
    assert_eq!(with(&double, NUMERIC, 393_222, "-0.10"), "-0.1");
    assert_eq!(with(&double, NUMERIC, -1, "NaN"), "\"NaN\"");
    assert_eq!(with(&double, NUMERIC, -1, "-Infinity"), "\"-Infinity\"");
    assert_eq!(with(&double, 1231, -1, "{1.5,NULL}"), "[1.5,null]");
    assert_eq!(with(&double, MONEY, -1, "-$1,234.56"), "-1234.56");
    assert_eq!(
        with(&double, NUMERIC, -1, &format!("-{}", "9".repeat(400))),
        "\"-Infinity\""
    );
    let mut out = Vec::new();
    assert!(write_json(NUMERIC, -1, b"1e5", &mut out, &double).is_err());
    // money.fraction.digits: the scale of the amount, rounded half up.
    let string = |digits| {
        events(|e| {
            e.decimal_handling_mode = String;
            e.money_fraction_digits = digits;
        })
    };
    assert_eq!(with(&string(2), MONEY, -1, "$1,234.56"), "\"1234.56\"");
    assert_eq!(with(&string(4), MONEY, -1, "$1,234.56"), "\"1234.5600\"");
    assert_eq!(with(&string(1), MONEY, -1, "$1,234.56"), "\"1234.6\"");
    assert_eq!(with(&string(0), MONEY, -1, "$9.50"), "\"10\"");
    assert_eq!(with(&string(1), MONEY, -1, "-$99.96"), "\"-100.0\"");
    let precise = |digits| events(|e| e.money_fraction_digits = digits);
    // 123456 = 0x01E240; 12345600 = 0xBC6100.
    assert_eq!(with(&precise(2), MONEY, -1, "$1,234.56"), "\"AeJA\"");
    assert_eq!(with(&precise(4), MONEY, -1, "$1,234.56"), "\"ALxhAA==\"");
}

#[test]
fn hstore_values_follow_the_mode() {
    let w = |mode, text: &str| {
        let mut out = Vec::new();
        write_hstore(text.as_bytes(), &mut out, mode).map(|()| String::from_utf8(out).unwrap())
    };
    let text = r#""a"=>"1", "b"=>NULL, "q\"t"=>"x\\y""#;
    assert_eq!(
        w(HstoreHandlingMode::Map, text).unwrap(),
        r#"{"a":"1","b":null,"q\"t":"x\\y"}"#
    );
    assert_eq!(
        w(HstoreHandlingMode::Json, r#""a"=>"1", "b"=>NULL"#).unwrap(),
        r#""{\"a\":\"1\",\"b\":null}""#
    );
    assert_eq!(w(HstoreHandlingMode::Json, "").unwrap(), r#""{}""#);
    for bad in [r#""a"=>"#, r#""a"=>"1" "b"=>"2""#, r#"a=>1"#, r#""a"=>NUL"#] {
        assert!(w(HstoreHandlingMode::Map, bad).is_err(), "{bad:?}");
    }
}

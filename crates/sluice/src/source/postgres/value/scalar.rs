//! One scalar value to JSON: the dispatch from a column's `Kind` to its writer.

use super::cursor::write_int;
use super::geometry::{write_box, write_point};
use super::json::write_embedded_json;
use super::kind::{Kind, ValueError};
use super::numeric::{
    parse_integer, parse_money, split_decimal, write_double, write_float, write_numeric,
    write_numeric_precise,
};
use super::temporal::{
    parse_interval, write_date, write_interval_string, write_time, write_timestamp,
    write_timestamptz, write_timetz,
};
use super::text::{write_ascii_string, write_bytea, write_string};
use crate::event::IntervalHandlingMode;
use crate::event::decimal::write_unscaled;
use base64::Engine as _;

/// Appends the JSON form of one scalar value.
pub(super) fn write_scalar(
    kind: Kind,
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    match kind {
        Kind::Bool => match text {
            b"t" => out.extend_from_slice(b"true"),
            b"f" => out.extend_from_slice(b"false"),
            _ => return Err(kind.invalid()),
        },
        Kind::Integer => {
            parse_integer(text).ok_or(kind.invalid())?;
            out.extend_from_slice(text);
        }
        Kind::Float => write_float(text, false, out)?,
        Kind::Float4 => write_float(text, true, out)?,
        Kind::Bit if type_modifier == 1 => match text {
            b"1" => out.extend_from_slice(b"true"),
            b"0" => out.extend_from_slice(b"false"),
            _ => return Err(kind.invalid()),
        },
        Kind::Bit | Kind::VarBit => {
            if !text.iter().all(|b| matches!(b, b'0' | b'1')) {
                return Err(kind.invalid());
            }
            let mut bytes = vec![0u8; text.len().div_ceil(8)];
            for (i, bit) in text.iter().rev().enumerate() {
                if *bit == b'1' {
                    bytes[i / 8] |= 1 << (i % 8);
                }
            }
            while bytes.last() == Some(&0) {
                bytes.pop();
            }
            out.push(b'"');
            out.extend_from_slice(
                base64::engine::general_purpose::STANDARD
                    .encode(&bytes)
                    .as_bytes(),
            );
            out.push(b'"');
        }
        Kind::Numeric => write_numeric(text, out)?,
        Kind::NumericPrecise => write_numeric_precise(type_modifier, text, out)?,
        Kind::NumericDouble => {
            if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
                write_ascii_string(text, out);
            } else {
                split_decimal(text).ok_or(Kind::Numeric.invalid())?;
                write_double(text, out)?;
            }
        }
        Kind::MoneyDouble => {
            let (negative, int, frac) = parse_money(text, 2)?;
            let sign = if negative { "-" } else { "" };
            let int = if int.is_empty() { "0" } else { int.as_str() };
            write_double(format!("{sign}{int}.{frac}").as_bytes(), out)?;
        }
        Kind::Money(digits) => {
            let (negative, int, frac) = parse_money(text, digits)?;
            out.push(b'"');
            if negative
                && (int.trim_start_matches('0').len() + frac.trim_end_matches('0').len()) > 0
            {
                out.push(b'-');
            }
            out.extend_from_slice(if int.is_empty() { b"0" } else { int.as_bytes() });
            if !frac.is_empty() {
                out.push(b'.');
                out.extend_from_slice(frac.as_bytes());
            }
            out.push(b'"');
        }
        Kind::MoneyPrecise(digits) => {
            let (negative, int, frac) = parse_money(text, digits)?;
            write_unscaled(negative, &format!("{int}{frac}"), out);
        }
        Kind::Text | Kind::EnumText => write_string(text, out)?,
        Kind::Point => write_point(text, out)?,
        Kind::Box => write_box(text, out)?,
        Kind::Bytea(mode) => write_bytea(mode, text, out)?,
        Kind::Json => write_embedded_json(text, out)?,
        Kind::Date => write_date(text, out)?,
        Kind::Time(unit) => write_time(unit, text, out)?,
        Kind::TimeTz => write_timetz(text, out)?,
        Kind::Timestamp(unit) => write_timestamp(unit, text, out)?,
        Kind::TimestampTz => write_timestamptz(type_modifier, text, out)?,
        Kind::Interval(IntervalHandlingMode::Numeric) => write_int(out, parse_interval(text)?),
        Kind::Interval(IntervalHandlingMode::String) => write_interval_string(text, out)?,
    }
    Ok(())
}

//! Integers, floating-point numbers, `numeric` and `money` in each `decimal.handling.mode`.

use super::cursor::{Cursor, write_int};
use super::kind::{Kind, ValueError};
use super::text::write_ascii_string;
use crate::event::decimal::write_unscaled;

/// Parses a decimal integer in JSON's form (no `+`, no leading zeros) that fits in an `i64`.
pub(super) fn parse_integer(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix(b"-") {
        Some(digits) => (true, digits),
        None => (false, text),
    };
    if digits.is_empty() || (digits.len() > 1 && digits.first() == Some(&b'0')) {
        return None;
    }
    let mut value: i64 = 0;
    for &digit in digits {
        if !digit.is_ascii_digit() {
            return None;
        }
        let digit = i64::from(digit - b'0');
        // Accumulating negatively reaches i64::MIN too.
        value = value.checked_mul(10)?;
        value = if negative {
            value.checked_sub(digit)?
        } else {
            value.checked_add(digit)?
        };
    }
    Some(value)
}

/// Appends a `float4` (`single`) or `float8`: a JSON number, or a string for `NaN`, `Infinity`
/// and `-Infinity`, which JSON numbers cannot express. The digits are Java's (Debezium's):
/// PostgreSQL's shortest exact form, except that where it has one significant digit Java writes
/// the two-digit decimal nearest the value (`1e-45` → `1.4E-45`, `5e-324` → `4.9E-324`).
pub(super) fn write_float(text: &[u8], single: bool, out: &mut Vec<u8>) -> Result<(), ValueError> {
    if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
        write_ascii_string(text, out);
        return Ok(());
    }
    // The text must be a JSON number as it stands and, parsed, finite: JSON parsers refuse
    // numbers that overflow a double.
    let finite = is_json_number(text)
        && std::str::from_utf8(text)
            .ok()
            .and_then(|text| text.parse::<f64>().ok())
            .is_some_and(f64::is_finite);
    if !finite {
        return Err(Kind::Float.invalid());
    }
    let mantissa = text
        .split(|b| *b == b'e' || *b == b'E')
        .next()
        .unwrap_or(text);
    let significant: Vec<u8> = mantissa
        .iter()
        .copied()
        .filter(u8::is_ascii_digit)
        .skip_while(|b| *b == b'0')
        .collect();
    let trimmed = significant.len() - significant.iter().rev().take_while(|b| **b == b'0').count();
    if trimmed == 1 {
        let text = std::str::from_utf8(text).unwrap_or_default();
        let two = if single {
            text.parse::<f32>().map(|v| format!("{v:.1e}")).ok()
        } else {
            text.parse::<f64>().map(|v| format!("{v:.1e}")).ok()
        };
        // Only when the second digit is not 0: otherwise the value is the same.
        if let Some(two) = two.filter(|t| t.split('e').next().is_some_and(|m| !m.ends_with('0'))) {
            out.extend_from_slice(two.as_bytes());
            return Ok(());
        }
    }
    out.extend_from_slice(text);
    Ok(())
}

/// Appends an exact decimal as the nearest 64-bit float (Debezium's
/// `decimal.handling.mode=double`, `BigDecimal.doubleValue()`), in the shortest form that
/// reads back as the same float; a value past the float range is `"Infinity"` or
/// `"-Infinity"`, as Java's conversion makes it.
pub(super) fn write_double(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let value = std::str::from_utf8(text)
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .ok_or(Kind::NumericDouble.invalid())?;
    if value.is_infinite() {
        write_ascii_string(
            if value > 0.0 {
                b"Infinity"
            } else {
                b"-Infinity"
            },
            out,
        );
        return Ok(());
    }
    // `{:?}` is the shortest round-trip form, with an exponent for very large or small values.
    write_float(format!("{value:?}").as_bytes(), false, out)
}

/// Whether `text` is a number in JSON's grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]?
/// [0-9]+)?`.
pub(super) fn is_json_number(text: &[u8]) -> bool {
    let mut cursor = Cursor::new(text);
    cursor.eat(b'-');
    match cursor.peek() {
        Some(b'0') => cursor.pos += 1,
        Some(b'1'..=b'9') => {
            cursor.skip_digits();
        }
        _ => return false,
    }
    if cursor.eat(b'.') && cursor.skip_digits() == 0 {
        return false;
    }
    if cursor.eat(b'e') || cursor.eat(b'E') {
        if !cursor.eat(b'+') {
            cursor.eat(b'-');
        }
        if cursor.skip_digits() == 0 {
            return false;
        }
    }
    cursor.at_end()
}

/// Appends a `numeric` as a string of its exact decimal text (Debezium's
/// `decimal.handling.mode=string`); `NaN` and the infinities keep their names.
pub(super) fn write_numeric(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let special: &[u8] = match text {
        b"NaN" => b"NAN",
        b"Infinity" => b"POSITIVE_INFINITY",
        b"-Infinity" => b"NEGATIVE_INFINITY",
        _ => {
            split_decimal(text).ok_or(Kind::Numeric.invalid())?;
            text
        }
    };
    write_ascii_string(special, out);
    Ok(())
}

/// A decimal's text `-?digits(.digits)?` as (negative, integer digits, fraction digits).
pub(super) fn split_decimal(text: &[u8]) -> Option<(bool, &str, &str)> {
    let text = std::str::from_utf8(text).ok()?;
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = rest.split_once('.').unwrap_or((rest, ""));
    let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    (!int.is_empty() && digits(int) && digits(frac) && (!frac.is_empty() || !rest.ends_with('.')))
        .then_some((negative, int, frac))
}

/// `numeric` in Debezium's `precise` mode: with a declared scale, base64 of the unscaled
/// value's bytes (`org.apache.kafka.connect.data.Decimal`); without one,
/// `{"scale":s,"value":…}` with trailing fraction zeros dropped
/// (`io.debezium.data.VariableScaleDecimal`). NaN and the infinities, which neither can hold,
/// are `null` (as Debezium).
pub(super) fn write_numeric_precise(
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    if matches!(text, b"NaN" | b"Infinity" | b"-Infinity") {
        out.extend_from_slice(b"null");
        return Ok(());
    }
    let (negative, int, frac) = split_decimal(text).ok_or(Kind::Numeric.invalid())?;
    if type_modifier >= 4 {
        // numeric(p, s): PostgreSQL prints exactly s fraction digits.
        write_unscaled(negative, &format!("{int}{frac}"), out);
    } else {
        let frac = frac.trim_end_matches('0');
        out.extend_from_slice(b"{\"scale\":");
        write_int(out, frac.len() as i64);
        out.extend_from_slice(b",\"value\":");
        write_unscaled(negative, &format!("{int}{frac}"), out);
        out.push(b'}');
    }
    Ok(())
}

/// A `money` text as PostgreSQL formats it (`-$1,234.56`, `($1.00)`, with `lc_monetary`'s
/// symbol and grouping) as (negative, integer digits, `digits` fraction digits), rounded half
/// up to Debezium's `money.fraction.digits`.
pub(super) fn parse_money(text: &[u8], digits: u8) -> Result<(bool, String, String), ValueError> {
    let invalid = ValueError::Invalid { type_name: "money" };
    let text = std::str::from_utf8(text).map_err(|_| invalid)?;
    let negative = text.contains('-') || text.contains('(');
    let (int, frac) = text.rsplit_once('.').unwrap_or((text, ""));
    let int: String = int.chars().filter(char::is_ascii_digit).collect();
    let mut frac: String = frac.chars().filter(char::is_ascii_digit).collect();
    if int.is_empty() && frac.is_empty() {
        return Err(invalid);
    }
    let digits = usize::from(digits);
    let round_up = frac.as_bytes().get(digits).is_some_and(|d| *d >= b'5');
    frac.truncate(digits);
    while frac.len() < digits {
        frac.push('0');
    }
    if !round_up {
        return Ok((negative, int, frac));
    }
    // Add one unit of the last kept digit to int.frac, as decimal text.
    let mut all: Vec<u8> = format!("{int}{frac}").into_bytes();
    let mut carry = true;
    for digit in all.iter_mut().rev() {
        if *digit == b'9' {
            *digit = b'0';
        } else {
            *digit += 1;
            carry = false;
            break;
        }
    }
    if carry {
        all.insert(0, b'1');
    }
    let split = all.len() - digits;
    let frac = String::from_utf8_lossy(&all[split..]).into_owned();
    let int = String::from_utf8_lossy(&all[..split]).into_owned();
    Ok((negative, int, frac))
}

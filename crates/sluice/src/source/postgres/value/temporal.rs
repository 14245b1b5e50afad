//! `date`, `time`, `timetz`, `timestamp`, `timestamptz` and `interval` as Debezium writes them.

use super::cursor::{
    Cursor, DAY_MICROS, HOUR_MICROS, MINUTE_MICROS, MONTH_MICROS, SECOND_MICROS, strip_bc,
    write_clock, write_int, write_year,
};
use super::kind::{Kind, ValueError};
use super::text::write_ascii_string;
use crate::event::IntervalHandlingMode;
use crate::event::TemporalUnit;
use crate::event::options::IntervalParts;
use crate::event::options::write_interval_iso;
use crate::event::temporal::civil_from_days;
use crate::event::temporal::write_padded;

/// The PostgreSQL JDBC driver's `infinity` timestamp (milliseconds), which Debezium writes as
/// is for a `timestamp(0..3)` (`io.debezium.time.Timestamp`).
pub(super) const TIMESTAMP_INFINITY_MILLIS: i64 = 9_223_372_036_825_200_000;
/// The same for `-infinity`.
pub(super) const TIMESTAMP_NEG_INFINITY_MILLIS: i64 = -9_223_372_036_832_400_000;
/// Debezium's `date` of `infinity` (the driver's sentinel, converted to days with overflow).
pub(super) const DATE_INFINITY_DAYS: i64 = -622_191_234;
/// Debezium's `date` of `-infinity`.
pub(super) const DATE_NEG_INFINITY_DAYS: i64 = -625_821_272;
/// Appends a `date` as days since 1970-01-01 (Debezium's `io.debezium.time.Date`);
/// `infinity` and `-infinity` become the day numbers Debezium writes for them.
pub(super) fn write_date(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let infinity = match text {
        b"infinity" => Some(DATE_INFINITY_DAYS),
        b"-infinity" => Some(DATE_NEG_INFINITY_DAYS),
        _ => None,
    };
    if let Some(days) = infinity {
        write_int(out, days);
        return Ok(());
    }
    let (body, bc) = strip_bc(text);
    let mut cursor = Cursor::new(body);
    let days = cursor
        .date(bc)
        .filter(|_| cursor.at_end())
        .ok_or(Kind::Date.invalid())?;
    // The JDBC driver Debezium reads snapshots (and arrays) with drops the era: a `BC` date is
    // the same day of the same-numbered year AD.
    let days = if bc {
        Cursor::new(body).date(false).unwrap_or(days)
    } else {
        days
    };
    write_int(out, days);
    Ok(())
}

/// Appends a `time` as microseconds or milliseconds since midnight (the unit
/// `time_precision_mode` chose for the column).
pub(super) fn write_time(
    unit: TemporalUnit,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    let mut cursor = Cursor::new(text);
    let micros = cursor
        .time_of_day()
        .filter(|_| cursor.at_end())
        .ok_or(Kind::Time(unit).invalid())?;
    if unit == TemporalUnit::Millis {
        write_int(out, micros / 1000);
    } else {
        write_int(out, micros);
    }
    Ok(())
}

/// Appends a `timetz` as a string `HH:MM:SS[.ffffff]Z` normalized to UTC, trailing zeros of
/// the fraction trimmed (`io.debezium.time.ZonedTime`).
pub(super) fn write_timetz(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let mut cursor = Cursor::new(text);
    let (micros, offset) = cursor
        .time_of_day()
        .and_then(|micros| Some((micros, cursor.offset_seconds()?)))
        .filter(|_| cursor.at_end())
        .ok_or(Kind::TimeTz.invalid())?;
    // The end of the day at UTC stays 24:00:00, as Debezium keeps it; anything else wraps.
    let utc = if micros == DAY_MICROS && offset == 0 {
        DAY_MICROS
    } else {
        (micros - offset * SECOND_MICROS).rem_euclid(DAY_MICROS)
    };
    out.push(b'"');
    write_clock(utc, None, out);
    out.extend_from_slice(b"Z\"");
    Ok(())
}

/// Appends a `timestamp` as microseconds or milliseconds since the epoch (the unit
/// `time_precision_mode` chose for the column). `infinity` and `-infinity` become the values
/// Debezium uses for them.
pub(super) fn write_timestamp(
    unit: TemporalUnit,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    // Debezium: the driver's sentinels as they are in milliseconds, the `i64` limits in
    // microseconds.
    let millis = unit == TemporalUnit::Millis;
    let infinity = match (text, millis) {
        (b"infinity", true) => Some(TIMESTAMP_INFINITY_MILLIS),
        (b"-infinity", true) => Some(TIMESTAMP_NEG_INFINITY_MILLIS),
        (b"infinity", false) => Some(i64::MAX),
        (b"-infinity", false) => Some(i64::MIN),
        _ => None,
    };
    if let Some(value) = infinity {
        write_int(out, value);
        return Ok(());
    }
    let exact = parse_timestamp(Kind::Timestamp(unit), text)?;
    if millis {
        // Milliseconds reach past the microseconds' `i64` range (year 294276 is
        // 9224318015999999 ms, as Debezium writes it).
        let millis = i64::try_from(exact.div_euclid(1000))
            .map_err(|_| Kind::Timestamp(unit).out_of_range())?;
        write_int(out, millis);
    } else {
        // Past the `i64` range, Debezium's Java arithmetic (saturate, then wrap).
        write_int(out, crate::event::temporal::java_epoch_micros(exact));
    }
    Ok(())
}

/// Appends a `timestamptz` as an ISO-8601 string in UTC (`io.debezium.time.ZonedTimestamp`)
/// with as many fractional digits as the column's precision, 6 when it has none;
/// `infinity` and `-infinity` stay strings of their names.
pub(super) fn write_timestamptz(
    type_modifier: i32,
    text: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ValueError> {
    if matches!(text, b"infinity" | b"-infinity") {
        write_ascii_string(text, out);
        return Ok(());
    }
    let micros = parse_timestamp(Kind::TimestampTz, text)?;
    let day_micros = i128::from(DAY_MICROS);
    let days = i64::try_from(micros.div_euclid(day_micros))
        .map_err(|_| Kind::TimestampTz.out_of_range())?;
    // In 0..DAY_MICROS, so it fits.
    let time = i64::try_from(micros.rem_euclid(day_micros)).unwrap_or(0);
    let digits = usize::try_from(type_modifier)
        .ok()
        .filter(|&digits| digits <= 5)
        .unwrap_or(6);
    let (year, month, day) = civil_from_days(days);
    out.push(b'"');
    write_year(year, out);
    out.push(b'-');
    write_padded(u64::from(month), 2, out);
    out.push(b'-');
    write_padded(u64::from(day), 2, out);
    out.push(b'T');
    write_clock(time, Some(digits), out);
    out.extend_from_slice(b"Z\"");
    Ok(())
}

/// Parses a `timestamp` (`YYYY-MM-DD HH:MM:SS[.f][ BC]`) or, for [`Kind::TimestampTz`], a
/// `timestamptz` (the same with an offset before the era) into microseconds since the epoch,
/// in UTC. The result is wide: PostgreSQL's latest timestamps (year 294276) are past `i64`
/// microseconds since 1970.
pub(super) fn parse_timestamp(kind: Kind, text: &[u8]) -> Result<i128, ValueError> {
    let (body, bc) = strip_bc(text);
    let mut cursor = Cursor::new(body);
    let days = cursor.date(bc).ok_or(kind.invalid())?;
    if !cursor.eat(b' ') {
        return Err(kind.invalid());
    }
    let time = cursor.time_of_day().ok_or(kind.invalid())?;
    let offset = if kind == Kind::TimestampTz {
        cursor.offset_seconds().ok_or(kind.invalid())?
    } else {
        0
    };
    if !cursor.at_end() {
        return Err(kind.invalid());
    }
    Ok(i128::from(days) * i128::from(DAY_MICROS) + i128::from(time)
        - i128::from(offset) * i128::from(SECOND_MICROS))
}

/// Parses an `interval` in `iso_8601` style (`P1Y2M3DT4H5M6.5S`, `PT0S`, with a sign on any
/// component) into microseconds (`io.debezium.time.MicroDuration`), a month counting 30.4375
/// days as in Debezium.
///
/// The sum is exact, in integers; Debezium computes it in floating point and truncates, so its
/// value can be 1 µs off for some fractional seconds.
pub(super) fn parse_interval(text: &[u8]) -> Result<i64, ValueError> {
    let invalid = Kind::Interval(IntervalHandlingMode::Numeric).invalid();
    let body = text.strip_prefix(b"P").ok_or(invalid)?;
    let mut cursor = Cursor::new(body);
    let mut total: i128 = 0;
    let mut in_time = false;
    let mut components = 0;
    while !cursor.at_end() {
        if !in_time && cursor.eat(b'T') {
            in_time = true;
            components = 0;
            continue;
        }
        let negative = cursor.eat(b'-');
        if !negative {
            cursor.eat(b'+');
        }
        let whole = cursor.number(1, 19).ok_or(invalid)?;
        let fraction = if in_time && cursor.peek() == Some(b'.') {
            Some(cursor.fraction_micros().ok_or(invalid)?)
        } else {
            None
        };
        let unit = cursor.next().ok_or(invalid)?;
        let scale = match (in_time, unit) {
            (false, b'Y') => 12 * MONTH_MICROS,
            (false, b'M') => MONTH_MICROS,
            (false, b'W') => 7 * DAY_MICROS,
            (false, b'D') => DAY_MICROS,
            (true, b'H') => HOUR_MICROS,
            (true, b'M') => MINUTE_MICROS,
            (true, b'S') => SECOND_MICROS,
            _ => return Err(invalid),
        };
        if fraction.is_some() && unit != b'S' {
            return Err(invalid);
        }
        let value = i128::from(whole) * i128::from(scale) + i128::from(fraction.unwrap_or(0));
        let value = if negative { -value } else { value };
        total = total
            .checked_add(value)
            .ok_or(Kind::Interval(IntervalHandlingMode::Numeric).out_of_range())?;
        components += 1;
    }
    // `P` alone, or a `T` with nothing after it, is not an interval.
    if components == 0 {
        return Err(invalid);
    }
    // Debezium saturates an interval past the `i64` range at its limits.
    Ok(i64::try_from(total).unwrap_or(if total < 0 { i64::MIN } else { i64::MAX }))
}

/// Appends an `interval` in `iso_8601` style as Debezium's `interval.handling.mode=string`
/// (`io.debezium.time.Interval`): the components as the server splits them, each one written.
pub(super) fn write_interval_string(text: &[u8], out: &mut Vec<u8>) -> Result<(), ValueError> {
    let invalid = Kind::Interval(IntervalHandlingMode::String).invalid();
    let body = std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.strip_prefix('P'))
        .ok_or(invalid)?;
    let mut parts = IntervalParts {
        seconds: "0",
        ..IntervalParts::default()
    };
    let (date, time) = body.split_once('T').unwrap_or((body, ""));
    let mut components = 0;
    for (part, in_time) in [(date, false), (time, true)] {
        let mut rest = part;
        while !rest.is_empty() {
            let end = rest
                .find(|c: char| c.is_ascii_alphabetic())
                .ok_or(invalid)?;
            let (number, unit) = (&rest[..end], rest.as_bytes()[end]);
            rest = &rest[end + 1..];
            components += 1;
            if in_time && unit == b'S' {
                let (negative, digits) = match number.strip_prefix('-') {
                    Some(d) => (true, d),
                    None => (false, number.strip_prefix('+').unwrap_or(number)),
                };
                let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
                if whole.is_empty()
                    || !whole
                        .bytes()
                        .chain(fraction.bytes())
                        .all(|b| b.is_ascii_digit())
                {
                    return Err(invalid);
                }
                parts.seconds_negative = negative;
                parts.seconds = whole;
                parts.fraction = fraction;
                continue;
            }
            let value: i64 = number.parse().map_err(|_| invalid)?;
            let slot = match (in_time, unit) {
                (false, b'Y') => &mut parts.years,
                (false, b'M') => &mut parts.months,
                (false, b'D') => &mut parts.days,
                (true, b'H') => &mut parts.hours,
                (true, b'M') => &mut parts.minutes,
                _ => return Err(invalid),
            };
            *slot = value;
        }
    }
    if components == 0 {
        return Err(invalid);
    }
    write_interval_iso(&parts, out);
    Ok(())
}

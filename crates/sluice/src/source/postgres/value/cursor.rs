//! A cursor over a value's text, and the integer and clock writers the temporal and numeric
//! mappings share.

use crate::event::temporal::days_from_civil;
use crate::event::temporal::write_padded;

/// Microseconds in a second.
pub(super) const SECOND_MICROS: i64 = 1_000_000;
/// Microseconds in a minute.
pub(super) const MINUTE_MICROS: i64 = 60 * SECOND_MICROS;
/// Microseconds in an hour.
pub(super) const HOUR_MICROS: i64 = 60 * MINUTE_MICROS;
/// Microseconds in a day.
pub(super) const DAY_MICROS: i64 = 24 * HOUR_MICROS;
/// Microseconds in Debezium's average month of 365.25 / 12 = 30.4375 days (exactly
/// 2,629,800 seconds).
pub(super) const MONTH_MICROS: i64 = 2_629_800 * SECOND_MICROS;
/// Splits PostgreSQL's era suffix ` BC` off a date or timestamp.
pub(super) fn strip_bc(text: &[u8]) -> (&[u8], bool) {
    match text.strip_suffix(b" BC") {
        Some(body) => (body, true),
        None => (text, false),
    }
}

/// Appends a time of day in microseconds as `HH:MM:SS`, then the fraction: exactly `digits`
/// digits when given (none for 0), else the six digits with trailing zeros trimmed (none for
/// a whole second).
pub(super) fn write_clock(micros: i64, digits: Option<usize>, out: &mut Vec<u8>) {
    let micros = micros.unsigned_abs();
    let seconds = micros / 1_000_000;
    let fraction = micros % 1_000_000;
    write_padded(seconds / 3600, 2, out);
    out.push(b':');
    write_padded(seconds / 60 % 60, 2, out);
    out.push(b':');
    write_padded(seconds % 60, 2, out);
    let (fraction, digits) = match digits {
        Some(digits) => {
            let digits = digits.min(6);
            // Six digits, keeping the first `digits` of them.
            let divisor = 10u64.pow(u32::try_from(6 - digits).unwrap_or(0));
            (fraction / divisor, digits)
        }
        None => {
            let mut fraction = fraction;
            let mut digits = 6;
            while fraction != 0 && fraction.is_multiple_of(10) {
                fraction /= 10;
                digits -= 1;
            }
            (fraction, if fraction == 0 { 0 } else { digits })
        }
    };
    if digits > 0 {
        out.push(b'.');
        write_padded(fraction, digits, out);
    }
}

/// Appends a year as Java's ISO formatter does: four digits at least, a `+` above 9999, a `-`
/// before the zero-padded magnitude of a negative (astronomical) year.
pub(super) fn write_year(year: i64, out: &mut Vec<u8>) {
    if year > 9999 {
        out.push(b'+');
    } else if year < 0 {
        out.push(b'-');
    }
    write_padded(year.unsigned_abs(), 4, out);
}

/// Appends an integer in decimal.
pub(super) fn write_int(out: &mut Vec<u8>, value: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

/// The number of days in a month of an (astronomical) year.
pub(super) fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        _ => 28,
    }
}

/// A checked reader over the text of one value.
pub(super) struct Cursor<'a> {
    /// The text.
    text: &'a [u8],
    /// The offset of the next unread byte.
    pub(super) pos: usize,
}

impl<'a> Cursor<'a> {
    /// Starts reading `text` at its first byte.
    pub(super) fn new(text: &'a [u8]) -> Self {
        Self { text, pos: 0 }
    }

    /// The next byte, without taking it.
    pub(super) fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    /// Takes the next byte.
    pub(super) fn next(&mut self) -> Option<u8> {
        let byte = self.peek()?;
        self.pos += 1;
        Some(byte)
    }

    /// Takes the next byte if it is `byte`.
    pub(super) fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Whether everything was read.
    pub(super) fn at_end(&self) -> bool {
        self.pos >= self.text.len()
    }

    /// Takes ASCII digits while there are any; returns how many.
    pub(super) fn skip_digits(&mut self) -> usize {
        let start = self.pos;
        while self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            self.pos += 1;
        }
        self.pos - start
    }

    /// Reads a decimal number of `min` to `max` digits (at most 19, so it fits).
    pub(super) fn number(&mut self, min: usize, max: usize) -> Option<u64> {
        let mut value: u64 = 0;
        let mut count = 0;
        while count < max {
            match self.peek() {
                Some(digit @ b'0'..=b'9') => {
                    value = value * 10 + u64::from(digit - b'0');
                    self.pos += 1;
                    count += 1;
                }
                _ => break,
            }
        }
        (count >= min).then_some(value)
    }

    /// Reads `.` and 1 to 6 digits as microseconds.
    pub(super) fn fraction_micros(&mut self) -> Option<i64> {
        if !self.eat(b'.') {
            return None;
        }
        let start = self.pos;
        let value = self.number(1, 6)?;
        let digits = self.pos - start;
        if self.peek().is_some_and(|byte| byte.is_ascii_digit()) {
            return None;
        }
        let scale = 10u64.pow(u32::try_from(6 - digits).ok()?);
        i64::try_from(value * scale).ok()
    }

    /// Reads a date `Y…Y-MM-DD` (the year in 1 to 9 digits) as days since 1970-01-01; `bc`
    /// says the era suffix was ` BC`.
    pub(super) fn date(&mut self, bc: bool) -> Option<i64> {
        let year = i64::try_from(self.number(1, 9)?).ok()?;
        if !self.eat(b'-') {
            return None;
        }
        let month = u32::try_from(self.number(2, 2)?).ok()?;
        if !self.eat(b'-') {
            return None;
        }
        let day = u32::try_from(self.number(2, 2)?).ok()?;
        // There is no year 0 in either era; 1 BC is astronomical year 0.
        if year < 1 {
            return None;
        }
        let year = if bc { 1 - year } else { year };
        if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
            return None;
        }
        Some(days_from_civil(year, month, day))
    }

    /// Reads a time of day `HH:MM:SS[.f]` as microseconds; `24:00:00` is the end of the day.
    pub(super) fn time_of_day(&mut self) -> Option<i64> {
        let hour = i64::try_from(self.number(2, 2)?).ok()?;
        if !self.eat(b':') {
            return None;
        }
        let minute = i64::try_from(self.number(2, 2)?).ok()?;
        if !self.eat(b':') {
            return None;
        }
        let second = i64::try_from(self.number(2, 2)?).ok()?;
        let fraction = if self.peek() == Some(b'.') {
            self.fraction_micros()?
        } else {
            0
        };
        if hour > 24 || minute > 59 || second > 59 {
            return None;
        }
        let micros =
            hour * HOUR_MICROS + minute * MINUTE_MICROS + second * SECOND_MICROS + fraction;
        (micros <= DAY_MICROS).then_some(micros)
    }

    /// Reads a UTC offset `±HH[:MM[:SS]]` as seconds east of UTC.
    pub(super) fn offset_seconds(&mut self) -> Option<i64> {
        let sign = match self.next()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let hours = i64::try_from(self.number(2, 2)?).ok()?;
        let minutes = if self.eat(b':') {
            i64::try_from(self.number(2, 2)?).ok()?
        } else {
            0
        };
        let seconds = if self.eat(b':') {
            i64::try_from(self.number(2, 2)?).ok()?
        } else {
            0
        };
        if minutes > 59 || seconds > 59 {
            return None;
        }
        Some(sign * (hours * 3600 + minutes * 60 + seconds))
    }
}

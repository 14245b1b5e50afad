//! Java's `SimpleDateFormat` patterns (TimestampConverter's `format`), in UTC, on
//! `java.util.GregorianCalendar`'s calendar: Julian before 1582-10-15, Gregorian from then.
//!
//! Written by hand: chrono's and jiff's formats are strftime's (`%Y-%m-%d`), not Java's
//! letters, neither counts `S` as milliseconds zero-padded to the letters' count as Java does
//! ("SSSSSS" writes 123 ms as "000123"), both are proleptic Gregorian, and both stop at years
//! Java's `Date` still formats (Debezium's infinity timestamps, year 292278994).

/// One piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    /// Text written as it is.
    Literal(String),
    /// A pattern letter repeated `count` times.
    Field(char, usize),
}

/// A parsed `SimpleDateFormat` pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JavaFormat {
    pattern: String,
    pieces: Vec<Piece>,
}

/// The letters sluice writes and reads.
const LETTERS: &str = "GyMdHkKhmsSaEuZXz";
const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];
const MILLIS_PER_DAY: i64 = 86_400_000;
/// 1582-10-15, the first Gregorian day, in days since 1970-01-01.
const GREGORIAN_CUTOVER_DAYS: i64 = -141_427;

impl JavaFormat {
    /// Parses `pattern`.
    ///
    /// # Errors
    ///
    /// A letter sluice does not apply (named), or an unclosed quote.
    pub fn new(pattern: &str) -> Result<Self, String> {
        let mut pieces = Vec::new();
        let mut chars = pattern.chars().peekable();
        let mut literal = String::new();
        while let Some(c) = chars.next() {
            if c == '\'' {
                if chars.peek() == Some(&'\'') {
                    chars.next();
                    literal.push('\'');
                    continue;
                }
                loop {
                    match chars.next() {
                        None => return Err(format!("{pattern:?}: a quote (') is not closed")),
                        Some('\'') if chars.peek() == Some(&'\'') => {
                            chars.next();
                            literal.push('\'');
                        }
                        Some('\'') => break,
                        Some(other) => literal.push(other),
                    }
                }
            } else if c.is_ascii_alphabetic() {
                if !LETTERS.contains(c) {
                    return Err(format!(
                        "{pattern:?}: the letter {c:?} is not applied by sluice (it writes {}; quote literal text: 'T')",
                        LETTERS
                            .chars()
                            .map(String::from)
                            .collect::<Vec<_>>()
                            .join(" ")
                    ));
                }
                let mut count = 1;
                while chars.peek() == Some(&c) {
                    chars.next();
                    count += 1;
                }
                if !literal.is_empty() {
                    pieces.push(Piece::Literal(std::mem::take(&mut literal)));
                }
                pieces.push(Piece::Field(c, count));
            } else {
                literal.push(c);
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(Self {
            pattern: pattern.to_owned(),
            pieces,
        })
    }

    /// The pattern as configured.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// `millis` since the epoch written by the pattern, in UTC.
    pub fn format(&self, millis: i64) -> String {
        let days = millis.div_euclid(MILLIS_PER_DAY);
        let of_day = millis.rem_euclid(MILLIS_PER_DAY);
        let (year, month, day) = civil(days);
        let (hour, minute, second, milli) = (
            of_day / 3_600_000,
            of_day / 60_000 % 60,
            of_day / 1000 % 60,
            of_day % 1000,
        );
        let weekday = (days + 4).rem_euclid(7) as usize;
        let mut out = String::with_capacity(self.pattern.len() + 8);
        let num = |out: &mut String, value: i64, count: usize| {
            out.push_str(&format!("{value:0count$}"));
        };
        for piece in &self.pieces {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                Piece::Field(letter, count) => {
                    let count = *count;
                    match letter {
                        'G' => out.push_str(if year > 0 { "AD" } else { "BC" }),
                        'y' => {
                            let of_era = if year > 0 { year } else { 1 - year };
                            if count == 2 {
                                num(&mut out, of_era % 100, 2);
                            } else {
                                num(&mut out, of_era, count);
                            }
                        }
                        'M' if count >= 4 => out.push_str(MONTHS[month as usize - 1]),
                        'M' if count == 3 => out.push_str(&MONTHS[month as usize - 1][..3]),
                        'M' => num(&mut out, month, count),
                        'd' => num(&mut out, day, count),
                        'H' => num(&mut out, hour, count),
                        'k' => num(&mut out, if hour == 0 { 24 } else { hour }, count),
                        'K' => num(&mut out, hour % 12, count),
                        'h' => num(&mut out, if hour % 12 == 0 { 12 } else { hour % 12 }, count),
                        'm' => num(&mut out, minute, count),
                        's' => num(&mut out, second, count),
                        'S' => num(&mut out, milli, count),
                        'a' => out.push_str(if hour < 12 { "AM" } else { "PM" }),
                        'E' if count >= 4 => out.push_str(DAYS[weekday]),
                        'E' => out.push_str(&DAYS[weekday][..3]),
                        'u' => num(
                            &mut out,
                            if weekday == 0 { 7 } else { weekday as i64 },
                            count,
                        ),
                        'Z' => out.push_str("+0000"),
                        'X' => out.push('Z'),
                        'z' if count >= 4 => out.push_str("Coordinated Universal Time"),
                        'z' => out.push_str("UTC"),
                        _ => {}
                    }
                }
            }
        }
        out
    }

    /// `text` read by the pattern (UTC; numbers as wide as the next field allows), as
    /// milliseconds since the epoch.
    ///
    /// # Errors
    ///
    /// `text` does not match the pattern.
    pub fn parse(&self, text: &str) -> Result<i64, String> {
        let fail = || {
            format!(
                "Could not parse timestamp: value ({text}) does not match pattern ({})",
                self.pattern
            )
        };
        let (mut year, mut month, mut day) = (1970_i64, 1_i64, 1_i64);
        let (mut hour, mut minute, mut second, mut milli) = (0_i64, 0_i64, 0_i64, 0_i64);
        let (mut bc, mut pm, mut twelve) = (false, false, false);
        let mut rest = text;
        for (n, piece) in self.pieces.iter().enumerate() {
            match piece {
                Piece::Literal(lit) => rest = rest.strip_prefix(lit.as_str()).ok_or_else(fail)?,
                Piece::Field(letter, count) => {
                    // Java reads a number field followed directly by another number field at
                    // its letters' width, otherwise as many digits as there are.
                    let adjacent = matches!(self.pieces.get(n + 1), Some(Piece::Field(c, _)) if "yMdHkKhmsSu".contains(*c));
                    let number = |rest: &mut &str| -> Result<i64, String> {
                        let width = if adjacent {
                            *count
                        } else {
                            rest.bytes().take_while(u8::is_ascii_digit).count()
                        };
                        let digits = rest.get(..width).ok_or_else(fail)?;
                        if width == 0 || !digits.bytes().all(|b| b.is_ascii_digit()) {
                            return Err(fail());
                        }
                        *rest = &rest[width..];
                        digits.parse::<i64>().map_err(|_| fail())
                    };
                    let word = |rest: &mut &str, words: &[&str], len: Option<usize>| {
                        for (i, w) in words.iter().enumerate() {
                            let w = len.map_or(*w, |l| &w[..l.min(w.len())]);
                            if rest.len() >= w.len()
                                && rest.is_char_boundary(w.len())
                                && rest[..w.len()].eq_ignore_ascii_case(w)
                            {
                                *rest = &rest[w.len()..];
                                return Ok(i);
                            }
                        }
                        Err(fail())
                    };
                    match letter {
                        'G' => bc = word(&mut rest, &["AD", "BC"], None)? == 1,
                        'y' => {
                            year = number(&mut rest)?;
                            if *count <= 2 && year < 100 {
                                // Java: within 80 years before and 20 after now; sluice: 2000–2099
                                // for the common case of recent dates.
                                year += 2000;
                            }
                        }
                        'M' if *count >= 3 => {
                            month = word(&mut rest, &MONTHS, (*count == 3).then_some(3))? as i64 + 1
                        }
                        'M' => month = number(&mut rest)?,
                        'd' => day = number(&mut rest)?,
                        'H' | 'k' => hour = number(&mut rest)? % 24,
                        'K' | 'h' => {
                            hour = number(&mut rest)? % 12;
                            twelve = true;
                        }
                        'm' => minute = number(&mut rest)?,
                        's' => second = number(&mut rest)?,
                        'S' => milli = number(&mut rest)?,
                        'a' => pm = word(&mut rest, &["AM", "PM"], None)? == 1,
                        'E' => {
                            word(&mut rest, &DAYS, (*count <= 3).then_some(3))?;
                        }
                        'u' => {
                            number(&mut rest)?;
                        }
                        'Z' | 'X' | 'z' => {
                            // UTC only: "Z", "+0000", "+00:00", "UTC", "GMT".
                            word(
                                &mut rest,
                                &["Z", "+0000", "+00:00", "+00", "UTC", "GMT"],
                                None,
                            )?;
                        }
                        _ => return Err(fail()),
                    }
                }
            }
        }
        // Java's parse(String) reads a prefix: what follows is ignored.
        if twelve && pm {
            hour += 12;
        }
        if bc {
            year = 1 - year;
        }
        let days = days_of(year, month, day);
        Ok(days * MILLIS_PER_DAY + hour * 3_600_000 + minute * 60_000 + second * 1000 + milli)
    }
}

/// The date of `days` since 1970-01-01 in GregorianCalendar's calendar (year 0 = 1 BC).
fn civil(days: i64) -> (i64, i64, i64) {
    if days >= GREGORIAN_CUTOVER_DAYS {
        // Howard Hinnant's civil_from_days.
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        (year, month, day)
    } else {
        // The Julian calendar from the Julian day number.
        let c = days + 2_440_588 + 32_082;
        let d = (4 * c + 3).div_euclid(1461);
        let e = c - (1461 * d).div_euclid(4);
        let m = (5 * e + 2).div_euclid(153);
        let day = e - (153 * m + 2).div_euclid(5) + 1;
        let month = m + 3 - 12 * (m / 10);
        let year = d - 4800 + m / 10;
        (year, month, day)
    }
}

/// Days since 1970-01-01 of a date in GregorianCalendar's calendar.
fn days_of(year: i64, month: i64, day: i64) -> i64 {
    let a = i64::from(month <= 2);
    let y = year + 4800 - a;
    let m = month + 12 * a - 3;
    let gregorian = day + (153 * m + 2) / 5 + 365 * y + y.div_euclid(4) - y.div_euclid(100)
        + y.div_euclid(400)
        - 32_045
        - 2_440_588;
    if gregorian >= GREGORIAN_CUTOVER_DAYS {
        gregorian
    } else {
        day + (153 * m + 2) / 5 + 365 * y + y.div_euclid(4) - 32_083 - 2_440_588
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_as_simple_date_format_does() {
        let f = JavaFormat::new("yyyy-MM-dd HH:mm:ss.SSS").unwrap();
        // 2016-11-04 13:51:30.123 UTC
        assert_eq!(f.format(1_478_267_490_123), "2016-11-04 13:51:30.123");
        assert_eq!(f.format(-1), "1969-12-31 23:59:59.999");
        // Before 1582-10-15 the Julian calendar: proleptic Gregorian 0001-01-01 is Julian
        // 0001-01-03.
        assert_eq!(f.format(-62_135_596_800_000), "0001-01-03 00:00:00.000");
        assert_eq!(f.format(-12_219_292_800_000), "1582-10-15 00:00:00.000");
        assert_eq!(f.format(-12_219_292_800_001), "1582-10-04 23:59:59.999");
        // Java's S is milliseconds, padded.
        let micro = JavaFormat::new("ss.SSSSSS").unwrap();
        assert_eq!(micro.format(1_123), "01.000123");
        let text = JavaFormat::new("EEE, d MMM yy h:mm a 'at' G''X").unwrap();
        assert_eq!(
            text.format(1_478_267_490_123),
            "Fri, 4 Nov 16 1:51 PM at AD'Z"
        );
        assert!(JavaFormat::new("yyyy-MM-dd'T").is_err());
        assert!(JavaFormat::new("yyyy-ww").unwrap_err().contains("'w'"));
    }

    #[test]
    fn parses_what_it_formats() {
        for pattern in [
            "yyyy-MM-dd HH:mm:ss.SSS",
            "yyyyMMddHHmmssSSS",
            "dd MMM yyyy G hh:mm:ss.SSS a",
        ] {
            let f = JavaFormat::new(pattern).unwrap();
            for millis in [
                0,
                1_478_267_490_123,
                -62_135_596_800_000,
                -12_219_292_800_001,
            ] {
                assert_eq!(f.parse(&f.format(millis)), Ok(millis), "{pattern} {millis}");
            }
        }
        let iso = JavaFormat::new("yyyy-MM-dd'T'HH:mm:ssX").unwrap();
        assert_eq!(iso.parse("1970-01-02T00:00:01Z"), Ok(86_401_000));
        assert!(iso.parse("1970-01-02 00:00:01Z").is_err());
    }
}

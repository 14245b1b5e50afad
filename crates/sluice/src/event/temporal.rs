//! Debezium's temporal arithmetic where it differs from exact arithmetic, shared by every
//! source.

/// Microseconds since the epoch as Debezium's `io.debezium.time.MicroTimestamp` computes
/// them in Java: `TimeUnit.SECONDS.toMicros(epochSecond)` (saturating at the `long` limits)
/// plus the microsecond of the second (wrapping). Equal to `micros` whenever it fits in an
/// `i64`; past that (PostgreSQL's timestamps reach the year 294276) it is Debezium's value.
pub fn java_epoch_micros(micros: i128) -> i64 {
    let seconds = micros.div_euclid(1_000_000);
    let micro_of_second = micros.rem_euclid(1_000_000) as i64;
    let whole = i64::try_from(seconds.saturating_mul(1_000_000)).unwrap_or(if seconds < 0 {
        i64::MIN
    } else {
        i64::MAX
    });
    whole.wrapping_add(micro_of_second)
}

/// Days since 1970-01-01 of a date in the proleptic Gregorian calendar, with astronomical year
/// numbering (year 0 is 1 BC). Valid for any year whose days fit in an `i64` several times.
pub fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    // Howard Hinnant's algorithm: count from 0000-03-01 so that leap days fall at year ends.
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let shifted_month = if month > 2 { month - 3 } else { month + 9 };
    let day_of_year = (153 * shifted_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date (astronomical year, month, day) of a number of days since 1970-01-01; the inverse
/// of [`days_from_civil`].
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let days = days + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // Both are in range by construction: 1..=31 and 1..=12.
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// Appends `value` in decimal, zero-padded to at least `width` digits.
pub fn write_padded(value: u64, width: usize, out: &mut Vec<u8>) {
    let mut buffer = itoa::Buffer::new();
    let digits = buffer.format(value).as_bytes();
    for _ in digits.len()..width {
        out.push(b'0');
    }
    out.extend_from_slice(digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micros_saturate_then_wrap_as_java() {
        assert_eq!(java_epoch_micros(951_825_600_000_001), 951_825_600_000_001);
        assert_eq!(
            java_epoch_micros(-210_863_520_000_000_000),
            -210_863_520_000_000_000
        );
        // 294276-12-31 23:59:59.999999: Debezium's golden value.
        assert_eq!(
            java_epoch_micros(9_224_318_015_999_999_999),
            -9_223_372_036_853_775_810
        );
        assert_eq!(java_epoch_micros(-1), -1);
    }
}

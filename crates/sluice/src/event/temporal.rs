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

//! Debezium's connector options that decide how a column's values are written, by Debezium's
//! names and values (`time.precision.mode` → [`TimePrecisionMode`], …), and the generic
//! encodings they choose between (binary encodings, ISO-8601 intervals, `hstore` maps).
//!
//! One small function per option decides a column's representation (and names Debezium's
//! semantic type for it, for the schema writer); the value writers of every source call
//! these instead of deciding on their own.

use base64::Engine as _;

use super::write_json_str;

/// Debezium's `time.precision.mode`: how `time`, `date` and `timestamp` values are written
/// (`timetz` and `timestamptz` are ISO strings in every mode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimePrecisionMode {
    /// Debezium's default: milliseconds for a precision of 0 to 3, microseconds otherwise.
    #[default]
    Adaptive,
    /// As `adaptive`, but `time` is always microseconds.
    AdaptiveTimeMicroseconds,
    /// Kafka Connect's own logical types: milliseconds, whatever the precision.
    Connect,
}

/// The unit of a `time` or `timestamp` value, with Debezium's semantic type for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemporalUnit {
    /// Milliseconds (`io.debezium.time.Time`/`Timestamp`, or Kafka Connect's in `connect`).
    Millis,
    /// Microseconds (`io.debezium.time.MicroTime`/`MicroTimestamp`).
    Micros,
}

impl TimePrecisionMode {
    /// The unit of a `time` column of this precision (`None`: declared without one).
    pub fn time_unit(self, precision: Option<u32>) -> TemporalUnit {
        match self {
            TimePrecisionMode::Connect => TemporalUnit::Millis,
            TimePrecisionMode::AdaptiveTimeMicroseconds => TemporalUnit::Micros,
            TimePrecisionMode::Adaptive => adaptive_unit(precision),
        }
    }

    /// The unit of a `timestamp` (without time zone) column of this precision.
    pub fn timestamp_unit(self, precision: Option<u32>) -> TemporalUnit {
        match self {
            TimePrecisionMode::Connect => TemporalUnit::Millis,
            TimePrecisionMode::Adaptive | TimePrecisionMode::AdaptiveTimeMicroseconds => {
                adaptive_unit(precision)
            }
        }
    }

    /// Debezium's semantic type (schema name) of a `time` column of this precision.
    pub fn time_schema_name(self, precision: Option<u32>) -> &'static str {
        match (self, self.time_unit(precision)) {
            (TimePrecisionMode::Connect, _) => "org.apache.kafka.connect.data.Time",
            (_, TemporalUnit::Millis) => "io.debezium.time.Time",
            (_, TemporalUnit::Micros) => "io.debezium.time.MicroTime",
        }
    }

    /// Debezium's semantic type of a `timestamp` column of this precision.
    pub fn timestamp_schema_name(self, precision: Option<u32>) -> &'static str {
        match (self, self.timestamp_unit(precision)) {
            (TimePrecisionMode::Connect, _) => "org.apache.kafka.connect.data.Timestamp",
            (_, TemporalUnit::Millis) => "io.debezium.time.Timestamp",
            (_, TemporalUnit::Micros) => "io.debezium.time.MicroTimestamp",
        }
    }

    /// Debezium's semantic type of a `date` column (days since the epoch in every mode).
    pub fn date_schema_name(self) -> &'static str {
        match self {
            TimePrecisionMode::Connect => "org.apache.kafka.connect.data.Date",
            _ => "io.debezium.time.Date",
        }
    }
}

/// `adaptive`: milliseconds for a precision of 0 to 3, microseconds for 4 to 6 or none.
fn adaptive_unit(precision: Option<u32>) -> TemporalUnit {
    match precision {
        Some(0..=3) => TemporalUnit::Millis,
        _ => TemporalUnit::Micros,
    }
}

/// Debezium's `binary.handling.mode`: how `bytea` values are written (`bit`/`varbit` are
/// `io.debezium.data.Bits` bytes in every mode, as Debezium).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
pub enum BinaryHandlingMode {
    /// Debezium's default: Kafka Connect bytes, which JSON writes as standard base64.
    #[default]
    #[serde(rename = "bytes")]
    Bytes,
    /// A string of standard base64.
    #[serde(rename = "base64")]
    Base64,
    /// A string of URL-safe base64 (padded, as Java's `Base64.getUrlEncoder()`).
    #[serde(rename = "base64-url-safe")]
    Base64UrlSafe,
    /// A string of lowercase hex.
    #[serde(rename = "hex")]
    Hex,
}

impl BinaryHandlingMode {
    /// The base64 alphabet of the mode; `None` for `hex`.
    pub fn base64_engine(self) -> Option<&'static base64::engine::GeneralPurpose> {
        match self {
            BinaryHandlingMode::Bytes | BinaryHandlingMode::Base64 => {
                Some(&base64::engine::general_purpose::STANDARD)
            }
            BinaryHandlingMode::Base64UrlSafe => Some(&base64::engine::general_purpose::URL_SAFE),
            BinaryHandlingMode::Hex => None,
        }
    }

    /// Debezium's semantic type of a binary column: `None` for Kafka Connect bytes (`bytes`),
    /// the values being strings otherwise.
    pub fn is_string(self) -> bool {
        self != BinaryHandlingMode::Bytes
    }

    /// Appends `bytes` as a JSON string in the mode's encoding.
    pub fn write(self, bytes: &[u8], out: &mut Vec<u8>) {
        out.push(b'"');
        match self.base64_engine() {
            Some(engine) => out.extend_from_slice(engine.encode(bytes).as_bytes()),
            None => {
                for byte in bytes {
                    out.push(HEX[usize::from(byte >> 4)]);
                    out.push(HEX[usize::from(byte & 0xf)]);
                }
            }
        }
        out.push(b'"');
    }

    /// Appends the unavailable-value placeholder of a binary column: its bytes under `bytes`
    /// (Kafka Connect bytes), the string itself in the string modes (as Debezium: the column's
    /// schema is a string then).
    pub fn write_placeholder(self, placeholder: &str, out: &mut Vec<u8>) {
        if self.is_string() {
            write_json_str(out, placeholder);
        } else {
            self.write(placeholder.as_bytes(), out);
        }
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Debezium's `interval.handling.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalHandlingMode {
    /// Debezium's default: microseconds, a month counting 30.4375 days
    /// (`io.debezium.time.MicroDuration`).
    #[default]
    Numeric,
    /// An ISO-8601 string `P<y>Y<m>M<d>DT<h>H<m>M<s>S` with every component
    /// (`io.debezium.time.Interval`).
    String,
}

/// The components of an interval as the server splits them (each with its own sign).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntervalParts<'a> {
    /// Years.
    pub years: i64,
    /// Months.
    pub months: i64,
    /// Days.
    pub days: i64,
    /// Hours.
    pub hours: i64,
    /// Minutes.
    pub minutes: i64,
    /// Whether the seconds are negative.
    pub seconds_negative: bool,
    /// Whole seconds, as decimal digits.
    pub seconds: &'a str,
    /// Fraction digits of the seconds (may be empty).
    pub fraction: &'a str,
}

/// Appends an interval as Debezium's `io.debezium.time.Interval` string: every component,
/// the seconds as a plain decimal without trailing zeros (`P1Y2M3DT4H5M6.78S`, `P0Y0M0DT0H0M0S`).
pub fn write_interval_iso(parts: &IntervalParts<'_>, out: &mut Vec<u8>) {
    let mut text = format!(
        "P{}Y{}M{}DT{}H{}M",
        parts.years, parts.months, parts.days, parts.hours, parts.minutes
    );
    let whole = parts.seconds.trim_start_matches('0');
    let fraction = parts.fraction.get(..9).unwrap_or(parts.fraction);
    let fraction = fraction.trim_end_matches('0');
    if parts.seconds_negative && !(whole.is_empty() && fraction.is_empty()) {
        text.push('-');
    }
    text.push_str(if whole.is_empty() { "0" } else { whole });
    if !fraction.is_empty() {
        text.push('.');
        text.push_str(fraction);
    }
    text.push('S');
    write_json_str(out, &text);
}

/// Debezium's `hstore.handling.mode`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HstoreHandlingMode {
    /// Debezium's default: a string holding the map as a JSON object
    /// (`io.debezium.data.Json`).
    #[default]
    Json,
    /// The map itself, a JSON object (Kafka Connect's `MAP`).
    Map,
}

impl HstoreHandlingMode {
    /// Appends a map (keys with their values, NULL = `None`) in the mode's form. Members are
    /// in the order Debezium writes them: the iteration order of the Java `HashMap` it builds.
    pub fn write(self, pairs: &[(String, Option<String>)], out: &mut Vec<u8>) {
        let mut object = Vec::with_capacity(16 * pairs.len() + 2);
        object.push(b'{');
        for (n, index) in java_hash_map_order(pairs.iter().map(|(k, _)| k.as_str()))
            .into_iter()
            .enumerate()
        {
            let (key, value) = &pairs[index];
            if n > 0 {
                object.push(b',');
            }
            write_json_str(&mut object, key);
            object.push(b':');
            match value {
                Some(value) => write_json_str(&mut object, value),
                None => object.extend_from_slice(b"null"),
            }
        }
        object.push(b'}');
        match self {
            HstoreHandlingMode::Map => out.extend_from_slice(&object),
            HstoreHandlingMode::Json => {
                // Built from JSON strings only: valid UTF-8.
                write_json_str(out, &String::from_utf8_lossy(&object));
            }
        }
    }
}

/// The order in which a Java `HashMap<String, _>` (default capacity and load factor) that got
/// `keys` inserted in this order iterates them, as indexes into `keys`; a repeated key keeps
/// its first place (and the last value, which the caller's pairs decide).
pub fn java_hash_map_order<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<usize> {
    let keys: Vec<&str> = keys.collect();
    let mut distinct: Vec<usize> = Vec::with_capacity(keys.len());
    for (i, key) in keys.iter().enumerate() {
        match distinct.iter().position(|&j| keys[j] == *key) {
            // Java keeps the first key's node and replaces its value.
            Some(place) => distinct[place] = i,
            None => distinct.push(i),
        }
    }
    // The table doubles from 16 whenever the size exceeds 3/4 of it; splitting a bucket keeps
    // the order within it, so the final order is by bucket, then by insertion.
    let mut capacity: usize = 16;
    while distinct.len() > capacity * 3 / 4 {
        capacity *= 2;
    }
    let bucket = |key: &str| {
        let mut h: i32 = 0;
        for unit in key.encode_utf16() {
            h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
        }
        let h = h as u32;
        ((h ^ (h >> 16)) as usize) & (capacity - 1)
    };
    let mut order: Vec<(usize, usize)> = distinct
        .iter()
        .enumerate()
        .map(|(n, &i)| (bucket(keys[i]), n))
        .collect();
    order.sort_unstable();
    order.into_iter().map(|(_, n)| distinct[n]).collect()
}

/// Debezium's `skipped.operations`: the streamed operations that emit no event. Written as
/// a comma-separated list of `c`, `u`, `d`, `t`, or `none`; Debezium's default is `t`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedOperations {
    /// Inserts.
    pub create: bool,
    /// Updates.
    pub update: bool,
    /// Deletes.
    pub delete: bool,
    /// Truncates.
    pub truncate: bool,
}

impl Default for SkippedOperations {
    fn default() -> Self {
        Self {
            create: false,
            update: false,
            delete: false,
            truncate: true,
        }
    }
}

impl SkippedOperations {
    /// Whether a streamed change of this operation emits no event (snapshot reads and
    /// messages are never skipped).
    pub fn skips(self, op: super::Op) -> bool {
        match op {
            super::Op::Create => self.create,
            super::Op::Update => self.update,
            super::Op::Delete => self.delete,
            super::Op::Truncate => self.truncate,
            super::Op::Read | super::Op::Message => false,
        }
    }

    /// Parses Debezium's list.
    ///
    /// # Errors
    ///
    /// What is wrong, with the values accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut skipped = Self {
            truncate: false,
            ..Self::default()
        };
        let items: Vec<&str> = text.split(',').map(str::trim).collect();
        if items == ["none"] {
            return Ok(skipped);
        }
        for item in items {
            match item {
                "c" => skipped.create = true,
                "u" => skipped.update = true,
                "d" => skipped.delete = true,
                "t" => skipped.truncate = true,
                other => {
                    return Err(format!(
                        "unknown operation {other:?} in {text:?}: expected a comma-separated \
                         list of `c`, `u`, `d`, `t`, or `none`"
                    ));
                }
            }
        }
        Ok(skipped)
    }
}

impl<'de> serde::Deserialize<'de> for SkippedOperations {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn time_units_follow_the_mode() {
        use TemporalUnit::{Micros, Millis};
        use TimePrecisionMode::*;
        for (mode, precision, time, timestamp) in [
            (Adaptive, None, Micros, Micros),
            (Adaptive, Some(3), Millis, Millis),
            (Adaptive, Some(6), Micros, Micros),
            (AdaptiveTimeMicroseconds, Some(0), Micros, Millis),
            (AdaptiveTimeMicroseconds, None, Micros, Micros),
            (Connect, None, Millis, Millis),
            (Connect, Some(6), Millis, Millis),
        ] {
            assert_eq!(mode.time_unit(precision), time, "{mode:?} {precision:?}");
            assert_eq!(
                mode.timestamp_unit(precision),
                timestamp,
                "{mode:?} {precision:?}"
            );
        }
        assert_eq!(
            Connect.time_schema_name(Some(6)),
            "org.apache.kafka.connect.data.Time"
        );
        assert_eq!(
            Adaptive.time_schema_name(None),
            "io.debezium.time.MicroTime"
        );
        assert_eq!(
            Adaptive.timestamp_schema_name(Some(2)),
            "io.debezium.time.Timestamp"
        );
    }

    #[test]
    fn binary_encodings_are_exact() {
        let bytes = [0xfb, 0xff, 0x00, 0x0a];
        let w = |mode: BinaryHandlingMode| written(|out| mode.write(&bytes, out));
        assert_eq!(w(BinaryHandlingMode::Bytes), r#""+/8ACg==""#);
        assert_eq!(w(BinaryHandlingMode::Base64), r#""+/8ACg==""#);
        assert_eq!(w(BinaryHandlingMode::Base64UrlSafe), r#""-_8ACg==""#);
        assert_eq!(w(BinaryHandlingMode::Hex), r#""fbff000a""#);
        let p = |mode: BinaryHandlingMode| written(|out| mode.write_placeholder("ab", out));
        assert_eq!(p(BinaryHandlingMode::Bytes), r#""YWI=""#);
        assert_eq!(p(BinaryHandlingMode::Hex), r#""ab""#);
        assert_eq!(p(BinaryHandlingMode::Base64), r#""ab""#);
    }

    #[test]
    fn intervals_as_iso_strings() {
        let parts = IntervalParts {
            years: 1,
            months: 2,
            days: 3,
            hours: 4,
            minutes: 5,
            seconds_negative: false,
            seconds: "6",
            fraction: "780",
        };
        let w = |parts: IntervalParts<'_>| written(|out| write_interval_iso(&parts, out));
        assert_eq!(w(parts), r#""P1Y2M3DT4H5M6.78S""#);
        assert_eq!(w(IntervalParts::default()), r#""P0Y0M0DT0H0M0S""#);
        assert_eq!(
            w(IntervalParts {
                years: -1,
                hours: -4,
                seconds_negative: true,
                seconds: "0",
                fraction: "5",
                ..IntervalParts::default()
            }),
            r#""P-1Y0M0DT-4H0M-0.5S""#
        );
    }

    #[test]
    fn hstore_maps_in_java_hash_map_order() {
        let pairs = |list: &[(&str, Option<&str>)]| -> Vec<(String, Option<String>)> {
            list.iter()
                .map(|(k, v)| ((*k).to_owned(), v.map(str::to_owned)))
                .collect()
        };
        let map = pairs(&[("b", None), ("a", Some("1"))]);
        assert_eq!(
            written(|out| HstoreHandlingMode::Map.write(&map, out)),
            r#"{"a":"1","b":null}"#
        );
        assert_eq!(
            written(|out| HstoreHandlingMode::Json.write(&map, out)),
            r#""{\"a\":\"1\",\"b\":null}""#
        );
        // "key" hashes to bucket 14 of 16, "a" (97 = 0x61) and "q" (113 = 0x71) to bucket 1:
        // by bucket, then insertion.
        let keys = ["key", "q", "a"];
        let order: Vec<&str> = java_hash_map_order(keys.iter().copied())
            .into_iter()
            .map(|i| keys[i])
            .collect();
        assert_eq!(order, ["q", "a", "key"]);
        assert_eq!(written(|out| HstoreHandlingMode::Map.write(&[], out)), "{}");
    }

    #[test]
    fn skipped_operations_are_debeziums_list() {
        assert_eq!(
            SkippedOperations::parse("none").unwrap(),
            SkippedOperations {
                create: false,
                update: false,
                delete: false,
                truncate: false
            }
        );
        assert_eq!(
            SkippedOperations::parse("t").unwrap(),
            SkippedOperations::default()
        );
        let cu = SkippedOperations::parse("c, u").unwrap();
        assert!(cu.create && cu.update && !cu.delete && !cu.truncate);
        let error = SkippedOperations::parse("c,x").unwrap_err();
        assert!(error.contains("`c`, `u`, `d`, `t`, or `none`"), "{error}");
    }
}

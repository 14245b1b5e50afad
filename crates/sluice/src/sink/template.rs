//! Path templates: the directory (under the output root) a record's file goes to.
//!
//! `{topic}` and `{partition}` are the record's; `{timestamp:FORMAT}` formats the record's
//! Kafka timestamp (UTC) with a strftime `FORMAT`; any other name is a field path into the
//! record's JSON value (`{after.created_at:%Y-%m-%d}` in a Debezium envelope, `{region}` in a
//! plain object). A field used with a `FORMAT` is read as a date-time: an RFC 3339 string, a
//! `YYYY-MM-DD[ HH:MM:SS[.f]]` string (UTC), or a number of days, seconds, milliseconds,
//! microseconds or nanoseconds since the Unix epoch (told apart by magnitude, as Debezium's
//! date and timestamp types are). A field that is missing, null, not a scalar or not a date is
//! an error: the record follows the failure policy.
//!
//! Substituted values are made safe as one path segment: `/`, `\` and control characters
//! become `_`, and `.`/`..` become `_`.

use std::borrow::Cow;
use std::fmt::Write as _;

use chrono::format::{Item, StrftimeItems};
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use serde_json::value::RawValue;

/// A strftime format, parsed once.
#[derive(Debug, Clone)]
struct TimeFormat {
    text: String,
    items: Vec<Item<'static>>,
    /// The format shows nothing finer than seconds, so a rendering can be reused for every
    /// time in the same second.
    per_second: bool,
}

impl PartialEq for TimeFormat {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for TimeFormat {}

impl TimeFormat {
    fn parse(text: String) -> Result<Self, ()> {
        let items = StrftimeItems::new(&text).parse_to_owned().map_err(|_| ())?;
        let per_second = !items.iter().any(|item| {
            use chrono::format::{Fixed, Numeric};
            matches!(
                item,
                Item::Numeric(Numeric::Nanosecond | Numeric::Timestamp, _)
                    | Item::Fixed(
                        Fixed::Nanosecond
                            | Fixed::Nanosecond3
                            | Fixed::Nanosecond6
                            | Fixed::Nanosecond9
                            | Fixed::Internal(_)
                    )
            )
        });
        Ok(Self {
            text,
            items,
            per_second,
        })
    }

    /// Appends `time` in this format. Records mostly come in time order, so each thread keeps
    /// the last rendering per format and second (formatting is a large part of a record's
    /// cost otherwise).
    fn write(&self, out: &mut String, time: DateTime<Utc>) {
        self.write_at(out, time.timestamp(), || Some(time));
    }

    /// [`TimeFormat::write`] of a Unix time in milliseconds; `false` when it is out of range.
    /// The date is computed only when the second is not the last one rendered.
    fn write_millis(&self, out: &mut String, ms: i64) -> bool {
        self.write_at(out, ms.div_euclid(1000), || {
            DateTime::<Utc>::from_timestamp_millis(ms)
        })
    }

    fn write_at(
        &self,
        out: &mut String,
        second: i64,
        time: impl FnOnce() -> Option<DateTime<Utc>>,
    ) -> bool {
        thread_local! {
            /// (format, second, rendering).
            static LAST: std::cell::RefCell<(String, i64, String)> =
                const { std::cell::RefCell::new((String::new(), i64::MIN, String::new())) };
        }
        if !self.per_second {
            let Some(time) = time() else { return false };
            let _ = write!(out, "{}", time.format_with_items(self.items.iter()));
            return true;
        }
        LAST.with_borrow_mut(|(format, last_second, text)| {
            if *last_second != second || *format != self.text {
                let Some(time) = time() else { return false };
                text.clear();
                let _ = write!(text, "{}", time.format_with_items(self.items.iter()));
                format.clone_from(&self.text);
                *last_second = second;
            }
            out.push_str(text);
            true
        })
    }
}

/// One piece of a template.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Topic,
    Partition,
    Timestamp(TimeFormat),
    Field {
        path: Vec<String>,
        format: Option<TimeFormat>,
    },
}

/// A parsed path template; see the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathTemplate {
    parts: Vec<Part>,
}

/// What a template is rendered from.
#[derive(Debug)]
pub struct RenderInput<'a> {
    /// The record's topic.
    pub topic: &'a str,
    /// Its partition.
    pub partition: i32,
    /// Its Kafka timestamp, Unix milliseconds.
    pub timestamp_ms: Option<i64>,
    /// The top-level fields of its value (empty when the value is not an object).
    pub fields: &'a [(Cow<'a, str>, &'a RawValue)],
}

impl PathTemplate {
    /// Parses a template.
    ///
    /// # Errors
    ///
    /// A message saying what is wrong, for the config error.
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.starts_with('/') {
            return Err(format!(
                "{text:?} is absolute: expected a path relative to sink.files.path"
            ));
        }
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_owned()));
            }
            let body = &rest[open + 1..];
            let close = body
                .find('}')
                .ok_or_else(|| format!("unterminated {{ in {text:?}"))?;
            let (name, format) = match body[..close].split_once(':') {
                Some((name, format)) => (name.trim(), Some(format.to_owned())),
                None => (body[..close].trim(), None),
            };
            if let Some(format) = &format {
                let bad = StrftimeItems::new(format).any(|item| matches!(item, Item::Error));
                if bad || format.is_empty() || format.contains("..") {
                    return Err(format!(
                        "{{{name}:{format}}}: {format:?} is not a strftime format such as %Y-%m-%d"
                    ));
                }
            }
            let format = match format {
                Some(format) => Some(TimeFormat::parse(format.clone()).map_err(|()| {
                    format!(
                        "{{{name}:{format}}}: {format:?} is not a strftime format such as %Y-%m-%d"
                    )
                })?),
                None => None,
            };
            let part = match (name, format) {
                ("", _) => return Err(format!("empty {{}} in {text:?}")),
                ("topic", None) => Part::Topic,
                ("partition", None) => Part::Partition,
                ("topic" | "partition", Some(_)) => {
                    return Err(format!("{{{name}}} takes no format"));
                }
                ("timestamp", Some(format)) => Part::Timestamp(format),
                ("timestamp", None) => {
                    return Err("{timestamp} needs a format, e.g. {timestamp:%Y-%m-%d}".to_owned());
                }
                (path, format) => {
                    let path: Vec<String> = path.split('.').map(str::to_owned).collect();
                    if path.iter().any(String::is_empty) {
                        return Err(format!(
                            "{{{}}}: expected a field path such as after.created_at",
                            body[..close].trim()
                        ));
                    }
                    Part::Field { path, format }
                }
            };
            parts.push(part);
            rest = &body[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_owned()));
        }
        let literal: String = parts
            .iter()
            .filter_map(|p| match p {
                Part::Literal(text) => Some(text.as_str()),
                _ => None,
            })
            .collect();
        if literal.split('/').any(|segment| segment == "..") || literal.contains('}') {
            return Err(format!(
                "{text:?} contains '..' or an unmatched }}: expected directories under sink.files.path"
            ));
        }
        Ok(Self { parts })
    }

    /// Whether rendering reads the record's value fields.
    pub fn uses_fields(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Field { .. }))
    }

    /// Renders the directory for one record (relative, `/`-separated, no leading or trailing
    /// `/`) into `out`, which is cleared first: a writer reuses one buffer for every record.
    ///
    /// # Errors
    ///
    /// Why the record has no directory (a missing or unparsable field); the record follows
    /// the failure policy.
    pub fn render(&self, input: &RenderInput<'_>, out: &mut String) -> Result<(), String> {
        out.clear();
        for part in &self.parts {
            match part {
                Part::Literal(text) => out.push_str(text),
                Part::Topic => push_segment(out, input.topic),
                Part::Partition => {
                    let _ = write!(out, "{}", input.partition);
                }
                Part::Timestamp(format) => {
                    let written = input
                        .timestamp_ms
                        .is_some_and(|ms| format.write_millis(out, ms));
                    if !written {
                        return Err("the record has no timestamp".into());
                    }
                }
                Part::Field { path, format } => {
                    let raw = lookup(input.fields, path)?;
                    let context = |e: String| format!("field {} {e}", path.join("."));
                    match format {
                        None => push_segment(out, &scalar_text(raw).map_err(context)?),
                        Some(format) => {
                            let time = parse_time(raw).map_err(context)?;
                            format.write(out, time);
                        }
                    }
                }
            }
        }
        let end = out.trim_end_matches('/').len();
        out.truncate(end);
        let start = out.len() - out.trim_start_matches('/').len();
        out.drain(..start);
        // Literal text next to a time format's own text can make a `..` segment (`.` then
        // `{timestamp:.}`): the check of the template's literals alone cannot see it.
        if memchr::memmem::find(out.as_bytes(), b"..").is_some()
            && out.split('/').any(|segment| segment == "..")
        {
            return Err(format!(
                "the directory {out:?} has a '..' segment: the path template's literal text and time formats must not make one"
            ));
        }
        Ok(())
    }
}

/// Finds a field path in the top-level fields, parsing nested objects on the way.
fn lookup<'a>(
    fields: &[(Cow<'a, str>, &'a RawValue)],
    path: &[String],
) -> Result<&'a RawValue, String> {
    let missing = || format!("field {} is missing", path.join("."));
    let (first, rest) = path.split_first().ok_or_else(missing)?;
    let mut raw = fields
        .iter()
        .find(|(name, _)| name == first)
        .map(|(_, raw)| *raw)
        .ok_or_else(missing)?;
    for name in rest {
        let nested: Vec<(Cow<'a, str>, &'a RawValue)> =
            parse_object(raw.get()).map_err(|_| missing())?;
        raw = nested
            .into_iter()
            .find(|(key, _)| key == name)
            .map(|(_, raw)| raw)
            .ok_or_else(missing)?;
    }
    Ok(raw)
}

/// Parses a JSON object's top level into (name, raw value) pairs, in order.
///
/// # Errors
///
/// When the text is not a JSON object.
pub fn parse_object(text: &str) -> Result<Vec<(Cow<'_, str>, &RawValue)>, serde_json::Error> {
    struct Fields<'a>(Vec<(Cow<'a, str>, &'a RawValue)>);
    impl<'de> serde::Deserialize<'de> for Fields<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl<'de> serde::de::Visitor<'de> for Visitor {
                type Value = Fields<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> Result<Self::Value, A::Error> {
                    let mut fields = Vec::new();
                    while let Some(key) = map.next_key::<Key<'de>>()? {
                        fields.push((key.0, map.next_value::<&'de RawValue>()?));
                    }
                    Ok(Fields(fields))
                }
            }
            deserializer.deserialize_map(Visitor)
        }
    }
    /// A key, borrowed unless it has escapes.
    struct Key<'a>(Cow<'a, str>);
    impl<'de> serde::Deserialize<'de> for Key<'de> {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl<'de> serde::de::Visitor<'de> for Visitor {
                type Value = Key<'de>;
                fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str("a string")
                }
                fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Self::Value, E> {
                    Ok(Key(Cow::Borrowed(v)))
                }
                fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
                    Ok(Key(Cow::Owned(v.to_owned())))
                }
                fn visit_string<E>(self, v: String) -> Result<Self::Value, E> {
                    Ok(Key(Cow::Owned(v)))
                }
            }
            deserializer.deserialize_str(Visitor)
        }
    }
    serde_json::from_str::<Fields<'_>>(text).map(|fields| fields.0)
}

/// The text of a scalar: a string unescaped, a number or boolean as written.
fn scalar_text(raw: &RawValue) -> Result<Cow<'_, str>, String> {
    let text = raw.get();
    match text.as_bytes().first() {
        Some(b'"') => serde_json::from_str::<Cow<'_, str>>(text)
            .map(|s| match s {
                Cow::Borrowed(s) => Cow::Borrowed(s),
                Cow::Owned(s) => Cow::Owned(s),
            })
            .map_err(|e| e.to_string()),
        Some(b'n') => Err("is null".to_owned()),
        Some(b'{' | b'[') => Err("is an object or array, not a scalar".to_owned()),
        Some(_) => Ok(Cow::Borrowed(text)),
        None => Err("is empty".to_owned()),
    }
}

/// Reads a date-time from a JSON string or number; see the [module docs](self).
fn parse_time(raw: &RawValue) -> Result<DateTime<Utc>, String> {
    let text = scalar_text(raw)?;
    if raw.get().starts_with('"') {
        if let Ok(time) = DateTime::parse_from_rfc3339(&text) {
            return Ok(time.with_timezone(&Utc));
        }
        for format in ["%Y-%m-%d %H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S%.f"] {
            if let Ok(time) = NaiveDateTime::parse_from_str(&text, format) {
                return Ok(time.and_utc());
            }
        }
        if let Ok(date) = NaiveDate::parse_from_str(&text, "%Y-%m-%d") {
            return Ok(date.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc());
        }
        return Err(format!("{text:?} is not a date or timestamp"));
    }
    let number: i64 = text
        .parse()
        .map_err(|_| format!("{text} is not a date or timestamp"))?;
    let magnitude = number.unsigned_abs();
    let time = if magnitude < 1_000_000 {
        DateTime::<Utc>::from_timestamp(number.saturating_mul(86_400), 0)
    } else if magnitude < 100_000_000_000 {
        DateTime::<Utc>::from_timestamp(number, 0)
    } else if magnitude < 100_000_000_000_000 {
        DateTime::<Utc>::from_timestamp_millis(number)
    } else if magnitude < 100_000_000_000_000_000 {
        DateTime::<Utc>::from_timestamp_micros(number)
    } else {
        Some(DateTime::<Utc>::from_timestamp_nanos(number))
    };
    time.ok_or_else(|| format!("{text} is out of range for a timestamp"))
}

/// Appends `value` as (part of) one path segment.
fn push_segment(out: &mut String, value: &str) {
    if value == "." || value == ".." || value.is_empty() {
        out.push('_');
        return;
    }
    // The common case (a topic name, a plain field) in one copy, not char by char.
    if value
        .bytes()
        .all(|b| b.is_ascii() && !b.is_ascii_control() && b != b'/' && b != b'\\')
    {
        out.push_str(value);
        return;
    }
    out.extend(value.chars().map(|c| {
        if c == '/' || c == '\\' || c.is_control() {
            '_'
        } else {
            c
        }
    }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_renderings_are_reused_only_for_the_same_format_and_second() {
        let day = PathTemplate::parse("{timestamp:%Y-%m-%d}").unwrap();
        let second = PathTemplate::parse("{timestamp:%H:%M:%S}").unwrap();
        let millis = PathTemplate::parse("{timestamp:%S%.3f}").unwrap();
        let render = |t: &PathTemplate, ms: i64| {
            let mut out = String::new();
            t.render(
                &RenderInput {
                    topic: "t",
                    partition: 0,
                    timestamp_ms: Some(ms),
                    fields: &[],
                },
                &mut out,
            )
            .unwrap();
            out
        };
        let ms = 1_795_000_000_123;
        assert_eq!(render(&day, ms), "2026-11-18");
        assert_eq!(render(&second, ms), "11:06:40");
        assert_eq!(render(&second, ms + 500), "11:06:40");
        assert_eq!(render(&second, ms + 1000), "11:06:41");
        assert_eq!(render(&millis, ms), "40.123");
        assert_eq!(render(&millis, ms + 1), "40.124");
        assert_eq!(render(&day, ms + 86_400_000), "2026-11-19");
    }

    fn render(template: &str, value: &str, timestamp_ms: Option<i64>) -> Result<String, String> {
        let template = PathTemplate::parse(template).unwrap();
        let fields = parse_object(value).unwrap();
        // A used buffer, as a writer's: rendering clears it.
        let mut out = String::from("stale/");
        template.render(
            &RenderInput {
                topic: "orders",
                partition: 3,
                timestamp_ms,
                fields: &fields,
            },
            &mut out,
        )?;
        Ok(out)
    }

    #[test]
    fn topic_partition_and_record_timestamp() {
        // 2026-11-23T05:00:00Z
        let ts = 1_795_410_000_000;
        assert_eq!(
            render(
                "{topic}/p={partition}/dt={timestamp:%Y-%m-%d}/",
                "{}",
                Some(ts)
            )
            .unwrap(),
            "orders/p=3/dt=2026-11-23"
        );
        assert!(render("{timestamp:%Y}", "{}", None).is_err());
    }

    #[test]
    fn debezium_field_paths_and_date_forms() {
        let t = "{topic}/dt={after.created_at:%Y-%m-%d}";
        for created in [
            "\"2026-11-23T23:59:59+00:00\"",
            "\"2026-11-23 10:00:00.123\"",
            "\"2026-11-23\"",
            "1795410000000",    // milliseconds
            "1795410000000000", // microseconds
            "20780",            // days
        ] {
            let value =
                format!(r#"{{"before":null,"after":{{"id":1,"created_at":{created}}},"op":"c"}}"#);
            assert_eq!(
                render(t, &value, None).unwrap(),
                "orders/dt=2026-11-23",
                "{created}"
            );
        }
        assert_eq!(
            render(
                "{region}/{after.id}",
                r#"{"region":"eu/west","after":{"id":7}}"#,
                None
            )
            .unwrap(),
            "eu_west/7"
        );
    }

    #[test]
    fn missing_or_bad_fields_are_errors() {
        let t = "{after.created_at:%Y-%m-%d}";
        assert!(
            render(t, r#"{"after":{"id":1}}"#, None)
                .unwrap_err()
                .contains("missing")
        );
        assert!(
            render(t, r#"{"after":null}"#, None)
                .unwrap_err()
                .contains("missing")
        );
        assert!(render(t, r#"{"after":{"created_at":"soon"}}"#, None).is_err());
        assert!(
            render("{x}", r#"{"x":null}"#, None)
                .unwrap_err()
                .contains("null")
        );
        assert!(render("{x}", r#"{"x":".."}"#, None).unwrap() == "_");
    }

    #[test]
    fn substituted_values_are_one_safe_segment() {
        let value = r#"{"a":"x/y","b":"x\\y","c":"tab\there","d":"del\u007f","e":"c1\u0085","f":"näive-ok"}"#;
        for (field, expected) in [
            ("a", "x_y"),
            ("b", "x_y"),
            ("c", "tab_here"),
            ("d", "del_"),
            ("e", "c1_"),
            ("f", "näive-ok"),
        ] {
            assert_eq!(
                render(&format!("{{{field}}}"), value, None).unwrap(),
                expected
            );
        }
        // Before 1970 the second is the floor, as the date's.
        assert_eq!(
            render("{timestamp:%Y-%m-%d %H:%M:%S}", "{}", Some(-1)).unwrap(),
            "1969-12-31 23:59:59"
        );
    }

    #[test]
    fn bad_templates_are_refused() {
        for bad in [
            "/abs/{topic}",
            "{topic",
            "{}",
            "{timestamp}",
            "{topic:%Y}",
            "../x",
            "{a..b}",
        ] {
            assert!(PathTemplate::parse(bad).is_err(), "{bad}");
        }
        assert!(PathTemplate::parse("{topic}/{after.created_at:%Y/%m/%d}/").is_ok());
    }

    #[test]
    fn keys_with_escapes_are_found() {
        let fields = parse_object(r#"{"a\"b":1,"c":{"d":2}}"#).unwrap();
        assert_eq!(fields[0].0, "a\"b");
        assert_eq!(fields[1].1.get(), r#"{"d":2}"#);
        assert!(parse_object("[1]").is_err());
        assert!(parse_object("{\"a\":").is_err());
    }
}

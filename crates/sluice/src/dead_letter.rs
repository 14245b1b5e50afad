//! The dead-letter record, the same for every source and sink: [`build`] makes it.
//!
//! A record that cannot be delivered and is dead-lettered (per the pipeline's `delivery`
//! policy) goes to the dead-letter topic with its original key and value, its original headers
//! (in their order), and then these headers, all UTF-8 text:
//!
//! | header | when | meaning |
//! |---|---|---|
//! | `sluice.dlq.reason` | always | why the record could not be delivered (cut at 8 KiB) |
//! | `sluice.dlq.topic` | always | the topic it was meant for (a source) or read from (a sink) |
//! | `sluice.dlq.partition` | sink | the partition it was read from |
//! | `sluice.dlq.offset` | sink | the offset it was read from |
//! | `sluice.dlq.position` | source | where the change is in the source (e.g. `LSN 0/1A2B`) |
//! | `sluice.dlq.value_truncated_from_bytes` | value cut | the value's size before it was cut |
//! | `sluice.dlq.key_truncated_from_bytes` | key cut | the key's size before it was cut |
//!
//! A key or value larger than `delivery.dead_letter_max_value_bytes` is cut to that many bytes
//! (so the dead-letter record fits the dead-letter topic; a cut JSON value is no longer JSON),
//! and the header above gives its original size. A record dead-lettered twice (a sink reading
//! a dead-letter topic) carries both sets of `sluice.dlq.*` headers: the last of a name is the
//! newest.

/// Why the record could not be delivered.
pub const HEADER_REASON: &str = "sluice.dlq.reason";
/// The topic the record was meant for (a source) or read from (a sink).
pub const HEADER_TOPIC: &str = "sluice.dlq.topic";
/// The partition the record was read from (a sink).
pub const HEADER_PARTITION: &str = "sluice.dlq.partition";
/// The offset the record was read from (a sink).
pub const HEADER_OFFSET: &str = "sluice.dlq.offset";
/// Where the change is in the source (a source).
pub const HEADER_POSITION: &str = "sluice.dlq.position";
/// The size in bytes of a value cut to `delivery.dead_letter_max_value_bytes`.
pub const HEADER_VALUE_TRUNCATED: &str = "sluice.dlq.value_truncated_from_bytes";
/// The size in bytes of a key cut to `delivery.dead_letter_max_value_bytes`.
pub const HEADER_KEY_TRUNCATED: &str = "sluice.dlq.key_truncated_from_bytes";

/// The longest reason kept (a database's error can quote a whole row).
pub const MAX_REASON_BYTES: usize = 8192;

/// Where a dead-lettered record came from.
#[derive(Debug, Clone, Copy)]
pub enum Origin<'a> {
    /// A sink's input: read from `topic`, `partition` at `offset`.
    Consumed {
        /// The topic it was read from.
        topic: &'a str,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
    },
    /// A source's output: meant for `topic`, made from the change at `position`.
    Produced {
        /// The topic it was meant for.
        topic: &'a str,
        /// Where the change is in the source, as operators read it.
        position: &'a str,
    },
}

/// A dead-letter record, ready to send to the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterRecord {
    /// The original key (cut when too large).
    pub key: Option<Vec<u8>>,
    /// The original value (cut when too large); `None`: it had none.
    pub value: Option<Vec<u8>>,
    /// The original headers, then the `sluice.dlq.*` ones; a header's value may be null.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl DeadLetterRecord {
    /// The value of the last header called `name`, as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| v.as_deref())
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
}

/// The dead-letter record of a record (`key`, `value`, `headers`) that could not be delivered
/// for `reason`, from `origin`; key and value are cut to `max_value_bytes`.
pub fn build<'h>(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    headers: impl IntoIterator<Item = (&'h str, Option<&'h [u8]>)>,
    origin: Origin<'_>,
    reason: &str,
    max_value_bytes: u32,
) -> DeadLetterRecord {
    let max = max_value_bytes as usize;
    let mut out: Vec<(String, Option<Vec<u8>>)> = headers
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.map(<[u8]>::to_vec)))
        .collect();
    let mut add = |name: &str, value: String| out.push((name.to_owned(), Some(value.into_bytes())));
    add(HEADER_REASON, cut_text(reason, MAX_REASON_BYTES).to_owned());
    match origin {
        Origin::Consumed {
            topic,
            partition,
            offset,
        } => {
            add(HEADER_TOPIC, topic.to_owned());
            add(HEADER_PARTITION, partition.to_string());
            add(HEADER_OFFSET, offset.to_string());
        }
        Origin::Produced { topic, position } => {
            add(HEADER_TOPIC, topic.to_owned());
            add(HEADER_POSITION, position.to_owned());
        }
    }
    let mut capped = |bytes: Option<&[u8]>, header: &str| {
        bytes.map(|bytes| {
            if bytes.len() > max {
                add(header, bytes.len().to_string());
                bytes[..max].to_vec()
            } else {
                bytes.to_vec()
            }
        })
    };
    let key = capped(key, HEADER_KEY_TRUNCATED);
    let value = capped(value, HEADER_VALUE_TRUNCATED);
    DeadLetterRecord {
        key,
        value,
        headers: out,
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut_text(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINK: Origin<'static> = Origin::Consumed {
        topic: "orders",
        partition: 3,
        offset: 42,
    };

    #[test]
    fn a_sink_record_keeps_key_value_and_headers_and_says_where_it_came_from() {
        let record = build(
            Some(b"{\"id\":1}"),
            Some(b"{not json"),
            [("trace", Some(&b"abc"[..])), ("empty", None)],
            SINK,
            "not valid JSON",
            1000,
        );
        assert_eq!(record.key.as_deref(), Some(&b"{\"id\":1}"[..]));
        assert_eq!(record.value.as_deref(), Some(&b"{not json"[..]));
        let names: Vec<&str> = record.headers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "trace",
                "empty",
                HEADER_REASON,
                HEADER_TOPIC,
                HEADER_PARTITION,
                HEADER_OFFSET
            ]
        );
        assert_eq!(record.headers[1].1, None, "a null header stays null");
        assert_eq!(record.header("trace").as_deref(), Some("abc"));
        assert_eq!(
            record.header(HEADER_REASON).as_deref(),
            Some("not valid JSON")
        );
        assert_eq!(record.header(HEADER_TOPIC).as_deref(), Some("orders"));
        assert_eq!(record.header(HEADER_PARTITION).as_deref(), Some("3"));
        assert_eq!(record.header(HEADER_OFFSET).as_deref(), Some("42"));
        assert_eq!(record.header(HEADER_VALUE_TRUNCATED), None);
    }

    #[test]
    fn a_source_record_names_its_topic_and_position() {
        let record = build(
            None,
            Some(b"v"),
            [("sluice.commit_lsn", Some(&b"256"[..]))],
            Origin::Produced {
                topic: "app.public.t",
                position: "LSN 0/100",
            },
            "Broker: Message size too large",
            10,
        );
        assert_eq!(record.key, None);
        assert_eq!(record.header("sluice.commit_lsn").as_deref(), Some("256"));
        assert_eq!(record.header(HEADER_TOPIC).as_deref(), Some("app.public.t"));
        assert_eq!(record.header(HEADER_POSITION).as_deref(), Some("LSN 0/100"));
        assert_eq!(record.header(HEADER_PARTITION), None);
        assert_eq!(record.header(HEADER_OFFSET), None);
    }

    #[test]
    fn a_value_over_the_cap_is_cut_to_it_with_its_size_in_a_header() {
        let value = vec![b'x'; 1001];
        let record = build(Some(b"k"), Some(&value), [], SINK, "too large", 1000);
        assert_eq!(record.value.as_deref(), Some(&value[..1000]));
        assert_eq!(
            record.header(HEADER_VALUE_TRUNCATED).as_deref(),
            Some("1001")
        );
        assert_eq!(record.header(HEADER_KEY_TRUNCATED), None);
        // At the cap exactly: kept whole.
        let record = build(Some(b"k"), Some(&value[..1000]), [], SINK, "r", 1000);
        assert_eq!(record.value.as_ref().map(Vec::len), Some(1000));
        assert_eq!(record.header(HEADER_VALUE_TRUNCATED), None);
    }

    #[test]
    fn a_key_over_the_cap_is_cut_too_and_a_tombstone_stays_one() {
        let key = vec![b'k'; 50];
        let record = build(Some(&key), None, [], SINK, "r", 20);
        assert_eq!(record.key.as_deref(), Some(&key[..20]));
        assert_eq!(record.header(HEADER_KEY_TRUNCATED).as_deref(), Some("50"));
        assert_eq!(record.value, None);
        assert_eq!(record.header(HEADER_VALUE_TRUNCATED), None);
    }

    #[test]
    fn a_long_reason_is_cut_at_a_character_boundary() {
        let reason = "é".repeat(MAX_REASON_BYTES);
        let record = build(None, None, [], SINK, &reason, 10);
        let kept = record.header(HEADER_REASON).unwrap();
        assert!(kept.len() <= MAX_REASON_BYTES && kept.len() >= MAX_REASON_BYTES - 1);
        assert!(kept.chars().all(|c| c == 'é'));
    }

    #[test]
    fn a_record_dead_lettered_twice_reads_as_its_newest_reason() {
        let first = build(None, Some(b"v"), [], SINK, "first", 10);
        let headers: Vec<(&str, Option<&[u8]>)> = first
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_deref()))
            .collect();
        let second = build(None, Some(b"v"), headers, SINK, "second", 10);
        assert_eq!(second.header(HEADER_REASON).as_deref(), Some("second"));
        assert_eq!(
            second
                .headers
                .iter()
                .filter(|(n, _)| n == HEADER_REASON)
                .count(),
            2
        );
    }
}

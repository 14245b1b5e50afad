//! The topic side of `sluice verify`: each key's newest record at the verified position.
//!
//! A topic is read from each partition's start to its high watermark, taken once the pipeline
//! confirmed the position (read committed: an aborted transaction's records are not seen).
//! A record whose transaction committed at or after the position (its `sluice.commit_lsn`
//! header) is a change the source's snapshot does not see yet and is left out; a record
//! without the header (not written by sluice) is taken as before it. A key's records are in
//! one partition, in commit order, so the last one taken is the key's state at the position:
//! a tombstone or a delete removes the key. Per key only a 16-byte digest, its bucket and its
//! row hash are kept (about 50 bytes a key in memory); a table bigger than the memory budget
//! is read in passes over ranges of buckets.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context as _;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;
use serde_json::value::RawValue;

use super::avro::{AvroProblem, AvroTopics};
use super::canonical::{Piece, bucket_of, digest, push_piece, row_hash};
use super::source::TablePlan;
use crate::event::{EventOptions, HEADER_COMMIT_LSN};
use crate::source::mysql::encode::{HEADER_BINLOG_FILE, HEADER_BINLOG_POS};

/// One record as the view needs it.
pub struct TopicRecord<'a> {
    /// The key's bytes.
    pub key: Option<&'a [u8]>,
    /// The value's bytes (`None`: a tombstone).
    pub value: Option<&'a [u8]>,
    /// The `sluice.commit_lsn` header.
    pub commit_lsn: Option<u64>,
    /// The `sluice.binlog_file` and `sluice.binlog_pos` headers (a MySQL source's record).
    pub binlog: Option<(&'a str, u64)>,
    /// Its partition.
    pub partition: i32,
    /// Its offset.
    pub offset: i64,
}

/// Which records of a topic the other side has seen: the records compared.
#[derive(Debug, Clone)]
pub enum Cutoff {
    /// The records of transactions that committed before this LSN (a source snapshot's
    /// position, by the `sluice.commit_lsn` header; records without it are taken).
    CommitLsn(u64),
    /// The records of a MySQL source at or before this binlog position (a consistent
    /// snapshot's: every transaction before it, none after; by the `sluice.binlog_file` and
    /// `sluice.binlog_pos` headers, records without them are taken). A row event is always
    /// before the end of its transaction, so at the position itself are only snapshot reads,
    /// which hold the rows as they were there.
    Binlog {
        /// The binlog file.
        file: String,
        /// The position in it.
        pos: u64,
    },
    /// The records a PostgreSQL sink has applied: per partition, per sub-partition (the
    /// sink's hash of the record key), the offset after the last one applied. A partition
    /// not listed has had none applied.
    Applied {
        /// The sink's `sub_partitions`.
        sub_partitions: u32,
        /// Partition → next offset per sub-partition.
        next: HashMap<i32, Vec<i64>>,
    },
}

impl Cutoff {
    /// Whether `record` is on the compared side of the cutoff.
    fn takes(&self, record: &TopicRecord<'_>) -> bool {
        match self {
            Cutoff::CommitLsn(position) => record.commit_lsn.is_none_or(|lsn| lsn < *position),
            // Binlog files of one server are named `<base>.<sequence>`, the sequence
            // zero-padded: their names sort in their order.
            Cutoff::Binlog { file, pos } => record
                .binlog
                .is_none_or(|(f, p)| (f, p) <= (file.as_str(), *pos)),
            Cutoff::Applied {
                sub_partitions,
                next,
            } => {
                let sub =
                    crate::sink::worker::sub_partition(record.key, record.offset, *sub_partitions)
                        as usize;
                next.get(&record.partition)
                    .and_then(|subs| subs.get(sub))
                    .is_some_and(|&next| record.offset < next)
            }
        }
    }

    /// The offset each partition needs to be read to (exclusive); `None`: its high watermark.
    fn end_of(&self, partition: i32) -> Option<i64> {
        match self {
            Cutoff::CommitLsn(_) | Cutoff::Binlog { .. } => None,
            Cutoff::Applied { next, .. } => Some(
                next.get(&partition)
                    .and_then(|subs| subs.iter().max().copied())
                    .unwrap_or(0),
            ),
        }
    }
}

/// What reading a topic found, besides the keys.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct ReadStats {
    /// Records read.
    pub records: u64,
    /// Records of transactions at or after the position, or not yet applied by the sink (left
    /// out).
    pub after_position: u64,
    /// Records without a `sluice.commit_lsn` header (taken as before the position).
    pub unpositioned: u64,
    /// Records whose key could not be read (then the verification is incomplete).
    pub unreadable: u64,
    /// The first unreadable record's problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_problem: Option<String>,
}

/// A key's state in the topic, as compared.
#[derive(Debug, Clone)]
pub struct KeyState {
    /// The key's bucket.
    pub bucket: u32,
    /// The row's hash (with `U` for values the event does not carry).
    pub hash: i64,
    /// Whether some values were not carried (compare the key alone).
    pub partial: bool,
    /// Pass 2: the key and the row as the event has them.
    pub detail: Option<Box<KeyDetail>>,
}

/// A key kept in full for listing.
#[derive(Debug, Clone)]
pub struct KeyDetail {
    /// The key object.
    pub key: Value,
    /// The compared values (`None` in the outer: not carried).
    pub values: Vec<Option<Option<String>>>,
    /// The `after` object, compared columns only.
    pub after: Value,
}

/// Which keys a pass keeps.
#[derive(Debug, Clone)]
pub enum PassFilter {
    /// Buckets `lo..hi`, hashes only.
    Range(u32, u32),
    /// These buckets (sorted), in full.
    Detail(Vec<u32>),
}

impl PassFilter {
    fn keeps(&self, bucket: u32) -> bool {
        match self {
            PassFilter::Range(lo, hi) => (*lo..*hi).contains(&bucket),
            PassFilter::Detail(list) => list.binary_search(&bucket).is_ok(),
        }
    }
}

/// The newest state per key of one pass.
pub struct TopicView<'a> {
    plan: &'a TablePlan,
    events: &'a EventOptions,
    cutoff: &'a Cutoff,
    filter: PassFilter,
    /// Read as a PostgreSQL sink applies records (see [`TopicView::as_sink_applies`]).
    sink: bool,
    /// The Avro reading when keys or values are Avro.
    avro: Option<&'a AvroTopics>,
    /// Decoded Avro keys and values (reused).
    key_json: Vec<u8>,
    value_json: Vec<u8>,
    /// Per key digest.
    pub keys: HashMap<u128, KeyState>,
    /// Counts.
    pub stats: ReadStats,
}

impl<'a> TopicView<'a> {
    /// An empty view for `plan` of the records `cutoff` takes.
    pub fn new(
        plan: &'a TablePlan,
        events: &'a EventOptions,
        cutoff: &'a Cutoff,
        filter: PassFilter,
    ) -> Self {
        Self {
            plan,
            events,
            cutoff,
            filter,
            sink: false,
            avro: None,
            key_json: Vec::new(),
            value_json: Vec::new(),
            keys: HashMap::new(),
            stats: ReadStats::default(),
        }
    }

    /// The view reading Avro keys and values through `avro` (`None`: JSON).
    pub fn with_avro(mut self, avro: Option<&'a AvroTopics>) -> Self {
        self.avro = avro;
        self
    }

    /// The view reading records as the PostgreSQL sink applies them: a value without `op` is
    /// a plain row (upserted as it is), and a column an event does not carry is not known
    /// from it (the sink keeps the row's value, or the column's default): it is compared key
    /// by key on the columns the event carries, as an unchanged TOASTed value is.
    pub fn as_sink_applies(mut self, sink: bool) -> Self {
        self.sink = sink;
        self
    }

    fn problem(&mut self, problem: String) {
        self.stats.unreadable += 1;
        self.stats.first_problem.get_or_insert(problem);
    }

    /// Takes one record, in partition order.
    pub fn apply(&mut self, record: &TopicRecord<'_>) {
        self.stats.records += 1;
        if !self.cutoff.takes(record) {
            self.stats.after_position += 1;
            return;
        }
        match self.cutoff {
            Cutoff::CommitLsn(_) if record.commit_lsn.is_none() => self.stats.unpositioned += 1,
            Cutoff::Binlog { .. } if record.binlog.is_none() => self.stats.unpositioned += 1,
            _ => {}
        }
        let Some(avro) = self.avro else {
            return self.apply_json(record.key, record.value.map(Ok));
        };
        let mut key_json = std::mem::take(&mut self.key_json);
        let mut value_json = std::mem::take(&mut self.value_json);
        match decode_avro(avro, record, &mut key_json, &mut value_json) {
            Ok((key, value)) => self.apply_json(key, value),
            Err(problem) => self.problem(problem),
        }
        self.key_json = key_json;
        self.value_json = value_json;
    }

    /// [`TopicView::apply`] of a record's JSON key and value (`Err`: a value that cannot be
    /// read, why), its position taken.
    fn apply_json(&mut self, key: Option<&[u8]>, value: Option<Result<&[u8], String>>) {
        let Some(key_bytes) = key else {
            // A truncate event (no key; Debezium skips them by default) empties the table.
            if value
                .and_then(|v| v.ok())
                .and_then(|v| serde_json::from_slice::<Value>(v).ok())
                .as_ref()
                .map(payload)
                .and_then(|p| p.get("op"))
                .and_then(Value::as_str)
                == Some("t")
            {
                self.keys.clear();
            } else {
                self.problem("a record without a key".into());
            }
            return;
        };
        let key: Fields<'_> = match parse_fields(key_bytes) {
            Ok(key) => key,
            Err(error) => return self.problem(format!("a key that is not a JSON object: {error}")),
        };
        let mut form = Vec::with_capacity(32);
        for column in &self.plan.key {
            let raw = key.get(column.name.as_str()).map_or("null", |v| v.get());
            match column.class.from_raw(raw, self.events) {
                Ok(Some(text)) => push_piece(&mut form, &Piece::Value(&text)),
                Ok(None) => push_piece(&mut form, &Piece::Null),
                Err(_) => {
                    return self.problem(format!(
                        "key column {:?} of an unexpected form: {raw}",
                        column.name
                    ));
                }
            }
        }
        let key_digest = digest(&form);
        let id = u128::from_be_bytes(key_digest);
        let bucket = bucket_of(&key_digest, self.plan.buckets);
        if !self.filter.keeps(bucket) {
            return;
        }
        let Some(value) = value else {
            self.keys.remove(&id);
            return;
        };
        let envelope = match value
            .clone()
            .and_then(|v| parse_envelope(v).map_err(|e| e.to_string()))
        {
            Ok(envelope) => envelope,
            Err(error) => {
                // Kept as a row that matches nothing: it differs, with its key.
                let detail = self.detail(key_bytes, Vec::new(), Value::String(error));
                self.keys.insert(
                    id,
                    KeyState {
                        bucket,
                        hash: 0,
                        partial: false,
                        detail,
                    },
                );
                return;
            }
        };
        if envelope.op.as_deref() == Some("d") {
            self.keys.remove(&id);
            return;
        }
        let after: Fields<'_> = match envelope.op {
            // The sink upserts a value without `op` as a plain row.
            None if self.sink => value
                .ok()
                .and_then(|v| parse_fields(v).ok())
                .unwrap_or_default(),
            _ => envelope
                .after
                .filter(|raw| raw.get().trim() != "null")
                .and_then(|raw| serde_json::from_str(raw.get()).ok())
                .unwrap_or_default(),
        };
        let unavailable = envelope.unavailable_columns.unwrap_or_default();
        let placeholder = &self.events.unavailable_value_placeholder;
        let mut form = Vec::with_capacity(128);
        let mut values = Vec::with_capacity(self.plan.columns.len());
        let mut partial = false;
        for column in &self.plan.columns {
            let value = match after.get(column.name.as_str()) {
                Some(raw) => match column.class.from_raw(raw.get(), self.events) {
                    // Debezium's placeholder for a value the change did not carry (an
                    // unchanged TOASTed value): by default it stands in `after`.
                    Ok(Some(text)) if column.class.is_placeholder(&text, placeholder) => None,
                    Ok(text) => Some(text),
                    // A value of another shape: marked so it matches no source value.
                    Err(_) => Some(Some(format!("\u{0}unexpected {}", raw.get()))),
                },
                None if self.sink || unavailable.iter().any(|c| c == &column.name) => None,
                None => Some(Some("\u{0}absent".to_owned())),
            };
            match &value {
                None => {
                    partial = true;
                    push_piece(&mut form, &Piece::Unavailable);
                }
                Some(None) => push_piece(&mut form, &Piece::Null),
                Some(Some(text)) => push_piece(&mut form, &Piece::Value(text)),
            }
            values.push(value);
        }
        let detail = match &self.filter {
            PassFilter::Detail(_) => {
                let shown = self.compared_only(&after);
                self.detail(key_bytes, values, shown)
            }
            PassFilter::Range(..) => None,
        };
        self.keys.insert(
            id,
            KeyState {
                bucket,
                hash: row_hash(&form),
                partial,
                detail,
            },
        );
    }

    fn detail(
        &self,
        key: &[u8],
        values: Vec<Option<Option<String>>>,
        after: Value,
    ) -> Option<Box<KeyDetail>> {
        let key = serde_json::from_slice::<Value>(key)
            .map(|k| payload(&k).clone())
            .unwrap_or_default();
        matches!(self.filter, PassFilter::Detail(_))
            .then(|| Box::new(KeyDetail { key, values, after }))
    }

    fn compared_only(&self, after: &Fields<'_>) -> Value {
        Value::Object(
            after
                .iter()
                .filter(|(name, _)| self.plan.columns.iter().any(|c| c.name == **name))
                .map(|(n, v)| (n.clone(), serde_json::from_str(v.get()).unwrap_or_default()))
                .collect(),
        )
    }
}

/// A record's key and value as JSON (a value that cannot be read: `Err` with why).
type JsonRecord<'b> = (Option<&'b [u8]>, Option<Result<&'b [u8], String>>);

/// A record's Avro key and value as JSON, decoded into `key_json` and `value_json` (a value
/// whose bytes do not match its schema: `Err` with why, kept as a differing row); `Err`: the
/// record cannot be read (its key, or a schema that cannot be had).
fn decode_avro<'b>(
    avro: &AvroTopics,
    record: &TopicRecord<'b>,
    key_json: &'b mut Vec<u8>,
    value_json: &'b mut Vec<u8>,
) -> Result<JsonRecord<'b>, String> {
    let key = match record.key {
        Some(bytes) if avro.keys() => {
            avro.to_json(bytes, key_json).map_err(
                |(AvroProblem::Schema(problem) | AvroProblem::Bytes(problem))| {
                    format!("the key: {problem}")
                },
            )?;
            Some(key_json.as_slice())
        }
        other => other,
    };
    let value = match record.value {
        Some(bytes) if avro.values() => match avro.to_json(bytes, value_json) {
            Ok(()) => Some(Ok(value_json.as_slice())),
            Err(AvroProblem::Schema(problem)) => return Err(format!("the value: {problem}")),
            Err(AvroProblem::Bytes(problem)) => Some(Err(problem)),
        },
        other => other.map(Ok),
    };
    Ok((key, value))
}

/// A JSON object's fields, unparsed.
type Fields<'a> = HashMap<String, &'a RawValue>;

/// A key: its fields (in `payload` with schemas).
fn parse_fields(bytes: &[u8]) -> Result<Fields<'_>, serde_json::Error> {
    let fields: Fields<'_> = serde_json::from_slice(bytes)?;
    match (fields.get("schema"), fields.get("payload")) {
        (Some(_), Some(payload)) => serde_json::from_str(payload.get()),
        _ => Ok(fields),
    }
}

/// The parts of a change event's value verify reads.
#[derive(Debug, Default, serde::Deserialize)]
struct Envelope<'a> {
    #[serde(default)]
    schema: Option<serde::de::IgnoredAny>,
    #[serde(borrow, default)]
    payload: Option<&'a RawValue>,
    #[serde(default)]
    op: Option<String>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    #[serde(default)]
    unavailable_columns: Option<Vec<String>>,
}

/// A value's envelope (in `payload` with schemas).
fn parse_envelope(bytes: &[u8]) -> Result<Envelope<'_>, serde_json::Error> {
    let envelope: Envelope<'_> = serde_json::from_slice(bytes)?;
    match (&envelope.schema, envelope.payload) {
        (Some(_), Some(payload)) => serde_json::from_str(payload.get()),
        _ => Ok(envelope),
    }
}

/// `payload` of a `{"schema":…,"payload":…}` document, else the document.
fn payload(value: &Value) -> &Value {
    match value {
        Value::Object(object)
            if object.contains_key("schema") && object.contains_key("payload") =>
        {
            &object["payload"]
        }
        other => other,
    }
}

/// The topic does not exist.
#[derive(Debug, thiserror::Error)]
#[error("topic {0} does not exist (the pipeline creates it with its first record)")]
pub struct MissingTopic(pub String);

/// Reads `topic` from the start of each partition to its high watermark (taken now), or to
/// where `cutoff` ends it, in partition order per partition.
///
/// # Errors
///
/// The topic does not exist, the brokers cannot be reached, reading failed.
pub fn read_topic(
    consumer: &BaseConsumer,
    topic: &str,
    cutoff: &Cutoff,
    mut each: impl FnMut(&TopicRecord<'_>),
) -> anyhow::Result<()> {
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .with_context(|| format!("cannot read the metadata of topic {topic}"))?;
    let meta = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .with_context(|| format!("topic {topic} not found"))?;
    if let Some(error) = meta.error() {
        let code = rdkafka::error::RDKafkaErrorCode::from(error);
        if code == rdkafka::error::RDKafkaErrorCode::UnknownTopicOrPartition {
            return Err(MissingTopic(topic.to_owned()).into());
        }
        anyhow::bail!("topic {topic}: {code:?}");
    }
    let mut assignment = TopicPartitionList::new();
    let mut pending: HashMap<i32, i64> = HashMap::new();
    for partition in meta.partitions() {
        let p = partition.id();
        let (low, high) = consumer
            .fetch_watermarks(topic, p, Duration::from_secs(30))
            .with_context(|| format!("cannot read the watermarks of {topic} partition {p}"))?;
        let high = cutoff.end_of(p).map_or(high, |end| end.min(high));
        if high > low {
            assignment.add_partition_offset(topic, p, Offset::Offset(low))?;
            pending.insert(p, high);
        }
    }
    if pending.is_empty() {
        return Ok(());
    }
    consumer.assign(&assignment)?;
    while !pending.is_empty() {
        match consumer.poll(Duration::from_millis(500)) {
            Some(Ok(message)) => {
                let p = message.partition();
                let Some(&high) = pending.get(&p) else {
                    continue;
                };
                if message.offset() >= high {
                    pending.remove(&p);
                    continue;
                }
                let header = |name: &str| {
                    message.headers().and_then(|headers| {
                        headers
                            .iter()
                            .find(|h| h.key == name)
                            .and_then(|h| h.value)
                            .and_then(|v| std::str::from_utf8(v).ok())
                    })
                };
                let commit_lsn = header(HEADER_COMMIT_LSN).and_then(|v| v.parse::<u64>().ok());
                let binlog = header(HEADER_BINLOG_FILE)
                    .zip(header(HEADER_BINLOG_POS).and_then(|v| v.parse::<u64>().ok()));
                each(&TopicRecord {
                    key: message.key(),
                    value: message.payload(),
                    commit_lsn,
                    binlog,
                    partition: p,
                    offset: message.offset(),
                });
                if message.offset() + 1 >= high {
                    pending.remove(&p);
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                pending.remove(&p);
            }
            Some(Err(error)) => return Err(error).context(format!("reading topic {topic}")),
            None => {}
        }
    }
    consumer.unassign()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::canonical::ColumnClass;
    use crate::verify::source::{Column, TablePlan};

    fn plan() -> TablePlan {
        TablePlan::for_tests(
            vec![
                Column {
                    name: "id".into(),
                    class: ColumnClass::Int,
                },
                Column {
                    name: "note".into(),
                    class: ColumnClass::Text,
                },
            ],
            1,
            4,
        )
    }

    /// A record's key, value and commit LSN.
    type Recorded = (Vec<u8>, Option<Vec<u8>>, u64);

    fn record(key: &str, value: Option<&str>, lsn: u64) -> Recorded {
        (key.into(), value.map(Into::into), lsn)
    }

    fn view(plan: &TablePlan, records: &[Recorded]) -> Vec<(i64, bool)> {
        let events = EventOptions::default();
        let cutoff = Cutoff::CommitLsn(100);
        let mut view = TopicView::new(plan, &events, &cutoff, PassFilter::Range(0, 4));
        for (offset, (key, value, lsn)) in records.iter().enumerate() {
            view.apply(&TopicRecord {
                key: Some(key),
                value: value.as_deref(),
                commit_lsn: Some(*lsn),
                binlog: None,
                partition: 0,
                offset: offset as i64,
            });
        }
        let mut out: Vec<(i64, bool)> = view.keys.values().map(|k| (k.hash, k.partial)).collect();
        out.sort_unstable();
        out
    }

    fn hash_of(id: i64, note: &str) -> i64 {
        let mut form = Vec::new();
        push_piece(&mut form, &Piece::Value(&id.to_string()));
        push_piece(&mut form, &Piece::Value(note));
        row_hash(&form)
    }

    #[test]
    fn the_newest_record_before_the_position_wins() {
        let plan = plan();
        let c =
            |id: i64, note: &str| format!(r#"{{"op":"c","after":{{"id":{id},"note":"{note}"}}}}"#);
        let got = view(
            &plan,
            &[
                record(r#"{"id":1}"#, Some(&c(1, "a")), 10),
                record(r#"{"id":1}"#, Some(&c(1, "b")), 20),
                // At or after the position: a change the snapshot does not see.
                record(r#"{"id":1}"#, Some(&c(1, "later")), 100),
                record(r#"{"id":2}"#, Some(&c(2, "x")), 10),
                record(r#"{"id":2}"#, Some(r#"{"op":"d","after":null}"#), 30),
                record(r#"{"id":2}"#, None, 30),
                record(r#"{"id":3}"#, Some(&c(3, "y")), 10),
                // Deleted after the position: still there at it.
                record(r#"{"id":3}"#, None, 200),
            ],
        );
        let mut want = vec![(hash_of(1, "b"), false), (hash_of(3, "y"), false)];
        want.sort_unstable();
        assert_eq!(got, want);
    }

    /// An Avro value whose bytes are not in the wire format differs (with its key); it does
    /// not make the topic unreadable. (No registry is asked: the bytes fail before.)
    #[tokio::test]
    async fn an_avro_value_that_cannot_be_decoded_is_a_differing_row() {
        let plan = plan();
        let events = EventOptions {
            value_format: Some(crate::event::EventFormat::Avro),
            ..EventOptions::default()
        };
        let registry: crate::registry::RegistryConfig =
            toml::from_str("url = \"http://127.0.0.1:9\"").unwrap();
        let avro = AvroTopics::new(&events, Some(&registry)).unwrap().unwrap();
        let cutoff = Cutoff::CommitLsn(100);
        let mut view = TopicView::new(
            &plan,
            &events,
            &cutoff,
            PassFilter::Detail(vec![0, 1, 2, 3]),
        )
        .with_avro(Some(&avro));
        view.apply(&TopicRecord {
            key: Some(br#"{"id":1}"#),
            value: Some(b"{\"op\":\"c\"}"),
            commit_lsn: Some(10),
            binlog: None,
            partition: 0,
            offset: 0,
        });
        assert_eq!(view.stats.unreadable, 0);
        let state = view.keys.values().next().expect("the key is kept");
        let detail = state.detail.as_deref().unwrap();
        assert_eq!(detail.key, serde_json::json!({"id": 1}));
        assert!(
            detail.after.as_str().unwrap().contains("wire format"),
            "{:?}",
            detail.after
        );
    }

    #[test]
    fn schemas_envelopes_and_unavailable_values() {
        let plan = plan();
        let got = view(
            &plan,
            &[record(
                r#"{"schema":{},"payload":{"id":5}}"#,
                Some(
                    r#"{"schema":{},"payload":{"op":"u","after":{"id":5},"unavailable_columns":["note"]}}"#,
                ),
                10,
            )],
        );
        let mut form = Vec::new();
        push_piece(&mut form, &Piece::Value("5"));
        push_piece(&mut form, &Piece::Unavailable);
        assert_eq!(got, vec![(row_hash(&form), true)]);
        // Debezium's default: the placeholder stands in `after`.
        let got = view(
            &plan,
            &[record(
                r#"{"id":5}"#,
                Some(r#"{"op":"u","after":{"id":5,"note":"__debezium_unavailable_value"}}"#),
                10,
            )],
        );
        assert_eq!(got, vec![(row_hash(&form), true)]);
    }
    /// A sink's cutoff takes, per partition and sub-partition (the sink's hash of the key
    /// bytes), the records before the applied offset; a value without `op` is a plain row and a
    /// column it does not carry is not known from it.
    #[test]
    fn a_sinks_cutoff_takes_what_each_sub_partition_applied() {
        let plan = plan();
        let events = EventOptions::default();
        let (one, two) = (br#"{"id":1}"#.as_slice(), br#"{"id":2}"#.as_slice());
        let subs = 4;
        let (sub_one, sub_two) = (
            crate::sink::worker::sub_partition(Some(one), 0, subs) as usize,
            crate::sink::worker::sub_partition(Some(two), 0, subs) as usize,
        );
        assert_ne!(
            sub_one, sub_two,
            "the keys are meant to be in two sub-partitions"
        );
        let mut next = vec![0i64; subs as usize];
        // Key 1's sub-partition applied offsets 0 to 2 (not 3 and after); key 2's 0 to 3.
        next[sub_one] = 3;
        next[sub_two] = 4;
        let cutoff = Cutoff::Applied {
            sub_partitions: subs,
            next: HashMap::from([(0, next)]),
        };
        let mut view =
            TopicView::new(&plan, &events, &cutoff, PassFilter::Range(0, 4)).as_sink_applies(true);
        let records: [(&[u8], &str, i32); 6] = [
            (one, r#"{"id":1,"note":"a"}"#, 0),
            (two, r#"{"op":"c","after":{"id":2,"note":"x"}}"#, 0),
            (one, r#"{"id":1,"note":"b"}"#, 0),
            (two, r#"{"op":"u","after":{"id":2}}"#, 0),
            (one, r#"{"id":1,"note":"not applied"}"#, 0),
            // Partition 1: nothing applied.
            (two, r#"{"id":2,"note":"elsewhere"}"#, 1),
        ];
        for (offset, (key, value, partition)) in records.iter().enumerate() {
            view.apply(&TopicRecord {
                key: Some(key),
                value: Some(value.as_bytes()),
                commit_lsn: None,
                binlog: None,
                partition: *partition,
                offset: offset as i64,
            });
        }
        assert_eq!(view.stats.after_position, 2);
        assert_eq!(view.stats.unpositioned, 0);
        let mut got: Vec<(i64, bool)> = view.keys.values().map(|k| (k.hash, k.partial)).collect();
        got.sort_unstable();
        let mut partial = Vec::new();
        push_piece(&mut partial, &Piece::Value("2"));
        push_piece(&mut partial, &Piece::Unavailable);
        let mut want = vec![(hash_of(1, "b"), false), (row_hash(&partial), true)];
        want.sort_unstable();
        assert_eq!(got, want);
    }
}

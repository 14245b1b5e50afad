//! The connector's committed source offset, from Connect's offsets topic or from a dump of it.
//!
//! Connect keys each offset record by `["<connector name>",{<source partition>}]` (JSON), the
//! Debezium connectors' partition being `{"server":"<topic.prefix>"}`, and the value is the
//! source offset (JSON), or null when the offsets were reset. The newest record for the key
//! wins, as Connect reads it back.

use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::message::Message as _;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use sluice_engine::Lsn;

/// One record of the offsets topic: its key and value as JSON (`None`: a tombstone).
#[derive(Debug, Clone, PartialEq)]
pub struct OffsetRecord {
    /// `["<connector>",{"server":"<prefix>"}]`.
    pub key: serde_json::Value,
    /// The source offset, or `None` (reset).
    pub value: Option<serde_json::Value>,
}

/// Parses a dump: lines `key<TAB>value` (kafka-console-consumer with print.key=true; `null`
/// for a tombstone) or JSON lines `{"key":…,"value":…}` (each either JSON or a string holding
/// JSON). Blank lines are skipped.
///
/// # Errors
///
/// A line of neither form, naming its number.
pub fn parse_dump(text: &str) -> anyhow::Result<Vec<OffsetRecord>> {
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            continue;
        }
        let number = i + 1;
        let record = if let Some((key, value)) = line.split_once('\t') {
            OffsetRecord {
                key: serde_json::from_str(key)
                    .with_context(|| format!("line {number}: the key is not JSON"))?,
                value: json_or_null(value)
                    .with_context(|| format!("line {number}: the value is not JSON"))?,
            }
        } else {
            let object: serde_json::Value = serde_json::from_str(line).with_context(|| {
                format!("line {number}: expected key<TAB>value or a JSON object {{\"key\":…,\"value\":…}}")
            })?;
            let (Some(key), Some(value)) = (object.get("key"), object.get("value")) else {
                bail!("line {number}: expected a JSON object with \"key\" and \"value\"");
            };
            OffsetRecord {
                key: unwrap_string(key)?,
                value: match unwrap_string(value)? {
                    serde_json::Value::Null => None,
                    v => Some(v),
                },
            }
        };
        records.push(record);
    }
    Ok(records)
}

fn json_or_null(text: &str) -> anyhow::Result<Option<serde_json::Value>> {
    match serde_json::from_str(text.trim())? {
        serde_json::Value::Null => Ok(None),
        value => Ok(Some(value)),
    }
}

/// A JSON string that holds JSON (a dump that kept the bytes as text) is that JSON.
fn unwrap_string(value: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
    match value {
        serde_json::Value::String(text) => {
            serde_json::from_str(text).context("a string that does not hold JSON")
        }
        other => Ok(other.clone()),
    }
}

/// Reads every record of Connect's offsets topic from the start to its end.
///
/// # Errors
///
/// The topic does not exist or cannot be read.
pub fn read_topic(brokers: &str, topic: &str) -> anyhow::Result<Vec<OffsetRecord>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "sluice-import-offsets")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .context("cannot create a Kafka consumer")?;
    let timeout = Duration::from_secs(30);
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .with_context(|| format!("cannot read the metadata of {topic} from {brokers}"))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic && t.error().is_none())
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    if partitions.is_empty() {
        bail!(
            "the offsets topic {topic:?} does not exist on {brokers} (Connect's offset.storage.topic)"
        );
    }
    let mut ends = Vec::new();
    let mut assignment = TopicPartitionList::new();
    for &partition in &partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, partition, timeout)
            .with_context(|| format!("cannot read the end offsets of {topic}"))?;
        if high > low {
            assignment.add_partition_offset(topic, partition, Offset::Beginning)?;
            ends.push((partition, high));
        }
    }
    let mut records = Vec::new();
    if ends.is_empty() {
        return Ok(records);
    }
    consumer.assign(&assignment)?;
    let mut remaining: std::collections::HashMap<i32, i64> = ends.into_iter().collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !remaining.is_empty() {
        if std::time::Instant::now() > deadline {
            bail!("reading {topic} took over two minutes; dump it to a file and pass that instead");
        }
        let Some(message) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let message = message.with_context(|| format!("cannot read {topic}"))?;
        if let Some(key) = message.key() {
            let key = serde_json::from_slice(key).ok();
            let value = match message.payload() {
                None => None,
                Some(bytes) => serde_json::from_slice(bytes).ok(),
            };
            if let Some(key) = key {
                records.push(OffsetRecord { key, value });
            }
        }
        if let Some(&end) = remaining.get(&message.partition())
            && message.offset() + 1 >= end
        {
            remaining.remove(&message.partition());
        }
    }
    Ok(records)
}

/// The newest offset of the connector `name` (any name when `None`) for the server
/// `topic_prefix`: `Ok(None)` when there is none or the newest is a tombstone (reset).
pub fn newest<'a>(
    records: &'a [OffsetRecord],
    name: Option<&str>,
    topic_prefix: &str,
) -> Option<&'a OffsetRecord> {
    records.iter().rev().find(|r| {
        let Some(key) = r.key.as_array() else {
            return false;
        };
        let named = match (name, key.first().and_then(|n| n.as_str())) {
            (Some(name), Some(connector)) => name == connector,
            (None, Some(_)) => true,
            _ => false,
        };
        named
            && key
                .get(1)
                .and_then(|p| p.get("server"))
                .and_then(|s| s.as_str())
                == Some(topic_prefix)
    })
}

/// The PostgreSQL connector's offset: where Debezium is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOffset {
    /// `lsn`: the last change it processed.
    pub lsn: Option<Lsn>,
    /// `lsn_commit`: the end of the last transaction it processed completely (what it
    /// confirms to the slot).
    pub lsn_commit: Option<Lsn>,
    /// `lsn_proc`: the last position processed completely.
    pub lsn_proc: Option<Lsn>,
    /// `txId`.
    pub tx_id: Option<i64>,
    /// The snapshot was still running (`snapshot` set, neither `last_snapshot_record` nor
    /// `snapshot_completed`).
    pub snapshot_running: bool,
}

impl PgOffset {
    /// Reads an offset value.
    ///
    /// # Errors
    ///
    /// Not an object, or no `lsn`.
    pub fn parse(value: &serde_json::Value) -> anyhow::Result<Self> {
        let object = value
            .as_object()
            .context("the offset is not a JSON object")?;
        let lsn = |key: &str| -> anyhow::Result<Option<Lsn>> {
            match object.get(key) {
                None | Some(serde_json::Value::Null) => Ok(None),
                Some(v) => {
                    let n = v
                        .as_u64()
                        .with_context(|| format!("offset {key}: expected a number, got {v}"))?;
                    Ok(Some(Lsn(n)))
                }
            }
        };
        let offset = Self {
            lsn: lsn("lsn")?,
            lsn_commit: lsn("lsn_commit")?,
            lsn_proc: lsn("lsn_proc")?,
            tx_id: object.get("txId").and_then(serde_json::Value::as_i64),
            snapshot_running: is_true(object.get("snapshot"))
                && !is_true(object.get("last_snapshot_record"))
                && !is_true(object.get("snapshot_completed")),
        };
        if offset.lsn.is_none() && offset.lsn_commit.is_none() && offset.lsn_proc.is_none() {
            bail!(
                "the offset has no lsn, lsn_commit or lsn_proc: not a Debezium PostgreSQL offset"
            );
        }
        Ok(offset)
    }

    /// Where Debezium's committed work ends: what it confirms to the slot when it commits this
    /// offset, `lsn_commit`, else `lsn_proc` (PostgresStreamingChangeEventSource.commitOffset);
    /// an offset of the snapshot alone has only `lsn`, the snapshot's position, where a
    /// restarted Debezium starts streaming.
    pub fn confirmed(&self) -> Option<Lsn> {
        self.lsn_commit.or(self.lsn_proc).or(self.lsn)
    }
}

fn is_true(value: Option<&serde_json::Value>) -> bool {
    match value {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::String(s)) => s == "true" || s == "INITIAL" || s == "TRUE",
        _ => false,
    }
}

/// The MySQL connector's offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MysqlOffset {
    /// `file`: the binlog file.
    pub file: String,
    /// `pos`: the position of the last committed transaction's start in it.
    pub pos: u64,
    /// `gtids`: the GTID set completed.
    pub gtids: Option<String>,
    /// `row` / `event`: events of the transaction at `pos` already processed.
    pub skip_events: u64,
    /// The snapshot was still running.
    pub snapshot_running: bool,
}

impl MysqlOffset {
    /// Reads an offset value.
    ///
    /// # Errors
    ///
    /// Not an object, or no `file`/`pos`.
    pub fn parse(value: &serde_json::Value) -> anyhow::Result<Self> {
        let object = value
            .as_object()
            .context("the offset is not a JSON object")?;
        let file = object
            .get("file")
            .and_then(|f| f.as_str())
            .context("the offset has no binlog file: not a Debezium MySQL offset")?
            .to_owned();
        let pos = object
            .get("pos")
            .and_then(serde_json::Value::as_u64)
            .context("the offset has no binlog position (pos)")?;
        Ok(Self {
            file,
            pos,
            gtids: object
                .get("gtids")
                .and_then(|g| g.as_str())
                .map(str::to_owned),
            skip_events: object
                .get("event")
                .and_then(serde_json::Value::as_u64)
                .unwrap_or(0),
            snapshot_running: is_true(object.get("snapshot"))
                && !is_true(object.get("snapshot_completed")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_dump_forms_and_tombstones() {
        let tab = "[\"inv\",{\"server\":\"shop\"}]\t{\"lsn_proc\":100,\"lsn_commit\":90,\"lsn\":100,\"txId\":7}\n\
                   [\"other\",{\"server\":\"shop\"}]\t{\"lsn\":5}\n\
                   [\"inv\",{\"server\":\"shop\"}]\t{\"lsn_proc\":200,\"lsn_commit\":180,\"lsn\":200,\"txId\":8}\n";
        let records = parse_dump(tab).unwrap();
        let found = newest(&records, Some("inv"), "shop").unwrap();
        let offset = PgOffset::parse(found.value.as_ref().unwrap()).unwrap();
        assert_eq!(offset.lsn_commit, Some(Lsn(180)));
        assert_eq!(offset.confirmed(), Some(Lsn(180)));
        assert!(!offset.snapshot_running);

        let lines = "{\"key\":[\"inv\",{\"server\":\"shop\"}],\"value\":{\"lsn\":1}}\n\
                     {\"key\":\"[\\\"inv\\\",{\\\"server\\\":\\\"shop\\\"}]\",\"value\":null}\n";
        let records = parse_dump(lines).unwrap();
        assert_eq!(records.len(), 2);
        assert_eq!(newest(&records, Some("inv"), "shop").unwrap().value, None);
        assert!(newest(&records, Some("inv"), "elsewhere").is_none());
    }

    /// Real offsets topics, dumped from `scripts/takeover-demo` runs with
    /// `kcat -C -t <offsets topic> -e -f '%k\t%s\n'` (the console consumer's print.key form).
    #[test]
    fn real_offsets_topics() {
        let pg = parse_dump(include_str!("../../tests/debezium/offsets/postgres.tsv")).unwrap();
        // The first record is mid-snapshot.
        let first = PgOffset::parse(pg[0].value.as_ref().unwrap()).unwrap();
        assert!(first.snapshot_running);
        let found = newest(&pg, Some("tko-4084b2a9"), "tko4084b2a9").unwrap();
        let offset = PgOffset::parse(found.value.as_ref().unwrap()).unwrap();
        assert!(!offset.snapshot_running);
        assert_eq!(offset.lsn_commit, Some("2/678008C8".parse().unwrap()));
        assert_eq!(offset.lsn, Some("2/678009E0".parse().unwrap()));
        assert_eq!(offset.tx_id, Some(222_504));
        assert_eq!(offset.confirmed(), offset.lsn_commit);
        assert!(newest(&pg, Some("another"), "tko4084b2a9").is_none());
        // The snapshot's own offset (lsn only) is where streaming starts.
        let snapshot = PgOffset::parse(pg[1].value.as_ref().unwrap()).unwrap();
        assert!(!snapshot.snapshot_running);
        assert_eq!(snapshot.confirmed(), snapshot.lsn);

        let my = parse_dump(include_str!("../../tests/debezium/offsets/mysql.tsv")).unwrap();
        let found = newest(&my, Some("tko-5c3d592d"), "tko5c3d592d").unwrap();
        let offset = MysqlOffset::parse(found.value.as_ref().unwrap()).unwrap();
        assert_eq!(
            (offset.file.as_str(), offset.pos),
            ("binlog.000009", 2_380_688)
        );
        assert_eq!(
            offset.gtids.as_deref(),
            Some("de5a4005-eb44-11f1-987e-02fc00000001:1-117460")
        );
        assert!(!offset.snapshot_running);
        assert!(
            MysqlOffset::parse(my[0].value.as_ref().unwrap())
                .unwrap()
                .snapshot_running
        );
    }

    #[test]
    fn a_bad_line_is_named() {
        let error = parse_dump("\n[\"a\"]\tnot json\n").unwrap_err();
        assert!(format!("{error:#}").contains("line 2"), "{error:#}");
    }

    #[test]
    fn mysql_offsets() {
        let value = serde_json::json!({"ts_sec":1,"file":"binlog.000003","pos":4567,"gtids":"uuid:1-9","row":1,"server_id":1,"event":2});
        let offset = MysqlOffset::parse(&value).unwrap();
        assert_eq!(
            (offset.file.as_str(), offset.pos, offset.skip_events),
            ("binlog.000003", 4567, 2)
        );
        assert_eq!(offset.gtids.as_deref(), Some("uuid:1-9"));
        let snapshot = serde_json::json!({"file":"b.1","pos":4,"snapshot":true});
        assert!(MysqlOffset::parse(&snapshot).unwrap().snapshot_running);
    }
}

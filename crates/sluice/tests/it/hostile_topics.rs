//! Hostile topics for the files and PostgreSQL sinks: random bytes, truncated JSON, JSON nested
//! 100,000 levels deep, invalid UTF-8, a 10 MB value, values of the wrong type for the target
//! column, keys that are not objects and records with headers only, interleaved with valid
//! change events in one partition (so every record's offset is known).
//!
//! Under `dead_letter`, every bad record is in the dead-letter topic — with its reason, its
//! topic/partition/offset, its original headers, and its value (cut to
//! `dead_letter_max_value_bytes` with its original size when larger) — and every valid one is
//! written exactly once; under `stop`, the pipeline stops naming topic, partition, offset and
//! the reason. Neither panics, overflows its stack or hangs, and the sink's peak RSS stays
//! within a bound tied to its `delivery.memory_limit`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::sink::create_topic;
use crate::support::{Sluice, free_port, stack, test_dir, unique, wait_until};

/// The 10 MB value.
const BIG: usize = 10 * 1024 * 1024;
/// The topics' `max.message.bytes`, so that the 10 MB value fits.
const TOPIC_MAX_BYTES: usize = 12 * 1024 * 1024;
/// The dead-letter records' cap on keys and values.
const DEAD_LETTER_CAP: usize = 100_000;
/// The sinks' `delivery.memory_limit`.
const MEMORY_LIMIT_MIB: u64 = 64;
/// The header every produced record carries (its index), to be found again in the dead letter.
const ID_HEADER: &str = "hostile-id";

/// One record to produce.
#[derive(Debug, Clone)]
struct Hostile {
    /// What it is (for messages).
    what: &'static str,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    /// Whether the sink must refuse it; then a word its reason must contain.
    refused: Option<&'static str>,
}

impl Hostile {
    fn valid(what: &'static str, key: Option<Vec<u8>>, value: String) -> Self {
        Self {
            what,
            key,
            value: Some(value.into_bytes()),
            refused: None,
        }
    }

    fn bad(
        what: &'static str,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
        reason: &'static str,
    ) -> Self {
        Self {
            what,
            key,
            value,
            refused: Some(reason),
        }
    }
}

/// `{"a":{"a":…}}`, `depth` levels deep.
fn nested_object(depth: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(depth * 6 + 2);
    for _ in 0..depth {
        out.extend_from_slice(b"{\"a\":");
    }
    out.extend_from_slice(b"1");
    out.extend(std::iter::repeat_n(b'}', depth));
    out
}

/// `[[…]]`, `depth` levels deep.
fn nested_array(depth: usize) -> Vec<u8> {
    let mut out = vec![b'['; depth];
    out.extend(std::iter::repeat_n(b']', depth));
    out
}

/// Bytes from a fixed-seed generator (not UTF-8, not JSON).
fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    let mut out: Vec<u8> = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect();
    out[0] = 0xff;
    out
}

/// The bad records both sinks refuse; a record with headers only (null key and value) is
/// refused for `headers_only` (a word of its reason).
fn common_bad(headers_only: &'static str) -> Vec<Hostile> {
    let mut big = vec![b'x'; BIG];
    big[0] = b'{';
    vec![
        Hostile::bad(
            "random bytes",
            Some(b"{\"id\":9001}".to_vec()),
            Some(random_bytes(300, 7)),
            "UTF-8",
        ),
        Hostile::bad(
            "truncated JSON",
            Some(b"{\"id\":9002}".to_vec()),
            Some(br#"{"before":null,"after":{"id":9002,"qty"#.to_vec()),
            "JSON",
        ),
        Hostile::bad(
            "invalid UTF-8",
            Some(b"{\"id\":9003}".to_vec()),
            Some(b"{\"after\":{\"id\":9003,\"note\":\"\xc3\x28\xff\"},\"op\":\"c\"}".to_vec()),
            "UTF-8",
        ),
        Hostile::bad(
            "a 10 MB value",
            Some(b"{\"id\":9004}".to_vec()),
            Some(big),
            "JSON",
        ),
        Hostile::bad("headers only", None, None, headers_only),
    ]
}

/// Produces `records` to partition 0 of `topic` in order, each with the [`ID_HEADER`] of its
/// index and a null-valued header; returns the offsets (`records[i]` is at `offsets[i]`).
fn produce(topic: &str, records: &[Hostile]) -> Vec<i64> {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("enable.idempotence", "true")
        .set("message.max.bytes", TOPIC_MAX_BYTES.to_string())
        .create()
        .unwrap();
    for (index, record) in records.iter().enumerate() {
        let id = index.to_string();
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: ID_HEADER,
                value: Some(id.as_bytes()),
            })
            .insert(Header::<&[u8]> {
                key: "null-header",
                value: None,
            });
        let mut base = BaseRecord::<[u8], [u8]>::to(topic)
            .partition(0)
            .headers(headers);
        if let Some(key) = &record.key {
            base = base.key(key);
        }
        if let Some(value) = &record.value {
            base = base.payload(value);
        }
        loop {
            match producer.send(base) {
                Ok(()) => break,
                Err((error, back)) => {
                    assert!(
                        matches!(
                            error.rdkafka_error_code(),
                            Some(rdkafka::types::RDKafkaErrorCode::QueueFull)
                        ),
                        "{}: {error}",
                        record.what
                    );
                    base = back;
                    std::thread::sleep(Duration::from_millis(5));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    // One partition, idempotent, in order: record i is at offset i.
    (0..records.len() as i64).collect()
}

/// A topic of one partition that takes the 10 MB value.
async fn create_big_topic(topic: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let limit = TOPIC_MAX_BYTES.to_string();
    let created =
        admin
            .create_topics(
                &[NewTopic::new(topic, 1, TopicReplication::Fixed(1))
                    .set("max.message.bytes", &limit)],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await
            .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
}

/// A dead-letter record as bytes.
#[derive(Debug)]
struct Dead {
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: HashMap<String, Option<Vec<u8>>>,
}

impl Dead {
    fn header(&self, name: &str) -> String {
        let value = self
            .headers
            .get(name)
            .unwrap_or_else(|| panic!("no header {name}: {:?}", self.headers.keys()));
        String::from_utf8_lossy(value.as_deref().unwrap_or_default()).into_owned()
    }
}

/// Reads `topic` from the beginning until it holds `count` records or `timeout`.
fn read_dead_letters(topic: &str, count: usize, timeout: Duration) -> Vec<Dead> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("group.id", unique("hostile-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + timeout;
    let mut out = Vec::new();
    // Past `count`, a little longer: a duplicate would show.
    let mut settle: Option<Instant> = None;
    while Instant::now() < deadline && settle.is_none_or(|s| s.elapsed() < Duration::from_secs(2)) {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let Ok(message) = message else {
            continue;
        };
        let headers = message
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        out.push(Dead {
            key: message.key().map(<[u8]>::to_vec),
            value: message.payload().map(<[u8]>::to_vec),
            headers,
        });
        if out.len() >= count && settle.is_none() {
            settle = Some(Instant::now());
        }
    }
    out
}

/// Checks that the dead-letter topic holds exactly the bad records of `records`, each once,
/// with its reason, origin, original headers and (cut) value.
fn assert_dead_lettered(dead: &[Dead], records: &[Hostile], topic: &str, log: &str) {
    let bad: BTreeMap<usize, &Hostile> = records
        .iter()
        .enumerate()
        .filter(|(_, r)| r.refused.is_some())
        .collect();
    let mut seen = BTreeSet::new();
    for record in dead {
        let index: usize = record.header(ID_HEADER).parse().unwrap();
        assert!(seen.insert(index), "record {index} dead-lettered twice");
        let original = bad.get(&index).unwrap_or_else(|| {
            panic!(
                "a valid record was dead-lettered: {:?} ({}); log:\n{log}",
                records[index].what,
                record.header("sluice.dlq.reason")
            )
        });
        let reason = record.header("sluice.dlq.reason");
        assert!(
            !reason.is_empty() && reason.contains(original.refused.unwrap_or_default()),
            "{}: reason {reason:?}",
            original.what
        );
        assert_eq!(record.header("sluice.dlq.topic"), topic);
        assert_eq!(record.header("sluice.dlq.partition"), "0");
        assert_eq!(record.header("sluice.dlq.offset"), index.to_string());
        assert_eq!(
            record.headers.get("null-header"),
            Some(&None),
            "the original headers are kept, null values too"
        );
        assert_eq!(record.key, original.key, "{}", original.what);
        match &original.value {
            Some(value) if value.len() > DEAD_LETTER_CAP => {
                assert_eq!(
                    record.value.as_deref(),
                    Some(&value[..DEAD_LETTER_CAP]),
                    "{}",
                    original.what
                );
                assert_eq!(
                    record.header("sluice.dlq.value_truncated_from_bytes"),
                    value.len().to_string()
                );
            }
            value => {
                assert_eq!(&record.value, value, "{}", original.what);
                assert!(
                    !record
                        .headers
                        .contains_key("sluice.dlq.value_truncated_from_bytes")
                );
            }
        }
    }
    let missing: Vec<&str> = bad
        .iter()
        .filter(|(i, _)| !seen.contains(i))
        .map(|(_, r)| r.what)
        .collect();
    assert!(
        missing.is_empty(),
        "not in the dead-letter topic: {missing:?}; log:\n{log}"
    );
}

/// The peak resident set (VmHWM) of process `pid`, in MiB.
fn peak_rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

/// The peak RSS bound: the configured limit, plus what one record as large as the 10 MB value
/// costs in its copies (librdkafka's fetch buffer, the queue, the worker's copy, the
/// dead-letter record), plus the process's own baseline (a debug build's code and its
/// runtime).
fn rss_bound_mib() -> f64 {
    MEMORY_LIMIT_MIB as f64 + 4.0 * (BIG as f64 / 1024.0 / 1024.0) + 64.0
}

fn assert_peak_rss(sink: &Sluice, which: &str) -> f64 {
    let peak = peak_rss_mib(sink.pid().expect("the sink runs"));
    eprintln!(
        "{which}: peak RSS {peak:.1} MiB (memory_limit {MEMORY_LIMIT_MIB} MiB, bound {:.1} MiB)",
        rss_bound_mib()
    );
    assert!(peak > 0.0, "no VmHWM");
    assert!(
        peak < rss_bound_mib(),
        "{which}: peak RSS {peak:.1} MiB over the bound {:.1} MiB",
        rss_bound_mib()
    );
    peak
}

/// Waits for the sink to exit by itself; returns its log.
fn wait_stopped(sink: &mut Sluice, what: &str) -> String {
    wait_until(
        &format!("the sink to stop on {what}"),
        Duration::from_secs(60),
        || sink.exited().is_some(),
    );
    let log = sink.log_text();
    assert!(!log.contains("panicked"), "{what}: a panic:\n{log}");
    log
}

// ---- the files sink ----

/// A valid record for the files sink: its path template needs `created_at`.
fn files_value(n: usize) -> String {
    format!(
        r#"{{"id":"k{n}","seq":0,"created_at":"2026-11-2{}T10:00:00Z"}}"#,
        n % 3
    )
}

/// The files sink's records: [`common_bad`], JSON nested 100,000 levels deep (an object
/// without the template's field, and an array: both parse, neither has `created_at`), and
/// valid records between them, some with keys that are not objects (the files sink writes
/// any key, so they are valid).
fn files_records() -> Vec<Hostile> {
    let mut bad = common_bad("tombstone");
    bad.push(Hostile::bad(
        "an object nested 100,000 levels",
        Some(b"deep".to_vec()),
        Some(nested_object(100_000)),
        "created_at",
    ));
    bad.push(Hostile::bad(
        "an array nested 100,000 levels",
        Some(b"deeper".to_vec()),
        Some(nested_array(100_000)),
        "created_at",
    ));
    let keys: [Option<Vec<u8>>; 5] = [
        Some(b"[1,2]".to_vec()),
        Some(b"42".to_vec()),
        Some(random_bytes(16, 3)),
        None,
        Some(b"\"text\"".to_vec()),
    ];
    let mut records = Vec::new();
    let mut n = 0;
    for bad in bad {
        for _ in 0..3 {
            let key = keys
                .get(n % 7)
                .cloned()
                .unwrap_or_else(|| Some(format!("k{n}").into_bytes()));
            records.push(Hostile::valid("valid", key, files_value(n)));
            n += 1;
        }
        records.push(bad);
    }
    records.push(Hostile::valid(
        "valid",
        Some(b"last".to_vec()),
        files_value(n),
    ));
    records
}

fn files_toml(name: &str, topic: &str, root: &Path, port: u16, delivery: &str) -> String {
    format!(
        r#"
name = "{name}"

[source.kafka]
brokers = "{brokers}"
topics = ["{topic}"]
group_id = "{name}"
commit_interval_ms = 500
[source.kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

[sink.files]
path = "{root}"
path_template = "{{topic}}/dt={{created_at:%Y-%m-%d}}/"
format = "jsonl"
roll_interval_ms = 300
sub_partitions = 2
# A record with headers only is a failure, not a tombstone skipped by choice.
skip_tombstones = false

[delivery]
memory_limit = "{MEMORY_LIMIT_MIB}MiB"
{delivery}

[admin]
listen = "127.0.0.1:{port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
"#,
        brokers = stack().brokers,
        root = root.display(),
    )
}

/// The offsets in committed output files under `root` (each line's `_offset`), with repeats.
fn output_offsets(root: &Path) -> Vec<i64> {
    fn walk(dir: &Path, out: &mut Vec<i64>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with("_sluice") || name.starts_with(".tmp") {
                continue;
            }
            if path.is_dir() {
                walk(&path, out);
            } else if name.starts_with("part-") {
                let text = std::fs::read_to_string(&path).unwrap();
                for line in text.lines() {
                    let value: serde_json::Value = serde_json::from_str(line).unwrap();
                    out.push(value["_offset"].as_i64().unwrap());
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(root, &mut out);
    out.sort_unstable();
    out
}

#[tokio::test(flavor = "multi_thread")]
async fn files_sink_dead_letters_every_hostile_record_and_writes_every_valid_one_once() {
    let name = unique("hostile_files");
    let topic = name.clone();
    let dead_letter_topic = format!("{name}_dlq");
    create_big_topic(&topic).await;
    create_topic(&dead_letter_topic, 1).await;
    let records = files_records();
    let offsets = {
        let (topic, records) = (topic.clone(), records.clone());
        tokio::task::spawn_blocking(move || produce(&topic, &records))
            .await
            .unwrap()
    };
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    let delivery = format!(
        "on_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\ndead_letter_max_value_bytes = {DEAD_LETTER_CAP}"
    );
    let mut sink = Sluice::start(
        &dir,
        &files_toml(&name, &topic, &root, port, &delivery),
        port,
    );
    let valid: Vec<i64> = records
        .iter()
        .zip(&offsets)
        .filter(|(r, _)| r.refused.is_none())
        .map(|(_, o)| *o)
        .collect();
    let bad_count = records.len() - valid.len();
    let dead = {
        let dead_letter_topic = dead_letter_topic.clone();
        tokio::task::spawn_blocking(move || {
            read_dead_letters(&dead_letter_topic, bad_count, Duration::from_secs(60))
        })
        .await
        .unwrap()
    };
    assert_dead_lettered(&dead, &records, &topic, &sink.log_text());
    wait_until(
        "every valid record in files",
        Duration::from_secs(60),
        || output_offsets(&root).len() >= valid.len(),
    );
    let peak = assert_peak_rss(&sink, "files sink, dead_letter");
    assert!(sink.stop(), "graceful stop failed:\n{}", sink.log_text());
    assert_eq!(
        output_offsets(&root),
        valid,
        "every valid record exactly once"
    );
    let log = sink.log_text();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "files sink: {} records, {bad_count} dead-lettered, peak RSS {peak:.1} MiB",
        records.len()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn files_sink_stops_on_each_hostile_record_naming_where_and_why() {
    for (index, bad) in files_records()
        .into_iter()
        .filter(|r| r.refused.is_some())
        .enumerate()
    {
        let name = unique(&format!("hostile_files_stop{index}"));
        let topic = name.clone();
        create_big_topic(&topic).await;
        let records = vec![
            Hostile::valid("valid", Some(b"a".to_vec()), files_value(0)),
            Hostile::valid("valid", Some(b"b".to_vec()), files_value(1)),
            bad.clone(),
            Hostile::valid("valid", Some(b"c".to_vec()), files_value(2)),
        ];
        {
            let topic = topic.clone();
            tokio::task::spawn_blocking(move || produce(&topic, &records))
                .await
                .unwrap();
        }
        let dir = test_dir(&name);
        let port = free_port();
        let mut sink = Sluice::start(
            &dir,
            &files_toml(
                &name,
                &topic,
                &dir.join("out"),
                port,
                "on_failure = \"stop\"",
            ),
            port,
        );
        let log = wait_stopped(&mut sink, bad.what);
        assert!(
            log.contains(&format!("record {topic}/0 offset 2 cannot be written"))
                && log.contains(bad.refused.unwrap_or_default()),
            "{}: {log}",
            bad.what
        );
    }
}

// ---- the PostgreSQL sink ----

/// A valid change event for `app.t` (id, qty, note).
fn pg_event(id: usize) -> (Vec<u8>, String) {
    (
        format!(r#"{{"id":{id}}}"#).into_bytes(),
        format!(
            r#"{{"before":null,"after":{{"id":{id},"qty":{id},"note":"n{id}"}},"source":{{}},"op":"c","ts_ms":0}}"#
        ),
    )
}

/// The PostgreSQL sink's records: [`common_bad`], JSON nested 100,000 levels deep (a whole
/// value, and a column's value), a value of the wrong type for its column, keys that are not
/// objects (an array, a number, a string, random bytes, broken JSON), and valid events
/// between them.
fn pg_records() -> Vec<Hostile> {
    let mut bad = common_bad("no key");
    let event_of = |after: &str| {
        format!(r#"{{"before":null,"after":{after},"source":{{}},"op":"c","ts_ms":0}}"#)
            .into_bytes()
    };
    bad.push(Hostile::bad(
        "a value nested 100,000 levels",
        Some(b"{\"id\":9101}".to_vec()),
        Some(nested_array(100_000)),
        "JSON object",
    ));
    let deep_column = {
        let mut after = b"{\"id\":9102,\"qty\":".to_vec();
        after.extend_from_slice(&nested_object(100_000));
        after.extend_from_slice(b",\"note\":\"x\"}");
        event_of(std::str::from_utf8(&after).unwrap())
    };
    bad.push(Hostile::bad(
        "a column nested 100,000 levels",
        Some(b"{\"id\":9102}".to_vec()),
        Some(deep_column),
        "",
    ));
    bad.push(Hostile::bad(
        "a string for an integer column",
        Some(b"{\"id\":9103}".to_vec()),
        Some(event_of(r#"{"id":9103,"qty":"many","note":"x"}"#)),
        "integer",
    ));
    for (what, key) in [
        ("an array key", &b"[9104]"[..]),
        ("a number key", b"9105"),
        ("a string key", b"\"9106\""),
    ] {
        let id: usize = String::from_utf8_lossy(key)
            .trim_matches(|c| c == '[' || c == ']' || c == '"')
            .parse()
            .unwrap();
        bad.push(Hostile::bad(
            what,
            Some(key.to_vec()),
            Some(pg_event(id).1.into_bytes()),
            "not a JSON object",
        ));
    }
    bad.push(Hostile::bad(
        "a key of random bytes",
        Some(random_bytes(20, 11)),
        Some(pg_event(9107).1.into_bytes()),
        "not a JSON object",
    ));
    bad.push(Hostile::bad(
        "a key of broken JSON",
        Some(b"{\"id\":".to_vec()),
        Some(pg_event(9108).1.into_bytes()),
        "not a JSON object",
    ));
    let mut records = Vec::new();
    let mut id = 0;
    for bad in bad {
        for _ in 0..3 {
            let (key, value) = pg_event(id);
            records.push(Hostile::valid("valid", Some(key), value));
            id += 1;
        }
        records.push(bad);
    }
    let (key, value) = pg_event(id);
    records.push(Hostile::valid("valid", Some(key), value));
    records
}

fn pg_toml(name: &str, topic: &str, url: &str, port: u16, delivery: &str) -> String {
    format!(
        r#"
name = "{name}"

[source.kafka]
brokers = "{brokers}"
topics = ["{topic}"]
group_id = "{name}"
[source.kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

[sink.postgres]
url = "{url}"
sub_partitions = 2
batch_records = 300
batch_interval_ms = 50

[delivery]
memory_limit = "{MEMORY_LIMIT_MIB}MiB"
{delivery}

[admin]
listen = "127.0.0.1:{port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
"#,
        brokers = stack().brokers,
    )
}

/// `app.t` in `target`, with a trigger that counts every row written into `app.applied`.
async fn pg_table(target: &tokio_postgres::Client) {
    target
        .batch_execute(
            "CREATE SCHEMA app;
             CREATE TABLE app.t (id bigint PRIMARY KEY, qty integer, note text);
             CREATE TABLE app.applied (id bigint);
             CREATE FUNCTION app.count_applied() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN INSERT INTO app.applied VALUES (NEW.id); RETURN NEW; END $$;
             CREATE TRIGGER applied BEFORE INSERT OR UPDATE ON app.t
               FOR EACH ROW EXECUTE FUNCTION app.count_applied();",
        )
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn pg_sink_dead_letters_every_hostile_record_and_applies_every_valid_one_once() {
    let name = unique("hostile_pg");
    let (url, target) = crate::sink_pg::target_database(&name).await;
    pg_table(&target).await;
    let topic = format!("{name}.app.t");
    let dead_letter_topic = format!("{name}_dlq");
    create_big_topic(&topic).await;
    create_topic(&dead_letter_topic, 1).await;
    let records = pg_records();
    {
        let (topic, records) = (topic.clone(), records.clone());
        tokio::task::spawn_blocking(move || produce(&topic, &records))
            .await
            .unwrap();
    }
    let port = free_port();
    let delivery = format!(
        "on_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\ndead_letter_max_value_bytes = {DEAD_LETTER_CAP}"
    );
    let sink = Sluice::start(
        &test_dir(&name),
        &pg_toml(&name, &topic, &url, port, &delivery),
        port,
    );
    let valid: Vec<i64> = records
        .iter()
        .filter(|r| r.refused.is_none())
        .map(|r| {
            let key: serde_json::Value = serde_json::from_slice(r.key.as_deref().unwrap()).unwrap();
            key["id"].as_i64().unwrap()
        })
        .collect();
    let bad_count = records.len() - valid.len();
    let dead = {
        let dead_letter_topic = dead_letter_topic.clone();
        tokio::task::spawn_blocking(move || {
            read_dead_letters(&dead_letter_topic, bad_count, Duration::from_secs(60))
        })
        .await
        .unwrap()
    };
    assert_dead_lettered(&dead, &records, &topic, &sink.log_text());
    crate::sink_pg::wait_zero(
        "every valid row applied",
        &target,
        &format!("SELECT {} - count(*) FROM app.t", valid.len()),
        Duration::from_secs(60),
        &sink,
    )
    .await;
    let peak = assert_peak_rss(&sink, "PostgreSQL sink, dead_letter");
    let rows: Vec<(i64, i32, String)> = target
        .query("SELECT id, qty, note FROM app.t ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    let expected: Vec<(i64, i32, String)> = valid
        .iter()
        .map(|id| (*id, *id as i32, format!("n{id}")))
        .collect();
    assert_eq!(rows, expected, "exactly the valid rows");
    let applied: Vec<(i64, i64)> = target
        .query(
            "SELECT id, count(*) FROM app.applied GROUP BY id HAVING count(*) <> 1",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert!(
        applied.is_empty(),
        "rows applied more than once: {applied:?}"
    );
    let log = sink.log_text();
    assert!(!log.contains("panicked"), "{log}");
    eprintln!(
        "PostgreSQL sink: {} records, {bad_count} dead-lettered, peak RSS {peak:.1} MiB",
        records.len()
    );
    drop(sink);
    drop(target);
    crate::sink_pg::drop_database(&name).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn pg_sink_stops_on_each_hostile_record_naming_where_and_why() {
    let name = unique("hostile_pg_stop");
    let (url, target) = crate::sink_pg::target_database(&name).await;
    pg_table(&target).await;
    for (index, bad) in pg_records()
        .into_iter()
        .filter(|r| r.refused.is_some())
        .enumerate()
    {
        let run = format!("{name}_{index}");
        let topic = format!("{run}.app.t");
        create_big_topic(&topic).await;
        let records = vec![
            Hostile::valid("valid", Some(pg_event(1).0), pg_event(1).1),
            bad.clone(),
            Hostile::valid("valid", Some(pg_event(2).0), pg_event(2).1),
        ];
        {
            let topic = topic.clone();
            tokio::task::spawn_blocking(move || produce(&topic, &records))
                .await
                .unwrap();
        }
        let port = free_port();
        let toml = pg_toml(&run, &topic, &url, port, "on_failure = \"stop\"")
            .replace("sub_partitions = 2", "sub_partitions = 1");
        let mut sink = Sluice::start(&test_dir(&run), &toml, port);
        let log = wait_stopped(&mut sink, bad.what);
        assert!(
            log.contains(&format!("record {topic}/0 offset 1 cannot be"))
                && log.contains(bad.refused.unwrap_or_default()),
            "{}: {log}",
            bad.what
        );
    }
    drop(target);
    crate::sink_pg::drop_database(&name).await;
}

//! Kafka → files: the real `sluice` binary against the real broker; every output file is read
//! back and every offset must be in exactly one file, with per-key order, across SIGKILLs and
//! a consumer group of two processes.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use rand::Rng;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use crate::support::{
    Sluice, free_port, http_request, read_topic, stack, test_dir, unique, wait_until,
};

pub(crate) async fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let results = admin
        .create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        )
        .await
        .unwrap();
    for result in results {
        result.unwrap();
    }
}

/// The value of the `seq`-th record of key `key`: a plain JSON object with a date field.
fn value_of(key: u64, seq: u64) -> String {
    format!(
        r#"{{"id":"k{key}","seq":{seq},"created_at":"2026-11-{:02}T10:00:00Z","pad":"{}"}}"#,
        20 + key % 3,
        "p".repeat(120)
    )
}

/// Produces `count` records over `keys` keys (round robin), each key's `seq` counting from 0.
pub(crate) fn produce(topic: &str, count: u64, keys: u64, first: u64) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("enable.idempotence", "true")
        .set("linger.ms", "10")
        .set("batch.size", "1000000")
        .set("compression.type", "lz4")
        .create()
        .unwrap();
    for i in first..first + count {
        let key = i % keys;
        let k = format!("k{key}");
        let value = value_of(key, i / keys);
        let mut record = BaseRecord::to(topic).key(&k).payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).unwrap();
}

/// End offsets per partition.
pub(crate) fn end_offsets(topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    (0..partitions)
        .map(|p| {
            let (_, high) = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap();
            (p, high)
        })
        .collect()
}

pub(crate) fn sink_toml(
    name: &str,
    topic: &str,
    root: &Path,
    port: u16,
    format: &str,
    subs: u32,
    extra: &str,
) -> String {
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
format = "{format}"
roll_records = 20000
roll_interval_ms = 500
sub_partitions = {subs}

[admin]
listen = "127.0.0.1:{port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
{extra}
"#,
        brokers = stack().brokers,
        root = root.display(),
    )
}

/// One record read back from an output file.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    pub(crate) file: PathBuf,
    pub(crate) sub: u32,
    pub(crate) partition: i32,
    pub(crate) offset: i64,
    pub(crate) id: String,
    pub(crate) seq: i64,
}

/// Parses `part-<topic>+<partition>+s<sub>+<first>-<last>.<ext>`.
pub(crate) fn parse_name(name: &str) -> Option<(i32, u32, i64, i64)> {
    let stem = name.strip_prefix("part-")?.split('.').next()?;
    let mut parts = stem.rsplitn(4, '+');
    let range = parts.next()?;
    let sub = parts.next()?.strip_prefix('s')?.parse().ok()?;
    let partition = parts.next()?.parse().ok()?;
    let (first, last) = range.split_once('-')?;
    Some((partition, sub, first.parse().ok()?, last.parse().ok()?))
}

pub(crate) fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with("_sluice") {
            continue;
        }
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

/// Reads every committed output file under `root`; checks each file's name against its rows
/// and that rows are in offset order within a file.
fn read_output(root: &Path) -> Vec<Row> {
    let mut files = Vec::new();
    files_under(root, &mut files);
    let mut rows = Vec::new();
    for file in files {
        let bytes = std::fs::read(&file).unwrap();
        rows.extend(rows_of_file(&file, bytes::Bytes::from(bytes)));
    }
    rows
}

/// The rows of one output file (`file` is its path or object key); checks its name against
/// its rows and that rows are in offset order.
pub(crate) fn rows_of_file(file: &Path, bytes: bytes::Bytes) -> Vec<Row> {
    {
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.starts_with(".tmp"),
            "a staged file outside staging: {file:?}"
        );
        let (partition, sub, first, last) =
            parse_name(&name).unwrap_or_else(|| panic!("unexpected file {file:?}"));
        let mut file_rows = Vec::new();
        if name.ends_with(".parquet") {
            let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
                .unwrap()
                .build()
                .unwrap();
            for batch in reader {
                let batch = batch.unwrap();
                let col = |name: &str| batch.column_by_name(name).unwrap().clone();
                let partitions = col("_partition");
                let offsets = col("_offset");
                let ids = col("id");
                let seqs = col("seq");
                for i in 0..batch.num_rows() {
                    file_rows.push(Row {
                        file: file.to_owned(),
                        sub,
                        partition: partitions.as_primitive::<Int32Type>().value(i),
                        offset: offsets.as_primitive::<Int64Type>().value(i),
                        id: ids.as_string::<i32>().value(i).to_owned(),
                        seq: seqs.as_primitive::<Int64Type>().value(i),
                    });
                }
            }
        } else {
            for line in BufReader::new(&bytes[..]).lines() {
                let value: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
                file_rows.push(Row {
                    file: file.to_owned(),
                    sub,
                    partition: value["_partition"].as_i64().unwrap() as i32,
                    offset: value["_offset"].as_i64().unwrap(),
                    id: value["id"].as_str().unwrap().to_owned(),
                    seq: value["seq"].as_i64().unwrap(),
                });
            }
        }
        assert!(!file_rows.is_empty(), "empty file {file:?}");
        assert_eq!(file_rows[0].offset, first, "{file:?}");
        assert_eq!(file_rows.last().unwrap().offset, last, "{file:?}");
        for pair in file_rows.windows(2) {
            assert!(
                pair[0].offset < pair[1].offset,
                "offsets out of order in {file:?}"
            );
        }
        assert!(
            file_rows.iter().all(|r| r.partition == partition),
            "{file:?}"
        );
        file_rows
    }
}

/// Every offset below the end of each partition is in exactly one file (or in `dead`), each
/// key lives in one sub-partition and its `seq`s follow offset order without gaps.
pub(crate) fn verify(rows: &[Row], ends: &BTreeMap<i32, i64>, dead: &HashSet<(i32, i64)>) {
    let mut seen: HashMap<(i32, i64), &Row> = HashMap::new();
    for row in rows {
        if let Some(other) = seen.insert((row.partition, row.offset), row) {
            panic!(
                "offset {}/{} is in two files: {:?} and {:?}",
                row.partition, row.offset, other.file, row.file
            );
        }
    }
    for (&partition, &end) in ends {
        let missing: Vec<i64> = (0..end)
            .filter(|o| !seen.contains_key(&(partition, *o)) && !dead.contains(&(partition, *o)))
            .take(10)
            .collect();
        assert!(
            missing.is_empty(),
            "partition {partition}: missing offsets {missing:?}"
        );
    }
    let expected: i64 = ends.values().sum::<i64>() - dead.len() as i64;
    assert_eq!(rows.len() as i64, expected);
    let mut per_key: HashMap<&str, Vec<&Row>> = HashMap::new();
    for row in rows {
        per_key.entry(&row.id).or_default().push(row);
    }
    for (key, mut rows) in per_key {
        rows.sort_by_key(|r| r.offset);
        let subs: HashSet<(i32, u32)> = rows.iter().map(|r| (r.partition, r.sub)).collect();
        assert_eq!(
            subs.len(),
            1,
            "key {key} is in several sub-partitions: {subs:?}"
        );
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(
                row.seq, i as i64,
                "key {key}: seq out of order at offset {}",
                row.offset
            );
        }
    }
}

/// Waits until the output holds `expected` distinct offsets. A file is parsed again only when
/// its size or modification time changed (a poll used to parse every file, ~300,000 rows each
/// time in a debug build, competing with the sink for the two cores).
pub(crate) fn wait_for_output(
    root: &Path,
    expected: usize,
    timeout: Duration,
    sluices: &[&Sluice],
) {
    let deadline = Instant::now() + timeout;
    type Seen = (u64, Option<std::time::SystemTime>, Vec<(i32, i64)>);
    let mut parsed: HashMap<PathBuf, Seen> = HashMap::new();
    loop {
        let mut files = Vec::new();
        files_under(root, &mut files);
        let mut current = HashMap::new();
        for file in files {
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            let (len, modified) = (meta.len(), meta.modified().ok());
            let offsets = match parsed.remove(&file) {
                Some((l, m, offsets)) if l == len && m == modified => offsets,
                _ => {
                    let bytes = std::fs::read(&file).unwrap();
                    rows_of_file(&file, bytes::Bytes::from(bytes))
                        .iter()
                        .map(|r| (r.partition, r.offset))
                        .collect()
                }
            };
            current.insert(file, (len, modified, offsets));
        }
        parsed = current;
        let distinct: HashSet<(i32, i64)> = parsed
            .values()
            .flat_map(|(_, _, offsets)| offsets.iter().copied())
            .collect();
        if distinct.len() >= expected {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = sluices.iter().map(|s| s.log_text()).collect();
            panic!(
                "only {} of {expected} offsets in files after {timeout:?}; logs:\n{}",
                distinct.len(),
                logs.join("\n-----\n")
            );
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

pub(crate) fn committed_records(sluice: &Sluice) -> f64 {
    sluice
        .metric("sluice_sink_records_committed_total")
        .unwrap_or(0.0)
}

/// Produces, runs the sink, kills it `kills` times at random moments while it works, and
/// checks every offset is in exactly one file with per-key order.
async fn exactly_once_across_kills(format: &str, records: u64, subs: u32, kills: u32) {
    let name = unique(&format!("sink_{format}"));
    let topic = name.clone();
    create_topic(&topic, 2).await;
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, records, 1000, 0))
            .await
            .unwrap();
    }
    let ends = end_offsets(&topic, 2);
    assert_eq!(ends.values().sum::<i64>(), records as i64);
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    let started = Instant::now();
    // Each run but the last holds one of its epoch commits (a random one of its first four
    // with records: the gate comes after `commit` returns for an empty epoch) at the gate
    // `sink::files::commit` on a file that never appears, and is killed there: mid-commit,
    // its files finished and nothing of the commit written.
    let gate = |kill: u32| -> Vec<(String, String)> {
        // The last killed run holds its first commit: an earlier run may have taken most of the
        // records, and a later commit of the last run might never come.
        let skip = if kill == kills {
            0
        } else {
            rand::rng().random_range(0..4)
        };
        let path = dir.join(format!("gate-{kill}-never-created"));
        vec![(
            "FAILPOINTS".to_owned(),
            format!(
                "sink::files::commit={skip}*off->1*return({})->off",
                path.display()
            ),
        )]
    };
    let mut sluice = Sluice::start_with_env(
        &dir,
        &sink_toml(&name, &topic, &root, port, format, subs, ""),
        port,
        gate(1),
    );
    for kill in 1..=kills {
        // The log is appended to across restarts: this run's hold is the kill-th.
        let held = |sluice: &Sluice| {
            sluice
                .log_text()
                .matches("failpoint: waiting for the gate file")
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while held(&sluice) < kill as usize && Instant::now() < deadline {
            assert!(
                sluice.exited().is_none(),
                "sink {format}: the process exited before kill {kill}:\n{}",
                sluice.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            held(&sluice),
            kill as usize,
            "sink {format}: kill {kill} would not land mid-commit (no commit held at the gate):\n{}",
            sluice.log_text()
        );
        let committed = committed_records(&sluice);
        let output = read_output(&root).len();
        assert!(
            output < records as usize,
            "sink {format}: kill {kill} came after all the work was done ({output} rows out)"
        );
        sluice.kill();
        println!(
            "sink {format}: SIGKILL {kill} in an epoch commit held at its gate ({committed} records committed by that process, {output} of {records} rows out)"
        );
        sluice.env = if kill < kills {
            gate(kill + 1)
        } else {
            Vec::new()
        };
        sluice.restart();
    }
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(
            &root,
            records as usize,
            Duration::from_secs(600),
            &[sluice_ref],
        )
    });
    let elapsed = started.elapsed();
    assert!(
        sluice.stop(),
        "graceful stop failed:\n{}",
        sluice.log_text()
    );
    let rows = read_output(&root);
    verify(&rows, &ends, &HashSet::new());
    let mut files = Vec::new();
    files_under(&root, &mut files);
    println!(
        "sink {format}: {records} records, {subs} sub-partitions, {kills} SIGKILLs: {} files, every offset exactly once, in {:.1} s",
        files.len(),
        elapsed.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn jsonl_every_offset_exactly_once_across_sigkills() {
    exactly_once_across_kills("jsonl", 300_000, 4, 3).await;
}

/// Size of the Parquet run: `SLUICE_IT_SINK_RECORDS` (default 400,000, which keeps the suite
/// within its time budget; the issue asked for 2,000,000: run it with that by hand). Not less:
/// each killed run holds a random one of its first four commits with records, so the records
/// left after two kills must outlast four more commits (at 150,000 JSON Lines records, a
/// third run once ran out of records before its held commit).
#[tokio::test(flavor = "multi_thread")]
async fn parquet_every_offset_exactly_once_across_sigkills() {
    let records = std::env::var("SLUICE_IT_SINK_RECORDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400_000);
    exactly_once_across_kills("parquet", records, 8, 3).await;
}

/// Two processes in one consumer group split the partitions; one is killed and the other
/// takes its partitions over from the files.
#[tokio::test(flavor = "multi_thread")]
async fn two_processes_in_a_group_one_killed() {
    let name = unique("sink_group");
    let topic = name.clone();
    create_topic(&topic, 2).await;
    const RECORDS: u64 = 200_000;
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, RECORDS / 2, 500, 0))
            .await
            .unwrap();
    }
    let dir_a = test_dir(&format!("{name}_a"));
    let dir_b = test_dir(&format!("{name}_b"));
    let root = dir_a.join("out");
    let (port_a, port_b) = (free_port(), free_port());
    // A small queue keeps A's partitions paused most of the time, so that the rebalance when B
    // joins revokes and reassigns paused partitions.
    let extra = "[delivery]\nmax_queued_records_per_partition = 5000\n";
    let mut a = Sluice::start(
        &dir_a,
        &sink_toml(&name, &topic, &root, port_a, "jsonl", 4, extra),
        port_a,
    );
    // B joins while A works through the first half.
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    while committed_records(&a) < 1.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut b = Sluice::start(
        &dir_b,
        &sink_toml(&name, &topic, &root, port_b, "jsonl", 4, extra),
        port_b,
    );
    // Both get a partition, then more records arrive while both work, and after B is killed.
    // The last answers both gave (a scrape can time out on a loaded machine: asked again).
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    let assigned = |s: &Sluice| s.metric("sluice_sink_assigned_partitions");
    let mut seen = (None, None);
    while Instant::now() < deadline {
        seen = (assigned(&a), assigned(&b));
        if seen.0 >= Some(1.0) && seen.1 >= Some(1.0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        seen == (Some(1.0), Some(1.0)),
        "the group did not split the partitions: assigned {seen:?}\n{}\n-----\n{}",
        a.log_text(),
        b.log_text()
    );
    let producer = {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, RECORDS / 4, 500, RECORDS / 2))
    };
    // Kill B after it has committed files of its partition, while it works on more.
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    while committed_records(&b) < 1.0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    tokio::time::sleep(Duration::from_millis(rand::rng().random_range(100..1000))).await;
    let b_committed = committed_records(&b);
    b.kill();
    println!("sink group: process B killed after committing {b_committed} records");
    producer.await.unwrap();
    // The last quarter comes after the kill: B's partition's share can only be written by A
    // once it has taken the partition over.
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, RECORDS / 4, 500, RECORDS * 3 / 4))
            .await
            .unwrap();
    }
    let ends = end_offsets(&topic, 2);
    assert_eq!(ends.values().sum::<i64>(), RECORDS as i64);
    let a_ref = &a;
    let b_ref = &b;
    tokio::task::block_in_place(|| {
        wait_for_output(
            &root,
            RECORDS as usize,
            Duration::from_secs(300),
            &[a_ref, b_ref],
        )
    });
    assert_eq!(a.metric("sluice_sink_assigned_partitions"), Some(2.0));
    assert!(a.stop(), "graceful stop failed:\n{}", a.log_text());
    verify(&read_output(&root), &ends, &HashSet::new());
}

/// Invalid JSON and a record without the template's field go to the dead-letter topic with
/// their reason; everything else is written.
#[tokio::test(flavor = "multi_thread")]
async fn poison_records_go_to_the_dead_letter_topic() {
    let name = unique("sink_dlq");
    let topic = name.clone();
    let dead_letter_topic = format!("{name}_dlq");
    create_topic(&topic, 2).await;
    create_topic(&dead_letter_topic, 1).await;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let poison: [(&str, &str); 2] = [
        ("bad1", "{not json"),
        ("bad2", r#"{"id":"bad2","seq":0,"pad":"no created_at"}"#),
    ];
    for i in 0..1000u64 {
        let key = format!("k{}", i % 10);
        let value = value_of(i % 10, i / 10);
        producer
            .send(BaseRecord::to(&topic).key(&key).payload(&value))
            .unwrap();
        if i == 500 {
            for (key, value) in poison {
                producer
                    .send(BaseRecord::to(&topic).key(key).payload(value))
                    .unwrap();
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    let ends = end_offsets(&topic, 2);
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    // A small queue, so that partitions are paused and resumed on the way.
    let extra = format!(
        "[delivery]\non_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\nmax_queued_records_per_partition = 20\n"
    );
    let mut sluice = Sluice::start(
        &dir,
        &sink_toml(&name, &topic, &root, port, "jsonl", 2, &extra),
        port,
    );
    let dead = {
        let dead_letter_topic = dead_letter_topic.clone();
        tokio::task::spawn_blocking(move || {
            read_topic(&dead_letter_topic, Duration::from_secs(120), |r| {
                r.len() >= 2
            })
        })
        .await
        .unwrap()
    };
    assert_eq!(
        dead.len(),
        2,
        "dead-letter records: {dead:?}\n{}",
        sluice.log_text()
    );
    let mut dead_offsets = HashSet::new();
    for record in &dead {
        let key = record.key.as_ref().unwrap().as_str().unwrap().to_owned();
        let (_, original) = poison.iter().find(|(k, _)| *k == key).unwrap();
        let value = record.value.as_ref().unwrap();
        match value {
            serde_json::Value::String(text) => assert_eq!(text, original),
            other => assert_eq!(
                other,
                &serde_json::from_str::<serde_json::Value>(original).unwrap()
            ),
        }
        assert_eq!(record.headers["sluice.dlq.topic"], topic);
        let reason = &record.headers["sluice.dlq.reason"];
        if key == "bad1" {
            assert!(reason.contains("not valid JSON"), "{reason}");
        } else {
            assert!(
                reason.contains("created_at") && reason.contains("missing"),
                "{reason}"
            );
        }
        let partition: i32 = record.headers["sluice.dlq.partition"].parse().unwrap();
        let offset: i64 = record.headers["sluice.dlq.offset"].parse().unwrap();
        dead_offsets.insert((partition, offset));
    }
    let expected = 1000usize;
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, expected, Duration::from_secs(120), &[sluice_ref])
    });
    let pauses = sluice
        .metric("sluice_sink_partition_pauses_total")
        .unwrap_or(0.0);
    assert!(
        pauses >= 1.0,
        "no partition was paused with a 20-record queue"
    );
    assert!(
        sluice.stop(),
        "graceful stop failed:\n{}",
        sluice.log_text()
    );
    let rows = read_output(&root);
    // The dead-lettered offsets are exactly the poison records' (their key is not in a file).
    assert!(rows.iter().all(|r| !r.id.starts_with("bad")));
    verify(&rows, &ends, &dead_offsets);
}

/// The number of sub-partitions is fixed per output root.
#[tokio::test(flavor = "multi_thread")]
async fn changing_sub_partitions_for_a_root_is_refused() {
    let name = unique("sink_subs");
    let topic = name.clone();
    create_topic(&topic, 1).await;
    tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || produce(&topic, 100, 10, 0)
    })
    .await
    .unwrap();
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    let mut sluice = Sluice::start(
        &dir,
        &sink_toml(&name, &topic, &root, port, "jsonl", 2, ""),
        port,
    );
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, 100, Duration::from_secs(60), &[sluice_ref])
    });
    assert!(sluice.stop());
    let mut sluice = Sluice::start(
        &dir,
        &sink_toml(&name, &topic, &root, port, "jsonl", 4, ""),
        port,
    );
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(30));
    let status = loop {
        if let Some(status) = sluice.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "sluice did not refuse:\n{}",
            sluice.log_text()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(!status.success());
    let log = sluice.log_text();
    assert!(
        log.contains("sink.files.sub_partitions = 4") && log.contains("written with 2"),
        "{log}"
    );
}

/// POSTs an admin action and checks it is accepted.
fn admin_action(sluice: &Sluice, name: &str, action: &str) {
    let (status, body) = http_request(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/{action}"),
        &[],
    )
    .expect("the admin server answers");
    assert_eq!(status, 202, "{action}: {body}");
}

fn health(sluice: &Sluice) -> serde_json::Value {
    sluice
        .get("/health")
        .and_then(|body| serde_json::from_str(&body).ok())
        .unwrap_or(serde_json::Value::Null)
}

fn distinct_offsets(root: &Path) -> usize {
    read_output(root)
        .iter()
        .map(|r| (r.partition, r.offset))
        .collect::<HashSet<_>>()
        .len()
}

/// Pause through the admin API stops records from reaching files (nothing is even consumed)
/// while the process keeps its partitions; resume brings them; restart restarts the run and
/// is counted; every offset is still in exactly one file.
#[tokio::test(flavor = "multi_thread")]
async fn admin_api_pauses_resumes_and_restarts_a_sink() {
    let name = unique("sink_admin");
    let topic = name.clone();
    create_topic(&topic, 2).await;
    let produce_batch = |first: u64| {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, 1000, 50, first))
    };
    produce_batch(0).await.unwrap();
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    let mut sluice = Sluice::start(
        &dir,
        &sink_toml(&name, &topic, &root, port, "jsonl", 2, ""),
        port,
    );
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, 1000, Duration::from_secs(60), &[sluice_ref])
    });

    admin_action(&sluice, &name, "pause");
    wait_until("the paused state", Duration::from_secs(30), || {
        health(&sluice)["state"] == "paused"
    });
    let consumed = sluice.metric("sluice_sink_records_consumed_total").unwrap();
    produce_batch(1000).await.unwrap();
    // Several roll intervals (500 ms) and offset commits pass: nothing moves.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        distinct_offsets(&root),
        1000,
        "records reached files while paused"
    );
    assert_eq!(
        sluice.metric("sluice_sink_records_consumed_total"),
        Some(consumed),
        "records were consumed while paused"
    );
    assert_eq!(
        sluice.metric("sluice_sink_assigned_partitions"),
        Some(2.0),
        "a paused process keeps its partitions"
    );
    assert_eq!(health(&sluice)["state"], "paused");

    admin_action(&sluice, &name, "resume");
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, 2000, Duration::from_secs(60), &[sluice_ref])
    });
    assert_eq!(health(&sluice)["state"], "streaming");

    let restarts = health(&sluice)["restarts"].as_u64().unwrap();
    admin_action(&sluice, &name, "restart");
    wait_until("a requested restart", Duration::from_secs(60), || {
        let h = health(&sluice);
        h["restarts"].as_u64().unwrap_or(0) > restarts && h["state"] == "streaming"
    });
    let series =
        format!("sluice_pipeline_restarts_total{{pipeline=\"{name}\",reason=\"requested\"}}");
    let requested = sluice.metric(&series).unwrap_or(0.0);
    assert!(requested >= 1.0, "the restart is counted");
    produce_batch(2000).await.unwrap();
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, 3000, Duration::from_secs(60), &[sluice_ref])
    });
    assert!(
        sluice.stop(),
        "graceful stop failed:\n{}",
        sluice.log_text()
    );
    verify(
        &read_output(&root),
        &end_offsets(&topic, 2),
        &HashSet::new(),
    );
}

/// A record the worker hangs on (a test hook makes it hang) becomes a failure after
/// `processing_timeout_ms`: with `on_failure = "dead_letter"` it goes to the dead-letter
/// topic once, the run restarts from the committed files without it, and every other record
/// is written exactly once.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_record_is_dead_lettered_after_the_processing_timeout() {
    let name = unique("sink_hang");
    let topic = name.clone();
    let dead_letter_topic = format!("{name}_dlq");
    create_topic(&topic, 2).await;
    create_topic(&dead_letter_topic, 1).await;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    let hung = r#"{"id":"hung","seq":0,"created_at":"2026-11-20T10:00:00Z","pad":"HANG-ON-ME"}"#;
    for i in 0..1000u64 {
        let key = format!("k{}", i % 10);
        let value = value_of(i % 10, i / 10);
        producer
            .send(BaseRecord::to(&topic).key(&key).payload(&value))
            .unwrap();
        if i == 500 {
            producer
                .send(BaseRecord::to(&topic).key("hung").payload(hung))
                .unwrap();
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    let ends = end_offsets(&topic, 2);
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    let extra = format!(
        "[delivery]\non_failure = \"dead_letter\"\ndead_letter_topic = \"{dead_letter_topic}\"\nprocessing_timeout_ms = 1500\n"
    );
    let mut sluice = Sluice::start_with_env(
        &dir,
        &sink_toml(&name, &topic, &root, port, "jsonl", 2, &extra),
        port,
        vec![("SLUICE_TEST_HANG_ON_VALUE".into(), "HANG-ON-ME".into())],
    );
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| {
        wait_for_output(&root, 1000, Duration::from_secs(120), &[sluice_ref])
    });
    // Everything else is written; the hung record went to the dead-letter topic exactly once.
    let dead = {
        let dead_letter_topic = dead_letter_topic.clone();
        tokio::task::spawn_blocking(move || {
            read_topic(&dead_letter_topic, Duration::from_secs(10), |r| r.len() > 1)
        })
        .await
        .unwrap()
    };
    assert_eq!(dead.len(), 1, "{dead:?}\n{}", sluice.log_text());
    let record = &dead[0];
    assert_eq!(record.key.as_ref().unwrap(), "hung");
    assert_eq!(
        record.value.as_ref().unwrap(),
        &serde_json::from_str::<serde_json::Value>(hung).unwrap()
    );
    let reason = &record.headers["sluice.dlq.reason"];
    assert!(reason.contains("processing_timeout_ms = 1500"), "{reason}");
    let partition: i32 = record.headers["sluice.dlq.partition"].parse().unwrap();
    let offset: i64 = record.headers["sluice.dlq.offset"].parse().unwrap();
    assert!(
        health(&sluice)["restarts"].as_u64().unwrap_or(0) >= 1,
        "the run was restarted without the stuck worker"
    );
    // The hung worker cannot be reclaimed (a files worker holds no connection; this one sleeps
    // an hour): its thread is left running, and counted.
    assert_eq!(
        sluice.metric("sluice_sink_abandoned_workers"),
        Some(1.0),
        "{}",
        sluice.log_text()
    );
    assert!(
        sluice.stop(),
        "graceful stop failed:\n{}",
        sluice.log_text()
    );
    let rows = read_output(&root);
    assert!(rows.iter().all(|r| r.id != "hung"));
    verify(&rows, &ends, &HashSet::from([(partition, offset)]));
}

/// Worker threads that cannot be reclaimed (hung on a record: the test hook sleeps an hour)
/// are counted, and once more of them still run than `delivery.max_abandoned_workers`, the
/// pipeline stops restarting, saying why and what to look at.
#[tokio::test(flavor = "multi_thread")]
async fn a_pipeline_stops_restarting_past_max_abandoned_workers() {
    let name = unique("sink_abandon_cap");
    let topic = name.clone();
    create_topic(&topic, 1).await;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let hung = r#"{"id":"hung","seq":0,"created_at":"2026-11-20T10:00:00Z","pad":"HANG-ON-ME"}"#;
    producer
        .send(BaseRecord::to(&topic).key("hung").payload(hung))
        .unwrap();
    producer.flush(Duration::from_secs(60)).unwrap();
    let dir = test_dir(&name);
    let root = dir.join("out");
    let port = free_port();
    // Every run hangs on the record, is given up on after 300 ms and restarts (retry, many
    // attempts): the second hung thread is one more than the cap.
    let extra = "[delivery]\non_failure = \"retry\"\nretry_max_attempts = 100\nprocessing_timeout_ms = 300\nmax_abandoned_workers = 1\n";
    let mut sluice = Sluice::start_with_env(
        &dir,
        &sink_toml(&name, &topic, &root, port, "jsonl", 1, extra)
            .replace("initial_backoff_ms = 200", "initial_backoff_ms = 20"),
        port,
        vec![("SLUICE_TEST_HANG_ON_VALUE".into(), "HANG-ON-ME".into())],
    );
    wait_until(
        "the pipeline to stop restarting",
        Duration::from_secs(60),
        || sluice.exited().is_some(),
    );
    let log = sluice.log_text();
    assert!(
        log.contains("2 sink worker thread(s) given up on are still running")
            && log.contains("more than delivery.max_abandoned_workers = 1: not restarting")
            && log.contains("a hung file system or object store"),
        "{log}"
    );
    assert_eq!(
        log.matches("pipeline failed; restarting").count(),
        1,
        "one restart, then no more: {log}"
    );
    assert!(!sluice.exited().unwrap().success());
}

/// Sends `signal` (`STOP`, `CONT`, …) to a running sluice.
pub(crate) fn signal(sluice: &Sluice, signal: &str) {
    let pid = sluice.pid().expect("sluice runs");
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The consumer group's committed offsets of `topic`'s partitions `0..partitions`.
pub(crate) fn group_offsets(group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut list = rdkafka::TopicPartitionList::new();
    for partition in 0..partitions {
        list.add_partition(topic, partition);
    }
    consumer
        .committed_offsets(list, Duration::from_secs(10))
        .map(|list| {
            list.elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    rdkafka::Offset::Offset(o) => Some((e.partition(), o)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `sluice`'s log has `text` (polling, at most `timeout`); returns whether it has.
pub(crate) fn wait_for_log(sluice: &Sluice, text: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if sluice.log_text().contains(text) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

/// What [`zombie_writer`] leaves for the test to check.
pub(crate) struct ZombieRun {
    /// The process that was stopped past its session timeout (running again).
    pub(crate) zombie: Sluice,
    /// The process that took its partition over.
    pub(crate) owner: Sluice,
    /// The topic's end offsets.
    pub(crate) ends: BTreeMap<i32, i64>,
    /// The group's committed offsets once the zombie had resumed and tried to commit.
    pub(crate) group_after: BTreeMap<i32, i64>,
    /// Whether the zombie logged that its commit was refused.
    pub(crate) refused: bool,
}

/// The zombie-writer scenario of issue 17, on a one-partition topic (one sub-partition):
/// process A commits an epoch, then stops inside its next epoch commit (the
/// `sink::files::commit` gate point: its files finished, nothing of the commit written yet)
/// and is SIGSTOPped there; process B joins the group, gets the partition once A's session
/// (6 s) has expired, claims it and writes every record, including a batch produced while A
/// was stopped; then A is resumed: its consumer
/// finds its assignment lost and commits its watermark with its old generation, and its
/// worker, let through the gate, attempts the commit. `pipeline(dir, port)` is the
/// pipeline file of a process; A also gets `commit_interval_ms = 600000` (so that its
/// watermark is still uncommitted when it is stopped) and `revoke_timeout_ms = 2000`.
pub(crate) async fn zombie_writer(
    name: &str,
    topic: &str,
    pipeline: impl Fn(&Path, u16) -> String,
) -> ZombieRun {
    create_topic(topic, 1).await;
    let produce_batch = |first: u64| {
        let topic = topic.to_owned();
        tokio::task::spawn_blocking(move || produce(&topic, 1000, 50, first))
    };
    produce_batch(0).await.unwrap();
    let (dir_a, dir_b) = (
        test_dir(&format!("{name}_a")),
        test_dir(&format!("{name}_b")),
    );
    let gate = dir_a.join("gate");
    let _ = std::fs::remove_file(&gate);
    let (port_a, port_b) = (free_port(), free_port());
    let toml_a = pipeline(&dir_a, port_a)
        .replace("commit_interval_ms = 500", "commit_interval_ms = 600000")
        + "\n[delivery]\nrevoke_timeout_ms = 2000\n";
    assert!(toml_a.contains("commit_interval_ms = 600000"), "{toml_a}");
    let zombie = Sluice::start_with_env(
        &dir_a,
        &toml_a,
        port_a,
        vec![(
            "FAILPOINTS".into(),
            format!(
                "sink::files::commit=1*off->1*return({})->off",
                gate.display()
            ),
        )],
    );
    // The first epoch commits; the records produced after it go to the held epoch.
    wait_until("A's first commit", Duration::from_secs(60), || {
        committed_records(&zombie) >= 1.0
    });
    produce_batch(1000).await.unwrap();
    assert!(
        wait_for_log(
            &zombie,
            "failpoint: waiting for the gate file",
            Duration::from_secs(60)
        ),
        "A never reached its second commit:\n{}",
        zombie.log_text()
    );
    signal(&zombie, "STOP");
    println!("zombie writer: A stopped inside an epoch commit");
    let stopped = Instant::now();
    // Records only B sees: its committed state goes past anything A holds, so a zombie state
    // that replaced it would leave B's last files uncovered.
    produce_batch(2000).await.unwrap();
    let ends = end_offsets(topic, 1);

    let owner = Sluice::start(&dir_b, &pipeline(&dir_b, port_b), port_b);
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    while group_offsets(name, topic, 1) != ends {
        assert!(
            Instant::now() < deadline,
            "B did not commit every record while A was stopped (group offsets {:?}, ends {ends:?}):\n{}",
            group_offsets(name, topic, 1),
            owner.log_text()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    println!(
        "zombie writer: B took the partition over and committed every record {:.1} s after A was stopped",
        stopped.elapsed().as_secs_f64()
    );

    signal(&zombie, "CONT");
    // Its consumer learns that the partition is gone; its worker still holds the epoch.
    assert!(
        wait_for_log(&zombie, "partition released", Duration::from_secs(30)),
        "A did not release its lost partition:\n{}",
        zombie.log_text()
    );
    std::fs::write(&gate, b"").unwrap();
    let refused = wait_for_log(&zombie, "zombie commit refused", Duration::from_secs(15));
    let group_after = group_offsets(name, topic, 1);
    ZombieRun {
        zombie,
        owner,
        ends,
        group_after,
        refused,
    }
}

/// The committed files under `root` that their sub-partition's state does not cover (a last
/// offset above the state's `last_offset`): the next owner would write them again.
fn uncommitted_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    files_under(root, &mut files);
    files
        .into_iter()
        .filter(|file| {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let (partition, sub, _, last) = parse_name(&name).unwrap();
            let topic = name
                .strip_prefix("part-")
                .unwrap()
                .rsplitn(4, '+')
                .nth(3)
                .unwrap()
                .to_owned();
            let dir = root
                .join("_sluice/state")
                .join(format!("{topic}+{partition}+s{sub}"));
            let newest = std::fs::read_dir(&dir)
                .map(|entries| {
                    entries
                        .flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .filter(|n| n.starts_with('v') && n.ends_with(".json"))
                        .max()
                })
                .ok()
                .flatten();
            let committed = newest
                .and_then(|n| std::fs::read(dir.join(n)).ok())
                .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                .and_then(|state| state["last_offset"].as_i64());
            committed.is_none_or(|c| last > c)
        })
        .collect()
}

/// Issue 17, files sink: a writer SIGSTOPped inside an epoch commit past its session timeout,
/// resumed after another process took its partition over, cannot commit: its commit is
/// refused, its Kafka offset commit does not move the group's offsets, and every offset is in
/// exactly one committed file.
#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_writer_cannot_commit_files() {
    let name = unique("sink_zombie");
    let topic = name.clone();
    let root = test_dir(&name).join("out");
    let run = zombie_writer(&name, &topic, |_, port| {
        sink_toml(&name, &topic, &root, port, "jsonl", 1, "")
    })
    .await;
    let logs = || {
        format!(
            "A:\n{}\n-----\nB:\n{}",
            run.zombie.log_text(),
            run.owner.log_text()
        )
    };
    // The data first: a zombie commit that went through shows here.
    let uncommitted = uncommitted_files(&root);
    assert!(
        uncommitted.is_empty(),
        "files beyond their sub-partition's committed state: {uncommitted:?}\n{}",
        logs()
    );
    verify(&read_output(&root), &run.ends, &HashSet::new());
    assert_eq!(
        run.group_after,
        run.ends,
        "the zombie moved the group's offsets\n{}",
        logs()
    );
    assert!(
        run.refused,
        "the zombie's commit was not refused:\n{}",
        logs()
    );
    // The refusal names its pipeline and sub-partition through the log spans.
    let zombie_log = run.zombie.log_text();
    let refusal = zombie_log
        .lines()
        .find(|line| line.contains("zombie commit refused"))
        .unwrap_or_default();
    assert!(
        refusal.contains(&format!("pipeline{{name={name}}}"))
            && refusal.contains(&format!("sink_worker{{topic={topic} partition=0 sub=0}}")),
        "the refusal does not name its pipeline and sub-partition: {refusal}"
    );
    let ZombieRun {
        mut zombie,
        mut owner,
        ends,
        ..
    } = run;
    assert!(zombie.stop(), "A did not stop:\n{}", zombie.log_text());
    assert!(owner.stop(), "B did not stop:\n{}", owner.log_text());
    assert!(uncommitted_files(&root).is_empty());
    verify(&read_output(&root), &ends, &HashSet::new());
}

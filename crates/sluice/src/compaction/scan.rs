//! `sluice compaction scan`: reads a topic from its low to its high watermark (taken at the
//! start) and counts, per partition, what the log cleaner will care about.
//!
//! Memory is bounded whatever the key count: keys are counted exactly (one 64-bit hash and
//! the newest record's size, timestamp and kind per key) up to `--exact-keys` keys over all
//! partitions; a partition that would go past that budget drops its table and goes on with
//! its HyperLogLog sketch (16 KiB, kept for every partition from the start), and its counts
//! say `estimated`. The pass simulation (see [`PassSimulator`]) holds at most one offset map's
//! worth of key hashes.

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde::Serialize;

use super::hll::HyperLogLog;
use super::model::PartitionProfile;
use crate::kafka::keys::{HashedMap, HashedSet, LEAN_PREFETCH, hash_key};

/// The newest record of a key.
#[derive(Clone, Copy)]
struct Newest {
    bytes: u32,
    timestamp_ms: i64,
    tombstone: bool,
}

/// Simulates how the cleaner's offset map splits a partition into passes: before each keyed
/// record, a full map (as many distinct keys as one pass maps) ends the pass, even mid-segment
/// (Kafka's `Cleaner.buildOffsetMapForSegment`). Counts the passes needed to clean all the
/// records it saw, as if they were all dirty.
pub struct PassSimulator {
    keys_per_pass: u64,
    keys: HashedSet,
    passes: u64,
}

impl PassSimulator {
    /// A simulator for a map of `keys_per_pass` keys.
    pub fn new(keys_per_pass: u64) -> Self {
        Self {
            keys_per_pass: keys_per_pass.max(1),
            keys: HashedSet::default(),
            passes: 0,
        }
    }

    /// A keyed record.
    pub fn record(&mut self, key_hash: u64) {
        if self.keys.is_empty() {
            self.passes += 1;
        } else if self.keys.len() as u64 >= self.keys_per_pass {
            self.keys.clear();
            self.passes += 1;
        }
        self.keys.insert(key_hash);
    }

    /// Passes so far.
    pub fn passes(&self) -> u64 {
        self.passes
    }
}

/// What one partition holds.
pub struct PartitionTally {
    partition: i32,
    records: u64,
    bytes: u64,
    tombstones: u64,
    null_keys: u64,
    oldest_ms: Option<i64>,
    newest_ms: Option<i64>,
    exact: Option<HashedMap<Newest>>,
    sketch: HyperLogLog,
    passes: Option<PassSimulator>,
}

impl PartitionTally {
    /// An empty tally; `keys_per_pass` turns the pass simulation on.
    pub fn new(partition: i32, keys_per_pass: Option<u64>) -> Self {
        Self {
            partition,
            records: 0,
            bytes: 0,
            tombstones: 0,
            null_keys: 0,
            oldest_ms: None,
            newest_ms: None,
            exact: Some(HashedMap::default()),
            sketch: HyperLogLog::default(),
            passes: keys_per_pass.map(PassSimulator::new),
        }
    }

    /// Counts one record; returns by how many keys the exact table grew (0 or 1).
    pub fn record(
        &mut self,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        timestamp_ms: Option<i64>,
    ) -> u64 {
        let size = key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len);
        self.records += 1;
        self.bytes += size as u64;
        if let Some(ts) = timestamp_ms.filter(|ts| *ts >= 0) {
            self.oldest_ms = Some(self.oldest_ms.map_or(ts, |o| o.min(ts)));
            self.newest_ms = Some(self.newest_ms.map_or(ts, |n| n.max(ts)));
        }
        let tombstone = value.is_none();
        if tombstone {
            self.tombstones += 1;
        }
        let Some(key) = key else {
            self.null_keys += 1;
            return 0;
        };
        let hash = hash_key(key);
        self.sketch.insert_hash(hash);
        if let Some(passes) = &mut self.passes {
            passes.record(hash);
        }
        let Some(exact) = &mut self.exact else {
            return 0;
        };
        let newest = Newest {
            bytes: size.min(u32::MAX as usize) as u32,
            timestamp_ms: timestamp_ms.unwrap_or(-1),
            tombstone,
        };
        u64::from(exact.insert(hash, newest).is_none())
    }

    /// Keys in the exact table (0 once estimating).
    pub fn exact_keys(&self) -> u64 {
        self.exact.as_ref().map_or(0, |e| e.len() as u64)
    }

    /// Drops the exact table; returns how many keys it held.
    pub fn switch_to_estimate(&mut self) -> u64 {
        self.exact.take().map_or(0, |e| e.len() as u64)
    }

    /// The report, with ages relative to `now_ms`.
    pub fn report(&self, now_ms: i64) -> PartitionScan {
        let (distinct, estimated, live, tombstoned, newest_bytes, oldest_newest) = match &self.exact
        {
            Some(exact) => {
                let tombstoned = exact.values().filter(|n| n.tombstone).count() as u64;
                let bytes = exact.values().map(|n| u64::from(n.bytes)).sum();
                let oldest = exact
                    .values()
                    .filter(|n| n.timestamp_ms >= 0)
                    .map(|n| n.timestamp_ms)
                    .min();
                (
                    exact.len() as u64,
                    false,
                    Some(exact.len() as u64 - tombstoned),
                    Some(tombstoned),
                    Some(bytes),
                    oldest,
                )
            }
            None => (self.sketch.estimate(), true, None, None, None, None),
        };
        let keyed = self.records - self.null_keys;
        PartitionScan {
            partition: self.partition,
            records: self.records,
            bytes: self.bytes,
            distinct_keys: distinct,
            distinct_keys_estimated: estimated,
            estimate_standard_error: estimated.then_some(HyperLogLog::STANDARD_ERROR),
            duplicate_ratio: if keyed == 0 {
                0.0
            } else {
                1.0 - (distinct.min(keyed) as f64 / keyed as f64)
            },
            tombstones: self.tombstones,
            null_key_records: self.null_keys,
            live_keys: live,
            tombstoned_keys: tombstoned,
            newest_bytes,
            oldest_record_age_ms: self.oldest_ms.map(|o| (now_ms - o).max(0) as u64),
            newest_record_age_ms: self.newest_ms.map(|n| (now_ms - n).max(0) as u64),
            oldest_kept_record_age_ms: oldest_newest.map(|o| (now_ms - o).max(0) as u64),
            simulated_passes: self.passes.as_ref().map(PassSimulator::passes),
        }
    }
}

/// What a scan found in one partition.
#[derive(Debug, Clone, Serialize)]
pub struct PartitionScan {
    /// Partition number.
    pub partition: i32,
    /// Records read.
    pub records: u64,
    /// Bytes of keys and values.
    pub bytes: u64,
    /// Distinct keys.
    pub distinct_keys: u64,
    /// `distinct_keys` is a HyperLogLog estimate (the exact budget ran out).
    pub distinct_keys_estimated: bool,
    /// Relative standard error of the estimate.
    pub estimate_standard_error: Option<f64>,
    /// 1 − distinct keys / keyed records: the share compaction can remove.
    pub duplicate_ratio: f64,
    /// Records with a null value.
    pub tombstones: u64,
    /// Records without a key (the cleaner drops them).
    pub null_key_records: u64,
    /// Keys whose newest record has a value (exact counts only).
    pub live_keys: Option<u64>,
    /// Keys whose newest record is a tombstone (exact counts only).
    pub tombstoned_keys: Option<u64>,
    /// Bytes of the newest record per key (exact counts only): the size after compaction.
    pub newest_bytes: Option<u64>,
    /// Age of the oldest record present, ms.
    pub oldest_record_age_ms: Option<u64>,
    /// Age of the newest record, ms.
    pub newest_record_age_ms: Option<u64>,
    /// Age of the oldest record compaction keeps (the least recently written key), ms
    /// (exact counts only).
    pub oldest_kept_record_age_ms: Option<u64>,
    /// Passes the cleaner's offset map needs for these records (with `--keys-per-pass`).
    pub simulated_passes: Option<u64>,
}

impl PartitionScan {
    /// As the model's input.
    pub fn profile(&self) -> PartitionProfile {
        PartitionProfile {
            partition: self.partition,
            records: self.records,
            bytes: self.bytes,
            distinct_keys: self.distinct_keys,
            live_keys: self.live_keys,
            tombstoned_keys: self.tombstoned_keys,
            tombstones: self.tombstones,
            null_key_records: self.null_key_records,
            newest_bytes: self.newest_bytes,
            oldest_record_age_ms: self.oldest_record_age_ms,
            simulated_passes: self.simulated_passes,
        }
    }
}

/// A whole scan.
#[derive(Debug, Clone, Serialize)]
pub struct TopicScan {
    /// The topic.
    pub topic: String,
    /// Seconds the scan took.
    pub seconds: f64,
    /// Records read per second.
    pub records_per_s: f64,
    /// Per partition.
    pub partitions: Vec<PartitionScan>,
}

/// How to scan.
pub struct ScanOptions {
    /// Bootstrap servers.
    pub brokers: String,
    /// The topic.
    pub topic: String,
    /// Only these partitions (all when empty).
    pub partitions: Vec<i32>,
    /// Keys counted exactly over all partitions before estimating.
    pub exact_keys: u64,
    /// Simulate the cleaner's passes with a map of this many keys.
    pub keys_per_pass: Option<u64>,
    /// Extra librdkafka consumer properties.
    pub properties: Vec<(String, String)>,
    /// Show progress on stderr.
    pub progress: bool,
}

/// Reads the topic from each partition's low to its high watermark.
///
/// # Errors
///
/// Unknown topic or partitions, Kafka failures.
pub fn scan(options: &ScanOptions) -> anyhow::Result<TopicScan> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &options.brokers)
        .set(
            "group.id",
            format!("sluice-compaction-scan-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    for (key, value) in LEAN_PREFETCH {
        config.set(*key, *value);
    }
    for (key, value) in &options.properties {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config.create().context("cannot create the consumer")?;
    let metadata = consumer
        .fetch_metadata(Some(&options.topic), Duration::from_secs(30))
        .with_context(|| format!("cannot read the metadata of topic {}", options.topic))?;
    let topic_meta = metadata
        .topics()
        .iter()
        .find(|t| t.name() == options.topic)
        .with_context(|| format!("topic {} not found", options.topic))?;
    if let Some(error) = topic_meta.error() {
        bail!(
            "topic {}: {:?} (does it exist?)",
            options.topic,
            rdkafka::error::RDKafkaErrorCode::from(error)
        );
    }
    let mut all: Vec<i32> = topic_meta.partitions().iter().map(|p| p.id()).collect();
    all.sort_unstable();
    let wanted: Vec<i32> = if options.partitions.is_empty() {
        all.clone()
    } else {
        for p in &options.partitions {
            if !all.contains(p) {
                bail!(
                    "--partitions: topic {} has no partition {p} (it has 0..{})",
                    options.topic,
                    all.len()
                );
            }
        }
        options.partitions.clone()
    };
    let mut ranges = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    let mut total = 0u64;
    for &p in &wanted {
        let (low, high) = consumer
            .fetch_watermarks(&options.topic, p, Duration::from_secs(30))
            .with_context(|| format!("cannot read the watermarks of partition {p}"))?;
        if high > low {
            assignment.add_partition_offset(&options.topic, p, Offset::Offset(low))?;
            total += (high - low) as u64;
        }
        ranges.insert(p, (low, high));
    }
    let mut tallies: HashMap<i32, PartitionTally> = wanted
        .iter()
        .map(|&p| (p, PartitionTally::new(p, options.keys_per_pass)))
        .collect();
    let mut position: HashMap<i32, i64> = ranges.iter().map(|(&p, &(low, _))| (p, low)).collect();
    let mut pending: HashSet<i32> = ranges
        .iter()
        .filter(|(_, (low, high))| high > low)
        .map(|(&p, _)| p)
        .collect();
    if !pending.is_empty() {
        consumer.assign(&assignment)?;
    }
    let started = Instant::now();
    let mut progress = Progress::new(options.progress, total);
    let mut exact_total = 0u64;
    let mut records = 0u64;
    while !pending.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                let p = message.partition();
                let high = ranges.get(&p).map_or(0, |r| r.1);
                if message.offset() >= high {
                    pending.remove(&p);
                    continue;
                }
                let Some(tally) = tallies.get_mut(&p) else {
                    continue;
                };
                records += 1;
                exact_total += tally.record(
                    message.key(),
                    message.payload(),
                    message.timestamp().to_millis(),
                );
                if exact_total > options.exact_keys {
                    exact_total -= tally.switch_to_estimate();
                }
                position.insert(p, message.offset() + 1);
                if message.offset() + 1 >= high {
                    pending.remove(&p);
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                pending.remove(&p);
            }
            Some(Err(error)) => return Err(error).context("reading the topic"),
            None => {}
        }
        if progress.due() {
            let done: u64 = position
                .iter()
                .map(|(p, pos)| (pos - ranges.get(p).map_or(*pos, |r| r.0)).max(0) as u64)
                .sum();
            progress.show(done, records, started.elapsed());
        }
    }
    progress.finish(records, started.elapsed());
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let seconds = started.elapsed().as_secs_f64();
    Ok(TopicScan {
        topic: options.topic.clone(),
        seconds,
        records_per_s: records as f64 / seconds.max(1e-6),
        partitions: wanted
            .iter()
            .filter_map(|p| tallies.get(p))
            .map(|t| t.report(now_ms))
            .collect(),
    })
}

/// A progress bar on stderr: redrawn in place on a terminal, a line every 5 s otherwise.
struct Progress {
    enabled: bool,
    terminal: bool,
    total: u64,
    last: Instant,
}

impl Progress {
    fn new(enabled: bool, total: u64) -> Self {
        Self {
            enabled,
            terminal: std::io::IsTerminal::is_terminal(&std::io::stderr()),
            total,
            last: Instant::now(),
        }
    }

    fn due(&self) -> bool {
        let every = if self.terminal { 250 } else { 5000 };
        self.enabled && self.last.elapsed() >= Duration::from_millis(every)
    }

    fn show(&mut self, done: u64, records: u64, elapsed: Duration) {
        self.last = Instant::now();
        let fraction = if self.total == 0 {
            1.0
        } else {
            (done as f64 / self.total as f64).min(1.0)
        };
        let width = 30;
        let filled = (fraction * width as f64) as usize;
        let rate = records as f64 / elapsed.as_secs_f64().max(1e-6);
        let eta = if rate > 0.0 {
            (self.total.saturating_sub(done)) as f64 / rate
        } else {
            0.0
        };
        let line = format!(
            "scan [{}{}] {:5.1}% {records} records, {rate:.0}/s, ~{eta:.0} s left",
            "#".repeat(filled),
            "-".repeat(width - filled),
            fraction * 100.0
        );
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
    }

    fn finish(&mut self, records: u64, elapsed: Duration) {
        if !self.enabled {
            return;
        }
        if self.terminal {
            eprintln!();
        }
        if elapsed >= Duration::from_secs(1) {
            eprintln!("scan: {records} records in {:.1} s", elapsed.as_secs_f64());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tally_counts_keys_tombstones_and_null_keys() {
        let mut t = PartitionTally::new(3, None);
        t.record(Some(b"a"), Some(b"1"), Some(1_000));
        t.record(Some(b"b"), Some(b"22"), Some(2_000));
        t.record(Some(b"a"), Some(b"333"), Some(3_000));
        t.record(Some(b"b"), None, Some(4_000));
        t.record(None, Some(b"x"), Some(5_000));
        let r = t.report(10_000);
        assert_eq!(r.partition, 3);
        assert_eq!(r.records, 5);
        assert_eq!(r.bytes, 2 + 3 + 4 + 1 + 1);
        assert_eq!(r.distinct_keys, 2);
        assert!(!r.distinct_keys_estimated);
        assert_eq!(r.tombstones, 1);
        assert_eq!(r.null_key_records, 1);
        assert_eq!(r.live_keys, Some(1));
        assert_eq!(r.tombstoned_keys, Some(1));
        // Newest per key: a = "a"+"333" (4 bytes), b = tombstone "b" (1 byte).
        assert_eq!(r.newest_bytes, Some(5));
        assert!((r.duplicate_ratio - 0.5).abs() < 1e-9);
        assert_eq!(r.oldest_record_age_ms, Some(9_000));
        assert_eq!(r.newest_record_age_ms, Some(5_000));
        // The oldest record compaction keeps is a@3000.
        assert_eq!(r.oldest_kept_record_age_ms, Some(7_000));
    }

    #[test]
    fn tally_estimates_once_switched() {
        let mut t = PartitionTally::new(0, None);
        for i in 0..200_000u32 {
            t.record(Some(&i.to_be_bytes()), Some(b"v"), None);
        }
        assert_eq!(t.switch_to_estimate(), 200_000);
        for i in 0..200_000u32 {
            t.record(Some(&i.to_be_bytes()), Some(b"v"), None);
        }
        let r = t.report(0);
        assert!(r.distinct_keys_estimated);
        assert_eq!(r.live_keys, None);
        let error = (r.distinct_keys as f64 - 200_000.0).abs() / 200_000.0;
        assert!(error < 0.03, "{}", r.distinct_keys);
    }

    #[test]
    fn passes_end_when_the_map_is_full_even_on_a_known_key() {
        // 3 keys per pass; keys a b c a d: the map is full (a b c) before the second a, so
        // the second pass starts there even though a is already mapped.
        let mut sim = PassSimulator::new(3);
        for key in [b"a", b"b", b"c", b"a", b"d"] {
            sim.record(hash_key(key));
        }
        assert_eq!(sim.passes(), 2);
        // Round robin over 10 keys, 3 per pass: every 3 records is a pass. 30 records → 10.
        let mut sim = PassSimulator::new(3);
        for i in 0..30u32 {
            sim.record(hash_key(&(i % 10).to_be_bytes()));
        }
        assert_eq!(sim.passes(), 10);
        // Everything fits: one pass.
        let mut sim = PassSimulator::new(100);
        for i in 0..1000u32 {
            sim.record(hash_key(&(i % 10).to_be_bytes()));
        }
        assert_eq!(sim.passes(), 1);
        assert_eq!(PassSimulator::new(5).passes(), 0);
    }
}

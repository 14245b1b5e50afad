//! The log cleaner's arithmetic: what Kafka's cleaner will do with a compacted partition, from
//! the broker's cleaner settings, the topic's settings and what a scan saw. No I/O.
//!
//! The rules, as Apache Kafka 4.3 implements them (read in its source; the dev stack's broker
//! jars, `kafka-storage-4.3.1.jar`, were checked for the constants):
//!
//! - `LogCleaner.CleanerThread`: each of `log.cleaner.threads` threads owns one
//!   `SkimpyOffsetMap` of `min(log.cleaner.dedupe.buffer.size / threads, 2^31 - 1)` bytes.
//! - `SkimpyOffsetMap`: `slots = memory / (hash bytes + 8)`; the hash is MD5 in 4.3
//!   (`CleanerConfig.HASH_ALGORITHM = "MD5"`), so 24 bytes per entry. Kafka's trunk has moved
//!   to SHA-256 (40 bytes per entry): [`CleanerSettings::entry_bytes`] says which.
//! - `Cleaner.buildOffsetMapForSegment`: `maxDesiredMapSize = (int)(slots * load factor)`
//!   (`log.cleaner.io.buffer.load.factor`, 0.9); before each keyed record it checks
//!   `map.size() < maxDesiredMapSize`, else the map is full and the pass ends *at that record*,
//!   even in the middle of a segment. The pass then recopies every segment up to there,
//!   dropping records whose key has a later offset in the map, and the next pass starts where
//!   this one stopped. So a partition whose dirty section has more distinct keys than the map
//!   holds is cleaned in several passes; since partial segments are mapped, a valid buffer
//!   always makes progress. (Brokers before partial mapping could not clean a segment with
//!   more distinct keys than the map holds; 4.3 can.)
//! - `KafkaConfig.validateValues`: `require(dedupe buffer / threads > 1048576, "log.cleaner.
//!   dedupe.buffer.size must be at least 1MB per cleaner thread")`: the broker refuses to start
//!   with exactly 1 MiB per thread or less.
//! - `LogCleanerManager.cleanableOffsets`: the active segment, the last stable offset and
//!   segments whose largest timestamp is within `min.compaction.lag.ms` are never cleaned.
//! - `LogCleanerManager.grabFilthiestCompactedLog` / `LogToClean`: a partition is cleaned when
//!   `cleanable bytes / (clean bytes + cleanable bytes) > min.cleanable.dirty.ratio`, or when
//!   its oldest dirty non-active segment's first batch is older than `max.compaction.lag.ms`;
//!   cleanable bytes are whole non-active segments only. The dirtiest such partition goes
//!   first; a thread with nothing to clean sleeps `log.cleaner.backoff.ms`.
//! - `Cleaner.cleanSegments`: each group of segments (up to `segment.bytes`) is copied into a
//!   new `.cleaned` segment that is swapped in, so a clean needs free space for one group per
//!   thread; tombstones stay until `delete.retention.ms` after the clean that first saw them.

use serde::Serialize;

/// A broker refuses a dedupe buffer of this many bytes per cleaner thread or less
/// (`KafkaConfig`: the buffer per thread must exceed it).
pub const MIN_DEDUPE_BYTES_PER_THREAD: u64 = 1024 * 1024;

/// `log.cleaner.*` broker settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct CleanerSettings {
    /// `log.cleaner.threads`.
    pub threads: u32,
    /// `log.cleaner.dedupe.buffer.size`, bytes, shared by all threads.
    pub dedupe_buffer_bytes: u64,
    /// `log.cleaner.io.buffer.load.factor`.
    pub load_factor: f64,
    /// `log.cleaner.backoff.ms`.
    pub backoff_ms: u64,
    /// Bytes per offset-map entry: hash + 8-byte offset (24 with MD5, Kafka ≤ 4.3).
    pub entry_bytes: u64,
}

impl Default for CleanerSettings {
    /// Kafka's defaults.
    fn default() -> Self {
        Self {
            threads: 1,
            dedupe_buffer_bytes: 128 * 1024 * 1024,
            load_factor: 0.9,
            backoff_ms: 15_000,
            entry_bytes: 24,
        }
    }
}

impl CleanerSettings {
    /// Bytes of one thread's offset map.
    pub fn map_bytes_per_thread(&self) -> u64 {
        (self.dedupe_buffer_bytes / u64::from(self.threads.max(1))).min(i32::MAX as u64)
    }

    /// Slots of one thread's offset map.
    pub fn slots(&self) -> u64 {
        self.map_bytes_per_thread() / self.entry_bytes.max(1)
    }

    /// Distinct keys one pass maps at most: `(int)(slots * load factor)`.
    pub fn keys_per_pass(&self) -> u64 {
        (self.slots() as f64 * self.load_factor) as u64
    }

    /// Why the broker would not run the cleaner with these settings, if it would not.
    pub fn rejection(&self) -> Option<String> {
        if self.threads == 0 {
            return Some("log.cleaner.threads is 0: no cleaner runs".into());
        }
        let per_thread = self.dedupe_buffer_bytes / u64::from(self.threads);
        if per_thread <= MIN_DEDUPE_BYTES_PER_THREAD {
            return Some(format!(
                "log.cleaner.dedupe.buffer.size {} / {} threads = {per_thread} bytes per thread, not more than 1 MiB (1048576) per thread: the broker refuses this configuration",
                self.dedupe_buffer_bytes, self.threads
            ));
        }
        if self.keys_per_pass() < 1 {
            return Some("the offset map holds no key: no pass can make progress".into());
        }
        None
    }

    /// The dedupe buffer (all threads) that maps `keys` distinct keys in one pass; `None` when
    /// no buffer can (a thread's map is capped at 2^31 − 1 bytes).
    pub fn dedupe_buffer_for(&self, keys: u64) -> Option<u64> {
        let slots = (keys as f64 / self.load_factor).ceil() as u64 + 1;
        let per_thread = (slots * self.entry_bytes).max(MIN_DEDUPE_BYTES_PER_THREAD + 1);
        (per_thread <= i32::MAX as u64).then(|| per_thread * u64::from(self.threads.max(1)))
    }
}

/// A topic's cleaner-relevant settings.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TopicSettings {
    /// `cleanup.policy` contains `compact`.
    pub compact: bool,
    /// `cleanup.policy` contains `delete`.
    pub delete: bool,
    /// `min.cleanable.dirty.ratio`.
    pub min_cleanable_dirty_ratio: f64,
    /// `segment.bytes`.
    pub segment_bytes: u64,
    /// `segment.ms`.
    pub segment_ms: u64,
    /// `min.compaction.lag.ms`.
    pub min_compaction_lag_ms: u64,
    /// `max.compaction.lag.ms` (`i64::MAX` = none).
    pub max_compaction_lag_ms: u64,
    /// `delete.retention.ms`.
    pub delete_retention_ms: u64,
}

impl Default for TopicSettings {
    /// Kafka's defaults for a compacted topic.
    fn default() -> Self {
        Self {
            compact: true,
            delete: false,
            min_cleanable_dirty_ratio: 0.5,
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 3600 * 1000,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX as u64,
            delete_retention_ms: 24 * 3600 * 1000,
        }
    }
}

/// What is known about one partition (from a scan, or given by hand).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PartitionProfile {
    /// Partition number.
    pub partition: i32,
    /// Records present.
    pub records: u64,
    /// Bytes of keys and values present.
    pub bytes: u64,
    /// Distinct keys (exact or estimated).
    pub distinct_keys: u64,
    /// Keys whose newest record is not a tombstone, when known exactly.
    pub live_keys: Option<u64>,
    /// Keys whose newest record is a tombstone, when known exactly.
    pub tombstoned_keys: Option<u64>,
    /// Tombstone records present.
    pub tombstones: u64,
    /// Records without a key.
    pub null_key_records: u64,
    /// Bytes of the newest record per key, summed, when known exactly.
    pub newest_bytes: Option<u64>,
    /// Age of the oldest record present, ms.
    pub oldest_record_age_ms: Option<u64>,
    /// Passes the offset map needs for this partition's records (simulated over the key
    /// sequence with the map's capacity), when a scan simulated it.
    pub simulated_passes: Option<u64>,
}

/// Write rate into the topic, spread evenly over the partitions.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct WriteRate {
    /// Records per second into the topic.
    pub records_per_s: f64,
    /// Bytes per second into the topic.
    pub bytes_per_s: f64,
}

/// Whether the cleaner can clean a partition.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Cleanability {
    /// It can, in the given number of passes.
    Yes,
    /// Not now, for the given reason.
    NotNow {
        /// Why.
        reason: String,
    },
    /// Never, as configured.
    Never {
        /// Why.
        reason: String,
    },
}

/// The plan for one partition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionPlan {
    /// Partition number.
    pub partition: i32,
    /// Whether it can be cleaned.
    pub cleanable: Cleanability,
    /// Passes to clean what is there now (all of it dirty).
    pub passes: u64,
    /// `passes` comes from a simulation over the scanned key sequence (else the lower bound
    /// `ceil(distinct keys / keys per pass)`).
    pub passes_simulated: bool,
    /// Records after a full clean (tombstones still within `delete.retention.ms` included).
    pub records_after: u64,
    /// Bytes after a full clean.
    pub bytes_after: u64,
    /// Seconds from a clean until the next one triggers at the given write rate.
    pub next_clean_after_s: Option<f64>,
    /// Peak bytes on disk for this partition: the log grown to the trigger point plus the
    /// `.cleaned` copy of one segment group.
    pub peak_bytes: u64,
}

/// A setting to change, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// The setting's name (broker or topic).
    pub setting: String,
    /// Its current value.
    pub current: String,
    /// The suggested value.
    pub suggested: String,
    /// Why, with the numbers.
    pub why: String,
}

/// The plan for a topic.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Plan {
    /// Distinct keys one pass of one thread maps.
    pub keys_per_pass: u64,
    /// Why the broker runs no cleaner, if it does not.
    pub cleaner_rejected: Option<String>,
    /// Per partition.
    pub partitions: Vec<PartitionPlan>,
    /// Extra disk the topic needs beyond its compacted size at the peak, bytes.
    pub headroom_bytes: u64,
    /// Settings to change.
    pub advice: Vec<Advice>,
}

/// Computes the plan.
pub fn plan(
    cleaner: &CleanerSettings,
    topic: &TopicSettings,
    partitions: &[PartitionProfile],
    rate: Option<WriteRate>,
) -> Plan {
    let per_pass = cleaner.keys_per_pass();
    let rejected = cleaner.rejection();
    let partition_count = partitions.len().max(1) as f64;
    let mut plans = Vec::with_capacity(partitions.len());
    for profile in partitions {
        let (passes, simulated) = match profile.simulated_passes {
            Some(passes) => (passes, true),
            None if per_pass == 0 => (0, false),
            None => (profile.distinct_keys.div_ceil(per_pass), false),
        };
        let avg_record = if profile.records == 0 {
            0.0
        } else {
            profile.bytes as f64 / profile.records as f64
        };
        let tombstoned = profile.tombstoned_keys.unwrap_or_else(|| {
            // Estimated: tombstones in proportion, at most one per key.
            profile.tombstones.min(profile.distinct_keys)
        });
        let live = profile
            .live_keys
            .unwrap_or(profile.distinct_keys.saturating_sub(tombstoned));
        // Tombstones survive the first clean (the delete horizon starts then).
        let records_after = live + tombstoned;
        let bytes_after = profile
            .newest_bytes
            .unwrap_or((records_after as f64 * avg_record) as u64);
        let cleanable = if let Some(reason) = &rejected {
            Cleanability::Never {
                reason: reason.clone(),
            }
        } else if !topic.compact {
            Cleanability::Never {
                reason: "cleanup.policy does not contain compact".into(),
            }
        } else if profile.records == 0 {
            Cleanability::NotNow {
                reason: "the partition is empty".into(),
            }
        } else if profile.bytes < topic.segment_bytes
            && profile
                .oldest_record_age_ms
                .is_some_and(|age| age < topic.segment_ms)
        {
            Cleanability::NotNow {
                reason: format!(
                    "all {} records ({} bytes) are in the active segment, which is never cleaned: it rolls at segment.bytes {} or, on the first write after segment.ms {} ms (the oldest record is {} ms old)",
                    profile.records,
                    profile.bytes,
                    topic.segment_bytes,
                    topic.segment_ms,
                    profile.oldest_record_age_ms.unwrap_or(0)
                ),
            }
        } else if topic.min_compaction_lag_ms > 0
            && profile
                .oldest_record_age_ms
                .is_some_and(|age| age < topic.min_compaction_lag_ms)
        {
            Cleanability::NotNow {
                reason: format!(
                    "min.compaction.lag.ms {} ms: no record is old enough yet (the oldest is {} ms old)",
                    topic.min_compaction_lag_ms,
                    profile.oldest_record_age_ms.unwrap_or(0)
                ),
            }
        } else {
            Cleanability::Yes
        };
        let next_clean_after_s = rate.and_then(|rate| {
            next_clean_after_s(
                topic,
                bytes_after as f64,
                rate.bytes_per_s / partition_count,
            )
        });
        let ratio = topic.min_cleanable_dirty_ratio.clamp(0.0, 0.999);
        // The log grows until the dirty share of it passes the ratio: compacted / (1 - ratio).
        let grown = (bytes_after as f64 / (1.0 - ratio)).max(profile.bytes as f64);
        let peak_bytes = grown as u64 + topic.segment_bytes.min(grown as u64);
        plans.push(PartitionPlan {
            partition: profile.partition,
            cleanable,
            passes,
            passes_simulated: simulated,
            records_after,
            bytes_after,
            next_clean_after_s,
            peak_bytes,
        });
    }
    let compacted: u64 = plans.iter().map(|p| p.bytes_after).sum();
    let peak: u64 = plans.iter().map(|p| p.peak_bytes).sum();
    let advice = advise(cleaner, topic, partitions, &plans, rate);
    Plan {
        keys_per_pass: per_pass,
        cleaner_rejected: rejected,
        partitions: plans,
        headroom_bytes: peak.saturating_sub(compacted),
        advice,
    }
}

/// Seconds after a clean until the next one triggers, writing `bytes_per_s` into a partition
/// whose clean section holds `clean_bytes`: the first moment when the rolled (non-active)
/// dirty segments exceed the ratio, or `max.compaction.lag.ms` forces it; never before
/// `min.compaction.lag.ms`.
pub fn next_clean_after_s(
    topic: &TopicSettings,
    clean_bytes: f64,
    bytes_per_s: f64,
) -> Option<f64> {
    if bytes_per_s <= 0.0 {
        return None;
    }
    let ratio = topic.min_cleanable_dirty_ratio.clamp(0.0, 0.999);
    // dirty / (clean + dirty) > ratio  ⇔  dirty > clean × ratio / (1 − ratio)
    let dirty_needed = (clean_bytes * ratio / (1.0 - ratio)).max(1.0);
    let roll_s = (topic.segment_bytes as f64 / bytes_per_s).min(topic.segment_ms as f64 / 1000.0);
    let per_roll = roll_s * bytes_per_s;
    let rolls = (dirty_needed / per_roll).ceil().max(1.0);
    let mut seconds = rolls * roll_s;
    if topic.max_compaction_lag_ms < i64::MAX as u64 {
        // Forced once the first dirty segment's first batch is older than the lag and the
        // segment has rolled.
        let forced = topic.max_compaction_lag_ms as f64 / 1000.0 + roll_s;
        seconds = seconds.min(forced.max(roll_s));
    }
    Some(seconds.max(topic.min_compaction_lag_ms as f64 / 1000.0))
}

fn advise(
    cleaner: &CleanerSettings,
    topic: &TopicSettings,
    partitions: &[PartitionProfile],
    plans: &[PartitionPlan],
    rate: Option<WriteRate>,
) -> Vec<Advice> {
    let mut advice = Vec::new();
    if !topic.compact {
        advice.push(Advice {
            setting: "cleanup.policy".into(),
            current: if topic.delete { "delete" } else { "?" }.into(),
            suggested: "compact".into(),
            why: "an entity topic keeps the newest record per key only when compacted".into(),
        });
    }
    let largest = partitions
        .iter()
        .map(|p| p.distinct_keys)
        .max()
        .unwrap_or(0);
    let worst = plans.iter().map(|p| p.passes).max().unwrap_or(0);
    if cleaner.rejection().is_none() && largest > cleaner.keys_per_pass() {
        let why = format!(
            "the largest partition has {largest} distinct keys; one pass maps {} ({} bytes per thread / {} bytes per entry × load factor {}), so a full clean takes {worst} passes, each recopying the log up to where it stopped",
            cleaner.keys_per_pass(),
            cleaner.map_bytes_per_thread(),
            cleaner.entry_bytes,
            cleaner.load_factor
        );
        match cleaner.dedupe_buffer_for(largest) {
            Some(needed) => advice.push(Advice {
                setting: "log.cleaner.dedupe.buffer.size (broker)".into(),
                current: cleaner.dedupe_buffer_bytes.to_string(),
                suggested: needed.to_string(),
                why: format!("{why}; {needed} bytes map it in one"),
            }),
            None => {
                let max_keys = (((i32::MAX as u64) / cleaner.entry_bytes.max(1)) as f64
                    * cleaner.load_factor) as u64;
                let partitions = partitions.len().max(1) as u64;
                let needed = partitions * largest.div_ceil(max_keys.max(1));
                advice.push(Advice {
                    setting: "partitions".into(),
                    current: partitions.to_string(),
                    suggested: needed.to_string(),
                    why: format!(
                        "{why}; a thread's map is capped at 2^31 − 1 bytes ({max_keys} keys), so no dedupe buffer maps the partition in one pass: spread the keys over more partitions"
                    ),
                });
            }
        }
    }
    let null_keys: u64 = partitions.iter().map(|p| p.null_key_records).sum();
    if null_keys > 0 {
        advice.push(Advice {
            setting: "producer keys".into(),
            current: format!("{null_keys} records without a key"),
            suggested: "a key on every record".into(),
            why: "the cleaner drops records without a key, and a compacted topic rejects new ones"
                .into(),
        });
    }
    if let Some(rate) = rate {
        let per_partition = rate.bytes_per_s / partitions.len().max(1) as f64;
        if per_partition > 0.0 {
            let roll_s =
                (topic.segment_bytes as f64 / per_partition).min(topic.segment_ms as f64 / 1000.0);
            if roll_s > 3600.0 {
                advice.push(Advice {
                    setting: "segment.ms".into(),
                    current: topic.segment_ms.to_string(),
                    suggested: "3600000".into(),
                    why: format!(
                        "at {per_partition:.0} bytes/s per partition a segment rolls every {roll_s:.0} s; the active segment is never cleaned, so stale values stay that long"
                    ),
                });
            }
        }
    }
    advice
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_per_pass_follows_the_offset_map() {
        let defaults = CleanerSettings::default();
        // 128 MiB / 24 = 5,592,405 slots; × 0.9 = 5,033,164 (truncated).
        assert_eq!(defaults.slots(), 5_592_405);
        assert_eq!(defaults.keys_per_pass(), 5_033_164);
        let small = CleanerSettings {
            dedupe_buffer_bytes: 1024 * 1024,
            ..defaults
        };
        // 1,048,576 / 24 = 43,690 slots; × 0.9 = 39,321.
        assert_eq!(small.keys_per_pass(), 39_321);
        let two = CleanerSettings {
            threads: 2,
            ..defaults
        };
        assert_eq!(two.keys_per_pass(), 2_516_581);
        // The per-thread map is capped at 2^31 − 1 bytes.
        let huge = CleanerSettings {
            dedupe_buffer_bytes: 8 << 30,
            ..defaults
        };
        assert_eq!(huge.map_bytes_per_thread(), i32::MAX as u64);
        let sha = CleanerSettings {
            entry_bytes: 40,
            ..defaults
        };
        assert_eq!(sha.keys_per_pass(), 3_019_898);
    }

    #[test]
    fn the_broker_minimum_is_one_mib_per_thread() {
        let ok = CleanerSettings {
            dedupe_buffer_bytes: (2 << 20) + 2,
            threads: 2,
            ..CleanerSettings::default()
        };
        assert_eq!(ok.rejection(), None);
        // Exactly 1 MiB per thread is refused too (the broker requires more).
        let exact = CleanerSettings {
            dedupe_buffer_bytes: 2 << 20,
            ..ok
        };
        assert!(
            exact
                .rejection()
                .unwrap()
                .contains("1 MiB (1048576) per thread")
        );
        let low = CleanerSettings { threads: 3, ..ok };
        assert!(low.rejection().is_some());
        assert!(CleanerSettings { threads: 0, ..ok }.rejection().is_some());
    }

    #[test]
    fn dedupe_buffer_for_a_key_count_maps_it_in_one_pass() {
        let settings = CleanerSettings::default();
        for keys in [1u64, 39_322, 5_033_165, 80_000_000] {
            let fitted = CleanerSettings {
                dedupe_buffer_bytes: settings.dedupe_buffer_for(keys).unwrap(),
                ..settings
            };
            assert!(fitted.keys_per_pass() >= keys, "{keys}");
        }
        assert_eq!(settings.dedupe_buffer_for(10), Some(1024 * 1024 + 1));
        // One thread maps at most (2^31 − 1) / 24 × 0.9 = 80,530,636 keys.
        assert_eq!(settings.dedupe_buffer_for(100_000_000), None);
        let plan = plan(
            &settings,
            &TopicSettings::default(),
            &[profile(100_000_000, 100_000_000, 10_000_000_000)],
            None,
        );
        assert_eq!(plan.advice[0].setting, "partitions");
        assert_eq!(plan.advice[0].suggested, "2");
    }

    fn profile(records: u64, keys: u64, bytes: u64) -> PartitionProfile {
        PartitionProfile {
            partition: 0,
            records,
            bytes,
            distinct_keys: keys,
            oldest_record_age_ms: Some(3_600_000),
            ..PartitionProfile::default()
        }
    }

    #[test]
    fn passes_and_size_after_a_clean() {
        // 50,000 slots, 45,000 keys per pass.
        let cleaner = CleanerSettings {
            dedupe_buffer_bytes: 1_200_000,
            ..CleanerSettings::default()
        };
        let topic = TopicSettings {
            segment_bytes: 1 << 20,
            ..TopicSettings::default()
        };
        let plan = plan(
            &cleaner,
            &topic,
            &[profile(1_000_000, 100_000, 100_000_000)],
            None,
        );
        let p = &plan.partitions[0];
        assert_eq!(p.cleanable, Cleanability::Yes);
        // Lower bound without a simulation: ceil(100,000 / 45,000) = 3.
        assert_eq!((p.passes, p.passes_simulated), (3, false));
        assert_eq!(p.records_after, 100_000);
        assert_eq!(p.bytes_after, 10_000_000);
        assert_eq!(
            plan.advice[0].setting,
            "log.cleaner.dedupe.buffer.size (broker)"
        );
        assert_eq!(plan.advice[0].suggested, (111_113 * 24).to_string());
        // A simulation wins over the bound.
        let mut simulated = profile(1_000_000, 100_000, 100_000_000);
        simulated.simulated_passes = Some(26);
        let plan = super::plan(&cleaner, &topic, &[simulated], None);
        assert_eq!(
            (
                plan.partitions[0].passes,
                plan.partitions[0].passes_simulated
            ),
            (26, true)
        );
    }

    #[test]
    fn tombstones_and_live_keys_when_known() {
        let mut p = profile(10, 4, 1000);
        p.live_keys = Some(3);
        p.tombstoned_keys = Some(1);
        p.tombstones = 2;
        p.newest_bytes = Some(310);
        let plan = plan(
            &CleanerSettings::default(),
            &TopicSettings {
                segment_bytes: 100,
                ..TopicSettings::default()
            },
            &[p],
            None,
        );
        assert_eq!(plan.partitions[0].records_after, 4);
        assert_eq!(plan.partitions[0].bytes_after, 310);
    }

    #[test]
    fn the_active_segment_is_never_cleaned() {
        let mut p = profile(1000, 10, 100_000);
        p.oldest_record_age_ms = Some(5_000);
        let plan = plan(
            &CleanerSettings::default(),
            &TopicSettings::default(),
            &[p],
            None,
        );
        match &plan.partitions[0].cleanable {
            Cleanability::NotNow { reason } => {
                assert!(reason.contains("active segment"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // Once segment.ms has passed, the next write rolls it.
        let mut old = profile(1000, 10, 100_000);
        old.oldest_record_age_ms = Some(8 * 24 * 3600 * 1000);
        let plan = super::plan(
            &CleanerSettings::default(),
            &TopicSettings::default(),
            &[old],
            None,
        );
        assert_eq!(plan.partitions[0].cleanable, Cleanability::Yes);
    }

    #[test]
    fn not_compacted_is_never_cleaned() {
        let topic = TopicSettings {
            compact: false,
            delete: true,
            segment_bytes: 1,
            ..TopicSettings::default()
        };
        let plan = plan(
            &CleanerSettings::default(),
            &topic,
            &[profile(10, 5, 100)],
            None,
        );
        assert!(matches!(
            plan.partitions[0].cleanable,
            Cleanability::Never { .. }
        ));
        assert_eq!(plan.advice[0].setting, "cleanup.policy");
    }

    #[test]
    fn next_clean_triggers_on_the_dirty_ratio_of_rolled_segments() {
        let topic = TopicSettings {
            segment_bytes: 100 * 1024 * 1024,
            ..TopicSettings::default()
        };
        // 1 GB clean, ratio 0.5: 1 GB dirty is needed = 10 rolled segments of 100 MiB...
        // at 1 MB/s a segment rolls every 104.9 s; ceil(1e9 / 104,857,600) = 10 rolls.
        let s = next_clean_after_s(&topic, 1e9, 1e6).unwrap();
        assert!((s - 10.0 * 104.857_6).abs() < 1e-6, "{s}");
        // segment.ms caps the roll interval: 60 s segments, 60 MB each; 17 rolls.
        let timed = TopicSettings {
            segment_ms: 60_000,
            ..topic
        };
        let s = next_clean_after_s(&timed, 1e9, 1e6).unwrap();
        assert!((s - 17.0 * 60.0).abs() < 1e-6, "{s}");
        // max.compaction.lag.ms forces it earlier.
        let forced = TopicSettings {
            max_compaction_lag_ms: 300_000,
            ..timed
        };
        assert_eq!(next_clean_after_s(&forced, 1e9, 1e6), Some(360.0));
        // min.compaction.lag.ms delays it.
        let lagged = TopicSettings {
            min_compaction_lag_ms: 7_200_000,
            ..timed
        };
        assert_eq!(next_clean_after_s(&lagged, 1e9, 1e6), Some(7200.0));
        assert_eq!(next_clean_after_s(&topic, 1e9, 0.0), None);
    }

    #[test]
    fn headroom_is_the_growth_to_the_trigger_plus_one_cleaned_group() {
        let topic = TopicSettings {
            segment_bytes: 1_000_000,
            ..TopicSettings::default()
        };
        // 10 MB compacted; ratio 0.5 → the log grows to 20 MB before a clean; + 1 MB copy.
        let plan = plan(
            &CleanerSettings::default(),
            &topic,
            &[profile(100_000, 100_000, 10_000_000)],
            None,
        );
        assert_eq!(plan.partitions[0].peak_bytes, 21_000_000);
        assert_eq!(plan.headroom_bytes, 11_000_000);
    }
}

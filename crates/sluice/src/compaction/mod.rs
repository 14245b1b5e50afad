//! `sluice compaction scan|plan`: what a compacted topic holds and what Kafka's log cleaner
//! will do with it. See `docs/compaction.md`.
//!
//! - [`scan`] reads a topic and counts per partition: records, distinct keys (exact, then a
//!   HyperLogLog estimate past a budget: [`hll`]), tombstones, null keys, bytes, ages, and
//!   simulates the cleaner's passes;
//! - [`model`] is the cleaner's arithmetic, with no I/O;
//! - [`configs`] reads the brokers' and the topic's effective settings.

pub mod configs;
pub mod hll;
pub mod model;
pub mod scan;

use crate::config::human_bytes;
use anyhow::{Context as _, bail};
use clap::{Args, Subcommand};
use serde::Serialize;

use model::{Cleanability, PartitionProfile, Plan, WriteRate};
use scan::{ScanOptions, TopicScan};

/// `sluice compaction …`.
#[derive(Debug, Subcommand)]
pub enum CompactionCommand {
    /// Read a topic and report, per partition, what compaction would keep.
    Scan(ScanArgs),
    /// Predict what the log cleaner does with a topic, from its settings and a scan.
    Plan(PlanArgs),
}

/// Where and what to read.
#[derive(Debug, Args)]
pub struct TopicArgs {
    /// Bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    pub brokers: String,
    /// The topic.
    #[arg(long)]
    pub topic: String,
    /// Only these partitions, e.g. `0,3,5` (default: all).
    #[arg(long, value_delimiter = ',')]
    pub partitions: Vec<i32>,
    /// Keys counted exactly over all partitions before a partition goes on with a
    /// HyperLogLog estimate (about 32 bytes per key).
    #[arg(long, default_value_t = 2_000_000)]
    pub exact_keys: u64,
    /// Any librdkafka client property, `-X name=value` (repeatable).
    #[arg(short = 'X', value_parser = crate::perf::parse_property)]
    pub property: Vec<(String, String)>,
    /// Print JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// No progress bar on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// `sluice compaction scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    #[command(flatten)]
    pub target: TopicArgs,
    /// Also simulate the cleaner's passes with an offset map of this many keys per pass
    /// (`compaction plan` takes it from the brokers' settings).
    #[arg(long)]
    pub keys_per_pass: Option<u64>,
}

/// `sluice compaction plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub target: TopicArgs,
    /// Skip the scan: plan for this many distinct keys (spread evenly over the partitions).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Average record size, bytes (with `--keys`; default: what the scan saw, else 1000).
    #[arg(long)]
    pub record_bytes: Option<u64>,
    /// Write rate into the topic, records per second (for when the next clean triggers).
    #[arg(long)]
    pub records_per_s: Option<f64>,
    /// Bytes per offset-map entry: 24 for Kafka up to 4.3 (MD5), 40 for brokers that hash
    /// keys with SHA-256.
    #[arg(long, default_value_t = 24)]
    pub entry_bytes: u64,
}

/// Runs a compaction command.
///
/// # Errors
///
/// Invalid arguments and Kafka failures.
pub fn run(command: CompactionCommand) -> anyhow::Result<()> {
    match command {
        CompactionCommand::Scan(args) => {
            if args.keys_per_pass == Some(0) {
                bail!("--keys-per-pass must be at least 1");
            }
            let result = scan::scan(&scan_options(&args.target, args.keys_per_pass))?;
            if args.target.json {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                print!("{}", render_scan(&result));
            }
            Ok(())
        }
        CompactionCommand::Plan(args) => plan_command(&args),
    }
}

fn scan_options(target: &TopicArgs, keys_per_pass: Option<u64>) -> ScanOptions {
    ScanOptions {
        brokers: target.brokers.clone(),
        topic: target.topic.clone(),
        partitions: target.partitions.clone(),
        exact_keys: target.exact_keys,
        keys_per_pass,
        properties: target.property.clone(),
        progress: !target.quiet,
    }
}

/// `compaction plan`'s output.
#[derive(Debug, Serialize)]
pub struct PlanReport {
    /// The topic.
    pub topic: String,
    /// The broker whose cleaner settings were used (the one mapping the fewest keys).
    pub broker: i32,
    /// Its cleaner settings.
    pub cleaner: model::CleanerSettings,
    /// The topic's settings.
    pub topic_settings: model::TopicSettings,
    /// The scan, when one ran.
    pub scan: Option<TopicScan>,
    /// The plan.
    pub plan: Plan,
}

fn plan_command(args: &PlanArgs) -> anyhow::Result<()> {
    if args.entry_bytes == 0 {
        bail!("--entry-bytes must be at least 1 (24 for MD5, 40 for SHA-256)");
    }
    if args
        .records_per_s
        .is_some_and(|r| !(r >= 0.0 && r.is_finite()))
    {
        bail!("--records-per-s must be a number ≥ 0");
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let settings = runtime.block_on(configs::read(
        &args.target.brokers,
        &args.target.topic,
        &args.target.property,
    ))?;
    let mut cleaner = settings.cleaner;
    cleaner.entry_bytes = args.entry_bytes;
    let (scan, profiles) = match args.keys {
        Some(keys) => {
            let partitions = settings.partitions.max(1) as u64;
            let record_bytes = args.record_bytes.unwrap_or(1000);
            let profiles: Vec<PartitionProfile> = (0..partitions)
                .map(|p| {
                    let keys = keys / partitions + u64::from(p < keys % partitions);
                    PartitionProfile {
                        partition: p as i32,
                        records: keys,
                        bytes: keys * record_bytes,
                        distinct_keys: keys,
                        ..PartitionProfile::default()
                    }
                })
                .collect();
            (None, profiles)
        }
        None => {
            let per_pass = cleaner.keys_per_pass().max(1);
            let scan = scan::scan(&scan_options(&args.target, Some(per_pass)))
                .context("scanning the topic")?;
            let profiles = scan.partitions.iter().map(|p| p.profile()).collect();
            (Some(scan), profiles)
        }
    };
    let rate = args.records_per_s.map(|records_per_s| {
        let avg = args.record_bytes.map(|b| b as f64).unwrap_or_else(|| {
            let (records, bytes) = profiles
                .iter()
                .fold((0u64, 0u64), |(r, b), p: &PartitionProfile| {
                    (r + p.records, b + p.bytes)
                });
            if records == 0 {
                1000.0
            } else {
                bytes as f64 / records as f64
            }
        });
        WriteRate {
            records_per_s,
            bytes_per_s: records_per_s * avg,
        }
    });
    let plan = model::plan(&cleaner, &settings.topic, &profiles, rate);
    let report = PlanReport {
        topic: args.target.topic.clone(),
        broker: settings.broker,
        cleaner,
        topic_settings: settings.topic,
        scan,
        plan,
    };
    if args.target.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_plan(&report));
    }
    Ok(())
}

fn age(ms: Option<u64>) -> String {
    match ms {
        None => "-".into(),
        Some(ms) if ms < 120_000 => format!("{:.0}s", ms as f64 / 1000.0),
        Some(ms) if ms < 7_200_000 => format!("{:.0}m", ms as f64 / 60_000.0),
        Some(ms) if ms < 172_800_000 => format!("{:.1}h", ms as f64 / 3_600_000.0),
        Some(ms) => format!("{:.1}d", ms as f64 / 86_400_000.0),
    }
}

/// The scan as a table.
pub fn render_scan(scan: &TopicScan) -> String {
    let mut out = format!(
        "topic {}: {} records in {:.1} s ({:.0} records/s)\n",
        scan.topic,
        scan.partitions.iter().map(|p| p.records).sum::<u64>(),
        scan.seconds,
        scan.records_per_s
    );
    out.push_str(&format!(
        "{:>9} {:>12} {:>14} {:>13} {:>6} {:>10} {:>9} {:>14} {:>8} {:>8} {:>7}\n",
        "partition",
        "records",
        "distinct keys",
        "after compact",
        "dup %",
        "tombstones",
        "null key",
        "bytes",
        "oldest",
        "kept",
        "passes"
    ));
    for p in &scan.partitions {
        let keys = if p.distinct_keys_estimated {
            format!("~{}", p.distinct_keys)
        } else {
            p.distinct_keys.to_string()
        };
        out.push_str(&format!(
            "{:>9} {:>12} {:>14} {:>13} {:>6.1} {:>10} {:>9} {:>14} {:>8} {:>8} {:>7}\n",
            p.partition,
            p.records,
            keys,
            p.newest_bytes.map_or("-".into(), |b| human_bytes(b as i64)),
            p.duplicate_ratio * 100.0,
            p.tombstones,
            p.null_key_records,
            p.bytes,
            age(p.oldest_record_age_ms),
            age(p.oldest_kept_record_age_ms),
            p.simulated_passes.map_or("-".into(), |n| n.to_string()),
        ));
    }
    if scan.partitions.iter().any(|p| p.distinct_keys_estimated) {
        out.push_str(&format!(
            "~: HyperLogLog estimate (standard error {:.2} %); raise --exact-keys to count exactly\n",
            hll::HyperLogLog::STANDARD_ERROR * 100.0
        ));
    }
    if scan.partitions.iter().any(|p| p.null_key_records > 0) {
        out.push_str("null key: the cleaner drops records without a key\n");
    }
    out
}

/// The plan in words.
pub fn render_plan(report: &PlanReport) -> String {
    let c = &report.cleaner;
    let t = &report.topic_settings;
    let plan = &report.plan;
    let mut out = String::new();
    if let Some(scan) = &report.scan {
        out.push_str(&render_scan(scan));
        out.push('\n');
    }
    out.push_str(&format!(
        "cleaner (broker {}): {} thread(s), dedupe buffer {} bytes ({} per thread) / {} bytes per key × load factor {} = {} keys per pass\n",
        report.broker,
        c.threads,
        c.dedupe_buffer_bytes,
        c.map_bytes_per_thread(),
        c.entry_bytes,
        c.load_factor,
        plan.keys_per_pass
    ));
    out.push_str(&format!(
        "topic {}: cleanup.policy {}, min.cleanable.dirty.ratio {}, segment.bytes {}, segment.ms {}, min.compaction.lag.ms {}, max.compaction.lag.ms {}, delete.retention.ms {}\n",
        report.topic,
        match (t.compact, t.delete) {
            (true, true) => "compact,delete",
            (true, false) => "compact",
            (false, true) => "delete",
            (false, false) => "?",
        },
        t.min_cleanable_dirty_ratio,
        t.segment_bytes,
        t.segment_ms,
        t.min_compaction_lag_ms,
        t.max_compaction_lag_ms,
        t.delete_retention_ms
    ));
    if let Some(reason) = &plan.cleaner_rejected {
        out.push_str(&format!("NO CLEANING: {reason}\n"));
    }
    for p in &plan.partitions {
        let state = match &p.cleanable {
            Cleanability::Yes => format!(
                "cleanable in {} pass(es){}",
                p.passes,
                if p.passes_simulated {
                    " (simulated over the keys read)"
                } else {
                    " (at least: distinct keys / keys per pass)"
                }
            ),
            Cleanability::NotNow { reason } => format!("not cleanable now: {reason}"),
            Cleanability::Never { reason } => format!("never cleaned: {reason}"),
        };
        out.push_str(&format!(
            "partition {}: {state}; after a full clean {} records, {}; peak on disk {}{}\n",
            p.partition,
            p.records_after,
            human_bytes(p.bytes_after as i64),
            human_bytes(p.peak_bytes as i64),
            p.next_clean_after_s.map_or(String::new(), |s| format!(
                "; next clean {s:.0} s after the last at this rate"
            )),
        ));
    }
    out.push_str(&format!(
        "disk headroom beyond the compacted size: {}\n",
        human_bytes(plan.headroom_bytes as i64)
    ));
    for a in &plan.advice {
        out.push_str(&format!(
            "change {}: {} -> {}: {}\n",
            a.setting, a.current, a.suggested, a.why
        ));
    }
    out
}

//! `sluice perf transforms`: what each transform costs per record, measured in process.
//!
//! Every case is a `[transforms]` section as a pipeline file writes it, built by the same
//! loader, and applied to the records sluice's PostgreSQL encoder writes for the CDC backlog
//! case's table (`bench/run --cases backlog`: `id bigint PRIMARY KEY, payload text` of ~200
//! bytes), in the backlog's plain JSON: seven inserts, an update, a delete and its tombstone in
//! every ten. A case that needs flat rows runs after `unwrap` and is reported beside `unwrap`
//! alone, so that its own share shows. `bench/run --transforms` runs it and puts each case's
//! cost beside the CPU per row of the whole pipeline measured in the same run (Must show 3 of
//! the transforms issue: what each transform costs on the CDC backlog).

use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::Args;
use serde::Serialize;

use crate::event::EventOptions;
use crate::record::OutRecord;
use crate::transform::{Chain, PredicatesConfig, TransformsConfig};

/// `sluice perf transforms`.
#[derive(Debug, Args)]
pub struct TransformsArgs {
    /// Records each case transforms per round.
    #[arg(long, default_value_t = 200_000)]
    pub records: usize,
    /// Rounds per case; the median round is reported.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Only the cases whose name contains this text.
    #[arg(long)]
    pub only: Option<String>,
    /// One JSON object per case (and one for the baseline) instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// The unwrap step most cases build on (Debezium's defaults).
const UNWRAP: &str =
    "[transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n";

/// The cases: name, the chain's transforms in order, and their sections. A case whose chain
/// starts with `unwrap` is reported with its cost over `unwrap` alone.
const CASES: &[(&str, &str)] = &[
    ("unwrap", ""),
    (
        "unwrap_add_fields",
        "[transforms.u2]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n\"add.fields\" = \"op,table,lsn\"\n\"delete.tombstone.handling.mode\" = \"rewrite\"\n",
    ),
    (
        "route",
        "[transforms.route]\ntype = \"org.apache.kafka.connect.transforms.RegexRouter\"\nregex = '([^.]+)\\.([^.]+)\\.([^.]+)'\nreplacement = \"$1.routed_$3\"\n",
    ),
    (
        "unwrap_route",
        "[transforms.u2]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n\"add.fields\" = \"op,table,lsn\"\n[transforms.route]\ntype = \"org.apache.kafka.connect.transforms.RegexRouter\"\nregex = '([^.]+)\\.([^.]+)\\.([^.]+)'\nreplacement = \"$1.routed_$3\"\n",
    ),
    (
        "logical_table_router",
        "[transforms.merge]\ntype = \"io.debezium.transforms.ByLogicalTableRouter\"\n\"topic.regex\" = '(.*)\\.public\\.(.*)'\n\"topic.replacement\" = \"$1.all\"\n",
    ),
    (
        "filter_tombstones",
        "[transforms.drop]\ntype = \"org.apache.kafka.connect.transforms.Filter\"\npredicate = \"tomb\"\n[predicates.tomb]\ntype = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n",
    ),
    (
        "scripting_filter",
        "[transforms.keep]\ntype = \"io.debezium.transforms.Filter\"\nlanguage = \"jsr223.groovy\"\ncondition = \"value.op != 'd'\"\n",
    ),
    (
        "content_based_router",
        "[transforms.cbr]\ntype = \"io.debezium.transforms.ContentBasedRouter\"\nlanguage = \"jsr223.groovy\"\n\"topic.expression\" = \"value.op == 'd' ? 'deletes' : null\"\n",
    ),
    (
        "replace_field",
        "[transforms.rf]\ntype = \"org.apache.kafka.connect.transforms.ReplaceField$Value\"\nexclude = \"transaction\"\n",
    ),
    (
        "insert_field",
        "[transforms.ins]\ntype = \"org.apache.kafka.connect.transforms.InsertField$Value\"\n\"static.field\" = \"origin\"\n\"static.value\" = \"sluice\"\n\"topic.field\" = \"topic\"\n",
    ),
    (
        "timestamp_converter",
        "[transforms.ts]\ntype = \"org.apache.kafka.connect.transforms.TimestampConverter$Value\"\nfield = \"ts_ms\"\n\"target.type\" = \"string\"\nformat = \"yyyy-MM-dd HH:mm:ss.SSS\"\n",
    ),
    (
        "flatten",
        "[transforms.flat]\ntype = \"org.apache.kafka.connect.transforms.Flatten$Value\"\ndelimiter = \"_\"\n",
    ),
    (
        "extract_field",
        "[transforms.ef]\ntype = \"org.apache.kafka.connect.transforms.ExtractField$Value\"\nfield = \"after\"\n",
    ),
    (
        "hoist_field",
        "[transforms.hoist]\ntype = \"org.apache.kafka.connect.transforms.HoistField$Value\"\nfield = \"event\"\n",
    ),
    (
        "insert_header",
        "[transforms.tag]\ntype = \"org.apache.kafka.connect.transforms.InsertHeader\"\nheader = \"origin\"\n\"value.literal\" = \"sluice\"\n",
    ),
    (
        "drop_headers",
        "[transforms.dh]\ntype = \"org.apache.kafka.connect.transforms.DropHeaders\"\nheaders = \"sluice.tx_index\"\n",
    ),
    (
        "header_from",
        "[transforms.hf]\ntype = \"org.apache.kafka.connect.transforms.HeaderFrom$Value\"\nfields = \"op\"\nheaders = \"op\"\noperation = \"copy\"\npredicate = \"tomb\"\nnegate = true\n[predicates.tomb]\ntype = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n",
    ),
    (
        "header_to_value",
        "[transforms.htv]\ntype = \"io.debezium.transforms.HeaderToValue\"\nheaders = \"sluice.commit_lsn\"\nfields = \"commit_lsn\"\noperation = \"copy\"\n",
    ),
    (
        "partition_routing",
        "[transforms.pr]\ntype = \"io.debezium.transforms.partitions.PartitionRouting\"\n\"partition.payload.fields\" = \"change.id\"\n\"partition.topic.num\" = \"6\"\n",
    ),
    (
        "unwrap_value_to_key",
        "[transforms.vtk]\ntype = \"org.apache.kafka.connect.transforms.ValueToKey\"\nfields = \"id\"\npredicate = \"tomb\"\nnegate = true\n[predicates.tomb]\ntype = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n",
    ),
    (
        "unwrap_mask_field",
        "[transforms.mask]\ntype = \"org.apache.kafka.connect.transforms.MaskField$Value\"\nfields = \"payload\"\nreplacement = \"****\"\npredicate = \"tomb\"\nnegate = true\n[predicates.tomb]\ntype = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n",
    ),
    (
        "unwrap_cast",
        "[transforms.cast]\ntype = \"org.apache.kafka.connect.transforms.Cast$Value\"\nspec = \"id:string\"\npredicate = \"tomb\"\nnegate = true\n[predicates.tomb]\ntype = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n",
    ),
];

/// One case's figures.
#[derive(Debug, Serialize)]
pub struct CaseResult {
    /// The case's name (`baseline`: a copy of each record, what any step costs at least).
    pub case: String,
    /// The chain, by the transforms' Connect class names.
    pub chain: String,
    /// Nanoseconds of CPU per record (the measuring thread's), median round.
    pub ns_per_record: f64,
    /// Nanoseconds per record of the case over `unwrap` alone (chains that start with it).
    pub ns_over_unwrap: Option<f64>,
    /// Records the chain kept of each round's `records`.
    pub kept: usize,
}

/// Runs the cases and prints them.
///
/// # Errors
///
/// A case whose section does not build (a bug in the list), or a record a chain refuses.
pub fn run(args: &TransformsArgs) -> anyhow::Result<()> {
    if args.records == 0 || args.rounds == 0 {
        bail!("--records and --rounds must be at least 1");
    }
    let records = sample_records(args.records);
    let baseline = median(args.rounds, || {
        let started = cpu_ns();
        let mut bytes = 0usize;
        for record in &records {
            bytes += std::hint::black_box(record.clone()).len();
        }
        std::hint::black_box(bytes);
        (cpu_ns() - started) as f64 / records.len() as f64
    });
    let mut results = vec![CaseResult {
        case: "baseline".into(),
        chain: "(a copy of each record)".into(),
        ns_per_record: baseline,
        ns_over_unwrap: None,
        kept: records.len(),
    }];
    let mut unwrap_ns = None;
    for (name, section) in CASES {
        if args
            .only
            .as_deref()
            .is_some_and(|only| !name.contains(only))
            && *name != "unwrap"
        {
            continue;
        }
        let after_unwrap =
            name.starts_with("unwrap_") && !section.contains("ExtractNewRecordState");
        let (chain, classes) =
            build(section, after_unwrap).with_context(|| format!("case {name}"))?;
        let mut kept = 0;
        let ns = median(args.rounds, || {
            kept = 0;
            let started = cpu_ns();
            for record in &records {
                if std::hint::black_box(chain.apply(record))
                    .expect("the sample records are transformed")
                    .is_some()
                {
                    kept += 1;
                }
            }
            (cpu_ns() - started) as f64 / records.len() as f64
        });
        if *name == "unwrap" {
            unwrap_ns = Some(ns);
        }
        results.push(CaseResult {
            case: (*name).to_owned(),
            chain: classes,
            ns_per_record: ns,
            ns_over_unwrap: after_unwrap.then(|| unwrap_ns.map(|u| ns - u)).flatten(),
            kept,
        });
    }
    if args.json {
        for result in &results {
            println!("{}", serde_json::to_string(result)?);
        }
    } else {
        println!(
            "{:<22} {:>10} {:>12} {:>8}  chain",
            "case", "ns/record", "over unwrap", "kept"
        );
        for r in &results {
            let over = r
                .ns_over_unwrap
                .map_or(String::new(), |o| format!("{o:.0}"));
            println!(
                "{:<22} {:>10.0} {:>12} {:>8}  {}",
                r.case, r.ns_per_record, over, r.kept, r.chain
            );
        }
    }
    Ok(())
}

/// The chain of a case: its sections (after [`UNWRAP`] when `after_unwrap`), every section in
/// order, and the transforms' class names for the report.
fn build(section: &str, after_unwrap: bool) -> anyhow::Result<(Chain, String)> {
    let text = if section.is_empty() || after_unwrap {
        format!("{UNWRAP}{section}")
    } else {
        section.to_owned()
    };
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        transforms: toml::Table,
        #[serde(default)]
        predicates: PredicatesConfig,
    }
    let file: File = toml::from_str(&text)?;
    // The chain in the sections' written order: `toml::Table` keeps keys sorted unless
    // `preserve_order` is on, so the order is given explicitly.
    let ordered = order_of_sections(&text);
    debug_assert_eq!(ordered.len(), file.transforms.len());
    let classes: Vec<String> = ordered
        .iter()
        .filter_map(|name| file.transforms.get(name)?.get("type")?.as_str())
        .map(|class| class.rsplit('.').next().unwrap_or(class).to_owned())
        .collect();
    let mut transforms = file.transforms;
    transforms.insert(
        "chain".into(),
        toml::Value::Array(ordered.into_iter().map(toml::Value::String).collect()),
    );
    let transforms: TransformsConfig = toml::Value::Table(transforms).try_into()?;
    let chain =
        crate::transform::config::build(&transforms, &file.predicates, &EventOptions::default())
            .map_err(|issues| {
                anyhow::anyhow!(
                    "{}",
                    issues
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; ")
                )
            })?
            .context("an empty chain")?;
    Ok((chain, classes.join(" → ")))
}

/// The names of `[transforms.<name>]` sections in the order they are written.
fn order_of_sections(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("[transforms.")?.strip_suffix(']'))
        .map(str::to_owned)
        .collect()
}

/// This thread's CPU time in nanoseconds: what the transforms cost, without the time the
/// thread waited for a core on a shared machine (wall time elsewhere).
#[cfg(target_os = "linux")]
fn cpu_ns() -> u128 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as u128 * 1_000_000_000 + t.tv_nsec as u128
}

#[cfg(not(target_os = "linux"))]
fn cpu_ns() -> u128 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos()
}

/// The median of `rounds` measurements.
fn median(rounds: usize, mut measure: impl FnMut() -> f64) -> f64 {
    let mut samples: Vec<f64> = (0..rounds).map(|_| measure()).collect();
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// `n` records as sluice's PostgreSQL encoder writes them for the backlog case's table, with
/// the headers it adds: seven inserts, an update, a delete and its tombstone in every ten.
fn sample_records(n: usize) -> Vec<OutRecord> {
    let topic: Arc<str> = Arc::from("bench.public.bench_backlog");
    (0..n)
        .map(|i| {
            let id = (i / 10 * 7 + (i % 10).min(6)) as u64 + 1;
            let lsn = 24_000_000 + i as u64 * 96;
            let payload = format!("{:032x}{}", (id as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15), "p".repeat(168));
            let row = |payload: &str| format!(r#"{{"id":{id},"payload":"{payload}"}}"#);
            let source = format!(
                r#"{{"version":"3.7.0.Final","connector":"postgresql","name":"bench","ts_ms":1795892941525,"snapshot":"false","db":"postgres","sequence":"[null,\"{lsn}\"]","ts_us":1795892941525797,"ts_ns":1795892941525797000,"schema":"public","table":"bench_backlog","txId":100214,"lsn":{lsn},"xmin":null,"origin":null,"origin_lsn":null}}"#
            );
            let event = |op: &str, before: &str, after: &str| {
                format!(
                    r#"{{"before":{before},"after":{after},"source":{source},"transaction":null,"op":"{op}","ts_ms":1795892944089,"ts_us":1795892944089822,"ts_ns":1795892944089822655}}"#
                )
            };
            let value = match i % 10 {
                7 => Some(event("u", "null", &row("updated"))),
                8 => Some(event("d", &row(&payload), "null")),
                9 => None,
                _ => Some(event("c", "null", &row(&payload))),
            };
            OutRecord {
                topic: Arc::clone(&topic),
                key: Some(format!(r#"{{"id":{id}}}"#).into_bytes()),
                value: value.map(String::into_bytes),
                headers: vec![
                    ("sluice.commit_lsn".into(), lsn.to_string()),
                    ("sluice.tx_index".into(), (i % 100_000).to_string()),
                ],
                partition: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every case builds, keeps what it should and changes or drops records (a case that
    /// silently did nothing would report the cost of nothing).
    #[test]
    fn every_case_builds_and_transforms_the_sample() {
        let records = sample_records(20);
        for (name, section) in CASES {
            let after_unwrap =
                name.starts_with("unwrap_") && !section.contains("ExtractNewRecordState");
            let (chain, classes) =
                build(section, after_unwrap).unwrap_or_else(|e| panic!("{name}: {e:#}"));
            let mut changed = 0;
            let mut kept = 0;
            for record in &records {
                if let Some(out) = chain
                    .apply(record)
                    .unwrap_or_else(|e| panic!("{name}: {e}"))
                {
                    kept += 1;
                    if out.value != record.value
                        || out.key != record.key
                        || out.topic != record.topic
                        || out.headers != record.headers
                        || out.partition != record.partition
                    {
                        changed += 1;
                    }
                }
            }
            let dropped = records.len() - kept;
            assert!(
                changed + dropped > 0,
                "{name} ({classes}) changed no record"
            );
            match *name {
                "filter_tombstones" => assert_eq!(kept, 18, "{name}"),
                "scripting_filter" => assert_eq!(
                    kept, 18,
                    "{name}: deletes dropped, tombstones kept (null.handling.mode = keep, Debezium's default)"
                ),
                _ => {}
            }
        }
    }

    #[test]
    fn sections_keep_their_written_order() {
        let text =
            format!("{UNWRAP}[transforms.route]\ntype = \"x\"\n[predicates.p]\ntype = \"y\"\n");
        assert_eq!(order_of_sections(&text), ["unwrap", "route"]);
    }
}

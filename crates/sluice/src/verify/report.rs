//! `sluice verify`'s report: what was compared, what differs, in text or JSON.

use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use super::canonical::ColumnClass;
use super::source::TablePlan;
use super::topic::ReadStats;

/// The whole verification.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `equal`, `differences` or `not_verified`.
    pub status: &'static str,
    /// What was compared: `source` (the source's tables with their topics), `sink` (a
    /// sink's target tables with the topics it applies), `files` (a files sink's output root
    /// with its topics) or `iceberg` (an Iceberg sink's tables with their topics).
    pub kind: &'static str,
    /// The position compared at (the source snapshot's LSN; for a sink, the applied offsets).
    pub position: String,
    /// Rows read from the source.
    pub source_rows: u64,
    /// Time spent reading the source's checksums, milliseconds.
    pub source_ms: u64,
    /// Time spent reading the topics and narrowing, milliseconds.
    pub topic_ms: u64,
    /// The whole run, milliseconds.
    pub elapsed_ms: u64,
    /// Per table.
    pub tables: Vec<TableReport>,
    /// What `--repair` requested.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<Repair>,
}

/// A table's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TableStatus {
    /// Same rows and keys.
    Equal,
    /// Some keys differ.
    Differs,
    /// Could not be compared (`reason` says why).
    NotVerified,
}

/// One table.
#[derive(Debug, Clone, Serialize)]
pub struct TableReport {
    /// `schema.table`.
    pub table: String,
    /// Its topic.
    pub topic: String,
    /// The outcome.
    pub status: TableStatus,
    /// Why it was not verified.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Rows in the table (at the position).
    pub source_rows: u64,
    /// Live keys in the topic (at the position).
    pub topic_keys: u64,
    /// Buckets (key ranges by hash) compared.
    pub buckets: u32,
    /// Buckets whose count or checksum differ.
    pub buckets_differing: u64,
    /// Differing buckets compared key by key (`--narrow-rows` bounds them).
    pub buckets_narrowed: u64,
    /// Differing keys found in the narrowed buckets.
    pub differences_found: u64,
    /// The first `--max-keys` of them.
    pub differences: Vec<Difference>,
    /// Columns compared.
    pub columns_compared: Vec<String>,
    /// Columns not compared, with the reason.
    pub columns_not_compared: Vec<NotCompared>,
    /// The key's columns.
    #[serde(skip)]
    pub key_columns: Vec<String>,
    /// How the key's columns compare (which form their text values have, for `--repair`).
    #[serde(skip)]
    pub key_classes: Vec<ColumnClass>,
    /// Keys whose newest event lacks unchanged TOASTed values (compared key by key, on the
    /// values they carry).
    pub partial_keys: u64,
    /// Passes over the topic.
    pub passes: u64,
    /// The topic's records.
    pub read: ReadStats,
    /// Every difference found (for `--repair`).
    #[serde(skip)]
    pub repairable: Vec<Difference>,
    /// Buckets with a differing key.
    #[serde(skip)]
    pub differing_bucket_ids: Vec<u32>,
}

/// A column left out.
#[derive(Debug, Clone, Serialize)]
pub struct NotCompared {
    /// The column.
    pub column: String,
    /// Why.
    pub reason: String,
}

/// How a key differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DifferenceKind {
    /// In the table, not (or deleted) in the topic.
    MissingInTopic,
    /// In the topic, not in the table (a source's table).
    MissingInSource,
    /// In the topic, not in the table (a sink's target table).
    MissingInTable,
    /// In both, with other values.
    Differs,
    /// In the topic's committed range, in no file (a files sink).
    MissingInFiles,
    /// In more than one file, or twice in one (a files sink).
    Duplicated,
    /// A line or row of a file that cannot be read (a files sink).
    Unreadable,
}

/// One differing key.
#[derive(Debug, Clone, Serialize)]
pub struct Difference {
    /// How.
    pub kind: DifferenceKind,
    /// The key.
    pub key: Value,
    /// The key's text values (for the repair's filter).
    #[serde(skip)]
    pub key_text: Vec<Option<String>>,
    /// The row in the table (compared columns).
    pub source: Option<Value>,
    /// The newest record's `after` (compared columns).
    pub topic: Option<Value>,
    /// The columns whose values differ.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns: Vec<String>,
}

/// What `--repair` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Repair {
    /// Keys whose incremental snapshot was requested.
    pub keys: u64,
    /// The signals' ids.
    pub signals: Vec<String>,
    /// The keys requested, per table.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested: Vec<Requested>,
    /// A sink's repair: the name of the source pipeline whose signal table got the signals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_pipeline: Option<String>,
    /// What it could not repair, and how to.
    pub hints: Vec<String>,
}

/// The keys of one table whose incremental snapshot was requested.
#[derive(Debug, Clone, Serialize)]
pub struct Requested {
    /// The verified table (`schema.table`; a sink's target table).
    pub table: String,
    /// A sink's repair: the source pipeline's table snapshotted (`schema.table`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source_table: Option<String>,
    /// How many keys.
    pub keys: u64,
    /// The first `--max-keys` of them, as the report lists keys.
    pub listed: Vec<Value>,
}

impl ReadStats {
    /// Adds another pass's counts.
    pub fn add(&mut self, other: &ReadStats) {
        self.records += other.records;
        self.after_position += other.after_position;
        self.unpositioned += other.unpositioned;
        self.unreadable += other.unreadable;
        if self.first_problem.is_none() {
            self.first_problem.clone_from(&other.first_problem);
        }
    }
}

impl Report {
    /// An empty report at `position`.
    pub fn new(position: String) -> Self {
        Self {
            status: "equal",
            kind: "source",
            position,
            source_rows: 0,
            source_ms: 0,
            topic_ms: 0,
            elapsed_ms: 0,
            tables: Vec::new(),
            repair: None,
        }
    }

    /// 1 when a table differs, else 2 when one could not be verified, else 0.
    pub fn exit_code(&self) -> u8 {
        if self.tables.iter().any(|t| t.status == TableStatus::Differs) {
            1
        } else if self
            .tables
            .iter()
            .any(|t| t.status == TableStatus::NotVerified)
        {
            2
        } else {
            0
        }
    }

    /// Sets `status` from the tables.
    pub fn settle(&mut self) {
        self.status = match self.exit_code() {
            0 => "equal",
            1 => "differences",
            _ => "not_verified",
        };
    }
}

impl TableReport {
    /// A table about to be compared.
    pub fn new(plan: &TablePlan) -> Self {
        Self {
            table: plan.qualified.clone(),
            topic: plan.topic.clone(),
            status: TableStatus::Equal,
            reason: None,
            source_rows: 0,
            topic_keys: 0,
            buckets: plan.buckets,
            buckets_differing: 0,
            buckets_narrowed: 0,
            differences_found: 0,
            differences: Vec::new(),
            columns_compared: plan.columns.iter().map(|c| c.name.clone()).collect(),
            columns_not_compared: plan
                .not_compared
                .iter()
                .map(|(column, reason)| NotCompared {
                    column: column.clone(),
                    reason: reason.clone(),
                })
                .collect(),
            key_columns: plan.key.iter().map(|c| c.name.clone()).collect(),
            key_classes: plan.key.iter().map(|c| c.class.clone()).collect(),
            partial_keys: 0,
            passes: 0,
            read: ReadStats::default(),
            repairable: Vec::new(),
            differing_bucket_ids: Vec::new(),
        }
    }

    /// A table that could not be compared.
    pub fn not_verified(table: String, topic: String, reason: String) -> Self {
        Self {
            table,
            topic,
            status: TableStatus::NotVerified,
            reason: Some(reason),
            source_rows: 0,
            topic_keys: 0,
            buckets: 0,
            buckets_differing: 0,
            buckets_narrowed: 0,
            differences_found: 0,
            differences: Vec::new(),
            columns_compared: Vec::new(),
            columns_not_compared: Vec::new(),
            key_columns: Vec::new(),
            key_classes: Vec::new(),
            partial_keys: 0,
            passes: 0,
            read: ReadStats::default(),
            repairable: Vec::new(),
            differing_bucket_ids: Vec::new(),
        }
    }
}

/// The human report.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "verified at position {} ({} source rows in {:.1} s, topics in {:.1} s)",
        report.position,
        report.source_rows,
        report.source_ms as f64 / 1000.0,
        report.topic_ms as f64 / 1000.0
    );
    for table in &report.tables {
        // The direction data flows.
        let (from, to) = if report.kind != "source" {
            (&table.topic, &table.table)
        } else {
            (&table.table, &table.topic)
        };
        match table.status {
            TableStatus::NotVerified => {
                let _ = writeln!(
                    out,
                    "{from} -> {to}: NOT VERIFIED: {}",
                    table.reason.as_deref().unwrap_or("")
                );
                continue;
            }
            TableStatus::Equal if report.kind == "files" => {
                let _ = writeln!(
                    out,
                    "{from} -> {to}: equal ({} records in files, {} offset ranges)",
                    table.source_rows, table.buckets
                );
            }
            TableStatus::Differs if report.kind == "files" => {
                let _ = writeln!(
                    out,
                    "{from} -> {to}: DIFFERS: {} records in the files, {} in the topic's committed range; {} of {} offset ranges differ; {} differing offset(s) found in {} range(s) compared offset by offset",
                    table.source_rows,
                    table.topic_keys,
                    table.buckets_differing,
                    table.buckets,
                    table.differences_found,
                    table.buckets_narrowed
                );
                render_differences(&mut out, table, true);
            }
            TableStatus::Equal => {
                let _ = writeln!(
                    out,
                    "{from} -> {to}: equal ({} rows, {} buckets)",
                    table.source_rows, table.buckets
                );
            }
            TableStatus::Differs => {
                let _ = writeln!(
                    out,
                    "{from} -> {to}: DIFFERS: {} rows in the table, {} keys in the topic; {} of {} buckets differ; {} differing key(s) found in {} bucket(s) compared key by key",
                    table.source_rows,
                    table.topic_keys,
                    table.buckets_differing,
                    table.buckets,
                    table.differences_found,
                    table.buckets_narrowed
                );
                render_differences(&mut out, table, false);
            }
        }
        if !table.columns_not_compared.is_empty() {
            let list: Vec<String> = table
                .columns_not_compared
                .iter()
                .map(|c| format!("{} ({})", c.column, c.reason))
                .collect();
            let _ = writeln!(out, "  not compared: {}", list.join(", "));
        }
        if table.read.unpositioned > 0 && report.kind != "files" {
            let _ = writeln!(
                out,
                "  {} record(s) without sluice's position header were taken as before the position",
                table.read.unpositioned
            );
        }
        if report.kind == "files" && table.read.after_position > 0 {
            let _ = writeln!(
                out,
                "  {} record(s) after the committed state (written meanwhile, or not yet committed) were left out",
                table.read.after_position
            );
        }
        if report.kind == "files"
            && let Some(problem) = &table.read.first_problem
        {
            let _ = writeln!(out, "  {problem}");
        }
        if report.kind == "sink" && table.read.after_position > 0 {
            let _ = writeln!(
                out,
                "  {} record(s) not yet applied by the sink were left out",
                table.read.after_position
            );
        }
    }
    if let Some(repair) = &report.repair {
        let _ = writeln!(
            out,
            "repair: incremental snapshots requested for {} key(s) ({}); verify again once the pipeline's snapshot is done",
            repair.keys,
            if repair.signals.is_empty() {
                "no signal".to_owned()
            } else {
                repair.signals.join(", ")
            }
        );
        for requested in &repair.requested {
            let keys: Vec<String> = requested.listed.iter().map(Value::to_string).collect();
            let more = requested.keys.saturating_sub(requested.listed.len() as u64);
            let _ = writeln!(
                out,
                "  {}{}: {} key(s): {}{}",
                requested.table,
                match (&requested.source_table, &repair.source_pipeline) {
                    (Some(table), Some(pipeline)) =>
                        format!(" (snapshot of {table} by the pipeline {pipeline:?})"),
                    (Some(table), None) => format!(" (snapshot of {table})"),
                    _ => String::new(),
                },
                requested.keys,
                keys.join(", "),
                if more > 0 {
                    format!(" … {more} more (--max-keys)")
                } else {
                    String::new()
                }
            );
        }
        for hint in &repair.hints {
            let _ = writeln!(out, "  {hint}");
        }
    }
    let _ = writeln!(
        out,
        "{}",
        match report.exit_code() {
            0 => "equal",
            1 => "DIFFERENCES",
            _ => "NOT VERIFIED",
        }
    );
    out
}

/// The differences of a table, and how many more there are.
fn render_differences(out: &mut String, table: &TableReport, files: bool) {
    for d in &table.differences {
        let what = match d.kind {
            DifferenceKind::MissingInTopic => "missing in the topic".to_owned(),
            DifferenceKind::MissingInSource => "in the topic only".to_owned(),
            DifferenceKind::MissingInTable => "missing in the table".to_owned(),
            DifferenceKind::MissingInFiles => "missing in the files".to_owned(),
            DifferenceKind::Duplicated if files => "in the files more than once".to_owned(),
            DifferenceKind::Duplicated => "in the table more than once".to_owned(),
            DifferenceKind::Unreadable => "cannot be read".to_owned(),
            DifferenceKind::Differs if d.columns.is_empty() => "differs".to_owned(),
            DifferenceKind::Differs => format!("differs in {}", d.columns.join(", ")),
        };
        if d.key.is_null() {
            let _ = writeln!(out, "  a record: {what}");
        } else {
            let _ = writeln!(out, "  key {}: {what}", d.key);
        }
        if let Some(source) = &d.source {
            let side = if files { "files" } else { "table" };
            let _ = writeln!(out, "    {side}: {source}");
        }
        if let Some(topic) = &d.topic {
            let _ = writeln!(out, "    topic: {topic}");
        }
    }
    if table.differences_found > table.differences.len() as u64 {
        let _ = writeln!(
            out,
            "  … {} more (--max-keys, --json)",
            table.differences_found - table.differences.len() as u64
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sinks_repair_lists_the_keys_requested_and_the_source_table() {
        let mut report = Report::new("p".into());
        report.kind = "sink";
        report.repair = Some(Repair {
            keys: 3,
            signals: vec!["verify-1-app.items-0".into()],
            requested: vec![Requested {
                table: "app.items".into(),
                source_table: Some("public.items".into()),
                keys: 3,
                listed: vec![serde_json::json!({"id": 3}), serde_json::json!({"id": 6})],
            }],
            source_pipeline: Some("cdc".into()),
            hints: vec!["app.other: not requested: …".into()],
        });
        let text = render(&report);
        assert!(
            text.contains(
                "  app.items (snapshot of public.items by the pipeline \"cdc\"): 3 key(s): {\"id\":3}, {\"id\":6} … 1 more (--max-keys)\n  app.other: not requested: …\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["repair"]["source_pipeline"], "cdc");
        assert_eq!(
            json["repair"]["requested"][0]["source_table"],
            "public.items"
        );
        assert_eq!(json["repair"]["requested"][0]["listed"][1]["id"], 6);
    }
}

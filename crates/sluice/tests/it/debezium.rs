//! sluice's change events against the golden files of a real Debezium run (issue 15).
//!
//! Runs sluice on `scripts/debezium/setup.sql` (snapshotted rows, `op: "r"`) and
//! `scripts/debezium/changes.sql` (streamed) in a database of its own, reads every topic back,
//! pairs the records with `tests/debezium/defaults/` per topic on (op, key) in topic order, and
//! compares key and value field by field, ignoring only the run-dependent fields the golden
//! files' README lists. Numbers are compared by their decimal value (`1.5E-5` = `0.000015`,
//! `1.4E-45` ≠ `1e-45`), object members in any order.
//!
//! Two combinations: `defaults`, and `decimal-string` (`[kafka.events] decimal_handling_mode =
//! "string"`), one sluice run each, side by side.
//!
//! A ratchet while parity is incomplete: `tests/debezium/known-differences.txt` lists the
//! difference groups (`<combination> <table> <field path> <kind>`) still accepted. The test fails on a
//! difference not listed, and on a listed line that no longer occurs: the list only shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::support::{
    Sluice, broker_shared, drop_slot_and_publication, free_port, pg, pg_at, pipeline_toml,
    slot_confirmed, stack, test_dir, unique,
};

/// The capture's topic prefix and database (`source.name`, `source.db` in the golden files).
const GOLDEN_PREFIX: &str = "dbzcap";
const GOLDEN_DATABASE: &str = "dbz_capture";

/// Paths (from the record: `key`/`value`, then field names) whose values depend on the run:
/// their values are not compared, but a field on one side only is a difference.
const RUN_DEPENDENT: &[&str] = &[
    "value.ts_ms",
    "value.ts_us",
    "value.ts_ns",
    "value.source.version",
    "value.source.ts_ms",
    "value.source.ts_us",
    "value.source.ts_ns",
    "value.source.txId",
    "value.source.lsn",
    "value.source.sequence",
    "value.source.xmin",
    "value.transaction.id",
    "value.transaction.total_order",
    "value.transaction.data_collection_order",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn golden_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/debezium")
}

/// The statements of a psql script (meta-commands left out; each statement ends a line with `;`).
fn statements(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('\\') || trimmed.starts_with("--") || trimmed.is_empty() {
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(';') {
            out.push(std::mem::take(&mut current));
        }
    }
    assert!(
        current.trim().is_empty(),
        "unterminated statement: {current}"
    );
    out
}

// ---- JSON with numbers kept exact ----

/// A JSON value whose numbers keep their decimal value (canonical form) and their text.
#[derive(Debug, Clone)]
enum J {
    Null,
    Bool(bool),
    Num { canonical: String, text: String },
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "bool",
            J::Num { .. } => "number",
            J::Str(_) => "string",
            J::Arr(_) => "array",
            J::Obj(_) => "object",
        }
    }

    fn get(&self, name: &str) -> Option<&J> {
        match self {
            J::Obj(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut J> {
        match self {
            J::Obj(members) => members.iter_mut().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Compact JSON text (numbers as written).
    fn show(&self) -> String {
        match self {
            J::Null => "null".into(),
            J::Bool(b) => b.to_string(),
            J::Num { text, .. } => text.clone(),
            J::Str(s) => serde_json::to_string(s).unwrap(),
            J::Arr(items) => format!(
                "[{}]",
                items.iter().map(J::show).collect::<Vec<_>>().join(",")
            ),
            J::Obj(members) => format!(
                "{{{}}}",
                members
                    .iter()
                    .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), v.show()))
                    .collect::<Vec<_>>()
                    .join(",")
            ),
        }
    }

    /// A form where equal values are equal strings (members sorted, numbers canonical).
    fn canonical(&self) -> String {
        match self {
            J::Num { canonical, .. } => canonical.clone(),
            J::Arr(items) => format!(
                "[{}]",
                items.iter().map(J::canonical).collect::<Vec<_>>().join(",")
            ),
            J::Obj(members) => {
                let mut parts: Vec<String> = members
                    .iter()
                    .map(|(k, v)| {
                        format!("{}:{}", serde_json::to_string(k).unwrap(), v.canonical())
                    })
                    .collect();
                parts.sort();
                format!("{{{}}}", parts.join(","))
            }
            other => other.show(),
        }
    }
}

struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    fn parse(text: &str) -> J {
        let mut p = Parser {
            bytes: text.as_bytes(),
            pos: 0,
        };
        let value = p.value();
        p.ws();
        assert_eq!(p.pos, p.bytes.len(), "trailing bytes in {text}");
        value
    }

    fn ws(&mut self) {
        while self.pos < self.bytes.len() && self.bytes[self.pos].is_ascii_whitespace() {
            self.pos += 1;
        }
    }

    fn value(&mut self) -> J {
        self.ws();
        match self.bytes[self.pos] {
            b'n' => {
                self.pos += 4;
                J::Null
            }
            b't' => {
                self.pos += 4;
                J::Bool(true)
            }
            b'f' => {
                self.pos += 5;
                J::Bool(false)
            }
            b'"' => J::Str(self.string()),
            b'[' => {
                self.pos += 1;
                let mut items = Vec::new();
                self.ws();
                if self.bytes[self.pos] == b']' {
                    self.pos += 1;
                    return J::Arr(items);
                }
                loop {
                    items.push(self.value());
                    self.ws();
                    let c = self.bytes[self.pos];
                    self.pos += 1;
                    if c == b']' {
                        return J::Arr(items);
                    }
                    assert_eq!(c, b',', "bad array");
                }
            }
            b'{' => {
                self.pos += 1;
                let mut members = Vec::new();
                self.ws();
                if self.bytes[self.pos] == b'}' {
                    self.pos += 1;
                    return J::Obj(members);
                }
                loop {
                    self.ws();
                    let key = self.string();
                    self.ws();
                    assert_eq!(self.bytes[self.pos], b':', "bad object");
                    self.pos += 1;
                    members.push((key, self.value()));
                    self.ws();
                    let c = self.bytes[self.pos];
                    self.pos += 1;
                    if c == b'}' {
                        return J::Obj(members);
                    }
                    assert_eq!(c, b',', "bad object");
                }
            }
            _ => self.number(),
        }
    }

    fn string(&mut self) -> String {
        let start = self.pos;
        self.pos += 1;
        while self.bytes[self.pos] != b'"' {
            if self.bytes[self.pos] == b'\\' {
                self.pos += 1;
            }
            self.pos += 1;
        }
        self.pos += 1;
        let raw = std::str::from_utf8(&self.bytes[start..self.pos]).unwrap();
        serde_json::from_str(raw).unwrap_or_else(|e| panic!("bad string {raw}: {e}"))
    }

    fn number(&mut self) -> J {
        let start = self.pos;
        while self.pos < self.bytes.len()
            && matches!(
                self.bytes[self.pos],
                b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
            )
        {
            self.pos += 1;
        }
        let text = std::str::from_utf8(&self.bytes[start..self.pos])
            .unwrap()
            .to_owned();
        J::Num {
            canonical: canonical_number(&text),
            text,
        }
    }
}

/// `<sign><digits>e<exponent>` with no leading or trailing zero digits: equal decimal values,
/// equal strings (`-0` = `0`).
fn canonical_number(text: &str) -> String {
    let (negative, rest) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(i) => (&rest[..i], rest[i + 1..].parse::<i64>().expect("exponent")),
        None => (rest, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let mut digits: String = format!("{int}{frac}");
    let mut exponent = exponent - frac.len() as i64;
    digits = digits.trim_start_matches('0').to_owned();
    while digits.ends_with('0') {
        digits.pop();
        exponent += 1;
    }
    if digits.is_empty() {
        return "0".into();
    }
    format!("{}{digits}e{exponent}", if negative { "-" } else { "" })
}

// ---- comparing ----

/// One Kafka record: key and value (`None` for null).
#[derive(Debug, Clone)]
struct Rec {
    key: Option<J>,
    value: Option<J>,
}

impl Rec {
    fn from_line(line: &str) -> Self {
        let record = Parser::parse(line);
        let take = |name: &str| match record.get(name) {
            None | Some(J::Null) => None,
            Some(v) => Some(v.clone()),
        };
        Rec {
            key: take("key"),
            value: take("value"),
        }
    }

    /// (op, key) to align on.
    fn signature(&self) -> String {
        let op = match self.value.as_ref().and_then(|v| v.get("op")) {
            Some(J::Str(op)) => op.clone(),
            _ => "tombstone".into(),
        };
        let key = self.key.as_ref().map_or("null".into(), J::canonical);
        format!("{op} {key}")
    }

    fn op(&self) -> String {
        self.signature()
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    fn as_object(&self) -> J {
        J::Obj(vec![
            ("key".into(), self.key.clone().unwrap_or(J::Null)),
            ("value".into(), self.value.clone().unwrap_or(J::Null)),
        ])
    }
}

#[derive(Default)]
struct Diff {
    records: usize,
    fields: usize,
    /// `<table> <path> <kind>` → (count, example Debezium → sluice).
    groups: BTreeMap<String, (usize, String)>,
}

impl Diff {
    fn add(&mut self, table: &str, path: &str, kind: &str, example: String) {
        let path = if path.is_empty() { "<record>" } else { path };
        let group = self
            .groups
            .entry(format!("{table} {path} {kind}"))
            .or_insert((0, example));
        group.0 += 1;
    }

    fn compare(&mut self, table: &str, path: &str, expected: &J, actual: &J) {
        if RUN_DEPENDENT.contains(&path) {
            return;
        }
        let join = |name: &str| {
            if path.is_empty() {
                name.to_owned()
            } else {
                format!("{path}.{name}")
            }
        };
        let short = |v: &J| {
            let s = v.show();
            if s.chars().count() > 90 {
                format!("{}…", s.chars().take(90).collect::<String>())
            } else {
                s
            }
        };
        match (expected, actual) {
            (J::Obj(exp), J::Obj(act)) => {
                for (name, e) in exp {
                    let field = join(name);
                    match actual.get(name) {
                        Some(a) => self.compare(table, &field, e, a),
                        // A run-dependent field too: only its value may differ.
                        None => {
                            self.fields += 1;
                            self.add(table, &field, "missing-in-sluice", short(e));
                        }
                    }
                }
                for (name, a) in act {
                    if expected.get(name).is_none() {
                        self.fields += 1;
                        self.add(table, &join(name), "only-in-sluice", short(a));
                    }
                }
            }
            (J::Arr(exp), J::Arr(act)) if exp.len() == act.len() => {
                for (e, a) in exp.iter().zip(act) {
                    self.compare(table, path, e, a);
                }
            }
            _ => {
                self.fields += 1;
                if expected.kind() == actual.kind() && expected.canonical() == actual.canonical() {
                    return;
                }
                let kind = if expected.kind() == actual.kind() {
                    "value-differs".to_owned()
                } else {
                    format!("{}-vs-{}", expected.kind(), actual.kind())
                };
                self.add(
                    table,
                    path,
                    &kind,
                    format!("{} → {}", short(expected), short(actual)),
                );
            }
        }
    }

    /// Aligns the two sequences on their signatures (longest common subsequence) and compares
    /// the pairs; records on one side only are a difference of their own.
    fn compare_topic(&mut self, table: &str, expected: &[Rec], actual: &[Rec]) {
        let es: Vec<String> = expected.iter().map(Rec::signature).collect();
        let acts: Vec<String> = actual.iter().map(Rec::signature).collect();
        let (n, m) = (es.len(), acts.len());
        let mut lcs = vec![vec![0u32; m + 1]; n + 1];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                lcs[i][j] = if es[i] == acts[j] {
                    lcs[i + 1][j + 1] + 1
                } else {
                    lcs[i + 1][j].max(lcs[i][j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && es[i] == acts[j] {
                self.records += 1;
                self.compare(table, "", &expected[i].as_object(), &actual[j].as_object());
                i += 1;
                j += 1;
            } else if j == m || (i < n && lcs[i + 1][j] >= lcs[i][j + 1]) {
                let kind = format!("only-in-debezium:{}", expected[i].op());
                self.add(table, "", &kind, es[i].clone());
                i += 1;
            } else {
                let kind = format!("only-in-sluice:{}", actual[j].op());
                self.add(table, "", &kind, acts[j].clone());
                j += 1;
            }
        }
    }
}

/// Replaces this run's prefix and database with the capture's in `source.name`/`source.db`.
fn normalise(mut rec: Rec, prefix: &str, database: &str) -> Rec {
    if let Some(source) = rec.value.as_mut().and_then(|v| v.get_mut("source")) {
        for (field, ours, theirs) in [
            ("name", prefix, GOLDEN_PREFIX),
            ("db", database, GOLDEN_DATABASE),
        ] {
            if let Some(J::Str(value)) = source.get_mut(field)
                && value == ours
            {
                *value = theirs.to_owned();
            }
        }
    }
    rec
}

/// Every topic under `prefix.` read from the beginning to its end, as `{"key","value"}` lines.
fn read_topics(prefix: &str) -> BTreeMap<String, Vec<Rec>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("group.id", unique("it-dbz-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let metadata = consumer
        .fetch_metadata(None, Duration::from_secs(10))
        .expect("metadata");
    let mut assignment = TopicPartitionList::new();
    let mut ends = BTreeMap::new();
    for topic in metadata.topics() {
        if !topic.name().starts_with(&format!("{prefix}.public.")) {
            continue;
        }
        for partition in topic.partitions() {
            let (_, high) = consumer
                .fetch_watermarks(topic.name(), partition.id(), Duration::from_secs(10))
                .expect("watermarks");
            if high > 0 {
                ends.insert((topic.name().to_owned(), partition.id()), high);
                assignment
                    .add_partition_offset(topic.name(), partition.id(), Offset::Beginning)
                    .expect("assignment");
            }
        }
    }
    let mut out: BTreeMap<String, Vec<Rec>> = BTreeMap::new();
    if ends.is_empty() {
        return out;
    }
    consumer.assign(&assignment).expect("assign");
    let mut remaining = ends.len();
    let deadline = Instant::now() + Duration::from_secs(60);
    while remaining > 0 {
        assert!(Instant::now() < deadline, "topics not read to their end");
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.expect("consume");
        let parse = |bytes: Option<&[u8]>| {
            bytes.map(|b| Parser::parse(std::str::from_utf8(b).expect("UTF-8 record")))
        };
        let topic = message.topic().to_owned();
        let table = topic
            .strip_prefix(&format!("{prefix}."))
            .unwrap()
            .to_owned();
        out.entry(table).or_default().push(Rec {
            key: parse(message.key()),
            value: parse(message.payload()),
        });
        if ends.get(&(topic, message.partition())) == Some(&(message.offset() + 1)) {
            remaining -= 1;
        }
    }
    out
}

/// The golden records of a combination, per `schema.table`.
fn golden(combination: &str) -> BTreeMap<String, Vec<Rec>> {
    let dir = golden_root().join(combination);
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("golden dir") {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(topic) = file.strip_suffix(".jsonl") else {
            continue;
        };
        let table = topic.split_once('.').unwrap().1.to_owned();
        let text = std::fs::read_to_string(&path).unwrap();
        let records = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(Rec::from_line)
            .collect();
        out.insert(table, records);
    }
    out
}

/// The accepted difference groups of the ratchet file.
fn known_differences() -> BTreeSet<String> {
    let path = golden_root().join("known-differences.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Runs sluice on the change script once (`extra` keys added to `[source.postgres]`'s
/// neighbourhood) and returns its records per table.
async fn run_sluice(extra: &str) -> BTreeMap<String, Vec<Rec>> {
    let name = unique("dbz");
    let admin = pg().await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .expect("create database");
    let base = stack().pg_url;
    let url = format!(
        "{}/{name}",
        base.rsplit_once('/').expect("a database in PG_URL").0
    );
    let client = pg_at(&url).await;
    for statement in statements(&root().join("scripts/debezium/setup.sql")) {
        client
            .batch_execute(&statement)
            .await
            .unwrap_or_else(|e| panic!("setup.sql: {statement}: {e}"));
    }
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, "public", &name, port, extra)
        .replace(&format!("url = \"{base}\""), &format!("url = \"{url}\""));
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    for statement in statements(&root().join("scripts/debezium/changes.sql")) {
        client
            .batch_execute(&statement)
            .await
            .unwrap_or_else(|e| panic!("changes.sql: {statement}: {e}"));
    }
    let end: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])
        .await
        .unwrap()
        .get(0);
    let slot = format!("sluice_{name}");
    let deadline = Instant::now() + Duration::from_secs(60);
    while slot_confirmed(&client, &slot).await.unwrap_or(0) < end as u64 {
        assert!(
            Instant::now() < deadline,
            "sluice did not confirm the changes; log:\n{}",
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let prefix = name.clone();
    let records = tokio::task::spawn_blocking(move || read_topics(&prefix))
        .await
        .unwrap();
    drop(sluice);
    drop(client);
    drop_slot_and_publication(&admin, &name).await;
    let _ = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .await;
    records
        .into_iter()
        .map(|(table, recs)| {
            let recs = recs
                .into_iter()
                .map(|r| normalise(r, &name, &name))
                .collect();
            (table, recs)
        })
        .collect()
}

/// Compares sluice's records with a combination's golden files; groups are named
/// `<combination> <table> …`.
fn compare(combination: &str, ours: &BTreeMap<String, Vec<Rec>>, diff: &mut Diff) {
    let golden = golden(combination);
    for (table, expected) in &golden {
        let actual = ours.get(table).map(Vec::as_slice).unwrap_or_default();
        diff.compare_topic(&format!("{combination} {table}"), expected, actual);
    }
    for (table, actual) in ours {
        if !golden.contains_key(table) && table != "public.zz_marker" {
            diff.add(
                &format!("{combination} {table}"),
                "",
                "topic-only-in-sluice",
                format!("{} records", actual.len()),
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn events_match_debezium_golden_files() {
    let _broker = broker_shared().await;
    let started = Instant::now();
    // One sluice run per combination captured with an option sluice has, side by side.
    let (defaults, decimal_string) = tokio::join!(
        run_sluice(""),
        run_sluice("\n[kafka.events]\ndecimal_handling_mode = \"string\"\n"),
    );
    let mut diff = Diff::default();
    compare("defaults", &defaults, &mut diff);
    compare("decimal-string", &decimal_string, &mut diff);

    let known = known_differences();
    let found: BTreeSet<String> = diff.groups.keys().cloned().collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    println!(
        "compared {} records and {} fields with Debezium's (defaults, decimal-string) in {:?}: \
         {} field differences in {} groups, all of them known: {}",
        diff.records,
        diff.fields,
        started.elapsed(),
        diff.groups.values().map(|g| g.0).sum::<usize>(),
        diff.groups.len(),
        new.is_empty()
    );
    let mut report = String::new();
    if !new.is_empty() {
        writeln!(
            report,
            "{} difference groups not in tests/debezium/known-differences.txt \
             (line, then count and example Debezium → sluice):",
            new.len()
        )
        .unwrap();
        for line in &new {
            let (count, example) = &diff.groups[*line];
            writeln!(report, "{line}\n    x{count}: {example}").unwrap();
        }
    }
    if !gone.is_empty() {
        writeln!(
            report,
            "{} lines of tests/debezium/known-differences.txt no longer occur: remove them",
            gone.len()
        )
        .unwrap();
        for line in &gone {
            writeln!(report, "{line}").unwrap();
        }
    }
    assert!(report.is_empty(), "{report}");
    assert!(
        diff.records >= 760,
        "too few records paired: {}",
        diff.records
    );
}

#[test]
fn numbers_compare_by_decimal_value() {
    assert_eq!(canonical_number("1.5E-5"), canonical_number("0.000015"));
    assert_eq!(canonical_number("-0"), canonical_number("0.000"));
    assert_eq!(canonical_number("100"), canonical_number("1e2"));
    assert_ne!(canonical_number("1.4E-45"), canonical_number("1e-45"));
    assert_ne!(canonical_number("-1"), canonical_number("1"));
}

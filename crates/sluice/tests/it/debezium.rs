//! sluice's change events against the golden files of a real Debezium run (issue 15).
//!
//! Runs sluice on `scripts/debezium/setup.sql` (snapshotted rows, `op: "r"`) and
//! `scripts/debezium/changes.sql` (streamed) in a database of its own, reads every topic back,
//! pairs the records with `tests/debezium/defaults/` per topic on (op, key) in topic order, and
//! compares key and value field by field, ignoring only the run-dependent fields the golden
//! files' README lists. Numbers are compared by their decimal value (`1.5E-5` = `0.000015`,
//! `1.4E-45` ≠ `1e-45`), object members in any order.
//!
//! The combinations, one sluice run each, side by side: `defaults`, and under `[kafka.events]`
//! `decimal-string` (`decimal_handling_mode = "string"`), `time-connect`
//! (`time_precision_mode = "connect"`), `binary-hex` (`binary_handling_mode = "hex"`),
//! `truncate` (`skipped_operations = "none"`), `transaction-metadata`
//! (`provide_transaction_metadata = true`) and `schemas-enable` (`schemas_enable = true`,
//! JsonConverter's `{"schema":…,"payload":…}`). In `schemas-enable` the
//! payloads are compared as above (paths `key.…`/`value.…`) and the schemas as data, exactly:
//! member and field order included (Connect's schemas are ordered), a schema's fields named by
//! their `field` (paths `value.schema.after.<column>.<member>`).
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

mod type_table;

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
];

/// The transaction topic's records (`provide_transaction_metadata`), as `<schema.table>`.
const TRANSACTION_TABLE: &str = "transaction";

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
    /// The key's and value's `schema` when written as `{"schema":…,"payload":…}`.
    key_schema: Option<J>,
    value_schema: Option<J>,
}

/// Splits JsonConverter's `{"schema":…,"payload":…}` (schemas enabled) into schema and payload.
fn split_schema(json: Option<J>) -> (Option<J>, Option<J>) {
    match json {
        Some(J::Obj(members))
            if members.len() == 2 && members[0].0 == "schema" && members[1].0 == "payload" =>
        {
            let mut members = members.into_iter();
            let schema = members.next().map(|(_, v)| v);
            let payload = match members.next() {
                Some((_, J::Null)) | None => None,
                Some((_, v)) => Some(v),
            };
            (payload, schema)
        }
        other => (other, None),
    }
}

impl Rec {
    fn from_line(line: &str) -> Self {
        let record = Parser::parse(line);
        let take = |name: &str| match record.get(name) {
            None | Some(J::Null) => None,
            Some(v) => Some(v.clone()),
        };
        Rec::new(take("key"), take("value"))
    }

    fn new(key: Option<J>, value: Option<J>) -> Self {
        let (key, key_schema) = split_schema(key);
        let (value, value_schema) = split_schema(value);
        Rec {
            key,
            value,
            key_schema,
            value_schema,
        }
    }

    /// (op, key) to align on.
    fn signature(&self) -> String {
        let op = match self
            .value
            .as_ref()
            .and_then(|v| v.get("op").or(v.get("status")))
        {
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

    /// Compares two Connect schemas as data, exactly: member order, field order, every value.
    fn compare_schema(
        &mut self,
        table: &str,
        path: &str,
        expected: Option<&J>,
        actual: Option<&J>,
    ) {
        match (expected, actual) {
            (None, None) => {}
            (Some(e), None) => self.add(table, path, "missing-in-sluice", e.show()),
            (None, Some(a)) => self.add(table, path, "only-in-sluice", a.show()),
            (Some(e), Some(a)) => self.schema_node(table, path, e, a),
        }
    }

    fn schema_node(&mut self, table: &str, path: &str, expected: &J, actual: &J) {
        let (J::Obj(exp), J::Obj(act)) = (expected, actual) else {
            self.fields += 1;
            if expected.show() != actual.show() {
                self.add(
                    table,
                    path,
                    "value-differs",
                    format!("{} → {}", expected.show(), actual.show()),
                );
            }
            return;
        };
        let names =
            |members: &[(String, J)]| members.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        let (en, an) = (names(exp), names(act));
        let common = |of: &[String], other: &[String]| {
            of.iter()
                .filter(|n| other.contains(n))
                .cloned()
                .collect::<Vec<_>>()
        };
        if common(&en, &an) != common(&an, &en) {
            self.add(table, path, "member-order", format!("{en:?} → {an:?}"));
        }
        for (name, e) in exp {
            let field = format!("{path}.{name}");
            match actual.get(name) {
                None => self.add(table, &field, "missing-in-sluice", e.show()),
                Some(a) => match (name.as_str(), e, a) {
                    ("fields", J::Arr(ef), J::Arr(af)) => self.schema_fields(table, path, ef, af),
                    ("items" | "keys" | "values", _, _) => self.schema_node(table, &field, e, a),
                    _ => {
                        self.fields += 1;
                        if e.show() != a.show() {
                            let kind = if e.kind() == a.kind() {
                                "value-differs".to_owned()
                            } else {
                                format!("{}-vs-{}", e.kind(), a.kind())
                            };
                            self.add(table, &field, &kind, format!("{} → {}", e.show(), a.show()));
                        }
                    }
                },
            }
        }
        for (name, a) in act {
            if expected.get(name).is_none() {
                self.add(table, &format!("{path}.{name}"), "only-in-sluice", a.show());
            }
        }
    }

    /// A struct's fields, named by their `field` member, in order.
    fn schema_fields(&mut self, table: &str, path: &str, expected: &[J], actual: &[J]) {
        let name = |f: &J| match f.get("field") {
            Some(J::Str(name)) => name.clone(),
            _ => "?".into(),
        };
        let en: Vec<String> = expected.iter().map(name).collect();
        let an: Vec<String> = actual.iter().map(name).collect();
        let ec: Vec<&String> = en.iter().filter(|n| an.contains(n)).collect();
        let ac: Vec<&String> = an.iter().filter(|n| en.contains(n)).collect();
        if ec != ac {
            self.add(table, path, "field-order", format!("{en:?} → {an:?}"));
        }
        for (e, n) in expected.iter().zip(&en) {
            let field = format!("{path}.{n}");
            match an.iter().position(|m| m == n) {
                Some(k) => self.schema_node(table, &field, e, &actual[k]),
                None => self.add(table, &field, "missing-in-sluice", e.show()),
            }
        }
        for (a, n) in actual.iter().zip(&an) {
            if !en.contains(n) {
                self.add(table, &format!("{path}.{n}"), "only-in-sluice", a.show());
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
                let (e, a) = (&expected[i], &actual[j]);
                self.compare_schema(
                    table,
                    "key.schema",
                    e.key_schema.as_ref(),
                    a.key_schema.as_ref(),
                );
                self.compare_schema(
                    table,
                    "value.schema",
                    e.value_schema.as_ref(),
                    a.value_schema.as_ref(),
                );
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

/// Replaces this run's prefix with the capture's in a schema's record names
/// (`<prefix>.public.t.Value`).
fn normalise_schema(schema: &mut J, prefix: &str) {
    match schema {
        J::Obj(members) => {
            for (name, value) in members {
                match value {
                    J::Str(text) if name == "name" => {
                        if let Some(rest) = text.strip_prefix(&format!("{prefix}.")) {
                            *text = format!("{GOLDEN_PREFIX}.{rest}");
                        }
                    }
                    other => normalise_schema(other, prefix),
                }
            }
        }
        J::Arr(items) => items.iter_mut().for_each(|i| normalise_schema(i, prefix)),
        _ => {}
    }
}

/// Replaces this run's prefix and database with the capture's in `source.name`/`source.db`
/// (and the schemas' record names).
fn normalise(mut rec: Rec, prefix: &str, database: &str) -> Rec {
    for schema in [rec.key_schema.as_mut(), rec.value_schema.as_mut()]
        .into_iter()
        .flatten()
    {
        normalise_schema(schema, prefix);
    }
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
        if !topic.name().starts_with(&format!("{prefix}.public."))
            && topic.name() != format!("{prefix}.{TRANSACTION_TABLE}")
        {
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
        out.entry(table)
            .or_default()
            .push(Rec::new(parse(message.key()), parse(message.payload())));
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
    run_sluice_on(
        extra,
        statements(&root().join("scripts/debezium/setup.sql")),
        statements(&root().join("scripts/debezium/changes.sql")),
    )
    .await
}

/// Runs sluice in a database of its own: `setup` before it starts (snapshotted), `changes`
/// once it streams; returns its records per table.
async fn run_sluice_on(
    extra: &str,
    setup: Vec<String>,
    changes: Vec<String>,
) -> BTreeMap<String, Vec<Rec>> {
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
    for statement in setup {
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
    for statement in changes {
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

/// A transaction topic's records with their ids (`<txId>:<lsn>`, run-dependent) masked and
/// those of the end-marker transactions (which only the capture writes) left out.
fn mask_transactions(records: &mut BTreeMap<String, Vec<Rec>>) {
    let Some(recs) = records.get_mut(TRANSACTION_TABLE) else {
        return;
    };
    // `<txId>:` of a record's id.
    let xid = |rec: &Rec| match rec.value.as_ref().and_then(|v| v.get("id")) {
        Some(J::Str(id)) => id.split(':').next().unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    let markers: BTreeSet<String> = recs
        .iter()
        .filter(|rec| {
            rec.value
                .as_ref()
                .is_some_and(|v| v.show().contains("\"public.zz_marker\""))
        })
        .map(xid)
        .collect();
    recs.retain(|rec| !markers.contains(&xid(rec)));
    let masked = || J::Str("<txId>:<lsn>".into());
    for rec in recs.iter_mut() {
        for part in [rec.key.as_mut(), rec.value.as_mut()].into_iter().flatten() {
            if let Some(id) = part.get_mut("id") {
                *id = masked();
            }
        }
    }
}

/// Compares sluice's records with a combination's golden files; groups are named
/// `<combination> <table> …`.
fn compare(combination: &str, ours: &BTreeMap<String, Vec<Rec>>, diff: &mut Diff) {
    let mut golden = golden(combination);
    mask_transactions(&mut golden);
    let mut ours = ours.clone();
    mask_transactions(&mut ours);
    let ours = &ours;
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
    let (
        defaults,
        decimal_string,
        time_connect,
        binary_hex,
        truncate,
        transactions,
        schemas_enable,
    ) = tokio::join!(
        run_sluice(""),
        run_sluice("\n[kafka.events]\ndecimal_handling_mode = \"string\"\n"),
        run_sluice("\n[kafka.events]\ntime_precision_mode = \"connect\"\n"),
        run_sluice("\n[kafka.events]\nbinary_handling_mode = \"hex\"\n"),
        run_sluice("\n[kafka.events]\nskipped_operations = \"none\"\n"),
        run_sluice("\n[kafka.events]\nprovide_transaction_metadata = true\n"),
        run_sluice("\n[kafka.events]\nschemas_enable = true\n"),
    );
    let mut diff = Diff::default();
    compare("defaults", &defaults, &mut diff);
    compare("decimal-string", &decimal_string, &mut diff);
    compare("time-connect", &time_connect, &mut diff);
    compare("binary-hex", &binary_hex, &mut diff);
    compare("truncate", &truncate, &mut diff);
    compare("transaction-metadata", &transactions, &mut diff);
    compare("schemas-enable", &schemas_enable, &mut diff);

    let known = known_differences();
    let found: BTreeSet<String> = diff.groups.keys().cloned().collect();
    let new: Vec<&String> = found.difference(&known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    println!(
        "compared {} records and {} fields with Debezium's (defaults, decimal-string, time-connect, binary-hex, truncate, \
         transaction-metadata, schemas-enable) in {:?}: \
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
        diff.records >= 2700,
        "too few records paired: {}",
        diff.records
    );
}

/// `column_propagate_source_type` (Debezium's `column.propagate.source.type`): the matching
/// columns' schemas, snapshotted and streamed, carry the source type's name, length and scale;
/// the others do not.
#[tokio::test(flavor = "multi_thread")]
async fn column_propagate_source_type_names_the_source_types() {
    let _broker = broker_shared().await;
    let setup = [
        "CREATE DOMAIN price AS numeric(8,2);",
        "CREATE TABLE items (id integer PRIMARY KEY, code varchar(12) NOT NULL, amount price, \
         note text, at timestamp(3));",
        "INSERT INTO items VALUES (1, 'a', 1.5, 'x', '2020-01-01');",
    ];
    let extra = "\n[kafka.events]\nschemas_enable = true\n\
                 column_propagate_source_type = \"public\\\\.items\\\\.(code|amount),.*\\\\.AT\"\n";
    let records = run_sluice_on(
        extra,
        setup.iter().map(|s| s.to_string()).collect(),
        vec!["INSERT INTO items VALUES (2, 'b', 2.5, 'y', '2020-01-02');".into()],
    )
    .await;
    let items = &records["public.items"];
    let ops: Vec<String> = items.iter().map(Rec::op).collect();
    assert_eq!(ops, ["r", "c"]);
    for record in items {
        let schema = record.value_schema.as_ref().expect("a value schema");
        let J::Arr(fields) = schema.get("fields").unwrap() else {
            panic!("fields")
        };
        let after = fields[1].get("fields").unwrap();
        let J::Arr(columns) = after else {
            panic!("columns")
        };
        let parameters: Vec<String> = columns
            .iter()
            .map(|c| c.get("parameters").map_or("-".into(), J::show))
            .collect();
        assert_eq!(
            parameters,
            [
                "-",
                r#"{"__debezium.source.column.type":"VARCHAR","__debezium.source.column.length":"12","__debezium.source.column.scale":"0"}"#,
                r#"{"scale":"2","connect.decimal.precision":"8","__debezium.source.column.type":"PRICE","__debezium.source.column.length":"8","__debezium.source.column.scale":"2"}"#,
                "-",
                r#"{"__debezium.source.column.type":"TIMESTAMP","__debezium.source.column.length":"26","__debezium.source.column.scale":"3"}"#,
            ],
            "{}",
            schema.show()
        );
    }
}

#[test]
fn numbers_compare_by_decimal_value() {
    assert_eq!(canonical_number("1.5E-5"), canonical_number("0.000015"));
    assert_eq!(canonical_number("-0"), canonical_number("0.000"));
    assert_eq!(canonical_number("100"), canonical_number("1e2"));
    assert_ne!(canonical_number("1.4E-45"), canonical_number("1e-45"));
    assert_ne!(canonical_number("-1"), canonical_number("1"));
}

/// What a user sees for a Debezium option value sluice does not know: `sluice check` names the
/// key and lists the supported values.
#[test]
fn unknown_option_values_are_refused_with_the_supported_ones() {
    let name = unique("dbzopt");
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    for (line, expected) in [
        (
            "time_precision_mode = \"nanoseconds\"",
            "kafka.events.time_precision_mode: unknown variant `nanoseconds`, expected one of \
             `adaptive`, `adaptive_time_microseconds`, `connect`",
        ),
        (
            "skipped_operations = \"c,x\"",
            "kafka.events.skipped_operations: unknown operation \"x\" in \"c,x\": expected a \
             comma-separated list of `c`, `u`, `d`, `t`, or `none`",
        ),
    ] {
        let toml = pipeline_toml(&name, "public", &name, free_port(), "")
            + &format!("\n[kafka.events]\n{line}\n");
        std::fs::write(&file, toml).unwrap();
        let (code, output) =
            crate::faults::run_sluice(&["check", file.to_str().unwrap()], Duration::from_secs(20));
        assert_eq!(code, Some(1), "{output}");
        assert!(output.contains(expected), "{output}");
    }
}

/// `skipped_operations` and `tombstones_on_delete` by Debezium's names: with `"c,d"` and
/// `false`, the change script gives exactly Debezium's default run's snapshot reads, updates,
/// the delete + create pairs of key-changing updates (an update, so not skipped, as Debezium
/// skips by the change's operation), the TRUNCATE (`t` is not in the list), and no insert,
/// delete or tombstone.
#[tokio::test(flavor = "multi_thread")]
async fn skipped_operations_and_tombstones_by_debeziums_names() {
    let _broker = broker_shared().await;
    let ours = run_sluice(
        "\n[kafka.events]\nskipped_operations = \"c,d\"\ntombstones_on_delete = false\n",
    )
    .await;
    let lsn = |rec: &Rec| {
        rec.value
            .as_ref()
            .and_then(|v| v.get("source"))
            .and_then(|s| s.get("lsn"))
            .map(J::canonical)
    };
    let mut expected: BTreeMap<String, usize> = BTreeMap::new();
    for recs in golden("defaults").values() {
        let lsns = |op: &str| -> BTreeSet<String> {
            recs.iter()
                .filter(|r| r.op() == op)
                .filter_map(lsn)
                .collect()
        };
        let key_changes: BTreeSet<String> = lsns("c").intersection(&lsns("d")).cloned().collect();
        for rec in recs {
            let kept = match rec.op().as_str() {
                "r" | "u" => true,
                "c" | "d" => lsn(rec).is_some_and(|l| key_changes.contains(&l)),
                _ => false,
            };
            if kept {
                *expected.entry(rec.op()).or_default() += 1;
            }
        }
    }
    *expected.entry("t".into()).or_default() += 1;
    let mut found: BTreeMap<String, usize> = BTreeMap::new();
    for (table, recs) in &ours {
        if table != "public.zz_marker" {
            for rec in recs {
                *found.entry(rec.op()).or_default() += 1;
            }
        }
    }
    assert!(expected["c"] > 0 && expected["u"] > 0, "{expected:?}");
    assert_eq!(found, expected);
}

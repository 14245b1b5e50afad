//! The comparison engine of the Debezium golden-file tests (`debezium::` for PostgreSQL,
//! `debezium_mysql::` for MySQL and MariaDB): JSON with exact numbers, records aligned per
//! topic on (op, key), field-by-field differences grouped as `<table> <path> <kind>`, the
//! golden files and the ratchet file of accepted differences.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers as _;

use crate::support::{stack, unique};

/// The statements of a psql script (meta-commands left out; each statement ends a line with `;`).
pub(crate) fn statements(path: &Path) -> Vec<String> {
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
pub(crate) enum J {
    Null,
    Bool(bool),
    Num { canonical: String, text: String },
    Str(String),
    Arr(Vec<J>),
    Obj(Vec<(String, J)>),
}

impl J {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            J::Null => "null",
            J::Bool(_) => "bool",
            J::Num { .. } => "number",
            J::Str(_) => "string",
            J::Arr(_) => "array",
            J::Obj(_) => "object",
        }
    }

    pub(crate) fn get(&self, name: &str) -> Option<&J> {
        match self {
            J::Obj(members) => members.iter().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    pub(crate) fn get_mut(&mut self, name: &str) -> Option<&mut J> {
        match self {
            J::Obj(members) => members.iter_mut().find(|(k, _)| k == name).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Compact JSON text (numbers as written).
    pub(crate) fn show(&self) -> String {
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
    pub(crate) fn canonical(&self) -> String {
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

pub(crate) struct Parser<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Parser<'_> {
    pub(crate) fn parse(text: &str) -> J {
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
pub(crate) fn canonical_number(text: &str) -> String {
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
pub(crate) struct Rec {
    pub(crate) key: Option<J>,
    pub(crate) value: Option<J>,
    /// The key's and value's `schema` when written as `{"schema":…,"payload":…}`.
    pub(crate) key_schema: Option<J>,
    pub(crate) value_schema: Option<J>,
    /// The headers transforms added (`add.headers`: names starting with `__`; Debezium's own
    /// `__debezium.*` headers, which it adds whatever the transforms — `context.*` on every
    /// record, `oldkey`/`newkey` on a primary-key change's events — left out), as
    /// `[[name, value], …]`; `None` when none (the capture writes headers only for transform
    /// chains).
    pub(crate) headers: Option<J>,
}

/// Whether a header is one a transform added (see [`Rec::headers`]).
pub(crate) fn transform_header(name: &str) -> bool {
    name.starts_with("__") && !name.starts_with("__debezium.")
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
    pub(crate) fn from_line(line: &str) -> Self {
        let record = Parser::parse(line);
        let take = |name: &str| match record.get(name) {
            None | Some(J::Null) => None,
            Some(v) => Some(v.clone()),
        };
        let mut rec = Rec::new(take("key"), take("value"));
        if let Some(J::Arr(headers)) = record.get("headers") {
            let kept = headers
                .iter()
                .filter(|h| match h {
                    J::Arr(pair) => matches!(pair.first(), Some(J::Str(n)) if transform_header(n)),
                    _ => false,
                })
                .cloned()
                .collect::<Vec<_>>();
            if !kept.is_empty() {
                rec.headers = Some(J::Arr(kept));
            }
        }
        rec
    }

    pub(crate) fn new(key: Option<J>, value: Option<J>) -> Self {
        let (key, key_schema) = split_schema(key);
        let (value, value_schema) = split_schema(value);
        Rec {
            key,
            value,
            key_schema,
            value_schema,
            headers: None,
        }
    }

    /// (op, key) to align on.
    pub(crate) fn signature(&self) -> String {
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

    pub(crate) fn op(&self) -> String {
        self.signature()
            .split(' ')
            .next()
            .unwrap_or_default()
            .to_owned()
    }

    pub(crate) fn as_object(&self) -> J {
        let mut members = vec![
            ("key".into(), self.key.clone().unwrap_or(J::Null)),
            ("value".into(), self.value.clone().unwrap_or(J::Null)),
        ];
        if let Some(headers) = &self.headers {
            members.push(("headers".into(), headers.clone()));
        }
        J::Obj(members)
    }
}

pub(crate) struct Diff {
    pub(crate) records: usize,
    pub(crate) fields: usize,
    /// `<table> <path> <kind>` → (count, example Debezium → sluice).
    pub(crate) groups: BTreeMap<String, (usize, String)>,
    /// Paths (from the record: `key`/`value`, then field names) whose values depend on the
    /// run: their values are not compared, but a field on one side only is a difference.
    run_dependent: &'static [&'static str],
    /// Whether an object's members must come in Debezium's order (kind `member-order`).
    member_order: bool,
}

impl Diff {
    pub(crate) fn new(run_dependent: &'static [&'static str]) -> Self {
        Diff {
            records: 0,
            fields: 0,
            groups: BTreeMap::new(),
            run_dependent,
            member_order: false,
        }
    }

    /// Also compares the order of every object's members (the fields Debezium and sluice
    /// both have).
    pub(crate) fn with_member_order(mut self) -> Self {
        self.member_order = true;
        self
    }

    pub(crate) fn add(&mut self, table: &str, path: &str, kind: &str, example: String) {
        let path = if path.is_empty() { "<record>" } else { path };
        let group = self
            .groups
            .entry(format!("{table} {path} {kind}"))
            .or_insert((0, example));
        group.0 += 1;
    }

    pub(crate) fn compare(&mut self, table: &str, path: &str, expected: &J, actual: &J) {
        if self.run_dependent.contains(&path) {
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
                if self.member_order {
                    fn common<'a>(of: &'a [(String, J)], other: &J) -> Vec<&'a str> {
                        of.iter()
                            .filter(|(k, _)| other.get(k).is_some())
                            .map(|(k, _)| k.as_str())
                            .collect()
                    }
                    let (en, an) = (common(exp, actual), common(act, expected));
                    if en != an {
                        let at = if path.is_empty() { "<record>" } else { path };
                        self.add(table, at, "member-order", format!("{en:?} → {an:?}"));
                    }
                }
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
    pub(crate) fn compare_topic(&mut self, table: &str, expected: &[Rec], actual: &[Rec]) {
        // Aligned per key: each key's records keep their order (what Kafka and Debezium
        // promise), while records of different keys may interleave differently, as they do in
        // a topic several tables are routed into (their snapshots run side by side).
        let by_key = |recs: &[Rec]| -> Vec<Rec> {
            let mut sorted: Vec<(String, &Rec)> = recs
                .iter()
                .map(|r| (r.key.as_ref().map_or("null".into(), J::canonical), r))
                .collect();
            sorted.sort_by(|a, b| a.0.cmp(&b.0));
            sorted.into_iter().map(|(_, r)| r.clone()).collect()
        };
        let (expected, actual) = (&by_key(expected)[..], &by_key(actual)[..]);
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

/// Every topic under `prefix.` (and the topic named `prefix` itself, Debezium MySQL's
/// schema-change topic) read from the beginning to its end, as `{"key","value"}` lines.
/// `wanted` (given the topic's name) picks the topics; records per topic name without the
/// `prefix.` (`""` for the topic `prefix`).
pub(crate) fn read_topics(
    prefix: &str,
    wanted: &dyn Fn(&str) -> bool,
) -> BTreeMap<String, Vec<Rec>> {
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
        let under = topic.name().starts_with(&format!("{prefix}.")) || topic.name() == prefix;
        if !under || !wanted(topic.name()) {
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
    let deadline = Instant::now() + Duration::from_secs(120);
    while remaining > 0 {
        assert!(
            Instant::now() < deadline,
            "topics not read to their end in 120 s: {remaining} of {} partitions left",
            ends.len()
        );
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
            .unwrap_or_default()
            .to_owned();
        let mut rec = Rec::new(parse(message.key()), parse(message.payload()));
        if let Some(headers) = message.headers() {
            let kept: Vec<J> = headers
                .iter()
                .filter(|h| transform_header(h.key))
                .map(|h| {
                    let value = h
                        .value
                        .map_or(J::Null, |v| J::Str(String::from_utf8_lossy(v).into_owned()));
                    J::Arr(vec![J::Str(h.key.to_owned()), value])
                })
                .collect();
            if !kept.is_empty() {
                rec.headers = Some(J::Arr(kept));
            }
        }
        out.entry(table).or_default().push(rec);
        if ends.get(&(topic, message.partition())) == Some(&(message.offset() + 1)) {
            remaining -= 1;
        }
    }
    out
}

/// The golden records in `dir`, per table as `table_of` names it from the topic's name.
pub(crate) fn golden_dir(
    dir: &Path,
    table_of: &dyn Fn(&str) -> String,
) -> BTreeMap<String, Vec<Rec>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("golden dir") {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_owned();
        let Some(topic) = file.strip_suffix(".jsonl") else {
            continue;
        };
        let table = table_of(topic);
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

/// The accepted difference groups of a ratchet file.
pub(crate) fn known_differences(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// What is wrong with `diff` against the ratchet file `file` (named in the report as
/// `label`): difference groups not listed (each with its count and an example), and listed
/// lines that no longer occur. Empty when the two agree.
pub(crate) fn ratchet_report(diff: &Diff, file: &Path, label: &str) -> String {
    ratchet_report_known(diff, &known_differences(file), label)
}

/// `ratchet_report` against the accepted groups `known` (normalised as `known_differences`
/// does: words joined by one space).
pub(crate) fn ratchet_report_known(diff: &Diff, known: &BTreeSet<String>, label: &str) -> String {
    let found: BTreeSet<String> = diff.groups.keys().cloned().collect();
    let new: Vec<&String> = found.difference(known).collect();
    let gone: Vec<&String> = known.difference(&found).collect();
    let mut report = String::new();
    if !new.is_empty() {
        writeln!(
            report,
            "{} difference groups not in {label} \
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
            "{} lines of {label} no longer occur: remove them",
            gone.len()
        )
        .unwrap();
        for line in &gone {
            writeln!(report, "{line}").unwrap();
        }
    }
    report
}

//! Debezium's scripting transforms, `io.debezium.transforms.Filter` (keeps the records its
//! `condition` holds for) and `io.debezium.transforms.ContentBasedRouter` (sends a record to
//! the topic its `topic.expression` names; null: its own), with their expressions in
//! sluice's expression language ([`super::expr`]) instead of a JSR 223 script engine.
//!
//! As Debezium's (`ScriptingTransformation`): records of topics `topic.regex` does not match
//! pass unchanged; a record with a null value (a tombstone) passes unevaluated
//! (`null.handling.mode = keep`, the default), is dropped (`drop`) or is evaluated with
//! `value` null (`evaluate`); a condition that is not a boolean, or a topic that is not a
//! text, is an error.

use std::collections::BTreeMap;
use std::sync::Arc;

use regex_automata::meta::Regex;

use super::expr::{Expr, Val};
use super::predicate::{full_match, whole_match_regex};
use super::record::Record;

/// What a scripting transform does with a record whose value is null.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullHandling {
    /// Passes it unevaluated.
    Keep,
    /// Drops it.
    Drop,
    /// Evaluates the expression with `value` null.
    Evaluate,
}

/// Which of the two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `Filter`: `condition`.
    Filter,
    /// `ContentBasedRouter`: `topic.expression`.
    Router,
}

impl Kind {
    /// The key its expression is under.
    pub fn expression_key(self) -> &'static str {
        match self {
            Kind::Filter => "condition",
            Kind::Router => "topic.expression",
        }
    }

    /// The keys it takes.
    pub fn keys(self) -> &'static [&'static str] {
        match self {
            Kind::Filter => &["language", "topic.regex", "null.handling.mode", "condition"],
            Kind::Router => &[
                "language",
                "topic.regex",
                "null.handling.mode",
                "topic.expression",
            ],
        }
    }
}

/// A `Filter` or a `ContentBasedRouter`.
#[derive(Debug)]
pub struct Scripting {
    /// Which.
    pub kind: Kind,
    /// The condition or the topic expression.
    pub expr: Expr,
    /// `topic.regex`: applies only to topics it matches as a whole.
    pub topics: Option<Regex>,
    /// `null.handling.mode`.
    pub nulls: NullHandling,
}

impl Scripting {
    /// The transform `kind` configured by `values`.
    ///
    /// # Errors
    ///
    /// Each problem as (key, what is wrong and what is expected).
    pub fn configure(
        kind: Kind,
        values: &BTreeMap<String, String>,
    ) -> Result<Self, Vec<(&'static str, String)>> {
        let mut problems = Vec::new();
        let get = |k: &str| values.get(k).map(String::as_str);
        match get("language") {
            None => problems.push((
                "language",
                "is missing: expected jsr223.groovy (or jsr223.graal.js): sluice evaluates the common subset of both in its own expression language (docs/transforms.md, \"Expressions\")".to_owned(),
            )),
            Some("jsr223.groovy" | "jsr223.graal.js" | "jsr223.js" | "jsr223.javascript" | "sluice") => {}
            Some(other) if other.starts_with("wasm.") => problems.push((
                "language",
                format!("{other:?}: WebAssembly filters are not run by sluice: rewrite the condition as an expression (docs/transforms.md, \"Expressions\")"),
            )),
            Some(other) => problems.push((
                "language",
                format!("{other:?}: expected jsr223.groovy, jsr223.graal.js or sluice"),
            )),
        }
        let expression_key = kind.expression_key();
        let expr = match get(expression_key) {
            None => {
                problems.push((
                    expression_key,
                    match kind {
                        Kind::Filter => "is missing: expected the condition records are kept for, e.g. value.op != 'd'",
                        Kind::Router => "is missing: expected the expression of the topic (null: the record's own), e.g. value.op == 'd' ? topic + '.deletes' : null",
                    }
                    .to_owned(),
                ));
                None
            }
            Some(text) => match Expr::parse(text) {
                Ok(expr) => Some(expr),
                Err(e) => {
                    problems.push((expression_key, format!("{text:?}: {e}")));
                    None
                }
            },
        };
        let topics = match get("topic.regex").filter(|r| !r.is_empty()) {
            None => None,
            Some(pattern) => match whole_match_regex(pattern) {
                Ok(regex) => Some(regex),
                Err(e) => {
                    problems.push(("topic.regex", e));
                    None
                }
            },
        };
        let nulls = match get("null.handling.mode").map(str::trim) {
            None => NullHandling::Keep,
            Some(mode) if mode.eq_ignore_ascii_case("keep") => NullHandling::Keep,
            Some(mode) if mode.eq_ignore_ascii_case("drop") => NullHandling::Drop,
            Some(mode) if mode.eq_ignore_ascii_case("evaluate") => NullHandling::Evaluate,
            Some(other) => {
                problems.push((
                    "null.handling.mode",
                    format!("{other:?}: expected keep, drop or evaluate"),
                ));
                NullHandling::Keep
            }
        };
        match expr {
            Some(expr) if problems.is_empty() => Ok(Scripting {
                kind,
                expr,
                topics,
                nulls,
            }),
            _ => Err(problems),
        }
    }

    /// Applies the transform; `Ok(None)` drops the record.
    ///
    /// # Errors
    ///
    /// The expression failed on the record, or gave a value of the wrong type.
    pub fn apply(&self, mut record: Record) -> Result<Option<Record>, String> {
        if self
            .topics
            .as_ref()
            .is_some_and(|regex| !full_match(regex, &record.topic))
        {
            return Ok(Some(record));
        }
        if record.value.value.is_none() {
            match self.nulls {
                NullHandling::Keep => return Ok(Some(record)),
                NullHandling::Drop => return Ok(None),
                NullHandling::Evaluate => {}
            }
        }
        let failed = |e: String| format!("{}: {e}", self.kind.expression_key());
        match self.kind {
            Kind::Filter => match self.expr.eval(&record).map_err(failed)? {
                Val::Bool(true) => Ok(Some(record)),
                Val::Bool(false) => Ok(None),
                other => Err(failed(format!(
                    "gave {}, not a boolean (Debezium's Filter needs true or false)",
                    kind_of(&other)
                ))),
            },
            Kind::Router => {
                let topic: Option<Arc<str>> = match self.expr.eval(&record).map_err(failed)? {
                    Val::Null => None,
                    Val::Str(topic) if topic.is_empty() => {
                        return Err(failed("gave an empty topic name".into()));
                    }
                    Val::Str(topic) => Some(topic.as_ref().into()),
                    other => {
                        return Err(failed(format!(
                            "gave {}, not a topic name (a text, or null for the record's own)",
                            kind_of(&other)
                        )));
                    }
                };
                if let Some(topic) = topic {
                    record.topic = topic;
                }
                Ok(Some(record))
            }
        }
    }

    /// The topics a router may send records of `topic` to that are known beforehand: `topic`
    /// itself and the literal topics of its expression (topics it computes are not known).
    pub fn routes(&self, topic: &str) -> Vec<String> {
        let mut out = vec![topic.to_owned()];
        if self
            .topics
            .as_ref()
            .is_none_or(|regex| full_match(regex, topic))
        {
            out.extend(self.expr.literal_results().into_iter().map(str::to_owned));
        }
        out
    }
}

fn kind_of(value: &Val<'_>) -> String {
    match value {
        Val::Null => "null".into(),
        Val::Bool(b) => b.to_string(),
        Val::Int(n) => format!("the number {n}"),
        Val::Float(f) => format!("the number {f}"),
        Val::Str(s) => format!("the text {s:?}"),
        _ => "a struct or a list".into(),
    }
}

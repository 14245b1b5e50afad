//! One import under way: the connector's settings, the pipeline file being written, and what
//! became of each setting (carried, noted, dropped). The per-source rules (`postgres.rs`,
//! `mysql.rs`, `common.rs`) fill it in; `mod.rs` starts it and renders the result.

use super::connector::{ConnectorConfig, ConnectorKind};
use super::document::Document;

/// What became of one setting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Carried over: sluice does the same.
    Carried,
    /// Carried over, with something the user should know.
    Noted(String),
    /// Not carried over, with the reason; `changes_output`: consumers see a difference.
    Dropped {
        /// Why.
        reason: String,
        /// Whether what consumers see changes.
        changes_output: bool,
    },
}

/// One setting of the connector's configuration and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The setting's name (Connect's).
    pub setting: String,
    /// What became of it.
    pub outcome: Outcome,
}

/// An import under way: the connector's settings, the file being written and the findings.
pub struct Import<'a> {
    /// The connector's configuration.
    pub connector: &'a ConnectorConfig,
    /// The pipeline file.
    pub doc: Document,
    /// One per setting (and per thing missing that matters).
    pub findings: Vec<Finding>,
    /// Environment variables the file refers to: (name, what it holds).
    pub env: Vec<(String, String)>,
    /// `source.postgres` or `source.mysql`.
    pub source: &'static str,
}

impl<'a> Import<'a> {
    pub(super) fn new(connector: &'a ConnectorConfig, source: &'static str) -> Self {
        let doc = Document::with_sections(&[
            "",
            source,
            &format!("{source}.columns"),
            "kafka",
            "kafka.events",
            "kafka.producer",
            "schema_registry",
            "delivery",
            "transforms",
        ]);
        Self {
            connector,
            doc,
            findings: Vec::new(),
            env: Vec::new(),
            source,
        }
    }

    /// A setting's value.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.connector.get(key)
    }

    /// `key` is carried over as is.
    pub fn carried(&mut self, key: &str) {
        self.finding(key, Outcome::Carried);
    }

    /// `key` is carried over with a note.
    pub fn noted(&mut self, key: &str, note: impl Into<String>) {
        self.finding(key, Outcome::Noted(note.into()));
    }

    /// `key` is not carried over.
    pub fn dropped(&mut self, key: &str, reason: impl Into<String>, changes_output: bool) {
        self.finding(
            key,
            Outcome::Dropped {
                reason: reason.into(),
                changes_output,
            },
        );
    }

    fn finding(&mut self, key: &str, outcome: Outcome) {
        self.findings.retain(|f| f.setting != key);
        self.findings.push(Finding {
            setting: key.to_owned(),
            outcome,
        });
    }

    /// Names an environment variable the file refers to.
    pub fn needs_env(&mut self, name: &str, what: impl Into<String>) {
        if !self.env.iter().any(|(n, _)| n == name) {
            self.env.push((name.to_owned(), what.into()));
        }
    }

    /// A setting in the source section.
    pub fn set_source(&mut self, key: &str, value: impl Into<toml::Value>) {
        let section = self.source;
        self.doc.set(section, key, value, None);
    }

    /// A boolean setting's value (Connect's `true`/`false`, any case); `None` when unset or
    /// neither.
    pub fn flag(&self, key: &str) -> Option<bool> {
        match self.get(key)?.trim().to_ascii_lowercase().as_str() {
            "true" => Some(true),
            "false" => Some(false),
            _ => None,
        }
    }

    /// A number setting's value.
    pub fn number(&self, key: &str) -> Option<i64> {
        self.get(key)?.trim().parse().ok()
    }
}

/// The result of an import: the file's text and what became of each setting.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The pipeline name.
    pub name: String,
    /// `postgres` or `mysql`.
    pub kind: ConnectorKind,
    /// The pipeline file.
    pub text: String,
    /// Per setting.
    pub findings: Vec<Finding>,
    /// Environment variables the file refers to.
    pub env: Vec<(String, String)>,
}

impl Imported {
    /// The findings that change what consumers see and are not accepted.
    pub fn refused<'a>(&'a self, accept: &[String], accept_all: bool) -> Vec<&'a Finding> {
        self.findings
            .iter()
            .filter(|f| {
                matches!(
                    f.outcome,
                    Outcome::Dropped {
                        changes_output: true,
                        ..
                    }
                ) && !accept_all
                    && !accept.iter().any(|a| a == &f.setting)
            })
            .collect()
    }
}

//! What `sluice doctor` reports: findings with a severity, evidence and a fix; shared by the
//! PostgreSQL, Kafka, MySQL and schema registry checks.

use std::collections::BTreeMap;

use serde::Serialize;

/// How bad a finding is; the exit code is the worst one's (0 ok/info, 1 warning, 2 critical).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Checked and fine.
    Ok,
    /// Worth knowing.
    Info,
    /// Will hurt: latency, disk, availability.
    Warning,
    /// Broken now, or data at risk.
    Critical,
}

impl Severity {
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Info => "info",
            Self::Warning => "WARNING",
            Self::Critical => "CRITICAL",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable code, e.g. `pg.slot_inactive`.
    pub code: &'static str,
    /// Severity.
    pub severity: Severity,
    /// What was found, in a sentence.
    pub summary: String,
    /// The values read.
    pub evidence: BTreeMap<String, serde_json::Value>,
    /// The concrete fix; empty when nothing is to be done.
    pub fix: String,
}

/// A finding from its parts.
pub(super) fn finding(
    code: &'static str,
    severity: Severity,
    summary: impl Into<String>,
    evidence: &[(&str, serde_json::Value)],
    fix: impl Into<String>,
) -> Finding {
    Finding {
        code,
        severity,
        summary: summary.into(),
        evidence: evidence
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
        fix: fix.into(),
    }
}

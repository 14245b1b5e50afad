//! The report of a doctor run: the exit code and the human output.

use std::fmt::Write as _;
use std::process::ExitCode;

use super::finding::{Finding, Severity};

/// The exit code for the worst severity.
pub fn exit_code(findings: &[Finding]) -> ExitCode {
    match findings.iter().map(|f| f.severity).max() {
        Some(Severity::Critical) => ExitCode::from(2),
        Some(Severity::Warning) => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// Human output: problems first, then what is fine.
pub fn render(findings: &[Finding]) -> String {
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.code.cmp(b.code)));
    let mut out = String::new();
    for f in sorted {
        let _ = writeln!(out, "[{}] {}: {}", f.severity.label(), f.code, f.summary);
        if f.severity > Severity::Ok && !f.evidence.is_empty() {
            let evidence: Vec<String> = f
                .evidence
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                    )
                })
                .collect();
            let _ = writeln!(out, "    evidence: {}", evidence.join(", "));
        }
        if !f.fix.is_empty() {
            let _ = writeln!(out, "    fix: {}", f.fix);
        }
    }
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    let _ = writeln!(
        out,
        "{} critical, {} warning(s), {} info, {} ok",
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info),
        count(Severity::Ok)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::finding::finding;

    #[test]
    fn the_exit_code_is_the_worst_severity() {
        let f = |s| finding("x", s, "", &[], "");
        assert_eq!(
            exit_code(&[f(Severity::Ok), f(Severity::Info)]),
            ExitCode::SUCCESS
        );
        assert_eq!(
            exit_code(&[f(Severity::Warning), f(Severity::Ok)]),
            ExitCode::from(1)
        );
        assert_eq!(
            exit_code(&[f(Severity::Warning), f(Severity::Critical)]),
            ExitCode::from(2)
        );
    }
}

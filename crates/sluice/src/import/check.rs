//! The takeover's preconditions: each one checked, and what to do when it does not hold.

/// One precondition and whether it holds.
#[derive(Debug, Clone)]
pub struct Check {
    /// What was checked.
    pub what: String,
    /// `None`: it holds; `Some(fix)`: it does not, and what to do.
    pub failure: Option<String>,
}

impl Check {
    /// A check that holds.
    pub fn ok(what: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            failure: None,
        }
    }

    /// A check that failed, with the fix.
    pub fn failed(what: impl Into<String>, fix: impl Into<String>) -> Self {
        Self {
            what: what.into(),
            failure: Some(fix.into()),
        }
    }
}

/// Prints the checks; true when all hold.
pub fn report(checks: &[Check]) -> bool {
    for check in checks {
        match &check.failure {
            None => eprintln!("check: {}: ok", check.what),
            Some(fix) => eprintln!("check: {}: FAILED\n  fix: {fix}", check.what),
        }
    }
    checks.iter().all(|c| c.failure.is_none())
}

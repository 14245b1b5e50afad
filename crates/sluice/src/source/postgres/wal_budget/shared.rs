//! What the budget's task shares with the pipeline's runs: the cancellations that end a run
//! for the `drop_slot` action, the lock a streaming run holds, and the outcome that stops the
//! pipeline.

use std::sync::Mutex;

use tokio_util::sync::CancellationToken;

use crate::error::PipelineError;

/// What the budget's task shares with the pipeline's runs.
#[derive(Debug, Default)]
pub struct BudgetShared {
    /// Cancelled when the `drop_slot` action starts: the run in progress must end at once.
    pub exceeded: CancellationToken,
    /// Cancelled once the action is over (the slot dropped, or the attempt given up).
    pub done: CancellationToken,
    /// Held by a run while it streams: the action takes it (waits for the run to end) before
    /// it records and drops.
    pub run: tokio::sync::Mutex<()>,
    /// What happened, for the error that stops the pipeline: (what, hint).
    outcome: Mutex<Option<(String, String)>>,
}

impl BudgetShared {
    /// The error that stops the pipeline once the slot was dropped by the budget.
    pub fn outcome(&self) -> Option<PipelineError> {
        self.outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|(what, hint)| PipelineError::fatal(what.clone(), hint.clone()))
    }

    pub(super) fn set_outcome(&self, what: String, hint: String) {
        *self
            .outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((what, hint));
    }
}

//! The replication loop's deadline for everything but the stream itself: the loop must keep
//! sending status updates, so nothing it awaits may take long enough for the server to drop
//! the connection.

use std::time::Duration;

use crate::error::PipelineError;

/// The longest the replication loop waits for anything but the stream itself (catalog
/// look-ups, topic creation, TOAST re-reads, table refreshes and publication changes, an
/// incremental chunk's read): below PostgreSQL's default `wal_sender_timeout` (60 s), so the
/// status updates that keep the connection alive are never held back long enough for the
/// server to drop it. Past it the run restarts with the operation named.
pub(super) const LOOP_DEADLINE: Duration = Duration::from_secs(20);

/// Awaits `operation` for at most [`LOOP_DEADLINE`]; a retryable error naming `what` past it.
pub(super) async fn bounded<T>(
    what: &str,
    operation: impl std::future::Future<Output = Result<T, PipelineError>>,
) -> Result<T, PipelineError> {
    tokio::time::timeout(LOOP_DEADLINE, operation)
        .await
        .unwrap_or_else(|elapsed| {
            Err(PipelineError::retryable(
                format!(
                    "{what} took longer than {} s, the longest the replication loop waits (its status updates must keep flowing); restarting",
                    LOOP_DEADLINE.as_secs()
                ),
                elapsed,
            ))
        })
}

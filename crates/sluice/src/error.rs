//! Pipeline errors, sorted by what should happen next.
//!
//! Every error answers one question for the supervisor: retry on its own (a lost connection,
//! an unavailable server), or stop and tell the operator what is wrong and how to fix it
//! (`wal_level` not logical, a dropped slot, missing privileges, bad credentials). The cause is
//! attached as a `source`, never formatted into the message; the binary renders the chain once.

use std::error::Error as StdError;

/// A boxed cause.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// A pipeline run failed.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// Retried with backoff from the last confirmed position; nothing is lost.
    #[error("{what}")]
    Retryable {
        /// What failed.
        what: String,
        /// Why.
        #[source]
        source: Option<BoxError>,
    },
    /// Needs an operator; the pipeline stops.
    #[error("{what}")]
    Fatal {
        /// What is wrong.
        what: String,
        /// How to fix it.
        hint: String,
        /// Why.
        #[source]
        source: Option<BoxError>,
    },
}

/// The crate's result type.
pub type Result<T, E = PipelineError> = std::result::Result<T, E>;

impl PipelineError {
    /// A retryable failure with its cause.
    pub fn retryable(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Retryable {
            what: what.into(),
            source: Some(source.into()),
        }
    }

    /// A fatal condition with the fix.
    pub fn fatal(what: impl Into<String>, hint: impl Into<String>) -> Self {
        Self::Fatal {
            what: what.into(),
            hint: hint.into(),
            source: None,
        }
    }

    /// A fatal condition with the fix and its cause.
    pub fn fatal_with(
        what: impl Into<String>,
        hint: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        Self::Fatal {
            what: what.into(),
            hint: hint.into(),
            source: Some(source.into()),
        }
    }

    /// Whether the supervisor should reconnect and go on.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Retryable { .. })
    }

    /// The operator's fix, for fatal errors.
    pub fn hint(&self) -> Option<&str> {
        match self {
            Self::Fatal { hint, .. } => Some(hint),
            Self::Retryable { .. } => None,
        }
    }

    /// The message and every cause, `: `-separated, for logs and status.
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut source = self.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        text
    }
}

/// Sorts an error from a PostgreSQL SQL connection.
///
/// SQLSTATEs that only an operator can fix are fatal with `hint`; everything else (I/O, server
/// shutting down, too many connections, unknown) is retryable, as unknown errors should be.
pub fn classify_pg(what: impl Into<String>, error: tokio_postgres::Error) -> PipelineError {
    let what = what.into();
    match error.code().map(|code| code.code()) {
        Some(code @ ("28000" | "28P01")) => PipelineError::fatal_with(
            what,
            format!(
                "authentication failed (SQLSTATE {code}): check the user and password in source.postgres.url and pg_hba.conf"
            ),
            error,
        ),
        Some(code @ "42501") => PipelineError::fatal_with(
            what,
            format!(
                "permission denied (SQLSTATE {code}): the user needs the REPLICATION attribute (ALTER ROLE … REPLICATION), SELECT on the captured tables, and CREATE on the database to create the publication"
            ),
            error,
        ),
        Some("3D000") => PipelineError::fatal_with(
            what,
            "the database does not exist: check the database name in source.postgres.url",
            error,
        ),
        _ => PipelineError::retryable(what, error),
    }
}

/// One broken rule of the pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigIssue {
    /// The key's path, e.g. `source.postgres.tables[1]`.
    pub key: String,
    /// What is wrong and the expected form.
    pub problem: String,
}

impl std::fmt::Display for ConfigIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.key, self.problem)
    }
}

/// A run ended by the pipeline itself rather than by a server: told to stop, or one of its own
/// channels or tasks gone. The source of a retryable [`PipelineError`] whose message says which
/// step was interrupted; the next run starts again from the last confirmed position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Interruption {
    /// The pipeline was told to stop.
    #[error("shutdown")]
    Shutdown,
    /// The producer's delivery events ended (the producer task is gone).
    #[error("delivery channel closed")]
    DeliveryChannelClosed,
    /// The MySQL snapshot's delivery reports ended (the producer task is gone).
    #[error("delivery reports closed")]
    DeliveryReportsClosed,
    /// The publisher task stopped taking encoded batches.
    #[error("publish channel closed")]
    PublishChannelClosed,
    /// The snapshot's workers ended with chunks left unread.
    #[error("snapshot incomplete")]
    SnapshotIncomplete,
    /// The incremental snapshot's reader task was already taken or never started.
    #[error("no task")]
    NoReaderTask,
}

/// A change the encoder could not turn into a record; the text is the encoder's reason (the
/// column and what is wrong with its value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Unencodable(pub String);

#[cfg(test)]
mod tests {
    use super::*;

    /// The message users see (the status page, the log) is the one the `io::Error` stand-ins
    /// these types replaced gave.
    #[test]
    fn typed_causes_read_as_the_text_they_replaced() {
        let same = |typed: BoxError, text: &str| {
            assert_eq!(
                PipelineError::retryable("the step", typed).chain(),
                PipelineError::retryable("the step", std::io::Error::other(text.to_owned()))
                    .chain(),
            );
            assert_eq!(
                PipelineError::retryable("the step", std::io::Error::other(text.to_owned()))
                    .chain(),
                format!("the step: {text}")
            );
        };
        for (typed, text) in [
            (Interruption::Shutdown, "shutdown"),
            (
                Interruption::DeliveryChannelClosed,
                "delivery channel closed",
            ),
            (
                Interruption::DeliveryReportsClosed,
                "delivery reports closed",
            ),
            (Interruption::PublishChannelClosed, "publish channel closed"),
            (Interruption::SnapshotIncomplete, "snapshot incomplete"),
            (Interruption::NoReaderTask, "no task"),
        ] {
            same(Box::new(typed), text);
        }
        same(
            Box::new(Unencodable("column `c`: not a date".into())),
            "column `c`: not a date",
        );
    }
}

//! What a new slot's creation on the primary waits for, named while it waits.
//!
//! A logical slot becomes consistent only at a point no transaction straddles: its creation
//! waits until every transaction that had written (had an xid) when it began has ended, in
//! every database of the cluster, and then for the server's next running-xacts record (the
//! background writer logs one every 15 s while other WAL is written). A session left `idle in
//! transaction`, or a prepared transaction nobody committed, holds it for as long as it
//! stays: PostgreSQL says nothing, and the pipeline seems to hang before its snapshot. So
//! after [`NAMED_AFTER`] sluice names them, in the log and in the status's hint, every
//! [`NAMED_EVERY`] until the slot exists. `sluice doctor` names them too
//! (`pg.open_transactions`), before a pipeline starts.

use std::future::Future;
use std::time::{Duration, Instant};

use super::config::PgPipelineConfig;
use super::setup::PgCatalog;
use crate::error::{PipelineError, classify_pg};
use crate::runtime::status::StatusBoard;

/// A creation that takes longer than this is explained.
pub const NAMED_AFTER: Duration = Duration::from_secs(10);
/// And explained again this often while it goes on.
pub const NAMED_EVERY: Duration = Duration::from_secs(30);

/// A transaction the creation waits for.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Holder {
    /// A session's transaction that has written.
    Session {
        /// The session's backend.
        pid: i32,
        /// Its database.
        database: String,
        /// Its role.
        user: String,
        /// Its `application_name`.
        application: String,
        /// `pg_stat_activity.state` (`idle in transaction`, `active`, …).
        state: String,
        /// Seconds since the transaction began.
        open_s: f64,
    },
    /// A prepared (two-phase) transaction: no session holds it, it stays until committed or
    /// rolled back.
    Prepared {
        /// Its global identifier.
        gid: String,
        /// Its database.
        database: String,
        /// Its role.
        owner: String,
        /// Seconds since it was prepared.
        open_s: f64,
    },
}

impl Holder {
    /// Seconds since it began (or was prepared).
    pub fn open_s(&self) -> f64 {
        match self {
            Self::Session { open_s, .. } | Self::Prepared { open_s, .. } => *open_s,
        }
    }

    /// The transaction, and how to end it.
    pub fn describe(&self) -> String {
        match self {
            Self::Session {
                pid,
                database,
                user,
                application,
                state,
                open_s,
            } => format!(
                "pid {pid} (database {database:?}, user {user:?}, application {application:?}, {state}, open for {open_s:.0} s): end it, or SELECT pg_terminate_backend({pid})"
            ),
            Self::Prepared {
                gid,
                database,
                owner,
                open_s,
            } => format!(
                "prepared transaction {gid:?} (database {database:?}, owner {owner:?}, prepared {open_s:.0} s ago): COMMIT PREPARED or ROLLBACK PREPARED {} in database {database:?}",
                crate::sql::pg_escape_literal(gid)
            ),
        }
    }
}

/// What the creation of `slot`, waiting for `waited`, waits for, in words.
pub fn explain(slot: &str, waited: Duration, holders: &[Holder]) -> String {
    let waited = waited.as_secs();
    if holders.is_empty() {
        return format!(
            "creating replication slot {slot:?} has waited {waited} s: no transaction from before it is still open, so it waits for the server's next running-xacts record (written every 15 s while other WAL is written)"
        );
    }
    let named: Vec<String> = holders.iter().map(Holder::describe).collect();
    format!(
        "creating replication slot {slot:?} has waited {waited} s for {} transaction{} open since before it began, in any database of the cluster (a logical slot starts where no transaction straddles): {}",
        holders.len(),
        if holders.len() == 1 { "" } else { "s" },
        named.join("; ")
    )
}

/// The oldest transactions (at most 3 of each kind, sessions first) that have written and were
/// open `before` ago: anywhere in the cluster (what a slot's creation waits for), or, with
/// `in_database_of` a slot's name, in that slot's database only (what holds its restart point:
/// the WAL budget's `long_transaction`).
///
/// # Errors
///
/// The queries' failure.
pub async fn holders(
    client: &tokio_postgres::Client,
    before: Duration,
    in_database_of: Option<&str>,
) -> Result<Vec<Holder>, tokio_postgres::Error> {
    let before = before.as_secs_f64();
    let sessions = client
        .query(
            "SELECT a.pid, coalesce(a.datname::text, ''), coalesce(a.usename::text, ''), \
                    coalesce(a.application_name, ''), coalesce(a.state, ''), \
                    extract(epoch FROM now() - a.xact_start)::float8 \
             FROM pg_stat_activity a \
             WHERE a.pid <> pg_backend_pid() AND a.backend_xid IS NOT NULL \
               AND a.xact_start < now() - make_interval(secs => $1) \
               AND ($2::text IS NULL OR a.datname = \
                    (SELECT s.database FROM pg_replication_slots s WHERE s.slot_name = $2)) \
             ORDER BY a.xact_start LIMIT 3",
            &[&before, &in_database_of],
        )
        .await?;
    let prepared = client
        .query(
            "SELECT gid, database::text, owner::text, \
                    extract(epoch FROM now() - prepared)::float8 \
             FROM pg_prepared_xacts \
             WHERE prepared < now() - make_interval(secs => $1) \
               AND ($2::text IS NULL OR database = \
                    (SELECT s.database FROM pg_replication_slots s WHERE s.slot_name = $2)) \
             ORDER BY prepared LIMIT 3",
            &[&before, &in_database_of],
        )
        .await?;
    let sessions = sessions.into_iter().map(|row| Holder::Session {
        pid: row.get(0),
        database: row.get(1),
        user: row.get(2),
        application: row.get(3),
        state: row.get(4),
        open_s: row.get(5),
    });
    let prepared = prepared.into_iter().map(|row| Holder::Prepared {
        gid: row.get(0),
        database: row.get(1),
        owner: row.get(2),
        open_s: row.get(3),
    });
    Ok(sessions.chain(prepared).collect())
}

/// [`holders`] open `before` ago, over `catalog`, connected at the first question.
async fn ask(
    config: &PgPipelineConfig,
    catalog: &mut Option<PgCatalog>,
    before: Duration,
) -> Result<Vec<Holder>, PipelineError> {
    if catalog.is_none() {
        *catalog = Some(PgCatalog::connect(config).await?);
    }
    let client = catalog.as_ref().expect("connected above").client();
    holders(client, before, None)
        .await
        .map_err(|e| classify_pg("cannot read pg_stat_activity or pg_prepared_xacts", e))
}

/// Runs `creation` (the slot's creation on the primary); once it has taken [`NAMED_AFTER`],
/// and every [`NAMED_EVERY`] after, logs what it waits for and shows it as the status's hint
/// (cleared when it ends). The questions go over a SQL connection of their own, opened at the
/// first: the creation may be a query on the pipeline's own (`snapshot = "never"`), which would
/// hold them behind it.
pub async fn while_creating<T>(
    config: &PgPipelineConfig,
    board: &StatusBoard,
    slot: &str,
    creation: impl Future<Output = T>,
) -> T {
    let started = Instant::now();
    let explain_loop = async {
        let mut tick =
            tokio::time::interval_at(tokio::time::Instant::now() + NAMED_AFTER, NAMED_EVERY);
        let mut catalog: Option<PgCatalog> = None;
        loop {
            tick.tick().await;
            let waited = started.elapsed();
            let asked = ask(config, &mut catalog, waited).await;
            match asked {
                Ok(found) => {
                    let text = explain(slot, waited, &found);
                    tracing::warn!("{text}");
                    board.update(|s| s.hint = Some(text));
                }
                Err(error) => tracing::warn!(
                    slot,
                    error = %error,
                    waited_s = waited.as_secs(),
                    "creating the replication slot takes long, and what it waits for cannot be read"
                ),
            }
        }
    };
    let out = tokio::select! {
        out = creation => out,
        () = explain_loop => unreachable!("the explaining loop never ends"),
    };
    if started.elapsed() >= NAMED_AFTER {
        board.update(|s| s.hint = None);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_explanation_names_each_holder_and_how_to_end_it() {
        let session = Holder::Session {
            pid: 4242,
            database: "app".into(),
            user: "etl".into(),
            application: "psql".into(),
            state: "idle in transaction".into(),
            open_s: 95.4,
        };
        let prepared = Holder::Prepared {
            gid: "tx1".into(),
            database: "billing".into(),
            owner: "app".into(),
            open_s: 3600.0,
        };
        let text = explain(
            "sluice_orders",
            Duration::from_secs(31),
            &[session, prepared],
        );
        assert!(
            text.contains("\"sluice_orders\" has waited 31 s for 2 transactions"),
            "{text}"
        );
        assert!(
            text.contains("pid 4242 (database \"app\", user \"etl\", application \"psql\", idle in transaction, open for 95 s)"),
            "{text}"
        );
        assert!(text.contains("SELECT pg_terminate_backend(4242)"), "{text}");
        assert!(
            text.contains("ROLLBACK PREPARED E'tx1' in database \"billing\""),
            "{text}"
        );
        let quoted = Holder::Prepared {
            gid: "it's".into(),
            database: "d".into(),
            owner: "o".into(),
            open_s: 1.0,
        };
        assert!(
            quoted.describe().contains("ROLLBACK PREPARED E'it''s'"),
            "{}",
            quoted.describe()
        );
        let none = explain("s", Duration::from_secs(12), &[]);
        assert!(none.contains("next running-xacts record"), "{none}");
    }
}

//! The `drop_slot` action at 100 % of the budget: the run ends (releasing the slot), the drop is
//! recorded in the pipeline's state, the slot is dropped, and the pipeline stops saying what
//! happened and what its next run does.

use std::sync::Arc;
use std::time::Duration;

use super::shared::BudgetShared;
use crate::config::{StateStoreKind, human_bytes};
use crate::error::{PipelineError, classify_pg};
use crate::runtime::metrics as m;
use crate::runtime::status::{StatusBoard, unix_ms};
use crate::source::postgres::config::PgPipelineConfig;
use crate::source::postgres::setup::PgCatalog;
use crate::source::postgres::slot_state::{SlotStateFile, WalBudgetDrop};

/// How long the `drop_slot` action waits for the stream to release the slot (the walsender of
/// the closed replication connection to exit) before it terminates that walsender.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// How long the `drop_slot` action tries to drop the slot in all.
const DROP_DEADLINE: Duration = Duration::from_secs(60);

/// How long recording the drop in a Kafka state store may take (Kafka may be the reason the
/// budget ran out).
const RECORD_DEADLINE: Duration = Duration::from_secs(15);

/// The `drop_slot` action: ends the run (releasing the slot), records the drop, drops the slot,
/// and leaves the error that stops the pipeline.
pub(super) async fn drop_slot(
    config: &Arc<PgPipelineConfig>,
    board: &Arc<StatusBoard>,
    shared: &BudgetShared,
    catalog: &PgCatalog,
    retained: i64,
) {
    let slot = config.slot_name();
    let budget = config.source.wal_budget;
    tracing::error!(
        slot = %slot,
        retained_bytes = retained,
        budget_bytes = budget,
        "WAL budget exceeded (wal_budget_action = \"drop_slot\"): stopping the stream and dropping the slot"
    );
    shared.exceeded.cancel();
    // The run ends (its replication connection closes) before anything is recorded, so that it
    // cannot write the state after the drop is recorded.
    let run = shared.run.lock().await;
    let record = WalBudgetDrop {
        unix_ms: unix_ms(),
        retained_bytes: retained,
        budget_bytes: budget,
    };
    let recorded = record_drop(config, record).await;
    if let Err(error) = &recorded {
        tracing::error!(error = %error.chain(), "WAL budget: cannot record the slot's drop in the state store; dropping it anyway (the next run then stops on a dropped slot)");
    }
    let dropped = drop_when_released(catalog, &slot).await;
    metrics::counter!(m::WAL_BUDGET_DROPS).increment(1);
    let (what, hint) = match (&dropped, &recorded) {
        (Ok(()), Ok(location)) => (
            format!(
                "WAL budget exceeded: replication slot {slot:?} retained {} of WAL, wal_budget is {}: the slot was dropped (wal_budget_action = \"drop_slot\") and the server frees that WAL; the changes it held are not in Kafka",
                human_bytes(retained),
                human_bytes(i64::try_from(budget).unwrap_or(i64::MAX))
            ),
            format!(
                "the next run creates the slot anew and republishes every captured table (snapshot = \"when_needed\": current rows, and tombstones for the rows deleted meanwhile; recorded in {location}); before starting it, fix what held the slot back (see wal_budget.held_by in /health and the log)"
            ),
        ),
        (Ok(()), Err(error)) => (
            format!(
                "WAL budget exceeded: replication slot {slot:?} retained {} of WAL and was dropped, but the drop could not be recorded: {}",
                human_bytes(retained),
                error.chain()
            ),
            "the next run stops on the dropped slot: start it with source.postgres.on_slot_loss = \"recreate\" (and snapshot = \"when_needed\") to snapshot anew".to_owned(),
        ),
        (Err(error), _) => (
            format!(
                "WAL budget exceeded: replication slot {slot:?} retained {} of WAL and could not be dropped: {}",
                human_bytes(retained),
                error.chain()
            ),
            // The line an operator copies: the name quoted as a literal, as doctor's fixes do.
            format!(
                "drop it by hand (SELECT pg_drop_replication_slot({})) to free the WAL; the next run then creates it anew and republishes the captured tables",
                crate::sql::quote_pg_literal(&slot)
            ),
        ),
    };
    tracing::error!(slot = %slot, hint = %hint, "{what}");
    shared.set_outcome(what, hint);
    board.update(|s| {
        if let Some(status) = &mut s.wal_budget {
            status.slot_dropped = dropped.is_ok();
        }
    });
    drop(run);
    shared.done.cancel();
    // A paused pipeline has no run to end: let the supervisor go on, so that it stops.
    board.resume();
}

/// Records the drop in the pipeline's state store; returns where.
async fn record_drop(
    config: &PgPipelineConfig,
    record: WalBudgetDrop,
) -> Result<String, PipelineError> {
    let mut state = match config.state_store {
        StateStoreKind::Local => SlotStateFile::open(&config.state_dir(), &config.name)?,
        StateStoreKind::Kafka => {
            let store = tokio::time::timeout(
                RECORD_DEADLINE,
                crate::kafka_state::KafkaStateStore::open(
                    &config.kafka,
                    config.state_topic(),
                    &config.name,
                ),
            )
            .await
            .map_err(|_| {
                PipelineError::retryable(
                    "the Kafka state store does not answer",
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "state topic"),
                )
            })??;
            SlotStateFile::open_in(Arc::new(store), &config.name)?
        }
    };
    let write = tokio::task::spawn_blocking(move || {
        let location = state.location();
        state.set_wal_budget_drop(record).map(|()| location)
    });
    match tokio::time::timeout(RECORD_DEADLINE, write).await {
        Ok(Ok(Ok(location))) => Ok(location),
        Ok(Ok(Err(error))) => Err(PipelineError::retryable("cannot write the state", error)),
        Ok(Err(error)) => Err(PipelineError::retryable("cannot write the state", error)),
        Err(_) => Err(PipelineError::retryable(
            "cannot write the state",
            std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the state store does not answer",
            ),
        )),
    }
}

/// Drops `slot` once no walsender streams from it: the closed replication connection's
/// walsender exits within moments; one still there after [`RELEASE_WAIT`] is terminated.
async fn drop_when_released(catalog: &PgCatalog, slot: &str) -> Result<(), PipelineError> {
    let client = catalog.client();
    let started = tokio::time::Instant::now();
    let mut terminated = false;
    loop {
        let row = client
            .query_opt(
                "SELECT active_pid FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map_err(|e| classify_pg("cannot read the slot", e))?;
        let Some(row) = row else {
            // Gone already (dropped by someone else).
            return Ok(());
        };
        match row.get::<_, Option<i32>>(0) {
            None => match catalog.drop_slot(slot).await {
                Ok(()) => return Ok(()),
                // Taken again in between: look again.
                Err(error) if started.elapsed() > DROP_DEADLINE => return Err(error),
                Err(_) => {}
            },
            Some(pid) if started.elapsed() > RELEASE_WAIT && !terminated => {
                tracing::warn!(
                    slot,
                    pid,
                    "WAL budget: the slot is still held by walsender {pid}: terminating it"
                );
                client
                    .execute("SELECT pg_terminate_backend($1)", &[&pid])
                    .await
                    .map_err(|e| classify_pg("cannot terminate the slot's walsender", e))?;
                terminated = true;
            }
            Some(pid) if started.elapsed() > DROP_DEADLINE => {
                return Err(PipelineError::fatal(
                    format!("the slot is still in use by process {pid}"),
                    "stop what streams from it",
                ));
            }
            Some(_) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

//! The WAL budget (`source.postgres.wal_budget`): the most WAL the pipeline's slot may make the
//! server keep, so the primary's disk is never sacrificed to the slot.
//!
//! A task beside the stream (its own SQL connection, never in the replication loop's await
//! chain, and alive while the pipeline is paused, restarting or stalled on Kafka, which is when
//! it matters) checks `pg_current_wal_lsn() - restart_lsn` of the slot every
//! `wal_budget_check_interval_ms`:
//!
//! - at 50 % and 80 % of the budget it warns: once per crossing in the log, in `/health`
//!   (`wal_budget`, with what holds the slot back), and in the metrics
//!   (`sluice_source_slot_retained_wal_bytes`, `sluice_source_wal_budget_level`);
//! - at 100 %, under `wal_budget_action = "alert"` (default) it keeps warning and never drops;
//!   under `"drop_slot"` it stops the run (which releases the slot), records in the state store
//!   that the slot was dropped by the budget ([`SlotRecord::wal_budget_drop`]), drops the slot
//!   and stops the pipeline with what happened and what the next run does: create the slot
//!   anew and republish every captured table (rows, and tombstones for the keys deleted in the
//!   gap; `snapshot = "when_needed"`).
//!
//! What holds the slot back, where it can be known: Kafka unreachable or delivery stalled (the
//! runtime's status), the pipeline paused or not streaming, a long-running transaction (the
//! oldest backend in `pg_stat_activity` whose transaction is at least as old as the slot's
//! `catalog_xmin`).
//!
//! [`SlotRecord::wal_budget_drop`]: super::slot_state::SlotRecord::wal_budget_drop

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{PgPipelineConfig, WalBudgetAction};
use super::setup::PgCatalog;
use super::slot_state::{SlotStateFile, WalBudgetDrop};
use crate::config::{StateStoreKind, human_bytes};
use crate::error::{PipelineError, classify_pg};
use crate::runtime::metrics as m;
use crate::runtime::status::{
    PipelineState, PipelineStatus, Role, StatusBoard, WalBudgetStatus, WalHolder, unix_ms,
};

/// A warning level is left downward only once the retained WAL is this share of the budget
/// (in percent) below its threshold, so a slot hovering at a threshold is not logged per check.
pub const HYSTERESIS_PERCENT: u64 = 5;

/// How long the `drop_slot` action waits for the stream to release the slot (the walsender of
/// the closed replication connection to exit) before it terminates that walsender.
const RELEASE_WAIT: Duration = Duration::from_secs(10);

/// How long the `drop_slot` action tries to drop the slot in all.
const DROP_DEADLINE: Duration = Duration::from_secs(60);

/// How long recording the drop in a Kafka state store may take (Kafka may be the reason the
/// budget ran out).
const RECORD_DEADLINE: Duration = Duration::from_secs(15);

/// How much of its budget the slot retains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum BudgetLevel {
    /// Below 50 %.
    #[default]
    Under,
    /// 50 % or more.
    Half,
    /// 80 % or more.
    High,
    /// 100 % or more.
    Exceeded,
}

impl BudgetLevel {
    /// The level of `retained` bytes against `budget` (> 0).
    pub fn of(retained: i64, budget: u64) -> Self {
        let retained = u128::try_from(retained).unwrap_or(0) * 100;
        let budget = u128::from(budget.max(1));
        if retained >= budget * 100 {
            Self::Exceeded
        } else if retained >= budget * 80 {
            Self::High
        } else if retained >= budget * 50 {
            Self::Half
        } else {
            Self::Under
        }
    }

    /// The percentage of the budget the level starts at.
    pub fn percent(self) -> u32 {
        match self {
            Self::Under => 0,
            Self::Half => 50,
            Self::High => 80,
            Self::Exceeded => 100,
        }
    }

    /// The level's name in `/health`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Under => "under",
            Self::Half => "warning_50",
            Self::High => "warning_80",
            Self::Exceeded => "exceeded",
        }
    }
}

/// The level last reported, so that each crossing is logged once (not once per check).
#[derive(Debug, Default)]
pub struct LevelWatch {
    level: BudgetLevel,
}

impl LevelWatch {
    /// The level after a check that found `retained` bytes against `budget`, and
    /// `Some((from, to))` when it changed. Up at once; down only once the retained WAL is
    /// [`HYSTERESIS_PERCENT`] of the budget below the current level's threshold.
    pub fn observe(
        &mut self,
        retained: i64,
        budget: u64,
    ) -> (BudgetLevel, Option<(BudgetLevel, BudgetLevel)>) {
        let raw = BudgetLevel::of(retained, budget);
        let next = if raw >= self.level {
            raw
        } else {
            let margin = i64::try_from(budget / 100 * HYSTERESIS_PERCENT).unwrap_or(i64::MAX);
            BudgetLevel::of(retained.saturating_add(margin), budget).min(self.level)
        };
        let from = self.level;
        self.level = next;
        (next, (next != from).then_some((from, next)))
    }
}

/// What holds the slot back, from the runtime's status: Kafka, delivery, the pipeline's state.
pub fn holders_from_status(status: &PipelineStatus, pipeline: &str) -> Vec<WalHolder> {
    let holder = |kind: &str, detail: String| WalHolder {
        kind: kind.to_owned(),
        detail,
    };
    let mut holders = Vec::new();
    if status.kafka_brokers_down {
        holders.push(holder(
            "kafka_unreachable",
            "Kafka is unreachable (every broker down): records wait unacknowledged, so the slot's position cannot advance".to_owned(),
        ));
    }
    match status.state {
        PipelineState::Paused => holders.push(holder(
            "paused",
            format!("the pipeline is paused (resume it: POST /api/v1/pipelines/{pipeline}/resume)"),
        )),
        PipelineState::Streaming => {
            let budget_full = status.inflight_limit_bytes > 0
                && status.inflight_bytes.saturating_mul(10)
                    >= status.inflight_limit_bytes.saturating_mul(9);
            let stalled = status.slot.as_ref().is_some_and(|s| s.stalled);
            if !status.kafka_brokers_down && (budget_full || stalled) {
                holders.push(holder(
                    "delivery_stalled",
                    format!(
                        "delivery to Kafka is stalled ({} of {} in flight{}): see last_error and the producer's metrics",
                        human_bytes(i64::try_from(status.inflight_bytes).unwrap_or(i64::MAX)),
                        human_bytes(i64::try_from(status.inflight_limit_bytes).unwrap_or(i64::MAX)),
                        if stalled { ", no progress" } else { "" }
                    ),
                ));
            }
        }
        PipelineState::Snapshotting => holders.push(holder(
            "not_streaming",
            "the initial snapshot runs: the slot stays at its consistent point until it is done"
                .to_owned(),
        )),
        state => holders.push(holder(
            "not_streaming",
            format!(
                "the pipeline is not streaming (state {}){}",
                state.name(),
                status
                    .last_error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        )),
    }
    holders
}

/// The slot as the budget sees it.
#[derive(Debug, Clone)]
pub struct RetainedWal {
    /// `pg_current_wal_lsn() - restart_lsn`.
    pub retained: i64,
    /// Whether a walsender streams from it.
    pub active: bool,
    /// `wal_status` (13+).
    pub wal_status: Option<String>,
    /// `safe_wal_size` (13+).
    pub safe_wal_size: Option<i64>,
}

/// Reads the WAL `slot` retains (`None`: no such slot).
///
/// # Errors
///
/// The query's failure.
pub async fn retained_wal(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<RetainedWal>, PipelineError> {
    let row = client
        .query_opt(
            "SELECT coalesce((pg_current_wal_lsn() - restart_lsn)::bigint, 0), active, \
                    wal_status, safe_wal_size \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(|e| classify_pg("cannot read the WAL the slot retains", e))?;
    Ok(row.map(|row| RetainedWal {
        retained: row.get(0),
        active: row.get(1),
        wal_status: row.get(2),
        safe_wal_size: row.get(3),
    }))
}

/// The oldest transaction that holds `slot` back: a client backend whose transaction (its xid,
/// or its snapshot's xmin) is at least as old as the slot's `catalog_xmin`.
///
/// # Errors
///
/// The query's failure.
pub async fn long_transaction(
    client: &tokio_postgres::Client,
    slot: &str,
) -> Result<Option<WalHolder>, PipelineError> {
    let row = client
        .query_opt(
            "SELECT a.pid, extract(epoch FROM now() - a.xact_start)::float8, \
                    coalesce(a.state, ''), coalesce(a.application_name, ''), \
                    coalesce(a.usename::text, '') \
             FROM pg_stat_activity a, pg_replication_slots s \
             WHERE s.slot_name = $1 AND s.catalog_xmin IS NOT NULL \
               AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid() \
               AND a.xact_start IS NOT NULL \
               AND greatest(age(a.backend_xid), age(a.backend_xmin)) >= age(s.catalog_xmin) \
             ORDER BY a.xact_start LIMIT 1",
            &[&slot],
        )
        .await
        .map_err(|e| classify_pg("cannot read pg_stat_activity", e))?;
    Ok(row.map(|row| {
        let pid: i32 = row.get(0);
        let open: f64 = row.get(1);
        let state: String = row.get(2);
        let application: String = row.get(3);
        let user: String = row.get(4);
        WalHolder {
            kind: "long_transaction".to_owned(),
            detail: format!(
                "a transaction open for {open:.0} s holds the slot's restart point (pid {pid}, user {user:?}, application {application:?}, state {state}): end it, or SELECT pg_terminate_backend({pid})"
            ),
        }
    }))
}

/// The sentence `/health` and the log show from 50 % on.
pub fn warning(
    level: BudgetLevel,
    retained: i64,
    budget: u64,
    action: WalBudgetAction,
    holders: &[WalHolder],
) -> Option<String> {
    if level == BudgetLevel::Under {
        return None;
    }
    let held = if holders.is_empty() {
        "nothing known holds it: the pipeline may just be behind".to_owned()
    } else {
        holders
            .iter()
            .map(|h| h.detail.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let next = match (level, action) {
        (BudgetLevel::Exceeded, WalBudgetAction::Alert) => {
            "wal_budget_action = \"alert\": the slot is kept".to_owned()
        }
        (BudgetLevel::Exceeded, WalBudgetAction::DropSlot) => {
            "wal_budget_action = \"drop_slot\": the slot is dropped".to_owned()
        }
        (_, WalBudgetAction::DropSlot) => {
            "at 100 % the slot is dropped (wal_budget_action = \"drop_slot\")".to_owned()
        }
        (_, WalBudgetAction::Alert) => {
            "at 100 % only this warning (wal_budget_action = \"alert\")".to_owned()
        }
    };
    Some(format!(
        "the slot retains {} of WAL, {}% of wal_budget {}; held back by: {held}; {next}",
        human_bytes(retained),
        retained.saturating_mul(100) / i64::try_from(budget.max(1)).unwrap_or(i64::MAX),
        human_bytes(i64::try_from(budget).unwrap_or(i64::MAX)),
    ))
}

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

    fn set_outcome(&self, what: String, hint: String) {
        *self
            .outcome
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some((what, hint));
    }
}

/// The budget's task of one pipeline: it runs until dropped.
#[derive(Debug)]
pub struct WalBudget {
    shared: Arc<BudgetShared>,
    task: JoinHandle<()>,
}

impl WalBudget {
    /// Starts checking the slot of `config` (with a budget set) against its budget.
    pub fn start(config: Arc<PgPipelineConfig>, board: Arc<StatusBoard>) -> Self {
        let shared = Arc::new(BudgetShared::default());
        let task = tokio::spawn(watch(config, board, Arc::clone(&shared)));
        Self { shared, task }
    }

    /// What the runs share with the task.
    pub fn shared(&self) -> &Arc<BudgetShared> {
        &self.shared
    }
}

impl Drop for WalBudget {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The task: one check per interval, for the pipeline's life.
async fn watch(config: Arc<PgPipelineConfig>, board: Arc<StatusBoard>, shared: Arc<BudgetShared>) {
    let pg = &config.source;
    let budget = pg.wal_budget;
    let slot = config.slot_name();
    metrics::gauge!(m::WAL_BUDGET).set(budget as f64);
    let mut tick = tokio::time::interval(Duration::from_millis(pg.wal_budget_check_interval_ms));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut catalog: Option<PgCatalog> = None;
    let mut levels = LevelWatch::default();
    loop {
        tick.tick().await;
        if board.role() == Some(Role::Standby) {
            // The active instance watches (and acts on) the slot.
            continue;
        }
        if catalog.is_none() {
            match PgCatalog::connect(&config).await {
                Ok(connected) => catalog = Some(connected),
                Err(error) => {
                    check_failed(&board, &error, budget, pg.wal_budget_action);
                    continue;
                }
            }
        }
        let Some(client) = catalog.as_ref().map(PgCatalog::client) else {
            continue;
        };
        let found = match retained_wal(client, &slot).await {
            Ok(found) => found,
            Err(error) => {
                check_failed(&board, &error, budget, pg.wal_budget_action);
                catalog = None;
                continue;
            }
        };
        let Some(found) = found else {
            // No slot (yet, or any more): nothing retained.
            metrics::gauge!(m::SLOT_RETAINED_WAL).set(0.0);
            continue;
        };
        let (level, crossing) = levels.observe(found.retained, budget);
        let mut holders = if level == BudgetLevel::Under {
            Vec::new()
        } else {
            holders_from_status(&board.snapshot(), &config.name)
        };
        if level != BudgetLevel::Under {
            match long_transaction(client, &slot).await {
                Ok(Some(holder)) => holders.push(holder),
                Ok(None) => {}
                Err(error) => {
                    tracing::debug!(error = %error.chain(), "cannot look for long transactions")
                }
            }
        }
        let warning = warning(
            level,
            found.retained,
            budget,
            pg.wal_budget_action,
            &holders,
        );
        metrics::gauge!(m::SLOT_RETAINED_WAL).set(found.retained as f64);
        metrics::gauge!(m::WAL_BUDGET_LEVEL).set(f64::from(level.percent()));
        board.update(|s| {
            s.wal_budget = Some(WalBudgetStatus {
                budget_bytes: budget,
                retained_bytes: found.retained,
                used_percent: found.retained as f64 * 100.0 / budget.max(1) as f64,
                level: level.name().to_owned(),
                action: pg.wal_budget_action.as_str().to_owned(),
                warning: warning.clone(),
                held_by: holders.clone(),
                wal_status: found.wal_status.clone(),
                safe_wal_size: found.safe_wal_size,
                slot_dropped: false,
                check_error: None,
                checked_unix_ms: unix_ms(),
            });
        });
        if let Some((from, to)) = crossing {
            let text = warning.as_deref().unwrap_or("");
            if to > from {
                tracing::warn!(
                    slot = %slot,
                    retained_bytes = found.retained,
                    budget_bytes = budget,
                    level = to.name(),
                    "WAL budget: {}% reached: {text}",
                    to.percent()
                );
            } else {
                tracing::info!(
                    slot = %slot,
                    retained_bytes = found.retained,
                    budget_bytes = budget,
                    level = to.name(),
                    "WAL budget: back under {}% of the budget",
                    from.percent()
                );
            }
        }
        if level == BudgetLevel::Exceeded && pg.wal_budget_action == WalBudgetAction::DropSlot {
            let Some(catalog) = catalog.take() else {
                continue;
            };
            drop_slot(&config, &board, &shared, &catalog, found.retained).await;
            return;
        }
    }
}

/// A check that could not be made: shown in the status (the previous figures stay).
fn check_failed(board: &StatusBoard, error: &PipelineError, budget: u64, action: WalBudgetAction) {
    tracing::debug!(error = %error.chain(), "WAL budget: cannot check the slot");
    board.update(|s| {
        let status = s.wal_budget.get_or_insert_with(|| WalBudgetStatus {
            budget_bytes: budget,
            retained_bytes: 0,
            used_percent: 0.0,
            level: BudgetLevel::Under.name().to_owned(),
            action: action.as_str().to_owned(),
            warning: None,
            held_by: Vec::new(),
            wal_status: None,
            safe_wal_size: None,
            slot_dropped: false,
            check_error: None,
            checked_unix_ms: 0,
        });
        status.check_error = Some(error.chain());
    });
}

/// The `drop_slot` action: ends the run (releasing the slot), records the drop, drops the slot,
/// and leaves the error that stops the pipeline.
async fn drop_slot(
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
            format!(
                "drop it by hand (SELECT pg_drop_replication_slot('{slot}')) to free the WAL; the next run then creates it anew and republishes the captured tables"
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn mib(n: u64) -> i64 {
        i64::try_from(n * MIB).unwrap()
    }

    #[test]
    fn levels_start_at_50_80_and_100_percent() {
        let budget = 100 * MIB;
        assert_eq!(BudgetLevel::of(0, budget), BudgetLevel::Under);
        assert_eq!(BudgetLevel::of(mib(50) - 1, budget), BudgetLevel::Under);
        assert_eq!(BudgetLevel::of(mib(50), budget), BudgetLevel::Half);
        assert_eq!(BudgetLevel::of(mib(80) - 1, budget), BudgetLevel::Half);
        assert_eq!(BudgetLevel::of(mib(80), budget), BudgetLevel::High);
        assert_eq!(BudgetLevel::of(mib(100) - 1, budget), BudgetLevel::High);
        assert_eq!(BudgetLevel::of(mib(100), budget), BudgetLevel::Exceeded);
        assert_eq!(
            BudgetLevel::of(i64::MAX, 1),
            BudgetLevel::Exceeded,
            "no overflow"
        );
        assert_eq!(BudgetLevel::of(-5, budget), BudgetLevel::Under);
    }

    #[test]
    fn each_crossing_is_reported_once_not_per_check() {
        let budget = 100 * MIB;
        let mut watch = LevelWatch::default();
        assert_eq!(watch.observe(mib(10), budget), (BudgetLevel::Under, None));
        assert_eq!(
            watch.observe(mib(55), budget),
            (
                BudgetLevel::Half,
                Some((BudgetLevel::Under, BudgetLevel::Half))
            )
        );
        assert_eq!(watch.observe(mib(60), budget), (BudgetLevel::Half, None));
        assert_eq!(watch.observe(mib(70), budget), (BudgetLevel::Half, None));
        // Several thresholds at once: one crossing, to the highest.
        assert_eq!(
            watch.observe(mib(120), budget),
            (
                BudgetLevel::Exceeded,
                Some((BudgetLevel::Half, BudgetLevel::Exceeded))
            )
        );
        assert_eq!(
            watch.observe(mib(130), budget),
            (BudgetLevel::Exceeded, None)
        );
    }

    #[test]
    fn a_slot_hovering_at_a_threshold_is_not_reported_per_check() {
        let budget = 100 * MIB;
        let mut watch = LevelWatch::default();
        assert_eq!(watch.observe(mib(81), budget).0, BudgetLevel::High);
        // Just under 80 %: still 80 % (within the hysteresis).
        for retained in [mib(79), mib(81), mib(78), mib(80), mib(76)] {
            assert_eq!(watch.observe(retained, budget), (BudgetLevel::High, None));
        }
        // 5 % below: down to 50 %, reported once.
        assert_eq!(
            watch.observe(mib(74), budget),
            (
                BudgetLevel::Half,
                Some((BudgetLevel::High, BudgetLevel::Half))
            )
        );
        // Caught up: back under.
        assert_eq!(
            watch.observe(mib(1), budget),
            (
                BudgetLevel::Under,
                Some((BudgetLevel::Half, BudgetLevel::Under))
            )
        );
    }

    fn status(state: PipelineState) -> PipelineStatus {
        let board = StatusBoard::new("orders", "on_failure");
        board.set_state(state);
        board.snapshot()
    }

    #[test]
    fn what_holds_the_slot_comes_from_the_runtime_s_status() {
        let kinds = |status: &PipelineStatus| {
            holders_from_status(status, "orders")
                .into_iter()
                .map(|h| h.kind)
                .collect::<Vec<_>>()
        };
        let mut streaming = status(PipelineState::Streaming);
        assert!(kinds(&streaming).is_empty());
        streaming.kafka_brokers_down = true;
        assert_eq!(kinds(&streaming), ["kafka_unreachable"]);
        streaming.kafka_brokers_down = false;
        streaming.inflight_limit_bytes = 1000;
        streaming.inflight_bytes = 950;
        assert_eq!(kinds(&streaming), ["delivery_stalled"]);
        let paused = status(PipelineState::Paused);
        let holders = holders_from_status(&paused, "orders");
        assert_eq!(holders[0].kind, "paused");
        assert!(
            holders[0]
                .detail
                .contains("/api/v1/pipelines/orders/resume")
        );
        let mut backoff = status(PipelineState::Backoff);
        backoff.last_error = Some("cannot connect".into());
        let holders = holders_from_status(&backoff, "orders");
        assert_eq!(holders[0].kind, "not_streaming");
        assert!(
            holders[0].detail.contains("backoff): cannot connect"),
            "{holders:?}"
        );
    }

    #[test]
    fn the_warning_names_the_share_what_holds_the_slot_and_the_action() {
        let holders = [WalHolder {
            kind: "paused".into(),
            detail: "the pipeline is paused".into(),
        }];
        assert_eq!(
            warning(
                BudgetLevel::Under,
                mib(1),
                100 * MIB,
                WalBudgetAction::Alert,
                &holders
            ),
            None
        );
        let text = warning(
            BudgetLevel::High,
            mib(85),
            100 * MIB,
            WalBudgetAction::DropSlot,
            &holders,
        )
        .unwrap();
        assert_eq!(
            text,
            "the slot retains 85.0 MiB of WAL, 85% of wal_budget 100.0 MiB; held back by: the pipeline is paused; at 100 % the slot is dropped (wal_budget_action = \"drop_slot\")"
        );
        let text = warning(
            BudgetLevel::Exceeded,
            mib(101),
            100 * MIB,
            WalBudgetAction::Alert,
            &[],
        )
        .unwrap();
        assert!(text.contains("nothing known holds it"), "{text}");
        assert!(
            text.ends_with("wal_budget_action = \"alert\": the slot is kept"),
            "{text}"
        );
    }
}

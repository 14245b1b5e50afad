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
//! oldest session of the slot's database whose transaction has written and has been open for
//! 5 s or more: decoding restarts before its first change while it is open).
//!
//! - [`holders`]: what holds the slot back;
//! - `action`: the `drop_slot` action.
//!
//! [`SlotRecord::wal_budget_drop`]: super::slot_state::SlotRecord::wal_budget_drop

mod action;
pub mod holders;
mod shared;

pub use self::shared::BudgetShared;

use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::config::{PgPipelineConfig, WalBudgetAction};
use super::setup::PgCatalog;
use crate::config::human_bytes;
use crate::error::{PipelineError, classify_pg};
use crate::runtime::metrics as m;
use crate::runtime::status::{Role, StatusBoard, WalBudgetStatus, WalHolder, unix_ms};

/// A warning level is left downward only once the retained WAL is this share of the budget
/// (in percent) below its threshold, so a slot hovering at a threshold is not logged per check.
pub const HYSTERESIS_PERCENT: u64 = 5;

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
            &format!(
                "SELECT coalesce(({} - restart_lsn)::bigint, 0), active, \
                    wal_status, safe_wal_size \
             FROM pg_replication_slots WHERE slot_name = $1",
                super::setup::SERVER_WAL_LSN
            ),
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

/// The task: one check per interval, for the pipeline's life (or until it dropped the slot).
async fn watch(config: Arc<PgPipelineConfig>, board: Arc<StatusBoard>, shared: Arc<BudgetShared>) {
    metrics::gauge!(m::WAL_BUDGET).set(config.source.wal_budget as f64);
    let mut tick = tokio::time::interval(Duration::from_millis(
        config.source.wal_budget_check_interval_ms,
    ));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watcher = Watcher {
        slot: config.slot_name(),
        config,
        board,
        catalog: None,
        levels: LevelWatch::default(),
    };
    loop {
        tick.tick().await;
        if watcher.board.role() == Some(Role::Standby) {
            // The active instance watches (and acts on) the slot.
            continue;
        }
        let Some((level, retained)) = watcher.check().await else {
            continue;
        };
        if level == BudgetLevel::Exceeded
            && watcher.config.source.wal_budget_action == WalBudgetAction::DropSlot
            && let Some(catalog) = watcher.catalog.take()
        {
            action::drop_slot(&watcher.config, &watcher.board, &shared, &catalog, retained).await;
            return;
        }
    }
}

/// The budget task's state between checks.
struct Watcher {
    config: Arc<PgPipelineConfig>,
    board: Arc<StatusBoard>,
    slot: String,
    /// Its own SQL connection, made again after a failure.
    catalog: Option<PgCatalog>,
    levels: LevelWatch,
}

impl Watcher {
    /// One check: reads the slot, reports it (status, metrics, the log on a crossing); returns
    /// the level and the retained WAL (`None`: no slot, or the check failed).
    async fn check(&mut self) -> Option<(BudgetLevel, i64)> {
        let budget = self.config.source.wal_budget;
        if self.catalog.is_none() {
            match PgCatalog::connect(&self.config).await {
                Ok(connected) => self.catalog = Some(connected),
                Err(error) => {
                    self.failed(&error);
                    return None;
                }
            }
        }
        let client = self.catalog.as_ref()?.client();
        let found = match retained_wal(client, &self.slot).await {
            Ok(Some(found)) => found,
            Ok(None) => {
                // No slot (yet, or any more): nothing retained.
                metrics::gauge!(m::SLOT_RETAINED_WAL).set(0.0);
                return None;
            }
            Err(error) => {
                self.failed(&error);
                self.catalog = None;
                return None;
            }
        };
        let (level, crossing) = self.levels.observe(found.retained, budget);
        let mut held_by = Vec::new();
        if level != BudgetLevel::Under {
            held_by = holders::from_status(&self.board.snapshot(), &self.config.name);
            match holders::long_transaction(client, &self.slot).await {
                Ok(holder) => held_by.extend(holder),
                Err(error) => {
                    tracing::debug!(error = %error.chain(), "cannot look for long transactions");
                }
            }
        }
        self.report(&found, level, crossing, held_by);
        Some((level, found.retained))
    }

    /// Shows a check's result in the status and the metrics, and a crossing in the log.
    fn report(
        &self,
        found: &RetainedWal,
        level: BudgetLevel,
        crossing: Option<(BudgetLevel, BudgetLevel)>,
        held_by: Vec<WalHolder>,
    ) {
        let (budget, action) = (
            self.config.source.wal_budget,
            self.config.source.wal_budget_action,
        );
        let warning = warning(level, found.retained, budget, action, &held_by);
        metrics::gauge!(m::SLOT_RETAINED_WAL).set(found.retained as f64);
        metrics::gauge!(m::WAL_BUDGET_LEVEL).set(f64::from(level.percent()));
        if let Some((from, to)) = crossing {
            let text = warning.as_deref().unwrap_or("");
            if to > from {
                tracing::warn!(slot = %self.slot, retained_bytes = found.retained, budget_bytes = budget, level = to.name(), "WAL budget: {}% reached: {text}", to.percent());
            } else {
                tracing::info!(slot = %self.slot, retained_bytes = found.retained, budget_bytes = budget, level = to.name(), "WAL budget: back under {}% of the budget", from.percent());
            }
        }
        self.board.update(|s| {
            s.wal_budget = Some(WalBudgetStatus {
                budget_bytes: budget,
                retained_bytes: found.retained,
                used_percent: found.retained as f64 * 100.0 / budget.max(1) as f64,
                level: level.name().to_owned(),
                action: action.as_str().to_owned(),
                warning,
                held_by,
                wal_status: found.wal_status.clone(),
                safe_wal_size: found.safe_wal_size,
                slot_dropped: false,
                check_error: None,
                checked_unix_ms: unix_ms(),
            });
        });
    }

    /// A check that could not be made: shown in the status (the previous figures stay).
    fn failed(&self, error: &PipelineError) {
        tracing::debug!(error = %error.chain(), "WAL budget: cannot check the slot");
        let (budget, action) = (
            self.config.source.wal_budget,
            self.config.source.wal_budget_action,
        );
        self.board.update(|s| {
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

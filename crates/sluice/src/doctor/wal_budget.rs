//! The pipeline's WAL budget (`source.postgres.wal_budget`) against the server: a budget at or
//! above `max_slot_wal_keep_size` never acts (the server invalidates the slot first), and the
//! WAL the pipeline's slot retains now against the budget, with what holds it back.

use tokio_postgres::Client;

use super::target::{Target, setting_number};
use super::{Finding, Severity, finding};
use crate::config::human_bytes;
use crate::source::postgres::config::WalBudgetAction;
use crate::source::postgres::wal_budget::{self, BudgetLevel};

/// Runs the checks (a pipeline file is needed: the budget is its).
pub(super) async fn checks(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let Some(pipeline) = &target.pipeline else {
        return Ok(());
    };
    let pg = &pipeline.source;
    let budget = pg.wal_budget;
    // Megabytes; -1 = unlimited.
    let keep = setting_number(client, "max_slot_wal_keep_size").await?;
    if budget == 0 {
        findings.push(finding(
            "pg.wal_budget",
            Severity::Info,
            "no WAL budget: nothing in sluice limits the WAL its slot makes the server keep while the pipeline is stopped or stalled",
            &[("max_slot_wal_keep_size_mb", keep.into())],
            "set source.postgres.wal_budget (e.g. \"20GiB\", below the WAL disk's free space) to be warned at 50 % and 80 %, and wal_budget_action = \"drop_slot\" with snapshot = \"when_needed\" to drop the slot at 100 %",
        ));
        return Ok(());
    }
    findings.push(budget_against_keep_size(budget, pg.wal_budget_action, keep));
    slot_against_budget(client, target, budget, pg.wal_budget_action, findings).await;
    Ok(())
}

/// The budget against `max_slot_wal_keep_size` (`keep`, in MB; -1 = unlimited).
fn budget_against_keep_size(budget: u64, action: WalBudgetAction, keep: i64) -> Finding {
    let evidence = [
        ("wal_budget_bytes", budget.into()),
        ("wal_budget_action", action.as_str().into()),
        ("max_slot_wal_keep_size_mb", keep.into()),
    ];
    let keep_bytes = u64::try_from(keep).ok().map(|mb| mb << 20);
    match keep_bytes {
        Some(keep_bytes) if budget >= keep_bytes => finding(
            "pg.wal_budget",
            Severity::Warning,
            format!(
                "wal_budget {} is not below max_slot_wal_keep_size ({keep} MB): the server invalidates the slot (wal_status = lost) before the budget acts, and the pipeline then stops on a lost slot",
                human_bytes(i64::try_from(budget).unwrap_or(i64::MAX))
            ),
            &evidence,
            format!(
                "lower source.postgres.wal_budget below {} (e.g. to 80 % of it), or raise max_slot_wal_keep_size",
                human_bytes(i64::try_from(keep_bytes).unwrap_or(i64::MAX))
            ),
        ),
        None if action == WalBudgetAction::Alert => finding(
            "pg.wal_budget",
            Severity::Info,
            format!(
                "wal_budget {} with wal_budget_action = \"alert\" and max_slot_wal_keep_size = -1: past the budget sluice only warns, and nothing limits the WAL the slot retains",
                human_bytes(i64::try_from(budget).unwrap_or(i64::MAX))
            ),
            &evidence,
            "set wal_budget_action = \"drop_slot\" (with snapshot = \"when_needed\"), or max_slot_wal_keep_size, below the WAL disk's free space",
        ),
        _ => finding(
            "pg.wal_budget",
            Severity::Ok,
            format!(
                "wal_budget {} ({}), max_slot_wal_keep_size {}",
                human_bytes(i64::try_from(budget).unwrap_or(i64::MAX)),
                action.as_str(),
                if keep < 0 {
                    "unlimited".to_owned()
                } else {
                    format!("{keep} MB")
                }
            ),
            &evidence,
            "",
        ),
    }
}

/// The WAL the pipeline's slot retains now against the budget (when the slot exists).
async fn slot_against_budget(
    client: &Client,
    target: &Target,
    budget: u64,
    action: WalBudgetAction,
    findings: &mut Vec<Finding>,
) {
    let Some(slot) = target.pipeline.as_ref().map(|p| p.slot_name()) else {
        return;
    };
    let Ok(Some(found)) = wal_budget::retained_wal(client, &slot).await else {
        return;
    };
    let level = BudgetLevel::of(found.retained, budget);
    let mut holders = Vec::new();
    if !found.active {
        holders.push(crate::runtime::status::WalHolder {
            kind: "not_running".to_owned(),
            detail: "the pipeline is not running (its slot is inactive): start it, or see its /health for a pause".to_owned(),
        });
    }
    if let Ok(Some(holder)) = wal_budget::holders::long_transaction(client, &slot).await {
        holders.push(holder);
    }
    let evidence = [
        ("slot", slot.clone().into()),
        ("retained_wal_bytes", found.retained.into()),
        ("wal_budget_bytes", budget.into()),
        ("level", level.name().into()),
        ("active", found.active.into()),
        (
            "wal_status",
            found.wal_status.clone().unwrap_or_default().into(),
        ),
        (
            "safe_wal_size",
            found
                .safe_wal_size
                .map_or(serde_json::Value::Null, Into::into),
        ),
    ];
    let (severity, summary) =
        match wal_budget::warning(level, found.retained, budget, action, &holders) {
            None => (
                Severity::Ok,
                format!(
                    "slot {slot:?} retains {} of WAL, under half of wal_budget {}",
                    human_bytes(found.retained),
                    human_bytes(i64::try_from(budget).unwrap_or(i64::MAX))
                ),
            ),
            Some(warning) => (
                match level {
                    BudgetLevel::Under | BudgetLevel::Half => Severity::Info,
                    BudgetLevel::High => Severity::Warning,
                    BudgetLevel::Exceeded => Severity::Critical,
                },
                warning,
            ),
        };
    let fix = if severity == Severity::Ok {
        String::new()
    } else {
        "remove what holds the slot back (above) so the pipeline catches up; the retained WAL falls once the slot's restart_lsn moves".to_owned()
    };
    findings.push(finding(
        "pg.wal_budget_slot",
        severity,
        summary,
        &evidence,
        fix,
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_at_or_above_max_slot_wal_keep_size_never_acts() {
        let gib = 1u64 << 30;
        let above = budget_against_keep_size(20 * gib, WalBudgetAction::DropSlot, 10 * 1024);
        assert_eq!(above.severity, Severity::Warning);
        assert!(
            above
                .summary
                .contains("not below max_slot_wal_keep_size (10240 MB)"),
            "{}",
            above.summary
        );
        assert!(above.fix.contains("below 10.0 GiB"), "{}", above.fix);
        let equal = budget_against_keep_size(10 * gib, WalBudgetAction::Alert, 10 * 1024);
        assert_eq!(equal.severity, Severity::Warning);
        let below = budget_against_keep_size(8 * gib, WalBudgetAction::DropSlot, 10 * 1024);
        assert_eq!(below.severity, Severity::Ok);
        assert_eq!(
            below.summary,
            "wal_budget 8.0 GiB (drop_slot), max_slot_wal_keep_size 10240 MB"
        );
        // -1: unlimited. Dropping is then the only limit; alerting limits nothing.
        let unlimited = budget_against_keep_size(8 * gib, WalBudgetAction::DropSlot, -1);
        assert_eq!(unlimited.severity, Severity::Ok);
        let alert = budget_against_keep_size(8 * gib, WalBudgetAction::Alert, -1);
        assert_eq!(alert.severity, Severity::Info);
        assert!(
            alert.summary.contains("nothing limits"),
            "{}",
            alert.summary
        );
    }
}

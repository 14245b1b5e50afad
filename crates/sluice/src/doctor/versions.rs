//! Checks that depend on the server's major version: what the pipeline file asks for that the
//! server cannot do (row filters and column lists before 15, generated columns before 18), and
//! PostgreSQL 18's `idle_replication_slot_timeout`, which invalidates a slot left inactive too
//! long. The table of what works from which version is docs/postgres-versions.md.

use tokio_postgres::Client;

use super::target::{Target, setting_number};
use super::{Finding, Severity, finding};
use crate::sql::quote_pg_literal;

/// Runs the checks (`version`: the server's major version).
pub(super) async fn checks(
    client: &Client,
    target: &Target,
    version: i64,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    if let Some(pipeline) = &target.pipeline {
        let pg = &pipeline.source;
        let evidence = [("server_version", version.into())];
        if version < 15 && !pg.row_filters.is_empty() {
            findings.push(finding(
                "pg.row_filters_unsupported",
                Severity::Critical,
                format!(
                    "source.postgres.row_filters needs PostgreSQL 15 or later (publication row filters); the server is {version}: the pipeline refuses to start"
                ),
                &evidence,
                "remove source.postgres.row_filters (sluice does not evaluate SQL conditions itself), or upgrade PostgreSQL",
            ));
        }
        if version < 15 && !pg.columns.exclude.is_empty() {
            findings.push(finding(
                "pg.column_lists_unsupported",
                Severity::Info,
                format!(
                    "PostgreSQL {version} has no publication column lists (15 or later): the columns of source.postgres.columns.exclude leave the server and sluice drops them"
                ),
                &evidence,
                "",
            ));
        }
        if version < 18 && pg.publish_generated_columns {
            findings.push(finding(
                "pg.generated_columns_unsupported",
                Severity::Critical,
                format!(
                    "source.postgres.publish_generated_columns = true needs PostgreSQL 18 or later; the server is {version}: the pipeline refuses to start"
                ),
                &evidence,
                "remove source.postgres.publish_generated_columns (or set it to false), or upgrade PostgreSQL",
            ));
        }
    }
    if version >= 18 {
        idle_timeout(client, target, findings).await?;
    }
    Ok(())
}

/// `idle_replication_slot_timeout` (PostgreSQL 18): a slot inactive longer than it is
/// invalidated at the next checkpoint. Names the slots it invalidated and those it will.
async fn idle_timeout(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    // Seconds (the setting's unit); 0 disables it.
    let timeout = setting_number(client, "idle_replication_slot_timeout").await?;
    let own_slot = target.pipeline.as_ref().map(|p| p.slot_name());
    let rows = client
        .query(
            "SELECT slot_name::text, active, coalesce(invalidation_reason, ''), synced, \
                    coalesce(extract(epoch FROM now() - inactive_since)::bigint, -1), \
                    coalesce(inactive_since::text, '') \
             FROM pg_replication_slots WHERE slot_type = 'logical' ORDER BY 1",
            &[],
        )
        .await?;
    let fix = format!(
        "start the slot's consumer (`sluice run`) before then, or raise the timeout above the longest pause a pipeline may have: ALTER SYSTEM SET idle_replication_slot_timeout = 0 (off; it is {timeout} s); SELECT pg_reload_conf()"
    );
    let mut reported_own = false;
    for row in &rows {
        let name: String = row.get(0);
        let active: bool = row.get(1);
        let reason: String = row.get(2);
        let synced: bool = row.get(3);
        let idle_seconds: i64 = row.get(4);
        let since: String = row.get(5);
        let owned = own_slot.as_deref() == Some(name.as_str());
        let evidence = [
            ("slot", name.clone().into()),
            ("idle_replication_slot_timeout_s", timeout.into()),
            ("inactive_since", since.clone().into()),
            ("invalidation_reason", reason.clone().into()),
            ("owned_by_this_pipeline", owned.into()),
        ];
        if reason == "idle_timeout" {
            findings.push(finding(
                "pg.slot_idle_timeout",
                Severity::Critical,
                format!(
                    "slot {name:?} was invalidated by idle_replication_slot_timeout (inactive since {since}): its consumer has lost changes"
                ),
                &evidence,
                format!(
                    "re-snapshot its consumer's tables (for sluice: on_slot_loss = \"recreate\" with snapshot = \"when_needed\"), then SELECT pg_drop_replication_slot({}); and raise idle_replication_slot_timeout (or set it to 0)",
                    quote_pg_literal(&name)
                ),
            ));
            reported_own |= owned;
            continue;
        }
        // Synced copies on a standby are exempt; active slots are not idle.
        if timeout <= 0 || active || synced || !reason.is_empty() || idle_seconds < 0 {
            continue;
        }
        let left = timeout - idle_seconds;
        findings.push(finding(
            "pg.slot_idle_timeout",
            Severity::Warning,
            if left > 0 {
                format!(
                    "slot {name:?} has been inactive for {idle_seconds} s: idle_replication_slot_timeout ({timeout} s) invalidates it at the first checkpoint after {left} s more"
                )
            } else {
                format!(
                    "slot {name:?} has been inactive for {idle_seconds} s, past idle_replication_slot_timeout ({timeout} s): the next checkpoint invalidates it"
                )
            },
            &evidence,
            fix.clone(),
        ));
        reported_own |= owned;
    }
    if let Some(own) = own_slot
        && timeout > 0
        && !reported_own
    {
        findings.push(finding(
            "pg.slot_idle_timeout",
            Severity::Info,
            format!(
                "idle_replication_slot_timeout = {timeout} s: if this pipeline is stopped longer than that, its slot {own:?} is invalidated and the pipeline must re-snapshot"
            ),
            &[
                ("slot", own.into()),
                ("idle_replication_slot_timeout_s", timeout.into()),
            ],
            "",
        ));
    }
    Ok(())
}

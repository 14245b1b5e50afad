//! `sluice slots` for PostgreSQL: every replication slot with its lag and whether sluice owns it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::config::human_bytes;
use crate::pg_connect::connect_sql_url;
use crate::source::postgres::config::PgPipelineConfig;
use crate::source::postgres::setup::SERVER_WAL_LSN;

/// One replication slot, for `sluice slots`.
#[derive(Debug, Clone, Serialize)]
pub struct SlotRow {
    /// Name.
    pub slot: String,
    /// Output plugin (empty for physical slots).
    pub plugin: String,
    /// `logical` or `physical`.
    pub slot_type: String,
    /// Database (logical slots).
    pub database: Option<String>,
    /// Whether a connection streams from it.
    pub active: bool,
    /// The walsender's pid while active.
    pub active_pid: Option<i32>,
    /// WAL between the server's position and the slot's restart LSN (retained).
    pub restart_lag_bytes: Option<i64>,
    /// WAL between the server's position and the slot's confirmed flush LSN.
    pub confirmed_lag_bytes: Option<i64>,
    /// `wal_status`.
    pub wal_status: Option<String>,
    /// `safe_wal_size`: bytes that can still be written before the slot is invalidated.
    pub safe_wal_size: Option<i64>,
    /// Whether sluice owns it (the pipeline's slot, or a `sluice_` slot without a pipeline).
    pub sluice: bool,
}

/// Every replication slot.
///
/// # Errors
///
/// The connection or query error.
pub async fn slots(url: &str, pipeline: Option<&PgPipelineConfig>) -> anyhow::Result<Vec<SlotRow>> {
    let (client, task) = connect_sql_url(url).await?;
    let rows = client
        .query(
            &format!(
                "SELECT slot_name::text, coalesce(plugin::text, ''), slot_type, database::text, active, active_pid, \
                    ({SERVER_WAL_LSN} - restart_lsn)::bigint, \
                    ({SERVER_WAL_LSN} - confirmed_flush_lsn)::bigint, wal_status, safe_wal_size \
             FROM pg_replication_slots ORDER BY 1"
            ),
            &[],
        )
        .await?;
    drop(client);
    let _ = task.await;
    let own = pipeline.map(PgPipelineConfig::slot_name);
    Ok(rows
        .iter()
        .map(|r| {
            let slot: String = r.get(0);
            SlotRow {
                sluice: own
                    .as_deref()
                    .map_or_else(|| slot.starts_with("sluice_"), |own| own == slot),
                slot,
                plugin: r.get(1),
                slot_type: r.get(2),
                database: r.get(3),
                active: r.get(4),
                active_pid: r.get(5),
                restart_lag_bytes: r.get(6),
                confirmed_lag_bytes: r.get(7),
                wal_status: r.get(8),
                safe_wal_size: r.get(9),
            }
        })
        .collect())
}

/// Human table of slots.
pub fn render_slots(rows: &[SlotRow]) -> String {
    let mut out = format!(
        "{:<32} {:<9} {:<8} {:<14} {:>12} {:>12} {:<10} {:>12} {}\n",
        "SLOT", "TYPE", "PLUGIN", "STATE", "RETAINED", "UNCONFIRMED", "WAL", "SAFE", "SLUICE"
    );
    let bytes = |v: Option<i64>| v.map_or_else(|| "-".to_owned(), human_bytes);
    for r in rows {
        let state = match r.active_pid {
            Some(pid) if r.active => format!("active {pid}"),
            _ if r.active => "active".to_owned(),
            _ => "INACTIVE".to_owned(),
        };
        let _ = writeln!(
            out,
            "{:<32} {:<9} {:<8} {:<14} {:>12} {:>12} {:<10} {:>12} {}",
            r.slot,
            r.slot_type,
            r.plugin,
            state,
            bytes(r.restart_lag_bytes),
            bytes(r.confirmed_lag_bytes),
            r.wal_status.as_deref().unwrap_or("-"),
            bytes(r.safe_wal_size),
            if r.sluice { "yes" } else { "" }
        );
    }
    out
}

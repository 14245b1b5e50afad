//! Taking over from a Debezium MySQL connector (`sluice import debezium --offsets`): its
//! committed offset (binlog file and position of the transaction it was in, and the GTID set
//! before that transaction) is checked against the server and, when every check holds, saved
//! as this pipeline's position, so the first run streams from there without a snapshot. The
//! transaction at the offset is delivered again from its start (Debezium's `event`/`row`
//! counts of it are not skipped: at-least-once, as a Debezium restart that lost them).

use anyhow::Context as _;

use super::check::{Check, report};
use super::offsets::MysqlOffset;
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::mysql::server::{self, BinlogPosition, Flavor};

/// Checks the takeover's preconditions and saves the position; false when a check failed
/// (nothing saved).
///
/// # Errors
///
/// The server or the state store cannot be read or written.
pub async fn prepare(config: &MysqlPipelineConfig, offset: &MysqlOffset) -> anyhow::Result<bool> {
    let mut conn = server::connect(&config.source)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.chain()))?;
    let flavor = server::flavor(&mut conn)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.chain()))?;
    let mut checks = Vec::new();
    let issues = server::check_settings(&mut conn, flavor, &config.source)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.chain()))?;
    for issue in &issues {
        checks.push(Check::failed(
            format!("server setting {}", issue.setting),
            issue.problem.clone(),
        ));
    }
    if issues.is_empty() {
        checks.push(Check::ok(
            "binlog_format = ROW, binlog_row_image = FULL, binlog_row_metadata = FULL and the privileges",
        ));
    }
    checks.push(if offset.snapshot_running {
        Check::failed(
            "Debezium's initial snapshot had finished",
            "the offset is mid-snapshot: let Debezium finish it, or start a new pipeline (which snapshots)",
        )
    } else {
        Check::ok("Debezium's initial snapshot had finished")
    });
    let logs = crate::source::mysql::lag::binary_logs(&mut conn)
        .await
        .context(
            "SHOW BINARY LOGS failed (the user needs REPLICATION CLIENT; MariaDB: BINLOG MONITOR)",
        )?;
    checks.push(match logs.iter().find(|(name, _)| *name == offset.file) {
        Some((_, size)) if *size >= offset.pos => {
            Check::ok(format!("the server still has {}:{}", offset.file, offset.pos))
        }
        Some((_, size)) => Check::failed(
            format!("the server still has {}:{}", offset.file, offset.pos),
            format!("{} holds {size} bytes only: the offset is of another server (or the binlog was reset)", offset.file),
        ),
        None => Check::failed(
            format!("the server still has {}", offset.file),
            format!(
                "the binlog was purged (oldest: {}): the changes since Debezium's offset are gone; start a new pipeline (it snapshots)",
                logs.first().map_or("none", |(n, _)| n.as_str())
            ),
        ),
    });
    if let (Some(gtids), Flavor::Mysql) = (&offset.gtids, flavor) {
        let covered: Option<i64> = mysql_async::prelude::Queryable::exec_first(
            &mut conn,
            "SELECT GTID_SUBSET(@@GLOBAL.gtid_purged, ?)",
            (gtids.as_str(),),
        )
        .await
        .context("SELECT GTID_SUBSET failed")?;
        checks.push(if covered == Some(1) {
            Check::ok("the server has every transaction after the offset's GTID set")
        } else {
            Check::failed(
                "the server has every transaction after the offset's GTID set",
                "gtid_purged holds transactions the offset has not seen: they are gone; start a new pipeline (it snapshots)",
            )
        });
    }
    let (saved, location) = crate::source::mysql::stream::saved_position(config)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.chain()))?;
    checks.push(match saved {
        None => Check::ok(format!("no sluice state for pipeline {:?} yet", config.name)),
        Some(position) => Check::failed(
            format!("no sluice state for pipeline {:?} yet", config.name),
            format!("{location} already holds {position}: this pipeline already ran; remove it to take over again"),
        ),
    });
    if !report(&checks) {
        return Ok(false);
    }
    let position = BinlogPosition {
        file: offset.file.clone(),
        pos: offset.pos,
        gtid_set: offset.gtids.clone(),
    };
    crate::source::mysql::stream::seed_position(config, flavor, &position)
        .map_err(|e| anyhow::anyhow!("{}", e.chain()))?;
    eprintln!(
        "takeover: saved {position} as pipeline {:?}'s position ({location}): `sluice run` streams from there without a snapshot; the transaction at the offset is delivered again (at-least-once)",
        config.name
    );
    Ok(true)
}

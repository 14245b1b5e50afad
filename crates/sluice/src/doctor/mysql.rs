//! `sluice doctor` for MySQL/MariaDB → Kafka pipelines: every setting and privilege the binlog
//! reader needs (the same rules the pipeline checks at start), binlog retention against the
//! downtime a pipeline should survive, and whether the saved position is still on the server.
//! `sluice slots` for such a pipeline ([`binlog_place`]): the saved position against the
//! server's, how far behind, and whether the server still has it.

use std::fmt::Write as _;

use mysql_async::prelude::Queryable as _;
use serde::Serialize;

use super::finding::{Finding, Severity, finding};
use crate::config::{SnapshotMode, StateStoreKind};
use crate::error::PipelineError;
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::mysql::lag::{binary_logs, bytes_behind};
use crate::source::mysql::server::{self, BinlogPosition, Flavor};

/// The outage a pipeline should survive without losing its place: binlogs purged sooner are a
/// warning.
pub const EXPECTED_DOWNTIME_S: u64 = 24 * 3600;

/// The finding code of a required setting (see `server::settings_issues`).
fn setting_code(setting: &str) -> &'static str {
    match setting {
        "log_bin" => "mysql.log_bin",
        "binlog_format" => "mysql.binlog_format",
        "binlog_row_image" => "mysql.binlog_row_image",
        "binlog_row_metadata" => "mysql.binlog_row_metadata",
        "binlog_row_value_options" => "mysql.binlog_row_value_options",
        "log_bin_compress" => "mysql.log_bin_compress",
        "gtid_mode" => "mysql.gtid_mode",
        "privileges" => "mysql.privileges",
        _ => "mysql.setting",
    }
}

/// Binlog retention in seconds from the server's variables (0: never purged automatically).
fn retention_s(expire_seconds: Option<u64>, expire_days: Option<f64>) -> u64 {
    match (expire_seconds, expire_days) {
        (Some(seconds), _) if seconds > 0 => seconds,
        (_, Some(days)) if days > 0.0 => (days * 86_400.0) as u64,
        _ => 0,
    }
}

fn human_duration(seconds: u64) -> String {
    match seconds {
        s if s >= 86_400 && s % 3600 == 0 => format!("{:.1} days", s as f64 / 86_400.0),
        s if s >= 3600 => format!("{:.1} h", s as f64 / 3600.0),
        s => format!("{s} s"),
    }
}

/// Every MySQL/MariaDB finding for `config`'s server and saved position.
pub(super) async fn checks(config: &MysqlPipelineConfig, findings: &mut Vec<Finding>) {
    let url = crate::source::mysql::config::redact_url(&config.source.url);
    let mut conn = match server::connect(&config.source).await {
        Ok(conn) => conn,
        Err(error) => {
            findings.push(finding(
                "mysql.unreachable",
                Severity::Critical,
                format!("cannot connect to the MySQL/MariaDB server: {error}"),
                &[("url", url.into())],
                error.hint().unwrap_or(
                    "check source.mysql.url (host, port, user, password) and that the server listens there",
                ),
            ));
            return;
        }
    };
    let flavor = match server::flavor(&mut conn).await {
        Ok(flavor) => flavor,
        Err(error) => {
            findings.push(query_failed(&error.to_string()));
            return;
        }
    };
    let version: Option<String> = conn.query_first("SELECT VERSION()").await.ok().flatten();
    findings.push(finding(
        "mysql.server",
        Severity::Ok,
        format!(
            "{} {}",
            match flavor {
                Flavor::Mysql => "MySQL",
                Flavor::Mariadb => "MariaDB",
            },
            version.as_deref().unwrap_or("(version unknown)")
        ),
        &[("url", url.into())],
        "",
    ));
    match server::check_settings(&mut conn, flavor, &config.source).await {
        Ok(issues) if issues.is_empty() => findings.push(finding(
            "mysql.settings",
            Severity::Ok,
            "log_bin, binlog_format = ROW, binlog_row_image = FULL, binlog_row_metadata = FULL and the user's privileges are as the binlog reader needs",
            &[],
            "",
        )),
        Ok(issues) => {
            for issue in issues {
                findings.push(finding(
                    setting_code(&issue.setting),
                    Severity::Critical,
                    format!("{}: {}", issue.setting, issue.problem),
                    &[("setting", issue.setting.clone().into())],
                    issue.problem,
                ));
            }
        }
        Err(error) => findings.push(query_failed(&error.to_string())),
    }
    match server::signal_table_issues(&mut conn, flavor, &config.source).await {
        Ok(issues) => {
            for issue in issues {
                findings.push(finding(
                    "mysql.signal_table",
                    Severity::Warning,
                    format!(
                        "incremental snapshots cannot run: {}: {}",
                        issue.setting, issue.problem
                    ),
                    &[("setting", issue.setting.clone().into())],
                    issue.problem,
                ));
            }
        }
        Err(error) => findings.push(query_failed(&error.to_string())),
    }
    let expire_seconds: Option<u64> = conn
        .query_first("SELECT @@GLOBAL.binlog_expire_logs_seconds")
        .await
        .ok()
        .flatten();
    let expire_days: Option<f64> = conn
        .query_first("SELECT @@GLOBAL.expire_logs_days")
        .await
        .ok()
        .flatten();
    let retention = retention_s(expire_seconds, expire_days);
    let evidence = [
        (
            "binlog_expire_logs_seconds",
            expire_seconds.map_or(serde_json::Value::Null, Into::into),
        ),
        (
            "expire_logs_days",
            expire_days.map_or(serde_json::Value::Null, Into::into),
        ),
    ];
    let when_needed = config.source.snapshot == SnapshotMode::WhenNeeded;
    let after_purge = if when_needed {
        "re-snapshots (snapshot = \"when_needed\")"
    } else {
        "stops with the fix and must be re-snapshotted"
    };
    if retention == 0 {
        findings.push(finding(
            "mysql.binlog_retention",
            Severity::Info,
            "binlogs are never purged automatically: a stopped pipeline can always resume, and the binlogs' disk use grows until someone purges them",
            &evidence,
            "",
        ));
    } else if retention < EXPECTED_DOWNTIME_S {
        findings.push(finding(
            "mysql.binlog_retention",
            Severity::Warning,
            format!(
                "binlogs are purged after {}: a pipeline down longer than that cannot resume from its position and {after_purge}",
                human_duration(retention)
            ),
            &evidence,
            "keep binlogs for longer than your longest outage: SET GLOBAL binlog_expire_logs_seconds = 604800 (7 days) and the same in my.cnf",
        ));
    } else {
        findings.push(finding(
            "mysql.binlog_retention",
            Severity::Ok,
            format!(
                "binlogs are kept for {}: a pipeline can be down that long and resume",
                human_duration(retention)
            ),
            &evidence,
            "",
        ));
    }
    let logs = match binary_logs(&mut conn).await {
        Ok(logs) => logs,
        Err(error) => {
            findings.push(query_failed(&error.to_string()));
            return;
        }
    };
    match crate::source::mysql::stream::saved_position(config).await {
        Ok((Some(position), location)) => match bytes_behind(&logs, &position.file, position.pos) {
            Some(behind) => findings.push(finding(
                "mysql.position",
                Severity::Ok,
                format!(
                    "the saved position {position} is on the server, {} behind its newest position",
                    crate::config::human_bytes(i64::try_from(behind).unwrap_or(i64::MAX))
                ),
                &[
                    ("position", position.to_string().into()),
                    ("bytes_behind", behind.into()),
                    (
                        "oldest_binlog",
                        logs.first().map_or(serde_json::Value::Null, |l| l.0.clone().into()),
                    ),
                ],
                "",
            )),
            None => findings.push(finding(
                "mysql.position_purged",
                Severity::Critical,
                format!(
                    "the saved position {position} is no longer on the server (its binlog was purged): the pipeline cannot resume from it and {after_purge}"
                ),
                &[
                    ("position", position.to_string().into()),
                    (
                        "oldest_binlog",
                        logs.first().map_or(serde_json::Value::Null, |l| l.0.clone().into()),
                    ),
                ],
                purged_fix(config, &location),
            )),
        },
        Ok((None, location)) => findings.push(finding(
            "mysql.position",
            Severity::Info,
            "no saved position: the pipeline has not run here yet (or keeps its state elsewhere)",
            &[("state", location.into())],
            "",
        )),
        Err(error) => findings.push(finding(
            "mysql.position",
            Severity::Warning,
            format!("cannot read the saved position: {error}"),
            &[],
            error.hint().unwrap_or_default(),
        )),
    }
}

/// What to do when the saved position (kept at `location`) is no longer on the server.
fn purged_fix(config: &MysqlPipelineConfig, location: &str) -> String {
    if config.source.snapshot == SnapshotMode::WhenNeeded {
        return "nothing to do: the next run snapshots anew (changes since the position are read from the tables, not the binlog)".to_owned();
    }
    let remove = match config.state_store {
        StateStoreKind::Local => format!("remove the state file {location}"),
        StateStoreKind::Kafka => format!(
            "with every instance stopped, write a tombstone (null value) for key {}.mysql to the state topic {}",
            config.name,
            config.state_topic()
        ),
    };
    format!(
        "re-snapshot: set source.mysql.snapshot = \"when_needed\", or {remove} to snapshot anew (and keep binlogs longer: binlog_expire_logs_seconds)"
    )
}

/// A MySQL/MariaDB pipeline's place in its server's binary log, for `sluice slots` (a binlog
/// reader has no slot: this is what stands for one).
#[derive(Debug, Clone, Serialize)]
pub struct BinlogPlace {
    /// The pipeline's name.
    pub pipeline: String,
    /// The server and its version, e.g. `MariaDB 10.11.6-MariaDB`.
    pub server: String,
    /// Where the saved position is kept (a file, or the state topic and key).
    pub state: String,
    /// The position the next run resumes from; `None` when nothing is saved.
    pub saved: Option<BinlogPosition>,
    /// The server's current position (`SHOW MASTER STATUS`).
    pub current: BinlogPosition,
    /// Binlog bytes from the saved position to the server's (`None`: nothing saved, or
    /// purged).
    pub bytes_behind: Option<u64>,
    /// Binlog files from the saved position's to the server's (0: the same file).
    pub files_behind: Option<usize>,
    /// The oldest binlog file the server still has.
    pub oldest_binlog: Option<String>,
    /// Whether the saved position's binlog file is still on the server (`None`: nothing
    /// saved); when not, the pipeline cannot resume.
    pub on_server: Option<bool>,
    /// What to do, when something is wrong.
    pub fix: Option<String>,
}

/// The saved position of `config`'s pipeline against its server's binary log.
///
/// # Errors
///
/// When the server or the state store cannot be read.
pub async fn binlog_place(config: &MysqlPipelineConfig) -> Result<BinlogPlace, PipelineError> {
    let mut conn = server::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    let version: Option<String> = conn
        .query_first("SELECT VERSION()")
        .await
        .map_err(server::sql_error("SELECT VERSION() failed"))?;
    let current = server::current_position(&mut conn, flavor).await?;
    let logs = binary_logs(&mut conn).await.map_err(server::sql_error(
        "SHOW BINARY LOGS failed (the user needs REPLICATION CLIENT; MariaDB: BINLOG MONITOR)",
    ))?;
    drop(conn);
    let (saved, state) = crate::source::mysql::stream::saved_position(config).await?;
    let index = |file: &str| logs.iter().position(|(name, _)| name == file);
    let bytes_behind = saved
        .as_ref()
        .and_then(|saved| bytes_behind(&logs, &saved.file, saved.pos));
    let on_server = saved.as_ref().map(|_| bytes_behind.is_some());
    let files_behind = saved
        .as_ref()
        .and_then(|saved| Some(index(&current.file)?.saturating_sub(index(&saved.file)?)));
    let fix = (on_server == Some(false)).then(|| purged_fix(config, &state));
    Ok(BinlogPlace {
        pipeline: config.name.clone(),
        server: format!(
            "{} {}",
            match flavor {
                Flavor::Mysql => "MySQL",
                Flavor::Mariadb => "MariaDB",
            },
            version.as_deref().unwrap_or("(version unknown)")
        ),
        state,
        saved,
        current,
        bytes_behind,
        files_behind,
        oldest_binlog: logs.first().map(|(name, _)| name.clone()),
        on_server,
        fix,
    })
}

/// `place` as `sluice slots` prints it.
pub fn render_binlog_place(place: &BinlogPlace) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "PIPELINE  {} ({})", place.pipeline, place.server);
    match &place.saved {
        Some(saved) => {
            let _ = writeln!(out, "SAVED     {saved}");
        }
        None => {
            let _ = writeln!(
                out,
                "SAVED     none: the pipeline has not saved a position yet (or keeps its state elsewhere)"
            );
        }
    }
    let _ = writeln!(out, "STATE     {}", place.state);
    let _ = writeln!(out, "SERVER    {}", place.current);
    if let (Some(bytes), Some(files)) = (place.bytes_behind, place.files_behind) {
        let _ = writeln!(
            out,
            "BEHIND    {} ({bytes} bytes), {files} binlog file(s)",
            crate::config::human_bytes(i64::try_from(bytes).unwrap_or(i64::MAX))
        );
    }
    let oldest = place.oldest_binlog.as_deref().unwrap_or("none");
    match place.on_server {
        Some(true) => {
            let _ = writeln!(
                out,
                "BINLOG    on the server (oldest binlog: {oldest}): the pipeline can resume"
            );
        }
        Some(false) => {
            let file = place.saved.as_ref().map_or("?", |s| s.file.as_str());
            let _ = writeln!(
                out,
                "BINLOG    PURGED: {file} is no longer on the server (oldest binlog: {oldest}): the pipeline cannot resume from the saved position"
            );
        }
        None => {}
    }
    if let Some(fix) = &place.fix {
        let _ = writeln!(out, "fix: {fix}");
    }
    out
}

fn query_failed(error: &str) -> Finding {
    finding(
        "mysql.query_failed",
        Severity::Critical,
        format!("a MySQL/MariaDB check failed: {error}"),
        &[],
        "see the server's message; the user needs REPLICATION CLIENT (MariaDB: BINLOG MONITOR) to read the binlog list and settings",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_comes_from_seconds_else_days_and_zero_means_never() {
        assert_eq!(retention_s(Some(3600), Some(10.0)), 3600);
        assert_eq!(retention_s(Some(0), Some(2.0)), 172_800);
        assert_eq!(retention_s(None, Some(0.5)), 43_200);
        assert_eq!(retention_s(Some(0), Some(0.0)), 0);
        assert_eq!(retention_s(None, None), 0);
        assert_eq!(human_duration(604_800), "7.0 days");
        assert_eq!(human_duration(7200), "2.0 h");
    }

    #[test]
    fn every_required_setting_has_its_own_code() {
        for setting in [
            "log_bin",
            "binlog_format",
            "binlog_row_image",
            "binlog_row_metadata",
            "binlog_row_value_options",
            "log_bin_compress",
            "gtid_mode",
            "privileges",
        ] {
            assert_eq!(setting_code(setting), format!("mysql.{setting}"));
        }
    }
}

//! How far the pipeline is behind the server's binary log, for `/health` and `/metrics`:
//! bytes between the confirmed position (what a restart resumes from) and the end of the
//! server's newest binlog file (`SHOW BINARY LOGS`), and seconds since the confirmed
//! transaction's commit while there is more to read (0 when caught up).

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use mysql_async::prelude::Queryable as _;
use tokio_util::sync::CancellationToken;

use super::config::MysqlSourceConfig;
use super::server;
use crate::runtime::metrics as m;
use crate::runtime::status::{BinlogStatus, StatusBoard};

/// How often the server's binlog list is read.
const INTERVAL: Duration = Duration::from_secs(2);

/// The pipeline's confirmed position, shared by the stream (writer) and the monitor.
#[derive(Debug, Default, Clone)]
pub struct Confirmed {
    /// Binlog file and position after the last confirmed transaction.
    pub file: String,
    /// Its position.
    pub pos: u64,
    /// Its commit time (Unix seconds, from the event header), when known.
    pub commit_unix_s: Option<u32>,
}

/// Shared handle to [`Confirmed`].
pub type SharedConfirmed = Arc<Mutex<Confirmed>>;

/// Bytes from `file:pos` to the end of the newest file in `logs` (name, size), oldest first;
/// `None` when `file` is not in the list any more (purged).
pub fn bytes_behind(logs: &[(String, u64)], file: &str, pos: u64) -> Option<u64> {
    let index = logs.iter().position(|(name, _)| name == file)?;
    let rest: u64 = logs[index + 1..].iter().map(|(_, size)| size).sum();
    Some(logs[index].1.saturating_sub(pos) + rest)
}

/// The server's binlog files and their sizes, oldest first (`SHOW BINARY LOGS`).
///
/// # Errors
///
/// The query's (the user needs `REPLICATION CLIENT`, MariaDB `BINLOG MONITOR`).
pub async fn binary_logs(
    conn: &mut mysql_async::Conn,
) -> Result<Vec<(String, u64)>, mysql_async::Error> {
    let rows: Vec<mysql_async::Row> = conn.query("SHOW BINARY LOGS").await?;
    Ok(rows
        .into_iter()
        .map(|row| {
            (
                row.get_opt::<String, _>(0)
                    .and_then(Result::ok)
                    .unwrap_or_default(),
                row.get_opt::<u64, _>(1).and_then(Result::ok).unwrap_or(0),
            )
        })
        .collect())
}

/// Reads the server's binlogs every `INTERVAL` and publishes the lag until `stop`.
pub async fn monitor(
    source: MysqlSourceConfig,
    confirmed: SharedConfirmed,
    board: Arc<StatusBoard>,
    stop: CancellationToken,
) {
    let mut conn = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(INTERVAL) => {}
            () = stop.cancelled() => return,
        }
        if conn.is_none() {
            conn = match server::connect(&source).await {
                Ok(c) => Some(c),
                Err(error) => {
                    tracing::warn!(%error, "cannot connect to read the binlog lag");
                    None
                }
            };
        }
        let Some(c) = conn.as_mut() else { continue };
        let logs = match binary_logs(c).await {
            Ok(logs) => logs,
            Err(error) => {
                tracing::warn!(%error, "cannot read the binlog list for the lag");
                conn = None;
                continue;
            }
        };
        let now = Confirmed::clone(
            &confirmed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if now.file.is_empty() {
            continue;
        }
        let Some(lag_bytes) = bytes_behind(&logs, &now.file, now.pos) else {
            tracing::warn!(
                file = now.file,
                ?logs,
                "the confirmed binlog file is not on the server any more"
            );
            continue;
        };
        let lag_seconds = if lag_bytes == 0 {
            0.0
        } else {
            now.commit_unix_s.map_or(0.0, |commit| {
                let now_s = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                now_s.saturating_sub(u64::from(commit)) as f64
            })
        };
        let (server_file, server_size) = logs.last().cloned().unwrap_or_default();
        metrics::gauge!(m::BINLOG_LAG_BYTES).set(lag_bytes as f64);
        metrics::gauge!(m::BINLOG_LAG_SECONDS).set(lag_seconds);
        board.update(|s| {
            s.binlog = Some(BinlogStatus {
                confirmed_file: now.file.clone(),
                confirmed_pos: now.pos,
                server_file,
                server_pos: server_size,
                lag_bytes,
                lag_seconds,
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_sums_the_rest_of_the_file_and_every_newer_one() {
        let logs = vec![
            ("bin.000001".to_owned(), 1000),
            ("bin.000002".to_owned(), 500),
            ("bin.000003".to_owned(), 200),
        ];
        assert_eq!(bytes_behind(&logs, "bin.000003", 200), Some(0));
        assert_eq!(bytes_behind(&logs, "bin.000002", 100), Some(400 + 200));
        assert_eq!(bytes_behind(&logs, "bin.000001", 4), Some(996 + 700));
        assert_eq!(bytes_behind(&logs, "bin.000000", 4), None, "purged");
    }
}

//! The WAL disk's free space against the pipeline's WAL budget, where doctor can see that
//! disk: a server on this machine (the pipeline's host a loopback address or a socket
//! directory) whose data directory doctor may read (`data_directory` is shown to superusers
//! and `pg_read_all_settings` only) and finds here, with the server's major version in its
//! `PG_VERSION`. A budget larger than the free space left for WAL never acts: the disk fills
//! first, and a primary whose WAL disk is full stops.

use std::path::{Path, PathBuf};

use tokio_postgres::Client;

use super::target::Target;
use super::{Finding, Severity, finding};
use crate::config::human_bytes;
use crate::source::postgres::wal_budget;

/// Where the WAL is, and the free space of its file system.
#[derive(Debug, Clone, PartialEq, Eq)]
struct WalDisk {
    path: PathBuf,
    free: u64,
    total: u64,
}

/// Runs the check (a pipeline file is needed: the budget is its). Finds nothing when the disk
/// is not visible from here, but says why.
pub(super) async fn checks(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let Some(pipeline) = &target.pipeline else {
        return Ok(());
    };
    let budget = pipeline.source.wal_budget;
    if budget == 0 {
        // pg.wal_budget already recommends one, below the WAL disk's free space.
        return Ok(());
    }
    let disk = match locate(client, target).await? {
        Ok(disk) => disk,
        Err(why) => {
            findings.push(finding(
                "pg.wal_disk",
                Severity::Info,
                format!("the WAL disk's free space is not checked: {why}"),
                &[("wal_budget_bytes", budget.into())],
                "make sure the WAL disk has more free space than source.postgres.wal_budget (run doctor on the database host to have it checked)",
            ));
            return Ok(());
        }
    };
    let retained = match wal_budget::retained_wal(client, &pipeline.slot_name()).await {
        Ok(Some(found)) => u64::try_from(found.retained).unwrap_or(0),
        _ => 0,
    };
    findings.push(against_budget(&disk, budget, retained));
    Ok(())
}

/// The finding for `disk` with the budget and the WAL the slot retains now: the slot may
/// still grow by `budget - retained` before the budget acts.
fn against_budget(disk: &WalDisk, budget: u64, retained: u64) -> Finding {
    let room = budget.saturating_sub(retained);
    let evidence = [
        ("wal_path", disk.path.display().to_string().into()),
        ("free_bytes", disk.free.into()),
        ("total_bytes", disk.total.into()),
        ("wal_budget_bytes", budget.into()),
        ("retained_wal_bytes", retained.into()),
    ];
    let bytes = |b: u64| human_bytes(i64::try_from(b).unwrap_or(i64::MAX));
    if room >= disk.free {
        finding(
            "pg.wal_disk",
            Severity::Warning,
            format!(
                "the WAL disk ({}) has {} free, less than the {} more WAL that wal_budget {} still lets the slot retain: the disk fills before the budget acts, and a primary with a full WAL disk stops",
                disk.path.display(),
                bytes(disk.free),
                bytes(room),
                bytes(budget)
            ),
            &evidence,
            format!(
                "lower source.postgres.wal_budget to at most {} (the WAL retained now and half the free space), or free space on the WAL disk",
                bytes(retained + disk.free / 2)
            ),
        )
    } else {
        finding(
            "pg.wal_disk",
            Severity::Ok,
            format!(
                "the WAL disk ({}) has {} free of {}, more than the {} wal_budget {} still lets the slot retain",
                disk.path.display(),
                bytes(disk.free),
                bytes(disk.total),
                bytes(room),
                bytes(budget)
            ),
            &evidence,
            "",
        )
    }
}

/// The server's WAL directory on this machine and its file system's free space, or why it
/// cannot be seen from here.
async fn locate(
    client: &Client,
    target: &Target,
) -> Result<Result<WalDisk, String>, tokio_postgres::Error> {
    let Some(url) = target.pg_url.as_deref() else {
        return Ok(Err("no PostgreSQL URL".into()));
    };
    if !is_local(url) {
        return Ok(Err(
            "the server is not on this machine (its host is not a loopback address or a socket directory)".into(),
        ));
    }
    // pg_settings leaves out the settings the user may not read.
    let row = client
        .query_opt(
            "SELECT setting, current_setting('server_version_num')::int / 10000 \
             FROM pg_settings WHERE name = 'data_directory'",
            &[],
        )
        .await?;
    let Some(row) = row else {
        return Ok(Err(
            "the user may not read data_directory (it takes superuser or pg_read_all_settings)"
                .into(),
        ));
    };
    let (dir, major): (String, i32) = (row.get(0), row.get(1));
    Ok(wal_disk(Path::new(&dir), major))
}

/// The WAL directory under `dir` when `dir` is this server's (its `PG_VERSION` says `major`),
/// with its file system's free space (`pg_wal` may be a link to another disk: followed).
fn wal_disk(dir: &Path, major: i32) -> Result<WalDisk, String> {
    let version = std::fs::read_to_string(dir.join("PG_VERSION"))
        .map_err(|e| format!("{}: {e}", dir.join("PG_VERSION").display()))?;
    if version.trim() != major.to_string() {
        return Err(format!(
            "{} is not this server's data directory (PG_VERSION {}, the server is {major})",
            dir.display(),
            version.trim()
        ));
    }
    let path = dir.join("pg_wal");
    let (free, total) = free_space(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(WalDisk { path, free, total })
}

/// Free (for unprivileged users) and total bytes of the file system holding `path`.
#[cfg(target_os = "linux")]
fn free_space(path: &Path) -> std::io::Result<(u64, u64)> {
    let stat = rustix::fs::statvfs(path)?;
    Ok((
        stat.f_bavail.saturating_mul(stat.f_frsize),
        stat.f_blocks.saturating_mul(stat.f_frsize),
    ))
}

#[cfg(not(target_os = "linux"))]
fn free_space(_path: &Path) -> std::io::Result<(u64, u64)> {
    Err(std::io::Error::other("not read on this operating system"))
}

/// Whether the URL's every host is this machine (loopback or a socket directory).
fn is_local(url: &str) -> bool {
    let Ok(config) = url.parse::<tokio_postgres::Config>() else {
        return false;
    };
    let hosts = config.get_hosts();
    !hosts.is_empty()
        && hosts.iter().all(|host| match host {
            tokio_postgres::config::Host::Unix(_) => true,
            tokio_postgres::config::Host::Tcp(name) => {
                name == "localhost"
                    || name
                        .parse::<std::net::IpAddr>()
                        .is_ok_and(|ip| ip.is_loopback())
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn disk(free: u64) -> WalDisk {
        WalDisk {
            path: PathBuf::from("/var/lib/postgresql/data/pg_wal"),
            free,
            total: 100 * GIB,
        }
    }

    #[test]
    fn a_budget_beyond_the_free_space_is_a_warning_with_a_budget_that_fits() {
        let found = against_budget(&disk(10 * GIB), 20 * GIB, 2 * GIB);
        assert_eq!(found.severity, Severity::Warning, "{found:?}");
        assert!(
            found
                .summary
                .contains("has 10.0 GiB free, less than the 18.0 GiB"),
            "{}",
            found.summary
        );
        assert!(found.fix.contains("at most 7.0 GiB"), "{}", found.fix);
    }

    #[test]
    fn a_budget_the_free_space_holds_is_ok() {
        let found = against_budget(&disk(50 * GIB), 20 * GIB, 2 * GIB);
        assert_eq!(found.severity, Severity::Ok, "{found:?}");
        // Retained WAL beyond the budget leaves no room to grow: fine for the disk.
        let found = against_budget(&disk(GIB), 20 * GIB, 30 * GIB);
        assert_eq!(found.severity, Severity::Ok, "{found:?}");
    }

    #[test]
    fn only_loopback_and_socket_hosts_are_local() {
        assert!(is_local("postgres://u@127.0.0.1:5432/db"));
        assert!(is_local("postgres://u@localhost/db"));
        assert!(is_local("postgres://u@[::1]:5432/db"));
        assert!(is_local("host=/var/run/postgresql user=u"));
        assert!(!is_local("postgres://u@db.example.com/db"));
        assert!(!is_local("postgres://u@127.0.0.1,db.example.com/db"));
        assert!(!is_local("not a url"));
    }

    #[test]
    fn a_directory_of_another_version_is_not_the_servers() {
        let dir = std::env::temp_dir().join(format!("sluice-wal-disk-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("pg_wal")).unwrap();
        std::fs::write(dir.join("PG_VERSION"), "15\n").unwrap();
        let err = wal_disk(&dir, 17).unwrap_err();
        assert!(err.contains("PG_VERSION 15, the server is 17"), "{err}");
        let found = wal_disk(&dir, 15).unwrap();
        assert!(found.total >= found.free && found.total > 0, "{found:?}");
        assert_eq!(found.path, dir.join("pg_wal"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

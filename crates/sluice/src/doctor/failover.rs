//! Failover slots (PostgreSQL 17+): the pieces that make a failover lose neither the slot nor a
//! change, each named when missing.
//!
//! On the primary: the pipeline's slot is a failover slot (sluice makes it one at its start,
//! `source.postgres.failover`), and every physical slot `synchronized_standby_slots` names
//! exists and has its standby connected (logical decoding waits for them). On each standby the
//! pipeline URL lists (`host=primary,standby…`, with `target_session_attrs=read-write` so that
//! sluice follows the promotion): `sync_replication_slots`, `hot_standby_feedback`,
//! `primary_slot_name` (named in the primary's `synchronized_standby_slots`), a `dbname` in
//! `primary_conninfo`, `wal_level = logical`, and the slot's copy there: present, `synced` and
//! no longer temporary (a copy still temporary is dropped at promotion).
//!
//! Whether the primary has standbys at all, and `synchronized_standby_slots` being set, is
//! `pg.failover_slots` (in the module above).

use tokio_postgres::Client;

use super::target::{Target, setting};
use super::{Finding, Severity, finding};
use crate::pg_connect::{connect_sql_url, redact_url};
use crate::sql::quote_pg_literal;

/// Runs the checks (`version`: the server's major version).
pub(super) async fn checks(
    client: &Client,
    target: &Target,
    version: i64,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let Some(pipeline) = &target.pipeline else {
        return Ok(());
    };
    let configured = pipeline.source.failover;
    let evidence = [("server_version", version.into())];
    if version < 17 {
        if configured == Some(true) {
            findings.push(finding(
                "pg.failover_unsupported",
                Severity::Critical,
                format!(
                    "source.postgres.failover = true needs PostgreSQL 17 or later (failover slots); the server is {version}: the pipeline refuses to start"
                ),
                &evidence,
                "remove source.postgres.failover, or upgrade PostgreSQL",
            ));
        }
        return Ok(());
    }
    let in_recovery: bool = client
        .query_one("SELECT pg_is_in_recovery()", &[])
        .await?
        .get(0);
    if in_recovery {
        // Pointed at a standby: the primary's checks do not apply.
        return Ok(());
    }
    let slot = pipeline.slot_name();
    if configured == Some(false) {
        findings.push(finding(
            "pg.slot_failover",
            Severity::Info,
            format!(
                "source.postgres.failover = false: slot {slot:?} is not copied to standbys, and a failover loses it (a new slot and a snapshot on the new primary)"
            ),
            &[("slot", slot.clone().into())],
            "",
        ));
        return Ok(());
    }
    let flag: Option<bool> = client
        .query_opt(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?
        .map(|row| row.get(0));
    let slot_evidence = [("slot", slot.clone().into()), ("failover", flag.into())];
    findings.push(match flag {
        Some(false) => finding(
            "pg.slot_failover",
            Severity::Warning,
            format!("slot {slot:?} is not a failover slot: standbys do not copy it, and a failover loses it"),
            &slot_evidence,
            "restart the pipeline: sluice makes it a failover slot at its start (source.postgres.failover, on by default on PostgreSQL 17+)",
        ),
        Some(true) => finding(
            "pg.slot_failover",
            Severity::Ok,
            format!("slot {slot:?} is a failover slot"),
            &slot_evidence,
            "",
        ),
        None => finding(
            "pg.slot_failover",
            Severity::Ok,
            format!("slot {slot:?} does not exist yet: sluice creates it as a failover slot"),
            &slot_evidence,
            "",
        ),
    });

    // The standbys logical decoding waits for: each must exist and be connected.
    let standby_slots = setting(client, "synchronized_standby_slots").await?;
    let named: Vec<String> = standby_slots
        .split(',')
        .map(|s| s.trim().trim_matches('"').to_owned())
        .filter(|s| !s.is_empty())
        .collect();
    for name in &named {
        let row = client
            .query_opt(
                "SELECT slot_type, active FROM pg_replication_slots WHERE slot_name = $1",
                &[name],
            )
            .await?;
        let evidence = [
            ("synchronized_standby_slots", standby_slots.clone().into()),
            ("slot", name.clone().into()),
        ];
        match row.map(|r| (r.get::<_, String>(0), r.get::<_, bool>(1))) {
            None => findings.push(finding(
                "pg.synchronized_standby_slot",
                Severity::Critical,
                format!("synchronized_standby_slots names {name:?}, which is no replication slot: logical decoding waits for it, and the pipeline stalls"),
                &evidence,
                format!("SELECT pg_create_physical_replication_slot({quoted}) and set primary_slot_name = {quoted} on its standby, or remove it from synchronized_standby_slots (ALTER SYSTEM SET …; SELECT pg_reload_conf())", quoted = quote_pg_literal(name)),
            )),
            Some((kind, _)) if kind != "physical" => findings.push(finding(
                "pg.synchronized_standby_slot",
                Severity::Critical,
                format!("synchronized_standby_slots names {name:?}, a {kind} slot: only physical slots of standbys belong there"),
                &evidence,
                "list the standbys' physical slots (their primary_slot_name) in synchronized_standby_slots",
            )),
            Some((_, false)) => findings.push(finding(
                "pg.synchronized_standby_slot",
                Severity::Warning,
                format!("the standby of slot {name:?} (synchronized_standby_slots) is not connected: logical decoding waits for it, so the pipeline stalls until it is back"),
                &evidence,
                format!("start the standby that streams from slot {name:?}, or remove it from synchronized_standby_slots while it is away"),
            )),
            Some(_) => findings.push(finding(
                "pg.synchronized_standby_slot",
                Severity::Ok,
                format!("the standby of slot {name:?} is connected"),
                &evidence,
                "",
            )),
        }
    }

    // The standbys the URL lists.
    let url = pipeline.source.connection();
    let hosts = host_urls(&url);
    let mut standbys = 0;
    for (host, host_url) in hosts.iter().skip(usize::from(hosts.len() < 2)) {
        let (standby, task) = match connect_sql_url(host_url).await {
            Ok(connected) => connected,
            Err(error) => {
                findings.push(finding(
                    "pg.standby_unreachable",
                    Severity::Warning,
                    format!("cannot connect to {host} (a host of source.postgres.url) to check it as a standby: {error}"),
                    &[("url", redact_url(host_url).into())],
                    "check the host; after a failover the pipeline can only move to a host it reaches",
                ));
                continue;
            }
        };
        let recovery: bool = standby
            .query_one("SELECT pg_is_in_recovery()", &[])
            .await?
            .get(0);
        if recovery {
            standbys += 1;
            standby_checks(&standby, host, &slot, &named, findings).await?;
        }
        drop(standby);
        let _ = task.await;
    }
    if standbys == 0 {
        findings.push(finding(
            "pg.failover_standbys",
            Severity::Info,
            "source.postgres.url names no standby: doctor cannot check that one keeps a copy of the slot, and sluice cannot follow a failover",
            &[("hosts", hosts.len().into())],
            "list the standbys after the primary with libpq's target_session_attrs: postgres://user@primary:5432,standby:5432/db?target_session_attrs=read-write",
        ));
    }
    Ok(())
}

/// The checks of one standby.
async fn standby_checks(
    standby: &Client,
    host: &str,
    slot: &str,
    synchronized_standby_slots: &[String],
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let on = |value: &str| value == "on";
    let sync = setting(standby, "sync_replication_slots").await?;
    let feedback = setting(standby, "hot_standby_feedback").await?;
    let primary_slot = setting(standby, "primary_slot_name").await?;
    let conninfo = setting(standby, "primary_conninfo").await?;
    let wal_level = setting(standby, "wal_level").await?;
    let evidence = |name: &'static str, value: &str| {
        [
            ("standby", serde_json::Value::from(host)),
            (name, serde_json::Value::from(value)),
        ]
    };
    let reload = "; SELECT pg_reload_conf()";
    findings.push(if on(&sync) {
        finding("pg.standby_sync_replication_slots", Severity::Ok, format!("{host}: sync_replication_slots = on"), &evidence("sync_replication_slots", &sync), "")
    } else {
        finding(
            "pg.standby_sync_replication_slots",
            Severity::Critical,
            format!("standby {host} has sync_replication_slots = off: it keeps no copy of the slot, and a failover to it loses the slot"),
            &evidence("sync_replication_slots", &sync),
            format!("on {host}: ALTER SYSTEM SET sync_replication_slots = on{reload}"),
        )
    });
    findings.push(if on(&feedback) {
        finding("pg.standby_hot_standby_feedback", Severity::Ok, format!("{host}: hot_standby_feedback = on"), &evidence("hot_standby_feedback", &feedback), "")
    } else {
        finding(
            "pg.standby_hot_standby_feedback",
            Severity::Critical,
            format!("standby {host} has hot_standby_feedback = off: the primary may remove catalog rows the slot's copy needs, and the copy is not synchronized"),
            &evidence("hot_standby_feedback", &feedback),
            format!("on {host}: ALTER SYSTEM SET hot_standby_feedback = on{reload}"),
        )
    });
    findings.push(if primary_slot.is_empty() {
        finding(
            "pg.standby_primary_slot_name",
            Severity::Critical,
            format!("standby {host} streams without a physical slot (primary_slot_name is empty): slot synchronization needs one"),
            &evidence("primary_slot_name", &primary_slot),
            format!("on the primary: SELECT pg_create_physical_replication_slot('<name>'); on {host}: ALTER SYSTEM SET primary_slot_name = '<name>'{reload}; and add it to the primary's synchronized_standby_slots"),
        )
    } else if !synchronized_standby_slots.contains(&primary_slot) {
        finding(
            "pg.standby_primary_slot_name",
            Severity::Warning,
            format!("standby {host}'s slot {primary_slot:?} is not in the primary's synchronized_standby_slots: Kafka may get changes this standby never received, which a failover to it loses"),
            &evidence("primary_slot_name", &primary_slot),
            format!("on the primary: ALTER SYSTEM SET synchronized_standby_slots = {}{reload} (with the other standbys' slots, comma-separated)", quote_pg_literal(&primary_slot)),
        )
    } else {
        finding("pg.standby_primary_slot_name", Severity::Ok, format!("{host}: primary_slot_name = {primary_slot}, in synchronized_standby_slots"), &evidence("primary_slot_name", &primary_slot), "")
    });
    let has_dbname = conninfo
        .split_whitespace()
        .any(|part| part.starts_with("dbname="));
    findings.push(if has_dbname {
        finding("pg.standby_primary_conninfo", Severity::Ok, format!("{host}: primary_conninfo names a database"), &[("standby", host.into())], "")
    } else {
        finding(
            "pg.standby_primary_conninfo",
            Severity::Critical,
            format!("standby {host}'s primary_conninfo names no dbname: the slot sync worker cannot connect, so no slot is copied"),
            &[("standby", host.into())],
            format!("on {host}: add dbname=<the pipeline's database> to primary_conninfo (ALTER SYSTEM SET primary_conninfo = '… dbname=…'{reload})"),
        )
    });
    if wal_level != "logical" {
        findings.push(finding(
            "pg.standby_wal_level",
            Severity::Critical,
            format!("standby {host} has wal_level = {wal_level}: slot synchronization (and decoding there after a promotion) needs logical"),
            &evidence("wal_level", &wal_level),
            format!("on {host}: ALTER SYSTEM SET wal_level = logical; then restart it"),
        ));
    }
    let copy = standby
        .query_opt(
            "SELECT synced, temporary, coalesce(confirmed_flush_lsn::text, ''), \
                    coalesce(invalidation_reason, '') \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await?;
    let copy_evidence = |synced: bool, temporary: bool, lsn: &str| {
        [
            ("standby", serde_json::Value::from(host)),
            ("slot", slot.into()),
            ("synced", synced.into()),
            ("temporary", temporary.into()),
            ("confirmed_flush_lsn", lsn.into()),
        ]
    };
    findings.push(match copy {
        None => finding(
            "pg.standby_slot_synced",
            Severity::Warning,
            format!("standby {host} has no copy of slot {slot:?} yet: a failover now loses the slot"),
            &[("standby", host.into()), ("slot", slot.into())],
            "wait for the slot sync worker (it copies failover slots every few seconds once the pieces above are in place), or run SELECT pg_sync_replication_slots() on the standby",
        ),
        Some(row) => {
            let (synced, temporary, lsn, invalid): (bool, bool, String, String) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            if !invalid.is_empty() {
                finding(
                    "pg.standby_slot_synced",
                    Severity::Critical,
                    format!("standby {host}'s copy of slot {slot:?} is invalidated ({invalid})"),
                    &copy_evidence(synced, temporary, &lsn),
                    "see the standby's log; the copy is made anew once the primary's slot is valid and the standby's settings are right",
                )
            } else if !synced || temporary {
                finding(
                    "pg.standby_slot_synced",
                    Severity::Warning,
                    format!("standby {host}'s copy of slot {slot:?} is not yet synced (synced = {synced}, temporary = {temporary}): a failover now loses it"),
                    &copy_evidence(synced, temporary, &lsn),
                    "wait until the standby has replayed past the slot's position (the copy turns persistent), or run SELECT pg_sync_replication_slots() on it",
                )
            } else {
                finding(
                    "pg.standby_slot_synced",
                    Severity::Ok,
                    format!("standby {host} holds a synced copy of slot {slot:?} (at {lsn})"),
                    &copy_evidence(synced, temporary, &lsn),
                    "",
                )
            }
        }
    });
    Ok(())
}

/// The URL once per host (`host:port`, URL), each naming that host alone and without
/// `target_session_attrs`, so that a standby can be reached. Both URL forms: `postgres://u@a:1,
/// b:2/db?…` and `host=a,b port=1,2 …`; a URL with one host is returned as it is.
pub fn host_urls(url: &str) -> Vec<(String, String)> {
    let strip_attrs = |text: &str| -> String {
        text.split('&')
            .filter(|p| !p.starts_with("target_session_attrs="))
            .collect::<Vec<_>>()
            .join("&")
    };
    if let Some((scheme, rest)) = url.split_once("://") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (user, hosts) = match authority.rsplit_once('@') {
            Some((user, hosts)) => (format!("{user}@"), hosts),
            None => (String::new(), authority),
        };
        let tail = match tail.split_once('?') {
            Some((path, query)) => {
                let query = strip_attrs(query);
                if query.is_empty() {
                    path.to_owned()
                } else {
                    format!("{path}?{query}")
                }
            }
            None => tail.to_owned(),
        };
        return hosts
            .split(',')
            .map(|host| (host.to_owned(), format!("{scheme}://{user}{host}{tail}")))
            .collect();
    }
    // key=value: host and port lists (quoted values are left as they are).
    let words: Vec<&str> = url.split_whitespace().collect();
    let list = |key: &str| -> Vec<String> {
        words
            .iter()
            .find_map(|w| w.strip_prefix(&format!("{key}=")))
            .map(|v| v.split(',').map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let hosts = list("host");
    let ports = list("port");
    if hosts.len() < 2 {
        return vec![(hosts.first().cloned().unwrap_or_default(), url.to_owned())];
    }
    hosts
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).cloned();
            let rest: Vec<&str> = words
                .iter()
                .copied()
                .filter(|w| {
                    !w.starts_with("host=")
                        && !w.starts_with("port=")
                        && !w.starts_with("target_session_attrs=")
                })
                .collect();
            let mut text = format!("host={host}");
            if let Some(port) = &port {
                text.push_str(&format!(" port={port}"));
            }
            for word in rest {
                text.push(' ');
                text.push_str(word);
            }
            let label = port.map_or(host.clone(), |p| format!("{host}:{p}"));
            (label, text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::host_urls;

    #[test]
    fn one_url_per_host_without_target_session_attrs() {
        assert_eq!(
            host_urls(
                "postgres://u:p@a:5432,b:5433/db?target_session_attrs=read-write&sslmode=require"
            ),
            [
                (
                    "a:5432".to_owned(),
                    "postgres://u:p@a:5432/db?sslmode=require".to_owned()
                ),
                (
                    "b:5433".to_owned(),
                    "postgres://u:p@b:5433/db?sslmode=require".to_owned()
                ),
            ]
        );
        assert_eq!(
            host_urls("postgres://a,b/db?target_session_attrs=read-write"),
            [
                ("a".to_owned(), "postgres://a/db".to_owned()),
                ("b".to_owned(), "postgres://b/db".to_owned()),
            ]
        );
        assert_eq!(
            host_urls("host=a,b port=1,2 dbname=d target_session_attrs=read-write"),
            [
                ("a:1".to_owned(), "host=a port=1 dbname=d".to_owned()),
                ("b:2".to_owned(), "host=b port=2 dbname=d".to_owned()),
            ]
        );
        assert_eq!(host_urls("postgres://a/db").len(), 1);
    }
}

//! The PostgreSQL server checks: settings, slots and senders, WAL retention, the role's
//! privileges, the captured tables (keys, replica identity, publication) and TLS.

use crate::config::human_bytes;
use crate::pg_connect::{PgConnectConfig, SslMode, connect_sql_url};
use tokio_postgres::Client;

use crate::source::postgres::config::{PartitionMode, PgPipelineConfig};
use crate::source::postgres::setup::SERVER_WAL_LSN;
use crate::source::postgres::slot_wait;
use std::time::Duration;

use super::finding::{Finding, Severity, finding};
use super::target::{Target, setting, setting_number};
use super::{failover, standby, versions, wal_budget, wal_disk};

/// Slots retaining less WAL than this are not worth a warning.
const RETAINED_WARNING_BYTES: i64 = 1024 * 1024 * 1024;
/// `wal_writer_delay` above which `synchronous_commit = off` adds visible latency.
const WAL_WRITER_DELAY_WARNING_MS: i64 = 20;

/// The server's checks on a connected `client`, and the captured tables' when the target has
/// a pipeline.
pub(super) async fn postgres_checks(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    wal_level(client, findings).await?;
    slot_headroom(client, target, findings).await?;
    async_commit_latency(client, findings).await?;
    open_transactions(client, target, findings).await?;
    let version: i64 = setting_number(client, "server_version_num").await?;
    failover_slots(client, version, findings).await?;
    failover::checks(client, target, version / 10_000, findings).await?;
    standby::checks(client, target, version / 10_000, findings).await?;
    versions::checks(client, target, version / 10_000, findings).await?;
    wal_budget::checks(client, target, findings).await?;
    wal_disk::checks(client, target, findings).await?;
    slot_findings(client, target, findings).await?;
    keep_size(client, findings).await?;
    let (user, create) = privileges(client, findings).await?;
    if let Some(pipeline) = &target.pipeline {
        pipeline_tables(client, pipeline, &user, create, findings).await?;
    }
    Ok(())
}

/// `pg.wal_level`: logical decoding needs `wal_level = logical`.
async fn wal_level(
    client: &Client,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let wal_level = setting(client, "wal_level").await?;
    findings.push(if wal_level == "logical" {
        finding(
            "pg.wal_level",
            Severity::Ok,
            "wal_level = logical",
            &[("wal_level", wal_level.into())],
            "",
        )
    } else {
        finding(
            "pg.wal_level",
            Severity::Critical,
            format!("wal_level = {wal_level}: logical decoding is impossible"),
            &[("wal_level", wal_level.into())],
            "ALTER SYSTEM SET wal_level = logical; then restart PostgreSQL",
        )
    });
    Ok(())
}

/// `pg.slot_headroom`: a free replication slot for the pipeline's slot, and WAL senders to spare.
async fn slot_headroom(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let max_slots = setting_number(client, "max_replication_slots").await?;
    let used_slots: i64 = client
        .query_one("SELECT count(*) FROM pg_replication_slots", &[])
        .await?
        .get(0);
    let max_senders = setting_number(client, "max_wal_senders").await?;
    let used_senders: i64 = client
        .query_one("SELECT count(*) FROM pg_stat_replication", &[])
        .await?
        .get(0);
    let slot_exists = match &target.pipeline {
        Some(p) => client
            .query_opt(
                "SELECT 1 FROM pg_replication_slots WHERE slot_name = $1",
                &[&p.slot_name()],
            )
            .await?
            .is_some(),
        None => true,
    };
    let free_slots = max_slots - used_slots;
    let evidence = [
        ("max_replication_slots", max_slots.into()),
        ("slots_in_use", used_slots.into()),
        ("max_wal_senders", max_senders.into()),
        ("wal_senders_in_use", used_senders.into()),
    ];
    findings.push(if free_slots <= 0 && !slot_exists {
        finding(
            "pg.slot_headroom",
            Severity::Critical,
            "no free replication slot for this pipeline's slot",
            &evidence,
            "drop unused slots (see `sluice slots`) or raise max_replication_slots (restart needed)",
        )
    } else if free_slots <= 1 || max_senders - used_senders <= 1 {
        finding(
            "pg.slot_headroom",
            Severity::Warning,
            "at most one free replication slot or WAL sender left: the next consumer (or a reconnect racing an old walsender) will be refused",
            &evidence,
            "raise max_replication_slots and max_wal_senders (restart needed), or drop unused slots",
        )
    } else {
        finding("pg.slot_headroom", Severity::Ok, "replication slots and WAL senders have headroom", &evidence, "")
    });
    Ok(())
}

/// `pg.async_commit_latency`: the latency trap, asynchronous commit waiting for the WAL writer.
async fn async_commit_latency(
    client: &Client,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let synchronous_commit = setting(client, "synchronous_commit").await?;
    let wal_writer_delay_ms = setting_number(client, "wal_writer_delay").await?;
    let evidence = [
        ("synchronous_commit", synchronous_commit.clone().into()),
        ("wal_writer_delay_ms", wal_writer_delay_ms.into()),
    ];
    findings.push(
        if synchronous_commit == "off" && wal_writer_delay_ms > WAL_WRITER_DELAY_WARNING_MS {
            finding(
                "pg.async_commit_latency",
                Severity::Warning,
                format!(
                    "synchronous_commit = off with wal_writer_delay = {wal_writer_delay_ms} ms: a commit is decoded only once the WAL writer flushes it, so changes reach Kafka up to {} ms (3 × wal_writer_delay) after their commit",
                    3 * wal_writer_delay_ms
                ),
                &evidence,
                "set synchronous_commit = on for the writers whose changes must arrive fast, or lower wal_writer_delay (e.g. ALTER SYSTEM SET wal_writer_delay = '10ms'; SELECT pg_reload_conf())",
            )
        } else {
            finding("pg.async_commit_latency", Severity::Ok, "commits are flushed promptly", &evidence, "")
        },
    );
    Ok(())
}

/// `pg.open_transactions`: transactions that wrote (or prepared ones) open for longer than the
/// target's threshold, anywhere in the cluster. A new slot's creation waits for every such
/// transaction, and a slot of the same database cannot move its restart point (the WAL it
/// retains) past their start.
async fn open_transactions(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let threshold = target.long_transaction.unwrap_or(super::LONG_TRANSACTION);
    let holders = slot_wait::holders(client, threshold, None).await?;
    findings.push(open_transactions_finding(threshold, &holders));
    Ok(())
}

/// [`open_transactions`]'s finding for the `holders` found open past `threshold`.
fn open_transactions_finding(threshold: Duration, holders: &[slot_wait::Holder]) -> Finding {
    let limit = threshold.as_secs();
    let evidence = [
        ("threshold_s", limit.into()),
        (
            "transactions",
            serde_json::to_value(holders).unwrap_or_default(),
        ),
    ];
    if holders.is_empty() {
        return finding(
            "pg.open_transactions",
            Severity::Ok,
            format!("no transaction that wrote has been open for {limit} s or more"),
            &evidence,
            "",
        );
    }
    let named: Vec<String> = holders.iter().map(slot_wait::Holder::describe).collect();
    finding(
        "pg.open_transactions",
        Severity::Warning,
        format!(
            "{} transaction{} that wrote {} been open for {limit} s or more (at most 3 of each kind are named): a new pipeline's slot creation waits for {}, and no slot of the same database can move its restart point (the WAL it retains) past {} start: {}",
            holders.len(),
            if holders.len() == 1 { "" } else { "s" },
            if holders.len() == 1 { "has" } else { "have" },
            if holders.len() == 1 { "it" } else { "them" },
            if holders.len() == 1 { "its" } else { "their" },
            named.join("; ")
        ),
        &evidence,
        "end them as each one's text says; idle_in_transaction_session_timeout ends sessions that stay idle in a transaction",
    )
}

/// `pg.failover_slots`: whether logical decoding waits for the standbys.
async fn failover_slots(
    client: &Client,
    version: i64,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    // Failover: logical decoding may send a transaction a standby has not received yet (a
    // synchronous standby only delays the commit's visibility, not its decoding). After a
    // failover to that standby the database lacks what Kafka has, and before PostgreSQL 17
    // logical slots do not exist on standbys at all.
    let standby_names = setting(client, "synchronous_standby_names").await?;
    let physical_standbys: i64 = client
        .query_one(
            // A physical walsender is connected to no database; a logical one (sluice's own,
            // also before its slot is active) is.
            "SELECT count(*) FROM pg_stat_replication r JOIN pg_stat_activity a ON a.pid = r.pid \
             WHERE a.datid IS NULL",
            &[],
        )
        .await?
        .get(0);
    let synchronized_slots = if version >= 170_000 {
        setting(client, "synchronized_standby_slots").await?
    } else {
        String::new()
    };
    let evidence = [
        ("server_version_num", version.into()),
        ("synchronous_standby_names", standby_names.clone().into()),
        ("physical_standbys", physical_standbys.into()),
        (
            "synchronized_standby_slots",
            synchronized_slots.clone().into(),
        ),
    ];
    let has_standbys = physical_standbys > 0 || !standby_names.is_empty();
    findings.push(if !has_standbys {
        finding(
            "pg.failover_slots",
            Severity::Ok,
            "no standby: nothing to fail over to",
            &evidence,
            "",
        )
    } else if version < 170_000 {
        finding(
            "pg.failover_slots",
            Severity::Warning,
            "this server has standbys, and before PostgreSQL 17 logical decoding does not wait for them and slots do not fail over: after a failover sluice's slot is gone, and Kafka may hold changes the new primary never received",
            &evidence,
            "after a failover, start the pipeline with on_slot_loss = \"recreate\" and snapshot = \"when_needed\" (a fresh snapshot on the new primary), and treat events from just before the failover as possibly absent there; PostgreSQL 17+ fixes both (failover slots, synchronized_standby_slots)",
        )
    } else if synchronized_slots.is_empty() {
        finding(
            "pg.failover_slots",
            Severity::Warning,
            "this server has standbys but synchronized_standby_slots is empty: logical decoding can send changes a standby has not received, which a failover to it loses",
            &evidence,
            "ALTER SYSTEM SET synchronized_standby_slots = '<the standbys' physical slots>'; SELECT pg_reload_conf(); and have the standbys sync the slot (sync_replication_slots = on, hot_standby_feedback = on)",
        )
    } else {
        finding(
            "pg.failover_slots",
            Severity::Ok,
            "logical decoding waits for the standbys in synchronized_standby_slots",
            &evidence,
            "",
        )
    });
    Ok(())
}

/// `pg.slot_lost`, `pg.slot_unreserved`, `pg.slot_inactive`: invalidated slots, and inactive ones
/// with the WAL they retain.
async fn slot_findings(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let own_slot = target.pipeline.as_ref().map(PgPipelineConfig::slot_name);
    let rows = client
        .query(
            &format!(
                "SELECT slot_name::text, active, coalesce(wal_status, ''), \
                    coalesce(({SERVER_WAL_LSN} - restart_lsn)::bigint, 0) \
             FROM pg_replication_slots ORDER BY 1"
            ),
            &[],
        )
        .await?;
    for row in &rows {
        let name: String = row.get(0);
        let active: bool = row.get(1);
        let wal_status: String = row.get(2);
        let retained: i64 = row.get(3);
        let owned = own_slot.as_deref() == Some(name.as_str());
        let evidence = [
            ("slot", name.clone().into()),
            ("active", active.into()),
            ("wal_status", wal_status.clone().into()),
            ("retained_wal_bytes", retained.into()),
            ("owned_by_this_pipeline", owned.into()),
        ];
        match wal_status.as_str() {
            "lost" => findings.push(finding(
                "pg.slot_lost",
                Severity::Critical,
                format!("slot {name:?} was invalidated (wal_status = lost): its consumer has lost changes"),
                &evidence,
                format!("re-snapshot its consumer's tables, then SELECT pg_drop_replication_slot('{name}') and let the consumer create a new one"),
            )),
            "unreserved" => findings.push(finding(
                "pg.slot_unreserved",
                Severity::Warning,
                format!("slot {name:?} retains more WAL than max_slot_wal_keep_size allows: it will be invalidated at the next checkpoint unless its consumer catches up"),
                &evidence,
                "make its consumer catch up now (see its status), or raise max_slot_wal_keep_size",
            )),
            _ => {}
        }
        if !active {
            let severity = if retained >= RETAINED_WARNING_BYTES {
                Severity::Warning
            } else {
                Severity::Info
            };
            findings.push(finding(
                "pg.slot_inactive",
                severity,
                format!(
                    "slot {name:?} is inactive and retains {} of WAL{}",
                    human_bytes(retained),
                    if owned {
                        " (this pipeline's slot: is sluice running?)"
                    } else {
                        ""
                    }
                ),
                &evidence,
                if owned {
                    "start the pipeline (`sluice run`), or drop the slot if the pipeline is retired"
                        .to_owned()
                } else {
                    format!(
                        "if nothing consumes it any more: SELECT pg_drop_replication_slot('{name}')"
                    )
                },
            ));
        }
    }
    Ok(())
}

/// `pg.max_slot_wal_keep_size`: a limit on the WAL an abandoned slot retains.
async fn keep_size(
    client: &Client,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let keep = setting_number(client, "max_slot_wal_keep_size").await?;
    findings.push(if keep < 0 {
        finding(
            "pg.max_slot_wal_keep_size",
            Severity::Warning,
            "max_slot_wal_keep_size = -1: an abandoned slot retains WAL without limit and can fill the disk",
            &[("max_slot_wal_keep_size_mb", keep.into())],
            "ALTER SYSTEM SET max_slot_wal_keep_size = '50GB' (sized below the WAL disk's free space); SELECT pg_reload_conf(); and alert on sluice_source_replication_lag_bytes",
        )
    } else {
        finding(
            "pg.max_slot_wal_keep_size",
            Severity::Ok,
            format!("max_slot_wal_keep_size = {keep} MB"),
            &[("max_slot_wal_keep_size_mb", keep.into())],
            "",
        )
    });
    Ok(())
}

/// `pg.privilege_replication`: the role may open replication connections. Returns the role
/// and whether it may create in the database (for the publication).
async fn privileges(
    client: &Client,
    findings: &mut Vec<Finding>,
) -> Result<(String, bool), tokio_postgres::Error> {
    let row = client
        .query_one(
            "SELECT current_user::text, rolreplication, rolsuper, \
                    has_database_privilege(current_database(), 'CREATE') \
             FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .await?;
    let (user, replication, superuser, create): (String, bool, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    let evidence = [
        ("user", user.clone().into()),
        ("replication", replication.into()),
        ("superuser", superuser.into()),
        ("create_on_database", create.into()),
    ];
    findings.push(if !(replication || superuser) {
        finding(
            "pg.privilege_replication",
            Severity::Critical,
            format!("role {user:?} may not open replication connections"),
            &evidence,
            format!("ALTER ROLE {user} REPLICATION"),
        )
    } else {
        finding(
            "pg.privilege_replication",
            Severity::Ok,
            format!("role {user:?} may replicate"),
            &evidence,
            "",
        )
    });
    Ok((user, create))
}

/// Checks of the captured tables: keys, replica identity, publication, SELECT privilege.
async fn pipeline_tables(
    client: &Client,
    pipeline: &PgPipelineConfig,
    user: &str,
    may_create: bool,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let pg = &pipeline.source;
    let publication = pipeline.publication_name();
    let publication_exists = client
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await?
        .is_some();
    if !publication_exists {
        findings.push(if !pg.create_publication {
            finding(
                "pg.publication_missing",
                Severity::Critical,
                format!("publication {publication:?} does not exist and create_publication = false"),
                &[("publication", publication.clone().into())],
                format!("CREATE PUBLICATION {publication} FOR TABLE …, or set source.postgres.create_publication = true"),
            )
        } else if !may_create {
            finding(
                "pg.privilege_create",
                Severity::Critical,
                format!("publication {publication:?} must be created but role {user:?} lacks CREATE on the database"),
                &[("publication", publication.clone().into()), ("user", user.into())],
                format!("GRANT CREATE ON DATABASE … TO {user}, or create the publication as its owner"),
            )
        } else {
            finding(
                "pg.publication_missing",
                Severity::Info,
                format!("publication {publication:?} will be created when the pipeline starts"),
                &[("publication", publication.clone().into())],
                "",
            )
        });
    }
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text, c.relreplident::text, \
                    EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid AND i.indisprimary), \
                    EXISTS (SELECT 1 FROM pg_publication_tables p WHERE p.pubname = $3 \
                            AND p.schemaname = n.nspname AND p.tablename = c.relname), \
                    has_table_privilege(c.oid, 'SELECT') \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition \
               AND (n.nspname = ANY($1) OR (n.nspname || '.' || c.relname) = ANY($2)) \
             ORDER BY 1, 2",
            &[&pg.schemas, &pg.tables, &publication],
        )
        .await?;
    for table in &pg.tables {
        let found = rows
            .iter()
            .any(|r| format!("{}.{}", r.get::<_, String>(0), r.get::<_, String>(1)) == *table);
        if !found {
            findings.push(finding(
                "pg.table_missing",
                Severity::Critical,
                format!("configured table {table} does not exist"),
                &[("table", table.clone().into())],
                "fix source.postgres.tables (schema.table, case-sensitive) or create the table",
            ));
        }
    }
    for row in &rows {
        let name = format!("{}.{}", row.get::<_, String>(0), row.get::<_, String>(1));
        let identity: String = row.get(2);
        let has_pk: bool = row.get(3);
        let in_publication: bool = row.get(4);
        let can_select: bool = row.get(5);
        let evidence = [
            ("table", name.clone().into()),
            ("replica_identity", identity.clone().into()),
            ("primary_key", has_pk.into()),
        ];
        match (identity.as_str(), has_pk) {
            ("n", _) | ("d", false) => findings.push(finding(
                "pg.table_no_key",
                Severity::Critical,
                format!(
                    "{name} has no primary key and replica identity {}: once it is in the publication, UPDATE and DELETE on it fail on the server",
                    if identity == "n" { "nothing" } else { "default" }
                ),
                &evidence,
                format!("add a primary key, or ALTER TABLE {name} REPLICA IDENTITY FULL (or USING INDEX on a unique, not-null index)"),
            )),
            ("f", false) => findings.push(finding(
                "pg.table_no_key",
                Severity::Warning,
                format!("{name} has no primary key (replica identity full): its records get null keys, so Kafka cannot keep per-row order or compact them"),
                &evidence,
                format!("add a primary key to {name}"),
            )),
            _ => {}
        }
        if publication_exists && !in_publication {
            findings.push(finding(
                "pg.publication_coverage",
                Severity::Warning,
                format!("{name} is captured by the pipeline but not in publication {publication:?}: its changes are not decoded"),
                &[("table", name.clone().into()), ("publication", publication.clone().into())],
                format!("ALTER PUBLICATION {publication} ADD TABLE {name}"),
            ));
        }
        if !can_select {
            findings.push(finding(
                "pg.privilege_select",
                Severity::Warning,
                format!("role {user:?} cannot SELECT {name} (needed for snapshots and checks)"),
                &[("table", name.clone().into()), ("user", user.into())],
                format!("GRANT SELECT ON {name} TO {user}"),
            ));
        }
    }
    if publication_exists {
        partition_findings(client, pipeline, &publication, findings).await?;
    }
    Ok(())
}

/// Partitioned tables and an existing publication: `publish_via_partition_root` against
/// `source.postgres.partitions`, and a publication that lists a partitioned table and one of
/// its partitions.
async fn partition_findings(
    client: &Client,
    pipeline: &PgPipelineConfig,
    publication: &str,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    let version = setting_number(client, "server_version_num").await? / 10000;
    let Ok(mode) = PartitionMode::resolve(
        pipeline.source.partitions,
        u32::try_from(version).unwrap_or_default(),
    ) else {
        findings.push(finding(
            "pg.partitions_root_unsupported",
            Severity::Critical,
            format!("source.postgres.partitions = \"root\" needs PostgreSQL 13 or later (the server is {version})"),
            &[("server_version", version.into())],
            "set source.postgres.partitions = \"leaves\", or upgrade PostgreSQL",
        ));
        return Ok(());
    };
    if version >= 13 {
        let via_root: bool = client
            .query_one(
                "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
                &[&publication],
            )
            .await?
            .get(0);
        let want = mode == PartitionMode::Root;
        let pg = &pipeline.source;
        // Only a partitioned table (or a partition) captured is concerned.
        let partitioned: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
                     WHERE (c.relkind = 'p' OR c.relispartition) \
                       AND (n.nspname = ANY($1) OR (n.nspname || '.' || c.relname) = ANY($2)))",
                &[&pg.schemas, &pg.tables],
            )
            .await?
            .get(0);
        if via_root != want && partitioned {
            let managed = pipeline.source.create_publication;
            findings.push(finding(
                "pg.publication_partition_root",
                if managed { Severity::Info } else { Severity::Critical },
                format!(
                    "publication {publication:?} has publish_via_partition_root = {via_root}, but source.postgres.partitions = \"{}\" needs {want}: {}",
                    mode.as_str(),
                    if managed {
                        "sluice sets it when the pipeline starts (partitioned tables' topics change)"
                    } else {
                        "create_publication = false, so the pipeline refuses to start (partitions' changes would go to other topics than their snapshot)"
                    }
                ),
                &[
                    ("publication", publication.into()),
                    ("publish_via_partition_root", via_root.into()),
                    ("partitions", mode.as_str().into()),
                ],
                if managed {
                    String::new()
                } else {
                    format!("ALTER PUBLICATION {publication} SET (publish_via_partition_root = {want})")
                },
            ));
        }
    }
    let both = client
        .query(
            "SELECT format('%s.%s', rn.nspname, r.relname), format('%s.%s', n.nspname, c.relname) \
             FROM pg_publication p JOIN pg_publication_rel pr ON pr.prpubid = p.oid \
             JOIN pg_class c ON c.oid = pr.prrelid JOIN pg_namespace n ON n.oid = c.relnamespace \
             CROSS JOIN LATERAL pg_partition_ancestors(c.oid) a \
             JOIN pg_publication_rel pa ON pa.prpubid = p.oid AND pa.prrelid = a.relid \
             JOIN pg_class r ON r.oid = a.relid JOIN pg_namespace rn ON rn.oid = r.relnamespace \
             WHERE p.pubname = $1 AND a.relid <> c.oid ORDER BY 1, 2",
            &[&publication],
        )
        .await?;
    for row in both {
        let (root, leaf): (String, String) = (row.get(0), row.get(1));
        findings.push(finding(
            "pg.publication_root_and_partition",
            Severity::Warning,
            format!(
                "publication {publication:?} lists both {root} and its partition {leaf}: the partition's changes are then published under one name or the other depending on publish_via_partition_root, and consumers of both (a snapshot of {root} and the stream of {leaf}, or another publication on the same slot) get its rows twice"
            ),
            &[
                ("publication", publication.into()),
                ("table", root.clone().into()),
                ("partition", leaf.clone().into()),
            ],
            format!(
                "ALTER PUBLICATION {publication} DROP TABLE {leaf} (listing {root} publishes its partitions, present and future)"
            ),
        ));
    }
    Ok(())
}

/// A PostgreSQL reached over the network without `sslmode=verify-full` can be impersonated.
pub(super) fn tls_check(url: &str, findings: &mut Vec<Finding>) {
    let Ok(config) = PgConnectConfig::parse(url) else {
        return;
    };
    if config.has_remote_host() && config.tls.mode != SslMode::VerifyFull {
        findings.push(finding(
            "pg.tls_not_verified",
            Severity::Warning,
            format!(
                "PostgreSQL is reached over the network with sslmode={}: the connection is not \
                 both encrypted and checked against the server's certificate and host name",
                config.tls.mode.as_str()
            ),
            &[("sslmode", config.tls.mode.as_str().into())],
            "add sslmode=verify-full&sslrootcert=<CA file> (or sslrootcert=system) to the URL",
        ));
    }
}

/// The captured tables (partitions' roots), `schema.table`.
pub(super) async fn captured_table_names(
    url: &str,
    pipeline: &PgPipelineConfig,
) -> anyhow::Result<Vec<String>> {
    let (client, task) = connect_sql_url(url).await?;
    let pg = &pipeline.source;
    let rows = client
        .query(
            "SELECT n.nspname || '.' || c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition \
               AND (n.nspname = ANY($1) OR (n.nspname || '.' || c.relname) = ANY($2)) ORDER BY 1",
            &[&pg.schemas, &pg.tables],
        )
        .await?;
    drop(client);
    let _ = task.await;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

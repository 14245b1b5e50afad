//! `sluice doctor`: inspects PostgreSQL, Kafka and the pipeline, and reports findings, each
//! with a stable code, a severity, the evidence (the values read) and the concrete fix.
//! `sluice slots`: every replication slot with its lag and whether sluice owns it; for a
//! MySQL/MariaDB pipeline, its saved binlog position against the server's.
//!
//! The checks read catalogs and settings only; they never change anything. Every finding
//! code is listed with its check and fix in `docs/doctor.md`.
//!
//! - `mysql`: the MySQL/MariaDB source's server, retention and saved position.
//! - `failover`: failover slots (PostgreSQL 17+) on the primary and the URL's standbys.
//! - `target`: what doctor looks at, and how it reads a server's settings.
//! - `versions`: what the server's version cannot do that the pipeline asks for, and
//!   PostgreSQL 18's `idle_replication_slot_timeout`.
//! - `wal_budget`: the pipeline's WAL budget against `max_slot_wal_keep_size` and its slot.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::human_bytes;
use crate::pg_connect::{PgConnectConfig, SslMode, connect_sql_url, redact_url};
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::Serialize;
use tokio_postgres::Client;

use crate::kafka;
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::postgres::config::{PartitionMode, PgPipelineConfig};
use crate::source::postgres::setup::SERVER_WAL_LSN;

mod failover;
mod finding;
mod mysql;
mod registry;
mod standby;
mod target;
mod versions;
mod wal_budget;
mod wal_disk;

use finding::finding;
pub use finding::{Finding, Severity};
pub use mysql::{BinlogPlace, binlog_place, render_binlog_place};
pub use target::Target;
use target::{setting, setting_number};

/// The findings for a MySQL/MariaDB → Kafka pipeline: its server, binlog retention and saved
/// position, and the Kafka checks.
pub async fn diagnose_mysql(config: &MysqlPipelineConfig) -> Vec<Finding> {
    let mut findings = Vec::new();
    mysql::checks(config, &mut findings).await;
    let target = Target {
        brokers: Some(config.kafka.brokers.clone()),
        kafka_client: Some(config.kafka.client.clone()),
        ..Target::default()
    };
    kafka_checks(&config.kafka.brokers, &target, &mut findings).await;
    findings
}

/// Slots retaining less WAL than this are not worth a warning.
const RETAINED_WARNING_BYTES: i64 = 1024 * 1024 * 1024;
/// `wal_writer_delay` above which `synchronous_commit = off` adds visible latency.
const WAL_WRITER_DELAY_WARNING_MS: i64 = 20;

/// Runs every check that the target allows.
pub async fn diagnose(target: &Target) -> Vec<Finding> {
    let mut findings = Vec::new();
    match &target.pg_url {
        Some(url) => match connect_sql_url(url).await {
            Ok((client, task)) => {
                tls_check(url, &mut findings);
                if let Err(error) = postgres_checks(&client, target, &mut findings).await {
                    findings.push(finding(
                        "pg.query_failed",
                        Severity::Critical,
                        format!("a PostgreSQL check failed: {error}"),
                        &[],
                        "see the server's message; the role may lack privileges to read pg_settings or pg_replication_slots (grant pg_monitor)",
                    ));
                }
                drop(client);
                let _ = task.await;
            }
            Err(error) => findings.push(finding(
                "pg.unreachable",
                Severity::Critical,
                format!("cannot connect to PostgreSQL: {error}"),
                &[("url", redact_url(url).into())],
                "check the URL (host, port, database, user, password) and pg_hba.conf",
            )),
        },
        None => findings.push(finding(
            "pg.not_checked",
            Severity::Info,
            "PostgreSQL not checked: no --pipeline, --pg-url or PG_URL",
            &[],
            "",
        )),
    }
    match &target.brokers {
        Some(brokers) => kafka_checks(brokers, target, &mut findings).await,
        None => findings.push(finding(
            "kafka.not_checked",
            Severity::Info,
            "Kafka not checked: no --pipeline, --brokers or KAFKA_BROKERS",
            &[],
            "",
        )),
    }
    if let Some(pipeline) = &target.pipeline {
        pipeline_checks(pipeline, &mut findings);
        if let Some(registry) = &pipeline.schema_registry
            && pipeline.kafka.events.uses_avro()
        {
            use crate::event::EventFormat;
            // The subjects of the captured tables' topics (the registry may hold thousands).
            let topics = match crate::source::postgres::setup::PgCatalog::connect(pipeline).await {
                Ok(catalog) => catalog
                    .captured_tables(pipeline)
                    .await
                    .map(|tables| {
                        tables
                            .iter()
                            .map(|t| format!("{}.{}", pipeline.kafka.topic_prefix, t.qualified()))
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default(),
                Err(_) => Vec::new(),
            };
            let events = &pipeline.kafka.events;
            let avro = (
                events.key_format() == EventFormat::Avro,
                events.value_format() == EventFormat::Avro,
            );
            registry::checks(registry, &topics, avro, &mut findings).await;
        }
    }
    findings
}

async fn postgres_checks(
    client: &Client,
    target: &Target,
    findings: &mut Vec<Finding>,
) -> Result<(), tokio_postgres::Error> {
    // wal_level.
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

    // Slot and WAL-sender headroom.
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

    // The latency trap: asynchronous commit waits for the WAL writer.
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

    // Failover: logical decoding may send a transaction a standby has not received yet (a
    // synchronous standby only delays the commit's visibility, not its decoding). After a
    // failover to that standby the database lacks what Kafka has, and before PostgreSQL 17
    // logical slots do not exist on standbys at all.
    let version: i64 = setting_number(client, "server_version_num").await?;
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
    failover::checks(client, target, version / 10_000, findings).await?;
    standby::checks(client, target, version / 10_000, findings).await?;
    versions::checks(client, target, version / 10_000, findings).await?;
    wal_budget::checks(client, target, findings).await?;
    wal_disk::checks(client, target, findings).await?;

    // Slots: inactive ones and the WAL they retain; invalidated ones.
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

    // max_slot_wal_keep_size.
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

    // Privileges.
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

    if let Some(pipeline) = &target.pipeline {
        pipeline_tables(client, pipeline, &user, create, findings).await?;
    }
    Ok(())
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

/// Whether `host` (of `host:port`) is this machine.
fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `kafka.plaintext`: brokers off this machine reached without TLS (`PLAINTEXT` or
/// `SASL_PLAINTEXT`): records, and SASL passwords with PLAIN, cross the network readable.
fn unencrypted_kafka(
    brokers: &str,
    client: &std::collections::BTreeMap<String, String>,
) -> Option<Finding> {
    let protocol = client
        .get("security.protocol")
        .filter(|p| !p.is_empty())
        .map_or("PLAINTEXT".to_owned(), |p| p.to_ascii_uppercase());
    if protocol != "PLAINTEXT" && protocol != "SASL_PLAINTEXT" {
        return None;
    }
    let remote: Vec<&str> = brokers
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .filter(|b| {
            let host = b.rsplit_once(':').map_or(*b, |(host, _)| host);
            !is_loopback(host)
        })
        .collect();
    if remote.is_empty() {
        return None;
    }
    Some(finding(
        "kafka.plaintext",
        Severity::Warning,
        format!(
            "Kafka at {} is reached over {protocol}: records (and PLAIN passwords) cross the network unencrypted",
            remote.join(",")
        ),
        &[
            ("brokers", remote.join(",").into()),
            ("security.protocol", protocol.clone().into()),
        ],
        "use the brokers' TLS listener: [kafka.client] \"security.protocol\" = \"SASL_SSL\" (or \"SSL\"), with ssl.ca.location for a private CA",
    ))
}

async fn kafka_checks(brokers: &str, target: &Target, findings: &mut Vec<Finding>) {
    // The pipeline's [kafka.client] (security) when a pipeline is given.
    let common = target
        .pipeline
        .as_ref()
        .map(|p| p.kafka.client.clone())
        .or_else(|| target.kafka_client.clone())
        .unwrap_or_default();
    if let Some(found) = unencrypted_kafka(brokers, &common) {
        findings.push(found);
    }
    let client = crate::kafka::client_config(brokers, &common);
    let metadata = tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client.create()?;
        consumer.fetch_metadata(None, Duration::from_secs(10))
    })
    .await;
    let metadata = match metadata {
        Ok(Ok(metadata)) => metadata,
        Ok(Err(error)) => {
            findings.push(finding(
                "kafka.unreachable",
                Severity::Critical,
                format!("cannot reach Kafka at {brokers}: {error}"),
                &[("brokers", brokers.into())],
                "check the bootstrap servers and that the brokers are up and reachable from here",
            ));
            return;
        }
        Err(error) => {
            findings.push(finding(
                "kafka.unreachable",
                Severity::Critical,
                error.to_string(),
                &[],
                "",
            ));
            return;
        }
    };
    let partitions: BTreeMap<String, (usize, usize)> = metadata
        .topics()
        .iter()
        .map(|t| {
            let replicas = t.partitions().first().map_or(0, |p| p.replicas().len());
            (t.name().to_owned(), (t.partitions().len(), replicas))
        })
        .collect();
    let broker_id = metadata.brokers().first().map(|b| b.id());
    // The topics to look at: the pipeline's, else none (cluster-wide checks only).
    let mut topics: Vec<String> = Vec::new();
    if let Some(pipeline) = &target.pipeline
        && let Some(pg_url) = &target.pg_url
        && let Ok(tables) = captured_table_names(pg_url, pipeline).await
    {
        {
            for table in tables {
                let topic = format!("{}.{table}", pipeline.kafka.topic_prefix);
                if partitions.contains_key(&topic) {
                    topics.push(topic);
                } else {
                    findings.push(finding(
                        "kafka.topic_missing",
                        if pipeline.kafka.create_topics { Severity::Info } else { Severity::Critical },
                        if pipeline.kafka.create_topics {
                            format!("topic {topic} will be created with {} partition(s)", pipeline.kafka.topic_partitions)
                        } else {
                            format!("topic {topic} does not exist and kafka.create_topics = false: the pipeline stops at its first change")
                        },
                        &[("topic", topic.clone().into())],
                        if pipeline.kafka.create_topics { String::new() } else {
                            format!("create {topic} (partitions by your ordering and throughput needs) or set kafka.create_topics = true")
                        },
                    ));
                }
            }
        }
    }
    let admin: AdminClient<DefaultClientContext> =
        match crate::kafka::client_config(brokers, &common).create() {
            Ok(admin) => admin,
            Err(_) => return,
        };
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(20)));
    let broker_key = broker_id.map(|id| id.to_string());
    let mut resources: Vec<ResourceSpecifier<'_>> =
        topics.iter().map(|t| ResourceSpecifier::Topic(t)).collect();
    if let Some(id) = broker_id {
        resources.push(ResourceSpecifier::Broker(id));
    }
    let Ok(Ok(results)) = tokio::time::timeout(
        Duration::from_secs(30),
        admin.describe_configs(&resources, &options),
    )
    .await
    else {
        return;
    };
    let acks = target
        .pipeline
        .as_ref()
        .map(|p| kafka::effective_producer_settings(&p.kafka))
        .and_then(|s| s.get("acks").cloned())
        .unwrap_or_else(|| "all".into());
    let results: Vec<_> = results.into_iter().flatten().collect();
    let cleaner = results
        .iter()
        .find_map(|resource| match resource.specifier {
            rdkafka::admin::OwnedResourceSpecifier::Broker(_) => {
                let get = |key: &str| resource.get(key).and_then(|e| e.value.clone());
                crate::compaction::configs::cleaner_settings(&get).ok()
            }
            _ => None,
        });
    for resource in &results {
        let get = |key: &str| resource.get(key).and_then(|e| e.value.clone());
        match &resource.specifier {
            rdkafka::admin::OwnedResourceSpecifier::Topic(topic) => {
                let (_, replicas) = partitions.get(topic).copied().unwrap_or((0, 0));
                topic_findings(topic, replicas, &acks, &get, findings);
                if let Some(pipeline) = &target.pipeline {
                    let policy = get("cleanup.policy").unwrap_or_default();
                    compaction_findings(
                        brokers, &common, pipeline, topic, cleaner, policy, findings,
                    )
                    .await;
                }
            }
            rdkafka::admin::OwnedResourceSpecifier::Broker(_) => {
                let message_max: i64 = get("message.max.bytes")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                findings.push(finding(
                    "kafka.broker_message_max_bytes",
                    Severity::Info,
                    format!("broker {} accepts records up to {} (message.max.bytes); larger rows stop the pipeline or go to the dead-letter topic", broker_key.clone().unwrap_or_default(), human_bytes(message_max)),
                    &[("message_max_bytes", message_max.into())],
                    "",
                ));
            }
            _ => {}
        }
    }
}

/// Findings about compaction of one of the pipeline's topics: compaction requested in
/// `kafka.topic_config` but not in force, and a largest partition with more records (an upper
/// bound of its keys) than one pass of the cleaner maps.
async fn compaction_findings(
    brokers: &str,
    common: &BTreeMap<String, String>,
    pipeline: &PgPipelineConfig,
    topic: &str,
    cleaner: Option<crate::compaction::model::CleanerSettings>,
    policy: String,
    findings: &mut Vec<Finding>,
) {
    let compacted = policy.split(',').any(|p| p.trim() == "compact");
    let requested = pipeline
        .kafka
        .topic_configs(topic, true)
        .get("cleanup.policy")
        .is_some_and(|p| p.split(',').any(|p| p.trim() == "compact"));
    if requested && !compacted {
        findings.push(finding(
            "kafka.compaction_not_in_force",
            Severity::Warning,
            format!("{topic}: the pipeline asks for cleanup.policy = compact (kafka.topic_config), but the topic has cleanup.policy = {policy}: it was created before, or by someone else, and keeps every change instead of the newest per key"),
            &[("topic", topic.into()), ("cleanup_policy", policy.clone().into())],
            format!("kafka-configs --alter --entity-type topics --entity-name {topic} --add-config cleanup.policy=compact"),
        ));
    }
    let Some(cleaner) = cleaner.filter(|_| compacted) else {
        return;
    };
    let client = crate::kafka::client_config(brokers, common);
    let name = topic.to_owned();
    let largest = tokio::task::spawn_blocking(move || -> Option<(i32, i64)> {
        let consumer: BaseConsumer = client.create().ok()?;
        let metadata = consumer
            .fetch_metadata(Some(&name), Duration::from_secs(10))
            .ok()?;
        let partitions: Vec<i32> = metadata
            .topics()
            .first()?
            .partitions()
            .iter()
            .map(|p| p.id())
            .collect();
        partitions
            .into_iter()
            .filter_map(|p| {
                let (low, high) = consumer
                    .fetch_watermarks(&name, p, Duration::from_secs(10))
                    .ok()?;
                Some((p, high - low))
            })
            .max_by_key(|(_, records)| *records)
    })
    .await
    .ok()
    .flatten();
    let Some((partition, records)) = largest else {
        return;
    };
    let per_pass = cleaner.keys_per_pass();
    if records > 0 && records as u64 > per_pass {
        let passes = (records as u64).div_ceil(per_pass.max(1));
        findings.push(finding(
            "kafka.compaction_dedupe_buffer",
            Severity::Warning,
            format!("{topic}: partition {partition} holds {records} records and one pass of the log cleaner maps {per_pass} keys (log.cleaner.dedupe.buffer.size {} / {} thread(s)): if most of them are distinct keys, each clean takes up to {passes} passes and the log stays larger meanwhile", cleaner.dedupe_buffer_bytes, cleaner.threads),
            &[
                ("topic", topic.into()),
                ("partition", partition.into()),
                ("records", records.into()),
                ("keys_per_pass", per_pass.into()),
                ("dedupe_buffer_bytes", cleaner.dedupe_buffer_bytes.into()),
            ],
            format!("count the keys with `sluice compaction plan --topic {topic}`; if they exceed {per_pass}, {}", match cleaner.dedupe_buffer_for(records as u64) {
                Some(bytes) => format!("raise log.cleaner.dedupe.buffer.size to {bytes} (maps {records} keys in one pass) or spread the topic over more partitions"),
                None => "spread the topic over more partitions (no dedupe buffer maps that many keys in one pass)".to_owned(),
            }),
        ));
    }
}

/// Findings of one topic's configuration.
fn topic_findings(
    topic: &str,
    replicas: usize,
    acks: &str,
    get: &dyn Fn(&str) -> Option<String>,
    findings: &mut Vec<Finding>,
) {
    let min_isr: usize = get("min.insync.replicas")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let evidence = [
        ("topic", topic.into()),
        ("replication_factor", replicas.into()),
        ("min_insync_replicas", min_isr.into()),
        ("acks", acks.into()),
    ];
    if (acks == "all" || acks == "-1") && min_isr > replicas {
        findings.push(finding(
            "kafka.min_insync_replicas",
            Severity::Critical,
            format!("{topic}: min.insync.replicas = {min_isr} exceeds the replication factor {replicas}: every acks=all produce is refused (NOT_ENOUGH_REPLICAS)"),
            &evidence,
            format!("kafka-configs --alter --entity-type topics --entity-name {topic} --add-config min.insync.replicas={}", replicas.max(1)),
        ));
    } else if replicas > 1 && min_isr >= replicas {
        findings.push(finding(
            "kafka.min_insync_replicas",
            Severity::Warning,
            format!("{topic}: min.insync.replicas = {min_isr} equals the replication factor: one broker down stops the pipeline"),
            &evidence,
            format!("set min.insync.replicas = {} on {topic}", replicas - 1),
        ));
    } else if replicas <= 1 {
        findings.push(finding(
            "kafka.replication_factor",
            Severity::Info,
            format!("{topic}: replication factor {replicas}: one broker's loss loses the topic (fine for development)"),
            &evidence,
            "for production, create topics with kafka.topic_replication_factor = 3",
        ));
    }
    let policy = get("cleanup.policy").unwrap_or_default();
    if policy.contains("compact") {
        let ratio: f64 = get("min.cleanable.dirty.ratio")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.5);
        let delete_retention_ms: i64 = get("delete.retention.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(86_400_000);
        let segment_ms: i64 = get("segment.ms")
            .and_then(|v| v.parse().ok())
            .unwrap_or(604_800_000);
        let evidence = [
            ("topic", topic.into()),
            ("cleanup_policy", policy.clone().into()),
            ("min_cleanable_dirty_ratio", ratio.into()),
            ("delete_retention_ms", delete_retention_ms.into()),
            ("segment_ms", segment_ms.into()),
        ];
        if delete_retention_ms < 3_600_000 {
            findings.push(finding(
                "kafka.compaction_tombstones",
                Severity::Warning,
                format!("{topic}: compacted with delete.retention.ms = {delete_retention_ms}: a consumer that is down longer than that misses the tombstones of deleted rows and keeps them forever"),
                &evidence,
                format!("set delete.retention.ms on {topic} above your consumers' longest outage (default 86400000 = 1 day)"),
            ));
        }
        if segment_ms >= 604_800_000 {
            findings.push(finding(
                "kafka.compaction_segment",
                Severity::Info,
                format!("{topic}: compacted, but the active segment rolls only every {} h (segment.ms): recent updates stay uncompacted that long", segment_ms / 3_600_000),
                &evidence,
                format!("lower segment.ms on {topic} (e.g. 3600000) if readers replay it from the start"),
            ));
        }
        if ratio > 0.5 {
            findings.push(finding(
                "kafka.compaction_dirty_ratio",
                Severity::Info,
                format!("{topic}: min.cleanable.dirty.ratio = {ratio}: more than half of the log may be obsolete before it is cleaned"),
                &evidence,
                format!("lower min.cleanable.dirty.ratio on {topic} (0.1–0.5) if replay time or disk matters"),
            ));
        }
    }
}

/// A PostgreSQL reached over the network without `sslmode=verify-full` can be impersonated.
fn tls_check(url: &str, findings: &mut Vec<Finding>) {
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

async fn captured_table_names(
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

/// Producer settings that cap records per request, and the checkpoint interval.
fn pipeline_checks(pipeline: &PgPipelineConfig, findings: &mut Vec<Finding>) {
    let settings = kafka::effective_producer_settings(&pipeline.kafka);
    let batch_size: i64 = settings
        .get("batch.size")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let linger_ms: f64 = settings
        .get("linger.ms")
        .and_then(|v| v.parse().ok())
        .unwrap_or(5.0);
    // A Debezium envelope of a modest row is ~0.5–1 KiB; 1 KiB is the estimate used here.
    let records_per_batch = batch_size / 1024;
    let evidence = [
        ("batch.size", batch_size.into()),
        ("linger.ms", linger_ms.into()),
        ("records_per_batch_at_1KiB", records_per_batch.into()),
    ];
    findings.push(if records_per_batch < 100 {
        finding(
            "pipeline.batch_size",
            Severity::Warning,
            format!("batch.size = {batch_size} fits only ~{records_per_batch} change events of ~1 KiB per partition request: throughput is capped by round trips"),
            &evidence,
            "remove the batch.size override (sluice's default is 1000000) or raise it in [kafka.producer]",
        )
    } else if linger_ms <= 0.0 {
        finding(
            "pipeline.linger",
            Severity::Info,
            "linger.ms = 0: every record is sent as soon as possible, in small requests under load",
            &evidence,
            "\"linger.ms\" = \"5\" in [kafka.producer] batches better at ~5 ms added latency",
        )
    } else {
        finding("pipeline.batch_size", Severity::Ok, "producer batching is not capped", &evidence, "")
    });
    let budget = u64::from(pipeline.delivery.in_flight_bytes());
    let memory_limit = pipeline.delivery.memory_limit;
    let derived = if pipeline.delivery.max_in_flight_bytes.is_some() {
        "delivery.max_in_flight_bytes"
    } else {
        "from delivery.memory_limit"
    };
    findings.push(if budget < 4 * 1024 * 1024 {
        finding(
            "pipeline.inflight_budget",
            Severity::Warning,
            format!("in-flight budget {} ({derived}): with a broker 10 ms away this caps throughput near {}/s", human_bytes(budget as i64), human_bytes((budget * 100) as i64)),
            &[("max_in_flight_bytes", budget.into()), ("memory_limit", memory_limit.into())],
            "raise delivery.memory_limit (default 128 MiB; the budget is an eighth of it) or delivery.max_in_flight_bytes, unless memory is tight",
        )
    } else {
        finding("pipeline.inflight_budget", Severity::Ok, format!("in-flight budget {} ({derived}), memory limit {}", human_bytes(budget as i64), human_bytes(memory_limit as i64)), &[("max_in_flight_bytes", budget.into()), ("memory_limit", memory_limit.into())], "")
    });
    let status_ms = pipeline.source.status_interval_ms;
    findings.push(finding(
        "pipeline.checkpoint_interval",
        if status_ms > 10_000 { Severity::Warning } else { Severity::Ok },
        format!("checkpoints every {status_ms} ms"),
        &[("status_interval_ms", status_ms.into())],
        if status_ms > 10_000 { "lower source.postgres.status_interval_ms: the server's wal_sender_timeout (60 s) must see replies well within it, and WAL is released only at checkpoints" } else { "" },
    ));
}

/// The exit code for the worst severity.
pub fn exit_code(findings: &[Finding]) -> ExitCode {
    match findings.iter().map(|f| f.severity).max() {
        Some(Severity::Critical) => ExitCode::from(2),
        Some(Severity::Warning) => ExitCode::from(1),
        _ => ExitCode::SUCCESS,
    }
}

/// Human output: problems first, then what is fine.
pub fn render(findings: &[Finding]) -> String {
    let mut sorted: Vec<&Finding> = findings.iter().collect();
    sorted.sort_by(|a, b| b.severity.cmp(&a.severity).then(a.code.cmp(b.code)));
    let mut out = String::new();
    for f in sorted {
        let _ = writeln!(out, "[{}] {}: {}", f.severity.label(), f.code, f.summary);
        if f.severity > Severity::Ok && !f.evidence.is_empty() {
            let evidence: Vec<String> = f
                .evidence
                .iter()
                .map(|(k, v)| {
                    format!(
                        "{k}={}",
                        v.as_str().map_or_else(|| v.to_string(), str::to_owned)
                    )
                })
                .collect();
            let _ = writeln!(out, "    evidence: {}", evidence.join(", "));
        }
        if !f.fix.is_empty() {
            let _ = writeln!(out, "    fix: {}", f.fix);
        }
    }
    let count = |s| findings.iter().filter(|f| f.severity == s).count();
    let _ = writeln!(
        out,
        "{} critical, {} warning(s), {} info, {} ok",
        count(Severity::Critical),
        count(Severity::Warning),
        count(Severity::Info),
        count(Severity::Ok)
    );
    out
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exit_code_is_the_worst_severity() {
        let f = |s| finding("x", s, "", &[], "");
        assert_eq!(
            exit_code(&[f(Severity::Ok), f(Severity::Info)]),
            ExitCode::SUCCESS
        );
        assert_eq!(
            exit_code(&[f(Severity::Warning), f(Severity::Ok)]),
            ExitCode::from(1)
        );
        assert_eq!(
            exit_code(&[f(Severity::Warning), f(Severity::Critical)]),
            ExitCode::from(2)
        );
    }

    #[test]
    fn compacted_topics_with_short_tombstone_retention_are_flagged() {
        let mut findings = Vec::new();
        let config = |key: &str| match key {
            "cleanup.policy" => Some("compact".to_owned()),
            "delete.retention.ms" => Some("60000".to_owned()),
            "min.insync.replicas" => Some("2".to_owned()),
            _ => None,
        };
        topic_findings("t", 1, "all", &config, &mut findings);
        let codes: Vec<_> = findings.iter().map(|f| (f.code, f.severity)).collect();
        assert!(
            codes.contains(&("kafka.min_insync_replicas", Severity::Critical)),
            "{codes:?}"
        );
        assert!(
            codes.contains(&("kafka.compaction_tombstones", Severity::Warning)),
            "{codes:?}"
        );
        assert!(
            codes.contains(&("kafka.compaction_segment", Severity::Info)),
            "{codes:?}"
        );
    }

    #[test]
    fn passwords_never_reach_the_output() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(human_bytes(3 * 1024 * 1024), "3.0 MiB");
    }
    #[test]
    fn plaintext_to_a_remote_broker_is_a_finding() {
        use std::collections::BTreeMap;
        let none = BTreeMap::new();
        assert!(unencrypted_kafka("127.0.0.1:9092,localhost:9093,[::1]:9094", &none).is_none());
        let found = unencrypted_kafka("127.0.0.1:9092,kafka-1.prod:9092", &none).expect("remote");
        assert_eq!(found.code, "kafka.plaintext");
        assert!(
            found.summary.contains("kafka-1.prod:9092"),
            "{}",
            found.summary
        );
        let sasl_plain: BTreeMap<String, String> =
            [("security.protocol".to_owned(), "sasl_plaintext".to_owned())].into();
        assert!(unencrypted_kafka("10.0.0.5:9092", &sasl_plain).is_some());
        let tls: BTreeMap<String, String> =
            [("security.protocol".to_owned(), "SASL_SSL".to_owned())].into();
        assert!(unencrypted_kafka("kafka-1.prod:9093", &tls).is_none());
    }
}

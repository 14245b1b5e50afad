//! Taking over a running Debezium connector without a re-snapshot: its committed offset is
//! read and the preconditions are checked against the server before anything changes; each
//! failure is named with its fix.
//!
//! PostgreSQL: sluice streams from the connector's slot. A pipeline without a slot record
//! adopts an existing slot and streams from its confirmed position without snapshotting
//! (`source/postgres/stream.rs`), so the checks are that the slot is Debezium's and usable,
//! that the publication covers the captured tables, and that the slot is not ahead of
//! Debezium's committed offset (a slot ahead would skip changes Debezium never recorded).
//! Debezium confirms `lsn_commit` (the end of the last transaction it processed completely) to
//! the slot only after Connect has stored the offset, so the slot is usually exactly there and
//! Debezium, restarted, would stream from there too. When the slot is behind (Connect stopped
//! between storing the offset and confirming it), sluice advances it to `lsn_commit`, skipping
//! exactly the transactions Debezium delivered and committed, as a restarted Debezium would;
//! nothing past its committed offset is ever skipped. What Debezium produced after its last
//! committed offset is delivered again (at-least-once, as a Debezium restart).
//!
//! MySQL: see [`super::mysql_takeover`] (the position is seeded into sluice's state store).

use std::path::Path;

use anyhow::{Context as _, bail};
use sluice_engine::Lsn;

use super::check::{Check, report};
use super::connector::{ConnectorConfig, ConnectorKind};
use super::offsets::{self, MysqlOffset, OffsetRecord, PgOffset};
use super::session::Imported;
use crate::pipeline_file::PipelineFile;

/// Reads the offsets, checks the takeover's preconditions and (when all hold) prepares the
/// source; prints what it found. False when a check failed (nothing was changed).
///
/// # Errors
///
/// The offsets or the server cannot be read.
pub fn prepare(
    connector: &ConnectorConfig,
    imported: &Imported,
    source: &str,
    brokers: Option<&str>,
) -> anyhow::Result<bool> {
    let records = load_records(source, brokers)?;
    let prefix = connector
        .get("topic.prefix")
        .or_else(|| connector.get("database.server.name"))
        .context("the connector has no topic.prefix: its offsets cannot be found")?;
    let name = connector.name.as_deref();
    let Some(record) = offsets::newest(&records, name, prefix) else {
        let keys: std::collections::BTreeSet<String> =
            records.iter().map(|r| r.key.to_string()).collect();
        eprintln!(
            "offsets: no record for connector {} with server {prefix:?} in {source} ({} records; keys: {})",
            name.map_or("(any)".to_owned(), |n| format!("{n:?}")),
            records.len(),
            keys.into_iter().take(10).collect::<Vec<_>>().join(" ")
        );
        eprintln!(
            "  fix: the connector has not committed an offset (or its name or topic.prefix differ): without one there is nothing to continue from; run `sluice import debezium` without --offsets to start a new pipeline"
        );
        return Ok(false);
    };
    let Some(value) = &record.value else {
        eprintln!(
            "offsets: the newest record for {} is a tombstone: the connector's offsets were reset",
            record.key
        );
        eprintln!(
            "  fix: nothing to continue from; run without --offsets to start a new pipeline (it snapshots)"
        );
        return Ok(false);
    };
    let config = PipelineFile::from_toml(&imported.text, "the imported pipeline", &|n| {
        std::env::var(n).ok()
    })
    .map_err(|e| anyhow::anyhow!("{e}"))
    .context("the imported pipeline file does not load here (set the variables it names)")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match (connector.kind(), config) {
        (ConnectorKind::Postgres, PipelineFile::Postgres(config)) => {
            let offset = PgOffset::parse(value)?;
            eprintln!(
                "offsets: connector {} in {source}: lsn_commit {}, lsn {}, lsn_proc {}, txId {}",
                record.key,
                show(offset.lsn_commit),
                show(offset.lsn),
                show(offset.lsn_proc),
                offset.tx_id.map_or("-".to_owned(), |t| t.to_string())
            );
            runtime.block_on(postgres(&config, &offset))
        }
        (ConnectorKind::Mysql, PipelineFile::Mysql(config)) => {
            let offset = MysqlOffset::parse(value)?;
            eprintln!(
                "offsets: connector {} in {source}: file {} pos {} gtids {} (events to skip {})",
                record.key,
                offset.file,
                offset.pos,
                offset.gtids.as_deref().unwrap_or("-"),
                offset.skip_events
            );
            runtime.block_on(super::mysql_takeover::prepare(&config, &offset))
        }
        _ => bail!("the imported file is not of the connector's kind"),
    }
}

fn show(lsn: Option<Lsn>) -> String {
    lsn.map_or("-".to_owned(), |l| l.to_string())
}

fn load_records(source: &str, brokers: Option<&str>) -> anyhow::Result<Vec<OffsetRecord>> {
    if let Some(topic) = source.strip_prefix("kafka:") {
        let brokers = brokers.context(
            "--offsets kafka:<topic> needs the brokers: pass --brokers HOST:PORT (or set KAFKA_BROKERS)",
        )?;
        return offsets::read_topic(brokers, topic);
    }
    let path = Path::new(source);
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read the offsets file {source} (expected kafka:<topic> or a file dumped from it)"))?;
    offsets::parse_dump(&text).with_context(|| format!("offsets file {source}"))
}

/// The slot as the checks read it.
#[derive(Debug, Clone)]
struct Slot {
    slot_type: String,
    plugin: String,
    database: String,
    active: bool,
    wal_status: String,
    confirmed: Option<Lsn>,
}

async fn postgres(
    config: &crate::source::postgres::config::PgPipelineConfig,
    offset: &PgOffset,
) -> anyhow::Result<bool> {
    let slot_name = config.source.slot_name(&config.name);
    let publication = config.source.publication_name(&config.name);
    let (client, _task) = crate::pg_connect::connect_sql_url(&config.source.connection())
        .await
        .context("cannot connect to PostgreSQL with the imported file's source.postgres.url")?;
    let row = client
        .query_opt(
            "SELECT slot_type, coalesce(plugin, ''), coalesce(database, ''), active, \
             coalesce(wal_status, ''), confirmed_flush_lsn::text \
             FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot_name],
        )
        .await
        .context("cannot read pg_replication_slots")?;
    let database: String = client
        .query_one("SELECT current_database()", &[])
        .await?
        .get(0);
    let mut checks = Vec::new();
    let slot = row.map(|row| Slot {
        slot_type: row.get(0),
        plugin: row.get(1),
        database: row.get(2),
        active: row.get(3),
        wal_status: row.get(4),
        confirmed: row
            .get::<_, Option<String>>(5)
            .and_then(|t| t.parse::<Lsn>().ok()),
    });
    let Some(slot) = slot else {
        checks.push(Check::failed(
            format!("slot {slot_name:?} exists"),
            "the connector's slot is gone (slot.drop.on.stop, or dropped): there is nothing to continue from without a snapshot; run without --offsets",
        ));
        return Ok(report(&checks));
    };
    checks.push(Check::ok(format!("slot {slot_name:?} exists")));
    checks.push(if slot.slot_type == "logical" && slot.plugin == "pgoutput" {
        Check::ok("it is a logical slot of pgoutput")
    } else {
        Check::failed(
            format!("it is a logical slot of pgoutput (it is {} of {:?})", slot.slot_type, slot.plugin),
            "sluice decodes pgoutput only: a decoderbufs slot cannot be taken over (start a new pipeline)",
        )
    });
    checks.push(if slot.database == database {
        Check::ok(format!("it is of database {database:?}"))
    } else {
        Check::failed(
            format!(
                "it is of database {database:?} (it is of {:?})",
                slot.database
            ),
            "point database.dbname at the slot's database",
        )
    });
    checks.push(if slot.active {
        Check::failed(
            "it is inactive",
            "stop the connector first (curl -X PUT http://CONNECT:8083/connectors/NAME/stop), wait until pg_replication_slots.active is false",
        )
    } else {
        Check::ok("it is inactive")
    });
    checks.push(if slot.wal_status == "lost" {
        Check::failed(
            "it still holds its WAL (wal_status is not lost)",
            "the server invalidated the slot (max_slot_wal_keep_size): the changes are gone; a new pipeline with a snapshot is the way on",
        )
    } else {
        Check::ok(format!("it still holds its WAL (wal_status {:?})", slot.wal_status))
    });
    checks.push(if offset.snapshot_running {
        Check::failed(
            "Debezium's initial snapshot had finished",
            "the offset is mid-snapshot: let Debezium finish its snapshot, or start a new pipeline (which snapshots)",
        )
    } else {
        Check::ok("Debezium's initial snapshot had finished")
    });
    let committed = offset.confirmed();
    let (Some(confirmed), Some(committed)) = (slot.confirmed, committed) else {
        checks.push(Check::failed(
            "the slot's confirmed position and the offset's are known",
            "the slot has no confirmed position yet or the offset none: let Debezium stream and commit once",
        ));
        return Ok(report(&checks));
    };
    checks.push(if confirmed <= committed {
        Check::ok(format!(
            "the slot (confirmed {confirmed}) is not ahead of Debezium's committed offset ({committed})"
        ))
    } else {
        Check::failed(
            format!("the slot (confirmed {confirmed}) is not ahead of Debezium's committed offset ({committed})"),
            "something advanced the slot past what Debezium recorded: the changes in between may be missing from Kafka; check who uses the slot (or offsets of another connector were given)",
        )
    });
    publication_checks(&client, config, &publication, &mut checks).await?;
    let state_file = config
        .state_dir()
        .join(format!("{}.slot.json", config.name));
    checks.push(if state_file.exists() {
        Check::failed(
            format!("no sluice state for pipeline {:?} yet", config.name),
            format!("{} exists: this pipeline already ran; remove the file only if that run's slot is this one (sluice would otherwise refuse the slot)", state_file.display()),
        )
    } else {
        Check::ok(format!("no sluice state for pipeline {:?} yet", config.name))
    });
    if !report(&checks) {
        return Ok(false);
    }
    if confirmed < committed {
        client
            .query_one(
                "SELECT end_lsn::text FROM pg_replication_slot_advance($1, $2::text::pg_lsn)",
                &[&slot_name, &committed.to_string()],
            )
            .await
            .with_context(|| {
                format!("cannot advance slot {slot_name:?} to Debezium's committed {committed}")
            })?;
        eprintln!(
            "takeover: slot {slot_name:?} advanced from {confirmed} to {committed}: the transactions Debezium delivered and committed before it are not sent again"
        );
    }
    eprintln!(
        "takeover: `sluice run` streams slot {slot_name:?} from {}, without a snapshot; what Debezium produced after its committed offset is delivered again (at-least-once)",
        confirmed.max(committed)
    );
    Ok(true)
}

async fn publication_checks(
    client: &tokio_postgres::Client,
    config: &crate::source::postgres::config::PgPipelineConfig,
    publication: &str,
    checks: &mut Vec<Check>,
) -> anyhow::Result<()> {
    let row = client
        .query_opt("SELECT puballtables, pubinsert AND pubupdate AND pubdelete FROM pg_publication WHERE pubname = $1", &[&publication])
        .await
        .context("cannot read pg_publication")?;
    let Some(row) = row else {
        checks.push(Check::failed(
            format!("publication {publication:?} exists"),
            "the connector's publication is gone: create it for the captured tables (CREATE PUBLICATION … FOR TABLE …) before sluice runs",
        ));
        return Ok(());
    };
    checks.push(Check::ok(format!("publication {publication:?} exists")));
    let all: bool = row.get(0);
    let every_op: bool = row.get(1);
    if !every_op {
        checks.push(Check::failed(
            "it publishes inserts, updates and deletes",
            "ALTER PUBLICATION … SET (publish = 'insert, update, delete, truncate')",
        ));
    }
    let tables = client
        .query(
            "SELECT n.nspname || '.' || c.relname, \
                    EXISTS (SELECT 1 FROM pg_publication_tables p WHERE p.pubname = $1 \
                            AND p.schemaname = n.nspname AND p.tablename = c.relname) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.relkind IN ('r', 'p') AND n.nspname NOT IN ('pg_catalog', 'information_schema')",
            &[&publication],
        )
        .await
        .context("cannot list the tables")?;
    let missing: Vec<String> = tables
        .iter()
        .filter(|row| config.source.captures_table(row.get::<_, &str>(0)))
        .filter(|row| !all && !row.get::<_, bool>(1))
        .map(|row| row.get::<_, String>(0))
        .collect();
    checks.push(if missing.is_empty() {
        Check::ok("it covers every captured table")
    } else {
        Check::failed(
            format!(
                "it covers every captured table (missing: {})",
                missing.join(", ")
            ),
            format!(
                "ALTER PUBLICATION {publication} ADD TABLE {} (or narrow the table lists)",
                missing.join(", ")
            ),
        )
    });
    Ok(())
}

//! `sluice check`: validate the pipeline file and connectivity, and show what would be captured.

use std::process::ExitCode;
use std::time::Duration;

use crate::error::PipelineError;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::kafka_source::TopicSelector;
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::mysql::server::SettingIssue;
use crate::source::postgres::config::{PartitionMode, PgPipelineConfig};
use crate::source::postgres::publication::PublicationPlan;
use crate::source::postgres::setup::PgCatalog;

/// How long `sluice check` waits for the brokers.
const CHECK_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs the checks, printing a report; the exit code is 0 when everything is ready.
///
/// # Errors
///
/// Never for failed checks (they are reported); only for broken output.
pub async fn check(config: &PgPipelineConfig) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    println!("pipeline {:?}: configuration is valid", config.name);
    let mut topics = Vec::new();
    match check_postgres(config).await {
        Ok((lines, captured)) => {
            lines.iter().for_each(|line| println!("{line}"));
            topics = captured;
        }
        Err(error) => {
            ok = false;
            report_failure("postgresql", &error);
        }
    }
    if let Some(registry) = &config.schema_registry
        && config.kafka.events.uses_avro()
    {
        // With [transforms], the subjects are the routed topics' (the chain writes the Avro).
        let topics = config.routed_topics(&topics);
        ok &= check_registry(registry, &config.kafka.events, &topics).await;
    }
    match check_kafka(config).await {
        Ok(line) => println!("{line}"),
        Err(error) => {
            ok = false;
            report_failure("kafka", &error);
            if error.is_retryable() {
                println!(
                    "  fix: check kafka.brokers and that the brokers are up and reachable from here"
                );
            }
        }
    }
    println!("{}", if ok { "ready" } else { "not ready" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn report_failure(what: &str, error: &PipelineError) {
    println!("{what}: FAILED: {}", error.chain());
    if let Some(hint) = error.hint() {
        println!("  fix: {hint}");
    }
}

/// Reaches the schema registry with the pipeline's settings and names the subjects the
/// pipeline writes, their versions and compatibility levels; a level of `NONE` is flagged (it
/// lets a breaking change through to every consumer). Prints its lines; `false` when the
/// registry cannot be reached.
async fn check_registry(
    config: &crate::registry::RegistryConfig,
    events: &crate::event::EventOptions,
    topics: &[String],
) -> bool {
    use crate::event::EventFormat;
    let registry = match crate::registry::Registry::new(config.clone()) {
        Ok(registry) => registry,
        Err(error) => {
            println!("schema registry: FAILED: {error}");
            return false;
        }
    };
    let urls = config.url.shown();
    let global = match registry.probe().await {
        Ok(level) => level,
        Err(error) => {
            println!("schema registry {urls}: FAILED: {error}");
            println!(
                "  fix: check schema_registry.url and that the registry is up and reachable from here"
            );
            return false;
        }
    };
    println!("schema registry {urls}: connected (global compatibility {global})");
    for topic in topics {
        let mut parts = Vec::new();
        if events.key_format() == EventFormat::Avro {
            parts.push((true, format!("{topic}.Key")));
        }
        if events.value_format() == EventFormat::Avro {
            parts.push((false, format!("{topic}.Envelope")));
        }
        for (is_key, record) in parts {
            let subject = registry.subject(topic, is_key, &record);
            let versions = match registry.versions(&subject).await {
                Ok(0) => "will be registered".to_owned(),
                Ok(n) => format!("{n} version(s)"),
                Err(error) => format!("versions unknown ({error})"),
            };
            let level = registry.compatibility(&subject).await;
            let warning = if level == "NONE" {
                "  WARNING: compatibility NONE lets a breaking change (a dropped or retyped \
                 column) through to every consumer; set BACKWARD (PUT /config/<subject>)"
            } else {
                ""
            };
            println!("  subject {subject:?}: {versions}, compatibility {level}{warning}");
        }
    }
    true
}

async fn check_postgres(
    config: &PgPipelineConfig,
) -> Result<(Vec<String>, Vec<String>), PipelineError> {
    let catalog = PgCatalog::connect(config).await?;
    catalog.check_wal_level().await?;
    let version = catalog.server_major_version().await?;
    let mut lines = vec![format!(
        "postgresql: connected (server {version}, database {:?}), wal_level = logical",
        catalog.database().await?
    )];
    // A standby (16+; refused before): what goes to the primary.
    let standby = crate::source::postgres::standby::detect(&catalog, config).await?;
    let primary_writes = match &standby {
        None => true,
        Some(standby) => {
            lines.push(format!(
                "postgresql: a standby: the slot, the snapshot and the stream are on it; source.postgres.primary_url {}",
                match (&config.source.primary_url, &standby.primary) {
                    (None, _) => "not set (the publication must exist; no heartbeats)",
                    (Some(_), Some(_)) => "connected (publication, heartbeats, the slot's creation)",
                    (Some(_), None) => "UNREACHABLE (the publication must exist; no heartbeats)",
                }
            ));
            standby.primary.is_some()
        }
    };
    let slot = config.slot_name();
    lines.push(match catalog.slot(&slot).await? {
        Some(info) => format!(
            "slot {slot:?}: exists (plugin {}, confirmed {}, {})",
            info.plugin,
            info.confirmed_flush,
            if info.active { "active" } else { "inactive" }
        ),
        None => format!("slot {slot:?}: will be created"),
    });
    let publication = config.publication_name();
    let exists = catalog
        .client()
        .query_opt(
            "SELECT 1 FROM pg_publication WHERE pubname = $1",
            &[&publication],
        )
        .await
        .map_err(|e| crate::error::classify_pg("cannot read publications", e))?
        .is_some();
    lines.push(format!(
        "publication {publication:?}: {}",
        if exists {
            "exists"
        } else if config.source.create_publication && primary_writes {
            "will be created"
        } else if config.source.create_publication {
            "MISSING (a standby cannot create it: create it on the primary, or set source.postgres.primary_url)"
        } else {
            "MISSING (create_publication = false)"
        }
    ));
    let tables = catalog.captured_tables(config).await?;
    let plan = PublicationPlan::build(&catalog, config, &tables, version).await?;
    // The row filters the publication applies now (PostgreSQL 15 or later).
    let published: Vec<(String, Option<String>)> = if exists && version >= 15 {
        catalog
            .client()
            .query(
                "SELECT schemaname || '.' || tablename, rowfilter FROM pg_publication_tables \
                 WHERE pubname = $1",
                &[&publication],
            )
            .await
            .map_err(|e| crate::error::classify_pg("cannot read the publication's tables", e))?
            .iter()
            .map(|row| (row.get(0), row.get(1)))
            .collect()
    } else {
        Vec::new()
    };
    let mode = catalog.partition_mode(config).await?;
    lines.push(format!(
        "partitioned tables: partitions = \"{}\" ({})",
        mode.as_str(),
        match mode {
            PartitionMode::Root => "each one table under its root's name and topic",
            PartitionMode::Leaves => "each partition its own table and topic",
        }
    ));
    if exists && let Some(want) = plan.via_root {
        let now: bool = catalog
            .client()
            .query_one(
                "SELECT pubviaroot FROM pg_publication WHERE pubname = $1",
                &[&publication],
            )
            .await
            .map_err(|e| crate::error::classify_pg("cannot read publications", e))?
            .get(0);
        if now != want
            && crate::source::postgres::partition::any_partitioned(&catalog, &tables).await?
        {
            lines.push(format!(
                "  publication {publication:?} has publish_via_partition_root = {now}: MISMATCH, the partitions setting needs {want} ({})",
                if config.source.create_publication {
                    "sluice sets it at the start"
                } else {
                    "create_publication = false: the pipeline will refuse to start"
                }
            ));
        }
    }
    let partitions = match mode {
        PartitionMode::Root => {
            crate::source::postgres::partition::leaves(&catalog, &tables).await?
        }
        PartitionMode::Leaves => Vec::new(),
    };
    lines.push(format!("tables: {} captured", tables.len()));
    for table in &tables {
        let identity = match table.replica_identity {
            'f' => "full",
            'i' => "index",
            'n' => "nothing (updates and deletes will fail on the server!)",
            _ => "default",
        };
        let key = if table.has_primary_key {
            "primary key"
        } else {
            "no primary key: records get null keys"
        };
        lines.push(format!(
            "  {} -> topic {}.{}  ({key}; replica identity {identity})",
            table.qualified(),
            config.kafka.topic_prefix,
            table.qualified()
        ));
        lines.extend(filter_lines(&plan, &published, &table.qualified()));
        let qualified = table.qualified();
        let leaves: Vec<&str> = partitions
            .iter()
            .filter(|p| p.root == qualified)
            .map(|p| p.leaf.as_str())
            .collect();
        if !leaves.is_empty() {
            lines.push(format!(
                "    partitioned: {} partitions, their changes under this table: {}",
                leaves.len(),
                leaves.join(", ")
            ));
        }
        if let Some(root) = table.root() {
            lines.push(format!("    partition of {root}"));
        }
    }
    let topics = tables
        .iter()
        .map(|t| format!("{}.{}", config.kafka.topic_prefix, t.qualified()))
        .collect();
    Ok((lines, topics))
}

/// What the filters do to one table: its row filter and its excluded columns, and where each
/// is applied (in the publication, or by sluice).
fn filter_lines(
    plan: &PublicationPlan,
    published: &[(String, Option<String>)],
    qualified: &str,
) -> Vec<String> {
    let mut lines = Vec::new();
    let named = plan.table(qualified);
    if let Some(filter) = named.and_then(|t| t.filter.as_deref()) {
        let now = published
            .iter()
            .find(|(t, _)| t == qualified)
            .and_then(|(_, f)| f.as_deref());
        lines.push(format!(
            "      row filter: {filter}  (publication now: {})",
            now.unwrap_or("none; set at the next start")
        ));
    }
    if let Some(table) = named.filter(|t| t.columns.is_some()) {
        lines.push(format!(
            "      columns left out by the publication: {}",
            table.left_out.join(", ")
        ));
    }
    for columns in plan.client_side.iter().filter(|c| c.table == qualified) {
        lines.push(format!(
            "      excluded columns dropped by sluice: {} ({})",
            columns.columns.join(", "),
            columns.reason
        ));
    }
    lines
}

async fn check_kafka<S>(
    config: &crate::config::PipelineConfig<S>,
) -> Result<String, PipelineError> {
    let metadata = crate::kafka::probe_async(
        &config.kafka.brokers,
        &config.kafka.client,
        "kafka.client",
        CHECK_TIMEOUT,
        None,
    )
    .await?;
    Ok(format!(
        "kafka: connected to {} ({} broker(s), {} topic(s))",
        config.kafka.brokers,
        metadata.brokers().len(),
        metadata.topics().len()
    ))
}

/// `sluice check` for a MySQL/MariaDB → Kafka pipeline: the server answers, has the settings
/// and privileges a binlog reader needs (each wrong one named with its fix), and the brokers
/// answer.
///
/// # Errors
///
/// Never for failed checks (they are reported); only for broken output.
pub async fn check_mysql(config: &MysqlPipelineConfig) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    println!("pipeline {:?}: configuration is valid", config.name);
    let mut topics = Vec::new();
    match mysql_report(config).await {
        Ok((lines, issues, captured)) => {
            lines.iter().for_each(|line| println!("{line}"));
            for issue in &issues {
                ok = false;
                println!("mysql: {}: {}", issue.setting, issue.problem);
            }
            topics = captured;
        }
        Err(error) => {
            ok = false;
            report_failure("mysql", &error);
        }
    }
    if let Some(registry) = &config.schema_registry
        && config.kafka.events.uses_avro()
    {
        // With [transforms], the subjects are the routed topics' (the chain writes the Avro).
        let topics = config.routed_topics(&topics);
        ok &= check_registry(registry, &config.kafka.events, &topics).await;
    }
    match check_kafka(config).await {
        Ok(line) => println!("{line}"),
        Err(error) => {
            ok = false;
            report_failure("kafka", &error);
        }
    }
    println!("{}", if ok { "ready" } else { "not ready" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The server's report lines, the settings it lacks, and the topics of the captured tables.
async fn mysql_report(
    config: &MysqlPipelineConfig,
) -> Result<(Vec<String>, Vec<SettingIssue>, Vec<String>), PipelineError> {
    use crate::source::mysql::server;
    let mut conn = server::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    let mut issues = server::check_settings(&mut conn, flavor, &config.source).await?;
    issues.extend(server::signal_table_issues(&mut conn, flavor, &config.source).await?);
    let url = crate::source::mysql::config::redact_url(&config.source.url);
    // The position needs the privileges checked above.
    let line = if issues.is_empty() {
        let position = server::current_position(&mut conn, flavor).await?;
        format!("mysql: connected to {url} ({flavor:?}), binlog at {position}")
    } else {
        format!("mysql: connected to {url} ({flavor:?})")
    };
    let prefix = &config.kafka.topic_prefix;
    let topics = crate::source::mysql::snapshot::captured_tables(&mut conn, &config.source)
        .await?
        .iter()
        .map(|t| format!("{prefix}.{}.{}", t.database, t.table))
        .collect();
    Ok((vec![line], issues, topics))
}

/// `sluice check` for a Kafka → files pipeline: the brokers answer, the topics exist, and the
/// output root (if it exists) was written with the same number of sub-partitions.
///
/// # Errors
///
/// Never for failed checks (they are reported); only for broken output.
pub fn check_sink(config: &SinkPipelineConfig) -> anyhow::Result<ExitCode> {
    let mut ok = true;
    println!("pipeline {:?}: configuration is valid", config.name);
    let kafka = config.kafka();
    // The topics read: named ones, and what the patterns match now.
    let mut resolved = kafka.topic_names();
    let metadata = crate::kafka::probe(
        &kafka.brokers,
        &kafka.client,
        "source.kafka.client",
        CHECK_TIMEOUT,
        None,
    );
    match metadata {
        Ok(metadata) => {
            println!(
                "kafka: connected to {} ({} broker(s))",
                kafka.brokers,
                metadata.brokers().len()
            );
            resolved.clear();
            for selector in kafka.selectors() {
                match selector {
                    TopicSelector::Name(topic) => {
                        match metadata.topics().iter().find(|t| t.name() == topic) {
                            Some(found) if found.error().is_none() => {
                                println!(
                                    "topic {topic:?}: {} partition(s) -> group {:?}",
                                    found.partitions().len(),
                                    config.group_id()
                                );
                                resolved.push(topic);
                            }
                            _ => {
                                ok = false;
                                println!("topic {topic:?}: MISSING");
                            }
                        }
                    }
                    TopicSelector::Pattern(pattern) => {
                        let matched: Vec<String> = metadata
                            .topics()
                            .iter()
                            .map(|t| t.name().to_owned())
                            .filter(|name| !name.starts_with("__") && kafka.selects(name))
                            .collect();
                        println!(
                            "topics /{pattern}/: {} match now ({}); topics created later are read too",
                            matched.len(),
                            matched.join(", ")
                        );
                        resolved.extend(matched);
                    }
                }
            }
        }
        Err(error) => {
            ok = false;
            report_failure("kafka", &error);
            if error.is_retryable() {
                println!("  fix: check source.kafka.brokers and that the brokers are up");
            }
        }
    }
    if kafka.uses_avro()
        && let Some(registry) = &config.schema_registry
    {
        ok &= check_sink_registry(registry)?;
    }
    if let Some(iceberg) = config.iceberg() {
        ok &= check_iceberg_target(iceberg, &resolved)?;
        println!("{}", if ok { "ready" } else { "not ready" });
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        });
    }
    let files = match (config.files(), config.postgres()) {
        (Some(files), _) => files,
        (None, Some(postgres)) => {
            ok &= check_pg_target(postgres, &resolved)?;
            println!("{}", if ok { "ready" } else { "not ready" });
            return Ok(if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
        (None, None) => anyhow::bail!("the pipeline has no sink section"),
    };
    if let Some(url) = &files.url {
        ok &= check_object_store(url, files)?;
        println!("{}", if ok { "ready" } else { "not ready" });
        return Ok(if ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    let marker = files.path.join(crate::sink::files::ROOT_MARKER);
    match std::fs::read_to_string(&marker) {
        Ok(text) => {
            let stored = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["sub_partitions"].as_u64());
            if stored == Some(u64::from(files.sub_partitions)) {
                println!(
                    "output root {}: exists, {} sub-partitions",
                    files.path.display(),
                    files.sub_partitions
                );
            } else {
                ok = false;
                println!(
                    "output root {}: written with sub_partitions = {stored:?}, but the file says {}",
                    files.path.display(),
                    files.sub_partitions
                );
            }
        }
        Err(_) => println!("output root {}: will be created", files.path.display()),
    }
    println!("{}", if ok { "ready" } else { "not ready" });
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `sluice check` for a sink that reads Avro: the registry answers with the pipeline's
/// settings (the records' writer schemas are fetched from it by id).
fn check_sink_registry(config: &crate::registry::RegistryConfig) -> anyhow::Result<bool> {
    let registry = match crate::registry::Registry::new(config.clone()) {
        Ok(registry) => registry,
        Err(error) => {
            println!("schema registry: FAILED: {error}");
            return Ok(false);
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let urls = config.url.shown();
    Ok(match runtime.block_on(registry.probe()) {
        Ok(level) => {
            println!(
                "schema registry {urls}: connected (global compatibility {level}); Avro records' \
                 schemas are fetched from it by id"
            );
            true
        }
        Err(error) => {
            println!("schema registry {urls}: FAILED: {error}");
            println!(
                "  fix: check schema_registry.url and that the registry is up and reachable from here"
            );
            false
        }
    })
}

/// `sluice check` for a PostgreSQL sink: the target database answers, every topic's table
/// exists with the privileges the sink needs, and the progress table exists or can be created.
/// Reaches the Iceberg catalog (SQL or REST) and names each topic's table and its state (snapshots,
/// data files and rows of the current snapshot). Prints its lines; `false` when the catalog
/// cannot be read or a table is missing without `auto_create`.
fn check_iceberg_target(
    iceberg: &crate::sink::iceberg::config::IcebergSinkConfig,
    topics: &[String],
) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let target = crate::pg_connect::redact_url(&iceberg.catalog_uri);
    let catalog = match crate::sink::iceberg::writer::open_catalog("check", iceberg) {
        Ok(catalog) => catalog,
        Err(error) => {
            println!("catalog {target}: FAILED: {error}");
            return Ok(false);
        }
    };
    let namespace = iceberg::NamespaceIdent::new(iceberg.namespace.clone());
    match runtime.block_on(async {
        tokio::time::timeout(CHECK_TIMEOUT, catalog.namespace_exists(&namespace)).await
    }) {
        Ok(Ok(exists)) => println!(
            "catalog {target} ({:?}): connected; namespace {:?} {}",
            iceberg.catalog_name,
            iceberg.namespace,
            if exists { "exists" } else { "missing" }
        ),
        Ok(Err(error)) => {
            println!("catalog {target}: FAILED: {error}");
            println!("  fix: check sink.iceberg.catalog_uri and that the catalog is up");
            return Ok(false);
        }
        Err(_) => {
            println!("catalog {target}: FAILED: no answer within {CHECK_TIMEOUT:?}");
            return Ok(false);
        }
    }
    let mut ok = true;
    for topic in topics {
        let name = match iceberg.table_for(topic) {
            Ok(name) => name,
            Err(issue) => {
                ok = false;
                println!(
                    "topic {topic:?}: no table: {}: {}",
                    issue.key, issue.problem
                );
                continue;
            }
        };
        let ident = iceberg::TableIdent::new(namespace.clone(), name);
        match runtime.block_on(catalog.load_table(&ident)) {
            Ok(table) => {
                let metadata = table.metadata();
                let summary = metadata.current_snapshot().map(|s| s.summary());
                let get = |key: &str| {
                    summary
                        .and_then(|s| s.additional_properties.get(key).cloned())
                        .unwrap_or_else(|| "0".into())
                };
                println!(
                    "topic {topic:?} -> table {ident}: {} snapshot(s), {} data file(s), {} row(s) in the current snapshot",
                    metadata.snapshots().count(),
                    get("total-data-files"),
                    get("total-records"),
                );
            }
            Err(error) if error.kind() == iceberg::ErrorKind::TableNotFound => {
                if iceberg.auto_create {
                    println!(
                        "topic {topic:?} -> table {ident}: missing, created from the first event (auto_create)"
                    );
                } else {
                    ok = false;
                    println!("topic {topic:?} -> table {ident}: FAILED: missing");
                    println!("  fix: create it, or set sink.iceberg.auto_create = true");
                }
            }
            Err(error) => {
                ok = false;
                println!("topic {topic:?} -> table {ident}: FAILED: {error}");
            }
        }
    }
    Ok(ok)
}

fn check_pg_target(
    postgres: &crate::sink::postgres::config::PostgresSinkConfig,
    topics: &[String],
) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let target = crate::pg_connect::redact_url(&postgres.url);
    let connect = match crate::pg_connect::PgConnectConfig::parse(&postgres.url) {
        Ok(connect) => connect,
        Err(error) => {
            println!(
                "target {target}: FAILED: {}",
                error.0.replace("source.postgres.url", "sink.postgres.url")
            );
            return Ok(false);
        }
    };
    // The timer is made inside the runtime (it needs its reactor).
    let client = match runtime.block_on(async {
        tokio::time::timeout(CHECK_TIMEOUT, crate::pg_connect::connect_sql(&connect)).await
    }) {
        Ok(Ok((client, _task))) => client,
        Ok(Err(error)) => {
            println!("target {target}: FAILED: {error}");
            println!("  fix: check sink.postgres.url and that the database is up");
            return Ok(false);
        }
        Err(_) => {
            println!("target {target}: FAILED: no answer within {CHECK_TIMEOUT:?}");
            return Ok(false);
        }
    };
    println!("target {target}: connected");
    let mut ok = true;
    for topic in topics {
        let table = match postgres.table_for(topic) {
            Ok(table) => table,
            Err(issue) => {
                ok = false;
                println!(
                    "topic {topic:?}: no table: {}: {}",
                    issue.key, issue.problem
                );
                continue;
            }
        };
        let row = runtime.block_on(client.query_one(
            "SELECT to_regclass($1) IS NOT NULL,
                    to_regclass($1) IS NOT NULL
                    AND has_table_privilege(to_regclass($1), 'INSERT, UPDATE, DELETE, SELECT')",
            &[&table.quoted()],
        ));
        match row {
            Ok(row) if !row.get::<_, bool>(0) && postgres.auto_create => {
                println!(
                    "topic {topic:?} -> table {table}: missing, created from the first change (auto_create)"
                );
            }
            Ok(row) if !row.get::<_, bool>(0) => {
                ok = false;
                println!(
                    "topic {topic:?} -> table {table}: MISSING (create it, or set sink.postgres.auto_create = true)"
                );
            }
            Ok(row) if !row.get::<_, bool>(1) => {
                ok = false;
                println!(
                    "topic {topic:?} -> table {table}: the user lacks SELECT, INSERT, UPDATE or DELETE"
                );
            }
            Ok(_) => println!("topic {topic:?} -> table {table}"),
            Err(error) => {
                ok = false;
                println!("topic {topic:?} -> table {table}: FAILED: {error}");
            }
        }
    }
    let row = runtime.block_on(client.query_one(
        "SELECT to_regclass($1) IS NOT NULL
             OR has_schema_privilege($2, 'CREATE')",
        &[&postgres.progress_table(), &postgres.progress_schema],
    ));
    match row {
        Ok(row) if row.get::<_, bool>(0) => {
            println!("progress table {}: ready", postgres.progress_table());
        }
        Ok(_) => {
            ok = false;
            println!(
                "progress table {}: missing and the user cannot create it in schema {:?}",
                postgres.progress_table(),
                postgres.progress_schema
            );
        }
        Err(error) => {
            ok = false;
            println!("progress table: FAILED: {error}");
        }
    }
    Ok(ok)
}

/// Reads the S3 target's root marker: reachable, and written with the same sub-partitions.
fn check_object_store(
    url: &str,
    files: &crate::sink::config::FilesSinkConfig,
) -> anyhow::Result<bool> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let objects =
        match crate::sink::object::ObjectTarget::s3(url, &files.s3, runtime.handle().clone()) {
            Ok(objects) => objects,
            Err(error) => {
                println!("output {url}: FAILED: {error}");
                println!("  fix: check sink.files.url and [sink.files.s3]");
                return Ok(false);
            }
        };
    // A GET of a missing object and of an object in a missing bucket both say "not found";
    // a listing tells the missing bucket.
    let marker = objects
        .list(crate::sink::files::STATE_DIR)
        .and_then(|_| objects.get(crate::sink::files::ROOT_MARKER));
    match marker {
        Ok(Some(bytes)) => {
            let stored = serde_json::from_slice::<serde_json::Value>(&bytes)
                .ok()
                .and_then(|v| v["sub_partitions"].as_u64());
            if stored == Some(u64::from(files.sub_partitions)) {
                println!(
                    "output {url}: exists, {} sub-partitions",
                    files.sub_partitions
                );
                Ok(true)
            } else {
                println!(
                    "output {url}: written with sub_partitions = {stored:?}, but the file says {}",
                    files.sub_partitions
                );
                Ok(false)
            }
        }
        Ok(None) => {
            println!("output {url}: reachable, will be initialised");
            Ok(true)
        }
        Err(error) => {
            println!("output {url}: FAILED: {error}");
            println!(
                "  fix: check the bucket, the credentials ([sink.files.s3] or AWS_*) and sink.files.s3.endpoint"
            );
            Ok(false)
        }
    }
}

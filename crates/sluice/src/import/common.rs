//! The settings both Debezium connectors share (topic prefix, event options, heartbeats,
//! signals, snapshots) and Kafka Connect's own (converters, transforms, predicates, topic
//! creation, producer overrides, error handling).

use super::document::section;
use super::session::Import;

/// Debezium's event options that sluice takes by the same name (dots → `_`), with the values
/// it accepts (empty: any).
const EVENT_OPTIONS: &[(&str, &[&str])] = &[
    ("decimal.handling.mode", &["precise", "string", "double"]),
    (
        "time.precision.mode",
        &["adaptive", "adaptive_time_microseconds", "connect"],
    ),
    (
        "binary.handling.mode",
        &["bytes", "base64", "base64-url-safe", "hex"],
    ),
    ("skipped.operations", &[]),
];

/// The event options the MySQL source writes at Debezium's default only, with that default
/// (it applies `decimal.handling.mode`, `binary.handling.mode` and the converters' formats).
const MYSQL_FIXED: &[(&str, &str)] = &[
    ("time.precision.mode", "adaptive_time_microseconds"),
    ("skipped.operations", "t"),
    ("provide.transaction.metadata", "false"),
    ("column.propagate.source.type", ""),
];

/// Before the settings: what every file has.
pub fn begin(import: &mut Import<'_>) {
    import.doc.set("kafka", "brokers", "${KAFKA_BROKERS}", None);
    import.needs_env(
        "KAFKA_BROKERS",
        "the Kafka bootstrap servers (the Connect worker's bootstrap.servers; not in a connector's configuration)",
    );
}

/// Whether a setting may hold a config provider reference that the source section turns into
/// an environment variable (the password).
pub fn takes_provider_reference(key: &str) -> bool {
    key == "database.password"
}

/// The settings both connectors and Connect share; false when `key` is none of them.
pub fn setting(import: &mut Import<'_>, key: &str, value: &str) -> bool {
    if import.source == "source.mysql"
        && let Some((_, default)) = MYSQL_FIXED.iter().find(|(k, _)| *k == key)
    {
        if value.trim() == *default {
            import.carried(key);
        } else {
            import.dropped(
                key,
                format!("the MySQL source writes Debezium's default ({default:?}) only"),
                true,
            );
        }
        return true;
    }
    if let Some((_, allowed)) = EVENT_OPTIONS.iter().find(|(k, _)| *k == key) {
        event_option(import, key, value, allowed);
        return true;
    }
    if key.starts_with("key.converter") || key.starts_with("value.converter") {
        // All read together in `finish`.
        return true;
    }
    if key == "transforms"
        || key.starts_with("transforms.")
        || key == "predicates"
        || key.starts_with("predicates.")
    {
        transform_setting(import, key, value);
        return true;
    }
    if let Some(config) = key.strip_prefix("topic.creation.default.") {
        topic_creation(import, key, config, value);
        return true;
    }
    if let Some(property) = key.strip_prefix("producer.override.") {
        producer_override(import, key, property, value);
        return true;
    }
    match key {
        "name" => import.noted(key, "the pipeline's name (letters, digits and _ kept)"),
        "connector.class" => import.carried(key),
        "tasks.max" => import.noted(
            key,
            "Debezium runs one task whatever it says; sluice is one process that decodes and encodes on every core",
        ),
        "topic.prefix" | "database.server.name" => {
            import.doc.set("kafka", "topic_prefix", value, None);
            if key == "database.server.name" {
                import.noted(key, "the older name of topic.prefix: kafka.topic_prefix");
            } else {
                import.carried(key);
            }
        }
        "topic.delimiter" => {
            if value == "." {
                import.carried(key);
            } else {
                import.dropped(key, "sluice's topic names are joined with \".\"", true);
            }
        }
        "topic.naming.strategy" => {
            if matches!(
                value,
                "io.debezium.schema.SchemaTopicNamingStrategy"
                    | "io.debezium.schema.DefaultTopicNamingStrategy"
            ) {
                import.carried(key);
            } else {
                import.dropped(key, "sluice names topics <prefix>.<schema>.<table> (Debezium's default strategy) only", true);
            }
        }
        "topic.cache.size" => import.noted(key, "nothing to set: sluice keeps every topic name"),
        "topic.transaction" => {
            if value == "transaction" {
                import.carried(key);
            } else {
                import.dropped(key, "sluice writes transaction events to <prefix>.transaction only", true);
            }
        }
        "tombstones.on.delete" => bool_option(import, key, value, "tombstones_on_delete"),
        "provide.transaction.metadata" => {
            bool_option(import, key, value, "provide_transaction_metadata");
        }
        "column.propagate.source.type" => {
            import
                .doc
                .set("kafka.events", "column_propagate_source_type", value, None);
            import.carried(key);
        }
        "datatype.propagate.source.type" => import.dropped(
            key,
            "sluice propagates source types by column (column.propagate.source.type), not by data type",
            true,
        ),
        "heartbeat.interval.ms" => match value.parse::<u64>() {
            Ok(0) => {
                import.set_source("heartbeat_interval_ms", 0_i64);
                import.carried(key);
            }
            Ok(ms) => {
                import.set_source("heartbeat_interval_ms", i64::try_from(ms).unwrap_or(i64::MAX));
                import.dropped(
                    key,
                    format!("set as heartbeat_interval_ms = {ms} (keeps the source's position moving), but sluice writes no records to the __debezium-heartbeat.<prefix> topic"),
                    true,
                );
            }
            Err(_) => import.dropped(key, "not a number of milliseconds", false),
        },
        "heartbeat.topics.prefix" | "topic.heartbeat.prefix" => import.noted(
            key,
            "sluice writes no heartbeat topic (see heartbeat.interval.ms)",
        ),
        "heartbeat.action.query" => import.dropped(
            key,
            "sluice's heartbeat writes a logical decoding message (PostgreSQL) or asks for binlog heartbeats (MySQL); it runs no query",
            false,
        ),
        "signal.data.collection" => {
            let table = signal_table(import, value);
            import.set_source("signal_table", table.clone());
            import.noted(key, format!("signal_table = {table:?}: execute-snapshot and stop-snapshot, as Debezium's"));
        }
        "signal.enabled.channels" => {
            let channels: Vec<&str> = value.split(',').map(str::trim).collect();
            if channels.iter().all(|c| *c == "source") {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice takes signals from the signal table and its admin API (/api/v1/…/snapshots), not from Kafka, JMX or files",
                    false,
                );
            }
        }
        "incremental.snapshot.chunk.size" => number_option(import, key, value, "incremental_chunk_rows"),
        "snapshot.max.threads" => number_option(import, key, value, "snapshot_workers"),
        "snapshot.mode" => snapshot_mode(import, key, value),
        "snapshot.locking.mode" | "snapshot.isolation.mode" => import.noted(
            key,
            "sluice's own: PostgreSQL exports the slot's snapshot, MySQL reads under one consistent snapshot",
        ),
        "snapshot.delay.ms" | "streaming.delay.ms" | "snapshot.lock.timeout.ms" => {
            import.dropped(key, "no such delay or timeout in sluice", false);
        }
        "snapshot.include.collection.list" => import.dropped(
            key,
            "sluice's initial snapshot reads every captured table",
            true,
        ),
        "snapshot.tables.order.by.row.count" => {
            import.dropped(key, "sluice reads tables in chunks, in parallel", false);
        }
        "max.batch.size" | "max.queue.size" | "max.queue.size.in.bytes" | "poll.interval.ms" => {
            import.noted(
                key,
                "sluice's in-flight budget is [delivery] memory_limit (docs/configuration.md)",
            );
        }
        "event.processing.failure.handling.mode" => {
            if value == "fail" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice stops on a change it cannot decode; it never skips one",
                    true,
                );
            }
        }
        "errors.tolerance" => {
            if value == "none" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice sends records it cannot deliver to a dead-letter topic with [delivery] on_permanent_error = \"dead_letter\"; converter and transform failures are not skipped",
                    true,
                );
            }
        }
        "errors.log.enable" | "errors.log.include.messages" => {
            import.noted(key, "sluice logs every failure");
        }
        "errors.retry.timeout" | "errors.retry.delay.max.ms" | "errors.max.retries"
        | "retriable.restart.connector.wait.ms" => import.noted(
            key,
            "sluice retries and restarts by [restart] (policy, max_restarts, initial_backoff_ms, max_backoff_ms)",
        ),
        "include.unknown.datatypes" => {
            if value == "false" {
                import.carried(key);
            } else {
                import.dropped(key, "sluice encodes every type it knows and stops on others", true);
            }
        }
        "field.name.adjustment.mode" | "schema.name.adjustment.mode" | "sanitize.field.names" => {
            if matches!(value, "none" | "false") {
                import.carried(key);
            } else {
                import.dropped(key, "sluice keeps names as they are", true);
            }
        }
        "converters" => import.dropped(key, "custom converters run in Connect only", true),
        "post.processors" => import.dropped(key, "post processors run in Connect only", true),
        "notification.enabled.channels" => import.dropped(
            key,
            "sluice reports snapshot progress in /health and its metrics, not as notifications",
            false,
        ),
        "custom.metric.tags" => import.dropped(key, "sluice's metrics carry the pipeline's name", false),
        "topic.creation.groups" | "topic.creation.enable" => import.dropped(
            key,
            "per-group topic settings: use [kafka] topic_config_by_topic",
            false,
        ),
        "message.key.columns" => import.dropped(
            key,
            "sluice keys records by the primary key (or replica identity) only",
            true,
        ),
        "column.include.list" => import.dropped(
            key,
            "sluice lists the columns to leave out (columns.exclude), not those to keep",
            true,
        ),
        "column.exclude.list" => column_globs(import, key, value, "exclude"),
        "table.ignore.builtin" => import.carried(key),
        "exactly.once.support" | "transaction.boundary" => import.noted(
            key,
            "sluice's exactly-once is [delivery] guarantee = \"exactly_once\" (Kafka transactions)",
        ),
        "offsets.storage.topic" | "offset.flush.interval.ms" | "offset.flush.timeout.ms" => {
            import.noted(key, "sluice's position lives in the slot (PostgreSQL) or its state store (MySQL)");
        }
        "header.converter" => import.carried(key),
        _ => {
            if let Some(rest) = key.strip_prefix("column.mask.with.") {
                mask(import, key, rest, value);
            } else if key.starts_with("column.mask.hash.") {
                import.dropped(
                    key,
                    "sluice's columns.hash is the SHA-256 hex of the value without a salt: different values",
                    true,
                );
            } else if key.starts_with("column.truncate.to.") {
                import.dropped(key, "sluice does not truncate values", true);
            } else if key.starts_with("snapshot.select.statement.overrides") {
                import.dropped(
                    key,
                    "sluice snapshots whole tables (row_filters filter both snapshot and stream)",
                    true,
                );
            } else if key.starts_with("errors.deadletterqueue.") {
                import.noted(key, "sink connectors' setting: nothing to carry for a source");
            } else if key.starts_with("signal.kafka.") || key.starts_with("notification.") {
                import.dropped(key, "sluice takes no signals or sends no notifications through Kafka", false);
            } else {
                return false;
            }
        }
    }
    true
}

fn bool_option(import: &mut Import<'_>, key: &str, value: &str, to: &str) {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => {
            import.doc.set("kafka.events", to, true, None);
            import.carried(key);
        }
        "false" => {
            import.doc.set("kafka.events", to, false, None);
            import.carried(key);
        }
        _ => import.dropped(key, "expected true or false", true),
    }
}

fn number_option(import: &mut Import<'_>, key: &str, value: &str, to: &str) {
    match value.trim().parse::<u32>() {
        Ok(n) if n > 0 => {
            import.set_source(to, i64::from(n));
            import.carried(key);
        }
        _ => import.dropped(key, "expected a positive number", false),
    }
}

fn event_option(import: &mut Import<'_>, key: &str, value: &str, allowed: &[&str]) {
    let value = value.trim();
    if !allowed.is_empty() && !allowed.contains(&value) {
        import.dropped(
            key,
            format!("sluice takes {} ({value:?} is not one)", allowed.join(", ")),
            true,
        );
        return;
    }
    import
        .doc
        .set("kafka.events", &key.replace('.', "_"), value, None);
    import.carried(key);
}

/// `signal.data.collection`: PostgreSQL's is `schema.table` (older versions had the database
/// first), MySQL's `database.table`.
fn signal_table(import: &Import<'_>, value: &str) -> String {
    let parts: Vec<&str> = value.split('.').collect();
    if import.source == "source.postgres" && parts.len() == 3 {
        format!("{}.{}", parts[1], parts[2])
    } else {
        value.to_owned()
    }
}

fn snapshot_mode(import: &mut Import<'_>, key: &str, value: &str) {
    let mapped = match value {
        "initial" => Some(("initial", None)),
        "initial_only" => Some(("initial_only", None)),
        "when_needed" => Some(("when_needed", None)),
        "never" | "no_data" | "schema_only" => Some((
            "never",
            Some("\"never\": streams from the current position"),
        )),
        _ => None,
    };
    match mapped {
        Some((to, note)) => {
            import.set_source("snapshot", to);
            match note {
                Some(note) => import.noted(key, note),
                None => import.carried(key),
            }
        }
        None => import.dropped(
            key,
            format!("sluice's snapshot modes are initial, never, initial_only and when_needed ({value:?} has no equivalent)"),
            true,
        ),
    }
}

/// `column.mask.with.N.chars`: sluice's mask is four asterisks.
fn mask(import: &mut Import<'_>, key: &str, rest: &str, value: &str) {
    if rest == "4.chars" {
        column_globs(import, key, value, "mask");
    } else {
        import.dropped(
            key,
            "sluice masks with \"****\" (column.mask.with.4.chars) only",
            true,
        );
    }
}

/// A Debezium column list (regexes over `schema.table.column`, or `database.table.column`)
/// into `columns.<rule>` globs.
fn column_globs(import: &mut Import<'_>, key: &str, value: &str, rule: &str) {
    let mut globs = Vec::new();
    for regex in super::regex_glob::split_list(value) {
        match super::regex_glob::to_globs(&regex) {
            Ok(more) => globs.extend(more),
            Err(why) => {
                import.dropped(key, format!("{regex:?}: {why}"), true);
                return;
            }
        }
    }
    let section = format!("{}.columns", import.source);
    for glob in &globs {
        import.doc.push(&section, rule, glob);
    }
    import.noted(
        key,
        format!("columns.{rule} = {globs:?} (globs; Debezium's regexes ignore case, globs do not)"),
    );
}

fn topic_creation(import: &mut Import<'_>, key: &str, config: &str, value: &str) {
    match config {
        "replication.factor" => match value.parse::<i64>() {
            Ok(-1) => import.noted(key, "the broker's default (topic_replication_factor unset)"),
            Ok(n) if n > 0 => {
                import.doc.set("kafka", "topic_replication_factor", n, None);
                import.carried(key);
            }
            _ => import.dropped(key, "expected a positive number or -1", false),
        },
        "partitions" => match value.parse::<i64>() {
            Ok(-1) => import.noted(key, "the broker's default partition count is not read by sluice: topic_partitions = 1 (set it to the broker's num.partitions)"),
            Ok(n) if n > 0 => {
                import.doc.set("kafka", "topic_partitions", n, None);
                import.carried(key);
            }
            _ => import.dropped(key, "expected a positive number or -1", false),
        },
        "include" | "exclude" => {
            import.dropped(key, "topic creation groups: use [kafka] topic_config_by_topic", false);
        }
        _ => {
            let mut table = match import.doc.get("kafka", "topic_config") {
                Some(toml::Value::Table(t)) => t.clone(),
                _ => toml::Table::new(),
            };
            table.insert(config.to_owned(), toml::Value::String(value.to_owned()));
            import
                .doc
                .set("kafka", "topic_config", toml::Value::Table(table), None);
            import.carried(key);
        }
    }
}

/// Producer properties whose librdkafka name and meaning are the Java client's.
const SAME_PRODUCER_PROPERTIES: &[&str] = &[
    "acks",
    "compression.type",
    "linger.ms",
    "enable.idempotence",
    "max.in.flight.requests.per.connection",
    "request.timeout.ms",
    "retry.backoff.ms",
    "client.id",
];

fn producer_override(import: &mut Import<'_>, key: &str, property: &str, value: &str) {
    if SAME_PRODUCER_PROPERTIES.contains(&property) {
        import.doc.set("kafka.producer", property, value, None);
        import.noted(
            key,
            "librdkafka's property of the same name; sluice refuses overrides that weaken its guarantees",
        );
    } else {
        import.dropped(
            key,
            format!("a Java producer property: set librdkafka's equivalent of {property:?} in [kafka.producer] (its names differ)"),
            false,
        );
    }
}

/// `transforms` / `predicates` and their `<name>.<key>` settings: recorded here, written by
/// [`transform_sections`].
fn transform_setting(import: &mut Import<'_>, key: &str, value: &str) {
    match key {
        "transforms" | "predicates" => import.noted(
            key,
            format!(
                "{value:?}: carried over as [{key}] sections in Connect's form (docs/transforms.md)"
            ),
        ),
        _ => {
            let (_, rest) = key.split_once('.').unwrap_or((key, ""));
            if rest.split_once('.').is_some() {
                import.carried(key);
            } else {
                import.dropped(key, "expected transforms.<name>.<setting>", false);
            }
        }
    }
}

/// `[transforms]` with its chain, then `[transforms.<name>]` in the chain's order (`type`
/// first), then `[predicates.<name>]`: `transforms.<name>.<key>` → `"<key>" = "<value>"`.
/// A transform or predicate sluice would refuse when loading the file (a type it does not
/// apply, a Groovy condition beyond its expression language…) is left out, each of its
/// problems reported as a setting not carried over that changes what consumers see.
fn transform_sections(import: &mut Import<'_>) {
    let mut lists: Vec<Sections<'_>> = Vec::new();
    for top in ["transforms", "predicates"] {
        let Some(list) = import.get(top) else {
            continue;
        };
        let names = super::regex_glob::split_list(list);
        let settings = names
            .iter()
            .map(|name| {
                let prefix = format!("{top}.{name}.");
                let mut settings: Vec<(String, String)> = import
                    .connector
                    .settings
                    .iter()
                    .filter_map(|(k, v)| Some((k.strip_prefix(&prefix)?.to_owned(), v.clone())))
                    .collect();
                settings.sort_by_key(|(k, _)| k != "type");
                settings
            })
            .collect();
        lists.push((top, names, settings));
    }
    let refused = refused_transforms(import, &lists);
    for (top, names, settings) in lists {
        let kept: Vec<(&String, &Vec<(String, String)>)> = names
            .iter()
            .zip(&settings)
            .filter(|(name, _)| !refused.contains(&format!("{top}.{name}")))
            .collect();
        if top == "transforms" {
            let chain = kept
                .iter()
                .map(|(name, _)| toml::Value::String((*name).clone()))
                .collect();
            import
                .doc
                .set("transforms", "chain", toml::Value::Array(chain), None);
        }
        for (name, settings) in kept {
            let section = section(top, name);
            for (key, value) in settings {
                import.doc.set(&section, key, literal_dollars(value), None);
            }
        }
    }
}

/// `value` as a pipeline file's string holds it: a `$` that `${…}` or `$$` would take is
/// doubled (the file's `${NAME}` are environment variables, `$$` a `$`; Connect's values hold
/// `${routedByValue}`, `${group}`…). `Flatten$Value` stays as it is.
fn literal_dollars(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(c);
        if c == '$' && matches!(chars.peek(), Some('{' | '$')) {
            out.push('$');
        }
    }
    out
}

/// `transforms` or `predicates`, its names in order, and each one's settings (`type` first).
type Sections<'a> = (&'a str, Vec<String>, Vec<Vec<(String, String)>>);

/// The transforms and predicates (`transforms.<name>`, `predicates.<name>`) sluice's loading
/// would refuse, their problems recorded as settings not carried over.
fn refused_transforms(
    import: &mut Import<'_>,
    lists: &[Sections<'_>],
) -> std::collections::BTreeSet<String> {
    let mut tables: std::collections::BTreeMap<&str, toml::Table> = Default::default();
    for (top, names, settings) in lists {
        let table = tables.entry(top).or_default();
        if *top == "transforms" {
            table.insert(
                "chain".into(),
                toml::Value::Array(names.iter().cloned().map(toml::Value::String).collect()),
            );
        }
        for (name, settings) in names.iter().zip(settings) {
            let section: toml::Table = settings
                .iter()
                .map(|(k, v)| (k.clone(), toml::Value::String(v.clone())))
                .collect();
            table.insert(name.clone(), toml::Value::Table(section));
        }
    }
    let read = |top: &str| toml::Value::Table(tables.get(top).cloned().unwrap_or_default());
    let (Ok(mut transforms), Ok(mut predicates)) = (
        read("transforms").try_into::<crate::transform::TransformsConfig>(),
        read("predicates").try_into::<crate::transform::PredicatesConfig>(),
    ) else {
        return Default::default();
    };
    let mut issues = Vec::new();
    if import.source == "source.postgres" {
        // The outbox EventRouter: the PostgreSQL source's outbox router when the file is
        // loaded (written in Connect's form, as the connector has it).
        match crate::transform::config_outbox::take_event_router(&mut transforms, &mut predicates)
        {
            Ok(Some(router)) => import.noted(
                &format!("transforms.{}.type", router.name),
                format!(
                    "Debezium's outbox EventRouter: sluice's outbox router ([source.postgres.outbox]) routes the outbox table's inserts to {:?}, keyed by {}, the {} column as the value, headers {:?}",
                    router.topic, router.aggregate_id_column, router.payload_column, router.headers
                ),
            ),
            Ok(None) => {}
            Err(more) => issues = more,
        }
    }
    if issues.is_empty() {
        match crate::transform::config::build(
            &transforms,
            &predicates,
            &crate::event::EventOptions::default(),
        ) {
            Ok(_) => return Default::default(),
            Err(more) => issues = more,
        }
    }
    let mut refused = std::collections::BTreeSet::new();
    for issue in issues {
        // `transforms.<name>."<key>"` → Connect's `transforms.<name>.<key>`.
        let setting = issue.key.replace('"', "");
        let mut parts = setting.splitn(3, '.');
        if let (Some(top @ ("transforms" | "predicates")), Some(name)) =
            (parts.next(), parts.next())
            && name != "chain"
        {
            refused.insert(format!("{top}.{name}"));
        }
        import.dropped(
            &setting,
            format!("{}: left out of the file", issue.problem),
            true,
        );
    }
    // A transform whose predicate is left out is left out too.
    for (top, names, settings) in lists {
        for (name, settings) in names.iter().zip(settings) {
            let uses_refused = settings.iter().any(|(k, v)| {
                k == "predicate" && refused.contains(&format!("predicates.{}", v.trim()))
            });
            if *top == "transforms" && uses_refused && refused.insert(format!("transforms.{name}"))
            {
                import.dropped(
                    &format!("transforms.{name}.predicate"),
                    "its predicate is left out of the file, so the transform is too",
                    true,
                );
            }
        }
    }
    refused
}

/// After the settings: the converters (read together), and what is missing.
pub fn finish(import: &mut Import<'_>) {
    transform_sections(import);
    let key = converter(import, "key");
    let value = converter(import, "value");
    match (key, value) {
        (Some(k), Some(v)) if k == v => import.doc.set("kafka.events", "format", k, None),
        (k, v) => {
            if let Some(k) = k {
                import.doc.set("kafka.events", "key_format", k, None);
            }
            if let Some(v) = v {
                import.doc.set("kafka.events", "value_format", v, None);
            }
        }
    }
    finish_prefix(import);
}

fn finish_prefix(import: &mut Import<'_>) {
    if import.get("topic.prefix").is_none() && import.get("database.server.name").is_none() {
        import.dropped(
            "topic.prefix",
            "missing: Debezium requires it; kafka.topic_prefix is then sluice's default \"sluice\"",
            true,
        );
    }
}

/// `<which>.converter` and its settings: the event format, the registry, or a refusal.
fn converter(import: &mut Import<'_>, which: &str) -> Option<&'static str> {
    let class_key = format!("{which}.converter");
    fn sub<'a>(import: &Import<'a>, which: &str, name: &str) -> Option<&'a str> {
        import.get(&format!("{which}.converter.{name}"))
    }
    let subkeys: Vec<String> = import
        .connector
        .settings
        .keys()
        .filter(|k| k.starts_with(&format!("{class_key}.")))
        .cloned()
        .collect();
    let Some(class) = import.get(&class_key) else {
        for k in &subkeys {
            import.dropped(k, format!("{class_key} is not set here"), false);
        }
        import.dropped(
            &class_key,
            "not in the connector's configuration: the Connect worker's converter applies, which is not known here; written as JSON without schemas (set key.converter/value.converter in the input to carry them over)",
            true,
        );
        return Some("json");
    };
    let format = match class {
        "org.apache.kafka.connect.json.JsonConverter" => {
            let schemas =
                sub(import, which, "schemas.enable").is_none_or(|v| v.eq_ignore_ascii_case("true"));
            for k in &subkeys {
                match k.strip_prefix(&format!("{class_key}.")).unwrap_or_default() {
                    "schemas.enable" | "schemas.cache.size" => import.carried(k),
                    "decimal.format" if sub(import, which, "decimal.format") == Some("BASE64") => {
                        import.carried(k);
                    }
                    "replace.null.with.default"
                        if sub(import, which, "replace.null.with.default") == Some("true") =>
                    {
                        import.carried(k);
                    }
                    _ => import.dropped(
                        k,
                        "a JsonConverter setting sluice writes only at its default",
                        true,
                    ),
                }
            }
            let note = if sub(import, which, "schemas.enable").is_none() {
                "JsonConverter, schemas.enable at its default (true): json_with_schemas"
            } else {
                "JsonConverter"
            };
            import.noted(&class_key, note);
            if schemas { "json_with_schemas" } else { "json" }
        }
        "io.confluent.connect.avro.AvroConverter" => {
            for k in &subkeys {
                let name = k.strip_prefix(&format!("{class_key}.")).unwrap_or_default();
                registry_setting(import, k, name);
            }
            import.carried(&class_key);
            "avro"
        }
        "io.apicurio.registry.utils.converter.AvroConverter" => {
            let confluent = sub(import, which, "apicurio.registry.as-confluent") == Some("true")
                && sub(import, which, "apicurio.registry.headers.enabled") == Some("false");
            if !confluent {
                import.dropped(
                    &class_key,
                    "Apicurio's converter writes the Confluent wire format only with apicurio.registry.as-confluent=true and apicurio.registry.headers.enabled=false; sluice writes that format",
                    true,
                );
                return Some("avro");
            }
            for k in &subkeys {
                let name = k.strip_prefix(&format!("{class_key}.")).unwrap_or_default();
                match name {
                    "apicurio.registry.url" => {
                        let url = sub(import, which, name).unwrap_or_default();
                        let ccompat = apicurio_ccompat(url);
                        import
                            .doc
                            .set("schema_registry", "url", ccompat.clone(), None);
                        import.noted(
                            k,
                            format!("url = {ccompat:?} (Apicurio's Confluent-compatible API)"),
                        );
                    }
                    "apicurio.registry.as-confluent"
                    | "apicurio.registry.headers.enabled"
                    | "apicurio.registry.use-id"
                    | "apicurio.registry.find-latest" => import.carried(k),
                    "apicurio.registry.auto-register" => {
                        let on = sub(import, which, name) == Some("true");
                        import
                            .doc
                            .set("schema_registry", "auto.register.schemas", on, None);
                        import.carried(k);
                    }
                    _ => import.dropped(
                        k,
                        "an Apicurio converter setting sluice does not carry",
                        true,
                    ),
                }
            }
            import.noted(
                &class_key,
                "Avro in the Confluent wire format through the registry's Confluent API",
            );
            "avro"
        }
        other => {
            for k in &subkeys {
                import.dropped(k, format!("a setting of {other}"), false);
            }
            import.dropped(
                &class_key,
                format!("{other}: sluice writes JSON (with or without schemas) or Avro through a schema registry"),
                true,
            );
            return None;
        }
    };
    Some(format)
}

/// Apicurio's native URL (`…/apis/registry/v2`) as its Confluent API's (`…/apis/ccompat/v7`).
fn apicurio_ccompat(url: &str) -> String {
    let base = url.trim_end_matches('/');
    for native in ["/apis/registry/v2", "/apis/registry/v3"] {
        if let Some(root) = base.strip_suffix(native) {
            return format!("{root}/apis/ccompat/v7");
        }
    }
    base.to_owned()
}

/// The Confluent converter's registry settings, by the serializer's names.
fn registry_setting(import: &mut Import<'_>, key: &str, name: &str) {
    let value = import.get(key).unwrap_or_default();
    match name {
        "schema.registry.url" => {
            import.doc.set("schema_registry", "url", value, None);
            import.carried(key);
        }
        "basic.auth.user.info" => {
            import.doc.set(
                "schema_registry",
                "basic.auth.user.info",
                "${SCHEMA_REGISTRY_USER_INFO}",
                None,
            );
            import.needs_env(
                "SCHEMA_REGISTRY_USER_INFO",
                format!("user:password for the schema registry ({key})"),
            );
            import.noted(
                key,
                "written as ${SCHEMA_REGISTRY_USER_INFO}: no secret in the file",
            );
        }
        "basic.auth.credentials.source" => {
            if value == "USER_INFO" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice takes basic.auth.user.info (USER_INFO) or bearer.auth.token",
                    false,
                );
            }
        }
        "auto.register.schemas" | "use.latest.version" | "normalize.schemas" => {
            import
                .doc
                .set("schema_registry", name, value == "true", None);
            import.carried(key);
        }
        "key.subject.name.strategy" | "value.subject.name.strategy" => {
            let short = value.rsplit('.').next().unwrap_or(value);
            import.doc.set("schema_registry", name, short, None);
            import.carried(key);
        }
        "schemas.cache.config" | "schemas.cache.size" | "max.schemas.per.subject" => {
            import.carried(key)
        }
        "schema.registry.ssl.truststore.location" | "schema.registry.ssl.keystore.location" => {
            import.dropped(key, "a Java key store: sluice takes PEM files as \"ssl.ca.location\" / \"ssl.keystore.location\" in [schema_registry]", false);
        }
        _ => import.dropped(key, "an AvroConverter setting sluice does not carry", true),
    }
}

//! [`PipelineConfig::validate`]: every field checked, all problems collected, each naming its key
//! and the expected form; and what a configuration does to the delivery guarantee.

use super::PipelineConfig;
use super::SourceSection;
use super::defaults::DEFAULT_STATE_TOPIC;
use super::load::ConfigError;
use super::load::load_file;
use super::load::parse_pipeline;
use super::sections::{
    DeliveryConfig, DeliveryGuarantee, KafkaConfig, PermanentErrorPolicy, StateStoreKind,
};
use super::values::{is_identifier, is_topic_name};
use crate::error::ConfigIssue;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::Path;
use std::str::FromStr;

/// The `[kafka.events]` keys set to other than their defaults, `tombstones_on_delete` aside.
pub(super) fn non_default_event_options(events: &crate::event::EventOptions) -> Vec<&'static str> {
    let d = crate::event::EventOptions::default();
    let e = events;
    [
        (
            "decimal_handling_mode",
            e.decimal_handling_mode != d.decimal_handling_mode,
        ),
        (
            "time_precision_mode",
            e.time_precision_mode != d.time_precision_mode,
        ),
        (
            "binary_handling_mode",
            e.binary_handling_mode != d.binary_handling_mode,
        ),
        (
            "interval_handling_mode",
            e.interval_handling_mode != d.interval_handling_mode,
        ),
        (
            "hstore_handling_mode",
            e.hstore_handling_mode != d.hstore_handling_mode,
        ),
        (
            "money_fraction_digits",
            e.money_fraction_digits != d.money_fraction_digits,
        ),
        (
            "skipped_operations",
            e.skipped_operations != d.skipped_operations,
        ),
        (
            "unavailable_value_placeholder",
            e.unavailable_value_placeholder != d.unavailable_value_placeholder,
        ),
        (
            "provide_transaction_metadata",
            e.provide_transaction_metadata != d.provide_transaction_metadata,
        ),
        ("embed_json", e.embed_json != d.embed_json),
        (
            "unavailable_columns",
            e.unavailable_columns != d.unavailable_columns,
        ),
        ("schemas_enable", e.schemas_enable != d.schemas_enable),
        ("format", e.format != d.format),
        ("key_format", e.key_format != d.key_format),
        ("value_format", e.value_format != d.value_format),
        (
            "column_propagate_source_type",
            e.column_propagate_source_type != d.column_propagate_source_type,
        ),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(key, _)| key)
    .collect()
}

impl<S: SourceSection> PipelineConfig<S> {
    /// The transform chain of `[transforms]` (`None`: none), for the events this pipeline
    /// writes. The configuration is validated on loading, so this only fails for one built in
    /// code (its problems are then in the error).
    ///
    /// # Errors
    ///
    /// The chain's problems, each naming its key.
    pub fn transform_chain(
        &self,
    ) -> Result<Option<std::sync::Arc<crate::transform::Chain>>, Vec<ConfigIssue>> {
        crate::transform::config::build(&self.transforms, &self.predicates, self.output_events())
            .map(|chain| chain.map(std::sync::Arc::new))
    }

    /// The `[kafka.events]` records are written with (what the file says; the sources encode
    /// `kafka.events`, which [`PipelineConfig::for_run`] may have changed).
    pub fn output_events(&self) -> &crate::event::EventOptions {
        self.converted_events.as_ref().unwrap_or(&self.kafka.events)
    }

    /// The configuration a run uses: with `[transforms]` and Avro keys or values, the sources
    /// write those as Connect's JSON with schemas (`kafka.events`), the chain transforms them in
    /// that form and writes Avro from the transformed schemas ([`Self::output_events`]), as
    /// Kafka Connect applies transforms between the connector and the Avro converter. Records
    /// without a chain keep the sources' direct Avro writers.
    #[must_use]
    pub fn for_run(mut self) -> Self {
        use crate::event::EventFormat;
        if self.transforms.is_empty()
            || !self.kafka.events.uses_avro()
            || self.converted_events.is_some()
        {
            return self;
        }
        let output = self.kafka.events.clone();
        let json = |format: EventFormat| match format {
            EventFormat::Avro => EventFormat::JsonWithSchemas,
            other => other,
        };
        let events = &mut self.kafka.events;
        events.key_format = Some(json(output.key_format()));
        events.value_format = Some(json(output.value_format()));
        events.format = None;
        self.converted_events = Some(output);
        self
    }

    /// `topics` and the topics `[transforms]`' routers send their records to, each once.
    pub fn routed_topics(&self, topics: &[String]) -> Vec<String> {
        self.transforms.topics_for(&self.predicates, topics)
    }

    /// Reads, interpolates, parses and validates a pipeline file.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and every invalid key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        load_file(path, Self::from_toml)
    }

    /// Parses and validates pipeline text; `env` looks up variables for interpolation.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `origin` and every invalid key.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        parse_pipeline(text, origin, env, Self::adopt_transforms, Self::validate)
    }

    /// The source takes over the transforms it applies itself ([`SourceSection::adopt_transforms`]).
    fn adopt_transforms(&mut self) -> Vec<ConfigIssue> {
        self.source.adopt_transforms(
            &mut self.transforms,
            &mut self.predicates,
            &self.kafka.topic_prefix,
        )
    }

    /// Checks every rule that serde's types do not express; returns all broken ones.
    pub fn validate(&self) -> Vec<ConfigIssue> {
        let mut issues = Vec::new();
        if !is_identifier(&self.name) {
            issues.push(ConfigIssue {
                key: "name".to_owned(),
                problem: format!(
                    "{:?} is not a valid name: expected 1-40 characters of a-z, 0-9 and _",
                    self.name
                ),
            });
        }
        issues.extend(self.source.validate());
        if let Err(problems) =
            crate::transform::config::build(&self.transforms, &self.predicates, &self.kafka.events)
        {
            issues.extend(problems);
        }
        self.kafka_issues(&mut issues);
        self.events_issues(&mut issues);
        self.topic_settings_issues(&mut issues);
        self.delivery_issues(&mut issues);
        self.admin_and_restart_issues(&mut issues);
        self.ha_and_state_issues(&mut issues);
        issues
    }

    /// `[kafka]`: the event options the source applies, the producer, the brokers and the
    /// topic names.
    fn kafka_issues(&self, issues: &mut Vec<ConfigIssue>) {
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if let Some(applied) = S::APPLIED_EVENT_OPTIONS {
            for source_issue in S::validate_events(&self.kafka.events) {
                issue(&source_issue.key, source_issue.problem);
            }
            for key in non_default_event_options(&self.kafka.events) {
                if applied.contains(&key) {
                    continue;
                }
                issue(
                    &format!("kafka.events.{key}"),
                    format!(
                        "not applied by the {} source, which applies only tombstones_on_delete{}{}: \
                         remove it",
                        S::KEY,
                        if applied.is_empty() { "" } else { ", " },
                        applied.join(", ")
                    ),
                );
            }
        }
        if !S::APPLIES_SCHEMA_CHANGES_TOPIC && self.kafka.schema_changes_topic.is_some() {
            issue(
                "kafka.schema_changes_topic",
                format!(
                    "not applied by the {} source, which writes its schema changes (Debezium's \
                     form) to the topic named kafka.topic_prefix (source.{}.include_schema_changes): \
                     remove it",
                    S::KEY,
                    S::KEY
                ),
            );
        }
        if !self.kafka.allow_unsafe_producer_settings {
            for (key, reason) in guarantee_breaking_overrides(&self.kafka.producer) {
                issue(
                    &format!("kafka.producer.\"{key}\""),
                    format!(
                        "{reason}: remove the override, or set kafka.allow_unsafe_producer_settings = true to accept that"
                    ),
                );
            }
        }
        if self.kafka.brokers.trim().is_empty() {
            issue(
                "kafka.brokers",
                "empty: expected host:port[,host:port...]".into(),
            );
        }
        if !is_topic_name(&self.kafka.topic_prefix) {
            issue(
                "kafka.topic_prefix",
                format!(
                    "{:?} is not valid: expected characters a-z, A-Z, 0-9, '.', '_' and '-'",
                    self.kafka.topic_prefix
                ),
            );
        }
        if let Some(topic) = &self.kafka.schema_changes_topic
            && !is_topic_name(topic)
        {
            issue(
                "kafka.schema_changes_topic",
                format!("{topic:?} is not a valid topic name"),
            );
        }
    }

    /// `[kafka.events]` and the schema registry its formats need.
    fn events_issues(&self, issues: &mut Vec<ConfigIssue>) {
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        let events = &self.kafka.events;
        if events.needs_schemas() && events.embed_json {
            issue(
                "kafka.events.embed_json",
                "cannot be combined with kafka.events.schemas_enable or an Avro format: an \
                 embedded document has no Connect schema (Debezium's is a string, \
                 io.debezium.data.Json); turn one off"
                    .into(),
            );
        }
        if events.schemas_enable
            && (events.format.is_some()
                || events.key_format.is_some()
                || events.value_format.is_some())
        {
            issue(
                "kafka.events.schemas_enable",
                "cannot be combined with kafka.events.format / key_format / value_format: \
                 use format = \"json_with_schemas\" instead"
                    .into(),
            );
        }
        if events.uses_avro() && self.kafka.schema_changes_topic.is_some() {
            // sluice's own record (PostgreSQL): Debezium's PostgreSQL connector has no
            // schema-change topic, so there is no Avro schema of Debezium's to write it under.
            issue(
                "kafka.schema_changes_topic",
                "cannot be combined with an Avro format: the PostgreSQL source's schema change \
                 events are sluice's own JSON (Debezium's PostgreSQL connector has no \
                 schema-change topic, so no Avro schema to match); remove it, or write the \
                 events as json"
                    .into(),
            );
        }
        if events.uses_avro() && self.schema_registry.is_none() {
            issue(
                "schema_registry",
                "is missing: kafka.events asks for Avro, which needs a schema registry \
                 ([schema_registry] url = \"http://host:8081\")"
                    .into(),
            );
        }
        if let Some(registry) = &self.schema_registry
            && events.uses_avro()
        {
            for (key, problem) in registry.issues() {
                issue(&format!("schema_registry.{key}"), problem);
            }
        }
        if let (Some(new), Some(old)) = (
            self.kafka.events.tombstones_on_delete,
            self.kafka.tombstones_on_delete_alias,
        ) && new != old
        {
            issue(
                "kafka.tombstones_on_delete",
                format!(
                    "{old} disagrees with kafka.events.tombstones_on_delete = {new}: \
                     kafka.tombstones_on_delete is its older name; keep only \
                     kafka.events.tombstones_on_delete"
                ),
            );
        }
        if let Some(truncate) = self.kafka.events.truncate {
            issue(
                "kafka.events.truncate",
                format!(
                    "replaced by Debezium's skipped_operations: write skipped_operations = {} \
                     instead (a comma-separated list of c, u, d, t, or \"none\"; the default \
                     \"t\" leaves TRUNCATE out)",
                    if truncate { "\"none\"" } else { "\"t\"" }
                ),
            );
        }
    }

    /// The topics' partitions and settings (`kafka.topic_partitions`, `[kafka.topic_config]`,
    /// `[kafka.topic_config_by_topic]`).
    fn topic_settings_issues(&self, issues: &mut Vec<ConfigIssue>) {
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if self.kafka.topic_partitions == 0 {
            issue("kafka.topic_partitions", "0: expected at least 1".into());
        }
        let topic_configs =
            std::iter::once(("kafka.topic_config".to_owned(), &self.kafka.topic_config)).chain(
                self.kafka
                    .topic_config_by_topic
                    .iter()
                    .map(|(topic, configs)| {
                        (format!("kafka.topic_config_by_topic.\"{topic}\""), configs)
                    }),
            );
        for (section, configs) in topic_configs {
            for (key, value) in configs {
                if key.trim().is_empty() || value.trim().is_empty() {
                    issue(
                        &section,
                        format!(
                            "{key:?} = {value:?}: expected a Kafka topic config name and a value, e.g. \"cleanup.policy\" = \"compact\""
                        ),
                    );
                } else if key == "cleanup.policy"
                    && !value
                        .split(',')
                        .all(|p| matches!(p.trim(), "compact" | "delete"))
                {
                    issue(
                        &format!("{section}.\"cleanup.policy\""),
                        format!(
                            "{value:?}: expected \"compact\", \"delete\" or \"compact,delete\""
                        ),
                    );
                }
            }
        }
    }

    /// `[delivery]`: the in-flight limits and the guarantee.
    fn delivery_issues(&self, issues: &mut Vec<ConfigIssue>) {
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if let Some(bytes) = self.delivery.max_in_flight_bytes
            && bytes < 1024
        {
            issue(
                "delivery.max_in_flight_bytes",
                format!("{bytes} is too small: expected at least 1024 (bytes)"),
            );
        }
        if self.delivery.memory_limit < 16 * 1024 * 1024 {
            issue(
                "delivery.memory_limit",
                format!(
                    "{} bytes is too small: expected at least \"16MiB\" (sluice's fixed part alone is larger)",
                    self.delivery.memory_limit
                ),
            );
        }
        if self.delivery.max_in_flight_records == 0 {
            issue(
                "delivery.max_in_flight_records",
                "0: expected at least 1".into(),
            );
        }
        match (
            self.delivery.on_permanent_error,
            &self.delivery.dead_letter_topic,
        ) {
            (PermanentErrorPolicy::DeadLetter, None) => issue(
                "delivery.dead_letter_topic",
                "missing: required when on_permanent_error = \"dead_letter\"".into(),
            ),
            (_, Some(topic)) if !is_topic_name(topic) => issue(
                "delivery.dead_letter_topic",
                format!("{topic:?} is not a valid topic name"),
            ),
            _ => {}
        }
        if self.delivery.guarantee == DeliveryGuarantee::ExactlyOnce {
            for (key, problem) in exactly_once_issues::<S>(&self.delivery, &self.kafka) {
                issue(&key, problem);
            }
        }
        if let Some(topic) = &self.delivery.offsets_topic
            && !is_topic_name(topic)
        {
            issue(
                "delivery.offsets_topic",
                format!("{topic:?} is not a valid topic name"),
            );
        }
    }

    /// `[admin]` and `[restart]`.
    fn admin_and_restart_issues(&self, issues: &mut Vec<ConfigIssue>) {
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if SocketAddr::from_str(&self.admin.listen).is_err() {
            issue(
                "admin.listen",
                format!(
                    "{:?} is not an address: expected ip:port, e.g. 127.0.0.1:8089",
                    self.admin.listen
                ),
            );
        }
        if self.restart.initial_backoff_ms == 0
            || self.restart.initial_backoff_ms > self.restart.max_backoff_ms
        {
            issue(
                "restart.initial_backoff_ms",
                "expected at least 1 and at most restart.max_backoff_ms".into(),
            );
        }
        if let Some((key, problem)) = self.admin.tls_issue() {
            issue(key, problem);
        }
        if let Some(token) = &self.admin.token
            && token.trim().len() < 16
        {
            issue(
                "admin.token",
                "too short: expected at least 16 characters (e.g. `openssl rand -hex 16`)".into(),
            );
        }
    }

    /// `[ha]` and where state is kept (`state_store`, `state_topic`, `state_dir`).
    fn ha_and_state_issues(&self, issues: &mut Vec<ConfigIssue>) {
        let mut issue = |key: &str, problem: String| {
            issues.push(ConfigIssue {
                key: key.to_owned(),
                problem,
            });
        };
        if !(1_000..=3_600_000).contains(&self.ha.failover_timeout_ms) {
            issue(
                "ha.failover_timeout_ms",
                format!(
                    "{} is out of range: expected milliseconds from 1000 to 3600000 (default 10000)",
                    self.ha.failover_timeout_ms
                ),
            );
        }
        if !(50..=60_000).contains(&self.ha.standby_poll_ms) {
            issue(
                "ha.standby_poll_ms",
                format!(
                    "{} is out of range: expected milliseconds from 50 to 60000 (default 500)",
                    self.ha.standby_poll_ms
                ),
            );
        }
        if self.state_store == StateStoreKind::Kafka && !S::ELECTS_ACTIVE_INSTANCE {
            issue(
                "state_store",
                format!(
                    "\"kafka\" is supported for [source.postgres] and [source.mysql] pipelines only: a [source.{}] pipeline keeps its state in state_dir (remove state_store)",
                    S::KEY
                ),
            );
        }
        if self.verify_interval_s == Some(0) {
            issue(
                "verify_interval_s",
                "0: expected the seconds between scheduled verifications (at least 1; e.g. 3600), or leave the key out to turn them off".into(),
            );
        }
        if let Some(topic) = &self.state_topic
            && (topic.trim().is_empty() || self.state_store != StateStoreKind::Kafka)
        {
            issue(
                "state_topic",
                if topic.trim().is_empty() {
                    "empty: expected a topic name, or leave the key out for _sluice_state".into()
                } else {
                    "only used with state_store = \"kafka\": set it too, or remove state_topic"
                        .into()
                },
            );
        }
        if let Some(dir) = &self.state_dir
            && dir.trim().is_empty()
        {
            issue(
                "state_dir",
                "empty: expected a directory path, or leave the key out for the default".into(),
            );
        }
    }

    /// The compacted topic of `state_store = "kafka"`.
    pub fn state_topic(&self) -> &str {
        self.state_topic.as_deref().unwrap_or(DEFAULT_STATE_TOPIC)
    }

    /// The directory of this pipeline's state file (see [`PipelineConfig::state_dir`]).
    pub fn state_dir(&self) -> std::path::PathBuf {
        if let Some(dir) = &self.state_dir {
            return dir.into();
        }
        let base = std::env::var_os("XDG_STATE_HOME")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .map(|home| std::path::PathBuf::from(home).join(".local").join("state"))
            })
            .unwrap_or_else(|| std::path::PathBuf::from("."));
        base.join("sluice")
    }

    /// The byte budget as the engine takes it (validated to be at least 1024).
    pub fn max_in_flight_bytes(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery.in_flight_bytes()).unwrap_or(NonZeroU32::MIN)
    }

    /// The record budget as the engine takes it (validated to be at least 1).
    pub fn max_in_flight_records(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery.max_in_flight_records).unwrap_or(NonZeroU32::MIN)
    }
}

/// The producer overrides (of a CDC pipeline's `[kafka.producer]`) that break sluice's
/// guarantees, each with why: per-key order and no duplicates from retries need idempotence,
/// `acks=all` and at most 5 requests in flight per connection.
pub fn guarantee_breaking_overrides(producer: &BTreeMap<String, String>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (key, value) in producer {
        let value = value.trim();
        let reason = match key.as_str() {
            "enable.idempotence" if value.eq_ignore_ascii_case("false") => Some(format!(
                "{value}: without idempotence a retried batch can be written twice or overtake the one before it (per-key order lost)"
            )),
            "acks" | "request.required.acks"
                if !(value.eq_ignore_ascii_case("all") || value == "-1") =>
            {
                Some(format!(
                    "{value}: a record acknowledged by fewer than all in-sync replicas can be lost with its leader, after sluice confirmed its position to the source"
                ))
            }
            "max.in.flight.requests.per.connection" | "max.in.flight"
                if value.parse::<u64>().map_or(true, |n| n > 5) =>
            {
                Some(format!(
                    "{value}: more than 5 requests in flight per connection loses per-partition order on retries (expected 1 to 5)"
                ))
            }
            _ => None,
        };
        if let Some(reason) = reason {
            found.push((key.clone(), reason));
        }
    }
    found
}

/// The settings that cannot hold `delivery.guarantee = "exactly_once"`: (key, problem).
pub(super) fn exactly_once_issues<S: SourceSection>(
    delivery: &DeliveryConfig,
    kafka: &KafkaConfig,
) -> Vec<(String, String)> {
    let mut found = Vec::new();
    if !S::SUPPORTS_EXACTLY_ONCE {
        found.push((
            "delivery.guarantee".to_owned(),
            format!(
                "\"exactly_once\" is supported for PostgreSQL sources only, not [source.{}]: use \"at_least_once\" (records carry their source position in headers, so consumers can drop duplicates)",
                S::KEY
            ),
        ));
    }
    if delivery.on_permanent_error == PermanentErrorPolicy::DeadLetter {
        found.push((
            "delivery.on_permanent_error".to_owned(),
            "\"dead_letter\" cannot be combined with delivery.guarantee = \"exactly_once\": a refused record aborts the whole Kafka transaction; use \"stop\"".to_owned(),
        ));
    }
    if delivery.transaction_interval_ms == 0 || delivery.transaction_interval_ms > 30_000 {
        found.push((
            "delivery.transaction_interval_ms".to_owned(),
            format!(
                "{}: expected 1 to 30000 (milliseconds; a transaction must commit well within the producer's transaction.timeout.ms)",
                delivery.transaction_interval_ms
            ),
        ));
    }
    if delivery.transaction_max_bytes < 1024 {
        found.push((
            "delivery.transaction_max_bytes".to_owned(),
            format!(
                "{} is too small: expected at least 1024 (bytes)",
                delivery.transaction_max_bytes
            ),
        ));
    }
    for key in ["transactional.id", "enable.idempotence"] {
        if kafka.producer.contains_key(key) {
            found.push((
                format!("kafka.producer.\"{key}\""),
                format!(
                    "sluice sets {key} itself with delivery.guarantee = \"exactly_once\" (the transactional id is derived from the pipeline's name, so a restarted instance fences the old one): remove the override"
                ),
            ));
        }
    }
    let transaction_timeout = kafka
        .producer
        .get("transaction.timeout.ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(60_000);
    if let Some(value) = kafka.producer.get("message.timeout.ms")
        && value
            .trim()
            .parse::<u64>()
            .map_or(true, |ms| ms == 0 || ms > transaction_timeout)
    {
        found.push((
            "kafka.producer.\"message.timeout.ms\"".to_owned(),
            format!(
                "{value}: with delivery.guarantee = \"exactly_once\" it must be between 1 and transaction.timeout.ms ({transaction_timeout}): a record still undelivered when its transaction times out aborts it"
            ),
        ));
    }
    found
}

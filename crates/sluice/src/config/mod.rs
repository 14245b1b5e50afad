//! The pipeline file: one TOML document per pipeline.
//!
//! This module holds what every pipeline shares (`[kafka]`, `[delivery]`, `[admin]`,
//! `[restart]`, loading and its errors); each source's section (`[source.<kind>]`, a
//! [`SourceSection`]) lives with the source, each sink's configuration with the sink, and
//! `crate::pipeline_file` tells the kinds apart.
//!
//! Loading goes in three steps, all before any network I/O:
//! 1. parse the TOML;
//! 2. replace `${NAME}` and `${NAME:-default}` in every string value with the environment's
//!    value (a missing variable without a default is an error that names the key), and
//!    `${file:PATH}` with a file's contents without its trailing newline (a secret, e.g. a
//!    password mounted at `/run/secrets/…`; an unreadable file is an error that names the key
//!    and the path, never the contents);
//! 3. deserialize strictly (unknown keys are errors that name the key's path and the keys that
//!    are allowed there) and [`PipelineConfig::validate`] every field, collecting all errors.
//!
//! Defaults live in `DEFAULT_*` constants and nowhere else. Field names carry their units.

use serde::Deserialize;
use std::fmt;

mod defaults;
pub(crate) mod load;
mod sections;
mod validate;
mod values;

pub use self::defaults::{
    DEFAULT_ADMIN_LISTEN, DEFAULT_DEAD_LETTER_MAX_VALUE_BYTES, DEFAULT_MAX_IN_FLIGHT_BYTES,
    DEFAULT_MAX_IN_FLIGHT_RECORDS, DEFAULT_MEMORY_LIMIT, DEFAULT_RESTART_INITIAL_BACKOFF_MS,
    DEFAULT_RESTART_MAX_BACKOFF_MS, DEFAULT_STATE_TOPIC, DEFAULT_TOPIC_PARTITIONS,
    DEFAULT_TOPIC_PREFIX, DEFAULT_TRANSACTION_INTERVAL_MS, DEFAULT_TRANSACTION_MAX_BYTES,
    IN_FLIGHT_SHARE_OF_MEMORY_LIMIT,
};
pub use self::load::{ConfigError, EnvLookup};
pub use self::sections::{
    AdminConfig, COMPACTED_TOPIC_DEFAULTS, DeliveryConfig, DeliveryGuarantee, HaConfig,
    KafkaConfig, PermanentErrorPolicy, RedactedProperties, RestartConfig, RestartPolicy,
    StateStoreKind, is_secret_property,
};
pub use self::values::{
    deserialize_byte_size, glob_matches, human_bytes, parse_byte_size, parse_table_name,
};
pub(crate) use self::values::{is_identifier, is_topic_name};
pub use crate::error::ConfigIssue;

/// A source's section of a pipeline file (`[source.<KEY>]`): its keys, defaults and rules
/// live with the source; [`PipelineConfig`] holds it.
pub trait SourceSection: serde::de::DeserializeOwned {
    /// The section's key under `[source]`, e.g. `"postgres"` for `[source.postgres]`.
    const KEY: &'static str;

    /// Whether the source elects an active instance and keeps its state with
    /// `state_store = "kafka"` (see docs/high-availability.md).
    const ELECTS_ACTIVE_INSTANCE: bool = false;

    /// The `[kafka.events]` options the source applies (`None`: every one); a source that
    /// applies only some (and `tombstones_on_delete`, which every source does) refuses the
    /// others rather than ignore them.
    const APPLIED_EVENT_OPTIONS: Option<&'static [&'static str]> = None;

    /// Whether the source writes column changes to `kafka.schema_changes_topic`; a source
    /// with a schema-change topic of its own (MySQL: `<topic_prefix>`, Debezium's) refuses it
    /// rather than ignore it.
    const APPLIES_SCHEMA_CHANGES_TOPIC: bool = true;

    /// Whether the source can deliver with `delivery.guarantee = "exactly_once"` (Kafka
    /// transactions committed with the source's position; see docs/postgres-source.md).
    const SUPPORTS_EXACTLY_ONCE: bool = false;

    /// Checks every rule that serde's types do not express; each issue's key is the full path
    /// (`source.<KEY>.…`).
    fn validate(&self) -> Vec<ConfigIssue>;

    /// Takes over the transforms of `[transforms]` the source applies itself (PostgreSQL:
    /// Debezium's outbox `EventRouter`, as its outbox router), before the file is validated;
    /// `topic_prefix` is `kafka.topic_prefix`. The issues name their keys.
    fn adopt_transforms(
        &mut self,
        _transforms: &mut crate::transform::TransformsConfig,
        _predicates: &mut crate::transform::PredicatesConfig,
        _topic_prefix: &str,
    ) -> Vec<ConfigIssue> {
        Vec::new()
    }

    /// The source's own rules on `[kafka.events]` values (beyond which keys it applies).
    fn validate_events(_events: &crate::event::EventOptions) -> Vec<ConfigIssue> {
        Vec::new()
    }
}

/// A whole change-data-capture pipeline file: the source section `S` (`[source.<S::KEY>]`,
/// e.g. `crate::source::postgres::config::PgPipelineConfig`) and what every source shares.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = "S: SourceSection"))]
pub struct PipelineConfig<S> {
    /// The pipeline's name: used in metric labels, the default names the source gives what it
    /// creates (e.g. a replication slot), and the source connection's application name.
    pub name: String,
    /// Where changes come from: the one section under `[source]`.
    #[serde(deserialize_with = "deserialize_source")]
    pub source: S,
    /// Where they go.
    pub kafka: KafkaConfig,
    /// In-flight limits and what to do with records Kafka refuses.
    #[serde(default)]
    pub delivery: DeliveryConfig,
    /// The admin HTTP server.
    #[serde(default)]
    pub admin: AdminConfig,
    /// Restarts after failures.
    #[serde(default)]
    pub restart: RestartConfig,
    /// Where sluice keeps what it must remember between runs (the slot's identity and the last
    /// position it confirmed); default `$XDG_STATE_HOME/sluice` or `~/.local/state/sluice`.
    pub state_dir: Option<String>,
    /// Where that state lives: `"local"` (`state_dir`, the default, for a single instance) or
    /// `"kafka"` (a compacted topic every instance can read, for a standby that takes over).
    #[serde(default)]
    pub state_store: StateStoreKind,
    /// With `state_store = "kafka"`: the compacted topic (default `_sluice_state`), created when
    /// missing; pipelines share it (documents are keyed by pipeline).
    pub state_topic: Option<String>,
    /// Active/standby: several instances of one pipeline, exactly one streams.
    #[serde(default)]
    pub ha: HaConfig,
    /// The schema registry Avro keys and values are written through (`kafka.events.format`).
    pub schema_registry: Option<crate::registry::RegistryConfig>,
    /// Kafka Connect's single message transforms, by Connect's names (`[transforms]`, with
    /// the predicates of `[predicates]`).
    #[serde(default)]
    pub transforms: crate::transform::TransformsConfig,
    /// The predicates `[transforms]` name.
    #[serde(default)]
    pub predicates: crate::transform::PredicatesConfig,
    /// Scheduled verification: `sluice verify` of this pipeline every this many seconds while it
    /// runs (docs/verify.md, "Scheduled"); off when left out.
    pub verify_interval_s: Option<u64>,
    /// The scheduled verification's rate limit: rows read from the source per second.
    #[serde(default = "default_verify_rate_limit")]
    pub verify_rate_limit: u64,
    /// Not in the file: the `[kafka.events]` a run writes when they differ from what its
    /// sources encode ([`PipelineConfig::for_run`]: Avro with `[transforms]`, where the sources
    /// write JSON with schemas and the chain's end writes Avro, as Connect's converter after
    /// the transforms).
    #[serde(skip)]
    pub converted_events: Option<crate::event::EventOptions>,
}

/// Default rows a second a scheduled verification reads from the source (a fifth of the
/// command's default: it runs beside the pipeline, over and over).
pub const DEFAULT_VERIFY_RATE_LIMIT: u64 = 20_000;

const fn default_verify_rate_limit() -> u64 {
    DEFAULT_VERIFY_RATE_LIMIT
}

/// Deserializes `[source]`: exactly one table, whose key is `S::KEY` (the messages are serde's
/// for an externally tagged enum, as when `[source]` was one).
fn deserialize_source<'de, D, S>(deserializer: D) -> Result<S, D::Error>
where
    D: serde::Deserializer<'de>,
    S: SourceSection,
{
    struct Section<S>(std::marker::PhantomData<S>);

    impl<'de, S: SourceSection> serde::de::Visitor<'de> for Section<S> {
        type Value = S;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a table [source.{}]", S::KEY)
        }

        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<S, A::Error> {
            use serde::de::Error as _;
            let more = || A::Error::custom("wanted exactly 1 element, more than 1 element");
            if map.size_hint().is_some_and(|n| n > 1) {
                return Err(more());
            }
            let Some(kind) = map.next_key::<String>()? else {
                return Err(A::Error::custom(
                    "wanted exactly 1 element, found 0 elements",
                ));
            };
            if kind != S::KEY {
                return Err(A::Error::unknown_variant(&kind, &[S::KEY]));
            }
            let section = map.next_value::<S>()?;
            if map.next_key::<serde::de::IgnoredAny>()?.is_some() {
                return Err(more());
            }
            Ok(section)
        }
    }

    deserializer.deserialize_map(Section(std::marker::PhantomData))
}

/// When a CDC source snapshots its tables (`source.<kind>.snapshot`), Debezium's
/// `snapshot.mode` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum SnapshotMode {
    /// When the pipeline has no saved position (PostgreSQL: its slot is new): read every
    /// captured table consistently with the position streaming then starts from.
    #[default]
    Initial,
    /// Never: stream only the changes after the first start.
    Never,
    /// Snapshot like `initial`, then stop (no streaming).
    InitialOnly,
    /// Like `initial`, and also when the saved position cannot be resumed from any more
    /// (PostgreSQL: a lost slot recreated with `on_slot_loss = "recreate"`; MySQL: a purged
    /// binlog).
    WhenNeeded,
}

#[cfg(test)]
mod tests;

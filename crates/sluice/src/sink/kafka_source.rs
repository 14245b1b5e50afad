//! `[source.kafka]` of a sink pipeline: brokers, the topics read (names and `/regex/`
//! patterns) and the consumer group. The PostgreSQL sink's rules read it too, so it has a file
//! of its own rather than living in [`crate::sink::config`], which holds the sinks' sections.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::config::RedactedProperties;

/// Default interval between commits of the watermark offsets to the consumer group.
pub const DEFAULT_COMMIT_INTERVAL_MS: u64 = 1_000;

/// `[source.kafka]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaSourceConfig {
    /// `host:port[,host:port…]`.
    pub brokers: String,
    /// Topics to read: names, comma-separated lists of names, or `/regex/` (every topic whose
    /// whole name matches, including topics created later). See [`Self::topic_names`] and
    /// [`Self::subscription`].
    pub topics: Vec<String>,
    /// Consumer group; default `sluice_<pipeline name>`.
    pub group_id: Option<String>,
    /// Interval between commits of the watermark offsets.
    #[serde(default = "default_commit_interval_ms")]
    pub commit_interval_ms: u64,
    /// librdkafka consumer properties by their own names (`enable.auto.commit` is always false).
    #[serde(default)]
    pub properties: BTreeMap<String, String>,
    /// librdkafka properties for every client of the pipeline (consumer, dead-letter producer,
    /// metadata): security (`security.protocol`, `ssl.*`, `sasl.*`) and the like.
    #[serde(default)]
    pub client: BTreeMap<String, String>,
    /// The records' form, keys and values (as the sources' `[kafka.events] format`): `"json"`
    /// (the default: plain JSON or `{"schema":…,"payload":…}`, each recognised as it comes;
    /// `"json_with_schemas"` is the same) or `"avro"` (Confluent's wire format, schemas fetched
    /// from `[schema_registry]` by id). `key_format` and `value_format` choose each apart
    /// (Connect's `key.converter` / `value.converter`).
    #[serde(default)]
    pub format: Option<crate::event::EventFormat>,
    /// The keys' form (default: `format`).
    #[serde(default)]
    pub key_format: Option<crate::event::EventFormat>,
    /// The values' form (default: `format`).
    #[serde(default)]
    pub value_format: Option<crate::event::EventFormat>,
}

/// One entry of `source.kafka.topics`, after splitting at commas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicSelector {
    /// A topic name.
    Name(String),
    /// A regular expression (between slashes in the file) that whole topic names match.
    Pattern(String),
}

impl KafkaSourceConfig {
    /// The keys' form.
    pub fn key_format(&self) -> crate::event::EventFormat {
        self.key_format
            .or(self.format)
            .unwrap_or(crate::event::EventFormat::Json)
    }

    /// The values' form.
    pub fn value_format(&self) -> crate::event::EventFormat {
        self.value_format
            .or(self.format)
            .unwrap_or(crate::event::EventFormat::Json)
    }

    /// Whether keys or values are Avro (and need `[schema_registry]`).
    pub fn uses_avro(&self) -> bool {
        self.key_format() == crate::event::EventFormat::Avro
            || self.value_format() == crate::event::EventFormat::Avro
    }

    /// The entries of `topics`: comma-separated names are split, `/…/` is a pattern.
    pub fn selectors(&self) -> Vec<TopicSelector> {
        let mut selectors = Vec::new();
        for entry in &self.topics {
            let entry = entry.trim();
            if entry.len() >= 2 && entry.starts_with('/') && entry.ends_with('/') {
                selectors.push(TopicSelector::Pattern(entry[1..entry.len() - 1].to_owned()));
                continue;
            }
            for name in entry.split(',') {
                let name = name.trim();
                if !name.is_empty() {
                    selectors.push(TopicSelector::Name(name.to_owned()));
                }
            }
        }
        selectors
    }

    /// The topics named (not matched by a pattern).
    pub fn topic_names(&self) -> Vec<String> {
        self.selectors()
            .into_iter()
            .filter_map(|s| match s {
                TopicSelector::Name(name) => Some(name),
                TopicSelector::Pattern(_) => None,
            })
            .collect()
    }

    /// The subscription as librdkafka takes it: names, and patterns as `^(…)$` (librdkafka
    /// treats a subscription that starts with `^` as a regular expression).
    pub fn subscription(&self) -> Vec<String> {
        self.selectors()
            .into_iter()
            .map(|s| match s {
                TopicSelector::Name(name) => name,
                TopicSelector::Pattern(pattern) => {
                    let pattern = pattern.strip_prefix('^').unwrap_or(&pattern);
                    let pattern = pattern.strip_suffix('$').unwrap_or(pattern);
                    format!("^({pattern})$")
                }
            })
            .collect()
    }

    /// Whether `topic` is read: named, or matched by a pattern.
    pub fn selects(&self, topic: &str) -> bool {
        self.selectors().iter().any(|s| match s {
            TopicSelector::Name(name) => name == topic,
            TopicSelector::Pattern(pattern) => whole_match(pattern, topic).unwrap_or(false),
        })
    }
}

/// Whether `pattern` matches all of `text`; `Err`: the pattern is invalid.
pub(crate) fn whole_match(pattern: &str, text: &str) -> Result<bool, String> {
    let pattern = pattern.strip_prefix('^').unwrap_or(pattern);
    let pattern = pattern.strip_suffix('$').unwrap_or(pattern);
    let regex =
        regex_automata::meta::Regex::new(&format!("^(?:{pattern})$")).map_err(|e| e.to_string())?;
    Ok(regex.is_match(text))
}

impl std::fmt::Debug for KafkaSourceConfig {
    // `properties` and `client` may hold `sasl.password` and the like.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaSourceConfig")
            .field("brokers", &self.brokers)
            .field("topics", &self.topics)
            .field("group_id", &self.group_id)
            .field("commit_interval_ms", &self.commit_interval_ms)
            .field("properties", &RedactedProperties(&self.properties))
            .field("client", &RedactedProperties(&self.client))
            .field("format", &self.format)
            .field("key_format", &self.key_format)
            .field("value_format", &self.value_format)
            .finish()
    }
}

const fn default_commit_interval_ms() -> u64 {
    DEFAULT_COMMIT_INTERVAL_MS
}

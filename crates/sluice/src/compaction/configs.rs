//! The effective cleaner settings of the brokers and a topic, through the admin API
//! (`DescribeConfigs`).

use std::time::Duration;

use anyhow::{Context as _, bail};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, OwnedResourceSpecifier, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};

use super::model::{CleanerSettings, TopicSettings};

/// The settings read, with the broker whose cleaner maps the fewest keys per pass.
#[derive(Debug, Clone)]
pub struct EffectiveSettings {
    /// The broker the cleaner settings come from.
    pub broker: i32,
    /// Its cleaner settings.
    pub cleaner: CleanerSettings,
    /// The topic's settings.
    pub topic: TopicSettings,
    /// Partitions of the topic.
    pub partitions: usize,
}

fn number<T: std::str::FromStr>(
    get: &dyn Fn(&str) -> Option<String>,
    key: &str,
    default: T,
) -> anyhow::Result<T> {
    match get(key) {
        None => Ok(default),
        Some(text) => text
            .trim()
            .parse()
            .map_err(|_| anyhow::anyhow!("{key} = {text:?}: not a number")),
    }
}

/// Topic settings from `DescribeConfigs` entries.
pub fn topic_settings(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<TopicSettings> {
    let defaults = TopicSettings::default();
    let policy = get("cleanup.policy").unwrap_or_else(|| "delete".into());
    let policies: Vec<&str> = policy.split(',').map(str::trim).collect();
    Ok(TopicSettings {
        compact: policies.contains(&"compact"),
        delete: policies.contains(&"delete"),
        min_cleanable_dirty_ratio: number(
            get,
            "min.cleanable.dirty.ratio",
            defaults.min_cleanable_dirty_ratio,
        )?,
        segment_bytes: number(get, "segment.bytes", defaults.segment_bytes)?,
        segment_ms: number(get, "segment.ms", defaults.segment_ms)?,
        min_compaction_lag_ms: number(
            get,
            "min.compaction.lag.ms",
            defaults.min_compaction_lag_ms,
        )?,
        max_compaction_lag_ms: number(
            get,
            "max.compaction.lag.ms",
            defaults.max_compaction_lag_ms,
        )?,
        delete_retention_ms: number(get, "delete.retention.ms", defaults.delete_retention_ms)?,
    })
}

/// Cleaner settings from a broker's `DescribeConfigs` entries.
pub fn cleaner_settings(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<CleanerSettings> {
    let defaults = CleanerSettings::default();
    Ok(CleanerSettings {
        threads: number(get, "log.cleaner.threads", defaults.threads)?,
        dedupe_buffer_bytes: number(
            get,
            "log.cleaner.dedupe.buffer.size",
            defaults.dedupe_buffer_bytes,
        )?,
        load_factor: number(
            get,
            "log.cleaner.io.buffer.load.factor",
            defaults.load_factor,
        )?,
        backoff_ms: number(get, "log.cleaner.backoff.ms", defaults.backoff_ms)?,
        entry_bytes: defaults.entry_bytes,
    })
}

/// Reads the topic's and the brokers' effective settings.
///
/// # Errors
///
/// An unknown topic, a refused request, unparsable values.
pub async fn read(
    brokers: &str,
    topic: &str,
    properties: &[(String, String)],
) -> anyhow::Result<EffectiveSettings> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers);
    for (key, value) in properties {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config.create().context("cannot create a Kafka client")?;
    let metadata = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(30))
        .context("cannot read the cluster's metadata")?;
    let topic_meta = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .with_context(|| format!("topic {topic} not found"))?;
    if topic_meta.error().is_some() || topic_meta.partitions().is_empty() {
        bail!("topic {topic} not found (--topic)");
    }
    let partitions = topic_meta.partitions().len();
    let broker_ids: Vec<i32> = metadata.brokers().iter().map(|b| b.id()).collect();
    let admin: AdminClient<DefaultClientContext> =
        config.create().context("cannot create an admin client")?;
    let mut resources = vec![ResourceSpecifier::Topic(topic)];
    resources.extend(broker_ids.iter().map(|&id| ResourceSpecifier::Broker(id)));
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(30)));
    let results = admin
        .describe_configs(&resources, &options)
        .await
        .context("DescribeConfigs failed")?;
    let mut topic_settings_read = None;
    let mut worst: Option<(i32, CleanerSettings)> = None;
    for result in results {
        let resource = result.map_err(|e| anyhow::anyhow!("DescribeConfigs: {e}"))?;
        let get = |key: &str| resource.get(key).and_then(|e| e.value.clone());
        match &resource.specifier {
            OwnedResourceSpecifier::Topic(_) => topic_settings_read = Some(topic_settings(&get)?),
            OwnedResourceSpecifier::Broker(id) => {
                let settings = cleaner_settings(&get)?;
                if worst
                    .as_ref()
                    .is_none_or(|(_, w)| settings.keys_per_pass() < w.keys_per_pass())
                {
                    worst = Some((*id, settings));
                }
            }
            _ => {}
        }
    }
    let (broker, cleaner) = worst.context("no broker's configuration came back")?;
    Ok(EffectiveSettings {
        broker,
        cleaner,
        topic: topic_settings_read.context("the topic's configuration did not come back")?,
        partitions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_described_values_and_names_the_bad_one() {
        let entries = [
            ("cleanup.policy", "compact,delete"),
            ("segment.bytes", "1048576"),
            ("min.cleanable.dirty.ratio", "0.1"),
            ("max.compaction.lag.ms", "9223372036854775807"),
        ];
        let get = |key: &str| {
            entries
                .iter()
                .find(|(k, _)| *k == key)
                .map(|(_, v)| (*v).to_owned())
        };
        let topic = topic_settings(&get).unwrap();
        assert!(topic.compact && topic.delete);
        assert_eq!(topic.segment_bytes, 1_048_576);
        assert_eq!(topic.min_cleanable_dirty_ratio, 0.1);
        assert_eq!(topic.max_compaction_lag_ms, i64::MAX as u64);
        let bad = |key: &str| (key == "log.cleaner.threads").then(|| "two".to_owned());
        let error = cleaner_settings(&bad).unwrap_err().to_string();
        assert!(error.contains("log.cleaner.threads"), "{error}");
    }
}

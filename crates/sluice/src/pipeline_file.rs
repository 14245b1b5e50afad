//! The pipeline file as `sluice run` and `sluice check` read it: either kind of pipeline,
//! told apart by its source section. The one module that knows every kind (the CDC pipeline's
//! and the sink's configuration types), so that none of them needs to know the others.

use std::path::Path;

use crate::config::{ConfigError, PipelineConfig, load_file};
use crate::sink::config::SinkPipelineConfig;

/// What a pipeline file describes: PostgreSQL → Kafka (`[source.postgres]` and `[kafka]`) or
/// Kafka → files (`[source.kafka]` and `[sink.files]`).
#[derive(Debug, Clone)]
pub enum PipelineFile {
    /// Change data capture into Kafka.
    Cdc(Box<PipelineConfig>),
    /// Kafka topics into files.
    Sink(Box<SinkPipelineConfig>),
}

impl PipelineFile {
    /// Reads, interpolates, parses and validates a pipeline file of either kind; the kind is
    /// decided by the source section (`[source.kafka]` is a sink pipeline).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and every invalid key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        load_file(path, Self::from_toml)
    }

    /// Parses and validates pipeline text of either kind.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `origin` and every invalid key.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let value: toml::Value = toml::from_str(text).map_err(|source| ConfigError::Syntax {
            path: origin.to_owned(),
            source,
        })?;
        let is_sink = value
            .get("source")
            .and_then(toml::Value::as_table)
            .is_some_and(|source| source.contains_key("kafka"));
        if is_sink {
            SinkPipelineConfig::from_toml(text, origin, env).map(|c| Self::Sink(Box::new(c)))
        } else {
            let config = PipelineConfig::from_toml(text, origin, env)?;
            Ok(Self::Cdc(Box::new(config)))
        }
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Cdc(config) => &config.name,
            Self::Sink(config) => &config.name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "OUTPUT_DIR").then(|| "/tmp/out".to_owned())
    }

    #[test]
    fn kafka_source_selects_the_sink_kind() {
        let text = r#"
            name = "orders_files"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["orders"]
            [sink.files]
            path = "${OUTPUT_DIR}"
            format = "jsonl"
        "#;
        let file = PipelineFile::from_toml(text, "t.toml", &env).unwrap();
        assert!(matches!(file, PipelineFile::Sink(_)));
        assert_eq!(file.name(), "orders_files");
    }

    #[test]
    fn cdc_files_still_load_as_cdc() {
        let text = r#"
            name = "orders"
            [source.postgres]
            url = "postgres://postgres@127.0.0.1:5432/postgres"
            schemas = ["public"]
            [kafka]
            brokers = "127.0.0.1:9092"
        "#;
        assert!(matches!(
            PipelineFile::from_toml(text, "t.toml", &env).unwrap(),
            PipelineFile::Cdc(_)
        ));
    }
}

//! Avro topics: a record's key and value in Confluent's wire format (`0x00`, the writer
//! schema's 4-byte registry id, Avro binary) become the JSON `JsonConverter` writes for them, by
//! the sinks' decoder ([`crate::sink::avro`]): the writer schema fetched from the pipeline's
//! `[schema_registry]` by its id (once per id), Connect's JSON forms of each type (decimals as
//! base64 bytes with the schema's scale, `{scale, value}` for variable-scale decimals, dates,
//! times and timestamps as the integers Avro holds). They are the forms of Debezium's JSON
//! events, so [`super::topic::TopicView`] compares both alike.
//!
//! A record whose schema cannot be had (the registry does not answer, refuses, holds no such
//! id, or the schema is not Avro) cannot be compared: its table is *not verified*, with the
//! reason, never reported as different. A value whose bytes do not match its schema is a row
//! that matches nothing (it differs, with its key); a key that cannot be read leaves the table
//! not verified, as a JSON key that cannot be parsed does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::event::{EventFormat, EventOptions};
use crate::registry::{Registry, RegistryConfig};
use crate::sink::avro::reader::unframe;
use crate::sink::avro::{AvroDecoder, Output};
use crate::sink::worker::WriteFailure;

/// How long a record waits for a registry that does not answer, at most (once per schema id:
/// a failure is remembered).
const REGISTRY_WAIT: Duration = Duration::from_secs(30);

/// Why an Avro key or value could not be turned into JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AvroProblem {
    /// Its writer schema cannot be had: the record cannot be compared.
    Schema(String),
    /// The bytes are not in the wire format or do not match their schema.
    Bytes(String),
}

/// The Avro reading of one verification: which of keys and values are Avro, and the decoder.
pub struct AvroTopics {
    decoder: AvroDecoder,
    key: bool,
    value: bool,
    /// Schema ids that could not be had, with why (asked for once per verification).
    failed: Mutex<HashMap<u32, String>>,
}

impl std::fmt::Debug for AvroTopics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroTopics")
            .field("key", &self.key)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

/// The Avro reading of a sink pipeline's records, made as its sink makes it (with `output`);
/// `None` when they are JSON.
///
/// # Errors
///
/// Avro without `[schema_registry]`, or its TLS files cannot be read.
pub fn sink_decoder(
    config: &crate::sink::config::SinkPipelineConfig,
    output: Output,
) -> anyhow::Result<Option<AvroDecoder>> {
    let kafka = config.kafka();
    if !kafka.uses_avro() {
        return Ok(None);
    }
    let Some(registry) = &config.schema_registry else {
        anyhow::bail!(
            "source.kafka reads Avro and no [schema_registry] is configured: add [schema_registry] url = \"http://registry:8081\""
        );
    };
    let registry =
        Registry::new(registry.clone()).map_err(|e| anyhow::anyhow!("[schema_registry]: {e}"))?;
    Ok(Some(AvroDecoder::new(
        Arc::new(registry),
        tokio::runtime::Handle::current(),
        kafka.key_format(),
        kafka.value_format(),
        output,
        REGISTRY_WAIT,
    )))
}

impl AvroTopics {
    /// The reading of `events`' Avro keys and values through `registry`; `None` when the events
    /// are JSON.
    ///
    /// # Errors
    ///
    /// Avro without `[schema_registry]`, or its TLS files cannot be read.
    pub fn new(
        events: &EventOptions,
        registry: Option<&RegistryConfig>,
    ) -> anyhow::Result<Option<Self>> {
        if !events.uses_avro() {
            return Ok(None);
        }
        let Some(registry) = registry else {
            anyhow::bail!(
                "kafka.events is Avro and no [schema_registry] is configured (url = \"http://host:8081\"): the records' schemas cannot be fetched"
            );
        };
        let registry = Registry::new(registry.clone())
            .map_err(|e| anyhow::anyhow!("[schema_registry]: {e}"))?;
        let decoder = AvroDecoder::new(
            Arc::new(registry),
            tokio::runtime::Handle::current(),
            events.key_format(),
            events.value_format(),
            Output::Plain,
            REGISTRY_WAIT,
        );
        Ok(Some(Self {
            decoder,
            key: events.key_format() == EventFormat::Avro,
            value: events.value_format() == EventFormat::Avro,
            failed: Mutex::new(HashMap::new()),
        }))
    }

    /// Whether keys are Avro.
    pub fn keys(&self) -> bool {
        self.key
    }

    /// Whether values are Avro.
    pub fn values(&self) -> bool {
        self.value
    }

    /// Appends the JSON of the Avro `bytes` to `out` (cleared first). Called from a blocking
    /// section (`block_in_place`): a schema not fetched yet is fetched on the runtime.
    ///
    /// # Errors
    ///
    /// [`AvroProblem`].
    pub fn to_json(&self, bytes: &[u8], out: &mut Vec<u8>) -> Result<(), AvroProblem> {
        out.clear();
        let (id, body) = unframe(bytes).map_err(AvroProblem::Bytes)?;
        if let Some(problem) = self.failed.lock().expect("not poisoned").get(&id) {
            return Err(AvroProblem::Schema(problem.clone()));
        }
        let reader = match self.decoder.reader(id) {
            Ok(reader) => reader,
            Err(failure) => {
                let problem = match failure {
                    WriteFailure::Record(problem) => problem,
                    WriteFailure::Run(error) => error.chain(),
                };
                self.failed
                    .lock()
                    .expect("not poisoned")
                    .insert(id, problem.clone());
                return Err(AvroProblem::Schema(problem));
            }
        };
        reader.write_json(body, out).map_err(|e| {
            out.clear();
            AvroProblem::Bytes(format!("schema id {id}: {e}"))
        })
    }
}

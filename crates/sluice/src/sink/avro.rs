//! Sinks read Avro in Confluent's wire format (`0x00`, the writer schema's 4-byte big-endian
//! registry id, Avro binary), as Kafka Connect's Avro converters do on the sink side
//! (`key.converter` / `value.converter`: `[source.kafka] format`, `key_format`, `value_format`).
//!
//! A record's writer schema is fetched from `[schema_registry]` by its id
//! ([`Registry::schema_by_id`]) once per id and process and prepared once ([`reader`]: the
//! Connect schema and a decoding plan). Each record is then handed to the sink as the JSON
//! `JsonConverter` writes for the same Connect record, so that the sinks read it as they read
//! JSON events:
//!
//! - the files sink: without schemas (`schemas.enable=false`): JSON Lines hold the decoded JSON;
//!   Parquet's columns take the types of the value schema's top-level fields;
//! - the PostgreSQL sink: with schemas (`{"schema":…,"payload":…}`): typed columns and
//!   `auto_create` from the Connect schema, as for JSON with schemas.
//!
//! A record that is not in the wire format, whose id the registry does not hold, whose schema
//! is not Avro or cannot be mapped (a union of several non-null types, a recursive record), or
//! whose bytes do not match its schema is a record failure: `delivery.on_failure` applies (the
//! worker names topic, partition and offset; a dead-lettered record keeps the bytes consumed).
//! A registry that does not answer is retried with its backoff for up to half of
//! `delivery.processing_timeout_ms`, shown meanwhile in `/health`'s `schema_registry_error`;
//! then the run ends (retryable) and restarts from what committed: nothing is lost.

pub mod reader;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::PipelineError;
use crate::event::EventFormat;
use crate::registry::Registry;
use crate::sink::worker::{Reclaim, RecordData, SubPartitionWriter, WriteFailure};

use reader::{Reader, unframe};

/// How a decoded record is handed to the sink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// The JSON payload alone (`JsonConverter`, `schemas.enable=false`): the files sink.
    Plain,
    /// `{"schema":…,"payload":…}` (`schemas.enable=true`): the PostgreSQL sink.
    WithSchemas,
}

/// The Avro reading of a sink pipeline: which of keys and values are Avro, the registry and the
/// prepared writer schemas, shared by every worker of the process.
pub struct AvroDecoder {
    registry: Arc<Registry>,
    runtime: tokio::runtime::Handle,
    key: bool,
    value: bool,
    output: Output,
    /// How long a worker waits for an unreachable registry before the run ends.
    wait: Duration,
    /// id → the prepared schema, or why it cannot be read (asked for once per id).
    readers: Mutex<HashMap<u32, Result<Arc<Reader>, String>>>,
}

impl std::fmt::Debug for AvroDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroDecoder")
            .field("key", &self.key)
            .field("value", &self.value)
            .field("output", &self.output)
            .finish_non_exhaustive()
    }
}

impl AvroDecoder {
    /// A decoder of Avro keys (`key`) and values (`value`) through `registry`; a worker waits
    /// up to `wait` for a registry that does not answer.
    pub fn new(
        registry: Arc<Registry>,
        runtime: tokio::runtime::Handle,
        key: EventFormat,
        value: EventFormat,
        output: Output,
        wait: Duration,
    ) -> Self {
        Self {
            registry,
            runtime,
            key: key == EventFormat::Avro,
            value: value == EventFormat::Avro,
            output,
            wait,
            readers: Mutex::new(HashMap::new()),
        }
    }

    /// The prepared schema of `id`, fetched from the registry at its first use (`sluice
    /// verify` reads Avro topics through it too).
    ///
    /// # Errors
    ///
    /// [`WriteFailure::Record`]: the registry holds no such id, or its schema is not Avro or
    /// cannot be read (remembered); [`WriteFailure::Run`]: the registry did not answer within
    /// the wait, or refused.
    pub fn reader(&self, id: u32) -> Result<Arc<Reader>, WriteFailure> {
        if let Some(found) = self.readers.lock().expect("not poisoned").get(&id) {
            return found.clone().map_err(WriteFailure::Record);
        }
        let started = Instant::now();
        let fetched = self
            .runtime
            // The timer is made inside the runtime (a worker thread has none of its own).
            .block_on(async {
                tokio::time::timeout(self.wait, self.registry.schema_by_id(id)).await
            })
            .map_err(|_| {
                WriteFailure::Run(PipelineError::retryable(
                    format!(
                        "the schema registry at {} did not answer for {} s while fetching \
                         schema id {id}",
                        self.registry.config().url.shown(),
                        started.elapsed().as_secs()
                    ),
                    std::io::Error::from(std::io::ErrorKind::TimedOut),
                ))
            })?
            .map_err(|e| {
                WriteFailure::Run(PipelineError::fatal(
                    e.to_string(),
                    "fix [schema_registry] (url, credentials): nothing was written past the \
                     record that needs the schema",
                ))
            })?;
        let prepared = fetched.and_then(|found| {
            let (kind, text) = &*found;
            if !kind.eq_ignore_ascii_case("AVRO") {
                return Err(format!(
                    "schema id {id} is {kind}, not Avro: set source.kafka's key_format / \
                     value_format to the records' format"
                ));
            }
            Reader::parse(text)
                .map(Arc::new)
                .map_err(|e| format!("schema id {id} cannot be read: {e}"))
        });
        self.readers
            .lock()
            .expect("not poisoned")
            .insert(id, prepared.clone());
        prepared.map_err(WriteFailure::Record)
    }

    /// Decodes `bytes` into `out`; returns the prepared schema.
    fn decode(
        &self,
        what: &str,
        bytes: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Arc<Reader>, WriteFailure> {
        let (id, body) =
            unframe(bytes).map_err(|e| WriteFailure::Record(format!("{what} is {e}")))?;
        let reader = self.reader(id)?;
        let fail = |e: String| WriteFailure::Record(format!("{what} (schema id {id}): {e}"));
        match self.output {
            Output::Plain => reader.write_json(body, out).map_err(fail)?,
            Output::WithSchemas => {
                out.extend_from_slice(b"{\"schema\":");
                out.extend_from_slice(reader.connect_json());
                out.extend_from_slice(b",\"payload\":");
                reader.write_json(body, out).map_err(fail)?;
                out.push(b'}');
            }
        }
        Ok(reader)
    }

    /// `data` with its Avro key and value as JSON (and `data` as its original).
    ///
    /// # Errors
    ///
    /// [`WriteFailure::Record`]: the record cannot be read; [`WriteFailure::Run`]: the registry
    /// did not answer, or refused.
    pub fn decode_record(&self, data: &RecordData) -> Result<RecordData, WriteFailure> {
        let mut key = Vec::new();
        let mut value = Vec::new();
        let key = match data.key() {
            Some(bytes) if self.key => {
                self.decode("the key", bytes, &mut key)?;
                Some(key.as_slice())
            }
            other => other,
        };
        let mut value_kinds = None;
        let value = match data.value() {
            Some(bytes) if self.value => {
                let reader = self.decode("the value", bytes, &mut value)?;
                value_kinds = reader.value_kinds().cloned();
                Some(value.as_slice())
            }
            other => other,
        };
        // The headers stay with the original, which a dead-lettered record carries.
        Ok(RecordData::new(data.offset, key, value, data.timestamp_ms)
            .decoded_from(data.clone(), value_kinds))
    }
}

/// A sub-partition writer that hands its inner writer the records with Avro decoded.
pub struct AvroWriter {
    inner: Box<dyn SubPartitionWriter>,
    decoder: Arc<AvroDecoder>,
}

impl AvroWriter {
    /// `inner`, reading through `decoder`.
    pub fn new(inner: Box<dyn SubPartitionWriter>, decoder: Arc<AvroDecoder>) -> Self {
        Self { inner, decoder }
    }
}

impl SubPartitionWriter for AvroWriter {
    fn write(&mut self, data: &RecordData) -> Result<(), WriteFailure> {
        let decoded = self.decoder.decode_record(data)?;
        self.inner.write(&decoded)
    }
    fn note(&mut self, offset: i64) {
        self.inner.note(offset);
    }
    fn records(&self) -> u64 {
        self.inner.records()
    }
    fn opened_at(&self) -> Option<Instant> {
        self.inner.opened_at()
    }
    fn is_full(&self) -> bool {
        self.inner.is_full()
    }
    fn due_after_batch(&self) -> bool {
        self.inner.due_after_batch()
    }
    fn max_age(&self) -> Duration {
        self.inner.max_age()
    }
    fn commit(&mut self) -> Result<(), PipelineError> {
        self.inner.commit()
    }
    fn forget(&mut self) {
        self.inner.forget();
    }
    fn discard(&mut self) {
        self.inner.discard();
    }
    fn reclaimer(&self) -> Option<Arc<dyn Reclaim>> {
        self.inner.reclaimer()
    }
}

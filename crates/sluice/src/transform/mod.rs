//! Kafka Connect's single message transforms, by Connect's and Debezium's names and keys
//! (`[transforms]` and `[predicates]` in a pipeline file; docs/transforms.md).
//!
//! A [`Chain`] applies its transforms in order to each record a source's encoder made, in the
//! delivery core's parallel encoding stage (and in the snapshot workers), as Connect's worker
//! applies them between the connector and the converter: each transform sees the record's
//! topic, key, value (each with its Connect schema when the converter writes schemas) and
//! headers, and may change them or drop the record. A dropped record still completes its place
//! in the acknowledgement order, so the source's confirmed position moves past it.
//!
//! The transforms work on the JSON the encoders wrote ([`json`]), with or without Connect's
//! schema envelope. With Avro keys or values the sources write Connect's JSON with schemas for
//! the chain, and the chain's end writes Avro from the transformed Connect schema and value, as
//! Connect's Avro converter does after the transforms ([`avro`]: the schema registered under
//! the subjects of the record's topic, the routed one).

pub mod avro;
mod cast;
pub mod config;
mod config_convert;
mod config_debezium;
mod config_headers;
mod config_more;
pub mod config_outbox;
pub mod direct;
pub mod expr;
mod field;
mod flatten;
mod headers;
mod insert;
mod javadate;
pub mod json;
mod logical;
mod mask;
mod partition;
mod predicate;
mod record;
mod router;
mod schema;
mod schema_change;
mod scripting;
mod shape;
mod timestamp;
mod unwrap;

use std::collections::HashSet;
use std::sync::Arc;

pub use self::config::{PredicatesConfig, TransformsConfig};
pub use self::direct::{Direct, EventField};
use self::json::Data;
pub use self::predicate::Predicate;
pub use self::record::Record;
pub use self::unwrap::DeleteMode;
use crate::record::OutRecord;

/// Why a transform could not be applied to a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransformError {
    /// The transform's name in `[transforms]`.
    pub name: Arc<str>,
    /// What went wrong.
    pub reason: String,
}

impl std::fmt::Display for TransformError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "transform {:?} failed: {}", self.name, self.reason)
    }
}

impl std::error::Error for TransformError {}

/// One transform.
#[derive(Debug)]
pub enum Transform {
    /// Debezium's `ExtractNewRecordState`.
    Unwrap(unwrap::Unwrap),
    /// Kafka's `RegexRouter`.
    RegexRouter(router::RegexRouter),
    /// Kafka's `Filter`: drops the record (when its predicate holds).
    Filter,
    /// Kafka's `ReplaceField$Key` / `$Value`.
    ReplaceField(field::ReplaceField),
    /// Kafka's `ValueToKey`.
    ValueToKey(field::ValueToKey),
    /// Debezium's `ByLogicalTableRouter`.
    LogicalTableRouter(logical::LogicalTableRouter),
    /// Kafka's `TimestampConverter$Key` / `$Value`.
    TimestampConverter(timestamp::TimestampConverter),
    /// Kafka's `InsertField$Key` / `$Value`.
    InsertField(insert::InsertField),
    /// Kafka's `MaskField$Key` / `$Value`.
    MaskField(mask::MaskField),
    /// Kafka's `InsertHeader`.
    InsertHeader(headers::InsertHeader),
    /// Kafka's `DropHeaders`.
    DropHeaders(headers::DropHeaders),
    /// Kafka's `HeaderFrom$Key` / `$Value`.
    HeaderFrom(headers::HeaderFrom),
    /// Kafka's `ExtractField$Key` / `$Value`.
    ExtractField(shape::ExtractField),
    /// Kafka's `HoistField$Key` / `$Value`.
    HoistField(shape::HoistField),
    /// Debezium's scripting `Filter` / `ContentBasedRouter`, in sluice's expression language.
    Scripting(scripting::Scripting),
    /// Kafka's `Cast$Key` / `$Value`.
    Cast(cast::Cast),
    /// Kafka's `Flatten$Key` / `$Value`.
    Flatten(flatten::Flatten),
    /// Debezium's `HeaderToValue`.
    HeaderToValue(headers::HeaderToValue),
    /// Debezium's `SchemaChangeEventFilter`.
    SchemaChangeEventFilter(schema_change::SchemaChangeEventFilter),
    /// Debezium's `PartitionRouting`.
    PartitionRouting(partition::PartitionRouting),
}

impl Transform {
    /// Applies the transform; `Ok(None)` drops the record.
    fn apply(&self, record: Record) -> Result<Option<Record>, String> {
        match self {
            Transform::Unwrap(t) => t.apply(record),
            Transform::RegexRouter(t) => Ok(Some(t.apply(record))),
            Transform::Filter => Ok(None),
            Transform::ReplaceField(t) => t.apply(record).map(Some),
            Transform::ValueToKey(t) => t.apply(record).map(Some),
            Transform::LogicalTableRouter(t) => t.apply(record).map(Some),
            Transform::TimestampConverter(t) => t.apply(record).map(Some),
            Transform::InsertField(t) => t.apply(record).map(Some),
            Transform::MaskField(t) => t.apply(record).map(Some),
            Transform::InsertHeader(t) => Ok(Some(t.apply(record))),
            Transform::DropHeaders(t) => Ok(Some(t.apply(record))),
            Transform::HeaderFrom(t) => t.apply(record).map(Some),
            Transform::ExtractField(t) => t.apply(record).map(Some),
            Transform::HoistField(t) => Ok(Some(t.apply(record))),
            Transform::Scripting(t) => t.apply(record),
            Transform::Cast(t) => t.apply(record).map(Some),
            Transform::Flatten(t) => t.apply(record).map(Some),
            Transform::HeaderToValue(t) => t.apply(record).map(Some),
            Transform::SchemaChangeEventFilter(t) => t.apply(record),
            Transform::PartitionRouting(t) => t.apply(record).map(Some),
        }
    }
}

/// A transform of the chain with its predicate.
#[derive(Debug)]
pub struct Step {
    /// Its name in `[transforms]`.
    pub name: Arc<str>,
    /// What it does.
    pub transform: Transform,
    /// Applied only to records this holds for (its `negate`d form when `negate`).
    pub predicate: Option<(Arc<Predicate>, bool)>,
}

/// Makes a topic exist (blocking), for the topics a content-based router computes; an error
/// is logged and the record goes on to the producer, which names the missing topic.
pub type NewTopicHook = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The transforms of a pipeline, in order.
pub struct Chain {
    steps: Vec<Step>,
    /// Keys are written with Connect's schema envelope.
    key_schemas: bool,
    /// Values are written with Connect's schema envelope.
    value_schemas: bool,
    /// Creates the topics records are routed to that are not known beforehand (as Connect's
    /// `topic.creation.enable` does), with the topics it made or found.
    new_topics: std::sync::OnceLock<(NewTopicHook, std::sync::RwLock<HashSet<Arc<str>>>)>,
    /// Writes Avro keys and/or values after the chain (Avro events).
    avro: std::sync::OnceLock<avro::AvroOutput>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Chain")
            .field("steps", &self.steps)
            .field("key_schemas", &self.key_schemas)
            .field("value_schemas", &self.value_schemas)
            .finish_non_exhaustive()
    }
}

impl Chain {
    /// A chain of `steps` for keys and values written with (`*_schemas`) or without Connect's
    /// schema envelope.
    pub fn new(steps: Vec<Step>, key_schemas: bool, value_schemas: bool) -> Self {
        Self {
            steps,
            key_schemas,
            value_schemas,
            new_topics: std::sync::OnceLock::new(),
            avro: std::sync::OnceLock::new(),
        }
    }

    /// Has the chain write its records' keys and/or values as Avro (`output`), as Connect's
    /// Avro converter after the transforms; the records come in as JSON with schemas.
    pub fn set_avro_output(&self, output: avro::AvroOutput) {
        let _ = self.avro.set(output);
    }

    /// Whether the chain writes Avro (see [`Chain::set_avro_output`]).
    pub fn writes_avro(&self) -> bool {
        self.avro.get().is_some()
    }

    /// Whether a step computes topics from the record (a `ContentBasedRouter`, an
    /// `ExtractNewRecordState` with `route.by.field`), which cannot all be created beforehand.
    pub fn computes_topics(&self) -> bool {
        self.steps.iter().any(|s| match &s.transform {
            Transform::Scripting(t) => t.kind == scripting::Kind::Router,
            Transform::Unwrap(t) => t.route_by_field.is_some(),
            _ => false,
        })
    }

    /// Has `hook` make each topic a record is routed to exist before the record leaves the
    /// chain (once per topic).
    pub fn set_new_topic_hook(&self, hook: NewTopicHook) {
        let _ = self
            .new_topics
            .set((hook, std::sync::RwLock::new(HashSet::new())));
    }

    /// Runs the new-topic hook for `topic` unless it is known.
    fn ensure_topic(&self, topic: &Arc<str>) {
        let Some((hook, known)) = self.new_topics.get() else {
            return;
        };
        if known
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(topic)
        {
            return;
        }
        match hook(topic) {
            Ok(()) => {
                known
                    .write()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(Arc::clone(topic));
            }
            Err(error) => {
                tracing::warn!(topic = %topic, error = %error, "could not create a topic a ContentBasedRouter computed");
            }
        }
    }

    /// Applies the chain to `out`; `Ok(None)`: a transform dropped it.
    ///
    /// # Errors
    ///
    /// The record is not of the form the encoders write, or a transform refused it (e.g.
    /// `ValueToKey` on a value without the field, with schemas).
    pub fn apply(&self, out: &OutRecord) -> Result<Option<OutRecord>, TransformError> {
        let failed = |name: &Arc<str>, reason: String| TransformError {
            name: Arc::clone(name),
            reason,
        };
        let Some(first) = self.steps.first().map(|s| &s.name) else {
            return Ok(Some(out.clone()));
        };
        let mut record = Record {
            key: Data::read(out.key.as_deref(), self.key_schemas)
                .map_err(|e| failed(first, format!("the key: {e}")))?,
            value: Data::read(out.value.as_deref(), self.value_schemas)
                .map_err(|e| failed(first, format!("the value: {e}")))?,
            topic: Arc::clone(&out.topic),
            headers: out.headers.clone(),
            header_schemas: Vec::new(),
            partition: out.partition,
        };
        for step in &self.steps {
            if let Some((predicate, negate)) = &step.predicate
                && predicate.test(&record) == *negate
            {
                continue;
            }
            match step.transform.apply(record) {
                Ok(Some(next)) => record = next,
                Ok(None) => return Ok(None),
                Err(reason) => return Err(failed(&step.name, reason)),
            }
        }
        if !Arc::ptr_eq(&record.topic, &out.topic) {
            self.ensure_topic(&record.topic);
        }
        let (key, value) = match self.avro.get() {
            // Without the envelope the text's bytes are moved, not copied.
            None => (
                record.key.into_bytes(self.key_schemas),
                record.value.into_bytes(self.value_schemas),
            ),
            Some(avro) => {
                // Connect's converter after the last transform: a failure is the chain's.
                let last = self.steps.last().map_or(first, |s| &s.name);
                let write = |is_key: bool, data: &Data, avro_side: bool, schemas: bool| {
                    if avro_side {
                        avro.write(&record.topic, is_key, data).map_err(|e| {
                            failed(
                                last,
                                format!(
                                    "the {} as Avro (topic {}): {e}",
                                    if is_key { "key" } else { "value" },
                                    record.topic
                                ),
                            )
                        })
                    } else {
                        Ok(data.write(schemas))
                    }
                };
                (
                    write(true, &record.key, avro.key, self.key_schemas)?,
                    write(false, &record.value, avro.value, self.value_schemas)?,
                )
            }
        };
        Ok(Some(OutRecord {
            partition: record.partition,
            topic: record.topic,
            key,
            value,
            headers: record.headers,
        }))
    }

    /// The topics records of `topic` may end up in (for creating them beforehand): `topic`
    /// routed by each router whose predicate holds or may hold for its records.
    pub fn topics_of(&self, topic: &str) -> Vec<String> {
        let mut topics = vec![topic.to_owned()];
        for step in &self.steps {
            // Where the step sends `topic`'s records (`None`: not a router); a content-based
            // router whose topics are computed names only the literal ones it can.
            let route = |topic: &str| match &step.transform {
                Transform::RegexRouter(router) => Some(vec![router.route(topic)]),
                Transform::LogicalTableRouter(router) => Some(vec![router.route(topic)]),
                Transform::Scripting(router) if router.kind == scripting::Kind::Router => {
                    Some(router.routes(topic))
                }
                _ => None,
            };
            if route("").is_none() {
                continue;
            }
            let mut next = Vec::with_capacity(topics.len());
            for topic in topics {
                let applies = match &step.predicate {
                    None => Some(true),
                    Some((predicate, negate)) => predicate.test_topic(&topic).map(|t| t != *negate),
                };
                match applies {
                    Some(true) => next.extend(route(&topic).into_iter().flatten()),
                    Some(false) => next.push(topic),
                    None => {
                        next.extend(route(&topic).into_iter().flatten());
                        next.push(topic);
                    }
                }
            }
            let mut seen = std::collections::HashSet::new();
            next.retain(|t| seen.insert(t.clone()));
            topics = next;
        }
        topics
    }

    /// [`Chain::topics_of`] for every topic of `topics`, each once.
    pub fn topics_for(&self, topics: &[String]) -> Vec<String> {
        let mut out: Vec<String> = Vec::with_capacity(topics.len());
        for topic in topics {
            for routed in self.topics_of(topic) {
                if !out.contains(&routed) {
                    out.push(routed);
                }
            }
        }
        out
    }
}

/// `records` through `chain` (when there is one): the records it keeps, in order.
///
/// # Errors
///
/// The first record a transform refused.
pub fn apply_all(
    chain: Option<&Chain>,
    records: Vec<OutRecord>,
) -> Result<Vec<OutRecord>, Box<(TransformError, OutRecord)>> {
    let Some(chain) = chain else {
        return Ok(records);
    };
    let mut out = Vec::with_capacity(records.len());
    for record in records {
        match chain.apply(&record) {
            Ok(Some(record)) => out.push(record),
            Ok(None) => {}
            Err(error) => return Err(Box::new((error, record))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;

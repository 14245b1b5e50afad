//! A [`StateStore`] in a compacted Kafka topic (`state_store = "kafka"`), so that every
//! instance of a pipeline can read what the active one wrote, and take over from it.
//!
//! - Each document is one record: key `<document key>` (pipeline-qualified already, e.g.
//!   `orders.slot`), value the document, a tombstone for a removed one. Compaction keeps the
//!   newest per key.
//! - Writes are Kafka transactions of a producer whose `transactional.id` is
//!   `sluice-state-<pipeline>`: opening the store (`init_transactions`) fences every earlier
//!   producer of that id, so an instance that lost the active role can no longer write, and an
//!   open transaction of it is aborted. `store` returns once the transaction committed (the
//!   store's contract: durable when `Ok`).
//! - Opening reads the topic from its start with `isolation.level = read_committed`, after
//!   fencing, so it sees the last committed documents of the instance it replaced; later loads
//!   answer from memory (only the active instance writes).
//! - [`KafkaStateStore::read_only`] reads the documents without the producer, so it fences
//!   nobody (for `sluice doctor` and `sluice slots` next to a running pipeline).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::KafkaConfig;
use crate::error::PipelineError;
use crate::runtime::state::{Fenced, StateStore};

/// How long a transaction (or the initial read) may take before the store gives up.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Documents in a compacted topic (see the module docs).
pub struct KafkaStateStore {
    topic: String,
    /// `None` when opened [`read_only`](Self::read_only).
    producer: Option<ThreadedProducer<DefaultProducerContext>>,
    documents: Mutex<HashMap<String, Vec<u8>>>,
}

impl std::fmt::Debug for KafkaStateStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaStateStore")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl KafkaStateStore {
    /// Creates `topic` when missing, fences earlier writers of `pipeline` and reads the
    /// documents whose key starts with `<pipeline>.`.
    ///
    /// # Errors
    ///
    /// Retryable when Kafka cannot be reached; fatal when it refuses the topic or the
    /// transactional producer (authorization).
    pub async fn open(
        kafka: &KafkaConfig,
        topic: &str,
        pipeline: &str,
    ) -> Result<Self, PipelineError> {
        crate::kafka::ensure_compacted_topic(kafka, topic).await?;
        let mut config = crate::kafka::client_config(&kafka.brokers, &kafka.client);
        config
            .set("transactional.id", format!("sluice-state-{pipeline}"))
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "0")
            .set("transaction.timeout.ms", "60000");
        let producer: ThreadedProducer<DefaultProducerContext> = config.create().map_err(|e| {
            PipelineError::fatal_with(
                "cannot create the state store's transactional producer",
                "check the properties in [kafka.client]",
                e,
            )
        })?;
        let brokers = kafka.brokers.clone();
        let client = kafka.client.clone();
        let topic_owned = topic.to_owned();
        let prefix = format!("{pipeline}.");
        tokio::task::spawn_blocking(move || {
            producer
                .init_transactions(TIMEOUT)
                .map_err(|e| transaction_error("cannot start the state store's producer", e))?;
            let documents = read_all(&reader(&brokers, &client)?, &topic_owned, &prefix)?;
            Ok(Self {
                topic: topic_owned,
                producer: Some(producer),
                documents: Mutex::new(documents),
            })
        })
        .await
        .map_err(|e| PipelineError::retryable("the state store's start failed", e))?
    }

    /// The committed documents of `pipeline` in `topic`, read without a producer: nothing is
    /// fenced (the pipeline's active instance goes on writing), and writes fail. `None` when
    /// the topic does not exist.
    ///
    /// # Errors
    ///
    /// Retryable when Kafka cannot be reached.
    pub async fn read_only(
        kafka: &KafkaConfig,
        topic: &str,
        pipeline: &str,
    ) -> Result<Option<Self>, PipelineError> {
        let brokers = kafka.brokers.clone();
        let client = kafka.client.clone();
        let topic_owned = topic.to_owned();
        let prefix = format!("{pipeline}.");
        tokio::task::spawn_blocking(move || {
            let reader = reader(&brokers, &client)?;
            if !topic_exists(&reader, &topic_owned)? {
                return Ok(None);
            }
            let documents = read_all(&reader, &topic_owned, &prefix)?;
            Ok(Some(Self {
                topic: topic_owned,
                producer: None,
                documents: Mutex::new(documents),
            }))
        })
        .await
        .map_err(|e| PipelineError::retryable("the state store's read failed", e))?
    }

    fn documents(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.documents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One record in one transaction; `None` writes a tombstone.
    fn write(&self, key: &str, document: Option<&[u8]>) -> std::io::Result<()> {
        // A fenced producer carries [`Fenced`], so that the source stops as a deposed instance.
        let io = |what: &'static str, e: KafkaError| {
            if is_fenced(&e) {
                tracing::warn!(topic = %self.topic, error = %e, "{Fenced}");
                return std::io::Error::other(Fenced);
            }
            std::io::Error::other(WriteError::Kafka {
                what,
                topic: self.topic.clone(),
                source: e,
            })
        };
        let Some(producer) = &self.producer else {
            return Err(std::io::Error::other(WriteError::ReadOnly {
                topic: self.topic.clone(),
            }));
        };
        producer
            .begin_transaction()
            .map_err(|e| io("cannot begin a transaction", e))?;
        let mut record = BaseRecord::<str, [u8]>::to(&self.topic).key(key);
        if let Some(document) = document {
            record = record.payload(document);
        }
        let sent = producer.send(record).map_err(|(e, _)| e);
        let committed = sent.and_then(|()| producer.commit_transaction(TIMEOUT));
        if let Err(e) = committed {
            if !is_fenced(&e) {
                let _ = producer.abort_transaction(TIMEOUT);
            }
            return Err(io("cannot commit a document", e));
        }
        Ok(())
    }
}

/// Why a document could not be written to the state topic. [`StateStore`]'s methods return
/// `io::Error`s, so this travels inside one (as [`Fenced`] does), typed for whoever looks.
#[derive(Debug, thiserror::Error)]
enum WriteError {
    /// A step of the transaction failed.
    #[error("{what} in state topic {topic}")]
    Kafka {
        what: &'static str,
        topic: String,
        #[source]
        source: KafkaError,
    },
    /// The store was opened by [`KafkaStateStore::read_only`].
    #[error("the state topic {topic} was opened to read only")]
    ReadOnly { topic: String },
}

impl StateStore for KafkaStateStore {
    fn load(&self, key: &str) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.documents().get(key).cloned())
    }

    fn store(&self, key: &str, document: &[u8]) -> std::io::Result<()> {
        self.write(key, Some(document))?;
        self.documents().insert(key.to_owned(), document.to_vec());
        Ok(())
    }

    fn remove(&self, key: &str) -> std::io::Result<()> {
        self.write(key, None)?;
        self.documents().remove(key);
        Ok(())
    }

    fn location(&self, key: &str) -> String {
        format!("kafka topic {} key {key}", self.topic)
    }
}

fn is_fenced(error: &KafkaError) -> bool {
    matches!(
        error.rdkafka_error_code(),
        Some(RDKafkaErrorCode::Fenced | RDKafkaErrorCode::ProducerFenced)
    )
}

fn transaction_error(what: &str, error: KafkaError) -> PipelineError {
    match error.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::TransactionalIdAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed,
        ) => PipelineError::fatal_with(
            what,
            "grant the client's principal WRITE and DESCRIBE on the transactional id sluice-state-<pipeline> and IdempotentWrite on the cluster",
            error,
        ),
        _ => PipelineError::retryable(what, error),
    }
}

/// The consumer that reads the state topic (committed documents only).
fn reader(
    brokers: &str,
    client: &std::collections::BTreeMap<String, String>,
) -> Result<BaseConsumer, PipelineError> {
    crate::kafka::client_config(brokers, client)
        .set("group.id", "sluice-state-reader")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
        .map_err(|e| {
            PipelineError::fatal_with(
                "cannot create the state store's reader",
                "check the properties in [kafka.client]",
                e,
            )
        })
}

/// Whether `topic` exists.
fn topic_exists(consumer: &BaseConsumer, topic: &str) -> Result<bool, PipelineError> {
    let metadata = consumer
        .fetch_metadata(Some(topic), TIMEOUT)
        .map_err(|e| PipelineError::retryable(format!("cannot read the state topic {topic}"), e))?;
    Ok(metadata
        .topics()
        .iter()
        .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty()))
}

/// Every committed document of the topic whose key starts with `prefix` (the newest per key;
/// tombstones remove).
fn read_all(
    consumer: &BaseConsumer,
    topic: &str,
    prefix: &str,
) -> Result<HashMap<String, Vec<u8>>, PipelineError> {
    let unreachable =
        |e: KafkaError| PipelineError::retryable(format!("cannot read the state topic {topic}"), e);
    let (_, high) = consumer
        .fetch_watermarks(topic, 0, TIMEOUT)
        .map_err(unreachable)?;
    let mut documents = HashMap::new();
    if high <= 0 {
        return Ok(documents);
    }
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .map_err(unreachable)?;
    consumer.assign(&assignment).map_err(unreachable)?;
    let deadline = Instant::now() + TIMEOUT;
    let mut quiet_since: Option<Instant> = None;
    loop {
        if Instant::now() > deadline {
            return Err(PipelineError::retryable(
                format!("cannot read the state topic {topic} to its end within 30 s"),
                std::io::Error::from(std::io::ErrorKind::TimedOut),
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                quiet_since = None;
                let Some(key) = message.key().and_then(|k| std::str::from_utf8(k).ok()) else {
                    continue;
                };
                if !key.starts_with(prefix) {
                    continue;
                }
                match message.payload() {
                    Some(value) => documents.insert(key.to_owned(), value.to_vec()),
                    None => documents.remove(key),
                };
            }
            // The end of what is committed. Transaction markers after the last document, or
            // a transaction still open (another pipeline's: the topic is shared) may keep the
            // position below the high watermark seen at the start: read on a little while for
            // documents behind such a transaction, then take what is committed.
            Some(Err(KafkaError::PartitionEOF(_))) | None => {
                let position = consumer
                    .position()
                    .ok()
                    .and_then(|list| list.find_partition(topic, 0).map(|p| p.offset()))
                    .and_then(|offset| offset.to_raw());
                if position.is_some_and(|p| p >= high) {
                    return Ok(documents);
                }
                let since = *quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(2) {
                    return Ok(documents);
                }
                continue;
            }
            Some(Err(e)) => return Err(unreachable(e)),
        }
    }
}

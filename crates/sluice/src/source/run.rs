//! The run skeleton every source → Kafka pipeline shares: the Kafka side of one run, set up,
//! streamed through the delivery core ([`crate::delivery`]) and torn down the same way whatever
//! the source.
//!
//! A source's `run_once` keeps only what is its own: its server connection, its state, its
//! snapshot plan, its replication stream and its [`Source`] adapter. In between it calls, in
//! this order: [`RunSkeleton::setup`] (registry, topics, batch size, producer, budget), its
//! snapshot (which borrows the producer, the deliveries and the budget),
//! [`RunSkeleton::streaming`], [`RunSkeleton::start_core`], its monitors
//! ([`RunSkeleton::add_monitor`]), and [`RunSkeleton::run`], which runs the loop and tears the
//! run down. A run that stops after its snapshot ends with [`RunSkeleton::end_before_streaming`].

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rdkafka::producer::Producer as _;
use rdkafka::util::Timeout;
use sluice_engine::InFlightBudget;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{PipelineConfig, SourceSection};
use crate::delivery::exactly_once::Transactions;
use crate::delivery::{self, BatchLimit, DeliveryCore, LoopContext, Position, Source};
use crate::error::PipelineError;
use crate::kafka::{self, DeliveryEvent, KafkaHealth, OutRecord, PipelineProducer};
use crate::registry::Registry;
use crate::runtime::metrics::PipelineMetrics;
use crate::runtime::status::{PipelineState, StatusBoard};

/// How long the teardown lets the producer deliver what it still holds.
const FLUSH_DEADLINE: Duration = Duration::from_secs(2);

/// Checks that Kafka can be reached with `[kafka.client]` first: a wrong setting (password,
/// mechanism, TLS) stops the pipeline with the key to change before the source holds anything
/// (a PostgreSQL slot retaining WAL, a binlog dump).
///
/// # Errors
///
/// Kafka unreachable or refusing the client's settings.
pub async fn probe_kafka<S: SourceSection>(
    config: &PipelineConfig<S>,
    shutdown: &CancellationToken,
) -> Result<(), PipelineError> {
    kafka::probe_async(
        &config.kafka.brokers,
        &config.kafka.client,
        "kafka.client",
        kafka::RUN_PROBE_TIMEOUT,
        Some(shutdown.clone()),
    )
    .await?;
    Ok(())
}

/// The topics a run creates (when `kafka.create_topics`) and reads `max.message.bytes` of ahead
/// of its producer, and how it makes its producer.
pub struct KafkaSetup {
    /// Change-event topics: routed through `[transforms]` and created with `kafka.topic_config`.
    pub change_topics: Vec<String>,
    /// Other topics (the dead-letter topic): created as named, without `kafka.topic_config`.
    pub other_topics: Vec<String>,
    /// Exactly once: the producer's transactional id.
    pub transactional_id: Option<String>,
}

/// A task watching the source while the run streams (slot lag, binlog lag), stopped at teardown.
struct Monitor {
    task: JoinHandle<()>,
    /// Cancelled before the task is aborted, so it can end what it holds on its own.
    stop: Option<CancellationToken>,
}

/// The Kafka side of one run of a source → Kafka pipeline: its producer and delivery reports,
/// its in-flight budget, its registry client and batch size, and what it stops at teardown.
pub struct RunSkeleton {
    /// The run's producer.
    pub producer: Arc<PipelineProducer>,
    /// The delivery reports, in the order librdkafka reports them (the snapshot reads them
    /// before the delivery core does).
    pub deliveries: UnboundedReceiver<DeliveryEvent>,
    /// The in-flight budget: the snapshot's, then the delivery core's.
    pub budget: InFlightBudget,
    /// The schema registry client, when the events are Avro and `[schema_registry]` is set.
    pub registry: Option<Arc<Registry>>,
    /// The producer's `batch.size`, when sluice chose it.
    pub batch_size: Option<u64>,
    /// The topics created (or found) at setup; a source checks others as it first uses them.
    pub known_topics: HashSet<String>,
    deliveries_tx: UnboundedSender<DeliveryEvent>,
    health: Arc<KafkaHealth>,
    board: Arc<StatusBoard>,
    /// The smallest topic limit learned, kept across runs.
    learned_cap: Arc<AtomicU64>,
    /// The delivery core's publisher task, once started.
    publisher: Option<JoinHandle<()>>,
    monitors: Vec<Monitor>,
}

impl RunSkeleton {
    /// Creates the topics of `setup` (when sluice creates topics), sizes the producer's batches
    /// to them (`learned_cap`: the smallest limit learned by earlier runs), and makes the
    /// producer, the registry client (made first) and the in-flight budget. Nothing is
    /// shown on `board` yet.
    ///
    /// # Errors
    ///
    /// Kafka refusing a topic or a producer property, the registry's TLS files.
    pub async fn setup<S: SourceSection>(
        config: &PipelineConfig<S>,
        board: &Arc<StatusBoard>,
        learned_cap: &Arc<AtomicU64>,
        setup: KafkaSetup,
    ) -> Result<Self, PipelineError> {
        // First: it reads only `[schema_registry]`'s local files, so a mistake there is
        // reported before any topic is created.
        let registry = crate::source::registry_for_pipeline(
            config.schema_registry.as_ref(),
            config.output_events(),
            board,
        )?;
        let KafkaSetup {
            change_topics,
            other_topics,
            transactional_id,
        } = setup;
        let mut known_topics = HashSet::new();
        if config.kafka.create_topics {
            let routed = config.routed_topics(&change_topics);
            kafka::ensure_topics(&config.kafka, &routed, config.kafka.topic_partitions).await?;
            kafka::ensure_other_topics(&config.kafka, &other_topics, config.kafka.topic_partitions)
                .await?;
            known_topics.extend(change_topics.iter().cloned());
            known_topics.extend(other_topics.iter().cloned());
        }
        let mut topics = change_topics;
        topics.extend(other_topics);
        let (batch_size_cap, batch_size) =
            kafka::batch_size_for_topics(&config.kafka, &topics, learned_cap).await?;
        let kafka::SourceProducer {
            producer,
            deliveries_tx,
            deliveries,
            health,
        } = kafka::source_producer(
            &config.kafka,
            &format!("sluice-{}", config.name),
            config.delivery.max_in_flight_records,
            config.delivery.in_flight_bytes(),
            batch_size_cap,
            transactional_id.as_deref(),
        )?;
        Ok(Self {
            producer,
            deliveries,
            budget: InFlightBudget::new(
                config.max_in_flight_bytes(),
                config.max_in_flight_records(),
            ),
            registry,
            batch_size,
            known_topics,
            deliveries_tx,
            health,
            board: Arc::clone(board),
            learned_cap: Arc::clone(learned_cap),
            publisher: None,
            monitors: Vec::new(),
        })
    }

    /// Shows the in-flight budget on the status board (from the snapshot on, or from streaming
    /// on: each source shows it where it always has).
    pub fn show_budget(&self) {
        self.board.set_budget(Some(self.budget.clone()));
    }

    /// The run ends before streaming (a snapshot-only run): the budget leaves the board; the
    /// producer is dropped without waiting for its deliveries (the snapshot waited for them).
    pub fn end_before_streaming(self) {
        self.board.set_budget(None);
    }

    /// The source streams: the budget is shown, the state is streaming and the last run's
    /// error is cleared from the board.
    pub fn streaming(&self) {
        self.show_budget();
        self.board.set_state(PipelineState::Streaming);
        self.board.update(|s| {
            s.last_error = None;
            s.hint = None;
        });
    }

    /// Starts the delivery core for changes `C` at positions `P`, resuming after `start`, with
    /// `[transforms]` and the batch limit of the producer's `batch.size`; exactly once, with
    /// `transactions`. `position_of` names where a record came from, as operators read it.
    ///
    /// # Errors
    ///
    /// Fatal when `[transforms]` is invalid or asks for Avro without a usable registry.
    pub fn start_core<S: SourceSection, C: Send + 'static, P: Position>(
        &mut self,
        config: &PipelineConfig<S>,
        metrics: &PipelineMetrics,
        start: P,
        position_of: fn(&OutRecord) -> String,
        transactions: Option<Transactions>,
    ) -> Result<DeliveryCore<C, P, PipelineProducer>, PipelineError> {
        let producer = Arc::clone(&self.producer);
        let budget = self.budget.clone();
        let events = self.deliveries_tx.clone();
        let (mut core, publisher) = match transactions {
            Some(transactions) => DeliveryCore::start_exactly_once(
                producer,
                budget,
                start,
                &config.delivery,
                metrics.clone(),
                events,
                position_of,
                transactions,
            ),
            None => DeliveryCore::start(
                producer,
                budget,
                start,
                &config.delivery,
                metrics.clone(),
                events,
                position_of,
            ),
        };
        self.publisher = Some(publisher);
        core.set_transforms(crate::source::transform_chain(
            config,
            self.registry.as_ref(),
        )?);
        if let Some(batch_size) = self.batch_size {
            core.set_batch_limit(BatchLimit::from_cluster(
                config.kafka.clone(),
                batch_size,
                Arc::clone(&self.learned_cap),
            ));
        }
        Ok(core)
    }

    /// Stops `task` at teardown: `stop` (when given) is cancelled first, then the task is
    /// aborted.
    pub fn add_monitor(&mut self, task: JoinHandle<()>, stop: Option<CancellationToken>) {
        self.monitors.push(Monitor { task, stop });
    }

    /// Runs `source` through `core` until `shutdown` (`Ok`, drained and confirmed) or an
    /// error, checkpointing every `status_interval`; then tears the run down: the core and the
    /// source dropped, the publisher and the monitors stopped, the budget off the board, and the
    /// producer given two seconds to deliver what it holds (duplicates on the next run,
    /// never loss, since nothing unacknowledged was confirmed).
    ///
    /// # Errors
    ///
    /// The loop's: the source's errors, a refused record per the policy, the producer stopping.
    pub async fn run<Src: Source>(
        mut self,
        mut source: Src,
        mut core: DeliveryCore<Src::Change, Src::Position, PipelineProducer>,
        shutdown: &CancellationToken,
        status_interval: Duration,
    ) -> Result<(), PipelineError> {
        let result = delivery::run(
            &mut source,
            &mut core,
            &mut self.deliveries,
            LoopContext {
                shutdown,
                status_interval,
                status: Some((&self.board, &self.health)),
            },
        )
        .await;
        drop(core);
        drop(source);
        if let Some(publisher) = self.publisher.take() {
            publisher.abort();
        }
        for monitor in self.monitors.drain(..) {
            if let Some(stop) = monitor.stop {
                stop.cancel();
            }
            monitor.task.abort();
        }
        self.board.set_budget(None);
        // Moved: the producer's last handle may be dropped (joining its thread) off the runtime.
        let producer = self.producer;
        let _ = tokio::task::spawn_blocking(move || {
            let _ = producer.flush(Timeout::After(FLUSH_DEADLINE));
        })
        .await;
        result
    }
}

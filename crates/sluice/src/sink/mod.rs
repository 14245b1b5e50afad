//! Kafka → files or PostgreSQL: the sink runtime.
//!
//! ```text
//! intake thread: BaseConsumer::poll ─┬─ partition 0: queue budget ─┬─ worker s0 ─ epoch files
//!   (rebalance callbacks run here)   │   AckTracker<offset>        ├─ worker s1 ─ epoch files
//!                                    │                             └─ …
//!                                    └─ partition 1: …
//!   worker events (epoch committed) ─> AckTracker::ack ─> watermark ─> commit offsets
//! ```
//!
//! - **Decoupled consumption.** One thread owns the [`BaseConsumer`] and only moves bytes: it
//!   copies each record's key and value, routes it to its sub-partition (a hash of the key, so
//!   per-key order holds; `sub_partitions` per partition, independent of the partition count)
//!   and registers it in the partition's [`AckTracker`]. Workers (one thread per partition and
//!   sub-partition) parse and write.
//! - **Bounded queues.** Each partition has an [`InFlightBudget`] in bytes and records between
//!   the consumer and its workers, and its own librdkafka queue (`PartitionQueues`, read
//!   a batch at a time through `sluice-kafka-ffi`, which holds the unsafe calls). When
//!   the budget is full that queue is not polled until the workers catch up, and librdkafka
//!   stops fetching the partition once its local queue is full (a partition whose records
//!   come through the main queue, before its queue is split, is paused instead).
//! - **Watermark.** A record is acknowledged when the epoch holding it commits (see
//!   [`files`]); the partition's committed offset is the tracker's watermark, the end of the
//!   contiguous prefix of committed records — the same [`AckTracker`] the PostgreSQL source
//!   uses. `enable.auto.commit` is off; the watermark is committed every
//!   `commit_interval_ms` and synchronously on revocation and shutdown.
//! - **Exactly once.** The files are the truth, not Kafka's offsets: on assignment each
//!   sub-partition's state is recovered from the output root, the consumer starts at the
//!   smallest committed offset + 1 over the sub-partitions (or the group's committed offset
//!   when that is higher) and records a sub-partition already holds are skipped.
//! - **Rebalance.** On revocation the partitions' workers commit their epochs (bounded by
//!   `revoke_timeout_ms`; a worker that does not finish in time is abandoned and cannot commit
//!   any more), the watermark is committed, then the partitions are released.
//! - **Fencing.** A worker that outlives its assignment (a stalled process, a lost group
//!   session: the assignment is *lost*, not revoked) cannot commit either: each assignment
//!   claims its sub-partitions by bumping the owner generation in their state, and every
//!   commit is conditional on it (see "Fencing" in [`files`]); the broker refuses the stale
//!   consumer's offset commit (`UNKNOWN_MEMBER_ID`).
//! - **Destinations.** Everything above is the same for every destination; `Destination`
//!   recovers a sub-partition's state (committed files, or its row in the PostgreSQL progress
//!   table: see [`postgres::apply`]) and makes its [`worker::SubPartitionWriter`]. "Epoch"
//!   and "files" below read as "batch" and "transaction" for PostgreSQL.
//! - **Admin API.** Pause pauses every assigned partition in the consumer (the group
//!   membership stays, so the partitions do not move to another process) and has the
//!   workers commit their open epochs; records already queued are still written. Resume
//!   resumes the partitions (librdkafka fetches again within about a second). Restart ends
//!   the run like a shutdown (open epochs committed, offsets committed, group left) and the
//!   supervisor starts a new one at once. The `/health` state is `paused` while paused.
//! - **Failures.** A record that cannot be written is retried, dead-lettered or stops the
//!   pipeline (`delivery.on_failure`); so is a record a worker has been busy on for more than
//!   `processing_timeout_ms` (see `Intake::record_timed_out`). A file commit busy for that
//!   long fails the run, and I/O errors too: the supervisor restarts it with backoff, from the
//!   committed files.
//!
//! [`AckTracker`]: sluice_engine::AckTracker
//! [`InFlightBudget`]: sluice_engine::InFlightBudget
//! [`BaseConsumer`]: rdkafka::consumer::BaseConsumer

pub mod avro;
pub mod config;
pub(crate) mod destination;
pub mod files;
pub mod iceberg;
mod intake;
pub mod kafka_source;
pub mod metrics;
pub mod object;
pub mod parquet;
pub mod postgres;
pub mod template;
pub mod typed;
pub mod worker;

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use self::intake::{RunEnd, TimeoutAttempts, run_once};
use self::worker::AbandonedWorkers;
use crate::error::PipelineError;
use crate::runtime::status::StatusBoard;
use crate::runtime::supervisor::{RunEnd as SupervisedEnd, Supervised};
use crate::sink::config::SinkPipelineConfig;

/// A Kafka → files pipeline as the supervisor ([`crate::runtime::supervisor`]) runs it: each
/// run resumes from the committed files; a pause is applied inside the run (the consumer
/// stays in its group, so its partitions do not move elsewhere).
pub struct SinkPipeline {
    config: Arc<SinkPipelineConfig>,
    board: Arc<StatusBoard>,
    /// Records that timed out, kept across runs (`delivery.retry_max_attempts`).
    timeouts: TimeoutAttempts,
    /// Worker threads given up on that still run, over every run.
    abandoned: Arc<AbandonedWorkers>,
    /// The Avro reading (`source.kafka.format = "avro"`), made at the first run and kept
    /// (with its schemas by id) over every run.
    avro: Option<Arc<avro::AvroDecoder>>,
}

impl SinkPipeline {
    /// The pipeline of `config`, reporting to `board`.
    pub fn new(config: Arc<SinkPipelineConfig>, board: Arc<StatusBoard>) -> Self {
        metrics::describe();
        metrics::abandoned_workers().increment(0.0);
        Self {
            config,
            board,
            timeouts: TimeoutAttempts::default(),
            abandoned: Arc::default(),
            avro: None,
        }
    }

    /// The Avro reading of the pipeline when it reads Avro (made once).
    fn avro(&mut self) -> Result<Option<Arc<avro::AvroDecoder>>, PipelineError> {
        let kafka = self.config.kafka();
        if self.avro.is_some() || !kafka.uses_avro() {
            return Ok(self.avro.clone());
        }
        let Some(registry) = &self.config.schema_registry else {
            return Err(PipelineError::fatal(
                "source.kafka reads Avro and no [schema_registry] is configured",
                "add [schema_registry] url = \"http://registry:8081\"",
            ));
        };
        let board = Arc::clone(&self.board);
        let registry = crate::registry::Registry::new(registry.clone())
            .map_err(|e| PipelineError::fatal(e.to_string(), "fix [schema_registry]'s TLS files"))?
            .with_observer(Box::new(move |error| {
                board.update(|s| s.schema_registry_error = error);
            }));
        let output = if self.config.postgres().is_some() || self.config.iceberg().is_some() {
            avro::Output::WithSchemas
        } else {
            avro::Output::Plain
        };
        let decoder = Arc::new(avro::AvroDecoder::new(
            Arc::new(registry),
            tokio::runtime::Handle::current(),
            kafka.key_format(),
            kafka.value_format(),
            output,
            Duration::from_millis(self.config.delivery.processing_timeout_ms / 2),
        ));
        self.avro = Some(Arc::clone(&decoder));
        Ok(Some(decoder))
    }

    /// Worker threads given up on that still run (see [`AbandonedWorkers`]).
    pub fn abandoned_workers(&self) -> usize {
        self.abandoned.alive()
    }
}

impl Supervised for SinkPipeline {
    const PAUSES_IN_RUN: bool = true;

    fn resumes_from(&self) -> &'static str {
        if self.config.postgres().is_some() {
            "the progress table"
        } else if self.config.iceberg().is_some() {
            "the offsets in the Iceberg tables' snapshots"
        } else {
            "the committed files"
        }
    }

    /// More worker threads given up on still run than `delivery.max_abandoned_workers`: each
    /// new run could leave another behind, so the pipeline stops instead.
    fn restart_refused(&self) -> Option<PipelineError> {
        let alive = self.abandoned.alive();
        let max = self.config.delivery.max_abandoned_workers;
        if alive <= max as usize {
            return None;
        }
        let (what, look_at) = if self.config.iceberg().is_some() {
            (
                "blocked on the Iceberg catalog or warehouse",
                "look at what blocks the catalog's database (locks on iceberg_tables) or the warehouse's file system",
            )
        } else if self.config.postgres().is_some() {
            (
                "blocked on the target database although their sessions were cancelled and closed",
                "look on the target database for what blocks them: sessions holding locks on the target tables (pg_locks, and pg_stat_activity where wait_event_type = 'Lock'), a server that does not answer",
            )
        } else {
            (
                "blocked on the output (a record or a file commit that does not return)",
                "look at what blocks the output: a hung file system or object store, a record that hangs the path template",
            )
        };
        Some(PipelineError::fatal(
            format!(
                "{alive} sink worker thread(s) given up on are still running ({what}), more than delivery.max_abandoned_workers = {max}: not restarting, so that no more are left behind"
            ),
            format!(
                "{look_at}; then start the pipeline again. sluice_sink_abandoned_workers counts them; raise delivery.max_abandoned_workers to tolerate more"
            ),
        ))
    }

    async fn run_once(&mut self, stop: CancellationToken) -> Result<SupervisedEnd, PipelineError> {
        let avro = self.avro()?;
        let run = {
            let config = Arc::clone(&self.config);
            let board = Arc::clone(&self.board);
            let runtime = tokio::runtime::Handle::current();
            let timeouts = Arc::clone(&self.timeouts);
            let abandoned = Arc::clone(&self.abandoned);
            // The intake thread (and the workers it starts) log under the pipeline's span.
            let span = tracing::Span::current();
            tokio::task::spawn_blocking(move || {
                let _entered = span.entered();
                run_once(&config, &board, &stop, runtime, &timeouts, &abandoned, avro)
            })
        };
        let end = run.await.unwrap_or_else(|e| {
            Err(PipelineError::retryable(
                "the sink's intake thread failed",
                e,
            ))
        })?;
        Ok(match end {
            RunEnd::Stopped => SupervisedEnd::Finished,
            RunEnd::RestartRequested => SupervisedEnd::Requested,
        })
    }
}

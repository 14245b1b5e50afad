//! The part of an initial snapshot every source shares: chunks read by workers, their records
//! produced under the in-flight budget, and a chunk finished once Kafka acknowledged all of
//! its records (only then is it recorded as done, so a restart reads the unfinished ones).
//!
//! A worker publishes the records of chunk `c` with [`publish`], record `n` carrying sequence
//! number `c << 32 | n`, and reports the chunk's record count on the `sent` channel when the
//! chunk is read; [`drive`] counts the acknowledgements per chunk and calls `finished` with the
//! chunks whose records are all acknowledged.
//!
//! A record Kafka refuses follows the pipeline's delivery policy as a streamed one does
//! ([`crate::delivery::refused_record`]): the run is retried, stopped, or the record is
//! dead-lettered, its dead letter's acknowledgement then counting for its chunk.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use sluice_engine::{InFlightBudget, Seq};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::error::{Interruption, PipelineError, Unencodable};
use crate::event::SnapshotMarker;
use crate::kafka::{Delivery, DeliveryEvent, OutRecord, PipelineProducer};
use crate::runtime::metrics::TableMetrics;
use crate::runtime::status::{SnapshotStatus, StatusBoard};

/// A chunk's place in its table and in the snapshot, for Debezium's `source.snapshot` markers.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChunkPlace {
    /// It holds the snapshot's first row.
    pub first_of_all: bool,
    /// It holds the snapshot's last row.
    pub last_of_all: bool,
    /// It is its table's first chunk.
    pub first_in_table: bool,
    /// It is its table's last chunk.
    pub last_in_table: bool,
}

impl ChunkPlace {
    /// The marker of the chunk's first and/or last row (or of another row: both false).
    pub fn marker(&self, first_of_chunk: bool, last_of_chunk: bool) -> SnapshotMarker {
        SnapshotMarker::of(
            first_of_chunk && self.first_of_all,
            last_of_chunk && self.last_of_all,
            first_of_chunk && self.first_in_table,
            last_of_chunk && self.last_in_table,
        )
    }
}

/// What [`drive`] watches.
pub struct Progress<'a> {
    /// The producer's delivery reports.
    pub deliveries: &'a mut mpsc::UnboundedReceiver<DeliveryEvent>,
    /// Stop early.
    pub shutdown: &'a tokio_util::sync::CancellationToken,
    /// The status board (progress).
    pub board: &'a StatusBoard,
    /// Chunks in the plan.
    pub chunks_total: usize,
    /// Chunks already finished (by an earlier run).
    pub chunks_done: usize,
    /// What a refused record becomes, and where its dead letter goes.
    pub policy: RefusalPolicy<'a>,
}

/// What [`drive`] does with a record Kafka refuses: the pipeline's delivery policy.
pub struct RefusalPolicy<'a> {
    /// The pipeline's `[delivery]`.
    pub delivery: &'a crate::config::DeliveryConfig,
    /// The producer dead letters are sent with (the snapshot's).
    pub producer: &'a PipelineProducer,
    /// Where a record came from in the source, as operators read it (from its headers).
    pub position_of: fn(&OutRecord) -> String,
}

impl RefusalPolicy<'_> {
    /// Applies the policy to a refused record: its dead letter is sent with its bookkeeping
    /// (so its acknowledgement counts for its chunk), or the run ends.
    async fn refused(
        &self,
        error: &KafkaError,
        record: &OutRecord,
        delivery: Box<Delivery>,
    ) -> Result<(), PipelineError> {
        let position = (self.position_of)(record);
        let dead_letter = crate::delivery::refused_record(self.delivery, error, record, &position)?;
        crate::delivery::send(self.producer, dead_letter, delivery)
            .await
            .map_err(|(error, record, _)| {
                PipelineError::fatal_with(
                    format!("cannot write to the dead-letter topic {}", record.topic),
                    "check that the dead-letter topic exists and the producer may write to it",
                    error,
                )
            })
    }
}

/// Runs until every chunk is finished: collects the workers' `(chunk, records)` reports from
/// `sent`, counts acknowledgements per chunk, and calls `finished` with each batch of chunks
/// that finished together (to record them; the crash point `snapshot::chunks_recorded` follows
/// it). Returns the rows read by this run.
///
/// # Errors
///
/// A worker's error, the producer's end, a record Kafka refused for good, or shutdown.
pub async fn drive(
    progress: Progress<'_>,
    mut workers: JoinSet<Result<(), PipelineError>>,
    mut sent: mpsc::UnboundedReceiver<(usize, u64)>,
    mut finished: impl FnMut(&[usize]) -> Result<(), PipelineError>,
) -> Result<u64, PipelineError> {
    let Progress {
        deliveries,
        shutdown,
        board,
        chunks_total,
        mut chunks_done,
        policy,
    } = progress;
    let started = Instant::now();
    let mut acked: HashMap<usize, u64> = HashMap::new();
    let mut counts: HashMap<usize, u64> = HashMap::new();
    let mut rows = 0u64;
    let mut last_log = Instant::now();
    let mut workers_running = true;
    let mut events = Vec::new();
    let mut done: Vec<usize> = Vec::new();
    while chunks_done < chunks_total {
        tokio::select! {
            count = deliveries.recv_many(&mut events, 4096) => {
                if count == 0 {
                    return Err(PipelineError::retryable("the producer stopped", Interruption::DeliveryChannelClosed));
                }
                for event in events.drain(..) {
                    match event {
                        DeliveryEvent::Acked(delivery) => {
                            delivery.table.records.increment(1);
                            delivery.table.bytes.increment(u64::from(delivery.bytes));
                            let chunk = (delivery.seq.0 >> 32) as usize;
                            let n = acked.entry(chunk).or_default();
                            *n += 1;
                            if counts.get(&chunk) == Some(n) {
                                done.push(chunk);
                            }
                        }
                        DeliveryEvent::Failed { error, record, delivery } => {
                            policy.refused(&error, &record, delivery).await?;
                        }
                        DeliveryEvent::EncodeFailed { reason, position, hint, .. } => {
                            return Err(PipelineError::fatal_with(
                                format!("cannot encode the snapshot row at {position}"),
                                hint.unwrap_or_else(|| "this is a bug in sluice: report it with the table's column types".into()),
                                Unencodable(reason),
                            ));
                        }
                        DeliveryEvent::Committed { .. } => {}
                        DeliveryEvent::TransactionFailed { what, error } => {
                            return Err(crate::delivery::exactly_once::transaction_error(what, error));
                        }
                    }
                }
            }
            message = sent.recv(), if workers_running => {
                match message {
                    Some((chunk, records)) => {
                        rows += records;
                        counts.insert(chunk, records);
                        if acked.get(&chunk).copied().unwrap_or(0) == records {
                            done.push(chunk);
                        }
                    }
                    None => workers_running = false,
                }
            }
            Some(result) = workers.join_next() => {
                match result {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => return Err(error),
                    Err(error) => return Err(PipelineError::retryable("a snapshot worker failed", error)),
                }
            }
            () = shutdown.cancelled() => {
                return Err(PipelineError::retryable(
                    "stopped during the snapshot (its unfinished chunks are read on the next start)",
                    Interruption::Shutdown,
                ));
            }
        }
        if !done.is_empty() {
            chunks_done += done.len();
            finished(&done)?;
            done.clear();
            crate::crash_point!("snapshot::chunks_recorded");
            board.update(|s| {
                s.snapshot = Some(SnapshotStatus {
                    chunks_total,
                    chunks_done,
                    rows,
                });
            });
        }
        if last_log.elapsed() >= Duration::from_secs(10) {
            last_log = Instant::now();
            let rate = rows as f64 / started.elapsed().as_secs_f64().max(0.001);
            let per_chunk = if chunks_done > 0 {
                rows as f64 / chunks_done as f64
            } else {
                0.0
            };
            let eta = if rate > 0.0 {
                per_chunk * (chunks_total - chunks_done) as f64 / rate
            } else {
                0.0
            };
            tracing::info!(
                chunks_done,
                chunks_total,
                rows,
                rows_per_s = rate as u64,
                eta_s = eta as u64,
                "snapshot: progress"
            );
        }
    }
    while workers.join_next().await.is_some() {}
    tracing::info!(
        rows,
        chunks = chunks_total,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot: done; streaming from the consistent point"
    );
    Ok(rows)
}

/// Exactly once: what [`drive_transactional`] needs to commit chunks.
pub struct ChunkTransactions {
    /// The transactional producer the workers produce with.
    pub producer: Arc<PipelineProducer>,
    /// Held shared by each worker while it reads a chunk; the committer holds it exclusively,
    /// so a transaction holds whole chunks only.
    pub gate: Arc<tokio::sync::RwLock<()>>,
    /// The compacted topic of committed positions.
    pub offsets_topic: Arc<str>,
    /// The snapshot record's key.
    pub key: Arc<[u8]>,
    /// The snapshot record's value for the finished chunks.
    pub value: crate::delivery::exactly_once::ChunksValue,
    /// How often a transaction commits.
    pub interval: Duration,
    /// The chunks finished by earlier runs.
    pub done: Vec<usize>,
}

/// Exactly once: begins a transaction for the snapshot's records.
///
/// # Errors
///
/// Retryable (the run restarts from what is committed).
pub async fn begin(producer: &Arc<PipelineProducer>) -> Result<(), PipelineError> {
    use rdkafka::producer::Producer as _;
    producer.begin_transaction().map_err(|e| {
        crate::delivery::exactly_once::transaction_error("cannot begin a Kafka transaction", e)
    })
}

/// [`drive`] exactly once: every `interval`, the committer takes the gate (workers finish the
/// chunks they are reading and wait), writes the snapshot record — every finished chunk —
/// to the offsets topic and commits the transaction holding those chunks' records and the
/// record together; only then are the chunks recorded as finished (`finished`) and counted.
/// A crash before the commit aborts the transaction, so no record of a chunk that is read
/// again is ever visible to `read_committed` consumers.
///
/// # Errors
///
/// As [`drive`], and a transaction that cannot be committed (it is aborted).
pub async fn drive_transactional(
    progress: Progress<'_>,
    mut workers: JoinSet<Result<(), PipelineError>>,
    mut sent: mpsc::UnboundedReceiver<(usize, u64)>,
    mut finished: impl FnMut(&[usize]) -> Result<(), PipelineError>,
    transactions: ChunkTransactions,
) -> Result<u64, PipelineError> {
    let Progress {
        deliveries,
        shutdown,
        board,
        chunks_total,
        mut chunks_done,
        policy,
    } = progress;
    let ChunkTransactions {
        producer,
        gate,
        offsets_topic,
        key,
        value,
        interval,
        mut done,
    } = transactions;
    let started = Instant::now();
    let mut rows = 0u64;
    let mut read: Vec<usize> = Vec::new();
    let mut events = Vec::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut workers_running = true;
    loop {
        let last_round = !workers_running && workers.is_empty();
        if !last_round {
            tokio::select! {
                count = deliveries.recv_many(&mut events, 4096) => {
                    if count == 0 {
                        return Err(PipelineError::retryable("the producer stopped", Interruption::DeliveryChannelClosed));
                    }
                    delivered(&mut events, &policy)?;
                    continue;
                }
                message = sent.recv(), if workers_running => {
                    match message {
                        Some((chunk, records)) => {
                            rows += records;
                            read.push(chunk);
                        }
                        None => workers_running = false,
                    }
                    continue;
                }
                Some(result) = workers.join_next() => {
                    match result {
                        Ok(Ok(())) => {}
                        Ok(Err(error)) => return Err(error),
                        Err(error) => return Err(PipelineError::retryable("a snapshot worker failed", error)),
                    }
                    continue;
                }
                () = shutdown.cancelled() => {
                    return Err(PipelineError::retryable(
                        "stopped during the snapshot (its uncommitted chunks are read on the next start)",
                        Interruption::Shutdown,
                    ));
                }
                _ = tick.tick() => {}
            }
        }
        // Commit: take the gate (draining delivery reports meanwhile: they free the budget the
        // workers wait for), so no chunk is half in the transaction.
        let exclusive = Arc::clone(&gate).write_owned();
        tokio::pin!(exclusive);
        let guard = loop {
            tokio::select! {
                guard = &mut exclusive => break guard,
                count = deliveries.recv_many(&mut events, 4096) => {
                    if count == 0 {
                        return Err(PipelineError::retryable("the producer stopped", Interruption::DeliveryChannelClosed));
                    }
                    delivered(&mut events, &policy)?;
                }
            }
        };
        while let Ok((chunk, records)) = sent.try_recv() {
            rows += records;
            read.push(chunk);
        }
        if !read.is_empty() {
            done.extend(read.iter().copied());
            let record = value(&done);
            let (producer, topic, key) = (
                Arc::clone(&producer),
                Arc::clone(&offsets_topic),
                Arc::clone(&key),
            );
            let last = last_round;
            let committed = tokio::task::spawn_blocking(move || {
                use crate::delivery::RecordSink;
                RecordSink::send_unreported(&*producer, &topic, &key, &record)?;
                crate::crash_point!("exactly_once::before_commit");
                RecordSink::commit_transaction(
                    &*producer,
                    crate::delivery::exactly_once::TRANSACTION_TIMEOUT,
                )?;
                if !last {
                    RecordSink::begin_transaction(&*producer)?;
                }
                Ok::<(), KafkaError>(())
            })
            .await
            .map_err(|e| PipelineError::retryable("the commit task failed", e))?;
            if let Err(error) = committed {
                return Err(crate::delivery::exactly_once::transaction_error(
                    "cannot commit the snapshot's Kafka transaction",
                    error,
                ));
            }
            crate::crash_point!("exactly_once::after_commit");
            chunks_done += read.len();
            finished(&read)?;
            read.clear();
            crate::crash_point!("snapshot::chunks_recorded");
            board.update(|s| {
                s.snapshot = Some(SnapshotStatus {
                    chunks_total,
                    chunks_done,
                    rows,
                });
            });
        } else if last_round {
            // Nothing left to commit: end the (empty) transaction begun after the last commit.
            let producer = Arc::clone(&producer);
            let aborted = tokio::task::spawn_blocking(move || {
                use rdkafka::producer::Producer as _;
                producer.abort_transaction(crate::delivery::exactly_once::TRANSACTION_TIMEOUT)
            })
            .await
            .map_err(|e| PipelineError::retryable("the abort task failed", e))?;
            aborted.map_err(|e| {
                crate::delivery::exactly_once::transaction_error(
                    "cannot end the snapshot's Kafka transaction",
                    e,
                )
            })?;
        }
        drop(guard);
        if last_round {
            break;
        }
    }
    if chunks_done < chunks_total {
        return Err(PipelineError::retryable(
            "the snapshot's workers ended before every chunk was read",
            Interruption::SnapshotIncomplete,
        ));
    }
    tracing::info!(
        rows,
        chunks = chunks_total,
        seconds = started.elapsed().as_secs_f64(),
        "snapshot: done (exactly once); streaming from the consistent point"
    );
    Ok(rows)
}

/// Exactly once: applies the snapshot's delivery reports (counters; a refused record ends the
/// run, and its transaction can never commit: exactly once takes no dead-letter policy).
fn delivered(
    events: &mut Vec<DeliveryEvent>,
    policy: &RefusalPolicy<'_>,
) -> Result<(), PipelineError> {
    for event in events.drain(..) {
        match event {
            DeliveryEvent::Acked(delivery) => {
                delivery.table.records.increment(1);
                delivery.table.bytes.increment(u64::from(delivery.bytes));
            }
            DeliveryEvent::Failed { error, record, .. } => {
                let position = (policy.position_of)(&record);
                crate::delivery::refused_record(policy.delivery, &error, &record, &position)?;
                return Err(PipelineError::fatal(
                    format!(
                        "Kafka refused a snapshot record for topic {} ({position}): {error}",
                        record.topic
                    ),
                    "exactly once takes no dead-letter topic: a refused record aborts its transaction",
                ));
            }
            DeliveryEvent::EncodeFailed {
                reason, position, ..
            } => {
                return Err(PipelineError::fatal_with(
                    format!("cannot encode the snapshot row at {position}"),
                    "this is a bug in sluice: report it with the table's column types",
                    Unencodable(reason),
                ));
            }
            DeliveryEvent::Committed { .. } => {}
            DeliveryEvent::TransactionFailed { what, error } => {
                return Err(crate::delivery::exactly_once::transaction_error(
                    what, error,
                ));
            }
        }
    }
    Ok(())
}

/// Produces `records` of chunk `chunk` within the budget, the first as the chunk's record
/// number `first` (sequence `chunk << 32 | n`, so acknowledgements count per chunk); returns
/// how many were produced. A record the producer refuses at once (larger than its
/// `message.max.bytes`) is reported on the delivery channel like one the broker refuses, so
/// [`drive`] applies the policy to both.
///
/// `transforms` apply to the records first; those they drop are not produced (nor counted).
/// A record they refuse stops the snapshot (reported as an encoding failure, whatever
/// `delivery.on_permanent_error` says: docs/transforms.md).
///
/// # Errors
///
/// None: refusals are reported, not returned (the `Result` is kept for the callers' `?`).
#[allow(clippy::too_many_arguments)]
pub async fn publish(
    producer: &PipelineProducer,
    budget: &InFlightBudget,
    chunk: usize,
    first: u64,
    records: Vec<OutRecord>,
    table: &Arc<TableMetrics>,
    commit_unix_micros: i64,
    transforms: Option<&crate::transform::Chain>,
) -> Result<u64, PipelineError> {
    use rdkafka::producer::Producer as _;
    let records = match crate::transform::apply_all(transforms, records) {
        Ok(records) => records,
        Err(refused) => {
            let (error, record) = *refused;
            let _ = producer
                .context()
                .deliveries()
                .send(DeliveryEvent::EncodeFailed {
                    reason: error.to_string(),
                    topic: Arc::clone(&record.topic),
                    position: format!("a snapshot record of topic {}", record.topic),
                    description: Vec::new(),
                    deliveries: Vec::new(),
                    hint: Some(format!(
                        "fix [transforms.{}] for such records (e.g. a predicate that leaves them out)",
                        error.name
                    )),
                });
            return Ok(0);
        }
    };
    let count = records.len() as u64;
    for (n, record) in records.into_iter().enumerate() {
        let permit = budget.acquire(record.len().max(1)).await;
        let delivery = Box::new(Delivery {
            seq: Seq(((chunk as u64) << 32) | (first + n as u64)),
            permit: Arc::new(permit),
            commit_unix_micros,
            table: Arc::clone(table),
            bytes: u32::try_from(record.len()).unwrap_or(u32::MAX),
        });
        if let Err((error, record, delivery)) =
            crate::delivery::send(producer, record, delivery).await
        {
            // The receiver is gone only when the run ended.
            let _ = producer.context().deliveries().send(DeliveryEvent::Failed {
                error,
                record,
                delivery,
            });
        }
    }
    Ok(count)
}

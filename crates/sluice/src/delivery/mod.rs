//! The delivery core: one ordered, bounded, never-blocking path from any source into Kafka.
//!
//! A source (PostgreSQL's logical replication today, MySQL's binlog next) is an adapter
//! implementing [`Source`]: it reads messages from its server, turns them into changes and
//! checkpoints (handed over in source order through an [`Intake`]), encodes changes into
//! records ([`Encode`]), and confirms a position to its server. Everything else is here, the
//! same for every source:
//!
//! admit (under the in-flight budget) → encode (in parallel, on the blocking pool) → publish in
//! order → acknowledge (delivery reports into the [`sluice_engine::AckTracker`]) → watermark →
//! checkpoint (the source confirms the watermark, never waiting for in-flight records) →
//! dead-letter (per `delivery.on_permanent_error`) → drain (on shutdown).
//!
//! # The loop
//!
//! [`run`] is one task owning the source, the tracker and the budget, running a single
//! `select! { biased; … }` with these priorities:
//!
//! 1. shutdown: drain, confirm the watermark, return;
//! 2. delivery reports: acknowledge in the tracker (acks before intake keep memory bounded);
//! 3. the status timer: the source's periodic work, then the checkpoint — the source confirms
//!    the watermark — then the status board;
//! 4. admitting the next change once the budget has room for it;
//! 5. reading the source — only while nothing waits for admission and the tracker is below its
//!    limit, so a full budget stops reads and the backpressure reaches the server.
//!
//! Checkpoints keep going out while back-pressured or idle, so a server that drops silent
//! clients never does.

mod core;
pub mod exactly_once;
mod publish;
#[cfg(test)]
mod tests;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use sluice_engine::Lsn;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use self::core::{BatchLimit, DeliveryCore, Intake, TopicLimit, refused_record};
pub use self::publish::{OffsetsRecords, RecordSink, SendError, rejection_hint, send};
use crate::error::{Interruption, PipelineError};
use crate::kafka::{DeliveryEvent, KafkaHealth, OutRecord};
use crate::runtime::metrics::TableMetrics;
use crate::runtime::status::StatusBoard;

/// Changes per encoding batch.
const ENCODE_BATCH: usize = 512;

/// Messages read per wake-up before the loop looks at acks and timers again.
const READ_BURST: usize = 2048;

/// How long changes admitted in the middle of a source transaction may wait for the rest of it
/// before they are sent to be encoded anyway. Servers send a transaction's changes in one burst
/// at its commit, but a client that keeps up reads them a few at a time; dispatching after each
/// read made a batch (an encoding task, a publisher wake-up, a produce call) of a few changes,
/// which cost the live stream far more CPU per row than a backlog (bench/PROFILE.md,
/// "Live: batches of a transaction").
const DISPATCH_LINGER: Duration = Duration::from_millis(2);

/// In the middle of a long transaction (at least [`PACE_AFTER`] changes held), a read burst
/// that found fewer than [`PACE_FEW`] messages means the client is outrunning the server: the
/// next read waits this long so the socket gathers a bigger burst, instead of a wake-up, a
/// system call and a context switch every few rows (bench/PROFILE.md, "Live: wake-ups").
/// Only ever mid-transaction, so a commit waits at most this long, and short transactions
/// never do.
const READ_PACE: Duration = Duration::from_millis(1);
/// Changes of the open transaction held undispatched before reads are paced.
const PACE_AFTER: usize = 64;
/// A read burst shorter than this, mid-transaction, paces the next read.
const PACE_FEW: usize = 16;

/// A source position: ordered, and shown to operators as text.
pub trait Position: Copy + Ord + Default + std::fmt::Display + Send + Sync + 'static {
    /// The position as the watermark gauge shows it.
    fn gauge(&self) -> f64;
}

impl Position for Lsn {
    fn gauge(&self) -> f64 {
        self.0 as f64
    }
}

/// Where an encoded change came from, for the latency histogram and the per-table counters.
pub struct Origin {
    /// Source commit time, Unix microseconds.
    pub commit_unix_micros: i64,
    /// The table's counters.
    pub table: Arc<TableMetrics>,
}

/// A change whose encoding failed, as the dead-letter topic and the error message show it.
pub struct FailedChange {
    /// Why (a panic's message).
    pub reason: String,
    /// The topic its records were meant for.
    pub topic: Arc<str>,
    /// Where the change is in the source, as operators read it.
    pub position: String,
    /// A JSON description of the change (no values).
    pub description: Vec<u8>,
    /// Where it came from.
    pub origin: Origin,
}

/// Turns a source's changes into records; runs on the blocking pool, one encoder per batch.
pub trait Encode<C>: Send + 'static {
    /// Appends the records of `change` to `out`: exactly as many as it was admitted with. May
    /// panic (a bug); the core then applies `delivery.on_permanent_error`.
    fn encode(&self, change: &C, out: &mut Vec<OutRecord>) -> Origin;

    /// Describes `change`, whose encoding panicked with `reason`.
    fn describe(&self, change: &C, reason: &str) -> FailedChange;

    /// Whether [`Encode::encode`] applies the pipeline's `[transforms]` to `change` itself (a
    /// direct path for a chain it recognizes, [`crate::transform::Direct`]): the core then
    /// applies none to its records, and the records the chain drops are left out of `out`
    /// (their places complete at once).
    fn transforms_applied(&self, _change: &C) -> bool {
        false
    }
}

/// A source adapter: what differs between PostgreSQL, MySQL, … .
///
/// Every method runs on the loop's task; an operation that may wait on anything but the source's
/// own stream must be bounded (a deadline below the server's timeout for silent clients).
pub trait Source {
    /// One change, admitted as a whole and encoded into a fixed number of records.
    type Change: Send + 'static;
    /// A position in the source's log.
    type Position: Position;
    /// What one read yields (an error included).
    type Message;
    /// The encoder of the source's changes.
    type Encoder: Encode<Self::Change>;

    /// The next message. Cancel-safe: the loop drops it unfinished when another arm is ready.
    fn read(&mut self) -> impl Future<Output = Self::Message>;

    /// Turns one message into changes and checkpoints on `intake`. `Ok(true)` asks for the
    /// watermark to be confirmed at once (the server asked for a reply).
    fn on_message(
        &mut self,
        message: Self::Message,
        intake: &mut Intake<Self::Change, Self::Position>,
    ) -> impl Future<Output = Result<bool, PipelineError>>;

    /// The loop does not read for now (back-pressured).
    fn not_reading(&mut self) {}

    /// Whether the last message read left a transaction open whose remaining changes are on
    /// their way: the loop then lets the changes admitted so far wait for them (up to
    /// `DISPATCH_LINGER`, or until a batch is full) instead of dispatching them at once.
    fn mid_transaction(&self) -> bool {
        false
    }

    /// Periodic work before each checkpoint; `Ok(true)` asks the server for a reply.
    fn before_checkpoint(
        &mut self,
        intake: &mut Intake<Self::Change, Self::Position>,
    ) -> impl Future<Output = Result<bool, PipelineError>>;

    /// Makes `watermark` durable on the source's side (state store first, then the server).
    fn confirm(
        &mut self,
        watermark: Self::Position,
        reply: bool,
    ) -> impl Future<Output = Result<(), PipelineError>>;

    /// Periodic work after each checkpoint (`watermark` just confirmed).
    fn after_checkpoint(
        &mut self,
        intake: &mut Intake<Self::Change, Self::Position>,
        watermark: Self::Position,
    ) -> impl Future<Output = Result<(), PipelineError>>;

    /// An encoder for the next batch.
    fn encoder(&mut self) -> Self::Encoder;

    /// Whether the watermark is confirmed as soon as it moves (an initial snapshot records its
    /// finished chunks at once), besides on the status timer.
    const CONFIRMS_ON_ACK: bool = false;

    /// Whether the source has nothing more to deliver: checked after each confirmation made as
    /// the watermark moves ([`Source::CONFIRMS_ON_ACK`]); the loop then returns `Ok`.
    fn finished(&self) -> bool {
        false
    }
}

/// What the loop needs besides the source and the core.
pub struct LoopContext<'a> {
    /// Graceful stop.
    pub shutdown: &'a CancellationToken,
    /// Between checkpoints.
    pub status_interval: Duration,
    /// The pipeline's status board and the producer's view of the brokers, shown on each
    /// status tick (`None`: the source shows its own progress, as an initial snapshot does).
    pub status: Option<(&'a StatusBoard, &'a KafkaHealth)>,
}

/// Runs `source` through `core` until shutdown (`Ok`, drained and confirmed), the source has
/// finished ([`Source::finished`], `Ok`), or an error.
///
/// # Errors
///
/// The source's errors, a refused record per the policy, the producer stopping.
pub async fn run<S: Source, K: RecordSink>(
    source: &mut S,
    core: &mut DeliveryCore<S::Change, S::Position, K>,
    deliveries: &mut mpsc::UnboundedReceiver<DeliveryEvent>,
    cx: LoopContext<'_>,
) -> Result<(), PipelineError> {
    let mut status_tick = tokio::time::interval(cx.status_interval);
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut events = Vec::with_capacity(4096);
    // Armed while changes admitted mid-transaction wait to be dispatched.
    let linger = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(linger);
    let mut lingering = false;
    // Armed while the next read waits for the socket to gather a burst (READ_PACE).
    let pace = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(pace);
    let mut pacing = false;
    // The watermark last confirmed as it moved (`Source::CONFIRMS_ON_ACK`).
    let mut confirmed_on_ack = core.watermark();
    loop {
        if S::CONFIRMS_ON_ACK && core.watermark() > confirmed_on_ack {
            confirmed_on_ack = core.watermark();
            confirm(source, core, false).await?;
            if source.finished() {
                return Ok(());
            }
        }
        let waiting_size = core.waiting_size();
        let can_read = core.can_read();
        if !can_read {
            source.not_reading();
        }
        tokio::select! {
            biased;
            () = cx.shutdown.cancelled() => {
                core.dispatch(|| source.encoder()).await?;
                core.drain(deliveries).await;
                confirm(source, core, false).await?;
                tracing::info!(watermark = %core.watermark(), "stopped");
                return Ok(());
            }
            count = deliveries.recv_many(&mut events, 4096) => {
                if count == 0 {
                    return Err(PipelineError::retryable(
                        "the producer stopped",
                        Interruption::DeliveryChannelClosed,
                    ));
                }
                core.on_deliveries(&mut events).await?;
            }
            _ = status_tick.tick() => {
                let reply = source.before_checkpoint(&mut core.intake).await?;
                // What the source queued there (an initial snapshot's commit point, taken in
                // while reads are held back) goes on now.
                core.process_steps()?;
                core.dispatch(|| source.encoder()).await?;
                confirm(source, core, reply).await?;
                let watermark = core.watermark();
                source.after_checkpoint(&mut core.intake, watermark).await?;
                if let Some((board, health)) = cx.status {
                    core.report(board);
                    let down = health.all_brokers_down();
                    board.update(|s| s.kafka_brokers_down = down);
                }
            }
            permit = core.budget().acquire(waiting_size.unwrap_or(0)), if waiting_size.is_some() => {
                core.admit_front(permit)?;
                core.process_steps()?;
                core.dispatch(|| source.encoder()).await?;
            }
            () = &mut linger, if lingering => {
                lingering = false;
                core.dispatch(|| source.encoder()).await?;
            }
            () = &mut pace, if pacing => {
                pacing = false;
            }
            message = source.read(), if can_read && !pacing => {
                take(source, core, message).await?;
                let mut burst = 1;
                for _ in 0..READ_BURST {
                    if !core.can_read() {
                        break;
                    }
                    let Some(message) = source.read().now_or_never() else { break };
                    take(source, core, message).await?;
                    burst += 1;
                }
                if burst < PACE_FEW
                    && source.mid_transaction()
                    && core.undispatched() >= PACE_AFTER
                {
                    pacing = true;
                    pace.as_mut().reset(tokio::time::Instant::now() + READ_PACE);
                }
                if source.mid_transaction() && core.undispatched() < ENCODE_BATCH {
                    if !lingering && core.undispatched() > 0 {
                        lingering = true;
                        linger.as_mut().reset(tokio::time::Instant::now() + DISPATCH_LINGER);
                    }
                } else {
                    lingering = false;
                    core.dispatch(|| source.encoder()).await?;
                }
            }
        }
    }
}

/// Hands one message to the source, then admits what it queued while the budget has room.
async fn take<S: Source, K: RecordSink>(
    source: &mut S,
    core: &mut DeliveryCore<S::Change, S::Position, K>,
    message: S::Message,
) -> Result<(), PipelineError> {
    let reply = source.on_message(message, &mut core.intake).await?;
    core.process_steps()?;
    if reply {
        confirm(source, core, true).await?;
    }
    Ok(())
}

/// The checkpoint: the source confirms the watermark it has (never waiting for in-flight work).
async fn confirm<S: Source, K: RecordSink>(
    source: &mut S,
    core: &DeliveryCore<S::Change, S::Position, K>,
    reply: bool,
) -> Result<(), PipelineError> {
    let watermark = core.watermark();
    let started = Instant::now();
    match source.confirm(watermark, reply).await {
        Ok(()) => {
            core.checkpointed(watermark, started.elapsed());
            Ok(())
        }
        Err(error) => {
            core.checkpoint_failed();
            Err(error)
        }
    }
}

/// Now, in Unix microseconds.
pub fn unix_nanos_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// Now, in microseconds since the Unix epoch.
pub fn unix_micros_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

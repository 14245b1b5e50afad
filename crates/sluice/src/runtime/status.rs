//! The pipeline's status as the runtime holds it: lifecycle state, positions, progress,
//! throughput and latency, the last error and restarts, and the operator's requests (pause,
//! resume, restart, snapshot signals).
//!
//! The data path and the supervisor write to the [`StatusBoard`]; the admin server only reads
//! it (and forwards operators' requests through it). Nothing here knows about HTTP.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use serde::Serialize;
use sluice_engine::InFlightBudget;
use tokio::sync::watch;

/// Samples kept for `/api/v1/pipelines/{name}/series`: ten minutes at one per second.
const SERIES_LEN: usize = 600;
/// Restart events kept in the status.
const RECENT_RESTARTS: usize = 20;
/// One-second latency windows merged for the status's percentiles.
const LATENCY_WINDOWS: usize = 10;

/// An operator's snapshot request, from a source's signal table or the admin API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// Snapshot these tables (`schema.table`), each with an optional row filter.
    Snapshot {
        /// The request's id (a replayed id is ignored).
        id: String,
        /// Tables and filters.
        tables: Vec<(String, Option<String>)>,
        /// Republication: after the rows, a tombstone for every key live in the table's topic
        /// that is no longer in the table (no filter then).
        tombstones: bool,
    },
    /// Stop the queued and running snapshots of these tables (all when empty).
    Stop {
        /// The request's id.
        id: String,
        /// Tables.
        tables: Vec<String>,
    },
}

/// An operator's snapshot request that was refused (a filter that is not one condition, a
/// signal row that is not the expected JSON, …): shown in the status, kept in the state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct RefusedRequest {
    /// The request's id.
    pub id: String,
    /// Why it was refused.
    pub reason: String,
}

/// The pipeline's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineState {
    /// Connecting and setting up.
    Starting,
    /// Reading the captured tables' current rows before streaming.
    Snapshotting,
    /// Streaming changes.
    Streaming,
    /// Waiting before a restart after a failure.
    Backoff,
    /// Paused through the admin API.
    Paused,
    /// Waiting as a standby while another instance of the pipeline is active.
    Standby,
    /// Stopped on a failure that the restart policy does not restart.
    Failed,
    /// Stopped on request.
    Stopped,
}

impl PipelineState {
    const ALL: [Self; 8] = [
        Self::Starting,
        Self::Snapshotting,
        Self::Streaming,
        Self::Backoff,
        Self::Paused,
        Self::Standby,
        Self::Failed,
        Self::Stopped,
    ];

    /// The state's name as the API and the metrics show it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Snapshotting => "snapshotting",
            Self::Streaming => "streaming",
            Self::Backoff => "backoff",
            Self::Paused => "paused",
            Self::Standby => "standby",
            Self::Failed => "failed",
            Self::Stopped => "stopped",
        }
    }
}

/// An instance's part in an active/standby pipeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Streams (holds the source's exclusive role).
    Active,
    /// Waits to take over.
    Standby,
}

/// Which instance of the pipeline is active, as this one last saw it.
#[derive(Debug, Clone, Serialize)]
pub struct ActiveInstance {
    /// Its `ha.instance_id`.
    pub instance: String,
    /// When it became active (Unix milliseconds).
    pub since_unix_ms: u64,
}

/// One restart, as the status lists it.
#[derive(Debug, Clone, Serialize)]
pub struct RestartEvent {
    /// When the failed run ended (Unix milliseconds).
    pub unix_ms: u64,
    /// `retryable`, `fatal` or `requested`.
    pub reason: &'static str,
    /// The failure, with its causes.
    pub error: Option<String>,
    /// The delay chosen before the restart.
    pub backoff_ms: u64,
    /// Failed runs in a row, this one included.
    pub consecutive_failures: u32,
}

/// The slot as last polled.
#[derive(Debug, Clone, Serialize)]
pub struct SlotStatus {
    /// The slot's name.
    pub name: String,
    /// Its `confirmed_flush_lsn`.
    pub confirmed_flush_lsn: String,
    /// `pg_current_wal_lsn()`.
    pub server_wal_lsn: String,
    /// WAL bytes between the two: what the slot retains beyond the pipeline's position.
    pub lag_bytes: i64,
    /// `wal_status`.
    pub wal_status: String,
    /// Seconds since the confirmed position last moved.
    pub progress_age_s: f64,
    /// Whether the WAL grew while the confirmed position stood still for longer than
    /// `source.postgres.progress_timeout_ms`.
    pub stalled: bool,
}

/// The pipeline's server when it is a physical standby (logical decoding on a standby,
/// PostgreSQL 16+), as last polled.
#[derive(Debug, Clone, Serialize)]
pub struct StandbyStatus {
    /// The standby's `pg_last_wal_replay_lsn()`: changes reach the pipeline once replayed.
    pub replay_lsn: String,
    /// What the replay position is measured against: the primary's `pg_current_wal_lsn()`
    /// (`primary`, with `source.postgres.primary_url`) or the standby's
    /// `pg_last_wal_receive_lsn()` (`received`).
    pub measured_against: String,
    /// That position.
    pub target_lsn: String,
    /// WAL bytes not yet replayed.
    pub replay_lag_bytes: i64,
    /// `now() - pg_last_xact_replay_timestamp()` while WAL is left to replay, else 0.
    pub replay_lag_s: f64,
    /// Whether `source.postgres.primary_url` is connected (publication, heartbeats, the slot's
    /// creation and incremental snapshots go there).
    pub primary_connected: bool,
    /// `hot_standby_feedback` on the standby (off: the slot may be invalidated).
    pub hot_standby_feedback: bool,
}

/// The WAL the slot retains against `source.postgres.wal_budget`, as last checked.
#[derive(Debug, Clone, Serialize)]
pub struct WalBudgetStatus {
    /// The budget.
    pub budget_bytes: u64,
    /// `pg_current_wal_lsn() - restart_lsn` of the slot.
    pub retained_bytes: i64,
    /// The retained WAL as a percentage of the budget.
    pub used_percent: f64,
    /// `under`, `warning_50`, `warning_80` or `exceeded`.
    pub level: String,
    /// `source.postgres.wal_budget_action`.
    pub action: String,
    /// From 50 % on: what is wrong and what holds the slot back, in one sentence.
    pub warning: Option<String>,
    /// What holds the slot back, where it can be known.
    pub held_by: Vec<WalHolder>,
    /// The slot's `wal_status` (PostgreSQL 13+).
    pub wal_status: Option<String>,
    /// The slot's `safe_wal_size`: WAL that can still be written before the server invalidates
    /// it (PostgreSQL 13+, with `max_slot_wal_keep_size` set).
    pub safe_wal_size: Option<i64>,
    /// Whether the `drop_slot` action dropped the slot.
    pub slot_dropped: bool,
    /// Why the last check failed, when it did.
    pub check_error: Option<String>,
    /// Unix milliseconds of the last check.
    pub checked_unix_ms: u64,
}

/// One thing that holds the slot's position back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WalHolder {
    /// `kafka_unreachable`, `delivery_stalled`, `paused`, `not_streaming`,
    /// `long_transaction` (or, from doctor, `not_running`).
    pub kind: String,
    /// What it is, for people.
    pub detail: String,
}

/// A MySQL/MariaDB source's place in the server's binary log, as last polled.
#[derive(Debug, Clone, Serialize)]
pub struct BinlogStatus {
    /// The binlog file of the confirmed position (what a restart resumes from).
    pub confirmed_file: String,
    /// The position in it.
    pub confirmed_pos: u64,
    /// The server's newest binlog file.
    pub server_file: String,
    /// Its size: the server's current position.
    pub server_pos: u64,
    /// Binlog bytes between the two.
    pub lag_bytes: u64,
    /// Seconds since the confirmed transaction committed, while there is more to read (0 when
    /// caught up).
    pub lag_seconds: f64,
}

/// A running snapshot's progress.
#[derive(Debug, Clone, Serialize)]
pub struct SnapshotStatus {
    /// Chunks planned.
    pub chunks_total: usize,
    /// Chunks acknowledged by Kafka (including those finished before a restart).
    pub chunks_done: usize,
    /// Rows read by this run.
    pub rows: u64,
}

/// The running incremental snapshot's progress.
#[derive(Debug, Clone, Serialize)]
pub struct IncrementalStatus {
    /// The request's id (the signal's, the API's, or `new-table…`).
    pub request: String,
    /// The table being read.
    pub table: String,
    /// Its rows published so far.
    pub rows: u64,
    /// Its chunks read so far.
    pub chunks: u64,
    /// Tables queued, including this one.
    pub tables_queued: usize,
}

/// Latency percentiles, in milliseconds.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Percentiles {
    /// Records in the window.
    pub count: u64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl Percentiles {
    fn of(histogram: &Histogram<u64>) -> Option<Self> {
        let ms = |micros: u64| micros as f64 / 1000.0;
        (!histogram.is_empty()).then(|| Self {
            count: histogram.len(),
            p50: ms(histogram.value_at_quantile(0.5)),
            p90: ms(histogram.value_at_quantile(0.9)),
            p99: ms(histogram.value_at_quantile(0.99)),
            max: ms(histogram.max()),
        })
    }
}

/// One second of the pipeline, for the charts.
#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Unix milliseconds.
    pub unix_ms: u64,
    /// Records acknowledged by Kafka per second.
    pub records_per_s: f64,
    /// Key and value bytes acknowledged per second.
    pub bytes_per_s: f64,
    /// The slot's lag in bytes, when known.
    pub lag_bytes: Option<i64>,
    /// Bytes in flight.
    pub inflight_bytes: u64,
    /// Commit → acknowledgement latency of the records acknowledged in this second.
    pub latency_ms: Option<Percentiles>,
}

/// What `/health` and `/api/v1/pipelines/{name}` show; written by the pipeline and its
/// supervisor, read by the server.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineStatus {
    /// The pipeline's name.
    pub pipeline: String,
    /// This instance's `ha.instance_id`.
    pub instance: String,
    /// `active` or `standby` (sources that elect one; none before the first election).
    pub role: Option<Role>,
    /// The active instance (this one or another), when known.
    pub active: Option<ActiveInstance>,
    /// Times this instance took over after waiting as a standby.
    pub takeovers: u64,
    /// Its state.
    pub state: PipelineState,
    /// Unix milliseconds of the last state change.
    pub since_unix_ms: u64,
    /// `restart.policy`.
    pub restart_policy: String,
    /// Restarts so far (all reasons).
    pub restarts: u64,
    /// Failed runs in a row (0 once a run has streamed for a minute).
    pub consecutive_failures: u32,
    /// The delay before the next restart while in backoff.
    pub backoff_ms: Option<u64>,
    /// The newest restarts, oldest first.
    pub recent_restarts: VecDeque<RestartEvent>,
    /// Whether the pipeline is paused (or pausing).
    pub paused: bool,
    /// The last error, with its causes.
    pub last_error: Option<String>,
    /// The operator's fix for the last error, when known.
    pub hint: Option<String>,
    /// The watermark LSN.
    pub watermark_lsn: Option<String>,
    /// The slot, as last polled.
    pub slot: Option<SlotStatus>,
    /// The WAL the slot retains against the WAL budget (`source.postgres.wal_budget`).
    pub wal_budget: Option<WalBudgetStatus>,
    /// The standby the pipeline decodes on, with its replay lag (none on a primary).
    pub standby: Option<StandbyStatus>,
    /// The binary log position against the server's (MySQL/MariaDB sources), as last polled.
    pub binlog: Option<BinlogStatus>,
    /// The snapshot's progress, while one runs (and its last figures after).
    pub snapshot: Option<SnapshotStatus>,
    /// The running incremental snapshot, if any.
    pub incremental_snapshot: Option<IncrementalStatus>,
    /// The newest refused snapshot requests, oldest first.
    pub refused_snapshot_requests: Vec<RefusedRequest>,
    /// Whether librdkafka reports every broker down.
    pub kafka_brokers_down: bool,
    /// While the schema registry does not answer (Avro): why, and when it is tried again.
    pub schema_registry_error: Option<String>,
    /// Row changes in flight.
    pub inflight_records: u64,
    /// Bytes in flight.
    pub inflight_bytes: u64,
    /// The in-flight byte budget.
    pub inflight_limit_bytes: u64,
    /// Records acknowledged per second, over the last second.
    pub records_per_s: f64,
    /// Bytes acknowledged per second, over the last second.
    pub bytes_per_s: f64,
    /// Commit → acknowledgement latency over the last ten seconds.
    pub latency_ms: Option<Percentiles>,
    /// The last scheduled verification (`verify_interval_s`), once one has finished.
    pub verification: Option<VerificationStatus>,
}

/// The outcome of the last scheduled verification, as `/health` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct VerificationStatus {
    /// `equal`, `differences`, `not_verified` or `error` (it could not run).
    pub status: String,
    /// Unix milliseconds when it finished.
    pub finished_unix_ms: u64,
    /// Unix milliseconds when the last verification that found everything equal finished.
    pub last_success_unix_ms: Option<u64>,
    /// Source rows compared.
    pub rows_compared: u64,
    /// Tables that differ.
    pub tables_differing: u64,
    /// Key ranges (buckets) that differ.
    pub ranges_differing: u64,
    /// Differing keys found.
    pub differences_found: u64,
    /// Why it could not verify, or which tables it could not verify and why.
    pub error: Option<String>,
}

/// What an operator asked the supervisor for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Control {
    /// Stay paused.
    pub paused: bool,
    /// Incremented per restart request (and per resume, to cut a backoff short).
    pub restart_requests: u64,
}

/// Records and latencies acknowledged since the last sample.
struct Window {
    records: u64,
    bytes: u64,
    latency: Histogram<u64>,
    last_sample: Instant,
    recent: VecDeque<Histogram<u64>>,
}

/// An empty latency histogram in microseconds (1 µs to 30 days, 2 significant digits).
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 30 * 24 * 3_600_000_000, 2).unwrap_or_else(|_| {
        // The bounds above are valid constants; this branch cannot run.
        Histogram::new(2).unwrap_or_else(|_| unreachable!("2 significant digits are valid"))
    })
}

/// Shared status and controls of one pipeline.
pub struct StatusBoard {
    status: Mutex<PipelineStatus>,
    budget: Mutex<Option<InFlightBudget>>,
    control: watch::Sender<Control>,
    window: Mutex<Window>,
    series: Mutex<VecDeque<Sample>>,
    signals: Mutex<Vec<(u64, Signal)>>,
    /// The sequence number of the newest signal queued.
    signal_seq: std::sync::atomic::AtomicU64,
    /// Every signal up to this sequence number is recorded in the state file (or needed no
    /// record).
    signals_recorded: tokio::sync::watch::Sender<u64>,
    /// Whether the pipeline takes snapshot signals (a PostgreSQL source; a MySQL source with a
    /// signal table).
    takes_snapshots: std::sync::atomic::AtomicBool,
    /// Whether its snapshots can republish with tombstones (PostgreSQL).
    takes_republication: std::sync::atomic::AtomicBool,
    /// Whether its snapshot request filters are MySQL conditions (else PostgreSQL ones).
    mysql_filters: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for StatusBoard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StatusBoard").finish_non_exhaustive()
    }
}

impl StatusBoard {
    /// A board for `pipeline`, in [`PipelineState::Starting`].
    pub fn new(pipeline: &str, restart_policy: &str) -> Arc<Self> {
        let board = Arc::new(Self {
            status: Mutex::new(PipelineStatus {
                pipeline: pipeline.to_owned(),
                instance: String::new(),
                role: None,
                active: None,
                takeovers: 0,
                state: PipelineState::Starting,
                since_unix_ms: unix_ms(),
                restart_policy: restart_policy.to_owned(),
                restarts: 0,
                consecutive_failures: 0,
                backoff_ms: None,
                recent_restarts: VecDeque::new(),
                paused: false,
                last_error: None,
                hint: None,
                watermark_lsn: None,
                slot: None,
                wal_budget: None,
                standby: None,
                binlog: None,
                snapshot: None,
                incremental_snapshot: None,
                refused_snapshot_requests: Vec::new(),
                kafka_brokers_down: false,
                schema_registry_error: None,
                inflight_records: 0,
                inflight_bytes: 0,
                inflight_limit_bytes: 0,
                records_per_s: 0.0,
                bytes_per_s: 0.0,
                latency_ms: None,
                verification: None,
            }),
            budget: Mutex::new(None),
            control: watch::Sender::new(Control::default()),
            window: Mutex::new(Window {
                records: 0,
                bytes: 0,
                latency: latency_histogram(),
                last_sample: Instant::now(),
                recent: VecDeque::new(),
            }),
            series: Mutex::new(VecDeque::new()),
            signals: Mutex::new(Vec::new()),
            signal_seq: std::sync::atomic::AtomicU64::new(0),
            signals_recorded: tokio::sync::watch::Sender::new(0),
            takes_snapshots: std::sync::atomic::AtomicBool::new(false),
            takes_republication: std::sync::atomic::AtomicBool::new(false),
            mysql_filters: std::sync::atomic::AtomicBool::new(false),
        });
        board.publish_state_gauges(PipelineState::Starting);
        board
    }

    /// The pipeline's name.
    pub fn pipeline(&self) -> String {
        self.read(|s| s.pipeline.clone())
    }

    /// This instance's role, once elected.
    pub fn role(&self) -> Option<Role> {
        self.read(|s| s.role)
    }

    /// The current state.
    pub fn state(&self) -> PipelineState {
        self.read(|s| s.state)
    }

    /// Records a finished scheduled verification (keeping the time of the last success when
    /// this one did not succeed).
    pub fn set_verification(&self, mut verification: VerificationStatus) {
        self.update(|status| {
            if verification.last_success_unix_ms.is_none() {
                verification.last_success_unix_ms = status
                    .verification
                    .as_ref()
                    .and_then(|v| v.last_success_unix_ms);
            }
            status.verification = Some(verification);
        });
    }

    /// Changes the state; logs and counts the transition.
    pub fn set_state(&self, state: PipelineState) {
        let mut from = None;
        self.update(|status| {
            if status.state != state {
                from = Some(status.state);
                status.state = state;
                status.since_unix_ms = unix_ms();
            }
        });
        if let Some(from) = from {
            tracing::info!(from = from.name(), to = state.name(), "pipeline state");
            ::metrics::counter!(super::metrics::STATE_TRANSITIONS, "state" => state.name())
                .increment(1);
            self.publish_state_gauges(state);
        }
    }

    /// Records this instance's role and the active instance; a standby that becomes active
    /// counts a takeover.
    pub fn set_role(&self, role: Role, active: Option<ActiveInstance>) {
        let mut took_over = false;
        self.update(|status| {
            took_over = role == Role::Active && status.role == Some(Role::Standby);
            if took_over {
                status.takeovers += 1;
            }
            status.role = Some(role);
            status.active = active;
        });
        if took_over {
            ::metrics::counter!(super::metrics::HA_TAKEOVERS).increment(1);
        }
        for (each, name) in [(Role::Active, "active"), (Role::Standby, "standby")] {
            ::metrics::gauge!(super::metrics::HA_ROLE, "role" => name).set(if each == role {
                1.0
            } else {
                0.0
            });
        }
    }

    fn publish_state_gauges(&self, state: PipelineState) {
        for each in PipelineState::ALL {
            ::metrics::gauge!(super::metrics::PIPELINE_STATE, "state" => each.name())
                .set(if each == state { 1.0 } else { 0.0 });
        }
        ::metrics::gauge!(super::metrics::PIPELINE_UP).set(if state == PipelineState::Streaming {
            1.0
        } else {
            0.0
        });
    }

    /// Applies `change` to the status.
    pub fn update(&self, change: impl FnOnce(&mut PipelineStatus)) {
        let mut status = self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut status);
    }

    fn read<T>(&self, f: impl FnOnce(&PipelineStatus) -> T) -> T {
        let status = self
            .status
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&status)
    }

    /// Records a restart (stamped now) in the status and the metrics.
    pub fn record_restart(
        &self,
        reason: &'static str,
        error: Option<String>,
        backoff_ms: u64,
        consecutive_failures: u32,
    ) {
        let event = RestartEvent {
            unix_ms: unix_ms(),
            reason,
            error,
            backoff_ms,
            consecutive_failures,
        };
        ::metrics::counter!(super::metrics::RESTARTS, "reason" => event.reason).increment(1);
        self.update(|s| {
            s.restarts += 1;
            s.consecutive_failures = event.consecutive_failures;
            if event.reason != "requested" {
                s.backoff_ms = Some(event.backoff_ms);
            }
            if s.recent_restarts.len() == RECENT_RESTARTS {
                s.recent_restarts.pop_front();
            }
            s.recent_restarts.push_back(event);
        });
    }

    /// Attaches the running pipeline's budget so scrapes read it live.
    pub fn set_budget(&self, budget: Option<InFlightBudget>) {
        let mut slot = self
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = budget;
    }

    /// Adds what was acknowledged since the last call (records, bytes and their latencies in
    /// microseconds) to the current one-second window.
    pub fn add_acknowledged(&self, records: u64, bytes: u64, latency: &Histogram<u64>) {
        let mut window = self
            .window
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        window.records += records;
        window.bytes += bytes;
        let _ = window.latency.add(latency);
    }

    /// Closes the current window into a [`Sample`] (called once a second by the server).
    pub fn sample(&self) {
        let status = self.snapshot();
        let (records, bytes, elapsed, latency, recent) = {
            let mut window = self
                .window
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let elapsed = window.last_sample.elapsed().as_secs_f64().max(1e-3);
            window.last_sample = Instant::now();
            let records = std::mem::take(&mut window.records);
            let bytes = std::mem::take(&mut window.bytes);
            let latency = Percentiles::of(&window.latency);
            let closed = std::mem::replace(&mut window.latency, latency_histogram());
            if window.recent.len() == LATENCY_WINDOWS {
                window.recent.pop_front();
            }
            window.recent.push_back(closed);
            let mut merged = latency_histogram();
            for h in &window.recent {
                let _ = merged.add(h);
            }
            (records, bytes, elapsed, latency, Percentiles::of(&merged))
        };
        let sample = Sample {
            unix_ms: unix_ms(),
            records_per_s: records as f64 / elapsed,
            bytes_per_s: bytes as f64 / elapsed,
            lag_bytes: status.slot.as_ref().map(|s| s.lag_bytes),
            inflight_bytes: status.inflight_bytes,
            latency_ms: latency,
        };
        self.update(|s| {
            s.records_per_s = sample.records_per_s;
            s.bytes_per_s = sample.bytes_per_s;
            s.latency_ms = recent;
        });
        let mut series = self
            .series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if series.len() == SERIES_LEN {
            series.pop_front();
        }
        series.push_back(sample);
    }

    /// The samples, oldest first.
    pub fn series(&self) -> Vec<Sample> {
        self.series
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    /// A snapshot of the status with live in-flight figures; also refreshes their gauges.
    pub fn snapshot(&self) -> PipelineStatus {
        let budget = self
            .budget
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let mut status = self.read(Clone::clone);
        status.paused = self.control.borrow().paused;
        if let Some(budget) = budget {
            status.inflight_bytes = budget.in_flight_bytes();
            status.inflight_records = budget.in_flight_records();
            status.inflight_limit_bytes = u64::from(budget.max_bytes());
            ::metrics::gauge!(super::metrics::INFLIGHT_BYTES).set(status.inflight_bytes as f64);
            ::metrics::gauge!(super::metrics::INFLIGHT_RECORDS).set(status.inflight_records as f64);
            ::metrics::gauge!(super::metrics::INFLIGHT_BYTES_LIMIT)
                .set(f64::from(budget.max_bytes()));
        } else {
            status.inflight_bytes = 0;
            status.inflight_records = 0;
        }
        status
    }

    /// The operator's requests, for the supervisor.
    pub fn control(&self) -> watch::Receiver<Control> {
        self.control.subscribe()
    }

    /// Asks the supervisor to pause.
    pub fn pause(&self) {
        self.control.send_modify(|c| c.paused = true);
    }

    /// Asks the supervisor to resume a paused pipeline, or to cut a restart backoff short; a
    /// running pipeline is left alone.
    pub fn resume(&self) {
        let in_backoff = self.state() == PipelineState::Backoff;
        self.control.send_if_modified(|c| {
            if c.paused {
                c.paused = false;
                true
            } else if in_backoff {
                c.restart_requests += 1;
                true
            } else {
                false
            }
        });
    }

    /// Asks the supervisor to restart the pipeline now.
    pub fn restart(&self) {
        self.control.send_modify(|c| c.restart_requests += 1);
    }

    /// Marks the pipeline as one that takes snapshot signals (a PostgreSQL source; a MySQL
    /// source with a signal table), and with `republication` requests with tombstones too;
    /// their filters are conditions of `filters`.
    pub fn take_snapshot_signals(&self, republication: bool, filters: crate::sql::SqlDialect) {
        self.takes_snapshots
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.takes_republication
            .store(republication, std::sync::atomic::Ordering::Relaxed);
        self.mysql_filters.store(
            filters == crate::sql::SqlDialect::Mysql,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The dialect of the pipeline's snapshot request filters.
    pub fn snapshot_filter_dialect(&self) -> crate::sql::SqlDialect {
        if self
            .mysql_filters
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            crate::sql::SqlDialect::Mysql
        } else {
            crate::sql::SqlDialect::Postgres
        }
    }

    /// Whether the pipeline's snapshots can republish with tombstones.
    pub fn takes_republication_now(&self) -> bool {
        self.takes_republication
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the pipeline takes snapshot signals.
    pub fn takes_snapshot_signals_now(&self) -> bool {
        self.takes_snapshots
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Queues an operator's snapshot signal for the running pipeline (taken on its next
    /// status tick); returns its sequence number, to wait for with
    /// [`wait_signal_recorded`](Self::wait_signal_recorded).
    pub fn signal(&self, signal: Signal) -> u64 {
        let mut signals = self
            .signals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seq = self
            .signal_seq
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        signals.push((seq, signal));
        seq
    }

    /// The queued signals with their sequence numbers, oldest first.
    pub fn take_signals(&self) -> Vec<(u64, Signal)> {
        std::mem::take(
            &mut *self
                .signals
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    /// Every signal up to `seq` is recorded in the state file (or needed no record).
    pub fn signals_recorded(&self, seq: u64) {
        self.signals_recorded.send_if_modified(|recorded| {
            let newer = seq > *recorded;
            *recorded = (*recorded).max(seq);
            newer
        });
    }

    /// Waits until the signal `seq` is recorded, at most `timeout`; whether it is.
    pub async fn wait_signal_recorded(&self, seq: u64, timeout: Duration) -> bool {
        let mut recorded = self.signals_recorded.subscribe();
        tokio::time::timeout(timeout, recorded.wait_for(|&r| r >= seq))
            .await
            .is_ok_and(|r| r.is_ok())
    }
}

/// Milliseconds since the Unix epoch.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_turn_acknowledgements_into_rates_and_percentiles() {
        let board = StatusBoard::new("p", "on-failure");
        let mut latency = latency_histogram();
        for micros in [1_000u64, 2_000, 3_000, 100_000] {
            latency.record(micros).expect("in range");
        }
        board.add_acknowledged(4, 400, &latency);
        board.sample();
        let series = board.series();
        assert_eq!(series.len(), 1);
        let sample = &series[0];
        assert!(sample.records_per_s > 0.0);
        let p = sample.latency_ms.expect("percentiles");
        assert_eq!(p.count, 4);
        assert!((1.9..=2.1).contains(&p.p50), "p50 {}", p.p50);
        assert!((99.0..=101.0).contains(&p.max), "max {}", p.max);
        // The next second is empty: no percentiles for it, but the status keeps ten seconds.
        board.sample();
        assert!(board.series()[1].latency_ms.is_none());
        assert_eq!(board.snapshot().latency_ms.map(|p| p.count), Some(4));
    }

    #[test]
    fn pause_resume_and_restart_reach_the_supervisor() {
        let board = StatusBoard::new("p", "on-failure");
        let control = board.control();
        board.set_state(PipelineState::Streaming);
        board.resume();
        assert!(
            !control.has_changed().unwrap(),
            "resuming a running pipeline changes nothing"
        );
        board.pause();
        assert!(control.borrow().paused);
        assert!(board.snapshot().paused);
        board.resume();
        assert!(!control.borrow().paused);
        let before = control.borrow().restart_requests;
        board.restart();
        assert_eq!(control.borrow().restart_requests, before + 1);
    }
}

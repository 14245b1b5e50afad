//! One run of the PostgreSQL → Kafka pipeline: from connecting to the first error or shutdown.
//!
//! # The loop
//!
//! This module is the PostgreSQL adapter of the delivery core ([`crate::delivery`]), which
//! owns the loop: admission under the in-flight budget, parallel encoding, publishing in order,
//! acknowledgements, the watermark, dead-lettering and draining. Here: turning pgoutput
//! messages into changes and checkpoints, and confirming the watermark to the server as the
//! standby status update's flush LSN (after recording it in the state store). Status updates
//! keep going out while back-pressured or idle, so `wal_sender_timeout` never fires, and a
//! keepalive that asks for a reply is answered at once.
//!
//! # Positions
//!
//! pgoutput (without streaming of in-progress transactions) sends only committed transactions,
//! whole and in commit order. Each row change becomes one to four Kafka records, each pushed to
//! the tracker; after a transaction's last change, its commit's end LSN is pushed as a
//! checkpoint marker. The slot's confirmed flush LSN therefore only passes a transaction when
//! every one of its records is acknowledged, and a restart resumes at the first transaction not
//! wholly acknowledged (duplicates possible, loss impossible). Between transactions, a
//! keepalive's `wal_end` and sluice's own heartbeat messages are checkpoints too, so an idle or
//! filtered-out database still lets the slot advance.
//!
//! # Large transactions
//!
//! sluice does not request streaming of in-progress transactions (protocol v2). With it, rows of
//! transactions that may still abort would have to be held or spilled by sluice until their
//! commit; PostgreSQL already does exactly that (its reorder buffer spills to disk beyond
//! `logical_decoding_work_mem`) and then sends the committed transaction row by row. sluice
//! never holds a whole transaction: rows flow through the bounded budget and are released as
//! Kafka acknowledges them, so a transaction of any size passes in constant memory. The cost is
//! latency for very large transactions (decoding starts at their commit).
//!
//! # Parallel encoding
//!
//! Decoded changes are encoded into Debezium JSON (`PgEncoder`) in batches on the blocking
//! pool by the delivery core, so encoding uses every core, and published in commit order.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluice_engine::Lsn;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::active;
use super::config::{
    HEARTBEAT_MESSAGE_PREFIX, PartitionMode, PgPipelineConfig, SlotLossPolicy, SnapshotMode,
    UnchangedToast,
};
use super::deadline::bounded;
use super::encode::record_position;
use super::encode::{
    ChangeKind, EncodeOptions, LogicalMessage, OutboxLayout, RelationInfo, RowChange,
    SourceIdentity, encode_change, encode_message, key_differs,
};
use super::incremental::{self, IncrementalRun, WATERMARK_PREFIX};
use super::pgoutput::{self, Datum, PgOutputMessage, ReplicaIdentity, TupleData};
use super::replication::{
    ReplicationConnection, ReplicationError, ReplicationMessage, ReplicationStream, SystemIdentity,
};
use super::setup::{CapturedTable, PgCatalog, quote_ident};
use super::silence::{Silence, SilenceWatch};
use super::slot_state::{self, ServerSlot, SlotLoss, SlotRecord, SlotStateFile};
use super::snapshot::{self, SnapshotContext, SnapshotPlan};
use super::standby::Standby;
use super::wal_budget::{BudgetShared, WalBudget};
use crate::config::StateStoreKind;
use crate::delivery::{self, Encode, FailedChange, Intake, Origin, Source, unix_micros_now};
use crate::error::PipelineError;
use crate::kafka::{self, OutRecord};
use crate::kafka_state::KafkaStateStore;
use crate::runtime::active::run_while_active;
use crate::runtime::metrics::{self as m, PipelineMetrics, TableMetrics};
use crate::runtime::status::{PipelineState, SlotStatus, StandbyStatus, StatusBoard};
use crate::runtime::supervisor::{RunEnd, Supervised};
use crate::source::run::{KafkaSetup, RunSkeleton};

/// Everything a run needs from outside.
pub struct RunContext {
    /// The pipeline.
    pub config: Arc<PgPipelineConfig>,
    /// Its status.
    pub board: Arc<StatusBoard>,
    /// Graceful stop.
    pub shutdown: CancellationToken,
    /// Hot-path metrics.
    pub metrics: PipelineMetrics,
    /// The no-progress watchdog's memory, kept across runs so restarts don't reset it.
    pub progress: Arc<std::sync::Mutex<ProgressWatch>>,
    /// The smallest `max.message.bytes` of a topic created while running (0: none), kept
    /// across runs so the next producer's `batch.size` fits it.
    pub batch_size_cap: Arc<std::sync::atomic::AtomicU64>,
}

/// A PostgreSQL → Kafka pipeline as the supervisor ([`crate::runtime::supervisor`]) runs it:
/// each run resumes from the slot's confirmed position; a pause ends the run (drained and
/// confirmed) until the operator resumes.
pub struct CdcPipeline {
    config: Arc<PgPipelineConfig>,
    board: Arc<StatusBoard>,
    metrics: PipelineMetrics,
    progress: Arc<std::sync::Mutex<ProgressWatch>>,
    batch_size_cap: Arc<std::sync::atomic::AtomicU64>,
    /// The WAL budget's task (started with the first run when `wal_budget` is set).
    wal_budget: Option<WalBudget>,
}

impl CdcPipeline {
    /// The pipeline of `config`, reporting to `board`.
    pub fn new(config: Arc<PgPipelineConfig>, board: Arc<StatusBoard>) -> Self {
        let config = crate::source::config_for_run(config);
        let instance = config.ha.instance_id();
        board.update(|s| s.instance = instance);
        Self {
            config,
            board,
            metrics: PipelineMetrics::new(),
            progress: Arc::default(),
            batch_size_cap: Arc::default(),
            wal_budget: None,
        }
    }

    /// One run under the WAL budget: it ends at once when the `drop_slot` action starts, and
    /// then fails with what the action did.
    async fn run_within_budget(
        &mut self,
        shared: Arc<BudgetShared>,
        stop: CancellationToken,
    ) -> Result<RunEnd, PipelineError> {
        let outcome = || {
            shared.outcome().unwrap_or_else(|| {
                PipelineError::fatal(
                    "WAL budget exceeded: the slot's drop did not finish",
                    "see the log; drop the slot by hand if it still exists",
                )
            })
        };
        {
            let _run = shared.run.lock().await;
            if !shared.exceeded.is_cancelled() {
                let run_stop = stop.child_token();
                let result = tokio::select! {
                    result = self.run_unbudgeted(run_stop.clone()) => Some(result),
                    () = shared.exceeded.cancelled() => None,
                };
                // Ended or dropped: either way its tasks stop with the token.
                run_stop.cancel();
                if let Some(result) = result {
                    return result;
                }
            }
        }
        // The budget's task records and drops the slot now that the run released it.
        let _ = tokio::time::timeout(Duration::from_secs(120), shared.done.cancelled()).await;
        Err(outcome())
    }

    async fn run_unbudgeted(&mut self, stop: CancellationToken) -> Result<RunEnd, PipelineError> {
        // Exactly one instance of the pipeline runs past this point; the others wait here as
        // standbys (see `active`).
        let Some(role) = active::acquire(&self.config, &self.board, &stop).await? else {
            return Ok(RunEnd::Finished);
        };
        run_while_active(role, &stop, "PostgreSQL", |run_stop| {
            let ctx = RunContext {
                config: Arc::clone(&self.config),
                board: Arc::clone(&self.board),
                shutdown: run_stop,
                metrics: self.metrics.clone(),
                progress: Arc::clone(&self.progress),
                batch_size_cap: Arc::clone(&self.batch_size_cap),
            };
            async move { run_once(&ctx).await }
        })
        .await
    }
}

impl Supervised for CdcPipeline {
    const PAUSES_IN_RUN: bool = false;

    fn resumes_from(&self) -> &'static str {
        "the last confirmed position"
    }

    fn restart_refused(&self) -> Option<PipelineError> {
        // A slot dropped by the WAL budget stops the pipeline whatever the restart policy.
        self.wal_budget.as_ref().and_then(|b| b.shared().outcome())
    }

    async fn run_once(&mut self, stop: CancellationToken) -> Result<RunEnd, PipelineError> {
        if self.wal_budget.is_none() && self.config.source.wal_budget > 0 {
            self.wal_budget = Some(WalBudget::start(
                Arc::clone(&self.config),
                Arc::clone(&self.board),
            ));
        }
        match self.wal_budget.as_ref().map(|b| Arc::clone(b.shared())) {
            Some(shared) => self.run_within_budget(shared, stop).await,
            None => self.run_unbudgeted(stop).await,
        }
    }
}

/// One decoded change (or logical message) on its way in: the PostgreSQL source's change type
/// in the delivery core.
pub(super) enum Item {
    Row(RowChange),
    Message(LogicalMessage),
    /// A record made by sluice itself (a schema change event).
    Raw {
        record: OutRecord,
        commit_unix_micros: i64,
    },
}

/// The transaction being received.
struct OpenTransaction {
    commit_lsn: Lsn,
    xid: u32,
    commit_unix_micros: i64,
    next_index: u32,
    /// `provide_transaction_metadata`: the data events emitted so far, in all and per table
    /// (`schema.table`, in order of first event).
    events: u64,
    collections: Vec<(String, u64)>,
}

/// `partitions = "leaves"`: the tables of `captured` new to `state` that are partitions created
/// while sluice was stopped with every row streamed (see [`super::partition::Creation`]), and
/// this start's horizon (taken now: the slot exists and the publication is set up).
///
/// # Errors
///
/// Retryable on connection trouble.
async fn created_while_stopped(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
    state: Option<&incremental::IncrementalState>,
    captured: &HashSet<String>,
) -> Result<
    (
        HashSet<String>,
        Option<crate::source::incremental::StartHorizon>,
    ),
    PipelineError,
> {
    let now: String = catalog
        .client()
        .query_one("SELECT txid_current_snapshot()::text", &[])
        .await
        .map_err(|e| crate::error::classify_pg("cannot read the transaction snapshot", e))?
        .get(0);
    let capture = super::partition::capture_settings(config, PartitionMode::Leaves);
    let mut streamed = HashSet::new();
    let previous = state.and_then(|s| s.horizon.as_ref().map(|h| (h, s.known_tables.as_ref())));
    if let Some((horizon, Some(known))) = previous
        && horizon.capture == capture
    {
        let publication = config.publication_name();
        for table in captured.iter().filter(|t| !known.contains(*t)) {
            let Some((schema, name)) = crate::config::parse_table_name(table) else {
                continue;
            };
            let creation = super::partition::creation(catalog, &publication, schema, name).await?;
            if creation.is_some_and(|c| incremental::streamed_since(&horizon.snapshot, &now, &c)) {
                streamed.insert(table.clone());
            }
        }
    }
    let horizon = crate::source::incremental::StartHorizon {
        snapshot: now,
        capture,
    };
    Ok((streamed, Some(horizon)))
}

/// How many times a Relation message's table is read again from the catalog while the two
/// disagree on a column's type, and the pause before each read (see `on_relation`).
const CATALOG_REREADS: u32 = 10;
const CATALOG_REREAD_PAUSE: Duration = Duration::from_millis(50);

/// Runs the pipeline until shutdown (`Ok`) or an error: the slot secured (`open_slot`), the
/// Kafka side set up, the initial snapshot when one is pending (`initial_snapshot`), then the
/// stream (`stream`).
///
/// # Errors
///
/// Retryable errors (lost connections) and fatal ones (configuration, server settings).
pub async fn run_once(ctx: &RunContext) -> Result<(), PipelineError> {
    let config = &ctx.config;
    // Kafka first: before a slot starts retaining WAL for the pipeline.
    crate::source::run::probe_kafka(config, &ctx.shutdown).await?;
    let (mut opened, connection) = open_slot(ctx).await?;
    let database = opened.catalog.database().await?;
    let outbox_table = config.source.outbox.as_ref().map(|o| o.table.clone());
    let topics: Vec<String> = opened
        .tables
        .iter()
        .filter(|t| outbox_table.as_deref() != Some(t.qualified().as_str()))
        .map(|t| format!("{}.{}", config.kafka.topic_prefix, t.qualified()))
        .collect();
    let exactly_once = config.delivery.guarantee == crate::config::DeliveryGuarantee::ExactlyOnce;
    let mut run = RunSkeleton::setup(
        config,
        &ctx.board,
        &ctx.batch_size_cap,
        KafkaSetup {
            change_topics: topics,
            other_topics: config.delivery.dead_letter_topic.iter().cloned().collect(),
            transactional_id: exactly_once
                .then(|| delivery::exactly_once::transactional_id(&config.name)),
        },
    )
    .await?;
    tracing::info!(
        slot = %opened.slot_name,
        confirmed_flush = %opened.slot.confirmed_flush,
        tables = opened.tables.len(),
        "resuming from the slot's confirmed position"
    );
    let identity = SourceIdentity {
        server_name: config.kafka.topic_prefix.clone(),
        database,
        registry: run.registry.clone(),
    };
    // Exactly once: fence older instances (aborting what they left open), then read back what
    // was committed.
    let committed = if exactly_once {
        Some(
            super::exactly_once::Committed::start(
                config,
                &run.producer,
                &opened.system.systemid,
                opened.consistent_point(),
            )
            .await?,
        )
    } else {
        None
    };
    let Some(connection) = initial_snapshot(
        ctx,
        &mut run,
        &mut opened,
        connection,
        &identity,
        committed.as_ref(),
        outbox_table.as_deref(),
    )
    .await?
    else {
        run.end_before_streaming();
        tracing::info!("snapshot done; snapshot = \"initial_only\": stopping");
        return Ok(());
    };
    stream(ctx, run, opened, connection, identity, committed).await
}

/// What a run holds once its slot is secured.
struct Opened {
    catalog: PgCatalog,
    /// A standby (16+): the slot lives there; what it cannot write goes to the primary.
    standby: Option<Arc<Standby>>,
    slot_state: SlotStateFile,
    capture: Capture,
    tables: Vec<CapturedTable>,
    signal_table: Option<CapturedTable>,
    slot_name: String,
    system: SystemIdentity,
    /// A new slot's exported snapshot and consistent point.
    exported: Option<(String, Lsn)>,
    slot: super::setup::SlotInfo,
}

impl Opened {
    /// Where the initial snapshot reads the tables: a new slot's consistent point, else the
    /// slot's confirmed position.
    fn consistent_point(&self) -> Lsn {
        self.exported
            .as_ref()
            .map_or(self.slot.confirmed_flush, |e| e.1)
    }
}

/// Connects, plans what is captured and secures the slot: a new pipeline's slot is created
/// with an exported snapshot (the database exactly at the slot's consistent point, to read the
/// tables under), recorded before it exists. Returns it with the replication connection.
async fn open_slot(ctx: &RunContext) -> Result<(Opened, ReplicationConnection), PipelineError> {
    let config = &ctx.config;
    let catalog = PgCatalog::connect(config).await?;
    catalog.check_wal_level().await?;
    let standby = super::standby::detect(&catalog, config)
        .await?
        .map(Arc::new);
    let writer: Option<&PgCatalog> = match &standby {
        None => Some(&catalog),
        Some(standby) => standby.primary.as_deref(),
    };
    ctx.board.update(|s| s.standby = None);
    let mut slot_state = match config.state_store {
        StateStoreKind::Local => SlotStateFile::open(&config.state_dir(), &config.name)?,
        StateStoreKind::Kafka => SlotStateFile::open_in(
            Arc::new(
                KafkaStateStore::open(&config.kafka, config.state_topic(), &config.name).await?,
            ),
            &config.name,
        )?,
    };
    let mut capture = plan_capture(&catalog, writer, config, &slot_state).await?;
    let tables = capture.tables.clone();
    let signal_table = capture.signal_table.take();
    let slot_name = config.slot_name();
    let (mut connection, system) = replication_connection(config).await?;
    if slot_state
        .record()
        .is_some_and(|r| r.wal_budget_drop.is_some())
        && catalog.slot(&slot_name).await?.is_some()
    {
        // The WAL budget meant to drop this slot and did not finish (or a run that recreated
        // it stopped before recording it): it goes, the captured tables are republished.
        catalog.drop_slot(&slot_name).await?;
    }
    let mut exported: Option<(String, Lsn)> = None;
    if config.source.snapshot != SnapshotMode::Never
        && slot_state.record().is_none_or(|r| r.creating)
        && catalog.slot(&slot_name).await?.is_none()
    {
        // Recorded first: a crash between the slot's creation and its record must not leave a
        // slot the next run adopts as someone else's (and so never snapshots).
        tokio::task::block_in_place(|| {
            slot_state.save(SlotRecord::creating(&system.systemid, &slot_name))
        })
        .map_err(|e| state_unwritable(&slot_state, e))?;
        let creation = create_slot_exporting_snapshot(&mut connection, &slot_name, config);
        exported = Some(match &standby {
            Some(standby) => while_creating_on(standby, &ctx.board, creation).await?,
            None => {
                super::slot_wait::while_creating(config, &ctx.board, &slot_name, creation).await?
            }
        });
        crate::crash_point!("snapshot::slot_created");
    }
    let republished: Vec<String> = tables
        .iter()
        .map(CapturedTable::qualified)
        .filter(|t| config.source.outbox.as_ref().is_none_or(|o| o.table != *t))
        .collect();
    let securing = secure_slot(
        &catalog,
        config,
        &slot_name,
        &system.systemid,
        &mut slot_state,
        exported.is_some(),
        &republished,
    );
    let slot = match &standby {
        // Only a slot still to be created waits for the primary.
        Some(standby) if exported.is_none() && catalog.slot(&slot_name).await?.is_none() => {
            while_creating_on(standby, &ctx.board, securing).await?
        }
        // On the primary, a slot still to be created (snapshot = "never") says what it waits
        // for, as above.
        None => super::slot_wait::while_creating(config, &ctx.board, &slot_name, securing).await?,
        _ => securing.await?,
    };
    let opened = Opened {
        catalog,
        standby,
        slot_state,
        capture,
        tables,
        signal_table,
        slot_name,
        system,
        exported,
        slot,
    };
    Ok((opened, connection))
}

/// The state file cannot be written.
fn state_unwritable(
    state: &SlotStateFile,
    error: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> PipelineError {
    PipelineError::fatal_with(
        format!("cannot write the state file {}", state.location()),
        "make state_dir writable",
        error,
    )
}

/// The initial snapshot, when the slot's record says one is pending: its plan made (or the
/// unfinished one resumed) and read under the exported snapshot. Returns the replication
/// connection to stream from, or `None` when nothing streams (`snapshot = "initial_only"`:
/// the slot was dropped).
async fn initial_snapshot(
    ctx: &RunContext,
    run: &mut RunSkeleton,
    opened: &mut Opened,
    connection: ReplicationConnection,
    identity: &SourceIdentity,
    committed: Option<&super::exactly_once::Committed>,
    outbox_table: Option<&str>,
) -> Result<Option<ReplicationConnection>, PipelineError> {
    let config = &ctx.config;
    let mode = config.source.snapshot;
    if mode == SnapshotMode::Never
        || !opened
            .slot_state
            .record()
            .is_some_and(|r| r.snapshot_pending)
    {
        return Ok(Some(connection));
    }
    run.show_budget();
    ctx.board.set_state(PipelineState::Snapshotting);
    let snapshot_tables: Vec<_> = opened
        .tables
        .iter()
        .filter(|t| outbox_table != Some(t.qualified().as_str()))
        .cloned()
        .collect();
    let consistent_point = opened.consistent_point();
    let exported_name = opened.exported.as_ref().map(|e| e.0.as_str());
    let slot_state = &mut opened.slot_state;
    let mut plan = match slot_state.record().and_then(|r| r.snapshot_plan.clone()) {
        Some(plan) => plan,
        None => {
            let plan = SnapshotPlan::build(config, &snapshot_tables, exported_name).await?;
            save_plan(slot_state, &plan)?;
            plan
        }
    };
    snapshot::run(
        SnapshotContext {
            config,
            identity,
            producer: &run.producer,
            deliveries: &mut run.deliveries,
            budget: &run.budget,
            consistent_point,
            shutdown: &ctx.shutdown,
            board: &ctx.board,
            exactly_once: committed.map(|c| c.snapshot_transactions(config)),
        },
        &mut plan,
        exported_name,
        |plan| save_plan(slot_state, plan),
    )
    .await?;
    if mode == SnapshotMode::InitialOnly {
        // Nothing streams: the slot would only retain WAL. A later run snapshots anew.
        drop(connection);
        tokio::time::sleep(Duration::from_millis(200)).await;
        opened.catalog.drop_slot(&opened.slot_name).await?;
        let _ = opened.slot_state.remove();
        return Ok(None);
    }
    tokio::task::block_in_place(|| opened.slot_state.set_snapshot_pending(false))
        .map_err(|e| state_unwritable(&opened.slot_state, e))?;
    Ok(Some(connection))
}

/// Streams from the slot through the delivery core until shutdown or an error, with the slot
/// monitor and the incremental snapshots beside it.
async fn stream(
    ctx: &RunContext,
    mut run: RunSkeleton,
    opened: Opened,
    connection: ReplicationConnection,
    identity: SourceIdentity,
    committed: Option<super::exactly_once::Committed>,
) -> Result<(), PipelineError> {
    let config = &ctx.config;
    let Opened {
        catalog,
        standby,
        slot_state,
        capture,
        signal_table,
        slot_name,
        system,
        slot,
        ..
    } = opened;
    let stream = start_streaming(
        connection,
        &catalog,
        standby.is_some(),
        config,
        &slot_name,
        &system,
    )
    .await?;

    run.streaming();

    let incremental_offsets = committed
        .as_ref()
        .map(|_| Arc::new(super::exactly_once::IncrementalOffsets::default()));
    let transactions = committed
        .as_ref()
        .zip(incremental_offsets.as_ref())
        .map(|(committed, offsets)| committed.stream_transactions(config, Arc::clone(offsets)));
    let core = run.start_core(
        config,
        &ctx.metrics,
        slot.confirmed_flush,
        record_position,
        transactions,
    )?;
    let catalog = Arc::new(catalog);
    let state = incremental::IncrementalState::newer(
        slot_state.record().and_then(|r| r.incremental.clone()),
        committed.as_ref().and_then(|c| c.incremental.clone()),
    );
    let partition_mode = capture.partition_mode;
    let incremental = incremental_run(
        &catalog,
        config,
        &identity,
        state,
        capture,
        slot.confirmed_flush,
        incremental_offsets,
    )
    .await?;
    let monitor = tokio::spawn(monitor_slot(
        Arc::clone(&catalog),
        standby.clone(),
        slot_name.clone(),
        Arc::clone(&ctx.board),
        Arc::clone(&ctx.progress),
        Duration::from_millis(config.source.progress_timeout_ms),
        ctx.shutdown.child_token(),
    ));
    // Aborted at teardown without cancelling its token first, as it always was.
    run.add_monitor(monitor, None);

    let heartbeat_interval = config.source.heartbeat_interval_ms;
    if heartbeat_interval > 0 && standby.as_ref().is_some_and(|s| s.primary.is_none()) {
        tracing::info!(
            "no heartbeats: a standby cannot write them and source.postgres.primary_url is not set (an idle or filtered-out database holds the slot's position back until the next captured change)"
        );
    }
    // The common chain (ExtractNewRecordState, RegexRouters) written by the encoder itself.
    let direct = core
        .transforms()
        .and_then(crate::transform::Direct::of)
        .filter(|direct| super::unwrapped::supports(direct, &config.kafka.events))
        .map(Arc::new);
    if direct.is_some() {
        tracing::debug!("[transforms]: the encoder writes the unwrapped rows itself");
    }
    let source = PgSource {
        direct,
        transaction_schemas: None,
        message_schemas: None,
        ctx,
        identity,
        catalog: Arc::clone(&catalog),
        standby,
        stream,
        relations: HashMap::new(),
        table_metrics: HashMap::new(),
        hstore_types: std::collections::HashSet::new(),
        known_topics: std::mem::take(&mut run.known_topics),
        tx: None,
        last_commit_end: None,
        received: slot.confirmed_flush,
        slot_state,
        incremental,
        signal_table,
        last_table_refresh: Instant::now(),
        new_tables: Vec::new(),
        partition_mode,
        silence: SilenceWatch::new(config.source.silence_timeout_ms, Instant::now()),
        batch_size: run.batch_size,
        heartbeat: Heartbeat {
            interval: (heartbeat_interval > 0).then(|| Duration::from_millis(heartbeat_interval)),
            last: Instant::now(),
            running: None,
        },
        progress_log: (Instant::now(), slot.confirmed_flush),
        committed_position: committed.as_ref().and_then(|c| c.stream),
    };
    run.run(
        source,
        core,
        &ctx.shutdown,
        Duration::from_millis(config.source.status_interval_ms),
    )
    .await
}

/// The tables a run captures, listed before its slot and initial snapshot.
struct Capture {
    /// The signal table (published with the captured tables, never captured itself).
    signal_table: Option<CapturedTable>,
    /// The captured tables.
    tables: Vec<CapturedTable>,
    partition_mode: PartitionMode,
    /// `root`: the captured roots' partitions.
    partitions: Vec<super::partition::Partition>,
    /// `root`: partitions detached from a captured root (also while sluice was stopped).
    detached: std::collections::BTreeMap<String, u32>,
}

/// Creates the signal table, lists the captured tables and partitions, and makes the
/// publication hold them (on `writer`; checked on a standby without one). Listed before the
/// initial snapshot: a partition attached after this is snapshotted (again, at worst) under
/// its root, never missed.
async fn plan_capture(
    catalog: &PgCatalog,
    writer: Option<&PgCatalog>,
    config: &PgPipelineConfig,
    slot_state: &SlotStateFile,
) -> Result<Capture, PipelineError> {
    // The signal table exists before the publication is planned.
    let signal_table = incremental::create_signal_table(writer.unwrap_or(catalog), config).await?;
    let mut captured = catalog.captured_tables(config).await?;
    let partition_mode = catalog.partition_mode(config).await?;
    let mut partitions = match partition_mode {
        PartitionMode::Root => super::partition::leaves(catalog, &captured).await?,
        PartitionMode::Leaves => Vec::new(),
    };
    // Partitions detached from a captured root (also while sluice was stopped) stay out.
    let detached = match partition_mode {
        PartitionMode::Root => super::partition::detached(
            slot_state.record().and_then(|r| r.incremental.as_ref()),
            &captured,
            &partitions,
            &config.source.tables,
        ),
        PartitionMode::Leaves => std::collections::BTreeMap::new(),
    };
    captured.retain(|t| !detached.contains_key(&t.qualified()));
    partitions.retain(|p| !detached.contains_key(&p.root));
    let (tables, published) = with_signal_table(captured, signal_table.as_ref());
    match writer {
        Some(writer) => {
            writer.ensure_publication(config, &published).await?;
        }
        None => {
            catalog
                .check_publication_on_standby(config, &published)
                .await?;
        }
    }
    incremental::publish_signal_table(writer.unwrap_or(catalog), config).await?;
    Ok(Capture {
        signal_table,
        tables,
        partition_mode,
        partitions,
        detached,
    })
}

/// Opens the replication connection and identifies the server.
async fn replication_connection(
    config: &PgPipelineConfig,
) -> Result<(ReplicationConnection, SystemIdentity), PipelineError> {
    let mut pg_config = crate::pg_connect::PgConnectConfig::parse(&config.source.connection())
        .map_err(|e| {
            PipelineError::fatal_with("source.postgres.url is invalid", "see `sluice check`", e)
        })?;
    if config.state_store == StateStoreKind::Kafka {
        // Standbys may take over: a silent walsender of this instance must not hold the slot
        // longer than the failover timeout (the server's default is 60 s).
        let options = format!(
            "{} -c wal_sender_timeout={}",
            pg_config.pg.get_options().unwrap_or_default(),
            config.ha.failover_timeout_ms
        );
        pg_config.pg.options(options.trim_start());
    }
    let mut connection =
        ReplicationConnection::connect(&pg_config, &format!("sluice-{}", config.name))
            .await
            .map_err(|e| replication_error("cannot open the replication connection", e, config))?;
    let system = connection
        .identify_system()
        .await
        .map_err(|e| replication_error("IDENTIFY_SYSTEM failed", e, config))?;
    Ok((connection, system))
}

/// Applies `source.postgres.failover` (not on a standby) and starts streaming from the slot.
async fn start_streaming(
    mut connection: ReplicationConnection,
    catalog: &PgCatalog,
    on_standby: bool,
    config: &PgPipelineConfig,
    slot_name: &str,
    system: &SystemIdentity,
) -> Result<ReplicationStream, PipelineError> {
    if !on_standby {
        super::failover::apply(&mut connection, catalog, config, slot_name).await?;
    } else if config.source.failover == Some(true) {
        tracing::warn!(
            "source.postgres.failover = true is not applied: a slot on a standby cannot be a failover slot (PostgreSQL refuses); it is applied once the standby is promoted and the pipeline restarts"
        );
    }
    let publication = config.publication_name();
    let stream = connection
        .start_logical(
            slot_name,
            Lsn::ZERO,
            &[
                ("proto_version", "1"),
                ("publication_names", &publication),
                ("messages", "true"),
            ],
        )
        .await
        .map_err(|e| replication_error("START_REPLICATION failed", e, config))?;
    tracing::info!(
        system_id = %system.systemid,
        timeline = system.timeline,
        server_wal = %system.xlogpos,
        "streaming changes"
    );
    Ok(stream)
}

/// The incremental snapshots of the run, resuming `state`, with the captured partitions: under
/// `root` the detached ones and the roots' partitions; under `leaves` the partitions created
/// while sluice was stopped whose rows were all streamed, and this start's horizon for the next.
async fn incremental_run(
    catalog: &PgCatalog,
    config: &Arc<PgPipelineConfig>,
    identity: &SourceIdentity,
    state: Option<incremental::IncrementalState>,
    capture: Capture,
    confirmed_flush: Lsn,
    offsets: Option<Arc<super::exactly_once::IncrementalOffsets>>,
) -> Result<IncrementalRun, PipelineError> {
    let outbox_table = config.source.outbox.as_ref().map(|o| o.table.as_str());
    let captured: HashSet<String> = capture
        .tables
        .iter()
        .map(CapturedTable::qualified)
        .filter(|t| outbox_table != Some(t.as_str()))
        .collect();
    let (streamed, horizon) = match capture.partition_mode {
        PartitionMode::Leaves => {
            created_while_stopped(catalog, config, state.as_ref(), &captured).await?
        }
        PartitionMode::Root => (HashSet::new(), None),
    };
    let mut incremental = IncrementalRun::new(
        Arc::clone(config),
        identity.clone(),
        state,
        captured,
        confirmed_flush,
        offsets,
        &streamed,
    );
    match capture.partition_mode {
        PartitionMode::Root => {
            incremental.set_detached(capture.detached, confirmed_flush);
            incremental.on_partitions(&capture.partitions, confirmed_flush);
        }
        PartitionMode::Leaves => {
            incremental.set_leaves(&capture.tables);
            if let Some(horizon) = horizon {
                incremental.set_horizon(horizon, confirmed_flush);
            }
        }
    }
    Ok(incremental)
}

/// The captured tables without the signal table, and the tables to publish: the captured
/// ones and the signal table (read for signals, never captured).
fn with_signal_table(
    mut tables: Vec<CapturedTable>,
    signal: Option<&CapturedTable>,
) -> (Vec<CapturedTable>, Vec<CapturedTable>) {
    let mut published = tables.clone();
    if let Some(signal) = signal {
        tables.retain(|t| t.qualified() != signal.qualified());
        if !published
            .iter()
            .any(|t| t.qualified() == signal.qualified())
        {
            published.push(signal.clone());
        }
    }
    (tables, published)
}

/// The PostgreSQL source as the delivery core drives it: pgoutput messages in, row changes and
/// checkpoints (commit LSNs) out; confirms the watermark as the slot's flush position.
struct PgSource<'a> {
    ctx: &'a RunContext,
    /// `[transforms]` the encoder applies itself (see [`crate::transform::Direct`]).
    direct: Option<Arc<crate::transform::Direct>>,
    identity: SourceIdentity,
    catalog: Arc<PgCatalog>,
    /// The standby the pipeline decodes on, when `source.postgres.url` is one.
    standby: Option<Arc<Standby>>,
    stream: ReplicationStream,
    relations: HashMap<u32, Arc<RelationInfo>>,
    table_metrics: HashMap<String, Arc<TableMetrics>>,
    /// The OIDs of `hstore` types, from the Type messages sent before a Relation.
    hstore_types: std::collections::HashSet<u32>,
    known_topics: HashSet<String>,
    tx: Option<OpenTransaction>,
    /// The end LSN of the last transaction seen to commit since the start (Debezium's
    /// `source.sequence` starts with it).
    last_commit_end: Option<Lsn>,
    /// The newest WAL position received.
    received: Lsn,
    /// The slot's identity and the newest confirmed position, written before each checkpoint.
    slot_state: SlotStateFile,
    /// Incremental snapshots.
    incremental: IncrementalRun,
    /// The signal table, published with the captured tables.
    signal_table: Option<CapturedTable>,
    /// When the captured schemas were last listed for new tables.
    last_table_refresh: Instant,
    /// New tables waiting for the stream to pass the position where they were found
    /// (published by then), before their incremental snapshot starts.
    new_tables: Vec<(Lsn, String)>,
    /// `source.postgres.partitions` as resolved for the server.
    partition_mode: PartitionMode,
    /// How long the replication connection has been silent while read.
    silence: SilenceWatch,
    /// The producer's `batch.size` when sluice chose it (`None`: set by the operator).
    batch_size: Option<u64>,
    /// Heartbeat messages written to the WAL, so an idle or filtered-out database still lets
    /// the slot advance.
    heartbeat: Heartbeat,
    /// When progress was last logged, and the position then.
    progress_log: (Instant, Lsn),
    /// Exactly once: the position (commit LSN, index) of the newest record committed to
    /// Kafka; changes at or below it are skipped.
    committed_position: Option<(Lsn, u32)>,
    /// The transaction topic's schemas, registered when its first record needs them (JSON
    /// with schemas, Avro).
    transaction_schemas: Option<Arc<crate::event::schema::RenderedSchemas>>,
    /// The message topic's schemas, once registered ([`Self::prepare_message_schemas`]).
    message_schemas: Option<Arc<crate::event::schema::RenderedSchemas>>,
}

/// `heartbeat_interval_ms`: a heartbeat written off the loop, at most one at a time.
struct Heartbeat {
    interval: Option<Duration>,
    last: Instant,
    running: Option<JoinHandle<Result<(), PipelineError>>>,
}

/// Encodes the PostgreSQL source's changes into Debezium JSON records.
struct PgEncoder {
    options: EncodeOptions,
    /// `[transforms]` applied in the encoder (rows of tables other than the outbox).
    direct: Option<Arc<crate::transform::Direct>>,
    identity: SourceIdentity,
    message_metrics: Arc<TableMetrics>,
}

impl PgEncoder {
    /// Where `item` came from, for the latency histogram and the per-table counters.
    fn origin(&self, item: &Item) -> Origin {
        let (commit_unix_micros, table) = match item {
            Item::Row(change) => (change.commit_unix_micros, &change.relation.metrics),
            Item::Message(message) => (message.commit_unix_micros, &self.message_metrics),
            Item::Raw {
                commit_unix_micros, ..
            } => (*commit_unix_micros, &self.message_metrics),
        };
        Origin {
            commit_unix_micros,
            table: Arc::clone(table),
        }
    }
}

impl Encode<Item> for PgEncoder {
    fn encode(&self, item: &Item, out: &mut Vec<OutRecord>) -> Origin {
        match item {
            Item::Row(change) => {
                #[cfg(feature = "failpoints")]
                fail::fail_point!("encode::change");
                match &self.direct {
                    Some(direct) if super::unwrapped::applies(change) => {
                        super::unwrapped::encode_unwrapped(
                            change,
                            &self.options,
                            &self.identity,
                            direct,
                            out,
                        );
                    }
                    _ => encode_change(change, &self.options, out),
                }
            }
            Item::Message(message) => {
                out.push(encode_message(message, &self.identity, &self.options));
            }
            Item::Raw { record, .. } => out.push(record.clone()),
        }
        self.origin(item)
    }

    fn transforms_applied(&self, item: &Item) -> bool {
        matches!(item, Item::Row(change) if self.direct.is_some() && super::unwrapped::applies(change))
    }

    fn describe(&self, item: &Item, reason: &str) -> FailedChange {
        let (topic, table, commit_lsn, lsn, tx_index, xid) = match item {
            Item::Row(change) => (
                Arc::clone(&change.relation.topic),
                change.relation.name.clone(),
                change.commit_lsn,
                change.lsn,
                change.tx_index,
                Some(change.xid),
            ),
            Item::Message(message) => (
                Arc::clone(&message.topic),
                format!("(message {})", message.prefix),
                message.commit_lsn,
                message.lsn,
                message.tx_index,
                message.xid,
            ),
            Item::Raw { record, .. } => (
                Arc::clone(&record.topic),
                "(schema change)".to_owned(),
                Lsn::ZERO,
                Lsn::ZERO,
                0,
                None,
            ),
        };
        let position = format!(
            "commit LSN {commit_lsn}, LSN {lsn}, index {tx_index} of transaction {}, table {table}",
            xid.map_or_else(|| "-".to_owned(), |x| x.to_string())
        );
        let description = serde_json::to_vec(&serde_json::json!({
            "table": table,
            "commit_lsn": commit_lsn.to_string(),
            "lsn": lsn.to_string(),
            "tx_index": tx_index,
            "txId": xid,
            "error": reason,
        }))
        .unwrap_or_default();
        FailedChange {
            reason: reason.to_owned(),
            topic,
            position,
            description,
            origin: self.origin(item),
        }
    }
}

impl Source for PgSource<'_> {
    type Change = Item;
    type Position = Lsn;
    type Message = Result<Option<ReplicationMessage>, ReplicationError>;
    type Encoder = PgEncoder;

    fn read(&mut self) -> impl std::future::Future<Output = Self::Message> {
        self.stream.next()
    }

    async fn on_message(
        &mut self,
        message: Self::Message,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<bool, PipelineError> {
        self.on_replication_message(message, intake).await
    }

    fn not_reading(&mut self) {
        self.silence.not_reading(Instant::now());
    }

    fn mid_transaction(&self) -> bool {
        self.tx.is_some()
    }

    async fn before_checkpoint(
        &mut self,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<bool, PipelineError> {
        // Operators' requests first, so this checkpoint can record them.
        for (seq, signal) in self.ctx.board.take_signals() {
            self.incremental
                .accept(&signal, intake.last_checkpoint(), seq);
        }
        match self.silence.check(Instant::now()) {
            Silence::Fine => Ok(false),
            Silence::Ping => Ok(true),
            Silence::Dead(silent) => Err(silent_connection(silent)),
        }
    }

    /// Sends a standby status update whose flush position is the watermark — after recording
    /// it in the state store: the slot must never be ahead of it (see slot_state).
    async fn confirm(&mut self, watermark: Lsn, reply: bool) -> Result<(), PipelineError> {
        let state = &mut self.slot_state;
        let incremental = self.incremental.confirmed(watermark);
        state.advance(watermark, incremental).await.map_err(|e| {
            PipelineError::fatal_with(
                format!(
                    "cannot write the state file {}",
                    self.slot_state.location()
                ),
                "make state_dir writable (and give it space); nothing was confirmed past the last recorded position",
                e,
            )
        })?;
        // The admin API's requests now in the state file: their callers get their answer.
        self.ctx
            .board
            .signals_recorded(self.incremental.confirmed_request());
        let send =
            self.stream
                .send_status(self.received.max(watermark), watermark, watermark, reply);
        // A connection whose send buffer is full does not take even a status update: bounded
        // by the silence timeout, so a stuck write is a dead connection too.
        let result = match self.silence.timeout() {
            Some(timeout) => match tokio::time::timeout(timeout, send).await {
                Ok(result) => result,
                Err(_) => return Err(silent_connection(timeout)),
            },
            None => send.await,
        };
        result.map_err(|error| {
            replication_error(
                "cannot send the checkpoint (standby status update)",
                error,
                &self.ctx.config,
            )
        })
    }

    async fn after_checkpoint(
        &mut self,
        intake: &mut Intake<Item, Lsn>,
        watermark: Lsn,
    ) -> Result<(), PipelineError> {
        let last_checkpoint = intake.last_checkpoint();
        bounded(
            "refreshing the captured tables",
            self.refresh_tables(last_checkpoint),
        )
        .await?;
        self.incremental.poll(last_checkpoint).await;
        let (incremental, refused) = (self.incremental.status(), self.incremental.refused());
        self.ctx.board.update(|s| {
            s.incremental_snapshot = incremental;
            s.refused_snapshot_requests = refused;
        });
        let (logged_at, logged_received) = self.progress_log;
        if logged_at.elapsed() >= Duration::from_secs(10) && self.received != logged_received {
            self.progress_log = (Instant::now(), self.received);
            tracing::info!(received = %self.received, %watermark, "progress");
        }
        let writer = self.writer();
        self.heartbeat.tick(writer.as_ref()).await;
        Ok(())
    }

    fn encoder(&mut self) -> PgEncoder {
        PgEncoder {
            direct: self.direct.clone(),
            options: EncodeOptions {
                tombstones: self.ctx.config.kafka.tombstones_on_delete(),
                events: self.ctx.config.kafka.events.clone(),
                now_unix_nanos: crate::delivery::unix_nanos_now(),
            },
            identity: self.identity.clone(),
            message_metrics: Arc::clone(
                self.table_metrics
                    .entry("(messages)".to_owned())
                    .or_insert_with(|| Arc::new(TableMetrics::new("(messages)"))),
            ),
        }
    }
}

impl Heartbeat {
    /// Writes a heartbeat when one is due and the previous one has finished.
    async fn tick(&mut self, catalog: Option<&Arc<PgCatalog>>) {
        let (Some(interval), Some(catalog)) = (self.interval, catalog) else {
            return;
        };
        if self.last.elapsed() < interval {
            return;
        }
        if let Some(previous) = self.running.take() {
            if !previous.is_finished() {
                self.running = Some(previous);
                return;
            }
            if let Ok(Err(error)) = previous.await {
                tracing::warn!(error = %error.chain(), "heartbeat failed");
            }
        }
        self.last = Instant::now();
        let catalog = Arc::clone(catalog);
        self.running = Some(tokio::spawn(async move { catalog.emit_heartbeat().await }));
    }
}

impl PgSource<'_> {
    /// Where this run writes WAL (heartbeats, publication changes): the server itself, or on
    /// a standby the primary (`None` without `source.postgres.primary_url`).
    fn writer(&self) -> Option<Arc<PgCatalog>> {
        match &self.standby {
            None => Some(Arc::clone(&self.catalog)),
            Some(standby) => standby.writer(&self.catalog),
        }
    }

    /// Handles one read from the replication stream.
    async fn on_replication_message(
        &mut self,
        message: Result<Option<ReplicationMessage>, ReplicationError>,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<bool, PipelineError> {
        self.silence.heard(Instant::now());
        let message = message
            .map_err(|e| replication_error("the replication stream failed", e, &self.ctx.config))?
            .ok_or_else(|| {
                PipelineError::retryable(
                    "the server ended the replication stream",
                    ProtocolError::StreamEnded,
                )
            })?;
        match message {
            ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                data,
                ..
            } => {
                self.ctx.metrics.received_bytes.increment(data.len() as u64);
                self.received = self.received.max(wal_end).max(wal_start);
                let size = data.len();
                let decoded = pgoutput::decode(data).map_err(|e| {
                    PipelineError::fatal_with(
                        format!("cannot decode the pgoutput message at {wal_start}"),
                        "this is a bug in sluice or an unsupported server version: report it with the server version",
                        e,
                    )
                })?;
                self.on_pgoutput(decoded, wal_start, size, intake).await?;
            }
            ReplicationMessage::Keepalive {
                wal_end,
                reply_requested,
                ..
            } => {
                self.received = self.received.max(wal_end);
                if self.tx.is_none() {
                    intake.checkpoint(wal_end);
                }
                return Ok(reply_requested);
            }
        }
        Ok(false)
    }

    async fn on_pgoutput(
        &mut self,
        message: PgOutputMessage,
        lsn: Lsn,
        size: usize,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<(), PipelineError> {
        match message {
            PgOutputMessage::Begin(begin) => {
                self.ctx.metrics.transactions.increment(1);
                self.tx = Some(OpenTransaction {
                    commit_lsn: begin.final_lsn,
                    xid: begin.xid,
                    commit_unix_micros: begin.commit_time.unix_micros(),
                    next_index: 0,
                    events: 0,
                    collections: Vec::new(),
                });
                if self.ctx.config.kafka.events.provide_transaction_metadata {
                    // Debezium's BEGIN, for every transaction the server sends (one whose
                    // changes are all skipped too: its END counts 0 events).
                    let topic = self.transaction_topic();
                    self.ensure_topic(&topic).await?;
                    self.prepare_transaction_schemas(&topic).await?;
                    let wrap = TransactionWrap {
                        schemas: self.transaction_schemas.as_deref(),
                        events: &self.ctx.config.kafka.events,
                    };
                    if let Some(tx) = self.tx.as_mut() {
                        let (key, value) = crate::event::transaction_event(
                            tx.xid,
                            lsn.0,
                            tx.commit_unix_micros.div_euclid(1000),
                            None,
                        );
                        let headers = transaction_headers(tx, lsn);
                        let committed = committed_already(
                            self.committed_position,
                            tx.commit_lsn,
                            tx.next_index,
                        );
                        tx.next_index += 1;
                        if !committed {
                            admit_transaction_event(&topic, tx, key, value, headers, wrap, intake);
                        }
                    }
                }
            }
            PgOutputMessage::Commit(commit) => {
                if let Some(tx) = self.tx.take() {
                    self.incremental.on_commit(tx.xid);
                    if self.ctx.config.kafka.events.provide_transaction_metadata {
                        // Debezium's END: the transaction's events per table.
                        let (key, value) = crate::event::transaction_event(
                            tx.xid,
                            commit.commit_lsn.0,
                            tx.commit_unix_micros.div_euclid(1000),
                            Some(&tx.collections),
                        );
                        let headers = transaction_headers(&tx, tx.commit_lsn);
                        let topic = self.transaction_topic();
                        let wrap = TransactionWrap {
                            schemas: self.transaction_schemas.as_deref(),
                            events: &self.ctx.config.kafka.events,
                        };
                        if !committed_already(self.committed_position, tx.commit_lsn, tx.next_index)
                        {
                            admit_transaction_event(&topic, &tx, key, value, headers, wrap, intake);
                        }
                    }
                }
                intake.checkpoint(commit.end_lsn);
                self.last_commit_end = Some(commit.end_lsn);
            }
            PgOutputMessage::Relation(relation) => {
                self.on_relation(relation, intake).await?;
            }
            PgOutputMessage::Insert { relation_id, new } => {
                let rel = self.relation(relation_id)?;
                if let Some(outbox) = rel.outbox.clone() {
                    let topic = outbox.topic_of(&new).ok_or_else(|| {
                        PipelineError::fatal(
                            format!("an outbox row at LSN {lsn} has a NULL aggregate type: it cannot be routed to a topic"),
                            "make the outbox's aggregate type column NOT NULL, then restart (this row is skipped only by fixing or deleting it before it is decoded again)",
                        )
                    })?;
                    self.ensure_topic(&topic).await?;
                    outbox
                        .prepare(
                            &new,
                            self.identity.registry.as_deref(),
                            &self.ctx.config.kafka.events,
                            &rel.name,
                        )
                        .await?;
                }
                let kind = ChangeKind::Insert { new };
                self.push_row(relation_id, kind, lsn, size, intake)?;
            }
            PgOutputMessage::Update {
                relation_id,
                old,
                key,
                new,
            } => {
                let rel = self.relation(relation_id)?;
                let (old, old_is_key_only) = match (old, key) {
                    (Some(old), _) => (Some(old), false),
                    (None, Some(key)) => (Some(key), true),
                    (None, None) => (None, false),
                };
                let key_changed = old.as_ref().is_some_and(|old| key_differs(&rel, old, &new));
                let mut new = new;
                if self.ctx.config.source.unchanged_toast == UnchangedToast::Reread {
                    let old = old.as_ref().filter(|_| !old_is_key_only);
                    bounded(
                        "re-reading unchanged TOASTed values",
                        self.reread_toast(&rel, old, &mut new),
                    )
                    .await?;
                }
                let kind = ChangeKind::Update {
                    old,
                    old_is_key_only,
                    new,
                    key_changed,
                };
                self.push_row(relation_id, kind, lsn, size, intake)?;
            }
            PgOutputMessage::Delete {
                relation_id,
                old,
                key,
            } => {
                let (old, old_is_key_only) = match (old, key) {
                    (Some(old), _) => (old, false),
                    (None, Some(key)) => (key, true),
                    (None, None) => (TupleData(Vec::new()), true),
                };
                let kind = ChangeKind::Delete {
                    old,
                    old_is_key_only,
                };
                self.push_row(relation_id, kind, lsn, size, intake)?;
            }
            PgOutputMessage::Truncate { relation_ids, .. } => {
                for relation_id in relation_ids {
                    self.push_row(relation_id, ChangeKind::Truncate, lsn, size, intake)?;
                }
            }
            PgOutputMessage::Message {
                transactional,
                lsn: message_lsn,
                prefix,
                content,
            } => {
                if prefix == WATERMARK_PREFIX {
                    self.on_watermark(&content, message_lsn, intake).await?;
                    if !transactional && self.tx.is_none() {
                        intake.checkpoint(message_lsn);
                    }
                    return Ok(());
                }
                if prefix == HEARTBEAT_MESSAGE_PREFIX {
                    if !transactional && self.tx.is_none() {
                        intake.checkpoint(message_lsn);
                    }
                    return Ok(());
                }
                let topic = format!("{}.message", self.identity.server_name);
                self.ensure_topic(&topic).await?;
                self.prepare_message_schemas(&topic).await?;
                let (commit_lsn, xid, commit_unix_micros, tx_index) = match &mut self.tx {
                    Some(tx) if transactional => {
                        let index = tx.next_index;
                        tx.next_index += 1;
                        (tx.commit_lsn, Some(tx.xid), tx.commit_unix_micros, index)
                    }
                    _ => (message_lsn, None, unix_micros_now(), 0),
                };
                let message = LogicalMessage {
                    topic: Arc::from(topic),
                    prefix,
                    content,
                    lsn: message_lsn,
                    commit_lsn,
                    tx_index,
                    xid,
                    commit_unix_micros,
                    last_commit_end: self.last_commit_end,
                    schemas: self.message_schemas.clone(),
                };
                if !committed_already(self.committed_position, commit_lsn, tx_index) {
                    intake.admit(Item::Message(message), size * 2 + 256, 1);
                }
                if !transactional && self.tx.is_none() {
                    intake.checkpoint(message_lsn);
                }
            }
            PgOutputMessage::Type { id, name, .. } => {
                if name == "hstore" {
                    self.hstore_types.insert(id);
                }
            }
            PgOutputMessage::Origin { .. } => {}
        }
        Ok(())
    }

    async fn on_relation(
        &mut self,
        mut relation: pgoutput::Relation,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<(), PipelineError> {
        let mut qualified = format!("{}.{}", relation.namespace, relation.name);
        // `root`: a partition of a partitioned table that was detached from a captured root.
        let mut under_detached = false;
        if self.partition_mode == PartitionMode::Root {
            // PostgreSQL (15.18 at least) publishes a partition's changes under the partition's
            // own name, despite publish_via_partition_root, once a sibling was detached in the
            // walsender's lifetime: a partition of a captured root is that root (also when it
            // was captured as a plain table before it was attached).
            let root = bounded(
                "looking up the partition's root",
                self.catalog.root_of(&relation.namespace, &relation.name),
            )
            .await?;
            if let Some(root) = root.as_ref().filter(|root| self.incremental.captures(root))
                && let Some((schema, table)) = crate::config::parse_table_name(root)
            {
                tracing::debug!(partition = %qualified, table = %root, "a partition's changes are its root's");
                relation.namespace = schema.to_owned();
                relation.name = table.to_owned();
                qualified = root.clone();
            } else if let Some(root) = root {
                under_detached = self
                    .incremental
                    .state()
                    .detached_partitions
                    .contains_key(&root);
            }
        }
        let mut key_names = bounded(
            "looking up the table's primary key",
            self.catalog.primary_key(relation.id),
        )
        .await?;
        if key_names.is_empty() && relation.replica_identity != ReplicaIdentity::Full {
            // No primary key: use the replica identity's columns (a unique index), if any.
            key_names = relation
                .columns
                .iter()
                .filter(|c| c.is_key)
                .map(|c| c.name.clone())
                .collect();
        }
        let metrics = Arc::clone(
            self.table_metrics
                .entry(qualified.clone())
                .or_insert_with(|| Arc::new(TableMetrics::new(&qualified))),
        );
        let mut info = RelationInfo::new(
            &self.identity,
            &relation.namespace,
            &relation.name,
            relation
                .columns
                .into_iter()
                .map(|c| (c.name, c.type_oid, c.type_modifier))
                .collect(),
            &key_names,
            relation.replica_identity,
            metrics,
        );
        let user_types = bounded(
            "looking up the table's column types",
            self.catalog.user_types(&info.user_type_oids()),
        )
        .await?;
        info.resolve_types(&user_types);
        // `leaves`: a rule naming a partitioned table covers its partitions.
        let ancestors = if self.partition_mode == PartitionMode::Leaves {
            bounded(
                "looking up the partition's partitioned tables",
                self.catalog.ancestors(relation.id),
            )
            .await?
        } else {
            Vec::new()
        };
        info.apply_rules(&self.ctx.config.source, ancestors);
        if self.partition_mode == PartitionMode::Root
            && !info.excluded
            && !self.incremental.captures(&qualified)
            && (under_detached
                || self
                    .detached_partition(&relation.namespace, &relation.name, relation.id)
                    .await?)
        {
            // Published under its own name after it was detached from a captured root (or
            // under one of its partitions' names).
            info.excluded = true;
        }
        info.mark_hstore(|oid| self.hstore_types.contains(&oid));
        let events = &self.ctx.config.kafka.events;
        let is_outbox = self
            .ctx
            .config
            .source
            .outbox
            .as_ref()
            .is_some_and(|o| o.table == qualified);
        let mut catalog_columns = Vec::new();
        if !info.excluded {
            // The catalog is read now, the Relation message describes the table where decoding
            // is. They can disagree on a column's type two ways: the catalog is ahead (an
            // `ALTER … TYPE` committed after the changes being decoded), or behind (the
            // walsender decoded a transaction as soon as its commit record was flushed, before
            // the committing backend made it visible to other sessions: a short window a
            // loaded server widens). The second passes within moments, so a disagreement is
            // read again a few times; what still disagrees follows the Relation message.
            let read = || {
                bounded(
                    "reading the table's column types",
                    super::schema::column_catalog(&self.catalog, relation.id),
                )
            };
            let disagreeing = |columns: &[super::schema::ColumnCatalog]| -> Vec<String> {
                info.columns
                    .iter()
                    .filter(|c| columns.iter().any(|k| k.name == c.name && !k.describes(c)))
                    .map(|c| c.name.clone())
                    .collect()
            };
            let mut columns = read().await?;
            let mut moved = disagreeing(&columns);
            for _ in 0..CATALOG_REREADS {
                if moved.is_empty() {
                    break;
                }
                tokio::time::sleep(CATALOG_REREAD_PAUSE).await;
                columns = read().await?;
                moved = disagreeing(&columns);
            }
            if !moved.is_empty() {
                tracing::warn!(table = %qualified, columns = ?moved, "the catalog and the decoded Relation message disagree on these columns' types (a type change committed after the changes being decoded): their schemas follow the Relation message");
            }
            info.mark_not_null(&columns);
            // The outbox's records are routed events: their schemas are the outbox's own.
            if events.needs_schemas() && !is_outbox {
                info.prepare_schemas(&columns, events, self.identity.registry.as_deref())
                    .await?;
            }
            catalog_columns = columns;
        }
        if self.incremental.is_signal_table(&qualified) {
            // Signals are read, not published.
            info.excluded = true;
        } else if !info.excluded && !is_outbox && !self.incremental.captures(&qualified) {
            let streamed = self.streamed_whole(&qualified).await?;
            self.incremental
                .on_table(&qualified, self.received, streamed);
        }
        match self.ctx.config.source.outbox.as_ref() {
            _ if info.excluded => {}
            Some(outbox) if outbox.table == qualified => {
                let mut layout =
                    OutboxLayout::resolve(&info.columns, outbox).map_err(|(key, problem)| {
                        PipelineError::fatal(
                            format!("{key}: {problem}"),
                            format!("set {key} to one of the table's columns"),
                        )
                    })?;
                let events = &self.ctx.config.kafka.events;
                if events.needs_schemas() {
                    layout.schemas = Some(super::schema::outbox_schemas(
                        &info,
                        &catalog_columns,
                        events,
                        &layout,
                    ));
                }
                info.outbox = Some(Arc::new(layout));
            }
            _ => self.ensure_topic(&info.topic).await?,
        }
        tracing::debug!(table = %qualified, columns = info.columns.len(), "relation");
        if let Some(previous) = self.relations.get(&relation.id).cloned()
            && !info.excluded
            && let Some(topic) = self.ctx.config.kafka.schema_changes_topic.clone()
        {
            self.push_schema_change(&topic, &previous, &info, intake)
                .await?;
        }
        self.relations.insert(relation.id, Arc::new(info));
        Ok(())
    }

    /// Queues a schema change event when the table's columns differ from those of its previous
    /// Relation message (a rename shows as a drop and an add: pgoutput sends names only).
    async fn push_schema_change(
        &mut self,
        topic: &str,
        previous: &RelationInfo,
        next: &RelationInfo,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<(), PipelineError> {
        let column = |c: &super::encode::ColumnInfo| serde_json::json!({ "name": c.name, "type_oid": c.type_oid, "type_modifier": c.type_modifier });
        let mut changes = Vec::new();
        for c in &next.columns {
            match previous.columns.iter().find(|p| p.name == c.name) {
                None => changes.push(serde_json::json!({ "column": c.name, "change": "added", "type_oid": c.type_oid })),
                Some(p) if p.type_oid != c.type_oid || p.type_modifier != c.type_modifier => {
                    changes.push(serde_json::json!({ "column": c.name, "change": "type_changed", "type_oid_before": p.type_oid, "type_oid": c.type_oid }));
                }
                Some(_) => {}
            }
        }
        for p in &previous.columns {
            if !next.columns.iter().any(|c| c.name == p.name) {
                changes.push(serde_json::json!({ "column": p.name, "change": "dropped" }));
            }
        }
        if changes.is_empty() {
            return Ok(());
        }
        self.ensure_topic(topic).await?;
        let (commit_lsn, xid, commit_unix_micros, tx_index) = match &mut self.tx {
            Some(tx) => {
                let index = tx.next_index;
                tx.next_index += 1;
                (tx.commit_lsn, Some(tx.xid), tx.commit_unix_micros, index)
            }
            None => (self.received, None, unix_micros_now(), 0),
        };
        tracing::info!(table = %next.name, changes = changes.len(), "schema change");
        let value = serde_json::json!({
            "table": next.name,
            "changes": changes,
            "columns": next.columns.iter().map(column).collect::<Vec<_>>(),
            "columns_before": previous.columns.iter().map(column).collect::<Vec<_>>(),
            "source": { "lsn": commit_lsn.0, "txId": xid, "ts_ms": commit_unix_micros / 1000 },
            "ts_ms": unix_micros_now() / 1000,
        });
        let record = OutRecord {
            partition: None,
            topic: Arc::from(topic),
            key: Some(
                serde_json::to_vec(&serde_json::json!({ "table": next.name })).unwrap_or_default(),
            ),
            value: Some(serde_json::to_vec(&value).unwrap_or_default()),
            headers: vec![
                (
                    crate::event::HEADER_COMMIT_LSN.into(),
                    commit_lsn.0.to_string(),
                ),
                (crate::event::HEADER_LSN.into(), self.received.0.to_string()),
                (crate::event::HEADER_TX_INDEX.into(), tx_index.to_string()),
            ],
        };
        if committed_already(self.committed_position, commit_lsn, tx_index) {
            return Ok(());
        }
        admit_raw(intake, record, commit_unix_micros);
        Ok(())
    }

    /// A snapshot watermark: the closed chunk's rows are queued here, in stream order, and the
    /// next chunk starts.
    async fn on_watermark(
        &mut self,
        content: &[u8],
        lsn: Lsn,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<(), PipelineError> {
        let Some(chunk) = self.incremental.on_watermark(content, lsn).await else {
            self.incremental.maybe_start();
            return Ok(());
        };
        // A table that joined while running may have had no streamed change yet.
        self.ensure_topic(&chunk.relation.topic).await?;
        let commit_unix_micros = unix_micros_now();
        let tombstones = self.ctx.config.kafka.tombstones_on_delete();
        let rows_metric =
            metrics::counter!(m::SNAPSHOT_ROWS, "table" => chunk.relation.name.clone());
        rows_metric.increment(chunk.rows.len() as u64);
        let rows = chunk.rows.len();
        for (n, row) in chunk.rows.into_iter().enumerate() {
            let bytes: usize = row
                .0
                .iter()
                .map(|d| match d {
                    Datum::Text(b) | Datum::Binary(b) => b.len(),
                    _ => 4,
                })
                .sum();
            let size = (bytes * 2 + chunk.relation.envelope_overhead).max(1);
            let change = RowChange {
                size_hint: size,
                relation: Arc::clone(&chunk.relation),
                kind: ChangeKind::Read {
                    row,
                    marker: crate::event::SnapshotMarker::Incremental,
                },
                commit_lsn: lsn,
                lsn,
                tx_index: u32::try_from(n).unwrap_or(u32::MAX),
                xid: 0,
                commit_unix_micros,
                transaction: None,
                last_commit_end: self.last_commit_end,
            };
            let records = change.record_count(tombstones);
            intake.admit(Item::Row(change), size, records);
        }
        // A republication's tombstones: after the rows, at the same watermark.
        let first = rows;
        for (n, key) in chunk.tombstones.into_iter().enumerate() {
            let index = u32::try_from(first + n).unwrap_or(u32::MAX);
            let record = OutRecord {
                partition: None,
                topic: Arc::clone(&chunk.relation.topic),
                key: Some(key),
                value: None,
                headers: super::encode::position_headers(lsn, lsn, index),
            };
            admit_raw(intake, record, commit_unix_micros);
        }
        self.incremental.maybe_start();
        Ok(())
    }

    /// `unchanged_toast = "reread"`: reads the unchanged TOASTed values `new` lacks (and the
    /// old full row doesn't hold) from the table by the row's key. They are the current values,
    /// possibly newer than this change; a row that is gone leaves them unavailable.
    async fn reread_toast(
        &self,
        relation: &RelationInfo,
        old: Option<&TupleData>,
        new: &mut TupleData,
    ) -> Result<(), PipelineError> {
        let missing: Vec<usize> = new
            .0
            .iter()
            .enumerate()
            .filter(|(i, d)| {
                matches!(d, Datum::UnchangedToast)
                    && !old.is_some_and(|old| matches!(old.0.get(*i), Some(Datum::Text(_))))
            })
            .map(|(i, _)| i)
            .collect();
        if missing.is_empty() || relation.key_columns.is_empty() {
            return Ok(());
        }
        let Some((schema, table)) = crate::config::parse_table_name(&relation.name) else {
            return Ok(());
        };
        // The key's values are parameters in text form (their type inferred from the column).
        let mut conditions = Vec::with_capacity(relation.key_columns.len());
        let mut params = Vec::with_capacity(relation.key_columns.len());
        for &index in &relation.key_columns {
            let column = quote_ident(&relation.columns[index].name);
            match new.0.get(index) {
                Some(Datum::Text(value)) => {
                    let Ok(value) = std::str::from_utf8(value) else {
                        return Ok(());
                    };
                    params.push(crate::sql::TextParam(value));
                    conditions.push(format!("{column} = ${}", params.len()));
                }
                Some(Datum::Null) => conditions.push(format!("{column} IS NULL")),
                _ => return Ok(()),
            }
        }
        let columns: Vec<String> = missing
            .iter()
            .map(|&i| crate::sql::pg_text_output(&quote_ident(&relation.columns[i].name)))
            .collect();
        let sql = format!(
            "SELECT {} FROM {}.{} WHERE {}",
            columns.join(", "),
            quote_ident(schema),
            quote_ident(table),
            conditions.join(" AND ")
        );
        let typed: Vec<(
            &(dyn tokio_postgres::types::ToSql + Sync),
            tokio_postgres::types::Type,
        )> = params
            .iter()
            .map(|p| (p as _, tokio_postgres::types::Type::UNKNOWN))
            .collect();
        let rows = self
            .catalog
            .client()
            .query_typed(&sql, &typed)
            .await
            .map_err(|e| crate::error::classify_pg("cannot re-read unchanged TOASTed values", e))?;
        let Some(row) = rows.first() else {
            return Ok(());
        };
        for (n, &index) in missing.iter().enumerate() {
            new.0[index] = snapshot::text_datum(row.get::<_, Option<&str>>(n));
        }
        Ok(())
    }

    /// Every `table_refresh_interval_ms`: lists the captured schemas for tables created in or
    /// moved into them while running, brings the publication in step (tables of schemas
    /// published table by table, because of row filters or column lists, are not published
    /// by PostgreSQL on their own), and once the stream has passed the position where they were
    /// found, snapshots them (`snapshot_new_tables`) — even when no change of theirs has
    /// been streamed.
    async fn refresh_tables(&mut self, last_checkpoint: Lsn) -> Result<(), PipelineError> {
        crate::delay_point!("stream::refresh_tables");
        let received = self.received;
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.new_tables)
            .into_iter()
            .partition(|(at, _)| *at <= received);
        self.new_tables = waiting;
        for (_, table) in ready {
            let streamed = self.streamed_whole(&table).await?;
            self.incremental.on_table(&table, last_checkpoint, streamed);
        }
        let config = Arc::clone(&self.ctx.config);
        let interval = config.source.table_refresh_interval_ms;
        if interval == 0 || self.last_table_refresh.elapsed() < Duration::from_millis(interval) {
            return Ok(());
        }
        self.last_table_refresh = Instant::now();
        let mut tables = match self.catalog.captured_tables(&config).await {
            Ok(tables) => tables,
            Err(error) => {
                tracing::warn!(error = %error.chain(), "cannot list the captured tables; trying again later");
                return Ok(());
            }
        };
        if self.partition_mode == PartitionMode::Leaves {
            self.incremental.set_leaves(&tables);
        }
        if self.partition_mode == PartitionMode::Root {
            match super::partition::leaves(&self.catalog, &tables).await {
                Ok(mut partitions) => {
                    let detached = super::partition::detached(
                        Some(self.incremental.state()),
                        &tables,
                        &partitions,
                        &config.source.tables,
                    );
                    tables.retain(|t| !detached.contains_key(&t.qualified()));
                    partitions.retain(|p| !detached.contains_key(&p.root));
                    self.incremental.set_detached(detached, last_checkpoint);
                    self.incremental.on_partitions(&partitions, last_checkpoint);
                }
                Err(error) => {
                    tracing::warn!(error = %error.chain(), "cannot list the partitions; trying again later");
                    return Ok(());
                }
            }
        }
        let (tables, published) = with_signal_table(tables, self.signal_table.as_ref());
        let outbox_table = config.source.outbox.as_ref().map(|o| o.table.clone());
        let new: Vec<String> = tables
            .iter()
            .map(CapturedTable::qualified)
            .filter(|t| {
                !self.incremental.captures(t)
                    && outbox_table.as_ref() != Some(t)
                    && !self.new_tables.iter().any(|(_, pending)| pending == t)
            })
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        if config.source.create_publication {
            // The same definition as at the start.
            match self.writer() {
                Some(writer) => {
                    writer.ensure_publication(&config, &published).await?;
                }
                None => {
                    self.catalog
                        .check_publication_on_standby(&config, &published)
                        .await?;
                }
            }
        }
        let at: String = self
            .catalog
            .client()
            .query_one(
                &format!("SELECT ({})::text", super::setup::SERVER_WAL_LSN),
                &[],
            )
            .await
            .map_err(|e| crate::error::classify_pg("cannot read the WAL position", e))?
            .get(0);
        let at: Lsn = at.parse().unwrap_or(self.received);
        for table in new {
            tracing::info!(table, "a table joined the captured schemas while running");
            self.new_tables.push((at, table));
        }
        Ok(())
    }

    /// `partitions = "root"`: whether the table `schema.table` (OID `oid`), not captured, seen
    /// in the stream, is a partition detached from a captured root (then remembered as such;
    /// see [`super::partition::detached`]).
    async fn detached_partition(
        &mut self,
        schema: &str,
        table: &str,
        oid: u32,
    ) -> Result<bool, PipelineError> {
        let qualified = format!("{schema}.{table}");
        if self.incremental.is_detached(&qualified, oid) {
            return Ok(true);
        }
        let candidate = CapturedTable {
            schema: schema.to_owned(),
            table: table.to_owned(),
            replica_identity: 'd',
            has_primary_key: false,
            ancestors: Vec::new(),
            oid,
        };
        let candidate = std::slice::from_ref(&candidate);
        let leaves = bounded(
            "listing a table's partitions",
            super::partition::leaves(&self.catalog, candidate),
        )
        .await?;
        let found = super::partition::detached(
            Some(self.incremental.state()),
            candidate,
            &leaves,
            &self.ctx.config.source.tables,
        );
        if found.is_empty() {
            return Ok(false);
        }
        let mut detached = self.incremental.state().detached_partitions.clone();
        detached.extend(found);
        self.incremental.set_detached(detached, self.received);
        Ok(true)
    }

    /// `partitions = "leaves"`: whether every row of `table`, new to the captured set, was
    /// streamed (see [`super::partition::streamed_since_creation`]).
    async fn streamed_whole(&self, table: &str) -> Result<bool, PipelineError> {
        if self.partition_mode != PartitionMode::Leaves {
            return Ok(false);
        }
        let Some((schema, name)) = crate::config::parse_table_name(table) else {
            return Ok(false);
        };
        bounded(
            "looking up a new partition",
            super::partition::streamed_since_creation(
                &self.catalog,
                &self.ctx.config.publication_name(),
                schema,
                name,
            ),
        )
        .await
    }

    /// Debezium's transaction topic, `<topic_prefix>.transaction`.
    fn transaction_topic(&self) -> String {
        format!("{}.transaction", self.ctx.config.kafka.topic_prefix)
    }

    /// Registers the transaction topic's schemas the first time its records need them (JSON
    /// with schemas, Avro): Debezium's `TransactionMetadataKey` / `TransactionMetadataValue`.
    async fn prepare_transaction_schemas(&mut self, topic: &str) -> Result<(), PipelineError> {
        let events = &self.ctx.config.kafka.events;
        if self.transaction_schemas.is_some() || !events.needs_schemas() {
            return Ok(());
        }
        let mut schemas = crate::event::schema::transaction_topic_schemas();
        schemas.registered = crate::registry::register_schemas(
            self.identity.registry.as_deref(),
            topic,
            &schemas,
            events,
            topic,
        )
        .await?;
        self.transaction_schemas = Some(Arc::new(schemas));
        Ok(())
    }

    /// Registers the message topic's schemas the first time a logical decoding message needs
    /// them (JSON with schemas, Avro): Debezium's `MessageKey` / `MessageValue`.
    async fn prepare_message_schemas(&mut self, topic: &str) -> Result<(), PipelineError> {
        let events = &self.ctx.config.kafka.events;
        if self.message_schemas.is_some() || !events.needs_schemas() {
            return Ok(());
        }
        let mut schemas = super::schema::message_topic_schemas(events);
        schemas.registered = crate::registry::register_schemas(
            self.identity.registry.as_deref(),
            topic,
            &schemas,
            events,
            topic,
        )
        .await?;
        self.message_schemas = Some(Arc::new(schemas));
        Ok(())
    }

    async fn ensure_topic(&mut self, topic: &str) -> Result<(), PipelineError> {
        let what = format!("creating topic {topic}");
        bounded(&what, self.ensure_topic_unbounded(topic)).await
    }

    async fn ensure_topic_unbounded(&mut self, topic: &str) -> Result<(), PipelineError> {
        let config = &self.ctx.config;
        if !config.kafka.create_topics || self.known_topics.contains(topic) {
            return Ok(());
        }
        kafka::ensure_topics(
            &config.kafka,
            &config.routed_topics(&[topic.to_owned()]),
            config.kafka.topic_partitions,
        )
        .await?;
        self.known_topics.insert(topic.to_owned());
        kafka::check_new_topic_batch_size(
            &config.kafka,
            topic,
            self.batch_size,
            &self.ctx.batch_size_cap,
        )
        .await
    }

    fn relation(&self, relation_id: u32) -> Result<Arc<RelationInfo>, PipelineError> {
        self.relations.get(&relation_id).cloned().ok_or_else(|| {
            PipelineError::retryable(
                format!("change for relation {relation_id} arrived before its Relation message"),
                ProtocolError::OutOfOrder,
            )
        })
    }

    fn push_row(
        &mut self,
        relation_id: u32,
        kind: ChangeKind,
        lsn: Lsn,
        size: usize,
        intake: &mut Intake<Item, Lsn>,
    ) -> Result<(), PipelineError> {
        let relation = self.relation(relation_id)?;
        if self.incremental.is_signal_table(&relation.name) {
            if let (ChangeKind::Insert { new }, Some(tx)) = (&kind, &self.tx) {
                self.incremental
                    .on_signal_row(&relation, new, tx.commit_lsn);
                self.incremental.maybe_start();
            }
            return Ok(());
        }
        if relation.excluded {
            return Ok(());
        }
        self.incremental.note(&relation, &kind);
        let op = match &kind {
            ChangeKind::Insert { .. } => crate::event::Op::Create,
            ChangeKind::Update { .. } => crate::event::Op::Update,
            ChangeKind::Delete { .. } => crate::event::Op::Delete,
            ChangeKind::Truncate => crate::event::Op::Truncate,
            ChangeKind::Read { .. } => crate::event::Op::Read,
        };
        if self.ctx.config.kafka.events.skipped_operations.skips(op) {
            // Debezium's `skipped.operations` (default `t`: a TRUNCATE emits nothing); an
            // update that changes the key is skipped whole, as an update.
            return Ok(());
        }
        if relation.outbox.is_some() && !matches!(kind, ChangeKind::Insert { .. }) {
            // Outbox rows are events once inserted; their updates and deletes (the usual
            // insert-then-delete in one transaction) emit nothing.
            return Ok(());
        }
        let tx = self.tx.as_mut().ok_or_else(|| {
            PipelineError::retryable(
                "a row change arrived outside a transaction",
                ProtocolError::OutOfOrder,
            )
        })?;
        let mut transaction = None;
        if self.ctx.config.kafka.events.provide_transaction_metadata && relation.outbox.is_none() {
            // A key change is two events (delete, create) of one table.
            let events = match &kind {
                ChangeKind::Update {
                    key_changed: true, ..
                } => 2,
                _ => 1,
            };
            let index = match tx.collections.iter().position(|(n, _)| *n == relation.name) {
                Some(index) => index,
                None => {
                    tx.collections.push((relation.name.clone(), 0));
                    tx.collections.len() - 1
                }
            };
            let collection = &mut tx.collections[index].1;
            transaction = Some(crate::event::TransactionOrder {
                xid: tx.xid,
                total_order: tx.events + 1,
                data_collection_order: *collection + 1,
            });
            tx.events += events;
            *collection += events;
        }
        let mut change = RowChange {
            size_hint: size + relation.envelope_overhead,
            relation,
            kind,
            commit_lsn: tx.commit_lsn,
            lsn,
            tx_index: tx.next_index,
            xid: tx.xid,
            commit_unix_micros: tx.commit_unix_micros,
            transaction,
            last_commit_end: self.last_commit_end,
        };
        let records = change.record_count(self.ctx.config.kafka.tombstones_on_delete());
        tx.next_index += records;
        if committed_already(self.committed_position, change.commit_lsn, change.tx_index) {
            // Exactly once: its records are in a committed Kafka transaction.
            return Ok(());
        }
        change.size_hint = change.size_hint.max(1);
        let size = change.size_hint;
        intake.admit(Item::Row(change), size, records);
        Ok(())
    }
}

/// Polls the slot's confirmed position and lag for the metrics and the status, and watches
/// for progress: when the server's WAL grows while the confirmed position stands still for
/// longer than `timeout` (0 = never), the pipeline is reported stalled.
async fn monitor_slot(
    catalog: Arc<PgCatalog>,
    standby: Option<Arc<Standby>>,
    slot: String,
    board: Arc<StatusBoard>,
    watch: Arc<std::sync::Mutex<ProgressWatch>>,
    timeout: Duration,
    stop: CancellationToken,
) {
    let period = if timeout.is_zero() {
        Duration::from_secs(5)
    } else {
        (timeout / 4).clamp(Duration::from_millis(250), Duration::from_secs(5))
    };
    let mut tick = tokio::time::interval(period);
    while stop.run_until_cancelled(tick.tick()).await.is_some() {
        if let Some(standby) = &standby {
            watch_standby(&catalog, standby, &board).await;
        }
        match catalog.slot_lag(&slot).await {
            Ok(Some(lag)) => {
                metrics::gauge!(m::SLOT_CONFIRMED_LSN).set(lag.confirmed_flush.0 as f64);
                metrics::gauge!(m::REPLICATION_LAG_BYTES).set(lag.lag_bytes as f64);
                let mut watch = watch
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let (age, stalled, grown) =
                    watch.observe(lag.confirmed_flush, lag.server_wal, Instant::now(), timeout);
                let transition = watch.transition(stalled);
                drop(watch);
                metrics::gauge!(m::SOURCE_PROGRESS_AGE).set(age.as_secs_f64());
                metrics::gauge!(m::SOURCE_STALLED).set(if stalled { 1.0 } else { 0.0 });
                match transition {
                    Some(true) => tracing::warn!(
                        slot = %slot,
                        confirmed_flush = %lag.confirmed_flush,
                        wal_grown_bytes = grown,
                        seconds_without_progress = age.as_secs(),
                        "no progress: the server's WAL keeps growing but the slot's confirmed position has not moved; see /health (last_error, kafka_brokers_down, in-flight) and `sluice doctor`"
                    ),
                    Some(false) => tracing::info!(slot = %slot, "progress again"),
                    None => {}
                }
                board.update(|s| {
                    s.slot = Some(SlotStatus {
                        name: slot.clone(),
                        confirmed_flush_lsn: lag.confirmed_flush.to_string(),
                        server_wal_lsn: lag.server_wal.to_string(),
                        lag_bytes: lag.lag_bytes,
                        wal_status: lag.wal_status.clone(),
                        progress_age_s: age.as_secs_f64(),
                        stalled,
                    });
                });
            }
            Ok(None) => {}
            Err(error) => tracing::debug!(error = %error.chain(), "cannot read slot lag"),
        }
    }
}

/// Polls the standby's replay lag into its metrics and the status; notices a promotion.
async fn watch_standby(catalog: &PgCatalog, standby: &Standby, board: &StatusBoard) {
    let primary = standby.primary.as_deref().filter(|_| !standby.promoted());
    match super::standby::replay_lag(catalog, primary).await {
        Ok(Some(lag)) => {
            metrics::gauge!(m::STANDBY_REPLAY_LAG_BYTES).set(lag.bytes as f64);
            metrics::gauge!(m::STANDBY_REPLAY_LAG_SECONDS).set(lag.seconds);
            board.update(|s| {
                s.standby = Some(StandbyStatus {
                    replay_lsn: lag.replay_lsn.to_string(),
                    measured_against: lag.measured_against.to_owned(),
                    target_lsn: lag.target_lsn.to_string(),
                    replay_lag_bytes: lag.bytes,
                    replay_lag_s: lag.seconds,
                    primary_connected: primary.is_some(),
                    hot_standby_feedback: standby.hot_standby_feedback,
                });
            });
        }
        Ok(None) => {
            standby.set_promoted();
            metrics::gauge!(m::STANDBY_REPLAY_LAG_BYTES).set(0.0);
            metrics::gauge!(m::STANDBY_REPLAY_LAG_SECONDS).set(0.0);
            board.update(|s| s.standby = None);
        }
        Err(error) => {
            tracing::debug!(error = %error.chain(), "cannot read the standby's replay lag")
        }
    }
}

/// Runs `creation` (the slot's creation on a standby) with the primary asked for the
/// running-xacts record it waits for, and what it waits for in the status's hint meanwhile.
async fn while_creating_on<T>(
    standby: &Standby,
    board: &StatusBoard,
    creation: impl Future<Output = Result<T, PipelineError>>,
) -> Result<T, PipelineError> {
    board.update(|s| s.hint = Some(standby.creation_wait().to_owned()));
    let out = standby.while_creating_slot(creation).await;
    board.update(|s| s.hint = None);
    out
}

/// The no-progress watchdog's memory: when the confirmed position last moved, and the
/// server's WAL position then.
#[derive(Debug, Default)]
pub struct ProgressWatch {
    confirmed: Option<Lsn>,
    moved_at: Option<Instant>,
    wal_at_move: Lsn,
    stalled: bool,
}

impl ProgressWatch {
    /// Returns (time since the confirmed position moved, stalled, WAL bytes grown since).
    fn observe(
        &mut self,
        confirmed: Lsn,
        server_wal: Lsn,
        now: Instant,
        timeout: Duration,
    ) -> (Duration, bool, u64) {
        if self.confirmed != Some(confirmed) {
            self.confirmed = Some(confirmed);
            self.moved_at = Some(now);
            self.wal_at_move = server_wal;
        }
        let age = now.saturating_duration_since(self.moved_at.unwrap_or(now));
        let grown = server_wal.0.saturating_sub(self.wal_at_move.0);
        let stalled = !timeout.is_zero() && grown > 0 && age > timeout;
        (age, stalled, grown)
    }

    /// `Some(new)` when the stalled flag changes.
    fn transition(&mut self, stalled: bool) -> Option<bool> {
        (stalled != self.stalled).then(|| {
            self.stalled = stalled;
            stalled
        })
    }
}

/// Persists the snapshot plan (finished chunks) in the state file.
fn save_plan(state: &mut SlotStateFile, plan: &SnapshotPlan) -> Result<(), PipelineError> {
    tokio::task::block_in_place(|| state.set_snapshot_plan(plan))
        .map_err(|e| state_unwritable(state, e))
}

/// `CREATE_REPLICATION_SLOT … EXPORT_SNAPSHOT`: returns the snapshot's name and the slot's
/// consistent point. The snapshot stays importable until the connection runs another command.
async fn create_slot_exporting_snapshot(
    connection: &mut ReplicationConnection,
    slot_name: &str,
    config: &PgPipelineConfig,
) -> Result<(String, Lsn), PipelineError> {
    let rows = connection
        .simple_query(&format!(
            "CREATE_REPLICATION_SLOT \"{slot_name}\" LOGICAL pgoutput EXPORT_SNAPSHOT"
        ))
        .await
        .map_err(|e| replication_error("cannot create the replication slot", e, config))?;
    let row = rows.first().filter(|r| r.len() >= 3).ok_or_else(|| {
        PipelineError::retryable(
            "CREATE_REPLICATION_SLOT returned no row",
            ProtocolError::MissingRow,
        )
    })?;
    let consistent_point: Lsn = row[1].as_deref().unwrap_or_default().parse().map_err(|e| {
        PipelineError::retryable("CREATE_REPLICATION_SLOT returned no consistent point", e)
    })?;
    let snapshot = row[2].clone().unwrap_or_default();
    tracing::info!(slot = slot_name, %consistent_point, snapshot = %snapshot, "created replication slot with an exported snapshot");
    Ok((snapshot, consistent_point))
}

/// Checks that the slot is the one this pipeline fed (see [`super::slot_state`]), creates it
/// when the pipeline is new, and records its identity. A slot the WAL budget dropped is created
/// anew and the `republished` tables are queued for a republication.
async fn secure_slot(
    catalog: &PgCatalog,
    config: &PgPipelineConfig,
    slot_name: &str,
    system_identifier: &str,
    state: &mut SlotStateFile,
    exported: bool,
    republished: &[String],
) -> Result<super::setup::SlotInfo, PipelineError> {
    let existing = catalog.slot(slot_name).await?;
    let server = existing.as_ref().map(|s| ServerSlot {
        confirmed_flush: s.confirmed_flush,
        wal_status: s.wal_status.clone(),
    });
    let budget_drop = state.record().and_then(|r| r.wal_budget_drop.clone());
    let loss = if budget_drop.is_some() {
        // Dropped on purpose, and recorded: no loss to report, a republication to run.
        None
    } else {
        slot_state::verify(state.record(), system_identifier, server.as_ref())
    };
    if let Some(loss) = &loss {
        let what = loss.describe(slot_name, state.record());
        metrics::counter!(m::SLOT_LOSSES, "kind" => loss.kind()).increment(1);
        match config.source.on_slot_loss {
            SlotLossPolicy::Stop => {
                return Err(PipelineError::fatal(
                    what,
                    format!(
                        "the changes in the gap cannot be read from PostgreSQL any more: accept the gap by setting source.postgres.on_slot_loss = \"recreate\" (or by deleting {}) and starting again, then republish the captured tables (POST /api/v1/pipelines/{}/snapshots with {{\"tables\": [...], \"tombstones\": true}}: current rows, and tombstones for the rows deleted in the gap). To prevent it: alert on sluice_source_replication_lag_bytes and size max_slot_wal_keep_size for the longest outage you must survive",
                        state.location(),
                        config.name
                    ),
                ));
            }
            SlotLossPolicy::Recreate => {
                tracing::error!(
                    slot = slot_name,
                    "{what}; going on with a new slot (source.postgres.on_slot_loss = \"recreate\"): the changes in the gap are missing from Kafka"
                );
                if matches!(loss, SlotLoss::Invalidated) && existing.is_some() {
                    catalog.drop_slot(slot_name).await?;
                }
            }
        }
    }
    // The record of a slot being created: this run's (it just created the slot), or a crashed
    // run's (which created the slot before recording it: its snapshot never finished).
    let recorded_creating = state.record().is_some_and(|r| r.creating);
    let crashed_creating = recorded_creating && !exported;
    let (slot, created) = catalog.ensure_slot(slot_name).await?;
    if slot.wal_status == "lost" {
        return Err(PipelineError::fatal(
            format!("replication slot {slot_name:?} is invalidated (wal_status = 'lost')"),
            "drop it (SELECT pg_drop_replication_slot(...)) and start again; the changes it no longer holds must be re-snapshotted",
        ));
    }
    let republication = budget_drop.as_ref().map(|drop| {
        tracing::warn!(
            slot = slot_name,
            dropped_unix_ms = drop.unix_ms,
            retained_bytes = drop.retained_bytes,
            budget_bytes = drop.budget_bytes,
            tables = republished.len(),
            "the WAL budget dropped the slot: created it anew; republishing the captured tables (current rows, and tombstones for the rows deleted meanwhile)"
        );
        republish_after_drop(state.record(), republished, drop, slot.confirmed_flush)
    });
    if state.record().is_none() || recorded_creating || loss.is_some() || budget_drop.is_some() {
        if crashed_creating && !created {
            tracing::warn!(
                slot = slot_name,
                "the slot was created by a run that stopped before recording it: snapshotting under a new snapshot"
            );
        } else if !created && !exported {
            tracing::info!(
                slot = slot_name,
                confirmed_flush = %slot.confirmed_flush,
                state_file = %state.location(),
                "adopting the existing replication slot"
            );
        }
        state
            .save(SlotRecord {
                system_identifier: system_identifier.to_owned(),
                slot: slot_name.to_owned(),
                first_lsn: slot.confirmed_flush,
                created_by_sluice: created || exported || crashed_creating,
                confirmed_lsn: slot.confirmed_flush,
                updated_unix_ms: 0,
                snapshot_pending: exported
                    || crashed_creating
                    || (loss.is_some()
                        && config.source.snapshot == super::config::SnapshotMode::WhenNeeded),
                snapshot_plan: None,
                incremental: republication,
                creating: false,
                wal_budget_drop: None,
            })
            .map_err(|e| state_unwritable(state, e))?;
    }
    Ok(slot)
}

/// The incremental snapshots' state with a republication of every table of `tables` queued,
/// after the WAL budget dropped the slot (`record`'s state kept, its queue first).
fn republish_after_drop(
    record: Option<&SlotRecord>,
    tables: &[String],
    drop: &slot_state::WalBudgetDrop,
    at: Lsn,
) -> incremental::IncrementalState {
    let mut state = record
        .and_then(|r| r.incremental.clone())
        .unwrap_or_default();
    state.accept(
        &crate::runtime::status::Signal::Snapshot {
            id: format!("wal-budget-{}", drop.unix_ms),
            tables: tables.iter().map(|t| (t.clone(), None)).collect(),
            tombstones: true,
        },
        &|_| true,
    );
    state.position = Some((at.0, u32::MAX));
    // The old slot's horizon says nothing of the new slot's WAL.
    state.horizon = None;
    state
}

fn replication_error(
    what: &str,
    error: ReplicationError,
    config: &PgPipelineConfig,
) -> PipelineError {
    if error.is_retryable() {
        return PipelineError::retryable(what, error);
    }
    let hint = match error.sqlstate() {
        Some("42704") => format!(
            "the replication slot {:?} or publication {:?} does not exist any more (dropped while sluice ran?): recreate it, or restart sluice to create the slot anew (changes between are lost to this pipeline)",
            config.slot_name(),
            config.publication_name()
        ),
        Some("55000") if is_invalidated_slot(&error) => format!(
            "replication slot {:?} was invalidated by the server (it retained more WAL than max_slot_wal_keep_size): the changes it no longer holds must be re-snapshotted; drop the slot and start again, or set source.postgres.on_slot_loss = \"recreate\" to accept the gap",
            config.slot_name()
        ),
        Some("55000") => {
            "the server is not configured for logical replication: set wal_level = logical and restart PostgreSQL".into()
        }
        Some("42501") => {
            "permission denied: the user needs the REPLICATION attribute (ALTER ROLE … REPLICATION)".into()
        }
        Some("28000" | "28P01") => {
            "authentication failed: check the user and password in source.postgres.url and pg_hba.conf (a replication connection needs a pg_hba line that matches the database or 'replication')".into()
        }
        _ => "see the server's message above".into(),
    };
    PipelineError::fatal_with(what, hint, error)
}

/// The replication connection sent nothing (not even the keepalive a status update asked for)
/// for `silent`: retryable, the supervisor reconnects.
fn silent_connection(silent: Duration) -> PipelineError {
    PipelineError::retryable(
        format!(
            "the replication connection went silent: nothing received for {} s, not even the keepalive sluice asked for; reconnecting",
            silent.as_secs()
        ),
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "no data or keepalive within source.postgres.silence_timeout_ms",
        ),
    )
}

fn is_invalidated_slot(error: &ReplicationError) -> bool {
    let text = error.to_string();
    text.contains("can no longer get changes") || text.contains("has been invalidated")
}

/// Exactly once: whether the change at (`commit_lsn`, `index`) is at or below the position
/// committed to Kafka with its records (so it must not be written again).
/// Admits a record sluice made itself (a schema change event, a republication's tombstone).
fn admit_raw(intake: &mut Intake<Item, Lsn>, record: OutRecord, commit_unix_micros: i64) {
    let size = record.len() + 256;
    intake.admit(
        Item::Raw {
            record,
            commit_unix_micros,
        },
        size,
        1,
    );
}

fn committed_already(committed: Option<(Lsn, u32)>, commit_lsn: Lsn, index: u32) -> bool {
    committed.is_some_and(|position| (commit_lsn, index) <= position)
}

/// How transaction boundary events are written: bare JSON, or in the events' formats under
/// the transaction topic's schemas.
#[derive(Clone, Copy)]
struct TransactionWrap<'a> {
    schemas: Option<&'a crate::event::schema::RenderedSchemas>,
    events: &'a crate::event::EventOptions,
}

/// Admits a transaction boundary event (BEGIN, END) on the transaction topic, in the
/// transaction's order.
fn admit_transaction_event(
    topic: &str,
    tx: &OpenTransaction,
    key: Vec<u8>,
    value: Vec<u8>,
    headers: Vec<(std::borrow::Cow<'static, str>, String)>,
    wrap: TransactionWrap<'_>,
    intake: &mut Intake<Item, Lsn>,
) {
    let mut record = OutRecord {
        partition: None,
        topic: Arc::from(topic),
        key: Some(key),
        value: Some(value),
        headers,
    };
    if let Some(schemas) = wrap.schemas {
        record = schemas.wrap_record(wrap.events, record);
    }
    let size = record.len() + 256;
    intake.admit(
        Item::Raw {
            record,
            commit_unix_micros: tx.commit_unix_micros,
        },
        size,
        1,
    );
}

/// The position headers of a transaction boundary event: after the transaction's records so
/// far (the END's index is past every record of the transaction).
fn transaction_headers(
    tx: &OpenTransaction,
    lsn: Lsn,
) -> Vec<(std::borrow::Cow<'static, str>, String)> {
    vec![
        (
            crate::event::HEADER_COMMIT_LSN.into(),
            tx.commit_lsn.0.to_string(),
        ),
        (crate::event::HEADER_LSN.into(), lsn.0.to_string()),
        (
            crate::event::HEADER_TX_INDEX.into(),
            tx.next_index.to_string(),
        ),
    ]
}

/// The replication connection did not follow the protocol (or ended it): the source of a
/// retryable [`PipelineError`] whose message names the message concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum ProtocolError {
    /// The server ended the replication stream's COPY.
    #[error("CopyDone")]
    StreamEnded,
    /// A message came before the one it depends on (a change before its Relation message, a
    /// row change outside Begin … Commit).
    #[error("protocol order")]
    OutOfOrder,
    /// A replication command answered without the row it always returns.
    #[error("protocol")]
    MissingRow,
}

#[cfg(test)]
mod watchdog_tests {
    use super::*;

    #[test]
    fn stalled_only_when_wal_grows_and_the_position_stands_still_past_the_timeout() {
        let timeout = Duration::from_secs(10);
        let t0 = Instant::now();
        let mut watch = ProgressWatch::default();
        assert!(!watch.observe(Lsn(100), Lsn(200), t0, timeout).1);
        // The WAL grows, the position stands: stalled only after the timeout.
        let at = |s| t0 + Duration::from_secs(s);
        assert!(!watch.observe(Lsn(100), Lsn(300), at(5), timeout).1);
        let (age, stalled, grown) = watch.observe(Lsn(100), Lsn(400), at(11), timeout);
        assert!(stalled);
        assert_eq!((age.as_secs(), grown), (11, 200));
        assert_eq!(watch.transition(true), Some(true));
        assert_eq!(watch.transition(true), None);
        // The position moves: not stalled any more.
        assert!(!watch.observe(Lsn(400), Lsn(400), at(12), timeout).1);
        assert_eq!(watch.transition(false), Some(false));
    }

    #[test]
    fn an_idle_server_is_not_a_stall_and_zero_disables_the_watchdog() {
        let t0 = Instant::now();
        let mut watch = ProgressWatch::default();
        watch.observe(Lsn(100), Lsn(100), t0, Duration::from_secs(1));
        let later = t0 + Duration::from_secs(60);
        assert!(
            !watch
                .observe(Lsn(100), Lsn(100), later, Duration::from_secs(1))
                .1
        );
        assert!(!watch.observe(Lsn(100), Lsn(500), later, Duration::ZERO).1);
    }
}

#[cfg(test)]
mod protocol_error_tests {
    use super::*;

    /// The message users see is the one of the `io::Error` stand-in this type replaced.
    #[test]
    fn protocol_errors_read_as_the_text_they_replaced() {
        for (typed, text) in [
            (ProtocolError::StreamEnded, "CopyDone"),
            (ProtocolError::OutOfOrder, "protocol order"),
            (ProtocolError::MissingRow, "protocol"),
        ] {
            assert_eq!(
                PipelineError::retryable("the step", typed).chain(),
                PipelineError::retryable("the step", std::io::Error::other(text)).chain()
            );
        }
    }
}

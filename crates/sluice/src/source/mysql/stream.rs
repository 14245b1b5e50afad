//! One run of a MySQL/MariaDB → Kafka pipeline: the binlog read as a replica, row events
//! turned into changes on the delivery core ([`crate::delivery`]), and checkpoints.
//!
//! Positions: the delivery core orders positions it can copy, so each committed transaction
//! gets a sequence number ([`BinlogSeq`]) and the source keeps, per sequence number not yet
//! confirmed, the binlog position after it ([`BinlogPosition`]: the GTID set and file:pos).
//! Confirming a watermark saves the position of the newest transaction at or below it in the
//! state store (`<state_dir>/<pipeline>.mysql.json`, or the document `<pipeline>.mysql` of the
//! state topic with `state_store = "kafka"`); the next run dumps the binlog from there.
//!
//! Only the active instance of the pipeline runs (see [`super::active`]): the others wait as
//! standbys, and a run stops the moment its instance loses the role or finds its state writes
//! fenced by an instance that took over. Nothing is confirmed to the server (a binlog reader has no slot): the server keeps
//! binlogs for `binlog_expire_logs_seconds` whatever the reader did.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use mysql_async::BinlogStream;
use mysql_async::binlog::events::{Event, EventData, RowsEventData};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::prelude::Queryable as _;
use tokio_util::sync::CancellationToken;

use super::active;
use super::change::{MysqlChange, MysqlEncoder, StreamedSchemaChange, TransactionEvent};
use super::config::MysqlPipelineConfig;
use super::ddl::{self};
use super::encode::{BinlogSource, HEADER_BINLOG_FILE, HEADER_BINLOG_POS, RowChange, TableInfo};
use super::incremental::{self, IncrementalRun, MysqlIncrementalState, SignalRow};
use super::lag;
use super::rows::{self, RowPlan};
use super::server::{self, BinlogPosition, BinlogSeq, Flavor, GtidState, MariadbGtid};
use super::snapshot::{self, SnapshotContext, SnapshotPlan};
use super::state::{load_state, open_directory, save_checkpoint, save_state};
pub use super::state::{saved_position, saved_progress, seed_position};
use crate::config::{SnapshotMode, StateStoreKind};
use crate::delivery::{self, Intake, Source};
use crate::error::PipelineError;
use crate::event::{Op, SnapshotMarker};
use crate::kafka::{self, OutRecord};
use crate::kafka_state::KafkaStateStore;
use crate::runtime::active::run_while_active;
use crate::runtime::metrics::{PipelineMetrics, TableMetrics};
use crate::runtime::state::StateStore;
use crate::runtime::status::{PipelineState, StatusBoard};
use crate::runtime::supervisor::{RunEnd, Supervised};
use crate::source::run::{KafkaSetup, RunSkeleton};

/// MariaDB's own event types, which the binlog crate hands over as unknown events.
const MARIADB_ANNOTATE_ROWS_EVENT: u8 = 160;
const MARIADB_GTID_EVENT: u8 = 162;
const MARIADB_QUERY_COMPRESSED_EVENT: u8 = 165;
const MARIADB_DELETE_ROWS_COMPRESSED_EVENT: u8 = 171;

/// The server's error when it cannot send the binlog from the requested position.
const ER_MASTER_FATAL_ERROR_READING_BINLOG: u16 = 1236;

/// The longest a topic creation may hold the loop.
const TOPIC_DEADLINE: Duration = Duration::from_secs(20);

/// How long reading a changed table's definition after a DDL statement may take (it runs
/// inside the delivery loop).
const DDL_LOOKUP_DEADLINE: Duration = Duration::from_secs(30);

/// A MySQL/MariaDB → Kafka pipeline as the supervisor runs it: each run resumes from the
/// position saved at the last checkpoint.
pub struct MysqlPipeline {
    config: Arc<MysqlPipelineConfig>,
    board: Arc<StatusBoard>,
    metrics: PipelineMetrics,
    /// The smallest `max.message.bytes` a topic refused a batch for (`0`: none), kept across
    /// runs as the producer's `batch.size` cap.
    batch_size_cap: Arc<std::sync::atomic::AtomicU64>,
}

impl MysqlPipeline {
    /// The pipeline of `config`, reporting to `board`.
    pub fn new(config: Arc<MysqlPipelineConfig>, board: Arc<StatusBoard>) -> Self {
        let config = crate::source::config_for_run(config);
        let instance = config.ha.instance_id();
        board.update(|s| s.instance = instance);
        Self {
            config,
            board,
            metrics: PipelineMetrics::new(),
            batch_size_cap: Arc::default(),
        }
    }
}

impl Supervised for MysqlPipeline {
    const PAUSES_IN_RUN: bool = false;

    fn resumes_from(&self) -> &'static str {
        "the last saved binlog position"
    }

    async fn run_once(&mut self, stop: CancellationToken) -> Result<RunEnd, PipelineError> {
        // Exactly one instance of the pipeline runs past this point; the others wait here as
        // standbys (see `active`).
        let Some(role) = active::acquire(&self.config, &self.board, &stop).await? else {
            return Ok(RunEnd::Finished);
        };
        run_while_active(role, &stop, "MySQL/MariaDB", |run_stop| async move {
            run_once(
                &self.config,
                &self.board,
                &run_stop,
                &self.metrics,
                &self.batch_size_cap,
            )
            .await
        })
        .await
    }
}

/// Runs the pipeline until shutdown (`Ok`) or an error: connects and checks the server, reads
/// the saved state (or begins a snapshot), sets up the Kafka side, runs the initial snapshot
/// while one is pending, then streams the binlog through the delivery core.
///
/// # Errors
///
/// Retryable errors (lost connections) and fatal ones (configuration, server settings).
pub async fn run_once(
    config: &Arc<MysqlPipelineConfig>,
    board: &Arc<StatusBoard>,
    shutdown: &CancellationToken,
    metrics: &PipelineMetrics,
    learned_cap: &Arc<std::sync::atomic::AtomicU64>,
) -> Result<(), PipelineError> {
    crate::source::run::probe_kafka(config, shutdown).await?;
    let (mut conn, flavor) = connect_checked(config).await?;
    let mut saved = resume_or_begin(config, &mut conn, flavor).await?;
    prepare_signal_table(config, &mut conn, saved.incremental.as_ref()).await?;
    let rotate_crc = rotates_with_crc32(&mut conn, flavor).await?;
    let topics = change_topics(config, &mut conn).await?;
    drop(conn);
    // The dead-letter topic is created as a change-event topic here (routed, with
    // `kafka.topic_config`), as it always was for this source.
    let mut run = RunSkeleton::setup(
        config,
        board,
        learned_cap,
        KafkaSetup {
            change_topics: topics,
            other_topics: Vec::new(),
            transactional_id: None,
        },
    )
    .await?;
    let registry = run.registry.clone();
    // The schema-change topic's schemas (JSON with schemas, Avro: registered before its
    // first record).
    let schema_change_schemas = if config.source.include_schema_changes {
        super::schema::prepare_schema_change_schemas(
            &config.kafka.topic_prefix,
            &config.kafka.events,
            registry.as_deref(),
        )
        .await?
    } else {
        None
    };
    run.show_budget();
    let snapshot = SnapshotPhase {
        config,
        flavor,
        board,
        shutdown,
        schema_change_schemas: schema_change_schemas.as_deref(),
    };
    if snapshot.run(&mut run, &mut saved).await? == AfterSnapshot::Stop {
        run.end_before_streaming();
        tracing::info!("snapshot done; snapshot = \"initial_only\": stopping");
        return Ok(());
    }
    let Saved {
        store,
        key,
        start,
        mut incremental,
        ..
    } = saved;
    let gtids = start
        .gtid_set
        .as_deref()
        .map(|set| GtidState::parse(flavor, set))
        .transpose()?;
    tracing::info!(position = %start, ?flavor, "resuming from the saved binlog position");
    let stream = open_dump(config, flavor, &start).await?;

    run.streaming();
    let core = run.start_core(config, metrics, BinlogSeq(0), record_position, None)?;
    let confirmed = start_lag_monitor(&mut run, config, board, shutdown, &start);
    let source = MysqlSource {
        rotate_crc,
        confirmed,
        commit_unix_s: 0,
        config: Arc::clone(config),
        flavor,
        stream,
        store,
        key,
        file: Arc::from(start.file.as_str()),
        gtids,
        saved: start,
        seq: 0,
        unconfirmed: VecDeque::new(),
        tables: HashMap::new(),
        table_metrics: HashMap::new(),
        known_topics: std::mem::take(&mut run.known_topics),
        batch_size: run.batch_size,
        learned_cap: Arc::clone(learned_cap),
        tx: Transaction::default(),
        meta: None,
        schema_metrics: Arc::new(TableMetrics::new(&config.kafka.topic_prefix)),
        last_event: Instant::now(),
        incremental: config.source.signal_table.is_some().then(|| {
            IncrementalRun::new(
                Arc::clone(config),
                flavor,
                registry.clone(),
                incremental.clone(),
            )
        }),
        saved_incremental: incremental.take(),
        board: Arc::clone(board),
        registry: registry.clone(),
        schema_change_schemas,
        transaction_schemas: None,
        transaction_metrics: Arc::new(TableMetrics::new(&format!(
            "{}.transaction",
            config.kafka.topic_prefix
        ))),
    };
    run.run(
        source,
        core,
        shutdown,
        Duration::from_millis(config.source.status_interval_ms),
    )
    .await
}

/// Connects to the server and checks its binlog settings; returns the connection and the
/// server's flavor.
async fn connect_checked(
    config: &MysqlPipelineConfig,
) -> Result<(mysql_async::Conn, Flavor), PipelineError> {
    let mut conn = server::connect(&config.source).await?;
    let flavor = server::flavor(&mut conn).await?;
    if let Some(error) =
        server::settings_error(&server::check_settings(&mut conn, flavor, &config.source).await?)
    {
        return Err(error);
    }
    Ok((conn, flavor))
}

/// What a run resumes from: the state store and what it holds.
struct Saved {
    store: Arc<dyn StateStore>,
    /// The pipeline's key in the store.
    key: String,
    /// Where streaming starts (a pending snapshot's position).
    start: BinlogPosition,
    /// The plan of a snapshot not finished.
    pending: Option<SnapshotPlan>,
    /// A snapshot opened by this run (a new pipeline's).
    opened: Option<snapshot::ConsistentSnapshot>,
    /// The incremental snapshots' state.
    incremental: Option<MysqlIncrementalState>,
}

/// Opens the state store and reads the saved position; a new pipeline starts at the server's
/// current position (`snapshot = "never"`) or opens its snapshot and plans it, saving either
/// before any row is read, so a restart resumes from there.
async fn resume_or_begin(
    config: &MysqlPipelineConfig,
    conn: &mut mysql_async::Conn,
    flavor: Flavor,
) -> Result<Saved, PipelineError> {
    let store: Arc<dyn StateStore> = match config.state_store {
        StateStoreKind::Local => open_directory(config)?,
        // Opening fences the instance this one replaced: its state writes fail from here on.
        StateStoreKind::Kafka => Arc::new(
            KafkaStateStore::open(&config.kafka, config.state_topic(), &config.name).await?,
        ),
    };
    let key = format!("{}.mysql", config.name);
    let saved = load_state(store.as_ref(), &key)?;
    let incremental = saved.as_ref().and_then(|s| s.incremental.clone());
    let mut opened = None;
    let (start, pending) = match saved {
        Some(saved) if saved.flavor == flavor => (saved.position, saved.snapshot),
        Some(saved) => {
            return Err(PipelineError::fatal(
                format!(
                    "the state file {} holds a {:?} position; this server is {flavor:?}",
                    store.location(&key),
                    saved.flavor
                ),
                "point source.mysql.url at the server the pipeline read from, or remove the state file to start from this server's current position",
            ));
        }
        None if config.source.snapshot == SnapshotMode::Never => {
            // A new pipeline starts at the server's current position, and saves it at once so
            // that a restart before the first change does not skip what was written meanwhile.
            let position = server::current_position(conn, flavor).await?;
            save_state(store.as_ref(), &key, flavor, &position, None, None)?;
            (position, None)
        }
        None => {
            // A new pipeline snapshots: the plan and the snapshot's position are saved before
            // any row is read, so a restart resumes this snapshot and streams from there.
            let tables = snapshot::captured_tables(conn, &config.source).await?;
            let workers = config.source.snapshot_workers as usize;
            let mut consistent = snapshot::open(&config.source, flavor, workers, &tables).await?;
            let plan = SnapshotPlan::build(
                &mut consistent.connections[0],
                &tables,
                config.source.snapshot_chunk_rows,
            )
            .await?;
            let position = consistent.position.clone();
            save_state(store.as_ref(), &key, flavor, &position, Some(&plan), None)?;
            opened = Some(consistent);
            (position, Some(plan))
        }
    };
    Ok(Saved {
        store,
        key,
        start,
        pending,
        opened,
        incremental,
    })
}

/// Creates the signal table when one is configured; warns when incremental snapshots wait
/// for one.
async fn prepare_signal_table(
    config: &MysqlPipelineConfig,
    conn: &mut mysql_async::Conn,
    incremental: Option<&MysqlIncrementalState>,
) -> Result<(), PipelineError> {
    if config.source.signal_table.is_some() {
        incremental::ensure_signal_table(conn, &config.source).await?;
    } else if incremental.is_some_and(|s| !s.queue.is_empty()) {
        tracing::warn!(
            "incremental snapshots are queued in the state file but source.mysql.signal_table is not set: they wait until it is"
        );
    }
    Ok(())
}

/// Whether the server's ROTATE events carry a CRC32 checksum (MariaDB's binlog_checksum).
async fn rotates_with_crc32(
    conn: &mut mysql_async::Conn,
    flavor: Flavor,
) -> Result<bool, PipelineError> {
    if flavor != Flavor::Mariadb {
        return Ok(false);
    }
    let checksum: Option<String> = conn
        .query_first("SELECT @@GLOBAL.binlog_checksum")
        .await
        .map_err(server::sql_error("SELECT @@GLOBAL.binlog_checksum failed"))?;
    Ok(checksum.is_some_and(|c| c.eq_ignore_ascii_case("CRC32")))
}

/// The captured tables' topics and the dead-letter topic, created at setup (when sluice
/// creates topics) and their max.message.bytes read ahead for the producer's batch.size; a
/// table's topic first used later is read then (see `ensure_topic`).
async fn change_topics(
    config: &MysqlPipelineConfig,
    conn: &mut mysql_async::Conn,
) -> Result<Vec<String>, PipelineError> {
    let mut topics: Vec<String> = snapshot::captured_tables(conn, &config.source)
        .await?
        .iter()
        .map(|t| format!("{}.{}.{}", config.kafka.topic_prefix, t.database, t.table))
        .collect();
    topics.extend(config.delivery.dead_letter_topic.iter().cloned());
    Ok(topics)
}

/// Whether the run goes on to stream after its snapshot phase.
#[derive(Debug, PartialEq, Eq)]
enum AfterSnapshot {
    Stream,
    /// `snapshot = "initial_only"`: the snapshot is done and nothing streams.
    Stop,
}

/// What the initial snapshot needs from the run besides its Kafka side and saved state.
struct SnapshotPhase<'a> {
    config: &'a Arc<MysqlPipelineConfig>,
    flavor: Flavor,
    board: &'a Arc<StatusBoard>,
    shutdown: &'a CancellationToken,
    schema_change_schemas: Option<&'a crate::event::schema::RenderedSchemas>,
}

impl SnapshotPhase<'_> {
    /// Runs the pending snapshot, if any (a resumed one reads its unfinished chunks under a
    /// fresh snapshot), recording finished chunks in `saved`'s store; then clears the plan from
    /// the store, or, with `snapshot = "initial_only"`, removes the state and stops.
    async fn run(
        &self,
        run: &mut RunSkeleton,
        saved: &mut Saved,
    ) -> Result<AfterSnapshot, PipelineError> {
        let Self {
            config,
            flavor,
            board,
            shutdown,
            schema_change_schemas,
        } = *self;
        let Saved {
            store,
            key,
            start,
            pending,
            opened,
            incremental,
        } = saved;
        let Some(plan) = pending.as_mut() else {
            return Ok(AfterSnapshot::Stream);
        };
        board.set_state(PipelineState::Snapshotting);
        let mut consistent = match opened.take() {
            Some(consistent) => consistent,
            None => {
                // A restart mid-snapshot: the unfinished chunks are read under a fresh
                // snapshot; streaming still starts at the first one's position, so every change
                // since is replayed after the rows.
                let mut tables: Vec<_> = plan.chunks.iter().map(|c| c.table.clone()).collect();
                tables.dedup();
                tracing::info!(position = %start, "resuming the unfinished snapshot");
                let workers = config.source.snapshot_workers as usize;
                snapshot::open(&config.source, flavor, workers, &tables).await?
            }
        };
        if config.kafka.create_topics {
            let mut topics: Vec<String> = plan
                .chunks
                .iter()
                .map(|c| {
                    format!(
                        "{}.{}.{}",
                        config.kafka.topic_prefix, c.table.database, c.table.table
                    )
                })
                .collect();
            topics.dedup();
            let topics = config.routed_topics(&topics);
            kafka::ensure_topics(&config.kafka, &topics, config.kafka.topic_partitions).await?;
        }
        let schema_changes = if config.source.include_schema_changes {
            snapshot_schema_changes(
                config,
                flavor,
                &mut consistent.connections[0],
                plan,
                start,
                schema_change_schemas,
            )
            .await?
        } else {
            Vec::new()
        };
        snapshot::run(
            SnapshotContext {
                prefix: &config.kafka.topic_prefix,
                producer: &run.producer,
                deliveries: &mut run.deliveries,
                budget: &run.budget,
                position: start,
                shutdown,
                board,
                delivery: &config.delivery,
                position_of: record_position,
                transforms: crate::source::transform_chain(config, run.registry.as_ref())?,
                flavor,
                events: &config.kafka.events,
                registry: run.registry.clone(),
                schema_changes,
            },
            consistent,
            plan,
            |plan| {
                save_state(
                    store.as_ref(),
                    key,
                    flavor,
                    start,
                    Some(plan),
                    incremental.as_ref(),
                )
            },
        )
        .await?;
        if config.source.snapshot == SnapshotMode::InitialOnly {
            // Nothing streams; a later run snapshots anew.
            store.remove(key).map_err(|e| {
                PipelineError::fatal_with(
                    format!("cannot remove the state file {}", store.location(key)),
                    "make state_dir writable",
                    e,
                )
            })?;
            return Ok(AfterSnapshot::Stop);
        }
        save_state(
            store.as_ref(),
            key,
            flavor,
            start,
            None,
            incremental.as_ref(),
        )?;
        *pending = None;
        Ok(AfterSnapshot::Stream)
    }
}

/// Opens the binlog dump at `start` (standbys may take over: a silent former instance's dump
/// is ended after the failover timeout).
async fn open_dump(
    config: &MysqlPipelineConfig,
    flavor: Flavor,
    start: &BinlogPosition,
) -> Result<BinlogStream, PipelineError> {
    let mut dump = server::connect(&config.source).await?;
    if config.state_store == StateStoreKind::Kafka {
        // Standbys may take over: the server ends the dump of a silent former instance after
        // the failover timeout rather than its default net_write_timeout (60 s).
        dump.query_drop(format!(
            "SET SESSION net_write_timeout = {}",
            config.ha.failover_timeout_ms.div_ceil(1000).max(1)
        ))
        .await
        .map_err(server::sql_error("SET SESSION net_write_timeout failed"))?;
    }
    server::start_dump(
        dump,
        flavor,
        config.source.server_id,
        start,
        config.source.heartbeat_interval_ms,
    )
    .await
}

/// Starts the binlog lag monitor (stopped at teardown); returns the confirmed position it
/// reads, which the source updates.
fn start_lag_monitor(
    run: &mut RunSkeleton,
    config: &MysqlPipelineConfig,
    board: &Arc<StatusBoard>,
    shutdown: &CancellationToken,
    start: &BinlogPosition,
) -> lag::SharedConfirmed {
    let confirmed: lag::SharedConfirmed = Arc::new(std::sync::Mutex::new(lag::Confirmed {
        file: start.file.clone(),
        pos: start.pos,
        commit_unix_s: None,
    }));
    let monitor_stop = shutdown.child_token();
    let monitor = tokio::spawn(lag::monitor(
        config.source.clone(),
        Arc::clone(&confirmed),
        Arc::clone(board),
        monitor_stop.clone(),
    ));
    run.add_monitor(monitor, Some(monitor_stop));
    confirmed
}

/// The initial snapshot's schema changes (see [`ddl::snapshot`]) for the tables of `plan`,
/// read on `conn` under the snapshot, as records the snapshot delivers before its rows (the
/// first chunk to finish covers them). Written at every start of a snapshot (again when one
/// resumes): at least once.
async fn snapshot_schema_changes(
    config: &MysqlPipelineConfig,
    flavor: Flavor,
    conn: &mut mysql_async::Conn,
    plan: &SnapshotPlan,
    position: &BinlogPosition,
    schemas: Option<&crate::event::schema::RenderedSchemas>,
) -> Result<Vec<OutRecord>, PipelineError> {
    let mut tables: Vec<_> = plan.chunks.iter().map(|c| c.table.clone()).collect();
    tables.dedup();
    let changes = ddl::snapshot(conn, flavor, &tables).await?;
    let topic: Arc<str> = Arc::from(config.kafka.topic_prefix.as_str());
    if config.kafka.create_topics {
        kafka::ensure_topics(
            &config.kafka,
            &config.routed_topics(std::slice::from_ref(&topic.to_string())),
            config.kafka.topic_partitions,
        )
        .await?;
    }
    let now_micros = delivery::unix_micros_now();
    let source = BinlogSource {
        server_id: 0,
        ts_sec: u32::try_from(now_micros.div_euclid(1_000_000)).unwrap_or(u32::MAX),
        gtid: None,
        file: Arc::from(position.file.as_str()),
        pos: position.pos,
        row: 0,
        thread: None,
        snapshot: SnapshotMarker::True,
    };
    Ok(changes
        .iter()
        .map(|change| {
            super::schema::wrap_schema_change(
                schemas,
                &config.kafka.events,
                change.record(&topic, &config.kafka.topic_prefix, &source, now_micros),
            )
        })
        .collect())
}

/// Where a record came from, from its headers: `binlog.000003:1234`.
fn record_position(record: &OutRecord) -> String {
    let header = |name: &str| {
        record
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
            .unwrap_or("?")
    };
    format!(
        "binlog {}:{}",
        header(HEADER_BINLOG_FILE),
        header(HEADER_BINLOG_POS)
    )
}

/// The transaction being read.
#[derive(Debug, Default)]
struct Transaction {
    /// MySQL's GTID (`uuid`, `gno`).
    mysql_gtid: Option<(String, u64)>,
    /// MariaDB's GTID.
    mariadb_gtid: Option<MariadbGtid>,
    /// Its GTID as `source.gtid` shows it.
    gtid: Option<Arc<str>>,
    /// The thread of its `BEGIN`.
    thread: Option<u32>,
    /// Where its `BEGIN` is (file, position): the id of a transaction without a GTID.
    begin: Option<(Arc<str>, u64)>,
    /// `provide_transaction_metadata`: its BEGIN was written at its first change event, and
    /// its events so far.
    metadata: Option<TransactionCount>,
}

/// A transaction's events so far, for its `transaction` blocks and its END.
#[derive(Debug)]
struct TransactionCount {
    /// Debezium's id: the GTID, else `<binlog file>_<position of BEGIN>`.
    id: Arc<str>,
    /// Events so far.
    events: u64,
    /// Events so far per table (`database.table`), in first-seen order.
    collections: Vec<(String, u64)>,
}

impl TransactionCount {
    /// Counts `change`'s events; its `transaction` block (a key change's create: the next).
    fn next(&mut self, change: &RowChange) -> crate::event::TransactionBlock {
        let name = format!("{}.{}", change.table.database, change.table.table);
        let per_table = match self.collections.iter_mut().find(|(n, _)| *n == name) {
            Some((_, count)) => count,
            None => {
                self.collections.push((name, 0));
                &mut self.collections.last_mut().expect("just pushed").1
            }
        };
        let block = crate::event::TransactionBlock {
            id: Arc::clone(&self.id),
            total_order: self.events + 1,
            data_collection_order: *per_table + 1,
        };
        *per_table += change.events();
        self.events += change.events();
        block
    }
}

/// A table id's latest TABLE_MAP and what sluice made of it.
struct TableSlot {
    /// The event's body: a different one is a new definition.
    tme: Vec<u8>,
    /// Whether the table is captured.
    captured: bool,
    /// Whether it is the signal table.
    signal: bool,
    /// Built at its first row (from the row's column metadata).
    info: Option<Arc<TableInfo>>,
    /// How its rows are read, made with `info` (`None` there: the crate's row iterator).
    plan: Option<RowPlan>,
}

struct MysqlSource {
    /// Whether the artificial ROTATE at the dump's start carries a checksum (see
    /// [`rotate_file_name`]).
    rotate_crc: bool,
    /// The confirmed position, for the lag monitor.
    confirmed: lag::SharedConfirmed,
    /// The commit time (Unix seconds) of the transaction being read.
    commit_unix_s: u32,
    config: Arc<MysqlPipelineConfig>,
    flavor: Flavor,
    stream: BinlogStream,
    store: Arc<dyn StateStore>,
    key: String,
    /// The binlog file being read.
    file: Arc<str>,
    /// GTIDs of every transaction read so far (`None`: the server has none).
    gtids: Option<GtidState>,
    /// The position last saved.
    saved: BinlogPosition,
    /// The last transaction's sequence number.
    seq: u64,
    /// Positions after transactions not yet confirmed, oldest first.
    unconfirmed: VecDeque<(BinlogSeq, BinlogPosition, u32)>,
    tables: HashMap<u64, TableSlot>,
    table_metrics: HashMap<String, Arc<TableMetrics>>,
    known_topics: HashSet<String>,
    /// The producer's `batch.size` when sluice sets it (`None`: set in `[kafka.producer]`).
    batch_size: Option<u64>,
    /// The `batch.size` cap kept across runs (see [`MysqlPipeline`]).
    learned_cap: Arc<std::sync::atomic::AtomicU64>,
    tx: Transaction,
    /// A connection for `information_schema` (schema changes), opened when first needed.
    meta: Option<mysql_async::Conn>,
    /// The schema-change topic's counters.
    schema_metrics: Arc<TableMetrics>,
    /// When the stream last delivered an event (or reading resumed after back-pressure).
    last_event: Instant,
    /// Incremental snapshots (with a signal table).
    incremental: Option<IncrementalRun>,
    /// The incremental snapshot state last saved (saved again with every position).
    saved_incremental: Option<MysqlIncrementalState>,
    /// The pipeline's status board (the admin API's snapshot requests).
    board: Arc<StatusBoard>,
    /// The schema registry, when keys or values are Avro.
    registry: Option<Arc<crate::registry::Registry>>,
    /// The schema-change topic's schemas (JSON with schemas, Avro).
    schema_change_schemas: Option<Arc<crate::event::schema::RenderedSchemas>>,
    /// The transaction topic's schemas, registered when its first record needs them (JSON
    /// with schemas, Avro).
    transaction_schemas: Option<Arc<crate::event::schema::RenderedSchemas>>,
    /// The transaction topic's counters.
    transaction_metrics: Arc<TableMetrics>,
}

/// The file name of a ROTATE event. MariaDB sends the dump's first, artificial ROTATE
/// (`log_pos` 0) before the format description that tells the reader whether events carry a
/// checksum, so with `binlog_checksum = CRC32` its name arrives with the 4 checksum bytes
/// appended; `crc` says to cut them.
fn rotate_file_name(raw: &[u8], artificial: bool, crc: bool) -> String {
    let name = if artificial && crc && raw.len() > 4 {
        &raw[..raw.len() - 4]
    } else {
        raw
    };
    String::from_utf8_lossy(name).into_owned()
}

impl Source for MysqlSource {
    type Change = MysqlChange;
    type Position = BinlogSeq;
    type Message = Option<Result<Event, mysql_async::Error>>;
    type Encoder = MysqlEncoder;

    fn read(&mut self) -> impl std::future::Future<Output = Self::Message> {
        self.stream.next()
    }

    async fn on_message(
        &mut self,
        message: Self::Message,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<bool, PipelineError> {
        let event = match message {
            None => {
                return Err(PipelineError::retryable(
                    "the server ended the binlog stream",
                    BinlogError::StreamClosed,
                ));
            }
            Some(Err(e)) => return Err(self.binlog_error(e)),
            Some(Ok(event)) => event,
        };
        self.last_event = Instant::now();
        self.on_event(&event, intake).await?;
        Ok(false)
    }

    fn not_reading(&mut self) {
        // Back-pressured: the stream's silence is sluice's own.
        self.last_event = Instant::now();
    }

    fn mid_transaction(&self) -> bool {
        // From its GTID event (or BEGIN without GTIDs) to its XID or COMMIT.
        self.tx.gtid.is_some() || self.tx.thread.is_some()
    }

    async fn before_checkpoint(
        &mut self,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<bool, PipelineError> {
        // Operators' requests first, so this checkpoint can record them.
        if let Some(run) = &mut self.incremental {
            for (seq, signal) in self.board.take_signals() {
                run.accept(&signal, intake.last_checkpoint(), seq);
            }
        }
        let heartbeat = self.config.source.heartbeat_interval_ms;
        if heartbeat > 0 {
            let silent = self.last_event.elapsed();
            if silent > Duration::from_millis(heartbeat.saturating_mul(3)) {
                return Err(PipelineError::retryable(
                    format!(
                        "the binlog connection was silent for {} s, three heartbeat periods: replacing it",
                        silent.as_secs()
                    ),
                    BinlogError::Silent,
                ));
            }
        }
        Ok(false)
    }

    async fn confirm(&mut self, watermark: BinlogSeq, _reply: bool) -> Result<(), PipelineError> {
        let mut newest = None;
        while self
            .unconfirmed
            .front()
            .is_some_and(|(seq, _, _)| *seq <= watermark)
        {
            newest = self
                .unconfirmed
                .pop_front()
                .map(|(_, position, ts)| (position, ts));
        }
        let incremental = self
            .incremental
            .as_mut()
            .and_then(|run| run.confirmed(watermark));
        let moved = newest.filter(|(position, _)| *position != self.saved);
        if moved.is_some() || incremental.is_some() {
            let chunk_saved = incremental
                .as_ref()
                .and_then(|s| s.queue.front())
                .is_some_and(|t| t.chunks > 0);
            if incremental.is_some() {
                self.saved_incremental = incremental;
            }
            let position = moved.as_ref().map_or(&self.saved, |(position, _)| position);
            save_checkpoint(
                &self.store,
                &self.key,
                self.flavor,
                position,
                self.saved_incremental.as_ref(),
            )
            .await?;
            if chunk_saved {
                crate::crash_point!("mysql_incremental::progress_saved");
            }
        }
        if let Some((position, commit_unix_s)) = moved {
            *self
                .confirmed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = lag::Confirmed {
                file: position.file.clone(),
                pos: position.pos,
                commit_unix_s: Some(commit_unix_s),
            };
            self.saved = position;
        }
        if let Some(run) = &self.incremental {
            // The admin API's requests now in the state file: their callers get their answer.
            self.board.signals_recorded(run.confirmed_request());
        }
        Ok(())
    }

    async fn after_checkpoint(
        &mut self,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
        _watermark: BinlogSeq,
    ) -> Result<(), PipelineError> {
        if let Some(run) = &mut self.incremental {
            run.poll(intake.last_checkpoint()).await;
            let (status, refused) = (run.status(), run.refused());
            self.board.update(|s| {
                s.incremental_snapshot = status;
                s.refused_snapshot_requests = refused;
            });
        }
        Ok(())
    }

    fn encoder(&mut self) -> MysqlEncoder {
        MysqlEncoder {
            prefix: Arc::from(self.config.kafka.topic_prefix.as_str()),
            tombstones: self.config.kafka.tombstones_on_delete(),
            now_micros: delivery::unix_micros_now(),
            events: Arc::clone(&self.config),
            schema_changes: self.schema_change_schemas.clone(),
        }
    }
}

impl MysqlSource {
    async fn on_event(
        &mut self,
        event: &Event,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<(), PipelineError> {
        let header = event.header();
        let log_pos = u64::from(header.log_pos());
        self.commit_unix_s = header.timestamp();
        match header.event_type_raw() {
            MARIADB_GTID_EVENT => {
                let (gtid, _flags) = MariadbGtid::from_event(event.data(), header.server_id())
                    .ok_or_else(|| bad_event("MariaDB GTID"))?;
                self.tx = Transaction {
                    gtid: Some(Arc::from(gtid.to_string())),
                    mariadb_gtid: Some(gtid),
                    ..Transaction::default()
                };
                return Ok(());
            }
            // MariaDB's compressed query and row events (`log_bin_compress`): not read yet, and
            // never skipped (their rows would be lost).
            t @ MARIADB_QUERY_COMPRESSED_EVENT..=MARIADB_DELETE_ROWS_COMPRESSED_EVENT => {
                return Err(PipelineError::fatal(
                    format!(
                        "the binlog holds a compressed event (type {t}), which sluice does not read yet"
                    ),
                    "SET GLOBAL log_bin_compress = OFF (and in the server's configuration file); events written compressed before cannot be captured",
                ));
            }
            // MariaDB's GTID_LIST (163), BINLOG_CHECKPOINT (161), ANNOTATE_ROWS (160, the
            // statement, only sent on request) and START_ENCRYPTION (164, never sent to
            // replicas) carry nothing a reader of rows needs.
            t if t >= MARIADB_ANNOTATE_ROWS_EVENT => return Ok(()),
            _ => {}
        }
        let data = event
            .read_data()
            .map_err(|e| PipelineError::retryable("undecodable binlog event", e))?;
        let Some(data) = data else {
            return Ok(());
        };
        match data {
            EventData::RotateEvent(rotate) => {
                self.file = Arc::from(rotate_file_name(
                    rotate.name_raw(),
                    header.log_pos() == 0,
                    self.rotate_crc,
                ));
            }
            EventData::GtidEvent(gtid) => {
                let uuid = format_uuid(&gtid.sid());
                self.tx = Transaction {
                    gtid: Some(Arc::from(format!("{uuid}:{}", gtid.gno()))),
                    mysql_gtid: Some((uuid, gtid.gno())),
                    ..Transaction::default()
                };
            }
            EventData::AnonymousGtidEvent(_) => self.tx = Transaction::default(),
            EventData::QueryEvent(query) => {
                let sql = query.query();
                let word = sql
                    .trim_start()
                    .split(|c: char| c.is_whitespace() || c == ';')
                    .next()
                    .unwrap_or_default()
                    .to_ascii_uppercase();
                match word.as_str() {
                    "BEGIN" => {
                        self.tx.thread = Some(query.thread_id());
                        let pos = log_pos.saturating_sub(u64::from(header.event_size()));
                        self.tx.begin = Some((Arc::clone(&self.file), pos));
                    }
                    // Inside a transaction.
                    "SAVEPOINT" => {}
                    "ROLLBACK" if sql.to_ascii_uppercase().contains(" TO ") => {}
                    // COMMIT of a non-transactional table's changes, or a statement (DDL) that
                    // is its own transaction: a DDL statement on something captured is a
                    // schema change (and the end of its transaction).
                    _ => {
                        let pos = log_pos.saturating_sub(u64::from(header.event_size()));
                        self.on_statement(&sql, &query.schema(), header, pos, intake)
                            .await?;
                        self.commit(log_pos, intake);
                    }
                }
            }
            EventData::XidEvent(_) => self.commit(log_pos, intake),
            EventData::TableMapEvent(tme) => {
                let table_id = tme.table_id();
                let body = event.data();
                let unchanged = self
                    .tables
                    .get(&table_id)
                    .is_some_and(|slot| slot.tme == body);
                if !unchanged {
                    let (database, table) = (tme.database_name(), tme.table_name());
                    let captured = self.config.source.captures(&database, &table);
                    let signal = self.config.source.is_signal_table(&database, &table);
                    // Metadata the row reader would panic on (a hostile or broken server).
                    if (captured || signal)
                        && let Some(column) = super::rows::unreadable_column(&tme)
                    {
                        return Err(PipelineError::fatal(
                            format!(
                                "the TABLE_MAP of {database}.{table} describes column {column} with a type or type metadata no MySQL or MariaDB server writes"
                            ),
                            "check that source.mysql.url points at a MySQL or MariaDB server; the binlog cannot be read past this event",
                        ));
                    }
                    self.tables.insert(
                        table_id,
                        TableSlot {
                            tme: body.to_vec(),
                            captured,
                            signal,
                            info: None,
                            plan: None,
                        },
                    );
                }
            }
            EventData::RowsEvent(rows) => {
                self.on_rows(&rows, header, log_pos, intake).await?;
            }
            _ => {}
        }
        Ok(())
    }

    async fn on_rows(
        &mut self,
        rows: &RowsEventData<'_>,
        header: mysql_async::binlog::events::BinlogEventHeader,
        log_pos: u64,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<(), PipelineError> {
        let table_id = rows.table_id();
        let Some(slot) = self.tables.get(&table_id) else {
            return Err(PipelineError::retryable(
                format!("row event for table id {table_id} before its TABLE_MAP"),
                BinlogError::OutOfOrder,
            ));
        };
        if slot.signal {
            return self.on_signal_rows(rows, header, log_pos, intake).await;
        }
        if !slot.captured {
            return Ok(());
        }
        let op = match rows {
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_) => Op::Create,
            RowsEventData::UpdateRowsEvent(_)
            | RowsEventData::UpdateRowsEventV1(_)
            | RowsEventData::PartialUpdateRowsEvent(_) => Op::Update,
            RowsEventData::DeleteRowsEvent(_) | RowsEventData::DeleteRowsEventV1(_) => Op::Delete,
        };
        let Some(tme) = self.stream.get_tme(table_id) else {
            return Err(bad_event("rows (no TABLE_MAP kept)"));
        };
        let pos = log_pos.saturating_sub(u64::from(header.event_size()));
        let undecodable = |e| PipelineError::retryable("undecodable row event", e);
        let (info, decoded) = match (&slot.info, &slot.plan) {
            (Some(info), Some(plan)) if plan.fits(rows) => (
                Arc::clone(info),
                rows::decode(plan, rows).map_err(undecodable)?,
            ),
            (known, _) => {
                // The crate's iterator: the table's first rows (its columns' names and flags
                // come with them), or images a plan does not read.
                let mut decoded = Vec::new();
                let mut columns = None;
                for row in rows.rows(tme) {
                    let (before, after) = row.map_err(undecodable)?;
                    if columns.is_none() {
                        columns = after.as_ref().or(before.as_ref()).map(|r| r.columns());
                    }
                    decoded.push((before.map(|r| r.unwrap()), after.map(|r| r.unwrap())));
                }
                let info = match known {
                    Some(info) => Arc::clone(info),
                    None => {
                        let Some(columns) = columns else {
                            return Ok(());
                        };
                        let name = format!("{}.{}", tme.database_name(), tme.table_name());
                        let metrics = Arc::clone(
                            self.table_metrics
                                .entry(name.clone())
                                .or_insert_with(|| Arc::new(TableMetrics::new(&name))),
                        );
                        let mut info = TableInfo::new(
                            &self.config.kafka.topic_prefix,
                            tme,
                            &columns,
                            metrics,
                            &self.config.kafka.events,
                        )?;
                        if self.config.kafka.events.needs_schemas() {
                            // Before the first record of this definition: its schemas (for
                            // Avro registered, the next version of the subject after a DDL).
                            let catalog = column_catalog(
                                &mut self.meta,
                                &self.config.source,
                                self.flavor,
                                &info.database,
                                &info.table,
                            )
                            .await?;
                            info.prepare_schemas(
                                &catalog,
                                &self.config.kafka.events,
                                self.registry.as_deref(),
                            )
                            .await?;
                        }
                        let info = Arc::new(info);
                        let plan = RowPlan::new(tme, &columns);
                        if let Some(slot) = self.tables.get_mut(&table_id) {
                            slot.info = Some(Arc::clone(&info));
                            slot.plan = plan;
                        }
                        info
                    }
                };
                (info, decoded)
            }
        };
        if decoded.is_empty() {
            return Ok(());
        }
        self.ensure_topic(&info.topic).await?;
        if self.config.kafka.events.provide_transaction_metadata {
            self.begin_transaction(header, pos, intake).await?;
        }
        let size_per_row = rows.rows_data().len() / decoded.len().max(1) * 3 + 512;
        let tombstones = self.config.kafka.tombstones_on_delete();
        for (row, (before, after)) in decoded.into_iter().enumerate() {
            if let Some(run) = &mut self.incremental {
                run.note(&info, before.as_deref(), after.as_deref());
            }
            let change = RowChange {
                table: Arc::clone(&info),
                op,
                before,
                after,
                source: BinlogSource {
                    server_id: header.server_id(),
                    ts_sec: header.timestamp(),
                    gtid: self.tx.gtid.clone(),
                    file: Arc::clone(&self.file),
                    pos,
                    row: u32::try_from(row).unwrap_or(u32::MAX),
                    thread: self.tx.thread,
                    snapshot: SnapshotMarker::False,
                },
                transaction: None,
            };
            let change = RowChange {
                transaction: self.tx.metadata.as_mut().map(|count| count.next(&change)),
                ..change
            };
            let records = change.records(tombstones);
            intake.admit(MysqlChange::Row(change), size_per_row, records);
        }
        Ok(())
    }

    /// Rows of the signal table: inserted rows are signals or snapshot watermarks; a closing
    /// watermark publishes its chunk's rows here, in its transaction.
    async fn on_signal_rows(
        &mut self,
        rows: &RowsEventData<'_>,
        header: mysql_async::binlog::events::BinlogEventHeader,
        log_pos: u64,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<(), PipelineError> {
        if !matches!(
            rows,
            RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)
        ) || self.incremental.is_none()
        {
            return Ok(());
        }
        let Some(tme) = self.stream.get_tme(rows.table_id()) else {
            return Err(bad_event("rows (no TABLE_MAP kept)"));
        };
        let mut signals = Vec::new();
        for row in rows.rows(tme) {
            let (_, after) =
                row.map_err(|e| PipelineError::retryable("undecodable row event", e))?;
            let Some(after) = after else { continue };
            let columns = after.columns();
            let values = after.unwrap();
            let column = |name: &str| -> String {
                columns
                    .iter()
                    .position(|c| c.name_str().eq_ignore_ascii_case(name))
                    .and_then(|i| values.get(i))
                    .and_then(|value| match value {
                        BinlogValue::Value(mysql_async::Value::Bytes(bytes)) => {
                            Some(String::from_utf8_lossy(bytes).into_owned())
                        }
                        BinlogValue::Value(mysql_async::Value::NULL) => None,
                        BinlogValue::Value(other) => Some(other.as_sql(true)),
                        _ => None,
                    })
                    .unwrap_or_default()
            };
            signals.push((column("id"), column("type"), column("data")));
        }
        // The transaction being read commits as the next sequence number.
        let at = BinlogSeq(self.seq + 1);
        let pos = log_pos.saturating_sub(u64::from(header.event_size()));
        for (id, kind, data) in signals {
            let Some(run) = &mut self.incremental else {
                return Ok(());
            };
            if let SignalRow::Close = run.on_signal_row(&id, &kind, &data, at)
                && let Some(chunk) = run.on_close(at).await
            {
                self.publish_chunk(chunk, header, pos, intake).await?;
            }
            if let Some(run) = &mut self.incremental {
                run.maybe_start();
            }
        }
        Ok(())
    }

    /// A closed chunk's rows, as `op: "r"` events at the closing watermark's place.
    async fn publish_chunk(
        &mut self,
        chunk: incremental::ChunkToPublish,
        header: mysql_async::binlog::events::BinlogEventHeader,
        pos: u64,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<(), PipelineError> {
        // A table with no streamed change yet may have no topic.
        self.ensure_topic(&chunk.table.topic).await?;
        let name = format!("{}.{}", chunk.table.database, chunk.table.table);
        metrics::counter!(crate::runtime::metrics::SNAPSHOT_ROWS, "table" => name)
            .increment(chunk.rows.len() as u64);
        for (row, values) in chunk.rows.into_iter().enumerate() {
            let bytes: usize = values
                .iter()
                .map(|v| match v {
                    BinlogValue::Value(mysql_async::Value::Bytes(b)) => b.len(),
                    _ => 8,
                })
                .sum();
            let change = RowChange {
                table: Arc::clone(&chunk.table),
                op: Op::Read,
                before: None,
                after: Some(values),
                source: BinlogSource {
                    server_id: header.server_id(),
                    ts_sec: header.timestamp(),
                    gtid: self.tx.gtid.clone(),
                    file: Arc::clone(&self.file),
                    pos,
                    row: u32::try_from(row).unwrap_or(u32::MAX),
                    thread: self.tx.thread,
                    snapshot: SnapshotMarker::Incremental,
                },
                transaction: None,
            };
            intake.admit(MysqlChange::Row(change), bytes * 3 + 512, 1);
        }
        Ok(())
    }

    /// A statement from a QUERY event (not `BEGIN`): a DDL statement on a captured database or
    /// table invalidates what was cached of the tables (their next TABLE_MAP is read anew)
    /// and, with `include_schema_changes`, becomes a schema-change event, its tables'
    /// structures read from `information_schema` now (see [`ddl`] for the race with later
    /// statements).
    async fn on_statement(
        &mut self,
        sql: &str,
        default_db: &str,
        header: mysql_async::binlog::events::BinlogEventHeader,
        pos: u64,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<(), PipelineError> {
        if ddl::classify(sql, default_db)
            .and_then(|s| s.captured(&self.config.source))
            .is_none()
        {
            return Ok(());
        }
        // Every cached table definition goes: the next row event of each table follows a
        // TABLE_MAP that is read anew.
        self.tables.clear();
        if let Some(run) = &mut self.incremental {
            run.on_schema_change();
        }
        if !self.config.source.include_schema_changes {
            return Ok(());
        }
        // The connection kept since the last statement may have been closed by the server
        // (`wait_timeout`): one more try on a new one.
        let mut tries = if self.meta.is_some() { 2 } else { 1 };
        let change = loop {
            let conn = meta_connection(&mut self.meta, &self.config.source).await?;
            // Inside the delivery loop: bounded, so a hung server cannot stop checkpoints.
            let looked_up = server::bounded(
                "reading a changed table's definition",
                DDL_LOOKUP_DEADLINE,
                ddl::streamed(conn, self.flavor, &self.config.source, sql, default_db),
            )
            .await;
            match looked_up {
                Ok(Some(change)) => break change,
                Ok(None) => return Ok(()),
                Err(error) => {
                    self.meta = None;
                    tries -= 1;
                    if tries == 0 {
                        return Err(error);
                    }
                }
            }
        };
        let topic: Arc<str> = Arc::from(self.config.kafka.topic_prefix.as_str());
        self.ensure_topic(&topic).await?;
        let size = change.ddl.len() + change.changes.len() * 4096 + 1024;
        let schema = StreamedSchemaChange {
            change,
            source: BinlogSource {
                server_id: header.server_id(),
                ts_sec: header.timestamp(),
                gtid: self.tx.gtid.clone(),
                file: Arc::clone(&self.file),
                pos,
                row: 0,
                thread: None,
                snapshot: SnapshotMarker::False,
            },
            topic,
            metrics: Arc::clone(&self.schema_metrics),
        };
        intake.admit(MysqlChange::Schema(Box::new(schema)), size, 1);
        Ok(())
    }

    /// Debezium's BEGIN on the transaction topic, before the first change event of a
    /// transaction (one without captured changes, a DDL statement's, has neither BEGIN nor
    /// END, as Debezium's transaction monitor writes them).
    async fn begin_transaction(
        &mut self,
        header: mysql_async::binlog::events::BinlogEventHeader,
        pos: u64,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) -> Result<(), PipelineError> {
        if self.tx.metadata.is_some() {
            return Ok(());
        }
        let topic = format!("{}.transaction", self.config.kafka.topic_prefix);
        self.ensure_topic(&topic).await?;
        if self.transaction_schemas.is_none() && self.config.kafka.events.needs_schemas() {
            let mut schemas = crate::event::schema::transaction_topic_schemas();
            schemas.registered = crate::registry::register_schemas(
                self.registry.as_deref(),
                &topic,
                &schemas,
                &self.config.kafka.events,
                &topic,
            )
            .await?;
            self.transaction_schemas = Some(Arc::new(schemas));
        }
        let id: Arc<str> = match (&self.tx.gtid, &self.tx.begin) {
            (Some(gtid), _) => Arc::clone(gtid),
            (None, Some((file, begin))) => Arc::from(format!("{file}_{begin}")),
            (None, None) => Arc::from(format!("{}_{pos}", self.file)),
        };
        let (key, value) = crate::event::transaction_event_with_id(
            &id,
            i64::from(header.timestamp()) * 1000,
            None,
        );
        let source = BinlogSource {
            server_id: header.server_id(),
            ts_sec: header.timestamp(),
            gtid: self.tx.gtid.clone(),
            file: Arc::clone(&self.file),
            pos,
            row: 0,
            thread: self.tx.thread,
            snapshot: SnapshotMarker::False,
        };
        self.admit_transaction_event(key, value, source, intake);
        self.tx.metadata = Some(TransactionCount {
            id,
            events: 0,
            collections: Vec::new(),
        });
        Ok(())
    }

    /// Admits a BEGIN or END record, in the transaction topic's formats.
    fn admit_transaction_event(
        &self,
        key: Vec<u8>,
        value: Vec<u8>,
        source: BinlogSource,
        intake: &mut Intake<MysqlChange, BinlogSeq>,
    ) {
        let mut record = OutRecord {
            partition: None,
            topic: Arc::from(format!("{}.transaction", self.config.kafka.topic_prefix)),
            key: Some(key),
            value: Some(value),
            headers: vec![
                (HEADER_BINLOG_FILE.into(), source.file.to_string()),
                (HEADER_BINLOG_POS.into(), source.pos.to_string()),
            ],
        };
        if let Some(schemas) = &self.transaction_schemas {
            record = schemas.wrap_record(&self.config.kafka.events, record);
        }
        let size = record.len() + 256;
        let event = TransactionEvent {
            record,
            source,
            metrics: Arc::clone(&self.transaction_metrics),
        };
        intake.admit(MysqlChange::Transaction(Box::new(event)), size, 1);
    }

    /// The transaction ends at `log_pos`: its GTID joins the set and its position becomes a
    /// checkpoint.
    fn commit(&mut self, log_pos: u64, intake: &mut Intake<MysqlChange, BinlogSeq>) {
        let mut tx = std::mem::take(&mut self.tx);
        if let Some(count) = tx.metadata.take() {
            // Debezium's END: the transaction's events per table.
            let (key, value) = crate::event::transaction_event_with_id(
                &count.id,
                i64::from(self.commit_unix_s) * 1000,
                Some(&count.collections),
            );
            let source = BinlogSource {
                server_id: 0,
                ts_sec: self.commit_unix_s,
                gtid: tx.gtid.clone(),
                file: Arc::clone(&self.file),
                pos: log_pos,
                row: 0,
                thread: tx.thread,
                snapshot: SnapshotMarker::False,
            };
            self.admit_transaction_event(key, value, source, intake);
        }
        match (&mut self.gtids, tx.mysql_gtid, tx.mariadb_gtid) {
            (Some(GtidState::Mysql(set)), Some((uuid, gno)), _) => set.add(&uuid, gno),
            (Some(GtidState::Mariadb(pos)), _, Some(gtid)) => pos.add(gtid),
            _ => {}
        }
        self.seq += 1;
        let seq = BinlogSeq(self.seq);
        self.unconfirmed.push_back((
            seq,
            BinlogPosition {
                file: self.file.to_string(),
                pos: log_pos,
                gtid_set: self.gtids.as_ref().map(ToString::to_string),
            },
            self.commit_unix_s,
        ));
        intake.checkpoint(seq);
    }

    /// A binlog read error: fatal, with the fix, when the server cannot send from the saved
    /// position (error 1236: purged, unknown file or GTIDs); retryable otherwise.
    fn binlog_error(&self, error: mysql_async::Error) -> PipelineError {
        if let mysql_async::Error::Server(server) = &error
            && server.code == ER_MASTER_FATAL_ERROR_READING_BINLOG
        {
            if self.config.source.snapshot == SnapshotMode::WhenNeeded {
                // `when_needed`: forget the position; the next run snapshots anew and streams
                // from the new snapshot's position.
                return match self.store.remove(&self.key) {
                    Ok(()) => PipelineError::retryable(
                        format!(
                            "the server cannot send the binlog from the saved position {} (snapshot = \"when_needed\": snapshotting again)",
                            self.saved
                        ),
                        error,
                    ),
                    Err(e) => PipelineError::fatal_with(
                        format!(
                            "cannot remove the state file {}",
                            self.store.location(&self.key)
                        ),
                        "make state_dir writable",
                        e,
                    ),
                };
            }
            return PipelineError::fatal_with(
                format!(
                    "the server cannot send the binlog from the saved position {}",
                    self.saved
                ),
                format!(
                    "the binlog there is gone (purged, or another server): remove the state file {} to snapshot again (source.mysql.snapshot = \"initial\"; \"never\" starts from the server's current position and the changes in between are not captured), or set snapshot = \"when_needed\" to do so by itself; keep binlogs longer than sluice may be down (binlog_expire_logs_seconds)",
                    self.store.location(&self.key)
                ),
                error,
            );
        }
        PipelineError::retryable("reading the binlog failed", error)
    }

    async fn ensure_topic(&mut self, topic: &str) -> Result<(), PipelineError> {
        let config = &self.config;
        if !config.kafka.create_topics || self.known_topics.contains(topic) {
            return Ok(());
        }
        let topics = config.routed_topics(&[topic.to_owned()]);
        let create = async {
            kafka::ensure_topics(&config.kafka, &topics, config.kafka.topic_partitions).await?;
            kafka::check_new_topic_batch_size(
                &config.kafka,
                topic,
                self.batch_size,
                &self.learned_cap,
            )
            .await
        };
        tokio::time::timeout(TOPIC_DEADLINE, create)
            .await
            .map_err(|e| {
                PipelineError::retryable(format!("creating topic {topic} took too long"), e)
            })??;
        self.known_topics.insert(topic.to_owned());
        Ok(())
    }
}

/// The `information_schema` connection, opened when first needed.
async fn meta_connection<'a>(
    meta: &'a mut Option<mysql_async::Conn>,
    source: &super::config::MysqlSourceConfig,
) -> Result<&'a mut mysql_async::Conn, PipelineError> {
    if meta.is_none() {
        *meta = Some(server::connect(source).await?);
    }
    Ok(meta.as_mut().expect("opened above"))
}

/// `information_schema`'s view of a table's columns (for its schemas), on the `meta`
/// connection: bounded (inside the delivery loop, a hung server cannot stop checkpoints), one
/// more try on a new connection when the kept one was closed by the server (`wait_timeout`).
async fn column_catalog(
    meta: &mut Option<mysql_async::Conn>,
    source: &super::config::MysqlSourceConfig,
    flavor: Flavor,
    database: &str,
    table: &str,
) -> Result<Vec<super::schema::ColumnCatalog>, PipelineError> {
    let mut tries = if meta.is_some() { 2 } else { 1 };
    loop {
        let conn = meta_connection(meta, source).await?;
        let read = server::bounded(
            "reading a table's columns",
            DDL_LOOKUP_DEADLINE,
            super::schema::column_catalog(conn, flavor, database, table),
        )
        .await;
        match read {
            Ok(catalog) => return Ok(catalog),
            Err(error) => {
                *meta = None;
                tries -= 1;
                if tries == 0 {
                    return Err(error);
                }
            }
        }
    }
}

fn bad_event(what: &str) -> PipelineError {
    PipelineError::retryable(format!("undecodable {what} event"), BinlogError::BadLayout)
}

/// A server UUID as MySQL prints it.
fn format_uuid(sid: &[u8; 16]) -> String {
    let hex: String = sid.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

/// The binlog connection ended, went silent or sent what the reader cannot follow: the source
/// of a retryable [`PipelineError`] whose message names the event concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum BinlogError {
    /// The server ended the binlog stream.
    #[error("binlog stream closed")]
    StreamClosed,
    /// No event, not even a heartbeat, for three heartbeat periods.
    #[error("silent binlog connection")]
    Silent,
    /// A rows event came before the TABLE_MAP event of its table.
    #[error("binlog order")]
    OutOfOrder,
    /// An event's bytes do not match its type's layout.
    #[error("binlog event layout")]
    BadLayout,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The message users see is the one of the `io::Error` stand-in this type replaced.
    #[test]
    fn binlog_errors_read_as_the_text_they_replaced() {
        for (typed, text) in [
            (BinlogError::StreamClosed, "binlog stream closed"),
            (BinlogError::Silent, "silent binlog connection"),
            (BinlogError::OutOfOrder, "binlog order"),
            (BinlogError::BadLayout, "binlog event layout"),
        ] {
            assert_eq!(
                PipelineError::retryable("the step", typed).chain(),
                PipelineError::retryable("the step", std::io::Error::other(text)).chain()
            );
        }
    }
}

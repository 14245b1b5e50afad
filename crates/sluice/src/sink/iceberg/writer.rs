//! A sub-partition's writer: rows into Parquet data files through the `iceberg` crate's
//! writer, one snapshot per epoch, exactly once.
//!
//! - **Rows.** Each record is decoded ([`crate::sink::typed::event`]), its values converted for the table's
//!   columns ([`super::convert`]) and appended to Arrow builders; every [`FLUSH_ROWS`] rows
//!   they go to the crate's rolling data-file writer (Parquet with the table's field ids, a
//!   new file past `target_file_bytes`).
//! - **Commit.** At the end of an epoch the files are appended to the table in one snapshot
//!   (`fast_append`) whose summary holds `sluice.kafka-offsets.<group>`: a JSON object from
//!   `"<topic>/<partition>/<sub-partition>"` to the last offset the snapshot covers (the
//!   Iceberg Kafka Connect sink keeps its offsets in the summary the same way).
//! - **Recovery.** A sub-partition resumes after the offset the newest snapshot that names it
//!   holds (walking back from the current snapshot), so a restarted sink writes no row twice.
//! - **Fencing.** A commit first reads the table and checks that the newest offset recorded
//!   for its sub-partition is the one this writer recovered or last committed; then commits
//!   on top of exactly that metadata ([`super::client::Pinned`]). Another sub-partition's
//!   commit in between makes it read and check again; another writer's commit for the same
//!   sub-partition (a zombie, or this writer's own commit whose answer was lost) ends the run,
//!   whose restart recovers from the table. Data files of a commit that did not happen are
//!   left behind as orphans (Iceberg's orphan-file maintenance removes them), never deleted
//!   when it is unknown whether a commit took them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceberg::arrow::RecordBatchPartitionSplitter;
use iceberg::spec::{DataFile, DataFileFormat, PrimitiveType, Struct, Type};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::file_writer::{
    FileWriter as _, FileWriterBuilder as _, ParquetWriter, ParquetWriterBuilder,
};
use iceberg::writer::partitioning::PartitioningWriter as _;
use iceberg::writer::partitioning::fanout_writer::FanoutWriter;
use iceberg::writer::{CurrentFileStatus as _, IcebergWriter as _, IcebergWriterBuilder as _};
use iceberg::{ErrorKind, NamespaceIdent, TableCreation, TableIdent};

use super::catalog::PgCatalog;
use super::client::{IcebergCatalog, Pinned};
use super::config::{IcebergMode, IcebergSinkConfig};
use super::convert;
use super::rest::{RestAuth, RestCatalog};
use super::upsert::{self, Epoch, KeyIndex, Partitioner, Pos};
use crate::error::PipelineError;
use crate::pg_connect::PgConnectConfig;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::files::{Recovered, SubPartitionId};
use crate::sink::metrics as m;
use crate::sink::postgres::decode::ConnectSchema;
use crate::sink::typed::cells::{self, Cell, Read, Rows};
use crate::sink::typed::event::{Event, SchemaCache, decode_event};
use crate::sink::worker::{RecordData, SubPartitionWriter, WriteFailure};

/// Rows buffered in Arrow builders before they go to the data-file writer.
pub const FLUSH_ROWS: usize = 8192;
/// Times a commit reads the table again after another sub-partition's commit won the race.
const COMMIT_ATTEMPTS: u32 = 20;
/// The snapshot-summary key prefix of the offsets (followed by the consumer group).
pub const OFFSETS_PROPERTY: &str = "sluice.kafka-offsets.";

/// The catalog of `settings` (nothing is contacted yet); `pipeline` names the sessions.
///
/// # Errors
///
/// Fatal when the catalog URI or the warehouse's S3 settings are unusable.
pub fn open_catalog(
    pipeline: &str,
    settings: &IcebergSinkConfig,
) -> Result<IcebergCatalog, PipelineError> {
    let file_io =
        super::storage::warehouse_file_io(&settings.warehouse, &settings.s3).map_err(|e| {
            PipelineError::fatal(
                format!("sink.iceberg.s3: the S3 client cannot be made: {e}"),
                "fix [sink.iceberg.s3] or the AWS_* environment",
            )
        })?;
    if settings.is_rest() {
        let auth = match (
            settings.catalog_token.as_deref().filter(|t| !t.is_empty()),
            settings
                .catalog_credential
                .as_deref()
                .filter(|c| !c.is_empty()),
        ) {
            (Some(token), _) => RestAuth::Token(token.to_owned()),
            (None, Some(credential)) => RestAuth::credential(
                credential,
                settings
                    .catalog_oauth2_server_uri
                    .clone()
                    .unwrap_or_else(|| RestCatalog::default_token_endpoint(&settings.catalog_uri)),
                settings
                    .catalog_scope
                    .clone()
                    .unwrap_or_else(|| "catalog".to_owned()),
            ),
            (None, None) => RestAuth::None,
        };
        let catalog = RestCatalog::new(
            &settings.catalog_uri,
            settings.warehouse.clone(),
            auth,
            file_io,
        )
        .map_err(|e| PipelineError::fatal(e.to_string(), "fix sink.iceberg.catalog_uri"))?;
        return Ok(IcebergCatalog::Rest(Box::new(catalog)));
    }
    let mut connect = PgConnectConfig::parse(&settings.catalog_uri).map_err(|e| {
        PipelineError::fatal(
            e.0.replace("source.postgres.url", "sink.iceberg.catalog_uri"),
            "fix sink.iceberg.catalog_uri",
        )
    })?;
    if connect.pg.get_connect_timeout().is_none() {
        connect.pg.connect_timeout(Duration::from_secs(10));
    }
    connect
        .pg
        .keepalives(true)
        .keepalives_idle(Duration::from_secs(30));
    if connect.pg.get_application_name().is_none() {
        connect.pg.application_name(format!("sluice-{pipeline}"));
    }
    Ok(IcebergCatalog::Sql(Box::new(PgCatalog::new(
        connect,
        settings.catalog_name.clone(),
        settings.warehouse.clone(),
        file_io,
    ))))
}

/// The catalog, the warehouse and the settings every sub-partition's writer shares.
pub struct IcebergTarget {
    catalog: IcebergCatalog,
    settings: IcebergSinkConfig,
    /// The summary key of this pipeline's offsets.
    offsets_key: String,
    runtime: tokio::runtime::Handle,
}

/// The entry of a sub-partition in the offsets of a snapshot summary.
pub fn offsets_entry(id: &SubPartitionId) -> String {
    format!("{}/{}/{}", id.topic, id.partition, id.sub)
}

/// The last offset of `entry` the newest snapshot naming it holds (walking back from the
/// current snapshot), `None` when none does.
pub fn recorded_offset(table: &Table, key: &str, entry: &str) -> Option<i64> {
    let metadata = table.metadata();
    let mut snapshot = metadata.current_snapshot().cloned();
    while let Some(current) = snapshot {
        if let Some(text) = current.summary().additional_properties.get(key)
            && let Ok(offsets) = serde_json::from_str::<HashMap<String, i64>>(text)
            && let Some(offset) = offsets.get(entry)
        {
            return Some(*offset);
        }
        snapshot = current
            .parent_snapshot_id()
            .and_then(|id| metadata.snapshot_by_id(id).cloned());
    }
    None
}

/// What fences an epoch's commit: the sub-partition, its entry in the snapshot summaries, the
/// offset its last commit recorded, and what this commit would add.
struct Fence<'a> {
    id: &'a SubPartitionId,
    entry: &'a str,
    committed: Option<i64>,
    last_offset: i64,
    files: usize,
}

/// Commits an epoch under the catalog's optimistic concurrency. Each attempt reads the table
/// and refuses when it records another offset for this sub-partition than `fence.committed`
/// (another writer committed for it: this one is a zombie); then `attempt` commits, on the table
/// read, a snapshot whose summary records `offsets` (this entry → the epoch's last offset).
/// A lost race pauses briefly (spreading writers that keep colliding) and reads again.
fn commit_with_retries(
    target: &IcebergTarget,
    ident: &TableIdent,
    fence: &Fence<'_>,
    mut attempt: impl FnMut(Table, String) -> iceberg::Result<Table>,
) -> Result<Table, PipelineError> {
    let table_label = ident.to_string();
    // Commits the catalog refused (another commit came first).
    let mut refused = 0;
    for round in 1..=COMMIT_ATTEMPTS {
        let table = target
            .runtime
            .block_on(target.catalog.load_table(ident))
            .map_err(|e| catalog_error(format!("cannot read table {ident}"), e))?;
        let recorded = recorded_offset(&table, &target.offsets_key, fence.entry);
        if recorded != fence.committed {
            m::iceberg_fenced(&table_label).increment(1);
            return Err(PipelineError::retryable(
                format!(
                    "table {ident} records offset {recorded:?} for {}/{} sub-partition {} where this writer expected {:?}: another writer committed for it (or this writer's last commit went through unanswered); this writer's {} file(s) are left uncommitted ({refused} commit(s) of them refused by the catalog before) and the run restarts from the table",
                    fence.id.topic, fence.id.partition, fence.id.sub, fence.committed, fence.files
                ),
                "fenced",
            ));
        }
        // Tests hold a writer here, its fence checked and its commit not sent, while another
        // writer commits for the same sub-partition (the zombie-writer race).
        crate::gate_point!("sink::iceberg::before_commit");
        let offsets = serde_json::json!({ fence.entry: fence.last_offset }).to_string();
        match attempt(table, offsets) {
            Ok(table) => return Ok(table),
            Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
                refused += 1;
                m::iceberg_conflicts(&table_label).increment(1);
                std::thread::sleep(Duration::from_millis(
                    u64::from(round.min(10)) * rand::random_range(5..25),
                ));
            }
            Err(e) => return Err(catalog_error(format!("cannot commit to table {ident}"), e)),
        }
    }
    Err(PipelineError::retryable(
        format!("table {ident}: {COMMIT_ATTEMPTS} commits in a row lost the race to other writers"),
        "commit conflicts",
    ))
}

fn catalog_error(what: String, error: iceberg::Error) -> PipelineError {
    PipelineError::retryable(what, error)
}

impl IcebergTarget {
    /// The target of `config`'s `[sink.iceberg]`; connects on first use.
    ///
    /// # Errors
    ///
    /// Fatal when the catalog URI is unusable.
    pub fn open(
        config: &SinkPipelineConfig,
        settings: &IcebergSinkConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, PipelineError> {
        Ok(Self {
            catalog: open_catalog(&config.name, settings)?,
            settings: settings.clone(),
            offsets_key: format!("{OFFSETS_PROPERTY}{}", config.group_id()),
            runtime,
        })
    }

    /// The catalog, for logs (no password).
    pub fn describe(&self) -> String {
        format!(
            "Iceberg catalog {:?} at {}",
            self.settings.catalog_name,
            crate::pg_connect::redact_url(&self.settings.catalog_uri)
        )
    }

    fn ident(&self, topic: &str) -> Result<TableIdent, String> {
        let name = self
            .settings
            .table_for(topic)
            .map_err(|issue| format!("{}: {}", issue.key, issue.problem))?;
        Ok(TableIdent::new(
            NamespaceIdent::new(self.settings.namespace.clone()),
            name,
        ))
    }

    /// What `id` has committed: `Some` when a snapshot of its table records its offset.
    ///
    /// # Errors
    ///
    /// Retryable when the catalog cannot be read; fatal when the topic maps to no table.
    pub fn recover(&self, id: &SubPartitionId) -> Result<Option<Recovered>, PipelineError> {
        let ident = self
            .ident(&id.topic)
            .map_err(|e| PipelineError::fatal(e, "fix [sink.iceberg]'s table mapping"))?;
        let loaded = self.runtime.block_on(async {
            match self.catalog.load_table(&ident).await {
                Ok(table) => Ok(Some(table)),
                Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(None),
                Err(e) => Err(e),
            }
        });
        let table = loaded
            .map_err(|e| catalog_error(format!("cannot read table {ident} from the catalog"), e))?;
        Ok(table
            .and_then(|table| recorded_offset(&table, &self.offsets_key, &offsets_entry(id)))
            .map(|last_offset| Recovered {
                last_offset,
                epoch: 0,
                skipped: Vec::new(),
            }))
    }

    /// The writer of `id`, which resumes after `last_offset` (-1: from the start).
    pub fn writer(self: &Arc<Self>, id: SubPartitionId, last_offset: i64) -> IcebergWriter {
        let ident = self.ident(&id.topic);
        IcebergWriter {
            target: Arc::clone(self),
            entry: offsets_entry(&id),
            id,
            ident,
            table: None,
            layout: None,
            rows: None,
            data: None,
            committed: (last_offset >= 0).then_some(last_offset),
            upsert: None,
            schemas: SchemaCache::default(),
            last_offset: None,
            records: 0,
            rows_written: 0,
            opened_at: None,
        }
    }
}

/// What fills each column of the table.
enum Fill {
    /// The row's field of that name, read as its Connect schema says.
    Field(Read),
    /// One of sluice's append columns.
    Op,
    EventTs,
    SourceTs,
    SourcePosition,
    KafkaPartition,
    KafkaOffset,
}

/// The table's columns as the writer fills them.
pub struct Layout {
    columns: Vec<(String, PrimitiveType, Fill)>,
    /// The schema text the units were read from.
    schema_text: Option<String>,
}

impl Layout {
    /// How the sink fills `table`'s columns from events of `event`'s schema.
    ///
    /// # Errors
    ///
    /// A nested column, or a column of the event the table lacks (the record fails).
    pub fn of(table: &Table, event: &Event) -> Result<Self, String> {
        let text = event.schema.as_ref().map(|(t, _)| t.as_str());
        let schema = table.metadata().current_schema();
        let row_schema = event.schema.as_ref().map(|(_, s)| s);
        let mut columns = Vec::new();
        for field in schema.as_struct().fields() {
            let Type::Primitive(ty) = field.field_type.as_ref() else {
                return Err(format!(
                    "column {:?} of table {} is nested: sluice writes primitive columns only",
                    field.name,
                    table.identifier()
                ));
            };
            let fill = match field.name.as_str() {
                convert::OP_COLUMN => Fill::Op,
                convert::EVENT_TS_COLUMN => Fill::EventTs,
                convert::SOURCE_TS_COLUMN => Fill::SourceTs,
                convert::SOURCE_POSITION_COLUMN => Fill::SourcePosition,
                convert::KAFKA_PARTITION_COLUMN => Fill::KafkaPartition,
                convert::KAFKA_OFFSET_COLUMN => Fill::KafkaOffset,
                name => Fill::Field(Read::of(row_schema.and_then(|s| s.field(name)))),
            };
            columns.push((field.name.clone(), ty.clone(), fill));
        }
        if let Some(row) = row_schema
            && let Some(missing) = row
                .fields
                .iter()
                .find(|f| schema.field_by_name(&f.field).is_none())
        {
            return Err(format!(
                "the event has a column {:?} that table {} lacks (add it to the table, or set sink.iceberg.auto_evolve = true)",
                missing.field,
                table.identifier()
            ));
        }
        Ok(Layout {
            columns,
            schema_text: text.map(str::to_owned),
        })
    }

    /// The cells of `event`'s row, one per column, for the record at `partition`/`offset`
    /// (what the sink writes; `sluice verify` compares the table's rows with them).
    ///
    /// # Errors
    ///
    /// A value that does not fit its column (the record fails).
    pub fn cells(&self, event: &Event, partition: i32, offset: i64) -> Result<Vec<Cell>, String> {
        // A field the table lacks would be lost (a null one holds nothing to lose).
        if event.schema.is_none()
            && let Some(row) = &event.row
            && let Some((extra, _)) = row
                .iter()
                .find(|(k, v)| !v.is_null() && !self.columns.iter().any(|(name, ..)| name == *k))
        {
            return Err(format!(
                "the event has a column {extra:?} that the table lacks (add it to the table, or set sink.iceberg.auto_evolve = true)"
            ));
        }
        let mut cells = Vec::with_capacity(self.columns.len());
        for (name, ty, fill) in &self.columns {
            let cell = match fill {
                Fill::Field(read) => match event.row.as_ref().and_then(|r| r.get(name)) {
                    Some(value) => cells::convert(value, ty, *read)
                        .map_err(|e| format!("column {name:?}: {e}"))?,
                    None => Cell::Null,
                },
                Fill::Op => event.op.clone().map_or(Cell::Null, Cell::Str),
                Fill::EventTs => event.event_ts.map_or(Cell::Null, Cell::I64),
                Fill::SourceTs => event.source_ts.map_or(Cell::Null, Cell::I64),
                Fill::SourcePosition => event.source_position.clone().map_or(Cell::Null, Cell::Str),
                Fill::KafkaPartition => Cell::I32(partition),
                Fill::KafkaOffset => Cell::I64(offset),
            };
            cells.push(cell);
        }
        Ok(cells)
    }

    /// The columns' names, in the table's order.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.columns.iter().map(|(name, ..)| name.as_str())
    }
}

type DataWriter =
    DataFileWriter<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;
type DataWriterBuilder =
    DataFileWriterBuilder<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// Append mode's data-file writer: one rolling writer, or one per partition of the table's
/// partition spec (the batch split by the spec's transforms).
enum AppendWriter {
    Plain(Box<DataWriter>),
    Partitioned {
        writer: Box<FanoutWriter<DataWriterBuilder>>,
        splitter: Box<RecordBatchPartitionSplitter>,
    },
}

impl AppendWriter {
    async fn write(&mut self, batch: arrow_array::RecordBatch) -> iceberg::Result<()> {
        match self {
            Self::Plain(writer) => writer.write(batch).await,
            Self::Partitioned { writer, splitter } => {
                for (key, part) in splitter.split(&batch)? {
                    writer.write(key, part).await?;
                }
                Ok(())
            }
        }
    }

    async fn close(self) -> iceberg::Result<Vec<DataFile>> {
        match self {
            Self::Plain(mut writer) => writer.close().await,
            Self::Partitioned { writer, .. } => (*writer).close().await,
        }
    }
}

/// A sub-partition's upsert state ([`super::upsert`]).
struct UpsertState {
    /// The directory of this sub-partition's files ([`upsert::owner_dir`]).
    owner: String,
    /// The positions of the key columns among the table's columns.
    key_columns: Vec<usize>,
    /// The partition of a row (`None`: the table is unpartitioned).
    partitioner: Option<Partitioner>,
    /// Where each committed key's live row is.
    index: KeyIndex,
    /// The open epoch's changes.
    epoch: Epoch,
    /// The open epoch's name (its files' names start with it).
    epoch_name: String,
    /// The data file rows of each partition go to now (one for an unpartitioned table).
    files: HashMap<Struct, OpenFile>,
    /// Rows in the open files' builders, not yet sent to their writers.
    buffered: usize,
    /// The epoch's data files written and closed.
    closed: Vec<DataFile>,
    /// Data files started in the epoch.
    files_started: u32,
}

/// A data file of an upsert epoch: its path is fixed when its first row is placed, so that
/// the row's position is known before the row is written.
struct OpenFile {
    path: String,
    number: u32,
    /// Rows placed in the file (written or still in the builders).
    rows: u64,
    /// The rows placed and not yet sent to the writer.
    buffer: Rows,
    writer: Option<ParquetWriter>,
}

impl UpsertState {
    fn new_epoch_name() -> String {
        format!("{:016x}", rand::random::<u64>())
    }

    /// Places the row `cells` (of `schema`) in the open data file of its partition: the
    /// position it takes.
    fn place_row(&mut self, cells: &[Cell], schema: &iceberg::spec::Schema) -> Result<Pos, String> {
        let partition = match &self.partitioner {
            Some(partitioner) => partitioner.partition(cells)?,
            None => Struct::empty(),
        };
        let file = match self.files.entry(partition) {
            std::collections::hash_map::Entry::Occupied(open) => open.into_mut(),
            std::collections::hash_map::Entry::Vacant(vacant) => {
                self.files_started += 1;
                let path = format!(
                    "{}{}-{:05}.parquet",
                    self.owner, self.epoch_name, self.files_started
                );
                let number = self.index.file_number(&path, vacant.key());
                vacant.insert(OpenFile {
                    path,
                    number,
                    rows: 0,
                    buffer: Rows::new(schema)?,
                    writer: None,
                })
            }
        };
        file.buffer.push(cells)?;
        let pos = Pos {
            file: file.number,
            row: file.rows,
        };
        file.rows += 1;
        self.buffered += 1;
        Ok(pos)
    }

    fn clear(&mut self) {
        self.epoch = Epoch::default();
        self.epoch_name = Self::new_epoch_name();
        self.files.clear();
        self.buffered = 0;
        self.closed.clear();
        self.files_started = 0;
    }
}

/// The writer of one sub-partition (see the module's documentation).
pub struct IcebergWriter {
    target: Arc<IcebergTarget>,
    id: SubPartitionId,
    entry: String,
    ident: Result<TableIdent, String>,
    table: Option<Table>,
    layout: Option<Layout>,
    rows: Option<Rows>,
    data: Option<AppendWriter>,
    /// The last offset the table records for this sub-partition (what a commit expects).
    committed: Option<i64>,
    /// `mode = "upsert"`: the key index and the epoch's files and changes (made with the
    /// table).
    upsert: Option<UpsertState>,
    schemas: SchemaCache,
    last_offset: Option<i64>,
    records: u64,
    rows_written: u64,
    opened_at: Option<Instant>,
}

fn run_error(what: String, error: iceberg::Error) -> WriteFailure {
    WriteFailure::Run(catalog_error(what, error))
}

/// The field names of a record key: a JSON object, or JsonConverter's
/// `{"schema": …, "payload": {…}}`.
fn key_fields(key: Option<&[u8]>) -> Result<Vec<String>, WriteFailure> {
    let fail = |why: &str| {
        WriteFailure::Record(format!(
            "upsert makes a new table's identifier fields from the record key: {why} (expected a JSON object of the key columns)"
        ))
    };
    let key = key.ok_or_else(|| fail("this record has no key"))?;
    let value: serde_json::Value =
        serde_json::from_slice(key).map_err(|_| fail("the key is not JSON"))?;
    let object = match value {
        serde_json::Value::Object(mut object)
            if object.contains_key("schema") && object.contains_key("payload") =>
        {
            object.remove("payload")
        }
        other => Some(other),
    };
    match object {
        Some(serde_json::Value::Object(fields)) if !fields.is_empty() => {
            Ok(fields.keys().cloned().collect())
        }
        _ => Err(fail("the key is not a JSON object with fields")),
    }
}

impl IcebergWriter {
    fn ident(&self) -> Result<&TableIdent, WriteFailure> {
        self.ident.as_ref().map_err(|e| {
            WriteFailure::Run(PipelineError::fatal(
                e.clone(),
                "fix [sink.iceberg]'s table mapping",
            ))
        })
    }

    /// The table, loaded (or created, with `auto_create`, from the event's schema).
    fn ensure_table(&mut self, event: &Event, key: Option<&[u8]>) -> Result<(), WriteFailure> {
        if self.table.is_some() {
            return Ok(());
        }
        let ident = self.ident()?.clone();
        let target = Arc::clone(&self.target);
        let loaded = target.runtime.block_on(async {
            match target.catalog.load_table(&ident).await {
                Ok(table) => Ok(Some(table)),
                Err(e) if e.kind() == ErrorKind::TableNotFound => Ok(None),
                Err(e) => Err(e),
            }
        });
        let table = match loaded.map_err(|e| run_error(format!("cannot read table {ident}"), e))? {
            Some(table) => table,
            None if !target.settings.auto_create => {
                return Err(WriteFailure::Run(PipelineError::fatal(
                    format!("table {ident} does not exist in the Iceberg catalog"),
                    "create it, or set sink.iceberg.auto_create = true",
                )));
            }
            None => {
                // An event without a schema (plain JSON): the types its values suggest.
                let inferred;
                let row = match (&event.schema, &event.row) {
                    (Some((_, row)), _) => row,
                    (None, Some(values)) => {
                        inferred = convert::inferred_row_schema(values, |_| true);
                        &inferred
                    }
                    (None, None) => {
                        return Err(WriteFailure::Record(format!(
                            "table {ident} does not exist, and auto_create makes it from an event's row: this event has none"
                        )));
                    }
                };
                let schema = match target.settings.mode {
                    IcebergMode::Append => convert::append_schema(row),
                    IcebergMode::Upsert => convert::upsert_schema(row, &key_fields(key)?),
                }
                .map_err(WriteFailure::Record)?;
                let spec = partition_spec(&schema, &target.settings.partition_by)
                    .map_err(WriteFailure::Record)?;
                target
                    .runtime
                    .block_on(create_table(&target.catalog, &ident, schema, spec))
                    .map_err(|e| run_error(format!("cannot create table {ident}"), e))?
            }
        };
        if target.settings.mode == IcebergMode::Upsert {
            self.upsert = Some(self.upsert_state(&table)?);
        }
        self.table = Some(table);
        Ok(())
    }

    /// The upsert state of this sub-partition on `table`: its key index rebuilt from the
    /// table's files.
    fn upsert_state(&self, table: &Table) -> Result<UpsertState, WriteFailure> {
        let schema = table.metadata().current_schema();
        let key_ids: Vec<i32> = schema.identifier_field_ids().collect();
        if key_ids.is_empty() {
            return Err(WriteFailure::Run(PipelineError::fatal(
                format!(
                    "table {} has no identifier fields: upsert mode finds rows by them",
                    table.identifier()
                ),
                "set the table's identifier fields to the record key's columns (auto_create does)",
            )));
        }
        let key_columns = key_ids
            .iter()
            .map(|id| {
                schema
                    .as_struct()
                    .fields()
                    .iter()
                    .position(|f| f.id == *id)
                    .ok_or_else(|| {
                        WriteFailure::Run(PipelineError::fatal(
                            format!(
                                "table {}: identifier field {id} is not a top-level column",
                                table.identifier()
                            ),
                            "use top-level key columns",
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let partitioner = Partitioner::of(table.metadata()).map_err(|e| {
            WriteFailure::Run(PipelineError::fatal(
                format!("table {}: {e}", table.identifier()),
                "partition upsert tables by top-level columns with Iceberg's transforms",
            ))
        })?;
        let owner = upsert::owner_dir(
            table.metadata().location(),
            &self.id.topic,
            self.id.partition,
            self.id.sub,
        );
        let rebuilt = self
            .target
            .runtime
            .block_on(upsert::rebuild(table, &owner, &key_ids))
            .map_err(|e| {
                run_error(
                    format!(
                        "cannot rebuild the key index of {}/{} sub-partition {} from table {}",
                        self.id.topic,
                        self.id.partition,
                        self.id.sub,
                        table.identifier()
                    ),
                    e,
                )
            })?;
        tracing::info!(
            table = %table.identifier(),
            topic = %self.id.topic,
            partition = self.id.partition,
            sub = self.id.sub,
            keys = rebuilt.index.len(),
            duplicates = rebuilt.duplicates.len(),
            "upsert key index rebuilt from the table"
        );
        Ok(UpsertState {
            owner,
            key_columns,
            partitioner,
            index: rebuilt.index,
            epoch: Epoch::with_deletes(rebuilt.duplicates),
            epoch_name: UpsertState::new_epoch_name(),
            files: HashMap::new(),
            buffered: 0,
            closed: Vec::new(),
            files_started: 0,
        })
    }

    /// `auto_evolve`: adds to the table the columns `event`'s schema has and the table lacks,
    /// and widens the ones the spec allows ([`convert::evolved_schema`]), in a commit of its
    /// own: what the open epoch holds (written under the old schema) is committed first.
    /// Another writer's commit in between makes it read the table and check again; a schema
    /// another writer already evolved is taken as it is.
    fn ensure_columns(&mut self, event: &Event) -> Result<(), WriteFailure> {
        let Some((text, row)) = &event.schema else {
            return self.ensure_inferred_columns(event);
        };
        if self
            .layout
            .as_ref()
            .is_some_and(|l| l.schema_text.as_deref() == Some(text.as_str()))
        {
            return Ok(());
        }
        self.evolve_to(row)
    }

    /// `auto_evolve` for an event without a schema (plain JSON): adds a column for each field
    /// with a value that the table lacks, typed as its value suggests
    /// ([`convert::inferred_row_schema`]); existing columns stay as they are.
    fn ensure_inferred_columns(&mut self, event: &Event) -> Result<(), WriteFailure> {
        let (Some(values), Some(table)) = (&event.row, &self.table) else {
            return Ok(());
        };
        let schema = table.metadata().current_schema();
        let new = |name: &str| schema.field_by_name(name).is_none();
        if !values
            .iter()
            .any(|(name, value)| !value.is_null() && new(name))
        {
            return Ok(());
        }
        let inferred = convert::inferred_row_schema(values, new);
        self.evolve_to(&inferred)
    }

    /// `auto_evolve`: evolves the table to hold `row` ([`convert::evolved_schema`]), if it
    /// does not yet.
    fn evolve_to(&mut self, row: &ConnectSchema) -> Result<(), WriteFailure> {
        let Some(table) = &self.table else {
            return Ok(());
        };
        if convert::evolved_schema(table.metadata().current_schema(), row)
            .map_err(WriteFailure::Record)?
            .is_none()
        {
            return Ok(());
        }
        if self.records > 0 {
            let committed = self.commit_epoch();
            self.clear();
            committed.map_err(WriteFailure::Run)?;
        }
        let ident = self.ident()?.clone();
        let target = Arc::clone(&self.target);
        for attempt in 1..=COMMIT_ATTEMPTS {
            let table = target
                .runtime
                .block_on(target.catalog.load_table(&ident))
                .map_err(|e| run_error(format!("cannot read table {ident}"), e))?;
            let Some(schema) = convert::evolved_schema(table.metadata().current_schema(), row)
                .map_err(WriteFailure::Record)?
            else {
                self.table = Some(table);
                break;
            };
            let columns = schema.as_struct().fields().len();
            let committed = target.runtime.block_on(async {
                let metadata = table
                    .metadata()
                    .clone()
                    .into_builder(Some(table.metadata_location_result()?.to_owned()))
                    .add_current_schema(schema)?
                    .build()?
                    .metadata;
                target.catalog.commit_metadata(&table, metadata).await
            });
            match committed {
                Ok(table) => {
                    tracing::info!(table = %ident, columns, "auto_evolve: the table's schema evolved");
                    self.table = Some(table);
                    break;
                }
                Err(e)
                    if e.kind() == ErrorKind::CatalogCommitConflicts
                        && attempt < COMMIT_ATTEMPTS =>
                {
                    std::thread::sleep(Duration::from_millis(
                        u64::from(attempt.min(10)) * rand::random_range(5..25),
                    ));
                }
                Err(e) => {
                    return Err(run_error(
                        format!("cannot evolve the schema of table {ident}"),
                        e,
                    ));
                }
            }
        }
        // The layout, the builders and the upsert key positions follow the new schema (new
        // columns come after the old ones, whose positions stay).
        self.layout = None;
        self.rows = None;
        Ok(())
    }

    /// The layout for `event`'s schema (kept while the schema text is the same).
    fn ensure_layout(&mut self, event: &Event) -> Result<(), String> {
        let text = event.schema.as_ref().map(|(t, _)| t.as_str());
        if let Some(layout) = &self.layout
            && layout.schema_text.as_deref() == text
        {
            return Ok(());
        }
        let Some(table) = &self.table else {
            return Err("no table".into());
        };
        self.layout = Some(Layout::of(table, event)?);
        Ok(())
    }

    /// The cells of `event`'s row, one per column.
    fn cells(&self, event: &Event, data: &RecordData) -> Result<Vec<Cell>, String> {
        let layout = self.layout.as_ref().ok_or("no layout")?;
        layout.cells(event, self.id.partition, data.offset)
    }

    /// Sends the buffered rows to the data-file writer (opened on first use).
    fn flush(&mut self) -> Result<(), PipelineError> {
        if self.upsert.is_some() {
            return self.flush_upsert();
        }
        let Some(rows) = self.rows.as_mut().filter(|r| !r.is_empty()) else {
            return Ok(());
        };
        let batch = rows
            .take()
            .map_err(|e| PipelineError::fatal(format!("cannot assemble rows: {e}"), "report it"))?;
        let table = self
            .table
            .as_ref()
            .ok_or_else(|| PipelineError::fatal("rows without a table", "report it"))?;
        let target = Arc::clone(&self.target);
        let prefix = format!(
            "{}-{}-{}-{:016x}",
            self.id.topic.replace(['/', '\\'], "_"),
            self.id.partition,
            self.id.sub,
            rand::random::<u64>()
        );
        let data = &mut self.data;
        target
            .runtime
            .block_on(async {
                if data.is_none() {
                    let metadata = table.metadata();
                    let parquet = ParquetWriterBuilder::new(
                        parquet_properties(),
                        metadata.current_schema().clone(),
                    );
                    let rolling = RollingFileWriterBuilder::new(
                        parquet,
                        usize::try_from(target.settings.target_file_bytes).unwrap_or(usize::MAX),
                        table.file_io().clone(),
                        DefaultLocationGenerator::new(metadata)?,
                        DefaultFileNameGenerator::new(prefix, None, DataFileFormat::Parquet),
                    );
                    let builder = DataFileWriterBuilder::new(rolling);
                    let spec = metadata.default_partition_spec();
                    *data = Some(if spec.is_unpartitioned() {
                        AppendWriter::Plain(Box::new(builder.build(None).await?))
                    } else {
                        AppendWriter::Partitioned {
                            writer: Box::new(FanoutWriter::new(builder)),
                            splitter: Box::new(
                                RecordBatchPartitionSplitter::try_new_with_computed_values(
                                    metadata.current_schema().clone(),
                                    Arc::clone(spec),
                                )?,
                            ),
                        }
                    });
                }
                match data.as_mut() {
                    Some(writer) => writer.write(batch).await,
                    None => Ok(()),
                }
            })
            .map_err(|e| {
                catalog_error(
                    format!("cannot write a data file of table {}", table.identifier()),
                    e,
                )
            })
    }

    /// Upsert mode: sends the open files' buffered rows to their writers (opened on first
    /// use), and closes a file past `target_file_bytes`.
    fn flush_upsert(&mut self) -> Result<(), PipelineError> {
        let (Some(table), Some(state)) = (self.table.as_ref(), self.upsert.as_mut()) else {
            return Ok(());
        };
        if state.buffered == 0 {
            return Ok(());
        }
        let target = Arc::clone(&self.target);
        let mut full = Vec::new();
        for (partition, file) in &mut state.files {
            if file.buffer.is_empty() {
                continue;
            }
            let batch = file.buffer.take().map_err(|e| {
                PipelineError::fatal(format!("cannot assemble rows: {e}"), "report it")
            })?;
            let past_target = target
                .runtime
                .block_on(async {
                    if file.writer.is_none() {
                        let parquet = ParquetWriterBuilder::new(
                            parquet_properties(),
                            table.metadata().current_schema().clone(),
                        );
                        file.writer = Some(
                            parquet
                                .build(table.file_io().new_output(&file.path)?)
                                .await?,
                        );
                    }
                    match file.writer.as_mut() {
                        Some(writer) => {
                            writer.write(&batch).await?;
                            Ok(writer.current_written_size() as u64
                                >= target.settings.target_file_bytes)
                        }
                        None => Ok(false),
                    }
                })
                .map_err(|e| {
                    catalog_error(
                        format!("cannot write a data file of table {}", table.identifier()),
                        e,
                    )
                })?;
            if past_target {
                full.push(partition.clone());
            }
        }
        state.buffered = 0;
        for partition in full {
            if let Some(file) = state.files.remove(&partition) {
                let data_file = close_upsert_file(&self.target, file, &partition, table)?;
                state.closed.extend(data_file);
            }
        }
        Ok(())
    }

    /// Upsert mode: writes the epoch's deletes and commits its data and delete files with
    /// the epoch's last offset; the epoch's changes join the key index once committed.
    fn commit_upsert(&mut self) -> Result<(), PipelineError> {
        self.flush()?;
        if let (Some(table), Some(state)) = (self.table.as_ref(), self.upsert.as_mut()) {
            for (partition, file) in state.files.drain() {
                let data_file = close_upsert_file(&self.target, file, &partition, table)?;
                state.closed.extend(data_file);
            }
        }
        let Some(last_offset) = self.last_offset else {
            return Ok(());
        };
        let target = Arc::clone(&self.target);
        let ident = self
            .ident
            .clone()
            .map_err(|e| PipelineError::fatal(e, "fix [sink.iceberg]'s table mapping"))?;
        let (Some(table), Some(state)) = (self.table.as_ref(), self.upsert.as_mut()) else {
            return Ok(());
        };
        if state.closed.is_empty() && !state.epoch.deletes_anything() {
            // Deletes of keys without rows, tombstones: nothing to commit; the group's
            // committed offset carries the progress.
            return Ok(());
        }
        let started = Instant::now();
        // A position-delete file per partition of the rows it deletes.
        let deletes = state.epoch.sorted_deletes(&state.index);
        let mut delete_files = Vec::with_capacity(deletes.len());
        let mut deleted_rows = 0u64;
        for (n, (partition, deletes)) in deletes.iter().enumerate() {
            let path = if n == 0 {
                format!("{}{}-deletes.parquet", state.owner, state.epoch_name)
            } else {
                format!("{}{}-deletes-{n:05}.parquet", state.owner, state.epoch_name)
            };
            let file = target
                .runtime
                .block_on(upsert::write_delete_file(
                    table,
                    path,
                    partition,
                    deletes,
                    delete_file_properties(),
                ))
                .map_err(|e| catalog_error(format!("cannot write the deletes of {ident}"), e))?;
            delete_files.push(file);
            deleted_rows += deletes.len() as u64;
        }
        drop(deletes);
        let files = state.closed.clone();
        let rows: u64 = files.iter().map(DataFile::record_count).sum();
        let truncate = state.epoch.truncated();
        let committed = commit_with_retries(
            &target,
            &ident,
            &Fence {
                id: &self.id,
                entry: &self.entry,
                committed: self.committed,
                last_offset,
                files: files.len() + delete_files.len(),
            },
            |table, offsets| {
                target.runtime.block_on(async {
                    let metadata = upsert::snapshot_metadata(
                        &table,
                        &files,
                        &delete_files,
                        truncate,
                        HashMap::from([(target.offsets_key.clone(), offsets)]),
                    )
                    .await?;
                    crate::crash_point!("sink::iceberg::before_swap");
                    target.catalog.commit_metadata(&table, metadata).await
                })
            },
        )?;
        let table_label = ident.to_string();
        self.committed = Some(last_offset);
        self.table = Some(committed);
        std::mem::take(&mut state.epoch).apply_to(&mut state.index);
        m::iceberg_commits(&table_label).increment(1);
        m::iceberg_files(&table_label).increment(files.len() as u64);
        m::iceberg_rows(&table_label).increment(rows);
        m::iceberg_deletes(&table_label).increment(deleted_rows);
        m::iceberg_commit_duration(&table_label).record(started.elapsed());
        Ok(())
    }

    /// Writes the epoch's files and commits them with the epoch's last offset.
    fn commit_epoch(&mut self) -> Result<(), PipelineError> {
        if self.upsert.is_some() {
            return self.commit_upsert();
        }
        self.flush()?;
        let Some(last_offset) = self.last_offset else {
            return Ok(());
        };
        let Some(writer) = self.data.take() else {
            // Nothing to append (tombstones, dead-lettered records): the group's committed
            // offset carries the progress.
            return Ok(());
        };
        let target = Arc::clone(&self.target);
        let ident = self
            .ident
            .clone()
            .map_err(|e| PipelineError::fatal(e, "fix [sink.iceberg]'s table mapping"))?;
        let files: Vec<DataFile> = target
            .runtime
            .block_on(writer.close())
            .map_err(|e| catalog_error(format!("cannot finish the data files of {ident}"), e))?;
        let started = Instant::now();
        let rows: u64 = files.iter().map(DataFile::record_count).sum();
        let committed = commit_with_retries(
            &target,
            &ident,
            &Fence {
                id: &self.id,
                entry: &self.entry,
                committed: self.committed,
                last_offset,
                files: files.len(),
            },
            |table, offsets| {
                target.runtime.block_on(async {
                    let tx = Transaction::new(&table);
                    let tx = tx
                        .fast_append()
                        .with_check_duplicate(false)
                        .add_data_files(files.clone())
                        .set_snapshot_properties(HashMap::from([(
                            target.offsets_key.clone(),
                            offsets,
                        )]))
                        .apply(tx)?;
                    tx.commit(&Pinned {
                        catalog: &target.catalog,
                        table,
                    })
                    .await
                })
            },
        )?;
        let table_label = ident.to_string();
        self.committed = Some(last_offset);
        self.table = Some(committed);
        m::iceberg_commits(&table_label).increment(1);
        m::iceberg_files(&table_label).increment(files.len() as u64);
        m::iceberg_rows(&table_label).increment(rows);
        m::iceberg_commit_duration(&table_label).record(started.elapsed());
        Ok(())
    }

    fn clear(&mut self) {
        if let Some(state) = self.upsert.as_mut() {
            state.clear();
        }
        self.rows = None;
        self.data = None;
        self.last_offset = None;
        self.records = 0;
        self.rows_written = 0;
        self.opened_at = None;
    }
}

/// Upsert mode: closes `file` (its rows sent to its writer), a data file of `partition` of
/// `table`'s spec, into the epoch's data file (`None`: no row went to it).
fn close_upsert_file(
    target: &IcebergTarget,
    file: OpenFile,
    partition: &Struct,
    table: &Table,
) -> Result<Option<DataFile>, PipelineError> {
    let Some(writer) = file.writer else {
        return Ok(None);
    };
    let built = target
        .runtime
        .block_on(writer.close())
        .map_err(|e| catalog_error(format!("cannot finish the data file {}", file.path), e))?;
    let mut data_file = None;
    for mut builder in built {
        builder
            .content(iceberg::spec::DataContentType::Data)
            .partition(partition.clone())
            .partition_spec_id(table.metadata().default_partition_spec_id());
        let built = builder.build().map_err(|e| {
            PipelineError::fatal(
                format!("cannot describe the data file {}: {e}", file.path),
                "report it",
            )
        })?;
        if built.record_count() != file.rows {
            return Err(PipelineError::fatal(
                format!(
                    "data file {} holds {} rows where {} were placed in it",
                    file.path,
                    built.record_count(),
                    file.rows
                ),
                "report it",
            ));
        }
        data_file = Some(built);
    }
    Ok(data_file)
}

/// The data files' Parquet settings: zstd, and row groups of at most [`ROW_GROUP_ROWS`] rows
/// and [`ROW_GROUP_BYTES`] encoded bytes, which bound what a writer holds in memory before it
/// writes (parquet's default, 1M rows and no byte limit, would hold a whole epoch).
fn parquet_properties() -> parquet::file::properties::WriterProperties {
    parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(
            parquet::basic::ZstdLevel::default(),
        ))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .build()
}

/// A position-delete file's Parquet settings: as a data file's, with its paths' statistics
/// whole (readers pick the delete files of a data file by the bounds of `file_path`).
fn delete_file_properties() -> parquet::file::properties::WriterProperties {
    parquet::file::properties::WriterProperties::builder()
        .set_compression(parquet::basic::Compression::ZSTD(
            parquet::basic::ZstdLevel::default(),
        ))
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_max_row_group_bytes(Some(ROW_GROUP_BYTES))
        .set_statistics_truncate_length(None)
        .build()
}

/// Rows per Parquet row group at most (as the files sink's default).
pub const ROW_GROUP_ROWS: usize = 65_536;
/// Encoded bytes per Parquet row group at most (as the files sink's default).
pub const ROW_GROUP_BYTES: usize = 16 * 1024 * 1024;

/// `partition_by`'s spec over `schema` (`None`: unpartitioned).
///
/// # Errors
///
/// An entry naming a column the schema lacks, or a transform its type refuses.
fn partition_spec(
    schema: &iceberg::spec::Schema,
    partition_by: &[String],
) -> Result<Option<iceberg::spec::UnboundPartitionSpec>, String> {
    if partition_by.is_empty() {
        return Ok(None);
    }
    let mut builder = iceberg::spec::UnboundPartitionSpec::builder();
    for entry in partition_by {
        let (column, transform) = super::config::parse_partition(entry)
            .map_err(|problem| format!("sink.iceberg.partition_by: {problem}"))?;
        let field = schema.field_by_name(&column).ok_or_else(|| {
            format!(
                "sink.iceberg.partition_by: {entry:?} names column {column:?}, which the event's row lacks"
            )
        })?;
        let name = match transform {
            iceberg::spec::Transform::Identity => column.clone(),
            iceberg::spec::Transform::Bucket(_) => format!("{column}_bucket"),
            iceberg::spec::Transform::Truncate(_) => format!("{column}_trunc"),
            other => format!("{column}_{other}"),
        };
        builder = builder
            .add_partition_field(field.id, name, transform)
            .map_err(|e| format!("sink.iceberg.partition_by: {entry:?}: {e}"))?;
    }
    let spec = builder.build();
    // The transform must take the column's type (a day of a string column is refused).
    spec.clone()
        .bind(schema.clone())
        .map_err(|e| format!("sink.iceberg.partition_by: {e}"))?;
    Ok(Some(spec))
}

/// Creates `ident` with `schema` (and its namespace); a table another writer created first
/// is loaded instead.
async fn create_table(
    catalog: &IcebergCatalog,
    ident: &TableIdent,
    schema: iceberg::spec::Schema,
    partition_spec: Option<iceberg::spec::UnboundPartitionSpec>,
) -> iceberg::Result<Table> {
    let namespace = ident.namespace();
    if !catalog.namespace_exists(namespace).await? {
        catalog.create_namespace(namespace).await?;
    }
    let creation = TableCreation::builder()
        .name(ident.name().to_owned())
        .schema(schema)
        .partition_spec_opt(partition_spec)
        .properties([(
            "write.parquet.compression-codec".to_owned(),
            "zstd".to_owned(),
        )])
        .build();
    match catalog.create_table(namespace, creation).await {
        Ok(table) => Ok(table),
        Err(e) if e.kind() == ErrorKind::TableAlreadyExists => catalog.load_table(ident).await,
        Err(e) => Err(e),
    }
}

impl SubPartitionWriter for IcebergWriter {
    fn write(&mut self, data: &RecordData) -> Result<(), WriteFailure> {
        let Some(value) = data.value() else {
            // A tombstone: the delete event before it is the row.
            self.note(data.offset);
            return Ok(());
        };
        let event = decode_event(value, &mut self.schemas).map_err(WriteFailure::Record)?;
        if event.null_payload {
            if self.upsert.is_some() {
                return Err(WriteFailure::Record(
                    "a null payload (ExtractNewRecordState's delete in its `tombstone` mode) has no row to delete by: upsert needs the delete events (no unwrap, or delete.tombstone.handling.mode = \"rewrite\")".into(),
                ));
            }
            // Append: as a tombstone, no row.
            self.note(data.offset);
            return Ok(());
        }
        self.ensure_table(&event, data.key())?;
        if self.target.settings.auto_evolve {
            self.ensure_columns(&event)?;
        }
        self.ensure_layout(&event).map_err(WriteFailure::Record)?;
        if self.upsert.is_some() && event.op.as_deref() == Some("t") {
            if self.target.settings.apply_truncates
                && let Some(state) = self.upsert.as_mut()
            {
                state.epoch.truncate();
            }
            self.note(data.offset);
            return Ok(());
        }
        let cells = self.cells(&event, data).map_err(WriteFailure::Record)?;
        if let Some(state) = self.upsert.as_mut() {
            let key = upsert::key_bytes(state.key_columns.iter().filter_map(|at| cells.get(*at)))
                .map_err(|e| WriteFailure::Record(format!("upsert: {e}")))?;
            if event.op.as_deref() == Some("d") {
                state.epoch.change(&state.index, key, None);
                self.note(data.offset);
                return Ok(());
            }
            let Some(table) = self.table.as_ref() else {
                return Err(WriteFailure::Record("no table".into()));
            };
            let pos = state
                .place_row(&cells, table.metadata().current_schema())
                .map_err(WriteFailure::Record)?;
            state.epoch.change(&state.index, key, Some(pos));
            self.rows_written += 1;
            if state.buffered >= FLUSH_ROWS {
                self.flush().map_err(WriteFailure::Run)?;
            }
            self.note(data.offset);
            return Ok(());
        }
        if self.rows.is_none() {
            let table = self
                .table
                .as_ref()
                .map(|t| t.metadata().current_schema().clone());
            let Some(schema) = table else {
                return Err(WriteFailure::Record("no table".into()));
            };
            self.rows = Some(Rows::new(&schema).map_err(WriteFailure::Record)?);
        }
        if let Some(rows) = self.rows.as_mut() {
            rows.push(&cells).map_err(WriteFailure::Record)?;
            self.rows_written += 1;
            if rows.len() >= FLUSH_ROWS {
                self.flush().map_err(WriteFailure::Run)?;
            }
        }
        self.note(data.offset);
        Ok(())
    }

    fn note(&mut self, offset: i64) {
        self.records += 1;
        self.last_offset = Some(offset);
        self.opened_at.get_or_insert_with(Instant::now);
    }

    fn records(&self) -> u64 {
        self.records
    }

    fn opened_at(&self) -> Option<Instant> {
        self.opened_at
    }

    fn is_full(&self) -> bool {
        self.records >= self.target.settings.commit_records
    }

    fn max_age(&self) -> Duration {
        Duration::from_millis(self.target.settings.commit_interval_ms)
    }

    fn commit(&mut self) -> Result<(), PipelineError> {
        let records = self.records;
        let result = self.commit_epoch();
        self.clear();
        if result.is_ok() {
            // The sink runtime's counter, as the files and PostgreSQL sinks count it: every
            // record of the epoch (tombstones and dead-lettered ones too) is durable now.
            crate::sink::metrics::records_committed().increment(records);
            crate::crash_point!("sink::iceberg::committed");
        }
        result
    }

    fn forget(&mut self) {
        self.clear();
    }

    fn discard(&mut self) {
        self.clear();
    }
}

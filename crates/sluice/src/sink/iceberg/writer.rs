//! A sub-partition's writer: rows into Parquet data files through the `iceberg` crate's
//! writer, one snapshot per epoch, exactly once.
//!
//! - **Rows.** Each record is decoded ([`super::decode`]), its values converted for the table's
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
//!   on top of exactly that metadata ([`super::catalog::Pinned`]). Another sub-partition's
//!   commit in between makes it read and check again; another writer's commit for the same
//!   sub-partition (a zombie, or this writer's own commit whose answer was lost) ends the run,
//!   whose restart recovers from the table. Data files of a commit that did not happen are
//!   left behind as orphans (Iceberg's orphan-file maintenance removes them), never deleted
//!   when it is unknown whether a commit took them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iceberg::spec::{DataFile, DataFileFormat, PrimitiveType, Type};
use iceberg::table::Table;
use iceberg::transaction::{ApplyTransactionAction, Transaction};
use iceberg::writer::base_writer::data_file_writer::{DataFileWriter, DataFileWriterBuilder};
use iceberg::writer::file_writer::ParquetWriterBuilder;
use iceberg::writer::file_writer::location_generator::{
    DefaultFileNameGenerator, DefaultLocationGenerator,
};
use iceberg::writer::file_writer::rolling_writer::RollingFileWriterBuilder;
use iceberg::writer::{IcebergWriter as _, IcebergWriterBuilder as _};
use iceberg::{Catalog, ErrorKind, NamespaceIdent, TableCreation, TableIdent};

use super::catalog::{PgCatalog, Pinned};
use super::config::IcebergSinkConfig;
use super::convert::{self, Cell, Read, Rows};
use super::decode::{Event, SchemaCache, decode_event};
use crate::error::PipelineError;
use crate::pg_connect::PgConnectConfig;
use crate::sink::config::SinkPipelineConfig;
use crate::sink::files::{Recovered, SubPartitionId};
use crate::sink::metrics as m;
use crate::sink::worker::{RecordData, SubPartitionWriter, WriteFailure};

/// Rows buffered in Arrow builders before they go to the data-file writer.
pub const FLUSH_ROWS: usize = 8192;
/// Times a commit reads the table again after another sub-partition's commit won the race.
const COMMIT_ATTEMPTS: u32 = 20;
/// The snapshot-summary key prefix of the offsets (followed by the consumer group).
pub const OFFSETS_PROPERTY: &str = "sluice.kafka-offsets.";

/// The catalog, the warehouse and the settings every sub-partition's writer shares.
pub struct IcebergTarget {
    catalog: PgCatalog,
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
            connect
                .pg
                .application_name(format!("sluice-{}", config.name));
        }
        Ok(Self {
            catalog: PgCatalog::new(
                connect,
                settings.catalog_name.clone(),
                settings.warehouse.clone(),
            ),
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

/// The table's columns as this writer fills them.
struct Layout {
    columns: Vec<(String, PrimitiveType, Fill)>,
    /// The schema text the units were read from.
    schema_text: Option<String>,
}

type DataWriter =
    DataFileWriter<ParquetWriterBuilder, DefaultLocationGenerator, DefaultFileNameGenerator>;

/// The writer of one sub-partition (see the module's documentation).
pub struct IcebergWriter {
    target: Arc<IcebergTarget>,
    id: SubPartitionId,
    entry: String,
    ident: Result<TableIdent, String>,
    table: Option<Table>,
    layout: Option<Layout>,
    rows: Option<Rows>,
    data: Option<DataWriter>,
    /// The last offset the table records for this sub-partition (what a commit expects).
    committed: Option<i64>,
    schemas: SchemaCache,
    last_offset: Option<i64>,
    records: u64,
    rows_written: u64,
    opened_at: Option<Instant>,
}

fn run_error(what: String, error: iceberg::Error) -> WriteFailure {
    WriteFailure::Run(catalog_error(what, error))
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
    fn ensure_table(&mut self, event: &Event) -> Result<(), WriteFailure> {
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
                let Some((_, row)) = &event.schema else {
                    return Err(WriteFailure::Record(format!(
                        "table {ident} does not exist, and auto_create makes it from the events' schemas: this event has none (JsonConverter's schemas.enable)"
                    )));
                };
                let schema = convert::append_schema(row).map_err(WriteFailure::Record)?;
                target
                    .runtime
                    .block_on(create_table(&target.catalog, &ident, schema))
                    .map_err(|e| run_error(format!("cannot create table {ident}"), e))?
            }
        };
        self.table = Some(table);
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
                "the event has a column {:?} that table {} lacks (sluice does not add columns yet: add it to the table)",
                missing.field,
                table.identifier()
            ));
        }
        self.layout = Some(Layout {
            columns,
            schema_text: text.map(str::to_owned),
        });
        Ok(())
    }

    /// The cells of `event`'s row, one per column.
    fn cells(&self, event: &Event, data: &RecordData) -> Result<Vec<Cell>, String> {
        let layout = self.layout.as_ref().ok_or("no layout")?;
        if event.schema.is_none()
            && let Some(row) = &event.row
            && let Some(extra) = row
                .keys()
                .find(|k| !layout.columns.iter().any(|(name, ..)| name == *k))
        {
            return Err(format!(
                "the event has a column {extra:?} that the table lacks (sluice does not add columns yet: add it to the table)"
            ));
        }
        let mut cells = Vec::with_capacity(layout.columns.len());
        for (name, ty, fill) in &layout.columns {
            let cell = match fill {
                Fill::Field(read) => match event.row.as_ref().and_then(|r| r.get(name)) {
                    Some(value) => convert::convert(value, ty, *read)
                        .map_err(|e| format!("column {name:?}: {e}"))?,
                    None => Cell::Null,
                },
                Fill::Op => event.op.clone().map_or(Cell::Null, Cell::Str),
                Fill::EventTs => event.event_ts.map_or(Cell::Null, Cell::I64),
                Fill::SourceTs => event.source_ts.map_or(Cell::Null, Cell::I64),
                Fill::SourcePosition => event.source_position.clone().map_or(Cell::Null, Cell::Str),
                Fill::KafkaPartition => Cell::I32(self.id.partition),
                Fill::KafkaOffset => Cell::I64(data.offset),
            };
            cells.push(cell);
        }
        Ok(cells)
    }

    /// Sends the buffered rows to the data-file writer (opened on first use).
    fn flush(&mut self) -> Result<(), PipelineError> {
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
                    *data = Some(DataFileWriterBuilder::new(rolling).build(None).await?);
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

    /// Writes the epoch's files and commits them with the epoch's last offset.
    fn commit_epoch(&mut self) -> Result<(), PipelineError> {
        self.flush()?;
        let Some(last_offset) = self.last_offset else {
            return Ok(());
        };
        let Some(mut writer) = self.data.take() else {
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
        let table_label = ident.to_string();
        for attempt in 1..=COMMIT_ATTEMPTS {
            let table = target
                .runtime
                .block_on(target.catalog.load_table(&ident))
                .map_err(|e| catalog_error(format!("cannot read table {ident}"), e))?;
            let recorded = recorded_offset(&table, &target.offsets_key, &self.entry);
            if recorded != self.committed {
                m::iceberg_fenced(&table_label).increment(1);
                return Err(PipelineError::retryable(
                    format!(
                        "table {ident} records offset {recorded:?} for {}/{} sub-partition {} where this writer expected {:?}: another writer committed for it (or this writer's last commit went through unanswered); this writer's {} data file(s) are left uncommitted and the run restarts from the table",
                        self.id.topic,
                        self.id.partition,
                        self.id.sub,
                        self.committed,
                        files.len()
                    ),
                    "fenced",
                ));
            }
            let offsets = serde_json::json!({ &self.entry: last_offset }).to_string();
            let committed = target.runtime.block_on(async {
                let tx = Transaction::new(&table);
                let tx = tx
                    .fast_append()
                    .with_check_duplicate(false)
                    .add_data_files(files.clone())
                    .set_snapshot_properties(HashMap::from([(target.offsets_key.clone(), offsets)]))
                    .apply(tx)?;
                tx.commit(&Pinned {
                    catalog: &target.catalog,
                    table,
                })
                .await
            });
            match committed {
                Ok(table) => {
                    self.committed = Some(last_offset);
                    self.table = Some(table);
                    m::iceberg_commits(&table_label).increment(1);
                    m::iceberg_files(&table_label).increment(files.len() as u64);
                    m::iceberg_rows(&table_label).increment(rows);
                    m::iceberg_commit_duration(&table_label).record(started.elapsed());
                    return Ok(());
                }
                Err(e) if e.kind() == ErrorKind::CatalogCommitConflicts => {
                    m::iceberg_conflicts(&table_label).increment(1);
                    // Another sub-partition's snapshot came first: read the table and check
                    // again (a short pause spreads writers that keep colliding).
                    std::thread::sleep(Duration::from_millis(
                        u64::from(attempt.min(10)) * rand::random_range(5..25),
                    ));
                }
                Err(e) => return Err(catalog_error(format!("cannot commit to table {ident}"), e)),
            }
        }
        Err(PipelineError::retryable(
            format!(
                "table {ident}: {COMMIT_ATTEMPTS} commits in a row lost the race to other writers"
            ),
            "commit conflicts",
        ))
    }

    fn clear(&mut self) {
        self.rows = None;
        self.data = None;
        self.last_offset = None;
        self.records = 0;
        self.rows_written = 0;
        self.opened_at = None;
    }
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

/// Rows per Parquet row group at most (as the files sink's default).
pub const ROW_GROUP_ROWS: usize = 65_536;
/// Encoded bytes per Parquet row group at most (as the files sink's default).
pub const ROW_GROUP_BYTES: usize = 16 * 1024 * 1024;

/// Creates `ident` with `schema` (and its namespace); a table another writer created first
/// is loaded instead.
async fn create_table(
    catalog: &PgCatalog,
    ident: &TableIdent,
    schema: iceberg::spec::Schema,
) -> iceberg::Result<Table> {
    let namespace = ident.namespace();
    if !catalog.namespace_exists(namespace).await? {
        catalog.create_namespace(namespace, HashMap::new()).await?;
    }
    let creation = TableCreation::builder()
        .name(ident.name().to_owned())
        .schema(schema)
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
        self.ensure_table(&event)?;
        self.ensure_layout(&event).map_err(WriteFailure::Record)?;
        let cells = self.cells(&event, data).map_err(WriteFailure::Record)?;
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
            rows.push(cells).map_err(WriteFailure::Record)?;
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
        let result = self.commit_epoch();
        self.clear();
        if result.is_ok() {
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

//! `mode = "upsert"`: the table mirrors the source table, its changes applied as Iceberg v2
//! **position deletes** from a key index (docs/kafka-to-iceberg.md, "Upsert mode").
//!
//! - **The key index.** Each sub-partition keeps, for every key it owns, where the key's
//!   live row is: (data file, row position). Keys are hashed to sub-partitions, so a key is
//!   only ever written by one sub-partition, whose data and delete files are under its own
//!   directory of the table (`data/<topic>~p<partition>~s<sub>/`, [`owner_dir`]). The index
//!   is rebuilt from the table on start-up ([`rebuild`]): the key columns of the live data
//!   files under that directory, minus the positions its delete files hold.
//! - **An epoch.** An insert or update appends the new row to the epoch's data file and, when
//!   the key has a live row (committed, or written earlier in the same epoch), adds that
//!   row's position to the epoch's deletes; a delete adds the position only. The epoch's
//!   changes stay beside the index ([`Epoch`]) until the commit went through: a delete only
//!   ever names a position of a committed snapshot or of the snapshot it is committed in
//!   (a position delete applies to data files of its own snapshot too: its data sequence
//!   number is not lower). Several changes of a key in one epoch collapse: every row but the
//!   newest is deleted, and a row inserted and deleted leaves nothing.
//! - **The commit** ([`snapshot_metadata`]) writes the epoch's deletes as one position-delete
//!   file (sorted by file and position, as the spec asks), manifests for the new data and
//!   delete files, and a manifest list that keeps the table's manifests, then swaps the
//!   catalog's pointer ([`super::catalog::PgCatalog::commit_metadata`]). A commit that lost
//!   the race to another sub-partition is rebuilt on the new table with the same files:
//!   other sub-partitions never delete this one's rows, so its deletes stay right.
//! - **Truncates** (`apply_truncates`): the snapshot keeps none of the table's manifests
//!   (every data and delete file leaves the table), and the epoch's rows before the truncate
//!   are deleted by position.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use iceberg::spec::{
    DataContentType, DataFile, Datum, FormatVersion, Literal, MAIN_BRANCH, ManifestContentType,
    ManifestListWriter, ManifestWriterBuilder, NestedField, Operation, PrimitiveType, Schema,
    Snapshot, SnapshotReference, SnapshotRetention, SnapshotSummaryCollector, Struct, Summary,
    TableMetadata, Type,
};
use iceberg::table::Table;
use iceberg::transform::{BoxedTransformFunction, create_transform_function};
use iceberg::writer::file_writer::{FileWriter as _, FileWriterBuilder as _, ParquetWriterBuilder};
use iceberg::{Error, ErrorKind};
use parquet::arrow::ProjectionMask;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::sink::typed::cells::{self, Cell};

/// The reserved field id of a position-delete file's `file_path` column (the spec's).
pub const DELETE_FILE_PATH_ID: i32 = 2_147_483_546;
/// The reserved field id of a position-delete file's `pos` column (the spec's).
pub const DELETE_POS_ID: i32 = 2_147_483_545;

/// A row of a data file: the file (its number in [`KeyIndex`]) and the row's position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pos {
    /// The file's number in its [`KeyIndex`] ([`KeyIndex::path`] gives its path).
    pub file: u32,
    /// The row's position in the file (0-based).
    pub row: u64,
}

/// Where each key's live row is, for the keys of one sub-partition.
///
/// Memory: a key costs its encoded bytes (a 1-byte type tag per column, then the value: 4
/// bytes for an `int`, 8 for a `long`, a 4-byte length and the text for a `string`) in a
/// heap allocation, 16 bytes for the boxed slice, 16 for the position and a control byte of
/// the hash table, whose load factor is at most 7/8 (see docs/kafka-to-iceberg.md for the
/// figure measured per key).
#[derive(Debug, Default)]
pub struct KeyIndex {
    /// The data files the index names, by number, with their partitions (the partition of the
    /// table's spec the file's rows are in; empty for an unpartitioned table).
    files: Vec<(Arc<str>, Struct)>,
    numbers: HashMap<Arc<str>, u32>,
    live: HashMap<Box<[u8]>, Pos>,
}

impl KeyIndex {
    /// The number of `path` (a data file of `partition`), given one if it has none.
    pub fn file_number(&mut self, path: &str, partition: &Struct) -> u32 {
        if let Some(number) = self.numbers.get(path) {
            return *number;
        }
        let number = u32::try_from(self.files.len()).unwrap_or(u32::MAX);
        let path: Arc<str> = Arc::from(path);
        self.files.push((Arc::clone(&path), partition.clone()));
        self.numbers.insert(path, number);
        number
    }

    /// The partition of file `number`.
    fn partition(&self, number: u32) -> Option<&Struct> {
        self.files
            .get(number as usize)
            .map(|(_, partition)| partition)
    }

    /// The path of file `number`.
    pub fn path(&self, number: u32) -> &str {
        self.files
            .get(number as usize)
            .map_or("", |(path, _)| path.as_ref())
    }

    /// Where `key`'s live row is, if it has one.
    pub fn get(&self, key: &[u8]) -> Option<Pos> {
        self.live.get(key).copied()
    }

    /// Keys with a live row.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no key has a live row.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

/// The changes of the open epoch, beside the index until they are committed.
#[derive(Debug, Default)]
pub struct Epoch {
    /// Keys changed in the epoch: their live row now, `None` when deleted.
    changed: HashMap<Box<[u8]>, Option<Pos>>,
    /// Rows the epoch deletes.
    deletes: Vec<Pos>,
    /// Whether the epoch truncated the table (from then on, keys the epoch did not change have
    /// no live row).
    truncated: bool,
}

impl Epoch {
    /// Where `key`'s live row is as of the epoch's last change.
    fn current(&self, index: &KeyIndex, key: &[u8]) -> Option<Pos> {
        match self.changed.get(key) {
            Some(pos) => *pos,
            None if self.truncated => None,
            None => index.get(key),
        }
    }

    /// `key`'s row is now at `pos` (`None`: deleted); its previous live row is deleted.
    pub fn change(&mut self, index: &KeyIndex, key: Box<[u8]>, pos: Option<Pos>) {
        if let Some(previous) = self.current(index, &key) {
            self.deletes.push(previous);
        }
        self.changed.insert(key, pos);
    }

    /// The table is truncated: every row the epoch wrote so far is deleted, and every row
    /// committed before leaves the table with the commit.
    pub fn truncate(&mut self) {
        for pos in self.changed.drain().filter_map(|(_, pos)| pos) {
            self.deletes.push(pos);
        }
        self.truncated = true;
    }

    /// Whether the epoch deletes anything (a row or the table's contents).
    pub fn deletes_anything(&self) -> bool {
        !self.deletes.is_empty() || self.truncated
    }

    /// Whether the epoch truncates the table.
    pub fn truncated(&self) -> bool {
        self.truncated
    }

    /// The epoch's deletes as (file path, position) by the partition of their data files (a
    /// position-delete file holds deletes of one partition: readers apply it to the data files
    /// of its partition), each sorted and without repeats (the spec asks a position-delete
    /// file to be sorted by path, then position).
    pub fn sorted_deletes<'a>(
        &self,
        index: &'a KeyIndex,
    ) -> Vec<(&'a Struct, Vec<(&'a str, u64)>)> {
        static UNPARTITIONED: std::sync::LazyLock<Struct> = std::sync::LazyLock::new(Struct::empty);
        let mut by_partition: Vec<(&Struct, Vec<(&str, u64)>)> = Vec::new();
        let mut places: HashMap<&Struct, usize> = HashMap::new();
        for pos in &self.deletes {
            let partition = index.partition(pos.file).unwrap_or(&UNPARTITIONED);
            let at = *places.entry(partition).or_insert_with(|| {
                by_partition.push((partition, Vec::new()));
                by_partition.len() - 1
            });
            by_partition[at].1.push((index.path(pos.file), pos.row));
        }
        for (_, deletes) in &mut by_partition {
            deletes.sort_unstable();
            deletes.dedup();
        }
        by_partition
    }

    /// Makes the epoch's changes the index's (after its commit).
    pub fn apply_to(self, index: &mut KeyIndex) {
        if self.truncated {
            index.live.clear();
        }
        for (key, pos) in self.changed {
            match pos {
                Some(pos) => {
                    index.live.insert(key, pos);
                }
                None => {
                    index.live.remove(&key);
                }
            }
        }
    }

    /// Rows to delete with the next commit (duplicates [`rebuild`] found).
    pub fn with_deletes(deletes: Vec<Pos>) -> Self {
        Self {
            deletes,
            ..Self::default()
        }
    }
}

/// The directory of a sub-partition's data and delete files in the table at `location`
/// (ending with `/`): Kafka topic names have no `~` or `/`, so no owner's directory is a
/// prefix of another's.
pub fn owner_dir(location: &str, topic: &str, partition: i32, sub: u32) -> String {
    format!(
        "{}/data/{}~p{partition}~s{sub}/",
        location.trim_end_matches('/'),
        topic.replace(['/', '\\', '~'], "_")
    )
}

/// A key's bytes: each column's cell with a type tag, so that keys of different values never
/// share bytes.
///
/// # Errors
///
/// A null key column.
pub fn key_bytes<'a>(cells: impl IntoIterator<Item = &'a Cell>) -> Result<Box<[u8]>, String> {
    let mut bytes = Vec::with_capacity(16);
    for cell in cells {
        match cell {
            Cell::Null => return Err("a key column is null".into()),
            Cell::Bool(v) => bytes.extend([1, u8::from(*v)]),
            Cell::I32(v) => {
                bytes.push(2);
                bytes.extend(v.to_be_bytes());
            }
            Cell::I64(v) => {
                bytes.push(3);
                bytes.extend(v.to_be_bytes());
            }
            Cell::F32(v) => {
                bytes.push(4);
                bytes.extend(v.to_bits().to_be_bytes());
            }
            Cell::F64(v) => {
                bytes.push(5);
                bytes.extend(v.to_bits().to_be_bytes());
            }
            Cell::I128(v) => {
                bytes.push(6);
                bytes.extend(v.to_be_bytes());
            }
            Cell::Str(v) => {
                bytes.push(7);
                bytes.extend(u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes());
                bytes.extend(v.as_bytes());
            }
            Cell::Bytes(v) => {
                bytes.push(8);
                bytes.extend(u32::try_from(v.len()).unwrap_or(u32::MAX).to_be_bytes());
                bytes.extend(v);
            }
        }
    }
    Ok(bytes.into_boxed_slice())
}

fn unexpected(what: String) -> Error {
    Error::new(ErrorKind::DataInvalid, what)
}

/// Reads a Parquet file of the table (whole: files are read one at a time).
async fn read_parquet(
    table: &Table,
    path: &str,
    field_ids: &[i32],
) -> iceberg::Result<Vec<RecordBatch>> {
    let bytes = table.file_io().new_input(path)?.read().await?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| unexpected(format!("cannot read {path}: {e}")))?;
    let descr = builder.parquet_schema();
    let fields = descr.root_schema().get_fields();
    let mut roots = Vec::with_capacity(field_ids.len());
    for id in field_ids {
        let root = fields
            .iter()
            .position(|f| f.get_basic_info().has_id() && f.get_basic_info().id() == *id)
            .ok_or_else(|| unexpected(format!("{path} has no column with field id {id}")))?;
        roots.push(root);
    }
    let mask = ProjectionMask::roots(descr, roots.iter().copied());
    // The batch's columns come in file order: put them in `field_ids`' order.
    let mut order: Vec<usize> = (0..roots.len()).collect();
    order.sort_by_key(|i| roots[*i]);
    let reader = builder
        .with_projection(mask)
        .with_batch_size(8192)
        .build()
        .map_err(|e| unexpected(format!("cannot read {path}: {e}")))?;
    let mut batches = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| unexpected(format!("cannot read {path}: {e}")))?;
        let mut columns: Vec<Option<ArrayRef>> = vec![None; roots.len()];
        for (at, wanted) in order.iter().enumerate() {
            columns[*wanted] = Some(Arc::clone(batch.column(at)));
        }
        let columns: Vec<ArrayRef> = columns.into_iter().flatten().collect();
        batches.push(
            RecordBatch::try_from_iter(
                columns
                    .into_iter()
                    .enumerate()
                    .map(|(i, c)| (format!("c{i}"), c)),
            )
            .map_err(|e| unexpected(format!("cannot read {path}: {e}")))?,
        );
    }
    Ok(batches)
}

/// The partition of a row of the table's default partition spec, from the row's cells (one
/// per column, in the table's order): each partition field's transform applied to its source
/// column's value.
pub struct Partitioner {
    /// Per partition field: its source column's position, the column's type, the transform.
    fields: Vec<(usize, PrimitiveType, BoxedTransformFunction)>,
}

impl Partitioner {
    /// The partitioner of `metadata`'s default spec; `None` for an unpartitioned table.
    ///
    /// # Errors
    ///
    /// A partition field whose source is not a top-level primitive column, or whose transform
    /// the `iceberg` crate does not know.
    pub fn of(metadata: &TableMetadata) -> Result<Option<Self>, String> {
        let spec = metadata.default_partition_spec();
        if spec.is_unpartitioned() {
            return Ok(None);
        }
        let schema = metadata.current_schema();
        let columns = schema.as_struct().fields();
        let mut fields = Vec::new();
        for field in spec.fields() {
            let at = columns
                .iter()
                .position(|c| c.id == field.source_id)
                .ok_or_else(|| {
                    format!(
                        "partition field {:?} is of field {}, which is not a top-level column",
                        field.name, field.source_id
                    )
                })?;
            let Type::Primitive(ty) = columns[at].field_type.as_ref() else {
                return Err(format!(
                    "partition field {:?} is of column {:?}, which is nested",
                    field.name, columns[at].name
                ));
            };
            let transform = create_transform_function(&field.transform)
                .map_err(|e| format!("partition field {:?}: {e}", field.name))?;
            fields.push((at, ty.clone(), transform));
        }
        Ok(Some(Self { fields }))
    }

    /// The partition of the row `cells`.
    ///
    /// # Errors
    ///
    /// A value that its column's type or its transform refuses.
    pub fn partition(&self, cells: &[Cell]) -> Result<Struct, String> {
        let mut values = Vec::with_capacity(self.fields.len());
        for (at, ty, transform) in &self.fields {
            let value = match cells.get(*at).map(|cell| datum(cell, ty)).transpose()? {
                Some(Some(datum)) => transform
                    .transform_literal(&datum)
                    .map_err(|e| format!("the partition of {datum}: {e}"))?
                    .map(|d| Literal::Primitive(d.literal().clone())),
                _ => None,
            };
            values.push(value);
        }
        Ok(Struct::from_iter(values))
    }
}

/// `cell` of a column of type `ty` as the `iceberg` crate's value (`None`: null).
fn datum(cell: &Cell, ty: &PrimitiveType) -> Result<Option<Datum>, String> {
    let datum = match (ty, cell) {
        (_, Cell::Null) => return Ok(None),
        (PrimitiveType::Boolean, Cell::Bool(v)) => Datum::bool(*v),
        (PrimitiveType::Int, Cell::I32(v)) => Datum::int(*v),
        (PrimitiveType::Date, Cell::I32(v)) => Datum::date(*v),
        (PrimitiveType::Long, Cell::I64(v)) => Datum::long(*v),
        (PrimitiveType::Time, Cell::I64(v)) => Datum::time_micros(*v).map_err(|e| e.to_string())?,
        (PrimitiveType::Timestamp, Cell::I64(v)) => Datum::timestamp_micros(*v),
        (PrimitiveType::Timestamptz, Cell::I64(v)) => Datum::timestamptz_micros(*v),
        (PrimitiveType::Float, Cell::F32(v)) => Datum::float(*v),
        (PrimitiveType::Double, Cell::F64(v)) => Datum::double(*v),
        (PrimitiveType::Decimal { .. }, Cell::I128(v)) => {
            Datum::try_from_bytes(&v.to_be_bytes(), ty.clone()).map_err(|e| e.to_string())?
        }
        (PrimitiveType::String, Cell::Str(v)) => Datum::string(v),
        (PrimitiveType::Uuid, Cell::Bytes(v)) => Datum::uuid(
            uuid::Uuid::from_slice(v).map_err(|e| format!("a uuid of {} bytes: {e}", v.len()))?,
        ),
        (PrimitiveType::Binary, Cell::Bytes(v)) => Datum::binary(v.iter().copied()),
        (PrimitiveType::Fixed(_), Cell::Bytes(v)) => Datum::fixed(v.iter().copied()),
        (ty, cell) => return Err(format!("a {cell:?} in a column of type {ty}")),
    };
    Ok(Some(datum))
}

/// What [`rebuild`] found.
pub struct Rebuilt {
    /// The index of the sub-partition's keys.
    pub index: KeyIndex,
    /// Rows of a key that had another live row too (which no commit of sluice leaves: only a
    /// crash of a writer that bypassed the index could), to delete with the next commit.
    pub duplicates: Vec<Pos>,
}

/// The index of the keys whose files are under `owner` (see [`owner_dir`]): the key columns
/// (`key_ids`, field ids) of the table's live data files there, oldest first, minus the
/// positions of the delete files there.
///
/// # Errors
///
/// The files' or the catalog's.
pub async fn rebuild(table: &Table, owner: &str, key_ids: &[i32]) -> iceberg::Result<Rebuilt> {
    let mut index = KeyIndex::default();
    let mut duplicates = Vec::new();
    let metadata = table.metadata();
    let Some(snapshot) = metadata.current_snapshot() else {
        return Ok(Rebuilt { index, duplicates });
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    let mut data: Vec<(i64, String, Struct)> = Vec::new();
    let mut delete_files: Vec<String> = Vec::new();
    let spec_id = metadata.default_partition_spec_id();
    for manifest in list.entries() {
        let manifest = manifest.load_manifest(table.file_io()).await?;
        for entry in manifest.entries() {
            let file = entry.data_file();
            if !entry.is_alive() || !file.file_path().starts_with(owner) {
                continue;
            }
            if manifest.metadata().partition_spec().spec_id() != spec_id {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!(
                        "{} was written with partition spec {}, and the table's is {spec_id}: sluice's upsert writes tables whose partition spec never changed",
                        file.file_path(),
                        manifest.metadata().partition_spec().spec_id()
                    ),
                ));
            }
            match file.content_type() {
                DataContentType::Data => {
                    data.push((
                        entry.sequence_number().unwrap_or(0),
                        file.file_path().into(),
                        file.partition().clone(),
                    ));
                }
                DataContentType::PositionDeletes => delete_files.push(file.file_path().into()),
                DataContentType::EqualityDeletes => {
                    return Err(unexpected(format!(
                        "{} is an equality-delete file: sluice's upsert index cannot apply those",
                        file.file_path()
                    )));
                }
            }
        }
    }
    let mut deleted: HashMap<String, HashSet<u64>> = HashMap::new();
    for path in &delete_files {
        for batch in read_parquet(table, path, &[DELETE_FILE_PATH_ID, DELETE_POS_ID]).await? {
            let paths = batch
                .column(0)
                .as_any()
                .downcast_ref::<StringArray>()
                .ok_or_else(|| unexpected(format!("{path}: file_path is not a string column")))?;
            let positions = batch
                .column(1)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or_else(|| unexpected(format!("{path}: pos is not a long column")))?;
            for (file, pos) in paths.iter().zip(positions.iter()) {
                if let (Some(file), Some(pos)) = (file, pos) {
                    deleted
                        .entry(file.to_owned())
                        .or_default()
                        .insert(u64::try_from(pos).unwrap_or(u64::MAX));
                }
            }
        }
    }
    // Oldest first (an epoch's files in the order written: their names count up), so a newer
    // row of a key wins.
    data.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    let none = HashSet::new();
    for (_, path, partition) in &data {
        let file = index.file_number(path, partition);
        let gone = deleted.get(path).unwrap_or(&none);
        let mut row = 0u64;
        for batch in read_parquet(table, path, key_ids).await? {
            for at in 0..batch.num_rows() {
                if !gone.contains(&row) {
                    let cells = batch
                        .columns()
                        .iter()
                        .map(|c| cells::cell_at(c.as_ref(), at))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| unexpected(format!("{path}: {e}")))?;
                    let key = key_bytes(&cells).map_err(|e| unexpected(format!("{path}: {e}")))?;
                    if let Some(older) = index.live.insert(key, Pos { file, row }) {
                        duplicates.push(older);
                    }
                }
                row += 1;
            }
        }
    }
    Ok(Rebuilt { index, duplicates })
}

/// The schema of a position-delete file (the spec's reserved field ids).
fn delete_schema() -> iceberg::Result<Schema> {
    Schema::builder()
        .with_fields([
            Arc::new(NestedField::required(
                DELETE_FILE_PATH_ID,
                "file_path",
                Type::Primitive(PrimitiveType::String),
            )),
            Arc::new(NestedField::required(
                DELETE_POS_ID,
                "pos",
                Type::Primitive(PrimitiveType::Long),
            )),
        ])
        .build()
}

/// Writes `deletes` (sorted, of data files of `partition` of the table's spec) as a
/// position-delete file at `path`.
///
/// # Errors
///
/// The file system's.
pub async fn write_delete_file(
    table: &Table,
    path: String,
    partition: &Struct,
    deletes: &[(&str, u64)],
    properties: parquet::file::properties::WriterProperties,
) -> iceberg::Result<DataFile> {
    let schema = Arc::new(delete_schema()?);
    let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema)?);
    let mut writer = ParquetWriterBuilder::new(properties, schema)
        .build(table.file_io().new_output(&path)?)
        .await?;
    for chunk in deletes.chunks(65_536) {
        let paths: StringArray = chunk.iter().map(|(p, _)| Some(*p)).collect();
        let positions: Int64Array = chunk
            .iter()
            .map(|(_, r)| Some(i64::try_from(*r).unwrap_or(i64::MAX)))
            .collect();
        let batch = RecordBatch::try_new(
            Arc::clone(&arrow),
            vec![Arc::new(paths) as ArrayRef, Arc::new(positions)],
        )
        .map_err(|e| unexpected(format!("cannot assemble deletes: {e}")))?;
        writer.write(&batch).await?;
    }
    let mut built = writer.close().await?;
    let mut file = built
        .pop()
        .ok_or_else(|| unexpected("the delete file has no rows".into()))?;
    file.content(DataContentType::PositionDeletes)
        .partition(partition.clone())
        .partition_spec_id(table.metadata().default_partition_spec_id());
    file.build()
        .map_err(|e| unexpected(format!("cannot describe the delete file {path}: {e}")))
}

/// The summary's running totals (`total-records`, `total-data-files`, …: what Java's
/// `SnapshotSummary` keeps) from the previous snapshot's and this one's `added-*`. Written
/// here because the `iceberg` crate's own (`update_snapshot_summaries`) is private to it.
/// A total the previous summary lacks is left out, unless `from_zero` (no previous snapshot,
/// or a truncate: the snapshot holds only its own files).
fn add_totals(summary: &mut HashMap<String, String>, previous: Option<&Summary>, from_zero: bool) {
    for (total, added) in [
        ("total-records", "added-records"),
        ("total-files-size", "added-files-size"),
        ("total-data-files", "added-data-files"),
        ("total-delete-files", "added-delete-files"),
        ("total-position-deletes", "added-position-deletes"),
        ("total-equality-deletes", "added-equality-deletes"),
    ] {
        let before = if from_zero {
            Some(0)
        } else {
            previous
                .and_then(|p| p.additional_properties.get(total))
                .and_then(|v| v.parse::<u64>().ok())
        };
        let added = summary
            .get(added)
            .map_or(Some(0), |v| v.parse::<u64>().ok());
        if let (Some(before), Some(added)) = (before, added) {
            summary.insert(total.to_owned(), before.saturating_add(added).to_string());
        }
    }
}

/// A snapshot id no snapshot of `metadata` has.
fn new_snapshot_id(metadata: &TableMetadata) -> i64 {
    loop {
        let id = rand::random_range(1..i64::MAX);
        if metadata.snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// The table's next metadata: a snapshot on top of `table`'s current one that adds `data`
/// and `deletes` files (and, with `truncate`, keeps none of the table's files), with
/// `properties` in its summary.
///
/// # Errors
///
/// The files' (manifests, manifest list), or a table that is not in format version 2.
pub async fn snapshot_metadata(
    table: &Table,
    data: &[DataFile],
    deletes: &[DataFile],
    truncate: bool,
    properties: HashMap<String, String>,
) -> iceberg::Result<TableMetadata> {
    let metadata = table.metadata();
    if metadata.format_version() != FormatVersion::V2 {
        return Err(Error::new(
            ErrorKind::FeatureUnsupported,
            format!(
                "table {} is in format version {}: sluice's upsert writes format version 2 tables",
                table.identifier(),
                metadata.format_version()
            ),
        ));
    }
    let snapshot_id = new_snapshot_id(metadata);
    let sequence_number = metadata.next_sequence_number();
    let parent = metadata.current_snapshot_id();
    let commit = format!("{:032x}", rand::random::<u128>());
    let location = metadata.location().trim_end_matches('/');
    let schema = metadata.current_schema().clone();
    let spec = metadata.default_partition_spec().as_ref().clone();
    let mut manifests = Vec::new();
    if !truncate && let Some(current) = metadata.current_snapshot() {
        manifests.extend(
            table
                .manifest_list_reader(current)
                .load()
                .await?
                .consume_entries(),
        );
    }
    let mut summary = SnapshotSummaryCollector::default();
    for (n, (files, content)) in [
        (data, ManifestContentType::Data),
        (deletes, ManifestContentType::Deletes),
    ]
    .into_iter()
    .enumerate()
    {
        if files.is_empty() {
            continue;
        }
        let output = table
            .file_io()
            .new_output(format!("{location}/metadata/{commit}-m{n}.avro"))?;
        let builder =
            ManifestWriterBuilder::new(output, Some(snapshot_id), schema.clone(), spec.clone());
        let mut writer = match content {
            ManifestContentType::Data => builder.build_v2_data(),
            ManifestContentType::Deletes => builder.build_v2_deletes(),
        };
        for file in files {
            summary.add_file(
                file,
                schema.clone(),
                metadata.default_partition_spec().clone(),
            );
            // The sequence number is inherited from the manifest list's at commit.
            writer.add_file(file.clone(), -1)?;
        }
        manifests.push(writer.write_manifest_file().await?);
    }
    let list_path = format!("{location}/metadata/snap-{snapshot_id}-1-{commit}.avro");
    let mut list = ManifestListWriter::v2(
        table.file_io().new_output(&list_path)?.writer().await?,
        snapshot_id,
        parent,
        sequence_number,
    );
    list.add_manifests(manifests.into_iter())?;
    list.close().await?;
    let mut additional_properties = properties;
    additional_properties.extend(summary.build());
    let previous = if truncate {
        None
    } else {
        metadata.current_snapshot().map(|s| s.summary())
    };
    add_totals(
        &mut additional_properties,
        previous,
        parent.is_none() || truncate,
    );
    let operation = if truncate || !deletes.is_empty() {
        Operation::Overwrite
    } else {
        Operation::Append
    };
    let snapshot = Snapshot::builder()
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent)
        .with_sequence_number(sequence_number)
        .with_timestamp_ms(chrono::Utc::now().timestamp_millis())
        .with_manifest_list(list_path)
        .with_summary(Summary {
            operation,
            additional_properties,
        })
        .with_schema_id(metadata.current_schema_id())
        .build();
    Ok(metadata
        .clone()
        .into_builder(Some(table.metadata_location_result()?.to_owned()))
        .add_snapshot(snapshot)?
        .set_ref(
            MAIN_BRANCH,
            SnapshotReference::new(snapshot_id, SnapshotRetention::branch(None, None, None)),
        )?
        .build()?
        .metadata)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: i64) -> Box<[u8]> {
        key_bytes(&[Cell::I64(id)]).unwrap()
    }

    #[test]
    fn changes_of_a_key_in_an_epoch_collapse_to_the_newest() {
        let mut index = KeyIndex::default();
        let old = index.file_number("old.parquet", &Struct::empty());
        let new = index.file_number("new.parquet", &Struct::empty());
        index.live.insert(key(1), Pos { file: old, row: 0 });
        index.live.insert(key(2), Pos { file: old, row: 1 });
        let mut epoch = Epoch::default();
        // Key 1 updated twice: both older rows deleted, the newest live.
        epoch.change(&index, key(1), Some(Pos { file: new, row: 0 }));
        epoch.change(&index, key(1), Some(Pos { file: new, row: 1 }));
        // Key 3 inserted and deleted: nothing left.
        epoch.change(&index, key(3), Some(Pos { file: new, row: 2 }));
        epoch.change(&index, key(3), None);
        // Key 4 deleted without a row: no delete.
        epoch.change(&index, key(4), None);
        assert_eq!(
            epoch.sorted_deletes(&index),
            [(
                &Struct::empty(),
                vec![("new.parquet", 0), ("new.parquet", 2), ("old.parquet", 0)]
            )]
        );
        epoch.apply_to(&mut index);
        assert_eq!(index.get(&key(1)), Some(Pos { file: new, row: 1 }));
        assert_eq!(index.get(&key(2)), Some(Pos { file: old, row: 1 }));
        assert_eq!(index.get(&key(3)), None);
        assert_eq!(index.len(), 2);
    }

    #[test]
    fn a_truncate_deletes_the_epochs_rows_and_forgets_the_committed_ones() {
        let mut index = KeyIndex::default();
        let old = index.file_number("old.parquet", &Struct::empty());
        let new = index.file_number("new.parquet", &Struct::empty());
        index.live.insert(key(1), Pos { file: old, row: 0 });
        let mut epoch = Epoch::default();
        epoch.change(&index, key(2), Some(Pos { file: new, row: 0 }));
        epoch.truncate();
        // Key 1's committed row leaves with the truncate: its update deletes nothing more.
        epoch.change(&index, key(1), Some(Pos { file: new, row: 1 }));
        assert_eq!(
            epoch.sorted_deletes(&index),
            [(&Struct::empty(), vec![("new.parquet", 0)])]
        );
        assert!(epoch.truncated());
        epoch.apply_to(&mut index);
        assert_eq!(index.get(&key(1)), Some(Pos { file: new, row: 1 }));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn totals_add_up_from_the_previous_summary() {
        let previous = Summary {
            operation: Operation::Append,
            additional_properties: HashMap::from([
                ("total-records".to_owned(), "10".to_owned()),
                ("total-data-files".to_owned(), "2".to_owned()),
            ]),
        };
        let mut summary = HashMap::from([
            ("added-records".to_owned(), "5".to_owned()),
            ("added-data-files".to_owned(), "1".to_owned()),
            ("added-position-deletes".to_owned(), "3".to_owned()),
        ]);
        add_totals(&mut summary, Some(&previous), false);
        assert_eq!(summary["total-records"], "15");
        assert_eq!(summary["total-data-files"], "3");
        // Totals the previous summary lacks are left out.
        assert!(!summary.contains_key("total-position-deletes"));
        add_totals(&mut summary, None, true);
        assert_eq!(summary["total-records"], "5");
        assert_eq!(summary["total-position-deletes"], "3");
    }

    #[test]
    fn a_rows_partition_is_its_columns_transformed() {
        use iceberg::spec::{PartitionSpec, Transform, UnboundPartitionSpec};
        let schema = Schema::builder()
            .with_fields([
                Arc::new(NestedField::required(
                    1,
                    "id",
                    Type::Primitive(PrimitiveType::Long),
                )),
                Arc::new(NestedField::optional(
                    2,
                    "born",
                    Type::Primitive(PrimitiveType::Date),
                )),
                Arc::new(NestedField::optional(
                    3,
                    "flag",
                    Type::Primitive(PrimitiveType::Boolean),
                )),
            ])
            .build()
            .unwrap();
        let spec: PartitionSpec = UnboundPartitionSpec::builder()
            .add_partition_field(2, "born_year", Transform::Year)
            .unwrap()
            .add_partition_field(1, "id_bucket", Transform::Bucket(16))
            .unwrap()
            .add_partition_field(3, "flag", Transform::Identity)
            .unwrap()
            .build()
            .bind(schema.clone())
            .unwrap();
        let metadata = iceberg::spec::TableMetadataBuilder::new(
            schema,
            spec,
            iceberg::spec::SortOrder::unsorted_order(),
            "file:///w/t".into(),
            FormatVersion::V2,
            HashMap::new(),
        )
        .unwrap()
        .build()
        .unwrap()
        .metadata;
        let partitioner = Partitioner::of(&metadata).unwrap().unwrap();
        // 2024-02-29 is day 19782; the spec's bucket of the long 34 is 3 (Murmur3, as Java).
        let partition = partitioner
            .partition(&[Cell::I64(34), Cell::I32(19_782), Cell::Null])
            .unwrap();
        assert_eq!(
            partition,
            Struct::from_iter([Some(Literal::int(2024 - 1970)), Some(Literal::int(3)), None])
        );
        // A cell of another type than its column's is refused, not guessed.
        assert!(
            partitioner
                .partition(&[Cell::Str("34".into()), Cell::I32(0), Cell::Null])
                .is_err()
        );
        let unpartitioned = metadata
            .into_builder(None)
            .add_default_partition_spec(UnboundPartitionSpec::builder().build())
            .unwrap()
            .build()
            .unwrap()
            .metadata;
        assert!(Partitioner::of(&unpartitioned).unwrap().is_none());
    }

    #[test]
    fn keys_of_different_values_differ() {
        let a = key_bytes(&[Cell::Str("ab".into()), Cell::Str("c".into())]).unwrap();
        let b = key_bytes(&[Cell::Str("a".into()), Cell::Str("bc".into())]).unwrap();
        assert_ne!(a, b);
        assert_ne!(key_bytes(&[Cell::I32(1)]).unwrap(), key(1));
        assert!(key_bytes(&[Cell::Null]).is_err());
        assert_eq!(
            owner_dir("file:///w/cdc/t/", "cdc.app.items", 3, 1),
            "file:///w/cdc/t/data/cdc.app.items~p3~s1/"
        );
    }
}

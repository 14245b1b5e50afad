//! Exactly-once files: the output root's layout, open files, and the commit protocol.
//!
//! Each (partition, sub-partition) worker writes its own files. Records accumulate in an
//! **epoch**: the worker's open files, one per rendered directory, written under temporary
//! names in a staging directory. An epoch ends (rolls) when it holds `roll_records` records, a
//! file reaches `roll_bytes`, it is `roll_interval_ms` old, or the partition is revoked. It
//! commits in three steps:
//!
//! 1. every open file is finished (footer, compression trailer), `fsync`ed and closed;
//! 2. the sub-partition's **state file** is replaced atomically (write, `fsync`, rename,
//!    `fsync` the directory) with `last_offset` — the epoch's highest offset — and the list of
//!    renames the epoch consists of. This is the commit point;
//! 3. each staged file is renamed to its final name, and the directories are `fsync`ed.
//!
//! Final names encode what a file holds:
//! `<dir>/part-<topic>+<partition>+s<sub>+<first offset>-<last offset>.<ext>`.
//!
//! A sub-partition's records are in offset order, so after a commit every record of that
//! sub-partition with an offset up to `last_offset` is in a committed file, and none after it
//! is. Recovery on assignment ([`OutputRoot::recover`]) finishes the renames of a committed
//! epoch (a crash between steps 2 and 3), deletes every other staged file (epochs that never
//! committed), and returns `last_offset`: the worker skips records up to it and the consumer
//! seeks to the smallest of them plus one. Kafka's committed offsets are only an
//! optimisation; the files are the truth. A crash at any point therefore leaves every offset
//! in exactly one committed file (or in the dead-letter topic).
//!
//! The state file is needed because an epoch may span several files (several directories of
//! the path template): renaming them one by one is not atomic, and a scan of final names after
//! a crash between two renames would see a `last` offset whose lower offsets are missing.
//!
//! The number of sub-partitions decides which worker owns which key, so it is fixed for an
//! output root: `_sluice_sink.json` in the root records it and a different value is refused.
//!
//! # Object stores (S3)
//!
//! An object store has no rename, and a multi-object change is never atomic; a single PUT
//! of one object is (readers see the old object or the new one, whole). With
//! `sink.files.url = "s3://bucket/prefix"` the epoch's files are still written and finished
//! on local disk (under `path`, the staging directory), and the commit becomes:
//!
//! 1. every open file is finished and closed, as above;
//! 2. the sub-partition's **pending intent** `<prefix>/_sluice/pending/<tag>.json` is PUT:
//!    the epoch's number and the object keys it is about to write;
//! 3. each file is uploaded straight to its **final key** (the same
//!    `<dir>/part-<topic>+<partition>+s<sub>+<first>-<last>.<ext>` name as on disk; a
//!    multipart upload when it is larger than `upload_part_bytes`);
//! 4. the sub-partition's **state object** `<prefix>/_sluice/state/<tag>.json` is PUT —
//!    `last_offset`, the epoch and its keys. This single PUT is the commit point;
//! 5. the pending intent is deleted and the local staged files are removed.
//!
//! Recovery on assignment reads the state object and the pending intent. A pending epoch
//! newer than the state's never committed (a crash during step 3 or right before step 4):
//! its keys are deleted — they hold offsets after `last_offset`, so they can be no committed
//! epoch's keys — and its records are read again. A pending epoch equal to the state's
//! committed (a crash before step 5): only the intent is deleted. Nothing is ever rolled
//! forward from local disk, so another process (another machine) can take the partition
//! over. Local staged files of any epoch are deleted on assignment.
//!
//! **What a reader that lists the prefix sees.** Committed objects stay, and every offset is
//! in exactly one committed object. During the upload window of an epoch (steps 3–4, the
//! time of the uploads) and, after a crash in that window, until the sub-partition is
//! assigned again, the epoch's objects are already listed without being committed. A reader
//! that must never see them keeps an object `part-<tag>+<first>-<last>` only when `<last>` is
//! at most the `last_offset` of `<prefix>/_sluice/state/<tag>.json` (read after the listing):
//! exactly the committed objects.
//!
//! Test hook: with `SLUICE_TEST_ABORT_AFTER_UPLOAD=N` in its environment the process aborts
//! in its `N`th epoch commit to an object store, after the uploads and before the state PUT
//! (the integration tests use it to crash inside that window on purpose).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sink::config::{FileCompression, FileFormat};
use crate::sink::object::ObjectTarget;
use crate::sink::parquet::{ParquetFile, ParquetRow};

/// The root's marker file.
pub const ROOT_MARKER: &str = "_sluice_sink.json";
/// The directory under the root holding state and staged files.
pub const STATE_DIR: &str = "_sluice";

/// `_sluice_sink.json`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
struct RootMarker {
    sub_partitions: u32,
}

/// A sub-partition's committed state (and, on an object store, its pending intent).
#[derive(Debug, Default, Serialize, Deserialize)]
struct SubState {
    /// The highest offset of the last committed epoch.
    last_offset: i64,
    /// The last committed epoch's number.
    epoch: u64,
    /// The renames the last committed epoch consists of: staged file name → final path
    /// relative to the root (the object key relative to the prefix on an object store).
    renames: Vec<(String, String)>,
    /// Offsets after `last_offset` that are in no file because they went to the dead-letter
    /// topic after a processing timeout (see [`OutputRoot::add_skipped`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    skipped: Vec<i64>,
}

/// What [`OutputRoot::recover`] found of a sub-partition's last commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// The highest offset in a committed file (-1: none).
    pub last_offset: i64,
    /// The last committed epoch's number.
    pub epoch: u64,
    /// Offsets after `last_offset` that must be skipped (dead-lettered after a timeout).
    pub skipped: Vec<i64>,
}

impl From<SubState> for Recovered {
    fn from(state: SubState) -> Self {
        let last_offset = state.last_offset;
        Self {
            last_offset,
            epoch: state.epoch,
            skipped: state
                .skipped
                .into_iter()
                .filter(|o| *o > last_offset)
                .collect(),
        }
    }
}

/// The output root; see the [module docs](self).
#[derive(Debug)]
pub struct OutputRoot {
    /// The output root, or with `objects` the local staging root.
    root: PathBuf,
    /// The object store the files go to.
    objects: Option<ObjectTarget>,
}

/// Identifies a worker's files: topic, partition, sub-partition.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SubPartitionId {
    /// Topic.
    pub topic: String,
    /// Kafka partition.
    pub partition: i32,
    /// Sub-partition.
    pub sub: u32,
}

impl SubPartitionId {
    fn tag(&self) -> String {
        format!("{}+{}+s{}", self.topic, self.partition, self.sub)
    }

    fn state_key(&self) -> String {
        format!("{STATE_DIR}/state/{}.json", self.tag())
    }

    fn pending_key(&self) -> String {
        format!("{STATE_DIR}/pending/{}.json", self.tag())
    }
}

/// The output root could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum RootError {
    /// I/O.
    #[error("cannot prepare the output root {path}")]
    Io {
        /// The root.
        path: String,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The root was written with another number of sub-partitions.
    #[error(
        "sink.files.sub_partitions = {configured}, but the output root {path} was written with {stored} sub-partitions (recorded in {ROOT_MARKER}); changing it would break exactly-once"
    )]
    SubPartitionsChanged {
        /// The root.
        path: String,
        /// What the file says.
        configured: u32,
        /// What the root says.
        stored: u32,
    },
}

impl OutputRoot {
    /// Opens (creating) the root and checks or records the number of sub-partitions.
    ///
    /// # Errors
    ///
    /// [`RootError::SubPartitionsChanged`] when the root was written with another number.
    pub fn open(root: &Path, sub_partitions: u32) -> Result<Self, RootError> {
        let io = |source| RootError::Io {
            path: root.display().to_string(),
            source,
        };
        fs::create_dir_all(root.join(STATE_DIR)).map_err(io)?;
        let marker = root.join(ROOT_MARKER);
        match fs::read(&marker) {
            Ok(bytes) => {
                let stored: RootMarker = serde_json::from_slice(&bytes)
                    .map_err(|e| io(io::Error::new(io::ErrorKind::InvalidData, e)))?;
                if stored.sub_partitions != sub_partitions {
                    return Err(RootError::SubPartitionsChanged {
                        path: root.display().to_string(),
                        configured: sub_partitions,
                        stored: stored.sub_partitions,
                    });
                }
            }
            Err(error) if error.kind() == io::ErrorKind::NotFound => {
                let text = serde_json::to_vec(&RootMarker { sub_partitions })
                    .map_err(|e| io(io::Error::other(e)))?;
                write_atomically(&marker, &text).map_err(io)?;
            }
            Err(error) => return Err(io(error)),
        }
        Ok(Self {
            root: root.to_owned(),
            objects: None,
        })
    }

    /// Opens an object store target with its local staging directory `staging`, and checks
    /// or records the number of sub-partitions in the store.
    ///
    /// # Errors
    ///
    /// [`RootError::SubPartitionsChanged`] when the prefix was written with another number;
    /// [`RootError::Io`] when the store or the staging directory cannot be reached.
    pub fn open_objects(
        staging: &Path,
        objects: ObjectTarget,
        sub_partitions: u32,
    ) -> Result<Self, RootError> {
        let url = objects.url().to_owned();
        let io = |source| RootError::Io {
            path: url.clone(),
            source,
        };
        fs::create_dir_all(staging.join(STATE_DIR)).map_err(io)?;
        match objects.get(ROOT_MARKER).map_err(io)? {
            Some(bytes) => {
                let stored: RootMarker = serde_json::from_slice(&bytes)
                    .map_err(|e| io(io::Error::new(io::ErrorKind::InvalidData, e)))?;
                if stored.sub_partitions != sub_partitions {
                    return Err(RootError::SubPartitionsChanged {
                        path: url,
                        configured: sub_partitions,
                        stored: stored.sub_partitions,
                    });
                }
            }
            None => {
                let text = serde_json::to_vec(&RootMarker { sub_partitions })
                    .map_err(|e| io(io::Error::other(e)))?;
                objects.put(ROOT_MARKER, text).map_err(io)?;
            }
        }
        Ok(Self {
            root: staging.to_owned(),
            objects: Some(objects),
        })
    }

    /// The root directory (the local staging root with an object store).
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Where the output goes: the root directory or the object store's URL.
    pub fn describe(&self) -> String {
        match &self.objects {
            Some(objects) => objects.url().to_owned(),
            None => self.root.display().to_string(),
        }
    }

    fn state_path(&self, id: &SubPartitionId) -> PathBuf {
        self.root
            .join(STATE_DIR)
            .join("state")
            .join(format!("{}.json", id.tag()))
    }

    fn staging_dir(&self, id: &SubPartitionId) -> PathBuf {
        self.root.join(STATE_DIR).join("staging").join(id.tag())
    }

    /// Brings a sub-partition's files to its last commit (finishing its renames, deleting
    /// staged files of uncommitted epochs) and returns what the commit holds.
    ///
    /// # Errors
    ///
    /// I/O errors, and a state file that cannot be read.
    pub fn recover(&self, id: &SubPartitionId) -> io::Result<Option<Recovered>> {
        if let Some(objects) = &self.objects {
            return self.recover_objects(objects, id);
        }
        let staging = self.staging_dir(id);
        fs::create_dir_all(&staging)?;
        let state = match fs::read(self.state_path(id)) {
            Ok(bytes) => Some(
                serde_json::from_slice::<SubState>(&bytes)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?,
            ),
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        if let Some(state) = &state {
            self.apply_renames(&staging, &state.renames)?;
        }
        for entry in fs::read_dir(&staging)? {
            let entry = entry?;
            tracing::info!(file = %entry.path().display(), "deleting a file of an uncommitted epoch");
            fs::remove_file(entry.path())?;
        }
        Ok(state.map(Recovered::from))
    }

    /// Records in a sub-partition's state that `offset` (after its last committed offset) is
    /// in no file because it went to the dead-letter topic, so that the records after it can
    /// be committed and it is never written after a restart. The sub-partition's worker must
    /// have been abandoned (it commits no more): this rewrites its state.
    ///
    /// # Errors
    ///
    /// I/O errors; the state is then unchanged.
    pub fn add_skipped(&self, id: &SubPartitionId, offset: i64) -> io::Result<()> {
        let parse = |bytes: &[u8]| {
            serde_json::from_slice::<SubState>(bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        };
        let mut state = match &self.objects {
            Some(objects) => objects
                .get(&id.state_key())?
                .map(|b| parse(&b))
                .transpose()?,
            None => match fs::read(self.state_path(id)) {
                Ok(bytes) => Some(parse(&bytes)?),
                Err(error) if error.kind() == io::ErrorKind::NotFound => None,
                Err(error) => return Err(error),
            },
        }
        .unwrap_or(SubState {
            last_offset: -1,
            ..SubState::default()
        });
        if offset <= state.last_offset || state.skipped.contains(&offset) {
            return Ok(());
        }
        state.skipped.push(offset);
        let bytes = serde_json::to_vec(&state).map_err(io::Error::other)?;
        match &self.objects {
            Some(objects) => objects.put(&id.state_key(), bytes),
            None => {
                let path = self.state_path(id);
                if let Some(dir) = path.parent() {
                    fs::create_dir_all(dir)?;
                }
                write_atomically(&path, &bytes)
            }
        }
    }

    /// [`OutputRoot::recover`] on an object store (see the [module docs](self)).
    fn recover_objects(
        &self,
        objects: &ObjectTarget,
        id: &SubPartitionId,
    ) -> io::Result<Option<Recovered>> {
        let staging = self.staging_dir(id);
        fs::create_dir_all(&staging)?;
        for entry in fs::read_dir(&staging)? {
            fs::remove_file(entry?.path())?;
        }
        let read = |key: &str| -> io::Result<Option<SubState>> {
            objects
                .get(key)?
                .map(|bytes| {
                    serde_json::from_slice::<SubState>(&bytes)
                        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
                })
                .transpose()
        };
        let state = read(&id.state_key())?;
        if let Some(pending) = read(&id.pending_key())? {
            if state.as_ref().is_none_or(|s| pending.epoch > s.epoch) {
                let committed: Vec<&String> = state
                    .iter()
                    .flat_map(|s| s.renames.iter().map(|(_, key)| key))
                    .collect();
                for (_, key) in &pending.renames {
                    if committed.contains(&key) {
                        continue;
                    }
                    tracing::info!(
                        object = %format!("{}/{key}", objects.url()),
                        epoch = pending.epoch,
                        "deleting an object of an uncommitted epoch"
                    );
                    objects.delete(key)?;
                }
            }
            objects.delete(&id.pending_key())?;
        }
        Ok(state.map(Recovered::from))
    }

    /// Renames staged files to their final names (those not renamed yet), then syncs the
    /// directories.
    fn apply_renames(&self, staging: &Path, renames: &[(String, String)]) -> io::Result<()> {
        let mut dirs = BTreeMap::new();
        for (staged, target) in renames {
            let from = staging.join(staged);
            let to = self.root.join(target);
            if !from.exists() {
                continue;
            }
            let dir = to.parent().unwrap_or(&self.root).to_owned();
            if !dir.exists() {
                fs::create_dir_all(&dir)?;
                sync_ancestors(&dir, &self.root)?;
            }
            fs::rename(&from, &to)?;
            dirs.insert(dir, ());
        }
        for dir in dirs.keys() {
            sync_dir(dir)?;
        }
        if !renames.is_empty() {
            sync_dir(staging)?;
        }
        Ok(())
    }
}

/// The test hook of the [module docs](self): aborts the process in the `N`th object store
/// commit when `SLUICE_TEST_ABORT_AFTER_UPLOAD=N`.
fn abort_after_upload_hook() {
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static TARGET: OnceLock<Option<u64>> = OnceLock::new();
    static COMMITS: AtomicU64 = AtomicU64::new(0);
    let target = TARGET.get_or_init(|| {
        std::env::var("SLUICE_TEST_ABORT_AFTER_UPLOAD")
            .ok()
            .and_then(|v| v.parse().ok())
    });
    if let Some(target) = target
        && COMMITS.fetch_add(1, Ordering::SeqCst) + 1 == *target
    {
        tracing::error!(
            "SLUICE_TEST_ABORT_AFTER_UPLOAD: aborting after the uploads, before the state PUT"
        );
        std::process::abort();
    }
}

/// Writes a file's bytes under a temporary name, syncs, renames, syncs the directory.
fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Syncs `dir` and its ancestors up to `root`, so that new directories survive a crash.
fn sync_ancestors(dir: &Path, root: &Path) -> io::Result<()> {
    let mut current = Some(dir);
    while let Some(dir) = current {
        sync_dir(dir)?;
        if dir == root {
            break;
        }
        current = dir.parent().filter(|p| p.starts_with(root));
    }
    Ok(())
}

/// How output files are written.
#[derive(Debug, Clone)]
pub struct FileSettings {
    /// Format.
    pub format: FileFormat,
    /// Compression.
    pub compression: FileCompression,
    /// JSON Lines: add the metadata fields.
    pub metadata: bool,
    /// Parquet: rows per row group.
    pub parquet_row_group_records: usize,
}

impl FileSettings {
    /// The final name's extension.
    pub fn extension(&self) -> &'static str {
        match (self.format, self.compression) {
            (FileFormat::Parquet, _) => "parquet",
            (FileFormat::Jsonl, FileCompression::Gzip) => "jsonl.gz",
            (FileFormat::Jsonl, FileCompression::Zstd) => "jsonl.zst",
            (FileFormat::Jsonl, _) => "jsonl",
        }
    }
}

/// One record as a file takes it.
#[derive(Debug)]
pub struct OutputRecord<'a> {
    /// Its fields for Parquet and the value for both formats.
    pub row: ParquetRow<'a>,
    /// The topic as a JSON string (quoted, escaped).
    pub topic_json: &'a str,
}

enum Body {
    Plain(BufWriter<File>),
    Gzip(flate2::write::GzEncoder<BufWriter<File>>),
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
    Parquet(Box<ParquetFile>),
}

/// An open output file of an epoch.
pub struct OpenFile {
    body: Option<Body>,
    staged_name: String,
    dir: String,
    first_offset: i64,
    last_offset: i64,
    records: u64,
    bytes: u64,
}

impl std::fmt::Debug for OpenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenFile")
            .field("staged_name", &self.staged_name)
            .field("dir", &self.dir)
            .field("first_offset", &self.first_offset)
            .field("last_offset", &self.last_offset)
            .finish_non_exhaustive()
    }
}

/// A failure while writing a file: the record's fault, or I/O.
#[derive(Debug)]
pub enum WriteError {
    /// The record cannot be written (the failure policy decides).
    Record(String),
    /// The file system failed (the run is restarted from the committed files).
    Io(io::Error),
}

impl From<io::Error> for WriteError {
    fn from(error: io::Error) -> Self {
        Self::Io(error)
    }
}

fn parquet_io(error: parquet::errors::ParquetError) -> io::Error {
    io::Error::other(error)
}

impl OpenFile {
    fn create(
        path: &Path,
        staged_name: String,
        dir: String,
        settings: &FileSettings,
        first: &OutputRecord<'_>,
    ) -> io::Result<Self> {
        let file = OpenOptions::new().write(true).create_new(true).open(path)?;
        let body = match (settings.format, settings.compression) {
            (FileFormat::Parquet, compression) => Body::Parquet(Box::new(
                ParquetFile::create(
                    file,
                    &first.row,
                    compression,
                    settings.parquet_row_group_records,
                )
                .map_err(parquet_io)?,
            )),
            (FileFormat::Jsonl, FileCompression::Gzip) => {
                Body::Gzip(flate2::write::GzEncoder::new(
                    BufWriter::with_capacity(1 << 18, file),
                    flate2::Compression::fast(),
                ))
            }
            (FileFormat::Jsonl, FileCompression::Zstd) => Body::Zstd(
                zstd::stream::write::Encoder::new(BufWriter::with_capacity(1 << 18, file), 3)?,
            ),
            (FileFormat::Jsonl, _) => Body::Plain(BufWriter::with_capacity(1 << 18, file)),
        };
        Ok(Self {
            body: Some(body),
            staged_name,
            dir,
            first_offset: first.row.offset,
            last_offset: first.row.offset,
            records: 0,
            bytes: 0,
        })
    }

    fn append(&mut self, record: &OutputRecord<'_>, settings: &FileSettings) -> io::Result<()> {
        let row = &record.row;
        match self.body.as_mut() {
            Some(Body::Parquet(file)) => {
                file.append(row).map_err(parquet_io)?;
                self.bytes = file.size();
            }
            Some(Body::Plain(out)) => self.bytes += write_line(out, record, settings)?,
            Some(Body::Gzip(out)) => self.bytes += write_line(out, record, settings)?,
            Some(Body::Zstd(out)) => self.bytes += write_line(out, record, settings)?,
            None => return Err(io::Error::other("file already finished")),
        }
        self.records += 1;
        self.last_offset = row.offset;
        Ok(())
    }

    /// Finishes and syncs the file.
    fn finish(&mut self) -> io::Result<()> {
        let file = match self.body.take() {
            Some(Body::Plain(out)) => out.into_inner().map_err(|e| e.into_error())?,
            Some(Body::Gzip(out)) => out.finish()?.into_inner().map_err(|e| e.into_error())?,
            Some(Body::Zstd(out)) => out.finish()?.into_inner().map_err(|e| e.into_error())?,
            Some(Body::Parquet(file)) => file.finish().map_err(parquet_io)?,
            None => return Ok(()),
        };
        file.sync_all()
    }
}

/// Writes one JSON line; returns the uncompressed bytes written.
fn write_line(
    out: &mut impl Write,
    record: &OutputRecord<'_>,
    settings: &FileSettings,
) -> io::Result<u64> {
    let row = &record.row;
    let value = row.value.trim();
    let mut written = 0u64;
    let mut put = |out: &mut dyn Write, bytes: &[u8]| -> io::Result<()> {
        written += bytes.len() as u64;
        write_json(out, bytes)
    };
    if settings.metadata {
        let mut head = String::with_capacity(96);
        head.push_str("{\"_topic\":");
        head.push_str(record.topic_json);
        head.push_str(",\"_partition\":");
        head.push_str(itoa::Buffer::new().format(row.partition));
        head.push_str(",\"_offset\":");
        head.push_str(itoa::Buffer::new().format(row.offset));
        head.push_str(",\"_timestamp_ms\":");
        match row.timestamp_ms {
            Some(ms) => head.push_str(itoa::Buffer::new().format(ms)),
            None => head.push_str("null"),
        }
        head.push_str(",\"_key\":");
        put(out, head.as_bytes())?;
        match row.key {
            None => put(out, b"null")?,
            // A JSON object, array or string key (CDC keys are objects) is kept as JSON;
            // anything else, numbers included, becomes a string, so `_key` has one meaning.
            Some(key)
                if matches!(key.trim_ascii_start().first(), Some(b'{' | b'[' | b'"'))
                    && serde_json::from_slice::<&serde_json::value::RawValue>(key).is_ok() =>
            {
                put(out, key)?;
            }
            Some(key) => {
                let text = serde_json::to_string(&String::from_utf8_lossy(key))
                    .map_err(io::Error::other)?;
                put(out, text.as_bytes())?;
            }
        }
        if row.fields.is_some() {
            // The value's object, spliced after the metadata fields.
            let inner = &value[1..];
            if inner.trim_start().starts_with('}') {
                put(out, b"}")?;
            } else {
                put(out, b",")?;
                put(out, inner.as_bytes())?;
            }
        } else {
            put(out, b",\"_value\":")?;
            put(out, value.as_bytes())?;
            put(out, b"}")?;
        }
    } else {
        put(out, value.as_bytes())?;
    }
    put(out, b"\n")?;
    Ok(written)
}

/// Writes JSON text; raw line breaks (only possible as whitespace in valid JSON) become
/// spaces so that a record stays on one line.
fn write_json(out: &mut dyn Write, bytes: &[u8]) -> io::Result<()> {
    if bytes.len() > 1 && bytes.iter().any(|b| *b == b'\n' || *b == b'\r') {
        let cleaned: Vec<u8> = bytes
            .iter()
            .map(|b| if *b == b'\n' || *b == b'\r' { b' ' } else { *b })
            .collect();
        out.write_all(&cleaned)
    } else {
        out.write_all(bytes)
    }
}

/// A worker's open epoch; see the [module docs](self).
#[derive(Debug)]
pub struct Epoch {
    id: SubPartitionId,
    staging: PathBuf,
    number: u64,
    files: Vec<OpenFile>,
    /// Records of this epoch, including skipped and dead-lettered ones.
    records: u64,
    last_offset: Option<i64>,
    opened_at: Option<std::time::Instant>,
    next_file: u32,
    /// Dead-lettered offsets the state must keep listing until a commit passes them.
    skipped: Vec<i64>,
}

impl Epoch {
    /// The first epoch after a recovery whose last committed epoch was `last_epoch` and
    /// whose state lists `skipped` offsets.
    pub fn new(root: &OutputRoot, id: SubPartitionId, last_epoch: u64, skipped: Vec<i64>) -> Self {
        let staging = root.staging_dir(&id);
        Self {
            id,
            staging,
            skipped,
            number: last_epoch + 1,
            files: Vec::new(),
            records: 0,
            last_offset: None,
            opened_at: None,
            next_file: 0,
        }
    }

    /// Records in this epoch.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// When the epoch got its first record.
    pub fn opened_at(&self) -> Option<std::time::Instant> {
        self.opened_at
    }

    /// The largest open file, in bytes.
    pub fn largest_file_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.bytes).max().unwrap_or(0)
    }

    /// Writes a record to the file of directory `dir`.
    ///
    /// # Errors
    ///
    /// I/O errors.
    pub fn write(
        &mut self,
        dir: String,
        record: &OutputRecord<'_>,
        settings: &FileSettings,
    ) -> io::Result<()> {
        let index = match self.files.iter().position(|f| f.dir == dir) {
            Some(index) => index,
            None => {
                if self.files.is_empty() {
                    fs::create_dir_all(&self.staging)?;
                }
                let staged_name = format!(".tmp-e{}-{}", self.number, self.next_file);
                self.next_file += 1;
                let file = OpenFile::create(
                    &self.staging.join(&staged_name),
                    staged_name,
                    dir,
                    settings,
                    record,
                )?;
                self.files.push(file);
                self.files.len() - 1
            }
        };
        self.files[index].append(record, settings)?;
        self.note(record.row.offset);
        Ok(())
    }

    /// Counts a record that is in no file (skipped tombstone, dead-lettered).
    pub fn note(&mut self, offset: i64) {
        self.records += 1;
        self.last_offset = Some(offset);
        self.opened_at.get_or_insert_with(std::time::Instant::now);
    }

    /// Commits the epoch (see the [module docs](self)) and starts the next one; returns the
    /// committed files' final paths (keys relative to the prefix on an object store).
    ///
    /// # Errors
    ///
    /// I/O errors; the epoch is then not committed (or committed and its renames finished by
    /// the next recovery).
    pub fn commit(
        &mut self,
        root: &OutputRoot,
        settings: &FileSettings,
    ) -> io::Result<Vec<PathBuf>> {
        let Some(last_offset) = self.last_offset else {
            return Ok(Vec::new());
        };
        for file in &mut self.files {
            file.finish()?;
        }
        let renames: Vec<(String, String)> = self
            .files
            .iter()
            .map(|file| {
                let name = format!(
                    "part-{}+{}-{}.{}",
                    self.id.tag(),
                    file.first_offset,
                    file.last_offset,
                    settings.extension()
                );
                let target = if file.dir.is_empty() {
                    name
                } else {
                    format!("{}/{name}", file.dir)
                };
                (file.staged_name.clone(), target)
            })
            .collect();
        self.skipped.retain(|o| *o > last_offset);
        let state = SubState {
            last_offset,
            epoch: self.number,
            renames,
            skipped: self.skipped.clone(),
        };
        let bytes = serde_json::to_vec(&state).map_err(io::Error::other)?;
        let committed = if let Some(objects) = &root.objects {
            objects.put(&self.id.pending_key(), bytes.clone())?;
            for (staged, key) in &state.renames {
                objects.upload(&self.staging.join(staged), key)?;
            }
            abort_after_upload_hook();
            objects.put(&self.id.state_key(), bytes)?;
            if let Err(error) = objects.delete(&self.id.pending_key()) {
                // Recovery deletes it; it names a committed epoch.
                tracing::warn!(error = %error, "cannot delete a committed epoch's pending intent");
            }
            for (staged, _) in &state.renames {
                fs::remove_file(self.staging.join(staged))?;
            }
            state
                .renames
                .iter()
                .map(|(_, key)| PathBuf::from(key))
                .collect()
        } else {
            let state_path = root.state_path(&self.id);
            if let Some(dir) = state_path.parent() {
                fs::create_dir_all(dir)?;
            }
            write_atomically(&state_path, &bytes)?;
            root.apply_renames(&self.staging, &state.renames)?;
            state
                .renames
                .iter()
                .map(|(_, target)| root.path().join(target))
                .collect()
        };
        self.number += 1;
        self.files.clear();
        self.records = 0;
        self.last_offset = None;
        self.opened_at = None;
        self.next_file = 0;
        Ok(committed)
    }

    /// Closes the epoch's files and forgets them, leaving them on disk for the next
    /// recovery: an abandoned worker must not touch names a new owner may use again.
    pub fn forget(&mut self) {
        for file in &mut self.files {
            file.body = None;
        }
        self.files.clear();
        self.records = 0;
        self.last_offset = None;
        self.opened_at = None;
    }

    /// Drops the epoch's staged files (an abandoned epoch).
    pub fn discard(&mut self) {
        for file in &mut self.files {
            file.body = None;
            let _ = fs::remove_file(self.staging.join(&file.staged_name));
        }
        self.files.clear();
        self.records = 0;
        self.last_offset = None;
        self.opened_at = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sink::template::parse_object;
    use std::sync::Arc;

    fn settings() -> FileSettings {
        FileSettings {
            format: FileFormat::Jsonl,
            compression: FileCompression::None,
            metadata: true,
            parquet_row_group_records: 100,
        }
    }

    fn write(epoch: &mut Epoch, dir: &str, offset: i64, value: &str) {
        let fields = parse_object(value).ok();
        let record = OutputRecord {
            row: ParquetRow {
                topic: "t",
                partition: 0,
                offset,
                timestamp_ms: Some(1),
                key: Some(b"k1"),
                value,
                fields: fields.as_deref(),
            },
            topic_json: "\"t\"",
        };
        epoch.write(dir.to_owned(), &record, &settings()).unwrap();
    }

    fn temp_root(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("sluice-files-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    fn id() -> SubPartitionId {
        SubPartitionId {
            topic: "t".into(),
            partition: 0,
            sub: 1,
        }
    }

    #[test]
    fn commit_renames_to_offset_names_and_recovery_returns_the_last_offset() {
        let dir = temp_root("commit");
        let root = OutputRoot::open(&dir, 2).unwrap();
        assert_eq!(root.recover(&id()).unwrap(), None);
        let mut epoch = Epoch::new(&root, id(), 0, Vec::new());
        write(&mut epoch, "a", 3, r#"{"x":1}"#);
        write(&mut epoch, "b", 5, "{ }");
        write(&mut epoch, "a", 9, "[\n1]");
        let files = epoch.commit(&root, &settings()).unwrap();
        assert_eq!(
            files,
            [
                dir.join("a/part-t+0+s1+3-9.jsonl"),
                dir.join("b/part-t+0+s1+5-5.jsonl")
            ]
        );
        let a = fs::read_to_string(&files[0]).unwrap();
        assert_eq!(
            a,
            "{\"_topic\":\"t\",\"_partition\":0,\"_offset\":3,\"_timestamp_ms\":1,\"_key\":\"k1\",\"x\":1}\n\
             {\"_topic\":\"t\",\"_partition\":0,\"_offset\":9,\"_timestamp_ms\":1,\"_key\":\"k1\",\"_value\":[ 1]}\n"
        );
        for line in a
            .lines()
            .chain(fs::read_to_string(&files[1]).unwrap().lines())
        {
            serde_json::from_str::<serde_json::Value>(line).unwrap();
        }
        // An uncommitted epoch leaves staged files; recovery deletes them.
        write(&mut epoch, "a", 11, "{}");
        drop(epoch);
        assert_eq!(
            root.recover(&id())
                .unwrap()
                .map(|r| (r.last_offset, r.epoch)),
            Some((9, 1))
        );
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn skipped_offsets_survive_until_a_commit_passes_them() {
        let dir = temp_root("skipped");
        let root = OutputRoot::open(&dir, 2).unwrap();
        root.add_skipped(&id(), 4).unwrap();
        let recovered = root.recover(&id()).unwrap().unwrap();
        assert_eq!(
            (recovered.last_offset, &recovered.skipped[..]),
            (-1, &[4][..])
        );
        let mut epoch = Epoch::new(&root, id(), recovered.epoch, recovered.skipped);
        write(&mut epoch, "a", 3, "{}");
        epoch.commit(&root, &settings()).unwrap();
        assert_eq!(root.recover(&id()).unwrap().unwrap().skipped, [4]);
        root.add_skipped(&id(), 2).unwrap(); // already committed: ignored
        root.add_skipped(&id(), 6).unwrap();
        let recovered = root.recover(&id()).unwrap().unwrap();
        assert_eq!(
            (recovered.last_offset, &recovered.skipped[..]),
            (3, &[4, 6][..])
        );
        let mut epoch = Epoch::new(&root, id(), recovered.epoch, recovered.skipped);
        write(&mut epoch, "a", 5, "{}");
        epoch.commit(&root, &settings()).unwrap();
        assert_eq!(root.recover(&id()).unwrap().unwrap().skipped, [6]);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn keys_are_json_when_they_are_objects_arrays_or_strings() {
        let line = |key: &[u8]| {
            let record = OutputRecord {
                row: ParquetRow {
                    topic: "t",
                    partition: 0,
                    offset: 0,
                    timestamp_ms: None,
                    key: Some(key),
                    value: "{}",
                    fields: Some(&[]),
                },
                topic_json: "\"t\"",
            };
            let mut out = Vec::new();
            write_line(&mut out, &record, &settings()).unwrap();
            serde_json::from_slice::<serde_json::Value>(&out).unwrap()["_key"].clone()
        };
        assert_eq!(line(br#"{"id":1}"#), serde_json::json!({"id": 1}));
        assert_eq!(line(b"123"), serde_json::json!("123"));
        assert_eq!(line(b"{broken"), serde_json::json!("{broken"));
    }

    #[test]
    fn recovery_finishes_the_renames_of_a_committed_epoch() {
        let dir = temp_root("rollforward");
        let root = OutputRoot::open(&dir, 2).unwrap();
        let staging = root.staging_dir(&id());
        fs::create_dir_all(&staging).unwrap();
        fs::write(staging.join(".tmp-e4-0"), "{}\n").unwrap();
        let state = SubState {
            last_offset: 42,
            epoch: 4,
            renames: vec![(".tmp-e4-0".into(), "x/y/part-t+0+s1+40-42.jsonl".into())],
            skipped: Vec::new(),
        };
        fs::create_dir_all(root.state_path(&id()).parent().unwrap()).unwrap();
        write_atomically(
            &root.state_path(&id()),
            &serde_json::to_vec(&state).unwrap(),
        )
        .unwrap();
        assert_eq!(
            root.recover(&id())
                .unwrap()
                .map(|r| (r.last_offset, r.epoch)),
            Some((42, 4))
        );
        assert_eq!(
            fs::read_to_string(dir.join("x/y/part-t+0+s1+40-42.jsonl")).unwrap(),
            "{}\n"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn compressed_json_lines_round_trip() {
        use std::io::Read as _;
        let dir = temp_root("compressed");
        let root = OutputRoot::open(&dir, 2).unwrap();
        for compression in [FileCompression::Gzip, FileCompression::Zstd] {
            let settings = FileSettings {
                compression,
                metadata: false,
                ..settings()
            };
            let mut epoch = Epoch::new(&root, id(), 0, Vec::new());
            for offset in 0..100 {
                let value = format!(r#"{{"n":{offset}}}"#);
                let fields = parse_object(&value).ok();
                let record = OutputRecord {
                    row: ParquetRow {
                        topic: "t",
                        partition: 0,
                        offset,
                        timestamp_ms: None,
                        key: None,
                        value: &value,
                        fields: fields.as_deref(),
                    },
                    topic_json: "\"t\"",
                };
                epoch.write(String::new(), &record, &settings).unwrap();
            }
            let files = epoch.commit(&root, &settings).unwrap();
            assert_eq!(files.len(), 1);
            let raw = fs::read(&files[0]).unwrap();
            let mut text = String::new();
            match compression {
                FileCompression::Gzip => {
                    assert!(files[0].to_string_lossy().ends_with("+0-99.jsonl.gz"));
                    flate2::read::GzDecoder::new(&raw[..])
                        .read_to_string(&mut text)
                        .unwrap();
                }
                _ => {
                    assert!(files[0].to_string_lossy().ends_with("+0-99.jsonl.zst"));
                    text = String::from_utf8(zstd::decode_all(&raw[..]).unwrap()).unwrap();
                }
            }
            let numbers: Vec<i64> = text
                .lines()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l).unwrap()["n"]
                        .as_i64()
                        .unwrap()
                })
                .collect();
            assert_eq!(numbers, (0..100).collect::<Vec<_>>());
            fs::remove_file(&files[0]).unwrap();
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn object_store_commits_to_final_keys_and_recovery_deletes_uncommitted_epochs() {
        use object_store::ObjectStore;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let target =
            || ObjectTarget::new(Arc::clone(&store), "mem://b", runtime.handle().clone(), 0);
        let staging = temp_root("objects");
        let root = OutputRoot::open_objects(&staging, target(), 2).unwrap();
        assert_eq!(root.recover(&id()).unwrap(), None);
        let mut epoch = Epoch::new(&root, id(), 0, Vec::new());
        write(&mut epoch, "a", 3, r#"{"x":1}"#);
        write(&mut epoch, "b", 5, "{}");
        let files = epoch.commit(&root, &settings()).unwrap();
        assert_eq!(
            files,
            [
                PathBuf::from("a/part-t+0+s1+3-3.jsonl"),
                PathBuf::from("b/part-t+0+s1+5-5.jsonl")
            ]
        );
        let objects = target();
        let line =
            String::from_utf8(objects.get("a/part-t+0+s1+3-3.jsonl").unwrap().unwrap()).unwrap();
        assert!(line.ends_with(",\"x\":1}\n"), "{line}");
        let mut keys = objects.list("").unwrap();
        keys.sort();
        assert_eq!(
            keys,
            [
                "_sluice/state/t+0+s1.json",
                "_sluice_sink.json",
                "a/part-t+0+s1+3-3.jsonl",
                "b/part-t+0+s1+5-5.jsonl"
            ],
            "the pending intent is gone after the commit"
        );
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);

        // A crash after epoch 2's uploads, before its state PUT: intent and object exist.
        let pending = SubState {
            last_offset: 9,
            epoch: 2,
            renames: vec![(".tmp-e2-0".into(), "a/part-t+0+s1+7-9.jsonl".into())],
            skipped: Vec::new(),
        };
        objects
            .put(&id().pending_key(), serde_json::to_vec(&pending).unwrap())
            .unwrap();
        objects
            .put("a/part-t+0+s1+7-9.jsonl", b"{}\n".to_vec())
            .unwrap();
        fs::write(root.staging_dir(&id()).join(".tmp-e2-0"), "{}\n").unwrap();
        assert_eq!(
            root.recover(&id())
                .unwrap()
                .map(|r| (r.last_offset, r.epoch)),
            Some((5, 1))
        );
        assert_eq!(objects.get("a/part-t+0+s1+7-9.jsonl").unwrap(), None);
        assert_eq!(objects.get(&id().pending_key()).unwrap(), None);
        assert!(objects.get("a/part-t+0+s1+3-3.jsonl").unwrap().is_some());
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);

        // A crash after the state PUT, before the intent's deletion: the epoch stays.
        let mut epoch = Epoch::new(&root, id(), 1, Vec::new());
        write(&mut epoch, "a", 7, "{}");
        epoch.commit(&root, &settings()).unwrap();
        let committed = SubState {
            last_offset: 7,
            epoch: 2,
            renames: vec![(".tmp-e2-0".into(), "a/part-t+0+s1+7-7.jsonl".into())],
            skipped: Vec::new(),
        };
        objects
            .put(&id().pending_key(), serde_json::to_vec(&committed).unwrap())
            .unwrap();
        assert_eq!(
            root.recover(&id())
                .unwrap()
                .map(|r| (r.last_offset, r.epoch)),
            Some((7, 2))
        );
        assert!(objects.get("a/part-t+0+s1+7-7.jsonl").unwrap().is_some());
        assert_eq!(objects.get(&id().pending_key()).unwrap(), None);

        // The number of sub-partitions is recorded in the store.
        let error = OutputRoot::open_objects(&staging, target(), 4).unwrap_err();
        assert!(matches!(
            error,
            RootError::SubPartitionsChanged { stored: 2, .. }
        ));
        fs::remove_dir_all(&staging).unwrap();
    }

    #[test]
    fn sub_partitions_are_fixed_per_root() {
        let dir = temp_root("subs");
        OutputRoot::open(&dir, 4).unwrap();
        OutputRoot::open(&dir, 4).unwrap();
        let error = OutputRoot::open(&dir, 8).unwrap_err();
        assert!(matches!(
            error,
            RootError::SubPartitionsChanged {
                configured: 8,
                stored: 4,
                ..
            }
        ));
        assert!(error.to_string().contains("sink.files.sub_partitions = 8"));
        fs::remove_dir_all(&dir).unwrap();
    }
}

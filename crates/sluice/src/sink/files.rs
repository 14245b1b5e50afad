//! Exactly-once files: the output root's layout, open files, and the commit protocol.
//!
//! Each (partition, sub-partition) worker writes its own files. Records accumulate in an
//! **epoch**: the worker's open files, one per rendered directory, written under temporary
//! names in a staging directory. An epoch ends (rolls) when it holds `roll_records` records, a
//! file reaches `roll_bytes`, it is `roll_interval_ms` old, or the partition is revoked. It
//! commits in three steps:
//!
//! 1. every open file is finished (footer, compression trailer), `fsync`ed and closed;
//! 2. the sub-partition's next **state version** `_sluice/state/<tag>/v<N>.json` is created —
//!    `last_offset` (the epoch's highest offset), the list of renames the epoch consists of and
//!    the writer's owner generation — written and `fsync`ed under a temporary name, then
//!    hard-linked to its name, which fails if that version exists (see *Fencing*). This is
//!    the commit point;
//! 3. each staged file is renamed to its final name, and the directories are `fsync`ed.
//!
//! Final names encode what a file holds:
//! `<dir>/part-<topic>+<partition>+s<sub>+<first offset>-<last offset>.<ext>`.
//!
//! A sub-partition's records are in offset order, so after a commit every record of that
//! sub-partition with an offset up to `last_offset` is in a committed file, and none after it
//! is. Recovery on assignment ([`OutputRoot::recover`]) claims the sub-partition, finishes the
//! renames of the committed epoch (a crash between steps 2 and 3), deletes every other staged
//! file (epochs that never committed), and returns `last_offset`: the worker skips records up
//! to it and the consumer seeks to the smallest of them plus one. Kafka's committed offsets
//! are only an optimisation; the files are the truth. A crash at any point therefore leaves
//! every offset in exactly one committed file (or in the dead-letter topic). The newest
//! version is the state; the two newest are kept, older ones deleted. (The single
//! `_sluice/state/<tag>.json` of older sluice versions is read as version 0.)
//!
//! The state is needed because an epoch may span several files (several directories of the
//! path template): renaming them one by one is not atomic, and a scan of final names after a
//! crash between two renames would see a `last` offset whose lower offsets are missing.
//!
//! The number of sub-partitions decides which worker owns which key, so it is fixed for an
//! output root: `_sluice_sink.json` in the root records it and a different value is refused.
//!
//! # Fencing
//!
//! A worker can outlive its partition assignment: its process stalls (SIGSTOP, a long GC-like
//! pause, a slow upload) or loses its group session, Kafka gives the partition to another
//! process, and the old worker wakes up in the middle of an epoch. Kafka refuses its offset
//! commit (its member id and generation are stale), but the files are the truth, so the files
//! must refuse its commit too. Every assignment therefore **claims** each sub-partition before
//! recovering it: it writes the state again, unchanged except for its `owner` generation,
//! bumped by one, on the same condition as a commit. Every commit of that owner is
//! conditional on the state being the one it wrote last:
//!
//! - local files: a commit creates version `N + 1` where `N` is the version the owner wrote
//!   last; a claim creates the version after the newest. A zombie's next version is exactly
//!   the one the claim created, so its link fails (`EEXIST`). Pruning could free that name
//!   again, so after a successful link the writer checks that no newer version exists; if one
//!   does, the outcome is treated as refused but ambiguous (see below);
//! - object stores: the state object is PUT with `If-Match: <e-tag of the state this owner
//!   wrote last>` (the first claim with `If-None-Match: *`); a claim changes the e-tag, so a
//!   zombie's PUT gets `412 Precondition Failed`.
//!
//! A refused writer logs `zombie commit refused`, deletes the staged files of its own epoch
//! (their names carry its owner generation, `.tmp-o<G>-e<E>-<n>`, so they are never the new
//! owner's) and fails its run, which restarts and rejoins the group. When the outcome is
//! ambiguous — a link that succeeded on a pruned name, or on an object store a conflict after
//! which the state names this very epoch (committed, then claimed) — it deletes nothing and
//! leaves its files to the owner's recoveries, which roll the epoch forward when the state
//! names it and delete its staged files otherwise. A claim is itself conditional: two
//! processes claiming at once cannot both win; the loser's run fails and retries. Limits: a
//! zombie that never attempts another commit leaves its staged files (never final names) until
//! the next recovery of the sub-partition; the local check relies on `link` being atomic and
//! the directory listing being current (true on local file systems; on NFS, mount without
//! attribute caching); moto, the test S3 server, checks the conditions without a lock (real
//! S3 checks them atomically).
//!
//! # Object stores (S3)
//!
//! An object store has no rename, and a multi-object change is never atomic; a single PUT
//! of one object is (readers see the old object or the new one, whole). With
//! `sink.files.url = "s3://bucket/prefix"` the epoch's files are still written and finished
//! on local disk (under `path`, the staging directory), and the commit becomes:
//!
//! 1. every open file is finished and closed, as above;
//! 2. each file is uploaded to its **staged key** `<prefix>/_sluice/staging/<tag>/<name>` (a
//!    multipart upload when it is larger than `upload_part_bytes`);
//! 3. the sub-partition's **state object** `<prefix>/_sluice/state/<tag>.json` is PUT with
//!    `If-Match` — `last_offset`, the epoch, its staged and final keys, the owner generation.
//!    This single conditional PUT is the commit point;
//! 4. each staged object is copied (`CopyObject`, server side) to its **final key**, the same
//!    `<dir>/part-<topic>+<partition>+s<sub>+<first>-<last>.<ext>` name as on disk;
//! 5. the staged objects and the local staged files are deleted.
//!
//! Recovery on assignment claims the state object, copies the staged objects the state names
//! that are still there (a crash or a lost partition between steps 3 and 5), then deletes
//! everything else under the sub-partition's staging prefix (epochs that never committed).
//! Nothing is ever rolled forward from local disk, so another process (another machine) can
//! take the partition over. Local staged files of any epoch are deleted on assignment. A
//! final key is only ever written after its epoch committed, so a zombie never touches one,
//! and a copy done twice writes the same bytes. `CopyObject` takes objects up to 5 GiB, so
//! `roll_bytes` is at most 4 GiB there. (A pending intent `<prefix>/_sluice/pending/<tag>.json` left by an
//! older sluice, which uploaded straight to the final keys, is still honoured: its
//! uncommitted keys are deleted.)
//!
//! **What a reader that lists the prefix sees.** Only committed objects have final keys, and
//! every offset is in exactly one of them. Between an epoch's state PUT and its last copy
//! (and, after a crash there, until the sub-partition is assigned again) some of its objects
//! are not listed yet.
//!
//! Test hook (compiled in only with the `failpoints` feature, like [`crate::failpoint`]'s
//! points): with `SLUICE_TEST_ABORT_AFTER_UPLOAD=N` in its environment the process aborts
//! in its `N`th epoch commit to an object store, after the uploads and before the state PUT
//! (the integration tests use it to crash inside that window on purpose).

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sink::config::{FileCompression, FileFormat};
use crate::sink::object::{ObjectTarget, PutOutcome};
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

/// A sub-partition's committed state (and, on an object store written by an older sluice,
/// its pending intent).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
struct SubState {
    /// The owner generation that wrote it: every claim (assignment) bumps it.
    #[serde(default)]
    owner: u64,
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

impl SubState {
    /// The state a claim starts from when the sub-partition has none.
    fn empty() -> Self {
        Self {
            last_offset: -1,
            ..Self::default()
        }
    }

    /// Whether anything was committed (an epoch, or a dead-lettered offset to skip).
    fn has_commits(&self) -> bool {
        self.epoch > 0 || !self.skipped.is_empty()
    }
}

/// The right to commit a sub-partition's epochs, taken by a claim on assignment: the owner
/// generation and what the commit's condition compares (see the [module docs](self)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The owner generation (recorded in the state; every claim bumps it).
    pub generation: u64,
    /// Local files: the state version this owner wrote last; its next commit creates the
    /// next version, exclusively.
    version: u64,
    /// Object store: the e-tag of the state object this owner wrote last; its next commit
    /// is a PUT with `If-Match` on it.
    e_tag: Option<String>,
}

/// An epoch commit was refused: the sub-partition has a newer owner.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the commit of epoch {epoch} of {tag} was refused: owner generation {generation} no longer owns it ({reason}); {}",
    if *.cleaned { "its uncommitted files were deleted" } else { "its files are left to the new owner" }
)]
pub struct CommitRefused {
    /// The sub-partition (`topic+partition+sSUB`).
    pub tag: String,
    /// The refused epoch.
    pub epoch: u64,
    /// The refused writer's owner generation.
    pub generation: u64,
    /// What the condition found.
    pub reason: String,
    /// Whether the writer deleted its own staged files (`false`: the outcome is ambiguous,
    /// so it touched nothing and the new owner's recovery decides).
    pub cleaned: bool,
}

/// Why [`Epoch::commit`] did not commit.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The file system or the store failed; nothing is known to be committed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The sub-partition has a newer owner (this writer is a zombie).
    #[error(transparent)]
    Refused(CommitRefused),
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

    /// The pending intent of sluice versions before the staging prefix (read on recovery).
    fn pending_key(&self) -> String {
        format!("{STATE_DIR}/pending/{}.json", self.tag())
    }

    /// The store prefix where an epoch's files wait for their commit.
    fn staging_prefix(&self) -> String {
        format!("{STATE_DIR}/staging/{}", self.tag())
    }

    /// The staged object of the staged file `staged`.
    fn staging_key(&self, staged: &str) -> String {
        format!(
            "{}/{}",
            self.staging_prefix(),
            staged.trim_start_matches('.')
        )
    }
}

/// Claims give up after this many conflicting attempts in a row.
const CLAIM_ATTEMPTS: u32 = 8;

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

    /// The directory of a sub-partition's state versions (`v<version>.json`).
    fn state_dir(&self, id: &SubPartitionId) -> PathBuf {
        self.root.join(STATE_DIR).join("state").join(id.tag())
    }

    /// The single state file of sluice versions before the versioned state (version 0).
    fn legacy_state_path(&self, id: &SubPartitionId) -> PathBuf {
        self.root
            .join(STATE_DIR)
            .join("state")
            .join(format!("{}.json", id.tag()))
    }

    fn staging_dir(&self, id: &SubPartitionId) -> PathBuf {
        self.root.join(STATE_DIR).join("staging").join(id.tag())
    }

    /// The state versions of a sub-partition, ascending.
    fn state_versions(&self, id: &SubPartitionId) -> io::Result<Vec<u64>> {
        let entries = match fs::read_dir(self.state_dir(id)) {
            Ok(entries) => entries,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(error),
        };
        let mut versions = Vec::new();
        for entry in entries {
            let name = entry?.file_name();
            if let Some(version) = name
                .to_str()
                .and_then(|n| n.strip_prefix('v'))
                .and_then(|n| n.strip_suffix(".json"))
                .and_then(|n| n.parse().ok())
            {
                versions.push(version);
            }
        }
        versions.sort_unstable();
        Ok(versions)
    }

    /// The newest state version and its state (version 0: the legacy file, or nothing).
    fn read_local_state(&self, id: &SubPartitionId) -> io::Result<(u64, Option<SubState>)> {
        let parse = |bytes: &[u8]| {
            serde_json::from_slice::<SubState>(bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        };
        for _ in 0..CLAIM_ATTEMPTS {
            let Some(&version) = self.state_versions(id)?.last() else {
                return match fs::read(self.legacy_state_path(id)) {
                    Ok(bytes) => Ok((0, Some(parse(&bytes)?))),
                    Err(error) if error.kind() == io::ErrorKind::NotFound => Ok((0, None)),
                    Err(error) => Err(error),
                };
            };
            match fs::read(self.state_dir(id).join(version_name(version))) {
                Ok(bytes) => return Ok((version, Some(parse(&bytes)?))),
                // Pruned after newer versions were written meanwhile: look again.
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error),
            }
        }
        Err(io::Error::other(format!(
            "the state of {} keeps changing while it is read",
            id.tag()
        )))
    }

    /// Creates state version `version` exclusively (a hard link of a synced temporary file:
    /// atomic, and it never replaces an existing version); `Ok(false)` when it exists.
    fn create_version(
        &self,
        id: &SubPartitionId,
        version: u64,
        state: &SubState,
    ) -> io::Result<bool> {
        let dir = self.state_dir(id);
        if !dir.exists() {
            fs::create_dir_all(&dir)?;
            sync_ancestors(&dir, &self.root)?;
        }
        let bytes = serde_json::to_vec(state).map_err(io::Error::other)?;
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tmp = dir.join(format!(".tmp-v{version}-{}-{nanos}", std::process::id()));
        let mut file = File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        let linked = fs::hard_link(&tmp, dir.join(version_name(version)));
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => {
                sync_dir(&dir)?;
                Ok(true)
            }
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Deletes the state versions older than `newest - 1` and the legacy file (best
    /// effort: a version left over is only garbage).
    fn prune_versions(&self, id: &SubPartitionId, newest: u64) {
        let Ok(versions) = self.state_versions(id) else {
            return;
        };
        for version in versions.into_iter().filter(|v| *v + 1 < newest) {
            let _ = fs::remove_file(self.state_dir(id).join(version_name(version)));
        }
        let _ = fs::remove_file(self.legacy_state_path(id));
    }

    /// Claims a sub-partition for a new owner (see the [module docs](self)): writes its state,
    /// changed by `change`, with the owner generation bumped, on the condition that nobody
    /// wrote it meanwhile. Returns the state found and the new owner's [`Ownership`].
    fn claim(
        &self,
        id: &SubPartitionId,
        change: impl Fn(&mut SubState),
    ) -> io::Result<(Option<SubState>, Ownership)> {
        for _ in 0..CLAIM_ATTEMPTS {
            let claimed = match &self.objects {
                Some(objects) => claim_object(objects, id, &change)?,
                None => self.claim_local(id, &change)?,
            };
            if let Some((previous, ownership)) = claimed {
                tracing::info!(
                    sub_partition = %id.tag(),
                    owner = ownership.generation,
                    "sub-partition claimed: earlier owners can no longer commit"
                );
                return Ok((previous, ownership));
            }
        }
        Err(io::Error::other(format!(
            "cannot claim {}: its state changed {CLAIM_ATTEMPTS} times in a row while claiming (another process claims it too)",
            id.tag()
        )))
    }

    /// One attempt of [`OutputRoot::claim`] on local files; `None`: someone else wrote the
    /// next version first.
    fn claim_local(
        &self,
        id: &SubPartitionId,
        change: &impl Fn(&mut SubState),
    ) -> io::Result<Option<(Option<SubState>, Ownership)>> {
        let (version, previous) = self.read_local_state(id)?;
        let mut next = previous.clone().unwrap_or_else(SubState::empty);
        next.owner = previous.as_ref().map_or(0, |s| s.owner) + 1;
        change(&mut next);
        if !self.create_version(id, version + 1, &next)? {
            return Ok(None);
        }
        // A newer version than ours means the state had moved on before our version was
        // created (ours re-created a pruned name): this claim is stale.
        let newest = self.state_versions(id)?.last().copied().unwrap_or(0);
        if newest != version + 1 {
            return Err(io::Error::other(format!(
                "cannot claim {}: another process claimed it concurrently (state version {newest} is newer than this claim's {})",
                id.tag(),
                version + 1
            )));
        }
        self.prune_versions(id, version + 1);
        Ok(Some((
            previous,
            Ownership {
                generation: next.owner,
                version: version + 1,
                e_tag: None,
            },
        )))
    }

    /// Claims a sub-partition (bumping its owner generation, which fences every earlier
    /// owner), brings its files to its last commit (finishing its renames or copies,
    /// deleting staged files of uncommitted epochs) and returns what the commit holds and
    /// the new owner's [`Ownership`].
    ///
    /// # Errors
    ///
    /// I/O errors, a state file that cannot be read, and a claim that lost to a concurrent
    /// one.
    pub fn recover(&self, id: &SubPartitionId) -> io::Result<(Option<Recovered>, Ownership)> {
        let staging = self.staging_dir(id);
        fs::create_dir_all(&staging)?;
        // The claim first: from here on no earlier owner can commit, so what the state names
        // is final and every other staged file is garbage.
        let (state, ownership) = self.claim(id, |_| ())?;
        if let Some(objects) = &self.objects {
            self.recover_objects(objects, id, state.as_ref())?;
        } else if let Some(state) = &state {
            self.apply_renames(&staging, &state.renames)?;
        }
        for entry in fs::read_dir(&staging)? {
            let entry = entry?;
            if self.objects.is_none() {
                tracing::info!(file = %entry.path().display(), "deleting a file of an uncommitted epoch");
            }
            match fs::remove_file(entry.path()) {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        let recovered = state.filter(SubState::has_commits).map(Recovered::from);
        Ok((recovered, ownership))
    }

    /// Records in a sub-partition's state that `offset` (after its last committed offset) is
    /// in no file because it went to the dead-letter topic, so that the records after it can
    /// be committed and it is never written after a restart. This claims the sub-partition:
    /// its abandoned worker can no longer commit.
    ///
    /// # Errors
    ///
    /// I/O errors; the state is then unchanged.
    pub fn add_skipped(&self, id: &SubPartitionId, offset: i64) -> io::Result<()> {
        self.claim(id, |state| {
            if offset > state.last_offset && !state.skipped.contains(&offset) {
                state.skipped.push(offset);
            }
        })
        .map(|_| ())
    }

    /// The object store part of [`OutputRoot::recover`], after the claim (see the
    /// [module docs](self)).
    fn recover_objects(
        &self,
        objects: &ObjectTarget,
        id: &SubPartitionId,
        state: Option<&SubState>,
    ) -> io::Result<()> {
        // A pending intent of an older sluice: the keys of an epoch newer than the state's
        // were uploaded to their final names and never committed.
        if let Some(bytes) = objects.get(&id.pending_key())? {
            let pending = serde_json::from_slice::<SubState>(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            if state.is_none_or(|s| pending.epoch > s.epoch) {
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
        // The committed epoch's copies (a crash or a lost partition between the state PUT and
        // the last copy): a staged object still there has not been copied yet.
        if let Some(state) = state {
            for (staged, key) in &state.renames {
                if objects.copy(&id.staging_key(staged), key)? {
                    tracing::info!(
                        object = %format!("{}/{key}", objects.url()),
                        epoch = state.epoch,
                        "finishing the copy of a committed epoch"
                    );
                }
            }
        }
        for key in objects.list(&id.staging_prefix())? {
            tracing::info!(
                object = %format!("{}/{key}", objects.url()),
                "deleting a staged object of an uncommitted epoch"
            );
            objects.delete(&key)?;
        }
        Ok(())
    }

    /// Renames staged files to their final names (those not renamed yet), then syncs the
    /// directories. A file another process renamed meanwhile (a new owner finishing the same
    /// committed epoch) is not an error.
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
            match fs::rename(&from, &to) {
                Err(error) if error.kind() == io::ErrorKind::NotFound && to.exists() => {}
                other => other?,
            }
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

/// A state version's file name (zero-padded, so that names sort like numbers).
fn version_name(version: u64) -> String {
    format!("v{version:020}.json")
}

/// One attempt of [`OutputRoot::claim`] on an object store: a conditional PUT of the state
/// object; `None`: it changed since it was read.
fn claim_object(
    objects: &ObjectTarget,
    id: &SubPartitionId,
    change: &impl Fn(&mut SubState),
) -> io::Result<Option<(Option<SubState>, Ownership)>> {
    let key = id.state_key();
    let (previous, e_tag) = match objects.get_tagged(&key)? {
        Some((bytes, e_tag)) => {
            let state = serde_json::from_slice::<SubState>(&bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            let e_tag = e_tag.ok_or_else(|| no_e_tag(objects))?;
            (Some(state), Some(e_tag))
        }
        None => (None, None),
    };
    let mut next = previous.clone().unwrap_or_else(SubState::empty);
    next.owner = previous.as_ref().map_or(0, |s| s.owner) + 1;
    change(&mut next);
    let bytes = serde_json::to_vec(&next).map_err(io::Error::other)?;
    match objects.put_if(&key, bytes, e_tag.as_deref())? {
        PutOutcome::Written(Some(e_tag)) => Ok(Some((
            previous,
            Ownership {
                generation: next.owner,
                version: 0,
                e_tag: Some(e_tag),
            },
        ))),
        PutOutcome::Written(None) => Err(no_e_tag(objects)),
        PutOutcome::Conflict => Ok(None),
    }
}

fn no_e_tag(objects: &ObjectTarget) -> io::Error {
    io::Error::other(format!(
        "the object store at {} returns no e-tags, so its commits cannot be made conditional",
        objects.url()
    ))
}

/// The test hook of the [module docs](self): aborts the process in the `N`th object store
/// commit when `SLUICE_TEST_ABORT_AFTER_UPLOAD=N` (only with the `failpoints` feature).
#[cfg(feature = "failpoints")]
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
    /// Parquet: encoded bytes per row group.
    pub parquet_row_group_bytes: usize,
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
                    settings.parquet_row_group_bytes,
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
///
/// Straight into the file's buffer, piece by piece: no per-record string is built.
fn write_line<W: Write>(
    out: &mut W,
    record: &OutputRecord<'_>,
    settings: &FileSettings,
) -> io::Result<u64> {
    let row = &record.row;
    let value = row.value.trim();
    let mut line = Counted { out, written: 0 };
    if settings.metadata {
        // Metadata text has no raw line breaks: `topic_json` is serde_json's escaping.
        line.raw(b"{\"_topic\":")?;
        line.raw(record.topic_json.as_bytes())?;
        line.raw(b",\"_partition\":")?;
        line.raw(itoa::Buffer::new().format(row.partition).as_bytes())?;
        line.raw(b",\"_offset\":")?;
        line.raw(itoa::Buffer::new().format(row.offset).as_bytes())?;
        line.raw(b",\"_timestamp_ms\":")?;
        match row.timestamp_ms {
            Some(ms) => line.raw(itoa::Buffer::new().format(ms).as_bytes())?,
            None => line.raw(b"null")?,
        }
        line.raw(b",\"_key\":")?;
        match row.key {
            None => line.raw(b"null")?,
            // A JSON object, array or string key (CDC keys are objects) is kept as JSON;
            // anything else, numbers included, becomes a string, so `_key` has one meaning.
            Some(key)
                if matches!(key.trim_ascii_start().first(), Some(b'{' | b'[' | b'"'))
                    && serde_json::from_slice::<&serde_json::value::RawValue>(key).is_ok() =>
            {
                line.json(key)?;
            }
            // serde_json escapes control characters, so no raw line break gets through.
            Some(key) => serde_json::to_writer(&mut line, &*String::from_utf8_lossy(key))
                .map_err(io::Error::other)?,
        }
        if row.fields.is_some() {
            // The value's object, spliced after the metadata fields.
            let inner = &value[1..];
            if inner.trim_start().starts_with('}') {
                line.raw(b"}")?;
            } else {
                line.raw(b",")?;
                line.json(inner.as_bytes())?;
            }
        } else {
            line.raw(b",\"_value\":")?;
            line.json(value.as_bytes())?;
            line.raw(b"}")?;
        }
    } else {
        line.json(value.as_bytes())?;
    }
    line.raw(b"\n")?;
    Ok(line.written)
}

/// A line being written, with the bytes written so far.
struct Counted<'w, W> {
    out: &'w mut W,
    written: u64,
}

impl<W: Write> Counted<'_, W> {
    /// Text known to hold no raw line break.
    fn raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.written += bytes.len() as u64;
        self.out.write_all(bytes)
    }

    /// JSON text; raw line breaks (only possible as whitespace in valid JSON) become spaces
    /// so that a record stays on one line. The search for them is memchr's vectorised one:
    /// a byte-at-a-time scan of every value was the files writer's largest cost.
    fn json(&mut self, bytes: &[u8]) -> io::Result<()> {
        if memchr::memchr2(b'\n', b'\r', bytes).is_none() {
            return self.raw(bytes);
        }
        let cleaned: Vec<u8> = bytes
            .iter()
            .map(|b| if *b == b'\n' || *b == b'\r' { b' ' } else { *b })
            .collect();
        self.raw(&cleaned)
    }
}

impl<W: Write> Write for Counted<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.out.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
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
    /// This writer's claim on the sub-partition: every commit is conditional on it.
    ownership: Ownership,
}

impl Epoch {
    /// The first epoch after a recovery whose last committed epoch was `last_epoch`, whose
    /// state lists `skipped` offsets and whose claim gave `ownership`.
    pub fn new(
        root: &OutputRoot,
        id: SubPartitionId,
        last_epoch: u64,
        skipped: Vec<i64>,
        ownership: Ownership,
    ) -> Self {
        let staging = root.staging_dir(&id);
        Self {
            id,
            staging,
            skipped,
            ownership,
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
        dir: &str,
        record: &OutputRecord<'_>,
        settings: &FileSettings,
    ) -> io::Result<()> {
        let index = match self.files.iter().position(|f| f.dir == dir) {
            Some(index) => index,
            None => {
                if self.files.is_empty() {
                    fs::create_dir_all(&self.staging)?;
                }
                // Unique per owner: a zombie's staged names never collide with the
                // current owner's.
                let staged_name = format!(
                    ".tmp-o{}-e{}-{}",
                    self.ownership.generation, self.number, self.next_file
                );
                self.next_file += 1;
                let file = OpenFile::create(
                    &self.staging.join(&staged_name),
                    staged_name,
                    dir.to_owned(),
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
    /// [`CommitError::Io`]: the epoch is then not committed (or committed and its renames
    /// finished by the next recovery). [`CommitError::Refused`]: the sub-partition has a newer
    /// owner; the epoch is dropped (see [`CommitRefused::cleaned`]).
    pub fn commit(
        &mut self,
        root: &OutputRoot,
        settings: &FileSettings,
    ) -> Result<Vec<PathBuf>, CommitError> {
        let Some(last_offset) = self.last_offset else {
            return Ok(Vec::new());
        };
        for file in &mut self.files {
            file.finish()?;
        }
        // Tests stop a worker here, its files finished and its commit not yet attempted.
        crate::gate_point!("sink::files::commit");
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
            owner: self.ownership.generation,
            last_offset,
            epoch: self.number,
            renames,
            skipped: self.skipped.clone(),
        };
        let committed = match &root.objects {
            Some(objects) => self.commit_objects(root, objects, &state)?,
            None => self.commit_local(root, &state)?,
        };
        self.number += 1;
        self.files.clear();
        self.records = 0;
        self.last_offset = None;
        self.opened_at = None;
        self.next_file = 0;
        Ok(committed)
    }

    /// The local part of [`Epoch::commit`]: the next state version, created exclusively, is
    /// the commit point; then the renames.
    fn commit_local(
        &mut self,
        root: &OutputRoot,
        state: &SubState,
    ) -> Result<Vec<PathBuf>, CommitError> {
        let version = self.ownership.version + 1;
        if !root.create_version(&self.id, version, state)? {
            // Someone claimed the sub-partition: version `version` is theirs.
            let (_, newer) = root.read_local_state(&self.id)?;
            let reason = format!(
                "state version {version} was written by owner generation {}",
                newer.map_or_else(|| "?".to_owned(), |s| s.owner.to_string())
            );
            return Err(self.refuse(root, reason, true));
        }
        let newest = root.state_versions(&self.id)?.last().copied().unwrap_or(0);
        if newest != version {
            // Our version re-created a name that had been pruned: the state had moved on.
            // Whether a new owner read ours first is unknown, so nothing is touched: the
            // owner's recovery renames or deletes these files.
            let reason = format!("state version {newest} is newer than this commit's {version}");
            return Err(self.refuse(root, reason, false));
        }
        self.ownership.version = version;
        root.prune_versions(&self.id, version);
        root.apply_renames(&self.staging, &state.renames)?;
        Ok(state
            .renames
            .iter()
            .map(|(_, target)| root.path().join(target))
            .collect())
    }

    /// The object store part of [`Epoch::commit`]: uploads to the staging prefix, the state
    /// PUT with `If-Match` (the commit point), then the copies to the final keys.
    fn commit_objects(
        &mut self,
        root: &OutputRoot,
        objects: &ObjectTarget,
        state: &SubState,
    ) -> Result<Vec<PathBuf>, CommitError> {
        for (staged, _) in &state.renames {
            objects.upload(&self.staging.join(staged), &self.id.staging_key(staged))?;
        }
        #[cfg(feature = "failpoints")]
        abort_after_upload_hook();
        let bytes = serde_json::to_vec(state).map_err(io::Error::other)?;
        let expected = self
            .ownership
            .e_tag
            .clone()
            .ok_or_else(|| no_e_tag(objects))?;
        match objects.put_if(&self.id.state_key(), bytes, Some(&expected))? {
            PutOutcome::Written(e_tag) => {
                self.ownership.e_tag = Some(e_tag.ok_or_else(|| no_e_tag(objects))?);
            }
            PutOutcome::Conflict => {
                let current = objects.get_tagged(&self.id.state_key())?;
                let found = current
                    .as_ref()
                    .and_then(|(bytes, _)| serde_json::from_slice::<SubState>(bytes).ok());
                match found {
                    // Our own PUT, retried after its answer was lost.
                    Some(found) if found == *state => {
                        self.ownership.e_tag = current.and_then(|(_, e_tag)| e_tag);
                    }
                    // Committed, then claimed: the new owner copies these objects.
                    Some(found) if found.renames == state.renames => {
                        let reason = format!(
                            "owner generation {} claimed it right after this commit",
                            found.owner
                        );
                        return Err(self.refuse(root, reason, false));
                    }
                    found => {
                        let reason = format!(
                            "the state object was rewritten by owner generation {}",
                            found.map_or_else(|| "?".to_owned(), |s| s.owner.to_string())
                        );
                        return Err(self.refuse(root, reason, true));
                    }
                }
            }
        }
        for (staged, key) in &state.renames {
            // Not there any more: a new owner's recovery has copied it already.
            if !objects.copy(&self.id.staging_key(staged), key)? && !objects.exists(key)? {
                return Err(CommitError::Io(io::Error::other(format!(
                    "the staged object of {key} vanished before it was copied"
                ))));
            }
        }
        for (staged, _) in &state.renames {
            if let Err(error) = objects.delete(&self.id.staging_key(staged)) {
                // The next recovery deletes it.
                tracing::warn!(error = %error, "cannot delete a committed epoch's staged object");
            }
            fs::remove_file(self.staging.join(staged))?;
        }
        Ok(state
            .renames
            .iter()
            .map(|(_, key)| PathBuf::from(key))
            .collect())
    }

    /// Ends a refused commit: with `clean`, deletes this epoch's own staged files (and
    /// staged objects); otherwise leaves them to the new owner. The epoch is empty after.
    fn refuse(&mut self, root: &OutputRoot, reason: String, clean: bool) -> CommitError {
        if clean {
            for file in &self.files {
                let _ = fs::remove_file(self.staging.join(&file.staged_name));
                if let Some(objects) = &root.objects {
                    let _ = objects.delete(&self.id.staging_key(&file.staged_name));
                }
            }
        }
        let refused = CommitRefused {
            tag: self.id.tag(),
            epoch: self.number,
            generation: self.ownership.generation,
            reason,
            cleaned: clean,
        };
        self.forget();
        CommitError::Refused(refused)
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
            parquet_row_group_bytes: 1 << 20,
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
                kinds: None,
            },
            topic_json: "\"t\"",
        };
        epoch.write(dir, &record, &settings()).unwrap();
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

    /// Claims the sub-partition and opens its next epoch, as an assignment does.
    fn claim_epoch(root: &OutputRoot) -> Epoch {
        let (recovered, ownership) = root.recover(&id()).unwrap();
        let (epoch, skipped) = recovered.map_or((0, Vec::new()), |r| (r.epoch, r.skipped));
        Epoch::new(root, id(), epoch, skipped, ownership)
    }

    fn recovered(root: &OutputRoot) -> Option<(i64, u64)> {
        root.recover(&id())
            .unwrap()
            .0
            .map(|r| (r.last_offset, r.epoch))
    }

    fn refused(result: Result<Vec<PathBuf>, CommitError>) -> CommitRefused {
        match result {
            Err(CommitError::Refused(refused)) => refused,
            other => panic!("expected a refused commit, got {other:?}"),
        }
    }

    #[test]
    fn commit_renames_to_offset_names_and_recovery_returns_the_last_offset() {
        let dir = temp_root("commit");
        let root = OutputRoot::open(&dir, 2).unwrap();
        assert_eq!(recovered(&root), None);
        let mut epoch = claim_epoch(&root);
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
        assert_eq!(recovered(&root), Some((9, 1)));
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);
        // Old state versions are pruned: the newest two stay.
        assert!(root.state_versions(&id()).unwrap().len() <= 2);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn skipped_offsets_survive_until_a_commit_passes_them() {
        let dir = temp_root("skipped");
        let root = OutputRoot::open(&dir, 2).unwrap();
        root.add_skipped(&id(), 4).unwrap();
        let (recovered, ownership) = root.recover(&id()).unwrap();
        let recovered = recovered.unwrap();
        assert_eq!(
            (recovered.last_offset, &recovered.skipped[..]),
            (-1, &[4][..])
        );
        let mut epoch = Epoch::new(&root, id(), recovered.epoch, recovered.skipped, ownership);
        write(&mut epoch, "a", 3, "{}");
        epoch.commit(&root, &settings()).unwrap();
        assert_eq!(root.recover(&id()).unwrap().0.unwrap().skipped, [4]);
        root.add_skipped(&id(), 2).unwrap(); // already committed: ignored
        root.add_skipped(&id(), 6).unwrap();
        let (recovered, ownership) = root.recover(&id()).unwrap();
        let recovered = recovered.unwrap();
        assert_eq!(
            (recovered.last_offset, &recovered.skipped[..]),
            (3, &[4, 6][..])
        );
        let mut epoch = Epoch::new(&root, id(), recovered.epoch, recovered.skipped, ownership);
        write(&mut epoch, "a", 5, "{}");
        epoch.commit(&root, &settings()).unwrap();
        assert_eq!(root.recover(&id()).unwrap().0.unwrap().skipped, [6]);
        fs::remove_dir_all(&dir).unwrap();
    }

    /// The fence on local files: a writer whose sub-partition was claimed by another owner
    /// cannot commit; it deletes its own staged files and nothing of the new owner's.
    #[test]
    fn a_zombie_writer_cannot_commit_after_a_new_owner_claimed() {
        let dir = temp_root("zombie");
        let root = OutputRoot::open(&dir, 2).unwrap();
        let mut zombie = claim_epoch(&root);
        write(&mut zombie, "a", 1, "{}");
        zombie.commit(&root, &settings()).unwrap();
        write(&mut zombie, "a", 2, "{}");
        // The partition moves: the new owner claims, writes offset 2 again and commits.
        let mut owner = claim_epoch(&root);
        write(&mut owner, "a", 2, "{}");
        write(&mut owner, "a", 3, "{}");
        let staged_by_owner = fs::read_dir(root.staging_dir(&id())).unwrap().count();
        assert_eq!(
            staged_by_owner, 1,
            "the claim's recovery deleted the zombie's staged file"
        );
        owner.commit(&root, &settings()).unwrap();
        // The zombie goes on, as a resumed process would: a new file, then its commit.
        write(&mut zombie, "b", 4, "{}");
        let refusal = refused(zombie.commit(&root, &settings()));
        assert!(refusal.cleaned, "{refusal}");
        assert_eq!((refusal.generation, refusal.epoch), (1, 2));
        assert!(
            refusal
                .to_string()
                .contains("owner generation 1 no longer owns it"),
            "{refusal}"
        );
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);
        assert!(dir.join("a/part-t+0+s1+1-1.jsonl").exists());
        assert!(dir.join("a/part-t+0+s1+2-3.jsonl").exists());
        assert!(!dir.join("a/part-t+0+s1+2-2.jsonl").exists());
        assert!(!dir.join("b").exists());
        assert_eq!(recovered(&root), Some((3, 2)));
        fs::remove_dir_all(&dir).unwrap();
    }

    /// A zombie whose next state version had been pruned creates it again, but a newer
    /// version exists: its commit is refused without touching anything.
    #[test]
    fn a_zombie_recreating_a_pruned_version_is_refused() {
        let dir = temp_root("zombie_pruned");
        let root = OutputRoot::open(&dir, 2).unwrap();
        let mut zombie = claim_epoch(&root);
        let mut owner = claim_epoch(&root);
        for offset in 1..=3 {
            write(&mut owner, "a", offset, "{}");
            owner.commit(&root, &settings()).unwrap();
        }
        assert!(!root.state_dir(&id()).join(version_name(2)).exists());
        write(&mut zombie, "a", 1, "{}");
        let refusal = refused(zombie.commit(&root, &settings()));
        assert!(!refusal.cleaned, "{refusal}");
        assert_eq!(recovered(&root), Some((3, 3)));
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
                    kinds: None,
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
    fn a_pretty_printed_record_stays_on_one_line() {
        let value = "{\r  \"id\": 1,\r  \"name\": \"a\\nb\"\r}";
        let key = b"{\n\"id\":1}";
        let fields = parse_object(value).unwrap();
        let record = OutputRecord {
            row: ParquetRow {
                topic: "t",
                partition: 3,
                offset: 7,
                timestamp_ms: Some(5),
                key: Some(key),
                value,
                fields: Some(&fields),
                kinds: None,
            },
            topic_json: "\"t\"",
        };
        let mut out = Vec::new();
        let written = write_line(&mut out, &record, &settings()).unwrap();
        assert_eq!(written, out.len() as u64, "the count is the bytes written");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.matches(['\n', '\r']).count(), 1, "{text:?}");
        assert!(text.ends_with('\n'));
        let line: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"_topic": "t", "_partition": 3, "_offset": 7,
                "_timestamp_ms": 5, "_key": {"id": 1}, "id": 1, "name": "a\nb"})
        );
    }

    #[test]
    fn recovery_finishes_the_renames_of_a_committed_epoch() {
        // The state file of an older sluice (one file, no versions) still recovers.
        let dir = temp_root("rollforward");
        let root = OutputRoot::open(&dir, 2).unwrap();
        let staging = root.staging_dir(&id());
        fs::create_dir_all(&staging).unwrap();
        fs::write(staging.join(".tmp-e4-0"), "{}\n").unwrap();
        let state = SubState {
            owner: 0,
            last_offset: 42,
            epoch: 4,
            renames: vec![(".tmp-e4-0".into(), "x/y/part-t+0+s1+40-42.jsonl".into())],
            skipped: Vec::new(),
        };
        let legacy = root.legacy_state_path(&id());
        fs::create_dir_all(legacy.parent().unwrap()).unwrap();
        write_atomically(&legacy, &serde_json::to_vec(&state).unwrap()).unwrap();
        let (recovered, ownership) = root.recover(&id()).unwrap();
        assert_eq!(recovered.map(|r| (r.last_offset, r.epoch)), Some((42, 4)));
        assert_eq!((ownership.generation, ownership.version), (1, 1));
        assert!(
            !legacy.exists(),
            "the legacy state is replaced by version 1"
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
            let mut epoch = claim_epoch(&root);
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
                        kinds: None,
                    },
                    topic_json: "\"t\"",
                };
                epoch.write("", &record, &settings).unwrap();
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
    fn object_store_commits_through_staging_and_recovery_deletes_uncommitted_epochs() {
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
        assert_eq!(recovered(&root), None);
        let mut epoch = claim_epoch(&root);
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
        let keys = |objects: &ObjectTarget| {
            let mut keys = objects.list("").unwrap();
            keys.sort();
            keys
        };
        assert_eq!(
            keys(&objects),
            [
                "_sluice/state/t+0+s1.json",
                "_sluice_sink.json",
                "a/part-t+0+s1+3-3.jsonl",
                "b/part-t+0+s1+5-5.jsonl"
            ],
            "nothing is left in the staging prefix after the commit"
        );
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);

        // A crash after an epoch's uploads, before its state PUT: staged objects only.
        objects
            .put(&id().staging_key(".tmp-o9-e2-0"), b"{}\n".to_vec())
            .unwrap();
        fs::write(root.staging_dir(&id()).join(".tmp-o9-e2-0"), "{}\n").unwrap();
        // And a pending intent of an older sluice, with its uploaded final key.
        let pending = SubState {
            owner: 0,
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
        assert_eq!(recovered(&root), Some((5, 1)));
        assert_eq!(
            keys(&objects),
            [
                "_sluice/state/t+0+s1.json",
                "_sluice_sink.json",
                "a/part-t+0+s1+3-3.jsonl",
                "b/part-t+0+s1+5-5.jsonl"
            ]
        );
        assert_eq!(fs::read_dir(root.staging_dir(&id())).unwrap().count(), 0);

        // A state PUT whose copies did not all happen: recovery copies what is staged.
        let (_, ownership) = root.recover(&id()).unwrap();
        let committed = SubState {
            owner: ownership.generation,
            last_offset: 7,
            epoch: 2,
            renames: vec![(".tmp-o3-e2-0".into(), "a/part-t+0+s1+7-7.jsonl".into())],
            skipped: Vec::new(),
        };
        objects
            .put(&id().state_key(), serde_json::to_vec(&committed).unwrap())
            .unwrap();
        objects
            .put(&id().staging_key(".tmp-o3-e2-0"), b"{}\n".to_vec())
            .unwrap();
        assert_eq!(recovered(&root), Some((7, 2)));
        assert_eq!(
            objects.get("a/part-t+0+s1+7-7.jsonl").unwrap().as_deref(),
            Some(&b"{}\n"[..])
        );
        assert!(objects.list(&id().staging_prefix()).unwrap().is_empty());

        // The number of sub-partitions is recorded in the store.
        let error = OutputRoot::open_objects(&staging, target(), 4).unwrap_err();
        assert!(matches!(
            error,
            RootError::SubPartitionsChanged { stored: 2, .. }
        ));
        fs::remove_dir_all(&staging).unwrap();
    }

    /// The fence on an object store: the zombie's state PUT fails its `If-Match`; it deletes
    /// its own staged objects, and no final key of the new owner is touched.
    #[test]
    fn a_zombie_writer_cannot_commit_to_an_object_store() {
        use object_store::ObjectStore;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let target = ObjectTarget::new(Arc::clone(&store), "mem://b", runtime.handle().clone(), 0);
        let objects = ObjectTarget::new(Arc::clone(&store), "mem://b", runtime.handle().clone(), 0);
        // Two processes, each with its own staging directory.
        let (dir_a, dir_b) = (temp_root("zombie_a"), temp_root("zombie_b"));
        let root_a = OutputRoot::open_objects(&dir_a, target, 2).unwrap();
        let target = ObjectTarget::new(Arc::clone(&store), "mem://b", runtime.handle().clone(), 0);
        let root_b = OutputRoot::open_objects(&dir_b, target, 2).unwrap();
        let mut zombie = claim_epoch(&root_a);
        write(&mut zombie, "a", 1, "{}");
        zombie.commit(&root_a, &settings()).unwrap();
        write(&mut zombie, "a", 2, "{}");
        let mut owner = claim_epoch(&root_b);
        write(&mut owner, "a", 2, "{}");
        owner.commit(&root_b, &settings()).unwrap();
        let before = objects.get("a/part-t+0+s1+2-2.jsonl").unwrap().unwrap();
        let refusal = refused(zombie.commit(&root_a, &settings()));
        assert!(refusal.cleaned, "{refusal}");
        assert!(refusal.reason.contains("owner generation 2"), "{refusal}");
        assert!(objects.list(&id().staging_prefix()).unwrap().is_empty());
        assert_eq!(fs::read_dir(root_a.staging_dir(&id())).unwrap().count(), 0);
        assert_eq!(
            objects.get("a/part-t+0+s1+2-2.jsonl").unwrap().unwrap(),
            before
        );
        assert_eq!(recovered(&root_b), Some((2, 2)));
        // The new owner goes on committing.
        let mut owner = claim_epoch(&root_b);
        write(&mut owner, "a", 3, "{}");
        owner.commit(&root_b, &settings()).unwrap();
        assert_eq!(recovered(&root_b), Some((3, 3)));
        fs::remove_dir_all(&dir_a).unwrap();
        fs::remove_dir_all(&dir_b).unwrap();
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

//! The output root: its marker, each sub-partition's state versions and claims, recovery,
//! and the state half of an epoch's commit (see the [module docs](super)).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::sink::object::{ObjectTarget, PutOutcome};

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
pub(super) struct SubState {
    /// The owner generation that wrote it: every claim (assignment) bumps it.
    #[serde(default)]
    pub(super) owner: u64,
    /// The highest offset of the last committed epoch.
    pub(super) last_offset: i64,
    /// The last committed epoch's number.
    pub(super) epoch: u64,
    /// The renames the last committed epoch consists of: staged file name → final path
    /// relative to the root (the object key relative to the prefix on an object store).
    pub(super) renames: Vec<(String, String)>,
    /// Offsets after `last_offset` that are in no file because they went to the dead-letter
    /// topic after a processing timeout (see [`OutputRoot::add_skipped`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(super) skipped: Vec<i64>,
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
    pub(super) fn empty() -> Self {
        Self {
            last_offset: -1,
            ..Self::default()
        }
    }

    /// Whether anything was committed (an epoch, or a dead-lettered offset to skip).
    pub(super) fn has_commits(&self) -> bool {
        self.epoch > 0 || !self.skipped.is_empty()
    }
}

/// The right to commit a sub-partition's epochs, taken by a claim on assignment: the owner
/// generation and what the commit's condition compares (see the [module docs](super)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    /// The owner generation (recorded in the state; every claim bumps it).
    pub generation: u64,
    /// Local files: the state version this owner wrote last; its next commit creates the
    /// next version, exclusively.
    pub(super) version: u64,
    /// Object store: the e-tag of the state object this owner wrote last; its next commit
    /// is a PUT with `If-Match` on it.
    pub(super) e_tag: Option<String>,
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

/// Why [`Epoch::commit`](super::Epoch::commit) did not commit.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// The file system or the store failed; nothing is known to be committed.
    #[error(transparent)]
    Store(#[from] StateError),
    /// The sub-partition has a newer owner (this writer is a zombie).
    #[error(transparent)]
    Refused(CommitRefused),
}

impl From<io::Error> for CommitError {
    fn from(error: io::Error) -> Self {
        Self::Store(StateError::Io(error))
    }
}

/// Why a sub-partition's state could not be read, claimed or committed. Every kind is
/// retried by restarting the run from the committed state; the kinds tell an operator (and a
/// test) whether the files, the store or another process is to blame.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file system or the object store failed.
    #[error(transparent)]
    Io(#[from] io::Error),
    /// A state document could not be encoded.
    #[error("cannot encode a sub-partition state: {0}")]
    Encode(#[from] serde_json::Error),
    /// New state versions kept appearing while the newest was read.
    #[error("the state of {tag} keeps changing while it is read")]
    KeepsChanging {
        /// The sub-partition.
        tag: String,
    },
    /// Every claim attempt lost to another writer.
    #[error(
        "cannot claim {tag}: its state changed {CLAIM_ATTEMPTS} times in a row while claiming (another process claims it too)"
    )]
    ClaimContended {
        /// The sub-partition.
        tag: String,
    },
    /// A newer state version appeared beside the one this claim created.
    #[error(
        "cannot claim {tag}: another process claimed it concurrently (state version {newest} is newer than this claim's {claimed})"
    )]
    ClaimRaced {
        /// The sub-partition.
        tag: String,
        /// The newest version found.
        newest: u64,
        /// The version this claim created.
        claimed: u64,
    },
    /// The object store answers without e-tags, so no write can be conditional.
    #[error(
        "the object store at {url} returns no e-tags, so its commits cannot be made conditional"
    )]
    NoETags {
        /// The store.
        url: String,
    },
    /// A committed epoch's staged object was gone before its copy to the final key.
    #[error("the staged object of {key} vanished before it was copied")]
    StagedVanished {
        /// The final key.
        key: String,
    },
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

/// A sub-partition's committed state as a reader sees it (`sluice verify`): what the files
/// hold, read without claiming anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Committed {
    /// The highest offset of the last committed epoch (-1: none): every record of the
    /// sub-partition up to it is in a committed file.
    pub last_offset: i64,
    /// Offsets after `last_offset` in no file (dead-lettered after a processing timeout).
    pub skipped: Vec<i64>,
    /// The last committed epoch's files: staged path and final path. Until its renames are
    /// done (a crash between the state and the renames, or a commit in progress) some are
    /// still under their staged names.
    pub files: Vec<(PathBuf, PathBuf)>,
}

/// The output root; see the [module docs](super).
#[derive(Debug)]
pub struct OutputRoot {
    /// The output root, or with `objects` the local staging root.
    pub(super) root: PathBuf,
    /// The object store the files go to.
    pub(super) objects: Option<ObjectTarget>,
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
    pub(super) fn tag(&self) -> String {
        format!("{}+{}+s{}", self.topic, self.partition, self.sub)
    }

    pub(super) fn state_key(&self) -> String {
        format!("{STATE_DIR}/state/{}.json", self.tag())
    }

    /// The pending intent of sluice versions before the staging prefix (read on recovery).
    pub(super) fn pending_key(&self) -> String {
        format!("{STATE_DIR}/pending/{}.json", self.tag())
    }

    /// The store prefix where an epoch's files wait for their commit.
    pub(super) fn staging_prefix(&self) -> String {
        format!("{STATE_DIR}/staging/{}", self.tag())
    }

    /// The staged object of the staged file `staged`.
    pub(super) fn staging_key(&self, staged: &str) -> String {
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
                    .map_err(|e| io(io::Error::from(e)))?;
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
                    .map_err(|e| io(io::Error::from(e)))?;
                objects.put(ROOT_MARKER, text).map_err(io)?;
            }
        }
        Ok(Self {
            root: staging.to_owned(),
            objects: Some(objects),
        })
    }

    /// The local root at `root` as it is, for reading only (nothing is created or claimed):
    /// `None` when it holds no marker (the sink never ran there); else its number of
    /// sub-partitions.
    ///
    /// # Errors
    ///
    /// The marker cannot be read.
    pub fn open_existing(root: &Path) -> io::Result<Option<(Self, u32)>> {
        let bytes = match fs::read(root.join(ROOT_MARKER)) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(error),
        };
        let marker: RootMarker = serde_json::from_slice(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        let opened = Self {
            root: root.to_owned(),
            objects: None,
        };
        Ok(Some((opened, marker.sub_partitions)))
    }

    /// The committed state of a local sub-partition, read without claiming it (`None`:
    /// nothing committed).
    ///
    /// # Errors
    ///
    /// The state cannot be read.
    pub fn committed(&self, id: &SubPartitionId) -> Result<Option<Committed>, StateError> {
        let (_, state) = self.read_local_state(id)?;
        Ok(state.map(|state| Committed {
            last_offset: state.last_offset,
            skipped: state
                .skipped
                .iter()
                .copied()
                .filter(|o| *o > state.last_offset)
                .collect(),
            files: state
                .renames
                .iter()
                .map(|(staged, fin)| (self.staging_dir(id).join(staged), self.root.join(fin)))
                .collect(),
        }))
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
    pub(super) fn state_dir(&self, id: &SubPartitionId) -> PathBuf {
        self.root.join(STATE_DIR).join("state").join(id.tag())
    }

    /// The single state file of sluice versions before the versioned state (version 0).
    pub(super) fn legacy_state_path(&self, id: &SubPartitionId) -> PathBuf {
        self.root
            .join(STATE_DIR)
            .join("state")
            .join(format!("{}.json", id.tag()))
    }

    pub(super) fn staging_dir(&self, id: &SubPartitionId) -> PathBuf {
        self.root.join(STATE_DIR).join("staging").join(id.tag())
    }

    /// The state versions of a sub-partition, ascending.
    pub(super) fn state_versions(&self, id: &SubPartitionId) -> io::Result<Vec<u64>> {
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
    pub(super) fn read_local_state(
        &self,
        id: &SubPartitionId,
    ) -> Result<(u64, Option<SubState>), StateError> {
        let parse = |bytes: &[u8]| {
            serde_json::from_slice::<SubState>(bytes)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
        };
        for _ in 0..CLAIM_ATTEMPTS {
            let Some(&version) = self.state_versions(id)?.last() else {
                return match fs::read(self.legacy_state_path(id)) {
                    Ok(bytes) => Ok((0, Some(parse(&bytes)?))),
                    Err(error) if error.kind() == io::ErrorKind::NotFound => Ok((0, None)),
                    Err(error) => Err(error.into()),
                };
            };
            match fs::read(self.state_dir(id).join(version_name(version))) {
                Ok(bytes) => return Ok((version, Some(parse(&bytes)?))),
                // Pruned after newer versions were written meanwhile: look again.
                Err(error) if error.kind() == io::ErrorKind::NotFound => continue,
                Err(error) => return Err(error.into()),
            }
        }
        Err(StateError::KeepsChanging { tag: id.tag() })
    }

    /// Creates state version `version` exclusively (a hard link of a synced temporary file:
    /// atomic, and it never replaces an existing version); `Ok(false)` when it exists.
    pub(super) fn create_version(
        &self,
        id: &SubPartitionId,
        version: u64,
        state: &SubState,
    ) -> Result<bool, StateError> {
        let dir = self.state_dir(id);
        if !dir.exists() {
            fs::create_dir_all(&dir)?;
            sync_ancestors(&dir, &self.root)?;
        }
        let bytes = serde_json::to_vec(state)?;
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
            Err(error) => Err(error.into()),
        }
    }

    /// Deletes the state versions older than `newest - 1` and the legacy file (best
    /// effort: a version left over is only garbage).
    pub(super) fn prune_versions(&self, id: &SubPartitionId, newest: u64) {
        let Ok(versions) = self.state_versions(id) else {
            return;
        };
        for version in versions.into_iter().filter(|v| *v + 1 < newest) {
            let _ = fs::remove_file(self.state_dir(id).join(version_name(version)));
        }
        let _ = fs::remove_file(self.legacy_state_path(id));
    }

    /// Claims a sub-partition for a new owner (see the [module docs](super)): writes its state,
    /// changed by `change`, with the owner generation bumped, on the condition that nobody
    /// wrote it meanwhile. Returns the state found and the new owner's [`Ownership`].
    pub(super) fn claim(
        &self,
        id: &SubPartitionId,
        change: impl Fn(&mut SubState),
    ) -> Result<(Option<SubState>, Ownership), StateError> {
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
        Err(StateError::ClaimContended { tag: id.tag() })
    }

    /// One attempt of [`OutputRoot::claim`] on local files; `None`: someone else wrote the
    /// next version first.
    pub(super) fn claim_local(
        &self,
        id: &SubPartitionId,
        change: &impl Fn(&mut SubState),
    ) -> Result<Option<(Option<SubState>, Ownership)>, StateError> {
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
            return Err(StateError::ClaimRaced {
                tag: id.tag(),
                newest,
                claimed: version + 1,
            });
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
    pub fn recover(
        &self,
        id: &SubPartitionId,
    ) -> Result<(Option<Recovered>, Ownership), StateError> {
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
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error.into()),
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
    pub fn add_skipped(&self, id: &SubPartitionId, offset: i64) -> Result<(), StateError> {
        self.claim(id, |state| {
            if offset > state.last_offset && !state.skipped.contains(&offset) {
                state.skipped.push(offset);
            }
        })
        .map(|_| ())
    }

    /// The object store part of [`OutputRoot::recover`], after the claim (see the
    /// [module docs](super)).
    pub(super) fn recover_objects(
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
    pub(super) fn apply_renames(
        &self,
        staging: &Path,
        renames: &[(String, String)],
    ) -> io::Result<()> {
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
pub(super) fn version_name(version: u64) -> String {
    format!("v{version:020}.json")
}

/// One attempt of [`OutputRoot::claim`] on an object store: a conditional PUT of the state
/// object; `None`: it changed since it was read.
pub(super) fn claim_object(
    objects: &ObjectTarget,
    id: &SubPartitionId,
    change: &impl Fn(&mut SubState),
) -> Result<Option<(Option<SubState>, Ownership)>, StateError> {
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
    let bytes = serde_json::to_vec(&next)?;
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

pub(super) fn no_e_tag(objects: &ObjectTarget) -> StateError {
    StateError::NoETags {
        url: objects.url().to_owned(),
    }
}

/// Writes a file's bytes under a temporary name, syncs, renames, syncs the directory.
pub(super) fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

pub(super) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Syncs `dir` and its ancestors up to `root`, so that new directories survive a crash.
pub(super) fn sync_ancestors(dir: &Path, root: &Path) -> io::Result<()> {
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

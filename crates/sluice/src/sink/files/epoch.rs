//! A worker's open epoch and its commit (see the [module docs](super)).

use std::fs::{self};
use std::io;
use std::path::PathBuf;

use super::open::{FileSettings, OpenFile, OutputRecord};
use super::root::{
    CommitError, CommitRefused, OutputRoot, Ownership, StateError, SubPartitionId, SubState,
    no_e_tag,
};
use crate::sink::object::{ObjectTarget, PutOutcome};

/// A worker's open epoch; see the [module docs](super).
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
        // A typed Parquet file takes rows of its columns only: a record whose schema gives
        // other columns (a column added upstream, another table routed to the topic) goes to
        // the directory's file of those columns, started for it in this epoch (file names
        // carry their offsets, so both are kept).
        let open = self
            .files
            .iter()
            .position(|f| f.dir == dir && f.is_open() && f.accepts(record));
        let index = match open {
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

    /// Commits the epoch (see the [module docs](super)) and starts the next one; returns the
    /// committed files' final paths (keys relative to the prefix on an object store).
    ///
    /// # Errors
    ///
    /// [`CommitError::Store`]: the epoch is then not committed (or committed and its renames
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
        // Tests stop a worker here: its objects uploaded to the staging prefix, its state not
        // yet written.
        crate::gate_point!("sink::files::uploaded");
        #[cfg(feature = "failpoints")]
        abort_after_upload_hook();
        let bytes = serde_json::to_vec(state).map_err(StateError::from)?;
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
                return Err(StateError::StagedVanished { key: key.clone() }.into());
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
            file.close();
        }
        self.files.clear();
        self.records = 0;
        self.last_offset = None;
        self.opened_at = None;
    }

    /// Drops the epoch's staged files (an abandoned epoch).
    pub fn discard(&mut self) {
        for file in &mut self.files {
            file.close();
            let _ = fs::remove_file(self.staging.join(&file.staged_name));
        }
        self.files.clear();
        self.records = 0;
        self.last_offset = None;
        self.opened_at = None;
    }
}

/// The test hook of the [module docs](super): aborts the process in the `N`th object store
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

//! Slot safety: the identity of the slot a pipeline feeds and the last position it confirmed,
//! kept between runs in a small JSON document `<pipeline>.slot` of the pipeline's
//! [`StateStore`] (today the directory `state_dir`, so `<state_dir>/<pipeline>.slot.json`).
//!
//! The slot's confirmed flush LSN is the pipeline's checkpoint, and it lives on the server. If
//! the slot is dropped while sluice is stopped and created anew, or invalidated because it
//! retained more WAL than `max_slot_wal_keep_size`, the changes in between are gone from the
//! slot, and a pipeline that simply resumed would skip them without a word. The file lets a run
//! tell "my slot" from "a slot of that name":
//!
//! - the file is written (atomically, fsynced) *before* each position is confirmed to the
//!   server, so the slot's `confirmed_flush_lsn` can never be ahead of the file's position
//!   while the slot is the one this pipeline fed. A slot that is ahead was recreated (new slots
//!   start at the server's current WAL position) or advanced by someone else;
//! - a slot that is missing although the file says the pipeline fed it was dropped;
//! - a different system identifier means a different server (a restored backup, a replica
//!   promoted without its slots, a new cluster on the same address);
//! - `wal_status = 'lost'` means the server invalidated it.
//!
//! Each of these stops the pipeline with what happened and the fix, or (with
//! `source.postgres.on_slot_loss = "recreate"`) is logged and counted as a gap before the
//! pipeline goes on with a new slot.

use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sluice_engine::Lsn;

use crate::error::PipelineError;
use crate::runtime::state::{DirectoryStateStore, StateStore, store_off_loop};

/// What the file remembers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRecord {
    /// The server's system identifier (`IDENTIFY_SYSTEM`).
    pub system_identifier: String,
    /// The slot's name.
    pub slot: String,
    /// The slot's confirmed position when this pipeline first used it: its creation point when
    /// sluice created it.
    #[serde(with = "lsn_text")]
    pub first_lsn: Lsn,
    /// Whether sluice created the slot.
    pub created_by_sluice: bool,
    /// The newest position this pipeline confirmed (or is about to confirm) to the slot.
    #[serde(with = "lsn_text")]
    pub confirmed_lsn: Lsn,
    /// Unix milliseconds of the last write.
    pub updated_unix_ms: u64,
    /// A snapshot was started and has not finished: the next run snapshots again before it
    /// streams.
    #[serde(default)]
    pub snapshot_pending: bool,
    /// The pending snapshot's chunks and which are finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_plan: Option<super::snapshot::SnapshotPlan>,
    /// Incremental snapshots: queued tables, the current one's progress, known tables.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incremental: Option<super::incremental::IncrementalState>,
    /// Written just before sluice creates the slot: a slot found with this record is the one a
    /// run created and crashed before recording (its snapshot never ran), not one to adopt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub creating: bool,
    /// The WAL budget's `drop_slot` action dropped (or is about to drop) the slot: the next
    /// run creates it anew and republishes the captured tables (see
    /// [`super::wal_budget`]), instead of taking the missing slot for a loss.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wal_budget_drop: Option<WalBudgetDrop>,
}

/// The record of a slot dropped by the WAL budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalBudgetDrop {
    /// Unix milliseconds of the decision.
    pub unix_ms: u64,
    /// WAL the slot retained then.
    pub retained_bytes: i64,
    /// `source.postgres.wal_budget` then.
    pub budget_bytes: u64,
}

impl SlotRecord {
    /// The record written just before sluice creates `slot` on the server `system_identifier`
    /// (see [`SlotRecord::creating`]).
    pub fn creating(system_identifier: &str, slot: &str) -> Self {
        Self {
            system_identifier: system_identifier.to_owned(),
            slot: slot.to_owned(),
            first_lsn: Lsn::ZERO,
            created_by_sluice: true,
            confirmed_lsn: Lsn::ZERO,
            updated_unix_ms: 0,
            snapshot_pending: true,
            snapshot_plan: None,
            incremental: None,
            creating: true,
            wal_budget_drop: None,
        }
    }
}

/// LSNs in the file in PostgreSQL's `X/X` form, as operators read them.
mod lsn_text {
    use serde::{Deserialize as _, Deserializer, Serializer};
    use sluice_engine::Lsn;

    pub fn serialize<S: Serializer>(lsn: &Lsn, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(lsn)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Lsn, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// The slot as the server shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSlot {
    /// `confirmed_flush_lsn`.
    pub confirmed_flush: Lsn,
    /// `wal_status` (`reserved`, `extended`, `unreserved`, `lost`).
    pub wal_status: String,
}

/// Why the slot is not the one this pipeline fed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotLoss {
    /// The server's system identifier changed.
    OtherServer {
        /// What the file says.
        recorded: String,
        /// What the server says.
        found: String,
    },
    /// The slot does not exist.
    Dropped,
    /// The slot's confirmed position is ahead of the newest position this pipeline confirmed.
    Recreated {
        /// The slot's `confirmed_flush_lsn`.
        found: Lsn,
    },
    /// The server invalidated the slot (`wal_status = 'lost'`).
    Invalidated,
}

impl SlotLoss {
    /// The loss's label in `sluice_source_slot_losses_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::OtherServer { .. } => "other_server",
            Self::Dropped => "dropped",
            Self::Recreated { .. } => "recreated",
            Self::Invalidated => "invalidated",
        }
    }

    /// A sentence on what happened, naming the slot and the positions.
    pub fn describe(&self, slot: &str, record: Option<&SlotRecord>) -> String {
        let last = record.map_or_else(|| "unknown".to_owned(), |r| r.confirmed_lsn.to_string());
        match self {
            Self::OtherServer { recorded, found } => format!(
                "the source is a different PostgreSQL server than the one this pipeline fed (system identifier {found}, expected {recorded}): slot {slot:?} there does not hold the changes after {last}"
            ),
            Self::Dropped => format!(
                "replication slot {slot:?} was dropped since this pipeline last confirmed {last}: the changes after that position are no longer retained"
            ),
            Self::Recreated { found } => format!(
                "replication slot {slot:?} was recreated or advanced by someone else: its confirmed position {found} is ahead of the last position this pipeline confirmed, {last}; the changes between were skipped"
            ),
            Self::Invalidated => format!(
                "replication slot {slot:?} was invalidated by the server (wal_status = 'lost', it retained more WAL than max_slot_wal_keep_size): the changes after {last} are gone"
            ),
        }
    }
}

/// Compares the file's record with the server's slot. `None` = the slot is safe to resume.
pub fn verify(
    record: Option<&SlotRecord>,
    system_identifier: &str,
    slot: Option<&ServerSlot>,
) -> Option<SlotLoss> {
    if slot.is_some_and(|s| s.wal_status == "lost") {
        return Some(SlotLoss::Invalidated);
    }
    // A slot created by a run that crashed before recording it is no loss.
    let record = record.filter(|r| !r.creating)?;
    if record.system_identifier != system_identifier {
        return Some(SlotLoss::OtherServer {
            recorded: record.system_identifier.clone(),
            found: system_identifier.to_owned(),
        });
    }
    match slot {
        None => Some(SlotLoss::Dropped),
        Some(s) if s.confirmed_flush > record.confirmed_lsn => Some(SlotLoss::Recreated {
            found: s.confirmed_flush,
        }),
        Some(_) => None,
    }
}

/// The pipeline's slot state, in its state store.
#[derive(Debug)]
pub struct SlotStateFile {
    store: Arc<dyn StateStore>,
    key: String,
    record: Option<SlotRecord>,
}

impl SlotStateFile {
    /// Opens (and reads, when it exists) the state of `pipeline` in the directory `dir`,
    /// creating `dir` when needed.
    ///
    /// # Errors
    ///
    /// Fatal when the directory cannot be created or the document cannot be read or parsed.
    pub fn open(dir: &Path, pipeline: &str) -> Result<Self, PipelineError> {
        let store = DirectoryStateStore::open(dir).map_err(|e| {
            PipelineError::fatal_with(
                format!("cannot create the state directory {}", dir.display()),
                "set state_dir in the pipeline file (or SLUICE_STATE_DIR) to a writable directory",
                e,
            )
        })?;
        Self::open_in(Arc::new(store), pipeline)
    }

    /// Opens (and reads, when it exists) the state of `pipeline` in `store`.
    ///
    /// # Errors
    ///
    /// Fatal when the document cannot be read or parsed.
    pub fn open_in(store: Arc<dyn StateStore>, pipeline: &str) -> Result<Self, PipelineError> {
        let key = format!("{pipeline}.slot");
        let record = match store.load(&key) {
            Ok(Some(bytes)) => Some(serde_json::from_slice(&bytes).map_err(|e| {
                PipelineError::fatal_with(
                    format!("the state file {} is damaged", store.location(&key)),
                    "restore it from a backup, or delete it to adopt the slot as it is (a gap, if there was one, then goes unnoticed)",
                    e,
                )
            })?),
            Ok(None) => None,
            Err(e) => {
                return Err(PipelineError::fatal_with(
                    format!("cannot read the state file {}", store.location(&key)),
                    "check the permissions of state_dir",
                    e,
                ));
            }
        };
        Ok(Self { store, key, record })
    }

    /// Where the state is kept, for messages.
    pub fn location(&self) -> String {
        self.store.location(&self.key)
    }

    /// Forgets the state (the slot is gone for good).
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn remove(&mut self) -> std::io::Result<()> {
        self.store.remove(&self.key)?;
        self.record = None;
        Ok(())
    }

    /// What the file holds.
    pub fn record(&self) -> Option<&SlotRecord> {
        self.record.as_ref()
    }

    /// Replaces the record, durably: a crash leaves either the old or the new record (the
    /// store's contract).
    ///
    /// # Errors
    ///
    /// The I/O error; the record in memory is then unchanged.
    pub fn save(&mut self, record: SlotRecord) -> std::io::Result<()> {
        let (record, document) = stamped(record)?;
        self.store.store(&self.key, &document)?;
        self.record = Some(record);
        Ok(())
    }

    /// Records that the snapshot finished (or that one is needed).
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn set_snapshot_pending(&mut self, pending: bool) -> std::io::Result<()> {
        match &self.record {
            Some(record) if record.snapshot_pending != pending => {
                let mut next = record.clone();
                next.snapshot_pending = pending;
                if !pending {
                    next.snapshot_plan = None;
                }
                self.save(next)
            }
            _ => Ok(()),
        }
    }

    /// Records that the WAL budget drops the slot (see [`SlotRecord::wal_budget_drop`]); a
    /// pipeline with no record yet gets none (its next run starts afresh anyway).
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn set_wal_budget_drop(&mut self, drop: WalBudgetDrop) -> std::io::Result<()> {
        match &self.record {
            Some(record) => {
                let mut next = record.clone();
                next.wal_budget_drop = Some(drop);
                self.save(next)
            }
            None => Ok(()),
        }
    }

    /// Records the pending snapshot's plan (its finished chunks).
    ///
    /// # Errors
    ///
    /// The I/O error.
    pub fn set_snapshot_plan(
        &mut self,
        plan: &super::snapshot::SnapshotPlan,
    ) -> std::io::Result<()> {
        match &self.record {
            Some(record) => {
                let mut next = record.clone();
                next.snapshot_plan = Some(plan.clone());
                self.save(next)
            }
            None => Ok(()),
        }
    }

    /// Records `confirmed` as the newest position about to be confirmed, when it is newer than
    /// the file's, and the incremental snapshots' state as of `confirmed` when given (then the
    /// file is written even when `confirmed` is not newer). Returns whether the file was
    /// written.
    ///
    /// The write runs off the stream loop's runtime worker ([`store_off_loop`]).
    ///
    /// # Errors
    ///
    /// The I/O error; the record in memory is then unchanged, and the caller must not confirm
    /// `confirmed`.
    pub async fn advance(
        &mut self,
        confirmed: Lsn,
        incremental: Option<super::incremental::IncrementalState>,
    ) -> std::io::Result<bool> {
        let Some(next) = self.advanced(confirmed, incremental) else {
            return Ok(false);
        };
        let (record, document) = stamped(next)?;
        store_off_loop(&self.store, &self.key, document).await?;
        self.record = Some(record);
        Ok(true)
    }

    /// The record after confirming `confirmed` (and `incremental`), if it differs from the
    /// saved one.
    fn advanced(
        &self,
        confirmed: Lsn,
        incremental: Option<super::incremental::IncrementalState>,
    ) -> Option<SlotRecord> {
        let record = self.record.as_ref()?;
        let changes = confirmed > record.confirmed_lsn
            || incremental
                .as_ref()
                .is_some_and(|i| record.incremental.as_ref() != Some(i));
        if !changes {
            return None;
        }
        let mut next = record.clone();
        next.confirmed_lsn = next.confirmed_lsn.max(confirmed);
        if let Some(incremental) = incremental {
            next.incremental = Some(incremental);
        }
        Some(next)
    }
}

/// `record` stamped with the time of the write, and the document that stores it.
fn stamped(mut record: SlotRecord) -> std::io::Result<(SlotRecord, Vec<u8>)> {
    record.updated_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let document = serde_json::to_vec_pretty(&record).map_err(std::io::Error::from)?;
    Ok((record, document))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(confirmed: u64) -> SlotRecord {
        SlotRecord {
            system_identifier: "7300000000000000001".into(),
            slot: "sluice_p".into(),
            first_lsn: Lsn(100),
            created_by_sluice: true,
            confirmed_lsn: Lsn(confirmed),
            updated_unix_ms: 0,
            snapshot_pending: false,
            snapshot_plan: None,
            incremental: None,
            creating: false,
            wal_budget_drop: None,
        }
    }

    fn slot(confirmed: u64, wal_status: &str) -> ServerSlot {
        ServerSlot {
            confirmed_flush: Lsn(confirmed),
            wal_status: wal_status.into(),
        }
    }

    #[test]
    fn a_slot_at_or_behind_the_recorded_position_is_safe() {
        let r = record(500);
        assert_eq!(
            verify(Some(&r), &r.system_identifier, Some(&slot(500, "reserved"))),
            None
        );
        // Behind: the last confirmation may not have reached the server before a crash.
        assert_eq!(
            verify(Some(&r), &r.system_identifier, Some(&slot(400, "extended"))),
            None
        );
    }

    #[test]
    fn a_slot_created_by_a_run_that_crashed_before_recording_it_is_no_loss() {
        let r = SlotRecord::creating("7300000000000000001", "sluice_p");
        assert_eq!(
            verify(Some(&r), &r.system_identifier, Some(&slot(501, "reserved"))),
            None
        );
        assert_eq!(verify(Some(&r), &r.system_identifier, None), None);
        // Kept in the document only while it is true.
        let document = serde_json::to_string(&record(500)).unwrap();
        assert!(!document.contains("creating"), "{document}");
        let back: SlotRecord = serde_json::from_str(&serde_json::to_string(&r).unwrap()).unwrap();
        assert!(back.creating && back.snapshot_pending);
    }

    #[test]
    fn a_slot_ahead_of_the_recorded_position_was_recreated() {
        let r = record(500);
        assert_eq!(
            verify(Some(&r), &r.system_identifier, Some(&slot(501, "reserved"))),
            Some(SlotLoss::Recreated { found: Lsn(501) })
        );
    }

    #[test]
    fn a_missing_slot_was_dropped_and_another_server_is_named() {
        let r = record(500);
        assert_eq!(
            verify(Some(&r), &r.system_identifier, None),
            Some(SlotLoss::Dropped)
        );
        assert!(matches!(
            verify(Some(&r), "1", Some(&slot(500, "reserved"))),
            Some(SlotLoss::OtherServer { .. })
        ));
    }

    #[test]
    fn an_invalidated_slot_is_lost_with_or_without_a_record() {
        assert_eq!(
            verify(None, "1", Some(&slot(1, "lost"))),
            Some(SlotLoss::Invalidated)
        );
        let r = record(500);
        assert_eq!(
            verify(Some(&r), &r.system_identifier, Some(&slot(400, "lost"))),
            Some(SlotLoss::Invalidated)
        );
    }

    #[test]
    fn without_a_record_any_live_slot_is_adopted() {
        assert_eq!(verify(None, "1", Some(&slot(9, "reserved"))), None);
        assert_eq!(verify(None, "1", None), None);
    }

    #[tokio::test]
    async fn a_failed_write_changes_nothing_and_the_state_survives_reopening() {
        let store = Arc::new(crate::runtime::state::MemoryStateStore::default());
        let mut state = SlotStateFile::open_in(store.clone(), "p").expect("open");
        state.save(record(500)).expect("save");
        store.fail_writes(true);
        assert!(
            state.advance(Lsn(600), None).await.is_err(),
            "the write fails"
        );
        assert_eq!(
            state.record().map(|r| r.confirmed_lsn),
            Some(Lsn(500)),
            "a position that could not be recorded is not taken as recorded"
        );
        store.fail_writes(false);
        assert!(state.advance(Lsn(600), None).await.expect("advance"));
        assert_eq!(state.record().map(|r| r.confirmed_lsn), Some(Lsn(600)));
        let reopened = SlotStateFile::open_in(store, "p").expect("reopen");
        assert_eq!(reopened.record().map(|r| r.confirmed_lsn), Some(Lsn(600)));
        assert_eq!(reopened.location(), "memory:p.slot");
    }

    #[tokio::test]
    async fn the_file_round_trips_and_only_moves_forward() {
        let dir = std::env::temp_dir().join(format!("sluice-slot-state-{}", std::process::id()));
        let mut file = SlotStateFile::open(&dir, "p").expect("open");
        assert!(file.record().is_none());
        file.save(record(500)).expect("save");
        assert!(!file.advance(Lsn(400), None).await.expect("advance"));
        assert!(file.advance(Lsn(600), None).await.expect("advance"));
        let reread = SlotStateFile::open(&dir, "p").expect("reopen");
        assert_eq!(reread.record().map(|r| r.confirmed_lsn), Some(Lsn(600)));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}

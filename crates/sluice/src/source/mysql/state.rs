//! The MySQL pipeline's saved position: its document in the state store (a local directory or the
//! state topic), read at start, written at each checkpoint, seeded by a takeover.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::config::MysqlPipelineConfig;
use super::incremental::MysqlIncrementalState;
use super::server::{BinlogPosition, Flavor};
use super::snapshot::SnapshotPlan;
use crate::config::StateStoreKind;
use crate::error::PipelineError;
use crate::kafka_state::KafkaStateStore;
use crate::runtime::state::{DirectoryStateStore, StateStore, is_fenced, store_off_loop};

/// What the state store keeps for a MySQL pipeline.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SavedState {
    /// The server's flavor when the position was saved (a position of the other flavor
    /// cannot be resumed from).
    pub(super) flavor: Flavor,
    /// Where the next run starts (streaming; during a snapshot, the snapshot's position).
    pub(super) position: BinlogPosition,
    /// The initial snapshot's plan while it is not finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) snapshot: Option<SnapshotPlan>,
    /// Incremental snapshots: the queue, the progress, the requests accepted (see
    /// [`incremental`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) incremental: Option<MysqlIncrementalState>,
}

/// The position the pipeline of `config` resumes from, from its state store (for `doctor`
/// and `slots`; the Kafka state topic is read without fencing the running pipeline), with the
/// store's location of it; `None` when nothing is saved.
///
/// # Errors
///
/// When the store cannot be read, or the document parsed.
pub async fn saved_position(
    config: &MysqlPipelineConfig,
) -> Result<(Option<BinlogPosition>, String), PipelineError> {
    let (saved, location) = saved_progress(config).await?;
    Ok((saved.map(|(position, _)| position), location))
}

/// [`saved_position`] with whether the initial snapshot is unfinished (`true`: the position is
/// the snapshot's, and its rows are not all in the topics yet).
///
/// # Errors
///
/// When the store cannot be read, or the document parsed.
pub async fn saved_progress(
    config: &MysqlPipelineConfig,
) -> Result<(Option<(BinlogPosition, bool)>, String), PipelineError> {
    let key = format!("{}.mysql", config.name);
    let store: Arc<dyn StateStore> = match config.state_store {
        StateStoreKind::Local => {
            let dir = config.state_dir();
            if !dir.exists() {
                return Ok((None, dir.join(format!("{key}.json")).display().to_string()));
            }
            open_directory(config)?
        }
        StateStoreKind::Kafka => {
            match KafkaStateStore::read_only(&config.kafka, config.state_topic(), &config.name)
                .await?
            {
                Some(store) => Arc::new(store),
                None => {
                    return Ok((
                        None,
                        format!("kafka topic {} key {key}", config.state_topic()),
                    ));
                }
            }
        }
    };
    let saved =
        load_state(store.as_ref(), &key)?.map(|saved| (saved.position, saved.snapshot.is_some()));
    Ok((saved, store.location(&key)))
}

/// Saves `position` as the position the pipeline of `config` starts from (its local state
/// store; a takeover from Debezium, [`crate::import::mysql_takeover`]).
///
/// # Errors
///
/// `state_store = "kafka"` (not seeded here), or the state directory cannot be written.
pub fn seed_position(
    config: &MysqlPipelineConfig,
    flavor: Flavor,
    position: &BinlogPosition,
) -> Result<(), PipelineError> {
    if config.state_store != StateStoreKind::Local {
        return Err(PipelineError::fatal(
            "a takeover seeds the local state store only",
            "import with the default state_store = \"local\", run once, then switch",
        ));
    }
    let key = format!("{}.mysql", config.name);
    let store = open_directory(config)?;
    let document = state_document(flavor, position, None, None);
    store
        .store(&key, &document)
        .map_err(|e| state_write_error(store.as_ref(), &key, e))
}

/// The directory state store of `config` (`state_dir`).
pub(super) fn open_directory(
    config: &MysqlPipelineConfig,
) -> Result<Arc<dyn StateStore>, PipelineError> {
    let dir = config.state_dir();
    let store = DirectoryStateStore::open(&dir).map_err(|e| {
        PipelineError::fatal_with(
            format!("cannot open state_dir {}", dir.display()),
            "make state_dir a writable directory",
            e,
        )
    })?;
    Ok(Arc::new(store))
}

pub(super) fn load_state(
    store: &dyn StateStore,
    key: &str,
) -> Result<Option<SavedState>, PipelineError> {
    let document = store.load(key).map_err(|e| {
        PipelineError::fatal_with(
            format!("cannot read the state file {}", store.location(key)),
            "make state_dir readable",
            e,
        )
    })?;
    document
        .map(|bytes| {
            serde_json::from_slice(&bytes).map_err(|e| {
                PipelineError::fatal_with(
                    format!("the state file {} is damaged", store.location(key)),
                    "remove it to start from the server's current position (changes since the last checkpoint are then skipped)",
                    e,
                )
            })
        })
        .transpose()
}

pub(super) fn save_state(
    store: &dyn StateStore,
    key: &str,
    flavor: Flavor,
    position: &BinlogPosition,
    snapshot: Option<&SnapshotPlan>,
    incremental: Option<&MysqlIncrementalState>,
) -> Result<(), PipelineError> {
    let document = state_document(flavor, position, snapshot, incremental);
    tokio::task::block_in_place(|| store.store(key, &document))
        .map_err(|e| state_write_error(store, key, e))
}

/// [`save_state`] for the stream loop's checkpoints, the write off the loop's worker
/// ([`store_off_loop`]).
pub(super) async fn save_checkpoint(
    store: &Arc<dyn StateStore>,
    key: &str,
    flavor: Flavor,
    position: &BinlogPosition,
    incremental: Option<&MysqlIncrementalState>,
) -> Result<(), PipelineError> {
    let document = state_document(flavor, position, None, incremental);
    store_off_loop(store, key, document)
        .await
        .map_err(|e| state_write_error(store.as_ref(), key, e))
}

/// The state file's content.
pub(super) fn state_document(
    flavor: Flavor,
    position: &BinlogPosition,
    snapshot: Option<&SnapshotPlan>,
    incremental: Option<&MysqlIncrementalState>,
) -> Vec<u8> {
    serde_json::to_vec(&SavedState {
        flavor,
        position: position.clone(),
        snapshot: snapshot.cloned(),
        incremental: incremental.cloned(),
    })
    .unwrap_or_default()
}

/// What a failed state write means for the pipeline.
pub(super) fn state_write_error(
    store: &dyn StateStore,
    key: &str,
    e: std::io::Error,
) -> PipelineError {
    if is_fenced(&e) {
        // Another instance took over: this one stops its run and asks for the role again.
        return PipelineError::retryable(
            format!(
                "cannot write the state {}: another instance of the pipeline is active",
                store.location(key)
            ),
            e,
        );
    }
    PipelineError::fatal_with(
        format!("cannot write the state file {}", store.location(key)),
        "make state_dir writable (and give it space); nothing past the last saved position was confirmed",
        e,
    )
}

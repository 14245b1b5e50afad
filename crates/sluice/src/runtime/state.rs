//! Where a pipeline keeps what it must remember between runs: small documents (a source's
//! slot identity and confirmed position, snapshot and incremental-snapshot progress), each
//! replaced whole and durably.
//!
//! Sources read and write through [`StateStore`] and never touch files themselves, so a shared
//! store (for a standby instance that takes over) can replace the local directory
//! ([`DirectoryStateStore`]) without changing them. [`MemoryStateStore`] serves tests.
//!
//! The contract: after [`StateStore::store`] returns `Ok`, a crash leaves the new document;
//! after an error, the old one or the new one (never a mix). A source that must not confirm a
//! position to its server before the position is recorded relies on exactly that.

use std::collections::HashMap;
use std::fmt;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// A store of named documents.
pub trait StateStore: fmt::Debug + Send + Sync {
    /// The document `key`, if it was ever stored.
    ///
    /// # Errors
    ///
    /// When the store cannot be read.
    fn load(&self, key: &str) -> std::io::Result<Option<Vec<u8>>>;

    /// Replaces the document `key`, durably (see the module docs).
    ///
    /// # Errors
    ///
    /// When it could not be written; the old document may still be there.
    fn store(&self, key: &str, document: &[u8]) -> std::io::Result<()>;

    /// Removes the document `key` (nothing when there is none).
    ///
    /// # Errors
    ///
    /// When it could not be removed.
    fn remove(&self, key: &str) -> std::io::Result<()>;

    /// Where `key` is kept, for messages to operators (a path, a URL).
    fn location(&self, key: &str) -> String;
}

/// [`StateStore::store`] from async code: the write (a file and its `fsync`, or a remote
/// store) runs on the blocking pool, and the caller's task stays on its runtime worker while it
/// waits. (`block_in_place` would hand the worker's core to another thread at every write: in a
/// stream loop's checkpoint that cost the PostgreSQL backlog rate; bench/PROFILE.md, "Backlog:
/// the walsender preempted…".)
///
/// # Errors
///
/// The store's error, or the blocking task's failure as an `io::Error`.
pub async fn store_off_loop(
    store: &Arc<dyn StateStore>,
    key: &str,
    document: Vec<u8>,
) -> std::io::Result<()> {
    let (store, key) = (Arc::clone(store), key.to_owned());
    tokio::task::spawn_blocking(move || store.store(&key, &document))
        .await
        .map_err(std::io::Error::other)?
}

/// The error inside a [`StateStore`] write's `io::Error` when another instance of the
/// pipeline took over the store (a shared store fences the writers it replaced): this instance
/// is not the active one any more and must stop; see [`is_fenced`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced;

impl fmt::Display for Fenced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("fenced: another instance of the pipeline took over and writes the state")
    }
}

impl std::error::Error for Fenced {}

/// Whether a [`StateStore`] write failed because another instance took over (see [`Fenced`]).
pub fn is_fenced(error: &std::io::Error) -> bool {
    error.get_ref().is_some_and(|inner| inner.is::<Fenced>())
}

/// Documents as `<dir>/<key>.json` files: written to a temporary file, fsynced, renamed over
/// the old one, and the directory fsynced.
#[derive(Debug)]
pub struct DirectoryStateStore {
    dir: PathBuf,
}

impl DirectoryStateStore {
    /// A store in `dir`, created when missing.
    ///
    /// # Errors
    ///
    /// When the directory cannot be created.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        Ok(Self {
            dir: dir.to_path_buf(),
        })
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("{key}.json"))
    }
}

impl StateStore for DirectoryStateStore {
    fn load(&self, key: &str) -> std::io::Result<Option<Vec<u8>>> {
        match std::fs::read(self.path(key)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn store(&self, key: &str, document: &[u8]) -> std::io::Result<()> {
        let path = self.path(key);
        let tmp = path.with_extension("json.tmp");
        {
            let mut file = std::fs::File::create(&tmp)?;
            file.write_all(document)?;
            file.sync_all()?;
        }
        std::fs::rename(&tmp, &path)?;
        std::fs::File::open(&self.dir)?.sync_all()
    }

    fn remove(&self, key: &str) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(key)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn location(&self, key: &str) -> String {
        self.path(key).display().to_string()
    }
}

/// Documents in memory, for tests; can be told to fail writes.
#[derive(Debug, Default)]
pub struct MemoryStateStore {
    documents: Mutex<HashMap<String, Vec<u8>>>,
    fail_writes: std::sync::atomic::AtomicBool,
}

impl MemoryStateStore {
    /// Makes every later write fail (or succeed again).
    pub fn fail_writes(&self, fail: bool) {
        self.fail_writes
            .store(fail, std::sync::atomic::Ordering::SeqCst);
    }

    fn documents(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<u8>>> {
        self.documents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl StateStore for MemoryStateStore {
    fn load(&self, key: &str) -> std::io::Result<Option<Vec<u8>>> {
        Ok(self.documents().get(key).cloned())
    }

    fn store(&self, key: &str, document: &[u8]) -> std::io::Result<()> {
        if self.fail_writes.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other("the memory store was told to fail"));
        }
        self.documents().insert(key.to_owned(), document.to_vec());
        Ok(())
    }

    fn remove(&self, key: &str) -> std::io::Result<()> {
        self.documents().remove(key);
        Ok(())
    }

    fn location(&self, key: &str) -> String {
        format!("memory:{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(store: &dyn StateStore) {
        assert_eq!(store.load("p.slot").unwrap(), None);
        store.store("p.slot", b"one").unwrap();
        store.store("p.slot", b"two").unwrap();
        assert_eq!(store.load("p.slot").unwrap().as_deref(), Some(&b"two"[..]));
        store.remove("p.slot").unwrap();
        store.remove("p.slot").unwrap();
        assert_eq!(store.load("p.slot").unwrap(), None);
    }

    #[test]
    fn a_directory_store_replaces_documents_whole() {
        let dir = std::env::temp_dir().join(format!("sluice-state-store-{}", std::process::id()));
        let store = DirectoryStateStore::open(&dir).unwrap();
        round_trip(&store);
        store.store("q", b"x").unwrap();
        assert_eq!(std::fs::read(dir.join("q.json")).unwrap(), b"x");
        assert!(!dir.join("q.json.tmp").exists(), "no temporary file left");
        assert_eq!(
            store.location("q"),
            dir.join("q.json").display().to_string()
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_memory_store_behaves_alike_and_can_fail() {
        let store = MemoryStateStore::default();
        round_trip(&store);
        store.store("k", b"old").unwrap();
        store.fail_writes(true);
        assert!(store.store("k", b"new").is_err());
        assert_eq!(store.load("k").unwrap().as_deref(), Some(&b"old"[..]));
    }
}

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

mod epoch;
mod open;
mod root;
#[cfg(test)]
mod tests;

pub use self::epoch::Epoch;
pub use self::open::{FileSettings, OpenFile, OutputRecord, WriteError, write_line};
pub use self::root::{
    CommitError, CommitRefused, Committed, OutputRoot, Ownership, ROOT_MARKER, Recovered,
    RootError, STATE_DIR, StateError, SubPartitionId,
};

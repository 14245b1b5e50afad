//! The commit protocol's tests: recovery, fencing, object stores, formats.

use std::fs;
use std::path::PathBuf;

use super::epoch::*;
use super::open::*;
use super::root::*;
use crate::sink::config::{FileCompression, FileFormat};
use crate::sink::object::ObjectTarget;
use crate::sink::parquet::ParquetRow;
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
        typed: None,
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
            typed: None,
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
        typed: None,
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
                typed: None,
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
    let target = || ObjectTarget::new(Arc::clone(&store), "mem://b", runtime.handle().clone(), 0);
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
    let line = String::from_utf8(objects.get("a/part-t+0+s1+3-3.jsonl").unwrap().unwrap()).unwrap();
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

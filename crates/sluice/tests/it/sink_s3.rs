//! Kafka → S3-compatible object storage: the real `sluice` binary writes to the dev stack's
//! moto server; every object is read back through `object_store` and every offset must be in
//! exactly one object, with per-key order, across SIGKILLs and a crash between the uploads
//! and the state PUT.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::TryStreamExt as _;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use rand::Rng;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::sink::{
    Row, ZombieRun, committed_records, create_topic, end_offsets, parse_name, produce,
    rows_of_file, verify, zombie_writer,
};
use crate::support::{Sluice, free_port, http_request, s3_endpoint, stack, test_dir, unique};

/// A new bucket on the dev stack's S3 server; returns its name.
fn create_bucket(prefix: &str) -> String {
    let bucket = unique(prefix).replace('_', "-");
    let endpoint = s3_endpoint();
    let address = endpoint
        .trim_start_matches("http://")
        .parse()
        .expect("S3_ENDPOINT is http://127.0.0.1:PORT");
    let (status, body) = http_request(address, "PUT", &format!("/{bucket}"), &[])
        .unwrap_or_else(|| panic!("no answer from the S3 server at {endpoint}"));
    assert_eq!(status, 200, "creating bucket {bucket}: {body}");
    bucket
}

/// A client of `bucket` under `prefix`, as a reader would have one.
fn store(bucket: &str) -> Arc<dyn ObjectStore> {
    // Its reqwest client takes the process's crypto provider, as sluice's does.
    sluice::crypto::install();
    Arc::new(
        AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_endpoint(s3_endpoint())
            .with_allow_http(true)
            .with_region("us-east-1")
            .with_access_key_id("test")
            .with_secret_access_key("test")
            .build()
            .unwrap(),
    )
}

fn s3_sink_toml(name: &str, topic: &str, staging: &Path, bucket: &str, port: u16) -> String {
    format!(
        r#"
name = "{name}"

[source.kafka]
brokers = "{brokers}"
topics = ["{topic}"]
group_id = "{name}"
commit_interval_ms = 500
[source.kafka.properties]
"session.timeout.ms" = "6000"
"heartbeat.interval.ms" = "500"

[sink.files]
path = "{staging}"
url = "s3://{bucket}/out/"
path_template = "{{topic}}/"
format = "jsonl"
roll_records = 60000
roll_interval_ms = 3000
sub_partitions = 2

[sink.files.s3]
endpoint = "{endpoint}"
allow_http = true
region = "us-east-1"
access_key_id = "test"
secret_access_key = "test"
upload_part_bytes = 5242880

[admin]
listen = "127.0.0.1:{port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
"#,
        brokers = stack().brokers,
        staging = staging.display(),
        endpoint = s3_endpoint(),
    )
}

/// What is in the bucket under `out/`.
struct Listing {
    /// Output objects: key → (size, e-tag).
    parts: BTreeMap<String, (u64, Option<String>)>,
    /// Sub-partition tag (`topic+partition+sSUB`) → committed `last_offset`.
    committed: HashMap<String, i64>,
    /// Pending intents' keys (written by sluice before the staging prefix).
    pending: Vec<String>,
    /// Staged objects (uploaded, not yet committed and copied).
    staged: Vec<String>,
}

async fn list(store: &Arc<dyn ObjectStore>) -> Listing {
    let metas: Vec<object_store::ObjectMeta> = store
        .list(Some(&ObjectPath::from("out")))
        .try_collect()
        .await
        .unwrap();
    let mut listing = Listing {
        parts: BTreeMap::new(),
        committed: HashMap::new(),
        pending: Vec::new(),
        staged: Vec::new(),
    };
    for meta in metas {
        let key = meta.location.to_string();
        if let Some(tag) = key
            .strip_prefix("out/_sluice/state/")
            .and_then(|k| k.strip_suffix(".json"))
        {
            let bytes = store.get(&meta.location).await.unwrap().bytes().await;
            let state: serde_json::Value = serde_json::from_slice(&bytes.unwrap()).unwrap();
            listing
                .committed
                .insert(tag.to_owned(), state["last_offset"].as_i64().unwrap());
        } else if key.starts_with("out/_sluice/pending/") {
            listing.pending.push(key);
        } else if key.starts_with("out/_sluice/staging/") {
            listing.staged.push(key);
        } else if key.starts_with("out/_sluice") {
            // The root marker.
        } else {
            listing.parts.insert(key, (meta.size, meta.e_tag));
        }
    }
    listing
}

impl Listing {
    /// Output objects that no state object covers: `<last>` above the sub-partition's
    /// committed `last_offset` (the reader's rule in `sink::files`).
    fn uncommitted(&self) -> Vec<&String> {
        self.parts
            .keys()
            .filter(|key| {
                let name = key.rsplit('/').next().unwrap();
                let (partition, sub, _, last) = parse_name(name).unwrap();
                let topic = name
                    .strip_prefix("part-")
                    .unwrap()
                    .rsplitn(4, '+')
                    .nth(3)
                    .unwrap();
                let tag = format!("{topic}+{partition}+s{sub}");
                self.committed.get(&tag).is_none_or(|c| last > *c)
            })
            .collect()
    }
}

/// Reads every output object back.
async fn read_objects(store: &Arc<dyn ObjectStore>, listing: &Listing) -> Vec<Row> {
    let mut rows = Vec::new();
    for key in listing.parts.keys() {
        let bytes = store
            .get(&ObjectPath::from(key.as_str()))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        rows.extend(rows_of_file(&PathBuf::from(key), bytes));
    }
    rows
}

/// Waits until the group's committed offsets reach `ends` (the sink commits an offset only
/// once the objects holding it are committed).
fn wait_for_group(group: &str, topic: &str, ends: &BTreeMap<i32, i64>, sluice: &Sluice) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("group.id", group)
        .create()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let mut list = TopicPartitionList::new();
        for partition in ends.keys() {
            list.add_partition(topic, *partition);
        }
        let committed: BTreeMap<i32, i64> = consumer
            .committed_offsets(list, Duration::from_secs(10))
            .map(|list| {
                list.elements()
                    .iter()
                    .filter_map(|e| match e.offset() {
                        Offset::Offset(o) => Some((e.partition(), o)),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default();
        if &committed == ends {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the group's offsets {committed:?} did not reach {ends:?}; log:\n{}",
            sluice.log_text()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Keyed JSON Lines on S3, SIGKILLed three times mid-commit (its objects uploaded, its state
/// not written; reached with a failpoint): every offset in exactly one object, per-key order, every object committed, files larger than a part uploaded (in
/// parts) and copied.
#[tokio::test(flavor = "multi_thread")]
async fn s3_every_offset_exactly_once_across_sigkills() {
    let name = unique("sink_s3");
    let topic = name.clone();
    let bucket = create_bucket("sink-s3");
    create_topic(&topic, 2).await;
    const RECORDS: u64 = 300_000;
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, RECORDS, 1000, 0))
            .await
            .unwrap();
    }
    let ends = end_offsets(&topic, 2);
    let dir = test_dir(&name);
    let port = free_port();
    let toml = s3_sink_toml(&name, &topic, &dir.join("staging"), &bucket, port)
        .replace("roll_records = 60000", "roll_records = 30000");
    // Each run but the last holds one of its epoch commits (a random one of its first four
    // with records; the last killed run its first, as an earlier run may have taken most of
    // the records) at the gate `sink::files::uploaded` on a file that never appears, and is
    // killed there: its objects uploaded to the staging prefix, its state not written.
    const KILLS: u32 = 3;
    let gate = |kill: u32| -> Vec<(String, String)> {
        let skip = if kill == KILLS {
            0
        } else {
            rand::rng().random_range(0..4)
        };
        let path = dir.join(format!("gate-{kill}-never-created"));
        vec![(
            "FAILPOINTS".to_owned(),
            format!(
                "sink::files::uploaded={skip}*off->1*return({})->off",
                path.display()
            ),
        )]
    };
    let mut sluice = Sluice::start_with_env(&dir, &toml, port, gate(1));
    for kill in 1..=KILLS {
        // The log is appended to across restarts: this run's hold is the kill-th.
        let held = |sluice: &Sluice| {
            sluice
                .log_text()
                .matches("failpoint: waiting for the gate file")
                .count()
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        while held(&sluice) < kill as usize && Instant::now() < deadline {
            assert!(
                sluice.exited().is_none(),
                "sink s3: the process exited before kill {kill}:\n{}",
                sluice.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(
            held(&sluice),
            kill as usize,
            "sink s3: kill {kill} would not land mid-commit (no commit held at the gate):\n{}",
            sluice.log_text()
        );
        let committed = committed_records(&sluice);
        sluice.kill();
        println!(
            "sink s3: SIGKILL {kill} with an epoch's objects uploaded and its state not written ({committed} records committed by that process)"
        );
        sluice.env = if kill < KILLS {
            gate(kill + 1)
        } else {
            Vec::new()
        };
        sluice.restart();
    }
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| wait_for_group(&name, &topic, &ends, sluice_ref));
    assert!(
        sluice.stop(),
        "graceful stop failed:\n{}",
        sluice.log_text()
    );
    let store = store(&bucket);
    let listing = list(&store).await;
    assert!(
        listing.uncommitted().is_empty(),
        "objects outside every committed epoch: {:?}",
        listing.uncommitted()
    );
    assert!(listing.pending.is_empty(), "{:?}", listing.pending);
    assert!(listing.staged.is_empty(), "{:?}", listing.staged);
    // Final objects are server-side copies of the staged uploads (a copy's e-tag no longer
    // tells a multipart upload apart): an object larger than upload_part_bytes (5 MiB here)
    // was uploaded in parts (`ObjectTarget::upload`, unit-tested) and copied whole.
    let multipart = listing
        .parts
        .values()
        .filter(|(size, _)| *size > 5 * 1024 * 1024)
        .count();
    let largest = listing.parts.values().map(|(size, _)| *size).max();
    assert!(
        multipart >= 1,
        "no object was larger than a part (largest: {largest:?} bytes)"
    );
    let rows = read_objects(&store, &listing).await;
    verify(&rows, &ends, &HashSet::new());
    let orphans_deleted = sluice
        .log_text()
        .matches("deleting a staged object of an uncommitted epoch")
        .count();
    // Each kill left its held epoch's uploads in the staging prefix: the next run deleted them.
    assert!(
        orphans_deleted >= KILLS as usize,
        "{orphans_deleted} staged objects deleted after {KILLS} kills mid-commit"
    );
    println!(
        "sink s3: {RECORDS} records, {KILLS} SIGKILLs: {} objects ({multipart} larger than a part), every offset exactly once; {orphans_deleted} staged objects of uncommitted epochs deleted on recovery",
        listing.parts.len()
    );
}

/// The process dies after an epoch's uploads and before its state PUT (the test hook aborts
/// it exactly there): the uploaded objects are under the staging prefix, no output object is
/// uncommitted; after a restart they are deleted and their records re-written, and no offset
/// is in two objects.
#[tokio::test(flavor = "multi_thread")]
async fn s3_crash_between_upload_and_state_put_leaves_no_duplicate() {
    let name = unique("sink_s3_crash");
    let topic = name.clone();
    let bucket = create_bucket("sink-s3-crash");
    create_topic(&topic, 1).await;
    const RECORDS: u64 = 100_000;
    {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || produce(&topic, RECORDS, 200, 0))
            .await
            .unwrap();
    }
    let ends = end_offsets(&topic, 1);
    let dir = test_dir(&name);
    let port = free_port();
    let toml = s3_sink_toml(&name, &topic, &dir.join("staging"), &bucket, port)
        .replace("roll_records = 60000", "roll_records = 10000");
    let mut sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![("SLUICE_TEST_ABORT_AFTER_UPLOAD".into(), "3".into())],
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = sluice.exited() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "the hook did not abort sluice:\n{}",
            sluice.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
    assert!(
        sluice
            .log_text()
            .contains("aborting after the uploads, before the state PUT"),
        "{}",
        sluice.log_text()
    );
    let store = store(&bucket);
    let before = list(&store).await;
    assert!(
        !before.staged.is_empty(),
        "the aborted epoch's uploads are not in the staging prefix: {:?}",
        before.parts.keys()
    );
    assert!(
        before.uncommitted().is_empty(),
        "uncommitted output objects: {:?}",
        before.uncommitted()
    );
    println!(
        "sink s3 crash: uploaded but uncommitted at the crash: {:?}",
        before.staged
    );

    sluice.env.clear();
    sluice.restart();
    let sluice_ref = &sluice;
    tokio::task::block_in_place(|| wait_for_group(&name, &topic, &ends, sluice_ref));
    assert!(
        sluice.stop(),
        "graceful stop failed:\n{}",
        sluice.log_text()
    );
    assert!(
        sluice
            .log_text()
            .contains("deleting a staged object of an uncommitted epoch"),
        "{}",
        sluice.log_text()
    );
    let after = list(&store).await;
    assert!(after.uncommitted().is_empty(), "{:?}", after.uncommitted());
    assert!(after.staged.is_empty(), "{:?}", after.staged);
    let rows = read_objects(&store, &after).await;
    verify(&rows, &ends, &HashSet::new());
}

/// Issue 17, S3: a writer SIGSTOPped inside an epoch commit past its session timeout, resumed
/// after another process (another staging directory, as on another machine) took its
/// partition over, cannot commit: its state PUT fails its `If-Match`, it deletes what it
/// staged, its Kafka offset commit does not move the group's offsets, and every offset is in
/// exactly one committed object.
#[tokio::test(flavor = "multi_thread")]
async fn a_zombie_writer_cannot_commit_objects() {
    let name = unique("sink_s3_zombie");
    let topic = name.clone();
    let bucket = create_bucket("sink-s3-zombie");
    let run = zombie_writer(&name, &topic, |dir, port| {
        s3_sink_toml(&name, &topic, &dir.join("staging"), &bucket, port)
            .replace("sub_partitions = 2", "sub_partitions = 1")
            .replace("roll_interval_ms = 3000", "roll_interval_ms = 500")
    })
    .await;
    let logs = || {
        format!(
            "A:\n{}\n-----\nB:\n{}",
            run.zombie.log_text(),
            run.owner.log_text()
        )
    };
    let store = store(&bucket);
    let check = |listing: &Listing| {
        assert!(
            listing.uncommitted().is_empty(),
            "objects beyond their sub-partition's committed state: {:?}\n{}",
            listing.uncommitted(),
            logs()
        );
        assert!(
            listing.staged.is_empty(),
            "staged objects left: {:?}\n{}",
            listing.staged,
            logs()
        );
    };
    // The data first: a zombie commit that went through shows here.
    let listing = list(&store).await;
    check(&listing);
    verify(
        &read_objects(&store, &listing).await,
        &run.ends,
        &HashSet::new(),
    );
    assert_eq!(
        run.group_after,
        run.ends,
        "the zombie moved the group's offsets\n{}",
        logs()
    );
    assert!(
        run.refused,
        "the zombie's commit was not refused:\n{}",
        logs()
    );
    let ZombieRun {
        mut zombie,
        mut owner,
        ends,
        ..
    } = run;
    assert!(zombie.stop(), "A did not stop:\n{}", zombie.log_text());
    assert!(owner.stop(), "B did not stop:\n{}", owner.log_text());
    let listing = list(&store).await;
    assert!(
        listing.uncommitted().is_empty(),
        "{:?}",
        listing.uncommitted()
    );
    verify(
        &read_objects(&store, &listing).await,
        &ends,
        &HashSet::new(),
    );
}

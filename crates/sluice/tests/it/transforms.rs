//! `[transforms]` (Kafka Connect's single message transforms) against real Kafka Connect.
//!
//! The parity test runs sluice with a transform chain on `scripts/debezium/setup.sql` and
//! `changes.sql` (as `debezium::events_match_debezium_golden_files` does) and compares every
//! record, field by field and with the headers the transforms add, with the golden files
//! `scripts/debezium-capture` wrote from Debezium + Kafka Connect running the same chain
//! (`tests/debezium/<combination>/`, the capture's TRANSFORM_COMBINATIONS). In the suite:
//! `logical-router`, `timestamp-insert-mask` (which unwraps every table too), `scripting`
//! (Debezium's Groovy Filter and ContentBasedRouter), `cast-flatten` (Cast and Flatten of keys
//! and values) and `unwrap-route-headers` (route.by.field on a table of its own,
//! scripts/debezium/route-by-field*.sql, and HeaderToValue); `SLUICE_TRANSFORM_PARITY_ALL=1`
//! runs them all, `SLUICE_TRANSFORM_PARITY=a,b` those named.
//! Differences are ratcheted in `tests/debezium/transforms-known-differences.txt`.
//!
//! The other test shows the delivery core's accounting: changes a transform drops still move
//! the slot's confirmed position.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::debezium::compare::{Diff, J, Rec, golden_dir, ratchet_report, read_topics, statements};
use crate::debezium::{normalise, run_sluice_then};
use crate::support::{
    Sluice, drop_slot_and_publication, free_port, pg, pipeline_toml, read_topic, read_topic_with,
    slot_confirmed, test_dir, unique,
};

/// As `debezium::RUN_DEPENDENT`, and the run-dependent fields `add.fields` adds.
const RUN_DEPENDENT: &[&str] = &[
    "value.ts_ms",
    "value.ts_us",
    "value.ts_ns",
    "value.source.version",
    "value.source.ts_ms",
    "value.source.ts_us",
    "value.source.ts_ns",
    "value.source.txId",
    "value.source.lsn",
    "value.source.sequence",
    "value.source.xmin",
    "value.__lsn",
    "value.__src_ts",
    // Flattened (cast-flatten).
    "value.ts_ms",
    "value.source_version",
    "value.source_ts_ms",
    "value.source_ts_us",
    "value.source_ts_ns",
    "value.source_txId",
    "value.source_lsn",
    "value.source_sequence",
    "value.source_xmin",
];

const UNWRAP: &str = "io.debezium.transforms.ExtractNewRecordState";

/// The capture's combinations as `[transforms]` (scripts/debezium-capture,
/// TRANSFORM_COMBINATIONS), with the keys Connect's were given, and the `[kafka.events]` the
/// capture's converter settings match.
fn combinations() -> Vec<(&'static str, String)> {
    vec![
        (
            "unwrap",
            format!("[transforms]\nchain = \"unwrap\"\n[transforms.unwrap]\ntype = \"{UNWRAP}\"\n"),
        ),
        (
            "unwrap-rewrite",
            format!(
                "[transforms]\nchain = [\"unwrap\"]\n[transforms.unwrap]\ntype = \"{UNWRAP}\"\n\
                 \"delete.tombstone.handling.mode\" = \"rewrite\"\n\
                 \"add.fields\" = \"op,table,lsn,source.ts_ms:src_ts\"\n\"add.headers\" = \"db,op\"\n"
            ),
        ),
        (
            "unwrap-schemas",
            format!(
                "[kafka.events]\nschemas_enable = true\n[transforms]\nchain = \"unwrap\"\n\
                 [transforms.unwrap]\ntype = \"{UNWRAP}\"\n\
                 \"delete.tombstone.handling.mode\" = \"delete-to-tombstone\"\n\"add.fields\" = \"op,table\"\n"
            ),
        ),
        (
            "route",
            "[transforms]\nchain = \"route\"\n[transforms.route]\n\
             type = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
             regex = '(.*)\\.public\\.nn_(.*)'\nreplacement = \"$1.nn_all\"\n"
                .to_owned(),
        ),
        (
            "replace-valuetokey",
            format!(
                "[transforms]\nchain = \"unwrap,replace,tokey\"\n[transforms.unwrap]\ntype = \"{UNWRAP}\"\n\
                 \"delete.tombstone.handling.mode\" = \"rewrite\"\n[transforms.replace]\n\
                 type = \"org.apache.kafka.connect.transforms.ReplaceField$Value\"\nexclude = \"n\"\n\
                 renames = \"v:value,c_text:text\"\n[transforms.tokey]\n\
                 type = \"org.apache.kafka.connect.transforms.ValueToKey\"\nfields = \"id\"\n\
                 predicate = \"noid\"\nnegate = true\n[predicates.noid]\n\
                 type = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
                 pattern = '.*\\.public\\.(keyless|keyless_nothing|pk_composite)'\n"
            ),
        ),
        (
            "filter-predicate",
            "[transforms]\nchain = \"dropbig,droptombstones\"\n[transforms.dropbig]\n\
             type = \"org.apache.kafka.connect.transforms.Filter\"\npredicate = \"big\"\n\
             [transforms.droptombstones]\ntype = \"org.apache.kafka.connect.transforms.Filter\"\n\
             predicate = \"tombstone\"\n[predicates.big]\n\
             type = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
             pattern = '.*\\.public\\.(bulk|scalars|arrays|others|specials)'\n[predicates.tombstone]\n\
             type = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n"
                .to_owned(),
        ),
        (
            "logical-router",
            "[kafka.events]\nschemas_enable = true\n[transforms]\nchain = \"reroute,reroute2\"\n\
             [transforms.reroute]\ntype = \"io.debezium.transforms.ByLogicalTableRouter\"\n\
             \"topic.regex\" = '(.*)\\.public\\.nn_(.*)'\n\"topic.replacement\" = \"$1.nn_all\"\n\
             [transforms.reroute2]\ntype = \"io.debezium.transforms.ByLogicalTableRouter\"\n\
             \"topic.regex\" = '(.*)\\.public\\.ri_(.*)'\n\"topic.replacement\" = \"$1.ri_all\"\n\
             \"key.field.name\" = \"shard\"\n\"key.field.regex\" = '.*\\.public\\.ri_(.*)'\n\
             \"key.field.replacement\" = \"$1\"\n"
                .to_owned(),
        ),
        (
            "timestamp-insert-mask",
            format!(
                "[kafka.events]\nschemas_enable = true\n[transforms]\n\
                 chain = [\"unwrap\", \"tsstr\", \"tsunix\", \"tsdate\", \"insert\", \"insertkey\", \"mask\", \"maskzero\"]\n\
                 [transforms.unwrap]\ntype = \"{UNWRAP}\"\n\
                 [transforms.tsstr]\ntype = \"org.apache.kafka.connect.transforms.TimestampConverter$Value\"\n\
                 field = \"c_timestamp3\"\n\"target.type\" = \"string\"\nformat = \"yyyy-MM-dd HH:mm:ss.SSS\"\n\
                 [transforms.tsunix]\ntype = \"org.apache.kafka.connect.transforms.TimestampConverter$Value\"\n\
                 field = \"c_timestamp\"\n\"target.type\" = \"unix\"\n\"unix.precision\" = \"microseconds\"\n\
                 [transforms.tsdate]\ntype = \"org.apache.kafka.connect.transforms.TimestampConverter$Value\"\n\
                 field = \"c_timestamp0\"\n\"target.type\" = \"Timestamp\"\n\
                 [transforms.insert]\ntype = \"org.apache.kafka.connect.transforms.InsertField$Value\"\n\
                 \"topic.field\" = \"__topic\"\n\"static.field\" = \"__src\"\n\"static.value\" = \"pg\"\n\
                 [transforms.insertkey]\ntype = \"org.apache.kafka.connect.transforms.InsertField$Key\"\n\
                 \"static.field\" = \"__k\"\n\"static.value\" = \"x\"\npredicate = \"keyless\"\nnegate = true\n\
                 [transforms.mask]\ntype = \"org.apache.kafka.connect.transforms.MaskField$Value\"\n\
                 fields = \"c_text,v\"\nreplacement = \"***\"\npredicate = \"tombstone\"\nnegate = true\n\
                 [transforms.maskzero]\ntype = \"org.apache.kafka.connect.transforms.MaskField$Value\"\n\
                 fields = [\"c_int4\", \"n\", \"c_bool\"]\npredicate = \"tombstone\"\nnegate = true\n\
                 [predicates.keyless]\ntype = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
                 pattern = '.*\\.public\\.(keyless|keyless_nothing)'\n\
                 [predicates.tombstone]\ntype = \"org.apache.kafka.connect.transforms.predicates.RecordIsTombstone\"\n"
            ),
        ),
        (
            "headers-shape",
            format!(
                "[kafka.events]\nschemas_enable = true\n[transforms]\n\
                 chain = \"unwrap,tag,dropctx,keyhdr,valhdr,keyid,hoist\"\n\
                 [transforms.unwrap]\ntype = \"{UNWRAP}\"\n\
                 [transforms.tag]\ntype = \"org.apache.kafka.connect.transforms.InsertHeader\"\n\
                 header = \"origin\"\n\"value.literal\" = \"dbz\"\n\
                 [transforms.dropctx]\ntype = \"org.apache.kafka.connect.transforms.DropHeaders\"\n\
                 headers = \"__debezium.context.runId,__debezium.context.taskId\"\n\
                 [transforms.keyhdr]\ntype = \"org.apache.kafka.connect.transforms.HeaderFrom$Key\"\n\
                 fields = \"id\"\nheaders = \"key_id\"\noperation = \"copy\"\npredicate = \"noid\"\nnegate = true\n\
                 [transforms.valhdr]\ntype = \"org.apache.kafka.connect.transforms.HeaderFrom$Value\"\n\
                 fields = \"id,a\"\nheaders = \"row_id,row_a\"\noperation = \"move\"\npredicate = \"evolve\"\n\
                 [transforms.keyid]\ntype = \"org.apache.kafka.connect.transforms.ExtractField$Key\"\n\
                 field = \"id\"\npredicate = \"noid\"\nnegate = true\n\
                 [transforms.hoist]\ntype = \"org.apache.kafka.connect.transforms.HoistField$Value\"\n\
                 field = \"row\"\n\
                 [predicates.noid]\ntype = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
                 pattern = '.*\\.public\\.(pk_composite|keyless|keyless_nothing)'\n\
                 [predicates.evolve]\ntype = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
                 pattern = '.*\\.public\\.evolve'\n"
            ),
        ),
        (
            "scripting",
            "[transforms]\nchain = \"keep,tombs,split\"\n\
             [transforms.keep]\ntype = \"io.debezium.transforms.Filter\"\nlanguage = \"jsr223.groovy\"\n\
             condition = \"value.op in ['d', 'r'] || (value.after.n != null && value.after.n % 2 == 0) || value.after.v?.startsWith('u')\"\n\
             \"topic.regex\" = '.*\\.public\\.(ri_full|ri_default|bulk)'\n\
             [transforms.tombs]\ntype = \"io.debezium.transforms.Filter\"\nlanguage = \"jsr223.groovy\"\n\
             condition = \"value != null || key.id < 100\"\n\
             \"topic.regex\" = '.*\\.public\\.(bulk|toast_default|toast_full)'\n\"null.handling.mode\" = \"evaluate\"\n\
             [transforms.split]\ntype = \"io.debezium.transforms.ContentBasedRouter\"\nlanguage = \"jsr223.groovy\"\n\
             \"topic.expression\" = \"value.op == 'd' ? topic + '.deletes' : (value.source.table in ['pk_change', 'pk_composite'] ? topic.replace('.public.', '.pk.') : null)\"\n\
             \"topic.regex\" = '.*\\.public\\.(pk_change|pk_composite|trunc|evolve|ri_full)'\n\
             \"null.handling.mode\" = \"drop\"\n"
                .to_owned(),
        ),
        (
            "cast-flatten",
            "[kafka.events]\nschemas_enable = true\n[transforms]\n\
             chain = \"keyid,castkey,flatkey,flat,cast\"\n\
             [transforms.keyid]\ntype = \"org.apache.kafka.connect.transforms.ExtractField$Key\"\n\
             field = \"id\"\npredicate = \"noid\"\nnegate = true\n\
             [transforms.castkey]\ntype = \"org.apache.kafka.connect.transforms.Cast$Key\"\n\
             spec = \"string\"\npredicate = \"noid\"\nnegate = true\n\
             [transforms.flatkey]\ntype = \"org.apache.kafka.connect.transforms.Flatten$Key\"\n\
             predicate = \"noid\"\n\
             [transforms.flat]\ntype = \"org.apache.kafka.connect.transforms.Flatten$Value\"\n\
             delimiter = \"_\"\npredicate = \"maps\"\nnegate = true\n\
             [transforms.cast]\ntype = \"org.apache.kafka.connect.transforms.Cast$Value\"\n\
             spec = \"after_c_int2:int8,after_c_int4:string,after_c_int8:float32,after_c_float4:float64,\
             after_c_float8:int32,after_c_bool:int16,after_c_numeric_10_4:float64,after_c_numeric_38_0:string,\
             after_c_numeric_value:string,after_c_bytea:string,after_n:string,before_n:boolean,after_v:string,\
             op:string,source_txId:string,after_c_timestamp:int32,after_id:float64\"\n\
             [predicates.noid]\ntype = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
             pattern = '.*\\.public\\.(pk_composite|keyless|keyless_nothing)'\n\
             [predicates.maps]\ntype = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
             pattern = '.*\\.public\\.(nn_.*|others)'\n"
                .to_owned(),
        ),
        (
            "unwrap-route-headers",
            format!(
                "[kafka.events]\nschemas_enable = true\n[transforms]\n\
                 chain = \"unwraproute,unwrap,tovalue\"\n\
                 [transforms.unwraproute]\ntype = \"{UNWRAP}\"\n\"route.by.field\" = \"dest\"\n\
                 \"add.headers\" = \"op,table\"\npredicate = \"routed\"\n\
                 [transforms.unwrap]\ntype = \"{UNWRAP}\"\n\
                 \"delete.tombstone.handling.mode\" = \"rewrite\"\n\"add.headers\" = \"op,table\"\n\
                 predicate = \"routed\"\nnegate = true\n\
                 [transforms.tovalue]\ntype = \"io.debezium.transforms.HeaderToValue\"\n\
                 headers = \"__op,__table\"\nfields = \"op_code,tbl\"\noperation = \"move\"\n\
                 [predicates.routed]\ntype = \"org.apache.kafka.connect.transforms.predicates.TopicNameMatches\"\n\
                 pattern = '[^.]+\\.(public\\.routed|routed_.*)'\n"
            ),
        ),
    ]
}

/// The SQL a combination runs after setup.sql and changes.sql (the capture's EXTRA_SQL).
fn extra_sql(combination: &str) -> Option<[&'static str; 2]> {
    (combination == "unwrap-route-headers")
        .then_some(["route-by-field.sql", "route-by-field-changes.sql"])
}

/// The combinations the suite runs (the rest with `SLUICE_TRANSFORM_PARITY_ALL=1`, or those
/// `SLUICE_TRANSFORM_PARITY=a,b` names).
const IN_SUITE: &[&str] = &[
    // The PostgreSQL encoder's direct path (unwrap written by the encoder itself).
    "unwrap",
    "logical-router",
    "timestamp-insert-mask",
    "scripting",
    "cast-flatten",
    "unwrap-route-headers",
];

fn golden_root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/debezium")
}

/// A golden combination's records per topic name without the capture's prefix.
fn golden(combination: &str) -> BTreeMap<String, Vec<Rec>> {
    golden_dir(&golden_root().join(combination), &|topic| {
        topic.split_once('.').unwrap().1.to_owned()
    })
}

/// `normalise`, this run's database in the headers transforms add (`__db`), and this run's
/// topics in the key's and value's fields (ByLogicalTableRouter's physical table identifier,
/// InsertField's topic).
fn normalise_headers(mut rec: Rec, prefix: &str) -> Rec {
    rec = normalise(rec, prefix, prefix);
    for data in [rec.key.as_mut(), rec.value.as_mut()].into_iter().flatten() {
        if let J::Obj(members) = data {
            for (name, value) in members {
                if let J::Str(text) = value {
                    if let Some(rest) = text.strip_prefix(&format!("{prefix}.")) {
                        *text = format!("dbzcap.{rest}");
                    } else if text == prefix {
                        // A flattened source's name and database (cast-flatten).
                        match name.as_str() {
                            "source_name" => *text = "dbzcap".to_owned(),
                            "source_db" => *text = "dbz_capture".to_owned(),
                            _ => {}
                        }
                    }
                }
            }
        }
    }
    if let Some(J::Arr(headers)) = rec.headers.as_mut() {
        for header in headers {
            if let J::Arr(pair) = header
                && let Some(J::Str(value)) = pair.get_mut(1)
                && value == prefix
            {
                *value = "dbz_capture".to_owned();
            }
        }
    }
    rec
}

/// sluice's records with `[transforms]` = `extra`, per topic name without the run's prefix.
async fn run(combination: &str, extra: String) -> BTreeMap<String, Vec<Rec>> {
    let scripts = golden_root().join("../../../../scripts/debezium");
    let sql = |file: &str, more: Option<&str>| -> Vec<String> {
        let mut out = statements(&scripts.join(file));
        if let Some(more) = more {
            out.extend(statements(&scripts.join(more)));
        }
        out
    };
    let more = extra_sql(combination);
    run_sluice_then(
        &extra,
        sql("setup.sql", more.map(|m| m[0])),
        sql("changes.sql", more.map(|m| m[1])),
        |prefix| {
            read_topics(prefix, &|_| true)
                .into_iter()
                .filter(|(topic, _)| topic != "public.zz_marker")
                .map(|(topic, recs)| {
                    let recs = recs
                        .into_iter()
                        .map(|r| normalise_headers(r, prefix))
                        .collect();
                    (topic, recs)
                })
                .collect()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn transforms_match_kafka_connect_golden_files() {
    let started = Instant::now();
    let all = std::env::var_os("SLUICE_TRANSFORM_PARITY_ALL").is_some();
    // SLUICE_TRANSFORM_PARITY=a,b: those combinations only (e.g. after a new capture).
    let named = std::env::var("SLUICE_TRANSFORM_PARITY").ok();
    let wanted = |name: &str| match &named {
        Some(list) => list.split(',').any(|n| n.trim() == name),
        None => all || IN_SUITE.contains(&name),
    };
    let chosen: Vec<(&str, String)> = combinations()
        .into_iter()
        .filter(|(name, _)| wanted(name))
        .collect();
    let in_run = |line: &str| {
        chosen
            .iter()
            .any(|(c, _)| line.starts_with(&format!("{c} ")))
    };
    // One after the other: a run creates a slot, which waits for every transaction running in
    // the cluster, the other runs' snapshots included (side by side, three overran a 180 s
    // wait under the suite's load, and two failed a CI run once).
    let mut runs = Vec::with_capacity(chosen.len());
    for (name, toml) in &chosen {
        runs.push(run(name, toml.clone()).await);
    }
    let mut diff = Diff::new(RUN_DEPENDENT);
    let mut golden_records = 0;
    for ((combination, _), ours) in chosen.iter().zip(&runs) {
        let golden = golden(combination);
        golden_records += golden.values().map(Vec::len).sum::<usize>();
        for (topic, expected) in &golden {
            let actual = ours.get(topic).map(Vec::as_slice).unwrap_or_default();
            diff.compare_topic(&format!("{combination} {topic}"), expected, actual);
        }
        for (topic, actual) in ours {
            if !golden.contains_key(topic) && !actual.is_empty() {
                diff.add(
                    &format!("{combination} {topic}"),
                    "",
                    "topic-only-in-sluice",
                    format!("{} records", actual.len()),
                );
            }
        }
    }
    let known = golden_root().join("transforms-known-differences.txt");
    let report = if all {
        ratchet_report(
            &diff,
            &known,
            "tests/debezium/transforms-known-differences.txt",
        )
    } else {
        // Only the lines of the combinations that ran.
        let lines: std::collections::BTreeSet<String> =
            crate::debezium::compare::known_differences(&known)
                .into_iter()
                .filter(|l| in_run(l))
                .collect();
        crate::debezium::compare::ratchet_report_known(
            &diff,
            &lines,
            "tests/debezium/transforms-known-differences.txt",
        )
    };
    println!(
        "compared {} records and {} fields with Kafka Connect's ({}) in {:?}: {} differences in {} groups",
        diff.records,
        diff.fields,
        chosen
            .iter()
            .map(|(n, _)| *n)
            .collect::<Vec<_>>()
            .join(", "),
        started.elapsed(),
        diff.groups.values().map(|g| g.0).sum::<usize>(),
        diff.groups.len(),
    );
    assert!(report.is_empty(), "{report}");
    assert!(
        golden_records >= 250 && diff.records >= golden_records,
        "too few records paired: {} of the golden files' {golden_records}",
        diff.records
    );
}

/// Changes a transform drops (a Filter on the whole table) produce nothing, and the slot's
/// confirmed position still moves past them: the delivery core completes their places.
#[tokio::test(flavor = "multi_thread")]
async fn filtered_changes_still_move_the_confirmed_position() {
    filtered_changes_move_the_position("smtfilter", "").await;
}

/// The same with exactly-once delivery: no transaction carries the dropped records, their
/// places complete all the same, and the kept record is committed.
#[tokio::test(flavor = "multi_thread")]
async fn filtered_changes_move_the_confirmed_position_under_exactly_once() {
    filtered_changes_move_the_position(
        "smtfiltereos",
        "[delivery]\nguarantee = \"exactly_once\"\n",
    )
    .await;
}

async fn filtered_changes_move_the_position(tag: &str, delivery: &str) {
    let name = unique(tag);
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.kept (id int PRIMARY KEY, v text); \
             CREATE TABLE {name}.dropped (id int PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let extra = "[transforms]\nchain = [\"drop\", \"unwrap\"]\n[transforms.drop]\ntype = \"Filter\"\n\
         predicate = \"isDropped\"\n[transforms.unwrap]\ntype = \"ExtractNewRecordState\"\n\
         [predicates.isDropped]\ntype = \"TopicNameMatches\"\npattern = '.*\\.dropped'\n";
    let toml = pipeline_toml(&name, &name, &name, port, &format!("{extra}{delivery}"));
    let sluice = Sluice::start(&test_dir(&name), &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.kept VALUES (1, 'one'); \
             INSERT INTO {name}.dropped SELECT i, 'x' FROM generate_series(1, 2000) i; \
             UPDATE {name}.dropped SET v = 'y'; DELETE FROM {name}.dropped;"
        ))
        .await
        .unwrap();
    let end: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint", &[])
        .await
        .unwrap()
        .get(0);
    let slot = format!("sluice_{name}");
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
    while slot_confirmed(&client, &slot).await.unwrap_or(0) < end as u64 {
        assert!(
            Instant::now() < deadline,
            "the confirmed position did not pass the filtered changes; log:\n{}",
            sluice.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (kept_topic, dropped_topic) = (
        format!("{name}.{name}.kept"),
        format!("{name}.{name}.dropped"),
    );
    let (kept, dropped) = tokio::task::spawn_blocking(move || {
        // read_committed: under exactly once the records are transactional.
        let committed = [("isolation.level", "read_committed")];
        let kept = read_topic_with(&kept_topic, Duration::from_secs(30), &committed, |r| {
            !r.is_empty()
        });
        let dropped = read_topic_with(&dropped_topic, Duration::from_secs(2), &committed, |_| {
            false
        });
        (kept, dropped)
    })
    .await
    .unwrap();
    let values: Vec<_> = kept.iter().map(|r| r.value.clone()).collect();
    assert_eq!(
        values,
        [Some(serde_json::json!({"id": 1, "v": "one"}))],
        "the kept table's records"
    );
    assert!(
        dropped.is_empty(),
        "the filtered table's records were written"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Debezium's PartitionRouting end to end: on a topic of 3 partitions, each change (snapshot
/// rows, inserts, an update moving a row to another tenant, a delete by its before image)
/// lands in the partition Debezium computes from its `tenant` (`String.hashCode`, sign bit
/// cleared, modulo 3; the hashes themselves are checked against Debezium's own code in
/// `transform::partition`'s unit test). The delete's tombstone has no envelope and goes by
/// its key, as in Debezium.
#[tokio::test(flavor = "multi_thread")]
async fn partition_routing_sends_changes_to_debeziums_partitions() {
    let name = unique("smtparts");
    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id int PRIMARY KEY, tenant text); \
             ALTER TABLE {name}.t REPLICA IDENTITY FULL; \
             INSERT INTO {name}.t VALUES (1, 'alice'), (2, 'bob');"
        ))
        .await
        .unwrap();
    let port = free_port();
    let extra = "[transforms]\nchain = \"parts\"\n[transforms.parts]\n\
         type = \"io.debezium.transforms.partitions.PartitionRouting\"\n\
         \"partition.payload.fields\" = \"change.tenant\"\n\"partition.topic.num\" = 3\n";
    let toml = pipeline_toml(&name, &name, &name, port, extra).replace(
        &format!("topic_prefix = \"{name}\""),
        &format!("topic_prefix = \"{name}\"\ntopic_partitions = 3"),
    );
    let sluice = Sluice::start(&test_dir(&name), &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t VALUES (3, 'carol'), (4, 'dave'), (5, 'Ünïcödé'); \
             UPDATE {name}.t SET tenant = 'erin' WHERE id = 1; DELETE FROM {name}.t WHERE id = 2;"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 8)
    })
    .await
    .unwrap();
    let java_partition = |tenant: &str| {
        let mut h: i32 = 0;
        for unit in tenant.encode_utf16() {
            h = h.wrapping_mul(31).wrapping_add(i32::from(unit));
        }
        let h = h & i32::MAX;
        (if h == i32::MAX { 0 } else { h }) % 3
    };
    let mut seen = Vec::new();
    for record in records.iter().filter(|r| r.value.is_some()) {
        let value = record.value.as_ref().unwrap();
        let row = if value["op"] == "d" {
            &value["before"]
        } else {
            &value["after"]
        };
        let tenant = row["tenant"].as_str().unwrap();
        assert_eq!(
            record.partition,
            java_partition(tenant),
            "{tenant}: {value}; log:\n{}",
            sluice.log_text()
        );
        seen.push((value["op"].as_str().unwrap().to_owned(), tenant.to_owned()));
    }
    seen.sort();
    assert_eq!(seen.len(), 7, "{seen:?}");
    let partitions: std::collections::BTreeSet<i32> = records.iter().map(|r| r.partition).collect();
    assert!(partitions.len() > 1, "all in one partition: {partitions:?}");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

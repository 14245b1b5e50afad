//! The chain on records as the encoders write them, configured as a pipeline file does.

use std::sync::Arc;

use super::config::{PredicatesConfig, TransformsConfig, build};
use super::*;
use crate::event::EventOptions;

const INSERT: &str = r#"{"before":null,"after":{"id":1,"v":"a","n":2},"source":{"version":"3.7.0.Final","connector":"postgresql","name":"p","ts_ms":1,"db":"d","schema":"public","table":"t","txId":7,"lsn":42},"transaction":null,"op":"c","ts_ms":2}"#;
const DELETE: &str = r#"{"before":{"id":1,"v":"a","n":2},"after":null,"source":{"version":"3.7.0.Final","connector":"postgresql","name":"p","ts_ms":1,"db":"d","schema":"public","table":"t","txId":7,"lsn":43},"transaction":null,"op":"d","ts_ms":2}"#;
const TRUNCATE: &str =
    r#"{"before":null,"after":null,"source":{"table":"t"},"transaction":null,"op":"t","ts_ms":2}"#;

fn chain(toml_text: &str) -> Chain {
    chain_with(toml_text, &EventOptions::default())
}

fn chain_with(toml_text: &str, events: &EventOptions) -> Chain {
    let (transforms, predicates) = sections(toml_text);
    build(&transforms, &predicates, events)
        .unwrap_or_else(|issues| panic!("{issues:?}"))
        .expect("a chain")
}

fn sections(toml_text: &str) -> (TransformsConfig, PredicatesConfig) {
    #[derive(serde::Deserialize)]
    struct File {
        #[serde(default)]
        transforms: TransformsConfig,
        #[serde(default)]
        predicates: PredicatesConfig,
    }
    let file: File = toml::from_str(toml_text).unwrap();
    (file.transforms, file.predicates)
}

fn issues(toml_text: &str) -> Vec<String> {
    let (transforms, predicates) = sections(toml_text);
    match build(&transforms, &predicates, &EventOptions::default()) {
        Ok(_) => Vec::new(),
        Err(issues) => issues.iter().map(ToString::to_string).collect(),
    }
}

fn record(topic: &str, value: Option<&str>) -> OutRecord {
    OutRecord {
        partition: None,
        topic: Arc::from(topic),
        key: Some(br#"{"id":1}"#.to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: Vec::new(),
    }
}

fn value(out: &OutRecord) -> Option<String> {
    out.value
        .as_ref()
        .map(|v| String::from_utf8(v.clone()).unwrap())
}

/// Each change (insert, delete, its tombstone, a truncate) through the chain: the values out.
fn through(chain: &Chain) -> Vec<Option<Option<String>>> {
    [Some(INSERT), Some(DELETE), None, Some(TRUNCATE)]
        .into_iter()
        .map(|v| {
            chain
                .apply(&record("p.public.t", v))
                .unwrap()
                .map(|r| value(&r))
        })
        .collect()
}

const UNWRAP: &str = "[transforms]\nchain = \"unwrap\"\n[transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n";

#[test]
fn unwrap_handles_deletes_and_tombstones_per_mode() {
    let row = Some(Some(r#"{"id":1,"v":"a","n":2}"#.to_owned()));
    // tombstone (the default): the delete becomes a null value, the tombstone is dropped.
    assert_eq!(
        through(&chain(UNWRAP)),
        [row.clone(), Some(Some("null".into())), None, None]
    );
    let mode = |m: &str| {
        chain(&format!(
            "{UNWRAP}\"delete.tombstone.handling.mode\" = \"{m}\"\n"
        ))
    };
    assert_eq!(through(&mode("drop")), [row.clone(), None, None, None]);
    assert_eq!(
        through(&mode("delete-to-tombstone")),
        [row.clone(), Some(None), None, None]
    );
    let rewritten = Some(Some(
        r#"{"id":1,"v":"a","n":2,"__deleted":"false"}"#.to_owned(),
    ));
    let deleted = Some(Some(
        r#"{"id":1,"v":"a","n":2,"__deleted":"true"}"#.to_owned(),
    ));
    assert_eq!(
        through(&mode("rewrite")),
        [rewritten.clone(), deleted.clone(), None, None]
    );
    assert_eq!(
        through(&mode("rewrite-with-tombstone")),
        [rewritten, deleted, Some(None), None]
    );
    // The older keys, mapped to the modes.
    let legacy = chain(&format!(
        "{UNWRAP}\"delete.handling.mode\" = \"rewrite\"\n\"drop.tombstones\" = false\n"
    ));
    assert_eq!(through(&legacy)[2], Some(None));
}

#[test]
fn unwrap_adds_fields_and_headers() {
    let chain = chain(&format!(
        "{UNWRAP}\"add.fields\" = \"op,table,lsn,source.ts_ms:src_ts,id\"\n\"add.headers\" = [\"db\", \"op\"]\n\"add.headers.prefix\" = \"h_\"\n"
    ));
    let out = chain
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(
        value(&out).unwrap(),
        r#"{"id":1,"v":"a","n":2,"__op":"c","__table":"t","__lsn":42,"__src_ts":1,"__id":null}"#
    );
    assert_eq!(
        out.headers,
        [
            ("h_db".into(), "d".to_owned()),
            ("h_op".into(), "c".to_owned())
        ]
    );
    // A tombstone: dropped, but it would carry only the op header.
    let tombstone = chain.apply(&record("p.public.t", None)).unwrap();
    assert!(tombstone.is_none());
}

#[test]
fn non_envelopes_pass_through_unwrap() {
    let tx =
        r#"{"status":"BEGIN","id":"1:2","event_count":null,"data_collections":null,"ts_ms":3}"#;
    let out = chain(UNWRAP)
        .apply(&record("p.transaction", Some(tx)))
        .unwrap()
        .unwrap();
    assert_eq!(value(&out).unwrap(), tx);
}

#[test]
fn the_regex_router_routes_each_topic_its_own_way_every_time() {
    let chain = chain(
        r#"
[transforms]
chain = ["route"]
[transforms.route]
type = "RegexRouter"
regex = "([^.]+)\\.([^.]+)\\.([^.]+)"
replacement = "$1.all_$3"
"#,
    );
    // Twice each, interleaved: the second record of a topic takes the remembered route.
    for topic in [
        "p.public.a",
        "p.public.b",
        "p.public.a",
        "other",
        "p.public.b",
        "other",
    ] {
        let out = chain.apply(&record(topic, Some(INSERT))).unwrap().unwrap();
        let expected = match topic {
            "other" => "other".to_owned(),
            t => format!("p.all_{}", t.rsplit('.').next().unwrap()),
        };
        assert_eq!(&*out.topic, expected);
    }
}

#[test]
fn predicates_and_negate_choose_the_records() {
    let text = r#"
[transforms]
chain = ["dropOrders", "route"]
[transforms.dropOrders]
type = "org.apache.kafka.connect.transforms.Filter"
predicate = "isOrders"
[transforms.route]
type = "RegexRouter"
regex = "([^.]+)\\.([^.]+)\\.([^.]+)"
replacement = "$3"
predicate = "isTombstone"
negate = true
[predicates.isOrders]
type = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
pattern = ".*orders"
[predicates.isTombstone]
type = "RecordIsTombstone"
"#;
    let chain = chain(text);
    assert!(
        chain
            .apply(&record("p.public.orders", Some(INSERT)))
            .unwrap()
            .is_none()
    );
    let routed = chain
        .apply(&record("p.public.items", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(&*routed.topic, "items");
    // negate: the router skips tombstones.
    let tombstone = chain
        .apply(&record("p.public.items", None))
        .unwrap()
        .unwrap();
    assert_eq!(&*tombstone.topic, "p.public.items");
    assert_eq!(
        chain.topics_for(&["p.public.orders".into(), "p.public.items".into()]),
        ["orders", "p.public.orders", "items", "p.public.items"]
    );
    let header = chain_with_header();
    let mut with = record("p.public.t", Some(INSERT));
    with.headers.push(("skip".into(), "1".into()));
    assert!(header.apply(&with).unwrap().is_none());
    assert!(
        header
            .apply(&record("p.public.t", Some(INSERT)))
            .unwrap()
            .is_some()
    );
}

fn chain_with_header() -> Chain {
    chain(
        r#"
[transforms]
chain = "f"
[transforms.f]
type = "Filter"
predicate = "h"
[predicates.h]
type = "HasHeaderKey"
name = "skip"
"#,
    )
}

#[test]
fn replace_field_and_value_to_key_rebuild_the_row() {
    let chain = chain(
        "[transforms]\nchain = \"unwrap,replace,key\"\n[transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n[transforms.replace]\ntype = \"org.apache.kafka.connect.transforms.ReplaceField$Value\"\nexclude = \"n\"\nrenames = \"v:value\"\n[transforms.key]\ntype = \"org.apache.kafka.connect.transforms.ValueToKey\"\nfields = \"value,id\"\n",
    );
    let out = chain
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(value(&out).unwrap(), r#"{"id":1,"value":"a"}"#);
    assert_eq!(out.key.unwrap(), br#"{"value":"a","id":1}"#);
    // ValueToKey on a null value (the delete, in tombstone mode) fails, naming the transform.
    let error = chain
        .apply(&record("p.public.t", Some(DELETE)))
        .unwrap_err();
    assert_eq!(&*error.name, "key");
    let include = chain_with(
        "[transforms]\nchain = \"r\"\n[transforms.r]\ntype = \"ReplaceField$Key\"\nwhitelist = \"id\"\n",
        &EventOptions::default(),
    );
    let mut keyed = record("t", Some("{}"));
    keyed.key = Some(br#"{"id":1,"other":2}"#.to_vec());
    assert_eq!(
        include.apply(&keyed).unwrap().unwrap().key.unwrap(),
        br#"{"id":1}"#
    );
}

#[test]
fn schemas_follow_the_transforms() {
    let events: EventOptions = toml::from_str("format = \"json_with_schemas\"").unwrap();
    let chain = chain_with(
        &format!(
            "{UNWRAP}\"delete.tombstone.handling.mode\" = \"rewrite\"\n\"add.fields\" = \"op\"\n"
        ),
        &events,
    );
    let envelope = r#"{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.public.t.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.public.t.Value","field":"after"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.public.t.Envelope","version":2},"payload":{"before":null,"after":{"id":1},"op":"c"}}"#;
    let mut with_schemas = record("p.public.t", Some(envelope));
    with_schemas.key = Some(br#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"p.public.t.Key"},"payload":{"id":1}}"#.to_vec());
    let out = chain.apply(&with_schemas).unwrap().unwrap();
    assert_eq!(out.key, with_schemas.key);
    assert_eq!(
        value(&out).unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"__deleted"},{"type":"string","optional":true,"field":"__op"}],"optional":false,"name":"p.public.t.Value"},"payload":{"id":1,"__deleted":"false","__op":"c"}}"#
    );
}

#[test]
fn invalid_configurations_name_the_key_and_the_expected_form() {
    let unknown_type =
        issues("[transforms]\nchain = \"x\"\n[transforms.x]\ntype = \"com.example.Mine\"\n");
    assert!(
        unknown_type[0].starts_with("transforms.x.\"type\": \"com.example.Mine\" is not a transform sluice knows: expected one of io.debezium.transforms.ExtractNewRecordState"),
        "{unknown_type:?}"
    );
    let bad_mode = issues(&format!(
        "{UNWRAP}\"delete.tombstone.handling.mode\" = \"nope\"\n"
    ));
    assert_eq!(
        bad_mode,
        [
            "transforms.unwrap.\"delete.tombstone.handling.mode\": \"nope\": expected one of drop, tombstone, rewrite, rewrite-with-tombstone, delete-to-tombstone"
        ]
    );
    let unknown_key = issues(&format!("{UNWRAP}\"add.feilds\" = \"op\"\n"));
    assert!(
        unknown_key[0].starts_with("transforms.unwrap.\"add.feilds\": unknown key for ExtractNewRecordState: expected type, predicate, negate, delete.tombstone.handling.mode"),
        "{unknown_key:?}"
    );
    let not_yet = issues(
        "[transforms]\nchain = \"p\"\n[transforms.p]\ntype = \"org.apache.kafka.connect.transforms.TimestampRouter\"\n",
    );
    assert!(not_yet[0].contains("not yet applied"), "{not_yet:?}");
    // The outbox router is a PostgreSQL source's (taken out of the chain before it is built).
    let outbox = issues(
        "[transforms]\nchain = \"p\"\n[transforms.p]\ntype = \"io.debezium.transforms.outbox.EventRouter\"\n",
    );
    assert!(
        outbox[0].contains("applied by a PostgreSQL source's outbox router only"),
        "{outbox:?}"
    );
    let routing = issues(
        "[transforms]\nchain = \"p\"\n[transforms.p]\ntype = \"PartitionRouting\"\n\"partition.payload.fields\" = \"change.id,\"\n\"partition.topic.num\" = \"0\"\n\"partition.hash.function\" = \"md5\"\n",
    );
    assert_eq!(
        routing,
        [
            "transforms.p.\"partition.payload.fields\": \"change.id,\": an empty field name: expected field paths separated by commas",
            "transforms.p.\"partition.topic.num\": \"0\": expected a positive integer, the topic's partition count",
            "transforms.p.\"partition.hash.function\": \"md5\": expected java or murmur",
        ]
    );
    let bad_flag = issues(&format!("{UNWRAP}\"drop.fields.from.key\" = \"yes\"\n"));
    assert_eq!(
        bad_flag,
        ["transforms.unwrap.\"drop.fields.from.key\": \"yes\": expected true or false"]
    );
    let cast = |spec: &str| {
        issues(&format!(
            "[transforms]\nchain = \"c\"\n[transforms.c]\ntype = \"org.apache.kafka.connect.transforms.Cast$Value\"\n{spec}"
        ))
    };
    assert!(cast("")[0].starts_with("transforms.c.\"spec\": Must specify at least one field"));
    assert!(
        cast("spec = \"a:int128\"\n")[0].contains("Invalid type found in casting spec: \"int128\"")
    );
    let to_value = issues(
        "[transforms]\nchain = \"h\"\n[transforms.h]\ntype = \"io.debezium.transforms.HeaderToValue\"\nheaders = \"a,b\"\nfields = \"x.y\"\noperation = \"swap\"\n",
    );
    assert_eq!(
        to_value,
        [
            "transforms.h.\"fields\": \"x.y\": a nested field (struct.field) is not yet applied by sluice: expected a top-level field name",
            "transforms.h.\"fields\": 'fields' config must have the same number of elements as 'headers' config.",
            "transforms.h.\"operation\": \"swap\": expected move or copy",
        ]
    );
    let missing = issues("[transforms]\nchain = [\"a\"]\n");
    assert!(
        missing[0].starts_with("transforms.a: is missing"),
        "{missing:?}"
    );
    let undefined = issues(
        "[transforms]\nchain = \"f\"\n[transforms.f]\ntype = \"Filter\"\npredicate = \"p\"\n",
    );
    assert!(
        undefined[0].starts_with("transforms.f.predicate: \"p\" is not defined"),
        "{undefined:?}"
    );
    let script = issues(
        "[transforms]\nchain = \"f\"\n[transforms.f]\ntype = \"io.debezium.transforms.Filter\"\n",
    );
    assert!(
        script
            .iter()
            .any(|i| i.starts_with("transforms.f.\"language\": is missing")),
        "{script:?}"
    );
    assert!(
        script
            .iter()
            .any(|i| i.starts_with("transforms.f.\"condition\": is missing")),
        "{script:?}"
    );
    let avro: EventOptions = toml::from_str("format = \"avro\"").unwrap();
    let (t, p) = sections(UNWRAP);
    // Avro events take the chain (the sources write JSON with schemas for it).
    let chain = build(&t, &p, &avro).unwrap().unwrap();
    assert!(!chain.writes_avro());
}

#[test]
fn logical_table_router_merges_shards_and_keeps_keys_unique() {
    let router = "[transforms]\nchain = \"r\"\n[transforms.r]\ntype = \"io.debezium.transforms.ByLogicalTableRouter\"\n\"topic.regex\" = '(.*)\\.shard_(\\d+)\\.orders'\n\"topic.replacement\" = \"$1.orders\"\n";
    let routed = chain(router);
    let out = routed
        .apply(&record("p.shard_2.orders", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(&*out.topic, "p.orders");
    assert_eq!(
        out.key.clone().unwrap(),
        br#"{"id":1,"__dbz__physicalTableIdentifier":"p.shard_2.orders"}"#
    );
    assert_eq!(value(&out).as_deref(), Some(INSERT));
    // A tombstone is routed and keyed too; other topics pass.
    let tombstone = routed
        .apply(&record("p.shard_2.orders", None))
        .unwrap()
        .unwrap();
    assert_eq!((&*tombstone.topic, tombstone.value), ("p.orders", None));
    let other = routed
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(other.key.unwrap(), br#"{"id":1}"#);
    assert_eq!(
        routed.topics_for(&["p.shard_1.orders".into(), "p.shard_2.orders".into()]),
        ["p.orders"]
    );
    // The identifier by key.field.regex, under its own name; and no key field at all.
    let named = chain(&format!(
        "{router}\"key.field.name\" = \"shard\"\n\"key.field.regex\" = '.*\\.shard_(\\d+)\\..*'\n\"key.field.replacement\" = \"$1\"\n"
    ));
    let out = named
        .apply(&record("p.shard_2.orders", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(out.key.unwrap(), br#"{"id":1,"shard":"2"}"#);
    let plain = chain(&format!("{router}\"key.enforce.uniqueness\" = false\n"));
    let out = plain
        .apply(&record("p.shard_2.orders", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(out.key.unwrap(), br#"{"id":1}"#);
    // With schemas: the key's and the envelope's schemas are named after the new topic.
    let events: EventOptions = toml::from_str("format = \"json_with_schemas\"").unwrap();
    let with = chain_with(router, &events);
    let mut rec = record("p.shard_2.orders", None);
    rec.key = Some(br#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"p.shard_2.orders.Key"},"payload":{"id":1}}"#.to_vec());
    rec.value = Some(br#"{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.shard_2.orders.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.shard_2.orders.Value","field":"after"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.shard_2.orders.Envelope","version":2},"payload":{"before":null,"after":{"id":1},"op":"c"}}"#.to_vec());
    let out = with.apply(&rec).unwrap().unwrap();
    assert_eq!(
        String::from_utf8(out.key.clone().unwrap()).unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":false,"field":"__dbz__physicalTableIdentifier"}],"optional":false,"name":"p.orders.Key"},"payload":{"id":1,"__dbz__physicalTableIdentifier":"p.shard_2.orders"}}"#
    );
    assert_eq!(
        value(&out).unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.orders.Value","field":"before"},{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.orders.Value","field":"after"},{"type":"string","optional":false,"field":"op"}],"optional":false,"name":"p.orders.Envelope","version":2},"payload":{"before":null,"after":{"id":1},"op":"c"}}"#
    );
}

/// A flat row with a timestamp in each form Debezium writes.
const ROW: &str = r#"{"id":1,"micros":1478267490123456,"millis":1478267490123,"text":"2016-11-04 13:51:30","flag":true,"ratio":1.5,"name":"n","tags":["a"],"none":null}"#;

fn through_one(toml_text: &str, value: &str) -> Result<String, TransformError> {
    chain(toml_text)
        .apply(&record("p.public.t", Some(value)))
        .map(|out| self::value(&out.unwrap()).unwrap())
}

#[test]
fn timestamp_converter_converts_between_the_forms() {
    let ts = |keys: &str| {
        format!(
            "[transforms]\nchain = \"t\"\n[transforms.t]\ntype = \"TimestampConverter$Value\"\n{keys}"
        )
    };
    let out = through_one(
        &ts("field = \"micros\"\n\"target.type\" = \"string\"\nformat = \"yyyy-MM-dd'T'HH:mm:ss.SSSX\"\n\"unix.precision\" = \"microseconds\"\n"),
        ROW,
    )
    .unwrap();
    assert!(
        out.contains(r#""micros":"2016-11-04T13:51:30.123Z""#),
        "{out}"
    );
    let out = through_one(
        &ts("field = \"text\"\n\"target.type\" = \"unix\"\nformat = \"yyyy-MM-dd HH:mm:ss\"\n\"unix.precision\" = \"seconds\"\n"),
        ROW,
    )
    .unwrap();
    assert!(out.contains(r#""text":1478267490,"#), "{out}");
    let out = through_one(&ts("field = \"millis\"\n\"target.type\" = \"Date\"\n"), ROW).unwrap();
    assert!(out.contains(r#""millis":17109,"#), "{out}");
    let out = through_one(&ts("field = \"millis\"\n\"target.type\" = \"Time\"\n"), ROW).unwrap();
    assert!(out.contains(r#""millis":49890123,"#), "{out}");
    // Absent and null fields are left as they are.
    let out = through_one(&ts("field = \"none\"\n\"target.type\" = \"unix\"\n"), ROW).unwrap();
    assert_eq!(out, ROW);
    // A string that does not match the format fails, naming the transform.
    let error = through_one(
        &ts("field = \"name\"\n\"target.type\" = \"unix\"\nformat = \"yyyy\"\n"),
        ROW,
    )
    .unwrap_err();
    assert!(error.reason.contains("does not match pattern"), "{error}");
    // With schemas: the field's schema becomes the target's, its kind read from the schema.
    let events: EventOptions = toml::from_str("format = \"json_with_schemas\"").unwrap();
    let with = chain_with(
        &ts(
            "field = \"t\"\n\"target.type\" = \"Timestamp\"\n\"unix.precision\" = \"microseconds\"\n",
        ),
        &events,
    );
    let mut rec = record(
        "p.public.t",
        Some(
            r#"{"schema":{"type":"struct","fields":[{"type":"int64","optional":true,"name":"io.debezium.time.MicroTimestamp","version":1,"field":"t"}],"optional":true,"name":"p.public.t.Value"},"payload":{"t":-1500}}"#,
        ),
    );
    rec.key = None;
    let out = with.apply(&rec).unwrap().unwrap();
    assert_eq!(
        value(&out).unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"int64","optional":true,"name":"org.apache.kafka.connect.data.Timestamp","version":1,"field":"t"}],"optional":true,"name":"p.public.t.Value"},"payload":{"t":-1}}"#
    );
}

#[test]
fn insert_field_and_mask_field_change_the_row() {
    let text = "[transforms]\nchain = \"unwrap,insert,key,mask,zero\"\n[transforms.unwrap]\ntype = \"ExtractNewRecordState\"\n\
        [transforms.insert]\ntype = \"InsertField$Value\"\n\"topic.field\" = \"__topic\"\n\"partition.field\" = \"__p\"\n\"static.field\" = \"src!\"\n\"static.value\" = \"pg\"\n\
        [transforms.key]\ntype = \"InsertField$Key\"\n\"static.field\" = \"k\"\n\"static.value\" = \"x\"\n\
        [transforms.mask]\ntype = \"MaskField$Value\"\nfields = \"v\"\nreplacement = \"***\"\npredicate = \"t\"\nnegate = true\n\
        [transforms.zero]\ntype = \"MaskField$Value\"\nfields = \"n\"\npredicate = \"t\"\nnegate = true\n\
        [predicates.t]\ntype = \"RecordIsTombstone\"\n";
    let chain = chain(text);
    let out = chain
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(
        value(&out).unwrap(),
        r#"{"id":1,"v":"***","n":0,"__topic":"p.public.t","src":"pg"}"#
    );
    assert_eq!(out.key.unwrap(), br#"{"id":1,"k":"x"}"#);
    // The delete's null value passes InsertField, and the predicate keeps it from MaskField.
    let delete = chain
        .apply(&record("p.public.t", Some(DELETE)))
        .unwrap()
        .unwrap();
    assert_eq!(value(&delete).as_deref(), Some("null"));
    // Zero values by type; a replacement for numbers; refused for booleans.
    let mask = |keys: &str| {
        format!("[transforms]\nchain = \"m\"\n[transforms.m]\ntype = \"MaskField$Value\"\n{keys}")
    };
    let out = through_one(
        &mask("fields = \"flag,ratio,name,tags,micros,none\"\n"),
        ROW,
    )
    .unwrap();
    assert_eq!(
        out,
        r#"{"id":1,"micros":0,"millis":1478267490123,"text":"2016-11-04 13:51:30","flag":false,"ratio":0.0,"name":"","tags":[],"none":null}"#
    );
    let out = through_one(
        &mask("fields = \"ratio,micros\"\nreplacement = \"7\"\n"),
        ROW,
    )
    .unwrap();
    assert!(
        out.contains(r#""micros":7,"#) && out.contains(r#""ratio":7.0,"#),
        "{out}"
    );
    assert!(through_one(&mask("fields = \"flag\"\nreplacement = \"7\"\n"), ROW).is_err());
    assert!(through_one(&mask("fields = \"name\"\n"), "null").is_err());
    // With schemas: the added fields' schemas, the struct made required as Connect makes it.
    let events: EventOptions = toml::from_str("format = \"json_with_schemas\"").unwrap();
    let with = chain_with(
        "[transforms]\nchain = \"i\"\n[transforms.i]\ntype = \"InsertField$Value\"\n\"topic.field\" = \"t\"\n",
        &events,
    );
    let mut rec = record(
        "p.public.t",
        Some(
            r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":true,"name":"p.public.t.Value"},"payload":{"id":1}}"#,
        ),
    );
    rec.key = None;
    assert_eq!(
        value(&with.apply(&rec).unwrap().unwrap()).unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"},{"type":"string","optional":true,"field":"t"}],"optional":false,"name":"p.public.t.Value"},"payload":{"id":1,"t":"p.public.t"}}"#
    );
}

#[test]
fn the_new_transforms_name_their_keys_when_misconfigured() {
    let one = |kind: &str, keys: &str| {
        issues(&format!(
            "[transforms]\nchain = \"x\"\n[transforms.x]\ntype = \"{kind}\"\n{keys}"
        ))
    };
    let got = one("ByLogicalTableRouter", "\"topic.regex\" = \"(\"\n");
    assert!(
        got.iter()
            .any(|i| i.contains("transforms.x.\"topic.replacement\"") && i.contains("is missing")),
        "{got:?}"
    );
    let got = one(
        "ByLogicalTableRouter",
        "\"topic.regex\" = \"a\"\n\"topic.replacement\" = \"b\"\n\"key.field.regex\" = \"a\"\n",
    );
    assert!(
        got.iter().any(|i| i.contains("key.field.replacement")),
        "{got:?}"
    );
    let got = one("TimestampConverter$Value", "\"target.type\" = \"string\"\n");
    assert!(
        got.iter()
            .any(|i| i.contains("transforms.x.\"format\"") && i.contains("SimpleDateFormat")),
        "{got:?}"
    );
    let got = one("TimestampConverter$Key", "\"target.type\" = \"date\"\n");
    assert!(
        got.iter()
            .any(|i| i.contains("\"target.type\"") && i.contains("Date")),
        "{got:?}"
    );
    let got = one(
        "TimestampConverter$Value",
        "\"target.type\" = \"string\"\nformat = \"yyyy-ww\"\n\"unix.precision\" = \"ms\"\n",
    );
    assert!(
        got.iter()
            .any(|i| i.contains("\"format\"") && i.contains("'w'")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|i| i.contains("\"unix.precision\"") && i.contains("microseconds")),
        "{got:?}"
    );
    let got = one("InsertField$Value", "\"offset.field\" = \"o\"\n");
    assert!(
        got.iter()
            .any(|i| i.contains("\"offset.field\"") && i.contains("sink")),
        "{got:?}"
    );
    assert!(
        got.iter().any(|i| i.contains("no field insertion")),
        "{got:?}"
    );
    let got = one("InsertField$Value", "\"static.field\" = \"s\"\n");
    assert!(
        got.iter().any(|i| i.contains("\"static.value\"")),
        "{got:?}"
    );
    let got = one("MaskField$Value", "replacement = \"\"\nfoo = 1\n");
    assert!(
        got.iter()
            .any(|i| i.contains("\"fields\"") && i.contains("is missing")),
        "{got:?}"
    );
    assert!(got.iter().any(|i| i.contains("\"replacement\"")), "{got:?}");
    assert!(
        got.iter()
            .any(|i| i.contains("\"foo\"") && i.contains("unknown key")),
        "{got:?}"
    );
}

#[test]
fn header_transforms_insert_drop_and_take_fields_into_headers() {
    let smt = chain(
        r#"
[transforms]
chain = ["unwrap", "tag", "from", "drop"]
[transforms.unwrap]
type = "io.debezium.transforms.ExtractNewRecordState"
[transforms.tag]
type = "org.apache.kafka.connect.transforms.InsertHeader"
header = "origin"
"value.literal" = "sluice"
[transforms.from]
type = "org.apache.kafka.connect.transforms.HeaderFrom$Value"
fields = "v,n"
headers = "the_v,the_n"
operation = "move"
[transforms.drop]
type = "org.apache.kafka.connect.transforms.DropHeaders"
headers = "old"
"#,
    );
    let mut input = record("p.public.t", Some(INSERT));
    input.headers.push(("old".into(), "x".into()));
    input.headers.push(("kept".into(), "y".into()));
    let out = smt.apply(&input).unwrap().unwrap();
    assert_eq!(value(&out).unwrap(), r#"{"id":1}"#);
    let headers: Vec<(&str, &str)> = out
        .headers
        .iter()
        .map(|(n, v)| (n.as_ref(), v.as_str()))
        .collect();
    assert_eq!(
        headers,
        [
            ("kept", "y"),
            ("origin", "sluice"),
            ("the_v", "a"),
            ("the_n", "2")
        ]
    );
    // A tombstone has no struct to take fields from: the record fails (as Connect's task
    // does), naming the transform.
    let only_from = chain(
        r#"
[transforms]
chain = ["from"]
[transforms.from]
type = "HeaderFrom$Value"
fields = "v"
headers = "the_v"
operation = "copy"
"#,
    );
    let error = only_from.apply(&record("p.public.t", None)).unwrap_err();
    assert_eq!(&*error.name, "from");
    assert!(
        issues(
            r#"
[transforms]
chain = ["from"]
[transforms.from]
type = "HeaderFrom$Key"
fields = "a,b"
headers = "x"
operation = "swap"
"#
        )
        .join("\n")
        .contains("expected move or copy"),
    );
}

#[test]
fn extract_and_hoist_reshape_keys_and_values_with_their_schemas() {
    let chain = chain(
        r#"
[transforms]
chain = ["unwrap", "keyid", "hoist"]
[transforms.unwrap]
type = "io.debezium.transforms.ExtractNewRecordState"
[transforms.keyid]
type = "org.apache.kafka.connect.transforms.ExtractField$Key"
field = "id"
[transforms.hoist]
type = "org.apache.kafka.connect.transforms.HoistField$Value"
field = "row"
"#,
    );
    let out = chain
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(out.key.as_deref(), Some(&b"1"[..]));
    assert_eq!(value(&out).unwrap(), r#"{"row":{"id":1,"v":"a","n":2}}"#);
    // With schemas: the key's schema is the field's, the value's a struct of one field.
    let key = Data::read(Some(br#"{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],"optional":false,"name":"p.public.t.Key"},"payload":{"id":1}}"#), true).unwrap();
    let mut rec = Record {
        topic: Arc::from("t"),
        key,
        value: Data::read(
            Some(br#"{"schema":{"type":"int64","optional":true},"payload":5}"#),
            true,
        )
        .unwrap(),
        headers: Vec::new(),
        header_schemas: Vec::new(),
        partition: None,
    };
    rec = shape::ExtractField {
        part: field::Part::Key,
        field: "id".into(),
    }
    .apply(rec)
    .unwrap();
    rec = shape::HoistField {
        part: field::Part::Value,
        field: "n".into(),
    }
    .apply(rec);
    assert_eq!(
        String::from_utf8(rec.key.write(true).unwrap()).unwrap(),
        r#"{"schema":{"type":"int32","optional":false},"payload":1}"#
    );
    assert_eq!(
        String::from_utf8(rec.value.write(true).unwrap()).unwrap(),
        r#"{"schema":{"type":"struct","fields":[{"type":"int64","optional":true,"field":"n"}],"optional":false},"payload":{"n":5}}"#
    );
    // A field the key's schema lacks fails as Connect's "Unknown field".
    let missing = shape::ExtractField {
        part: field::Part::Key,
        field: "nope".into(),
    }
    .apply(Record {
        topic: Arc::from("t"),
        key: Data::read(Some(br#"{"id":1}"#), false).unwrap(),
        value: Data::read(None, false).unwrap(),
        headers: Vec::new(),
        header_schemas: Vec::new(),
        partition: None,
    });
    assert_eq!(missing.unwrap_err(), "Unknown field: nope");
}

/// Debezium's scripting Filter and ContentBasedRouter with expressions: `topic.regex` limits
/// them, tombstones pass (`keep`), are dropped or evaluated, the router's literal topics are
/// created beforehand, and a condition that is not a boolean is the record's error.
#[test]
fn scripting_filter_and_router_apply_their_expressions() {
    let text = "[transforms]\nchain = \"keep,route\"\n\
        [transforms.keep]\ntype = \"io.debezium.transforms.Filter\"\nlanguage = \"jsr223.groovy\"\n\
        condition = \"value.op != 'd' && value.after.n > 1\"\n\"topic.regex\" = 'p\\.public\\.t'\n\
        [transforms.route]\ntype = \"io.debezium.transforms.ContentBasedRouter\"\nlanguage = \"jsr223.groovy\"\n\
        \"topic.expression\" = \"value.op == 'd' ? 'deletes' : (value.source.table == 'u' ? topic + '.u' : null)\"\n\
        \"null.handling.mode\" = \"drop\"\n";
    let chain = chain(text);
    let kept = chain
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap()
        .unwrap();
    assert_eq!(&*kept.topic, "p.public.t");
    assert!(
        chain
            .apply(&record("p.public.t", Some(DELETE)))
            .unwrap()
            .is_none()
    );
    // Not the Filter's topic: kept, and the router sends its delete to "deletes".
    let routed = chain
        .apply(&record("p.public.other", Some(DELETE)))
        .unwrap()
        .unwrap();
    assert_eq!(&*routed.topic, "deletes");
    // The Filter keeps tombstones unevaluated; the router (drop) drops them.
    assert!(chain.apply(&record("p.public.t", None)).unwrap().is_none());
    assert_eq!(
        chain.topics_for(&["p.public.t".into()]),
        ["p.public.t", "deletes"]
    );
    let wrong = self::chain(
        "[transforms]\nchain = \"f\"\n[transforms.f]\ntype = \"io.debezium.transforms.Filter\"\n\
         language = \"jsr223.groovy\"\ncondition = \"value.op\"\n",
    );
    let error = wrong
        .apply(&record("p.public.t", Some(INSERT)))
        .unwrap_err();
    assert!(error.reason.contains("not a boolean"), "{error}");
    let bad = issues(
        "[transforms]\nchain = \"f\"\n[transforms.f]\ntype = \"io.debezium.transforms.ContentBasedRouter\"\n\
         language = \"wasm.chicory\"\n\"topic.expression\" = \"value.op ==\"\n\"null.handling.mode\" = \"skip\"\n",
    );
    assert_eq!(bad.len(), 3, "{bad:?}");
    assert!(bad[0].contains("WebAssembly"), "{bad:?}");
    assert!(bad[1].contains("expected a value"), "{bad:?}");
    assert!(
        bad[2].contains("expected keep, drop or evaluate"),
        "{bad:?}"
    );
}

/// Records of the `unwrap-route` Avro capture (real Debezium + Connect + Apicurio's
/// `AvroConverter` after `ExtractNewRecordState` and a `RegexRouter`) made by the chain from
/// the same changes in their Connect form (the `schemas-enable` JSON capture: Debezium's
/// envelopes with their schemas), byte for byte: the Avro schema derived from each transformed
/// Connect schema is the text the converter registered (matched exactly, under the routed
/// topic's subject), and each record's bytes are the capture's (its `source.lsn` and
/// `source.ts_ms`, run-dependent, set to the capture's values first).
#[test]
fn avro_after_the_chain_is_connects_avro_converters() {
    use super::json::{Members, ObjectWriter};
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/debezium");
    let read = |path: &str| std::fs::read_to_string(format!("{dir}/{path}")).unwrap();
    let schemas: serde_json::Value =
        serde_json::from_str(&read("avro/unwrap-route/schemas.json")).unwrap();
    let subjects: serde_json::Value =
        serde_json::from_str(&read("avro/unwrap-route/subjects.json")).unwrap();
    let events: EventOptions = toml::from_str("format = \"avro\"").unwrap();
    let chain = chain_with(
        "[transforms]\nchain = \"unwrap,route\"\n[transforms.unwrap]\n\
         type = \"io.debezium.transforms.ExtractNewRecordState\"\n\
         \"delete.tombstone.handling.mode\" = \"rewrite\"\n\
         \"add.fields\" = \"op,table,lsn,source.ts_ms:src_ts\"\n[transforms.route]\n\
         type = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
         regex = '(.*)\\.public\\.([a-y].*)'\nreplacement = \"$1.routed.$2\"\n",
        &events,
    );
    let registered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = Arc::clone(&registered);
    chain.set_avro_output(avro::AvroOutput::new(
        true,
        true,
        Box::new(move |topic, is_key, _record, text| {
            let subject = format!("{topic}-{}", if is_key { "key" } else { "value" });
            let (id, _) = schemas
                .as_object()
                .unwrap()
                .iter()
                .find(|(_, s)| s["text"] == text)
                .ok_or_else(|| {
                    format!("{subject}: not a schema the converter registered: {text}")
                })?;
            let versions = subjects[&subject].as_array().cloned().unwrap_or_default();
            assert!(
                versions.iter().any(
                    |v| v["id"].as_u64().map(|n| n.to_string()).as_deref() == Some(id.as_str())
                ),
                "{subject}: id {id} is not one of its versions"
            );
            seen.lock().unwrap().push(subject);
            Ok(id.parse().unwrap())
        }),
    ));
    let hex = |bytes: &Option<Vec<u8>>| {
        bytes
            .as_ref()
            .map(|b| b.iter().map(|x| format!("{x:02x}")).collect::<String>())
    };
    let mut compared = 0;
    for table in ["ri_full", "nn_default", "scalars", "toast_default"] {
        let input = read(&format!("schemas-enable/dbzcap.public.{table}.jsonl"));
        let output = read(&format!("avro/unwrap-route/dbzcap.routed.{table}.jsonl"));
        let mut expected = output
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap());
        for line in input.lines() {
            let members = Members::parse(line).unwrap();
            let text = |name: &str| members.get(name).map(|r| r.get()).filter(|t| *t != "null");
            let Some(value) = text("value") else {
                // The tombstones: dropped by the rewrite mode.
                let record = OutRecord {
                    partition: None,
                    topic: Arc::from(format!("dbzcap.public.{table}")),
                    key: text("key").map(|k| k.as_bytes().to_vec()),
                    value: None,
                    headers: Vec::new(),
                };
                assert!(
                    chain.apply(&record).unwrap().is_none(),
                    "{table}: a tombstone kept"
                );
                continue;
            };
            let captured = expected
                .next()
                .unwrap_or_else(|| panic!("{table}: more records than the capture's"));
            // The run-dependent source fields, set to the capture's.
            let rewrite = |text: &str, each: &dyn Fn(&str, &str, &mut ObjectWriter)| {
                let mut out = ObjectWriter::new();
                for (name, raw) in Members::parse(text).unwrap().0 {
                    each(&name, raw.get(), &mut out);
                }
                out.finish()
            };
            let value = rewrite(value, &|name, raw, out| {
                if name != "payload" {
                    return out.member(name, raw);
                }
                out.member(
                    name,
                    &rewrite(raw, &|name, raw, out| {
                        if name != "source" {
                            return out.member(name, raw);
                        }
                        out.member(
                            name,
                            &rewrite(raw, &|name, raw, out| match name {
                                "lsn" => out.member(name, &captured["value"]["__lsn"].to_string()),
                                "ts_ms" => {
                                    out.member(name, &captured["value"]["__src_ts"].to_string())
                                }
                                _ => out.member(name, raw),
                            }),
                        );
                    }),
                );
            });
            let record = OutRecord {
                partition: None,
                topic: Arc::from(format!("dbzcap.public.{table}")),
                key: text("key").map(|k| k.as_bytes().to_vec()),
                value: Some(value.into_bytes()),
                headers: Vec::new(),
            };
            let out = chain.apply(&record).unwrap().expect("kept");
            assert_eq!(&*out.topic, format!("dbzcap.routed.{table}"));
            for (side, bytes) in [("key", &out.key), ("value", &out.value)] {
                let id = captured[format!("{side}_schema")].as_u64();
                let written = hex(bytes);
                assert_eq!(
                    written
                        .as_ref()
                        .map(|h| u64::from_str_radix(&h[2..10], 16).unwrap()),
                    id,
                    "{table} {side}: the schema id"
                );
                if let Some(want) = captured[format!("{side}_hex")].as_str() {
                    assert_eq!(written.as_deref(), Some(want), "{table} {side}: {captured}");
                    compared += 1;
                }
            }
        }
        assert!(
            expected.next().is_none(),
            "{table}: fewer records than the capture's"
        );
    }
    assert!(compared >= 20, "{compared} byte strings compared");
    // Each subject once (the schemas are cached per topic and side).
    let registered = registered.lock().unwrap();
    let unique: std::collections::BTreeSet<&String> = registered.iter().collect();
    assert_eq!(unique.len(), registered.len(), "{registered:?}");
    assert_eq!(registered.len(), 8, "{registered:?}");
}

/// What writing Avro at the chain's end costs beside writing JSON with schemas, per record,
/// on Debezium's own envelopes of the `bulk` table (the `schemas-enable` capture, repeated):
/// unwrap (rewrite, `add.fields`) and a `RegexRouter`, medians of rounds alternating the two.
/// Run: `cargo test -p sluice --lib -- --ignored avro_after_the_chain_cost --nocapture`
/// (`--release` for figures worth quoting). The schemas are registered once (two subjects).
#[test]
#[ignore = "a measurement: run by hand"]
fn avro_after_the_chain_cost() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/debezium/schemas-enable/dbzcap.public.bulk.jsonl"
    ))
    .unwrap();
    let mut records = Vec::new();
    for line in text.lines() {
        let members = super::json::Members::parse(line).unwrap();
        let part = |name: &str| {
            members
                .get(name)
                .map(|r| r.get())
                .filter(|t| *t != "null")
                .map(|t| t.as_bytes().to_vec())
        };
        records.push(OutRecord {
            partition: None,
            topic: Arc::from("dbzcap.public.bulk"),
            key: part("key"),
            value: part("value"),
            headers: Vec::new(),
        });
    }
    let records: Vec<OutRecord> = records.iter().cycle().take(6_000).cloned().collect();
    let events: EventOptions = toml::from_str("format = \"avro\"").unwrap();
    let section = "[transforms]\nchain = \"unwrap,route\"\n[transforms.unwrap]\n\
         type = \"io.debezium.transforms.ExtractNewRecordState\"\n\
         \"delete.tombstone.handling.mode\" = \"rewrite\"\n\"add.fields\" = \"op,table,lsn\"\n\
         [transforms.route]\ntype = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
         regex = '(.*)\\.public\\.(.*)'\nreplacement = \"$1.routed.$2\"\n";
    let json = chain_with(section, &events);
    let avro = chain_with(section, &events);
    let registered = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let count = Arc::clone(&registered);
    avro.set_avro_output(avro::AvroOutput::new(
        true,
        true,
        Box::new(move |_, _, _, _| Ok(count.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1)),
    ));
    let round = |chain: &Chain| {
        let started = std::time::Instant::now();
        let mut bytes = 0usize;
        for record in &records {
            if let Some(out) = chain.apply(record).unwrap() {
                bytes += out.value.map_or(0, |v| v.len());
            }
        }
        (
            started.elapsed().as_nanos() as f64 / records.len() as f64,
            bytes as f64 / records.len() as f64,
        )
    };
    let (mut j, mut a) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        j.push(round(&json));
        a.push(round(&avro));
    }
    let median = |v: &mut Vec<(f64, f64)>| {
        v.sort_by(|x, y| x.0.total_cmp(&y.0));
        v[v.len() / 2]
    };
    let ((jn, jb), (an, ab)) = (median(&mut j), median(&mut a));
    println!(
        "{{\"records\":{},\"json_with_schemas_ns\":{jn:.0},\"avro_ns\":{an:.0},\"avro_over_json\":{:.2},\"json_value_bytes\":{jb:.0},\"avro_value_bytes\":{ab:.0},\"registrations\":{}}}",
        records.len(),
        an / jn,
        registered.load(std::sync::atomic::Ordering::SeqCst)
    );
    assert_eq!(registered.load(std::sync::atomic::Ordering::SeqCst), 2);
}

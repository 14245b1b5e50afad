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
    let not_yet = issues(&format!("{UNWRAP}\"route.by.field\" = \"t\"\n"));
    assert!(not_yet[0].contains("not yet applied"), "{not_yet:?}");
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
    assert!(script[0].contains("Groovy or JavaScript"), "{script:?}");
    let avro: EventOptions = toml::from_str("format = \"avro\"").unwrap();
    let (t, p) = sections(UNWRAP);
    let refused = build(&t, &p, &avro).unwrap_err();
    assert!(refused[0].problem.contains("not yet applied to Avro"));
}

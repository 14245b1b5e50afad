//! The direct path against the chain: for every kind of change, delete mode, added field,
//! router and option, the records [`encode_unwrapped`] writes equal those the chain makes of
//! [`encode_change`]'s envelopes.

use super::super::encode::encode_change;
use super::super::pgoutput::{Datum, ReplicaIdentity};
use super::super::relation::RelationInfo;
use super::*;
use crate::runtime::metrics::TableMetrics;
use crate::transform::Chain;
use bytes::Bytes;
use sluice_engine::Lsn;

fn chain(toml_text: &str) -> Arc<Chain> {
    #[derive(serde::Deserialize)]
    struct File {
        transforms: crate::transform::TransformsConfig,
        #[serde(default)]
        predicates: crate::transform::PredicatesConfig,
    }
    let file: File = toml::from_str(toml_text).unwrap();
    Arc::new(
        crate::transform::config::build(
            &file.transforms,
            &file.predicates,
            &EventOptions::default(),
        )
        .unwrap()
        .unwrap(),
    )
}

fn identity() -> SourceIdentity {
    SourceIdentity {
        server_name: "app\"x".into(),
        database: "db".into(),
        registry: None,
    }
}

fn relation(keyed: bool) -> Arc<RelationInfo> {
    Arc::new(RelationInfo::new(
        &identity(),
        "public",
        "users",
        vec![
            ("id".into(), 23, -1),
            ("name".into(), 25, -1),
            ("bio".into(), 25, -1),
        ],
        &if keyed { vec!["id".to_owned()] } else { vec![] },
        ReplicaIdentity::Default,
        Arc::new(TableMetrics::new("public.users")),
    ))
}

fn text(s: &str) -> Datum {
    Datum::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn tuple(id: &str, name: Datum, bio: Datum) -> TupleData {
    TupleData(vec![text(id), name, bio])
}

/// Every kind of change the stream encodes (with and without transaction metadata).
fn changes(keyed: bool) -> Vec<RowChange> {
    let kinds = || {
        vec![
            ChangeKind::Insert {
                new: tuple("1", text("ann \"a\""), Datum::Null),
            },
            ChangeKind::Update {
                old: None,
                old_is_key_only: false,
                new: tuple("1", text("b"), Datum::UnchangedToast),
                key_changed: false,
            },
            ChangeKind::Update {
                old: Some(tuple("1", text("a"), text("long bio"))),
                old_is_key_only: false,
                new: tuple("1", text("b"), Datum::UnchangedToast),
                key_changed: false,
            },
            ChangeKind::Update {
                old: Some(tuple("1", Datum::Null, Datum::Null)),
                old_is_key_only: true,
                new: tuple("2", text("b"), text("c")),
                key_changed: true,
            },
            ChangeKind::Delete {
                old: tuple("2", Datum::Null, Datum::Null),
                old_is_key_only: true,
            },
            ChangeKind::Truncate,
            ChangeKind::Read {
                row: tuple("3", text("r"), text("")),
                marker: SnapshotMarker::Incremental,
            },
        ]
    };
    let mut out = Vec::new();
    for transaction in [
        None,
        Some(TransactionOrder {
            xid: 77,
            total_order: 3,
            data_collection_order: 2,
        }),
    ] {
        for kind in kinds() {
            out.push(RowChange {
                relation: relation(keyed),
                kind,
                commit_lsn: Lsn(0x100),
                lsn: Lsn(0x80),
                tx_index: 4,
                xid: 77,
                commit_unix_micros: 1_700_000_000_123_456,
                last_commit_end: Some(Lsn(0x40)),
                size_hint: 1,
                transaction,
            });
        }
    }
    out
}

type Written = (
    Arc<str>,
    Option<Vec<u8>>,
    Option<Vec<u8>>,
    Vec<(std::borrow::Cow<'static, str>, String)>,
);

fn written(records: Vec<OutRecord>) -> Vec<Written> {
    records
        .into_iter()
        .map(|r| (r.topic, r.key, r.value, r.headers))
        .collect()
}

/// Compares both paths on every change for `chain_toml`, with and without tombstones and
/// `unavailable_columns`; returns how many records were compared.
fn compare(chain_toml: &str) -> usize {
    let chain = chain(chain_toml);
    let direct = Direct::of(&chain).expect("a chain of the direct form");
    let mut compared = 0;
    for tombstones in [true, false] {
        for unavailable_columns in [false, true] {
            let options = EncodeOptions {
                tombstones,
                events: EventOptions {
                    unavailable_columns,
                    ..EventOptions::default()
                },
                now_unix_nanos: 1_700_000_000_987_654_321,
            };
            assert!(supports(&direct, &options.events), "{chain_toml}");
            for keyed in [true, false] {
                for change in changes(keyed) {
                    let mut envelopes = Vec::new();
                    encode_change(&change, &options, &mut envelopes);
                    let expected: Vec<OutRecord> =
                        crate::transform::apply_all(Some(&chain), envelopes).unwrap();
                    let mut direct_out = Vec::new();
                    encode_unwrapped(&change, &options, &identity(), &direct, &mut direct_out);
                    assert!(
                        direct_out.len() <= change.record_count(tombstones) as usize,
                        "more records than places"
                    );
                    let (expected, got) = (written(expected), written(direct_out));
                    if expected != got {
                        let show = |w: &[Written]| {
                            w.iter()
                                .map(|(t, k, v, h)| {
                                    format!(
                                        "{t} key={:?} value={:?} headers={h:?}",
                                        k.as_deref().map(String::from_utf8_lossy),
                                        v.as_deref().map(String::from_utf8_lossy)
                                    )
                                })
                                .collect::<Vec<_>>()
                                .join("\n  ")
                        };
                        panic!(
                            "{chain_toml}\nchange {:?} (tombstones {tombstones}, unavailable_columns {unavailable_columns})\nchain:\n  {}\ndirect:\n  {}",
                            change.kind,
                            show(&expected),
                            show(&got)
                        );
                    }
                    compared += got.len();
                }
            }
        }
    }
    compared
}

const MODES: [&str; 5] = [
    "drop",
    "tombstone",
    "rewrite",
    "rewrite-with-tombstone",
    "delete-to-tombstone",
];

#[test]
fn the_direct_path_writes_what_the_chain_makes_of_the_envelope_in_every_delete_mode() {
    for mode in MODES {
        let compared = compare(&format!(
            "[transforms]\nchain = [\"unwrap\"]\n[transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n\"delete.tombstone.handling.mode\" = \"{mode}\"\n"
        ));
        assert!(compared > 0, "{mode}: nothing compared");
    }
}

#[test]
fn the_direct_path_adds_every_field_of_the_event_as_the_chain_does() {
    let fields = "op,ts_ms,ts_us,ts_ns,version,connector,name,source.ts_ms,snapshot,db,sequence,\
                  source.ts_us,source.ts_ns,schema,table,txId,lsn,xmin,origin,origin_lsn,\
                  id,total_order,data_collection_order,transaction.id:tx,source.table:t";
    for mode in MODES {
        compare(&format!(
            "[transforms]\nchain = [\"unwrap\", \"route\", \"route2\"]\n\
             [transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n\
             \"delete.tombstone.handling.mode\" = \"{mode}\"\n\"add.fields\" = \"{fields}\"\n\
             \"add.fields.prefix\" = \"m_\"\n\
             [transforms.route]\ntype = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
             regex = '([^.]+)\\.([^.]+)\\.([^.]+)'\nreplacement = \"$1.routed_$3\"\n\
             [transforms.route2]\ntype = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
             regex = '(.*)users'\nreplacement = \"$1people\"\n"
        ));
    }
}

#[test]
fn the_benchmarks_chain_takes_the_direct_path() {
    let chain = chain(
        "[transforms]\nchain = [\"unwrap\", \"route\"]\n\
         [transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n\
         \"add.fields\" = \"op,table,lsn\"\n\
         [transforms.route]\ntype = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
         regex = '([^.]+)\\.([^.]+)\\.([^.]+)'\nreplacement = \"$1.routed_$3\"\n",
    );
    let direct = Direct::of(&chain).unwrap();
    assert!(supports(&direct, &EventOptions::default()));
    let change = &changes(true)[0];
    let mut out = Vec::new();
    encode_unwrapped(
        change,
        &EncodeOptions {
            tombstones: true,
            events: EventOptions::default(),
            now_unix_nanos: 1,
        },
        &identity(),
        &direct,
        &mut out,
    );
    assert_eq!(&*out[0].topic, "app\"x.routed_users");
    assert_eq!(
        String::from_utf8(out[0].value.clone().unwrap()).unwrap(),
        r#"{"id":1,"name":"ann \"a\"","bio":null,"__op":"c","__table":"users","__lsn":128}"#
    );
}

#[test]
fn chains_the_direct_path_cannot_write_take_the_chain() {
    let unwrap = "[transforms.unwrap]\ntype = \"io.debezium.transforms.ExtractNewRecordState\"\n";
    let refused = |toml_text: &str, events: &EventOptions| {
        let chain = chain(toml_text);
        Direct::of(&chain).is_none_or(|d| !supports(&d, events))
    };
    let plain = EventOptions::default();
    // Added headers, a field routed by, a predicate, another transform, a field the event
    // does not hold as such: the chain.
    assert!(refused(
        &format!("[transforms]\nchain = [\"unwrap\"]\n{unwrap}\"add.headers\" = \"op\"\n"),
        &plain
    ));
    assert!(refused(
        &format!("[transforms]\nchain = [\"unwrap\"]\n{unwrap}\"route.by.field\" = \"name\"\n"),
        &plain
    ));
    assert!(refused(
        &format!(
            "[transforms]\nchain = [\"unwrap\"]\n{unwrap}predicate = \"p\"\n\
             [predicates.p]\ntype = \"TopicNameMatches\"\npattern = \".*\"\n"
        ),
        &plain
    ));
    assert!(refused(
        &format!(
            "[transforms]\nchain = [\"unwrap\", \"f\"]\n{unwrap}\
             [transforms.f]\ntype = \"org.apache.kafka.connect.transforms.Flatten$Value\"\n"
        ),
        &plain
    ));
    assert!(refused(
        &format!("[transforms]\nchain = [\"unwrap\"]\n{unwrap}\"add.fields\" = \"before\"\n"),
        &plain
    ));
    assert!(refused(
        &format!("[transforms]\nchain = [\"unwrap\"]\n{unwrap}\"add.fields\" = \"source.gtid\"\n"),
        &plain
    ));
    // Schemas in the records: the chain.
    let with_schemas = EventOptions {
        format: Some(EventFormat::JsonWithSchemas),
        ..EventOptions::default()
    };
    assert!(refused(
        &format!("[transforms]\nchain = [\"unwrap\"]\n{unwrap}"),
        &with_schemas
    ));
    assert!(!refused(
        &format!("[transforms]\nchain = [\"unwrap\"]\n{unwrap}"),
        &plain
    ));
}

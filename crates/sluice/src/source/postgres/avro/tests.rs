//! Direct Avro against the JSON event converted, on every kind of change.

use super::super::encode::{
    ChangeKind, ColumnTreatment, EncodeOptions, RelationInfo, RowChange, SourceIdentity,
    encode_change,
};
use super::super::pgoutput::{Datum, ReplicaIdentity, TupleData};
use super::super::schema::{ColumnCatalog, render};
use crate::event::schema::RegisteredIds;
use crate::event::{EventFormat, EventOptions};
use crate::event::{SnapshotMarker, TransactionOrder};
use crate::kafka::OutRecord;
use crate::runtime::metrics::TableMetrics;
use bytes::Bytes;
use sluice_engine::Lsn;
use std::sync::Arc;

/// A column: name, type OID, type modifier, NOT NULL.
type Column = (&'static str, u32, i32, bool);

fn text(s: &str) -> Datum {
    Datum::Text(Bytes::copy_from_slice(s.as_bytes()))
}

/// A relation of `columns` (`(name, type oid, modifier, not null)`; the first is the key)
/// with its schemas rendered under `events` and registered as ids 7 (key) and 8 (value).
fn relation(columns: &[(&str, u32, i32, bool)], events: &EventOptions) -> Arc<RelationInfo> {
    let mut rel = RelationInfo::new(
        &SourceIdentity {
            server_name: "bench".into(),
            database: "db".into(),
            registry: None,
        },
        "public",
        "t",
        columns
            .iter()
            .map(|(name, oid, modifier, _)| ((*name).to_owned(), *oid, *modifier))
            .collect(),
        &[columns[0].0.to_owned()],
        ReplicaIdentity::Default,
        Arc::new(TableMetrics::new("public.t")),
    );
    let catalog: Vec<ColumnCatalog> = columns
        .iter()
        .map(|(name, oid, modifier, not_null)| ColumnCatalog {
            name: (*name).to_owned(),
            not_null: *not_null,
            base_oid: *oid,
            base_modifier: *modifier,
            type_type: 'b',
            ..ColumnCatalog::default()
        })
        .collect();
    rel.mark_not_null(&catalog);
    let mut schemas = render(&rel, &catalog, events);
    schemas.registered = Some(RegisteredIds {
        key: Some(7),
        value: 8,
    });
    rel.set_schemas(schemas);
    Arc::new(rel)
}

fn options(format: EventFormat, events: EventOptions) -> EncodeOptions {
    EncodeOptions {
        tombstones: true,
        events: EventOptions {
            format: Some(format),
            ..events
        },
        now_unix_nanos: 1_700_000_000_123_456_789,
    }
}

fn insert(rel: &Arc<RelationInfo>, i: u64, row: Vec<Datum>) -> RowChange {
    RowChange {
        relation: Arc::clone(rel),
        kind: ChangeKind::Insert {
            new: TupleData(row),
        },
        commit_lsn: Lsn(0x1000_0000 + i * 200),
        lsn: Lsn(0x1000_0000 + i * 200),
        tx_index: i as u32,
        xid: 77,
        commit_unix_micros: 1_700_000_000_123_456,
        last_commit_end: Some(Lsn(0x1000_0000)),
        size_hint: 1,
        transaction: None,
    }
}

/// Converts a JSON-encoded record as the Avro path did before writing directly: the
/// oracle of the direct writer.
fn converted(rel: &RelationInfo, record: &OutRecord) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let schemas = rel.schemas.as_ref().unwrap();
    let key = record
        .key
        .as_ref()
        .map(|key| crate::event::avro::to_wire(&rel.name, schemas.key.as_ref().unwrap(), 7, key));
    let value = record
        .value
        .as_ref()
        .map(|value| crate::event::avro::to_wire(&rel.name, &schemas.envelope, 8, value));
    (key, value)
}

const TYPES: &[(&str, u32, i32, bool)] = &[
    ("id", 20, -1, true),
    ("i4", 23, -1, true),
    ("i2", 21, -1, false),
    ("note", 25, -1, true),
    ("label", 1043, 4 + 20, false),
    ("flag", 16, -1, false),
    ("amount", 1700, (10 << 16) + 2 + 4, true),
    ("at", 1184, -1, false),
    ("day", 1082, -1, true),
    ("raw", 17, -1, false),
    ("doc", 3802, -1, false),
    ("uid", 2950, -1, false),
    ("tags", 1009, -1, false),
    ("ratio", 701, -1, false),
    ("secret", 25, -1, false),
    ("hashed", 25, -1, false),
    ("gone", 25, -1, false),
];

fn full_row(i: i64) -> Vec<Datum> {
    vec![
        text(&i.to_string()),
        text("-2147483648"),
        text("32767"),
        text("tab\there \"quoted\" \u{e9}\u{1F600}"),
        text("short"),
        text(if i % 2 == 0 { "t" } else { "f" }),
        text("-1234.56"),
        text("2020-04-01 11:51:02.123456+00"),
        text("2020-04-01"),
        text("\\x00ff10"),
        text(r#"{"a": [1, 2]}"#),
        text("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"),
        text(r#"{a,"b c",NULL}"#),
        text("NaN"),
        text("hidden"),
        text("digest me"),
        text("excluded"),
    ]
}

/// The direct writer writes the bytes of converting the JSON event, for every kind of
/// change, nulls, NOT NULL columns without a value, TOASTed values, column rules,
/// transaction blocks, a default (a `[T, "null"]` union) and odd texts that fall back to
/// the JSON writer.
#[test]
fn direct_avro_is_the_converted_json() {
    for unavailable_columns in [false, true] {
        let events = EventOptions {
            format: Some(EventFormat::Avro),
            unavailable_columns,
            ..EventOptions::default()
        };
        let mut rel = RelationInfo::new(
            &SourceIdentity {
                server_name: "app".into(),
                database: "db".into(),
                registry: None,
            },
            "public",
            "all_types",
            TYPES
                .iter()
                .map(|(name, oid, modifier, _)| ((*name).to_owned(), *oid, *modifier))
                .collect(),
            &["id".to_owned(), "i4".to_owned()],
            ReplicaIdentity::Default,
            Arc::new(TableMetrics::new("public.all_types")),
        );
        let catalog: Vec<ColumnCatalog> = TYPES
            .iter()
            .map(|(name, oid, modifier, not_null)| ColumnCatalog {
                name: (*name).to_owned(),
                not_null: *not_null,
                default: (*name == "label").then(|| "'n/a'::character varying".into()),
                base_oid: *oid,
                base_modifier: *modifier,
                type_type: 'b',
                ..ColumnCatalog::default()
            })
            .collect();
        rel.mark_not_null(&catalog);
        for column in &mut rel.columns {
            column.treatment = match column.name.as_str() {
                "secret" => ColumnTreatment::Mask,
                "hashed" => ColumnTreatment::Hash,
                "gone" => ColumnTreatment::Exclude,
                _ => ColumnTreatment::Keep,
            };
        }
        let mut schemas = render(&rel, &catalog, &events);
        schemas.registered = Some(RegisteredIds {
            key: Some(7),
            value: 8,
        });
        rel.set_schemas(schemas);
        assert!(rel.avro.is_some(), "the layout is made");
        let rel = Arc::new(rel);
        let mut nulls = vec![Datum::Null; TYPES.len()];
        nulls[0] = text("5");
        nulls[1] = text("6");
        let mut toasted = full_row(3);
        toasted[3] = Datum::UnchangedToast;
        toasted[12] = Datum::UnchangedToast;
        let mut odd = full_row(4);
        // Text that is not UTF-8 (kept as its lossy text), a binary datum.
        odd[3] = Datum::Text(Bytes::from_static(b"a\xff\xfeb"));
        odd[4] = Datum::Binary(Bytes::from_static(b"\x01\x02"));
        let key_only = TupleData(vec![text("8"), text("9")]);
        let order = TransactionOrder {
            xid: 77,
            total_order: 3,
            data_collection_order: 2,
        };
        let kinds = vec![
            ChangeKind::Insert {
                new: TupleData(full_row(1)),
            },
            ChangeKind::Insert {
                new: TupleData(nulls),
            },
            ChangeKind::Insert {
                new: TupleData(odd),
            },
            ChangeKind::Update {
                old: None,
                old_is_key_only: false,
                new: TupleData(toasted.clone()),
                key_changed: false,
            },
            ChangeKind::Update {
                old: Some(TupleData(full_row(3))),
                old_is_key_only: false,
                new: TupleData(toasted),
                key_changed: false,
            },
            ChangeKind::Update {
                old: Some(key_only.clone()),
                old_is_key_only: true,
                new: TupleData(full_row(9)),
                key_changed: true,
            },
            ChangeKind::Delete {
                old: key_only,
                old_is_key_only: true,
            },
            ChangeKind::Delete {
                old: TupleData(full_row(2)),
                old_is_key_only: false,
            },
            ChangeKind::Truncate,
            ChangeKind::Read {
                row: TupleData(full_row(6)),
                marker: SnapshotMarker::Last,
            },
        ];
        for (n, kind) in kinds.into_iter().enumerate() {
            let mut change = insert(&rel, n as u64, Vec::new());
            change.kind = kind;
            change.transaction = (n % 2 == 0).then_some(order);
            change.last_commit_end = (n % 3 != 0).then_some(Lsn(99));
            let mut direct = Vec::new();
            encode_change(
                &change,
                &options(EventFormat::Avro, events.clone()),
                &mut direct,
            );
            let mut json = Vec::new();
            let json_events = EventOptions {
                format: Some(EventFormat::Json),
                ..events.clone()
            };
            encode_change(&change, &options(EventFormat::Json, json_events), &mut json);
            assert_eq!(direct.len(), json.len());
            for (direct, json) in direct.iter().zip(&json) {
                let (key, value) = converted(&rel, json);
                assert_eq!(direct.key, key, "change {n}: key");
                assert_eq!(
                    direct.value,
                    value,
                    "change {n} ({unavailable_columns}): value of {:?}",
                    json.value
                        .as_ref()
                        .map(|v| String::from_utf8_lossy(v).into_owned())
                );
            }
        }
    }
}

/// JSON vs Avro: the encoder's time per change (medians of rounds) and bytes per record, on
/// bench/run's backlog rows (`id bigint PRIMARY KEY, payload text` of ~200 bytes) and on a
/// row of mixed types. A debug build's figures are what `cargo test` gives; compare the
/// ratio. One JSON line per measurement, then the ratio:
/// `cargo test -p sluice --lib -- --ignored avro_encode_cost --nocapture`.
#[test]
#[ignore = "a measurement, run on demand"]
fn avro_encode_cost() {
    const ROUNDS: usize = 7;
    let changes = if cfg!(debug_assertions) {
        20_000
    } else {
        200_000
    };
    let cases: [(&str, &[Column]); 2] = [
        (
            "backlog",
            &[("id", 20, -1, true), ("payload", 25, -1, false)],
        ),
        (
            "mixed",
            &[
                ("id", 20, -1, true),
                ("v", 23, -1, true),
                ("payload", 25, -1, false),
                ("amount", 1700, (10 << 16) + 2 + 4, false),
                ("at", 1184, -1, false),
                ("flag", 16, -1, false),
            ],
        ),
    ];
    for (case, columns) in cases {
        // Both formats' rows first, then rounds alternating the formats (a shared machine's
        // noise falls on both).
        let prepared: Vec<(EventFormat, EncodeOptions, Vec<RowChange>)> =
            [EventFormat::Json, EventFormat::Avro]
                .into_iter()
                .map(|format| {
                    let options = options(format, EventOptions::default());
                    let rel = relation(columns, &options.events);
                    let rows = (0..changes as u64)
                        .map(|i| {
                            let payload = format!("{i:0200}");
                            let row = match case {
                                "backlog" => vec![text(&i.to_string()), text(&payload)],
                                _ => vec![
                                    text(&i.to_string()),
                                    text("0"),
                                    text(&payload),
                                    text("1234.56"),
                                    text("2020-04-01 11:51:02.123456+00"),
                                    text("t"),
                                ],
                            };
                            insert(&rel, i, row)
                        })
                        .collect();
                    (format, options, rows)
                })
                .collect();
        let mut times = vec![Vec::with_capacity(ROUNDS); prepared.len()];
        let mut bytes = vec![0; prepared.len()];
        for _ in 0..ROUNDS {
            for (side, (_, options, rows)) in prepared.iter().enumerate() {
                let mut out = Vec::with_capacity(rows.len());
                let started = std::time::Instant::now();
                for change in rows {
                    encode_change(change, options, &mut out);
                }
                times[side].push(started.elapsed().as_secs_f64() * 1e9 / rows.len() as f64);
                bytes[side] = out
                    .iter()
                    .map(|r| {
                        r.value.as_ref().map_or(0, Vec::len) + r.key.as_ref().map_or(0, Vec::len)
                    })
                    .sum::<usize>()
                    / out.len();
            }
        }
        let mut medians = Vec::new();
        for (side, (format, _, rows)) in prepared.iter().enumerate() {
            let times = &mut times[side];
            times.sort_by(f64::total_cmp);
            let median = times[ROUNDS / 2];
            medians.push(median);
            println!(
                "{}",
                serde_json::json!({
                    "measure": "avro_encode_cost", "rows": case,
                    "format": format!("{format:?}").to_lowercase(),
                    "build": if cfg!(debug_assertions) { "debug" } else { "release" },
                    "changes": rows.len(), "rounds": ROUNDS,
                    "ns_per_change_median": median.round(),
                    "ns_per_change_min": times[0].round(),
                    "bytes_per_record": bytes[side],
                })
            );
        }
        println!(
            "{}",
            serde_json::json!({
                "measure": "avro_encode_cost", "rows": case,
                "avro_over_json": (medians[1] / medians[0] * 1000.0).round() / 1000.0,
            })
        );
        assert!(
            medians[1] <= medians[0],
            "{case}: Avro must not cost more than JSON ({:.0} vs {:.0} ns per change)",
            medians[1],
            medians[0]
        );
    }
}

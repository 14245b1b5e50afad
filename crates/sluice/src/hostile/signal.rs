//! Incremental snapshot signal rows (a signal table's `id`, `type`, `data`, written by anyone
//! who may insert there; both sources read them with [`Signal::parse`]): any row is a request,
//! ignored, or refused with a reason; a request's tables and filters are the row's.

use proptest::prelude::*;

use super::{json_like, nested_arrays, nested_objects, on_small_stack};
use crate::source::incremental::Signal;

fn kind() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "execute-snapshot",
            "stop-snapshot",
            "log",
            "pause-snapshot",
            ""
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ]
}

fn table() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{1,6}\\.[a-z_]{1,6}",
        "[^.]{1,6}\\.[^.]{1,6}",
        any::<String>(),
    ]
}

fn data() -> impl Strategy<Value = String> {
    let object = (
        proptest::collection::vec(table(), 0..4),
        proptest::collection::vec((table(), any::<String>()), 0..3),
        prop_oneof![
            Just(None),
            Just(Some("incremental")),
            Just(Some("blocking"))
        ],
        any::<bool>(),
    )
        .prop_map(|(tables, conditions, kind, tombstones)| {
            let conditions: Vec<_> = conditions
                .into_iter()
                .map(|(t, f)| serde_json::json!({"data-collection": t, "filter": f}))
                .collect();
            let mut data = serde_json::json!({
                "data-collections": tables,
                "additional-conditions": conditions,
                "tombstones": tombstones,
            });
            if let Some(kind) = kind {
                data["type"] = kind.into();
            }
            data.to_string()
        });
    prop_oneof![3 => object, 2 => json_like(), 1 => any::<String>()]
}

proptest! {
    #![proptest_config(super::config())]

    /// Any row: a request, ignored, or refused.
    #[test]
    fn signal_rows_parse_or_fail(id in any::<String>(), kind in kind(), data in data()) {
        let _ = Signal::parse(&id, &kind, &data);
    }

    /// An execute-snapshot row of `schema.table` names and filters is the request for them,
    /// each table with its filter.
    #[test]
    fn signal_requests_round_trip(
        id in any::<String>(),
        // Conditions any filter check accepts (the property is about the row, not SQL).
        tables in proptest::collection::btree_map("[a-z_]{1,6}\\.[a-z_]{1,6}", proptest::option::of("[a-z_]{1,6} (<|>|=) [0-9]{1,4}"), 1..4),
    ) {
        let conditions: Vec<_> = tables
            .iter()
            .filter_map(|(t, f)| f.as_ref().map(|f| serde_json::json!({"data-collection": t, "filter": f})))
            .collect();
        let names: Vec<&String> = tables.keys().collect();
        let data = serde_json::json!({"data-collections": names, "type": "incremental", "additional-conditions": conditions});
        let signal = Signal::parse(&id, "execute-snapshot", &data.to_string());
        let expected = Signal::Snapshot {
            id: id.clone(),
            tables: tables.into_iter().collect(),
            tombstones: false,
        };
        prop_assert_eq!(signal, Ok(Some(expected)));
    }
}

/// A signal's data nested 100,000 levels deep: refused, on a small stack.
#[test]
fn deeply_nested_signal_data_is_refused() {
    on_small_stack(|| {
        for data in [
            nested_arrays(100_000, ""),
            nested_objects(100_000, "1"),
            format!("{{\"data-collections\":{}}}", nested_arrays(100_000, "")),
        ] {
            assert!(Signal::parse("1", "execute-snapshot", &data).is_err());
        }
    });
}

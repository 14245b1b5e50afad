//! The keys of Debezium's SchemaChangeEventFilter and PartitionRouting, read by Debezium's
//! names (the rest of `[transforms]` is in [`super::config`]).

use std::collections::BTreeMap;

use super::Transform;
use super::partition::{HashFunction, PartitionRouting};
use super::schema_change::{SchemaChangeEventFilter, TYPES};
use crate::error::ConfigIssue;

/// The transforms of this file by their full names.
pub const DEBEZIUM_TRANSFORMS: &[&str] = &[
    "io.debezium.transforms.SchemaChangeEventFilter",
    "io.debezium.transforms.partitions.PartitionRouting",
];

/// The transform `short` (a short name of [`DEBEZIUM_TRANSFORMS`]) configured by `values`, and
/// the keys it takes; `None` when `short` is not one of them.
pub fn debezium_transform(
    short: &str,
    values: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<(Option<Transform>, &'static [&'static str])> {
    const LIST: &str = "schema.change.event.exclude.list";
    match short {
        "SchemaChangeEventFilter" => {
            let mut excluded = Vec::new();
            let mut bad = Vec::new();
            // Debezium splits on commas and reads each trimmed name as the enum's (an empty
            // name included, which it refuses).
            for name in values.get(LIST).map(|l| l.split(',')).into_iter().flatten() {
                match TYPES.iter().find(|t| **t == name.trim()) {
                    Some(t) => excluded.push(*t),
                    None => bad.push(name.trim().to_owned()),
                }
            }
            if values.get(LIST).is_none() {
                issues.push(ConfigIssue {
                    key: key(LIST),
                    problem: format!(
                        "is missing: expected the schema change types to drop, separated by commas ({})",
                        TYPES.join(", ")
                    ),
                });
            } else if !bad.is_empty() {
                issues.push(ConfigIssue {
                    key: key(LIST),
                    problem: format!(
                        "{:?}: expected schema change types separated by commas, each one of {}",
                        bad.join(","),
                        TYPES.join(", ")
                    ),
                });
            }
            Some((
                Some(Transform::SchemaChangeEventFilter(
                    SchemaChangeEventFilter { excluded },
                )),
                &[LIST],
            ))
        }
        "PartitionRouting" => {
            const KEYS: &[&str] = &[
                "partition.payload.fields",
                "partition.topic.num",
                "partition.hash.function",
            ];
            let mut issue = |k: &str, problem: String| {
                issues.push(ConfigIssue {
                    key: key(k),
                    problem,
                });
            };
            let fields: Vec<Vec<String>> = match values.get(KEYS[0]) {
                None => {
                    issue(KEYS[0], "is missing: expected the envelope's fields to hash, separated by commas (after.id, source.table, change.id: the after row or a delete's before)".into());
                    Vec::new()
                }
                Some(list) => {
                    let fields: Vec<&str> = list.split(',').map(str::trim).collect();
                    if fields.iter().any(|f| f.is_empty()) {
                        issue(
                            KEYS[0],
                            format!(
                                "{list:?}: an empty field name: expected field paths separated by commas"
                            ),
                        );
                    }
                    fields
                        .iter()
                        .map(|f| f.split('.').map(|p| p.trim().to_owned()).collect())
                        .collect()
                }
            };
            let partitions = match values.get(KEYS[1]).map(|n| n.trim().parse::<i32>()) {
                Some(Ok(n)) if n > 0 => Some(n),
                Some(_) => {
                    issue(
                        KEYS[1],
                        format!(
                            "{:?}: expected a positive integer, the topic's partition count",
                            values[KEYS[1]]
                        ),
                    );
                    None
                }
                None => {
                    issue(
                        KEYS[1],
                        "is missing: expected the topic's partition count (a positive integer)"
                            .into(),
                    );
                    None
                }
            };
            let hash = match values
                .get(KEYS[2])
                .map(|h| h.trim().to_ascii_lowercase())
                .as_deref()
            {
                None | Some("java") => Some(HashFunction::Java),
                Some("murmur") => Some(HashFunction::Murmur),
                Some(other) => {
                    issue(KEYS[2], format!("{other:?}: expected java or murmur"));
                    None
                }
            };
            let built = match (partitions, hash) {
                (Some(partitions), Some(hash)) => {
                    Some(Transform::PartitionRouting(PartitionRouting {
                        fields,
                        partitions,
                        hash,
                    }))
                }
                _ => None,
            };
            Some((built, KEYS))
        }
        _ => None,
    }
}

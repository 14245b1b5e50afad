//! The keys of Debezium's SchemaChangeEventFilter, read by Debezium's names (the rest of
//! `[transforms]` is in [`super::config`]).

use std::collections::BTreeMap;

use super::Transform;
use super::schema_change::{SchemaChangeEventFilter, TYPES};
use crate::error::ConfigIssue;

/// The transforms of this file by their full names.
pub const DEBEZIUM_TRANSFORMS: &[&str] = &["io.debezium.transforms.SchemaChangeEventFilter"];

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
        _ => None,
    }
}

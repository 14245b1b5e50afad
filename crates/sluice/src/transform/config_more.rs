//! The keys of ByLogicalTableRouter, TimestampConverter, InsertField and MaskField, read by
//! Connect's and Debezium's names (the rest of `[transforms]` is in [`super::config`]).

use std::collections::BTreeMap;

use super::Transform;
use super::field::Part;
use super::insert::{InsertField, Spec};
use super::javadate::JavaFormat;
use super::logical::{DEFAULT_KEY_FIELD, LogicalTableRouter};
use super::mask::MaskField;
use super::router::RegexRouter;
use super::timestamp::{Kind, Precision, TimestampConverter};
use crate::error::ConfigIssue;

/// The transforms of this file by their full names.
pub const MORE_TRANSFORMS: &[&str] = &[
    "io.debezium.transforms.ByLogicalTableRouter",
    "org.apache.kafka.connect.transforms.TimestampConverter$Key",
    "org.apache.kafka.connect.transforms.TimestampConverter$Value",
    "org.apache.kafka.connect.transforms.InsertField$Key",
    "org.apache.kafka.connect.transforms.InsertField$Value",
    "org.apache.kafka.connect.transforms.MaskField$Key",
    "org.apache.kafka.connect.transforms.MaskField$Value",
];

const LOGICAL_KEYS: &[&str] = &[
    "topic.regex",
    "topic.replacement",
    "key.enforce.uniqueness",
    "key.field.name",
    "key.field.regex",
    "key.field.replacement",
];
const TIMESTAMP_KEYS: &[&str] = &[
    "field",
    "target.type",
    "format",
    "unix.precision",
    "replace.null.with.default",
];
const INSERT_KEYS: &[&str] = &[
    "topic.field",
    "partition.field",
    "offset.field",
    "timestamp.field",
    "static.field",
    "static.value",
    "replace.null.with.default",
];
const MASK_KEYS: &[&str] = &["fields", "replacement", "replace.null.with.default"];

/// The transform `kind` (short name) of this file configured by `values` and the keys it
/// takes; `None` when `kind` is not one of them.
pub fn transform(
    short: &str,
    values: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<(Option<Transform>, &'static [&'static str])> {
    let get = |k: &str| values.get(k).map(String::as_str);
    let mut issue = |k: &str, problem: String| {
        issues.push(ConfigIssue {
            key: key(k),
            problem,
        });
    };
    let part = if short.ends_with("$Key") {
        Part::Key
    } else {
        Part::Value
    };
    // Kafka's transforms replace a null field with its default by default; sluice's events
    // carry no column defaults to replace nulls with, so only the default is taken.
    if let Some(v) = get("replace.null.with.default")
        && v != "true"
    {
        issue(
            "replace.null.with.default",
            format!("{v:?}: only true (the default) is applied by sluice: remove it"),
        );
    }
    let built = match short {
        "ByLogicalTableRouter" => {
            let (Some(topic_regex), Some(topic_replacement)) =
                (get("topic.regex"), get("topic.replacement"))
            else {
                for k in ["topic.regex", "topic.replacement"] {
                    if get(k).is_none() {
                        issue(k, "is missing: ByLogicalTableRouter needs topic.regex (a Java regular expression the whole topic must match) and topic.replacement (the logical table's topic, $1… for the groups)".into());
                    }
                }
                return Some((None, LOGICAL_KEYS));
            };
            let topic = match RegexRouter::new(topic_regex, topic_replacement) {
                Ok(r) => Some(r),
                Err(e) => {
                    issue("topic.regex", e);
                    None
                }
            };
            let enforce_uniqueness = match get("key.enforce.uniqueness").unwrap_or("true") {
                "true" => true,
                "false" => false,
                other => {
                    issue(
                        "key.enforce.uniqueness",
                        format!("{other:?}: expected true or false"),
                    );
                    true
                }
            };
            let key_value = match get("key.field.regex")
                .map(str::trim)
                .filter(|r| !r.is_empty())
            {
                None => Some(None),
                Some(regex) => match get("key.field.replacement").map(str::trim) {
                    None | Some("") => {
                        issue(
                            "key.field.replacement",
                            "key.field.replacement must be non-empty if key.field.regex is set"
                                .into(),
                        );
                        None
                    }
                    Some(replacement) => match RegexRouter::new(regex, replacement) {
                        Ok(r) => Some(Some(r)),
                        Err(e) => {
                            issue("key.field.regex", e);
                            None
                        }
                    },
                },
            };
            let built = match (topic, key_value) {
                (Some(topic), Some(key_value)) => {
                    Some(Transform::LogicalTableRouter(LogicalTableRouter {
                        topic,
                        enforce_uniqueness,
                        key_field: get("key.field.name")
                            .unwrap_or(DEFAULT_KEY_FIELD)
                            .to_owned(),
                        key_value,
                    }))
                }
                _ => None,
            };
            (built, LOGICAL_KEYS)
        }
        "TimestampConverter$Key" | "TimestampConverter$Value" => {
            let expected = Kind::NAMES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ");
            let target = match get("target.type") {
                None => {
                    issue(
                        "target.type",
                        format!("is missing: expected one of {expected}"),
                    );
                    None
                }
                Some(t) => match Kind::NAMES.iter().find(|(n, _)| *n == t) {
                    Some((_, k)) => Some(*k),
                    None => {
                        issue("target.type", format!("{t:?}: expected one of {expected}"));
                        None
                    }
                },
            };
            let format = match get("format").filter(|f| !f.trim().is_empty()) {
                None => {
                    if target == Some(Kind::String) {
                        issue(
                            "format",
                            "is missing: target.type = \"string\" needs a SimpleDateFormat pattern, e.g. \"yyyy-MM-dd HH:mm:ss.SSS\"".into(),
                        );
                    }
                    Some(None)
                }
                Some(f) => match JavaFormat::new(f) {
                    Ok(f) => Some(Some(f)),
                    Err(e) => {
                        issue("format", e);
                        None
                    }
                },
            };
            let precision_names = Precision::NAMES
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", ");
            let precision = match get("unix.precision") {
                None => Some(Precision::Millis),
                Some(p) => match Precision::NAMES.iter().find(|(n, _)| *n == p) {
                    Some((_, p)) => Some(*p),
                    None => {
                        issue(
                            "unix.precision",
                            format!("{p:?}: expected one of {precision_names}"),
                        );
                        None
                    }
                },
            };
            let built = match (target, format, precision) {
                (Some(target), Some(format), Some(precision)) => {
                    Some(Transform::TimestampConverter(TimestampConverter {
                        part,
                        field: get("field").filter(|f| !f.is_empty()).map(str::to_owned),
                        target,
                        format,
                        precision,
                    }))
                }
                _ => None,
            };
            (built, TIMESTAMP_KEYS)
        }
        "InsertField$Key" | "InsertField$Value" => {
            for k in ["offset.field", "timestamp.field"] {
                if get(k).is_some_and(|v| !v.trim().is_empty()) {
                    issue(
                        k,
                        if k == "offset.field" {
                            "is only for sink connectors (Connect fails it on a source's records): remove it".into()
                        } else {
                            "not yet applied by sluice (its records get their timestamp from the producer): remove it".into()
                        },
                    );
                }
            }
            let topic = get("topic.field").and_then(Spec::parse);
            let partition = get("partition.field").and_then(Spec::parse);
            let fixed = match (
                get("static.field").and_then(Spec::parse),
                get("static.value"),
            ) {
                (Some(spec), Some(value)) => Some((spec, value.to_owned())),
                (Some(_), None) => {
                    issue(
                        "static.value",
                        "is missing: static.field needs the text it holds".into(),
                    );
                    None
                }
                (None, _) => None,
            };
            if topic.is_none()
                && partition.is_none()
                && fixed.is_none()
                && get("static.field").is_none()
            {
                issue(
                    "topic.field",
                    "no field insertion configured: expected topic.field, partition.field or static.field (with static.value)".into(),
                );
            }
            (
                Some(Transform::InsertField(InsertField {
                    part,
                    topic,
                    partition,
                    fixed,
                })),
                INSERT_KEYS,
            )
        }
        "MaskField$Key" | "MaskField$Value" => {
            let fields = split_list(get("fields").unwrap_or_default());
            if fields.is_empty() {
                issue(
                    "fields",
                    "is missing: expected the fields to mask, separated by commas".into(),
                );
            }
            let replacement = match get("replacement") {
                Some("") => {
                    issue(
                        "replacement",
                        "is empty: expected a non-empty replacement or none (the types' zero values)".into(),
                    );
                    None
                }
                other => other.map(str::to_owned),
            };
            (
                Some(Transform::MaskField(MaskField {
                    part,
                    fields,
                    replacement,
                })),
                MASK_KEYS,
            )
        }
        _ => return None,
    };
    Some(built)
}

/// A comma-separated list, trimmed, empty entries left out.
pub(super) fn split_list(list: &str) -> Vec<String> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

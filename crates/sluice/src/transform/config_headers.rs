//! The keys of InsertHeader, DropHeaders, HeaderFrom, ExtractField and HoistField, read by
//! Connect's names (apart from [`super::headers`] and [`super::shape`], which do not know the
//! [`Transform`] they are wrapped in).

use std::collections::BTreeMap;

use super::Transform;
use super::field::Part;
use super::headers::{DropHeaders, HeaderFrom, HeaderToValue, InsertHeader};
use super::shape::{ExtractField, HoistField};
use crate::error::ConfigIssue;

/// The header transforms by their full names.
pub const HEADER_TRANSFORMS: &[&str] = &[
    "org.apache.kafka.connect.transforms.InsertHeader",
    "org.apache.kafka.connect.transforms.DropHeaders",
    "org.apache.kafka.connect.transforms.HeaderFrom$Key",
    "org.apache.kafka.connect.transforms.HeaderFrom$Value",
    "io.debezium.transforms.HeaderToValue",
];

/// ExtractField and HoistField by their full names.
pub const SHAPE_TRANSFORMS: &[&str] = &[
    "org.apache.kafka.connect.transforms.ExtractField$Key",
    "org.apache.kafka.connect.transforms.ExtractField$Value",
    "org.apache.kafka.connect.transforms.HoistField$Key",
    "org.apache.kafka.connect.transforms.HoistField$Value",
];

/// The transform `short` (a short name of [`HEADER_TRANSFORMS`]) configured by `values`, and
/// the keys it takes; `None` when `short` is not one of them.
pub fn header_transform(
    short: &str,
    values: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<(Option<Transform>, &'static [&'static str])> {
    let get = |k: &str| values.get(k).map(String::as_str);
    let list = |k: &str| {
        get(k)
            .map(super::config_more::split_list)
            .unwrap_or_default()
    };
    let mut issue = |k: &str, problem: String| {
        issues.push(ConfigIssue {
            key: key(k),
            problem,
        });
    };
    Some(match short {
        "InsertHeader" => {
            let keys: &[&str] = &["header", "value.literal"];
            let (Some(header), Some(value)) = (get("header"), get("value.literal")) else {
                for k in keys.iter().filter(|k| get(k).is_none()) {
                    issue(k, "is missing: InsertHeader needs header (the header's name) and value.literal (its value)".into());
                }
                return Some((None, keys));
            };
            (
                Some(Transform::InsertHeader(InsertHeader {
                    header: header.to_owned(),
                    value: value.to_owned(),
                })),
                keys,
            )
        }
        "DropHeaders" => {
            let headers = list("headers");
            if headers.is_empty() {
                issue(
                    "headers",
                    "is missing: expected the names of the headers to drop, separated by commas"
                        .into(),
                );
            }
            (
                Some(Transform::DropHeaders(DropHeaders { headers })),
                &["headers"],
            )
        }
        "HeaderFrom$Key" | "HeaderFrom$Value" => {
            let keys: &[&str] = &["fields", "headers", "operation"];
            let (fields, headers) = (list("fields"), list("headers"));
            if fields.is_empty() || headers.is_empty() {
                for k in ["fields", "headers"] {
                    if list(k).is_empty() {
                        issue(k, "is missing: HeaderFrom needs fields (the fields to copy or move) and headers (their headers' names, in the same order), separated by commas".into());
                    }
                }
                return Some((None, keys));
            }
            if fields.len() != headers.len() {
                issue(
                    "headers",
                    format!(
                        "names {} headers for {} fields: expected one header per field, in the same order",
                        headers.len(),
                        fields.len()
                    ),
                );
            }
            let remove = match get("operation") {
                Some("move") => true,
                Some("copy") => false,
                Some(other) => {
                    issue("operation", format!("{other:?}: expected move or copy"));
                    false
                }
                None => {
                    issue(
                        "operation",
                        "is missing: expected move (the fields leave the struct) or copy".into(),
                    );
                    false
                }
            };
            let part = if short.ends_with("$Key") {
                Part::Key
            } else {
                Part::Value
            };
            (
                Some(Transform::HeaderFrom(HeaderFrom {
                    part,
                    pairs: fields.into_iter().zip(headers).collect(),
                    remove,
                })),
                keys,
            )
        }
        "HeaderToValue" => {
            let keys: &[&str] = &["headers", "fields", "operation"];
            let (headers, fields) = (list("headers"), list("fields"));
            for (k, names) in [("headers", &headers), ("fields", &fields)] {
                if names.is_empty() {
                    issue(k, "is missing: HeaderToValue needs headers (the headers to copy or move) and fields (the value's fields they become, in the same order), separated by commas".into());
                } else if let Some(bad) = names.iter().find(|n| n.contains(char::is_whitespace)) {
                    issue(k, format!("{bad:?}: a name may not contain spaces"));
                }
            }
            if let Some(nested) = fields.iter().find(|f| f.contains('.')) {
                issue(
                    "fields",
                    format!(
                        "{nested:?}: a nested field (struct.field) is not yet applied by sluice: expected a top-level field name"
                    ),
                );
            }
            if !headers.is_empty() && headers.len() != fields.len() {
                issue(
                    "fields",
                    "'fields' config must have the same number of elements as 'headers' config."
                        .into(),
                );
            }
            let remove = match get("operation").map(|o| o.trim().to_ascii_lowercase()) {
                Some(o) if o == "move" => true,
                Some(o) if o == "copy" => false,
                Some(other) => {
                    issue("operation", format!("{other:?}: expected move or copy"));
                    false
                }
                None => {
                    issue(
                        "operation",
                        "is missing: expected move (the headers are removed) or copy".into(),
                    );
                    false
                }
            };
            (
                Some(Transform::HeaderToValue(HeaderToValue {
                    pairs: headers.into_iter().zip(fields).collect(),
                    remove,
                })),
                keys,
            )
        }
        _ => return None,
    })
}

/// The transform `short` (a short name of [`SHAPE_TRANSFORMS`]) configured by `values`, and
/// the keys it takes; `None` when `short` is not one of them.
pub fn shape_transform(
    short: &str,
    values: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<(Option<Transform>, &'static [&'static str])> {
    let part = if short.ends_with("$Key") {
        Part::Key
    } else {
        Part::Value
    };
    let extract = match short {
        "ExtractField$Key" | "ExtractField$Value" => true,
        "HoistField$Key" | "HoistField$Value" => false,
        _ => return None,
    };
    let keys: &[&str] = if extract {
        &["field", "field.syntax.version", "replace.null.with.default"]
    } else {
        &["field"]
    };
    if let Some(version) = values.get("field.syntax.version")
        && version != "V1"
    {
        issues.push(ConfigIssue {
            key: key("field.syntax.version"),
            problem: format!(
                "{version:?}: only V1 (a top-level field's name, the default) is applied by sluice"
            ),
        });
    }
    if let Some(v) = values.get("replace.null.with.default")
        && v != "true"
    {
        issues.push(ConfigIssue {
            key: key("replace.null.with.default"),
            problem: format!("{v:?}: only true (the default) is applied by sluice: remove it"),
        });
    }
    let Some(field) = values.get("field").filter(|f| !f.is_empty()) else {
        issues.push(ConfigIssue {
            key: key("field"),
            problem: format!(
                "is missing: expected the name of the field {}",
                if extract {
                    "to take out of the struct"
                } else {
                    "to wrap the key or value in"
                }
            ),
        });
        return Some((None, keys));
    };
    let field = field.clone();
    let transform = if extract {
        Transform::ExtractField(ExtractField { part, field })
    } else {
        Transform::HoistField(HoistField { part, field })
    };
    Some((Some(transform), keys))
}

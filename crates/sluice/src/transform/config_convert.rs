//! The keys of Cast and Flatten, read by Connect's names (the rest of `[transforms]` is in
//! [`super::config`]).

use std::collections::BTreeMap;

use super::Transform;
use super::cast::{Cast, parse_spec};
use super::field::Part;
use super::flatten::Flatten;
use crate::error::ConfigIssue;

/// The transforms of this file by their full names.
pub const CONVERT_TRANSFORMS: &[&str] = &[
    "org.apache.kafka.connect.transforms.Cast$Key",
    "org.apache.kafka.connect.transforms.Cast$Value",
    "org.apache.kafka.connect.transforms.Flatten$Key",
    "org.apache.kafka.connect.transforms.Flatten$Value",
];

/// The transform `short` (a short name of [`CONVERT_TRANSFORMS`]) configured by `values`, and
/// the keys it takes; `None` when `short` is not one of them.
pub fn convert_transform(
    short: &str,
    values: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<(Option<Transform>, &'static [&'static str])> {
    let get = |k: &str| values.get(k).map(String::as_str);
    let part = if short.ends_with("$Key") {
        Part::Key
    } else {
        Part::Value
    };
    Some(match short {
        "Cast$Key" | "Cast$Value" => {
            let spec = super::config_more::split_list(get("spec").unwrap_or_default());
            match parse_spec(&spec) {
                Ok((whole, fields)) => (
                    Some(Transform::Cast(Cast {
                        part,
                        whole,
                        fields,
                    })),
                    &["spec"],
                ),
                Err(problem) => {
                    issues.push(ConfigIssue {
                        key: key("spec"),
                        problem,
                    });
                    (None, &["spec"])
                }
            }
        }
        "Flatten$Key" | "Flatten$Value" => (
            Some(Transform::Flatten(Flatten {
                part,
                delimiter: get("delimiter").unwrap_or(".").to_owned(),
            })),
            &["delimiter"],
        ),
        _ => return None,
    })
}

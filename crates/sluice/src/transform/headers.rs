//! Kafka's header transforms: `InsertHeader`, `DropHeaders` and `HeaderFrom` (`$Key`/`$Value`).
//!
//! Headers are written as Connect's default `SimpleHeaderConverter` writes them: a string's
//! characters, a number's or a boolean's text. A null header value cannot be carried by
//! sluice's text headers and is left out (docs/transforms.md).

use std::borrow::Cow;
use std::collections::BTreeMap;

use super::field::Part;
use super::json::{Data, Members, ObjectWriter, Schema, header_text};
use super::{Record, Transform, schema};
use crate::error::ConfigIssue;

/// The transforms of this file by their full names.
pub const HEADER_TRANSFORMS: &[&str] = &[
    "org.apache.kafka.connect.transforms.InsertHeader",
    "org.apache.kafka.connect.transforms.DropHeaders",
    "org.apache.kafka.connect.transforms.HeaderFrom$Key",
    "org.apache.kafka.connect.transforms.HeaderFrom$Value",
];

/// `InsertHeader`: the header `header` with the literal `value.literal` added to every record.
#[derive(Debug)]
pub struct InsertHeader {
    /// The header's name.
    pub header: String,
    /// Its value.
    pub value: String,
}

impl InsertHeader {
    /// Applies the transform.
    pub fn apply(&self, mut record: Record) -> Record {
        record
            .headers
            .push((Cow::Owned(self.header.clone()), self.value.clone()));
        record
    }
}

/// `DropHeaders`: every header named in `headers` removed.
#[derive(Debug)]
pub struct DropHeaders {
    /// The names.
    pub headers: Vec<String>,
}

impl DropHeaders {
    /// Applies the transform.
    pub fn apply(&self, mut record: Record) -> Record {
        record
            .headers
            .retain(|(name, _)| !self.headers.iter().any(|h| h == name));
        record
    }
}

/// `HeaderFrom`: fields of the key or the value copied or moved into headers.
#[derive(Debug)]
pub struct HeaderFrom {
    /// The key or the value.
    pub part: Part,
    /// Field name → header name, in order.
    pub pairs: Vec<(String, String)>,
    /// `operation = "move"`: the fields are removed from the struct.
    pub remove: bool,
}

impl HeaderFrom {
    /// Applies the transform.
    ///
    /// # Errors
    ///
    /// A null key or value, or one that is not a struct (Connect: "Only Struct objects
    /// supported"), or a field its schema does not have.
    pub fn apply(&self, mut record: Record) -> Result<Record, String> {
        let data = match self.part {
            Part::Key => &mut record.key,
            Part::Value => &mut record.value,
        };
        let Some(text) = data.value.as_deref() else {
            return Err(format!(
                "the {} is null: HeaderFrom needs a struct (filter tombstones out first, e.g. with a RecordIsTombstone predicate)",
                part_name(self.part)
            ));
        };
        let members = Members::parse(text)?;
        let mut headers = Vec::with_capacity(self.pairs.len());
        for (field, header) in &self.pairs {
            let value = members.get(field).map(|v| v.get());
            if value.is_none() && data.schema != Schema::None {
                // Connect's records carry their schema: a field it lacks fails there too.
                return Err(format!(
                    "the {} has no field {field:?}",
                    part_name(self.part)
                ));
            }
            if let Some(text) = value.and_then(header_text) {
                headers.push((Cow::Owned(header.clone()), text));
            }
        }
        if self.remove {
            let moved = |name: &str| self.pairs.iter().any(|(f, _)| f == name);
            let mut out = ObjectWriter::new();
            for (name, value) in members.0.iter().filter(|(n, _)| !moved(n)) {
                out.member(name, value.get());
            }
            let schema = match &data.schema {
                Schema::Json(s) => {
                    let fields: Vec<String> = schema::fields(s)
                        .into_iter()
                        .zip(schema::field_names(s))
                        .filter(|(_, name)| !moved(name))
                        .map(|(f, _)| f)
                        .collect();
                    Schema::Json(schema::copied_struct(s, &fields))
                }
                other => other.clone(),
            };
            *data = Data {
                schema,
                value: Some(out.finish()),
            };
        }
        record.headers.extend(headers);
        Ok(record)
    }
}

fn part_name(part: Part) -> &'static str {
    match part {
        Part::Key => "key",
        Part::Value => "value",
    }
}

/// The transform `short` (a short name of [`HEADER_TRANSFORMS`]) configured by `values`, and
/// the keys it takes; `None` when `short` is not one of them.
pub fn configure(
    short: &str,
    values: &BTreeMap<String, String>,
    key: &dyn Fn(&str) -> String,
    issues: &mut Vec<ConfigIssue>,
) -> Option<(Option<Transform>, &'static [&'static str])> {
    let get = |k: &str| values.get(k).map(String::as_str);
    let list = |k: &str| get(k).map(super::config::split_list).unwrap_or_default();
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
        _ => return None,
    })
}

//! `[transforms]` and `[predicates]`: Kafka Connect's `transforms` / `predicates` keys in a
//! pipeline file, read by Connect's and Debezium's names, and built into a [`Chain`].
//!
//! ```toml
//! [transforms]
//! chain = ["unwrap", "route"]          # Connect's `transforms` ("unwrap,route" too)
//! [transforms.unwrap]
//! type = "io.debezium.transforms.ExtractNewRecordState"
//! "delete.tombstone.handling.mode" = "rewrite"
//! [transforms.route]
//! type = "org.apache.kafka.connect.transforms.RegexRouter"
//! regex = "([^.]+)\\.([^.]+)\\.([^.]+)"
//! replacement = "$3"
//! predicate = "isOrders"
//! [predicates.isOrders]
//! type = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
//! pattern = ".*orders"
//! ```

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use super::config_more::split_list;
use super::field::{Part, ReplaceField, ValueToKey};
use super::predicate::{Predicate, whole_match_regex};
use super::router::RegexRouter;
use super::scripting::{Kind as ScriptKind, Scripting};
use super::unwrap::{DEFAULT_PREFIX, DeleteMode, DropFields, FieldRef, Unwrap};
use super::{Chain, Step, Transform};
use crate::error::ConfigIssue;
use crate::event::{EventFormat, EventOptions};

/// `[transforms]`: `chain` and a table per transform.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct TransformsConfig(pub(super) BTreeMap<String, toml::Value>);

/// `[predicates]`: a table per predicate.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct PredicatesConfig(pub(super) BTreeMap<String, toml::Value>);

/// The transforms sluice applies, by their short names (the full class names are
/// `io.debezium.transforms.<name>` for ExtractNewRecordState and
/// `org.apache.kafka.connect.transforms.<name>` for the others).
pub const SUPPORTED_TRANSFORMS: &[&str] = &[
    "io.debezium.transforms.ExtractNewRecordState",
    "org.apache.kafka.connect.transforms.RegexRouter",
    "org.apache.kafka.connect.transforms.Filter",
    "org.apache.kafka.connect.transforms.ReplaceField$Key",
    "org.apache.kafka.connect.transforms.ReplaceField$Value",
    "org.apache.kafka.connect.transforms.ValueToKey",
    "io.debezium.transforms.ByLogicalTableRouter",
    "org.apache.kafka.connect.transforms.TimestampConverter$Key",
    "org.apache.kafka.connect.transforms.TimestampConverter$Value",
    "org.apache.kafka.connect.transforms.InsertField$Key",
    "org.apache.kafka.connect.transforms.InsertField$Value",
    "org.apache.kafka.connect.transforms.MaskField$Key",
    "org.apache.kafka.connect.transforms.MaskField$Value",
    "org.apache.kafka.connect.transforms.InsertHeader",
    "org.apache.kafka.connect.transforms.DropHeaders",
    "org.apache.kafka.connect.transforms.HeaderFrom$Key",
    "org.apache.kafka.connect.transforms.HeaderFrom$Value",
    "org.apache.kafka.connect.transforms.ExtractField$Key",
    "org.apache.kafka.connect.transforms.ExtractField$Value",
    "org.apache.kafka.connect.transforms.HoistField$Key",
    "org.apache.kafka.connect.transforms.HoistField$Value",
    "io.debezium.transforms.Filter",
    "io.debezium.transforms.ContentBasedRouter",
    "org.apache.kafka.connect.transforms.Cast$Key",
    "org.apache.kafka.connect.transforms.Cast$Value",
    "org.apache.kafka.connect.transforms.Flatten$Key",
    "org.apache.kafka.connect.transforms.Flatten$Value",
    "io.debezium.transforms.HeaderToValue",
    "io.debezium.transforms.SchemaChangeEventFilter",
    "io.debezium.transforms.partitions.PartitionRouting",
];

/// The predicates sluice applies.
pub const SUPPORTED_PREDICATES: &[&str] = &[
    "org.apache.kafka.connect.transforms.predicates.TopicNameMatches",
    "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
    "org.apache.kafka.connect.transforms.predicates.RecordIsTombstone",
];

/// Connect's and Debezium's transforms sluice does not apply yet.
const NOT_YET: &[&str] = &[
    "TimestampRouter",
    "SetSchemaMetadata$Key",
    "SetSchemaMetadata$Value",
    "ExtractChangedRecordState",
];

/// The keys every transform takes besides its own.
const COMMON_KEYS: &[&str] = &["type", "predicate", "negate"];

impl TransformsConfig {
    /// Whether the section is absent or empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The topics records of `topics` may be routed to (for creating them beforehand), each
    /// once; `topics` themselves when there is no router.
    pub fn topics_for(&self, predicates: &PredicatesConfig, topics: &[String]) -> Vec<String> {
        match build(self, predicates, &EventOptions::default()) {
            Ok(Some(chain)) => chain.topics_for(topics),
            _ => topics.to_vec(),
        }
    }
}

/// The chain `[transforms]` describes (`None`: no transforms), for events written as
/// `events` says.
///
/// # Errors
///
/// Every problem, each naming its key (`transforms.<name>.<key>`, `predicates.<name>.<key>`)
/// and the expected form.
pub fn build(
    transforms: &TransformsConfig,
    predicates: &PredicatesConfig,
    events: &EventOptions,
) -> Result<Option<Chain>, Vec<ConfigIssue>> {
    let mut issues = Vec::new();
    let mut issue = |key: String, problem: String| issues.push(ConfigIssue { key, problem });
    if transforms.is_empty() {
        for name in predicates.0.keys() {
            issue(
                format!("predicates.{name}"),
                "no [transforms] uses it: remove it, or name it in a transform's predicate".into(),
            );
        }
        return if issues.is_empty() {
            Ok(None)
        } else {
            Err(issues)
        };
    }
    let names: Vec<String> = match transforms.0.get("chain") {
        Some(toml::Value::String(list)) => split_list(list),
        Some(toml::Value::Array(items)) => items
            .iter()
            .filter_map(|i| match i {
                toml::Value::String(s) => Some(s.trim().to_owned()),
                other => {
                    issue(
                        "transforms.chain".into(),
                        format!("{other} is not a transform name: expected a list of names, e.g. [\"unwrap\", \"route\"]"),
                    );
                    None
                }
            })
            .collect(),
        Some(other) => {
            issue(
                "transforms.chain".into(),
                format!("{other}: expected a list of transform names, e.g. [\"unwrap\", \"route\"] or \"unwrap,route\""),
            );
            Vec::new()
        }
        None => {
            issue(
                "transforms.chain".into(),
                "is missing: expected the transforms in order (Connect's `transforms`), e.g. chain = [\"unwrap\", \"route\"]".into(),
            );
            Vec::new()
        }
    };
    for (name, value) in &transforms.0 {
        if name == "chain" {
            continue;
        }
        if !value.is_table() {
            issue(
                format!("transforms.{name}"),
                "expected a table ([transforms.<name>] with its type and keys) or chain".into(),
            );
        } else if !names.contains(name) {
            issue(
                format!("transforms.{name}"),
                "is not in transforms.chain: add it to the chain or remove the table".into(),
            );
        }
    }
    let mut built_predicates: BTreeMap<String, Arc<Predicate>> = BTreeMap::new();
    for (name, value) in &predicates.0 {
        match predicate(name, value) {
            Ok(p) => {
                built_predicates.insert(name.clone(), Arc::new(p));
            }
            Err(mut more) => issues_append(&mut issue, &mut more),
        }
    }
    let mut steps = Vec::with_capacity(names.len());
    for (n, name) in names.iter().enumerate() {
        if names[..n].contains(name) {
            issue(
                "transforms.chain".into(),
                format!("{name:?} is listed twice: each transform once"),
            );
            continue;
        }
        let Some(table) = transforms.0.get(name).and_then(toml::Value::as_table) else {
            issue(
                format!("transforms.{name}"),
                format!(
                    "is missing: transforms.chain names {name:?}; add [transforms.{name}] with its type"
                ),
            );
            continue;
        };
        let values = match strings(&format!("transforms.{name}"), table) {
            Ok(values) => values,
            Err(mut more) => {
                issues_append(&mut issue, &mut more);
                continue;
            }
        };
        let key = |k: &str| format!("transforms.{name}.{k}");
        let predicate = match values.get("predicate") {
            None => {
                if values.contains_key("negate") {
                    issue(
                        key("negate"),
                        "is set without a predicate: set predicate too, or remove negate".into(),
                    );
                }
                None
            }
            Some(p) => match built_predicates.get(p) {
                Some(found) => {
                    let negate = match values.get("negate").map(String::as_str) {
                        None | Some("false") => false,
                        Some("true") => true,
                        Some(other) => {
                            issue(key("negate"), format!("{other:?}: expected true or false"));
                            false
                        }
                    };
                    Some((Arc::clone(found), negate))
                }
                None if predicates.0.contains_key(p) => None,
                None => {
                    issue(
                        key("predicate"),
                        format!(
                            "{p:?} is not defined: expected the name of a [predicates.<name>] table"
                        ),
                    );
                    None
                }
            },
        };
        let Some(kind) = values.get("type") else {
            issue(
                key("type"),
                format!(
                    "is missing: expected one of {}",
                    SUPPORTED_TRANSFORMS.join(", ")
                ),
            );
            continue;
        };
        match transform(name, kind, &values) {
            Ok(transform) => steps.push(Step {
                name: Arc::from(name.as_str()),
                transform,
                predicate,
            }),
            Err(mut more) => issues_append(&mut issue, &mut more),
        }
    }
    if issues.is_empty() {
        Ok(Some(Chain::new(
            steps,
            events.key_format() != EventFormat::Json,
            events.value_format() != EventFormat::Json,
        )))
    } else {
        Err(issues)
    }
}

fn issues_append(issue: &mut impl FnMut(String, String), more: &mut Vec<ConfigIssue>) {
    for i in more.drain(..) {
        issue(i.key, i.problem);
    }
}

/// A table's values as Connect's strings (booleans and numbers written as text, a list of
/// strings joined with commas).
fn strings(
    section: &str,
    table: &toml::map::Map<String, toml::Value>,
) -> Result<BTreeMap<String, String>, Vec<ConfigIssue>> {
    let mut out = BTreeMap::new();
    let mut issues = Vec::new();
    for (key, value) in table {
        let text = match value {
            toml::Value::String(s) => s.clone(),
            toml::Value::Boolean(b) => b.to_string(),
            toml::Value::Integer(i) => i.to_string(),
            toml::Value::Array(items) if items.iter().all(toml::Value::is_str) => items
                .iter()
                .filter_map(toml::Value::as_str)
                .collect::<Vec<_>>()
                .join(","),
            other => {
                issues.push(ConfigIssue {
                    key: format!("{section}.\"{key}\""),
                    problem: format!(
                        "{other}: expected a string (Connect's value), a boolean or an integer"
                    ),
                });
                continue;
            }
        };
        out.insert(key.clone(), text);
    }
    if issues.is_empty() {
        Ok(out)
    } else {
        Err(issues)
    }
}

/// A type's short name: `org.apache.kafka.connect.transforms.ReplaceField$Value` →
/// `ReplaceField$Value`.
fn short(kind: &str) -> &str {
    kind.rsplit('.').next().unwrap_or(kind)
}

/// Whether `kind` names `full` by its full or short name.
fn names(kind: &str, full: &str) -> bool {
    kind == full || kind == short(full)
}

fn predicate(name: &str, value: &toml::Value) -> Result<Predicate, Vec<ConfigIssue>> {
    let section = format!("predicates.{name}");
    let Some(table) = value.as_table() else {
        return Err(vec![ConfigIssue {
            key: section,
            problem: "expected a table with the predicate's type and keys".into(),
        }]);
    };
    let values = strings(&section, table)?;
    let key = |k: &str| format!("{section}.{k}");
    let issue = |k: &str, problem: String| {
        vec![ConfigIssue {
            key: key(k),
            problem,
        }]
    };
    let Some(kind) = values.get("type") else {
        return Err(issue(
            "type",
            format!(
                "is missing: expected one of {}",
                SUPPORTED_PREDICATES.join(", ")
            ),
        ));
    };
    let (predicate, keys): (Predicate, &[&str]) = if names(kind, SUPPORTED_PREDICATES[0]) {
        let Some(pattern) = values.get("pattern") else {
            return Err(issue(
                "pattern",
                "is missing: expected a regular expression the whole topic name must match".into(),
            ));
        };
        let regex = whole_match_regex(pattern).map_err(|e| issue("pattern", e))?;
        (Predicate::TopicNameMatches(regex), &["pattern"])
    } else if names(kind, SUPPORTED_PREDICATES[1]) {
        let Some(header) = values.get("name") else {
            return Err(issue("name", "is missing: expected a header name".into()));
        };
        (Predicate::HasHeaderKey(header.clone()), &["name"])
    } else if names(kind, SUPPORTED_PREDICATES[2]) {
        (Predicate::RecordIsTombstone, &[])
    } else {
        return Err(issue(
            "type",
            format!(
                "{kind:?} is not a predicate sluice knows: expected one of {}",
                SUPPORTED_PREDICATES.join(", ")
            ),
        ));
    };
    let unknown: Vec<ConfigIssue> = values
        .keys()
        .filter(|k| *k != "type" && !keys.contains(&k.as_str()))
        .map(|k| ConfigIssue {
            key: format!("{section}.\"{k}\""),
            problem: format!(
                "unknown key for {}: expected {}",
                short(kind),
                if keys.is_empty() {
                    "only type".to_owned()
                } else {
                    format!("type and {}", keys.join(", "))
                }
            ),
        })
        .collect();
    if unknown.is_empty() {
        Ok(predicate)
    } else {
        Err(unknown)
    }
}

/// The unwrap's keys.
const UNWRAP_KEYS: &[&str] = &[
    "delete.tombstone.handling.mode",
    "add.fields",
    "add.fields.prefix",
    "add.headers",
    "add.headers.prefix",
    "replace.null.with.default",
    "drop.tombstones",
    "delete.handling.mode",
    "route.by.field",
    "drop.fields.header.name",
    "drop.fields.from.key",
    "drop.fields.keep.schema.compatible",
];

fn transform(
    name: &str,
    kind: &str,
    values: &BTreeMap<String, String>,
) -> Result<Transform, Vec<ConfigIssue>> {
    let key = |k: &str| format!("transforms.{name}.\"{k}\"");
    let mut issues = Vec::new();
    let get = |k: &str| values.get(k).map(String::as_str);
    let (transform, keys): (Option<Transform>, &[&str]) = if names(kind, SUPPORTED_TRANSFORMS[0]) {
        (unwrap(name, values, &mut issues), UNWRAP_KEYS)
    } else if names(kind, SUPPORTED_TRANSFORMS[1]) {
        let (Some(regex), Some(replacement)) = (get("regex"), get("replacement")) else {
            for k in ["regex", "replacement"].iter().filter(|k| get(k).is_none()) {
                issues.push(ConfigIssue {
                        key: key(k),
                        problem: "is missing: RegexRouter needs regex (a Java regular expression the whole topic must match) and replacement (the new topic, $1… for the groups)".into(),
                    });
            }
            return Err(issues);
        };
        match RegexRouter::new(regex, replacement) {
            Ok(router) => (
                Some(Transform::RegexRouter(router)),
                &["regex", "replacement"],
            ),
            Err(e) => {
                issues.push(ConfigIssue {
                    key: key("regex"),
                    problem: e,
                });
                (None, &["regex", "replacement"])
            }
        }
    } else if names(kind, SUPPORTED_TRANSFORMS[2]) {
        (Some(Transform::Filter), &[])
    } else if names(kind, SUPPORTED_TRANSFORMS[3]) || names(kind, SUPPORTED_TRANSFORMS[4]) {
        let part = if kind.ends_with("$Key") {
            Part::Key
        } else {
            Part::Value
        };
        let list = |new: &str, old: &str| -> Vec<String> {
            get(new)
                .or_else(|| get(old))
                .map(split_list)
                .unwrap_or_default()
        };
        let mut renames = Vec::new();
        for pair in get("renames").map(split_list).unwrap_or_default() {
            match pair.split_once(':') {
                    Some((old, new)) if !old.is_empty() && !new.is_empty() => {
                        renames.push((old.to_owned(), new.to_owned()));
                    }
                    _ => issues.push(ConfigIssue {
                        key: key("renames"),
                        problem: format!("{pair:?}: expected old:new pairs separated by commas, e.g. \"v:value,n:count\""),
                    }),
                }
        }
        (
            Some(Transform::ReplaceField(ReplaceField {
                part,
                exclude: list("exclude", "blacklist"),
                include: list("include", "whitelist"),
                renames,
            })),
            &["exclude", "include", "renames", "blacklist", "whitelist"],
        )
    } else if names(kind, SUPPORTED_TRANSFORMS[5]) {
        let fields = get("fields").map(split_list).unwrap_or_default();
        if fields.is_empty() {
            issues.push(ConfigIssue {
                    key: key("fields"),
                    problem: "is missing: expected the value's fields the key is made of, separated by commas".into(),
                });
        }
        (
            Some(Transform::ValueToKey(ValueToKey { fields })),
            &["fields"],
        )
    } else if super::config_more::MORE_TRANSFORMS
        .iter()
        .any(|t| names(kind, t))
        && let Some(built) = super::config_more::transform(short(kind), values, &key, &mut issues)
    {
        built
    } else if super::config_headers::HEADER_TRANSFORMS
        .iter()
        .any(|t| names(kind, t))
        && let Some(built) =
            super::config_headers::header_transform(short(kind), values, &key, &mut issues)
    {
        built
    } else if super::config_headers::SHAPE_TRANSFORMS
        .iter()
        .any(|t| names(kind, t))
        && let Some(built) =
            super::config_headers::shape_transform(short(kind), values, &key, &mut issues)
    {
        built
    } else if super::config_convert::CONVERT_TRANSFORMS
        .iter()
        .any(|t| names(kind, t))
        && let Some(built) =
            super::config_convert::convert_transform(short(kind), values, &key, &mut issues)
    {
        built
    } else if super::config_debezium::DEBEZIUM_TRANSFORMS
        .iter()
        .any(|t| names(kind, t))
        && let Some(built) =
            super::config_debezium::debezium_transform(short(kind), values, &key, &mut issues)
    {
        built
    } else if kind == "io.debezium.transforms.Filter"
        || names(kind, "io.debezium.transforms.ContentBasedRouter")
    {
        let which = if kind.ends_with("Filter") {
            ScriptKind::Filter
        } else {
            ScriptKind::Router
        };
        match Scripting::configure(which, values) {
            Ok(scripting) => (Some(Transform::Scripting(scripting)), which.keys()),
            Err(problems) => {
                issues.extend(problems.into_iter().map(|(k, problem)| ConfigIssue {
                    key: key(k),
                    problem,
                }));
                (None, which.keys())
            }
        }
    } else if short(kind) == "EventRouter" {
        // A PostgreSQL pipeline takes it out of the chain for its outbox router before the
        // chain is built (`config_outbox::take_event_router`); anywhere else it is refused.
        return Err(vec![ConfigIssue {
            key: key("type"),
            problem: format!(
                "{kind:?} is applied by a PostgreSQL source's outbox router only, as the first transform of the chain (or write [source.postgres.outbox]): docs/transforms.md"
            ),
        }]);
    } else if NOT_YET.iter().any(|t| short(kind) == *t) {
        return Err(vec![ConfigIssue {
            key: key("type"),
            problem: format!(
                "{kind:?} is not yet applied by sluice: expected one of {}",
                SUPPORTED_TRANSFORMS.join(", ")
            ),
        }]);
    } else {
        return Err(vec![ConfigIssue {
            key: key("type"),
            problem: format!(
                "{kind:?} is not a transform sluice knows: expected one of {}",
                SUPPORTED_TRANSFORMS.join(", ")
            ),
        }]);
    };
    for k in values.keys() {
        if !COMMON_KEYS.contains(&k.as_str()) && !keys.contains(&k.as_str()) {
            issues.push(ConfigIssue {
                key: key(k),
                problem: format!(
                    "unknown key for {}: expected {}",
                    short(kind),
                    COMMON_KEYS
                        .iter()
                        .chain(keys)
                        .copied()
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            });
        }
    }
    match transform {
        Some(t) if issues.is_empty() => Ok(t),
        _ => Err(issues),
    }
}

fn unwrap(
    name: &str,
    values: &BTreeMap<String, String>,
    issues: &mut Vec<ConfigIssue>,
) -> Option<Transform> {
    let key = |k: &str| format!("transforms.{name}.\"{k}\"");
    let get = |k: &str| values.get(k).map(String::as_str);
    let expected_modes = DeleteMode::NAMES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ");
    let legacy = get("delete.handling.mode").is_some() || get("drop.tombstones").is_some();
    let mode = match get("delete.tombstone.handling.mode") {
        Some(_) if legacy => {
            issues.push(ConfigIssue {
                key: key("delete.tombstone.handling.mode"),
                problem: "cannot be combined with the older delete.handling.mode / drop.tombstones: keep only delete.tombstone.handling.mode".into(),
            });
            None
        }
        Some(text) => match DeleteMode::NAMES.iter().find(|(n, _)| *n == text) {
            Some((_, mode)) => Some(*mode),
            None => {
                issues.push(ConfigIssue {
                    key: key("delete.tombstone.handling.mode"),
                    problem: format!("{text:?}: expected one of {expected_modes}"),
                });
                None
            }
        },
        None if legacy => {
            let handling = get("delete.handling.mode").unwrap_or("drop");
            let drop_tombstones = get("drop.tombstones").unwrap_or("true");
            match (handling, drop_tombstones) {
                ("drop", "true") => Some(DeleteMode::Drop),
                ("none", "true") => Some(DeleteMode::Tombstone),
                ("rewrite", "true") => Some(DeleteMode::Rewrite),
                ("rewrite", "false") => Some(DeleteMode::RewriteWithTombstone),
                (h, t) => {
                    issues.push(ConfigIssue {
                        key: key("delete.handling.mode"),
                        problem: format!(
                            "delete.handling.mode = {h:?} with drop.tombstones = {t:?} has no equivalent in Debezium 3's delete.tombstone.handling.mode ({expected_modes}) that sluice applies: write delete.tombstone.handling.mode instead"
                        ),
                    });
                    None
                }
            }
        }
        None => Some(DeleteMode::Tombstone),
    };
    match get("replace.null.with.default") {
        None | Some("true") => {}
        Some("false") => issues.push(ConfigIssue {
            key: key("replace.null.with.default"),
            problem: "false is not yet applied by sluice (its events carry no column defaults to replace nulls with): remove it".into(),
        }),
        Some(other) => issues.push(ConfigIssue {
            key: key("replace.null.with.default"),
            problem: format!("{other:?}: expected true or false"),
        }),
    }
    let refs = |list: &str, prefix: &str, issues: &mut Vec<ConfigIssue>| -> Vec<FieldRef> {
        let prefix = get(prefix).unwrap_or(DEFAULT_PREFIX);
        split_list(get(list).unwrap_or_default())
            .iter()
            .filter_map(|entry| match FieldRef::parse(prefix, entry) {
                Ok(r) => Some(r),
                Err(problem) => {
                    issues.push(ConfigIssue {
                        key: key(list),
                        problem,
                    });
                    None
                }
            })
            .collect()
    };
    let add_fields = refs("add.fields", "add.fields.prefix", issues);
    let add_headers = refs("add.headers", "add.headers.prefix", issues);
    let mut flag = |k: &str, default: bool| match get(k) {
        None => default,
        Some(v) if v.eq_ignore_ascii_case("true") => true,
        Some(v) if v.eq_ignore_ascii_case("false") => false,
        Some(other) => {
            issues.push(ConfigIssue {
                key: key(k),
                problem: format!("{other:?}: expected true or false"),
            });
            default
        }
    };
    let from_key = flag("drop.fields.from.key", false);
    let keep_schema_compatible = flag("drop.fields.keep.schema.compatible", true);
    let drop_fields = get("drop.fields.header.name")
        .filter(|h| !h.trim().is_empty())
        .map(|header| DropFields {
            header: header.to_owned(),
            from_key,
            keep_schema_compatible,
        });
    Some(Transform::Unwrap(Unwrap {
        mode: mode?,
        add_fields,
        add_headers,
        route_by_field: get("route.by.field")
            .filter(|f| !f.is_empty())
            .map(str::to_owned),
        drop_fields,
        schemas: Default::default(),
    }))
}

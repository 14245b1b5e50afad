//! Debezium's outbox `EventRouter` (`io.debezium.transforms.outbox.EventRouter`) by its
//! Debezium keys, read into the settings of sluice's outbox router (`[source.postgres.outbox]`):
//! sluice routes an outbox table's rows at the source, so a pipeline file that names the
//! router as a transform has it taken out of the chain and given to the source instead
//! ([`take_event_router`]); docs/transforms.md lists the keys and what each becomes.

use std::collections::BTreeMap;

use super::config::{PredicatesConfig, TransformsConfig};
use super::config_more::split_list;
use crate::error::ConfigIssue;

/// The router's class (also taken by its short name).
pub const EVENT_ROUTER: &str = "io.debezium.transforms.outbox.EventRouter";

/// Debezium's default `route.topic.regex`.
const DEFAULT_ROUTE_REGEX: &str = "(?<routedByValue>.*)";

/// The EventRouter's keys sluice reads (besides `type`, `predicate`, `negate`).
const KEYS: &[&str] = &[
    "table.field.event.id",
    "table.field.event.key",
    "table.field.event.type",
    "table.field.event.payload",
    "table.field.event.timestamp",
    "table.field.event.schema.version",
    "table.fields.additional.placement",
    "table.field.additional.missing",
    "table.expand.json.payload",
    "table.json.payload.null.behavior",
    "table.json.payload.empty.array.behavior",
    "table.op.invalid.behavior",
    "route.by.field",
    "route.topic.regex",
    "route.topic.replacement",
    "route.tombstone.on.empty.payload",
];

/// An EventRouter transform read as sluice's outbox router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRouterSettings {
    /// Its name in `[transforms]`.
    pub name: String,
    /// The `pattern` of its `TopicNameMatches` predicate (the outbox table's topic), when it
    /// has one.
    pub topic_pattern: Option<String>,
    /// `route.by.field` (`source.postgres.outbox.aggregate_type_column`).
    pub aggregate_type_column: String,
    /// `table.field.event.key` (`aggregate_id_column`).
    pub aggregate_id_column: String,
    /// `table.field.event.payload` (`payload_column`).
    pub payload_column: String,
    /// `route.topic.replacement` with `{aggregate_type}` for the routed value (`topic`).
    pub topic: String,
    /// The headers, `column:header`: the event id as `id` (`table.field.event.id`), then each
    /// `table.fields.additional.placement` entry placed in a header (`headers`).
    pub headers: Vec<String>,
}

/// Takes the EventRouter out of `transforms` (and its predicate out of `predicates` when no
/// other transform names it) and returns its settings; `Ok(None)`: there is none.
///
/// # Errors
///
/// Each key whose value sluice's outbox router cannot do the same with, named with the
/// reason; a router that is not the chain's first transform; two routers. `transforms` and
/// `predicates` are left as they were.
pub fn take_event_router(
    transforms: &mut TransformsConfig,
    predicates: &mut PredicatesConfig,
) -> Result<Option<EventRouterSettings>, Vec<ConfigIssue>> {
    let routers: Vec<String> = transforms
        .0
        .iter()
        .filter(|(_, v)| {
            v.get("type")
                .and_then(toml::Value::as_str)
                .is_some_and(is_event_router)
        })
        .map(|(name, _)| name.clone())
        .collect();
    let Some(name) = routers.first() else {
        return Ok(None);
    };
    let key = |k: &str| format!("transforms.{name}.\"{k}\"");
    let mut issues = Vec::new();
    if routers.len() > 1 {
        issues.push(ConfigIssue {
            key: format!("transforms.{}", routers[1]),
            problem: "a second EventRouter: sluice routes one outbox table per pipeline".into(),
        });
    }
    let chain = chain_names(transforms);
    if chain.first() != Some(name) {
        issues.push(ConfigIssue {
            key: "transforms.chain".into(),
            problem: format!(
                "{name:?} (an EventRouter) must be the chain's first transform: sluice routes the outbox table's rows at the source, before the other transforms see them"
            ),
        });
    }
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    if let Some(table) = transforms.0.get(name).and_then(toml::Value::as_table) {
        for (k, v) in table {
            let text = match v {
                toml::Value::String(s) => s.clone(),
                toml::Value::Boolean(b) => b.to_string(),
                toml::Value::Integer(i) => i.to_string(),
                other => {
                    issues.push(ConfigIssue {
                        key: key(k),
                        problem: format!("{other}: expected a string (Connect's value)"),
                    });
                    continue;
                }
            };
            values.insert(k.clone(), text);
        }
    }
    let get = |k: &str| values.get(k).map(|v| v.trim());
    for k in values.keys() {
        if !KEYS.contains(&k.as_str()) && !["type", "predicate", "negate"].contains(&k.as_str()) {
            issues.push(ConfigIssue {
                key: key(k),
                problem: format!(
                    "unknown key for EventRouter (or one sluice's outbox router has no equivalent of): expected type, predicate, {}",
                    KEYS.join(", ")
                ),
            });
        }
    }
    let mut refuse = |k: &str, problem: &str| {
        issues.push(ConfigIssue {
            key: key(k),
            problem: problem.to_owned(),
        });
    };
    let flag = |k: &str| get(k).map(|v| v.eq_ignore_ascii_case("true"));
    if flag("table.expand.json.payload") == Some(true) {
        refuse(
            "table.expand.json.payload",
            "true is not done by sluice's outbox router: the payload column is written as it is (false, Debezium's default)",
        );
    }
    if flag("route.tombstone.on.empty.payload") == Some(true) {
        refuse(
            "route.tombstone.on.empty.payload",
            "true is not done by sluice's outbox router: a NULL payload is a tombstone, an empty one is not (false, Debezium's default)",
        );
    }
    if get("table.field.event.timestamp").is_some_and(|v| !v.is_empty()) {
        refuse(
            "table.field.event.timestamp",
            "sluice's records carry the time they are produced, not a column's: remove it",
        );
    }
    if get("table.field.event.schema.version").is_some_and(|v| !v.is_empty()) {
        refuse(
            "table.field.event.schema.version",
            "sluice's outbox router writes the payload column as the value, with no versioned envelope: remove it",
        );
    }
    match get("table.op.invalid.behavior") {
        None | Some("warn" | "error") => {}
        Some("fatal") => refuse(
            "table.op.invalid.behavior",
            "fatal is not done: sluice's outbox router writes nothing for updates of outbox rows (warn, Debezium's default, without the log line)",
        ),
        Some(other) => refuse(
            "table.op.invalid.behavior",
            &format!("{other:?}: expected warn, error or fatal"),
        ),
    }
    match get("table.field.additional.missing") {
        None | Some("error") => {}
        Some(other) => refuse(
            "table.field.additional.missing",
            &format!(
                "{other:?}: sluice's outbox router stops at start when a named column is missing (error, Debezium's default)"
            ),
        ),
    }
    let regex = get("route.topic.regex").unwrap_or(DEFAULT_ROUTE_REGEX);
    if regex != DEFAULT_ROUTE_REGEX {
        refuse(
            "route.topic.regex",
            &format!(
                "{regex:?}: sluice's outbox router takes the whole routing value ({DEFAULT_ROUTE_REGEX:?}, Debezium's default): remove it"
            ),
        );
    }
    let replacement = get("route.topic.replacement").unwrap_or("outbox.event.${routedByValue}");
    let topic = replacement
        .replace("${routedByValue}", "{aggregate_type}")
        .replace("$1", "{aggregate_type}");
    if !topic.contains("{aggregate_type}") || topic.contains('$') {
        refuse(
            "route.topic.replacement",
            &format!(
                "{replacement:?}: expected a topic with ${{routedByValue}} (or $1) for the routing value, e.g. \"outbox.event.${{routedByValue}}\""
            ),
        );
    }
    let column = |k: &str, default: &str| {
        get(k)
            .filter(|v| !v.is_empty())
            .unwrap_or(default)
            .to_owned()
    };
    let mut headers = vec![format!("{}:id", column("table.field.event.id", "id"))];
    for entry in split_list(get("table.fields.additional.placement").unwrap_or_default()) {
        let parts: Vec<&str> = entry.split(':').map(str::trim).collect();
        match parts.as_slice() {
            [field, "header"] => headers.push(format!("{field}:{field}")),
            [field, "header", alias] => headers.push(format!("{field}:{alias}")),
            [_, "envelope" | "partition", ..] => refuse(
                "table.fields.additional.placement",
                &format!(
                    "{entry:?}: sluice's outbox router places additional columns in headers only (column:header or column:header:alias)"
                ),
            ),
            _ => refuse(
                "table.fields.additional.placement",
                &format!("{entry:?}: expected column:header or column:header:alias"),
            ),
        }
    }
    let predicate = values.get("predicate").cloned();
    let mut topic_pattern = None;
    if let Some(p) = &predicate {
        let table = predicates.0.get(p).and_then(toml::Value::as_table);
        let kind = table
            .and_then(|t| t.get("type"))
            .and_then(toml::Value::as_str)
            .unwrap_or_default();
        if !kind.ends_with("TopicNameMatches") {
            refuse(
                "predicate",
                &format!(
                    "{p:?}: the outbox table is named by a TopicNameMatches predicate on its topic (or by capturing that table alone)"
                ),
            );
        } else if get("negate").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            refuse(
                "negate",
                "true: the outbox table is the one topic the predicate matches",
            );
        }
        topic_pattern = table
            .and_then(|t| t.get("pattern"))
            .and_then(toml::Value::as_str)
            .map(str::to_owned);
    }
    if !issues.is_empty() {
        return Err(issues);
    }
    let settings = EventRouterSettings {
        name: name.clone(),
        topic_pattern,
        aggregate_type_column: column("route.by.field", "aggregatetype"),
        aggregate_id_column: column("table.field.event.key", "aggregateid"),
        payload_column: column("table.field.event.payload", "payload"),
        topic,
        headers,
    };
    // Out of the chain; the predicate too when nothing else names it.
    transforms.0.remove(name);
    let rest: Vec<String> = chain.into_iter().filter(|n| n != name).collect();
    if rest.is_empty() && transforms.0.keys().all(|k| k == "chain") {
        transforms.0.clear();
    } else {
        transforms.0.insert(
            "chain".into(),
            toml::Value::Array(rest.into_iter().map(toml::Value::String).collect()),
        );
    }
    if let Some(p) = predicate {
        let used = transforms.0.values().any(|t| {
            t.get("predicate")
                .and_then(toml::Value::as_str)
                .is_some_and(|q| q.trim() == p)
        });
        if !used {
            predicates.0.remove(&p);
        }
    }
    Ok(Some(settings))
}

/// Whether `kind` names the EventRouter (full or short name).
pub fn is_event_router(kind: &str) -> bool {
    kind == EVENT_ROUTER || kind == "EventRouter"
}

/// The chain's names in order (as `build` reads them; anything else: none).
fn chain_names(transforms: &TransformsConfig) -> Vec<String> {
    match transforms.0.get("chain") {
        Some(toml::Value::String(list)) => split_list(list),
        Some(toml::Value::Array(items)) => items
            .iter()
            .filter_map(toml::Value::as_str)
            .map(|s| s.trim().to_owned())
            .collect(),
        _ => Vec::new(),
    }
}

/// The outbox table an EventRouter applies to: of `candidates` (`schema.table`), the one whose
/// topic (`<topic_prefix>.<schema>.<table>`) the router's predicate matches, or the only
/// candidate when it has none. The predicate's pattern itself is a candidate when it names
/// one topic under the prefix (`prefix\.public\.outbox`).
///
/// # Errors
///
/// None or several tables match: the problem, for the router's key.
pub fn outbox_table(
    settings: &EventRouterSettings,
    topic_prefix: &str,
    candidates: &[String],
) -> Result<String, String> {
    let mut candidates: Vec<String> = candidates.to_vec();
    let Some(pattern) = &settings.topic_pattern else {
        return match candidates.as_slice() {
            [one] => Ok(one.clone()),
            _ => Err(format!(
                "which table is the outbox? Give the EventRouter a TopicNameMatches predicate matching its topic (e.g. pattern = \"{}\\\\.public\\\\.outbox\"), or capture only that table",
                topic_prefix.replace('.', "\\\\.")
            )),
        };
    };
    let regex = super::predicate::whole_match_regex(pattern)?;
    let literal = pattern.replace("\\.", ".");
    if let Some(table) = literal.strip_prefix(&format!("{topic_prefix}."))
        && table.split('.').count() == 2
        && table
            .chars()
            .all(|c| c.is_alphanumeric() || c == '_' || c == '.')
        && !candidates.iter().any(|c| c == table)
    {
        candidates.push(table.to_owned());
    }
    let matching: Vec<&String> = candidates
        .iter()
        .filter(|t| regex.is_match(&format!("{topic_prefix}.{t}")))
        .collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(format!(
            "the predicate's pattern {pattern:?} matches no captured table's topic ({topic_prefix}.<schema>.<table>): name the outbox table's topic"
        )),
        many => Err(format!(
            "the predicate's pattern {pattern:?} matches several tables' topics ({}): sluice routes one outbox table; match only its topic",
            many.iter()
                .map(|t| t.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(text: &str) -> (TransformsConfig, PredicatesConfig) {
        #[derive(serde::Deserialize)]
        struct File {
            #[serde(default)]
            transforms: TransformsConfig,
            #[serde(default)]
            predicates: PredicatesConfig,
        }
        let file: File = toml::from_str(text).unwrap();
        (file.transforms, file.predicates)
    }

    #[test]
    fn debezium_keys_become_the_outbox_routers_settings() {
        let (mut transforms, mut predicates) = read(
            r#"
[transforms]
chain = "outbox,route"
[transforms.outbox]
type = "io.debezium.transforms.outbox.EventRouter"
"table.field.event.id" = "event_id"
"table.field.event.key" = "agg_id"
"table.field.event.payload" = "body"
"route.by.field" = "agg_type"
"route.topic.replacement" = "events.${routedByValue}"
"table.fields.additional.placement" = "type:header:eventType,tenant:header"
"table.expand.json.payload" = "false"
predicate = "isOutbox"
[transforms.route]
type = "org.apache.kafka.connect.transforms.RegexRouter"
regex = "events\\.(.*)"
replacement = "all.$1"
[predicates.isOutbox]
type = "org.apache.kafka.connect.transforms.predicates.TopicNameMatches"
pattern = "app\\.public\\.outbox"
"#,
        );
        let settings = take_event_router(&mut transforms, &mut predicates)
            .unwrap()
            .unwrap();
        assert_eq!(
            settings,
            EventRouterSettings {
                name: "outbox".into(),
                topic_pattern: Some("app\\.public\\.outbox".into()),
                aggregate_type_column: "agg_type".into(),
                aggregate_id_column: "agg_id".into(),
                payload_column: "body".into(),
                topic: "events.{aggregate_type}".into(),
                headers: vec![
                    "event_id:id".into(),
                    "type:eventType".into(),
                    "tenant:tenant".into()
                ],
            }
        );
        // The router left the chain; the rest of it stays, its predicate goes.
        assert_eq!(chain_names(&transforms), ["route"]);
        assert!(!transforms.0.contains_key("outbox"));
        assert!(predicates.0.is_empty());
        assert_eq!(
            outbox_table(&settings, "app", &["public.orders".into()]).unwrap(),
            "public.outbox"
        );
        assert!(
            outbox_table(&settings, "other", &["public.orders".into()])
                .unwrap_err()
                .contains("matches no captured table")
        );
    }

    #[test]
    fn defaults_are_debeziums_and_what_sluice_cannot_do_is_named() {
        let (mut transforms, mut predicates) =
            read("[transforms]\nchain = [\"o\"]\n[transforms.o]\ntype = \"EventRouter\"\n");
        let settings = take_event_router(&mut transforms, &mut predicates)
            .unwrap()
            .unwrap();
        assert_eq!(
            (
                settings.aggregate_type_column.as_str(),
                settings.aggregate_id_column.as_str(),
                settings.payload_column.as_str(),
                settings.topic.as_str(),
                settings.headers.as_slice()
            ),
            (
                "aggregatetype",
                "aggregateid",
                "payload",
                "outbox.event.{aggregate_type}",
                ["id:id".to_owned()].as_slice()
            )
        );
        assert!(transforms.is_empty());
        // Without a predicate: the only captured table, else a question.
        assert_eq!(
            outbox_table(&settings, "p", &["s.box".into()]).unwrap(),
            "s.box"
        );
        assert!(
            outbox_table(&settings, "p", &["s.a".into(), "s.b".into()])
                .unwrap_err()
                .contains("which table is the outbox")
        );
        let (mut transforms, mut predicates) = read(
            r#"
[transforms]
chain = "route,o"
[transforms.route]
type = "org.apache.kafka.connect.transforms.RegexRouter"
regex = "x"
replacement = "y"
[transforms.o]
type = "io.debezium.transforms.outbox.EventRouter"
"table.expand.json.payload" = true
"route.topic.regex" = "(.*)x"
"route.topic.replacement" = "fixed"
"table.fields.additional.placement" = "type:envelope"
"table.field.event.timestamp" = "ts"
"tracing.span.context.field" = "t"
"#,
        );
        let issues = take_event_router(&mut transforms, &mut predicates).unwrap_err();
        let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "transforms.chain",
                "transforms.o.\"tracing.span.context.field\"",
                "transforms.o.\"table.expand.json.payload\"",
                "transforms.o.\"table.field.event.timestamp\"",
                "transforms.o.\"route.topic.regex\"",
                "transforms.o.\"route.topic.replacement\"",
                "transforms.o.\"table.fields.additional.placement\"",
            ]
        );
        // Left as it was.
        assert!(transforms.0.contains_key("o"));
    }
}

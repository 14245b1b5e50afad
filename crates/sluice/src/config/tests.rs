//! The pipeline file's loading and validation, key by key.

use super::defaults::*;
use super::sections::*;
use super::*;

/// A source section for the tests of what every source shares.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct TestSource {
    url: String,
}

impl SourceSection for TestSource {
    const KEY: &'static str = "test";

    fn validate(&self) -> Vec<ConfigIssue> {
        if self.url.is_empty() {
            vec![ConfigIssue {
                key: "source.test.url".into(),
                problem: "empty".into(),
            }]
        } else {
            Vec::new()
        }
    }
}

const MINIMAL: &str = r#"
        name = "orders"
        [source.test]
        url = "${PG_URL}"
        [kafka]
        brokers = "${KAFKA_BROKERS:-127.0.0.1:9092}"
        topic_prefix = "${TOPIC_PREFIX:-sluice}"
    "#;

fn env(name: &str) -> Option<String> {
    (name == "PG_URL").then(|| "postgres://postgres@127.0.0.1:5432/postgres".to_owned())
}

fn parse(text: &str) -> Result<PipelineConfig<TestSource>, ConfigError> {
    PipelineConfig::from_toml(text, "test.toml", &env)
}

fn issues(text: &str) -> Vec<ConfigIssue> {
    match parse(text) {
        Err(ConfigError::Invalid { issues, .. }) => issues,
        other => panic!("expected invalid config, got {other:?}"),
    }
}

#[test]
fn unknown_key_names_its_path_and_the_allowed_keys() {
    let text = MINIMAL.replace("topic_prefix", "topic_prefx");
    let issues = issues(&text);
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].key, "kafka.topic_prefx");
    assert!(issues[0].problem.contains("unknown field `topic_prefx`"));
    assert!(issues[0].problem.contains("topic_prefix"), "{issues:?}");
}

#[test]
fn state_store_and_ha_keys_are_checked_with_the_key_named() {
    let config = parse(MINIMAL).unwrap();
    assert_eq!(config.state_store, StateStoreKind::Local);
    assert_eq!(config.ha.failover_timeout_ms, 10_000);
    assert_eq!(config.ha.standby_poll_ms, 500);
    assert!(config.ha.instance_id().contains(':'), "<host>:<pid>");
    let with = |top: &str, ha: &str| format!("{top}\n{MINIMAL}\n[ha]\n{ha}\n");
    let keys = |text: String| -> Vec<String> { issues(&text).into_iter().map(|i| i.key).collect() };
    // The test source does not elect an active instance.
    assert_eq!(keys(with("state_store = \"kafka\"", "")), ["state_store"]);
    assert_eq!(
        keys(with("state_topic = \"st\"", "")),
        ["state_topic"],
        "state_topic without state_store = kafka"
    );
    assert_eq!(
        keys(with("", "failover_timeout_ms = 10\nstandby_poll_ms = 0")),
        ["ha.failover_timeout_ms", "ha.standby_poll_ms"]
    );
    let named = parse(&with("", "instance_id = \"east-1\"")).unwrap();
    assert_eq!(named.ha.instance_id(), "east-1");
    assert_eq!(named.state_topic(), DEFAULT_STATE_TOPIC);
}

#[test]
fn topic_config_merges_per_topic_and_fills_compacted_defaults() {
    let text = format!(
        "{MINIMAL}\n[kafka.topic_config]\n\"cleanup.policy\" = \"compact\"\n\"segment.ms\" = \"60000\"\n\
             [kafka.topic_config_by_topic.\"sluice.public.audit\"]\n\"cleanup.policy\" = \"delete\"\n"
    );
    let config = parse(&text).unwrap();
    let orders = config.kafka.topic_configs("sluice.public.orders", true);
    assert_eq!(orders["cleanup.policy"], "compact");
    assert_eq!(
        orders["segment.ms"], "60000",
        "set values win over the defaults"
    );
    assert_eq!(orders["min.compaction.lag.ms"], "0");
    assert_eq!(orders["delete.retention.ms"], "86400000");
    let audit = config.kafka.topic_configs("sluice.public.audit", true);
    assert_eq!(
        audit.get("cleanup.policy").map(String::as_str),
        Some("delete")
    );
    assert_eq!(audit.get("min.compaction.lag.ms"), None);
    // Not an events topic (the dead-letter topic): only its own entry applies.
    assert!(config.kafka.topic_configs("sluice.dlq", false).is_empty());
    let bad = format!("{MINIMAL}\n[kafka.topic_config]\n\"cleanup.policy\" = \"compacted\"\n");
    let issues = issues(&bad);
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].key, "kafka.topic_config.\"cleanup.policy\"");
    assert!(
        issues[0].problem.contains("\"compact,delete\""),
        "{issues:?}"
    );
}

#[test]
fn schemas_enable_refuses_embedded_json() {
    let both = format!("{MINIMAL}\n[kafka.events]\nschemas_enable = true\nembed_json = true\n");
    let issues = issues(&both);
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].key, "kafka.events.embed_json");
    let alone = format!("{MINIMAL}\n[kafka.events]\nschemas_enable = true\n");
    assert!(parse(&alone).is_ok());
}

#[test]
fn column_propagate_source_type_takes_debeziums_regexes() {
    let with = |value: &str| {
        format!("{MINIMAL}\n[kafka.events]\ncolumn_propagate_source_type = {value}\n")
    };
    let config = parse(&with(r#""public\\.t\\.a, .*\\.B""#)).expect("valid");
    let patterns = config.kafka.events.column_propagate_source_type;
    assert!(patterns.matches("public.t.a"));
    assert!(
        patterns.matches("other.u.b"),
        "case-insensitive, as Debezium"
    );
    assert!(!patterns.matches("public.t.ab"), "the whole name");
    assert!(!patterns.matches("public_t.a"));
    let list = parse(&with(r#"["public\\.t\\.a"]"#)).expect("valid");
    assert!(
        list.kafka
            .events
            .column_propagate_source_type
            .matches("public.t.a")
    );
    let issues = issues(&with(r#""(unclosed""#));
    assert_eq!(issues[0].key, "kafka.events.column_propagate_source_type");
    assert!(
        issues[0].problem.contains("not a valid regular expression"),
        "{issues:?}"
    );
}

#[test]
fn producer_overrides_that_break_the_guarantees_are_refused_unless_allowed() {
    let unsafe_overrides = "[kafka.producer]\n\"enable.idempotence\" = \"false\"\nacks = \"1\"\n\
             \"max.in.flight.requests.per.connection\" = \"10\"\n\"linger.ms\" = \"20\"\n";
    let text = MINIMAL.replace("[kafka]\n", &format!("{unsafe_overrides}[kafka]\n"));
    let issues = issues(&text);
    let keys: Vec<&str> = issues.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "kafka.producer.\"acks\"",
            "kafka.producer.\"enable.idempotence\"",
            "kafka.producer.\"max.in.flight.requests.per.connection\"",
        ],
        "{issues:?}"
    );
    assert!(
        issues[0].problem.contains("allow_unsafe_producer_settings"),
        "{issues:?}"
    );
    assert!(issues[1].problem.contains("per-key order"), "{issues:?}");
    let allowed = text.replace(
        "[kafka]\n",
        "[kafka]\nallow_unsafe_producer_settings = true\n",
    );
    let config = parse(&allowed).unwrap();
    assert_eq!(config.kafka.producer["acks"], "1");
    // Safe spellings pass.
    let safe = "[kafka.producer]\nacks = \"-1\"\n\"enable.idempotence\" = \"true\"\n\
             \"max.in.flight.requests.per.connection\" = \"5\"\n";
    let text = MINIMAL.replace("[kafka]\n", &format!("{safe}[kafka]\n"));
    parse(&text).unwrap();
}

#[test]
fn wrong_type_names_the_key() {
    let text = format!("{MINIMAL}\n[delivery]\nmax_in_flight_bytes = \"lots\"\n");
    let issues = issues(&text);
    assert_eq!(issues[0].key, "delivery.max_in_flight_bytes");
}

#[test]
fn memory_limit_sizes_the_in_flight_budget_unless_it_is_set() {
    let sized = |extra: &str| {
        let text = format!("{MINIMAL}\n[delivery]\n{extra}\n");
        let config: DeliveryConfig = toml::from_str::<toml::Table>(&text).unwrap()["delivery"]
            .clone()
            .try_into()
            .unwrap();
        (config.memory_limit, config.in_flight_bytes())
    };
    assert_eq!(sized(""), (128 << 20, 16 << 20));
    assert_eq!(sized("memory_limit = \"256MiB\""), (256 << 20, 32 << 20));
    assert_eq!(sized("memory_limit = \"1 GiB\""), (1 << 30, 128 << 20));
    assert_eq!(sized("memory_limit = 67108864"), (64 << 20, 8 << 20));
    assert_eq!(
        sized("memory_limit = \"64MiB\"\nmax_in_flight_bytes = 1048576"),
        (64 << 20, 1 << 20)
    );
    let bad = issues(&format!("{MINIMAL}\n[delivery]\nmemory_limit = \"lots\"\n"));
    assert_eq!(bad[0].key, "delivery.memory_limit");
    assert!(bad[0].problem.contains("128MiB"), "{:?}", bad[0].problem);
    let small = issues(&format!("{MINIMAL}\n[delivery]\nmemory_limit = \"8MiB\"\n"));
    assert_eq!(small[0].key, "delivery.memory_limit");
}

#[test]
fn the_source_section_is_one_table_of_the_sections_kind() {
    let base = MINIMAL.replace("[source.test]\n        url = \"${PG_URL}\"\n", "");
    let with = |section: &str| base.replace("[kafka]", &format!("{section}\n[kafka]"));
    let one = |text: &str| {
        let found = issues(text);
        assert_eq!(found.len(), 1, "{found:?}");
        found.into_iter().next().unwrap()
    };
    let issue = one(&with("[source.mysql]\nurl = \"x\""));
    assert_eq!(issue.key, "source");
    assert!(
        issue
            .problem
            .starts_with("unknown variant `mysql`, expected `test`"),
        "{issue:?}"
    );
    let issue = one(&with("[source]"));
    assert_eq!(issue.key, "source");
    assert!(
        issue
            .problem
            .starts_with("wanted exactly 1 element, found 0")
    );
    let issue = one(&with("[source.test]\nurl = \"x\"\n[source.other]\nx = 1"));
    assert_eq!(issue.key, "source");
    assert!(
        issue
            .problem
            .starts_with("wanted exactly 1 element, more than 1")
    );
    let issue = one(&with("[source.test]\nurl = 5"));
    assert_eq!(issue.key, "source.test.url");
    assert!(
        issue
            .problem
            .starts_with("invalid type: integer (value not shown), expected a string")
    );
    let issue = one(&with("[source.test]\nurl = \"x\"\nuri = \"y\""));
    assert_eq!(issue.key, "source.test.uri");
    assert!(
        issue
            .problem
            .starts_with("unknown field `uri`, expected `url`")
    );
    let issue = one(&base);
    assert_eq!(issue.key, "(top level)");
    assert!(issue.problem.starts_with("missing field `source`"));
    // The section's own rules come after the name's and before the shared sections'.
    let text = with("[source.test]\nurl = \"\"").replace("\"orders\"", "\"Orders\"")
        + "\n[admin]\nlisten = \"localhost\"\n";
    let keys: Vec<_> = issues(&text).into_iter().map(|i| i.key).collect();
    assert_eq!(keys, ["name", "source.test.url", "admin.listen"]);
}

//! A Kafka Connect connector configuration as Connect holds it: the JSON of
//! `GET /connectors/<name>/config` (a flat object of strings), the JSON of
//! `GET /connectors/<name>` or of a `POST /connectors` body (`{"name":…,"config":{…}}`), or a
//! Java `.properties` file. Values are kept as Connect would see them (strings).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, bail};

/// A connector configuration: its name (when the input carries one) and its settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConnectorConfig {
    /// The connector's name: `name` of the wrapper or of the settings.
    pub name: Option<String>,
    /// Every setting, by Connect's name.
    pub settings: BTreeMap<String, String>,
}

impl ConnectorConfig {
    /// Reads a file: JSON when its first non-blank character is `{`, else `.properties`.
    ///
    /// # Errors
    ///
    /// The file cannot be read or is neither form.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!("cannot read the connector configuration {}", path.display())
        })?;
        Self::parse(&text).with_context(|| format!("{}", path.display()))
    }

    /// Parses JSON (either form) or `.properties` text.
    ///
    /// # Errors
    ///
    /// Neither form, or values that are objects or arrays.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        if text.trim_start().starts_with('{') {
            Self::from_json(text)
        } else {
            Self::from_properties(text)
        }
    }

    fn from_json(text: &str) -> anyhow::Result<Self> {
        let value: serde_json::Value = serde_json::from_str(text)
            .context("not valid JSON (expected a connector configuration object)")?;
        let serde_json::Value::Object(mut top) = value else {
            bail!("expected a JSON object: the connector's configuration");
        };
        // `{"name":…,"config":{…}}` (a POST /connectors body, GET /connectors/<name>), or the
        // bare map of GET /connectors/<name>/config.
        let (wrapper_name, map) = match top.remove("config") {
            Some(serde_json::Value::Object(config)) => (
                top.get("name").and_then(|n| n.as_str()).map(str::to_owned),
                config,
            ),
            Some(other) => {
                top.insert("config".to_owned(), other);
                (None, top)
            }
            None => (None, top),
        };
        let mut settings = BTreeMap::new();
        for (key, value) in map {
            let text = match value {
                serde_json::Value::String(s) => s,
                serde_json::Value::Number(n) => n.to_string(),
                serde_json::Value::Bool(b) => b.to_string(),
                serde_json::Value::Null => continue,
                _ => bail!(
                    "setting {key:?}: expected a string, number or boolean (Connect's settings are strings)"
                ),
            };
            settings.insert(key, text);
        }
        let name = wrapper_name.or_else(|| settings.get("name").cloned());
        Ok(Self { name, settings })
    }

    fn from_properties(text: &str) -> anyhow::Result<Self> {
        let map = java_properties::read(text.as_bytes())
            .context("not a JSON object and not a valid .properties file")?;
        let settings: BTreeMap<String, String> = map.into_iter().collect();
        if settings.is_empty() {
            bail!("no settings found (expected the connector's JSON or a .properties file)");
        }
        Ok(Self {
            name: settings.get("name").cloned(),
            settings,
        })
    }

    /// A setting's value.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.settings.get(key).map(String::as_str)
    }

    /// The connector class's short form: `postgres`, `mysql`, or the class itself.
    pub fn kind(&self) -> ConnectorKind {
        match self.get("connector.class").unwrap_or_default() {
            "io.debezium.connector.postgresql.PostgresConnector" | "PostgresConnector" => {
                ConnectorKind::Postgres
            }
            "io.debezium.connector.mysql.MySqlConnector" | "MySqlConnector" => ConnectorKind::Mysql,
            "io.debezium.connector.mariadb.MariaDbConnector" | "MariaDbConnector" => {
                ConnectorKind::Mysql
            }
            other => ConnectorKind::Other(other.to_owned()),
        }
    }
}

/// Which Debezium connector a configuration is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectorKind {
    /// `io.debezium.connector.postgresql.PostgresConnector`.
    Postgres,
    /// `io.debezium.connector.mysql.MySqlConnector` (and the MariaDB connector).
    Mysql,
    /// Anything else (the class name, empty when missing).
    Other(String),
}

/// Whether a value is a Connect config provider reference (`${file:/path:key}`,
/// `${env:NAME}`, `${vault:…}`): Connect resolves it at start, sluice never sees the secret.
pub fn provider_reference(value: &str) -> Option<&str> {
    let start = value.find("${")?;
    let rest = &value[start + 2..];
    let end = rest.find('}')?;
    let inner = &rest[..end];
    let (provider, _) = inner.split_once(':')?;
    (!provider.is_empty()
        && provider
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
    .then_some(&value[start..start + 2 + end + 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_forms_give_the_same_settings() {
        let bare = r#"{"connector.class":"io.debezium.connector.postgresql.PostgresConnector",
            "name":"inventory","database.port":5432,"topic.prefix":"shop"}"#;
        let wrapped = r#"{"name":"inventory","config":{
            "connector.class":"io.debezium.connector.postgresql.PostgresConnector",
            "database.port":"5432","topic.prefix":"shop"},"tasks":[],"type":"source"}"#;
        let properties = "# a comment\nname=inventory\nconnector.class=io.debezium.connector.postgresql.PostgresConnector\n\
            database.port = 5432\ntopic.prefix: shop\n";
        let a = ConnectorConfig::parse(bare).unwrap();
        let b = ConnectorConfig::parse(wrapped).unwrap();
        let c = ConnectorConfig::parse(properties).unwrap();
        assert_eq!(a.name.as_deref(), Some("inventory"));
        assert_eq!(b.name.as_deref(), Some("inventory"));
        assert_eq!(c.name.as_deref(), Some("inventory"));
        assert_eq!(a.get("database.port"), Some("5432"));
        assert_eq!(
            b.settings.get("database.port"),
            c.settings.get("database.port")
        );
        assert_eq!(a.kind(), ConnectorKind::Postgres);
        assert_eq!(b.kind(), ConnectorKind::Postgres);
        assert_eq!(c.get("topic.prefix"), Some("shop"));
    }

    #[test]
    fn properties_escapes_and_continuations_are_java_s() {
        let text = "table.include.list=public\\\\.orders,\\\n    public\\\\.customers\nk\\:x=1\n";
        let c = ConnectorConfig::parse(text).unwrap();
        assert_eq!(
            c.get("table.include.list"),
            Some("public\\.orders,public\\.customers")
        );
        assert_eq!(c.get("k:x"), Some("1"));
    }

    #[test]
    fn provider_references_are_found() {
        assert_eq!(
            provider_reference("${file:/opt/secrets.properties:pg_password}"),
            Some("${file:/opt/secrets.properties:pg_password}")
        );
        assert_eq!(
            provider_reference("${env:PG_PASSWORD}"),
            Some("${env:PG_PASSWORD}")
        );
        assert_eq!(provider_reference("plain"), None);
        assert_eq!(provider_reference("${NOT_A_PROVIDER}"), None);
    }

    #[test]
    fn nested_values_are_refused() {
        let error = ConnectorConfig::parse(r#"{"a":{"b":1}}"#).unwrap_err();
        assert!(format!("{error:#}").contains("\"a\""), "{error:#}");
    }
}

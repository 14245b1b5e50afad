//! The pipeline file as `sluice run` and `sluice check` read it: one of the sources into Kafka,
//! or Kafka into one of the sinks, told apart by the key of its source section. The one module
//! that knows every kind (each source's and sink's configuration lives with it), so that none
//! of them needs to know the others; a new source or sink is one more variant here.

use std::path::Path;

use crate::config::ConfigError;
use crate::config::load::load_file;
use crate::sink::config::SinkPipelineConfig;
use crate::source::mysql::config::MysqlPipelineConfig;
use crate::source::postgres::config::PgPipelineConfig;

/// What a pipeline file describes, by its sections: a source into Kafka
/// (`[source.<kind>]` and `[kafka]`) or Kafka into a sink (`[source.kafka]` and `[sink.<kind>]`).
#[derive(Debug, Clone)]
pub enum PipelineFile {
    /// PostgreSQL → Kafka (`[source.postgres]`): change data capture.
    Postgres(Box<PgPipelineConfig>),
    /// MySQL/MariaDB → Kafka (`[source.mysql]`): binlog change data capture.
    Mysql(Box<MysqlPipelineConfig>),
    /// Kafka → files (`[source.kafka]` and `[sink.files]`).
    Files(Box<SinkPipelineConfig>),
}

impl PipelineFile {
    /// Reads, interpolates, parses and validates a pipeline file of any kind; the kind is
    /// decided by the source section (`[source.kafka]` is a sink pipeline).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the file and every invalid key.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        load_file(path, Self::from_toml)
    }

    /// Parses and validates pipeline text of any kind.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `origin` and every invalid key.
    pub fn from_toml(
        text: &str,
        origin: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let value = crate::config::load::parse_toml(text, origin)?;
        let source = value.get("source").and_then(toml::Value::as_table);
        let has = |kind: &str| source.is_some_and(|source| source.contains_key(kind));
        if has("kafka") {
            SinkPipelineConfig::from_toml(text, origin, env).map(|c| Self::Files(Box::new(c)))
        } else if has("mysql") {
            MysqlPipelineConfig::from_toml(text, origin, env).map(|c| Self::Mysql(Box::new(c)))
        } else {
            // PostgreSQL is also the kind of a file without a known source section: its
            // parsing names what is missing or unknown.
            PgPipelineConfig::from_toml(text, origin, env).map(|c| Self::Postgres(Box::new(c)))
        }
    }

    /// The pipeline's name.
    pub fn name(&self) -> &str {
        match self {
            Self::Postgres(config) => &config.name,
            Self::Mysql(config) => &config.name,
            Self::Files(config) => &config.name,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "OUTPUT_DIR").then(|| "/tmp/out".to_owned())
    }

    #[test]
    fn kafka_source_selects_the_sink_kind() {
        let text = r#"
            name = "orders_files"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["orders"]
            [sink.files]
            path = "${OUTPUT_DIR}"
            format = "jsonl"
        "#;
        let file = PipelineFile::from_toml(text, "t.toml", &env).unwrap();
        assert!(matches!(file, PipelineFile::Files(_)));
        assert_eq!(file.name(), "orders_files");
    }

    /// Every secret a pipeline file can hold, in every place it can be, stays out of `{:?}`
    /// prints of the loaded configuration (both kinds, and the parsed connection string) and
    /// out of the errors about the file.
    #[test]
    fn debug_prints_and_errors_hide_every_secret() {
        const SECRETS: [&str; 8] = [
            "PgUrlSecret1",
            "PgQuerySecret2",
            "SaslSecret3",
            "ProducerSecret4",
            "AdminSecret5-long-enough",
            "KeyPemSecret6",
            "S3Secret7",
            "ConsumerSecret8",
        ];
        let env = |name: &str| match name {
            "OUTPUT_DIR" => Some("/tmp/out".to_owned()),
            "ADMIN_TOKEN" => Some(SECRETS[4].to_owned()),
            _ => None,
        };
        let cdc = format!(
            r#"
            name = "orders"
            [source.postgres]
            url = "postgres://u:{}@127.0.0.1:5432/db?sslmode=prefer"
            schemas = ["public"]
            [kafka]
            brokers = "127.0.0.1:9092"
            [kafka.client]
            "sasl.password" = "{}"
            "ssl.key.pem" = "{}"
            [kafka.producer]
            "sasl.password" = "{}"
            [admin]
            token = "${{ADMIN_TOKEN}}"
            "#,
            SECRETS[0], SECRETS[2], SECRETS[5], SECRETS[3]
        );
        let sink = format!(
            r#"
            name = "orders_files"
            [source.kafka]
            brokers = "127.0.0.1:9092"
            topics = ["orders"]
            [source.kafka.client]
            "sasl.password" = "{}"
            "ssl.key.password" = "{}"
            [source.kafka.properties]
            "sasl.oauthbearer.client.secret" = "{}"
            [sink.files]
            path = "/tmp/out/staging"
            url = "s3://bucket/prefix"
            format = "jsonl"
            [sink.files.s3]
            access_key_id = "AKIA"
            secret_access_key = "{}"
            [admin]
            token = "${{ADMIN_TOKEN}}"
            "#,
            SECRETS[2], SECRETS[5], SECRETS[7], SECRETS[6]
        );
        let mut printed = Vec::new();
        for text in [&cdc, &sink] {
            let file = PipelineFile::from_toml(text, "t.toml", &env).expect("valid");
            printed.push(format!("{file:?}"));
            printed.push(format!("{file:#?}"));
            if let PipelineFile::Postgres(config) = &file {
                let pg = crate::pg_connect::PgConnectConfig::parse(&config.source.url).unwrap();
                printed.push(format!("{pg:?}"));
                let query = crate::pg_connect::PgConnectConfig::parse(&format!(
                    "postgres://u@h/db?password={}",
                    SECRETS[1]
                ))
                .unwrap();
                printed.push(format!("{query:?}"));
            }
        }
        // Errors about a file that holds secrets: a syntax error on a secret's line, a secret
        // where a number belongs.
        let broken = cdc.replace("?sslmode=prefer\"", "?sslmode=prefer");
        let misplaced = cdc.replace(
            "schemas = [\"public\"]",
            &format!(
                "schemas = [\"public\"]\nstatus_interval_ms = \"{}\"",
                SECRETS[1]
            ),
        );
        for text in [&broken, &misplaced] {
            let error = PipelineFile::from_toml(text, "t.toml", &env).expect_err("invalid");
            printed.push(error.to_string());
            printed.push(format!("{error:?}"));
        }
        assert!(
            printed[printed.len() - 4].contains("line 4, column"),
            "{}",
            printed[printed.len() - 4]
        );
        assert!(
            printed[printed.len() - 2].contains(
                "status_interval_ms: invalid type: string (value not shown), expected u64"
            ),
            "{}",
            printed[printed.len() - 2]
        );
        for text in &printed {
            for secret in SECRETS {
                assert!(!text.contains(secret), "{secret} in {text}");
            }
        }
        // What is not secret is still shown.
        assert!(printed[0].contains("127.0.0.1:9092") && printed[0].contains("sasl.password"));
    }

    #[test]
    fn mysql_files_load_as_mysql() {
        let text = r#"
            name = "shop"
            [source.mysql]
            url = "mysql://sluice@127.0.0.1:3306"
            server_id = 5701
            [kafka]
            brokers = "127.0.0.1:9092"
        "#;
        let file = PipelineFile::from_toml(text, "t.toml", &env).unwrap();
        assert!(matches!(file, PipelineFile::Mysql(_)));
        assert_eq!(file.name(), "shop");
    }

    #[test]
    fn postgres_files_load_as_postgres() {
        let text = r#"
            name = "orders"
            [source.postgres]
            url = "postgres://postgres@127.0.0.1:5432/postgres"
            schemas = ["public"]
            [kafka]
            brokers = "127.0.0.1:9092"
        "#;
        assert!(matches!(
            PipelineFile::from_toml(text, "t.toml", &env).unwrap(),
            PipelineFile::Postgres(_)
        ));
    }

    #[test]
    fn an_unknown_source_kind_is_named_with_the_kinds_expected() {
        let text = r#"
            name = "orders"
            [source.oracle]
            url = "oracle://root@127.0.0.1:1521/app"
            [kafka]
            brokers = "127.0.0.1:9092"
        "#;
        let error = PipelineFile::from_toml(text, "t.toml", &env).unwrap_err();
        let ConfigError::Invalid { issues, .. } = error else {
            panic!("expected invalid config, got {error:?}");
        };
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert_eq!(issues[0].key, "source");
        assert!(
            issues[0]
                .problem
                .starts_with("unknown variant `oracle`, expected `postgres`"),
            "{issues:?}"
        );
    }
}

//! The Debezium MySQL (and MariaDB) connector's settings (MySqlConnectorConfig, Debezium 3.x)
//! and what sluice makes of each; shared and Connect settings are [`super::common`]'s.

use super::regex_glob::{split_list, to_globs};
use super::session::Import;

/// One MySQL connector setting; false when it is not one of this connector's own.
pub fn setting(import: &mut Import<'_>, key: &str, value: &str) -> bool {
    match key {
        "database.hostname" | "database.port" | "database.user" => import.carried(key),
        "database.password" => {
            import.needs_env(
                "MYSQL_PASSWORD",
                "the MySQL password (database.password), URL-encoded",
            );
            let note = match super::connector::provider_reference(value) {
                Some(reference) => format!(
                    "not written into the file: set MYSQL_PASSWORD to the value of {reference}"
                ),
                None => "not written into the file: set MYSQL_PASSWORD".to_owned(),
            };
            import.noted(key, note);
        }
        "database.server.id" => match value.parse::<u32>() {
            Ok(id) => {
                import.set_source("server_id", i64::from(id));
                import.noted(key, "server_id: sluice registers with the same replica id, so the connector must be stopped");
            }
            Err(_) => import.dropped(key, "expected a number", false),
        },
        "database.server.id.offset" => {
            import.dropped(key, "sluice reads with one server id", false)
        }
        "database.ssl.mode" => {
            // mysql_async's URL parameters.
            let params = match value {
                "disabled" => None,
                "preferred" => {
                    import.noted(key, "preferred: sluice connects without TLS unless the URL says require_ssl=true");
                    return true;
                }
                "required" => Some("require_ssl=true&verify_ca=false&verify_identity=false"),
                "verify_ca" => Some("require_ssl=true&verify_identity=false"),
                "verify_identity" => Some("require_ssl=true"),
                other => {
                    import.dropped(key, format!("{other:?} is not a database.ssl.mode"), false);
                    return true;
                }
            };
            if let Some(params) = params {
                import.doc.set("", "_mysql_tls", params, None);
            }
            import.carried(key);
        }
        "database.ssl.truststore"
        | "database.ssl.truststore.password"
        | "database.ssl.keystore"
        | "database.ssl.keystore.password" => import.dropped(
            key,
            "a Java key store: sluice's TLS takes the system roots, or a PEM file of CA certificates as source.mysql.ssl_ca",
            false,
        ),
        "database.include.list"
        | "database.exclude.list"
        | "table.include.list"
        | "table.exclude.list" => {}
        "include.schema.changes" => {
            import.set_source("include_schema_changes", value == "true");
            import.carried(key);
        }
        "include.query" => {
            if value == "false" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice does not write the statement into source.query",
                    true,
                );
            }
        }
        "bigint.unsigned.handling.mode" => {
            if value == "long" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice writes BIGINT UNSIGNED as Debezium's default (long)",
                    true,
                );
            }
        }
        "enable.time.adjuster" => {
            if value == "true" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice adjusts two-digit years as Debezium's default",
                    true,
                );
            }
        }
        "inconsistent.schema.handling.mode" | "event.deserialization.failure.handling.mode" => {
            if value == "fail" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice stops on an event it cannot decode; it never skips one",
                    true,
                );
            }
        }
        "gtid.source.includes" | "gtid.source.excludes" | "gtid.source.filter.dml.events" => {
            import.dropped(
                key,
                "sluice reads every GTID's events of the captured tables",
                false,
            );
        }
        "connect.timeout.ms"
        | "connect.keep.alive"
        | "connect.keep.alive.interval.ms"
        | "binlog.buffer.size"
        | "min.row.count.to.stream.results"
        | "use.nongraceful.disconnect"
        | "database.jdbc.driver"
        | "database.protocol" => {
            import.noted(key, "sluice's own connection handling (heartbeat_interval_ms replaces a silent connection)");
        }
        _ if key.starts_with("schema.history.internal") || key.starts_with("database.history") => {
            import.noted(
                key,
                "sluice keeps no schema history topic: it reads column names and types from the binlog (binlog_row_metadata = FULL)",
            );
        }
        _ => return false,
    }
    true
}

/// After the settings: the URL and the captured tables.
pub fn finish(import: &mut Import<'_>) {
    let host = import.get("database.hostname").unwrap_or("localhost");
    let port = import.get("database.port").unwrap_or("3306");
    let user = import.get("database.user").unwrap_or("root");
    let password = if import.get("database.password").is_some() {
        ":${MYSQL_PASSWORD}"
    } else {
        ""
    };
    let mut url = format!("mysql://{user}{password}@{host}:{port}");
    if let Some(toml::Value::String(params)) = import.doc.get("", "_mysql_tls").cloned() {
        url.push('?');
        url.push_str(&params);
    }
    import.doc.remove("", "_mysql_tls");
    import.set_source("url", url);
    if import.doc.get(import.source, "server_id").is_none() {
        import.dropped(
            "database.server.id",
            "missing: sluice needs a replica id (server_id = …): written as 5701",
            false,
        );
        import.set_source("server_id", 5701_i64);
    }
    let mut lists: std::collections::BTreeMap<&str, Vec<String>> =
        std::collections::BTreeMap::new();
    for (key, whole_databases) in [
        ("database.include.list", true),
        ("table.include.list", false),
        ("database.exclude.list", true),
        ("table.exclude.list", false),
    ] {
        let Some(list) = import.get(key) else {
            continue;
        };
        let mut globs = Vec::new();
        let mut failed = None;
        for regex in split_list(list) {
            match to_globs(&regex) {
                Ok(more) => globs.extend(more),
                Err(why) => failed = Some(format!("{regex:?}: {why}")),
            }
        }
        match failed {
            Some(why) => import.dropped(key, why, true),
            None => {
                let globs = globs
                    .into_iter()
                    .map(|g| if whole_databases { format!("{g}.*") } else { g })
                    .collect();
                lists.insert(key, globs);
                import.noted(
                    key,
                    "as globs (Debezium's regexes ignore case, globs do not)",
                );
            }
        }
    }
    // With both include lists Debezium captures the tables both match: sluice's include_tables
    // is a union, so the table list alone is written (tables outside the listed databases are
    // then captured too: reported).
    let include = match (
        lists.get("database.include.list"),
        lists.get("table.include.list"),
    ) {
        (Some(_), Some(tables)) => {
            import.noted(
                "database.include.list",
                "with table.include.list: the table list alone is written (check that its tables are in the listed databases)",
            );
            tables.clone()
        }
        (Some(databases), None) => databases.clone(),
        (None, Some(tables)) => tables.clone(),
        (None, None) => Vec::new(),
    };
    let mut exclude = lists
        .get("database.exclude.list")
        .cloned()
        .unwrap_or_default();
    exclude.extend(lists.get("table.exclude.list").cloned().unwrap_or_default());
    let source = import.source;
    if !include.is_empty() {
        import
            .doc
            .set(source, "include_tables", strings(&include), None);
    }
    if !exclude.is_empty() {
        import
            .doc
            .set(source, "exclude_tables", strings(&exclude), None);
    }
}

fn strings(items: &[String]) -> toml::Value {
    toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect())
}

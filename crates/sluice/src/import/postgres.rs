//! The Debezium PostgreSQL connector's settings (PostgresConnectorConfig, Debezium 3.x) and
//! what sluice makes of each; the settings it shares with the MySQL connector and Connect's
//! own are [`super::common`]'s.

use super::regex_glob::{split_list, to_globs};
use super::session::Import;

/// One PostgreSQL connector setting; false when it is not one of this connector's own.
pub fn setting(import: &mut Import<'_>, key: &str, value: &str) -> bool {
    match key {
        // The connection: assembled in `finish`.
        "database.hostname" | "database.port" | "database.user" | "database.dbname" => {
            import.carried(key);
        }
        "database.password" => {
            let note = match super::connector::provider_reference(value) {
                Some(reference) => format!(
                    "not written into the file: set PGPASSWORD to the value of {reference}"
                ),
                None => "not written into the file: set PGPASSWORD".to_owned(),
            };
            import.needs_env("PGPASSWORD", "the PostgreSQL password (database.password)");
            import.noted(key, note);
        }
        "database.sslmode" => {
            let mode = match value {
                "disable" | "allow" | "prefer" | "require" | "verify-ca" | "verify-full" => value,
                "verify_ca" => "verify-ca",
                "verify_full" => "verify-full",
                other => {
                    import.dropped(key, format!("{other:?} is not a libpq sslmode"), false);
                    return true;
                }
            };
            import.set_source("sslmode", mode);
            import.carried(key);
        }
        "database.sslrootcert" => {
            import.set_source("sslrootcert", value);
            import.carried(key);
        }
        "database.sslcert" => {
            import.set_source("sslcert", value);
            import.noted(key, "sslcert: a PEM certificate (the JDBC driver also takes DER)");
        }
        "database.sslkey" => {
            import.set_source("sslkey", value);
            import.noted(
                key,
                "sslkey: libpq reads a PEM key (the JDBC driver's is PKCS-8 DER: convert it with `openssl pkcs8 -inform DER -in KEY -out KEY.pem -nocrypt`)",
            );
        }
        "database.sslpassword" => import.dropped(
            key,
            "sluice reads an unencrypted key: decrypt it (`openssl pkcs8 … -nocrypt`) and keep the file 0600",
            false,
        ),
        "database.sslfactory" => import.dropped(key, "a Java class: sluice's TLS is rustls (sslmode, sslrootcert)", false),
        "database.tcpKeepAlive" => import.noted(key, "sluice's connections always use TCP keepalives"),
        "database.initial.statements" => import.dropped(
            key,
            "sluice runs no statements of yours on its connections",
            true,
        ),
        "database.query.timeout.ms" => import.noted(key, "statement_timeout_ms (default 300000)"),
        "plugin.name" => {
            if value == "pgoutput" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    format!("sluice decodes pgoutput only: a takeover needs a pgoutput slot; a new pipeline gets its own pgoutput slot ({value} is not read)"),
                    false,
                );
            }
        }
        "slot.name" => {
            import.set_source("slot", value);
            import.carried(key);
        }
        "slot.drop.on.stop" => {
            if value == "false" {
                import.carried(key);
            } else {
                import.noted(key, "sluice never drops its slot (`sluice slots` lists it)");
            }
        }
        "slot.failover" => import.dropped(key, "sluice makes no failover slots (PostgreSQL 17): docs/high-availability.md", false),
        "slot.stream.params" => import.dropped(key, "pgoutput takes no extra parameters from sluice", false),
        "slot.max.retries" | "slot.retry.delay.ms" => import.noted(
            key,
            "a slot in use is waited for by [restart] (initial_backoff_ms, max_backoff_ms)",
        ),
        "publication.name" => {
            import.set_source("publication", value);
            import.carried(key);
        }
        "publication.autocreate.mode" => {
            // Written in `finish` with create_publication.
            import.noted(
                key,
                "the publication is used as it is (create_publication = false): sluice reads the tables it captures from it; see docs/migrating-from-debezium.md",
            );
        }
        "replica.identity.autoset.values" => import.dropped(
            key,
            "sluice does not set replica identities: the tables keep what Debezium set",
            false,
        ),
        "schema.include.list" | "schema.exclude.list" | "table.include.list"
        | "table.exclude.list" => {
            // Read together in `finish`.
        }
        "interval.handling.mode" | "hstore.handling.mode" => {
            let allowed: &[&str] = if key == "interval.handling.mode" {
                &["numeric", "string"]
            } else {
                &["json", "map"]
            };
            if allowed.contains(&value) {
                import
                    .doc
                    .set("kafka.events", &key.replace('.', "_"), value, None);
                import.carried(key);
            } else {
                import.dropped(key, format!("sluice takes {}", allowed.join(", ")), true);
            }
        }
        "money.fraction.digits" => match value.parse::<u8>() {
            Ok(digits) => {
                import
                    .doc
                    .set("kafka.events", "money_fraction_digits", i64::from(digits), None);
                import.carried(key);
            }
            Err(_) => import.dropped(key, "expected a number of digits", true),
        },
        "unavailable.value.placeholder" => {
            import
                .doc
                .set("kafka.events", "unavailable_value_placeholder", value, None);
            import.carried(key);
        }
        "snapshot.fetch.size" => match value.parse::<u32>() {
            Ok(n) if n > 0 => {
                import.set_source("snapshot_fetch_rows", i64::from(n));
                import.carried(key);
            }
            _ => import.dropped(key, "expected a positive number", false),
        },
        "status.update.interval.ms" => match value.parse::<u64>() {
            Ok(ms) if ms > 0 => {
                import.set_source("status_interval_ms", i64::try_from(ms).unwrap_or(i64::MAX));
                import.carried(key);
            }
            _ => import.dropped(key, "expected a positive number of milliseconds", false),
        },
        "flush.lsn.source" => {
            if value == "true" {
                import.carried(key);
            } else {
                import.dropped(
                    key,
                    "sluice always confirms its position to the slot (that is its checkpoint)",
                    false,
                );
            }
        }
        "lsn.flush.timeout.ms" | "lsn.flush.timeout.action" => {
            import.noted(key, "sluice's confirmations never wait on in-flight work");
        }
        "xmin.fetch.interval.ms" => {
            if value == "0" {
                import.carried(key);
            } else {
                import.dropped(key, "sluice does not write source.xmin", true);
            }
        }
        "publish.via.partition.root" => {
            // Written in `finish` as source.postgres.partitions.
            import.carried(key);
        }
        "schema.refresh.mode" => {
            if value == "columns_diff" {
                import.carried(key);
            } else {
                import.noted(key, "sluice refreshes a table's schema from each Relation message");
            }
        }
        "message.prefix.include.list" | "message.prefix.exclude.list" => import.dropped(
            key,
            "sluice writes every logical decoding message as Debezium does by default",
            true,
        ),
        "include.schema.comments" => {
            if value == "false" {
                import.carried(key);
            } else {
                import.dropped(key, "sluice writes no column comments into schemas", true);
            }
        }
        "read.only" => import.dropped(key, "sluice's incremental snapshots write watermarks to the signal table", false),
        "incremental.snapshot.watermarking.strategy" | "incremental.snapshot.allow.schema.changes" => {
            import.noted(key, "sluice's incremental snapshots: docs/postgres-source.md");
        }
        _ => return false,
    }
    true
}

/// After the settings: the connection URL, the captured tables, the publication.
pub fn finish(import: &mut Import<'_>) {
    let host = import.get("database.hostname").unwrap_or("localhost");
    let port = import.get("database.port").unwrap_or("5432");
    let user = import.get("database.user").unwrap_or("postgres");
    let db = import.get("database.dbname").unwrap_or("postgres");
    let url = format!(
        "postgres://{}@{}:{}/{}",
        encode(user),
        host,
        port,
        encode(db)
    );
    import.set_source("url", url);
    if import.get("database.password").is_none() {
        import.needs_env(
            "PGPASSWORD",
            "the PostgreSQL password, when the server asks for one (or a ~/.pgpass entry)",
        );
    }
    // Debezium's default publication is dbz_publication and its default slot `debezium`:
    // sluice's defaults are its own, so both are written.
    if import.doc.get(import.source, "slot").is_none() {
        import.set_source("slot", "debezium");
        import.findings.push(super::session::Finding {
            setting: "slot.name".to_owned(),
            outcome: super::session::Outcome::Noted(
                "unset: Debezium's default \"debezium\"".to_owned(),
            ),
        });
    }
    if import.doc.get(import.source, "publication").is_none() {
        import.set_source("publication", "dbz_publication");
    }
    import.set_source("create_publication", false);
    // Debezium publishes partitions' changes under the partitions unless the publication
    // publishes via the root: sluice's partitions mode says the same of the same publication.
    let via_root = import.flag("publish.via.partition.root").unwrap_or(false);
    import.set_source("partitions", if via_root { "root" } else { "leaves" });
    if import.get("publish.via.partition.root").is_none() {
        import.findings.push(super::session::Finding {
            setting: "publish.via.partition.root".to_owned(),
            outcome: super::session::Outcome::Noted(
                "unset: Debezium's default false, so partitions = \"leaves\" (each partition its own topic, as Debezium writes them)"
                    .to_owned(),
            ),
        });
    }
    tables(import);
}

fn encode(part: &str) -> String {
    part.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// Debezium's schema and table lists into `schemas`, `tables` and `exclude_tables`.
fn tables(import: &mut Import<'_>) {
    let mut excludes: Vec<String> = Vec::new();
    let schema_include = import.get("schema.include.list");
    let table_include = import.get("table.include.list");
    let mut listed_schemas: Vec<String> = Vec::new();
    if let Some(list) = schema_include {
        match globs_of(list) {
            Ok(globs) => {
                let (exact, wild): (Vec<_>, Vec<_>) =
                    globs.into_iter().partition(|g| is_literal(g));
                if wild.is_empty() {
                    listed_schemas = exact;
                    import.carried("schema.include.list");
                } else {
                    import.dropped(
                        "schema.include.list",
                        format!("sluice's schemas are names, not patterns ({wild:?})"),
                        true,
                    );
                }
            }
            Err(why) => import.dropped("schema.include.list", why, true),
        }
    }
    let (mut schemas, mut tables) = (Vec::new(), Vec::new());
    if let Some(list) = table_include {
        match globs_of(list) {
            Ok(globs) => {
                let mut bad = Vec::new();
                for glob in globs {
                    if is_literal(&glob) {
                        tables.push(glob);
                    } else if let Some(schema) = glob.strip_suffix(".*").filter(|s| is_literal(s)) {
                        schemas.push(schema.to_owned());
                    } else {
                        bad.push(glob);
                    }
                }
                if bad.is_empty() {
                    import.carried("table.include.list");
                } else {
                    import.dropped(
                        "table.include.list",
                        format!("sluice's tables are names or whole schemas ({bad:?} is neither); list the tables"),
                        true,
                    );
                }
            }
            Err(why) => import.dropped("table.include.list", why, true),
        }
        // With both lists Debezium captures what both match.
        if schema_include.is_some() {
            let in_schemas = |name: &str| {
                listed_schemas
                    .iter()
                    .any(|s| name.split_once('.').is_some_and(|(schema, _)| schema == s))
            };
            tables.retain(|t| in_schemas(t));
            schemas.retain(|s| listed_schemas.contains(s));
        }
    } else {
        schemas = listed_schemas;
    }
    if let Some(list) = import.get("schema.exclude.list") {
        match globs_of(list) {
            Ok(globs) => {
                excludes.extend(globs.into_iter().map(|g| format!("{g}.*")));
                import.carried("schema.exclude.list");
            }
            Err(why) => import.dropped("schema.exclude.list", why, true),
        }
    }
    if let Some(list) = import.get("table.exclude.list") {
        match globs_of(list) {
            Ok(globs) => {
                excludes.extend(globs);
                import.carried("table.exclude.list");
            }
            Err(why) => import.dropped("table.exclude.list", why, true),
        }
    }
    if schemas.is_empty() && tables.is_empty() {
        schemas.push("public".to_owned());
        import.findings.push(super::session::Finding {
            setting: "schema.include.list".to_owned(),
            outcome: super::session::Outcome::Dropped {
                reason: "no include list: Debezium captures every schema; sluice captures the schemas it is given: schemas = [\"public\"] written, add the others".to_owned(),
                changes_output: schema_include.is_none() && table_include.is_none(),
            },
        });
    }
    let source = import.source;
    if !schemas.is_empty() {
        import.doc.set(source, "schemas", strings(&schemas), None);
    }
    if !tables.is_empty() {
        import.doc.set(source, "tables", strings(&tables), None);
    }
    if !excludes.is_empty() {
        import
            .doc
            .set(source, "exclude_tables", strings(&excludes), None);
    }
}

fn strings(items: &[String]) -> toml::Value {
    toml::Value::Array(items.iter().cloned().map(toml::Value::String).collect())
}

fn globs_of(list: &str) -> Result<Vec<String>, String> {
    let mut globs = Vec::new();
    for regex in split_list(list) {
        globs.extend(to_globs(&regex).map_err(|why| format!("{regex:?}: {why}"))?);
    }
    Ok(globs)
}

fn is_literal(glob: &str) -> bool {
    !glob.contains(['*', '?', '[', '{', '\\'])
}

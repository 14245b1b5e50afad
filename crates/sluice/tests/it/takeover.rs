//! `sluice import debezium` against the dev stack: the imported file passes `sluice check`, and
//! a takeover of a running Debezium PostgreSQL or MySQL connector (real Kafka Connect,
//! distributed mode, `scripts/takeover-demo`) continues on its slot (binlog position) and
//! topics with nothing missing, per-key order kept and no snapshot.

use std::process::Command;
use std::str::FromStr as _;

use crate::support::{pg, sluice_bin, stack, test_dir, unique};

fn root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// A connector configuration as an operator saves it from Connect's REST API, for the dev
/// stack's PostgreSQL, and the file `sluice import debezium` writes from it passes
/// `sluice check` (the publication Debezium would have made exists; the password comes from
/// PGPASSWORD).
#[tokio::test(flavor = "multi_thread")]
async fn the_imported_file_passes_check_against_the_stack() {
    let stack = stack();
    let client = pg().await;
    let schema = unique("imp");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.orders (id int PRIMARY KEY, total numeric);\
             CREATE PUBLICATION {schema} FOR TABLE {schema}.orders"
        ))
        .await
        .unwrap();
    let pg_config = tokio_postgres::Config::from_str(&stack.pg_url).unwrap();
    let host = match &pg_config.get_hosts()[0] {
        tokio_postgres::config::Host::Tcp(host) => host.clone(),
        #[allow(unreachable_patterns)]
        _ => "127.0.0.1".to_owned(),
    };
    let password = pg_config
        .get_password()
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let config = serde_json::json!({
        "name": format!("{schema}-connector"),
        "config": {
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "database.hostname": host,
            "database.port": pg_config.get_ports()[0].to_string(),
            "database.user": pg_config.get_user().unwrap_or("postgres"),
            "database.password": password,
            "database.dbname": pg_config.get_dbname().unwrap_or("postgres"),
            "topic.prefix": schema,
            "plugin.name": "pgoutput",
            "slot.name": schema,
            "publication.name": schema,
            "table.include.list": format!("{schema}\\.orders"),
            "key.converter": "org.apache.kafka.connect.json.JsonConverter",
            "key.converter.schemas.enable": "false",
            "value.converter": "org.apache.kafka.connect.json.JsonConverter",
            "value.converter.schemas.enable": "false",
        }
    });
    let dir = test_dir(&schema);
    let input = dir.join("connector.json");
    std::fs::write(&input, config.to_string()).unwrap();
    let output = dir.join("pipeline.toml");
    let imported = Command::new(sluice_bin())
        .args(["import", "debezium"])
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&imported.stderr);
    assert!(imported.status.success(), "{report}");
    let text = std::fs::read_to_string(&output).unwrap();
    if !password.is_empty() {
        assert!(!text.contains(&password), "no password in the file: {text}");
    }
    assert!(
        text.contains(&format!("tables = [\"{schema}.orders\"]")),
        "{text}"
    );
    let check = Command::new(sluice_bin())
        .arg("check")
        .arg(&output)
        .env("KAFKA_BROKERS", &stack.brokers)
        .env("PGPASSWORD", &password)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stdout);
    client
        .batch_execute(&format!(
            "DROP PUBLICATION {schema}; DROP SCHEMA {schema} CASCADE"
        ))
        .await
        .unwrap();
    assert!(
        check.status.success() && said.contains("ready"),
        "{said}\n{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert!(said.contains(&format!("{schema}.orders")), "{said}");
}

/// Must show 2 at suite size, both sources at once on one Kafka Connect worker (distributed
/// mode): a real Debezium PostgreSQL connector (pgoutput, its own slot and publication) and a
/// real Debezium MySQL connector (the dev stack's MySQL 8.0), each with unwrap + route, stream
/// a mixed workload of 2,000 operations and are stopped part-way; `sluice import debezium
/// --offsets kafka:<offsets topic>` and `sluice run` go on on the same slot (binlog position)
/// and routed topic while the workload continues. Every change arrives (per key the versions
/// 1, 2, 3, … without a gap, the last one the table's), in order, each key in one partition, no
/// snapshot record from sluice, and the slot's confirmed position (sluice's saved binlog
/// position) moved. MySQL: the import checks the binlog settings and that the offset's file,
/// position and GTID set are still on the server, and seeds sluice's position with it. The
/// 200,000-operation runs are `scripts/takeover-demo postgres mysql`.
#[test]
fn debezium_connectors_are_taken_over_without_a_snapshot() {
    let _ = stack();
    let out = Command::new(root().join("scripts/takeover-demo"))
        .args(["postgres", "mysql", "--rows", "2000"])
        .env("SLUICE", sluice_bin())
        .output()
        .expect("scripts/takeover-demo runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let results: Vec<serde_json::Value> = stdout
        .lines()
        .filter(|line| line.starts_with('{'))
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect();
    for (source, seeded) in [("postgres", 50), ("mysql", 5)] {
        let result = results
            .iter()
            .find(|r| r["source"] == source)
            .unwrap_or_else(|| panic!("no result for {source}:\n{stdout}\n{stderr}"));
        eprintln!("takeover: {result}");
        assert_eq!(result["transforms"], "unwrap,route", "{result}");
        assert_eq!(result["missing"], 0, "{result}\n{stderr}");
        assert_eq!(result["order_ok"], true, "{result}");
        assert_eq!(result["partitions_ok"], true, "{result}");
        assert_eq!(result["snapshot_records_by_sluice"], 0, "{result}");
        assert_eq!(result["slot_moved"], true, "{result}");
        assert_eq!(
            result["changes"],
            2000 + seeded,
            "{seeded} seeded rows and 2,000 operations: {result}"
        );
        assert!(result["debezium_records"].as_u64() > Some(0), "{result}");
        assert!(result["sluice_records"].as_u64() > Some(0), "{result}");
        assert!(result["duplicates"].is_u64(), "{result}");
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
}

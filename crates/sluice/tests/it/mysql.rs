//! MySQL/MariaDB → Kafka: binlog streaming against both servers of the dev stack (MariaDB
//! 10.11 and MySQL 8.0), the same test body for each. They need `MARIADB_URL`/`MYSQL_URL` (the
//! replication user) and `MARIADB_ROOT_URL`/`MYSQL_ROOT_URL` (for setup) from
//! `scripts/dev-stack env` (`scripts/test` starts the servers).

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use serde_json::{Value, json};

use crate::faults::run_sluice;
use crate::support::{Record, Sluice, free_port, read_topic, sluice_bin, stack, test_dir, unique};

/// Which server a test runs against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Server {
    Mariadb,
    Mysql,
}

impl Server {
    fn var(self, root: bool) -> &'static str {
        match (self, root) {
            (Server::Mariadb, false) => "MARIADB_URL",
            (Server::Mariadb, true) => "MARIADB_ROOT_URL",
            (Server::Mysql, false) => "MYSQL_URL",
            (Server::Mysql, true) => "MYSQL_ROOT_URL",
        }
    }

    pub(crate) fn url(self, root: bool) -> String {
        let name = self.var(root);
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: start MariaDB and MySQL and load their settings: \
                 `scripts/dev-stack mysql-up && eval \"$(scripts/dev-stack env)\"` (scripts/test does both)"
            )
        })
    }

    fn lock(self) -> &'static tokio::sync::RwLock<()> {
        static MARIADB: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
        static MYSQL: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());
        match self {
            Server::Mariadb => &MARIADB,
            Server::Mysql => &MYSQL,
        }
    }

    /// Use of the server alongside other tests.
    pub(crate) async fn shared(self) -> tokio::sync::RwLockReadGuard<'static, ()> {
        self.lock().read().await
    }

    /// Exclusive use of the server (to restart it).
    pub(crate) async fn exclusive(self) -> tokio::sync::RwLockWriteGuard<'static, ()> {
        self.lock().write().await
    }

    /// Stops the server and starts it again on the same data directory and port.
    fn restart(self) {
        crate::support::dev_stack(&[match self {
            Server::Mariadb => "restart-mariadb",
            Server::Mysql => "restart-mysql",
        }]);
    }

    pub(crate) async fn root(self) -> mysql_async::Conn {
        let url = self.url(true);
        let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
        conn.query_drop("SET time_zone = '+00:00'").await.unwrap();
        conn
    }
}

/// A replica server id unique to this test run.
fn server_id() -> u32 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    1000 + (std::process::id() % 100_000) * 10
        + NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

pub(crate) fn pipeline(
    server: Server,
    name: &str,
    database: &str,
    prefix: &str,
    admin_port: u16,
) -> String {
    let state = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state");
    format!(
        r#"
name = "{name}"
state_dir = "{state}"

[source.mysql]
url = "{url}"
server_id = {server_id}
include_tables = ["{database}.*"]
status_interval_ms = 200
heartbeat_interval_ms = 1000

[kafka]
brokers = "{brokers}"
topic_prefix = "{prefix}"

[admin]
listen = "127.0.0.1:{admin_port}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
"#,
        url = server.url(false),
        server_id = server_id(),
        brokers = stack().brokers,
        state = state.display(),
    )
}

/// A test's database holding table `t` (`columns`: its definition), with sluice streaming it.
struct Streaming {
    root: mysql_async::Conn,
    database: String,
    prefix: String,
    sluice: Sluice,
}

/// Creates the database `<name>_<unique>` with table `t`, starts sluice on it (topic prefix
/// `<prefix>_<unique>`) and waits until it streams.
async fn streaming(server: Server, name: &str, prefix: &str, columns: &str) -> Streaming {
    let database = unique(name);
    let prefix = unique(prefix);
    let root = database_with_table(server, &database, columns).await;
    let dir = test_dir(&database);
    let admin_port = free_port();
    let sluice = Sluice::start(
        &dir,
        &pipeline(server, &database, &database, &prefix, admin_port),
        admin_port,
    );
    sluice.wait_streaming(Duration::from_secs(60));
    Streaming {
        root,
        database,
        prefix,
        sluice,
    }
}

/// The records until `done` holds (or 60 s).
fn read_until(topic: &str, count: usize) -> Vec<Record> {
    read_topic(topic, Duration::from_secs(60), |records| {
        records.len() >= count
    })
}

/// A table with a column of every mapped type; [`TYPES_ROW`] is a row of it and
/// [`types_row_after`] that row as Debezium writes it (but `js`, which differs per server and
/// between snapshot and stream).
const TYPES_TABLE: &str = "(
    id BIGINT UNSIGNED NOT NULL PRIMARY KEY,
    ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, mu MEDIUMINT UNSIGNED, i INT,
    iu INT UNSIGNED, bi BIGINT,
    vc VARCHAR(50), ch CHAR(5), tx TEXT,
    dc DECIMAL(10,2), dneg DECIMAL(30,5),
    d DATE, dt3 DATETIME(3), dt6 DATETIME(6), ts TIMESTAMP(6) NULL, tm TIME(6),
    bl BLOB, js JSON, n INT NULL, f FLOAT, db DOUBLE, y YEAR
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4";

const TYPES_ROW: &str = "(1, -128, 255, -32768, 16777215, -2147483648,
    4294967295, 9223372036854775807,
    'héllo ✓', 'ab', 'a long text',
    12345.67, -123456789012345678901234.56789,
    '2024-02-29', '2024-02-29 13:14:15.123', '1969-12-31 23:59:58.000001',
    '2024-02-29 13:14:15.123456', '-838:59:58.999999',
    X'00FF10', '{\"aa\": \"x\", \"b\": [1, 2.5, null]}', NULL,
    1.5, -2.25, 2024)";

fn types_row_after() -> Value {
    json!({
        "id": 1, "ti": -128, "tu": 255, "si": -32768, "mu": 16777215, "i": -2147483648,
        "iu": 4294967295u64, "bi": 9223372036854775807i64,
        "vc": "héllo ✓", "ch": "ab", "tx": "a long text",
        // 1234567 = 0x12D687; -12345678901234567890123456789 in two's complement.
        "dc": "EtaH", "dneg": "2BvkzblBNk6Rxn7r",
        // 2024-02-29: day 19782; DATETIME(3) as milliseconds, DATETIME(6) as microseconds.
        "d": 19782, "dt3": 1709212455123i64, "dt6": -1_999_999i64,
        "ts": "2024-02-29T13:14:15.123456Z",
        "tm": -3_020_398_999_999i64,
        "bl": "AP8Q", "js": null, "n": null, "f": 1.5, "db": -2.25, "y": 2024
    })
}

async fn types_and_order(server: Server) {
    let _server = server.shared().await;
    let Streaming {
        mut root,
        database,
        prefix,
        sluice,
    } = streaming(server, "my_types", "mt", TYPES_TABLE).await;

    root.query_drop(format!("INSERT INTO {database}.t VALUES {TYPES_ROW}"))
        .await
        .unwrap();
    root.query_drop(format!(
        "INSERT INTO {database}.t (id, bi, vc) VALUES (18446744073709551615, -9223372036854775808, 'max')"
    ))
    .await
    .unwrap();
    for i in 1..=20 {
        root.query_drop(format!("UPDATE {database}.t SET i = {i} WHERE id = 1"))
            .await
            .unwrap();
    }
    root.query_drop(format!(
        "DELETE FROM {database}.t WHERE id = 18446744073709551615"
    ))
    .await
    .unwrap();

    // A column added mid-stream shows up in the next events (the binlog's table map carries
    // the columns of its time).
    root.query_drop(format!(
        "ALTER TABLE {database}.t ADD COLUMN extra VARCHAR(10) DEFAULT 'new'"
    ))
    .await
    .unwrap();
    root.query_drop(format!("INSERT INTO {database}.t (id) VALUES (3)"))
        .await
        .unwrap();

    let topic = format!("{prefix}.{database}.t");
    // 2 inserts, 20 updates, a delete and its tombstone, an insert after the ALTER.
    let records = read_until(&topic, 25);
    assert_eq!(records.len(), 25, "{records:#?}\n{}", sluice.log_text());

    let insert = &records[0];
    assert_eq!(insert.key, Some(json!({"id": 1})));
    let value = insert.value.as_ref().unwrap();
    assert_eq!(value["op"], "c");
    assert_eq!(value["before"], Value::Null);
    assert_eq!(value["transaction"], Value::Null);
    assert!(value["ts_ms"].as_i64().unwrap() > 1_700_000_000_000);
    // MySQL's binary JSON as Debezium writes it (compact, keys in storage order: shorter
    // first); MariaDB's JSON is text, as written.
    let json_text = value["after"]["js"].as_str().unwrap();
    let expected_json = match server {
        Server::Mysql => r#"{"b":[1,2.5,null],"aa":"x"}"#,
        Server::Mariadb => r#"{"aa": "x", "b": [1, 2.5, null]}"#,
    };
    assert_eq!(json_text, expected_json);
    let mut after = value["after"].clone();
    after["js"] = Value::Null;
    assert_eq!(after, types_row_after());
    let source = &value["source"];
    // The fields (their order in the text is the encoder's unit tests').
    let mut keys: Vec<&str> = source
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    let mut expected = [
        "version",
        "connector",
        "name",
        "ts_ms",
        "snapshot",
        "db",
        "sequence",
        "ts_us",
        "ts_ns",
        "table",
        "server_id",
        "gtid",
        "file",
        "pos",
        "row",
        "thread",
        "query",
    ];
    expected.sort_unstable();
    assert_eq!(keys, expected);
    assert_eq!(source["connector"], "mysql");
    assert_eq!(source["name"], prefix.as_str());
    assert_eq!(source["snapshot"], "false");
    assert_eq!(source["db"], database.as_str());
    assert_eq!(source["table"], "t");
    assert_eq!(source["sequence"], Value::Null);
    assert_eq!(source["server_id"], 1);
    assert_eq!(source["row"], 0);
    assert_eq!(source["query"], Value::Null);
    assert!(
        source["file"].as_str().unwrap().starts_with("binlog."),
        "{source}"
    );
    assert!(source["pos"].as_u64().unwrap() > 4, "{source}");
    assert!(source["ts_ms"].as_i64().unwrap() % 1000 == 0, "{source}");
    let gtid = source["gtid"]
        .as_str()
        .unwrap_or_else(|| panic!("no gtid: {source}"));
    match server {
        // domain-server-sequence.
        Server::Mariadb => assert_eq!(gtid.split('-').count(), 3, "{gtid}"),
        // uuid:transaction.
        Server::Mysql => {
            assert!(gtid.len() > 37 && gtid.as_bytes()[36] == b':', "{gtid}");
            assert!(source["thread"].as_u64().is_some(), "{source}");
        }
    }
    assert_eq!(
        insert.headers["sluice.binlog_file"],
        source["file"].as_str().unwrap()
    );
    assert_eq!(
        insert.header_u64("sluice.binlog_pos"),
        source["pos"].as_u64().unwrap()
    );

    let max = &records[1];
    assert_eq!(max.key, Some(json!({"id": 18446744073709551615u64})));
    let after = &max.value.as_ref().unwrap()["after"];
    assert_eq!(after["id"], json!(18446744073709551615u64));
    assert_eq!(after["bi"], json!(-9223372036854775808i64));
    assert_eq!(after["dc"], Value::Null);

    // Per-key order: the updates of row 1 in the order made, each with its before image, at
    // strictly increasing binlog positions.
    let updates: Vec<&Record> = records[2..22].iter().collect();
    for (n, update) in updates.iter().enumerate() {
        let value = update.value.as_ref().unwrap();
        assert_eq!(update.key, Some(json!({"id": 1})));
        assert_eq!(value["op"], "u");
        assert_eq!(value["after"]["i"], json!(n + 1));
        let before = if n == 0 { json!(-2147483648) } else { json!(n) };
        assert_eq!(value["before"]["i"], before);
        assert_eq!(value["after"]["vc"], "héllo ✓");
    }
    let positions: Vec<(String, u64)> = records[..22]
        .iter()
        .map(|r| {
            (
                r.headers["sluice.binlog_file"].clone(),
                r.header_u64("sluice.binlog_pos"),
            )
        })
        .collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "{positions:?}");

    let delete = &records[22];
    let value = delete.value.as_ref().unwrap();
    assert_eq!(value["op"], "d");
    assert_eq!(value["after"], Value::Null);
    assert_eq!(value["before"]["vc"], "max");
    assert_eq!(delete.key, Some(json!({"id": 18446744073709551615u64})));
    let tombstone = &records[23];
    assert_eq!(tombstone.key, delete.key);
    assert!(tombstone.value.is_none());
    let added = records[24].value.as_ref().unwrap();
    assert_eq!(added["after"]["id"], 3);
    assert_eq!(added["after"]["extra"], "new");
    assert_eq!(added["after"]["vc"], Value::Null);
    // The lag against the server's binary log, in /health and /metrics (other tests write to
    // the same server, so "caught up" is a small lag, not zero).
    let mut binlog = Value::Null;
    crate::support::wait_until("the binlog lag in /health", Duration::from_secs(30), || {
        binlog = sluice
            .get("/health")
            .and_then(|body| serde_json::from_str::<Value>(&body).ok())
            .map_or(Value::Null, |health| health["binlog"].clone());
        binlog["confirmed_pos"].as_u64().unwrap_or(0) > 4
    });
    let files: Vec<String> = root
        .query("SHOW BINARY LOGS")
        .await
        .unwrap()
        .into_iter()
        .map(|row: mysql_async::Row| row.get::<String, _>(0).unwrap())
        .collect();
    assert!(
        files.contains(&binlog["confirmed_file"].as_str().unwrap().to_owned()),
        "{binlog} {files:?}"
    );
    // source.file names a real binlog file (MariaDB's first ROTATE carries a checksum).
    for record in records.iter().filter_map(|r| r.value.as_ref()) {
        let file = record["source"]["file"].as_str().unwrap_or_default();
        assert!(files.iter().any(|f| f == file), "{file:?} not in {files:?}");
    }
    assert!(binlog["lag_bytes"].as_u64().unwrap() < 64 << 20, "{binlog}");
    assert!(binlog["lag_seconds"].as_f64().unwrap() < 60.0, "{binlog}");
    assert!(
        sluice.metric("sluice_source_binlog_lag_bytes").is_some(),
        "the lag metric"
    );
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_rows_arrive_as_debezium_mysql_events() {
    types_and_order(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_rows_arrive_as_debezium_mysql_events() {
    types_and_order(Server::Mysql).await;
}

/// Runs `statements` in order on `conn`.
async fn run(conn: &mut mysql_async::Conn, statements: Vec<String>) {
    for statement in statements {
        conn.query_drop(&statement)
            .await
            .unwrap_or_else(|e| panic!("{statement}: {e}"));
    }
}

/// Schema changes: the snapshot's synthesised statements, then each streamed DDL statement on
/// a captured table (with the table's structure as the server describes it, the session's
/// database resolving an unqualified name) arrive on the `<topic_prefix>` topic in binlog
/// order; DDL on a database the include list does not reach is not written.
async fn schema_changes(server: Server) {
    let _server = server.shared().await;
    let Streaming {
        mut root,
        database,
        prefix,
        sluice,
    } = streaming(
        server,
        "ddl",
        "ddl",
        "(id INT NOT NULL PRIMARY KEY) ENGINE=InnoDB",
    )
    .await;
    let other = format!("{database}_x");
    let read = |count: usize| {
        let topic = prefix.clone();
        tokio::task::spawn_blocking(move || {
            read_topic(&topic, Duration::from_secs(60), |records| {
                records.len() >= count
            })
        })
    };
    run(
        &mut root,
        vec![
            format!("USE {database}"),
            "CREATE TABLE u (id INT NOT NULL AUTO_INCREMENT, s SET('x','yy') NOT NULL DEFAULT 'x' \
         COMMENT 'a set', d DECIMAL(7,3) UNSIGNED, PRIMARY KEY (id)) COMMENT 'u table'"
                .to_owned(),
            format!("CREATE DATABASE {other}"),
            format!("CREATE TABLE {other}.v (id INT)"),
        ],
    )
    .await;
    // The CREATE's event is written before `u` changes again (its structure is read when the
    // event is processed).
    read(7).await.unwrap();
    run(
        &mut root,
        vec![
            "ALTER TABLE t ADD COLUMN c2 VARCHAR(5) NOT NULL DEFAULT 'z'".to_owned(),
            format!("DROP TABLE u, {other}.v"),
            format!("DROP DATABASE {other}"),
            "INSERT INTO t VALUES (1, 'a')".to_owned(),
        ],
    )
    .await;
    let rows = read_until(&format!("{prefix}.{database}.t"), 1);
    assert_eq!(
        rows[0].value.as_ref().unwrap()["after"],
        json!({"id": 1, "c2": "a"}),
        "the row written after the ALTER has the new column"
    );
    let records = read(9).await.unwrap();
    let ddl: Vec<(String, Value)> = records
        .iter()
        .map(|r| {
            let value = r.value.as_ref().unwrap();
            assert_eq!(r.key, Some(json!({"databaseName": value["databaseName"]})));
            let changes: Vec<Value> = value["tableChanges"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| json!([c["type"], c["id"]]))
                .collect();
            (
                value["ddl"].as_str().unwrap().to_owned(),
                json!([
                    value["source"]["snapshot"],
                    value["source"]["table"],
                    changes
                ]),
            )
        })
        .collect();
    let id = |table: &str| format!("\"{database}\".\"{table}\"");
    assert_eq!(ddl.len(), 9, "{ddl:#?}\nlog:\n{}", sluice.log_text());
    assert!(
        ddl[0].0.starts_with("SET character_set_server="),
        "{ddl:#?}"
    );
    assert_eq!(
        ddl[1],
        (
            format!("DROP TABLE IF EXISTS `{database}`.`t`"),
            json!(["true", "t", [["DROP", id("t")]]])
        )
    );
    assert_eq!(ddl[2].0, format!("DROP DATABASE IF EXISTS `{database}`"));
    assert!(
        ddl[3]
            .0
            .starts_with(&format!("CREATE DATABASE `{database}` CHARSET "))
    );
    assert_eq!(ddl[4].0, format!("USE `{database}`"));
    assert!(ddl[5].0.starts_with("CREATE TABLE `t` ("), "{ddl:#?}");
    assert_eq!(ddl[5].1, json!(["true", "t", [["CREATE", id("t")]]]));
    assert!(ddl[6].0.starts_with("CREATE TABLE u ("), "{ddl:#?}");
    assert_eq!(ddl[6].1, json!(["false", "u", [["CREATE", id("u")]]]));
    assert_eq!(
        ddl[7],
        (
            "ALTER TABLE t ADD COLUMN c2 VARCHAR(5) NOT NULL DEFAULT 'z'".to_owned(),
            json!(["false", "t", [["ALTER", id("t")]]])
        )
    );
    // Only the captured table of the two dropped.
    assert_eq!(ddl[8].1, json!(["false", "u", [["DROP", id("u")]]]));
    assert!(ddl[8].0.starts_with("DROP TABLE"), "{ddl:#?}");
    let value = |i: usize| records[i].value.clone().unwrap();
    let created = value(6);
    let table = &created["tableChanges"][0]["table"];
    assert_eq!(table["primaryKeyColumnNames"], json!(["id"]), "{created}");
    assert_eq!(table["comment"], json!("u table"));
    let columns = table["columns"].as_array().unwrap();
    assert_eq!(
        columns[0],
        json!({"name": "id", "jdbcType": 4, "nativeType": null, "typeName": "INT",
            "typeExpression": "INT", "charsetName": null, "length": 11, "scale": null,
            "position": 1, "optional": false, "autoIncremented": true, "generated": false,
            "comment": null, "defaultValueExpression": null, "enumValues": null})
    );
    assert_eq!(columns[1]["typeName"], json!("SET"));
    // Debezium's SET length: its labels joined by commas.
    assert_eq!(columns[1]["length"], json!(4));
    assert_eq!(columns[1]["enumValues"], json!(["'x'", "'yy'"]));
    assert_eq!(columns[1]["defaultValueExpression"], json!("x"));
    assert_eq!(columns[1]["comment"], json!("a set"));
    assert_eq!(columns[2]["typeName"], json!("DECIMAL UNSIGNED"));
    assert_eq!(
        (&columns[2]["length"], &columns[2]["scale"]),
        (&json!(7), &json!(3))
    );
    let altered = value(7);
    let columns = altered["tableChanges"][0]["table"]["columns"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(columns.len(), 2, "{altered}");
    assert_eq!(columns[1]["name"], json!("c2"));
    assert_eq!(columns[1]["optional"], json!(false));
    assert_eq!(columns[1]["defaultValueExpression"], json!("z"));
    drop(sluice);
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_schema_changes_are_written_for_captured_ddl() {
    schema_changes(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_schema_changes_are_written_for_captured_ddl() {
    schema_changes(Server::Mysql).await;
}

/// SIGKILL five times at random moments (seeded: `SLUICE_IT_MYSQL_KILL_SEED`) while a writer
/// inserts `SLUICE_IT_MYSQL_KILL_ROWS` rows (default 20,000; the issue's size is 200,000) in
/// 10-row transactions over about 20 s, each kill followed by rows written while sluice is down;
/// after the last restart every row is in the topic (duplicates allowed and counted) and every
/// key's records are in binlog order.
async fn nothing_lost_after_sigkill(server: Server) {
    use rand::{Rng, SeedableRng};
    const PER_TX: u32 = 10;
    let rows: u32 = std::env::var("SLUICE_IT_MYSQL_KILL_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let seed: u64 = std::env::var("SLUICE_IT_MYSQL_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("{server:?} SIGKILLs: SLUICE_IT_MYSQL_KILL_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let _server = server.shared().await;
    let Streaming {
        mut root,
        database,
        prefix,
        mut sluice,
    } = streaming(
        server,
        "my_kill",
        "mk",
        "(id INT NOT NULL PRIMARY KEY, v VARCHAR(20))",
    )
    .await;

    let kills_done = tokio_util::sync::CancellationToken::new();
    let (writer, written) =
        spawn_inserts(server, &database, rows, PER_TX, Some(kills_done.clone()));
    let topic = format!("{prefix}.{database}.t");
    let mut kills = Vec::new();
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..1500))).await;
        sluice.kill();
        let at_kill = written.load(std::sync::atomic::Ordering::Relaxed);
        kills.push(at_kill);
        // Rows written while sluice is down.
        tokio::time::sleep(Duration::from_millis(rng.random_range(100..600))).await;
        sluice.restart();
        tokio::task::block_in_place(|| sluice.wait_streaming(Duration::from_secs(60)));
    }
    kills_done.cancel();
    writer.await.unwrap();
    println!("{server:?} SIGKILLs: killed after rows {kills:?} of {rows}");
    assert!(
        kills.last().is_some_and(|at| *at < rows),
        "the writer finished before the last kill: the kills must fall into the load"
    );

    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(180), |records| {
            ids(records).len() >= rows as usize
        })
    })
    .await
    .unwrap();
    let counts = ids(&records);
    let missing: Vec<u32> = (1..=rows).filter(|id| !counts.contains_key(id)).collect();
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    println!(
        "{server:?} SIGKILLs: {} records for {rows} rows after 5 kills, {duplicates} duplicates",
        records.len()
    );
    assert!(
        missing.is_empty(),
        "{} rows missing after the restarts, e.g. {:?}; log:\n{}",
        missing.len(),
        &missing[..missing.len().min(10)],
        sluice.log_text()
    );
    // Per-key order survives the restarts: a key's records are at non-decreasing positions
    // (a duplicate repeats a position).
    let mut last: HashMap<u32, (String, u64, u64)> = HashMap::new();
    for record in &records {
        let id = record.key.as_ref().unwrap()["id"].as_u64().unwrap() as u32;
        let position = (
            record.headers["sluice.binlog_file"].clone(),
            record.header_u64("sluice.binlog_pos"),
            record.header_u64("sluice.binlog_row"),
        );
        if let Some(previous) = last.insert(id, position.clone()) {
            assert!(previous <= position, "{id}: {previous:?} then {position:?}");
        }
    }
    assert!(sluice.stop(), "{}", sluice.log_text());
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

/// Inserts rows `1..=rows` (`(id, 'v<id>')`) into `<database>.t` in `per_tx`-row
/// transactions, paced to take about 20 s; the count written so far is shared. With `hold`,
/// the last transaction waits until it is cancelled: whatever happens before that falls into
/// the load, however slow the machine.
pub(crate) fn spawn_inserts(
    server: Server,
    database: &str,
    rows: u32,
    per_tx: u32,
    hold: Option<tokio_util::sync::CancellationToken>,
) -> (
    tokio::task::JoinHandle<()>,
    std::sync::Arc<std::sync::atomic::AtomicU32>,
) {
    let written = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writer_written = std::sync::Arc::clone(&written);
    let writer_db = database.to_owned();
    let writer = tokio::spawn(async move {
        let mut conn = server.root().await;
        let started = std::time::Instant::now();
        let per_second = f64::from(rows) / 20.0;
        let mut next = 1;
        while next <= rows {
            let last = (next + per_tx - 1).min(rows);
            if last == rows
                && let Some(hold) = &hold
            {
                hold.cancelled().await;
            }
            let values: Vec<String> = (next..=last).map(|id| format!("({id}, 'v{id}')")).collect();
            conn.query_drop(format!(
                "INSERT INTO {writer_db}.t VALUES {}",
                values.join(",")
            ))
            .await
            .unwrap();
            next = last + 1;
            writer_written.store(last, std::sync::atomic::Ordering::Relaxed);
            let due = Duration::from_secs_f64(f64::from(last) / per_second);
            if let Some(wait) = due.checked_sub(started.elapsed()) {
                tokio::time::sleep(wait).await;
            }
        }
    });
    (writer, written)
}

/// Records per inserted id.
pub(crate) fn ids(records: &[Record]) -> BTreeMap<u32, usize> {
    let mut counts = BTreeMap::new();
    for record in records {
        if let Some(id) = record
            .value
            .as_ref()
            .and_then(|v| v["after"]["id"].as_u64())
        {
            *counts.entry(id as u32).or_insert(0) += 1;
        }
    }
    counts
}

/// A topic that takes smaller batches (`max.message.bytes`) than the producer's default
/// `batch.size`, made before the pipeline starts: its limit is read ahead at the start and
/// `batch.size` lowered to it, so no batch is refused, and every row of a transaction of
/// ~300 kB of small rows arrives.
async fn a_topic_with_a_small_max_message_bytes_lowers_the_batch_size(server: Server) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
    let _server = server.shared().await;
    let database = unique("my_batchcap");
    let prefix = unique("mbc");
    let mut root = database_with_table(
        server,
        &database,
        "(id INT NOT NULL PRIMARY KEY, payload TEXT)",
    )
    .await;
    const LIMIT: u64 = 150_000;
    let topic = format!("{prefix}.{database}.t");
    let admin: AdminClient<rdkafka::client::DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
                .set("max.message.bytes", &LIMIT.to_string())],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let dir = test_dir(&database);
    let admin_port = free_port();
    // Uncompressed batches: 300 rows of ~1 kB in one transaction are ~300 kB at the default
    // batch.size (1 MB), twice the topic's limit.
    let toml = pipeline_with(
        server,
        &database,
        &database,
        &prefix,
        admin_port,
        "snapshot = \"never\"",
    ) + "\n[kafka.producer]\n\"compression.type\" = \"none\"\n\"linger.ms\" = \"50\"\n";
    let mut sluice = Sluice::start(&dir, &toml, admin_port);
    sluice.wait_streaming(Duration::from_secs(60));
    let values: Vec<String> = (1..=300)
        .map(|id| format!("({id}, REPEAT(MD5({id}), 32))"))
        .collect();
    root.query_drop(format!(
        "INSERT INTO {database}.t VALUES {}",
        values.join(",")
    ))
    .await
    .unwrap();
    let records = tokio::task::spawn_blocking(move || read_until(&topic, 300))
        .await
        .unwrap();
    let ids = ids(&records);
    assert_eq!(
        ids.keys().copied().collect::<Vec<_>>(),
        (1..=300).collect::<Vec<_>>(),
        "every row\n{}",
        sluice.log_text()
    );
    let log = sluice.log_text();
    assert!(
        log.contains(&format!(
            "take batches of at most {LIMIT} bytes (max.message.bytes): batch.size = {LIMIT}"
        )),
        "the limit was not read ahead:\n{log}"
    );
    assert!(
        !log.contains("batch of its records was refused"),
        "the limit was found by a refused batch, not read ahead:\n{log}"
    );
    assert!(sluice.stop(), "{log}");
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_topic_with_a_small_max_message_bytes_lowers_the_batch_size() {
    a_topic_with_a_small_max_message_bytes_lowers_the_batch_size(Server::Mariadb).await;
}

/// `[transforms]` apply to streamed changes too (not only to the snapshot's rows): a
/// RegexRouter sends a row inserted while streaming to the renamed topic, as Kafka Connect
/// would.
#[tokio::test(flavor = "multi_thread")]
async fn mysql_streamed_changes_go_through_the_transforms() {
    let server = Server::Mysql;
    let _server = server.shared().await;
    let database = unique("my_route");
    let prefix = unique("mrt");
    let mut root = database_with_table(
        server,
        &database,
        "(id INT NOT NULL PRIMARY KEY, v VARCHAR(20))",
    )
    .await;
    let dir = test_dir(&database);
    let admin_port = free_port();
    let toml = pipeline_with(
        server,
        &database,
        &database,
        &prefix,
        admin_port,
        "snapshot = \"never\"",
    ) + "\n[transforms]\nchain = \"route\"\n[transforms.route]\n\
         type = \"org.apache.kafka.connect.transforms.RegexRouter\"\n\
         regex = '(.*)\\.t'\nreplacement = \"$1.routed\"\n";
    let mut sluice = Sluice::start(&dir, &toml, admin_port);
    sluice.wait_streaming(Duration::from_secs(60));
    root.query_drop(format!("INSERT INTO {database}.t VALUES (1, 'streamed')"))
        .await
        .unwrap();
    let routed = format!("{prefix}.{database}.routed");
    let topic = routed.clone();
    let records = tokio::task::spawn_blocking(move || read_until(&topic, 1))
        .await
        .unwrap();
    assert!(
        !records.is_empty(),
        "nothing reached {routed}\n{}",
        sluice.log_text()
    );
    let value = records[0].value.as_ref().expect("a change event");
    assert_eq!(
        (value["op"].as_str(), value["after"]["v"].as_str()),
        (Some("c"), Some("streamed")),
        "{value}\n{}",
        sluice.log_text()
    );
    let log = sluice.log_text();
    assert!(sluice.stop(), "{log}");
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_sigkill_mid_stream_loses_nothing() {
    nothing_lost_after_sigkill(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_sigkill_mid_stream_loses_nothing() {
    nothing_lost_after_sigkill(Server::Mysql).await;
}

/// The replication connection is killed on the server (`KILL` of its binlog dump thread), then
/// the server restarts, both while rows are being written: sluice reconnects by itself each
/// time and resumes where it was; every row arrives (duplicates counted and printed).
async fn survives_a_killed_connection_and_a_server_restart(server: Server) {
    const PER_TX: u32 = 10;
    /// What sluice logs as each run starts streaming.
    const RESUMING: &str = "resuming from the saved binlog position";
    let _server = server.exclusive().await;
    let Streaming {
        mut root,
        database,
        prefix,
        mut sluice,
    } = streaming(
        server,
        "my_restart",
        "mr",
        "(id INT NOT NULL PRIMARY KEY, v VARCHAR(20))",
    )
    .await;

    // Writes 10-row transactions until told to stop, reconnecting when the server goes away
    // (a transaction whose commit went unanswered is written again: INSERT IGNORE).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer_stop = std::sync::Arc::clone(&stop);
    let written = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let writer_written = std::sync::Arc::clone(&written);
    let writer_db = database.clone();
    let writer = tokio::spawn(async move {
        let url = server.url(true);
        let mut conn: Option<mysql_async::Conn> = None;
        let mut next = 1;
        while !writer_stop.load(std::sync::atomic::Ordering::Relaxed) {
            let Some(c) = conn.as_mut() else {
                match mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap()).await {
                    Ok(c) => conn = Some(c),
                    Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
                }
                continue;
            };
            let values: Vec<String> = (next..next + PER_TX)
                .map(|id| format!("({id}, 'v{id}')"))
                .collect();
            match c
                .query_drop(format!(
                    "INSERT IGNORE INTO {writer_db}.t VALUES {}",
                    values.join(",")
                ))
                .await
            {
                Ok(()) => {
                    next += PER_TX;
                    writer_written.store(next - 1, std::sync::atomic::Ordering::Relaxed);
                }
                Err(_) => conn = None,
            }
        }
        next - 1
    });
    let wait_written = |what: &str, rows: u32| {
        crate::support::wait_until(what, Duration::from_secs(120), || {
            written.load(std::sync::atomic::Ordering::Relaxed) >= rows
        });
    };
    let streaming_again = |what: &str, since: usize| {
        crate::support::wait_until(what, Duration::from_secs(120), || {
            sluice.log_text().matches(RESUMING).count() > since
                && sluice
                    .get("/health")
                    .is_some_and(|b| b.contains("\"state\":\"streaming\""))
        });
    };
    tokio::task::block_in_place(|| wait_written("rows before the kill", 1000));
    // The replication connection, killed on the server.
    let dumps: Vec<u64> = root
        .query(
            "SELECT id FROM information_schema.processlist WHERE command LIKE 'Binlog Dump%' \
             AND user = 'sluice'",
        )
        .await
        .unwrap();
    assert_eq!(dumps.len(), 1, "one binlog dump thread: sluice's");
    let before_kill = sluice.log_text().matches(RESUMING).count();
    root.query_drop(format!("KILL {}", dumps[0])).await.unwrap();
    drop(root);
    tokio::task::block_in_place(|| {
        streaming_again("sluice to reconnect after the KILL", before_kill);
        let at = written.load(std::sync::atomic::Ordering::Relaxed);
        wait_written("rows after the kill", at + 1000);
        // The server restarts (SIGTERM, then started again on the same data and port).
        let before_restart = sluice.log_text().matches(RESUMING).count();
        server.restart();
        streaming_again("sluice to reconnect after the restart", before_restart);
        let at = written.load(std::sync::atomic::Ordering::Relaxed);
        wait_written("rows after the restart", at + 1000);
    });
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rows = writer.await.unwrap();
    let topic = format!("{prefix}.{database}.t");
    let records = read_topic(&topic, Duration::from_secs(90), |records| {
        ids(records).len() >= rows as usize
    });
    let counts = ids(&records);
    let missing: Vec<u32> = (1..=rows).filter(|id| !counts.contains_key(id)).collect();
    let duplicates: usize = counts.values().map(|n| n - 1).sum();
    eprintln!(
        "{server:?}: killed connection + server restart: {} records for {rows} rows, {duplicates} duplicates",
        records.len()
    );
    assert!(
        missing.is_empty(),
        "{} rows missing, e.g. {:?}; log:\n{}",
        missing.len(),
        &missing[..missing.len().min(10)],
        sluice.log_text()
    );
    assert!(sluice.stop(), "{}", sluice.log_text());
    let mut root = server.root().await;
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_survives_a_killed_connection_and_a_server_restart() {
    survives_a_killed_connection_and_a_server_restart(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_survives_a_killed_connection_and_a_server_restart() {
    survives_a_killed_connection_and_a_server_restart(Server::Mysql).await;
}

/// `sluice check` connects, reports the binlog position, and names a missing privilege with
/// the GRANT that fixes it (the signal table's too).
async fn check_names_missing_privileges(server: Server) {
    let _server = server.shared().await;
    let name = unique("my_check");
    let user = name.clone();
    let mut root = server.root().await;
    root.query_drop(format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'pw'"))
        .await
        .unwrap();
    root.query_drop(format!("GRANT SELECT ON *.* TO '{user}'@'%'"))
        .await
        .unwrap();
    let dir = test_dir(&name);
    let good = pipeline(server, &name, "shop", "p", free_port());
    let run = |toml: &str| {
        let file = dir.join("pipeline.toml");
        std::fs::write(&file, toml).unwrap();
        let output = Command::new(sluice_bin())
            .args(["check"])
            .arg(&file)
            .output()
            .unwrap();
        (
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    };
    let (ok, text) = run(&good);
    assert!(ok, "{text}");
    assert!(text.contains("binlog at binlog."), "{text}");
    let url = server.url(false);
    let (_, host) = url.rsplit_once('@').unwrap();
    let weak = good.replace(&url, &format!("mysql://{user}:pw@{host}"));
    let (ok, text) = run(&weak);
    assert!(!ok, "{text}");
    // MySQL's snapshots (on by default) also need RELOAD, to stop commits while they open.
    let expected_monitor = match server {
        Server::Mariadb => "BINLOG MONITOR",
        Server::Mysql => "REPLICATION CLIENT, RELOAD",
    };
    assert!(
        text.contains(&format!(
            "privileges: the user lacks REPLICATION SLAVE, {expected_monitor}: GRANT REPLICATION SLAVE, {expected_monitor} ON *.* TO <user>"
        )),
        "{text}"
    );
    assert!(text.ends_with("not ready\n"), "{text}");
    // A signal table needs INSERT and DELETE (incremental snapshots' watermarks).
    let signal = good.replace(
        "[source.mysql]\n",
        &format!("[source.mysql]\nsignal_table = \"{name}.sig\"\n"),
    );
    let (ok, text) = run(&signal);
    assert!(!ok, "{text}");
    assert!(
        text.contains(&format!(
            "lacks INSERT, DELETE on the signal table {name}.sig (incremental snapshots write their watermarks there): GRANT INSERT, DELETE ON `{name}`.`sig` TO <user>"
        )),
        "{text}"
    );
    root.query_drop(format!("DROP USER '{user}'@'%'"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_check_names_missing_privileges() {
    check_names_missing_privileges(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_check_names_missing_privileges() {
    check_names_missing_privileges(Server::Mysql).await;
}

/// A saved position whose binlog the server no longer has stops the pipeline (no endless
/// retries) with the fix named.
async fn a_lost_position_stops_with_the_fix(server: Server) {
    let _server = server.shared().await;
    let name = unique("my_lost");
    let state = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state");
    std::fs::create_dir_all(&state).unwrap();
    let flavor = match server {
        Server::Mariadb => "mariadb",
        Server::Mysql => "mysql",
    };
    // A file:position start (no GTID set) in a binlog file the server never had.
    std::fs::write(
        state.join(format!("{name}.mysql.json")),
        format!(
            r#"{{"flavor":"{flavor}","position":{{"file":"binlog.999999","pos":4,"gtid_set":null}}}}"#
        ),
    )
    .unwrap();
    let dir = test_dir(&name);
    let admin_port = free_port();
    // `sluice doctor` sees it before any run: the position is gone, the settings are right.
    let doctor_file = dir.join("doctor.toml");
    std::fs::write(
        &doctor_file,
        pipeline(server, &name, "nothing", "p", admin_port),
    )
    .unwrap();
    let output = Command::new(sluice_bin())
        .args(["doctor", "--json", "--pipeline"])
        .arg(&doctor_file)
        .output()
        .unwrap();
    let findings: Vec<Value> = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let code = |code: &str| {
        findings
            .iter()
            .find(|f| f["code"] == code)
            .unwrap_or_else(|| panic!("no {code} in {findings:#?}"))
            .clone()
    };
    assert_eq!(code("mysql.settings")["severity"], "ok");
    assert!(code("mysql.binlog_retention")["severity"].is_string());
    let purged = code("mysql.position_purged");
    assert_eq!(purged["severity"], "critical", "{purged}");
    assert!(
        purged["fix"].as_str().unwrap().contains("when_needed"),
        "{purged}"
    );
    assert_eq!(output.status.code(), Some(2), "critical: exit code 2");
    let mut sluice = Sluice::start(
        &dir,
        &pipeline(server, &name, "nothing", "p", admin_port),
        admin_port,
    );
    crate::support::wait_until("sluice to stop", Duration::from_secs(60), || {
        sluice.exited().is_some()
    });
    assert!(!sluice.exited().unwrap().success());
    let log = sluice.log_text();
    assert!(
        log.contains("the server cannot send the binlog from the saved position binlog.999999:4"),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "remove the state file {}",
            state.join(format!("{name}.mysql.json")).display()
        )),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_a_lost_position_stops_with_the_fix() {
    a_lost_position_stops_with_the_fix(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_a_lost_position_stops_with_the_fix() {
    a_lost_position_stops_with_the_fix(Server::Mysql).await;
}

/// `sluice slots --pipeline` for a MySQL/MariaDB pipeline: the saved position (the state
/// file's), the server's, how far behind in bytes and binlog files; a saved position whose
/// binlog file the server no longer has (older than its oldest) is named purged, with the fix.
async fn slots_shows_the_saved_position_against_the_server(server: Server) {
    let _server = server.shared().await;
    let Streaming {
        mut root,
        database,
        prefix,
        mut sluice,
    } = streaming(server, "my_slots", "ms", "(id INT NOT NULL PRIMARY KEY)").await;
    root.query_drop(format!("INSERT INTO {database}.t VALUES (1)"))
        .await
        .unwrap();
    read_until(&format!("{prefix}.{database}.t"), 1);
    assert!(sluice.stop(), "{}", sluice.log_text());
    let state: Value =
        serde_json::from_slice(&std::fs::read(state_file(&database)).unwrap()).unwrap();
    let saved = &state["position"];
    // The server moves on while the pipeline is stopped.
    root.query_drop(format!("INSERT INTO {database}.t VALUES (2), (3)"))
        .await
        .unwrap();
    let file = sluice.file.to_str().unwrap();
    let (code, text) = run_sluice(&["slots", "--pipeline", file], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{text}");
    let saved_place = format!(
        "SAVED     {}:{}",
        saved["file"].as_str().unwrap(),
        saved["pos"]
    );
    assert!(text.contains(&saved_place), "{saved_place:?} in:\n{text}");
    assert!(
        text.contains(&format!("STATE     {}", state_file(&database).display())),
        "{text}"
    );
    assert!(text.contains("SERVER    "), "{text}");
    assert!(text.contains(" binlog file(s)"), "{text}");
    assert!(text.contains("the pipeline can resume"), "{text}");
    let (code, json) = run_sluice(
        &["slots", "--json", "--pipeline", file],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{json}");
    let place: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}: {json}"));
    assert_eq!(place["saved"], *saved, "{place:#}");
    assert_eq!(place["on_server"], true, "{place:#}");
    assert!(place["bytes_behind"].as_u64().unwrap() > 0, "{place:#}");
    assert!(place["files_behind"].as_u64().is_some(), "{place:#}");
    assert!(place["current"]["file"].as_str().is_some(), "{place:#}");
    assert!(place["fix"].is_null(), "{place:#}");

    // A position in a binlog file older than the server's oldest: purged.
    let oldest = place["oldest_binlog"].as_str().unwrap().to_owned();
    let (stem, _) = oldest.rsplit_once('.').unwrap();
    let purged = format!("{stem}.000000");
    let mut lost = state.clone();
    lost["position"] = json!({"file": purged, "pos": 4, "gtid_set": null});
    std::fs::write(state_file(&database), lost.to_string()).unwrap();
    let (code, text) = run_sluice(&["slots", "--pipeline", file], Duration::from_secs(60));
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains(&format!(
            "BINLOG    PURGED: {purged} is no longer on the server (oldest binlog: {oldest}): the pipeline cannot resume from the saved position"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "fix: re-snapshot: set source.mysql.snapshot = \"when_needed\", or remove the state file {}",
            state_file(&database).display()
        )),
        "{text}"
    );
    assert!(!text.contains("BEHIND"), "{text}");
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_slots_shows_the_saved_position_against_the_server() {
    slots_shows_the_saved_position_against_the_server(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_slots_shows_the_saved_position_against_the_server() {
    slots_shows_the_saved_position_against_the_server(Server::Mysql).await;
}

/// The pipeline file with `lines` added to `[source.mysql]`.
pub(crate) fn pipeline_with(
    server: Server,
    name: &str,
    database: &str,
    prefix: &str,
    admin_port: u16,
    lines: &str,
) -> String {
    pipeline(server, name, database, prefix, admin_port)
        .replace("[source.mysql]\n", &format!("[source.mysql]\n{lines}\n"))
}

/// The state file of pipeline `name`.
pub(crate) fn state_file(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state")
        .join(format!("{name}.mysql.json"))
}

/// The binlog place of a record: (file, pos) from its `source` block.
pub(crate) fn binlog_place(record: &Record) -> (String, u64) {
    let source = &record.value.as_ref().unwrap()["source"];
    (
        source["file"].as_str().unwrap().to_owned(),
        source["pos"].as_u64().unwrap(),
    )
}

/// The initial snapshot: rows written before the first start arrive as `op: "r"` with the same
/// values the stream writes, Debezium's `source` block and markers (two workers, two-row
/// chunks: a table split in two chunks, a one-row table, an empty one, one without a key);
/// then a change made after the snapshot streams, at a binlog position after the snapshot's.
async fn snapshot_reads_then_streams(server: Server) {
    let _server = server.shared().await;
    let name = unique("my_snap");
    let database = name.clone();
    let prefix = unique("ms");
    let mut root = server.root().await;
    root.query_drop(format!("CREATE DATABASE {database}"))
        .await
        .unwrap();
    for sql in [
        format!("CREATE TABLE {database}.a {TYPES_TABLE}"),
        format!("INSERT INTO {database}.a VALUES {TYPES_ROW}"),
        format!("INSERT INTO {database}.a (id, vc) VALUES (2, 'two'), (3, 'three')"),
        format!("CREATE TABLE {database}.b (id INT PRIMARY KEY, v VARCHAR(10))"),
        format!("INSERT INTO {database}.b VALUES (7, 'seven')"),
        format!("CREATE TABLE {database}.c_empty (id INT PRIMARY KEY)"),
        format!("CREATE TABLE {database}.d_nokey (v INT)"),
        format!("INSERT INTO {database}.d_nokey VALUES (10), (20)"),
    ] {
        root.query_drop(sql).await.unwrap();
    }
    let dir = test_dir(&name);
    let admin_port = free_port();
    let sluice = Sluice::start(
        &dir,
        &pipeline_with(
            server,
            &name,
            &database,
            &prefix,
            admin_port,
            "snapshot_workers = 2\nsnapshot_chunk_rows = 2",
        ),
        admin_port,
    );
    sluice.wait_streaming(Duration::from_secs(60));
    // The snapshot is finished: the state holds the position, no plan.
    let state: Value = serde_json::from_slice(&std::fs::read(state_file(&name)).unwrap()).unwrap();
    assert!(state.get("snapshot").is_none(), "{state}");
    root.query_drop(format!(
        "INSERT INTO {database}.a (id, vc) VALUES (4, 'four')"
    ))
    .await
    .unwrap();

    let a = read_until(&format!("{prefix}.{database}.a"), 4);
    let b = read_until(&format!("{prefix}.{database}.b"), 1);
    let d = read_until(&format!("{prefix}.{database}.d_nokey"), 2);
    assert_eq!(
        (a.len(), b.len(), d.len()),
        (4, 1, 2),
        "{a:#?}\n{}",
        sluice.log_text()
    );
    let by_id = |records: &[Record], id: u64| -> Record {
        records
            .iter()
            .find(|r| r.key == Some(json!({ "id": id })))
            .unwrap_or_else(|| panic!("no record for id {id}: {records:#?}"))
            .clone()
    };
    let first = by_id(&a, 1);
    let value = first.value.as_ref().unwrap();
    assert_eq!(value["op"], "r");
    assert_eq!(value["before"], Value::Null);
    // The values are the stream's (`types_and_order`), but for JSON: Debezium's snapshot writes
    // the document as the server prints it (MySQL: keys in storage order, with spaces).
    let expected_json = match server {
        Server::Mysql => r#"{"b": [1, 2.5, null], "aa": "x"}"#,
        Server::Mariadb => r#"{"aa": "x", "b": [1, 2.5, null]}"#,
    };
    assert_eq!(value["after"]["js"], expected_json);
    let mut after = value["after"].clone();
    after["js"] = Value::Null;
    assert_eq!(after, types_row_after());
    let (file, pos) = binlog_place(&first);
    let mut source = value["source"].clone();
    let ts_ms = source["ts_ms"].as_i64().unwrap();
    assert!(ts_ms > 1_700_000_000_000);
    assert_eq!(source["ts_us"], json!(ts_ms * 1000));
    assert_eq!(source["ts_ns"], json!(ts_ms * 1_000_000));
    source["ts_ms"] = json!(0);
    source["ts_us"] = json!(0);
    source["ts_ns"] = json!(0);
    assert_eq!(
        source,
        json!({
            "version": source["version"], "connector": "mysql", "name": prefix, "ts_ms": 0,
            "snapshot": "first", "db": database, "sequence": null, "ts_us": 0, "ts_ns": 0,
            "table": "a",
            "server_id": 0, "gtid": null, "file": file, "pos": pos, "row": 0,
            "thread": null, "query": null
        })
    );
    assert!(file.starts_with("binlog.") && pos > 4, "{source}");
    assert_eq!(value["transaction"], Value::Null);
    // Debezium's markers: the snapshot's first row, a table's first and last, the snapshot's
    // last (in the last table with rows: the empty table has none).
    let marker = |record: &Record| {
        record.value.as_ref().unwrap()["source"]["snapshot"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(marker(&by_id(&a, 2)), "true");
    assert_eq!(marker(&by_id(&a, 3)), "last_in_data_collection");
    assert_eq!(marker(&b[0]), "last_in_data_collection");
    let mut d_markers: Vec<String> = d.iter().map(marker).collect();
    d_markers.sort();
    assert_eq!(d_markers, ["first_in_data_collection", "last"]);
    assert_eq!(d[0].key, None, "a table without a key has null keys");
    let mut d_values: Vec<i64> = d
        .iter()
        .map(|r| r.value.as_ref().unwrap()["after"]["v"].as_i64().unwrap())
        .collect();
    d_values.sort_unstable();
    assert_eq!(d_values, [10, 20]);
    // Every snapshot record shows the snapshot's position.
    for record in a.iter().chain(&b).chain(&d).filter(|r| r.op() == Some("r")) {
        assert_eq!(binlog_place(record), (file.clone(), pos), "{record:?}");
    }
    // The change after the snapshot streams, from a later binlog position.
    let streamed = by_id(&a, 4);
    let value = streamed.value.as_ref().unwrap();
    assert_eq!(value["op"], "c");
    assert_eq!(value["source"]["snapshot"], "false");
    assert_eq!(value["after"]["vc"], "four");
    assert!(binlog_place(&streamed) > (file, pos), "{value}");
    assert_eq!(
        a.iter().filter(|r| r.op() == Some("r")).count(),
        3,
        "{a:#?}"
    );
    drop(sluice);
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_snapshot_reads_then_streams() {
    snapshot_reads_then_streams(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_snapshot_reads_then_streams() {
    snapshot_reads_then_streams(Server::Mysql).await;
}

/// Rows for the snapshot-under-writes tests: `SLUICE_IT_MYSQL_SNAPSHOT_ROWS` (default 20,000;
/// issue 16's must-show is 1,000,000).
fn snapshot_rows() -> u32 {
    std::env::var("SLUICE_IT_MYSQL_SNAPSHOT_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// Inserts, updates and deletes in small transactions until `stop`; returns the changes made.
fn start_writer(
    server: Server,
    database: String,
    rows: u32,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<u64> {
    tokio::spawn(async move {
        let mut conn = server.root().await;
        let mut changes = 0u64;
        let mut next = rows + 1;
        let mut n: u64 = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            n += 1;
            // Spread over the whole key range (so every chunk sees changes).
            let id = (n.wrapping_mul(7919) % u64::from(rows)) + 1;
            let sql = match n % 4 {
                0 => format!("DELETE FROM {database}.t WHERE id = {id}"),
                1 => {
                    next += 1;
                    format!("INSERT INTO {database}.t VALUES ({}, {n}, 'new')", next - 1)
                }
                _ => format!(
                    "UPDATE {database}.t SET v = v + 1, note = 'upd{n}' WHERE id IN ({id}, {})",
                    (id * 31) % u64::from(rows) + 1
                ),
            };
            conn.query_drop(sql).await.unwrap();
            changes += 1;
        }
        changes
    })
}

/// Creates database `database` and its table `t` (`columns`: the parenthesised column list);
/// returns a root connection.
pub(crate) async fn database_with_table(
    server: Server,
    database: &str,
    columns: &str,
) -> mysql_async::Conn {
    let mut root = server.root().await;
    root.query_drop(format!("CREATE DATABASE {database}"))
        .await
        .unwrap();
    root.query_drop(format!("CREATE TABLE {database}.t {columns}"))
        .await
        .unwrap();
    root
}

/// Creates database `database` with `t (id INT PRIMARY KEY, v BIGINT, note)` holding `rows`
/// rows (`id` 1 to `rows`, `v` = `v(id)`, `note` `row<id>`); returns a root connection.
pub(crate) async fn table_with_rows(
    server: Server,
    database: &str,
    rows: u32,
    v: impl Fn(u32) -> u32,
) -> mysql_async::Conn {
    let mut root = database_with_table(
        server,
        database,
        "(id INT NOT NULL PRIMARY KEY, v BIGINT NOT NULL, note VARCHAR(40))",
    )
    .await;
    for first in (1..=rows).step_by(1000) {
        let values: Vec<String> = (first..=rows.min(first + 999))
            .map(|id| format!("({id}, {}, 'row{id}')", v(id)))
            .collect();
        root.query_drop(format!(
            "INSERT INTO {database}.t VALUES {}",
            values.join(",")
        ))
        .await
        .unwrap();
    }
    root
}

/// The change events of `records` whose key has an `id`: (id, value); tombstones left out.
pub(crate) fn keyed_changes(records: &[Record]) -> impl Iterator<Item = (u64, &Value)> {
    records
        .iter()
        .filter_map(|record| Some((record.key.as_ref()?["id"].as_u64()?, record.value.as_ref()?)))
}

/// The newest state per key in the topic (`None`: deleted).
fn newest_per_key(records: &[Record]) -> BTreeMap<u64, Option<(i64, String)>> {
    let mut newest = BTreeMap::new();
    for record in records {
        let Some(key) = record.key.as_ref().and_then(|k| k["id"].as_u64()) else {
            continue;
        };
        let row = record.value.as_ref().and_then(|v| {
            let after = &v["after"];
            (!after.is_null()).then(|| {
                (
                    after["v"].as_i64().unwrap(),
                    after["note"].as_str().unwrap_or_default().to_owned(),
                )
            })
        });
        newest.insert(key, row);
    }
    newest
}

/// Per key, the snapshot row and the streamed changes form one chain: a read comes first, each
/// update's and delete's `before` is the row as the previous event left it, and an insert finds
/// no row. A snapshot whose binlog position is not exactly its own breaks the chain (a change
/// replayed over a row that already holds it, or one missing).
fn assert_one_chain_per_key(records: &[Record]) {
    let mut rows: HashMap<u64, Option<Value>> = HashMap::new();
    for (key, value) in keyed_changes(records) {
        let current = rows.get(&key).cloned().flatten();
        match value["op"].as_str().unwrap() {
            "r" => assert!(
                !rows.contains_key(&key),
                "key {key}: a snapshot read after other events: {value}"
            ),
            "c" => assert_eq!(current, None, "key {key}: an insert over a row: {value}"),
            "u" | "d" => assert_eq!(
                current.as_ref(),
                Some(&value["before"]),
                "key {key}: the change's before image is not the row: {value}"
            ),
            op => panic!("unexpected op {op}"),
        }
        let after = &value["after"];
        rows.insert(key, (!after.is_null()).then(|| after.clone()));
    }
}

/// Every row of the table, as [`newest_per_key`] holds them (deleted keys left out).
pub(crate) async fn table_rows(
    server: Server,
    database: &str,
) -> BTreeMap<u64, Option<(i64, String)>> {
    let mut conn = server.root().await;
    let rows: Vec<(u64, i64, String)> = conn
        .query(format!("SELECT id, v, note FROM {database}.t"))
        .await
        .unwrap();
    rows.into_iter()
        .map(|(id, v, note)| (id, Some((v, note))))
        .collect()
}

/// Must-show 4 (scaled down): a snapshot of `snapshot_rows()` rows (4 workers, ten chunks)
/// under concurrent inserts, updates and deletes, optionally crashed mid-snapshot at the
/// `snapshot::chunks_recorded` crash point and restarted; afterwards the newest event per key
/// in the topic equals the table, row for row.
async fn snapshot_under_writes(server: Server, crash: bool) {
    let _server = server.shared().await;
    let name = unique(if crash { "my_snapkill" } else { "my_snapw" });
    let database = name.clone();
    let prefix = unique("msw");
    let rows = snapshot_rows();
    let started = std::time::Instant::now();
    let mut root = table_with_rows(server, &database, rows, |id| id).await;
    eprintln!(
        "{server:?}: {rows} rows inserted in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = start_writer(server, database.clone(), rows, std::sync::Arc::clone(&stop));
    let dir = test_dir(&name);
    let admin_port = free_port();
    let toml = pipeline_with(
        server,
        &name,
        &database,
        &prefix,
        admin_port,
        &format!(
            "snapshot_workers = 4\nsnapshot_chunk_rows = {}",
            rows.div_ceil(10)
        ),
    );
    let started = std::time::Instant::now();
    let mut sluice = if crash {
        // Abort when finished chunks are recorded for the third time (at most 4 per batch:
        // some of the ten chunks are done, not all).
        let mut sluice = Sluice::start_with_env(
            &dir,
            &toml,
            admin_port,
            crate::snapshot::crash_after_recorded_chunks(2),
        );
        crate::snapshot::wait_crash(&mut sluice);
        let state: Value =
            serde_json::from_slice(&std::fs::read(state_file(&name)).unwrap()).unwrap();
        let chunks = state["snapshot"]["chunks"].as_array().expect("a plan");
        let done = chunks.iter().filter(|c| c["done"] == true).count();
        assert!(
            done > 0 && done < chunks.len(),
            "{done} of {} chunks done",
            chunks.len()
        );
        eprintln!(
            "{server:?}: crashed with {done} of {} chunks done",
            chunks.len()
        );
        sluice.env.clear();
        sluice.restart();
        sluice
    } else {
        Sluice::start(&dir, &toml, admin_port)
    };
    sluice.wait_streaming(Duration::from_secs(600));
    let snapshot_seconds = started.elapsed().as_secs_f64();
    if crash {
        assert!(
            sluice
                .log_text()
                .contains("resuming the unfinished snapshot"),
            "{}",
            sluice.log_text()
        );
    }
    // Writes go on while streaming, then stop.
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let changes = writer.await.unwrap();
    let table = table_rows(server, &database).await;
    let topic = format!("{prefix}.{database}.t");
    let mut last_difference = String::new();
    // A minute, and a minute more per 100,000 rows.
    let patience = Duration::from_secs(60 + u64::from(rows) * 60 / 100_000);
    let records = read_topic(&topic, patience, |records| {
        let newest = newest_per_key(records);
        let differences: Vec<u64> = newest
            .iter()
            .filter(|(id, row)| table.get(id).cloned().flatten() != **row)
            .map(|(id, _)| *id)
            .chain(table.keys().filter(|id| !newest.contains_key(id)).copied())
            .collect();
        last_difference = format!(
            "{} keys differ, e.g. {:?}",
            differences.len(),
            &differences[..differences.len().min(5)]
        );
        differences.is_empty()
    });
    let newest = newest_per_key(&records);
    let reads = records.iter().filter(|r| r.op() == Some("r")).count();
    eprintln!(
        "{server:?}: snapshot of {rows} rows to streaming in {snapshot_seconds:.1} s with {changes} concurrent changes; {} records, {reads} reads; {} rows in the table",
        records.len(),
        table.len()
    );
    for (id, row) in &table {
        assert_eq!(
            newest.get(id),
            Some(row),
            "key {id}: {last_difference}; log:\n{}",
            sluice.log_text()
        );
    }
    let extra: Vec<&u64> = newest
        .iter()
        .filter(|(id, row)| row.is_some() && !table.contains_key(id))
        .map(|(id, _)| id)
        .collect();
    assert!(extra.is_empty(), "rows not in the table: {extra:?}");
    assert!(changes > 0);
    if !crash {
        // Without a crash, nothing is read twice and the stream starts exactly at the
        // snapshot.
        assert_one_chain_per_key(&records);
    }
    assert!(sluice.stop(), "{}", sluice.log_text());
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_snapshot_under_writes_ends_equal_to_the_table() {
    snapshot_under_writes(Server::Mariadb, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_snapshot_under_writes_ends_equal_to_the_table() {
    snapshot_under_writes(Server::Mysql, false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_snapshot_crashed_mid_way_ends_equal_to_the_table() {
    snapshot_under_writes(Server::Mariadb, true).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_snapshot_crashed_mid_way_ends_equal_to_the_table() {
    snapshot_under_writes(Server::Mysql, true).await;
}

/// BIT, ENUM, SET and GEOMETRY as Debezium's MySQL connector writes them, the same from the
/// snapshot (a row written before the start) and from the binlog (the same values after it):
/// BIT(1) a boolean, BIT(n) base64 of little-endian bytes, ENUM and SET their labels (the
/// binlog's index and bit mask resolved with the TABLE_MAP's labels), GEOMETRY `{wkb, srid}`.
async fn bits_enums_sets_geometries(server: Server) {
    let _server = server.shared().await;
    let name = unique("my_bits");
    let database = name.clone();
    let prefix = unique("mb");
    let mut root = server.root().await;
    let values = "b'1', b'1000000011', 'medium', 'a,c', ST_GeomFromText('POINT(1 2)'), \
                  ST_GeomFromText('POINT(1 2)', 3857), NULL";
    for sql in [
        format!("CREATE DATABASE {database}"),
        format!(
            "CREATE TABLE {database}.t (id INT PRIMARY KEY, b1 BIT(1), b10 BIT(10), \
             e ENUM('small', 'medium', 'large'), st SET('a', 'b', 'c'), g GEOMETRY, \
             g2 GEOMETRY, gn GEOMETRY NULL)"
        ),
        format!("INSERT INTO {database}.t VALUES (1, {values})"),
    ] {
        root.query_drop(sql).await.unwrap();
    }
    let dir = test_dir(&name);
    let admin_port = free_port();
    let sluice = Sluice::start(
        &dir,
        &pipeline(server, &name, &database, &prefix, admin_port),
        admin_port,
    );
    sluice.wait_streaming(Duration::from_secs(60));
    root.query_drop(format!("INSERT INTO {database}.t VALUES (2, {values})"))
        .await
        .unwrap();
    root.query_drop(format!(
        "UPDATE {database}.t SET e = 'large', st = '', b1 = b'0' WHERE id = 2"
    ))
    .await
    .unwrap();
    let records = read_until(&format!("{prefix}.{database}.t"), 3);
    assert_eq!(records.len(), 3, "{records:#?}\n{}", sluice.log_text());
    let ops: Vec<&str> = records.iter().map(|r| r.op().unwrap()).collect();
    assert_eq!(ops, ["r", "c", "u"]);
    // 0x203 is 02 03 big-endian: 03 02 little-endian; POINT(1 2) in WKB.
    let point = "AQEAAAAAAAAAAADwPwAAAAAAAABA";
    let expected = |id: u32| {
        json!({
            "id": id, "b1": true, "b10": "AwI=", "e": "medium", "st": "a,c",
            "g": {"wkb": point, "srid": null}, "g2": {"wkb": point, "srid": 3857}, "gn": null
        })
    };
    assert_eq!(records[0].value.as_ref().unwrap()["after"], expected(1));
    assert_eq!(records[1].value.as_ref().unwrap()["after"], expected(2));
    let update = records[2].value.as_ref().unwrap();
    assert_eq!(update["before"], expected(2));
    let mut after = expected(2);
    after["e"] = json!("large");
    after["st"] = json!("");
    after["b1"] = json!(false);
    assert_eq!(update["after"], after);
    drop(sluice);
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_bits_enums_sets_geometries() {
    bits_enums_sets_geometries(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_bits_enums_sets_geometries() {
    bits_enums_sets_geometries(Server::Mysql).await;
}

/// One key's expected event: (op, `v` before, `v` after, whether the row has the column added
/// mid-stream).
type Expected = (&'static str, Option<i64>, Option<i64>, bool);

/// A mixed workload — inserts, updates and deletes in transactions of 1 to 5,000 row changes,
/// a column added half-way — arrives as committed: each transaction's changes under its GTID
/// and nowhere else, every key's events in the order made with their before and after images,
/// the added column in every image after the ALTER, and the newest event per key equal to the
/// table. `SLUICE_IT_MYSQL_MIXED_ROWS` rows are inserted (default 20,000; the issue's size is
/// 100,000); `SLUICE_IT_MYSQL_MIXED_SEED` replays a run's workload.
async fn mixed_workload_arrives_as_committed(server: Server) {
    use rand::{Rng, SeedableRng};
    let rows: u32 = std::env::var("SLUICE_IT_MYSQL_MIXED_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let seed: u64 = std::env::var("SLUICE_IT_MYSQL_MIXED_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("{server:?} mixed workload: SLUICE_IT_MYSQL_MIXED_SEED={seed}");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let _server = server.shared().await;
    let Streaming {
        mut root,
        database,
        prefix,
        mut sluice,
    } = streaming(
        server,
        "my_mixed",
        "mm",
        "(id INT NOT NULL PRIMARY KEY, v BIGINT NOT NULL, tag VARCHAR(20))",
    )
    .await;

    let started = std::time::Instant::now();
    let mut current: BTreeMap<u32, i64> = BTreeMap::new();
    let mut expected: HashMap<u32, Vec<Expected>> = HashMap::new();
    let mut transaction_sizes: Vec<usize> = Vec::new();
    let (mut next_id, mut altered, mut events) = (1u32, false, 0usize);
    while next_id <= rows {
        if !altered && next_id > rows / 2 {
            root.query_drop(format!(
                "ALTER TABLE {database}.t ADD COLUMN extra INT NOT NULL DEFAULT 7"
            ))
            .await
            .unwrap();
            altered = true;
        }
        let size: usize = match rng.random_range(0..10) {
            0..=6 => rng.random_range(1..=20),
            7 | 8 => rng.random_range(200..=1000),
            _ => rng.random_range(2000..=5000),
        };
        let existing: Vec<u32> = current.keys().copied().collect();
        let (mut inserts, mut updates, mut deletes) = (Vec::new(), Vec::new(), Vec::new());
        let mut touched = std::collections::HashSet::new();
        for _ in 0..size {
            let roll = rng.random_range(0..100);
            if roll < 60 || existing.is_empty() {
                if next_id <= rows {
                    inserts.push(next_id);
                    next_id += 1;
                }
            } else {
                let id = existing[rng.random_range(0..existing.len())];
                if touched.insert(id) {
                    if roll < 85 {
                        updates.push(id);
                    } else {
                        deletes.push(id);
                    }
                }
            }
        }
        if inserts.is_empty() && updates.is_empty() && deletes.is_empty() {
            continue;
        }
        let list = |ids: &[u32]| ids.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
        let mut statements = vec!["START TRANSACTION".to_owned()];
        if !inserts.is_empty() {
            let values: Vec<String> = inserts
                .iter()
                .map(|id| format!("({id}, 0, 'tag{}')", id % 97))
                .collect();
            statements.push(format!(
                "INSERT INTO {database}.t (id, v, tag) VALUES {}",
                values.join(",")
            ));
        }
        if !updates.is_empty() {
            statements.push(format!(
                "UPDATE {database}.t SET v = v + 1 WHERE id IN ({})",
                list(&updates)
            ));
        }
        if !deletes.is_empty() {
            statements.push(format!(
                "DELETE FROM {database}.t WHERE id IN ({})",
                list(&deletes)
            ));
        }
        statements.push("COMMIT".to_owned());
        for statement in statements {
            root.query_drop(statement).await.unwrap();
        }
        for id in &inserts {
            current.insert(*id, 0);
            expected
                .entry(*id)
                .or_default()
                .push(("c", None, Some(0), altered));
        }
        for id in &updates {
            let v = current.get_mut(id).unwrap();
            expected
                .entry(*id)
                .or_default()
                .push(("u", Some(*v), Some(*v + 1), altered));
            *v += 1;
        }
        for id in &deletes {
            let v = current.remove(id).unwrap();
            expected
                .entry(*id)
                .or_default()
                .push(("d", Some(v), None, altered));
        }
        let changes = inserts.len() + updates.len() + deletes.len();
        transaction_sizes.push(changes);
        events += changes;
    }
    println!(
        "{server:?} mixed workload: {rows} rows inserted, {events} changes in {} transactions (largest {}) in {:.1} s",
        transaction_sizes.len(),
        transaction_sizes.iter().max().unwrap_or(&0),
        started.elapsed().as_secs_f64()
    );

    let topic = format!("{prefix}.{database}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(300), |records| {
            records.iter().filter(|r| r.value.is_some()).count() >= events
        })
    })
    .await
    .unwrap();
    let changes: Vec<&Record> = records.iter().filter(|r| r.value.is_some()).collect();
    assert_eq!(changes.len(), events, "{}", sluice.log_text());
    // Per key: the events made, in order, with their images.
    let mut seen: HashMap<u32, Vec<Expected>> = HashMap::new();
    let mut per_gtid: HashMap<String, usize> = HashMap::new();
    for record in &changes {
        let value = record.value.as_ref().unwrap();
        let id = record.key.as_ref().unwrap()["id"].as_u64().unwrap() as u32;
        let op: &'static str = match value["op"].as_str().unwrap() {
            "c" => "c",
            "u" => "u",
            "d" => "d",
            other => panic!("unexpected op {other}"),
        };
        let image = if op == "d" {
            &value["before"]
        } else {
            &value["after"]
        };
        let has_extra = match image["extra"].as_i64() {
            Some(7) => true,
            None => false,
            Some(other) => panic!("extra = {other} for {id}"),
        };
        if op == "u" {
            assert_eq!(
                value["before"]["extra"].as_i64().is_some(),
                has_extra,
                "{id}: the before and after images of one update differ in columns: {value}"
            );
        }
        assert_eq!(image["tag"], json!(format!("tag{}", id % 97)), "{value}");
        seen.entry(id).or_default().push((
            op,
            value["before"]["v"].as_i64(),
            value["after"]["v"].as_i64(),
            has_extra,
        ));
        *per_gtid
            .entry(value["source"]["gtid"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    let mut wrong: Vec<u32> = expected
        .iter()
        .filter(|(id, events)| seen.get(id) != Some(events))
        .map(|(id, _)| *id)
        .collect();
    wrong.sort_unstable();
    if let Some(id) = wrong.first() {
        panic!(
            "{} keys with other events than made, e.g. {id}: made {:?}, seen {:?}",
            wrong.len(),
            expected[id],
            seen.get(id)
        );
    }
    // Each transaction's changes under one GTID of their own.
    let mut made = transaction_sizes.clone();
    made.sort_unstable();
    let mut arrived: Vec<usize> = per_gtid.values().copied().collect();
    arrived.sort_unstable();
    assert_eq!(arrived, made, "changes per GTID vs per transaction");
    // The newest event per key is the table.
    let table: BTreeMap<u32, i64> = root
        .query(format!("SELECT id, v FROM {database}.t"))
        .await
        .unwrap()
        .into_iter()
        .map(|(id, v): (u32, i64)| (id, v))
        .collect();
    assert_eq!(table, current);
    let newest: BTreeMap<u32, i64> = seen
        .iter()
        .filter_map(|(id, events)| {
            let last = events.last()?;
            last.2.map(|v| (*id, v))
        })
        .collect();
    assert_eq!(newest, table, "newest event per key vs the table");
    assert!(sluice.stop(), "{}", sluice.log_text());
    root.query_drop(format!("DROP DATABASE {database}"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mariadb_mixed_workload_arrives_as_committed() {
    mixed_workload_arrives_as_committed(Server::Mariadb).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_mixed_workload_arrives_as_committed() {
    mixed_workload_arrives_as_committed(Server::Mysql).await;
}

/// TLS to MariaDB through the binary's crypto provider (ring, src/crypto.rs), the server's
/// chain and host name verified against the dev stack's CA (`ssl_ca`): the server counts the
/// TLS sessions it accepted, and the snapshot and the streamed changes arrive. With a CA file
/// that did not sign the server's certificate the pipeline stops, naming `ssl_ca`.
#[tokio::test(flavor = "multi_thread")]
async fn mariadb_streams_over_tls_verified_with_ssl_ca() {
    let server = Server::Mariadb;
    let _server = server.shared().await;
    let database = unique("my_tls");
    let prefix = unique("mtls");
    let mut root = database_with_table(server, &database, "(id INT PRIMARY KEY, v TEXT)").await;
    root.query_drop(format!("INSERT INTO {database}.t VALUES (1, 'before')"))
        .await
        .unwrap();
    async fn accepts(root: &mut mysql_async::Conn) -> u64 {
        let row: Option<(String, u64)> = root
            .query_first("SHOW GLOBAL STATUS LIKE 'Ssl_accepts'")
            .await
            .unwrap();
        row.expect("Ssl_accepts").1
    }
    let before = accepts(&mut root).await;
    let tls = std::env::var("SLUICE_TLS_DIR").expect("SLUICE_TLS_DIR (scripts/dev-stack env)");
    let with_ca = |ca: &str, port: u16| {
        pipeline(server, &database, &database, &prefix, port).replace(
            "server_id = ",
            &format!("ssl_ca = \"{tls}/{ca}\"\nserver_id = "),
        )
    };
    // A certificate that is not the server's CA: the pipeline stops, naming the key to set.
    let port = free_port();
    let wrong = with_ca("client-sluice_cert.crt", port);
    let refused = Sluice::start(&test_dir(&format!("{database}_wrong")), &wrong, port);
    crate::support::wait_until(
        "the refused certificate named",
        Duration::from_secs(60),
        || {
            let log = refused.log_text();
            log.contains("invalid peer certificate")
                && log.contains("does not verify against source.mysql.ssl_ca")
        },
    );
    drop(refused);

    let port = free_port();
    let sluice = Sluice::start(&test_dir(&database), &with_ca("ca.crt", port), port);
    sluice.wait_streaming(Duration::from_secs(60));
    root.query_drop(format!("INSERT INTO {database}.t VALUES (2, 'after')"))
        .await
        .unwrap();
    let records = read_until(&format!("{prefix}.{database}.t"), 2);
    let ops: Vec<_> = records
        .iter()
        .map(|r| r.value.as_ref().map(|v| v["op"].clone()))
        .collect();
    assert_eq!(ops, [Some(json!("r")), Some(json!("c"))], "{records:?}");
    assert!(
        accepts(&mut root).await > before,
        "MariaDB accepted no TLS session from sluice"
    );
}

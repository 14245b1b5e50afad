//! Shared plumbing for the integration tests: the dev stack's endpoints, unique names, a
//! running `sluice` process, and reading topics back.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::Message;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Headers;
use tokio_postgres::{Client, NoTls};

/// The dev stack's endpoints, from the environment `scripts/dev-stack env` prints.
pub struct Stack {
    pub pg_url: String,
    pub brokers: String,
}

/// How to start the dev stack, for the messages of tests that find no server.
pub const HOW_TO_START: &str = "start the dev stack and load its settings: \
    `scripts/dev-stack up && eval \"$(scripts/dev-stack env)\"` (scripts/test does both)";

/// The stack's endpoints; fails the test (never skips) when they are not set.
pub fn stack() -> Stack {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set: {HOW_TO_START}"))
    };
    Stack {
        pg_url: var("PG_URL"),
        brokers: var("KAFKA_BROKERS"),
    }
}

/// The dev stack's S3-compatible endpoint (moto); fails the test when it is not set.
pub fn s3_endpoint() -> String {
    std::env::var("S3_ENDPOINT")
        .unwrap_or_else(|_| panic!("S3_ENDPOINT is not set: {HOW_TO_START}"))
}

/// A name unique to this test run: `prefix_<pid>_<n>`.
pub fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    format!(
        "{prefix}_{}_{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// A SQL connection to the stack's PostgreSQL.
pub async fn pg() -> Client {
    pg_at(&stack().pg_url).await
}

/// A SQL connection to `url`, named after the test (`application_name`: the test thread's
/// name, unless `url` names one), so that what sluice reports about other sessions (a
/// transaction a slot's creation waits for) says which test holds it.
pub async fn pg_at(url: &str) -> Client {
    let mut config: tokio_postgres::Config = url
        .parse()
        .unwrap_or_else(|e| panic!("not a PostgreSQL connection string: {url}: {e}"));
    if config.get_application_name().is_none()
        && let Some(test) = std::thread::current().name()
    {
        config.application_name(test);
    }
    let (client, connection) = config
        .connect(NoTls)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to PostgreSQL at {url}: {e}; {HOW_TO_START}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// The `application_name` [`pg_at`]'s sessions carry, as PostgreSQL keeps it (63 bytes): the
/// test's name.
pub fn application_name() -> String {
    let test = std::thread::current().name().unwrap_or_default().to_owned();
    test.chars().take(63).collect()
}

/// A free loopback port.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The directory for this test's files (pipeline files, logs).
pub fn test_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join(name);
    std::fs::create_dir_all(&dir).expect("test dir");
    dir
}

/// A pipeline file's text with the usual settings; `extra` is appended.
pub fn pipeline_toml(
    name: &str,
    schema: &str,
    prefix: &str,
    admin_port: u16,
    extra: &str,
) -> String {
    let stack = stack();
    let state = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("it")
        .join("state");
    format!(
        r#"
name = "{name}"
state_dir = "{state}"

[source.postgres]
url = "{pg}"
schemas = ["{schema}"]
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
{extra}
"#,
        pg = stack.pg_url,
        brokers = stack.brokers,
        state = state.display(),
    )
}

/// [`pipeline_toml`] reading the PostgreSQL server at `url` instead of the stack's.
pub fn pipeline_toml_at(
    url: &str,
    name: &str,
    schema: &str,
    prefix: &str,
    admin_port: u16,
    extra: &str,
) -> String {
    let toml = pipeline_toml(name, schema, prefix, admin_port, extra);
    let stack_url = format!("url = \"{}\"", stack().pg_url);
    assert!(toml.contains(&stack_url));
    toml.replacen(&stack_url, &format!("url = \"{url}\""), 1)
}

/// A server of another PostgreSQL major version (scripts/pg-versions), beside the stack's.
pub struct VersionServer {
    /// The `postgres` superuser over TCP.
    pub url: String,
    /// `sluice_scram` over TLS (verify-full, SCRAM).
    pub tls_url: String,
}

/// Runs `scripts/pg-versions <command> <version>` (a server or a primary/standby pair, kept
/// running for the next run as the stack's servers are) and returns a reader of the variables it
/// printed (`export NAME='value'`).
pub fn pg_versions(command: &str, version: u32) -> impl Fn(&str) -> String {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let output = Command::new(root.join("scripts/pg-versions"))
        .args([command, &version.to_string()])
        .current_dir(&root)
        .stderr(Stdio::inherit())
        .output()
        .expect("run scripts/pg-versions");
    assert!(
        output.status.success(),
        "scripts/pg-versions {command} {version} failed (SLUICE_DEV_DIR must name the dev stack's state directory: {HOW_TO_START})"
    );
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let command = command.to_owned();
    move |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("export {name}=")))
            .map(|value| value.trim_matches('\'').to_owned())
            .unwrap_or_else(|| panic!("scripts/pg-versions {command} {version} printed no {name}"))
    }
}

/// The server of major `version`: started by `scripts/pg-versions up` once per test run (kept
/// running for the next, as the stack's servers are).
pub fn pg_version(version: u32) -> &'static VersionServer {
    static SERVERS: std::sync::Mutex<Vec<(u32, &'static VersionServer)>> =
        std::sync::Mutex::new(Vec::new());
    let mut servers = SERVERS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, server)) = servers.iter().find(|(v, _)| *v == version) {
        return server;
    }
    let var = pg_versions("up", version);
    let server: &'static VersionServer = Box::leak(Box::new(VersionServer {
        url: var("PG_URL"),
        tls_url: var("PG_TLS_URL"),
    }));
    servers.push((version, server));
    server
}

/// A running `sluice run` process.
pub struct Sluice {
    child: Option<Child>,
    /// Extra environment variables for the next (re)start.
    pub env: Vec<(String, String)>,
    pub admin: SocketAddr,
    pub file: PathBuf,
    pub log: PathBuf,
}

/// The `sluice` binary under test: cargo's, or `SLUICE_BIN` (a copy taken right after the
/// build, when several worktrees share one target directory and may rebuild it meanwhile).
pub fn sluice_bin() -> &'static str {
    static BIN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        std::env::var("SLUICE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_sluice").to_owned())
    })
}

impl Sluice {
    /// Writes the pipeline file and starts `sluice run` on it; its log goes to a file.
    pub fn start(dir: &std::path::Path, toml: &str, admin_port: u16) -> Self {
        Self::start_with_env(dir, toml, admin_port, Vec::new())
    }

    /// [`Sluice::start`] with extra environment variables (kept for restarts: see `env`).
    pub fn start_with_env(
        dir: &std::path::Path,
        toml: &str,
        admin_port: u16,
        env: Vec<(String, String)>,
    ) -> Self {
        let file = dir.join("pipeline.toml");
        std::fs::write(&file, toml).expect("write pipeline file");
        let log = dir.join("sluice.log");
        let mut this = Self {
            child: None,
            env,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
            file,
            log,
        };
        this.restart();
        this
    }

    /// Starts the process again on the same file (after [`Sluice::kill`]).
    pub fn restart(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("log file");
        let child = Command::new(sluice_bin())
            .args(["run"])
            .arg(&self.file)
            .env("SLUICE_LOG", "info")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start sluice");
        self.child = Some(child);
    }

    /// SIGKILL, as a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait (bounded) for a graceful exit; returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        // A process just (re)started may not handle SIGTERM yet: let it come up first (its
        // admin server answers), so that the stop tested is the graceful one. A CI run's
        // sink_s3 test stopped a restarted sink within milliseconds of its start, and the
        // signal's default action ended it.
        let up_by = Instant::now() + Duration::from_secs(30);
        while self.get("/health").is_none() && self.exited().is_none() && Instant::now() < up_by {
            std::thread::sleep(Duration::from_millis(50));
        }
        let Some(mut child) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }

    /// Whether the process has exited, with its status.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// The process id of the running sluice, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|child| child.id())
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Waits until the log so far satisfies `check`; on timeout (times [`bound`]'s slack) the
    /// panic shows the log's end, so that a CI failure says what the process was doing.
    pub fn wait_log(&self, what: &str, timeout: Duration, mut check: impl FnMut(&str) -> bool) {
        let timeout = bound(timeout);
        let deadline = Instant::now() + timeout;
        loop {
            let log = self.log_text();
            if check(&log) {
                return;
            }
            if Instant::now() >= deadline {
                let tail: String = {
                    let lines: Vec<&str> = log.lines().collect();
                    lines[lines.len().saturating_sub(40)..].join("\n")
                };
                panic!("timed out after {timeout:?} waiting for {what}; the log's end:\n{tail}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// GET a path from the admin server; `None` while it is not up.
    pub fn get(&self, path: &str) -> Option<String> {
        http_get(self.admin, path)
    }

    /// The value of a metric line (exact name plus labels, e.g. `sluice_delivery_inflight_bytes{pipeline="x"}`),
    /// summed over label sets when only the name is given.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let text = self.get("/metrics")?;
        metric_value(&text, name)
    }

    /// Waits until `/health` answers with state `streaming` (within `timeout` times [`bound`]'s
    /// slack). On timeout the panic shows the log, then its first line, its warnings and errors
    /// and `/health` again at the end (the part of a long message a CI excerpt keeps).
    pub fn wait_streaming(&self, timeout: Duration) {
        let timeout = bound(timeout);
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self
                .get("/health")
                .is_some_and(|body| body.contains("\"state\":\"streaming\""))
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = self.log_text();
        let first = log.lines().next().unwrap_or_default();
        let warnings: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
            .collect();
        panic!(
            "sluice did not reach the streaming state within {timeout:?}; log:\n{log}\n\
             --- the log's first line:\n{first}\n--- its warnings and errors ({}):\n{}\n\
             --- /health now:\n{}",
            warnings.len(),
            warnings.join("\n"),
            self.get("/health").unwrap_or_default()
        );
    }

    /// [`Sluice::wait_streaming`] on a blocking thread, for tests that run several pipelines
    /// in one task (`join!`, `join_all`): waiting on the task's own thread would stall the
    /// others, and one of them stalled between its `BEGIN` and `COMMIT` holds back every
    /// slot's creation in the cluster, so the waiting pipeline never streams (a CI run
    /// deadlocked so for 300 s).
    pub async fn streaming(self, timeout: Duration) -> Self {
        tokio::task::spawn_blocking(move || {
            self.wait_streaming(timeout);
            self
        })
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

impl Drop for Sluice {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sums the samples of metric `name` (a bare name matches every label set).
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    let mut found = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let bare = series.split('{').next().unwrap_or(series);
        if series == name || (bare == name && !name.contains('{')) {
            let value: f64 = value.parse().ok()?;
            found = Some(found.unwrap_or(0.0) + value);
        }
    }
    found
}

/// A minimal HTTP/1.0 GET (the tests need no HTTP client crate for this).
pub fn http_get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
}

/// A minimal HTTP/1.0 request with extra header lines; returns (status, body).
pub fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let mut request =
        format!("{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Length: 0\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// One record read back from Kafka.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    #[allow(dead_code)]
    pub offset: i64,
    pub key: Option<serde_json::Value>,
    pub value: Option<serde_json::Value>,
    pub headers: HashMap<String, String>,
    #[allow(dead_code)]
    pub timestamp_ms: Option<i64>,
}

impl Record {
    /// A position header as a number.
    pub fn header_u64(&self, name: &str) -> u64 {
        self.headers
            .get(name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("record without header {name}: {self:?}"))
    }

    /// The Debezium `op`, or `None` for a tombstone.
    pub fn op(&self) -> Option<&str> {
        self.value.as_ref().and_then(|v| v["op"].as_str())
    }
}

/// Reads a topic from the beginning until `done` says so (called after every poll batch) or
/// `timeout`; returns the records in partition-offset order per partition.
pub fn read_topic(
    topic: &str,
    timeout: Duration,
    done: impl FnMut(&[Record]) -> bool,
) -> Vec<Record> {
    read_topic_with(topic, timeout, &[], done)
}

/// [`read_topic`] by a consumer with extra settings, e.g. `isolation.level`.
pub fn read_topic_with(
    topic: &str,
    timeout: Duration,
    settings: &[(&str, &str)],
    done: impl FnMut(&[Record]) -> bool,
) -> Vec<Record> {
    read_topic_at(&stack().brokers, topic, timeout, settings, done)
}

/// [`read_topic_with`] from the broker at `brokers` (e.g. [`fault_brokers`]).
pub fn read_topic_at(
    brokers: &str,
    topic: &str,
    timeout: Duration,
    settings: &[(&str, &str)],
    mut done: impl FnMut(&[Record]) -> bool,
) -> Vec<Record> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("group.id", unique("it-reader"))
        .set("enable.auto.commit", "false");
    for (key, value) in settings {
        config.set(*key, *value);
    }
    let consumer: BaseConsumer = config.create().expect("consumer");
    let deadline = Instant::now() + timeout;
    let partitions = loop {
        // A busy broker may not answer within the call's timeout: asked again until the
        // deadline.
        let count = match consumer.fetch_metadata(Some(topic), Duration::from_secs(5)) {
            Ok(metadata) => metadata
                .topics()
                .first()
                .map(|t| t.partitions().len())
                .unwrap_or(0),
            Err(error) if Instant::now() < deadline => {
                eprintln!("read_topic: metadata of {topic}: {error}; asking again");
                0
            }
            Err(error) => panic!("metadata of {topic}: {error}"),
        };
        if count > 0 {
            break count;
        }
        assert!(Instant::now() < deadline, "topic {topic} never appeared");
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions as i32 {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("assignment");
    }
    consumer.assign(&assignment).expect("assign");
    let mut records = Vec::new();
    while Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = match message {
                Ok(message) => message,
                // A broker restart (the fault broker's tests stop it while reading) reaches
                // this consumer as an error event; librdkafka reconnects on its own, so it is
                // waited out.
                Err(rdkafka::error::KafkaError::MessageConsumption(
                    rdkafka::types::RDKafkaErrorCode::AllBrokersDown
                    | rdkafka::types::RDKafkaErrorCode::BrokerTransportFailure,
                )) => continue,
                Err(error) => panic!("consume: {error}"),
            };
            // Bytes that are not JSON (load-generator payloads) are kept as a JSON string.
            let parse = |bytes: Option<&[u8]>| {
                bytes.map(|b| {
                    serde_json::from_slice(b).unwrap_or_else(|_| {
                        serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
                    })
                })
            };
            let headers = message
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| {
                            (
                                h.key.to_owned(),
                                String::from_utf8_lossy(h.value.unwrap_or_default()).into_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            records.push(Record {
                partition: message.partition(),
                offset: message.offset(),
                key: parse(message.key()),
                value: parse(message.payload()),
                headers,
                timestamp_ms: message.timestamp().to_millis(),
            });
            continue;
        }
        if done(&records) {
            break;
        }
    }
    records
}

/// How much longer than written a wait for something that must happen may take before the test
/// fails: `SLUICE_IT_SLACK` times (default 3), for bounds of 60 s and less. A bound is not a
/// wait (a passing test never reaches it), and CI machines have run the suite 2.5 times slower
/// than an idle one here: the figures in the tests are what an idle machine needs with room to
/// spare, the slack is for load.
pub fn bound(written: Duration) -> Duration {
    // Longer bounds already hold their own margin; tripled, a hang would cost the suite's
    // time limit.
    if written > Duration::from_secs(60) {
        return written;
    }
    let slack = std::env::var("SLUICE_IT_SLACK")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|&s| s >= 1)
        .unwrap_or(3);
    written * slack
}

/// Waits for `check` to hold, polling; panics with `what` after `timeout` (times [`bound`]'s
/// slack).
pub fn wait_until(what: &str, timeout: Duration, mut check: impl FnMut() -> bool) {
    let timeout = bound(timeout);
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if check() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("timed out after {timeout:?} waiting for {what}");
}

/// The slot's confirmed flush LSN as a number.
pub async fn slot_confirmed(client: &Client, slot: &str) -> Option<u64> {
    let row = client
        .query_opt(
            "SELECT (confirmed_flush_lsn - '0/0'::pg_lsn)::bigint FROM pg_replication_slots WHERE slot_name = $1",
            &[&slot],
        )
        .await
        .expect("slot query")?;
    row.get::<_, Option<i64>>(0).map(|v| v as u64)
}

/// Waits until no walsender holds `slot`: a stopped sluice's walsender can outlive its client by
/// a moment on a loaded server, and dropping the slot then fails with "is active for PID".
pub async fn wait_slot_inactive(client: &Client, slot: &str) {
    let deadline = Instant::now() + bound(Duration::from_secs(60));
    loop {
        let active = client
            .query_opt(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .expect("slot query")
            .is_some_and(|row| row.get::<_, bool>(0));
        if !active {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "slot {slot} still active after {:?}",
            bound(Duration::from_secs(60))
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Drops a test's slot and publication (they are cluster-wide), ignoring absence.
pub async fn drop_slot_and_publication(client: &Client, name: &str) {
    let slot = format!("sluice_{name}");
    // A killed sluice's walsender may hold the slot for a moment: wait for it (then end it), so
    // no test leaves a slot behind that retains WAL.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let dropped = client
            .execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active",
                &[&slot],
            )
            .await
            .unwrap_or(0);
        let remaining = client
            .query_one(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1",
                &[&slot],
            )
            .await
            .map(|r| r.get::<_, i64>(0))
            .unwrap_or(0);
        if dropped > 0 || remaining == 0 {
            break;
        }
        if Instant::now() > deadline {
            let _ = client
                .execute(
                    "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active",
                    &[&slot],
                )
                .await;
        }
        if Instant::now() > deadline + Duration::from_secs(5) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = client
        .batch_execute(&format!("DROP PUBLICATION IF EXISTS sluice_{name}"))
        .await;
}

/// The second broker (`scripts/dev-stack fault-kafka-up`), for the tests that stop a broker or
/// change its defaults: no other test uses it, so those tests never disturb the others (they
/// once held the stack's broker exclusively, and every other test waited for them).
pub fn fault_brokers() -> String {
    std::env::var("KAFKA_FAULT_BROKERS").unwrap_or_else(|_| {
        panic!(
            "KAFKA_FAULT_BROKERS is not set: start the fault broker and load its setting: \
             `scripts/dev-stack fault-kafka-up && eval \"$(scripts/dev-stack env)\"` \
             (scripts/test does both)"
        )
    })
}

/// A pipeline file's `[kafka]` section pointed at the fault broker instead of the stack's.
pub fn on_fault_broker(toml: &str) -> String {
    let stack = format!("brokers = \"{}\"", stack().brokers);
    assert!(toml.contains(&stack), "no {stack} in {toml}");
    toml.replace(&stack, &format!("brokers = \"{}\"", fault_brokers()))
}

/// Exclusive use of the fault broker, taken by each test that uses it; started again first if
/// an earlier test failed while it was stopped (so that one failure does not fail the rest).
pub async fn fault_broker() -> tokio::sync::MutexGuard<'static, ()> {
    static FAULT_BROKER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = FAULT_BROKER.lock().await;
    tokio::task::spawn_blocking(|| dev_stack(&["start-fault-kafka"]))
        .await
        .unwrap();
    guard
}

/// Runs `scripts/dev-stack <args>` from the repository root.
pub fn dev_stack(args: &[&str]) {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let status = Command::new(root.join("scripts/dev-stack"))
        .args(args)
        .current_dir(&root)
        .stdout(Stdio::null())
        .status()
        .expect("run scripts/dev-stack");
    assert!(status.success(), "scripts/dev-stack {args:?} failed");
}

/// A throwaway PostgreSQL cluster with extra settings, for conditions that must not touch the
/// shared server (server-wide settings); stopped and removed on drop.
pub struct ThrowawayPg {
    dir: std::path::PathBuf,
    bin: String,
    pub url: String,
}

impl ThrowawayPg {
    /// initdb + start with `settings` (`name=value`, e.g. `wal_level=replica`).
    pub fn start(settings: &[&str]) -> Self {
        let bin = std::env::var("PG_BIN")
            .unwrap_or_else(|_| panic!("PG_BIN is not set: eval \"$(scripts/dev-stack env)\""));
        // Under the system temp dir, not the cargo target dir: when the tests run as root
        // the server runs as `postgres`, which cannot traverse e.g. /root/.cache.
        let home = std::env::temp_dir().join(unique("sluice-throwaway-pg"));
        std::fs::create_dir_all(&home).expect("replica cluster dir");
        let dir = home.join("data");
        let port = free_port();
        let as_postgres = |args: &[&str]| {
            let root = Command::new("id")
                .arg("-u")
                .output()
                .map(|o| o.stdout == b"0\n")
                .unwrap_or(false);
            let mut command = if root {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]);
                c
            } else {
                Command::new(args[0])
            };
            if root {
                command.args(args);
            } else {
                command.args(&args[1..]);
            }
            command
        };
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        if root {
            let _ = Command::new("chown")
                .args([
                    "-R",
                    "postgres:postgres",
                    dir.parent().unwrap().to_str().unwrap(),
                ])
                .status();
        }
        let initdb = format!("{bin}/initdb");
        let status = as_postgres(&[
            &initdb,
            "-D",
            dir.to_str().unwrap(),
            "-A",
            "trust",
            "-U",
            "postgres",
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
        assert!(status.success(), "initdb");
        let pg_ctl = format!("{bin}/pg_ctl");
        let mut options = format!(
            "-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories={}",
            dir.display()
        );
        for setting in settings {
            options.push_str(&format!(" -c {setting}"));
        }
        let status = as_postgres(&[
            &pg_ctl,
            "-D",
            dir.to_str().unwrap(),
            "-o",
            &options,
            "-w",
            "-l",
            dir.join("log").to_str().unwrap(),
            "start",
        ])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
        assert!(status.success(), "pg_ctl start");
        Self {
            dir,
            bin,
            url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        }
    }
}

impl Drop for ThrowawayPg {
    fn drop(&mut self) {
        let pg_ctl = format!("{}/pg_ctl", self.bin);
        let root = Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout == b"0\n")
            .unwrap_or(false);
        let args = [
            pg_ctl.as_str(),
            "-D",
            self.dir.to_str().unwrap(),
            "-m",
            "immediate",
            "stop",
        ];
        let _ = if root {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .args(args)
                .status()
        } else {
            Command::new(args[0]).args(&args[1..]).status()
        };
        if let Some(home) = self.dir.parent() {
            let _ = std::fs::remove_dir_all(home);
        }
    }
}

/// An HTTP/1.0 request with a JSON body; `(status, body)` or `None` when nobody answers.
pub fn http_json(addr: SocketAddr, method: &str, path: &str, body: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())?;
    Some((status, body))
}

/// The committed documents of key `key` in the state topic `topic` (`state_store = "kafka"`),
/// oldest first, read to the topic's end (tombstones as `Null`); empty while there is no topic.
pub fn state_documents(topic: &str, key: &str) -> Vec<serde_json::Value> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .set("group.id", unique("it-state-reader"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .expect("consumer");
    let Ok((_, high)) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10)) else {
        return Vec::new();
    };
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(topic, 0, Offset::Beginning)
        .expect("assignment");
    consumer.assign(&assignment).expect("assign");
    let mut documents = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    // Transaction markers take offsets too: read until the position passes the end seen at the
    // start (or the reader has been idle a while behind an open transaction).
    let mut idle = 0;
    while Instant::now() < deadline && idle < 10 {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(message)) => {
                idle = 0;
                if message.key() == Some(key.as_bytes()) {
                    documents.push(message.payload().map_or(serde_json::Value::Null, |p| {
                        serde_json::from_slice(p).expect("a JSON document")
                    }));
                }
            }
            Some(Err(e)) => panic!("reading the state topic {topic}: {e}"),
            None => idle += 1,
        }
        let position = consumer
            .position()
            .ok()
            .and_then(|list| list.find_partition(topic, 0).map(|p| p.offset()))
            .and_then(|offset| offset.to_raw());
        if position.is_some_and(|p| p >= high) {
            break;
        }
    }
    documents
}

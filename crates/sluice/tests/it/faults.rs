//! Crashes, lost connections, back-pressure and bad input: nothing is lost, errors are clear.

use std::collections::HashMap;
use std::process::Command;
use std::time::{Duration, Instant};

use rand::Rng;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;

use crate::support::{
    Sluice, ThrowawayPg, dev_stack, drop_slot_and_publication, fault_broker, fault_brokers,
    free_port, on_fault_broker, pg, pg_at, pipeline_toml, pipeline_toml_at, read_topic,
    read_topic_at, sluice_bin, stack, test_dir, unique, wait_until,
};

/// Creates `schema.t (id bigint primary key, payload text)`.
pub(crate) async fn create_table(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (id bigint PRIMARY KEY, payload text);"
        ))
        .await
        .unwrap();
}

/// Inserts ids `from..to` in transactions of `per_tx` rows (~200-byte payloads).
pub(crate) async fn insert_range(
    client: &tokio_postgres::Client,
    schema: &str,
    from: i64,
    to: i64,
    per_tx: i64,
) {
    let mut start = from;
    while start < to {
        let end = (start + per_tx).min(to);
        client
            .batch_execute(&format!(
                "INSERT INTO {schema}.t SELECT g, md5(g::text) || repeat('p', 168) FROM generate_series({start}, {}) g",
                end - 1
            ))
            .await
            .unwrap();
        start = end;
    }
}

/// Reads the topic until every id of `0..count` was seen; returns (records per id, total).
pub(crate) fn read_all_ids(
    topic: &str,
    count: usize,
    timeout: Duration,
) -> (HashMap<i64, usize>, usize) {
    read_all_ids_at(&stack().brokers, topic, count, timeout)
}

/// [`read_all_ids`] from the broker at `brokers`.
fn read_all_ids_at(
    brokers: &str,
    topic: &str,
    count: usize,
    timeout: Duration,
) -> (HashMap<i64, usize>, usize) {
    let mut seen: HashMap<i64, usize> = HashMap::new();
    let mut counted = 0;
    let records = read_topic_at(brokers, topic, timeout, &[], |records| {
        for record in &records[counted..] {
            let id = record.key.as_ref().unwrap()["id"].as_i64().unwrap();
            *seen.entry(id).or_default() += 1;
        }
        counted = records.len();
        seen.len() >= count
    });
    let mut per_id: HashMap<i64, usize> = HashMap::new();
    for record in &records {
        let id = record.key.as_ref().unwrap()["id"].as_i64().unwrap();
        *per_id.entry(id).or_default() += 1;
    }
    (per_id, records.len())
}

/// sluice is killed with SIGKILL at random moments during a 200,000-row load and restarted,
/// five times: every committed row is in Kafka; duplicates are counted and reported.
#[tokio::test(flavor = "multi_thread")]
async fn sigkill_during_load_loses_nothing() {
    sigkill_during_load(&stack().pg_url).await;
}

/// The body of [`sigkill_during_load_loses_nothing`], on the PostgreSQL server at `server`
/// (`versions` runs it on another major version's).
pub(crate) async fn sigkill_during_load(server: &str) {
    let name = unique("kill");
    let client = pg_at(server).await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml_at(server, &name, &name, &name, port, "");
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    const ROWS: i64 = 200_000;
    let writer = {
        let schema = name.clone();
        let server = server.to_owned();
        tokio::spawn(async move {
            let client = pg_at(&server).await;
            for chunk in 0..100 {
                insert_range(&client, &schema, chunk * 2000, (chunk + 1) * 2000, 500).await;
                tokio::time::sleep(Duration::from_millis(30)).await;
            }
        })
    };
    let mut kills = 0;
    while kills < 5 {
        let pause = rand::rng().random_range(300..1500);
        tokio::time::sleep(Duration::from_millis(pause)).await;
        sluice.kill();
        kills += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
        sluice.restart();
    }
    writer.await.unwrap();
    let committed: i64 = client
        .query_one(&format!("SELECT count(*) FROM {name}.t"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(committed, ROWS);

    let topic = format!("{name}.{name}.t");
    let (per_id, total) = tokio::task::spawn_blocking(move || {
        read_all_ids(&topic, ROWS as usize, Duration::from_secs(180))
    })
    .await
    .unwrap();
    let missing: Vec<i64> = (0..ROWS)
        .filter(|id| !per_id.contains_key(id))
        .take(10)
        .collect();
    let duplicates = total - per_id.len();
    println!("sigkill x{kills}: {total} records for {ROWS} rows, {duplicates} duplicates");
    assert!(
        missing.is_empty(),
        "rows missing from Kafka, e.g. {missing:?}\nlog:\n{}",
        sluice.log_text()
    );
    assert_eq!(per_id.len(), ROWS as usize);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// The walsender is terminated mid-stream and the broker is stopped and restarted mid-stream:
/// sluice resumes by itself and nothing is lost.
#[tokio::test(flavor = "multi_thread")]
async fn walsender_kill_and_broker_restart_are_survived() {
    let _broker = fault_broker().await;
    let brokers = fault_brokers();
    let name = unique("resume");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = on_fault_broker(&pipeline_toml(&name, &name, &name, port, ""));
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    const ROWS: i64 = 60_000;
    let writer = {
        let schema = name.clone();
        tokio::spawn(async move {
            let client = pg().await;
            for chunk in 0..60 {
                insert_range(&client, &schema, chunk * 1000, (chunk + 1) * 1000, 250).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    let terminated: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = $1) t",
            &[&format!("sluice-{name}")],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(terminated, 1, "one walsender to terminate");
    wait_until(
        "a reconnect after the walsender was terminated",
        Duration::from_secs(30),
        || {
            sluice
                .metric("sluice_pipeline_restarts_total")
                .unwrap_or(0.0)
                >= 1.0
        },
    );
    // The broker goes away mid-stream, as the test says: once the new run streams. (Stopped
    // while the new run was still creating its topics, the outage showed in /health only when
    // the admin request gave up, 45 s later: the test took ~25-70 s by that race.)
    sluice.wait_streaming(Duration::from_secs(60));

    tokio::task::spawn_blocking(|| dev_stack(&["stop-fault-kafka"]))
        .await
        .unwrap();
    // While the broker is away the pipeline says so: librdkafka reports every broker down (the
    // producer keeps the records and retries), or the run failed and waits in backoff.
    wait_until(
        "/health reports the broker outage (kafka_brokers_down or backoff)",
        Duration::from_secs(60),
        || {
            sluice.get("/health").is_some_and(|health| {
                health.contains("\"kafka_brokers_down\":true")
                    || health.contains("\"state\":\"backoff\"")
            })
        },
    );
    tokio::task::spawn_blocking(|| dev_stack(&["start-fault-kafka"]))
        .await
        .unwrap();
    writer.await.unwrap();

    let topic = format!("{name}.{name}.t");
    let (per_id, total) = tokio::task::spawn_blocking(move || {
        read_all_ids_at(&brokers, &topic, ROWS as usize, Duration::from_secs(180))
    })
    .await
    .unwrap();
    println!("walsender kill + broker restart: {total} records for {ROWS} rows");
    assert_eq!(
        per_id.len(),
        ROWS as usize,
        "every row arrived\nlog:\n{}",
        sluice.log_text()
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// The resident set size of a process, from `/proc/<pid>/status`.
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Runs Kafka's own `ConfigCommand` (from the dev stack's jars) against `brokers` with
/// `--alter` and `args`.
fn kafka_config_alter(brokers: &str, args: &[&str]) {
    let libs = std::env::var("KAFKA_LIBS")
        .unwrap_or_else(|_| panic!("KAFKA_LIBS is not set: eval \"$(scripts/dev-stack env)\""));
    // A short-lived client: the JIT's first tier only and the serial collector (~40% less CPU
    // to start and run it, seconds on two busy cores; two of its runs hold the broker
    // exclusively).
    let output = Command::new("java")
        .args([
            "-Xmx256m",
            "-XX:TieredStopAtLevel=1",
            "-XX:+UseSerialGC",
            "-cp",
            &format!("{libs}/*"),
            "kafka.admin.ConfigCommand",
        ])
        .args(["--bootstrap-server", brokers, "--alter"])
        .args(args)
        .output()
        .expect("run kafka.admin.ConfigCommand");
    assert!(
        output.status.success(),
        "kafka ConfigCommand {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Caps a Kafka client's produce rate with a broker quota (`producer_byte_rate`), or lifts the
/// cap (`None`).
fn throttle_producer(client_id: &str, bytes_per_s: Option<u64>) {
    let config = match bytes_per_s {
        Some(rate) => [
            "--add-config".to_owned(),
            format!("producer_byte_rate={rate}"),
        ],
        None => [
            "--delete-config".to_owned(),
            "producer_byte_rate".to_owned(),
        ],
    };
    kafka_config_alter(
        &stack().brokers,
        &[
            &config[0],
            &config[1],
            "--entity-type",
            "clients",
            "--entity-name",
            client_id,
        ],
    );
}

/// A backlog on one partition while Kafka takes records far more slowly than PostgreSQL sends
/// them (for 8 s, a broker quota of 1 MB/s on sluice's uncompressed records; then the quota is
/// lifted): what is measured outside the budget's own bookkeeping stays bounded —
/// librdkafka's queued bytes (its statistics) never exceed the in-flight budget, and the
/// process's RSS grows by far less than the ~90 MB backlog — no checkpoint fails, and every
/// row arrives. `SLUICE_IT_BUDGET_BYTES` overrides the 2 MiB budget (set it to 1 GiB to see
/// the assertions fail).
#[tokio::test(flavor = "multi_thread")]
async fn backlog_on_one_partition_stays_within_budget() {
    let name = unique("budget");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let budget: u64 = std::env::var("SLUICE_IT_BUDGET_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2 * 1024 * 1024);
    let toml = pipeline_toml(
        &name,
        &name,
        &name,
        port,
        &format!(
            "[delivery]\nmax_in_flight_bytes = {budget}\nmax_in_flight_records = 1000000\n\
             [kafka.producer]\n\"statistics.interval.ms\" = \"100\"\n\"client.id\" = \"{name}\"\n\
             \"compression.type\" = \"none\"\n"
        ),
    );
    // The quota is set (a JVM start, seconds on two busy cores) while the idle footprint is
    // measured: an idle pipeline produces far below it.
    let throttle = tokio::task::spawn_blocking({
        let name = name.clone();
        move || throttle_producer(&name, Some(1_000_000))
    });
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    // The footprint of a connected, idle, streaming process.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_idle = rss_bytes(sluice.pid().unwrap()).expect("RSS of the sluice process");
    // sluice turns transparent huge pages off for itself (src/main.rs): with them its peak RSS
    // was 40-55 MiB higher.
    let status = std::fs::read_to_string(format!("/proc/{}/status", sluice.pid().unwrap()))
        .expect("the process's status");
    assert!(
        status
            .lines()
            .any(|l| l.split_whitespace().eq(["THP_enabled:", "0"])),
        "THP is not off for the sluice process:\n{status}"
    );
    assert!(sluice.stop(), "graceful stop\n{}", sluice.log_text());
    throttle.await.unwrap();

    const ROWS: i64 = 150_000;
    insert_range(&client, &name, 0, ROWS, 50_000).await;
    sluice.restart();
    let pid = sluice.pid().unwrap();
    let topic = format!("{name}.{name}.t");
    let reader = tokio::task::spawn_blocking(move || {
        read_all_ids(&topic, ROWS as usize, Duration::from_secs(180))
    });
    let (mut samples, mut queue_samples) = (0, 0);
    let (mut max_queued, mut max_rss) = (0.0f64, 0u64);
    let throttled_until = Instant::now() + Duration::from_secs(8);
    let mut lift = None;
    while !reader.is_finished() {
        if lift.is_none() && Instant::now() >= throttled_until {
            let name = name.clone();
            lift = Some(tokio::task::spawn_blocking(move || {
                throttle_producer(&name, None)
            }));
        }
        if let Some(rss) = rss_bytes(pid) {
            max_rss = max_rss.max(rss);
        }
        if let Some(text) = sluice.get("/metrics") {
            samples += 1;
            if let Some(bytes) =
                crate::support::metric_value(&text, "sluice_kafka_producer_queue_bytes")
            {
                queue_samples += 1;
                max_queued = max_queued.max(bytes);
                assert!(
                    bytes <= budget as f64,
                    "librdkafka holds {bytes} bytes of records, above the budget {budget}"
                );
            }
            let failures =
                crate::support::metric_value(&text, "sluice_source_checkpoint_failures_total");
            assert_eq!(failures.unwrap_or(0.0), 0.0, "checkpoint failures");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let (per_id, _) = reader.await.unwrap();
    assert!(lift.is_some(), "the catch-up outlasted the throttled phase");
    lift.unwrap().await.unwrap();
    assert_eq!(per_id.len(), ROWS as usize);
    let growth = max_rss.saturating_sub(rss_idle);
    println!(
        "backlog: {samples} samples, max librdkafka queue {max_queued} bytes of {budget}; \
         RSS idle {rss_idle}, max during the catch-up {max_rss} (+{growth})"
    );
    assert!(
        samples >= 5 && queue_samples >= 3,
        "sampled the metrics during the catch-up ({samples}, {queue_samples} with the queue)"
    );
    // Measured here: +59 MB with the 2 MiB budget (buffers, threads, the allocator's caches:
    // the same whatever the backlog), +189 MB with a 1 GiB one (64 MB queued in librdkafka).
    const RSS_GROWTH_LIMIT: u64 = 96 * 1024 * 1024;
    assert!(
        growth <= RSS_GROWTH_LIMIT,
        "RSS grew by {growth} bytes during the catch-up (limit {RSS_GROWTH_LIMIT})"
    );
    assert!(
        max_queued > budget as f64 / 4.0,
        "the throttled producer filled the budget (max queued {max_queued})"
    );
    let text = sluice.get("/metrics").unwrap();
    let checkpoints =
        crate::support::metric_value(&text, "sluice_source_checkpoint_duration_seconds_count");
    assert!(checkpoints.unwrap_or(0.0) > 0.0, "checkpoints were written");
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Runs `sluice <args>` to completion (bounded) and returns (exit code, stdout + stderr).
pub fn run_sluice(args: &[&str], timeout: Duration) -> (Option<i32>, String) {
    let dir = test_dir(&unique("cli"));
    let out_path = dir.join("out.txt");
    let out = std::fs::File::create(&out_path).unwrap();
    let mut child = Command::new(sluice_bin())
        .args(args)
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status.code();
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    (
        status,
        std::fs::read_to_string(out_path).unwrap_or_default(),
    )
}

#[test]
fn unknown_config_key_is_named_with_the_expected_keys() {
    let name = unique("badkey");
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    let toml = pipeline_toml(&name, "public", &name, free_port(), "")
        .replace("topic_prefix", "topic_prefx");
    std::fs::write(&file, toml).unwrap();
    for command in ["check", "run"] {
        let (code, output) =
            run_sluice(&[command, file.to_str().unwrap()], Duration::from_secs(20));
        assert_eq!(code, Some(1), "{command}: {output}");
        assert!(
            output.contains("kafka.topic_prefx: unknown field `topic_prefx`"),
            "{output}"
        );
        assert!(output.contains("expected one of"), "{output}");
        assert!(output.contains("`topic_prefix`"), "{output}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn missing_table_stops_with_the_key_and_the_fix() {
    let name = unique("notable");
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    let toml = pipeline_toml(&name, "public", &name, free_port(), "").replace(
        "schemas = [\"public\"]",
        "tables = [\"public.no_such_table_xyz\"]",
    );
    std::fs::write(&file, toml).unwrap();
    let (code, output) = tokio::task::spawn_blocking(move || {
        run_sluice(&["run", file.to_str().unwrap()], Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(
        output
            .contains("table public.no_such_table_xyz (source.postgres.tables[0]) does not exist"),
        "{output}"
    );
    assert!(output.contains("fix:"), "{output}");
    drop_slot_and_publication(&pg().await, &name).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn wrong_wal_level_stops_with_the_fix() {
    let cluster = tokio::task::spawn_blocking(|| ThrowawayPg::start(&["wal_level=replica"]))
        .await
        .unwrap();
    let name = unique("wallevel");
    let dir = test_dir(&name);
    let file = dir.join("pipeline.toml");
    let toml = pipeline_toml(&name, "public", &name, free_port(), "")
        .replace(&stack().pg_url, &cluster.url);
    std::fs::write(&file, toml).unwrap();
    let (code, output) = tokio::task::spawn_blocking(move || {
        run_sluice(&["run", file.to_str().unwrap()], Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert_eq!(code, Some(1), "{output}");
    assert!(output.contains("wal_level is 'replica'"), "{output}");
    assert!(
        output.contains("fix: run ALTER SYSTEM SET wal_level = logical"),
        "{output}"
    );
    drop(cluster);
}

/// With the broker unreachable sluice keeps retrying and says so in `/health`; the slot does not
/// advance, so once sluice runs against the broker every row arrives.
#[tokio::test(flavor = "multi_thread")]
async fn unreachable_broker_is_retried_and_loses_nothing() {
    let name = unique("nobroker");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let good = pipeline_toml(&name, &name, &name, port, "");
    // First run with the right broker creates the slot and topic, then stop.
    let mut sluice = Sluice::start(&dir, &good, port);
    sluice.wait_streaming(Duration::from_secs(60));
    assert!(sluice.stop());
    insert_range(&client, &name, 0, 1000, 1000).await;
    let dead = format!("127.0.0.1:{}", free_port());
    let bad = good.replace(&stack().brokers, &dead);
    let mut sluice = Sluice::start(&dir, &bad, port);
    wait_until(
        "health to report the unreachable broker",
        Duration::from_secs(60),
        || {
            sluice
                .get("/health")
                .is_some_and(|body| body.contains("cannot reach Kafka") && body.contains(&dead))
        },
    );
    wait_until("at least two reconnects", Duration::from_secs(60), || {
        sluice
            .metric("sluice_pipeline_restarts_total")
            .unwrap_or(0.0)
            >= 2.0
    });
    assert!(sluice.exited().is_none(), "still running and retrying");
    sluice.kill();
    let mut sluice = Sluice::start(&dir, &good, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let topic = format!("{name}.{name}.t");
    let (per_id, _) =
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 1000, Duration::from_secs(60)))
            .await
            .unwrap();
    assert_eq!(per_id.len(), 1000);
    sluice.kill();
    drop_slot_and_publication(&client, &name).await;
}

/// A row above the topic's `max.message.bytes` stops the pipeline with the reason (and the
/// slot does not pass it); with the dead-letter policy it goes to the dead-letter topic with
/// its reason in headers and the rows after it arrive.
#[tokio::test(flavor = "multi_thread")]
async fn oversized_row_stops_or_is_dead_lettered() {
    let name = unique("big");
    let client = pg().await;
    create_table(&client, &name).await;
    let topic = format!("{name}.{name}.t");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
                .set("max.message.bytes", "100000")],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let port = free_port();
    let dir = test_dir(&name);
    // No batch.size here: sluice lowers it to the topic's max.message.bytes by itself, or the
    // broker would reject whole batches of small records together with the large one.
    let stop = pipeline_toml(&name, &name, &name, port, "[kafka.producer]\n");
    let mut sluice = Sluice::start(&dir, &stop, port);
    sluice.wait_streaming(Duration::from_secs(60));
    insert_range(&client, &name, 0, 10, 10).await;
    // ~300 kB of incompressible text in one row.
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT 10, string_agg(md5(random()::text), '') FROM generate_series(1, 10000)"
        ))
        .await
        .unwrap();
    insert_range(&client, &name, 11, 20, 10).await;
    wait_until(
        "sluice to stop on the oversized record",
        Duration::from_secs(60),
        || sluice.exited().is_some(),
    );
    let log = sluice.log_text();
    assert!(log.contains("Kafka rejected a"), "{log}");
    assert!(log.contains("max.message.bytes"), "{log}");

    let dead_letters = format!("{name}.dlq");
    let dlq = stop.replace(
        "[kafka.producer]",
        &format!(
            "[delivery]\non_permanent_error = \"dead_letter\"\ndead_letter_topic = \"{dead_letters}\"\n\n[kafka.producer]"
        ),
    );
    let sluice = Sluice::start(&dir, &dlq, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let (per_id, _) = {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 19, Duration::from_secs(60)))
            .await
            .unwrap()
    };
    assert!(!per_id.contains_key(&10));
    assert_eq!(per_id.len(), 19, "the rows around it arrived");
    let dead = tokio::task::spawn_blocking(move || {
        read_topic(&dead_letters, Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].key.as_ref().unwrap()["id"], 10);
    assert_eq!(dead[0].headers["sluice.dlq.topic"], topic);
    assert!(
        dead[0].headers["sluice.dlq.reason"]
            .to_lowercase()
            .contains("too large"),
        "{:?}",
        dead[0].headers
    );
    assert!(dead[0].headers.contains_key("sluice.commit_lsn"));
    assert!(
        dead[0].headers["sluice.dlq.position"].starts_with("LSN "),
        "{:?}",
        dead[0].headers
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Initial-snapshot records follow `delivery.on_permanent_error` as streamed ones do: a row
/// above its topic's `max.message.bytes` (set on that topic only) stops the pipeline naming the
/// topic and Kafka's reason under `stop`; under `dead_letter` it lands in the dead-letter topic
/// with its reason, topic and position, and the rest of the snapshot arrives.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_snapshot_row_stops_or_is_dead_lettered() {
    let name = unique("bigsnap");
    let client = pg().await;
    create_table(&client, &name).await;
    insert_range(&client, &name, 0, 10, 10).await;
    // ~320 kB of incompressible text in one row.
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT 10, string_agg(md5(random()::text), '') FROM generate_series(1, 10000)"
        ))
        .await
        .unwrap();
    insert_range(&client, &name, 11, 20, 10).await;
    let topic = format!("{name}.{name}.t");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
                .set("max.message.bytes", "100000")],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let port = free_port();
    let dir = test_dir(&name);
    let stop = pipeline_toml(&name, &name, &name, port, "[kafka.producer]\n");
    let mut sluice = Sluice::start(&dir, &stop, port);
    wait_until(
        "sluice to stop on the oversized snapshot record",
        Duration::from_secs(60),
        || sluice.exited().is_some(),
    );
    let log = sluice.log_text();
    assert!(
        log.contains(&format!("record for topic {topic}")) && log.contains("too large"),
        "{log}"
    );
    assert!(!log.contains("snapshot: done"), "{log}");

    let dead_letters = format!("{name}.dlq");
    let dlq = stop.replace(
        "[kafka.producer]",
        &format!(
            "[delivery]\non_permanent_error = \"dead_letter\"\ndead_letter_topic = \"{dead_letters}\"\n\n[kafka.producer]"
        ),
    );
    let sluice = Sluice::start(&dir, &dlq, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let (per_id, _) = {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 19, Duration::from_secs(60)))
            .await
            .unwrap()
    };
    assert!(!per_id.contains_key(&10), "{per_id:?}");
    assert_eq!(
        per_id.len(),
        19,
        "the rest of the snapshot arrived: {per_id:?}"
    );
    let dead = tokio::task::spawn_blocking(move || {
        read_topic(&dead_letters, Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].key.as_ref().unwrap()["id"], 10);
    assert_eq!(
        dead[0].value.as_ref().unwrap()["op"],
        "r",
        "a snapshot read"
    );
    assert_eq!(dead[0].headers["sluice.dlq.topic"], topic);
    assert!(
        dead[0].headers["sluice.dlq.reason"]
            .to_lowercase()
            .contains("too large"),
        "{:?}",
        dead[0].headers
    );
    assert!(
        dead[0].headers["sluice.dlq.position"].starts_with("LSN "),
        "{:?}",
        dead[0].headers
    );
    assert!(dead[0].headers.contains_key("sluice.commit_lsn"));
    assert!(sluice.log_text().contains("snapshot: done"));
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Incremental-snapshot records go through the delivery core like streamed ones: under
/// `dead_letter`, a chunk's row above its topic's `max.message.bytes` lands in the dead-letter
/// topic (an incremental read, with its reason and position) and the chunk's other rows arrive.
#[tokio::test(flavor = "multi_thread")]
async fn an_oversized_incremental_snapshot_row_is_dead_lettered() {
    let name = unique("bigincr");
    let client = pg().await;
    create_table(&client, &name).await;
    insert_range(&client, &name, 0, 10, 10).await;
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT 10, string_agg(md5(random()::text), '') FROM generate_series(1, 10000)"
        ))
        .await
        .unwrap();
    insert_range(&client, &name, 11, 20, 10).await;
    let topic = format!("{name}.{name}.t");
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", stack().brokers)
        .create()
        .unwrap();
    let created = admin
        .create_topics(
            &[NewTopic::new(&topic, 1, TopicReplication::Fixed(1))
                .set("max.message.bytes", "100000")],
            &AdminOptions::new(),
        )
        .await
        .unwrap();
    assert!(created[0].is_ok(), "{created:?}");
    let port = free_port();
    let dir = test_dir(&name);
    let dead_letters = format!("{name}.dlq");
    let toml = pipeline_toml(
        &name,
        &name,
        &name,
        port,
        &format!(
            "[delivery]\non_permanent_error = \"dead_letter\"\ndead_letter_topic = \"{dead_letters}\"\n\n[kafka.producer]\n"
        ),
    )
    .replace("[source.postgres]\n", "[source.postgres]\nsnapshot = \"never\"\n");
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let (status, body) = crate::support::http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{name}.t"]}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    let (per_id, _) = {
        let topic = topic.clone();
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 19, Duration::from_secs(60)))
            .await
            .unwrap()
    };
    assert!(!per_id.contains_key(&10), "{per_id:?}");
    assert_eq!(
        per_id.len(),
        19,
        "the chunk's other rows arrived: {per_id:?}"
    );
    let dead = tokio::task::spawn_blocking(move || {
        read_topic(&dead_letters, Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].key.as_ref().unwrap()["id"], 10);
    let value = dead[0].value.as_ref().unwrap();
    assert_eq!(value["op"], "r");
    assert_eq!(value["source"]["snapshot"], "incremental");
    assert_eq!(dead[0].headers["sluice.dlq.topic"], topic);
    assert!(
        dead[0].headers["sluice.dlq.reason"]
            .to_lowercase()
            .contains("too large"),
        "{:?}",
        dead[0].headers
    );
    assert!(dead[0].headers["sluice.dlq.position"].starts_with("LSN "));
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A lock held by someone else's long transaction does not hang sluice: an incremental
/// snapshot's read of the locked table gives up after `lock_timeout_ms` and is retried (the
/// log says why), the stream goes on meanwhile, and once the lock is released the snapshot
/// completes.
#[tokio::test(flavor = "multi_thread")]
async fn a_held_lock_is_waited_for_boundedly_and_retried() {
    let name = unique("lockwait");
    let client = pg().await;
    create_table(&client, &name).await;
    client
        .batch_execute(&format!(
            "CREATE TABLE {name}.u (id bigint PRIMARY KEY, payload text)"
        ))
        .await
        .unwrap();
    insert_range(&client, &name, 0, 100, 100).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\nlock_timeout_ms = 1000\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let mut holder = pg().await;
    let lock = holder.transaction().await.unwrap();
    lock.batch_execute(&format!("LOCK TABLE {name}.t IN ACCESS EXCLUSIVE MODE"))
        .await
        .unwrap();
    let (status, body) = crate::support::http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{name}.t"]}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    wait_until(
        "the snapshot's read to give up on the held lock",
        Duration::from_secs(60),
        || sluice.log_text().contains("lock timeout"),
    );
    // The stream goes on while the snapshot waits for the lock.
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.u SELECT g, 'x' FROM generate_series(1, 10) g"
        ))
        .await
        .unwrap();
    let other = format!("{name}.{name}.u");
    let streamed = tokio::task::spawn_blocking(move || {
        read_topic(&other, Duration::from_secs(30), |r| r.len() >= 10)
    })
    .await
    .unwrap();
    assert_eq!(streamed.len(), 10, "changes stream while the lock is held");
    lock.commit().await.unwrap();
    let topic = format!("{name}.{name}.t");
    let (per_id, _) =
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 100, Duration::from_secs(120)))
            .await
            .unwrap();
    assert_eq!(per_id.len(), 100, "every row\n{}", sluice.log_text());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Starts a pipeline on `name`.t (no snapshot) whose encoder panics on the 6th change (the
/// `encode::change` failpoint), inserts ids 1..=10 as 10 changes and returns sluice.
async fn pipeline_with_a_failing_encoder(
    client: &tokio_postgres::Client,
    name: &str,
    delivery: &str,
) -> Sluice {
    create_table(client, name).await;
    let port = free_port();
    let dir = test_dir(name);
    let toml = pipeline_toml(name, name, name, port, delivery).replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\n",
    );
    let sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "encode::change=5*off->1*panic(boom in the encoder)->off".to_owned(),
        )],
    );
    sluice.wait_streaming(Duration::from_secs(60));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'row ' || g FROM generate_series(1, 10) g"
        ))
        .await
        .unwrap();
    sluice
}

/// An encoder failure (a panic) on one change follows `on_permanent_error = "dead_letter"`:
/// a description of the change (table, position, reason; no values) goes to the dead-letter
/// topic, the other changes are delivered, and the pipeline keeps streaming without a restart.
#[tokio::test(flavor = "multi_thread")]
async fn an_encoder_failure_is_dead_lettered_with_its_position() {
    let name = unique("encdlq");
    let client = pg().await;
    let dlq = format!("{name}.dlq");
    let sluice = pipeline_with_a_failing_encoder(
        &client,
        &name,
        &format!(
            "[delivery]\non_permanent_error = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n"
        ),
    )
    .await;
    let dead = tokio::task::spawn_blocking({
        let dlq = dlq.clone();
        move || read_topic(&dlq, Duration::from_secs(60), |r| !r.is_empty())
    })
    .await
    .unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}\n{}", sluice.log_text());
    let value = dead[0].value.as_ref().expect("a description");
    assert_eq!(value["table"], format!("{name}.t"));
    assert!(
        value["commit_lsn"]
            .as_str()
            .is_some_and(|l| l.contains('/')),
        "{value}"
    );
    assert!(
        value["error"]
            .as_str()
            .unwrap()
            .contains("boom in the encoder"),
        "{value}"
    );
    assert!(
        dead[0].headers["sluice.dlq.reason"].contains("cannot encode the change"),
        "{:?}",
        dead[0].headers
    );
    assert_eq!(
        dead[0].headers["sluice.dlq.topic"],
        format!("{name}.{name}.t")
    );
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 9)
    })
    .await
    .unwrap();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| r.key.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3, 4, 5, 7, 8, 9, 10], "every other change");
    assert_eq!(
        sluice
            .metric("sluice_pipeline_restarts_total")
            .unwrap_or(0.0),
        0.0,
        "no restart"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// An encoder failure with `on_permanent_error = "stop"` (the default) stops the pipeline with
/// the change's position and table, instead of restarting on the same position forever; the
/// change is not lost: after a fix (here: the failpoint gone) it is delivered.
#[tokio::test(flavor = "multi_thread")]
async fn an_encoder_failure_stops_with_the_position_and_loses_nothing() {
    let name = unique("encstop");
    let client = pg().await;
    let mut sluice = pipeline_with_a_failing_encoder(&client, &name, "").await;
    // The process stops (restart policy on-failure does not restart a fatal failure): what
    // it said is in its log.
    wait_until("the pipeline to stop", Duration::from_secs(60), || {
        sluice.exited().is_some()
    });
    let log = sluice.log_text();
    assert!(
        log.contains("cannot encode the change at commit LSN"),
        "{log}"
    );
    assert!(log.contains(&format!("table {name}.t")), "{log}");
    assert!(log.contains("boom in the encoder"), "{log}");
    assert!(log.contains("pipeline stopped"), "{log}");
    assert!(
        !log.contains("restarting from"),
        "not restarted on the same position: {log}"
    );
    sluice.kill();
    sluice.env.clear();
    sluice.restart();
    let topic = format!("{name}.{name}.t");
    let (per_id, _) =
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 10, Duration::from_secs(60)))
            .await
            .unwrap();
    let mut ids: Vec<i64> = per_id.keys().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=10).collect::<Vec<_>>(), "{}", sluice.log_text());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Sets the cluster-wide default `message.max.bytes` (the default `max.message.bytes` of new
/// topics) of the broker at `brokers` for as long as it lives.
struct SmallerDefaultMessageSize(String);

impl SmallerDefaultMessageSize {
    fn set(brokers: String, bytes: u64) -> Self {
        kafka_config_alter(
            &brokers,
            &[
                "--add-config",
                &format!("message.max.bytes={bytes}"),
                "--entity-type",
                "brokers",
                "--entity-default",
            ],
        );
        Self(brokers)
    }
}

impl Drop for SmallerDefaultMessageSize {
    fn drop(&mut self) {
        kafka_config_alter(
            &self.0,
            &[
                "--delete-config",
                "message.max.bytes",
                "--entity-type",
                "brokers",
                "--entity-default",
            ],
        );
    }
}

/// A topic created while running that takes smaller batches (`max.message.bytes`) than the
/// producer's `batch.size` restarts the run with `batch.size` lowered to it, instead of having
/// batches of small records refused: every row of the new table arrives. Then the topic's limit
/// is lowered again while running: the batches the broker refuses restart the run with the new
/// limit (a refused batch is not a refused record), and every row arrives.
#[tokio::test(flavor = "multi_thread")]
async fn a_topic_created_while_running_lowers_the_batch_size() {
    let _broker = fault_broker().await;
    let brokers = fault_brokers();
    let name = unique("batchcap");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = on_fault_broker(
        &pipeline_toml(
            &name,
            &name,
            &name,
            port,
            "[kafka.producer]\n\"compression.type\" = \"none\"\n\"linger.ms\" = \"50\"\n",
        )
        .replace(
            "[source.postgres]\n",
            "[source.postgres]\nsnapshot = \"never\"\ntable_refresh_interval_ms = 500\n",
        ),
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    const LIMIT: u64 = 150_000;
    let smaller = tokio::task::spawn_blocking({
        let brokers = brokers.clone();
        || SmallerDefaultMessageSize::set(brokers, LIMIT)
    })
    .await
    .unwrap();
    // 300 rows of ~1 kB in one transaction: uncompressed batches of ~300 kB at batch.size 1 MB.
    client
        .batch_execute(&format!(
            "CREATE TABLE {name}.big (id bigint PRIMARY KEY, payload text); \
             INSERT INTO {name}.big SELECT g, repeat(md5(g::text), 32) FROM generate_series(1, 300) g"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.big");
    let (per_id, _) = tokio::task::spawn_blocking({
        let brokers = brokers.clone();
        move || read_all_ids_at(&brokers, &topic, 300, Duration::from_secs(90))
    })
    .await
    .unwrap();
    assert_eq!(per_id.len(), 300, "every row\n{}", sluice.log_text());
    assert!(
        sluice
            .log_text()
            .contains(&format!("takes batches of at most {LIMIT} bytes")),
        "{}",
        sluice.log_text()
    );

    // The topic's own limit, lowered while running, below the learned batch.size.
    const LOWER: u64 = 60_000;
    let topic = format!("{name}.{name}.big");
    {
        let topic = topic.clone();
        let brokers = brokers.clone();
        tokio::task::spawn_blocking(move || {
            kafka_config_alter(
                &brokers,
                &[
                    "--add-config",
                    &format!("max.message.bytes={LOWER}"),
                    "--entity-type",
                    "topics",
                    "--entity-name",
                    &topic,
                ],
            )
        })
        .await
        .unwrap();
    }
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(30));
    while crate::compaction::topic_configs(&brokers, &topic)
        .await
        .get("max.message.bytes")
        != Some(&LOWER.to_string())
    {
        assert!(
            Instant::now() < deadline,
            "the broker never applied {LOWER}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.big SELECT g, repeat(md5(g::text), 32) FROM generate_series(301, 600) g"
        ))
        .await
        .unwrap();
    let (per_id, _) = tokio::task::spawn_blocking(move || {
        read_all_ids_at(&brokers, &topic, 600, Duration::from_secs(90))
    })
    .await
    .unwrap();
    assert_eq!(per_id.len(), 600, "every row\n{}", sluice.log_text());
    assert!(
        sluice
            .log_text()
            .contains(&format!("takes batches of at most {LOWER} bytes")),
        "{}",
        sluice.log_text()
    );
    tokio::task::spawn_blocking(move || drop(smaller))
        .await
        .unwrap();
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Nothing the replication loop waits for besides the stream holds it longer than its
/// deadline (20 s, below wal_sender_timeout): a table refresh that hangs (the
/// `stream::refresh_tables` delay point, 25 s) ends the run with the operation named, the run
/// restarts, and the changes made meanwhile arrive.
#[tokio::test(flavor = "multi_thread")]
async fn a_hung_loop_operation_is_cut_at_the_loop_deadline() {
    let name = unique("loopdeadline");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nsnapshot = \"never\"\n",
    );
    let sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![(
            "FAILPOINTS".to_owned(),
            "stream::refresh_tables=1*return(25000)->off".to_owned(),
        )],
    );
    wait_until("the refresh to hang", Duration::from_secs(60), || {
        sluice.log_text().contains("failpoint: delaying")
    });
    insert_range(&client, &name, 0, 100, 100).await;
    let started = Instant::now();
    wait_until(
        "the loop deadline to cut the refresh",
        Duration::from_secs(40),
        || {
            sluice
                .log_text()
                .contains("refreshing the captured tables took longer than 20 s")
        },
    );
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(25), "cut after {waited:?}");
    let topic = format!("{name}.{name}.t");
    let (per_id, _) =
        tokio::task::spawn_blocking(move || read_all_ids(&topic, 100, Duration::from_secs(60)))
            .await
            .unwrap();
    assert_eq!(per_id.len(), 100, "{}", sluice.log_text());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

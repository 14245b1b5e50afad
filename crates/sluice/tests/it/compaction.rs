//! `sluice compaction scan|plan` against what Kafka's log cleaner really does.
//!
//! The cross-check runs on a throwaway single-node KRaft broker of its own (the dev stack's
//! jars, `KAFKA_LIBS`), because it needs broker-wide cleaner settings (a small dedupe buffer,
//! a 200 ms cleaner backoff) that must not touch the shared broker. For each configuration it
//! writes a topic with a known key sequence, asks `compaction plan` for its prediction, lets
//! the cleaner run, and compares: the passes (the cleaner's "cleaned log" lines in the broker's
//! log) and the records left (`compaction scan`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::ClientConfig;
use rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};

use crate::support::{free_port, sluice_bin, stack, unique, wait_until};

/// A throwaway single-node KRaft broker; killed and removed on drop.
struct ThrowawayKafka {
    dir: PathBuf,
    child: Option<Child>,
    brokers: String,
}

fn kafka_libs() -> String {
    std::env::var("KAFKA_LIBS")
        .unwrap_or_else(|_| panic!("KAFKA_LIBS is not set: eval \"$(scripts/dev-stack env)\""))
}

fn kafka_java(dir: &std::path::Path) -> Command {
    let mut command = Command::new("java");
    command.args([
        "-Xms128m",
        "-Xmx512m",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        &format!(
            "-Dlog4j2.configurationFile={}/log4j2.properties",
            dir.display()
        ),
        &format!("-Dkafka.logs.dir={}", dir.display()),
        "-cp",
        &format!("{}/*", kafka_libs()),
    ]);
    command
}

impl ThrowawayKafka {
    /// Formats and starts a broker with `settings` added to a minimal KRaft configuration.
    /// `Err` holds the broker's log when it exits instead of serving.
    fn start(settings: &[(&str, &str)]) -> Result<Self, String> {
        let dir = std::env::temp_dir().join(unique("sluice-throwaway-kafka"));
        std::fs::create_dir_all(&dir).expect("broker dir");
        let (port, controller) = (free_port(), free_port());
        let mut properties = format!(
            "process.roles=broker,controller\nnode.id=1\n\
             listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners=PLAINTEXT://127.0.0.1:{port}\n\
             controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT\n\
             controller.quorum.bootstrap.servers=127.0.0.1:{controller}\n\
             log.dirs={}/data\nnum.partitions=1\noffsets.topic.replication.factor=1\n\
             transaction.state.log.replication.factor=1\ntransaction.state.log.min.isr=1\n\
             share.coordinator.state.topic.replication.factor=1\nshare.coordinator.state.topic.min.isr=1\n\
             group.initial.rebalance.delay.ms=0\nauto.create.topics.enable=false\n",
            dir.display()
        );
        for (key, value) in settings {
            properties.push_str(&format!("{key}={value}\n"));
        }
        std::fs::write(dir.join("server.properties"), properties).expect("server.properties");
        std::fs::write(
            dir.join("log4j2.properties"),
            format!(
                "status = warn\nappender.file.type = File\nappender.file.name = file\n\
                 appender.file.fileName = {}/server.log\nappender.file.layout.type = PatternLayout\n\
                 appender.file.layout.pattern = [%d] %p %m (%c)%n\nrootLogger.level = info\n\
                 rootLogger.appenderRef.file.ref = file\n",
                dir.display()
            ),
        )
        .expect("log4j2.properties");
        // A cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid), not
        // starting with '-' (the command line would take it for an option, as Kafka's own
        // Uuid.randomUuid avoids too).
        use base64::Engine as _;
        let cluster_id = loop {
            let id: [u8; 16] = rand::random();
            let id = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id);
            if !id.starts_with('-') {
                break id;
            }
        };
        let format = kafka_java(&dir)
            .args([
                // A short-lived tool: the JIT's first tier only (less CPU to start it).
                "-XX:TieredStopAtLevel=1",
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                "-t",
                &cluster_id,
                "-c",
            ])
            .arg(dir.join("server.properties"))
            .output()
            .expect("run StorageTool");
        if !format.status.success() {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!(
                "formatting the throwaway broker's storage failed: {}{}",
                String::from_utf8_lossy(&format.stdout),
                String::from_utf8_lossy(&format.stderr)
            ));
        }
        let stdout = std::fs::File::create(dir.join("stdout.log")).expect("stdout.log");
        let child = kafka_java(&dir)
            .arg("kafka.Kafka")
            .arg(dir.join("server.properties"))
            .stdin(Stdio::null())
            .stdout(stdout.try_clone().expect("stdout"))
            .stderr(stdout)
            .spawn()
            .expect("start the throwaway broker");
        let mut broker = Self {
            dir,
            child: Some(child),
            brokers: format!("127.0.0.1:{port}"),
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(child) = broker.child.as_mut()
                && let Ok(Some(_)) = child.try_wait()
            {
                return Err(broker.log());
            }
            if broker.answers() {
                return Ok(broker);
            }
            assert!(
                Instant::now() < deadline,
                "the throwaway broker did not answer in 120 s:\n{}",
                broker.log()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn answers(&self) -> bool {
        let consumer: Result<rdkafka::consumer::BaseConsumer, _> = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create();
        consumer.is_ok_and(|c| {
            rdkafka::consumer::Consumer::fetch_metadata(&c, None, Duration::from_secs(2))
                .is_ok_and(|m| !m.brokers().is_empty())
        })
    }

    fn log(&self) -> String {
        let read = |name: &str| std::fs::read_to_string(self.dir.join(name)).unwrap_or_default();
        format!("{}{}", read("server.log"), read("stdout.log"))
    }

    /// The cleaner's passes over `topic`-0 so far: its "cleaned log" lines, `(from, to)`.
    fn passes(&self, topic: &str) -> Vec<(u64, u64)> {
        let needle = format!("cleaned log {topic}-0 (dirty section = [");
        self.log()
            .lines()
            .filter_map(|line| {
                let rest = &line[line.find(&needle)? + needle.len()..];
                let (from, rest) = rest.split_once(", ")?;
                let to = rest.split(']').next()?;
                Some((from.trim().parse().ok()?, to.trim().parse().ok()?))
            })
            .collect()
    }
}

impl Drop for ThrowawayKafka {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn admin(brokers: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("admin client")
}

async fn create_topic(brokers: &str, topic: &str, configs: &[(&str, &str)]) {
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(1));
    for (key, value) in configs {
        new = new.set(key, value);
    }
    let results = admin(brokers)
        .create_topics(&[new], &AdminOptions::new())
        .await
        .expect("create topic");
    for result in results {
        result.expect("topic created");
    }
}

/// Replaces the topic's configuration (AlterConfigs replaces the whole set).
async fn set_topic_configs(brokers: &str, topic: &str, configs: &[(&str, &str)]) {
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (key, value) in configs {
        alter = alter.set(key, value);
    }
    let results = admin(brokers)
        .alter_configs(&[alter], &AdminOptions::new())
        .await
        .expect("alter configs");
    for result in results {
        result.expect("configs altered");
    }
}

/// Writes `records` records with keys `<prefix><i % keys>` (round robin), values of 100
/// bytes, then returns.
fn produce(brokers: &str, topic: &str, records: u64, keys: u64, prefix: &str) {
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.size", "262144")
        .create()
        .expect("producer");
    let value = [b'v'; 100];
    for i in 0..records {
        let key = format!("{prefix}{}", i % keys);
        let mut record = BaseRecord::to(topic)
            .key(key.as_bytes())
            .payload(&value[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).expect("flush");
}

fn sluice_json(args: &[&str], brokers: &str) -> serde_json::Value {
    let output = Command::new(sluice_bin())
        .args(args)
        .args(["--json", "--quiet"])
        .env("KAFKA_BROKERS", brokers)
        .output()
        .expect("run sluice");
    assert!(
        output.status.success(),
        "sluice {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON output")
}

/// One configuration of the cross-check.
struct Case {
    name: &'static str,
    keys: u64,
    records: u64,
    /// Topic settings while the data is written and after (`min.compaction.lag.ms` holds the
    /// cleaner off while writing; the case sets it to 0 afterwards).
    configs: &'static [(&'static str, &'static str)],
}

#[tokio::test(flavor = "multi_thread")]
async fn plan_predicts_what_the_cleaner_does() {
    // Needs no shared broker, but the shared lock keeps it out of broker restarts' way
    // (the machine is small).
    let _ = stack();
    // Exactly 1 MiB of dedupe buffer per thread: the model says the broker refuses it, and it
    // does (at `StorageTool format` already, which validates the configuration). Checked on a
    // thread of its own while the cross-check below runs (a JVM start of its own, mostly
    // waited for: ~5 s less for the test).
    let refused = std::thread::spawn(|| {
        let settings = [
            ("log.cleaner.dedupe.buffer.size", "2097152"),
            ("log.cleaner.threads", "2"),
        ];
        let model = sluice::compaction::model::CleanerSettings {
            threads: 2,
            dedupe_buffer_bytes: 2_097_152,
            ..Default::default()
        };
        assert!(model.rejection().is_some());
        match ThrowawayKafka::start(&settings) {
            Ok(_) => panic!("a broker with 1 MiB of dedupe buffer per cleaner thread started"),
            Err(log) => assert!(
                log.contains(
                    "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread"
                ),
                "{log}"
            ),
        }
    });
    // A dedupe buffer of 1,200,000 bytes (a broker wants more than 1 MiB per thread): 50,000
    // slots × 0.9 = 45,000 keys per pass.
    let kafka = ThrowawayKafka::start(&[
        ("log.cleaner.dedupe.buffer.size", "1200000"),
        ("log.cleaner.threads", "1"),
        ("log.cleaner.backoff.ms", "200"),
    ])
    .unwrap_or_else(|log| panic!("the throwaway broker exited:\n{log}"));
    let brokers = kafka.brokers.clone();
    const SMALL_SEGMENTS: &[(&str, &str)] = &[
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1048576"),
        ("segment.ms", "4000"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    const ONE_SEGMENT: &[(&str, &str)] = &[
        ("cleanup.policy", "compact"),
        ("segment.bytes", "1073741824"),
        ("segment.ms", "86400000"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    let cases = [
        // 20,000 keys fit in one pass.
        Case {
            name: "fits",
            keys: 20_000,
            records: 40_000,
            configs: SMALL_SEGMENTS,
        },
        // 100,000 keys written round robin: every 45,000 records fill the map.
        Case {
            name: "passes",
            keys: 100_000,
            records: 150_000,
            configs: SMALL_SEGMENTS,
        },
        // Everything in the active segment: nothing is cleanable.
        Case {
            name: "active",
            keys: 10_000,
            records: 30_000,
            configs: ONE_SEGMENT,
        },
    ];
    // The "passes" topic is a pipeline's topic (`<prefix>.<schema>.<table>`), for doctor below.
    let schema = unique("compaction_doctor");
    let client = crate::support::pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (id int PRIMARY KEY);"
        ))
        .await
        .unwrap();
    let mut topics = HashMap::new();
    for case in &cases {
        let topic = if case.name == "passes" {
            format!("{schema}.{schema}.t")
        } else {
            unique(&format!("compaction_{}", case.name))
        };
        let mut configs = case.configs.to_vec();
        configs.push(("min.compaction.lag.ms", "3600000"));
        create_topic(&brokers, &topic, &configs).await;
        produce(&brokers, &topic, case.records, case.keys, "k");
        topics.insert(case.name, topic);
    }
    // Past segment.ms, one more record rolls the small-segment topics' last data segment, so
    // all the data is in closed segments and only that record is in the active one.
    tokio::time::sleep(Duration::from_millis(4500)).await;
    for case in &cases {
        produce(&brokers, &topics[case.name], 1, 1, "roll");
    }
    let mut predicted = HashMap::new();
    for case in &cases {
        let topic = &topics[case.name];
        let plan = sluice_json(&["compaction", "plan", "--topic", topic], &brokers);
        assert_eq!(plan["plan"]["keys_per_pass"], 45_000, "{plan:#}");
        let partition = plan["plan"]["partitions"][0].clone();
        predicted.insert(case.name, partition);
        let mut configs = case.configs.to_vec();
        configs.push(("min.compaction.lag.ms", "0"));
        set_topic_configs(&brokers, topic, &configs).await;
    }
    // Until every cleanable topic's last pass reached its active segment (the record that
    // rolled it, at offset `records`), and nothing changed for 3 s (the cleaner backs off
    // 200 ms between looks). Idleness alone was not enough: on a loaded machine a pass can
    // start more than 3 s after the one before it.
    let mut last = (Instant::now(), 0usize);
    wait_until("the cleaner to finish", Duration::from_secs(180), || {
        let passes: Vec<(&Case, Vec<(u64, u64)>)> = cases
            .iter()
            .map(|c| (c, kafka.passes(&topics[c.name])))
            .collect();
        let seen: usize = passes.iter().map(|(_, p)| p.len()).sum();
        if seen != last.1 {
            last = (Instant::now(), seen);
        }
        let through = passes.iter().all(|(case, p)| {
            case.name == "active" || p.last().is_some_and(|&(_, to)| to >= case.records)
        });
        through && last.0.elapsed() >= Duration::from_secs(3)
    });
    let mut table = String::from(
        "case    keys     records  predicted passes / records after  observed passes / records after\n",
    );
    for case in &cases {
        let topic = &topics[case.name];
        let observed_passes = kafka.passes(topic);
        let scan = sluice_json(&["compaction", "scan", "--topic", topic], &brokers);
        let observed_records = scan["partitions"][0]["records"].as_u64().unwrap();
        let p = &predicted[case.name];
        let predicted_passes = p["passes"].as_u64().unwrap();
        let predicted_records = p["records_after"].as_u64().unwrap();
        let cleanable_now = p["cleanable"]["state"].as_str().unwrap().to_owned();
        table.push_str(&format!(
            "{:<7} {:>7} {:>8}  {:>6} / {:<7} ({cleanable_now:<8})    {:>6} / {:<7} {observed_passes:?}\n",
            case.name,
            case.keys,
            case.records + 1,
            if case.name == "active" { 0 } else { predicted_passes },
            if case.name == "active" { case.records + 1 } else { predicted_records },
            observed_passes.len(),
            observed_records,
        ));
        if case.name == "active" {
            // Predicted: not cleanable, all in the active segment; observed: no pass, every
            // record still there.
            assert_eq!(cleanable_now, "not_now", "{p:#}");
            let reason = p["cleanable"]["reason"].as_str().unwrap();
            assert!(reason.contains("active segment"), "{reason}");
            assert!(observed_passes.is_empty(), "{observed_passes:?}");
            assert_eq!(observed_records, case.records + 1);
        } else {
            // Held off by min.compaction.lag.ms when the plan ran: it says so.
            assert_eq!(cleanable_now, "not_now", "{p:#}");
            assert!(p["passes_simulated"].as_bool().unwrap());
            assert_eq!(
                observed_passes.len() as u64,
                predicted_passes,
                "{}: {table}",
                case.name
            );
            // Every key once, plus the record that rolled the segment.
            assert_eq!(predicted_records, case.keys + 1);
            assert_eq!(
                observed_records, predicted_records,
                "{}: {table}",
                case.name
            );
        }
    }
    eprintln!("{table}");
    assert_eq!(
        kafka.passes(&topics["passes"]).len(),
        4,
        "ceil(150,000 / 45,000) = 4 passes"
    );

    // doctor: the pipeline's topic holds more records than one pass maps.
    let dir = crate::support::test_dir(&schema);
    let file = dir.join("pipeline.toml");
    let toml = crate::support::pipeline_toml(&schema, &schema, &schema, free_port(), "").replace(
        &format!("brokers = \"{}\"", stack().brokers),
        &format!("brokers = \"{brokers}\""),
    );
    assert!(toml.contains(&brokers));
    std::fs::write(&file, toml).unwrap();
    let output = Command::new(sluice_bin())
        .args(["doctor", "--json", "--pipeline", file.to_str().unwrap()])
        .output()
        .unwrap();
    let all: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    let dedupe: Vec<&serde_json::Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "kafka.compaction_dedupe_buffer")
        .collect();
    assert_eq!(dedupe.len(), 1, "{all:#}");
    assert_eq!(dedupe[0]["evidence"]["keys_per_pass"], 45_000);
    assert_eq!(dedupe[0]["evidence"]["records"], 150_001);
    assert!(
        dedupe[0]["fix"]
            .as_str()
            .unwrap()
            .contains("sluice compaction plan")
    );
    let _ = client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await;
    drop(kafka);
    if let Err(panic) = refused.join() {
        std::panic::resume_unwind(panic);
    }
}

/// Reads a topic's effective configs.
/// A topic's configs; waits (30 s at most) while the broker does not describe a topic just
/// created yet (no entries, or an error for it).
pub(crate) async fn topic_configs(brokers: &str, topic: &str) -> HashMap<String, String> {
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(30));
    loop {
        let results = admin(brokers)
            .describe_configs(&[ResourceSpecifier::Topic(topic)], &AdminOptions::new())
            .await
            .expect("describe configs");
        if let Some(Ok(resource)) = results.into_iter().next() {
            let configs: HashMap<String, String> = resource
                .entries
                .into_iter()
                .filter_map(|e| Some((e.name, e.value?)))
                .collect();
            if configs.contains_key("cleanup.policy") {
                return configs;
            }
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not describe topic {topic} in 30 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `kafka.topic_config` makes the change-event topics sluice creates compacted (with the
/// compacted-topic defaults filled in; a per-topic entry wins), and `sluice doctor` names a
/// captured topic that is not compacted although the pipeline asks for it.
#[tokio::test(flavor = "multi_thread")]
async fn cdc_topics_are_created_compacted_and_doctor_names_the_one_that_is_not() {
    let name = unique("compacted");
    let brokers = stack().brokers;
    let client = crate::support::pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.entities (id int PRIMARY KEY, v text); \
             CREATE TABLE {name}.audit (id int PRIMARY KEY, v text); \
             CREATE TABLE {name}.legacy (id int PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    // legacy's topic exists already, not compacted.
    let legacy = format!("{name}.{name}.legacy");
    create_topic(&brokers, &legacy, &[("cleanup.policy", "delete")]).await;
    let extra = format!(
        "[kafka.topic_config]\n\"cleanup.policy\" = \"compact\"\n\"min.cleanable.dirty.ratio\" = \"0.2\"\n\
         [kafka.topic_config_by_topic.\"{name}.{name}.audit\"]\n\"cleanup.policy\" = \"delete\"\n"
    );
    let dir = crate::support::test_dir(&name);
    let port = free_port();
    let toml = crate::support::pipeline_toml(&name, &name, &name, port, &extra);
    let sluice = crate::support::Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));

    let entities = topic_configs(&brokers, &format!("{name}.{name}.entities")).await;
    assert_eq!(entities["cleanup.policy"], "compact");
    assert_eq!(entities["min.cleanable.dirty.ratio"], "0.2");
    assert_eq!(entities["segment.ms"], "3600000");
    assert_eq!(entities["min.compaction.lag.ms"], "0");
    assert_eq!(entities["delete.retention.ms"], "86400000");
    let audit = topic_configs(&brokers, &format!("{name}.{name}.audit")).await;
    assert_eq!(audit["cleanup.policy"], "delete");
    assert_eq!(
        audit["segment.ms"], "604800000",
        "no compacted defaults on a delete topic"
    );
    drop(sluice);

    let file = dir.join("pipeline.toml");
    let output = Command::new(sluice_bin())
        .args(["doctor", "--json", "--pipeline", file.to_str().unwrap()])
        .output()
        .unwrap();
    let all: serde_json::Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    let not_in_force: Vec<&serde_json::Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["code"] == "kafka.compaction_not_in_force")
        .collect();
    assert_eq!(not_in_force.len(), 1, "{all:#}");
    assert_eq!(not_in_force[0]["evidence"]["topic"], legacy.as_str());
    assert_eq!(not_in_force[0]["severity"], "warning");
    assert!(
        not_in_force[0]["fix"]
            .as_str()
            .unwrap()
            .contains("cleanup.policy=compact")
    );
    crate::support::drop_slot_and_publication(&client, &name).await;
}

/// `compaction scan` counts what is in the topic: records, distinct keys (exact, and estimated
/// past `--exact-keys`), tombstones, null keys, the newest record's bytes per key, and the
/// passes of an offset map of `--keys-per-pass` keys; a partition that does not exist is named.
#[tokio::test(flavor = "multi_thread")]
async fn scan_counts_keys_tombstones_and_null_keys() {
    let brokers = stack().brokers;
    let topic = unique("compaction_scan");
    create_topic(&brokers, &topic, &[]).await;
    let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
        .set("bootstrap.servers", &brokers)
        .set("linger.ms", "5")
        .create()
        .expect("producer");
    // 3,000 keys × 2 values of 10 bytes, then a tombstone for keys 0..500, then 7 records
    // without a key.
    let send = |key: Option<String>, value: Option<&[u8]>| {
        let mut record = BaseRecord::<str, [u8]>::to(&topic);
        if let Some(key) = &key {
            record = record.key(key.as_str());
        }
        if let Some(value) = value {
            record = record.payload(value);
        }
        producer.send(record).map_err(|(e, _)| e).expect("send");
    };
    for round in 0..2 {
        for k in 0..3000 {
            send(
                Some(format!("key-{k:04}")),
                Some(format!("value-{round}-{:02}", k % 100).as_bytes()),
            );
        }
    }
    for k in 0..500 {
        send(Some(format!("key-{k:04}")), None);
    }
    for _ in 0..7 {
        send(None, Some(b"no key"));
    }
    producer.flush(Duration::from_secs(30)).expect("flush");

    let scan = sluice_json(
        &[
            "compaction",
            "scan",
            "--topic",
            &topic,
            "--keys-per-pass",
            "1000",
        ],
        &brokers,
    );
    let p = &scan["partitions"][0];
    assert_eq!(p["records"], 6_507, "{scan:#}");
    assert_eq!(p["distinct_keys"], 3_000);
    assert_eq!(p["distinct_keys_estimated"], false);
    assert_eq!(p["tombstones"], 500);
    assert_eq!(p["null_key_records"], 7);
    assert_eq!(p["live_keys"], 2_500);
    assert_eq!(p["tombstoned_keys"], 500);
    // Newest per key: 2,500 × ("key-0000" 8 + "value-1-00" 10) + 500 tombstones × 8.
    assert_eq!(p["newest_bytes"], 2_500 * 18 + 500 * 8);
    // 6,500 keyed records, 1,000 keys per pass, keys round robin over 3,000: 7 passes.
    assert_eq!(p["simulated_passes"], 7);

    let estimated = sluice_json(
        &[
            "compaction",
            "scan",
            "--topic",
            &topic,
            "--exact-keys",
            "100",
        ],
        &brokers,
    );
    let p = &estimated["partitions"][0];
    assert_eq!(p["distinct_keys_estimated"], true, "{estimated:#}");
    let keys = p["distinct_keys"].as_f64().unwrap();
    assert!((keys - 3000.0).abs() / 3000.0 < 0.03, "{keys}");
    assert_eq!(p["live_keys"], serde_json::Value::Null);

    let output = Command::new(sluice_bin())
        .args([
            "compaction",
            "scan",
            "--topic",
            &topic,
            "--partitions",
            "3",
            "--quiet",
        ])
        .env("KAFKA_BROKERS", &brokers)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--partitions") && stderr.contains("no partition 3"),
        "{stderr}"
    );
    let _ = admin(&brokers)
        .delete_topics(&[&topic], &AdminOptions::new())
        .await;
}

/// Rows of the republication test: `SLUICE_IT_REPUBLISH_ROWS` (default 5,000: two chunks of
/// 4,096; the issue's size is 1,000,000).
fn republish_rows() -> i64 {
    std::env::var("SLUICE_IT_REPUBLISH_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5_000)
}

/// Republication (issue 19): a compacted CDC topic that missed changes — deletes and updates
/// made while the slot was advanced past them, as after a slot was recreated — is rebuilt
/// from the table by an incremental snapshot with `tombstones`, while another client keeps
/// writing. Once the broker's cleaner has compacted the topic, the newest record per key
/// equals the table: every row with its current value, every key gone from the table a
/// tombstone (or cleaned away).
#[tokio::test(flavor = "multi_thread")]
async fn republication_rebuilds_a_compacted_topic_with_tombstones() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use crate::incremental::{incremental_running, start_writer, table_contents};
    use crate::support::{
        Sluice, drop_slot_and_publication, http_json, pg, pipeline_toml, read_topic, test_dir,
    };

    let name = unique("republish");
    let client = pg().await;
    let rows = republish_rows();
    let table = format!("{name}.entities");
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {table} (id bigint PRIMARY KEY, v bigint NOT NULL, payload text); \
             INSERT INTO {table} SELECT g, 0, md5(g::text) FROM generate_series(1, {rows}) g;"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    // Compacted, with segments rolled every 2 s and cleaned as soon as 1 % is dirty.
    let toml = pipeline_toml(&name, &name, &name, port, "")
        .replace(
            "[kafka]\n",
            "[kafka]\ntopic_config = { \"cleanup.policy\" = \"compact\", \"segment.ms\" = \"2000\", \
             \"min.cleanable.dirty.ratio\" = \"0.01\", \"min.compaction.lag.ms\" = \"0\" }\n",
        )
        .replace(
            "[source.postgres]\n",
            "[source.postgres]\nsnapshot = \"initial\"\nincremental_chunk_rows = 4096\n",
        );
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(300));
    let topic = format!("{name}.{table}");
    // The initial snapshot is in the topic; then changes the topic never gets: sluice stops,
    // a tenth of the rows are deleted and another tenth updated, and the slot is moved past
    // them.
    let first = read_topic(&topic, Duration::from_secs(300), |records| {
        records.len() as i64 >= rows
    });
    assert!(
        first.len() as i64 >= rows,
        "the initial snapshot: {}",
        first.len()
    );
    assert!(sluice.stop(), "graceful stop");
    client
        .batch_execute(&format!(
            "DELETE FROM {table} WHERE id % 10 = 3; UPDATE {table} SET v = 1000 WHERE id % 10 = 7;"
        ))
        .await
        .unwrap();
    let ghosts = rows / 10 + i64::from(rows % 10 >= 3);
    client
        .execute(
            "SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())",
            &[&format!("sluice_{name}")],
        )
        .await
        .unwrap();
    // sluice refuses the gap, and names the way out: accept it, then republish.
    sluice.restart();
    wait_until("sluice to refuse the gap", Duration::from_secs(60), || {
        sluice.exited().is_some()
    });
    let log = sluice.log_text();
    assert!(
        log.contains("\"tombstones\": true") && log.contains("on_slot_loss"),
        "the slot-loss error names republication:\n{log}"
    );
    std::fs::write(
        &sluice.file,
        toml.replace(
            "[source.postgres]\n",
            "[source.postgres]\non_slot_loss = \"recreate\"\n",
        ),
    )
    .unwrap();
    // The sweep waits 3 s after copying the key set: rows the writer inserts meanwhile are in
    // the topic it reads but not in the copy; they must not get tombstones.
    sluice.env.push((
        "FAILPOINTS".into(),
        "incremental::sweep=return(3000)".into(),
    ));
    sluice.restart();
    sluice.wait_streaming(Duration::from_secs(120));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = start_writer(table.clone(), rows, Arc::clone(&stop));
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{table}"], "tombstones": true, "id": "republish-1"}}"#),
    )
    .unwrap();
    assert_eq!(status, 202, "{body}");
    // A filter with tombstones is refused: it would delete the rows outside it.
    let (status, body) = http_json(
        sluice.admin,
        "POST",
        &format!("/api/v1/pipelines/{name}/snapshots"),
        &format!(r#"{{"tables": ["{table}"], "tombstones": true, "filter": "id < 10"}}"#),
    )
    .unwrap();
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("tombstones with a filter"), "{body}");
    wait_until(
        "the republication to start",
        Duration::from_secs(60),
        || incremental_running(&sluice),
    );
    wait_until("the republication's end", Duration::from_secs(1200), || {
        !incremental_running(&sluice)
    });
    stop.store(true, Ordering::Relaxed);
    let changes = writer.await.unwrap();
    let log = sluice.log_text();
    let done = log
        .lines()
        .find(|l| l.contains("republication done"))
        .unwrap_or_else(|| panic!("no 'republication done' in the log:\n{log}"));
    let tombstones: i64 = done
        .split("tombstones=")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no tombstone count in {done:?}"));
    // The ghosts, and maybe keys the writer deleted whose deletes were not in the topic yet
    // when it was read (a second tombstone, harmless).
    assert!(
        tombstones >= ghosts,
        "{tombstones} tombstones for {ghosts} rows deleted unseen: {done}"
    );

    // The peak memory of the run that republished (streaming, the chunks, the key set).
    let peak_rss = sluice
        .pid()
        .and_then(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))
                .map(|l| l.trim_start_matches("VmHWM:").trim().to_owned())
        })
        .unwrap_or_default();
    // Roll the segment holding the republication's last records (`segment.ms` is checked on
    // append): one more row, streamed more than 2 s after the last record. Then wait until
    // the cleaner has cleaned everything before it: no key has two records left. Records that
    // came after the republication's end (the writer's last changes, delivered late on a
    // loaded machine) can share the active segment with that row, which the cleaner never
    // touches: while keys still have two records, another row (a new key) rolls it again.
    let mut roll = rows * 100;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    client
        .batch_execute(&format!("INSERT INTO {table} VALUES ({roll}, 1, 'roll')"))
        .await
        .unwrap();
    let scan = || {
        let scan = sluice_json(&["compaction", "scan", "--topic", &topic], &stack().brokers);
        let p = &scan["partitions"][0];
        (
            p["records"].as_i64().unwrap(),
            p["distinct_keys"].as_i64().unwrap(),
        )
    };
    let (mut present, mut keys) = scan();
    let before = present - keys;
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut last_roll = Instant::now();
    while present != keys {
        assert!(
            Instant::now() < deadline,
            "the log cleaner left {} duplicate records after 600 s",
            present - keys
        );
        if last_roll.elapsed() > Duration::from_secs(5) {
            roll += 1;
            client
                .batch_execute(&format!("INSERT INTO {table} VALUES ({roll}, 1, 'roll')"))
                .await
                .unwrap();
            last_roll = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        (present, keys) = scan();
    }
    // The table as the topic now holds it (the roll rows included).
    let expected = table_contents(&client, &table).await;
    let cleaned = present;
    // Newest record per key = the table; the last roll row may reach the topic after the scan.
    let records = read_topic(&topic, Duration::from_secs(300), |records| {
        records.len() as i64 >= cleaned
            && records
                .iter()
                .any(|r| r.key.as_ref().and_then(|k| k["id"].as_i64()) == Some(roll))
    });
    let mut newest: HashMap<i64, Option<i64>> = HashMap::new();
    for record in &records {
        let Some(id) = record.key.as_ref().and_then(|k| k["id"].as_i64()) else {
            continue;
        };
        let v = record
            .value
            .as_ref()
            .map(|value| value["after"]["v"].as_i64());
        match v {
            // A delete event's `after` is null: its tombstone follows.
            Some(None) => {}
            Some(Some(v)) => {
                newest.insert(id, Some(v));
            }
            None => {
                newest.insert(id, None);
            }
        }
    }
    let live: HashMap<i64, i64> = newest
        .iter()
        .filter_map(|(&id, v)| v.map(|v| (id, v)))
        .collect();
    let stale = live
        .iter()
        .filter(|(id, v)| expected.get(id).is_some_and(|e| e != *v))
        .count();
    let ghosts_live = live.keys().filter(|id| !expected.contains_key(id)).count();
    let missing = expected.keys().filter(|id| !live.contains_key(id)).count();
    println!(
        "republication of {rows} rows ({ghosts} deleted and {} updated unseen, {changes} concurrent changes): {tombstones} tombstones; {before} duplicate records when the republication ended, {cleaned} records (one per key) after the cleaner; newest per key: {} live, {stale} stale, {ghosts_live} deleted rows still live, {missing} rows missing; sluice's peak RSS {peak_rss}",
        rows / 10,
        live.len()
    );
    assert!(
        stale == 0 && ghosts_live == 0 && missing == 0,
        "the topic differs from the table"
    );
    assert_eq!(live, expected);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

//! `sluice perf produce|consume|transforms`: a keyed Kafka load generator, a consumer
//! benchmark, and each transform's cost per record ([`transforms`]).
//!
//! Kafka's own `kafka-producer-perf-test` cannot produce keyed records, which is exactly what
//! compacted "entity" topics and CDC need. `sluice perf produce` produces keyed records with a
//! chosen key cardinality and distribution (sequential, uniform, zipf), fixed or ranged value
//! sizes, for a record count or a duration, throttled or not, with any librdkafka property by
//! name. It prints progress once a second to stderr and a summary at the end (records/s, MB/s,
//! delivery latency percentiles from an HDR histogram, and records per produce request and
//! batch sizes from librdkafka's statistics), as text or `--json`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::{Args, Subcommand, ValueEnum};
use hdrhistogram::Histogram;
use rand::{Rng as _, SeedableRng as _};
use rand_distr::Distribution as _;
use rdkafka::ClientConfig;
use rdkafka::ClientContext;
use rdkafka::Message;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use serde::Serialize;
use sluice_kafka_ffi::TopicProducer;

pub mod transforms;

/// `sluice perf …`.
#[derive(Debug, Subcommand)]
pub enum PerfCommand {
    /// Produce keyed records as fast as possible (or at a rate) and report.
    Produce(ProduceArgs),
    /// Consume records and report throughput and end-to-end latency.
    Consume(ConsumeArgs),
    /// Apply each transform to sample CDC records in process and report its cost per record.
    Transforms(transforms::TransformsArgs),
}

/// Key distributions.
#[derive(Debug, Clone, Copy, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyDistribution {
    /// Keys 0, 1, 2, … wrapping at the cardinality.
    Sequential,
    /// Uniformly random keys.
    Uniform,
    /// Zipf-distributed keys (a few hot keys); see `--zipf-exponent`.
    Zipf,
}

/// `sluice perf produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    pub brokers: String,
    /// Topic (created with `--partitions` if missing).
    #[arg(long)]
    pub topic: String,
    /// Records to produce (default when neither this nor `--duration-s` is given: 1,000,000).
    #[arg(long)]
    pub records: Option<u64>,
    /// Produce for this many seconds instead of a record count.
    #[arg(long)]
    pub duration_s: Option<u64>,
    /// Distinct keys; 0 produces records without keys.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u64,
    /// How keys are drawn.
    #[arg(long, value_enum, default_value_t = KeyDistribution::Sequential)]
    pub key_distribution: KeyDistribution,
    /// Zipf exponent (with `--key-distribution zipf`).
    #[arg(long, default_value_t = 1.0)]
    pub zipf_exponent: f64,
    /// Value size in bytes, or a range `MIN-MAX` (uniform).
    #[arg(long, default_value = "100")]
    pub value_size: String,
    /// Values as JSON objects `{"id":KEY,"seq":N,"ts_ms":MS,"pad":"…"}` of about
    /// `--value-size` bytes (`seq` counts per key), e.g. to feed a Kafka → files pipeline.
    #[arg(long)]
    pub json_values: bool,
    /// Target records per second; 0 = unthrottled.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// `acks` (0, 1, all).
    #[arg(long, default_value = "all")]
    pub acks: String,
    /// `compression.type`.
    #[arg(long, default_value = "none")]
    pub compression: String,
    /// Partitions of the topic if it is created.
    #[arg(long, default_value_t = 1)]
    pub partitions: i32,
    /// Any librdkafka producer property, `-X name=value` (repeatable).
    #[arg(short = 'X', value_parser = parse_property)]
    pub property: Vec<(String, String)>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// `sluice perf consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Bootstrap servers.
    #[arg(long, env = "KAFKA_BROKERS")]
    pub brokers: String,
    /// Topic (read from the beginning).
    #[arg(long)]
    pub topic: String,
    /// Stop after this many records.
    #[arg(long)]
    pub records: Option<u64>,
    /// Stop after this many seconds without a record (default 5).
    #[arg(long, default_value_t = 5)]
    pub idle_timeout_s: u64,
    /// Any librdkafka consumer property, `-X name=value` (repeatable).
    #[arg(short = 'X', value_parser = parse_property)]
    pub property: Vec<(String, String)>,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

pub(crate) fn parse_property(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("{text:?}: expected name=value, e.g. -X linger.ms=10"))
}

/// Runs a perf command.
///
/// # Errors
///
/// Invalid arguments and Kafka failures.
pub fn run(command: PerfCommand) -> anyhow::Result<()> {
    match command {
        PerfCommand::Produce(args) => produce(args),
        PerfCommand::Consume(args) => consume(args),
        PerfCommand::Transforms(args) => transforms::run(&args),
    }
}

/// The summary of a produce run.
#[derive(Debug, Serialize)]
pub struct ProduceSummary {
    /// Records acknowledged.
    pub records: u64,
    /// Records that failed.
    pub failed: u64,
    /// Wall time, seconds.
    pub seconds: f64,
    /// Records per second.
    pub records_per_s: f64,
    /// Megabytes (10^6) of key and value per second.
    pub mb_per_s: f64,
    /// Delivery latency percentiles, milliseconds.
    pub latency_ms: Percentiles,
    /// Records per produce request (librdkafka statistics).
    pub records_per_request: Option<f64>,
    /// Average batch size in bytes (librdkafka statistics).
    pub avg_batch_bytes: Option<f64>,
    /// Average records per batch (librdkafka statistics).
    pub avg_batch_records: Option<f64>,
    /// Key distribution.
    pub key_distribution: KeyDistribution,
    /// Distinct keys.
    pub keys: u64,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Serialize)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Maximum.
    pub max: f64,
}

impl Percentiles {
    fn of(histogram: &Histogram<u64>) -> Self {
        let ms = |micros: u64| micros as f64 / 1000.0;
        Self {
            p50: ms(histogram.value_at_quantile(0.5)),
            p99: ms(histogram.value_at_quantile(0.99)),
            p999: ms(histogram.value_at_quantile(0.999)),
            max: ms(histogram.max()),
        }
    }
}

/// The clock is read once per CLOCK_EVERY records sent and acknowledged: reading it per record
/// cost ~12 % of the producing thread (clock_gettime in a VM). Send times, and so latencies,
/// are coarse by the time it takes to send that many records (well under a millisecond
/// unthrottled).
const CLOCK_EVERY: u64 = 64;

/// What the delivery callback shares with the producing thread.
struct PerfContext {
    started: Instant,
    /// Microseconds since `started` when the delivery callback last read the clock.
    clock_micros: AtomicU64,
    acked: AtomicU64,
    acked_bytes: AtomicU64,
    failed: AtomicU64,
    latency: Mutex<Histogram<u64>>,
    stats: Mutex<Option<Statistics>>,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for PerfContext {
    fn stats(&self, statistics: Statistics) {
        if let Ok(mut stats) = self.stats.lock() {
            *stats = Some(statistics);
        }
    }
}

impl ProducerContext for PerfContext {
    /// Microseconds since the start at which the record was handed to librdkafka.
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_at_micros: usize) {
        match result {
            Ok(message) => {
                let bytes =
                    message.key().map_or(0, <[u8]>::len) + message.payload().map_or(0, <[u8]>::len);
                let acked = self.acked.fetch_add(1, Ordering::Relaxed);
                self.acked_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                // Reports arrive in bursts (one per acknowledged request), so the clock is
                // read once per CLOCK_EVERY of them: per report it was ~4 % of the process
                // (`perf record` of `sluice perf produce`). Latencies are late by at most the
                // time 64 callbacks take (microseconds).
                let now = if acked.is_multiple_of(CLOCK_EVERY) {
                    let now = self.started.elapsed().as_micros() as u64;
                    self.clock_micros.store(now, Ordering::Relaxed);
                    now
                } else {
                    self.clock_micros.load(Ordering::Relaxed)
                };
                if let Ok(mut latency) = self.latency.lock() {
                    let _ = latency.record(now.saturating_sub(sent_at_micros as u64).max(1));
                }
            }
            Err((error, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| error.to_string());
                }
            }
        }
    }
}

/// Draws keys.
enum KeySource {
    None,
    Sequential(u64, u64),
    Uniform(u64),
    Zipf(rand_distr::Zipf<f64>),
}

impl KeySource {
    fn next(&mut self, rng: &mut rand::rngs::SmallRng) -> Option<u64> {
        match self {
            KeySource::None => None,
            KeySource::Sequential(next, keys) => {
                let key = *next;
                *next = (*next + 1) % *keys;
                Some(key)
            }
            KeySource::Uniform(keys) => Some(rng.random_range(0..*keys)),
            KeySource::Zipf(zipf) => Some(zipf.sample(rng) as u64 - 1),
        }
    }
}

fn parse_value_size(text: &str) -> anyhow::Result<(usize, usize)> {
    let parse = |s: &str| {
        s.trim()
            .parse::<usize>()
            .with_context(|| format!("--value-size {text:?}: expected BYTES or MIN-MAX"))
    };
    let (min, max) = match text.split_once('-') {
        Some((min, max)) => (parse(min)?, parse(max)?),
        None => (parse(text)?, parse(text)?),
    };
    if min > max {
        bail!("--value-size {text:?}: MIN is larger than MAX");
    }
    Ok((min, max))
}

fn ensure_topic(brokers: &str, topic: &str, partitions: i32) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .create()?;
        let results = admin
            .create_topics(
                &[NewTopic::new(
                    topic,
                    partitions,
                    TopicReplication::Fixed(-1),
                )],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
            )
            .await?;
        match results.into_iter().next() {
            Some(Ok(_)) | Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => Ok(()),
            Some(Err((topic, code))) => bail!("cannot create topic {topic}: {code}"),
        }
    })
}

fn produce(args: ProduceArgs) -> anyhow::Result<()> {
    let (min_size, max_size) = parse_value_size(&args.value_size)?;
    if args.records.is_some() && args.duration_s.is_some() {
        bail!("give --records or --duration-s, not both");
    }
    let limit = match (args.records, args.duration_s) {
        (Some(records), _) => (Some(records), None),
        (None, Some(seconds)) => (None, Some(Duration::from_secs(seconds))),
        (None, None) => (Some(1_000_000), None),
    };
    ensure_topic(&args.brokers, &args.topic, args.partitions)?;
    let context = PerfContext {
        started: Instant::now(),
        clock_micros: AtomicU64::new(0),
        acked: AtomicU64::new(0),
        acked_bytes: AtomicU64::new(0),
        failed: AtomicU64::new(0),
        latency: Mutex::new(Histogram::new_with_bounds(1, 3_600_000_000, 3)?),
        stats: Mutex::new(None),
        first_error: Mutex::new(None),
    };
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.brokers)
        .set("acks", &args.acks)
        .set("compression.type", &args.compression)
        .set("partitioner", "murmur2_random")
        .set("statistics.interval.ms", "1000");
    for (key, value) in &args.property {
        config.set(key, value);
    }
    let producer: ThreadedProducer<PerfContext> = config
        .create_with_context(context)
        .context("cannot create the producer (check the -X properties)")?;
    let context = Arc::clone(producer.context());
    // One topic handle for the run: the binding's `send` looks the topic up by name per record.
    let topic = TopicProducer::new(&producer, &args.topic)
        .with_context(|| format!("cannot open topic {:?} for producing", args.topic))?;

    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5eed);
    let payload: Vec<u8> = (0..max_size.max(1) * 2)
        .map(|_| rng.random_range(b'a'..=b'z'))
        .collect();
    let mut keys = match (args.keys, args.key_distribution) {
        (0, _) => KeySource::None,
        (keys, KeyDistribution::Sequential) => KeySource::Sequential(0, keys),
        (keys, KeyDistribution::Uniform) => KeySource::Uniform(keys),
        (keys, KeyDistribution::Zipf) => KeySource::Zipf(
            rand_distr::Zipf::new(keys as f64, args.zipf_exponent)
                .map_err(|e| anyhow::anyhow!("--zipf-exponent: {e}"))?,
        ),
    };
    let mut key_buffer = itoa::Buffer::new();
    let mut json_value = String::with_capacity(max_size + 64);
    let mut per_key_seq: std::collections::HashMap<u64, u64> = std::collections::HashMap::new();
    let started = context.started;
    let mut sent = 0u64;
    let mut last_report = Instant::now();
    let mut last_acked = 0u64;
    let mut elapsed = Duration::ZERO;
    loop {
        if sent.is_multiple_of(CLOCK_EVERY) {
            elapsed = started.elapsed();
        }
        if limit.0.is_some_and(|records| sent >= records)
            || limit.1.is_some_and(|duration| elapsed >= duration)
        {
            break;
        }
        if args.rate > 0 {
            let due = Duration::from_secs_f64(sent as f64 / args.rate as f64);
            elapsed = started.elapsed();
            if due > elapsed {
                std::thread::sleep((due - elapsed).min(Duration::from_millis(5)));
                continue;
            }
        }
        let size = if min_size == max_size {
            min_size
        } else {
            rng.random_range(min_size..=max_size)
        };
        let offset = rng.random_range(0..=payload.len() - size);
        // The key is formatted into a reused buffer (librdkafka copies it): no allocation.
        let key_number = keys.next(&mut rng);
        let key = key_number.map(|k| key_buffer.format(k));
        let value: &[u8] = if args.json_values {
            json_value.clear();
            let seq = key_number.map_or(sent, |k| {
                let next = per_key_seq.entry(k).or_insert(0);
                *next += 1;
                *next - 1
            });
            let ts_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            json_value.push_str("{\"id\":\"");
            json_value.push_str(key.unwrap_or(""));
            json_value.push_str("\",\"seq\":");
            json_value.push_str(itoa::Buffer::new().format(seq));
            json_value.push_str(",\"ts_ms\":");
            json_value.push_str(itoa::Buffer::new().format(ts_ms));
            json_value.push_str(",\"pad\":\"");
            let pad = size.saturating_sub(json_value.len() + 2);
            // The payload pool is ASCII letters: valid inside a JSON string.
            json_value.push_str(
                std::str::from_utf8(&payload[offset..offset + pad.min(size)]).unwrap_or(""),
            );
            json_value.push_str("\"}");
            json_value.as_bytes()
        } else {
            &payload[offset..offset + size]
        };
        let key = key.map(str::as_bytes);
        let mut opaque = elapsed.as_micros() as usize;
        loop {
            match topic.send(None, key, Some(value), opaque) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    opaque = back;
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err((error, _)) => bail!("produce failed: {error}"),
            }
        }
        sent += 1;
        if sent.is_multiple_of(CLOCK_EVERY) && last_report.elapsed() >= Duration::from_secs(1) {
            let acked = context.acked.load(Ordering::Relaxed);
            eprintln!(
                "perf: {sent} sent, {acked} acknowledged, {:.0} records/s",
                (acked - last_acked) as f64 / last_report.elapsed().as_secs_f64()
            );
            last_acked = acked;
            last_report = Instant::now();
        }
    }
    drop(topic);
    producer
        .flush(Duration::from_secs(120))
        .context("records still undelivered after 120 s")?;
    let seconds = started.elapsed().as_secs_f64();
    // Let the last statistics report arrive.
    std::thread::sleep(Duration::from_millis(1100));
    let records = context.acked.load(Ordering::Relaxed);
    let bytes = context.acked_bytes.load(Ordering::Relaxed);
    let stats = context.stats.lock().ok().and_then(|s| s.clone());
    let (records_per_request, avg_batch_bytes, avg_batch_records) = stats
        .map(|stats| {
            let requests: i64 = stats
                .brokers
                .values()
                .map(|b| b.req.get("Produce").copied().unwrap_or(0))
                .sum();
            let topic = stats.topics.get(&args.topic);
            (
                (requests > 0).then(|| stats.txmsgs as f64 / requests as f64),
                topic.map(|t| t.batchsize.avg as f64),
                topic.map(|t| t.batchcnt.avg as f64),
            )
        })
        .unwrap_or((None, None, None));
    let latency = context
        .latency
        .lock()
        .map(|h| Percentiles::of(&h))
        .map_err(|_| anyhow::anyhow!("latency histogram poisoned"))?;
    let summary = ProduceSummary {
        records,
        failed: context.failed.load(Ordering::Relaxed),
        seconds,
        records_per_s: records as f64 / seconds,
        mb_per_s: bytes as f64 / seconds / 1e6,
        latency_ms: latency,
        records_per_request,
        avg_batch_bytes,
        avg_batch_records,
        key_distribution: args.key_distribution,
        keys: args.keys,
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "{} records in {:.2} s: {:.0} records/s, {:.2} MB/s; delivery latency ms p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2}; records/request {}; batch avg {} bytes, {} records",
            summary.records,
            summary.seconds,
            summary.records_per_s,
            summary.mb_per_s,
            summary.latency_ms.p50,
            summary.latency_ms.p99,
            summary.latency_ms.p999,
            summary.latency_ms.max,
            summary
                .records_per_request
                .map_or("?".into(), |v| format!("{v:.0}")),
            summary
                .avg_batch_bytes
                .map_or("?".into(), |v| format!("{v:.0}")),
            summary
                .avg_batch_records
                .map_or("?".into(), |v| format!("{v:.0}")),
        );
    }
    if let Some(error) = context.first_error.lock().ok().and_then(|e| e.clone()) {
        bail!("{} records failed; first error: {error}", summary.failed);
    }
    Ok(())
}

/// The summary of a consume run.
#[derive(Debug, Serialize)]
pub struct ConsumeSummary {
    /// Records read.
    pub records: u64,
    /// Seconds from the first to the last record.
    pub seconds: f64,
    /// Records per second.
    pub records_per_s: f64,
    /// Megabytes (10^6) of key and value per second.
    pub mb_per_s: f64,
    /// Now minus each record's timestamp at receipt, milliseconds.
    pub end_to_end_ms: Percentiles,
}

fn consume(args: ConsumeArgs) -> anyhow::Result<()> {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &args.brokers)
        .set("group.id", format!("sluice-perf-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (key, value) in &args.property {
        config.set(key, value);
    }
    let consumer: BaseConsumer = config.create().context("cannot create the consumer")?;
    consumer.subscribe(&[&args.topic])?;
    let mut latency = Histogram::<u64>::new_with_bounds(1, 3_600_000_000, 3)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut last_report = Instant::now();
    loop {
        if args.records.is_some_and(|limit| records >= limit) {
            break;
        }
        match consumer.poll(Duration::from_millis(100)) {
            Some(message) => {
                let message = message?;
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                if let Some(stamp) = message.timestamp().to_millis() {
                    let _ = latency.record(((now_ms - stamp).max(0) as u64 * 1000).max(1));
                }
                records += 1;
                bytes += (message.key().map_or(0, <[u8]>::len)
                    + message.payload().map_or(0, <[u8]>::len)) as u64;
                first.get_or_insert_with(Instant::now);
                last = Instant::now();
            }
            None if first.is_some()
                && last.elapsed() >= Duration::from_secs(args.idle_timeout_s) =>
            {
                break;
            }
            None => {}
        }
        if last_report.elapsed() >= Duration::from_secs(1) {
            eprintln!("perf: {records} records");
            last_report = Instant::now();
        }
    }
    let seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64().max(1e-6));
    let summary = ConsumeSummary {
        records,
        seconds,
        records_per_s: records as f64 / seconds.max(1e-6),
        mb_per_s: bytes as f64 / seconds.max(1e-6) / 1e6,
        end_to_end_ms: Percentiles::of(&latency),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        println!(
            "{} records in {:.2} s: {:.0} records/s, {:.2} MB/s; end-to-end ms p50 {:.2} p99 {:.2} max {:.2}",
            summary.records,
            summary.seconds,
            summary.records_per_s,
            summary.mb_per_s,
            summary.end_to_end_ms.p50,
            summary.end_to_end_ms.p99,
            summary.end_to_end_ms.max
        );
    }
    Ok(())
}

//! Kafka → PostgreSQL: workers the watchdog gives up on are reclaimed. A target table locked
//! by another session (`LOCK TABLE … ACCESS EXCLUSIVE`, held open) blocks every batch; each
//! run's workers pass `processing_timeout_ms`, the run fails and restarts. Each restart must
//! leave nothing behind: no thread in the process, no backend on the target.

use std::time::{Duration, Instant};

use crate::sink::create_topic;
use crate::sink_pg::{
    assert_applied_once, counters_table, drop_database, produce_changes, sink_toml, target_database,
};
use crate::support::{Sluice, free_port, pg_at, test_dir, unique};

/// Threads of process `pid`.
fn threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|dir| dir.count())
        .unwrap_or(0)
}

/// The pipeline's restarts so far (from `/health`).
fn restarts(sink: &Sluice) -> u64 {
    sink.get("/health")
        .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|health| health["restarts"].as_u64())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread")]
async fn restarts_against_a_locked_table_leave_no_thread_or_backend_behind() {
    const RESTARTS: u64 = 20;
    const SUB_PARTITIONS: i64 = 4;
    let name = unique("pgsink_locked");
    let (url, target) = target_database(&name).await;
    counters_table(&target).await;
    let topic = format!("{name}.app.counters");
    create_topic(&topic, 1).await;
    let expected = produce_changes(&topic, 200, 3);
    // Another session holds the table: every batch waits on its lock.
    let locker = pg_at(&url).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE app.counters IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();

    let port = free_port();
    // The watchdog gives up on a batch after 300 ms (the statement timeout, 5 minutes by
    // default, would end it much later); restarts follow at once.
    let toml = sink_toml(
        &name,
        std::slice::from_ref(&topic),
        &url,
        port,
        "[delivery]\nprocessing_timeout_ms = 300\n",
    )
    .replace(
        "initial_backoff_ms = 200\nmax_backoff_ms = 2000",
        "initial_backoff_ms = 20\nmax_backoff_ms = 50",
    );
    let sink = Sluice::start(&test_dir(&name), &toml, port);
    let pid = sink.pid().expect("sluice runs");
    let application_name = format!("sluice-{name}");
    let (target_ref, application_name_ref) = (&target, &application_name);
    let backends = move || async move {
        target_ref
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[application_name_ref],
            )
            .await
            .unwrap()
            .get::<_, i64>(0)
    };

    // Sampled as each restart is recorded (the failed run has ended), and every 20 ms in
    // between (runs included) for the largest counts.
    let started = Instant::now();
    let mut samples: Vec<(u64, usize, i64)> = Vec::new();
    let (mut most_backends, mut most_threads) = (0, 0);
    // The most threads seen until the first restart: one run's worth.
    let mut first_run_threads = 0;
    let mut last = 0;
    while last < RESTARTS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {last} restarts within 60 s; samples (restart, threads, backends): {samples:?}; log:\n{}",
            sink.log_text()
        );
        let now = restarts(&sink);
        let backends_now = backends().await;
        let threads_now = threads(pid);
        most_backends = most_backends.max(backends_now);
        most_threads = most_threads.max(threads_now);
        if now == 0 {
            first_run_threads = most_threads;
        }
        if now > last {
            last = now;
            if [1, 5, 10, RESTARTS].contains(&now) {
                let sample = (now, threads(pid), backends_now);
                println!(
                    "restart {:>2}: {:>3} threads, {} backends ({:.1} s)",
                    sample.0,
                    sample.1,
                    sample.2,
                    started.elapsed().as_secs_f64()
                );
                samples.push(sample);
                // Flat: never more than the run's own (a worker per sub-partition, the
                // recoveries' connection, one closing); threads within a few of the first
                // restart's (librdkafka's come and go with each run's clients).
                let first_threads = samples[0].1;
                assert!(
                    sample.1 <= first_threads + 8,
                    "threads grow with restarts (restart, threads, backends): {samples:?}"
                );
                assert!(
                    most_backends <= SUB_PARTITIONS + 2,
                    "{most_backends} backends of {application_name}: they grow with restarts {samples:?}"
                );
                assert!(
                    most_threads <= first_run_threads + 8,
                    "{most_threads} threads at most, {first_run_threads} in the first run: they grow with restarts {samples:?}"
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let log = sink.log_text();
    assert!(
        log.contains("a worker is stuck on a commit: giving up on it"),
        "the runs did not end through the watchdog:\n{log}"
    );
    assert_eq!(
        sink.metric("sluice_sink_abandoned_workers"),
        Some(0.0),
        "every given-up worker ended (none left running)"
    );
    println!(
        "{RESTARTS} restarts in {:.1} s; at any poll (runs included) at most {most_threads} threads ({first_run_threads} in the first run) and {most_backends} backends",
        started.elapsed().as_secs_f64()
    );

    // The lock goes: every change arrives, once.
    locker.batch_execute("COMMIT").await.unwrap();
    assert_applied_once(&target, &expected, Duration::from_secs(60), &sink).await;
    drop(sink);
    drop(locker);
    drop(target);
    drop_database(&name).await;
}

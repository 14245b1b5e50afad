//! Operating a pipeline: the admin API (pause, resume, restart, token), supervision with
//! backoff, slot safety, the no-progress watchdog and the status page (with the doctor's
//! findings) in a real browser.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    Sluice, dev_stack, drop_slot_and_publication, fault_broker, fault_brokers, free_port,
    http_request, on_fault_broker, pg, pipeline_toml, read_topic, read_topic_at, test_dir, unique,
    wait_slot_inactive, wait_until,
};

async fn create_table(client: &tokio_postgres::Client, schema: &str) {
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.t (id bigint PRIMARY KEY, payload text);"
        ))
        .await
        .unwrap();
}

async fn insert(client: &tokio_postgres::Client, schema: &str, from: i64, to: i64) {
    client
        .batch_execute(&format!(
            "INSERT INTO {schema}.t SELECT g, md5(g::text) FROM generate_series({from}, {}) g",
            to - 1
        ))
        .await
        .unwrap();
}

/// Distinct ids in the topic once at least `count` are there (or the timeout passes).
fn ids_in_topic(topic: &str, count: usize, timeout: Duration) -> std::collections::HashSet<i64> {
    ids_in_topic_at(&crate::support::stack().brokers, topic, count, timeout)
}

/// [`ids_in_topic`] from the broker at `brokers`.
fn ids_in_topic_at(
    brokers: &str,
    topic: &str,
    count: usize,
    timeout: Duration,
) -> std::collections::HashSet<i64> {
    let records = read_topic_at(brokers, topic, timeout, &[], |records| {
        records
            .iter()
            .filter_map(|r| r.key.as_ref()?["id"].as_i64())
            .collect::<std::collections::HashSet<_>>()
            .len()
            >= count
    });
    records
        .iter()
        .filter_map(|r| r.key.as_ref()?["id"].as_i64())
        .collect()
}

fn api(sluice: &Sluice, method: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("Authorization", a)])
        .unwrap_or_default();
    let (status, body) = http_request(sluice.admin, method, path, &headers)
        .unwrap_or_else(|| panic!("{method} {path}: no answer"));
    let json = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"));
    (status, json)
}

fn state(sluice: &Sluice, name: &str, token: &str) -> Value {
    api(
        sluice,
        "GET",
        &format!("/api/v1/pipelines/{name}"),
        Some(token),
    )
    .1
}

/// Pause stops reading (the slot becomes inactive and new rows wait in it), resume delivers
/// them, restart restarts and is counted; the token guards the API.
#[tokio::test(flavor = "multi_thread")]
async fn admin_api_pauses_resumes_and_restarts_behind_its_token() {
    let name = unique("admin");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let token = "0123456789abcdef-test-token";
    let toml = pipeline_toml(&name, &name, &name, port, "")
        .replace("[admin]\n", &format!("[admin]\ntoken = \"{token}\"\n"));
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    let topic = format!("{name}.{name}.t");

    // The token.
    let (status, body) = api(&sluice, "GET", "/api/v1/pipelines", None);
    assert_eq!(status, 401, "{body}");
    assert!(body["error"].as_str().unwrap().contains("Bearer"));
    let (status, _) = api(
        &sluice,
        "GET",
        "/api/v1/pipelines",
        Some("wrong-token-of-some-length"),
    );
    assert_eq!(status, 401);
    let (status, body) = api(&sluice, "GET", "/api/v1/pipelines", Some(token));
    assert_eq!(status, 200);
    assert_eq!(body["pipelines"][0]["pipeline"], name.as_str());
    assert_eq!(body["pipelines"][0]["state"], "streaming");
    let (status, body) = api(&sluice, "GET", "/api/v1/pipelines/nope", Some(token));
    assert_eq!(status, 404);
    assert!(body["error"].as_str().unwrap().contains(&name), "{body}");
    // /health stays open.
    assert!(sluice.get("/health").unwrap().contains("streaming"));
    // `sluice health`, the container image's healthcheck: 0 and the state from a running
    // pipeline (0.0.0.0, as the image's SLUICE_ADMIN says, is asked on 127.0.0.1), 1 where
    // nothing answers.
    let probe = |admin: String| {
        std::process::Command::new(crate::support::sluice_bin())
            .args(["health", "--admin", &admin])
            .env_remove("SLUICE_ADMIN")
            .output()
            .unwrap()
    };
    let healthy = probe(format!("0.0.0.0:{port}"));
    let said = String::from_utf8_lossy(&healthy.stdout);
    assert!(
        healthy.status.success() && said.contains("200 OK, state streaming"),
        "{said}"
    );
    let nobody = probe(format!("127.0.0.1:{}", free_port()));
    assert_eq!(
        nobody.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&nobody.stdout)
    );

    insert(&client, &name, 0, 100).await;
    let topic2 = topic.clone();
    let seen =
        tokio::task::spawn_blocking(move || ids_in_topic(&topic2, 100, Duration::from_secs(60)))
            .await
            .unwrap();
    assert_eq!(seen.len(), 100);

    // Pause: the run drains, confirms and closes its replication connection.
    let (status, body) = api(
        &sluice,
        "POST",
        &format!("/api/v1/pipelines/{name}/pause"),
        Some(token),
    );
    assert_eq!(status, 202, "{body}");
    wait_until("the paused state", Duration::from_secs(30), || {
        state(&sluice, &name, token)["state"] == "paused"
    });
    let deadline = Instant::now() + crate::support::bound(Duration::from_secs(10));
    loop {
        let active: bool = client
            .query_one(
                "SELECT active FROM pg_replication_slots WHERE slot_name = $1",
                &[&format!("sluice_{name}")],
            )
            .await
            .unwrap()
            .get(0);
        if !active {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a paused pipeline does not read its slot"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    insert(&client, &name, 100, 200).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let topic2 = topic.clone();
    let while_paused =
        tokio::task::spawn_blocking(move || ids_in_topic(&topic2, 200, Duration::from_secs(3)))
            .await
            .unwrap();
    assert_eq!(while_paused.len(), 100, "nothing is delivered while paused");

    // Resume: the rows written meanwhile arrive.
    let (status, _) = api(
        &sluice,
        "POST",
        &format!("/api/v1/pipelines/{name}/resume"),
        Some(token),
    );
    assert_eq!(status, 202);
    let topic2 = topic.clone();
    let seen =
        tokio::task::spawn_blocking(move || ids_in_topic(&topic2, 200, Duration::from_secs(60)))
            .await
            .unwrap();
    assert_eq!(seen.len(), 200, "resumed");

    // Restart: counted as requested, streaming again.
    let before = state(&sluice, &name, token)["restarts"].as_u64().unwrap();
    let (status, _) = api(
        &sluice,
        "POST",
        &format!("/api/v1/pipelines/{name}/restart"),
        Some(token),
    );
    assert_eq!(status, 202);
    wait_until("a requested restart", Duration::from_secs(30), || {
        let s = state(&sluice, &name, token);
        s["restarts"].as_u64().unwrap() > before && s["state"] == "streaming"
    });
    let s = state(&sluice, &name, token);
    let last = s["recent_restarts"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["reason"], "requested", "{s}");
    let requested = sluice
        .metric(&format!(
            "sluice_pipeline_restarts_total{{pipeline=\"{name}\",reason=\"requested\"}}"
        ))
        .unwrap_or(0.0);
    assert!(requested >= 1.0, "restart counted in metrics");
    let (status, _) = api(
        &sluice,
        "POST",
        &format!("/api/v1/pipelines/{name}/explode"),
        Some(token),
    );
    assert_eq!(status, 404);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// The replication connection is killed four times in a row: each failure is restarted after
/// a longer backoff (initial 200 ms, doubling, with jitter ×0.5–1), the API lists the restarts
/// with their delays, and the pipeline recovers with every row delivered.
#[tokio::test(flavor = "multi_thread")]
async fn killed_connections_back_off_longer_each_time_and_recover() {
    let name = unique("backoff");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "")
        .replace("max_backoff_ms = 2000", "max_backoff_ms = 10000");
    let sluice = Sluice::start(&dir, &toml, port);
    let application = format!("sluice-{name}");
    const KILLS: u64 = 4;
    for kill in 0..KILLS {
        sluice.wait_streaming(Duration::from_secs(60));
        insert(&client, &name, kill as i64 * 100, (kill as i64 + 1) * 100).await;
        // Terminate the walsender once it serves the pipeline again.
        let deadline = Instant::now() + crate::support::bound(Duration::from_secs(30));
        loop {
            let terminated: i64 = client
                .query_one(
                    "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_replication WHERE application_name = $1) t",
                    &[&application],
                )
                .await
                .unwrap()
                .get(0);
            if terminated == 1 {
                break;
            }
            assert!(Instant::now() < deadline, "no walsender to terminate");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let health_url = "/health".to_owned();
        wait_until(
            "the restart to be recorded",
            Duration::from_secs(30),
            || {
                sluice.get(&health_url).is_some_and(|h| {
                    serde_json::from_str::<Value>(&h)
                        .is_ok_and(|v| v["restarts"].as_u64().unwrap_or(0) > kill)
                })
            },
        );
    }
    sluice.wait_streaming(Duration::from_secs(60));
    let health: Value = serde_json::from_str(&sluice.get("/health").unwrap()).unwrap();
    let restarts = health["recent_restarts"].as_array().unwrap();
    assert_eq!(restarts.len() as u64, KILLS, "{health}");
    let delays: Vec<u64> = restarts
        .iter()
        .map(|r| r["backoff_ms"].as_u64().unwrap())
        .collect();
    println!("backoff after {KILLS} killed connections: {delays:?} ms");
    for (i, (restart, delay)) in restarts.iter().zip(&delays).enumerate() {
        assert_eq!(restart["reason"], "retryable", "{restart}");
        assert_eq!(restart["consecutive_failures"], i as u64 + 1, "{restart}");
        let cap = 200u64 << i;
        assert!(
            (cap / 2..=cap).contains(delay),
            "restart {i}: delay {delay} ms outside {}..={cap}",
            cap / 2
        );
        assert!(
            restart["error"].as_str().unwrap().contains("connection")
                || restart["error"].as_str().unwrap().contains("terminat"),
            "{restart}"
        );
    }
    assert!(
        delays[KILLS as usize - 1] > delays[0],
        "the backoff grew: {delays:?}"
    );
    assert_eq!(
        sluice
            .metric(&format!(
                "sluice_pipeline_restarts_total{{pipeline=\"{name}\",reason=\"retryable\"}}"
            ))
            .unwrap_or(0.0),
        KILLS as f64
    );
    let transitions = sluice
        .metric(&format!(
            "sluice_pipeline_state_transitions_total{{pipeline=\"{name}\",state=\"backoff\"}}"
        ))
        .unwrap_or(0.0);
    assert_eq!(transitions, KILLS as f64);
    let topic = format!("{name}.{name}.t");
    let seen = tokio::task::spawn_blocking(move || {
        ids_in_topic(&topic, (KILLS * 100) as usize, Duration::from_secs(60))
    })
    .await
    .unwrap();
    assert_eq!(
        seen.len() as u64,
        KILLS * 100,
        "every row after the restarts"
    );
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// A slot dropped while sluice is stopped, and one dropped and recreated, stop the pipeline
/// with what happened (instead of silently skipping the changes in between); with
/// `on_slot_loss = "recreate"` it goes on and counts the loss; with `snapshot = "when_needed"`
/// too, it re-snapshots and the gap is closed.
#[tokio::test(flavor = "multi_thread")]
async fn dropped_or_recreated_slot_stops_the_pipeline_loudly() {
    let name = unique("slotloss");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = pipeline_toml(&name, &name, &name, port, "");
    let slot = format!("sluice_{name}");
    let mut sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    insert(&client, &name, 0, 10).await;
    let topic = format!("{name}.{name}.t");
    let t = topic.clone();
    assert_eq!(
        tokio::task::spawn_blocking(move || ids_in_topic(&t, 10, Duration::from_secs(60)))
            .await
            .unwrap()
            .len(),
        10
    );
    assert!(sluice.stop());

    // Rows written while stopped, then the slot is dropped and recreated: the rows are gone.
    insert(&client, &name, 10, 20).await;
    wait_slot_inactive(&client, &slot).await;
    client
        .query_one("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    client
        .query_one(
            "SELECT pg_create_logical_replication_slot($1, 'pgoutput')",
            &[&slot],
        )
        .await
        .unwrap();
    let exited = |sluice: &mut Sluice| {
        let deadline = Instant::now() + crate::support::bound(Duration::from_secs(60));
        loop {
            if let Some(status) = sluice.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "sluice did not stop:\n{}",
                sluice.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    sluice.restart();
    let status = exited(&mut sluice);
    assert!(!status.success());
    let log = sluice.log_text();
    assert!(
        log.contains("was recreated or advanced by someone else")
            && log.contains("on_slot_loss")
            && log.contains(".slot.json"),
        "{log}"
    );

    // Dropped (not recreated): named as such.
    wait_slot_inactive(&client, &slot).await;
    client
        .query_one("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    sluice.restart();
    assert!(!exited(&mut sluice).success());
    let log = sluice.log_text();
    assert!(
        log.contains("was dropped since this pipeline last confirmed"),
        "{log}"
    );

    // Accepting the gap: the pipeline creates the slot anew, counts the loss and streams.
    let mut sluice = Sluice::start(
        &dir,
        &toml.replace(
            "[source.postgres]\n",
            "[source.postgres]\non_slot_loss = \"recreate\"\n",
        ),
        port,
    );
    sluice.wait_streaming(Duration::from_secs(60));
    assert_eq!(
        sluice
            .metric(&format!(
                "sluice_source_slot_losses_total{{pipeline=\"{name}\",kind=\"dropped\"}}"
            ))
            .unwrap_or(0.0),
        1.0
    );
    insert(&client, &name, 20, 30).await;
    let t = topic.clone();
    let seen = tokio::task::spawn_blocking(move || ids_in_topic(&t, 20, Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(
        (20..30).all(|id| seen.contains(&id)),
        "rows after the new slot arrive"
    );
    assert!(
        (10..20).all(|id| !seen.contains(&id)),
        "the gap is real: the rows written before the slot was recreated are not in Kafka"
    );
    assert!(sluice.stop());

    // With snapshot = "when_needed" a lost slot is re-snapshotted: rows written while the slot
    // was gone arrive as snapshot reads, closing the gap.
    insert(&client, &name, 30, 40).await;
    client
        .query_one("SELECT pg_drop_replication_slot($1)", &[&slot])
        .await
        .unwrap();
    let mut sluice = Sluice::start(
        &dir,
        &toml.replace(
            "[source.postgres]\n",
            "[source.postgres]\non_slot_loss = \"recreate\"\nsnapshot = \"when_needed\"\n",
        ),
        port,
    );
    sluice.wait_streaming(Duration::from_secs(60));
    let t = topic.clone();
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&t, Duration::from_secs(60), |records| {
            records.iter().filter(|r| r.op() == Some("r")).count() >= 40
        })
    })
    .await
    .unwrap();
    let reads: std::collections::HashSet<i64> = records
        .iter()
        .filter(|r| r.op() == Some("r"))
        .filter_map(|r| r.key.as_ref()?["id"].as_i64())
        .collect();
    assert!(
        (0..40).all(|id| reads.contains(&id)),
        "every current row re-read, the gap (10..20, 30..40) included: {reads:?}"
    );
    sluice.kill();
    drop_slot_and_publication(&client, &name).await;
}

/// Kafka goes away while rows keep coming: the WAL grows, the slot's confirmed position stands
/// still, and after `progress_timeout_ms` the pipeline is reported stalled; when Kafka is back
/// the flag clears and every row arrives.
#[tokio::test(flavor = "multi_thread")]
async fn broker_outage_is_reported_as_stalled_progress() {
    let _broker = fault_broker().await;
    let brokers = fault_brokers();
    let name = unique("stall");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    let toml = on_fault_broker(&pipeline_toml(&name, &name, &name, port, "")).replace(
        "[source.postgres]\n",
        "[source.postgres]\nprogress_timeout_ms = 2000\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    tokio::task::spawn_blocking(|| dev_stack(&["stop-fault-kafka"]))
        .await
        .unwrap();
    let stalled = |sluice: &Sluice| {
        sluice
            .get("/health")
            .and_then(|h| serde_json::from_str::<Value>(&h).ok())
            .is_some_and(|v| v["slot"]["stalled"] == true)
    };
    let started = Instant::now();
    let mut next = 0;
    while !stalled(&sluice) {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no stall reported:\n{}",
            sluice.get("/health").unwrap_or_default()
        );
        insert(&client, &name, next, next + 50).await;
        next += 50;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(sluice.metric("sluice_source_stalled"), Some(1.0));
    assert!(sluice.log_text().contains("no progress"));
    tokio::task::spawn_blocking(|| dev_stack(&["start-fault-kafka"]))
        .await
        .unwrap();
    wait_until("the stall to clear", Duration::from_secs(120), || {
        !stalled(&sluice)
    });
    let topic = format!("{name}.{name}.t");
    let rows = next as usize;
    let seen = tokio::task::spawn_blocking(move || {
        ids_in_topic_at(&brokers, &topic, rows, Duration::from_secs(120))
    })
    .await
    .unwrap();
    assert_eq!(seen.len(), rows);
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

/// Debian's chromium, headless.
fn chromium() -> PathBuf {
    for candidate in ["chromium", "chromium-browser", "google-chrome"] {
        if let Ok(out) = Command::new("which").arg(candidate).output()
            && out.status.success()
        {
            return PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        }
    }
    panic!("no chromium found: install Debian's `chromium` package (scripts/test does)");
}

/// The status page, loaded in a real headless browser against a running pipeline with
/// traffic: every chart has drawn samples, and a screenshot is saved with the test's output.
#[tokio::test(flavor = "multi_thread")]
async fn status_page_charts_a_running_pipeline_in_a_browser() {
    let name = unique("page");
    let client = pg().await;
    create_table(&client, &name).await;
    let port = free_port();
    let dir = test_dir(&name);
    // With a WAL budget, which the page shows beside the slot's lag.
    let toml = pipeline_toml(&name, &name, &name, port, "").replace(
        "[source.postgres]\n",
        "[source.postgres]\nwal_budget = \"1GiB\"\nwal_budget_check_interval_ms = 500\n",
    );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(60));
    // Five seconds of traffic, so there are samples with throughput and latency.
    for batch in 0..25 {
        insert(&client, &name, batch * 200, (batch + 1) * 200).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // The page charts the samples the runtime holds: wait until they hold a latency (on a
    // loaded machine the acknowledgements of that traffic may land in a later sample).
    let series = format!("/api/v1/pipelines/{name}/series");
    crate::support::wait_until("a sample with a latency", Duration::from_secs(60), || {
        sluice
            .get(&series)
            .and_then(|body| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|body| body["samples"].as_array().cloned())
            .is_some_and(|samples| samples.iter().any(|s| !s["latency_ms"].is_null()))
    });
    let url = format!("http://{}/", sluice.admin);
    let browser = chromium();
    let profile = dir.join("chromium-profile");
    let common = [
        "--headless=new".to_owned(),
        "--no-sandbox".into(),
        "--disable-gpu".into(),
        "--disable-dev-shm-usage".into(),
        "--no-first-run".into(),
        format!("--user-data-dir={}", profile.display()),
        "--window-size=1280,1000".into(),
        "--virtual-time-budget=4000".into(),
    ];
    let dom = Command::new(&browser)
        .args(&common)
        .arg("--dump-dom")
        .arg(&url)
        .output()
        .expect("run chromium");
    let html = String::from_utf8_lossy(&dom.stdout);
    assert!(
        dom.status.success() && html.contains("data-refreshed"),
        "the page did not load its data:\n{html}\n{}",
        String::from_utf8_lossy(&dom.stderr)
    );
    for chart in ["throughput", "lag", "inflight", "latency"] {
        let id = format!("id=\"chart-{chart}-{name}\"");
        let tag = html
            .split('<')
            .find(|t| t.starts_with("canvas") && t.contains(&id))
            .unwrap_or_else(|| panic!("no canvas {id} in:\n{html}"));
        let points: usize = tag
            .split("data-points=\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(points > 0, "chart {chart} drew no samples: {tag}");
    }
    // The state's badge as the page's script renders it from the status (the page's static
    // CSS names `.state.streaming` too, so the word alone proves nothing).
    assert!(
        html.contains("<span class=\"state streaming\">streaming</span>"),
        "the streaming state is rendered:\n{html}"
    );
    // The WAL budget: what the slot retains against it.
    let wal = html
        .split("<b class=\"walbudget\">")
        .nth(1)
        .and_then(|rest| rest.split("</b>").next())
        .unwrap_or_default();
    assert!(
        wal.contains(" / 1.0 GiB ("),
        "the WAL budget is shown: {wal:?}\n{html}"
    );
    // The doctor's findings: the shared server leaves max_slot_wal_keep_size unset.
    assert!(
        html.contains("data-code=\"pg.max_slot_wal_keep_size\""),
        "the doctor's findings are shown:\n{html}"
    );
    let screenshot = dir.join("status-page.png");
    let shot = Command::new(&browser)
        .args(&common)
        .arg(format!("--screenshot={}", screenshot.display()))
        .arg(&url)
        .output()
        .expect("run chromium");
    assert!(
        shot.status.success(),
        "{}",
        String::from_utf8_lossy(&shot.stderr)
    );
    let png = std::fs::read(&screenshot).expect("screenshot written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "a real screenshot"
    );
    println!("status page screenshot: {}", screenshot.display());
    drop(sluice);
    drop_slot_and_publication(&client, &name).await;
}

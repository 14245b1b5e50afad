//! A replication connection that goes silent without closing (a half-open TCP connection) is
//! detected and replaced within a bounded time, and nothing is lost.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{
    Sluice, ThrowawayPg, free_port, pipeline_toml, read_topic, test_dir, unique, wait_until,
};

/// A loopback TCP proxy whose connections can be frozen: a frozen connection stays open but
/// forwards nothing in either direction, as a connection whose path dropped its state. New
/// connections after a freeze forward normally.
struct FreezableProxy {
    port: u16,
    /// Connections whose generation is at most this are frozen.
    frozen_up_to: Arc<AtomicU64>,
    /// The generation of the newest connection.
    generation: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl FreezableProxy {
    fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let frozen_up_to = Arc::new(AtomicU64::new(0));
        let generations = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (frozen, stopped, counter) = (
            Arc::clone(&frozen_up_to),
            Arc::clone(&stop),
            Arc::clone(&generations),
        );
        thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let client = match listener.accept() {
                    Ok((client, _)) => client,
                    Err(_) => {
                        thread::sleep(Duration::from_millis(10));
                        continue;
                    }
                };
                let generation = counter.fetch_add(1, Ordering::SeqCst) + 1;
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    continue;
                };
                client.set_nonblocking(false).unwrap();
                for (from, to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    let (frozen, stopped) = (Arc::clone(&frozen), Arc::clone(&stopped));
                    thread::spawn(move || forward(from, to, generation, &frozen, &stopped));
                }
            }
        });
        Self {
            port,
            frozen_up_to,
            generation: generations,
            stop,
        }
    }

    /// Freezes every connection open now; later ones forward normally (the path is back for
    /// fresh connections, as after a NAT dropped its state).
    fn freeze_open_connections(&self) {
        self.frozen_up_to
            .store(self.generation.load(Ordering::SeqCst), Ordering::SeqCst);
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Copies `from` to `to` until either side closes; while this connection is frozen it neither
/// reads nor writes (and never closes), so the peers see silence, not an error.
fn forward(
    mut from: TcpStream,
    mut to: TcpStream,
    generation: u64,
    frozen: &AtomicU64,
    stop: &AtomicBool,
) {
    from.set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        if generation <= frozen.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(50));
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Both);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_silent_replication_connection_is_replaced_and_nothing_is_lost() {
    // A cluster of its own: the frozen walsender keeps the slot until wal_sender_timeout ends
    // it, and the shared server's 60 s would only slow the test down.
    let cluster = tokio::task::spawn_blocking(|| {
        ThrowawayPg::start(&["wal_level=logical", "wal_sender_timeout=4s"])
    })
    .await
    .unwrap();
    let pg_port: u16 = cluster
        .url
        .rsplit(':')
        .next()
        .and_then(|rest| rest.split('/').next())
        .and_then(|p| p.parse().ok())
        .expect("port in the throwaway cluster's URL");
    let proxy = FreezableProxy::start(pg_port);
    let proxied_url = cluster
        .url
        .replacen(&format!(":{pg_port}"), &format!(":{}", proxy.port), 1);
    let name = unique("silent");
    let client = crate::support::pg_at(&cluster.url).await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; CREATE TABLE {name}.t (id bigint PRIMARY KEY, v text);"
        ))
        .await
        .unwrap();
    let port = free_port();
    let dir = test_dir(&name);
    // Well under the active-role session's own check (a `SELECT 1` every second with a 3 s
    // timeout, src/source/postgres/active.rs): that session goes through the proxy too, and
    // when its check fired first the run ended as "lost the PostgreSQL session that holds the
    // pipeline's active role" instead of the silence this test is about (seen once in CI).
    // (At least twice the status interval, 200 ms in these pipelines.)
    const SILENCE_MS: u64 = 1_000;
    let toml = pipeline_toml(&name, &name, &name, port, "")
        .replacen(&crate::support::stack().pg_url, &proxied_url, 1)
        // No table refresh: its catalog query goes through the proxy too, and one falling into
        // the frozen window holds the loop until the loop deadline (20 s), ending the run with
        // that error instead of the silence this test is about (seen under load in CI).
        .replace(
            "[source.postgres]\n",
            &format!(
                "[source.postgres]\nsilence_timeout_ms = {SILENCE_MS}\ntable_refresh_interval_ms = 0\n"
            ),
        );
    let sluice = Sluice::start(&dir, &toml, port);
    sluice.wait_streaming(Duration::from_secs(120));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'before' FROM generate_series(1, 500) g"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let before = tokio::task::spawn_blocking({
        let topic = topic.clone();
        move || read_topic(&topic, Duration::from_secs(60), |r| r.len() >= 500)
    })
    .await
    .unwrap();
    assert_eq!(before.len(), 500);

    // The path drops: every open connection goes silent, none closes.
    proxy.freeze_open_connections();
    let frozen_at = Instant::now();
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'during' FROM generate_series(501, 1000) g"
        ))
        .await
        .unwrap();
    wait_until(
        "sluice to notice the silent connection and restart",
        Duration::from_secs(60),
        || {
            sluice
                .log_text()
                .contains("the replication connection went silent")
        },
    );
    let detected_after = frozen_at.elapsed();
    assert!(
        detected_after < Duration::from_millis(SILENCE_MS * 3),
        "detected after {detected_after:?}, silence_timeout_ms = {SILENCE_MS}"
    );
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(120), |r| {
            let mut ids: Vec<i64> = r
                .iter()
                .filter_map(|r| r.key.as_ref()?["id"].as_i64())
                .collect();
            ids.sort_unstable();
            ids.dedup();
            ids.len() >= 1000
        })
    })
    .await
    .unwrap();
    let mut ids: Vec<i64> = records
        .iter()
        .map(|r| r.key.as_ref().unwrap()["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(
        ids,
        (1..=1000).collect::<Vec<_>>(),
        "every row, after the reconnect\nlog:\n{}",
        sluice.log_text()
    );
    println!(
        "silent connection detected after {detected_after:?}; {} records for 1000 rows",
        records.len()
    );
    drop(sluice);
    drop(proxy);
    drop(cluster);
}

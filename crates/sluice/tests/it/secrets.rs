//! Secrets stay secret: a pipeline with a PostgreSQL password in its URL (TLS + SCRAM), a SASL
//! password in `[kafka.client]` read through `${file:…}` (SASL_SSL), and an admin bearer
//! token runs a snapshot and streams with debug logging and librdkafka's debug output (its
//! configuration dump included); then errors that echo connection settings are provoked (a
//! wrong PostgreSQL password, a wrong SASL password, an unreachable host, invalid values next
//! to a secret, a key/value connection string), the admin API is called, and `sluice check`
//! and `sluice doctor` run on the same files. Every byte sluice wrote (stdout, stderr, the
//! log, HTTP answers, the files under its state_dir) is searched for every secret.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{
    Sluice, drop_slot_and_publication, free_port, http_request, pg, read_topic, sluice_bin,
    test_dir, unique,
};

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `scripts/dev-stack up && eval \"$(scripts/dev-stack env)\"`")
    })
}

/// Everything sluice wrote, labelled by where it came from.
#[derive(Default)]
struct Written(Vec<(String, Vec<u8>)>);

impl Written {
    fn add(&mut self, what: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        self.0.push((what.into(), bytes.into()));
    }

    /// Every file under `dir`, recursively.
    fn add_tree(&mut self, dir: &Path) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                self.add_tree(&path);
            } else if let Ok(bytes) = std::fs::read(&path) {
                self.add(path.display().to_string(), bytes);
            }
        }
    }

    /// Where each secret appears: `(secret name, source, context)`.
    fn leaks(&self, secrets: &[(&str, &str)]) -> Vec<String> {
        let mut found = Vec::new();
        for (what, bytes) in &self.0 {
            for (name, secret) in secrets {
                let secret = secret.as_bytes();
                for at in (0..bytes.len()).filter(|&at| bytes[at..].starts_with(secret)) {
                    let start = at.saturating_sub(120);
                    let end = (at + secret.len() + 60).min(bytes.len());
                    found.push(format!(
                        "{name} in {what}: …{}…",
                        String::from_utf8_lossy(&bytes[start..end])
                    ));
                }
            }
        }
        found
    }

    fn total_bytes(&self) -> usize {
        self.0.iter().map(|(_, b)| b.len()).sum()
    }
}

/// What a run wrote: (what ran, stdout, stderr).
type Output = (String, Vec<u8>, Vec<u8>);

/// Runs `sluice <args>` to its end (killed after `timeout`), with `env`; returns its stdout
/// and stderr.
fn run_sluice(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> (Vec<u8>, Vec<u8>) {
    let dir = std::env::temp_dir().join(unique("sluice-secrets-out"));
    std::fs::create_dir_all(&dir).unwrap();
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new(sluice_bin())
        .args(args)
        .env("SLUICE_LOG", "debug")
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .stdin(Stdio::null())
        .spawn()
        .expect("start sluice");
    let deadline = Instant::now() + timeout;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let result = (std::fs::read(&out).unwrap(), std::fs::read(&err).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The pipeline file: PostgreSQL at `url`, Kafka's SASL_SSL listener with `sasl_password_ref`
/// as `sasl.password`, and `extra_client` lines in `[kafka.client]`.
fn pipeline(
    name: &str,
    state: &Path,
    url: &str,
    sasl_password_ref: &str,
    extra_client: &str,
    admin_port: u16,
    token_file: &Path,
) -> String {
    format!(
        r#"
name = "{name}"
state_dir = "{state}"

[source.postgres]
url = "{url}"
schemas = ["{name}"]
status_interval_ms = 200
heartbeat_interval_ms = 1000

[kafka]
brokers = "{brokers}"
topic_prefix = "{name}"

[kafka.client]
"security.protocol" = "SASL_SSL"
"sasl.mechanism" = "SCRAM-SHA-512"
"sasl.username" = "{user}"
"sasl.password" = "{sasl_password_ref}"
"ssl.ca.location" = "{tls}/ca.crt"
{extra_client}

[admin]
listen = "127.0.0.1:{admin_port}"
token = "${{file:{token}}}"

[restart]
initial_backoff_ms = 200
max_backoff_ms = 2000
"#,
        state = state.display(),
        brokers = var("KAFKA_SASL_SSL_BROKERS"),
        user = var("KAFKA_SCRAM_USER"),
        tls = var("SLUICE_TLS_DIR"),
        token = token_file.display(),
    )
}

fn write(dir: &Path, file: &str, text: &str) -> PathBuf {
    let path = dir.join(file);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread")]
async fn no_secret_appears_in_anything_sluice_writes() {
    let tls_url = var("PG_TLS_URL");
    let pg_password = tls_url
        .split_once("sluice_scram:")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(password, _)| password.to_owned())
        .expect("PG_TLS_URL has a password");
    let sasl_password = var("KAFKA_SCRAM_PASSWORD");
    let name = unique("secrets");
    let admin_token = format!("admin-token-{name}-Wq4Zt9");
    let wrong_pg_password = format!("wrong-pg-password-{name}-Hs2");
    let wrong_sasl_password = format!("wrong-sasl-password-{name}-Kd7");
    let secrets = [
        ("the PostgreSQL password", pg_password.as_str()),
        ("the SASL password (${file:})", sasl_password.as_str()),
        ("the admin token (${file:})", admin_token.as_str()),
        ("a wrong PostgreSQL password", wrong_pg_password.as_str()),
        ("a wrong SASL password", wrong_sasl_password.as_str()),
    ];

    let client = pg().await;
    client
        .batch_execute(&format!(
            "CREATE SCHEMA {name}; \
             CREATE TABLE {name}.t (id bigint PRIMARY KEY, v text NOT NULL); \
             INSERT INTO {name}.t SELECT g, 'snap ' || g FROM generate_series(1, 50) g;"
        ))
        .await
        .unwrap();
    let dir = test_dir(&name);
    let state = dir.join("state");
    let secret_dir = dir.join("secrets");
    std::fs::create_dir_all(&secret_dir).unwrap();
    let sasl_file = write(&secret_dir, "kafka_password", &format!("{sasl_password}\n"));
    let token_file = write(&secret_dir, "admin_token", &format!("{admin_token}\n"));
    let wrong_sasl_file = write(&secret_dir, "wrong_kafka_password", &wrong_sasl_password);
    let sasl_ref = format!("${{file:{}}}", sasl_file.display());
    // librdkafka's own debug output, its configuration dump (`conf`) included.
    let debug = "\"debug\" = \"conf,security,broker,protocol\"";
    let port = free_port();
    let toml = pipeline(&name, &state, &tls_url, &sasl_ref, debug, port, &token_file);
    assert!(toml.contains(&pg_password) && toml.contains("${file:"));
    let mut written = Written::default();

    // 1. The full pipeline: snapshot, then streaming, with debug logging.
    let mut sluice = Sluice::start_with_env(
        &dir,
        &toml,
        port,
        vec![("SLUICE_LOG".into(), "debug".into())],
    );
    sluice.wait_streaming(Duration::from_secs(90));
    client
        .batch_execute(&format!(
            "INSERT INTO {name}.t SELECT g, 'stream ' || g FROM generate_series(51, 80) g; \
             UPDATE {name}.t SET v = 'updated' WHERE id <= 5;"
        ))
        .await
        .unwrap();
    let topic = format!("{name}.{name}.t");
    let records = tokio::task::spawn_blocking(move || {
        read_topic(&topic, Duration::from_secs(90), |r| r.len() >= 85)
    })
    .await
    .unwrap();
    let ops = |op: &str| records.iter().filter(|r| r.op() == Some(op)).count();
    assert_eq!(
        (ops("r"), ops("c"), ops("u")),
        (50, 30, 5),
        "{}",
        sluice.log_text()
    );

    // 2. The admin API, with the token, without it and with a wrong one.
    let bearer = format!("Bearer {admin_token}");
    let wrong_bearer = format!("Bearer {wrong_pg_password}");
    for path in [
        "/".to_owned(),
        "/health".to_owned(),
        "/metrics".to_owned(),
        "/api/v1/pipelines".to_owned(),
        format!("/api/v1/pipelines/{name}"),
        format!("/api/v1/pipelines/{name}/series"),
        format!("/api/v1/pipelines/{name}/doctor"),
    ] {
        for headers in [
            vec![("Authorization", bearer.as_str())],
            vec![],
            vec![("Authorization", wrong_bearer.as_str())],
        ] {
            let (status, body) = http_request(sluice.admin, "GET", &path, &headers)
                .unwrap_or_else(|| panic!("GET {path}"));
            written.add(format!("GET {path} ({status})"), body);
        }
    }
    let (status, body) = http_request(
        sluice.admin,
        "GET",
        &format!("/api/v1/pipelines/{name}"),
        &[("Authorization", &bearer)],
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(sluice.stop(), "{}", sluice.log_text());
    let log = sluice.log_text();
    // The log is what it is meant to be: debug level, librdkafka's configuration dump and
    // SASL exchange in it.
    assert!(log.contains("DEBUG"), "debug logging");
    assert!(
        log.contains("sasl.username") && log.contains("sasl.password"),
        "librdkafka's configuration dump is in the log"
    );
    written.add("the run's log (stderr)", log);
    let pipeline_file = sluice.file.clone();
    drop(sluice);

    // 3. `sluice check` and `sluice doctor` on the same file (run, in turn, side by side with
    // the cases of 4.).
    let file = pipeline_file.to_str().unwrap();
    let long = Duration::from_secs(120);
    let same_file = || -> Vec<Output> {
        let mut outputs = Vec::new();
        for args in [
            vec!["check", file],
            vec!["doctor", "--pipeline", file],
            vec!["doctor", "--pipeline", file, "--json"],
            vec!["slots", "--pipeline", file],
        ] {
            let (out, err) = run_sluice(&args, &[], long);
            outputs.push((format!("{args:?}"), out, err));
        }
        // `doctor` and `slots` with the URL from the environment.
        for args in [vec!["doctor"], vec!["slots"]] {
            let (out, err) = run_sluice(&args, &[("PG_URL", &tls_url)], long);
            outputs.push((format!("{args:?} (PG_URL)"), out, err));
        }
        outputs
    };

    // 4. Errors that echo connection settings, each in a file of its own.
    let pg_port = tls_url
        .split("127.0.0.1:")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .unwrap()
        .to_owned();
    let tls_dir = var("SLUICE_TLS_DIR");
    let closed_port = free_port();
    let key_value_url = format!(
        "host=127.0.0.1 port={pg_port} user=sluice_scram password={pg_password} dbname=postgres \
         sslmode=verify-full sslrootcert={tls_dir}/ca.crt"
    );
    let wrong_sasl_ref = format!("${{file:{}}}", wrong_sasl_file.display());
    let cases: Vec<(&str, String)> = vec![
        (
            "wrong PostgreSQL password",
            pipeline(
                &name,
                &state,
                &tls_url.replace(&pg_password, &wrong_pg_password),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "wrong SASL password",
            pipeline(
                &name,
                &state,
                &tls_url,
                &wrong_sasl_ref,
                debug,
                free_port(),
                &token_file,
            ),
        ),
        (
            "unreachable PostgreSQL",
            pipeline(
                &name,
                &state,
                &tls_url.replace(&pg_port, &closed_port.to_string()),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "key/value connection string",
            pipeline(
                &name,
                &state,
                &key_value_url,
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "key/value connection string, wrong password",
            pipeline(
                &name,
                &state,
                &key_value_url.replace(&pg_password, &wrong_pg_password),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "password in the URL's query string",
            pipeline(
                &name,
                &state,
                &format!(
                    "postgres://sluice_scram@127.0.0.1:{pg_port}/postgres?password={pg_password}&sslmode=verify-full&sslrootcert={tls_dir}/ca.crt"
                ),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "invalid sslmode next to the password",
            pipeline(
                &name,
                &state,
                &tls_url.replace("sslmode=verify-full", "sslmode=verify-everything"),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "invalid port next to the password",
            pipeline(
                &name,
                &state,
                &tls_url.replace(&pg_port, "notaport"),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
        (
            "invalid librdkafka value next to the password",
            pipeline(
                &name,
                &state,
                &tls_url,
                &sasl_ref,
                &format!("\"ssl.key.password\" = \"{wrong_sasl_password}\""),
                free_port(),
                &token_file,
            )
            .replace("SCRAM-SHA-512", "NOT-A-MECHANISM"),
        ),
        (
            "a secret where a number belongs",
            pipeline(
                &name,
                &state,
                &tls_url,
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            )
            .replace(
                "status_interval_ms = 200",
                &format!(
                    "status_interval_ms = \"${{file:{}}}\"",
                    wrong_sasl_file.display()
                ),
            ),
        ),
        (
            "a TOML syntax error on the password's line",
            pipeline(
                &name,
                &state,
                &format!("{tls_url}\" \"broken"),
                &sasl_ref,
                "",
                free_port(),
                &token_file,
            ),
        ),
    ];
    // The cases run side by side, and so do each case's three commands (most of their time
    // is spent waiting on connection timeouts: in turn, the wrong SASL password's took 15 s +
    // 10 s + 10 s). They all share the pipeline name and state of 1.
    let short = Duration::from_secs(60);
    let outputs: Vec<Vec<Output>> = tokio::task::block_in_place(|| {
        std::thread::scope(|scope| {
            let same_file = scope.spawn(same_file);
            let runs: Vec<_> = cases
                .iter()
                .enumerate()
                .flat_map(|(index, (case, text))| {
                    let file = write(&dir, &format!("case{index}.toml"), text);
                    [
                        (vec!["run"], Duration::from_secs(15)),
                        (vec!["check"], short),
                        (vec!["doctor", "--pipeline"], short),
                    ]
                    .map(|(command, timeout)| {
                        let file = file.clone();
                        scope.spawn(move || {
                            let mut args = command;
                            args.push(file.to_str().unwrap());
                            let (out, err) = run_sluice(&args, &[], timeout);
                            vec![(format!("{case}: {args:?}"), out, err)]
                        })
                    })
                })
                .collect();
            std::iter::once(same_file)
                .chain(runs)
                .map(|run| run.join().unwrap())
                .collect()
        })
    });
    for (what, out, err) in outputs.into_iter().flatten() {
        written.add(format!("{what} stdout"), out);
        written.add(format!("{what} stderr"), err);
    }

    // 5. Whatever sluice keeps under its state_dir.
    written.add_tree(&state);
    assert!(
        written.total_bytes() > 100_000,
        "the search covers a real amount of output: {} bytes",
        written.total_bytes()
    );
    let leaks = written.leaks(&secrets);
    assert!(
        leaks.is_empty(),
        "{} leaks:\n{}",
        leaks.len(),
        leaks.join("\n\n")
    );
    drop_slot_and_publication(&client, &name).await;
}

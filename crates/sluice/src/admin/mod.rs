//! The admin HTTP server, on loopback by default.
//!
//! - `GET /health`: the pipeline's state as JSON; 200 while it runs, pauses or restarts, 503
//!   once it has stopped on a failure.
//! - `GET /metrics`: Prometheus text; gauges that describe the moment (in-flight bytes and
//!   records) are read from the pipeline at scrape time.
//! - `GET /`: the status page (one HTML file, no build step) charting `/api/v1` data.
//! - `/api/v1/…`: JSON; with `admin.token` set, only with `Authorization: Bearer <token>`:
//!   - `GET  /api/v1/pipelines` — every pipeline with state, positions, lag, rates, latency,
//!     last error and restarts;
//!   - `GET  /api/v1/pipelines/{name}` — one of them;
//!   - `GET  /api/v1/pipelines/{name}/series` — the last ten minutes, one sample per second
//!     (throughput, lag, in-flight bytes, latency percentiles);
//!   - `GET  /api/v1/pipelines/{name}/doctor` — `sluice doctor`'s findings for the pipeline;
//!   - `POST /api/v1/pipelines/{name}/pause` — finish the in-flight records, confirm the
//!     watermark and stop reading until resumed;
//!   - `POST /api/v1/pipelines/{name}/resume` — resume a paused pipeline, or skip the backoff
//!     of a restarting one;
//!   - `POST /api/v1/pipelines/{name}/restart` — stop gracefully and start again at once.
//!
//! The admin server only serves what the runtime holds ([`crate::runtime`]): the pipeline's
//! [`StatusBoard`] and the Prometheus recorder's handle.

mod page;
mod server;

pub use server::Limits;
#[cfg(test)]
pub(crate) use server::limited;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::runtime::status::{PipelineState, StatusBoard, unix_ms};

/// `sluice doctor` for the pipeline this process runs, whatever its kind: its findings as
/// JSON. The command line's edge (`app.rs`) makes it from the pipeline's configuration, so the
/// admin server knows no pipeline kind.
pub type Doctor = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = serde_json::Value> + Send>>
        + Send
        + Sync,
>;

#[derive(Clone)]
struct AdminState {
    prometheus: PrometheusHandle,
    board: Arc<StatusBoard>,
    token: Option<Arc<str>>,
    doctor: Option<Doctor>,
}

/// The admin routes; `token` guards `/api/v1`; `doctor` lets the API run `sluice doctor`.
pub fn router(
    prometheus: PrometheusHandle,
    board: Arc<StatusBoard>,
    token: Option<String>,
    doctor: Option<Doctor>,
) -> Router {
    Router::new()
        .route("/", get(status_page))
        .route("/health", get(health))
        .route("/metrics", get(render_metrics))
        .route("/api/v1/pipelines", get(list_pipelines))
        .route("/api/v1/pipelines/{name}", get(one_pipeline))
        .route("/api/v1/pipelines/{name}/series", get(pipeline_series))
        .route("/api/v1/pipelines/{name}/doctor", get(pipeline_doctor))
        .route(
            "/api/v1/pipelines/{name}/snapshots",
            post(request_snapshot).delete(stop_snapshot),
        )
        .route("/api/v1/pipelines/{name}/{action}", post(pipeline_action))
        .with_state(AdminState {
            prometheus,
            board,
            token: token.map(Arc::from),
            doctor,
        })
}

async fn status_page() -> Html<&'static str> {
    Html(page::STATUS_PAGE)
}

async fn health(State(state): State<AdminState>) -> impl IntoResponse {
    let status = state.board.snapshot();
    let code = if status.state == PipelineState::Failed {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    };
    (code, Json(status))
}

async fn render_metrics(State(state): State<AdminState>) -> impl IntoResponse {
    state.board.snapshot();
    state.prometheus.render()
}

fn error(code: StatusCode, message: String) -> Response {
    (code, Json(serde_json::json!({ "error": message }))).into_response()
}

/// The rejection of a request: a missing or wrong bearer token (compared in constant time),
/// or an unknown pipeline `name`; `None` lets it through.
fn reject(state: &AdminState, headers: &HeaderMap, name: Option<&str>) -> Option<Response> {
    unauthorized(state, headers).or_else(|| name.and_then(|name| unknown(state, name)))
}

fn unauthorized(state: &AdminState, headers: &HeaderMap) -> Option<Response> {
    let token = state.token.as_ref()?;
    let given = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let same = given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        return None;
    }
    let mut response = error(
        StatusCode::UNAUTHORIZED,
        "missing or wrong bearer token: send `Authorization: Bearer <admin.token>`".into(),
    );
    response.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        header::HeaderValue::from_static("Bearer"),
    );
    Some(response)
}

fn unknown(state: &AdminState, name: &str) -> Option<Response> {
    let pipeline = state.board.pipeline();
    (pipeline != name).then(|| {
        error(
            StatusCode::NOT_FOUND,
            format!("no pipeline named {name:?}; this process runs {pipeline:?}"),
        )
    })
}

async fn list_pipelines(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    if let Some(response) = reject(&state, &headers, None) {
        return response;
    }
    Json(serde_json::json!({ "pipelines": [state.board.snapshot()] })).into_response()
}

async fn one_pipeline(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Some(response) = reject(&state, &headers, Some(&name)) {
        return response;
    }
    Json(state.board.snapshot()).into_response()
}

async fn pipeline_series(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Some(response) = reject(&state, &headers, Some(&name)) {
        return response;
    }
    Json(serde_json::json!({ "pipeline": name, "samples": state.board.series() })).into_response()
}

async fn pipeline_doctor(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if let Some(response) = reject(&state, &headers, Some(&name)) {
        return response;
    }
    let Some(doctor) = state.doctor.clone() else {
        return error(
            StatusCode::NOT_FOUND,
            "no pipeline configuration to diagnose (sluice doctor inspects PostgreSQL and MySQL/MariaDB → Kafka pipelines)".into(),
        );
    };
    let findings = doctor().await;
    Json(serde_json::json!({ "pipeline": name, "findings": findings })).into_response()
}

async fn pipeline_action(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path((name, action)): Path<(String, String)>,
) -> Response {
    if let Some(response) = reject(&state, &headers, Some(&name)) {
        return response;
    }
    let board = &state.board;
    let current = board.state();
    if matches!(current, PipelineState::Failed | PipelineState::Stopped) {
        return error(
            StatusCode::CONFLICT,
            format!(
                "pipeline {name:?} is {}: the process is exiting; start it again with `sluice run`",
                current.name()
            ),
        );
    }
    match action.as_str() {
        "pause" => board.pause(),
        "resume" => board.resume(),
        "restart" => board.restart(),
        other => {
            return error(
                StatusCode::NOT_FOUND,
                format!("unknown action {other:?}: expected pause, resume or restart"),
            );
        }
    }
    tracing::info!(pipeline = %name, action = %action, "admin request");
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({
            "pipeline": name,
            "requested": action,
            "state": current,
        })),
    )
        .into_response()
}

/// `POST /api/v1/pipelines/{name}/snapshots`: `{"tables": ["schema.table", …], "filter":
/// "SQL condition" (optional, for every table), "id": "…" (optional)}`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct SnapshotBody {
    #[serde(default)]
    tables: Vec<String>,
    #[serde(default)]
    filter: Option<String>,
    #[serde(default)]
    id: Option<String>,
    /// Republication: tombstones for the keys in the topic that are gone from the table.
    #[serde(default)]
    tombstones: bool,
}

/// How long a snapshot request waits for the pipeline to record it before answering.
const SIGNAL_RECORD_TIMEOUT: Duration = Duration::from_secs(10);

async fn request_snapshot(
    state: State<AdminState>,
    headers: HeaderMap,
    name: Path<String>,
    body: Result<Json<SnapshotBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    snapshot_signal(state, headers, name, body, false).await
}

async fn stop_snapshot(
    state: State<AdminState>,
    headers: HeaderMap,
    name: Path<String>,
    body: Result<Json<SnapshotBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    snapshot_signal(state, headers, name, body, true).await
}

async fn snapshot_signal(
    State(state): State<AdminState>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: Result<Json<SnapshotBody>, axum::extract::rejection::JsonRejection>,
    stop: bool,
) -> Response {
    use crate::runtime::status::Signal;
    if let Some(response) = reject(&state, &headers, Some(&name)) {
        return response;
    }
    if !state.board.takes_snapshot_signals_now() {
        return error(
            StatusCode::NOT_IMPLEMENTED,
            format!(
                "pipeline {name:?} takes no snapshot requests: incremental snapshots need a PostgreSQL source, or a MySQL/MariaDB source with source.mysql.signal_table set (its watermarks are written there)"
            ),
        );
    }
    let body = match body {
        Ok(Json(body)) => body,
        Err(_) if stop => SnapshotBody {
            tables: Vec::new(),
            filter: None,
            id: None,
            tombstones: false,
        },
        Err(rejection) => {
            // A body over the server's cap (src/admin/server.rs) keeps its 413.
            let code = match rejection.status() {
                StatusCode::PAYLOAD_TOO_LARGE => StatusCode::PAYLOAD_TOO_LARGE,
                _ => StatusCode::BAD_REQUEST,
            };
            return error(
                code,
                format!(
                    "{}: expected {{\"tables\": [\"schema.table\"], \"filter\": \"optional SQL condition\", \"tombstones\": false}}",
                    rejection.body_text()
                ),
            );
        }
    };
    if let Some(bad) = body
        .tables
        .iter()
        .find(|t| crate::config::parse_table_name(t).is_none())
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!("tables: {bad:?} is not schema.table"),
        );
    }
    if !stop && body.tables.is_empty() {
        return error(
            StatusCode::BAD_REQUEST,
            "tables is empty: name the tables to snapshot, e.g. {\"tables\": [\"public.orders\"]}"
                .into(),
        );
    }
    if body.tombstones && !state.board.takes_republication_now() {
        return error(
            StatusCode::BAD_REQUEST,
            "tombstones (republication) are supported for PostgreSQL sources only: request the snapshot without them"
                .into(),
        );
    }
    if body.tombstones && body.filter.is_some() {
        return error(
            StatusCode::BAD_REQUEST,
            "tombstones with a filter would delete the rows outside the filter from the topic: \
             republish the whole table (no filter) to have tombstones"
                .into(),
        );
    }
    if let Some(filter) = &body.filter
        && let Err(problem) =
            crate::sql::check_condition(state.board.snapshot_filter_dialect(), filter)
    {
        return error(
            StatusCode::BAD_REQUEST,
            format!(
                "filter {problem}: a filter is one SQL condition on the tables' rows (no ';', no comments, no dollar quotes, quotes and parentheses balanced), e.g. {{\"filter\": \"region = 'eu'\"}}"
            ),
        );
    }
    let id = body.id.unwrap_or_else(|| format!("api-{}", unix_ms()));
    let signal = if stop {
        Signal::Stop {
            id: id.clone(),
            tables: body.tables,
        }
    } else {
        Signal::Snapshot {
            id: id.clone(),
            tables: body
                .tables
                .into_iter()
                .map(|t| (t, body.filter.clone()))
                .collect(),
            tombstones: body.tombstones,
        }
    };
    tracing::info!(pipeline = %name, id = %id, stop, "admin request: incremental snapshot");
    let seq = state.board.signal(signal);
    // Answer once the request is in the state file, so an accepted request survives a crash;
    // a pipeline that is not running (restarting, backing off) takes it when it runs again.
    let recorded = state
        .board
        .wait_signal_recorded(seq, SIGNAL_RECORD_TIMEOUT)
        .await;
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({
            "pipeline": name,
            "id": id,
            "requested": if stop { "stop-snapshot" } else { "execute-snapshot" },
            "recorded": recorded,
            "detail": if recorded {
                "taken by the pipeline and recorded in its state file: it survives a crash (tables the pipeline does not capture are skipped; see its log)"
            } else {
                "queued: the pipeline has not recorded it yet (is it running? see GET /health); it is taken when the pipeline runs, but is lost if sluice stops first"
            },
            "progress": "see incremental_snapshot in GET /api/v1/pipelines/{name}",
        })),
    )
        .into_response()
}

/// The admin server's TLS settings from `admin.tls_cert` and `admin.tls_key`.
///
/// # Errors
///
/// A file that cannot be read or holds no certificate / key, or a key that does not match the
/// certificate; the message names the key to fix.
pub fn tls_config(cert: &str, key: &str) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| {
            anyhow::anyhow!(
                "admin.tls_cert = {cert:?}: cannot read a PEM certificate from it: {e} (set admin.tls_cert to the PEM file of the admin server's certificate)"
            )
        })?;
    if certs.is_empty() {
        anyhow::bail!(
            "admin.tls_cert = {cert:?}: the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        );
    }
    let private_key = PrivateKeyDer::from_pem_file(key).map_err(|e| {
        anyhow::anyhow!(
            "admin.tls_key = {key:?}: cannot read a PEM private key from it: {e} (set admin.tls_key to the PEM file of the certificate's private key)"
        )
    })?;
    let provider = crate::crypto::provider();
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| anyhow::anyhow!("cannot set up TLS for the admin server: {e}"))?
        .with_no_client_auth()
        .with_single_cert(certs, private_key)
        .map_err(|e| {
            anyhow::anyhow!(
                "admin.tls_key = {key:?} does not go with admin.tls_cert = {cert:?}: {e} (the key must be the certificate's private key)"
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Serves the admin routes on `listen` until `shutdown`, over HTTPS when `tls` is given, within
/// [`Limits::DEFAULT`] (connection cap, head read timeout, body cap: see [`Limits`]); also
/// samples the pipeline once a second for the charts and drains histogram samples so they
/// never pile up between scrapes.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve(
    listen: SocketAddr,
    prometheus: PrometheusHandle,
    board: Arc<StatusBoard>,
    token: Option<String>,
    doctor: Option<Doctor>,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        anyhow::anyhow!("cannot listen on admin.listen = {listen}: {e} (choose a free port)")
    })?;
    tracing::info!(
        address = %listener.local_addr()?,
        scheme = if tls.is_some() { "https" } else { "http" },
        "admin server listening"
    );
    let upkeep = prometheus.clone();
    let upkeep_board = Arc::clone(&board);
    let upkeep_shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        while upkeep_shutdown
            .run_until_cancelled(tick.tick())
            .await
            .is_some()
        {
            upkeep_board.sample();
            upkeep.run_upkeep();
        }
    });
    let app = router(prometheus, board, token, doctor);
    Ok(tokio::spawn(server::run(
        listener,
        app,
        tls,
        server::Limits::DEFAULT,
        shutdown,
    )))
}

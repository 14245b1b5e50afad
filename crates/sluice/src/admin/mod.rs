//! The admin HTTP server: `/health` and `/metrics`, on loopback by default.
//!
//! `/metrics` renders the Prometheus text format from the process's recorder; gauges that
//! describe the moment (in-flight bytes and records) are read from the pipeline at scrape
//! time. `/health` answers with the pipeline's state as JSON: 200 while it runs or reconnects,
//! 503 once it has stopped on a fatal error.

pub mod metrics;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use serde::Serialize;
use sluice_engine::InFlightBudget;
use tokio_util::sync::CancellationToken;

/// Installs the process's Prometheus recorder, with `pipeline` as a global label.
///
/// # Errors
///
/// When a recorder was installed before.
pub fn install_recorder(pipeline: &str) -> anyhow::Result<PrometheusHandle> {
    let handle = PrometheusBuilder::new()
        .add_global_label("pipeline", pipeline)
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), metrics::LATENCY_BUCKETS)?
        .set_buckets_for_metric(
            Matcher::Full(metrics::RECORDS_PER_REQUEST.into()),
            metrics::COUNT_BUCKETS,
        )?
        .install_recorder()?;
    metrics::describe();
    Ok(handle)
}

/// The pipeline's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PipelineState {
    /// Connecting and setting up.
    Starting,
    /// Streaming changes.
    Streaming,
    /// Waiting before a reconnect after a retryable failure.
    Backoff,
    /// Stopped on a fatal error.
    Failed,
    /// Stopped on request.
    Stopped,
}

/// What `/health` shows; written by the pipeline, read by the server.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineStatus {
    /// The pipeline's name.
    pub pipeline: String,
    /// Its state.
    pub state: PipelineState,
    /// Unix milliseconds of the last state change.
    pub since_unix_ms: u64,
    /// Reconnects so far.
    pub reconnects: u64,
    /// The last error, with its causes.
    pub last_error: Option<String>,
    /// The operator's fix for the last fatal error.
    pub hint: Option<String>,
    /// The watermark LSN.
    pub watermark_lsn: Option<String>,
    /// Whether librdkafka reports every broker down.
    pub kafka_brokers_down: bool,
    /// Row changes in flight.
    pub inflight_records: u64,
    /// Bytes in flight.
    pub inflight_bytes: u64,
}

/// Shared status of one pipeline.
#[derive(Debug)]
pub struct StatusBoard {
    status: Mutex<PipelineStatus>,
    budget: Mutex<Option<InFlightBudget>>,
}

impl StatusBoard {
    /// A board for `pipeline`, in [`PipelineState::Starting`].
    pub fn new(pipeline: &str) -> Arc<Self> {
        Arc::new(Self {
            status: Mutex::new(PipelineStatus {
                pipeline: pipeline.to_owned(),
                state: PipelineState::Starting,
                since_unix_ms: unix_ms(),
                reconnects: 0,
                last_error: None,
                hint: None,
                watermark_lsn: None,
                kafka_brokers_down: false,
                inflight_records: 0,
                inflight_bytes: 0,
            }),
            budget: Mutex::new(None),
        })
    }

    /// Changes the state.
    pub fn set_state(&self, state: PipelineState) {
        self.update(|status| {
            if status.state != state {
                status.state = state;
                status.since_unix_ms = unix_ms();
            }
        });
        ::metrics::gauge!(metrics::PIPELINE_UP).set(if state == PipelineState::Streaming {
            1.0
        } else {
            0.0
        });
    }

    /// Applies `change` to the status.
    pub fn update(&self, change: impl FnOnce(&mut PipelineStatus)) {
        if let Ok(mut status) = self.status.lock() {
            change(&mut status);
        }
    }

    /// Attaches the running pipeline's budget so scrapes read it live.
    pub fn set_budget(&self, budget: Option<InFlightBudget>) {
        if let Ok(mut slot) = self.budget.lock() {
            *slot = budget;
        }
    }

    /// A snapshot of the status with live in-flight figures; also refreshes their gauges.
    pub fn snapshot(&self) -> PipelineStatus {
        let budget = self.budget.lock().ok().and_then(|b| b.clone());
        let mut status = self
            .status
            .lock()
            .map(|s| s.clone())
            .unwrap_or_else(|poisoned| poisoned.into_inner().clone());
        if let Some(budget) = budget {
            status.inflight_bytes = budget.in_flight_bytes();
            status.inflight_records = budget.in_flight_records();
            ::metrics::gauge!(metrics::INFLIGHT_BYTES).set(status.inflight_bytes as f64);
            ::metrics::gauge!(metrics::INFLIGHT_RECORDS).set(status.inflight_records as f64);
            ::metrics::gauge!(metrics::INFLIGHT_BYTES_LIMIT).set(f64::from(budget.max_bytes()));
        }
        status
    }
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[derive(Clone)]
struct AdminState {
    prometheus: PrometheusHandle,
    board: Arc<StatusBoard>,
}

/// The admin routes.
pub fn router(prometheus: PrometheusHandle, board: Arc<StatusBoard>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(render_metrics))
        .with_state(AdminState { prometheus, board })
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

/// Serves the admin routes on `listen` until `shutdown`; also drains histogram samples
/// periodically so they never pile up between scrapes.
///
/// # Errors
///
/// When the address cannot be bound.
pub async fn serve(
    listen: SocketAddr,
    prometheus: PrometheusHandle,
    board: Arc<StatusBoard>,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| {
        anyhow::anyhow!("cannot listen on admin.listen = {listen}: {e} (choose a free port)")
    })?;
    tracing::info!(address = %listener.local_addr()?, "admin server listening");
    let upkeep = prometheus.clone();
    let upkeep_shutdown = shutdown.clone();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        while upkeep_shutdown
            .run_until_cancelled(tick.tick())
            .await
            .is_some()
        {
            upkeep.run_upkeep();
        }
    });
    let app = router(prometheus, board);
    Ok(tokio::spawn(async move {
        let result = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await;
        if let Err(error) = result {
            tracing::error!(error = %error, "admin server failed");
        }
    }))
}

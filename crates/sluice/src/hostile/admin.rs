//! Admin API requests: any body (any bytes, JSON-ish text, deep nesting, wrong kinds), content
//! type, token, path and method through the real routes and the server's limits; a response
//! that is not a 5xx, and a valid snapshot request queued as what it says.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use tower::Service;

use super::{json_like, nested_arrays, nested_objects};
use crate::admin::{Limits, limited, router};
use crate::runtime::status::{Signal, StatusBoard};

const TOKEN: &str = "s3cret";

fn app() -> (axum::Router, std::sync::Arc<StatusBoard>) {
    let board = StatusBoard::new("p", "on-failure");
    board.take_snapshot_signals(true, crate::sql::SqlDialect::Postgres);
    // Every queued signal counts as recorded: the handlers answer at once.
    board.signals_recorded(u64::MAX);
    let prometheus = metrics_exporter_prometheus::PrometheusBuilder::new()
        .build_recorder()
        .handle();
    let app = router(
        prometheus,
        std::sync::Arc::clone(&board),
        Some(TOKEN.to_owned()),
        None,
    );
    (limited(app, Limits::DEFAULT), board)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..96),
        json_like().prop_map(String::into_bytes),
        (
            proptest::collection::vec(
                prop_oneof!["[a-z_]{1,5}\\.[a-z_]{1,5}", any::<String>()],
                0..3
            ),
            proptest::option::of(any::<String>()),
            proptest::option::of(any::<String>()),
            any::<bool>(),
            proptest::option::of(Just(serde_json::json!([1, {"x": null}]))),
        )
            .prop_map(|(tables, filter, id, tombstones, extra)| {
                let mut body = serde_json::json!({"tables": tables, "tombstones": tombstones});
                if let Some(filter) = filter {
                    body["filter"] = filter.into();
                }
                if let Some(id) = id {
                    body["id"] = id.into();
                }
                if let Some(extra) = extra {
                    body["extra"] = extra;
                }
                body.to_string().into_bytes()
            }),
    ]
}

fn request() -> impl Strategy<Value = Request<Body>> {
    (
        prop::sample::select(vec![Method::GET, Method::POST, Method::DELETE, Method::PUT]),
        prop_oneof![
            prop::sample::select(vec![
                "/api/v1/pipelines/p/snapshots",
                "/api/v1/pipelines/p/pause",
                "/api/v1/pipelines/p/resume",
                "/api/v1/pipelines/p",
                "/api/v1/pipelines/q/snapshots",
                "/api/v1/pipelines/p/series",
                "/api/v1/pipelines",
                "/health",
                "/",
            ])
            .prop_map(str::to_owned),
            "/api/v1/pipelines/([a-z0-9.]|%[0-9A-F]{2}){0,6}(/([a-z.]|%[0-9A-F]{2}){0,6})?",
        ],
        prop::sample::select(vec![
            Some(format!("Bearer {TOKEN}")),
            Some("Bearer wrong".to_owned()),
            Some("Basic x".to_owned()),
            None,
        ]),
        prop::sample::select(vec![Some("application/json"), Some("text/plain"), None]),
        body(),
    )
        .prop_map(|(method, path, auth, content_type, body)| {
            let mut request = Request::builder().method(method).uri(path);
            if let Some(auth) = auth {
                request = request.header("authorization", auth);
            }
            if let Some(content_type) = content_type {
                request = request.header("content-type", content_type);
            }
            request.body(Body::from(body)).expect("a request")
        })
}

async fn send(app: &mut axum::Router, request: Request<Body>) -> (StatusCode, Vec<u8>) {
    let response = app.call(request).await.expect("infallible");
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .expect("a response body");
    (status, body.to_vec())
}

/// Any request: an answer, never a server error (the doctor, which needs servers, is not
/// configured here: 404).
#[test]
fn admin_requests_never_fail_the_server() {
    let runtime = runtime();
    let (app, board) = app();
    let mut runner = TestRunner::new(super::config());
    runner
        .run(&request(), |request| {
            let mut app = app.clone();
            let (status, body) = runtime.block_on(send(&mut app, request));
            prop_assert!(
                !status.is_server_error() || status == StatusCode::NOT_IMPLEMENTED,
                "{status}: {}",
                String::from_utf8_lossy(&body)
            );
            board.take_signals();
            Ok(())
        })
        .unwrap();
}

/// A valid snapshot request is queued as it says: its tables, each with its filter.
#[test]
fn admin_snapshot_requests_round_trip() {
    let runtime = runtime();
    let (app, board) = app();
    let mut runner = TestRunner::new(super::config());
    let strategy = (
        proptest::collection::vec("[a-z_]{1,5}\\.[a-z_]{1,5}", 1..4),
        // Conditions any filter check accepts (the property is about the body, not SQL).
        proptest::option::of("[a-z_]{1,6} (<|>|=) [0-9]{1,4}"),
        any::<String>(),
    );
    runner
        .run(&strategy, |(tables, filter, id)| {
            let body = serde_json::json!({"tables": tables, "filter": filter, "id": id});
            let request = Request::post("/api/v1/pipelines/p/snapshots")
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(Body::from(body.to_string()))
                .expect("a request");
            let mut app = app.clone();
            let (status, _) = runtime.block_on(send(&mut app, request));
            prop_assert_eq!(status, StatusCode::ACCEPTED);
            let queued: Vec<Signal> = board.take_signals().into_iter().map(|(_, s)| s).collect();
            let expected = Signal::Snapshot {
                id,
                tables: tables.into_iter().map(|t| (t, filter.clone())).collect(),
                tombstones: false,
            };
            prop_assert_eq!(queued, vec![expected]);
            Ok(())
        })
        .unwrap();
}

/// Deep nesting and a body over the cap: 400 and 413, on a small stack.
#[test]
fn deep_and_large_admin_bodies_are_refused() {
    super::on_small_stack(|| {
        let runtime = runtime();
        let (mut app, _board) = app();
        let post = |body: Vec<u8>| {
            Request::post("/api/v1/pipelines/p/snapshots")
                .header("authorization", format!("Bearer {TOKEN}"))
                .header("content-type", "application/json")
                .body(Body::from(body))
                .expect("a request")
        };
        for deep in [
            nested_arrays(100_000, ""),
            nested_objects(100_000, "1"),
            format!("{{\"tables\":{}}}", nested_arrays(10_000, "")),
        ] {
            let (status, _) = runtime.block_on(send(&mut app, post(deep.into_bytes())));
            assert!(
                status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE,
                "{status}"
            );
        }
        let large = format!(
            "{{\"tables\":[\"a.b\"],\"filter\":\"{}\"}}",
            "x".repeat(Limits::DEFAULT.max_body_bytes)
        );
        let (status, _) = runtime.block_on(send(&mut app, post(large.into_bytes())));
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    });
}

//! The admin server's connections, bounded against slow and hostile clients.
//!
//! - **Connection cap** ([`Limits::max_connections`]): at the cap, a new connection evicts the
//!   oldest *idle* one (still in its TLS handshake, still sending its request head, or kept
//!   alive between requests); when every held connection has a request in progress, the new
//!   one is closed at once. A client holding a thousand idle connections therefore cannot keep
//!   `/health` out: each new connection, `/health`'s too, takes the place of the oldest idle.
//!   (nginx drains idle keep-alive connections the same way when it runs out of them.)
//! - **Head read timeout** ([`Limits::header_read_timeout`]): hyper's own, from the connection's
//!   first poll: a client that has not sent a whole request head by then is cut off (a
//!   slowloris sending a header byte a second); the TLS handshake has the same deadline.
//! - **Body read timeout** ([`Limits::body_read_timeout`]): a request's whole body is read
//!   before the request reaches its handler, and must arrive within this time of its head;
//!   otherwise 408 and the connection is closed (a client sending its body a byte a second).
//!   While its body is being read a connection counts as *idle* for the connection cap, so
//!   connections held open mid-body are evicted like slow heads: only a request whose body is
//!   all there, in its handler, keeps its connection from being evicted.
//! - **Body cap** ([`Limits::max_body_bytes`]): 413 for a larger `Content-Length` at once, or
//!   once a streamed body passes the cap (checked while the body is read, and again by
//!   tower-http's `RequestBodyLimit` around the routes).
//! - **Request timeout** ([`Limits::request_timeout`]): tower-http's `Timeout`: 408 when a
//!   request's handler takes longer.
//!
//! Each connection is its own task, so a slow one holds up no other; the pipelines run on
//! their own tasks and never wait on the admin server.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::pin::Pin;

use axum::Router;
use axum::body::{Body, Bytes, HttpBody as _};
use axum::http::{HeaderValue, Request, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use bytes::BytesMut;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tower::Service;

/// The admin server's limits against slow or hostile clients.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections held at once (TLS handshakes included).
    pub max_connections: usize,
    /// Time a connection has to finish its TLS handshake, and then each request head.
    pub header_read_timeout: Duration,
    /// Largest request body accepted; larger ones get 413.
    pub max_body_bytes: usize,
    /// Time a request's whole body has to arrive after its head; then 408.
    pub body_read_timeout: Duration,
    /// Time a request's handler has; then 408.
    pub request_timeout: Duration,
}

impl Limits {
    /// The limits `sluice run` serves with.
    pub const DEFAULT: Self = Self {
        max_connections: 128,
        header_read_timeout: Duration::from_secs(10),
        max_body_bytes: 64 * 1024,
        body_read_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(60),
    };
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The routes with the body cap and the request timeout layered on.
pub(crate) fn limited(router: Router, limits: Limits) -> Router {
    router
        .layer(tower_http::limit::RequestBodyLimitLayer::new(
            limits.max_body_bytes,
        ))
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            limits.request_timeout,
        ))
}

/// One held connection: requests in progress, and the token that closes it.
struct Held {
    busy: Arc<AtomicUsize>,
    close: CancellationToken,
}

/// The held connections, oldest first (ids grow with each accept).
#[derive(Default)]
struct Registry {
    held: Mutex<BTreeMap<u64, Held>>,
}

impl Registry {
    /// Makes room for one more connection under `max`: evicts the oldest idle connection when
    /// full; `false` when every held connection is busy (the new one is then refused).
    fn make_room(&self, max: usize) -> bool {
        let mut held = self
            .held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if held.len() < max {
            return true;
        }
        let idle = held
            .iter()
            .find(|(_, h)| h.busy.load(Ordering::Acquire) == 0)
            .map(|(&id, _)| id);
        match idle.and_then(|id| held.remove(&id)) {
            Some(evicted) => {
                evicted.close.cancel();
                true
            }
            None => false,
        }
    }

    fn insert(&self, id: u64, held: Held) {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id, held);
    }

    fn remove(&self, id: u64) {
        self.held
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&id);
    }
}

/// Marks a connection busy while a request is in progress.
struct BusyGuard(Arc<AtomicUsize>);

impl BusyGuard {
    fn enter(busy: &Arc<AtomicUsize>) -> Self {
        busy.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(busy))
    }
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A refused request's response; the connection closes after it (the rest of the body is
/// never read).
fn refusal((status, text): (StatusCode, String)) -> Response {
    let mut response = (status, text).into_response();
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Reads a request's whole body within [`Limits::body_read_timeout`] and
/// [`Limits::max_body_bytes`]; otherwise the status (408, 413 or 400) and text to answer with.
async fn read_body(mut body: Incoming, limits: Limits) -> Result<Bytes, (StatusCode, String)> {
    let refuse = |status: StatusCode, text: String| (status, text);
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is larger than {} bytes",
                limits.max_body_bytes
            ),
        )
    };
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    if body
        .size_hint()
        .exact()
        .is_some_and(|length| length > limits.max_body_bytes as u64)
    {
        return Err(too_large());
    }
    let read = async {
        let mut buffer = BytesMut::new();
        while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await
        {
            let frame = frame.map_err(|error| {
                refuse(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {error}"),
                )
            })?;
            if let Ok(data) = frame.into_data() {
                if buffer.len() + data.len() > limits.max_body_bytes {
                    return Err(too_large());
                }
                buffer.extend_from_slice(&data);
            }
        }
        Ok(buffer.freeze())
    };
    tokio::time::timeout(limits.body_read_timeout, read)
        .await
        .unwrap_or_else(|_| {
            Err(refuse(
                StatusCode::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} ms",
                    limits.body_read_timeout.as_millis()
                ),
            ))
        })
}

/// Serves `app` on `listener` until `shutdown`, over TLS when `tls` is given, within `limits`;
/// then lets the open connections finish their requests (for at most a few seconds).
pub(super) async fn run(
    listener: TcpListener,
    app: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let app = limited(app, limits);
    let acceptor = tls.map(tokio_rustls::TlsAcceptor::from);
    let registry = Arc::new(Registry::default());
    let mut connections = JoinSet::new();
    let mut next_id = 0u64;
    loop {
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: try again shortly.
                tracing::debug!(error = %error, "admin server: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if !registry.make_room(limits.max_connections) {
            tracing::debug!(%peer, max = limits.max_connections, "admin server: every connection busy, refused one");
            drop(tcp);
            continue;
        }
        let id = next_id;
        next_id += 1;
        let held = Held {
            busy: Arc::new(AtomicUsize::new(0)),
            close: CancellationToken::new(),
        };
        let connection = Connection {
            busy: Arc::clone(&held.busy),
            close: held.close.clone(),
            app: app.clone(),
            limits,
            shutdown: shutdown.clone(),
            peer,
        };
        registry.insert(id, held);
        let registry = Arc::clone(&registry);
        let acceptor = acceptor.clone();
        connections.spawn(async move {
            connection.serve(tcp, acceptor).await;
            registry.remove(id);
        });
    }
    drop(listener);
    let drained = tokio::time::timeout(Duration::from_secs(5), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::debug!(
            open = connections.len(),
            "admin server: closing the connections still open at shutdown"
        );
        connections.abort_all();
    }
}

/// One accepted connection.
struct Connection {
    busy: Arc<AtomicUsize>,
    close: CancellationToken,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
    peer: SocketAddr,
}

impl Connection {
    async fn serve(self, tcp: TcpStream, acceptor: Option<tokio_rustls::TlsAcceptor>) {
        let _ = tcp.set_nodelay(true);
        let Some(acceptor) = acceptor else {
            return self.http(tcp).await;
        };
        let handshake = tokio::select! {
            () = self.close.cancelled() => return,
            handshake = tokio::time::timeout(self.limits.header_read_timeout, acceptor.accept(tcp)) => handshake,
        };
        match handshake {
            Ok(Ok(tls)) => self.http(tls).await,
            Ok(Err(error)) => {
                tracing::debug!(peer = %self.peer, error = %error, "admin server: TLS handshake failed");
            }
            Err(_) => {
                tracing::debug!(peer = %self.peer, "admin server: TLS handshake timed out");
            }
        }
    }

    async fn http<I>(self, io: I)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let busy = Arc::clone(&self.busy);
        let app = self.app.clone();
        let limits = self.limits;
        let service = hyper::service::service_fn(move |request: Request<Incoming>| {
            let busy = Arc::clone(&busy);
            let mut app = app.clone();
            async move {
                // The body first, under its deadline and cap: until it is all there the
                // connection is idle for the connection cap (evictable).
                let (parts, body) = request.into_parts();
                let body = match read_body(body, limits).await {
                    Ok(body) => body,
                    Err(refused) => return Ok(refusal(refused)),
                };
                let guard = BusyGuard::enter(&busy);
                let response = app.call(Request::from_parts(parts, Body::from(body))).await;
                drop(guard);
                response
            }
        });
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(TokioTimer::new())
            .header_read_timeout(self.limits.header_read_timeout);
        let connection = builder.serve_connection(TokioIo::new(io), service);
        let mut connection = std::pin::pin!(connection);
        let mut draining = false;
        loop {
            tokio::select! {
                result = connection.as_mut() => {
                    if let Err(error) = result {
                        tracing::debug!(peer = %self.peer, error = %error, "admin server: connection ended");
                    }
                    return;
                }
                () = self.close.cancelled() => {
                    tracing::debug!(peer = %self.peer, "admin server: idle connection closed to make room");
                    return;
                }
                () = self.shutdown.cancelled(), if !draining => {
                    draining = true;
                    connection.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn test_limits() -> Limits {
        Limits {
            max_connections: 8,
            header_read_timeout: Duration::from_millis(500),
            max_body_bytes: 1024,
            body_read_timeout: Duration::from_secs(1),
            request_timeout: Duration::from_secs(2),
        }
    }

    fn app() -> Router {
        Router::new()
            .route("/health", get(|| async { "ok" }))
            .route(
                "/echo",
                post(|body: axum::body::Bytes| async move { body.len().to_string() }),
            )
            .route(
                "/json",
                post(|axum::Json(v): axum::Json<serde_json::Value>| async move { v.to_string() }),
            )
            .route(
                "/slow",
                get(|| async {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    "slow"
                }),
            )
    }

    async fn start(limits: Limits) -> (SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(run(listener, app(), None, limits, shutdown.clone()));
        (address, shutdown, server)
    }

    /// Sends `request` on a new connection and reads the response until the server closes it
    /// (the requests say `Connection: close`); the status code and the whole response.
    async fn exchange(address: SocketAddr, request: &[u8]) -> (u16, String) {
        let mut stream = TcpStream::connect(address).await.expect("connect");
        stream.write_all(request).await.expect("write");
        let mut response = Vec::new();
        let _ = stream.read_to_end(&mut response).await;
        let text = String::from_utf8_lossy(&response).into_owned();
        let code = text
            .get(9..12)
            .and_then(|code| code.parse().ok())
            .unwrap_or(0);
        (code, text)
    }

    async fn health(address: SocketAddr) -> u16 {
        tokio::time::timeout(
            Duration::from_secs(3),
            exchange(
                address,
                b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            ),
        )
        .await
        .expect("/health answered within 3 s")
        .0
    }

    /// Whether the server closed `stream` (EOF or reset) within `within`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 256];
        match tokio::time::timeout(within, stream.read(&mut buf)).await {
            Ok(Ok(0) | Err(_)) => true,
            Ok(Ok(_)) => {
                // A 408 response before the close counts too.
                tokio::time::timeout(within, stream.read_to_end(&mut Vec::new()))
                    .await
                    .is_ok()
            }
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn a_body_over_the_cap_gets_413() {
        let (address, shutdown, server) = start(test_limits()).await;
        // Declared too large: refused before it is read.
        let body = vec![b'x'; 2048];
        let mut request = format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        request.extend_from_slice(&body);
        let (code, _) = exchange(address, &request).await;
        assert_eq!(code, 413);
        // Streamed (chunked, no length): cut once it passes the cap.
        let mut request =
            b"POST /json HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                .to_vec();
        for _ in 0..4 {
            request.extend_from_slice(b"200\r\n");
            request.extend_from_slice(&[b' '; 0x200]);
            request.extend_from_slice(b"\r\n");
        }
        request.extend_from_slice(b"0\r\n\r\n");
        let (code, _) = exchange(address, &request).await;
        assert_eq!(code, 413);
        // Under the cap: served.
        let (code, text) = exchange(
            address,
            b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 5\r\n\r\nhello",
        )
        .await;
        assert_eq!(code, 200, "{text}");
        assert!(text.ends_with("\r\n\r\n5"), "{text}");
        shutdown.cancel();
        server.await.expect("server");
    }

    #[tokio::test]
    async fn a_slowloris_is_cut_off_while_health_is_served() {
        let limits = test_limits();
        let (address, shutdown, server) = start(limits).await;
        // One header byte every 100 ms: never a whole head within the timeout.
        let mut slow = TcpStream::connect(address).await.expect("connect");
        let head = b"GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n";
        let started = tokio::time::Instant::now();
        let mut cut_off = false;
        for (i, byte) in head.iter().enumerate() {
            if slow.write_all(&[*byte]).await.is_err() {
                cut_off = true;
                break;
            }
            if i == 3 {
                // Meanwhile another client is served at once.
                assert_eq!(health(address).await, 200);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            if started.elapsed() > limits.header_read_timeout * 4 {
                break;
            }
        }
        if !cut_off {
            cut_off = closed_within(&mut slow, Duration::from_millis(100)).await;
        }
        let elapsed = started.elapsed();
        assert!(
            cut_off,
            "the slow client was still connected after {elapsed:?}"
        );
        assert!(
            elapsed < limits.header_read_timeout * 3,
            "cut off only after {elapsed:?}"
        );
        // A client that connects and sends nothing is cut off too.
        let mut silent = TcpStream::connect(address).await.expect("connect");
        assert!(closed_within(&mut silent, limits.header_read_timeout * 3).await);
        assert_eq!(health(address).await, 200);
        shutdown.cancel();
        server.await.expect("server");
    }

    #[tokio::test]
    async fn idle_connections_beyond_the_cap_do_not_starve_health() {
        let limits = Limits {
            // Long enough that the idle connections stay for the whole test.
            header_read_timeout: Duration::from_secs(30),
            ..test_limits()
        };
        let (address, shutdown, server) = start(limits).await;
        // 200 idle connections (25 times the cap), each with a partial head.
        let mut idle = Vec::new();
        for _ in 0..200 {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            stream.write_all(b"GET /heal").await.expect("write");
            idle.push(stream);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        for _ in 0..5 {
            assert_eq!(health(address).await, 200);
        }
        // The server holds no more than the cap: all but the newest are closed.
        let mut open = 0;
        for stream in &mut idle {
            if !closed_within(stream, Duration::from_millis(5)).await {
                open += 1;
            }
        }
        assert!(
            open <= limits.max_connections,
            "{open} idle connections still open, the cap is {}",
            limits.max_connections
        );
        shutdown.cancel();
        server.await.expect("server");
    }

    #[tokio::test]
    async fn busy_connections_are_kept_and_a_new_one_is_refused() {
        let limits = Limits {
            max_connections: 2,
            ..test_limits()
        };
        let (address, shutdown, server) = start(limits).await;
        let request = b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
        let first = tokio::spawn(exchange(address, request));
        let second = tokio::spawn(exchange(address, request));
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Both slots hold a request in progress: a third connection is closed unanswered.
        let (code, _) = exchange(address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(code, 0);
        assert_eq!(first.await.expect("first").0, 200);
        assert_eq!(second.await.expect("second").0, 200);
        assert_eq!(health(address).await, 200);
        shutdown.cancel();
        server.await.expect("server");
    }

    /// Clients holding more connections than the cap open mid-body, each sending its body a
    /// byte every 100 ms (forever, as far as they are concerned), neither keep `/health` out
    /// nor hold a connection longer than the body read timeout.
    #[tokio::test]
    async fn slow_bodies_neither_stall_health_nor_hold_the_cap() {
        let limits = Limits {
            // The handler's own timeout is far away: only the body's deadline cuts them off.
            request_timeout: Duration::from_secs(60),
            header_read_timeout: Duration::from_secs(30),
            ..test_limits()
        };
        let (address, shutdown, server) = start(limits).await;
        let mut slow = JoinSet::new();
        for _ in 0..limits.max_connections * 2 {
            let mut stream = TcpStream::connect(address).await.expect("connect");
            slow.spawn(async move {
                let started = tokio::time::Instant::now();
                stream
                    .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
                    .await
                    .expect("head");
                // One body byte every 100 ms until the server closes the connection (or for
                // 10 s: then the test fails below).
                let mut buf = [0u8; 512];
                let mut answer = Vec::new();
                while started.elapsed() < Duration::from_secs(10) {
                    if stream.write_all(b"x").await.is_err() {
                        break;
                    }
                    match tokio::time::timeout(Duration::from_millis(100), stream.read(&mut buf))
                        .await
                    {
                        Ok(Ok(0) | Err(_)) => break,
                        Ok(Ok(n)) => answer.extend_from_slice(&buf[..n]),
                        Err(_) => {}
                    }
                }
                (
                    started.elapsed(),
                    String::from_utf8_lossy(&answer).into_owned(),
                )
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        // Every slot is held by a connection mid-body: /health is still answered, and soon.
        for _ in 0..5 {
            let asked = tokio::time::Instant::now();
            assert_eq!(health(address).await, 200);
            assert!(
                asked.elapsed() < Duration::from_millis(500),
                "/health took {:?}",
                asked.elapsed()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut timed_out = 0;
        while let Some(held) = slow.join_next().await {
            let (held, answer) = held.expect("slow client");
            assert!(
                held < limits.body_read_timeout * 2,
                "a connection mid-body was held for {held:?}: {answer}"
            );
            if answer.starts_with("HTTP/1.1 408") {
                timed_out += 1;
            }
        }
        // The ones not evicted to make room were answered 408 at the deadline.
        assert!(timed_out > 0, "no slow body got 408");
        shutdown.cancel();
        server.await.expect("server");
    }

    #[tokio::test]
    async fn a_request_that_runs_too_long_gets_408() {
        let limits = Limits {
            request_timeout: Duration::from_millis(300),
            ..test_limits()
        };
        let (address, shutdown, server) = start(limits).await;
        // A handler slower than the request timeout.
        let (code, _) = tokio::time::timeout(
            Duration::from_secs(3),
            exchange(
                address,
                b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            ),
        )
        .await
        .expect("answered");
        assert_eq!(code, 408);
        // A body that never comes: the declared 100 bytes, 3 sent; cut at the body read
        // timeout.
        let (code, _) = tokio::time::timeout(
            Duration::from_secs(3),
            exchange(
                address,
                b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 100\r\n\r\nabc",
            ),
        )
        .await
        .expect("answered");
        assert_eq!(code, 408);
        shutdown.cancel();
        server.await.expect("server");
    }
}

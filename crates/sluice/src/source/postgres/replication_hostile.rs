//! Hostile input for the replication protocol's framing (`super`): a server (or whatever
//! answers on its port) sending anything. Part of [`crate::hostile`]; `scripts/fuzz` runs it
//! with a million cases.
//!
//! Properties: the startup exchange, a simple query and the copy-both stream end with a value
//! or an error on any byte stream, never a panic; the receive buffer grows with the bytes that
//! came, never with a length a header announces; every XLogData payload the stream yields goes
//! through the pgoutput decoder too.

use std::pin::Pin;
use std::task::{Context, Poll};

use proptest::prelude::*;
use proptest::test_runner::TestRunner;
use tokio::io::ReadBuf;

use super::*;

/// `crate::hostile::config()`'s settings (not imported: the data path does not depend on the
/// test-only module, see tests/structure.rs): `PROPTEST_CASES` cases, no regression files.
fn config() -> proptest::test_runner::Config {
    proptest::test_runner::Config {
        failure_persistence: None,
        max_shrink_iters: 10_000,
        ..proptest::test_runner::Config::default()
    }
}

/// A socket that serves a script of server bytes in given read sizes, then EOF; writes go
/// nowhere.
struct Scripted {
    data: Vec<u8>,
    at: usize,
    /// The sizes of successive reads (cycled); a read of 0 is taken as 1.
    reads: Vec<usize>,
    read_count: usize,
    /// The largest capacity the client's receive buffer reached (sampled at each read).
    fed: usize,
}

impl Scripted {
    fn new(data: Vec<u8>, reads: Vec<usize>) -> Self {
        Self {
            data,
            at: 0,
            reads: if reads.is_empty() { vec![4096] } else { reads },
            read_count: 0,
            fed: 0,
        }
    }
}

impl AsyncRead for Scripted {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let size = this.reads[this.read_count % this.reads.len()].max(1);
        this.read_count += 1;
        let end = this.data.len().min(this.at + size.min(buf.remaining()));
        buf.put_slice(&this.data[this.at..end]);
        this.fed += end - this.at;
        this.at = end;
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn frame(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    out.extend_from_slice(
        &i32::try_from(body.len() + 4)
            .unwrap_or(i32::MAX)
            .to_be_bytes(),
    );
    out.extend_from_slice(body);
    out
}

/// One frame as a server could send it: a backend tag (or any byte) with a random body, a
/// header with a forged length, or a well-formed message of the kinds the client reads.
fn server_frame() -> impl Strategy<Value = Vec<u8>> {
    let tags = b"RSKZTDCIEWNdcvGHA12nst".to_vec();
    prop_oneof![
        (
            prop::sample::select(tags),
            proptest::collection::vec(any::<u8>(), 0..48)
        )
            .prop_map(|(tag, body)| frame(tag, &body)),
        (any::<u8>(), proptest::collection::vec(any::<u8>(), 0..48))
            .prop_map(|(tag, body)| frame(tag, &body)),
        // A header announcing more than comes (up to 2 GiB), or a length under 4.
        (
            any::<u8>(),
            prop_oneof![Just(i32::MAX), Just(0), Just(-1), any::<i32>()],
            proptest::collection::vec(any::<u8>(), 0..32)
        )
            .prop_map(|(tag, len, body)| {
                let mut out = vec![tag];
                out.extend_from_slice(&len.to_be_bytes());
                out.extend_from_slice(&body);
                out
            }),
        // CopyData: XLogData around random pgoutput bytes, a keepalive, or any payload.
        (any::<u64>(), proptest::collection::vec(any::<u8>(), 0..48)).prop_map(|(lsn, data)| {
            let mut body = vec![b'w'];
            body.extend_from_slice(&lsn.to_be_bytes());
            body.extend_from_slice(&lsn.to_be_bytes());
            body.extend_from_slice(&0i64.to_be_bytes());
            body.extend_from_slice(&data);
            frame(b'd', &body)
        }),
        (any::<u64>(), any::<u8>()).prop_map(|(lsn, reply)| {
            let mut body = vec![b'k'];
            body.extend_from_slice(&lsn.to_be_bytes());
            body.extend_from_slice(&0i64.to_be_bytes());
            body.push(reply);
            frame(b'd', &body)
        }),
        // Authentication requests: ok, cleartext, MD5 (a salt), SASL (mechanisms), SASL
        // continue/final with random server messages.
        (
            prop::sample::select(vec![0i32, 3, 5, 10, 11, 12, 7, 99]),
            proptest::collection::vec(any::<u8>(), 0..40)
        )
            .prop_map(|(code, extra)| {
                let mut body = code.to_be_bytes().to_vec();
                if code == 10 {
                    body.extend_from_slice(b"SCRAM-SHA-256\0\0");
                }
                body.extend_from_slice(&extra);
                frame(b'R', &body)
            }),
        // A DataRow with a forged column count or value length.
        (
            any::<i16>(),
            any::<i32>(),
            proptest::collection::vec(any::<u8>(), 0..16)
        )
            .prop_map(|(count, len, data)| {
                let mut body = count.to_be_bytes().to_vec();
                body.extend_from_slice(&len.to_be_bytes());
                body.extend_from_slice(&data);
                frame(b'D', &body)
            }),
        Just(frame(b'Z', b"I")),
        Just(frame(b'W', &[0, 0, 0])),
    ]
}

/// A server's byte stream: frames, or any bytes, then perhaps a cut.
fn server_stream() -> impl Strategy<Value = (Vec<u8>, Vec<usize>)> {
    let frames = proptest::collection::vec(server_frame(), 0..12).prop_map(|f| f.concat());
    let bytes = proptest::collection::vec(any::<u8>(), 0..256);
    (
        prop_oneof![3 => frames, 1 => bytes],
        proptest::collection::vec(1..300usize, 1..4),
    )
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

/// The receive buffer holds at most what came plus a read's worth (64 KiB): what a header
/// announces is not reserved.
fn check_buffer(wire: &Wire<Scripted>) -> Result<(), TestCaseError> {
    let fed = wire.socket.fed;
    let capacity = wire.inbound.capacity();
    prop_assert!(
        capacity <= 2 * fed + 2 * READ_CHUNK,
        "receive buffer of {capacity} bytes after {fed} bytes came"
    );
    Ok(())
}

fn settings(password: Option<&str>) -> StartupSettings {
    StartupSettings {
        user: "sluice".to_owned(),
        database: "shop".to_owned(),
        password: password.map(|p| p.as_bytes().to_vec()),
        options: None,
        application_name: "sluice-hostile".to_owned(),
        channel_binding: ChannelBindingMode::Prefer,
    }
}

/// The copy-both stream, fed anything: each message it yields is decoded further.
#[test]
fn streaming_never_panics_and_buffers_by_what_came() {
    let runtime = runtime();
    let mut runner = TestRunner::new(config());
    runner
        .run(&server_stream(), |(data, reads)| {
            runtime.block_on(async {
                let mut stream = ReplicationStream {
                    wire: Wire::new(Scripted::new(data, reads)),
                    phase: StreamPhase::Streaming,
                };
                for _ in 0..64 {
                    match stream.next().await {
                        Ok(Some(ReplicationMessage::XLogData { data, .. })) => {
                            let _ = super::super::pgoutput::decode(data);
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    }
                    check_buffer(&stream.wire)?;
                }
                check_buffer(&stream.wire)
            })
        })
        .unwrap();
}

/// The startup exchange (authentication included: cleartext, MD5, SCRAM with any server
/// messages) and then IDENTIFY_SYSTEM, fed anything.
#[test]
fn handshake_and_queries_never_panic() {
    let runtime = runtime();
    let mut runner = TestRunner::new(config());
    runner
        .run(
            &(server_stream(), any::<bool>()),
            |((data, reads), password)| {
                runtime.block_on(async {
                    let settings = settings(password.then_some("secret"));
                    let connection = ReplicationConnection::handshake(
                        Scripted::new(data, reads),
                        &settings,
                        None,
                    )
                    .await;
                    if let Ok(mut connection) = connection {
                        let _ = connection.identify_system().await;
                        let _ = connection.simple_query("SHOW wal_level").await;
                        check_buffer(&connection.wire)?;
                    }
                    Ok(())
                })
            },
        )
        .unwrap();
}

/// A frame announcing 2 GiB, then a trickle: an error at EOF, and a buffer the size of the
/// trickle.
#[test]
fn a_two_gigabyte_header_reserves_nothing() {
    let runtime = runtime();
    let mut data = vec![b'd'];
    data.extend_from_slice(&i32::MAX.to_be_bytes());
    data.extend_from_slice(&[b'w'; 1000]);
    let mut stream = ReplicationStream {
        wire: Wire::new(Scripted::new(data, vec![7])),
        phase: StreamPhase::Streaming,
    };
    assert!(runtime.block_on(stream.next()).is_err());
    assert!(stream.wire.inbound.capacity() <= 2 * READ_CHUNK);
}

//! Detects a replication connection that went silent without closing.
//!
//! A half-open TCP connection (a NAT or firewall that dropped its state, a peer that vanished
//! without a FIN or RST) delivers nothing and reports no error: reads wait until TCP gives up,
//! ~15 minutes with Linux's defaults, and writes succeed into the socket buffer. The server,
//! though, answers a standby status update that asks for a reply at once with a keepalive, so
//! silence on a live connection is impossible for long. The watch asks for that reply once
//! half of `silence_timeout_ms` has passed without a message, and declares the connection dead
//! at the full timeout, so it is replaced within a bounded time.
//!
//! Silence only counts while the loop reads: while the in-flight budget is full it stops
//! reading on purpose (what the server sends waits in the socket), and that says nothing about
//! the connection.

use std::time::{Duration, Instant};

/// What the loop should do about the silence so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Silence {
    /// Nothing to do.
    Fine,
    /// Ask the server for a reply (a status update with the reply flag).
    Ping,
    /// Nothing came for this long, even after a ping: the connection is dead.
    Dead(Duration),
}

/// The time since the connection was last heard from, while reading.
#[derive(Debug)]
pub(super) struct SilenceWatch {
    /// `None` disables the watch.
    timeout: Option<Duration>,
    /// When the connection was last heard from (or reading last resumed).
    since: Instant,
    /// Whether a reply was asked for since then.
    pinged: bool,
}

impl SilenceWatch {
    /// A watch with `timeout_ms` (0 disables it), starting now.
    pub(super) fn new(timeout_ms: u64, now: Instant) -> Self {
        Self {
            timeout: (timeout_ms > 0).then(|| Duration::from_millis(timeout_ms)),
            since: now,
            pinged: false,
        }
    }

    /// A message arrived.
    pub(super) fn heard(&mut self, now: Instant) {
        self.since = now;
        self.pinged = false;
    }

    /// The loop is not reading (back-pressure): silence counts from when it reads again.
    pub(super) fn not_reading(&mut self, now: Instant) {
        self.heard(now);
    }

    /// What to do now; a [`Silence::Ping`] is returned once per silence.
    pub(super) fn check(&mut self, now: Instant) -> Silence {
        let Some(timeout) = self.timeout else {
            return Silence::Fine;
        };
        let silent = now.saturating_duration_since(self.since);
        if silent >= timeout {
            Silence::Dead(silent)
        } else if silent >= timeout / 2 && !self.pinged {
            self.pinged = true;
            Silence::Ping
        } else {
            Silence::Fine
        }
    }

    /// The configured timeout, if the watch is on.
    pub(super) fn timeout(&self) -> Option<Duration> {
        self.timeout
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn pings_once_at_half_and_declares_death_at_the_timeout() {
        let start = Instant::now();
        let mut watch = SilenceWatch::new(10_000, start);
        assert_eq!(watch.check(start + 4 * S), Silence::Fine);
        assert_eq!(watch.check(start + 5 * S), Silence::Ping);
        assert_eq!(
            watch.check(start + 6 * S),
            Silence::Fine,
            "one ping per silence"
        );
        assert_eq!(watch.check(start + 10 * S), Silence::Dead(10 * S));
    }

    #[test]
    fn a_message_or_a_pause_in_reading_restarts_the_count() {
        let start = Instant::now();
        let mut watch = SilenceWatch::new(10_000, start);
        assert_eq!(watch.check(start + 6 * S), Silence::Ping);
        watch.heard(start + 7 * S);
        assert_eq!(watch.check(start + 11 * S), Silence::Fine);
        assert_eq!(watch.check(start + 12 * S), Silence::Ping, "pings again");
        watch.not_reading(start + 30 * S);
        assert_eq!(watch.check(start + 34 * S), Silence::Fine);
        assert_eq!(watch.check(start + 40 * S), Silence::Dead(10 * S));
    }

    #[test]
    fn zero_disables() {
        let start = Instant::now();
        let mut watch = SilenceWatch::new(0, start);
        assert_eq!(watch.check(start + 3600 * S), Silence::Fine);
        assert_eq!(watch.timeout(), None);
    }
}

//! A line rate for a link. Over the UDP cable nothing limits how fast frames leave: one 8 MiB
//! READ answer is 8000 frames in a few milliseconds, and a peer that takes them slower — QEMU
//! with its socket's default 208 KiB buffer in front of a guest — loses most of the burst, so
//! recovery, not the line, sets the speed. A real port sends at its line rate; this wrapper
//! gives a link one, with a token bucket: frames still leave at once (nothing is queued here),
//! but once the bucket is spent the link says it cannot take more ([`Link::can_send`]) until
//! time has refilled it, and the engine holds new packets back meanwhile.

use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// Bytes the bucket holds when full: the burst that may leave at once after a quiet spell.
/// Small against the socket buffers it protects (208 KiB by default on Linux).
const BURST: f64 = 64.0 * 1024.0;

/// A line rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate(pub u64);

impl Rate {
    fn bytes_per_second(self) -> f64 {
        self.0 as f64 / 8.0
    }
}

impl FromStr for Rate {
    type Err = String;

    /// Reads bits per second with an optional K, M or G (powers of ten): `200M`, `1G`, `1500K`.
    fn from_str(text: &str) -> Result<Rate, String> {
        let (digits, scale) = match text.trim().char_indices().last() {
            Some((at, 'k' | 'K')) => (&text.trim()[..at], 1_000),
            Some((at, 'm' | 'M')) => (&text.trim()[..at], 1_000_000),
            Some((at, 'g' | 'G')) => (&text.trim()[..at], 1_000_000_000),
            _ => (text.trim(), 1),
        };
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(scale))
            .filter(|bits| *bits >= 8_000)
            .map(Rate)
            .ok_or_else(|| {
                format!("{text:?} is not a line rate: give bits per second of at least 8K, such as 200M or 1G")
            })
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            b if b % 1_000_000_000 == 0 => write!(f, "{}G", b / 1_000_000_000),
            b if b % 1_000_000 == 0 => write!(f, "{}M", b / 1_000_000),
            b if b % 1_000 == 0 => write!(f, "{}K", b / 1_000),
            b => write!(f, "{b}"),
        }
    }
}

/// A link that sends no faster than its rate on average.
pub struct Paced<L> {
    inner: L,
    rate: Rate,
    /// Bytes that may leave now; negative after a frame larger than what was left.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
}

impl<L: Link> Paced<L> {
    pub fn new(inner: L, rate: Rate) -> Paced<L> {
        Paced {
            inner,
            rate,
            tokens: BURST,
            at: Instant::now(),
        }
    }

    /// The tokens at `now`: those left plus what the time since has earned, up to a full bucket.
    fn tokens_at(&self, now: Instant) -> f64 {
        let earned =
            now.saturating_duration_since(self.at).as_secs_f64() * self.rate.bytes_per_second();
        (self.tokens + earned).min(BURST)
    }

    fn refill(&mut self, now: Instant) {
        self.tokens = self.tokens_at(now);
        self.at = now;
    }

    /// When the bucket will hold a token again, if it is spent now.
    fn refilled_at(&self, now: Instant) -> Option<Instant> {
        let tokens = self.tokens_at(now);
        (tokens <= 0.0)
            .then(|| now + Duration::from_secs_f64((1.0 - tokens) / self.rate.bytes_per_second()))
    }
}

impl<L: Link> Link for Paced<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        self.refill(Instant::now());
        self.tokens -= frame.len() as f64;
        self.inner.send(frame)
    }

    fn can_send(&self) -> bool {
        self.tokens_at(Instant::now()) > 0.0 && self.inner.can_send()
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        self.inner.recv()
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn service(&mut self, now: Instant) -> Option<Instant> {
        let inner = self.inner.service(now);
        match (self.refilled_at(now), inner) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn flush_sends(&mut self) -> u64 {
        self.inner.flush_sends()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn describe(&self) -> String {
        format!("{} at {} bit/s", self.inner.describe(), self.rate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::BufPool;
    use crate::link::mem;

    #[test]
    fn rates_parse_in_bits_per_second_and_nonsense_is_refused() {
        assert_eq!("200M".parse::<Rate>(), Ok(Rate(200_000_000)));
        assert_eq!("1g".parse::<Rate>(), Ok(Rate(1_000_000_000)));
        assert_eq!("1500K".parse::<Rate>(), Ok(Rate(1_500_000)));
        assert_eq!("64000".parse::<Rate>(), Ok(Rate(64_000)));
        for bad in ["", "M", "fast", "-1M", "1T", "100", "99999999999999G"] {
            assert!(bad.parse::<Rate>().is_err(), "{bad:?}");
        }
        assert_eq!(Rate(200_000_000).to_string(), "200M");
        assert_eq!(Rate(1_500_000).to_string(), "1500K");
    }

    fn frame(len: usize) -> FrameBuf {
        BufPool::new(len).copy_of(&vec![0xab; len])
    }

    #[test]
    fn a_spent_bucket_holds_the_sender_back_until_time_refills_it() {
        let (a, mut b) = mem::pair();
        // 800 kbit/s: a byte every 10 µs, so the few microseconds this test takes between steps
        // earn next to nothing.
        let mut link = Paced::new(a, Rate(800_000));
        let start = Instant::now();
        let mut sent = 0;
        while link.can_send() {
            link.send(frame(1000)).unwrap();
            sent += 1;
            assert!(sent <= 200, "the bucket never ran out");
        }
        // The engine is told when to look again: when the overdraft (under one frame) is paid.
        let now = Instant::now();
        let due = link.service(now).expect("a spent bucket has a refill time");
        assert!(
            due > now && due <= now + Duration::from_millis(11),
            "{:?}",
            due - now
        );
        // The full bucket's worth left at once (a frame may overdraw it), plus what the loop's
        // time earned (a frame every 10 ms), and nothing was lost.
        let full = (BURST / 1000.0).ceil() as usize;
        let earned = start.elapsed().as_millis() as usize / 10 + 1;
        assert!((full..=full + earned).contains(&sent), "{sent} frames");
        let mut arrived = 0;
        while b.recv().unwrap().is_some() {
            arrived += 1;
        }
        assert_eq!(arrived, sent);
        std::thread::sleep(
            due.saturating_duration_since(Instant::now()) + Duration::from_millis(1),
        );
        assert!(link.can_send());
        assert_eq!(link.service(Instant::now()), None);
    }

    #[test]
    fn over_time_no_more_leaves_than_the_rate_allows() {
        let (a, mut b) = mem::pair();
        let rate = Rate(80_000_000); // 10 MB/s
        let mut link = Paced::new(a, rate);
        let start = Instant::now();
        let mut bytes = 0u64;
        while start.elapsed() < Duration::from_millis(50) {
            if link.can_send() {
                link.send(frame(1000)).unwrap();
                bytes += 1000;
            }
            while b.recv().unwrap().is_some() {}
        }
        // Unpaced, the loop would have sent hundreds of megabytes; paced, no more than the
        // bucket and the rate allow (however the machine schedules this thread).
        let elapsed = start.elapsed().as_secs_f64();
        let allowed = BURST + elapsed * rate.bytes_per_second() + 1000.0;
        assert!(bytes as f64 <= allowed, "{bytes} bytes in {elapsed} s");
        assert!(bytes >= 64 * 1000, "not even the first burst left: {bytes}");
    }
}

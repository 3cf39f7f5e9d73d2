//! Fault injection: a wrapper around any link that drops, duplicates, reorders and corrupts
//! frames, each with its own probability, and can delay every frame by a fixed time — in both
//! directions. Decisions come from a seeded generator, so a failing run replays exactly: the same
//! seed and the same frames give the same faults.
//!
//! Reordering holds a frame back until a few later frames (1 to [`REORDER_SPAN`]) have passed
//! it, so the new order depends only on the frames, not on timing; a held frame is released
//! anyway after the reorder window ([`DEFAULT_REORDER_WINDOW`], `window=` in the spec) if no
//! later frame comes.

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::os::fd::RawFd;
use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::RngExt;
use rand::SeedableRng;
use rand_xorshift::XorShiftRng;
use tracing::trace;

use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::counters;
use crate::waker::Waker;

/// Most later frames that overtake a reordered one.
pub const REORDER_SPAN: u32 = 8;

/// How long a reordered frame waits at most for later frames to overtake it. A frame that
/// takes a slower path arrives late by the difference of the paths' delays — microseconds in
/// a datacenter, where RoCE runs — so 20 µs: some 15 frames' time at 25 Gbit/s, enough for
/// [`REORDER_SPAN`] frames of a burst to pass. It was 1 ms, which on the in-process cable
/// (a round trip of a few microseconds) turned each reordered frame at the end of a burst
/// (an ACK, a NAK, a window's last packet) into a millisecond's delay, hundreds of round
/// trips: `roce bench --faults reorder=0.05` measured that more than reordering. `window=1ms`
/// gives the old model.
pub const DEFAULT_REORDER_WINDOW: Duration = Duration::from_micros(20);

/// What to inject. Probabilities are per frame and per direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultSpec {
    pub drop: f64,
    pub dup: f64,
    pub reorder: f64,
    pub corrupt: f64,
    /// Added to every frame's travel time.
    pub delay: Duration,
    /// Longest a reordered frame waits for frames to overtake it.
    pub reorder_window: Duration,
    pub seed: u64,
}

impl Default for FaultSpec {
    fn default() -> FaultSpec {
        FaultSpec {
            drop: 0.0,
            dup: 0.0,
            reorder: 0.0,
            corrupt: 0.0,
            delay: Duration::ZERO,
            reorder_window: DEFAULT_REORDER_WINDOW,
            seed: 1,
        }
    }
}

impl FromStr for FaultSpec {
    type Err = String;

    /// Parses `drop=0.05,dup=0.01,reorder=0.05,corrupt=0.01,delay=2ms,window=1ms,seed=7` (any
    /// subset).
    fn from_str(text: &str) -> Result<FaultSpec, String> {
        let mut spec = FaultSpec::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("fault `{item}` is not of the form name=value"))?;
            let probability = || -> Result<f64, String> {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|p| (0.0..=1.0).contains(p))
                    .ok_or_else(|| format!("{key}={value}: a probability is a number from 0 to 1"))
            };
            match key {
                "drop" => spec.drop = probability()?,
                "dup" => spec.dup = probability()?,
                "reorder" => spec.reorder = probability()?,
                "corrupt" => spec.corrupt = probability()?,
                "delay" => spec.delay = parse_duration(value).ok_or_else(|| format!("delay={value}: give a time such as 500us, 2ms or 1s"))?,
                "window" => spec.reorder_window = parse_duration(value).ok_or_else(|| format!("window={value}: give a time such as 500us, 2ms or 1s"))?,
                "seed" => spec.seed = value.parse().map_err(|_| format!("seed={value}: a seed is a whole number"))?,
                _ => return Err(format!("unknown fault `{key}` (known: drop, dup, reorder, corrupt, delay, window, seed)")),
            }
        }
        Ok(spec)
    }
}

fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = text.split_at(split);
    let n: f64 = number.parse().ok()?;
    let seconds = match unit {
        "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "ns" => n / 1e9,
        _ => return None,
    };
    Duration::try_from_secs_f64(seconds).ok()
}

impl fmt::Display for FaultSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "drop={},dup={},reorder={},corrupt={},delay={:?},window={:?},seed={}",
            self.drop,
            self.dup,
            self.reorder,
            self.corrupt,
            self.delay,
            self.reorder_window,
            self.seed
        )
    }
}

/// What the injector did, per direction together.
#[derive(Debug, Default)]
pub struct FaultCounters {
    pub frames: AtomicU64,
    pub dropped: AtomicU64,
    pub duplicated: AtomicU64,
    pub reordered: AtomicU64,
    pub corrupted: AtomicU64,
}

/// A frame waiting to be let through.
struct Held {
    frame: FrameBuf,
    /// Reordered: released once this many later frames have gone by...
    overtakers: Option<u32>,
    /// ...but not before this time (the fixed delay)...
    not_before: Instant,
    /// ...and at this time at the latest.
    deadline: Instant,
}

impl Held {
    /// Whether the frame may go now.
    fn due(&self, now: Instant) -> bool {
        match self.overtakers {
            Some(n) => (n == 0 && now >= self.not_before) || now >= self.deadline,
            None => now >= self.not_before,
        }
    }
}

/// The fault decisions and held frames of one direction.
struct Direction {
    rng: XorShiftRng,
    held: VecDeque<Held>,
    ready: VecDeque<FrameBuf>,
}

impl Direction {
    fn new(seed: u64) -> Direction {
        Direction {
            rng: XorShiftRng::seed_from_u64(seed),
            held: VecDeque::new(),
            ready: VecDeque::new(),
        }
    }

    /// Decides the fate of one frame; what may pass now ends up in `ready`.
    fn admit(
        &mut self,
        mut frame: FrameBuf,
        spec: &FaultSpec,
        stats: &FaultCounters,
        pool: &Arc<BufPool>,
        now: Instant,
    ) {
        counters::bump(&stats.frames);
        // Every frame that passes counts as an overtaker of the frames held for reordering.
        for n in self.held.iter_mut().filter_map(|h| h.overtakers.as_mut()) {
            *n = n.saturating_sub(1);
        }
        // Draw every decision each time so the generator's sequence does not depend on them.
        let drop = self.rng.random_bool(spec.drop);
        let dup = self.rng.random_bool(spec.dup);
        let reorder = self.rng.random_bool(spec.reorder);
        let corrupt = self.rng.random_bool(spec.corrupt);
        let span = self.rng.random_range(1..=REORDER_SPAN);
        let bit = self.rng.random_range(0..u32::MAX);
        if drop {
            counters::bump(&stats.dropped);
            trace!(len = frame.len(), "fault: frame dropped");
            self.release(now);
            return;
        }
        if corrupt && frame.len() > 14 {
            // Beyond the Ethernet header, so the frame still reaches its NIC and its checks.
            let bits = (frame.len() - 14) * 8;
            let b = bit as usize % bits;
            frame[14 + b / 8] ^= 1 << (b % 8);
            counters::bump(&stats.corrupted);
            trace!(byte = 14 + b / 8, "fault: bit flipped");
        }
        let copy = dup.then(|| pool.copy_of(&frame));
        if dup {
            counters::bump(&stats.duplicated);
        }
        for f in std::iter::once(frame).chain(copy) {
            let not_before = now + spec.delay;
            if reorder {
                counters::bump(&stats.reordered);
                self.held.push_back(Held {
                    frame: f,
                    overtakers: Some(span),
                    not_before,
                    deadline: not_before + spec.reorder_window,
                });
            } else if spec.delay > Duration::ZERO || !self.held.is_empty() {
                self.held.push_back(Held {
                    frame: f,
                    overtakers: None,
                    not_before,
                    deadline: not_before,
                });
            } else {
                self.ready.push_back(f);
            }
        }
        self.release(now);
    }

    /// Moves frames whose time or turn has come to `ready`. Delayed frames leave in order (a
    /// fixed delay keeps the order); reordered frames step aside and let them pass.
    fn release(&mut self, now: Instant) {
        let mut i = 0;
        while i < self.held.len() {
            let held = &self.held[i];
            if held.due(now) {
                if let Some(h) = self.held.remove(i) {
                    self.ready.push_back(h.frame);
                }
            } else if held.overtakers.is_some() {
                i += 1;
            } else {
                break;
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.held
            .iter()
            .map(|h| match h.overtakers {
                Some(n) if n > 0 => h.deadline,
                _ => h.not_before,
            })
            .min()
    }
}

/// A link with faults injected in both directions.
pub struct Faulty<L: Link> {
    inner: L,
    spec: FaultSpec,
    tx: Direction,
    rx: Direction,
    stats: Arc<FaultCounters>,
    pool: Arc<BufPool>,
}

impl<L: Link> Faulty<L> {
    pub fn new(inner: L, spec: FaultSpec) -> Faulty<L> {
        Faulty {
            inner,
            spec,
            tx: Direction::new(spec.seed),
            // A different stream for the other direction, derived from the same seed.
            rx: Direction::new(spec.seed ^ 0x9e37_79b9_7f4a_7c15),
            stats: Arc::new(FaultCounters::default()),
            pool: BufPool::new(256),
        }
    }

    /// What was injected so far.
    pub fn stats(&self) -> Arc<FaultCounters> {
        Arc::clone(&self.stats)
    }

    fn flush_tx(&mut self) -> io::Result<()> {
        let mut result = Ok(());
        while let Some(frame) = self.tx.ready.pop_front() {
            if let Err(e) = self.inner.send(frame) {
                result = Err(e);
            }
        }
        result
    }
}

impl<L: Link> Link for Faulty<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        self.tx
            .admit(frame, &self.spec, &self.stats, &self.pool, Instant::now());
        self.flush_tx()
    }

    fn can_send(&self) -> bool {
        self.inner.can_send()
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        if self.rx.ready.is_empty() {
            if let Some(frame) = self.inner.recv()? {
                self.rx
                    .admit(frame, &self.spec, &self.stats, &self.pool, Instant::now());
            }
        }
        Ok(self.rx.ready.pop_front())
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.pool = Arc::clone(pool);
        self.inner.attach(pool, waker)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn service(&mut self, now: Instant) -> Option<Instant> {
        self.tx.release(now);
        self.rx.release(now);
        let _ = self.flush_tx();
        let inner = self.inner.service(now);
        [self.tx.next_deadline(), self.rx.next_deadline(), inner]
            .into_iter()
            .flatten()
            .min()
    }

    fn flush_sends(&mut self) -> u64 {
        self.inner.flush_sends()
    }

    fn flush(&mut self) -> io::Result<()> {
        let now = Instant::now() + Duration::from_secs(3600);
        self.tx.release(now);
        self.flush_tx()?;
        self.inner.flush()
    }

    fn describe(&self) -> String {
        format!("{} with faults ({})", self.inner.describe(), self.spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mem;

    /// Sends `n` numbered frames from a faulty end and returns what arrives at the other end.
    fn run(spec: FaultSpec, n: u32) -> (Vec<Vec<u8>>, Arc<FaultCounters>) {
        let (a, mut b) = mem::pair();
        // A long reorder window, so releases depend on the frames only, never on timing.
        let mut a = Faulty::new(
            a,
            FaultSpec {
                reorder_window: Duration::from_secs(60),
                ..spec
            },
        );
        let stats = a.stats();
        let pool = BufPool::new(64);
        let mut got = Vec::new();
        let drain = |b: &mut mem::MemLink, got: &mut Vec<Vec<u8>>| {
            while let Some(f) = b.recv().unwrap() {
                got.push(f.to_vec());
            }
        };
        for i in 0..n {
            let mut frame = vec![0u8; 64];
            frame[20..24].copy_from_slice(&i.to_be_bytes());
            a.send(pool.copy_of(&frame)).unwrap();
            drain(&mut b, &mut got);
        }
        // Let held frames go.
        a.flush().unwrap();
        drain(&mut b, &mut got);
        (got, stats)
    }

    #[test]
    fn spec_parses_and_refuses_nonsense() {
        let spec: FaultSpec = "drop=0.05,dup=0.01,reorder=0.05,corrupt=0.01,delay=2ms,seed=7"
            .parse()
            .unwrap();
        assert_eq!(spec.drop, 0.05);
        assert_eq!(spec.delay, Duration::from_millis(2));
        assert_eq!(spec.seed, 7);
        assert_eq!(spec.reorder_window, DEFAULT_REORDER_WINDOW);
        let old: FaultSpec = "reorder=0.05,window=1ms".parse().unwrap();
        assert_eq!(old.reorder_window, Duration::from_millis(1));
        assert_eq!(old.to_string().parse::<FaultSpec>().unwrap(), old);
        assert!("drop=2"
            .parse::<FaultSpec>()
            .unwrap_err()
            .contains("probability"));
        assert!("loss=0.1"
            .parse::<FaultSpec>()
            .unwrap_err()
            .contains("unknown fault"));
        assert!("delay=3 parsecs".parse::<FaultSpec>().is_err());
    }

    #[test]
    fn the_same_seed_gives_the_same_frames() {
        let spec: FaultSpec = "drop=0.1,dup=0.1,reorder=0.2,corrupt=0.1,seed=42"
            .parse()
            .unwrap();
        let (first, _) = run(spec, 2000);
        let (second, _) = run(spec, 2000);
        assert!(first == second, "two runs with one seed differ");
        let (other, _) = run(FaultSpec { seed: 43, ..spec }, 2000);
        assert!(first != other, "two seeds gave the same faults");
    }

    #[test]
    fn each_fault_happens_at_about_its_rate() {
        let n = 20_000;
        let (got, stats) = run("drop=0.1,seed=1".parse().unwrap(), n);
        let dropped = stats.dropped.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1600..2400).contains(&dropped), "{dropped}");
        assert_eq!(got.len() as u64, u64::from(n) - dropped);

        let (got, stats) = run("dup=0.1,seed=2".parse().unwrap(), n);
        let dups = stats.duplicated.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1600..2400).contains(&dups), "{dups}");
        assert_eq!(got.len() as u64, u64::from(n) + dups);

        let (got, _) = run("corrupt=0.1,seed=3".parse().unwrap(), n);
        let corrupt = got
            .iter()
            .filter(|f| f[..20].iter().chain(&f[24..]).any(|b| *b != 0))
            .count()
            + got
                .iter()
                .enumerate()
                .filter(|(i, f)| f[20..24] != (*i as u32).to_be_bytes())
                .count();
        assert!((1600..2400).contains(&corrupt), "{corrupt}");
        assert!(
            got.iter().all(|f| f[..14].iter().all(|b| *b == 0)),
            "the Ethernet header is never hit"
        );

        let (got, stats) = run("reorder=0.1,seed=4".parse().unwrap(), n);
        let reordered = stats.reordered.load(std::sync::atomic::Ordering::Relaxed);
        assert!((1600..2400).contains(&reordered), "{reordered}");
        assert_eq!(got.len() as u32, n);
        let order: Vec<u32> = got
            .iter()
            .map(|f| u32::from_be_bytes([f[20], f[21], f[22], f[23]]))
            .collect();
        let out_of_place = order.windows(2).filter(|w| w[1] < w[0]).count();
        assert!(out_of_place > 1000, "{out_of_place}");
        // Bounded: no frame is overtaken by more than the span.
        for (pos, seq) in order.iter().enumerate() {
            assert!(pos as u32 <= seq + REORDER_SPAN + 1, "frame {seq} at {pos}");
        }
    }

    #[test]
    fn a_fixed_delay_keeps_the_order_and_holds_frames_until_due() {
        let (a, mut b) = mem::pair();
        let delay = Duration::from_millis(20);
        let mut a = Faulty::new(
            a,
            FaultSpec {
                delay,
                ..FaultSpec::default()
            },
        );
        let pool = BufPool::new(8);
        let start = Instant::now();
        for i in 0..5u8 {
            a.send(pool.copy_of(&[i; 60])).unwrap();
        }
        let mut got = Vec::new();
        while got.len() < 5 && start.elapsed() < Duration::from_secs(5) {
            if let Some(next) = a.service(Instant::now()) {
                assert!(next >= start + delay, "a frame is due before its delay");
            }
            while let Some(frame) = b.recv().unwrap() {
                assert!(start.elapsed() >= delay, "a frame arrived before its delay");
                got.push(frame[0]);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, [0, 1, 2, 3, 4]);
    }
}

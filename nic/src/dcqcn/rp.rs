//! The reaction point: a QP's rate limiter, as DCQCN NICs keep one per QP (Zhu et al., SIGCOMM
//! 2015, §3; NVIDIA's `rp_*` parameters).
//!
//! - A CNP cuts the current rate: `Rc ← Rc · (1 − α/2)` (the cut bounded by `rp_min_dec_fac`,
//!   the rate by `rp_min_rate`), at most once per `rp_rate_reduce_monitor_period` — CNPs within
//!   it are folded into one cut at its end — after setting the target rate `Rt ← Rc`.
//! - α, the estimate of how congested the path is, is updated every `rp_dce_tcp_rtt`:
//!   `α ← g·α + (1 − g)·[a CNP came in the period]`.
//! - Two counters raise the rate after a cut: a timer stage every `rp_time_reset` µs and a
//!   byte stage every `rp_byte_reset` bytes sent. Each stage brings `Rc` half-way to `Rt`; while
//!   both counters are below `rp_threshold` (F) that is all (fast recovery), when one is past it
//!   `Rt` first grows by `rp_ai_rate` (additive increase), when both are, by `rp_hai_rate`
//!   (hyper increase).
//! - The QP sends no faster than `Rc` (a token bucket of [`BUCKET`] bytes). Before the first
//!   CNP, and again once the rate is back at the maximum, the QP has no limiter at all.
//!
//! Time passes only through the `now` each call is given; the timers are evaluated lazily, so
//! an engine that did not run for a while catches up on every period it missed, in order.

use std::time::{Duration, Instant};

use super::params::{mbps_to_bits, Params};

/// Bytes the rate limiter lets go at once: a few full packets, so that an engine that wakes a
/// little late still keeps its rate, and a small burst against a switch's marking threshold.
pub const BUCKET: f64 = 16.0 * 1024.0;
/// Timer stages and alpha periods caught up in one go at most; beyond this the rate is long
/// back at its maximum (the limiter is released) and alpha at zero.
const CATCH_UP: u32 = 4096;

/// One QP's reaction point.
#[derive(Debug, Clone)]
pub struct ReactionPoint {
    params: Params,
    max: f64,
    /// Rc, bits/s.
    current: f64,
    /// Rt, bits/s.
    target: f64,
    /// α in [0, 1].
    alpha: f64,
    /// Whether a limiter is allocated (a CNP came and the rate is not back at the maximum).
    limited: bool,
    /// Whether any CNP has ever come (`rp_rate_to_set_on_first_cnp` applies to the first).
    seen_cnp: bool,
    /// A CNP came in the current alpha period.
    cnp_in_period: bool,
    /// The start of the current alpha period.
    alpha_at: Instant,
    last_cut: Option<Instant>,
    /// CNPs came within the monitor period after the last cut: cut at its end.
    cut_pending: bool,
    /// The start of the current timer stage.
    timer_at: Instant,
    time_stage: u32,
    byte_stage: u32,
    /// Bytes sent in the current byte stage.
    bytes: u64,
    /// The timer raised the rate since the last cut (for `rp_clamp_tgt_rate_ati`).
    timer_raised: bool,
    tokens: f64,
    tokens_at: Instant,
    /// Rate cuts made, for the NIC's counters.
    pub cuts: u64,
}

impl ReactionPoint {
    pub fn new(params: Params, now: Instant) -> ReactionPoint {
        let max = params.max_rate();
        ReactionPoint {
            params,
            max,
            current: max,
            target: max,
            alpha: f64::from(params.rp_initial_alpha_value.min(1024)) / 1024.0,
            limited: false,
            seen_cnp: false,
            cnp_in_period: false,
            alpha_at: now,
            last_cut: None,
            cut_pending: false,
            timer_at: now,
            time_stage: 0,
            byte_stage: 0,
            bytes: 0,
            timer_raised: false,
            tokens: BUCKET,
            tokens_at: now,
            cuts: 0,
        }
    }

    /// The rate the QP may send at now, bits/s.
    pub fn rate(&self) -> f64 {
        self.current
    }

    pub fn target(&self) -> f64 {
        self.target
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    /// Whether the QP's sending is limited now (a CNP came and the rate has not recovered).
    pub fn is_limited(&self) -> bool {
        self.limited
    }

    /// A CNP for this QP arrived.
    pub fn on_cnp(&mut self, now: Instant) {
        self.advance(now);
        self.cnp_in_period = true;
        let first = !self.seen_cnp;
        self.seen_cnp = true;
        if !self.limited {
            self.limited = true;
            self.tokens = 0.0;
            self.tokens_at = now;
        }
        if first && self.params.rp_rate_to_set_on_first_cnp != 0 {
            self.current = mbps_to_bits(self.params.rp_rate_to_set_on_first_cnp).min(self.max);
            self.target = self.current;
            self.restart_stages(now);
            self.last_cut = Some(now);
            self.cuts += 1;
            return;
        }
        match self.last_cut {
            Some(at) if now < at + self.monitor_period() => self.cut_pending = true,
            _ => self.cut(now, first),
        }
    }

    /// Whether a packet may leave now.
    pub fn may_send(&mut self, now: Instant) -> bool {
        if !self.limited {
            return true;
        }
        self.advance(now);
        if !self.limited {
            return true;
        }
        let earned = now.saturating_duration_since(self.tokens_at).as_secs_f64() * self.current;
        self.tokens = (self.tokens + earned / 8.0).min(BUCKET);
        self.tokens_at = now;
        self.tokens > 0.0
    }

    /// A packet of `bytes` bytes left.
    pub fn on_sent(&mut self, bytes: u64) {
        if !self.limited {
            return;
        }
        self.tokens -= bytes as f64;
        self.bytes += bytes;
        let stage = u64::from(self.params.rp_byte_reset.max(1));
        while self.bytes >= stage && self.limited {
            self.bytes -= stage;
            self.byte_stage = self.byte_stage.saturating_add(1);
            self.increase();
        }
    }

    /// When a QP that [`may_send`](Self::may_send) refused may send again.
    pub fn wait_until(&self) -> Option<Instant> {
        (self.limited && self.tokens <= 0.0).then(|| {
            self.tokens_at + Duration::from_secs_f64((1.0 - self.tokens) * 8.0 / self.current)
        })
    }

    /// Brings the timers up to `now`: a cut that was waiting for the monitor period, alpha
    /// periods, timer stages — in the order they fell due.
    pub fn advance(&mut self, now: Instant) {
        if self.cut_pending {
            if let Some(at) = self.last_cut.map(|t| t + self.monitor_period()) {
                if at <= now {
                    self.update_alpha(at);
                    self.run_timer(at);
                    self.cut(at, false);
                }
            }
        }
        self.update_alpha(now);
        self.run_timer(now);
    }

    fn monitor_period(&self) -> Duration {
        Params::us(self.params.rp_rate_reduce_monitor_period)
    }

    fn cut(&mut self, at: Instant, first: bool) {
        let p = &self.params;
        if first || p.rp_clamp_tgt_rate == 1 || (p.rp_clamp_tgt_rate_ati == 1 && self.timer_raised)
        {
            self.target = self.current;
        }
        let most = f64::from(p.rp_min_dec_fac) / 100.0;
        let factor = (self.alpha / 2.0).min(most);
        let floor = mbps_to_bits(p.rp_min_rate).min(self.max);
        self.current = (self.current * (1.0 - factor)).max(floor);
        self.last_cut = Some(at);
        self.cut_pending = false;
        self.restart_stages(at);
        self.cuts += 1;
    }

    fn restart_stages(&mut self, at: Instant) {
        self.time_stage = 0;
        self.byte_stage = 0;
        self.bytes = 0;
        self.timer_at = at;
        self.timer_raised = false;
    }

    fn update_alpha(&mut self, until: Instant) {
        let period = Params::us(self.params.rp_dce_tcp_rtt);
        let elapsed = until.saturating_duration_since(self.alpha_at);
        let n = (elapsed.as_nanos() / period.as_nanos().max(1)) as u64;
        if n == 0 {
            return;
        }
        let g = f64::from(self.params.rp_dce_tcp_g.min(1024)) / 1024.0;
        let came = if self.cnp_in_period { 1.0 } else { 0.0 };
        self.alpha = g * self.alpha + (1.0 - g) * came;
        self.alpha *= g.powi(n.saturating_sub(1).min(i32::MAX as u64) as i32);
        self.cnp_in_period = false;
        self.alpha_at += period * n.min(u64::from(u32::MAX)) as u32;
    }

    fn run_timer(&mut self, until: Instant) {
        let period = Params::us(self.params.rp_time_reset);
        let mut stages = 0;
        while self.limited && self.timer_at + period <= until {
            if stages == CATCH_UP {
                self.release();
                break;
            }
            stages += 1;
            self.timer_at += period;
            self.time_stage = self.time_stage.saturating_add(1);
            self.timer_raised = true;
            self.increase();
        }
        if !self.limited {
            self.timer_at = until;
        }
    }

    /// One stage of increase: fast recovery, additive or hyper.
    fn increase(&mut self) {
        let f = self.params.rp_threshold;
        let (t, b) = (self.time_stage, self.byte_stage);
        if t.max(b) >= f {
            let step = if t.min(b) >= f {
                self.params.rp_hai_rate
            } else {
                self.params.rp_ai_rate
            };
            self.target = (self.target + mbps_to_bits(step)).min(self.max);
        }
        self.current = ((self.current + self.target) / 2.0).min(self.max);
        // Within a part in a million of the maximum: the limiter has done its job.
        if self.current >= self.max * (1.0 - 1e-6) {
            self.release();
        }
    }

    fn release(&mut self) {
        self.limited = false;
        self.current = self.max;
        self.target = self.max;
        self.cut_pending = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GBIT: f64 = 1e9;

    fn params() -> Params {
        let mut p = Params::default().with_line_rate(1_000_000_000);
        p.rp_byte_reset = u32::MAX; // timer stages only, unless a test wants bytes
        p
    }

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 1e-9 + 1.0
    }

    #[test]
    fn no_cnp_no_limit() {
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(params(), t0);
        for n in 0..100 {
            assert!(rp.may_send(t0 + us(n)));
            rp.on_sent(4096);
        }
        assert!(!rp.is_limited());
        assert_eq!(rp.rate(), GBIT);
        assert_eq!(rp.wait_until(), None);
    }

    #[test]
    fn the_first_cnp_halves_the_rate_with_the_initial_alpha() {
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(params(), t0);
        rp.on_cnp(t0);
        assert!(rp.is_limited());
        assert_eq!(rp.cuts, 1);
        assert!(
            close(rp.rate(), GBIT * (1.0 - 1023.0 / 2048.0)),
            "{}",
            rp.rate()
        );
        assert_eq!(rp.target(), GBIT, "the target is the rate before the cut");
    }

    #[test]
    fn cnps_within_the_monitor_period_make_one_cut_at_its_end() {
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(params(), t0);
        rp.on_cnp(t0);
        let after_first = rp.rate();
        rp.on_cnp(t0 + us(1));
        rp.on_cnp(t0 + us(2));
        assert_eq!(rp.cuts, 1, "folded, not cut yet");
        assert_eq!(rp.rate(), after_first);
        rp.advance(t0 + us(4));
        assert_eq!(rp.cuts, 2, "one cut at the period's end");
        assert!(rp.rate() < after_first);
        rp.advance(t0 + us(40));
        assert_eq!(rp.cuts, 2);
    }

    #[test]
    fn alpha_moves_by_g_each_period() {
        let t0 = Instant::now();
        let p = params();
        let g = f64::from(p.rp_dce_tcp_g) / 1024.0;
        let k = u64::from(p.rp_dce_tcp_rtt);
        let mut rp = ReactionPoint::new(p, t0);
        let a0 = rp.alpha();
        rp.on_cnp(t0);
        rp.advance(t0 + us(k));
        let a1 = g * a0 + (1.0 - g);
        assert!(close(rp.alpha() * 1e9, a1 * 1e9), "{} vs {a1}", rp.alpha());
        // Ten quiet periods later, caught up in one call.
        rp.advance(t0 + us(11 * k));
        assert!(close(rp.alpha() * 1e9, a1 * g.powi(10) * 1e9));
        // A CNP in a period counts in that period only.
        rp.on_cnp(t0 + us(11 * k + 1));
        rp.advance(t0 + us(12 * k));
        assert!(close(
            rp.alpha() * 1e9,
            (g * a1 * g.powi(10) + (1.0 - g)) * 1e9
        ));
    }

    #[test]
    fn the_cut_is_bounded_by_min_dec_fac_and_min_rate() {
        let t0 = Instant::now();
        let mut p = params();
        p.rp_initial_alpha_value = 1024;
        p.rp_min_dec_fac = 10;
        p.rp_min_rate = 880;
        let mut rp = ReactionPoint::new(p, t0);
        rp.on_cnp(t0);
        assert!(
            close(rp.rate(), 0.9 * GBIT),
            "at most 10% off: {}",
            rp.rate()
        );
        rp.on_cnp(t0 + us(10));
        assert!(
            close(rp.rate(), 880e6),
            "never below the min rate: {}",
            rp.rate()
        );
    }

    #[test]
    fn timer_stages_recover_fast_then_additively_then_hyper() {
        let t0 = Instant::now();
        let mut p = params();
        p.rp_byte_reset = 1_000_000; // one byte stage per 1 MB
        p.rp_clamp_tgt_rate = 1; // every cut sets the target: room below the line rate
        let t = u64::from(p.rp_time_reset);
        let f = p.rp_threshold as u64;
        let mut rp = ReactionPoint::new(p, t0);
        rp.on_cnp(t0);
        let (mut rc, rt) = (rp.rate(), rp.target());
        // Fast recovery: half-way to the target per stage, the target unchanged.
        for n in 1..f {
            rp.advance(t0 + us(n * t));
            rc = (rc + rt) / 2.0;
            assert!(close(rp.rate(), rc), "stage {n}");
            assert_eq!(rp.target(), rt);
        }
        // Cut again to get room below the line rate for the increases to show.
        rp.on_cnp(t0 + us(f * t - 1));
        rp.on_cnp(t0 + us(f * t + 10));
        let cut_at = t0 + us(f * t + 10);
        let (mut rc2, mut rt2) = (rp.rate(), rp.target());
        for n in 1..=f + 2 {
            rp.advance(cut_at + us(n * t));
            if n >= f {
                rt2 += mbps_to_bits(p.rp_ai_rate);
            }
            rc2 = (rc2 + rt2) / 2.0;
            assert!(close(rp.target(), rt2), "additive at stage {n}");
            assert!(close(rp.rate(), rc2), "stage {n}");
        }
        // Bytes past F stages as well: hyper increase.
        let before = rp.target();
        for _ in 0..f {
            rp.on_sent(1_000_000);
        }
        assert!(rp.target() >= before + mbps_to_bits(p.rp_hai_rate) - 1.0);
    }

    #[test]
    fn the_limiter_paces_at_the_current_rate() {
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(params(), t0);
        rp.on_cnp(t0);
        let rate = rp.rate();
        // Send 4 KiB packets whenever allowed for 50 µs of simulated time: shorter than
        // rp_time_reset, so the rate stays what the cut made it.
        let mut now = t0;
        let mut sent = 0u64;
        let end = t0 + Duration::from_micros(50);
        while now < end {
            if rp.may_send(now) {
                rp.on_sent(4096);
                sent += 4096;
            } else {
                now = rp.wait_until().expect("refused, so it waits");
            }
        }
        let allowed = rate / 8.0 * 50e-6 + 4096.0 * 2.0;
        assert!((sent as f64) <= allowed, "{sent} bytes in 50 µs at {rate}");
        assert!((sent as f64) >= rate / 8.0 * 50e-6 - 4096.0);
    }

    #[test]
    fn a_long_quiet_spell_releases_the_limiter() {
        let t0 = Instant::now();
        let mut rp = ReactionPoint::new(params(), t0);
        rp.on_cnp(t0);
        rp.on_cnp(t0 + us(5));
        assert!(rp.is_limited());
        assert!(rp.may_send(t0 + Duration::from_secs(10)));
        assert!(!rp.is_limited());
        assert_eq!(rp.rate(), GBIT);
        assert!(rp.alpha() < 1e-6, "alpha decayed: {}", rp.alpha());
    }

    #[test]
    fn a_rate_for_the_first_cnp_is_set_as_is() {
        let t0 = Instant::now();
        let mut p = params();
        p.rp_rate_to_set_on_first_cnp = 300;
        let mut rp = ReactionPoint::new(p, t0);
        rp.on_cnp(t0);
        assert_eq!(rp.rate(), 300e6);
        assert_eq!(rp.target(), 300e6);
    }
}

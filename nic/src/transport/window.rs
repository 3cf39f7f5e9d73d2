//! How many packets an RC requester keeps unacknowledged: a window that losses shrink and
//! acknowledgements grow again, as IRN-style NICs bound what they keep in flight (Mittal et
//! al., "Revisiting Network Support for RDMA", SIGCOMM 2018). Go-back-N sends again everything
//! after a lost packet, so the window is what one loss costs; a full window where nothing is
//! lost keeps the pipeline full, a smaller one after losses keeps each loss cheaper.
//!
//! Multiplicative decrease, once per window of data: a loss cuts the window to [`DECREASE`]
//! of itself (0.7, CUBIC's β, RFC 9438 §4.6), and further losses among the packets that were
//! in flight at that moment (the same episode — one burst of drops, or the go-back-N's own
//! duplicates) do not cut it again. A retransmission timeout (nothing came back at all) brings
//! it to the minimum. Every acknowledged packet grows it: by one below the threshold the last
//! loss set (slow start, back to the cut window quickly after a timeout), by
//! [`INCREASE`]/window above it (additive increase: two packets per window's worth
//! acknowledged).
//!
//! Why not Reno's halving and one packet per window: losses that are not congestion (a lossy
//! cable, `--faults drop=0.01`) then hold the window where AIMD settles, √(INCREASE / (p·(1 −
//! DECREASE))) packets at most for a loss rate p — 14 packets at 1% with Reno's figures, about
//! the round trip of a 25 Gbit/s line with 10 µs each way (15 packets of 4 KiB), so the line
//! idles a quarter of the time. With 0.7 and two packets it averages 29 (26 by the formula), and the simulated bench
//! (nic/tests/sim/goodput.rs) goes from 64% to 79% of the fault-free goodput at 1% loss, from
//! 17% to 25% under `drop=0.05,dup=0.02,reorder=0.05,corrupt=0.01`. No cut at all is worse
//! (65% and 8%): every loss then resends a whole window of 64. Congestion losses (a switch's
//! tail drop) still shrink the window geometrically, episode after episode.

use super::psn;

/// The most packets unacknowledged: the window of a QP that has seen no loss. 64 packets keep
/// two engines' pipeline full (the same fault-free goodput as 256).
pub const MAX: u32 = 64;
/// The least: enough for ACK coalescing and a READ or two to keep going.
pub const MIN: u32 = 4;
/// What a loss leaves of the window (RFC 9438's β_cubic).
pub const DECREASE: f64 = 0.7;
/// Packets the window grows by per window's worth acknowledged, above the threshold.
pub const INCREASE: f64 = 2.0;
/// How long a quiet line with losses behind it waits at least before a probe.
const LOSSY_PROBE_FLOOR: std::time::Duration = std::time::Duration::from_micros(250);

#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    packets: f64,
    /// Where slow start ends (the window the last loss cut to).
    threshold: f64,
    /// One past the highest PSN sent when the window was last cut: losses before it belong to
    /// that episode.
    episode_end: Option<u32>,
    /// Cuts made (losses and timeouts), for the counters.
    pub cuts: u64,
}

impl Default for Window {
    fn default() -> Window {
        Window {
            packets: f64::from(MAX),
            threshold: f64::from(MAX),
            episode_end: None,
            cuts: 0,
        }
    }
}

impl Window {
    /// Packets that may be unacknowledged now.
    pub fn packets(&self) -> u32 {
        (self.packets as u32).clamp(MIN, MAX)
    }

    /// `n` more packets were acknowledged.
    pub fn on_ack(&mut self, n: u32) {
        for _ in 0..n.min(MAX) {
            self.packets += if self.packets < self.threshold {
                1.0
            } else {
                INCREASE / self.packets
            };
        }
        self.packets = self.packets.min(f64::from(MAX));
    }

    /// The packet at PSN `lost` was lost (a sequence NAK, a gap in READ answers); `high` is one
    /// past the highest PSN sent.
    pub fn on_loss(&mut self, lost: u32, high: u32) {
        if self.episode_end.is_some_and(|end| psn::before(lost, end)) {
            return;
        }
        self.packets = (self.packets * DECREASE).max(f64::from(MIN));
        self.threshold = self.packets;
        self.episode_end = Some(high);
        self.cuts += 1;
    }

    /// The least time a quiet line waits for a probe on a lossy path, if this one has lost
    /// packets: losses are then what a quiet line most likely means, and a duplicate probe (an
    /// engine that did not run for a while) costs one packet. Whether the QP ever lost one, not
    /// whether its window is below the maximum: a window grown back to the maximum after a
    /// loss would otherwise wait a quarter of the Local ACK Timeout (17 ms at timeout 14) when
    /// a resend or a NAK is lost, more than a thousand packets' time at 25 Gbit/s.
    pub fn probe_floor(&self) -> Option<std::time::Duration> {
        self.lossy().then_some(LOSSY_PROBE_FLOOR)
    }

    /// Whether the QP ever lost a packet (or had a retransmission timeout): its timers then
    /// take a quiet line for a loss sooner (see `requester::rto_low`).
    pub fn lossy(&self) -> bool {
        self.cuts > 0
    }

    /// The retransmission timer fired: nothing at all came back.
    pub fn on_timeout(&mut self, high: u32) {
        self.threshold = (self.packets * DECREASE).max(f64::from(MIN));
        self.packets = f64::from(MIN);
        self.episode_end = Some(high);
        self.cuts += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_losses_the_window_is_full() {
        let mut w = Window::default();
        assert_eq!(w.packets(), MAX);
        w.on_ack(1000);
        assert_eq!(w.packets(), MAX);
    }

    #[test]
    fn a_loss_cuts_it_once_per_episode() {
        let mut w = Window::default();
        assert_eq!(w.probe_floor(), None, "no loss yet");
        w.on_loss(100, 164);
        // 64 × 0.7 = 44.8.
        assert_eq!(w.packets(), 44);
        assert!(w.probe_floor().is_some());
        // More drops from the same flight: no further cut.
        w.on_loss(120, 200);
        w.on_loss(163, 200);
        assert_eq!(w.packets(), 44);
        assert_eq!(w.cuts, 1);
        // A loss of a packet sent after the cut: a new episode (44.8 × 0.7 = 31.36).
        w.on_loss(164, 200);
        assert_eq!(w.packets(), 31);
        assert_eq!(w.cuts, 2);
    }

    #[test]
    fn a_qp_that_lost_packets_probes_early_even_with_its_window_grown_back() {
        let mut w = Window::default();
        w.on_loss(0, 64);
        for _ in 0..1000 {
            w.on_ack(64);
        }
        assert_eq!(w.packets(), MAX);
        assert_eq!(w.probe_floor(), Some(LOSSY_PROBE_FLOOR));
    }

    #[test]
    fn it_never_goes_below_the_minimum() {
        let mut w = Window::default();
        for n in 0..20 {
            w.on_loss(n * 1000, n * 1000 + 1);
        }
        assert_eq!(w.packets(), MIN);
    }

    #[test]
    fn after_a_loss_it_grows_additively_and_after_a_timeout_it_slow_starts_to_the_cut() {
        let mut w = Window::default();
        w.on_loss(0, 64);
        assert_eq!(w.packets(), 44);
        // Additive: two packets per window of acknowledgements (2/44.8, then 2/44.84, ...).
        w.on_ack(2);
        assert_eq!(w.packets(), 44);
        w.on_ack(3);
        assert_eq!(w.packets(), 45);
        w.on_timeout(100);
        assert_eq!(w.packets(), MIN);
        // Slow start: one per acknowledged packet up to 0.7 of the window before the timeout
        // (31.5), then additive.
        w.on_ack(10);
        assert_eq!(w.packets(), MIN + 10);
        w.on_ack(100);
        assert!((33..=40).contains(&w.packets()), "{}", w.packets());
    }

    #[test]
    fn psn_wraparound_keeps_the_episode() {
        let mut w = Window::default();
        w.on_loss(psn::MASK - 2, 5);
        w.on_loss(2, 10);
        assert_eq!(w.cuts, 1);
    }
}

//! PFC's ingress side: the bytes that came in on a port and still wait in the switch. Past the
//! XOFF threshold the switch asks the port's peer to pause (the longest pause, refreshed before
//! it runs out); back under XON it lets it go on with a zero-time pause. XOFF must leave
//! headroom below the buffer for what the peer sends before the pause reaches it.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use crate::units::{parse_bytes, show_bytes};

/// The longest pause a frame can ask for.
pub const XOFF_QUANTA: u16 = 0xffff;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub xoff: usize,
    pub xon: usize,
}

impl FromStr for Thresholds {
    type Err = String;

    /// Reads `xoff=96K,xon=32K`.
    fn from_str(text: &str) -> Result<Thresholds, String> {
        let (mut xoff, mut xon) = (None, None);
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.split_once('=') {
                Some(("xoff", v)) => xoff = Some(parse_bytes(v)?),
                Some(("xon", v)) => xon = Some(parse_bytes(v)?),
                _ => return Err(format!("`{item}` is not xoff=BYTES or xon=BYTES")),
            }
        }
        let t = Thresholds {
            xoff: xoff.ok_or("PFC needs xoff=BYTES")?,
            xon: xon.ok_or("PFC needs xon=BYTES")?,
        };
        if t.xon >= t.xoff {
            return Err(format!("xon ({}) must be below xoff ({})", t.xon, t.xoff));
        }
        Ok(t)
    }
}

impl fmt::Display for Thresholds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "xoff={},xon={}",
            show_bytes(self.xoff),
            show_bytes(self.xon)
        )
    }
}

/// What a port's peer was last told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    Go,
    /// Paused; the pause must be renewed at this time.
    Paused {
        renew_at: Instant,
    },
}

#[derive(Debug)]
pub struct IngressPfc {
    thresholds: Thresholds,
    /// Bytes from this port waiting in any egress queue.
    bytes: usize,
    told: Told,
    /// Half the longest pause at the port's rate: when an XOFF is renewed.
    renew_every: Duration,
}

impl IngressPfc {
    pub fn new(thresholds: Thresholds, rate: u64) -> IngressPfc {
        let longest = crate::queue::serialisation(usize::from(XOFF_QUANTA) * 64, rate);
        IngressPfc {
            thresholds,
            bytes: 0,
            told: Told::Go,
            renew_every: longest / 2,
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn added(&mut self, len: usize) {
        self.bytes += len;
    }

    pub fn removed(&mut self, len: usize) {
        self.bytes = self.bytes.saturating_sub(len);
    }

    /// The pause frame to send the peer now, if one is due: its time in quanta (0 = go on).
    pub fn due(&mut self, now: Instant) -> Option<u16> {
        match self.told {
            Told::Go if self.bytes >= self.thresholds.xoff => {}
            Told::Paused { .. } if self.bytes <= self.thresholds.xon => {
                self.told = Told::Go;
                return Some(0);
            }
            Told::Paused { renew_at } if now >= renew_at => {}
            _ => return None,
        }
        self.told = Told::Paused {
            renew_at: now + self.renew_every,
        };
        Some(XOFF_QUANTA)
    }

    /// When [`IngressPfc::due`] must be asked again even if nothing arrives or leaves.
    pub fn deadline(&self) -> Option<Instant> {
        match self.told {
            Told::Paused { renew_at } => Some(renew_at),
            Told::Go => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xoff_past_the_threshold_renewed_in_time_and_xon_below_the_other() {
        let t0 = Instant::now();
        let thresholds: Thresholds = "xoff=10K,xon=4K".parse().unwrap();
        // 1 Gbit/s: the longest pause is 33.5 ms, renewed every 16.8 ms.
        let mut pfc = IngressPfc::new(thresholds, 1_000_000_000);
        pfc.added(9 * 1024);
        assert_eq!(pfc.due(t0), None);
        pfc.added(1024);
        assert_eq!(pfc.due(t0), Some(XOFF_QUANTA));
        assert_eq!(pfc.due(t0), None, "told once");
        let renew = pfc.deadline().unwrap();
        assert_eq!(renew - t0, Duration::from_nanos(16_776_960));
        assert_eq!(
            pfc.due(renew),
            Some(XOFF_QUANTA),
            "renewed before it ran out"
        );
        pfc.removed(5 * 1024);
        assert_eq!(pfc.due(renew), None, "still above XON");
        pfc.removed(1024);
        assert_eq!(pfc.due(renew), Some(0));
        assert_eq!(pfc.deadline(), None);
        assert_eq!(pfc.due(renew + Duration::from_secs(1)), None);
    }

    #[test]
    fn thresholds_parse_and_nonsense_is_refused() {
        assert_eq!(
            "xoff=96K,xon=32K".parse::<Thresholds>(),
            Ok(Thresholds {
                xoff: 96 * 1024,
                xon: 32 * 1024
            })
        );
        for bad in ["xoff=1K,xon=2K", "xoff=1K", "xoff=1K,xon=0,x=1"] {
            assert!(bad.parse::<Thresholds>().is_err(), "{bad}");
        }
    }
}

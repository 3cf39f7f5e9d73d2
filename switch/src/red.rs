//! RED with ECN, as RoCE switches configure it for DCQCN: an ECN-capable packet that joins an
//! egress queue is marked CE with a probability that is 0 up to Kmin bytes of queue, rises
//! linearly to Pmax at Kmax, and is 1 beyond. The queue length is the instantaneous one (as
//! in the DCQCN paper and the switches it describes), not RED's moving average. Packets that
//! are not ECN-capable are never dropped by RED here: only a full buffer drops (tail drop).

use std::fmt;
use std::str::FromStr;

use crate::units::{parse_bytes, show_bytes};

/// The marking thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Red {
    /// Bytes of queue below which nothing is marked.
    pub kmin: usize,
    /// Bytes of queue from which everything ECN-capable is marked.
    pub kmax: usize,
    /// The probability of marking just below Kmax.
    pub pmax: f64,
}

impl Red {
    /// How likely a packet that finds `queue` bytes ahead of it is to be marked.
    pub fn probability(&self, queue: usize) -> f64 {
        if queue <= self.kmin {
            0.0
        } else if queue >= self.kmax {
            1.0
        } else {
            self.pmax * (queue - self.kmin) as f64 / (self.kmax - self.kmin) as f64
        }
    }
}

impl FromStr for Red {
    type Err = String;

    /// Reads `kmin=5K,kmax=200K,pmax=0.01` (bytes with K or M for KiB and MiB).
    fn from_str(text: &str) -> Result<Red, String> {
        let (mut kmin, mut kmax, mut pmax) = (None, None, None);
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| format!("`{item}` is not name=value"))?;
            match key {
                "kmin" => kmin = Some(parse_bytes(value)?),
                "kmax" => kmax = Some(parse_bytes(value)?),
                "pmax" => {
                    pmax = Some(
                        value
                            .parse::<f64>()
                            .ok()
                            .filter(|p| (0.0..=1.0).contains(p))
                            .ok_or_else(|| format!("pmax={value}: a probability is 0 to 1"))?,
                    )
                }
                _ => return Err(format!("unknown RED setting `{key}` (kmin, kmax, pmax)")),
            }
        }
        let missing = |what| format!("RED needs {what} (kmin=BYTES,kmax=BYTES,pmax=P)");
        let red = Red {
            kmin: kmin.ok_or_else(|| missing("kmin"))?,
            kmax: kmax.ok_or_else(|| missing("kmax"))?,
            pmax: pmax.ok_or_else(|| missing("pmax"))?,
        };
        if red.kmin >= red.kmax {
            return Err(format!(
                "kmin ({}) must be below kmax ({})",
                red.kmin, red.kmax
            ));
        }
        Ok(red)
    }
}

impl fmt::Display for Red {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kmin={},kmax={},pmax={}",
            show_bytes(self.kmin),
            show_bytes(self.kmax),
            self.pmax
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probability_rises_from_kmin_to_pmax_at_kmax_then_jumps_to_one() {
        let red: Red = "kmin=10K,kmax=110K,pmax=0.1".parse().unwrap();
        assert_eq!(red.kmin, 10 * 1024);
        assert_eq!(red.probability(0), 0.0);
        assert_eq!(red.probability(10 * 1024), 0.0);
        let mid = red.probability(60 * 1024);
        assert!((mid - 0.05).abs() < 1e-9, "{mid}");
        assert!(red.probability(110 * 1024 - 1) < 0.1 + 1e-9);
        assert_eq!(red.probability(110 * 1024), 1.0);
        assert_eq!(red.to_string(), "kmin=10K,kmax=110K,pmax=0.1");
    }

    #[test]
    fn bad_settings_are_refused() {
        for bad in [
            "kmin=10K,kmax=5K,pmax=0.1",
            "kmin=10K,kmax=50K",
            "kmin=10K,kmax=50K,pmax=2",
            "kmin=x,kmax=50K,pmax=0.1",
            "kmin=1K,kmax=50K,pmax=0.1,gain=3",
        ] {
            assert!(bad.parse::<Red>().is_err(), "{bad}");
        }
    }
}

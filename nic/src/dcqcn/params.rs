//! DCQCN's parameters, named and scaled as NVIDIA's mlx5 NICs name them (the `rp_*` and `np_*`
//! congestion-control parameters of the mlx5 driver and NVIDIA's "DCQCN parameters" tables):
//! times in microseconds, rates in Mbit/s, alpha and its gain in 1/1024ths, percentages.
//!
//! The defaults are those tables' where the emulator can honour them (the 300 µs increase
//! timer, 4 µs between cuts, AI 5 and HAI 50 Mbit/s, a cut of at most 50%, initial alpha
//! 1023), and the DCQCN paper's (Zhu et al., SIGCOMM 2015) where the hardware's assume a NIC
//! that reacts in nanoseconds: an emulated NIC's engine is a thread that may not run for a
//! millisecond on a busy machine, so a CNP at most every 50 µs per QP (the paper's N, not
//! mlx5's 4 µs), alpha updated every 55 µs with gain 1/256 (the paper's K and g:
//! `rp_dce_tcp_g` 1020 keeps 1020/1024 of alpha, not mlx5's 1 µs and 1019), a byte stage every
//! 10 MB (the paper's B) and the paper's F = 5 stages of fast recovery. With these, a 4:1
//! incast at 1 Gbit/s through RED marking converges to fair shares without a drop
//! (`roce_switch::incast`'s tests).

use std::fmt;
use std::time::Duration;

/// Every parameter of both ends of DCQCN for one NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// NP: the least time between two CNPs for one QP, µs.
    pub np_min_time_between_cnps: u32,
    /// NP: the DSCP of the CNPs we send (48, CS6, as the ConnectX-4 Lx capture has).
    pub np_cnp_dscp: u8,
    /// RP: alpha's memory, in 1/1024ths: every `rp_dce_tcp_rtt` alpha becomes
    /// `g/1024 · alpha + (1 - g/1024) · [a CNP came]`. The paper's gain g is `1 - this/1024`.
    pub rp_dce_tcp_g: u32,
    /// RP: the alpha update period, µs.
    pub rp_dce_tcp_rtt: u32,
    /// RP: alpha when a QP starts, in 1/1024ths (1023: the first CNP halves the rate).
    pub rp_initial_alpha_value: u32,
    /// RP: the least time between two rate cuts, µs; CNPs within it are folded into the next.
    pub rp_rate_reduce_monitor_period: u32,
    /// RP: the largest cut of one reduction, percent of the current rate.
    pub rp_min_dec_fac: u32,
    /// RP: the rate no cut goes below, Mbit/s.
    pub rp_min_rate: u32,
    /// RP: the rate limit when no CNP has come (and the most any increase reaches), Mbit/s;
    /// 0: the NIC's line rate.
    pub rp_max_rate: u32,
    /// RP: the rate the first CNP of a QP sets, Mbit/s; 0: cut from the max rate as any other.
    pub rp_rate_to_set_on_first_cnp: u32,
    /// RP: the increase timer: one timer stage per this many µs without a cut.
    pub rp_time_reset: u32,
    /// RP: the byte counter: one byte stage per this many bytes sent without a cut.
    pub rp_byte_reset: u32,
    /// RP: stages of fast recovery (F) before additive, then hyper increase.
    pub rp_threshold: u32,
    /// RP: the additive increase of the target rate, Mbit/s.
    pub rp_ai_rate: u32,
    /// RP: the hyper increase of the target rate, Mbit/s.
    pub rp_hai_rate: u32,
    /// RP: 1: every cut first sets the target rate to the current rate.
    pub rp_clamp_tgt_rate: u32,
    /// RP: 1: a cut sets the target rate to the current rate if the timer raised the rate
    /// since the last cut (with `rp_clamp_tgt_rate` 0).
    pub rp_clamp_tgt_rate_ati: u32,
}

impl Default for Params {
    fn default() -> Params {
        Params {
            np_min_time_between_cnps: 50,
            np_cnp_dscp: 48,
            rp_dce_tcp_g: 1020,
            rp_dce_tcp_rtt: 55,
            rp_initial_alpha_value: 1023,
            rp_rate_reduce_monitor_period: 4,
            rp_min_dec_fac: 50,
            rp_min_rate: 1,
            rp_max_rate: 0,
            rp_rate_to_set_on_first_cnp: 0,
            rp_time_reset: 300,
            rp_byte_reset: 10_000_000,
            rp_threshold: 5,
            rp_ai_rate: 5,
            rp_hai_rate: 50,
            rp_clamp_tgt_rate: 0,
            rp_clamp_tgt_rate_ati: 1,
        }
    }
}

/// A parameter assignment that could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("{0:?} is not NAME=VALUE with a whole number")]
    Malformed(String),
    #[error("no DCQCN parameter is named {0:?} (they are: {names})", names = NAMES.join(", "))]
    Unknown(String),
    #[error("{name} = {value} is out of range (at most {max})")]
    TooHigh { name: String, value: u64, max: u64 },
    #[error("{name} cannot be 0")]
    Zero { name: String },
}

/// The names, in the order [`Params::iter`] gives them.
pub const NAMES: [&str; 17] = [
    "np_min_time_between_cnps",
    "np_cnp_dscp",
    "rp_dce_tcp_g",
    "rp_dce_tcp_rtt",
    "rp_initial_alpha_value",
    "rp_rate_reduce_monitor_period",
    "rp_min_dec_fac",
    "rp_min_rate",
    "rp_max_rate",
    "rp_rate_to_set_on_first_cnp",
    "rp_time_reset",
    "rp_byte_reset",
    "rp_threshold",
    "rp_ai_rate",
    "rp_hai_rate",
    "rp_clamp_tgt_rate",
    "rp_clamp_tgt_rate_ati",
];

impl Params {
    /// Every parameter with its name and value.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        let values = [
            self.np_min_time_between_cnps,
            u32::from(self.np_cnp_dscp),
            self.rp_dce_tcp_g,
            self.rp_dce_tcp_rtt,
            self.rp_initial_alpha_value,
            self.rp_rate_reduce_monitor_period,
            self.rp_min_dec_fac,
            self.rp_min_rate,
            self.rp_max_rate,
            self.rp_rate_to_set_on_first_cnp,
            self.rp_time_reset,
            self.rp_byte_reset,
            self.rp_threshold,
            self.rp_ai_rate,
            self.rp_hai_rate,
            self.rp_clamp_tgt_rate,
            self.rp_clamp_tgt_rate_ati,
        ];
        NAMES.into_iter().zip(values.map(u64::from))
    }

    /// Sets one parameter from `NAME=VALUE`.
    pub fn set(&mut self, assignment: &str) -> Result<(), ParamError> {
        let malformed = || ParamError::Malformed(assignment.to_owned());
        let (name, value) = assignment.split_once('=').ok_or_else(malformed)?;
        let (name, value) = (name.trim(), value.trim());
        let value: u64 = value.parse().map_err(|_| malformed())?;
        let (max, zero_ok): (u64, bool) = match name {
            "np_cnp_dscp" => (63, true),
            "rp_dce_tcp_g" | "rp_initial_alpha_value" => (1024, true),
            "rp_min_dec_fac" => (100, false),
            "rp_clamp_tgt_rate" | "rp_clamp_tgt_rate_ati" => (1, true),
            "rp_dce_tcp_rtt" | "rp_time_reset" | "rp_byte_reset" | "rp_min_rate" => {
                (u64::from(u32::MAX), false)
            }
            _ => (u64::from(u32::MAX), true),
        };
        if value > max {
            return Err(ParamError::TooHigh {
                name: name.to_owned(),
                value,
                max,
            });
        }
        if value == 0 && !zero_ok {
            return Err(ParamError::Zero {
                name: name.to_owned(),
            });
        }
        let v = value as u32;
        match name {
            "np_min_time_between_cnps" => self.np_min_time_between_cnps = v,
            "np_cnp_dscp" => self.np_cnp_dscp = v as u8,
            "rp_dce_tcp_g" => self.rp_dce_tcp_g = v,
            "rp_dce_tcp_rtt" => self.rp_dce_tcp_rtt = v,
            "rp_initial_alpha_value" => self.rp_initial_alpha_value = v,
            "rp_rate_reduce_monitor_period" => self.rp_rate_reduce_monitor_period = v,
            "rp_min_dec_fac" => self.rp_min_dec_fac = v,
            "rp_min_rate" => self.rp_min_rate = v,
            "rp_max_rate" => self.rp_max_rate = v,
            "rp_rate_to_set_on_first_cnp" => self.rp_rate_to_set_on_first_cnp = v,
            "rp_time_reset" => self.rp_time_reset = v,
            "rp_byte_reset" => self.rp_byte_reset = v,
            "rp_threshold" => self.rp_threshold = v,
            "rp_ai_rate" => self.rp_ai_rate = v,
            "rp_hai_rate" => self.rp_hai_rate = v,
            "rp_clamp_tgt_rate" => self.rp_clamp_tgt_rate = v,
            "rp_clamp_tgt_rate_ati" => self.rp_clamp_tgt_rate_ati = v,
            _ => return Err(ParamError::Unknown(name.to_owned())),
        }
        Ok(())
    }

    /// Sets the max rate from the NIC's line rate unless `rp_max_rate` was given.
    pub fn with_line_rate(mut self, bits_per_second: u64) -> Params {
        if self.rp_max_rate == 0 {
            self.rp_max_rate = u32::try_from(bits_per_second / 1_000_000)
                .unwrap_or(u32::MAX)
                .max(1);
        }
        self
    }

    /// The most the limiter allows, bits/s: `rp_max_rate`, or 10 Gbit/s for a NIC without a
    /// line rate (a software link has none; the first CNPs bring it down quickly).
    pub fn max_rate(&self) -> f64 {
        match self.rp_max_rate {
            0 => 10e9,
            mbps => mbps_to_bits(mbps),
        }
    }

    pub(crate) fn us(value: u32) -> Duration {
        Duration::from_micros(u64::from(value))
    }
}

pub(crate) fn mbps_to_bits(mbps: u32) -> f64 {
    f64::from(mbps) * 1e6
}

impl fmt::Display for Params {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, value) in self.iter() {
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{name}={value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_parameter_is_settable_by_its_name_and_shown_back() {
        let mut p = Params::default();
        for (n, name) in NAMES.iter().enumerate() {
            let value = if name.contains("clamp") {
                1
            } else {
                n as u64 + 1
            };
            p.set(&format!("{name}={value}")).unwrap();
            assert_eq!(p.iter().nth(n), Some((*name, value)), "{name}");
        }
        let shown = p.to_string();
        let mut again = Params::default();
        for assignment in shown.split(',') {
            again.set(assignment).unwrap();
        }
        assert_eq!(again, p);
    }

    #[test]
    fn bad_assignments_say_why() {
        let mut p = Params::default();
        assert!(matches!(p.set("rp_g=3"), Err(ParamError::Unknown(_))));
        assert!(matches!(p.set("rp_ai_rate"), Err(ParamError::Malformed(_))));
        assert!(matches!(
            p.set("rp_ai_rate=-1"),
            Err(ParamError::Malformed(_))
        ));
        assert!(matches!(
            p.set("rp_dce_tcp_g=1025"),
            Err(ParamError::TooHigh { .. })
        ));
        assert!(matches!(
            p.set("rp_time_reset=0"),
            Err(ParamError::Zero { .. })
        ));
        assert_eq!(p, Params::default(), "nothing changed");
    }

    #[test]
    fn the_line_rate_is_the_max_rate_unless_one_was_given() {
        let p = Params::default().with_line_rate(1_000_000_000);
        assert_eq!(p.max_rate(), 1e9);
        let mut q = Params::default();
        q.set("rp_max_rate=400").unwrap();
        assert_eq!(q.with_line_rate(1_000_000_000).max_rate(), 400e6);
        assert_eq!(Params::default().max_rate(), 10e9);
    }
}

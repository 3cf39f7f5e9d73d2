//! What a NIC lets its hosts create, in all and per host, as a real RNIC has limits and reports
//! them (`ibv_devinfo -v`: max_qp, max_cq, max_mr, ...). Without them one host program could
//! take every descriptor, thread and byte of shared memory of the NIC process.
//!
//! A host is one process (the peer of a control connection, by PID; a host in the NIC's own
//! process has no per-host limits). Going over a count answers ENOMEM, as `ibv_create_qp` does
//! when a device is out of QPs; a size above a per-object maximum (max_cqe, max_qp_wr, ...)
//! answers EINVAL.

use std::fmt;

use crate::engine::objects::{MAX_CQE, MAX_QP_WR};
use crate::wqe::{MAX_INLINE, MAX_SGE};

/// The limits of one NIC. Every field can be set with `roce nic --limit NAME=VALUE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Limits {
    pub max_qp: u64,
    pub max_cq: u64,
    pub max_mr: u64,
    pub max_pd: u64,
    pub max_ah: u64,
    /// Shared receive queues.
    pub max_srq: u64,
    /// Entries of one completion queue.
    pub max_cqe: u64,
    /// Work requests of one send or receive queue.
    pub max_qp_wr: u64,
    /// Scatter/gather entries of one work request.
    pub max_sge: u64,
    /// Bytes of inline data of one send.
    pub max_inline: u64,
    /// Bytes of one memory registration.
    pub max_mr_size: u64,
    /// Bytes of rings the NIC makes for its hosts, in all.
    pub max_shm: u64,
    /// Hosts connected at once (control connections).
    pub max_connections: u64,
    pub host_max_qp: u64,
    pub host_max_cq: u64,
    pub host_max_mr: u64,
    pub host_max_pd: u64,
    pub host_max_ah: u64,
    pub host_max_srq: u64,
    /// Bytes of rings one host's objects take.
    pub host_max_shm: u64,
    pub host_max_connections: u64,
    /// Verbs contexts one host has open.
    pub host_max_contexts: u64,
}

impl Default for Limits {
    /// Sized so that a NIC at every limit stays under the usual 1024 open descriptors (a QP
    /// holds one, a CQ two, a connection three) and a gigabyte of rings.
    fn default() -> Limits {
        Limits {
            max_qp: 256,
            max_cq: 256,
            max_mr: 4096,
            max_pd: 1024,
            max_ah: 4096,
            max_srq: 256,
            max_cqe: u64::from(MAX_CQE),
            max_qp_wr: u64::from(MAX_QP_WR),
            max_sge: u64::from(MAX_SGE),
            max_inline: u64::from(MAX_INLINE),
            max_mr_size: roce_hostmem::MAX_SIZE,
            max_shm: 1 << 30,
            max_connections: 64,
            host_max_qp: 64,
            host_max_cq: 64,
            host_max_mr: 1024,
            host_max_pd: 256,
            host_max_ah: 1024,
            host_max_srq: 64,
            host_max_shm: 256 << 20,
            host_max_connections: 8,
            host_max_contexts: 32,
        }
    }
}

/// Why a limit could not be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    #[error("unknown limit {0:?} (known: {names})", names = Limits::default().names().join(", "))]
    Unknown(String),
    #[error("{name} can be at most {max}, not {value}")]
    TooHigh { name: String, value: u64, max: u64 },
    #[error("{0:?} is not NAME=VALUE with a whole number")]
    Malformed(String),
}

macro_rules! fields {
    ($self:ident, $f:ident) => {
        [
            ("max_qp", $f!($self.max_qp)),
            ("max_cq", $f!($self.max_cq)),
            ("max_mr", $f!($self.max_mr)),
            ("max_pd", $f!($self.max_pd)),
            ("max_ah", $f!($self.max_ah)),
            ("max_srq", $f!($self.max_srq)),
            ("max_cqe", $f!($self.max_cqe)),
            ("max_qp_wr", $f!($self.max_qp_wr)),
            ("max_sge", $f!($self.max_sge)),
            ("max_inline", $f!($self.max_inline)),
            ("max_mr_size", $f!($self.max_mr_size)),
            ("max_shm", $f!($self.max_shm)),
            ("max_connections", $f!($self.max_connections)),
            ("host_max_qp", $f!($self.host_max_qp)),
            ("host_max_cq", $f!($self.host_max_cq)),
            ("host_max_mr", $f!($self.host_max_mr)),
            ("host_max_pd", $f!($self.host_max_pd)),
            ("host_max_ah", $f!($self.host_max_ah)),
            ("host_max_srq", $f!($self.host_max_srq)),
            ("host_max_shm", $f!($self.host_max_shm)),
            ("host_max_connections", $f!($self.host_max_connections)),
            ("host_max_contexts", $f!($self.host_max_contexts)),
        ]
    };
}

macro_rules! value {
    ($e:expr) => {
        $e
    };
}

macro_rules! place {
    ($e:expr) => {
        &mut $e
    };
}

impl Limits {
    /// Every limit as `(name, value)`, in the order `ibv_devinfo -v` would list them.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> {
        fields!(self, value).into_iter()
    }

    fn names(&self) -> Vec<&'static str> {
        self.iter().map(|(name, _)| name).collect()
    }

    /// Sets one limit from `NAME=VALUE`. Sizes per object cannot go above what the rings'
    /// layout allows.
    pub fn set(&mut self, assignment: &str) -> Result<(), LimitError> {
        let malformed = || LimitError::Malformed(assignment.to_owned());
        let (name, value) = assignment.split_once('=').ok_or_else(malformed)?;
        let value: u64 = value.trim().parse().map_err(|_| malformed())?;
        let name = name.trim();
        let ceiling = Limits::default();
        let max = match name {
            "max_cqe" => ceiling.max_cqe,
            "max_qp_wr" => ceiling.max_qp_wr,
            "max_sge" => ceiling.max_sge,
            "max_inline" => ceiling.max_inline,
            "max_mr_size" => ceiling.max_mr_size,
            _ => u64::MAX,
        };
        if value > max {
            return Err(LimitError::TooHigh {
                name: name.to_owned(),
                value,
                max,
            });
        }
        let places = fields!(self, place);
        let place = places
            .into_iter()
            .find(|(n, _)| *n == name)
            .ok_or_else(|| LimitError::Unknown(name.to_owned()))?
            .1;
        *place = value;
        Ok(())
    }
}

/// `name value` lines, as `ibv_devinfo -v` prints its attributes.
impl fmt::Display for Limits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, value) in self.iter() {
            writeln!(f, "{name}: {value}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_set_by_name_and_checked() {
        let mut limits = Limits::default();
        limits.set("max_qp=8").unwrap();
        limits.set("host_max_contexts = 2").unwrap();
        assert_eq!((limits.max_qp, limits.host_max_contexts), (8, 2));
        assert!(matches!(
            limits.set("max_qpx=1"),
            Err(LimitError::Unknown(_))
        ));
        assert!(matches!(
            limits.set("max_qp"),
            Err(LimitError::Malformed(_))
        ));
        assert!(matches!(
            limits.set("max_qp=-1"),
            Err(LimitError::Malformed(_))
        ));
        assert!(matches!(
            limits.set("max_cqe=1000000"),
            Err(LimitError::TooHigh { .. })
        ));
        assert!(limits.to_string().contains("max_qp: 8\n"));
    }
}

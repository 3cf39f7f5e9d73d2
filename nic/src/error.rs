//! Errors of the verbs API (and of the control requests the engine answers): one sentence each,
//! naming what was refused and why.

use roce_hostmem::{MrError, RegionError};

use crate::qp::ModifyError;
use crate::ring::RingError;
use crate::wqe::WqeError;

/// Why a verb failed.
#[derive(Debug, thiserror::Error)]
pub enum VerbsError {
    #[error(transparent)]
    Modify(#[from] ModifyError),
    #[error(transparent)]
    Mr(#[from] MrError),
    #[error(transparent)]
    Region(#[from] RegionError),
    #[error(transparent)]
    Ring(#[from] RingError),
    #[error(transparent)]
    WorkRequest(#[from] WqeError),
    /// The object does not exist, or belongs to another host program.
    #[error("no {kind} {id:#x} in this context")]
    NoSuchObject { kind: &'static str, id: u32 },
    #[error("{0} is still in use")]
    Busy(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("the send queue is full ({0} requests outstanding)")]
    SendQueueFull(u32),
    #[error("the receive queue is full ({0} requests outstanding)")]
    RecvQueueFull(u32),
    /// The NIC found the completion queue full and lost a completion: the queue is in error and
    /// its QPs are too (poll it more often, or make it larger).
    #[error("completion queue {0:#x} overran: completions were lost, and its QPs are in the error state")]
    CqOverrun(u32),
    /// No NIC process of that name answers on this machine.
    #[error("no NIC named {nic} is running (nothing answers at {})", path.display())]
    NoDevice {
        nic: String,
        path: std::path::PathBuf,
    },
    /// The NIC's engine has stopped, or its process has gone away.
    #[error("the NIC {nic} has stopped")]
    DeviceGone { nic: String },
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// An error of a NIC in another process that has no kind of its own here: its sentence
    /// and the errno it stands for.
    #[error("{message}")]
    Remote { errno: i32, message: String },
    /// A limit of the NIC (`scope` "NIC") or of this host ("host") is reached.
    #[error("the {scope}'s limit of {limit} {what} is reached")]
    LimitReached {
        what: &'static str,
        scope: &'static str,
        limit: u64,
    },
}

impl VerbsError {
    /// The errno a verbs program gets for this error from libibverbs.
    pub fn errno(&self) -> i32 {
        match self {
            VerbsError::LimitReached { .. } => libc::ENOMEM,
            VerbsError::Remote { errno, .. } => *errno,
            VerbsError::Busy(_) => libc::EBUSY,
            VerbsError::SendQueueFull(_) | VerbsError::RecvQueueFull(_) => libc::ENOMEM,
            VerbsError::DeviceGone { .. } | VerbsError::NoDevice { .. } => libc::ENODEV,
            VerbsError::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            VerbsError::Region(roce_hostmem::RegionError::NoRoom { .. }) => libc::ENOMEM,
            VerbsError::Region(
                roce_hostmem::RegionError::Untrusted { .. }
                | roce_hostmem::RegionError::DeviceMemory,
            ) => libc::EACCES,
            VerbsError::Mr(MrError::PdBusy { .. }) => libc::EBUSY,
            VerbsError::Mr(MrError::TableFull) => libc::ENOMEM,
            _ => libc::EINVAL,
        }
    }
}

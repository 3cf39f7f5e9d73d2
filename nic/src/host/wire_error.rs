//! Errors as they cross the socket: the structured errors whose parts are static (which object,
//! what is busy, which limit) keep their kind, I/O errors their kind, and the others arrive as
//! their sentence and errno, the same sentence the in-process API gives.

use std::io;

use serde::{Deserialize, Serialize};

use crate::error::VerbsError;

/// Longest sentence an error carries across; longer ones are cut at a character boundary.
const MAX_SENTENCE: usize = 4096;

/// A [`VerbsError`] on the wire.
#[derive(Debug, Serialize, Deserialize)]
pub enum WireError {
    NoSuchObject {
        kind: String,
        id: u32,
    },
    Busy(String),
    SendQueueFull(u32),
    RecvQueueFull(u32),
    DeviceGone {
        nic: String,
    },
    Other {
        message: String,
        errno: i32,
    },
    Io {
        kind: u8,
        message: String,
    },
    LimitReached {
        what: String,
        scope: String,
        limit: u64,
    },
}

/// The kinds of I/O error that cross as themselves (the port's TCP fails like the socket calls
/// it stands for: refused, timed out, reset...); others arrive as `Other`. The index is the
/// code on the wire, so the list only grows at its end.
const IO_KINDS: [io::ErrorKind; 14] = [
    io::ErrorKind::Other,
    io::ErrorKind::NotFound,
    io::ErrorKind::PermissionDenied,
    io::ErrorKind::ConnectionRefused,
    io::ErrorKind::ConnectionReset,
    io::ErrorKind::ConnectionAborted,
    io::ErrorKind::NotConnected,
    io::ErrorKind::AddrInUse,
    io::ErrorKind::AddrNotAvailable,
    io::ErrorKind::BrokenPipe,
    io::ErrorKind::WouldBlock,
    io::ErrorKind::InvalidInput,
    io::ErrorKind::TimedOut,
    io::ErrorKind::NetworkUnreachable,
];

/// The names the engine uses in its structured errors; an unknown one keeps its sentence.
const NAMES: [&str; 25] = [
    "protection domain",
    "memory registration",
    "completion queue",
    "QP",
    "address handle",
    "the completion queue",
    "the protection domain (a QP uses it)",
    "the protection domain (an address handle uses it)",
    "QP1 (the GSI)",
    "QPs",
    "completion queues",
    "memory registrations",
    "protection domains",
    "address handles",
    "bytes of rings",
    "NIC",
    "host",
    "the protection domain (a memory registration uses it)",
    "contexts",
    "connections",
    "CM ID",
    "shared receive queue",
    "shared receive queues",
    "the shared receive queue (a QP uses it)",
    "the protection domain (a shared receive queue uses it)",
];

fn known(name: &str) -> Option<&'static str> {
    NAMES.iter().copied().find(|n| *n == name)
}

fn sentence(text: &str) -> String {
    let mut end = text.len().min(MAX_SENTENCE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_owned()
}

impl From<&VerbsError> for WireError {
    fn from(error: &VerbsError) -> WireError {
        match error {
            VerbsError::NoSuchObject { kind, id } => WireError::NoSuchObject {
                kind: (*kind).into(),
                id: *id,
            },
            VerbsError::Busy(what) => WireError::Busy((*what).into()),
            VerbsError::SendQueueFull(n) => WireError::SendQueueFull(*n),
            VerbsError::RecvQueueFull(n) => WireError::RecvQueueFull(*n),
            VerbsError::DeviceGone { nic } => WireError::DeviceGone { nic: sentence(nic) },
            VerbsError::LimitReached { what, scope, limit } => WireError::LimitReached {
                what: (*what).into(),
                scope: (*scope).into(),
                limit: *limit,
            },
            VerbsError::Io(e) => WireError::Io {
                kind: IO_KINDS.iter().position(|k| *k == e.kind()).unwrap_or(0) as u8,
                message: sentence(&e.to_string()),
            },
            other => WireError::Other {
                message: sentence(&other.to_string()),
                errno: other.errno(),
            },
        }
    }
}

impl From<WireError> for VerbsError {
    fn from(error: WireError) -> VerbsError {
        match error {
            WireError::NoSuchObject { kind, id } => match known(&kind) {
                Some(kind) => VerbsError::NoSuchObject { kind, id },
                None => VerbsError::Invalid(format!("no {kind} {id:#x} in this context")),
            },
            WireError::Busy(what) => match known(&what) {
                Some(what) => VerbsError::Busy(what),
                None => VerbsError::Invalid(format!("{what} is still in use")),
            },
            WireError::SendQueueFull(n) => VerbsError::SendQueueFull(n),
            WireError::RecvQueueFull(n) => VerbsError::RecvQueueFull(n),
            WireError::DeviceGone { nic } => VerbsError::DeviceGone { nic },
            WireError::Other { message, errno } => match errno {
                libc::EINVAL => VerbsError::Invalid(message),
                errno => VerbsError::Remote { errno, message },
            },
            WireError::Io { kind, message } => {
                let kind = IO_KINDS
                    .get(usize::from(kind))
                    .copied()
                    .unwrap_or(io::ErrorKind::Other);
                VerbsError::Io(io::Error::new(kind, message))
            }
            WireError::LimitReached { what, scope, limit } => match (known(&what), known(&scope)) {
                (Some(what), Some(scope)) => VerbsError::LimitReached { what, scope, limit },
                _ => {
                    VerbsError::Invalid(format!("the {scope}'s limit of {limit} {what} is reached"))
                }
            },
        }
    }
}

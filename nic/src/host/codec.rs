//! Control messages as bytes: serde's derives on the message types ([`super::messages`],
//! [`crate::control`]) in postcard's format, with the descriptors a message carries passed
//! beside its bytes ([`super::fdpass`]).
//!
//! postcard because it is compact (varints, no field names, an enum variant is its index), needs
//! no schema kept beside the types, and has a documented wire format that is stable since its
//! 1.0: the bytes on the socket follow from the type declarations alone, so each message is
//! declared once.
//!
//! What the codec guarantees for any bytes and descriptors a peer sends:
//! - Bounded memory: [`super::fdpass`] refuses a message over its size limit before reading it;
//!   postcard believes no length that the rest of the message cannot hold, and lists that may
//!   be long have caps of their own ([`fields::at_most`]), so decoding allocates no more than
//!   the message's own size in strings plus the lists' caps (the tests measure it).
//! - Valid values: each value passes the checks of its type (enum tags, `Access` bits, ...), so
//!   a request the NIC reads is one the verbs API could have made.
//! - Matched descriptors: a message names the descriptors that came with it by index; naming
//!   one that did not come, or bringing one it does not name, makes it malformed.
//! - No panic: whatever is wrong is a [`DecodeError`].

use std::cell::RefCell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Arc;

use roce_hostmem::Region;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::fdpass::Received;
use crate::error::VerbsError;

pub mod fields;

/// Maps a region's descriptor that came with a message (the NIC: a host's memory; a host: the
/// NIC's rings), after whatever checks the receiver makes.
pub type Map = dyn FnMut(OwnedFd) -> Result<Arc<Region>, VerbsError>;

/// A message ready to send: its bytes and the descriptors that go beside them (duplicates,
/// closed once sent).
#[derive(Debug)]
pub struct Encoded {
    pub bytes: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

impl Encoded {
    pub fn fds(&self) -> Vec<BorrowedFd<'_>> {
        self.fds.iter().map(AsFd::as_fd).collect()
    }
}

/// Why a received message was not taken.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// Not a message of this protocol: the peer is broken or hostile.
    #[error(transparent)]
    Malformed(Malformed),
    /// A well-formed message whose memory the receiver refused to map.
    #[error(transparent)]
    Refused(VerbsError),
}

/// What is wrong with a malformed message, and where its reading stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the control message is not valid: {reason} (at byte {at} of {len})")]
pub struct Malformed {
    pub reason: String,
    pub at: usize,
    pub len: usize,
}

impl From<Malformed> for VerbsError {
    fn from(e: Malformed) -> VerbsError {
        VerbsError::Invalid(e.to_string())
    }
}

impl From<DecodeError> for VerbsError {
    fn from(e: DecodeError) -> VerbsError {
        match e {
            DecodeError::Malformed(m) => m.into(),
            DecodeError::Refused(e) => e,
        }
    }
}

/// Encodes `message`; its descriptor fields collect what goes beside the bytes. A value that
/// cannot cross (memory without a descriptor) is the error saying why.
pub fn encode<T: Serialize + ?Sized>(message: &T) -> Result<Encoded, VerbsError> {
    let previous = OUTGOING.replace(Some(Outgoing::default()));
    let bytes = postcard::to_stdvec(message);
    let outgoing = OUTGOING.replace(previous).unwrap_or_default();
    match (bytes, outgoing.failure) {
        (Ok(bytes), None) => Ok(Encoded {
            bytes,
            fds: outgoing.fds,
        }),
        (_, Some(failure)) => Err(failure),
        (Err(e), None) => Err(VerbsError::Invalid(format!(
            "a control message could not be encoded: {e}"
        ))),
    }
}

/// Decodes one message of type `T`, mapping the regions it passes with `map` (each once, however
/// often the message names it).
pub fn decode<T: DeserializeOwned>(
    received: Received,
    map: impl FnMut(OwnedFd) -> Result<Arc<Region>, VerbsError> + 'static,
) -> Result<T, DecodeError> {
    let Received { bytes, fds } = received;
    let previous = INCOMING.replace(Some(Incoming {
        slots: fds.into_iter().map(Slot::Unread).collect(),
        map: Box::new(map),
        failure: None,
    }));
    let mut deserializer = postcard::Deserializer::from_bytes(&bytes);
    let value = T::deserialize(&mut deserializer);
    let rest = deserializer.finalize().map_or(0, |rest| rest.len());
    let incoming = INCOMING.replace(previous);
    let malformed = |reason: String| {
        DecodeError::Malformed(Malformed {
            reason,
            at: bytes.len().saturating_sub(rest),
            len: bytes.len(),
        })
    };
    let Some(incoming) = incoming else {
        return Err(malformed("the descriptors were lost".into()));
    };
    let value = match (value, incoming.failure) {
        (_, Some(Failure::Refused(e))) => return Err(DecodeError::Refused(e)),
        (_, Some(Failure::Invalid(reason))) => return Err(malformed(reason)),
        (Err(e), None) => return Err(malformed(reason(&e))),
        (Ok(value), None) => value,
    };
    if rest > 0 {
        return Err(malformed(format!("{rest} bytes follow its end")));
    }
    let unnamed = incoming
        .slots
        .iter()
        .filter(|s| matches!(s, Slot::Unread(_)))
        .count();
    if unnamed > 0 {
        return Err(malformed(format!(
            "{unnamed} descriptors came with it that it does not name"
        )));
    }
    Ok(value)
}

/// postcard's reasons, in the words of the rest of the NIC's errors.
fn reason(e: &postcard::Error) -> String {
    use postcard::Error as E;
    match e {
        E::DeserializeUnexpectedEnd => "it ends early".into(),
        E::DeserializeBadVarint => "a number is badly encoded".into(),
        E::DeserializeBadBool => "a boolean is neither 0 nor 1".into(),
        E::DeserializeBadUtf8 | E::DeserializeBadChar => "a string is not UTF-8".into(),
        E::DeserializeBadOption => "an option marker is neither 0 nor 1".into(),
        E::DeserializeBadEnum | E::SerdeDeCustom => "a tag or code it does not know".into(),
        other => other.to_string(),
    }
}

// ---- the descriptors beside the message ------------------------------------------------------
//
// serde has no side channel, so the descriptor fields ([`fields`]) reach the descriptors of the
// message in hand through this thread's slot, set by `encode` and `decode` for one message.

thread_local! {
    static OUTGOING: RefCell<Option<Outgoing>> = const { RefCell::new(None) };
    static INCOMING: RefCell<Option<Incoming>> = const { RefCell::new(None) };
}

#[derive(Default)]
struct Outgoing {
    /// The descriptors to send, duplicated, each with the number it has in this process.
    fds: Vec<OwnedFd>,
    numbers: Vec<RawFd>,
    failure: Option<VerbsError>,
}

struct Incoming {
    slots: Vec<Slot>,
    map: Box<Map>,
    failure: Option<Failure>,
}

/// A received descriptor: not named yet, mapped as a region (which may be named again), or
/// taken by the field that named it.
enum Slot {
    Unread(OwnedFd),
    Region(Arc<Region>),
    Taken,
}

/// Why decoding stopped, when a field of ours stopped it (postcard's own errors carry no text).
enum Failure {
    Refused(VerbsError),
    Invalid(String),
}

/// Adds `fd` to the message being encoded and returns the index that names it; a descriptor
/// named twice goes once.
fn pass<E: serde::ser::Error>(fd: BorrowedFd<'_>) -> Result<u8, E> {
    OUTGOING.with_borrow_mut(|outgoing| {
        let Some(out) = outgoing else {
            return Err(E::custom("descriptors cross only the control socket"));
        };
        let number = fd.as_raw_fd();
        let index = match out.numbers.iter().position(|n| *n == number) {
            Some(index) => index,
            None => {
                let copy = fd.try_clone_to_owned().map_err(|e| {
                    out.failure.get_or_insert(VerbsError::Io(e));
                    E::custom("")
                })?;
                out.fds.push(copy);
                out.numbers.push(number);
                out.fds.len() - 1
            }
        };
        u8::try_from(index).map_err(|_| E::custom("too many descriptors"))
    })
}

/// Stops encoding with `error`, which [`encode`] returns.
fn cannot_encode<E: serde::ser::Error>(error: VerbsError) -> E {
    OUTGOING.with_borrow_mut(|outgoing| {
        if let Some(out) = outgoing {
            out.failure.get_or_insert(error);
        }
    });
    E::custom("")
}

/// Stops decoding as malformed for `reason`, which [`decode`] reports.
fn invalid<E: serde::de::Error>(reason: String) -> E {
    stop(Failure::Invalid(reason))
}

fn stop<E: serde::de::Error>(failure: Failure) -> E {
    INCOMING.with_borrow_mut(|incoming| {
        if let Some(incoming) = incoming {
            incoming.failure.get_or_insert(failure);
        }
    });
    E::custom("")
}

fn missing<E: serde::de::Error>(index: u8) -> E {
    invalid(format!(
        "it names descriptor {index}, which did not come with it (or was named already)"
    ))
}

/// The descriptor at `index` of the message being decoded; each can be taken once.
fn take_fd<E: serde::de::Error>(index: u8) -> Result<OwnedFd, E> {
    let fd = INCOMING.with_borrow_mut(|incoming| {
        let slot = incoming.as_mut()?.slots.get_mut(usize::from(index))?;
        match std::mem::replace(slot, Slot::Taken) {
            Slot::Unread(fd) => Some(fd),
            other => {
                *slot = other;
                None
            }
        }
    });
    fd.ok_or_else(|| missing(index))
}

/// The region whose descriptor is at `index`, mapped by the receiver's `map` the first time.
fn take_region<E: serde::de::Error>(index: u8) -> Result<Arc<Region>, E> {
    let mapped = INCOMING.with_borrow_mut(|incoming| {
        let incoming = incoming.as_mut()?;
        let slot = incoming.slots.get_mut(usize::from(index))?;
        match std::mem::replace(slot, Slot::Taken) {
            Slot::Region(region) => {
                *slot = Slot::Region(Arc::clone(&region));
                Some(Ok(region))
            }
            Slot::Unread(fd) => {
                let mapped = (incoming.map)(fd);
                if let Ok(region) = &mapped {
                    *slot = Slot::Region(Arc::clone(region));
                }
                Some(mapped)
            }
            Slot::Taken => None,
        }
    });
    match mapped {
        Some(Ok(region)) => Ok(region),
        Some(Err(refused)) => Err(stop(Failure::Refused(refused))),
        None => Err(missing(index)),
    }
}

#[cfg(test)]
mod tests;

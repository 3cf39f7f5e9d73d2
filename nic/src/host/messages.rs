//! The conversation on a NIC's control socket.
//!
//! ```text
//! host                                   NIC
//! Hello { version }               ─▶
//!                                 ◀─     Welcome { version, nic } + this host's doorbell:
//!                                        its "sleeping" word and doorbell record (a sealed
//!                                        memfd) and eventfd
//! Open                            ─▶                          (one per verbs context)
//!                                 ◀─     Opened(client)
//! Call { client, request }        ─▶
//!                                 ◀─     Answer(Ok(response) + descriptors | Err(error))
//! ```
//! Every message is framed by [`super::fdpass`] (a u32 length, then the bytes, descriptors
//! beside them) and is one [`ToNic`] or [`FromNic`] in [`super::codec`]'s format: the types
//! below and the [`Request`] and [`Response`] they carry are the whole protocol. The host asks,
//! the NIC answers, one at a time per connection; the NIC gives a host a few seconds to finish
//! a message it started and to take an answer. Closing the connection ends every context opened
//! on it: the NIC destroys their objects.
//!
//! Changing the protocol: a new request or answer is a new variant at the end of [`Request`] or
//! [`Response`] (postcard names a variant by its index), declared once with its fields; a field
//! of a type serde cannot derive (a descriptor, a type of another crate, a list that needs a
//! cap) takes a `#[serde(with = ...)]` from [`super::codec::fields`]. The codec's tests then ask
//! for a sample of the new variant, and, since what goes on the wire changed, for a new
//! [`PROTOCOL_VERSION`] pinned with the new encoding.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use serde::{Deserialize, Serialize};

use super::codec::{self, fields};
use super::fdpass::{self, Limit};
use super::wire_error::WireError;
use crate::control::{ClientId, Request, Response};
use crate::error::VerbsError;

/// The version of this conversation; a NIC and a host library must agree on it.
pub const PROTOCOL_VERSION: u32 = 13;

/// What a host says to the NIC.
#[derive(Debug, Serialize, Deserialize)]
pub enum ToNic {
    /// The greeting, alike in every version: tag 0, then the version in 4 little-endian bytes.
    Hello {
        #[serde(with = "postcard::fixint::le")]
        version: u32,
    },
    Open,
    Call {
        client: ClientId,
        request: Request,
    },
}

/// What the NIC says to a host. `R` is the answer as sent (the NIC answers with a reference).
#[derive(Debug, Serialize, Deserialize)]
pub enum FromNic<R = Response> {
    Welcome(Welcome),
    Opened(ClientId),
    Answer(Result<R, WireError>),
}

/// The NIC's greeting: who it is and how to ring this host's doorbell. It starts as every
/// version's does (see [`greeting_version`]).
#[derive(Debug, Serialize, Deserialize)]
pub struct Welcome {
    #[serde(with = "postcard::fixint::le")]
    pub version: u32,
    pub nic: String,
    /// A sealed memfd whose first word says whether the engine sleeps, followed by this
    /// host's doorbell record (see [`crate::doorbell`]).
    #[serde(with = "fields::fd")]
    pub doorbell_word: OwnedFd,
    /// The eventfd that wakes the NIC's engine, this host's own.
    #[serde(with = "fields::fd")]
    pub doorbell: OwnedFd,
    /// How many QP numbers the doorbell record covers.
    pub doorbell_qpns: u32,
}

/// The version a greeting (a Hello or a Welcome) names, read from the start that every version
/// of the protocol keeps, so that a peer of another version is told so, whatever follows.
pub fn greeting_version(bytes: &[u8]) -> Option<u32> {
    let [0, a, b, c, d, ..] = *bytes else {
        return None;
    };
    Some(u32::from_le_bytes([a, b, c, d]))
}

/// Sends one message with the descriptors it names.
pub fn send(
    socket: &UnixStream,
    message: &impl Serialize,
    limit: Limit<'_>,
) -> Result<(), VerbsError> {
    let encoded = codec::encode(message)?;
    fdpass::send(socket, &encoded.bytes, &encoded.fds(), limit)?;
    Ok(())
}

/// Sends an answer; one that cannot be encoded is sent as the error saying why.
pub fn answer(
    socket: &UnixStream,
    answer: &Result<Response, VerbsError>,
    limit: Limit<'_>,
) -> Result<(), VerbsError> {
    let message = FromNic::Answer(answer.as_ref().map_err(WireError::from));
    match codec::encode(&message) {
        Ok(encoded) => Ok(fdpass::send(socket, &encoded.bytes, &encoded.fds(), limit)?),
        Err(error) => send(
            socket,
            &FromNic::<Response>::Answer(Err(WireError::from(&error))),
            limit,
        ),
    }
}

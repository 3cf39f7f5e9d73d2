//! The conversation on a NIC's control socket.
//!
//! ```text
//! host                                   NIC
//! Hello { version }               ─▶
//!                                 ◀─     Welcome { version, nic } + this host's doorbell:
//!                                        its "sleeping" word (a sealed memfd) and eventfd
//! Open                            ─▶                          (one per verbs context)
//!                                 ◀─     Opened { client }
//! Call { client, request }        ─▶
//!                                 ◀─     Answer(Ok(response) + descriptors | Err(error))
//! ```
//! Every message is framed by [`super::fdpass`]: a u32 length, then a one-byte tag and the
//! fields of [`super::codec`]. The host asks, the NIC answers, one at a time per connection;
//! the NIC gives a host a few seconds to finish a message it started and to take an answer.
//! Closing the connection ends every context opened on it: the NIC destroys their objects.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;

use super::codec::{self, Map};
use super::fdpass::{self, Limit};
use super::wire_format::{DecodeError, Reader, Writer};
use crate::control::{ClientId, Request, Response};
use crate::verbs::VerbsError;

/// The version of this conversation; a NIC and a host library must agree on it.
pub const PROTOCOL_VERSION: u32 = 2;

/// What a host says to the NIC.
#[derive(Debug)]
pub enum ToNic {
    Hello { version: u32 },
    Open,
    Call { client: ClientId, request: Request },
}

/// The NIC's greeting: who it is and how to ring this host's doorbell.
#[derive(Debug)]
pub struct Welcome {
    pub version: u32,
    pub nic: String,
    /// A sealed memfd whose first word says whether the engine sleeps.
    pub doorbell_word: OwnedFd,
    /// The eventfd that wakes the NIC's engine, this host's own.
    pub doorbell: OwnedFd,
}

pub fn send_to_nic(socket: &UnixStream, message: &ToNic) -> Result<(), VerbsError> {
    let mut w = Writer::new();
    match message {
        ToNic::Hello { version } => {
            w.u8(0);
            w.u32(*version);
        }
        ToNic::Open => w.u8(1),
        ToNic::Call { client, request } => {
            w.u8(2);
            w.u64(*client);
            codec::put_request(&mut w, request)?;
        }
    }
    let (bytes, fds) = w.finish();
    fdpass::send(socket, &bytes, &fds, Limit::default())?;
    Ok(())
}

/// Reads what a host sent, mapping a region it passed with `map`. Descriptors a message does
/// not name are closed unread.
pub fn decode_to_nic(received: fdpass::Received, map: &mut Map<'_>) -> Result<ToNic, VerbsError> {
    let mut r = Reader::new(&received.bytes, received.fds);
    let message = match r.u8()? {
        0 => ToNic::Hello { version: r.u32()? },
        1 => ToNic::Open,
        2 => ToNic::Call {
            client: r.u64()?,
            request: codec::get_request(&mut r, map)?,
        },
        tag => {
            return Err(DecodeError::Invalid {
                what: "message",
                value: tag.into(),
            }
            .into())
        }
    };
    r.finish()?;
    Ok(message)
}

/// The NIC's answers, sent on its side of the socket.
pub mod nic_side {
    use std::os::fd::BorrowedFd;

    use super::*;

    pub fn welcome(
        socket: &UnixStream,
        nic: &str,
        doorbell_word: BorrowedFd<'_>,
        doorbell: BorrowedFd<'_>,
        limit: Limit<'_>,
    ) -> std::io::Result<()> {
        let mut w = Writer::new();
        w.u8(0);
        w.u32(PROTOCOL_VERSION);
        w.str(nic);
        w.fd(doorbell_word);
        w.fd(doorbell);
        let (bytes, fds) = w.finish();
        fdpass::send(socket, &bytes, &fds, limit)
    }

    pub fn opened(socket: &UnixStream, client: ClientId, limit: Limit<'_>) -> std::io::Result<()> {
        let mut w = Writer::new();
        w.u8(1);
        w.u64(client);
        fdpass::send(socket, &w.finish().0, &[], limit)
    }

    /// Sends an answer; one that cannot be encoded is sent as the error saying why.
    pub fn answer(
        socket: &UnixStream,
        answer: &Result<Response, VerbsError>,
        limit: Limit<'_>,
    ) -> std::io::Result<()> {
        let mut w = Writer::new();
        w.u8(2);
        let failed = match answer {
            Ok(response) => {
                w.u8(0);
                codec::put_response(&mut w, response).err()
            }
            Err(error) => {
                w.u8(1);
                codec::put_error(&mut w, error);
                None
            }
        };
        if let Some(error) = failed {
            return self::answer(socket, &Err(error), limit);
        }
        let (bytes, fds) = w.finish();
        fdpass::send(socket, &bytes, &fds, limit)
    }
}

/// One message from the NIC, as the host reads it.
pub enum FromNic {
    Welcome(Welcome),
    Opened(ClientId),
    Answer(Result<Response, VerbsError>),
}

/// Receives the NIC's next message; `Ok(None)` when the NIC closed the connection.
pub fn recv_from_nic(
    socket: &UnixStream,
    attach: &mut Map<'_>,
) -> Result<Option<FromNic>, VerbsError> {
    let Some(received) = fdpass::recv(socket, Limit::default())? else {
        return Ok(None);
    };
    let mut r = Reader::new(&received.bytes, received.fds);
    let message = match r.u8()? {
        0 => FromNic::Welcome(Welcome {
            version: r.u32()?,
            nic: r.str()?,
            doorbell_word: r.fd()?,
            doorbell: r.fd()?,
        }),
        1 => FromNic::Opened(r.u64()?),
        2 => FromNic::Answer(match r.u8()? {
            0 => Ok(codec::get_response(&mut r, attach)?),
            1 => Err(codec::get_error(&mut r)?),
            v => {
                return Err(DecodeError::Invalid {
                    what: "answer kind",
                    value: v.into(),
                }
                .into())
            }
        }),
        tag => {
            return Err(DecodeError::Invalid {
                what: "message",
                value: tag.into(),
            }
            .into())
        }
    };
    r.finish()?;
    Ok(Some(message))
}

//! The NIC as a separate process, reached like hardware.
//!
//! - Control path (the uverbs role): a Unix socket per NIC ([`Server`] in the NIC process,
//!   [`SocketBackend`] in a host program). Open a context, allocate a PD, register a named
//!   region, create CQs and QPs, modify, query, destroy: one request and one answer each,
//!   checked by the engine, which lets a host touch only its own objects.
//! - Data path (the doorbell role): the send, receive and completion queues are rings in
//!   shared memory that the NIC creates (`<nic>-qp<N>`, `<nic>-cq<N>` in /dev/shm) and the host
//!   maps; a doorbell — a shared "sleeping" word and an eventfd passed over the socket — tells
//!   the engine there is work. No socket round trip per work request.
//!
//! A host program uses the same verbs API as with an in-process device: [`connect`] gives a
//! [`crate::verbs::Context`].

mod client;
pub(crate) mod codec;
mod fdpass;
mod messages;
mod server;
mod socket_path;
mod stop_line;
mod wire_error;

pub use client::{connect, SocketBackend};
pub use messages::PROTOCOL_VERSION;
pub use server::{Claim, Server, ServerError};
pub use socket_path::{check_name, socket_dir, socket_path, NameError, MAX_NIC_NAME};

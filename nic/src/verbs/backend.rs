//! How a context reaches its NIC: the engine's channel in this process, or the NIC's socket.

use super::VerbsError;
use crate::control::{ClientId, Request, Response};
use crate::doorbell::Doorbell;
use std::os::fd::BorrowedFd;

/// How a context reaches its NIC: in the same process, or over the NIC's socket.
pub trait Backend: Send + Sync {
    /// A new client identity for a context being opened.
    fn connect(&self) -> Result<ClientId, VerbsError>;
    /// Sends a control request and waits for the answer.
    fn call(&self, client: ClientId, request: Request) -> Result<Response, VerbsError>;
    /// The doorbell: names the QP that has new work and wakes the engine.
    fn doorbell(&self) -> &Doorbell;
    /// False once the NIC is known to have stopped. Posting work asks before every batch, so
    /// this must cost no system call.
    fn alive(&self) -> bool {
        true
    }
    /// A descriptor that hangs up (POLLHUP) when the NIC goes away, for a sleeping wait to
    /// watch beside its event line, so that a dead NIC ends the wait instead of a timeout.
    fn hangup_fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

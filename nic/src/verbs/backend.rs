//! How a context reaches its NIC: the engine's channel in this process, or the NIC's socket.

use std::os::fd::BorrowedFd;
use std::sync::Arc;

use super::VerbsError;
use crate::control::{ClientId, Request, Response};
use crate::waker::Waker;

/// How a context reaches its NIC: in the same process, or over the NIC's socket.
pub trait Backend: Send + Sync {
    /// A new client identity for a context being opened.
    fn connect(&self) -> Result<ClientId, VerbsError>;
    /// Sends a control request and waits for the answer.
    fn call(&self, client: ClientId, request: Request) -> Result<Response, VerbsError>;
    /// The doorbell: wakes the engine after work was posted.
    fn doorbell(&self) -> &Arc<Waker>;
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

//! Why a tool run failed, as one sentence a command line can print.

use std::time::Duration;

use roce_nic::verbs::{VerbsError, WcStatus};

#[derive(Debug, thiserror::Error)]
pub enum ToolError {
    #[error(transparent)]
    Verbs(#[from] VerbsError),
    /// The options cannot work (a size the transport cannot carry, say).
    #[error("{0}")]
    Usage(String),
    /// The out-of-band connection could not be made.
    #[error("cannot reach {peer}: {reason}")]
    Connect { peer: String, reason: String },
    /// The peer said something the tool's exchange does not allow.
    #[error("the peer sent {0}")]
    Protocol(String),
    #[error("the peer closed the out-of-band connection before sending {what}")]
    Closed { what: &'static str },
    /// A bounded wait ran out.
    #[error("no {what} within {} s", .after.as_secs_f64())]
    Timeout { what: String, after: Duration },
    #[error("a {what} completed with status \"{status}\"")]
    Completion {
        what: &'static str,
        status: WcStatus,
    },
    /// Data arrived, but not the data the peer tool sends.
    #[error("data check failed: {0}")]
    Data(String),
    #[error("the out-of-band connection failed: {0}")]
    Io(#[from] std::io::Error),
}

impl ToolError {
    pub(crate) fn timeout(what: impl Into<String>, after: Duration) -> ToolError {
        ToolError::Timeout {
            what: what.into(),
            after,
        }
    }
}

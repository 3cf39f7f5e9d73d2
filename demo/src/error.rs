//! How the demo fails: one sentence for the user, and whether it was the user's input.

/// A failed demo. Every message is one sentence without a trailing period, ready for
/// `roce: <message>`.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The options cannot work (a size the scenario does not take, no room in /dev/shm).
    #[error("{0}")]
    Usage(String),
    /// Something the demo needs failed: a NIC did not start, a verb failed, a step timed out.
    #[error("{0}")]
    Failed(String),
    /// The run finished but something it set out to show did not hold.
    #[error("proof failed: {0}")]
    ProofFailed(String),
}

impl DemoError {
    pub fn failed(message: impl Into<String>) -> DemoError {
        DemoError::Failed(message.into())
    }

    /// `what` failed because of `cause`: "cannot X: cause".
    pub fn because(what: &str, cause: impl std::fmt::Display) -> DemoError {
        DemoError::Failed(format!("{what}: {cause}"))
    }
}

//! How a subcommand fails: one clear sentence for the user and an exit code.

use std::fmt;
use std::process::ExitCode;

/// A failure reported to the user as `roce: <message>` with a non-zero exit code.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    /// A failure with exit code 1 (the operation itself failed).
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }

    /// A failure with exit code 2 (bad input: a missing file, a file that is not a capture, a bad
    /// argument value).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }

    pub fn exit_code(&self) -> ExitCode {
        ExitCode::from(self.code)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

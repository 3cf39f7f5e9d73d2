//! How a subcommand fails: one clear sentence for the user and an exit code, following the
//! convention in the README and docs/cli-conventions.md: 1 when an operation or a check failed,
//! 2 for bad usage or input (an argument, a name that does not exist or already does, a file
//! that is not what it should be).

use std::fmt;
use std::io;
use std::process::ExitCode;

/// A failure reported to the user as `roce: <message>` with a non-zero exit code, or the quiet
/// end of a command whose reader went away.
#[derive(Debug)]
pub struct Failure {
    message: String,
    code: u8,
}

impl Failure {
    /// A failure with exit code 1 (the operation itself failed, or a check did not hold).
    pub fn new(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 1,
        }
    }

    /// A failure with exit code 2 (bad input: a missing file, a file that is not a capture, a bad
    /// argument value, a region that does not exist or already does).
    pub fn usage(message: impl Into<String>) -> Self {
        Failure {
            message: message.into(),
            code: 2,
        }
    }

    /// Writing the command's output failed. A reader that went away (`roce bench | head`) is
    /// the normal end of a command nobody listens to any more: exit 0 without a word, as
    /// ripgrep and cargo do. Anything else is one line and exit code 1.
    pub fn output(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::BrokenPipe {
            Failure {
                message: String::new(),
                code: 0,
            }
        } else {
            Failure::new(format!("cannot write the output: {e}"))
        }
    }

    /// Whether there is nothing to tell (the reader went away).
    pub fn is_quiet(&self) -> bool {
        self.message.is_empty()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_pipe_is_a_quiet_success_and_other_write_errors_are_failures() {
        let closed = Failure::output(io::Error::from(io::ErrorKind::BrokenPipe));
        assert!(closed.is_quiet());
        assert_eq!(closed.exit_code(), ExitCode::SUCCESS);
        let full = Failure::output(io::Error::from(io::ErrorKind::StorageFull));
        assert!(!full.is_quiet());
        assert_eq!(full.exit_code(), ExitCode::from(1));
    }
}

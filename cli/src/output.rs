//! Printing for long-running commands. A NIC or a server outlives the terminal or pipe that
//! started it often enough; a closed standard output must neither stop it nor make it panic
//! (`println!` panics on EPIPE), so these macros drop what cannot be written.

/// A line on standard output (line-buffered, so it is seen at once).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// A line on standard error: prompts and complaints that are not the command's output.
macro_rules! tell {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

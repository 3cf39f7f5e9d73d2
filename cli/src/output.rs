//! Printing. Two kinds of command print differently:
//!
//! - a one-shot command (`bench`, `host info`, `mem dump`) prints with [`out!`], which returns
//!   the write's result: `out!(...)?` ends the command at once, quietly and with exit code 0,
//!   when its reader has gone away (`roce bench | head`), instead of the panic of `println!`;
//! - a long-running one (a NIC, a server) outlives the terminal or pipe that started it often
//!   enough: a closed standard output must neither stop it nor make it panic, so [`say!`] and
//!   [`tell!`] drop what cannot be written.

/// A line on standard output for a one-shot command: `Err(Failure)` if it cannot be written
/// (quiet if the reader went away).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*).map_err($crate::Failure::output)
    }};
}

/// A line on standard output (line-buffered, so it is seen at once), dropped if it cannot be
/// written.
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

/// Standard output for a library that reports its own write errors (the tools): remembers
/// whether the reader went away, so that the error that follows is known for the quiet end it
/// is.
#[derive(Default)]
pub struct Watched {
    closed: bool,
}

impl Watched {
    /// Whether a write failed because nobody reads standard output any more.
    pub fn closed(&self) -> bool {
        self.closed
    }
}

impl std::io::Write for Watched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let result = std::io::stdout().lock().write(buf);
        self.closed |= matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe);
        result
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let result = std::io::stdout().lock().flush();
        self.closed |= matches!(&result, Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe);
        result
    }
}

/// `1 byte`, `2 bytes`: a count and its noun, in the singular when there is one.
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A MAC address as Linux prints it (`ip link`): six lower-case hex bytes with colons.
pub fn mac(mac: roce_wire::EthernetAddress) -> String {
    roce_wire::ethernet::Mac(mac).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(1u64, "byte"), "1 byte");
        assert_eq!(count(0u64, "change"), "0 changes");
        assert_eq!(count(16u32, "byte"), "16 bytes");
    }

    #[test]
    fn macs_have_colons() {
        let m = roce_wire::EthernetAddress([2, 0, 0x0a, 0, 0, 0xff]);
        assert_eq!(mac(m), "02:00:0a:00:00:ff");
    }
}

//! The primitives of control messages: fixed-width little-endian integers, length-prefixed
//! strings, options, and file descriptors, which travel beside the bytes (SCM_RIGHTS) and are
//! named in the bytes by their index.
//!
//! The reader trusts nothing: every read is bounds-checked and every failure is a
//! [`DecodeError`], so a host program that sends garbage gets an error answer, never a panic in
//! the NIC.

use std::os::fd::{BorrowedFd, OwnedFd};

/// Longest string a message carries (names and error sentences).
pub const MAX_STRING: usize = 4096;

/// Why a message could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("the message ends early")]
    Truncated,
    #[error("the message has {0} bytes after its end")]
    Trailing(usize),
    #[error("{what} {value} is not valid")]
    Invalid { what: &'static str, value: u64 },
    #[error("a string of {0} bytes is longer than allowed")]
    TooLong(usize),
    #[error("a string is not UTF-8")]
    NotUtf8,
    #[error("the message names descriptor {0}, which did not come with it")]
    MissingFd(u8),
}

/// Builds one message; descriptors are collected to send beside it.
#[derive(Default)]
pub struct Writer<'fd> {
    bytes: Vec<u8>,
    fds: Vec<BorrowedFd<'fd>>,
}

impl<'fd> Writer<'fd> {
    pub fn new() -> Writer<'fd> {
        Writer::default()
    }

    pub fn u8(&mut self, v: u8) {
        self.bytes.push(v);
    }

    pub fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub fn bool(&mut self, v: bool) {
        self.u8(u8::from(v));
    }

    pub fn raw(&mut self, v: &[u8]) {
        self.bytes.extend_from_slice(v);
    }

    /// A string, cut to [`MAX_STRING`] bytes at a character boundary if longer.
    pub fn str(&mut self, v: &str) {
        let mut end = v.len().min(MAX_STRING);
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        self.u16(end as u16);
        self.raw(&v.as_bytes()[..end]);
    }

    /// `None` as 0, `Some(v)` as 1 followed by `v`.
    pub fn opt<T>(&mut self, v: Option<T>, put: impl FnOnce(&mut Self, T)) {
        match v {
            None => self.u8(0),
            Some(v) => {
                self.u8(1);
                put(self, v);
            }
        }
    }

    /// A descriptor, sent beside the message; the bytes hold its index.
    pub fn fd(&mut self, fd: BorrowedFd<'fd>) {
        self.u8(self.fds.len() as u8);
        self.fds.push(fd);
    }

    pub fn finish(self) -> (Vec<u8>, Vec<BorrowedFd<'fd>>) {
        (self.bytes, self.fds)
    }
}

/// Reads one message.
pub struct Reader<'a> {
    bytes: &'a [u8],
    fds: Vec<Option<OwnedFd>>,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], fds: Vec<OwnedFd>) -> Reader<'a> {
        Reader {
            bytes,
            fds: fds.into_iter().map(Some).collect(),
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.bytes.len() < n {
            return Err(DecodeError::Truncated);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A u64 that must fit this machine's `usize`.
    pub fn usize(&mut self, what: &'static str) -> Result<usize, DecodeError> {
        let v = self.u64()?;
        usize::try_from(v).map_err(|_| DecodeError::Invalid { what, value: v })
    }

    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError::Invalid {
                what: "boolean",
                value: v.into(),
            }),
        }
    }

    pub fn raw<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        self.array()
    }

    pub fn str(&mut self) -> Result<String, DecodeError> {
        let len = usize::from(self.u16()?);
        if len > MAX_STRING {
            return Err(DecodeError::TooLong(len));
        }
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| DecodeError::NotUtf8)
    }

    pub fn opt<T>(
        &mut self,
        get: impl FnOnce(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Option<T>, DecodeError> {
        match self.u8()? {
            0 => Ok(None),
            1 => get(self).map(Some),
            v => Err(DecodeError::Invalid {
                what: "option marker",
                value: v.into(),
            }),
        }
    }

    /// The descriptor the next byte names; each can be taken once.
    pub fn fd(&mut self) -> Result<OwnedFd, DecodeError> {
        let index = self.u8()?;
        self.fds
            .get_mut(usize::from(index))
            .and_then(Option::take)
            .ok_or(DecodeError::MissingFd(index))
    }

    /// Checks that the whole message was read. Descriptors nobody named are closed.
    pub fn finish(self) -> Result<(), DecodeError> {
        match self.bytes.len() {
            0 => Ok(()),
            n => Err(DecodeError::Trailing(n)),
        }
    }
}

/// A value read from a one-byte code, or the error naming what was bad.
pub fn code<T>(
    v: u8,
    what: &'static str,
    known: impl FnOnce(u8) -> Option<T>,
) -> Result<T, DecodeError> {
    known(v).ok_or(DecodeError::Invalid {
        what,
        value: v.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn primitives_round_trip() {
        let mut w = Writer::new();
        w.u8(7);
        w.u16(0xbeef);
        w.u32(0xdead_beef);
        w.u64(u64::MAX - 1);
        w.bool(true);
        w.str("naïve");
        w.opt(Some(5u32), |w, v| w.u32(v));
        w.opt(None::<u32>, |w, v| w.u32(v));
        let (bytes, fds) = w.finish();
        assert!(fds.is_empty());
        let mut r = Reader::new(&bytes, Vec::new());
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u16(), Ok(0xbeef));
        assert_eq!(r.u32(), Ok(0xdead_beef));
        assert_eq!(r.u64(), Ok(u64::MAX - 1));
        assert_eq!(r.bool(), Ok(true));
        assert_eq!(r.str().as_deref(), Ok("naïve"));
        assert_eq!(r.opt(|r| r.u32()), Ok(Some(5)));
        assert_eq!(r.opt(|r| r.u32()), Ok(None));
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn long_strings_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_STRING);
        let mut w = Writer::new();
        w.str(&long);
        let (bytes, _) = w.finish();
        let got = Reader::new(&bytes, Vec::new()).str().unwrap();
        assert_eq!(got.len(), MAX_STRING);
        assert!(long.starts_with(&got));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(
            Reader::new(&[1, 2], Vec::new()).u32(),
            Err(DecodeError::Truncated)
        );
        assert!(matches!(
            Reader::new(&[2], Vec::new()).bool(),
            Err(DecodeError::Invalid { .. })
        ));
        assert_eq!(
            Reader::new(&[2, 0, 0xff, 0xfe], Vec::new()).str(),
            Err(DecodeError::NotUtf8)
        );
        assert_eq!(
            Reader::new(&[0], Vec::new()).fd().unwrap_err(),
            DecodeError::MissingFd(0)
        );
        let mut r = Reader::new(&[1, 2], Vec::new());
        r.u8().unwrap();
        assert_eq!(r.finish(), Err(DecodeError::Trailing(1)));
    }

    #[test]
    fn a_descriptor_can_be_taken_once() {
        let fd: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let mut r = Reader::new(&[0, 0], vec![fd]);
        assert!(r.fd().is_ok());
        assert_eq!(r.fd().unwrap_err(), DecodeError::MissingFd(0));
    }
}

//! Access rights of a memory registration, with the ibverbs bit values.

use std::fmt;
use std::ops::BitOr;

use serde::{Deserialize, Serialize};

/// A set of access rights. The bit values are those of `enum ibv_access_flags`, so a set can
/// cross a process boundary as a plain integer and mean the same on both sides.
///
/// Reading local memory needs no right: every registration grants it, as in verbs.
/// Serialised as its bits; unknown bits are refused on the way in, as by [`Access::from_bits`].
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(into = "u32", try_from = "u32")]
pub struct Access(u32);

impl Access {
    /// The local side (the NIC's own scatter/gather entries) may write into the memory.
    pub const LOCAL_WRITE: Access = Access(1);
    /// A remote peer may RDMA WRITE into the memory.
    pub const REMOTE_WRITE: Access = Access(2);
    /// A remote peer may RDMA READ from the memory.
    pub const REMOTE_READ: Access = Access(4);
    /// A remote peer may run atomic operations on the memory.
    pub const REMOTE_ATOMIC: Access = Access(8);

    const ALL: [(Access, &'static str); 4] = [
        (Access::LOCAL_WRITE, "LOCAL_WRITE"),
        (Access::REMOTE_WRITE, "REMOTE_WRITE"),
        (Access::REMOTE_READ, "REMOTE_READ"),
        (Access::REMOTE_ATOMIC, "REMOTE_ATOMIC"),
    ];

    /// No rights beyond local read.
    pub const fn empty() -> Access {
        Access(0)
    }

    /// The set with these ibverbs bits, or `None` if a bit is set that this emulator does not
    /// know, so a newer peer's flag is refused rather than silently dropped.
    pub const fn from_bits(bits: u32) -> Option<Access> {
        let known = Access::LOCAL_WRITE.0
            | Access::REMOTE_WRITE.0
            | Access::REMOTE_READ.0
            | Access::REMOTE_ATOMIC.0;
        if bits & !known == 0 {
            Some(Access(bits))
        } else {
            None
        }
    }

    /// The ibverbs bits of this set.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every right in `other` is also in `self`.
    pub const fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl From<Access> for u32 {
    fn from(access: Access) -> u32 {
        access.bits()
    }
}

impl TryFrom<u32> for Access {
    type Error = UnknownAccess;

    fn try_from(bits: u32) -> Result<Access, UnknownAccess> {
        Access::from_bits(bits).ok_or(UnknownAccess(bits))
    }
}

/// Access bits this emulator does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("access flags {0:#x} are not valid")]
pub struct UnknownAccess(pub u32);

impl BitOr for Access {
    type Output = Access;

    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// `LOCAL_WRITE|REMOTE_WRITE`, or `NONE` for the empty set.
impl fmt::Display for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("NONE");
        }
        let mut names = Access::ALL
            .iter()
            .filter(|(flag, _)| self.contains(*flag))
            .map(|(_, name)| *name);
        if let Some(first) = names.next() {
            f.write_str(first)?;
        }
        names.try_for_each(|name| write!(f, "|{name}"))
    }
}

impl fmt::Debug for Access {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Access({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_are_those_of_ibverbs() {
        assert_eq!(Access::LOCAL_WRITE.bits(), 1);
        assert_eq!(Access::REMOTE_WRITE.bits(), 2);
        assert_eq!(Access::REMOTE_READ.bits(), 4);
        assert_eq!(Access::REMOTE_ATOMIC.bits(), 8);
    }

    #[test]
    fn unknown_bits_are_refused() {
        assert_eq!(Access::from_bits(0), Some(Access::empty()));
        assert_eq!(
            Access::from_bits(5),
            Some(Access::LOCAL_WRITE | Access::REMOTE_READ)
        );
        assert_eq!(Access::from_bits(16), None);
        assert_eq!(Access::from_bits(0x8000_0001), None);
    }

    #[test]
    fn contains_means_every_right() {
        let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
        assert!(rw.contains(Access::REMOTE_WRITE));
        assert!(rw.contains(rw));
        assert!(rw.contains(Access::empty()));
        assert!(!rw.contains(Access::REMOTE_WRITE | Access::REMOTE_READ));
        assert!(!Access::empty().contains(Access::LOCAL_WRITE));
    }

    #[test]
    fn display_lists_rights_in_bit_order() {
        let all = Access::REMOTE_ATOMIC
            | Access::REMOTE_READ
            | Access::REMOTE_WRITE
            | Access::LOCAL_WRITE;
        assert_eq!(
            all.to_string(),
            "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC"
        );
        assert_eq!(Access::REMOTE_READ.to_string(), "REMOTE_READ");
        assert_eq!(Access::empty().to_string(), "NONE");
        assert_eq!(
            format!("{:?}", Access::LOCAL_WRITE | Access::REMOTE_WRITE),
            "Access(LOCAL_WRITE|REMOTE_WRITE)"
        );
    }
}

//! The two ends of the demo: the initiator (the host that posts the work request, and its NIC)
//! and the target (the host whose memory is used, and its NIC).

use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    Initiator,
    Target,
}

impl Side {
    /// The other end.
    pub fn peer(self) -> Side {
        match self {
            Side::Initiator => Side::Target,
            Side::Target => Side::Initiator,
        }
    }

    /// A short lowercase word, for HTML classes and ids.
    pub fn word(self) -> &'static str {
        match self {
            Side::Initiator => "initiator",
            Side::Target => "target",
        }
    }
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

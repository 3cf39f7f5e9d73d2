//! How the fields serde cannot derive cross the socket, named with `#[serde(with = ...)]` where
//! they are declared: descriptors (memory, event lines, streams), which travel beside the bytes
//! and are named in them by index, values of types from other crates, and lists with a cap.

use std::fmt;
use std::marker::PhantomData;
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use roce_hostmem::Region;
use roce_wire::EthernetAddress;
use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::{cannot_encode, invalid, pass, take_fd, take_region};
use crate::cq::EventLine;
use crate::error::VerbsError;

/// Memory crosses as its descriptor, which the receiver maps after its own checks; one region
/// named twice in a message (a QP's two rings) crosses and is mapped once.
pub mod region {
    use super::*;

    pub fn serialize<S: Serializer>(region: &Arc<Region>, s: S) -> Result<S::Ok, S::Error> {
        let fd = region.fd().ok_or_else(|| {
            cannot_encode(VerbsError::Invalid(
                "only shared memory (Region::shared or Region::create) can cross to a NIC or a \
                 host in another process"
                    .into(),
            ))
        })?;
        pass(fd)?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<Region>, D::Error> {
        take_region(u8::deserialize(d)?)
    }
}

/// Any descriptor, taken as it came.
pub mod fd {
    use super::*;

    pub fn serialize<S: Serializer>(fd: &impl AsFd, s: S) -> Result<S::Ok, S::Error> {
        pass(fd.as_fd())?.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OwnedFd, D::Error> {
        take_fd(u8::deserialize(d)?)
    }
}

/// A completion queue's event line: its eventfd.
pub mod event_line {
    use super::*;

    pub fn serialize<S: Serializer>(line: &Arc<EventLine>, s: S) -> Result<S::Ok, S::Error> {
        fd::serialize(&**line, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Arc<EventLine>, D::Error> {
        fd::deserialize(d).map(EventLine::from_fd)
    }
}

/// A Unix stream: its descriptor.
pub mod stream {
    use super::*;

    pub fn serialize<S: Serializer>(stream: &UnixStream, s: S) -> Result<S::Ok, S::Error> {
        fd::serialize(stream, s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<UnixStream, D::Error> {
        fd::deserialize(d).map(UnixStream::from)
    }
}

/// A MAC address: its six bytes.
pub mod mac {
    use super::*;

    pub fn serialize<S: Serializer>(mac: &EthernetAddress, s: S) -> Result<S::Ok, S::Error> {
        mac.0.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<EthernetAddress, D::Error> {
        <[u8; 6]>::deserialize(d).map(EthernetAddress)
    }
}

/// A port's P_Key table: its keys, at most [`MAX_PKEYS`] of them, checked as the NIC checked
/// them.
pub mod pkey_table {
    use super::*;
    use crate::pkey::{PKeyTable, MAX_PKEYS};

    pub fn serialize<S: Serializer>(table: &PKeyTable, s: S) -> Result<S::Ok, S::Error> {
        table.keys().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<PKeyTable, D::Error> {
        let keys = at_most::<_, u16, MAX_PKEYS>(d)?;
        PKeyTable::new(keys).map_err(|e| invalid(e.to_string()))
    }
}

/// An optional MAC address.
pub mod opt_mac {
    use super::*;

    pub fn serialize<S>(mac: &Option<EthernetAddress>, s: S) -> Result<S::Ok, S::Error>
    where
        S: Serializer,
    {
        mac.map(|m| m.0).serialize(s)
    }

    pub fn deserialize<'de, D>(d: D) -> Result<Option<EthernetAddress>, D::Error>
    where
        D: Deserializer<'de>,
    {
        Option::<[u8; 6]>::deserialize(d).map(|m| m.map(EthernetAddress))
    }
}

/// A socket address with all its parts (serde's own leaves out an IPv6 scope and flow).
pub mod socket_addr {
    use super::*;

    #[derive(Serialize, Deserialize)]
    enum Addr {
        V4([u8; 4], u16),
        V6([u8; 16], u16, u32, u32),
    }

    pub fn serialize<S: Serializer>(addr: &SocketAddr, s: S) -> Result<S::Ok, S::Error> {
        match addr {
            SocketAddr::V4(a) => Addr::V4(a.ip().octets(), a.port()),
            SocketAddr::V6(a) => Addr::V6(a.ip().octets(), a.port(), a.flowinfo(), a.scope_id()),
        }
        .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<SocketAddr, D::Error> {
        Ok(match Addr::deserialize(d)? {
            Addr::V4(ip, port) => SocketAddr::V4(SocketAddrV4::new(ip.into(), port)),
            Addr::V6(ip, port, flow, scope) => {
                SocketAddr::V6(SocketAddrV6::new(ip.into(), port, flow, scope))
            }
        })
    }
}

/// A list of at most `N` elements (`#[serde(deserialize_with = "at_most::<_, _, N>")]`): a
/// longer one is refused at its length when the message could hold it, and at element `N + 1`
/// otherwise, so at most `N` elements are ever allocated.
pub fn at_most<'de, D, T, const N: usize>(d: D) -> Result<Vec<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct AtMost<T, const N: usize>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>, const N: usize> Visitor<'de> for AtMost<T, N> {
        type Value = Vec<T>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "a list of at most {N}")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
            let claimed = seq.size_hint().unwrap_or(0);
            if claimed > N {
                return Err(invalid(format!("a list of {claimed} is longer than {N}")));
            }
            let mut list = Vec::with_capacity(claimed);
            while let Some(element) = seq.next_element()? {
                if list.len() == N {
                    return Err(invalid(format!("a list is longer than {N}")));
                }
                list.push(element);
            }
            Ok(list)
        }
    }

    d.deserialize_seq(AtMost::<T, N>(PhantomData))
}

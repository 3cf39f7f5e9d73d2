//! RoCEv2 on the wire: zero-copy views and representations of every InfiniBand transport header,
//! the opcode table, whole frames over Ethernet/IP/UDP and the ICRC, and the management
//! datagrams on QP1 that carry the connection manager ([`mad`], [`cm`], [`cma`]).
//!
//! Each header module follows smoltcp's `wire` style: a `Packet<T: AsRef<[u8]>>` view with
//! byte-range `field` constants and accessors (setters when `T: AsMut<[u8]>`), and a `Repr` with
//! `parse` and `emit`. This crate turns bytes into values and back and keeps no state; its only
//! I/O is [`capture`], the pcap/pcapng files that frames are recorded in. [`describe`] lists the
//! fields of a parsed frame, with their places and tshark's names, for every view that shows
//! a packet to a person or compares it with another decoder.

#![forbid(unsafe_code)]

pub mod aeth;
pub mod atomic_ack_eth;
pub mod atomic_eth;
mod be;
pub mod bth;
pub mod capture;
pub mod cm;
pub mod cma;
pub mod describe;
pub mod deth;
mod error;
pub mod ethernet;
pub mod extensions;
pub mod feth;
pub mod frame;
pub mod grh;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ipv4;
pub mod ipv6;
pub mod mad;
pub mod network;
pub mod opcode;
pub mod reth;
pub mod template;
pub mod udp;
mod view;
pub mod vlan;

pub use error::{Error, Layer, NotRoce};
pub use frame::{EthernetRepr, Extensions, Frame, FrameRepr, Layout, NetworkRepr, VlanTag};
pub use opcode::{Headers, Kind, Opcode, Position, Transport};
pub use template::FrameTemplate;

/// Address types from smoltcp, re-exported so users of this crate need not name smoltcp.
pub use smoltcp::wire::{EthernetAddress, IpAddress, Ipv4Address, Ipv6Address};

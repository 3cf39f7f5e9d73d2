//! The NIC's port beyond RoCE: ARP, neighbour discovery, ICMP and TCP on the emulated wire, and
//! `iface:` links into network namespaces. One test binary (`cargo test -p roce-nic --test port`).

#[path = "../common/mod.rs"]
mod common;

mod iface;
mod port;

//! The emulated RoCEv2 RNIC.
//!
//! A [`Device`] runs an engine thread that executes RDMA operations as a hardware NIC's engines
//! would: it reads and writes host memory through `roce-hostmem`, and talks to its peers only
//! through RoCEv2 frames built and parsed by `roce-wire`, over a [`link::Link`]. Host programs use
//! the [`verbs`] API.
//!
//! The path of one RDMA WRITE, file by file: [`verbs`] (post_send writes a WQE into the send
//! ring, rings the doorbell) → [`transport::requester`] (WQE → packets) → [`link`] →
//! peer's `engine` (frame in, ICRC) → [`transport::responder`] (PSN, rkey, DMA into the target's
//! memory, ACK) → [`link`] → [`transport::completer`] (ACK → completion) → [`verbs`] (poll).
//!
//! Everything on the wire that is not RoCE — ARP, neighbour discovery, ping, the TCP of
//! out-of-band exchanges — goes to the [`port`]'s IP stack (smoltcp), which also finds peers'
//! MACs for QPs and address handles.

pub mod bench;
pub mod buf;
pub mod cm;
pub mod control;
pub mod counters;
pub mod cq;
pub mod dcqcn;
mod device;
pub mod doorbell;
mod engine;
pub mod error;
pub mod eventfd;
pub mod host;
pub mod limits;
pub mod link;
pub mod pkey;
pub mod port;
pub mod qp;
pub mod ring;
pub mod srq;
pub mod testbed;
pub mod transport;
pub mod types;
pub mod verbs;
pub mod waker;
pub mod wqe;

pub use device::{Device, DeviceConfig, DEFAULT_RESOLVE_TIMEOUT};
pub use engine::{RingMemory, FIRST_QPN, GSI_QPN, MAX_THREADS};

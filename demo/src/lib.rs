//! `roce demo`: a student types one command and sees RDMA.
//!
//! Two emulated NICs and two host programs — by default each NIC and the target program in its
//! own process, so the separation is real — play one [`Scenario`]: the target registers memory
//! and shares its keys, the demo freezes it, the initiator posts a work request, and the NICs
//! move the bytes while the target runs no code at all. Every claim the narration makes comes
//! from something observed:
//!
//! - the packets, because the demo *is* the wire between the two NICs ([`wire`]): every frame
//!   passes through it, to be shown field by field, written to a pcap, or dropped on purpose;
//! - the NICs' decisions (ICRC ok, PSN in sequence, rkey checked, DMA at offset X, ACK sent),
//!   because the NICs log them as tracing events that the demo reads back ([`events`]);
//! - the target's memory, read through a mapping of its region while it is frozen;
//! - the target's CPU time and context switches, from /proc ([`cpu`]).
//!
//! The pieces: [`rig`] sets up the NICs, the wire and the target (processes or threads),
//! [`target_host`] is the target program, [`play`] runs a scenario and tells it as a [`story`] of
//! beats, which [`text`] renders for a terminal and [`html`] as a page with a ladder diagram,
//! a memory map and a CPU timeline.
//!
//! Three scenarios are lessons of their own: [`connect`] shows the RDMA CM's handshake (REQ,
//! REP, RTU, DREQ, DREP) and the QP state each side reaches; [`tcp_vs_rdma`] moves the same bytes over a kernel
//! TCP socket and by RDMA WRITE and shows what each costs the receiver's CPU; [`allreduce`]
//! runs the ring all-reduce of AI training between N hosts, each with its own NIC, through a
//! switch (`roce switch`), the demo tapping every cable; [`congestion`] plays an incast into
//! one switch port without and with DCQCN, in simulated time.

pub mod allreduce;
pub mod congestion;
pub mod connect;
pub mod cpu;
pub mod events;
pub mod html;
pub mod plan;
pub mod play;
pub mod rig;
pub mod scenario;
pub mod side;
pub mod story;
pub mod target_host;
pub mod tcp_vs_rdma;
pub mod text;
pub mod wire;

mod child;
mod error;
mod shm;

pub use error::DemoError;
pub use play::{run, Mode, Options};
pub use scenario::Scenario;
pub use side::Side;
pub use story::{Beat, Observer};

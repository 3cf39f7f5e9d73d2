//! The test programs RDMA users reach for first — rdma-core's `ibv_rc_pingpong`,
//! `ibv_uc_pingpong`, `ibv_ud_pingpong`, `ibv_srq_pingpong` ([`pingpong`]) and perftest's
//! `ib_{write,read,send,atomic}_{bw,lat}` ([`perftest`], with `-R` through the RDMA CM), and
//! librdmacm's `rping`, `ucmatose` and `udaddy` ([`rping`], [`ucmatose`], [`udaddy`]) — on this
//! emulator's verbs API, so that they can face the real tools across a wire.
//!
//! Interoperating means saying exactly what the real tools say: the out-of-band TCP messages
//! that swap QP numbers, PSNs, GIDs, rkeys and results (byte for byte, see
//! `tests/interop/oob-formats.md`), the QP attributes they set, the sizes and kinds of work
//! requests they post. Both tools run on any verbs [`Context`](roce_nic::verbs::Context): a
//! device in this process or a NIC process reached through `roce_nic::host::connect`; the TCP
//! goes through that NIC's own IP stack, on the same wire as the RDMA traffic.
//!
//! Unlike the real tools, these check the data they receive (each tool's documentation says
//! what exactly), and every wait is bounded, so a lost peer is an error rather than a hang.

#![forbid(unsafe_code)]

pub mod conform;
pub mod error;
mod memory;
pub mod oob;
pub mod perftest;
pub mod pingpong;
pub mod rping;
pub mod ucmatose;
pub mod udaddy;

pub use error::ToolError;
pub use oob::{Limits, Role};

/// How long a run keeps its QPs after its last message when nothing follows on TCP (the
/// pingpongs, `ib_write_lat`). The peer's last message is complete for the peer only once our
/// ACK arrives; if that ACK is lost, the peer sends the message again (about 70 ms later for
/// rxe and these tools' timeout of 14) and must find our QP still there to answer — a peer
/// whose QP is gone never answers, and rxe retries for ever.
pub const LINGER: std::time::Duration = std::time::Duration::from_millis(500);

/// A random 24-bit first PSN, as the real tools draw one with `lrand48()`: fresh for every QP,
/// so that a restarted run never meets packets of an earlier one.
fn random_psn() -> u32 {
    use std::hash::{BuildHasher, RandomState};
    use std::sync::atomic::{AtomicU64, Ordering};
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    let draw = DRAWS.fetch_add(1, Ordering::Relaxed);
    (RandomState::new().hash_one((std::process::id(), draw)) & 0xff_ffff) as u32
}

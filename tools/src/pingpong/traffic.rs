//! The ping-pong itself, on the real tools' schedule: each QP has at most one SEND and one
//! receive pending; the client starts by sending on every QP; a QP sends again once both its
//! SEND and its receive have completed, until `iters` SENDs have completed in all; a side is
//! done when it has both sent and received `iters` messages — and then keeps its QPs a moment
//! ([`LINGER`](crate::LINGER)), in case its ACK of the peer's last message was lost.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use roce_nic::verbs::{SendFlags, SendOp, SendWr, UdDest, Wc, WcOpcode};

use super::setup::{Side, GRH_LEN, UD_QKEY};
use super::{expected_message, Options, Report, Transport};
use crate::memory::completions;
use crate::oob::Role;
use crate::ToolError;

const SEND: u8 = 1;
const RECV: u8 = 2;

pub fn run(side: &Side, opts: &Options, role: Role) -> Result<Report, ToolError> {
    let qps = side.qps.len();
    let by_qpn: HashMap<u32, usize> = side
        .qps
        .iter()
        .enumerate()
        .map(|(i, qp)| (qp.qp_num(), i))
        .collect();
    let checker = Checker {
        side,
        opts,
        expected: expected_message(opts.transport, opts.size as usize, opts.check),
    };
    let mut pending = vec![RECV; qps];
    let (mut sent, mut received) = (0u32, 0u32);
    let start = Instant::now();
    if matches!(role, Role::Client(_)) {
        for (q, waiting) in pending.iter_mut().enumerate() {
            post_send(side, opts, q)?;
            *waiting = RECV | SEND;
        }
    }
    let mut wcs = [Wc::default(); 16];
    while received < opts.iters || sent < opts.iters {
        let n = completions(&side.cq, &mut wcs, opts.limits.step, "SEND or receive")?;
        for wc in &wcs[..n] {
            let q = *by_qpn.get(&wc.qp_num).ok_or_else(|| {
                ToolError::Protocol(format!("a completion for unknown QP {:#x}", wc.qp_num))
            })?;
            if wc.opcode == WcOpcode::Recv {
                checker.check(wc, received)?;
                side.post_recv(wc.wr_id as usize)?;
                received += 1;
                pending[q] &= !RECV;
            } else {
                sent += 1;
                pending[q] &= !SEND;
            }
            if sent < opts.iters && pending[q] == 0 {
                post_send(side, opts, q)?;
                pending[q] = RECV | SEND;
            }
        }
    }
    let elapsed = start.elapsed();
    std::thread::sleep(crate::LINGER);
    Ok(Report {
        size: opts.size,
        iters: opts.iters,
        elapsed,
        verified: u64::from(received),
    })
}

/// One SEND of `size` bytes on QP `q` (to the peer's QP through the address handle, for UD).
fn post_send(side: &Side, opts: &Options, q: usize) -> Result<(), ToolError> {
    let sge = [side.send.sge(0, opts.size)];
    let ud = match (&side.ah, side.remote.get(q)) {
        (Some(ah), Some(dest)) => Some(UdDest {
            ah: ah.handle(),
            remote_qpn: dest.qpn,
            remote_qkey: UD_QKEY,
        }),
        _ => None,
    };
    side.qps[q].post_send(&[SendWr {
        wr_id: q as u64,
        op: SendOp::Send,
        sg_list: &sge,
        flags: SendFlags::SIGNALED,
        ud,
    }])?;
    Ok(())
}

/// Checks each received message against what the real tools send.
struct Checker<'a> {
    side: &'a Side,
    opts: &'a Options,
    expected: Vec<u8>,
}

impl Checker<'_> {
    fn check(&self, wc: &Wc, number: u32) -> Result<(), ToolError> {
        let side = self.side;
        let slot = wc.wr_id as usize;
        let ud = self.opts.transport == Transport::Ud;
        if wc.byte_len as usize != side.slot_len {
            return Err(ToolError::Data(format!(
                "message {number} has {} bytes where {} sends {}{}",
                wc.byte_len,
                self.opts.transport.program(),
                self.opts.size,
                if ud { " (plus the 40-byte GRH)" } else { "" }
            )));
        }
        let offset = slot * side.slot_len;
        let data_at = if ud { offset + GRH_LEN } else { offset };
        let data = side.recv.read(data_at, self.opts.size as usize);
        if let Some(at) = (0..data.len()).find(|i| data[*i] != self.expected[*i]) {
            return Err(ToolError::Data(format!(
                "byte {at} of message {number} is {:#04x} where {} sends {:#04x}{}",
                data[at],
                self.opts.transport.program(),
                self.expected[at],
                if self.opts.check {
                    " (-c marks page starts with 0)"
                } else {
                    ""
                }
            )));
        }
        if ud {
            let q = slot / side.per_qp;
            self.check_grh(
                &side.recv.read(offset, GRH_LEN),
                side.remote[q].gid.ip(),
                number,
            )?;
        }
        Ok(())
    }

    /// The GRH area holds the datagram's IP header (an IPv4 one in its last 20 bytes), which
    /// must come from the peer.
    fn check_grh(&self, grh: &[u8], peer: IpAddr, number: u32) -> Result<(), ToolError> {
        let (version, source) = match peer {
            IpAddr::V4(_) => (grh[20] >> 4, &grh[32..36]),
            IpAddr::V6(_) => (grh[0] >> 4, &grh[8..24]),
        };
        let want: Vec<u8> = match peer {
            IpAddr::V4(v4) => v4.octets().to_vec(),
            IpAddr::V6(v6) => v6.octets().to_vec(),
        };
        let want_version = if peer.is_ipv4() { 4 } else { 6 };
        if version != want_version || source != want.as_slice() {
            return Err(ToolError::Data(format!(
                "the GRH area of datagram {number} does not hold an IPv{want_version} header from {peer}: {grh:02x?}"
            )));
        }
        Ok(())
    }
}

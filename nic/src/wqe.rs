//! The byte layout of work queue entries and completion queue entries in the shared rings, and
//! the engine's decoded, validated copies of them.
//!
//! Both sides of a ring run on the same machine, so multi-byte fields are in native byte order.
//! Opcodes, flags and statuses use the libibverbs numbering.
//!
//! Send WQE:
//! ```text
//!  0 wr_id u64 | 8 opcode u8 | 9 flags u8 | 10 num_sge u8 | 12 imm_data / invalidate rkey u32
//! 16 remote_addr u64 | 24 rkey u32 | 28 inline_len u32 | 32 compare_add u64 | 40 swap u64
//! 48 ah u32 | 52 remote_qpn u32 | 56 remote_qkey u32 | 64 sge[num_sge] {addr u64, length u32,
//! lkey u32} | then inline data
//! ```
//! Receive WQE: `0 wr_id u64 | 8 num_sge u32 | 16 sge[num_sge]`.
//! CQE (64 bytes): `0 wr_id u64 | 8 status u8 | 9 opcode u8 | 10 wc_flags u8 | 12 byte_len u32 |
//! 16 imm_data u32 | 20 qp_num u32 | 24 src_qp u32`.

use crate::types::{QpCap, RecvWr, SendFlags, SendOp, SendWr, Sge, UdDest, Wc, WcOpcode, WcStatus};

/// Most scatter/gather entries in one work request.
pub const MAX_SGE: u32 = 32;
/// Most inline data bytes in one send work request.
pub const MAX_INLINE: u32 = 512;
/// Size of a completion queue entry.
pub const CQE_SIZE: usize = 64;

const SEND_HEADER: usize = 64;
const RECV_HEADER: usize = 16;
const SGE_SIZE: usize = 16;

/// Bytes a send WQE slot needs for a QP with these capabilities.
pub fn send_slot_size(cap: &QpCap) -> usize {
    SEND_HEADER + cap.max_send_sge as usize * SGE_SIZE + cap.max_inline_data as usize
}

/// Bytes a receive WQE slot needs.
pub fn recv_slot_size(cap: &QpCap) -> usize {
    RECV_HEADER + cap.max_recv_sge as usize * SGE_SIZE
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_ne_bytes());
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_ne_bytes());
}

fn get_u32(b: &[u8], at: usize) -> u32 {
    // One bounds check for the four bytes (indexing each byte checked each: a quarter of a
    // 64-byte WRITE's decoding).
    let mut v = [0u8; 4];
    v.copy_from_slice(&b[at..at + 4]);
    u32::from_ne_bytes(v)
}

fn get_u64(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_ne_bytes(v)
}

fn put_sges(b: &mut [u8], at: usize, sges: &[Sge]) {
    for (i, sge) in sges.iter().enumerate() {
        let o = at + i * SGE_SIZE;
        put_u64(b, o, sge.addr);
        put_u32(b, o + 8, sge.length);
        put_u32(b, o + 12, sge.lkey);
    }
}

fn get_sges(b: &[u8], at: usize, n: usize, out: &mut Vec<Sge>) {
    out.clear();
    out.extend((0..n).map(|i| {
        let o = at + i * SGE_SIZE;
        Sge {
            addr: get_u64(b, o),
            length: get_u32(b, o + 8),
            lkey: get_u32(b, o + 12),
        }
    }));
}

/// Why a posted work request was refused (by the host library at post time, or by the engine
/// when a WQE it reads from shared memory does not hold up).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WqeError {
    #[error("{0} scatter/gather entries exceed the QP's limit of {1}")]
    TooManySge(usize, u32),
    #[error("{0} bytes of inline data exceed the QP's limit of {1}")]
    InlineTooLong(u64, u32),
    #[error("unknown work request opcode {0}")]
    UnknownOpcode(u8),
    #[error("the message is longer than 2 GiB")]
    MessageTooLong,
}

/// Writes a send work request into `slot` (host side). `inline` holds the gathered bytes when
/// the request is sent inline.
pub fn encode_send(
    slot: &mut [u8],
    wr: &SendWr<'_>,
    inline: Option<&[u8]>,
    cap: &QpCap,
) -> Result<(), WqeError> {
    let inline_len = inline.map_or(0, |d| d.len());
    if inline.is_none() && wr.sg_list.len() > cap.max_send_sge as usize {
        return Err(WqeError::TooManySge(wr.sg_list.len(), cap.max_send_sge));
    }
    if inline_len > cap.max_inline_data as usize {
        return Err(WqeError::InlineTooLong(
            inline_len as u64,
            cap.max_inline_data,
        ));
    }
    slot[..SEND_HEADER].fill(0);
    put_u64(slot, 0, wr.wr_id);
    slot[8] = wr.op.code();
    slot[9] = wr.flags.0
        | if inline.is_some() {
            SendFlags::INLINE.0
        } else {
            0
        };
    let (imm, remote_addr, rkey, compare_add, swap) = match wr.op {
        SendOp::Send => (0, 0, 0, 0, 0),
        SendOp::SendWithImm { imm } => (imm, 0, 0, 0, 0),
        SendOp::SendWithInv { rkey } => (rkey, 0, 0, 0, 0),
        SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaRead { remote_addr, rkey } => {
            (0, remote_addr, rkey, 0, 0)
        }
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => (imm, remote_addr, rkey, 0, 0),
        SendOp::AtomicCmpAndSwp {
            remote_addr,
            rkey,
            compare,
            swap,
        } => (0, remote_addr, rkey, compare, swap),
        SendOp::AtomicFetchAndAdd {
            remote_addr,
            rkey,
            add,
        } => (0, remote_addr, rkey, add, 0),
    };
    put_u32(slot, 12, imm);
    put_u64(slot, 16, remote_addr);
    put_u32(slot, 24, rkey);
    put_u32(slot, 28, inline_len as u32);
    put_u64(slot, 32, compare_add);
    put_u64(slot, 40, swap);
    if let Some(ud) = wr.ud {
        put_u32(slot, 48, ud.ah);
        put_u32(slot, 52, ud.remote_qpn);
        put_u32(slot, 56, ud.remote_qkey);
    }
    match inline {
        Some(data) => {
            slot[10] = 0;
            let at = SEND_HEADER + cap.max_send_sge as usize * SGE_SIZE;
            slot[at..at + data.len()].copy_from_slice(data);
        }
        None => {
            slot[10] = wr.sg_list.len() as u8;
            put_sges(slot, SEND_HEADER, wr.sg_list);
        }
    }
    Ok(())
}

/// Writes a receive work request into `slot` (host side).
pub fn encode_recv(slot: &mut [u8], wr: &RecvWr<'_>, cap: &QpCap) -> Result<(), WqeError> {
    if wr.sg_list.len() > cap.max_recv_sge as usize {
        return Err(WqeError::TooManySge(wr.sg_list.len(), cap.max_recv_sge));
    }
    slot[..RECV_HEADER].fill(0);
    put_u64(slot, 0, wr.wr_id);
    put_u32(slot, 8, wr.sg_list.len() as u32);
    put_sges(slot, RECV_HEADER, wr.sg_list);
    Ok(())
}

/// A send work request as the engine holds it while working on it. Its buffers are reused for
/// the next request in the same slot, so decoding allocates nothing once warm.
#[derive(Debug, Clone)]
pub struct SendWqe {
    pub wr_id: u64,
    pub op: SendOp,
    pub flags: SendFlags,
    pub sges: Vec<Sge>,
    /// The data of an inline request (empty otherwise).
    pub inline: Vec<u8>,
    pub ud: Option<UdDest>,
    /// Bytes the message carries (READ: bytes asked for; atomics: 8).
    pub length: u64,
}

impl SendWqe {
    pub fn with_capacity(cap: &QpCap) -> SendWqe {
        SendWqe {
            wr_id: 0,
            op: SendOp::Send,
            flags: SendFlags::default(),
            sges: Vec::with_capacity(cap.max_send_sge as usize),
            inline: Vec::with_capacity(cap.max_inline_data as usize),
            ud: None,
            length: 0,
        }
    }

    pub fn is_inline(&self) -> bool {
        self.flags.contains(SendFlags::INLINE)
    }

    pub fn signaled(&self) -> bool {
        self.flags.contains(SendFlags::SIGNALED)
    }

    /// Decodes `slot` into `self` (engine side). On error `self.wr_id` is still set, so the
    /// failure can be completed against the right request.
    pub fn decode(&mut self, slot: &[u8], cap: &QpCap, ud: bool) -> Result<(), WqeError> {
        self.wr_id = get_u64(slot, 0);
        self.flags = SendFlags(slot[9]);
        let imm = get_u32(slot, 12);
        let remote_addr = get_u64(slot, 16);
        let rkey = get_u32(slot, 24);
        let compare_add = get_u64(slot, 32);
        let swap = get_u64(slot, 40);
        self.op = match slot[8] {
            0 => SendOp::RdmaWrite { remote_addr, rkey },
            1 => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm,
            },
            2 => SendOp::Send,
            3 => SendOp::SendWithImm { imm },
            4 => SendOp::RdmaRead { remote_addr, rkey },
            5 => SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare: compare_add,
                swap,
            },
            6 => SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add: compare_add,
            },
            9 => SendOp::SendWithInv { rkey: imm },
            other => return Err(WqeError::UnknownOpcode(other)),
        };
        self.ud = ud.then(|| UdDest {
            ah: get_u32(slot, 48),
            remote_qpn: get_u32(slot, 52),
            remote_qkey: get_u32(slot, 56),
        });
        self.inline.clear();
        self.sges.clear();
        if self.is_inline() {
            let len = get_u32(slot, 28);
            if len > cap.max_inline_data {
                return Err(WqeError::InlineTooLong(len.into(), cap.max_inline_data));
            }
            let at = SEND_HEADER + cap.max_send_sge as usize * SGE_SIZE;
            self.inline.extend_from_slice(&slot[at..at + len as usize]);
            self.length = len.into();
        } else {
            let n = usize::from(slot[10]);
            if n > cap.max_send_sge as usize {
                return Err(WqeError::TooManySge(n, cap.max_send_sge));
            }
            get_sges(slot, SEND_HEADER, n, &mut self.sges);
            self.length = self.sges.iter().map(|s| u64::from(s.length)).sum();
        }
        if self.op.is_atomic() {
            self.length = 8;
        }
        if self.length > 1 << 31 {
            return Err(WqeError::MessageTooLong);
        }
        Ok(())
    }
}

/// A receive work request as the engine holds it.
#[derive(Debug, Clone, Default)]
pub struct RecvWqe {
    pub wr_id: u64,
    pub sges: Vec<Sge>,
}

impl RecvWqe {
    pub fn with_capacity(cap: &QpCap) -> RecvWqe {
        RecvWqe {
            wr_id: 0,
            sges: Vec::with_capacity(cap.max_recv_sge as usize),
        }
    }

    /// Bytes the receive buffers hold in all.
    pub fn capacity(&self) -> u64 {
        self.sges.iter().map(|s| u64::from(s.length)).sum()
    }

    pub fn decode(&mut self, slot: &[u8], cap: &QpCap) -> Result<(), WqeError> {
        self.wr_id = get_u64(slot, 0);
        let n = get_u32(slot, 8) as usize;
        if n > cap.max_recv_sge as usize {
            self.sges.clear();
            return Err(WqeError::TooManySge(n, cap.max_recv_sge));
        }
        get_sges(slot, RECV_HEADER, n, &mut self.sges);
        Ok(())
    }
}

/// Writes a completion into a CQE slot.
pub fn encode_cqe(slot: &mut [u8; CQE_SIZE], wc: &Wc) {
    slot.fill(0);
    put_u64(slot, 0, wc.wr_id);
    slot[8] = wc.status as u8;
    slot[9] = wc.opcode as u8;
    slot[10] = wc.wc_flags;
    put_u32(slot, 12, wc.byte_len);
    put_u32(slot, 16, wc.imm_data);
    put_u32(slot, 20, wc.qp_num);
    put_u32(slot, 24, wc.src_qp);
}

/// Reads a completion from a CQE slot (host side).
pub fn decode_cqe(slot: &[u8; CQE_SIZE]) -> Wc {
    Wc {
        wr_id: get_u64(slot, 0),
        status: WcStatus::from_u8(slot[8]),
        opcode: WcOpcode::from_u8(slot[9]).unwrap_or(WcOpcode::Send),
        wc_flags: slot[10],
        byte_len: get_u32(slot, 12),
        imm_data: get_u32(slot, 16),
        qp_num: get_u32(slot, 20),
        src_qp: get_u32(slot, 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_wqe_round_trip() {
        let cap = QpCap::default();
        let sges = [
            Sge {
                addr: 0x1000,
                length: 100,
                lkey: 0x101,
            },
            Sge {
                addr: 0x2000,
                length: 28,
                lkey: 0x202,
            },
        ];
        let wr = SendWr {
            wr_id: 77,
            op: SendOp::RdmaWriteWithImm {
                remote_addr: 0xabc,
                rkey: 0x333,
                imm: 0x12345678,
            },
            sg_list: &sges,
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        let mut slot = vec![0u8; send_slot_size(&cap)];
        encode_send(&mut slot, &wr, None, &cap).unwrap();
        let mut wqe = SendWqe::with_capacity(&cap);
        wqe.decode(&slot, &cap, false).unwrap();
        assert_eq!(wqe.wr_id, 77);
        assert_eq!(wqe.op, wr.op);
        assert_eq!(wqe.sges, sges);
        assert_eq!(wqe.length, 128);
        assert!(wqe.signaled());
    }

    #[test]
    fn inline_send_carries_its_bytes() {
        let cap = QpCap::default();
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::Send,
            sg_list: &[],
            flags: SendFlags::default(),
            ud: None,
        };
        let mut slot = vec![0u8; send_slot_size(&cap)];
        encode_send(&mut slot, &wr, Some(b"hello"), &cap).unwrap();
        let mut wqe = SendWqe::with_capacity(&cap);
        wqe.decode(&slot, &cap, false).unwrap();
        assert_eq!(wqe.inline, b"hello");
        assert_eq!(wqe.length, 5);
    }

    #[test]
    fn garbage_slots_are_refused_not_trusted() {
        let cap = QpCap::default();
        let mut slot = vec![0u8; send_slot_size(&cap)];
        slot[8] = 42;
        let mut wqe = SendWqe::with_capacity(&cap);
        assert_eq!(
            wqe.decode(&slot, &cap, false),
            Err(WqeError::UnknownOpcode(42))
        );
        slot[8] = 2;
        slot[10] = 200;
        assert!(matches!(
            wqe.decode(&slot, &cap, false),
            Err(WqeError::TooManySge(200, _))
        ));
        slot[10] = 0;
        slot[9] = SendFlags::INLINE.0;
        slot[28..32].copy_from_slice(&100_000u32.to_ne_bytes());
        assert!(matches!(
            wqe.decode(&slot, &cap, false),
            Err(WqeError::InlineTooLong(..))
        ));
    }
}

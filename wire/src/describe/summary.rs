//! The one-line summary of a frame, in the spirit of tshark's packet list but saying more: every
//! extension header's fields and the ICRC verdict.

use core::fmt;

use super::{wire_order, Description};
use crate::frame::NetworkRepr;
use crate::opcode::{Kind, Opcode};

/// The one-line summary of a frame; see [`Description::summary`].
pub struct Summary<'d, 'f, 'a>(pub(super) &'d Description<'f, 'a>);

impl fmt::Display for Summary<'_, '_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let frame = self.0.frame;
        let repr = &frame.repr;
        match repr.network {
            NetworkRepr::Ipv4 { src, dst, .. } => write!(f, "{src} → {dst}")?,
            NetworkRepr::Ipv6 { src, dst, .. } => write!(f, "{src} → {dst}")?,
            NetworkRepr::Grh { sgid, dgid, .. } => write!(f, "{sgid} → {dgid}")?,
        }
        if let Some(tag) = repr.ethernet.and_then(|e| e.vlan) {
            write!(f, " VLAN={}", tag.vid)?;
        }
        // DSCP and ECN where they are set: the priority class, and what congestion control
        // (DCQCN's marks, a CNP's own class) reads.
        let (dscp, ecn) = match repr.network {
            NetworkRepr::Ipv4 { dscp, ecn, .. } => (dscp, ecn),
            NetworkRepr::Ipv6 { traffic_class, .. } => (traffic_class >> 2, traffic_class & 3),
            NetworkRepr::Grh { .. } => (0, 0),
        };
        if dscp != 0 {
            write!(f, " DSCP={dscp}")?;
        }
        if ecn != 0 {
            write!(
                f,
                " ECN={}",
                ["", "ECT(1)", "ECT(0)", "CE"][usize::from(ecn & 3)]
            )?;
        }
        let bth = &repr.bth;
        write!(f, " {} QP={:#08x} PSN={}", bth.opcode, bth.dest_qp, bth.psn)?;
        for (set, name) in [
            (bth.ack_req, "AckReq"),
            (bth.solicited, "SE"),
            (bth.fecn, "FECN"),
            (bth.becn, "BECN"),
        ] {
            if set {
                write!(f, " {name}")?;
            }
        }
        let ext = &repr.ext;
        if let Some(d) = ext.deth {
            write!(f, " Q_Key={:#010x} SrcQP={:#08x}", d.q_key, d.src_qp)?;
        }
        if super::mad::is_mad(frame) {
            super::mad::summary(f, frame.payload())?;
        }
        if let Some(h) = ext.feth {
            write!(
                f,
                " selectivity={} placement={}",
                h.selectivity, h.placement_type
            )?;
        }
        if let Some(r) = ext.reth {
            write!(
                f,
                " VA={:#018x} R_Key={:#010x} DMA_len={}",
                r.va, r.r_key, r.dma_len
            )?;
        }
        if let Some(a) = ext.atomic_eth {
            write!(f, " VA={:#018x} R_Key={:#010x}", a.va, a.r_key)?;
            if bth.opcode.kind() == Kind::FetchAdd {
                write!(f, " add={:#x}", a.swap_add)?;
            } else {
                write!(f, " swap={:#x} compare={:#x}", a.swap_add, a.compare)?;
            }
        }
        if let Some(a) = ext.aeth {
            write!(f, " [{}] MSN={}", a.syndrome, a.msn)?;
        }
        if let Some(a) = ext.atomic_ack_eth {
            write!(f, " original={:#x}", a.original)?;
        }
        if let Some(i) = ext.immdt {
            write!(f, " Imm={:#010x}", i.imm)?;
        }
        if let Some(i) = ext.ieth {
            write!(f, " Inv_R_Key={:#010x}", i.r_key)?;
        }
        // A CNP's 16 bytes after the BTH are reserved, not payload.
        if bth.opcode.has_payload() && bth.opcode != Opcode::CNP {
            write!(f, " payload={}", repr.payload_len)?;
        }
        let check = self.0.icrc;
        if check.is_ok() {
            f.write_str(" ICRC ok")
        } else {
            write!(
                f,
                " ICRC BAD (expected {:#010x}, found {:#010x})",
                wire_order(check.expected),
                wire_order(check.found)
            )
        }
    }
}

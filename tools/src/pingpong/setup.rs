//! One side's resources — a CQ, the QPs, a buffer to send from, receive slots — and how its
//! QPs are connected, with the attributes the real pingpongs give them.

use roce_hostmem::Access;
use roce_nic::verbs::{
    AddressHandle, AddressVector, CompletionQueue, Context, Gid, ProtectionDomain, QpAttr, QpCap,
    QpState, QpType, QueuePair, RecvWr, SharedReceiveQueue,
};

use super::dest::Dest;
use super::{expected_message, Options, Transport};
use crate::memory::Buffer;
use crate::{random_psn, ToolError};

/// The Q_Key ibv_ud_pingpong gives its QP and its sends.
pub const UD_QKEY: u32 = 0x1111_1111;
/// Bytes in front of every UD receive for the GRH.
pub const GRH_LEN: usize = 40;
/// The pingpongs' RC attributes: ~67 ms retransmission timeout, 7 retries, RNR retry 7
/// (for ever), RNR timer 12 (0.64 ms), one outstanding READ/atomic each way, GRH hop limit 1.
const TIMEOUT: u8 = 14;
const RETRY: u8 = 7;
const RNR_TIMER: u8 = 12;
const HOP_LIMIT: u8 = 1;
/// Receives kept posted per QP at most. A ping-pong never has more than one message in flight
/// towards a QP, so more would only cost memory.
const MAX_RECEIVES_PER_QP: usize = 64;
/// What a receive slot holds until a message overwrites it: no byte the tools send.
pub const POISON: u8 = 0xee;

pub struct Side {
    pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qps: Vec<QueuePair>,
    /// srq: the shared receive queue every QP takes its receives from.
    srq: Option<SharedReceiveQueue>,
    psns: Vec<u32>,
    gid: Gid,
    /// One message as the real tool sends it.
    pub send: Buffer,
    /// `per_qp` receive slots per QP, QP after QP.
    pub recv: Buffer,
    pub slot_len: usize,
    pub per_qp: usize,
    /// The peer's QPs, once connected.
    pub remote: Vec<Dest>,
    /// UD: where the sends go.
    pub ah: Option<AddressHandle>,
}

impl Side {
    /// Creates everything and posts the receives, as the tools do before the exchange.
    pub fn new(ctx: &Context, opts: &Options) -> Result<Side, ToolError> {
        let qps = opts.qps();
        let per_qp = (opts.rx_depth as usize / qps).clamp(2, MAX_RECEIVES_PER_QP);
        let size = opts.size as usize;
        let slot_len = if opts.transport == Transport::Ud {
            size + GRH_LEN
        } else {
            size
        };
        let pd = ctx.alloc_pd()?;
        let cq = ctx.create_cq((qps * (per_qp + 2)) as u32)?;
        let cap = QpCap {
            max_send_wr: 2,
            max_recv_wr: per_qp as u32,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp_type = match opts.transport {
            Transport::Rc | Transport::Srq => QpType::Rc,
            Transport::Uc => QpType::Uc,
            Transport::Ud => QpType::Ud,
        };
        let init = match opts.transport {
            Transport::Ud => QpAttr::init_ud(UD_QKEY),
            _ => QpAttr::init(Access::empty()),
        };
        // ibv_srq_pingpong's QPs share one receive queue holding all the receives.
        let srq = match opts.transport {
            Transport::Srq => Some(pd.create_srq((qps * per_qp) as u32, 1)?),
            _ => None,
        };
        let mut made = Vec::with_capacity(qps);
        for _ in 0..qps {
            let qp = match &srq {
                Some(srq) => pd.create_qp_with_srq(qp_type, &cq, &cq, srq, cap)?,
                None => pd.create_qp(qp_type, &cq, &cq, cap)?,
            };
            qp.modify(&init)?;
            made.push(qp);
        }
        let send = Buffer::new(&pd, size, Access::empty())?;
        send.write(0, &expected_message(opts.transport, size, opts.check));
        let recv = Buffer::new(&pd, slot_len * per_qp * qps, Access::LOCAL_WRITE)?;
        let side = Side {
            pd,
            psns: (0..qps).map(|_| random_psn()).collect(),
            gid: ctx.gid(opts.gid_index).unwrap_or_default(),
            cq,
            qps: made,
            srq,
            send,
            recv,
            slot_len,
            per_qp,
            remote: Vec::new(),
            ah: None,
        };
        for slot in 0..qps * per_qp {
            side.post_recv(slot)?;
        }
        Ok(side)
    }

    pub fn local_dests(&self) -> Vec<Dest> {
        self.qps
            .iter()
            .zip(&self.psns)
            .map(|(qp, psn)| Dest {
                lid: 0,
                qpn: qp.qp_num(),
                psn: *psn,
                gid: self.gid,
            })
            .collect()
    }

    /// Poisons receive slot `slot` and posts it on its QP (or on the shared receive queue);
    /// its wr_id is the slot number.
    pub fn post_recv(&self, slot: usize) -> Result<(), ToolError> {
        let offset = slot * self.slot_len;
        self.recv.fill(offset, self.slot_len, POISON);
        let sge = [self.recv.sge(offset, self.slot_len as u32)];
        let wr = [RecvWr {
            wr_id: slot as u64,
            sg_list: &sge,
        }];
        match &self.srq {
            Some(srq) => srq.post_recv(&wr)?,
            None => self.qps[slot / self.per_qp].post_recv(&wr)?,
        }
        Ok(())
    }

    /// Connects QP i to the peer's QP i (RC, UC), or readies the UD QP and its address handle.
    pub fn connect(&mut self, remote: &[Dest], opts: &Options) -> Result<(), ToolError> {
        if let Some(no_gid) = remote.iter().find(|d| d.gid == Gid::default()) {
            return Err(ToolError::Protocol(format!(
                "QP {:#x}'s address without a GID; on RoCE the peer needs -g",
                no_gid.qpn
            )));
        }
        for ((qp, dest), psn) in self.qps.iter().zip(remote).zip(&self.psns) {
            let av = AddressVector {
                hop_limit: HOP_LIMIT,
                ..AddressVector::to(dest.gid, opts.gid_index)
            };
            let (rtr, rts) = match opts.transport {
                Transport::Rc | Transport::Srq => (
                    QpAttr {
                        max_dest_rd_atomic: Some(1),
                        min_rnr_timer: Some(RNR_TIMER),
                        ..connected_rtr(av, dest, opts)
                    },
                    QpAttr {
                        timeout: Some(TIMEOUT),
                        retry_cnt: Some(RETRY),
                        rnr_retry: Some(RETRY),
                        max_rd_atomic: Some(1),
                        ..rts(*psn)
                    },
                ),
                Transport::Uc => (connected_rtr(av, dest, opts), rts(*psn)),
                Transport::Ud => {
                    let rtr = QpAttr {
                        qp_state: Some(QpState::Rtr),
                        ..QpAttr::default()
                    };
                    self.ah = Some(self.pd.create_ah(av)?);
                    (rtr, rts(*psn))
                }
            };
            qp.modify(&rtr)?;
            qp.modify(&rts)?;
        }
        self.remote = remote.to_vec();
        Ok(())
    }
}

fn connected_rtr(av: AddressVector, dest: &Dest, opts: &Options) -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Rtr),
        av: Some(av),
        path_mtu: Some(opts.mtu),
        dest_qp_num: Some(dest.qpn),
        rq_psn: Some(dest.psn),
        ..QpAttr::default()
    }
}

fn rts(psn: u32) -> QpAttr {
    QpAttr {
        qp_state: Some(QpState::Rts),
        sq_psn: Some(psn),
        ..QpAttr::default()
    }
}

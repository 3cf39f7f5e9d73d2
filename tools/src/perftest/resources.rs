//! One side's QP, CQs and buffer, and how the QP is connected: with perftest's attributes, so
//! that the peer's requests and answers fit exactly.

use roce_hostmem::Access;
use roce_nic::verbs::{
    AddressVector, CompletionQueue, Context, Gid, Mtu, ProtectionDomain, QpAttr, QpCap, QpState,
    QpType, QueuePair,
};

use super::layout::Layout;
use super::messages::QpRecord;
use super::{Options, Verb};
use crate::memory::Buffer;
use crate::oob::Role;
use crate::{random_psn, ToolError};

/// perftest's RNR timer (0.64 ms) and GRH hop limit.
const RNR_TIMER: u8 = 12;
const HOP_LIMIT: u8 = 0xff;
/// perftest asks for 7 retries and RNR retries (for ever).
const RETRY: u8 = 7;

pub struct Resources {
    pub pd: ProtectionDomain,
    pub send_cq: CompletionQueue,
    pub recv_cq: CompletionQueue,
    pub qp: QueuePair,
    /// perftest's buffer: the first half to send from, the second for the peer.
    pub area: Buffer,
    pub layout: Layout,
    pub mine: QpRecord,
    /// What the QP lets the peer do.
    pub access: Access,
}

impl Resources {
    pub fn new(
        ctx: &Context,
        opts: &Options,
        layout: Layout,
        receives: u32,
    ) -> Result<Resources, ToolError> {
        let verb = opts.test.verb();
        let pd = ctx.alloc_pd()?;
        let send_cq = ctx.create_cq(opts.tx_depth + 1)?;
        let recv_cq = ctx.create_cq(receives + 1)?;
        let cap = QpCap {
            max_send_wr: opts.tx_depth,
            max_recv_wr: receives.max(1),
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd.create_qp(QpType::Rc, &send_cq, &recv_cq, cap)?;
        let access = Access::LOCAL_WRITE
            | match verb {
                Verb::Write => Access::REMOTE_WRITE,
                Verb::Read => Access::REMOTE_READ,
                Verb::Atomic => Access::REMOTE_ATOMIC,
                Verb::Send => Access::empty(),
            };
        qp.modify(&QpAttr::init(access))?;
        let area = Buffer::new(&pd, layout.buffer_len() as usize, access)?;
        let out_reads = match verb {
            Verb::Read | Verb::Atomic => u16::from(ctx.device().max_qp_rd_atom),
            Verb::Write | Verb::Send => 1,
        };
        let mine = QpRecord {
            lid: 0,
            out_reads,
            qpn: qp.qp_num(),
            psn: random_psn(),
            rkey: area.rkey(),
            vaddr: area.va(layout.peer_half() as usize),
            gid: ctx.gid(opts.gid_index).unwrap_or_default(),
            srqn: 0,
        };
        Ok(Resources {
            pd,
            send_cq,
            recv_cq,
            qp,
            area,
            layout,
            mine,
            access,
        })
    }

    /// RTR towards the peer's QP, and RTS unless this is a bandwidth test's server, which
    /// perftest leaves in RTR (it only answers).
    pub fn connect(
        &self,
        theirs: &QpRecord,
        mtu: Mtu,
        opts: &Options,
        role: Role,
    ) -> Result<(), ToolError> {
        if theirs.gid == Gid::default() {
            return Err(ToolError::Protocol(
                "a QP record without a GID; on RoCE the peer needs one (-x)".into(),
            ));
        }
        let av = AddressVector {
            hop_limit: HOP_LIMIT,
            ..AddressVector::to(theirs.gid, opts.gid_index)
        };
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rtr),
            av: Some(av),
            path_mtu: Some(mtu),
            dest_qp_num: Some(theirs.qpn),
            rq_psn: Some(theirs.psn),
            max_dest_rd_atomic: Some(self.mine.out_reads.min(255) as u8),
            min_rnr_timer: Some(RNR_TIMER),
            ..QpAttr::default()
        })?;
        if opts.test.is_bw() && role == Role::Server {
            return Ok(());
        }
        self.qp.modify(&QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(self.mine.psn),
            timeout: Some(opts.qp_timeout),
            retry_cnt: Some(RETRY),
            rnr_retry: Some(RETRY),
            max_rd_atomic: Some(theirs.out_reads.min(255) as u8),
            ..QpAttr::default()
        })?;
        Ok(())
    }

    /// A local buffer for what comes back (READ data, atomic results, received messages).
    pub fn landing(&self, len: usize) -> Result<Buffer, ToolError> {
        Buffer::new(&self.pd, len, Access::LOCAL_WRITE)
    }
}

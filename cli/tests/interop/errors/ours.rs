//! Our side of the cases: our NIC, reached as a host process reaches it, and a fresh QP with a
//! CQ of its own for each case.

use super::*;

/// Our side of one case: a QP with a CQ of its own, in a protection domain with one buffer.
pub(super) struct Local {
    pub(super) qp: QueuePair,
    pub(super) cq: CompletionQueue,
    pub(super) psn: u32,
    pub(super) gid: Gid,
}

/// Our NIC, reached as a host process reaches it.
pub(super) struct Ours {
    /// The guest's end of the cable, where a frame our NIC would never send can be put.
    pub(super) guest_end: String,
    pub(super) ctx: Context,
    pub(super) pd: ProtectionDomain,
    pub(super) region: Arc<Region>,
    pub(super) mr: MemoryRegion,
    pub(super) next_psn: u32,
    /// Every QP made, kept until the end so that no QP number is used twice: the capture is
    /// checked by QP number once all cases have run. [`Ours::destroy`] takes one out.
    pub(super) kept: Vec<QueuePair>,
}

impl Ours {
    pub(super) fn open(env: &Env, nic: &str, guest_end: &str) -> Ours {
        let backend = SocketBackend::connect_at(nic, &env.socket(nic)).expect("our NIC's socket");
        let ctx = Context::open(backend as Arc<dyn Backend>).expect("opening our NIC");
        let pd = ctx.alloc_pd().unwrap();
        let region = Arc::new(Region::shared(OUR_BUF).unwrap());
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = pd.register(&region, 0, OUR_BUF, access).unwrap();
        Ours {
            guest_end: guest_end.to_owned(),
            ctx,
            pd,
            region,
            mr,
            next_psn: 0x10_0000,
            kept: Vec::new(),
        }
    }

    pub(super) fn gid(&self) -> Gid {
        self.ctx.gid(GID_INDEX).expect("GID index 1")
    }

    pub(super) fn qp(&mut self, qp_type: QpType) -> Local {
        let cq = self.ctx.create_cq(16).unwrap();
        let qp = self
            .pd
            .create_qp(qp_type, &cq, &cq, QpCap::default())
            .unwrap();
        self.kept.push(qp.clone());
        self.next_psn += 0x1000;
        Local {
            qp,
            cq,
            psn: self.next_psn,
            gid: self.gid(),
        }
    }

    /// A fresh RC QP connected to the agent's `remote`, with these requester settings.
    pub(super) fn rc(&mut self, remote: &Remote, timeout: u8, retry: u8, rnr_retry: u8) -> Local {
        let local = self.qp(QpType::Rc);
        let access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        local.qp.modify(&QpAttr::init(access)).unwrap();
        let av = AddressVector::to(remote.gid, GID_INDEX);
        let rtr = QpAttr {
            min_rnr_timer: Some(MIN_RNR_TIMER),
            ..QpAttr::rtr(av, remote.qpn, remote.psn, MTU)
        };
        local.qp.modify(&rtr).expect("our QP to RTR");
        let rts = QpAttr {
            timeout: Some(timeout),
            retry_cnt: Some(retry),
            rnr_retry: Some(rnr_retry),
            ..QpAttr::rts(local.psn)
        };
        local.qp.modify(&rts).expect("our QP to RTS");
        local
    }

    /// A fresh UD QP with `qkey`, in RTS.
    pub(super) fn ud(&mut self, qkey: u32) -> Local {
        let local = self.qp(QpType::Ud);
        local.qp.modify(&QpAttr::init_ud(qkey)).unwrap();
        for state in [QpState::Rtr, QpState::Rts] {
            let attr = QpAttr {
                qp_state: Some(state),
                sq_psn: (state == QpState::Rts).then_some(local.psn),
                ..QpAttr::default()
            };
            local.qp.modify(&attr).unwrap();
        }
        local
    }

    /// Posts one signaled request from the start of our buffer and waits for its completion.
    pub(super) fn post_and_wait(&self, local: &Local, op: SendOp, len: u32) -> Wc {
        let sge = [self.mr.sge(0, len)];
        self.post(local, op, &sge, None);
        self.wait(local)
    }

    pub(super) fn post(
        &self,
        local: &Local,
        op: SendOp,
        sge: &[roce_nic::verbs::Sge],
        ud: Option<UdDest>,
    ) {
        let wr = SendWr {
            wr_id: 1,
            op,
            sg_list: sge,
            flags: SendFlags::SIGNALED,
            ud,
        };
        local.qp.post_send(&[wr]).expect("post_send");
    }

    pub(super) fn wait(&self, local: &Local) -> Wc {
        let mut wc = [Wc::default()];
        let n = local.cq.wait(&mut wc, Some(COMPLETION_WAIT));
        assert_eq!(
            n,
            1,
            "no completion on our QP {} in {COMPLETION_WAIT:?}",
            local.qp.qp_num()
        );
        wc[0]
    }

    /// Destroys the QP of `local`.
    pub(super) fn destroy(&mut self, local: Local) {
        let qpn = local.qp.qp_num();
        self.kept.retain(|qp| qp.qp_num() != qpn);
    }

    pub(super) fn counter(&self, name: &str) -> u64 {
        let snapshot = self.ctx.counters().unwrap();
        snapshot
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, _, v)| v)
            .unwrap_or_else(|| panic!("no counter {name}"))
    }
}

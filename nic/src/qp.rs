//! Queue pairs as the engine holds them: the IBTA state machine and its attributes, the path to
//! the peer, the send and receive queues, and the transport state the requester, responder and
//! completer share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use roce_hostmem::{Access, PdId, Region};
use roce_wire::EthernetAddress;

use crate::pkey::{self, PKeyTable};
use crate::ring::{Consumer, Geometry, Ring, RingError};
use crate::srq::SharedSrq;
use crate::transport::recv_queue::RecvQueue;
use crate::transport::requester::SendState;
use crate::transport::responder::{self, RecvState};
use crate::transport::send_queue::SendQueue;
use crate::transport::{psn, udp_src_port, Ctx, ErrorCause, Event, Path};
use crate::types::{AddressVector, Gid, Mtu, QpAttr, QpCap, QpState, QpType, WcStatus};
use crate::wqe::{recv_slot_size, send_slot_size, SendWqe};

/// Current attribute values of a QP (what `query` reports).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    pub pkey_index: u16,
    pub port_num: u8,
    pub access: Access,
    pub qkey: u32,
    pub path_mtu: Mtu,
    pub dest_qp_num: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub av: Option<AddressVector>,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub min_rnr_timer: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
}

impl Default for Attrs {
    fn default() -> Attrs {
        Attrs {
            pkey_index: 0,
            port_num: 1,
            access: Access::empty(),
            qkey: 0,
            path_mtu: Mtu::M1024,
            dest_qp_num: 0,
            rq_psn: 0,
            sq_psn: 0,
            av: None,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            min_rnr_timer: 12,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// What `modify` needs to know about the device.
#[derive(Debug, Clone)]
pub struct PortInfo {
    pub mac: EthernetAddress,
    pub gids: Vec<Gid>,
    /// Largest path MTU the port's link carries.
    pub max_mtu: Mtu,
    pub neighbours: HashMap<IpAddr, EthernetAddress>,
    pub pkeys: PKeyTable,
}

/// Most READs and atomics one QP may have outstanding, either way.
pub const MAX_RD_ATOMIC: u8 = 128;

/// Why a modify was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModifyError {
    #[error("a {qp_type} QP cannot go from {from} to {to}")]
    Transition {
        qp_type: QpType,
        from: QpState,
        to: QpState,
    },
    #[error("going from {from} to {to} needs the attribute {attr}")]
    Missing {
        from: QpState,
        to: QpState,
        attr: &'static str,
    },
    #[error("the attribute {attr} cannot be set going from {from} to {to}")]
    Unexpected {
        from: QpState,
        to: QpState,
        attr: &'static str,
    },
    #[error("{attr} = {value} is out of range")]
    Value { attr: &'static str, value: u64 },
    #[error("no GID at index {0}")]
    NoGid(u8),
    #[error("the source GID {src} and destination GID {dst} are of different IP families")]
    Family { src: Gid, dst: Gid },
    #[error(
        "nobody answered ARP or neighbour discovery for {0} (give its MAC in the address vector or as a neighbour)"
    )]
    NoNeighbour(IpAddr),
}

/// The attribute mask bits, with names for messages.
mod mask {
    pub const PKEY_INDEX: u32 = 1 << 0;
    pub const PORT: u32 = 1 << 1;
    pub const ACCESS: u32 = 1 << 2;
    pub const QKEY: u32 = 1 << 3;
    pub const PATH_MTU: u32 = 1 << 4;
    pub const DEST_QPN: u32 = 1 << 5;
    pub const RQ_PSN: u32 = 1 << 6;
    pub const SQ_PSN: u32 = 1 << 7;
    pub const AV: u32 = 1 << 8;
    pub const TIMEOUT: u32 = 1 << 9;
    pub const RETRY_CNT: u32 = 1 << 10;
    pub const RNR_RETRY: u32 = 1 << 11;
    pub const MIN_RNR_TIMER: u32 = 1 << 12;
    pub const MAX_RD_ATOMIC: u32 = 1 << 13;
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 14;

    pub const NAMES: [(u32, &str); 15] = [
        (PKEY_INDEX, "pkey_index"),
        (PORT, "port_num"),
        (ACCESS, "qp_access_flags"),
        (QKEY, "qkey"),
        (PATH_MTU, "path_mtu"),
        (DEST_QPN, "dest_qp_num"),
        (RQ_PSN, "rq_psn"),
        (SQ_PSN, "sq_psn"),
        (AV, "ah_attr"),
        (TIMEOUT, "timeout"),
        (RETRY_CNT, "retry_cnt"),
        (RNR_RETRY, "rnr_retry"),
        (MIN_RNR_TIMER, "min_rnr_timer"),
        (MAX_RD_ATOMIC, "max_rd_atomic"),
        (MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic"),
    ];
}

fn attr_mask(a: &QpAttr) -> u32 {
    use mask::*;
    [
        (a.pkey_index.is_some(), PKEY_INDEX),
        (a.port_num.is_some(), PORT),
        (a.qp_access_flags.is_some(), ACCESS),
        (a.qkey.is_some(), QKEY),
        (a.path_mtu.is_some(), PATH_MTU),
        (a.dest_qp_num.is_some(), DEST_QPN),
        (a.rq_psn.is_some(), RQ_PSN),
        (a.sq_psn.is_some(), SQ_PSN),
        (a.av.is_some(), AV),
        (a.timeout.is_some(), TIMEOUT),
        (a.retry_cnt.is_some(), RETRY_CNT),
        (a.rnr_retry.is_some(), RNR_RETRY),
        (a.min_rnr_timer.is_some(), MIN_RNR_TIMER),
        (a.max_rd_atomic.is_some(), MAX_RD_ATOMIC),
        (a.max_dest_rd_atomic.is_some(), MAX_DEST_RD_ATOMIC),
    ]
    .into_iter()
    .filter(|(set, _)| *set)
    .fold(0, |m, (_, bit)| m | bit)
}

/// Required and optional attributes of each transition, as the Linux verbs core checks them
/// (`ib_modify_qp_is_ok`). `None` if the transition does not exist.
fn transition(qp_type: QpType, from: QpState, to: QpState) -> Option<(u32, u32)> {
    use mask::*;
    use QpState::*;
    let rc = qp_type == QpType::Rc;
    let ud = qp_type == QpType::Ud;
    let connected_init = PKEY_INDEX | PORT | ACCESS;
    let ud_init = PKEY_INDEX | PORT | QKEY;
    let init = if ud { ud_init } else { connected_init };
    let rts_options = match qp_type {
        QpType::Rc => ACCESS | MIN_RNR_TIMER,
        QpType::Uc => ACCESS,
        QpType::Ud => QKEY,
    };
    Some(match (from, to) {
        (_, Reset) | (_, Err) => (0, 0),
        (Reset, Init) => (init, 0),
        (Init, Init) => (0, init),
        (Init, Rtr) => {
            let required = match qp_type {
                QpType::Rc => {
                    AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER
                }
                QpType::Uc => AV | PATH_MTU | DEST_QPN | RQ_PSN,
                QpType::Ud => 0,
            };
            let optional = if ud {
                PKEY_INDEX | QKEY
            } else {
                PKEY_INDEX | ACCESS
            };
            (required, optional)
        }
        (Rtr, Rts) => {
            let required = if rc {
                SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_RD_ATOMIC
            } else {
                SQ_PSN
            };
            (required, rts_options)
        }
        (Rts, Rts) => (0, rts_options),
        (Rts, Sqd) => (0, 0),
        (Sqd, Sqd) | (Sqd, Rts) => (
            0,
            rts_options
                | if rc {
                    TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_RD_ATOMIC | MAX_DEST_RD_ATOMIC
                } else {
                    0
                },
        ),
        (Sqe, Rts) if !rc => (0, rts_options),
        _ => return None,
    })
}

/// A queue pair, engine side.
#[derive(Debug)]
pub struct Qp {
    pub qpn: u32,
    pub qp_type: QpType,
    /// The client (host program) that created it.
    pub owner: u64,
    pub pd: PdId,
    pub send_cq: u32,
    pub recv_cq: u32,
    pub cap: QpCap,
    pub state: QpState,
    pub attrs: Attrs,
    /// Where packets go (connected QPs, from RTR on).
    pub path: Option<Path>,
    pub sq: SendQueue,
    pub rq: RecvQueue,
    pub send: SendState,
    pub recv: RecvState,
    /// Every send request completes with an entry, signaled or not.
    pub sq_sig_all: bool,
    /// Follow Soft-RoCE where it deviates from the IBTA spec (retry_cnt 7 retries for ever).
    pub rxe_compat: bool,
    /// Runs IRN's low retransmission timer beside the configured one (see
    /// [`crate::transport::requester::rto_low`]).
    pub rto_low: bool,
    /// The P_Key of the partition the QP is in (the port's table at `attrs.pkey_index`): in
    /// every packet it sends, and what every packet it takes must match.
    pub p_key: u16,
    /// DCQCN's two ends for this QP, when the NIC runs it (connected QPs only).
    pub congestion: Option<Box<crate::dcqcn::QpCongestion>>,
    /// The shared receive queue the QP takes its receives from, when it has one: then its own
    /// receive ring is never read (what a host writes there is ignored).
    pub srq: Option<SharedSrq>,
    rings: Rings,
}

/// The host's side of the QP's queues: the shared rings it posts into. Only the engine's
/// methods below read them; the transport sees the requests they copy out.
#[derive(Debug)]
struct Rings {
    region: Arc<Region>,
    geometry: (Geometry, Geometry),
    sq: Consumer,
    rq: Consumer,
    /// Scratch space for one slot.
    slot: Vec<u8>,
}

/// The ring geometry of a QP's send and receive queues in one region.
pub fn ring_layout(cap: &QpCap) -> (Geometry, Geometry) {
    let sq = Geometry::new(0, cap.max_send_wr, send_slot_size(cap));
    let rq = Geometry::new(
        sq.end().next_multiple_of(4096),
        cap.max_recv_wr,
        recv_slot_size(cap),
    );
    (sq, rq)
}

impl Qp {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        qpn: u32,
        qp_type: QpType,
        owner: u64,
        pd: PdId,
        send_cq: u32,
        recv_cq: u32,
        cap: QpCap,
        rings: Arc<Region>,
        sq_sig_all: bool,
    ) -> Result<Qp, RingError> {
        let (sq_geometry, rq_geometry) = ring_layout(&cap);
        let sq = Ring::create(Arc::clone(&rings), sq_geometry)?;
        let rq = Ring::create(Arc::clone(&rings), rq_geometry)?;
        let (sq_capacity, rq_capacity) = (sq.capacity(), rq.capacity());
        Ok(Qp {
            qpn,
            qp_type,
            owner,
            pd,
            send_cq,
            recv_cq,
            cap,
            state: QpState::Reset,
            attrs: Attrs::default(),
            path: None,
            sq: SendQueue::new(sq_capacity, &cap),
            rq: RecvQueue::new(rq_capacity, &cap),
            send: SendState::default(),
            recv: RecvState::new(0, &cap),
            sq_sig_all,
            rxe_compat: false,
            rto_low: false,
            p_key: pkey::DEFAULT,
            congestion: None,
            srq: None,
            rings: Rings {
                region: rings,
                geometry: (sq_geometry, rq_geometry),
                sq: Consumer::new(sq),
                rq: Consumer::new(rq),
                slot: vec![0; sq_geometry.slot_size.max(rq_geometry.slot_size)],
            },
        })
    }

    /// The region holding the send and receive rings, and their geometry.
    pub fn rings(&self) -> (&Arc<Region>, Geometry, Geometry) {
        let r = &self.rings;
        (&r.region, r.geometry.0, r.geometry.1)
    }

    /// Copies newly posted send requests out of the ring (engine side); `check` validates each
    /// one. Returns how many.
    pub fn fetch_sends(&mut self, mut check: impl FnMut(&SendWqe) -> Option<WcStatus>) -> u32 {
        let ud = self.qp_type == QpType::Ud;
        let r = &mut self.rings;
        let mut n = 0;
        while !self.sq.is_full() && r.sq.next(&mut r.slot) {
            if let Err(error) = self.sq.push(&r.slot, &self.cap, ud, &mut check) {
                Event::MalformedSendRequest { error }.log();
            }
            n += 1;
        }
        n
    }

    /// Copies newly posted receive requests out of the ring (engine side). Returns how many.
    /// A QP with a shared receive queue has none of its own to fetch.
    pub fn fetch_receives(&mut self) -> u32 {
        if self.srq.is_some() {
            return 0;
        }
        let r = &mut self.rings;
        let mut n = 0;
        while !self.rq.is_full() && r.rq.next(&mut r.slot) {
            self.rq.push(&r.slot, &self.cap);
            n += 1;
        }
        n
    }

    /// Whether the host posted work the engine has yet to take: send requests, or in the error
    /// state any request (to be flushed). Receive requests wait in the ring for a packet.
    pub fn has_new_posts(&self) -> bool {
        self.rings.sq.available() > 0 || (self.state == QpState::Err && self.unfetched() > 0)
    }

    /// Whether the engine must keep looking at the QP though nothing happens to it: posts to
    /// take, send requests not yet completed, replies to send, or a timer running.
    pub fn needs_engine(&self) -> bool {
        self.has_new_posts()
            || !self.sq.is_empty()
            || self.recv.has_replies()
            || self.deadline().is_some()
    }

    /// Requests posted to the rings and not yet fetched (a QP with a shared receive queue reads
    /// no receive ring of its own).
    pub fn unfetched(&self) -> u32 {
        let rq = match self.srq {
            Some(_) => 0,
            None => self.rings.rq.available(),
        };
        self.rings.sq.available() + rq
    }

    /// Gives the host back the ring slots of the requests the transport is done with: send
    /// requests retired, receive requests taken (engine side, before their completions are
    /// published, so that a host posting again as soon as it sees one finds room).
    pub fn release_slots(&mut self) {
        let r = &mut self.rings;
        let sq_done = r.sq.unreleased().saturating_sub(self.sq.outstanding());
        if sq_done > 0 {
            r.sq.release(sq_done);
        }
        let rq_done = r.rq.unreleased().saturating_sub(self.rq.len());
        if rq_done > 0 {
            r.rq.release(rq_done);
        }
    }

    /// After the transport worked on the QP (engine side): slots back to the host and, in the
    /// error state, every request posted so far completed with a flush error.
    pub fn settle(&mut self, ctx: &mut Ctx<'_>) {
        if self.state == QpState::Err
            && (self.unfetched() > 0 || !self.sq.is_empty() || self.has_receives())
        {
            self.fetch_sends(|_| None);
            self.fetch_receives();
            self.flush(ctx);
        }
        self.release_slots();
    }

    fn has_receives(&self) -> bool {
        !self.rq.is_empty() || self.recv.receive_active()
    }

    /// The current attributes, for `query`.
    pub fn query(&self) -> QpAttr {
        let a = &self.attrs;
        QpAttr {
            qp_state: Some(self.state),
            pkey_index: Some(a.pkey_index),
            port_num: Some(a.port_num),
            qp_access_flags: Some(a.access),
            qkey: Some(a.qkey),
            path_mtu: Some(a.path_mtu),
            dest_qp_num: Some(a.dest_qp_num),
            rq_psn: Some(self.recv.epsn),
            sq_psn: Some(self.send.psn),
            av: a.av,
            timeout: Some(a.timeout),
            retry_cnt: Some(a.retry_cnt),
            rnr_retry: Some(a.rnr_retry),
            min_rnr_timer: Some(a.min_rnr_timer),
            max_rd_atomic: Some(a.max_rd_atomic),
            max_dest_rd_atomic: Some(a.max_dest_rd_atomic),
        }
    }

    /// What the QP holds in flight.
    pub fn status(&self) -> crate::control::QpStatus {
        crate::control::QpStatus {
            sends_outstanding: self.sq.outstanding(),
            reads_outstanding: self.send.rd_outstanding,
            replies_pending: self.recv.replies_pending(),
            receive_in_progress: self.recv.receive_in_progress(),
            retransmit_timer_armed: self.send.timer.is_some(),
            rnr_waiting: self.send.rnr_wait.is_some(),
        }
    }

    /// Checks a modify without changing anything; returns the target state and, for RTR, the
    /// path to the peer.
    pub fn check_modify(
        &self,
        attr: &QpAttr,
        port: &PortInfo,
    ) -> Result<(QpState, Option<Path>), ModifyError> {
        let from = self.state;
        let to = attr.qp_state.unwrap_or(from);
        let (required, optional) =
            transition(self.qp_type, from, to).ok_or(ModifyError::Transition {
                qp_type: self.qp_type,
                from,
                to,
            })?;
        let given = attr_mask(attr);
        for (bit, name) in mask::NAMES {
            if required & bit != 0 && given & bit == 0 {
                return Err(ModifyError::Missing {
                    from,
                    to,
                    attr: name,
                });
            }
            if given & bit != 0 && (required | optional) & bit == 0 {
                return Err(ModifyError::Unexpected {
                    from,
                    to,
                    attr: name,
                });
            }
        }
        let range = |attr: &'static str, value: Option<u8>, max: u8| match value {
            Some(v) if v > max => Err(ModifyError::Value {
                attr,
                value: v.into(),
            }),
            _ => Ok(()),
        };
        range("port_num", attr.port_num.map(|p| p.saturating_sub(1)), 0)?;
        range("timeout", attr.timeout, 31)?;
        range("retry_cnt", attr.retry_cnt, 7)?;
        range("rnr_retry", attr.rnr_retry, 7)?;
        range("min_rnr_timer", attr.min_rnr_timer, 31)?;
        range("max_rd_atomic", attr.max_rd_atomic, MAX_RD_ATOMIC)?;
        range("max_dest_rd_atomic", attr.max_dest_rd_atomic, MAX_RD_ATOMIC)?;
        if let Some(i) = attr
            .pkey_index
            .filter(|i| usize::from(*i) >= port.pkeys.len())
        {
            return Err(ModifyError::Value {
                attr: "pkey_index",
                value: i.into(),
            });
        }
        if let Some(n) = attr.dest_qp_num.filter(|n| *n > psn::MASK) {
            return Err(ModifyError::Value {
                attr: "dest_qp_num",
                value: n.into(),
            });
        }
        for (name, v) in [("rq_psn", attr.rq_psn), ("sq_psn", attr.sq_psn)] {
            if let Some(v) = v.filter(|v| *v > psn::MASK) {
                return Err(ModifyError::Value {
                    attr: name,
                    value: v.into(),
                });
            }
        }
        if let Some(mtu) = attr.path_mtu.filter(|m| *m > port.max_mtu) {
            return Err(ModifyError::Value {
                attr: "path_mtu",
                value: mtu.bytes().into(),
            });
        }
        let path = match attr.av {
            Some(av) => Some(self.path_for(
                &av,
                attr.dest_qp_num.unwrap_or(self.attrs.dest_qp_num),
                port,
            )?),
            None => None,
        };
        Ok((to, path))
    }

    fn path_for(
        &self,
        av: &AddressVector,
        dest_qpn: u32,
        port: &PortInfo,
    ) -> Result<Path, ModifyError> {
        let sgid = *port
            .gids
            .get(usize::from(av.sgid_index))
            .ok_or(ModifyError::NoGid(av.sgid_index))?;
        let dip = av.dgid.ip();
        let dmac = match av.dmac {
            Some(mac) => mac,
            None => *port
                .neighbours
                .get(&dip)
                .ok_or(ModifyError::NoNeighbour(dip))?,
        };
        let sport = udp_src_port(av.flow_label, self.qpn, dest_qpn);
        Path::new(port.mac, sgid.ip(), dmac, dip, sport, av).ok_or(ModifyError::Family {
            src: sgid,
            dst: av.dgid,
        })
    }

    /// Applies a modify that [`Qp::check_modify`] accepted; `pkeys` is the port's P_Key table.
    pub fn apply_modify(
        &mut self,
        attr: &QpAttr,
        to: QpState,
        path: Option<Path>,
        pkeys: &PKeyTable,
        ctx: &mut Ctx<'_>,
    ) {
        let a = &mut self.attrs;
        macro_rules! set {
            ($($field:ident <- $from:ident),*) => { $(if let Some(v) = attr.$from { a.$field = v; })* };
        }
        set!(pkey_index <- pkey_index, port_num <- port_num, access <- qp_access_flags, qkey <- qkey,
             path_mtu <- path_mtu, dest_qp_num <- dest_qp_num, rq_psn <- rq_psn, sq_psn <- sq_psn,
             timeout <- timeout, retry_cnt <- retry_cnt, rnr_retry <- rnr_retry,
             min_rnr_timer <- min_rnr_timer, max_rd_atomic <- max_rd_atomic,
             max_dest_rd_atomic <- max_dest_rd_atomic);
        if attr.av.is_some() {
            a.av = attr.av;
            self.path = path;
        }
        if let Some(p) = attr.rq_psn {
            self.recv.epsn = p;
        }
        if let Some(p) = attr.sq_psn {
            self.send.psn = p;
            self.send.una = p;
            self.send.high = p;
            self.send.peer_high = p;
        }
        if attr.retry_cnt.is_some() {
            self.send.retry_left = self.attrs.retry_cnt;
        }
        if attr.rnr_retry.is_some() {
            self.send.rnr_left = self.attrs.rnr_retry;
        }
        let from = self.state;
        match to {
            QpState::Err if from != QpState::Err => self.enter_error(ctx, ErrorCause::Requested),
            QpState::Reset => self.reset(),
            _ => {}
        }
        self.state = to;
        // check_modify kept the index inside the table.
        self.p_key = pkeys.get(self.attrs.pkey_index).unwrap_or(pkey::DEFAULT);
    }

    /// Moves the QP to the error state: the one place this happens. Everything under way stops
    /// at once; every outstanding work request completes with a flush error when the engine
    /// settles the QP (see [`Qp::settle`]), in the order they were posted.
    pub fn enter_error(&mut self, ctx: &mut Ctx<'_>, cause: ErrorCause) {
        if self.state == QpState::Err {
            return;
        }
        self.state = QpState::Err;
        self.send.timer = None;
        self.send.low_timer = None;
        self.send.rnr_wait = None;
        self.send.probe_at = None;
        responder::stop(self);
        ctx.event(Event::QpError {
            qpn: self.qpn,
            cause,
        });
    }

    /// Completes all fetched work with flush errors (in the error state, new posts too).
    fn flush(&mut self, ctx: &mut Ctx<'_>) {
        while !self.sq.is_empty() {
            crate::transport::completer::complete_head(self, ctx, WcStatus::WrFlushErr);
        }
        self.send.timer = None;
        self.send.low_timer = None;
        self.send.rnr_wait = None;
        responder::flush_receives(self, ctx);
    }

    /// RESET: forget all work without completions and start over.
    fn reset(&mut self) {
        let mut wqe = crate::wqe::RecvWqe::with_capacity(&self.cap);
        loop {
            let fetched = self.fetch_sends(|_| None) + self.fetch_receives();
            while !self.sq.is_empty() {
                self.sq.retire_head();
            }
            while self.rq.take(&mut wqe).is_some() {}
            self.release_slots();
            if fetched == 0 {
                break;
            }
        }
        self.send = SendState::default();
        self.recv = RecvState::new(0, &self.cap);
        self.path = None;
        self.attrs = Attrs::default();
    }

    /// The earliest time a timer of the QP's transport wants it looked at.
    pub fn deadline(&self) -> Option<std::time::Instant> {
        [
            self.send.timer,
            self.send.low_timer,
            self.send.rnr_wait.map(|w| w.0),
            self.send.probe_at,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

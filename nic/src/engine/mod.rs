//! The NIC engine: one thread that owns every QP, CQ and memory table of a device, as a hardware
//! RNIC's engines own their state. It takes frames from the link, control requests from host
//! programs and work from the send queues, and it never waits for a host: when there is nothing
//! to do it spins briefly, then sleeps until a frame, a doorbell, a request or a timer wakes it.

mod cm;
mod limits;
mod neighbours;
pub(crate) mod objects;
mod qp_table;
mod rx;
mod srqs;

pub use cm::DEFAULT_RESPONSE_TIMEOUT as CM_RESPONSE_TIMEOUT;
use qp_table::{ActiveQps, QpTable};
pub use qp_table::{FIRST_QPN, GSI_QPN};

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam::channel::Receiver;
use roce_hostmem::{MrTable, PdId};
use smoltcp::wire::IpCidr;
use tracing::{debug, info};

use crate::buf::BufPool;
use crate::control::{ClientId, Command, Control, Request};
use crate::counters::Counters;
use crate::cq::CqTable;
use crate::doorbell::{Record, Records};
use crate::link::Link;
use crate::port::IpStack;
use crate::qp::{PortInfo, Qp};
use crate::transport::{self, requester, responder, Ctx, ErrorCause, Event, Output, Path, Tx};
use crate::types::{QpState, Wc};
use crate::waker::{Interest, Waker};
use neighbours::NeighbourNeed;

/// Frames taken from the link in one pass before turning to other work.
const RX_BUDGET: usize = 64;
/// Packets one QP's requester may send in one pass.
const TX_BUDGET: usize = 32;
/// How long an idle engine keeps polling before it sleeps: short enough to give the CPU back,
/// long enough that back-to-back work never pays for a wake-up.
const SPIN: Duration = Duration::from_micros(50);

/// Where the engine puts the rings it creates for hosts.
#[derive(Debug, Clone)]
pub enum RingMemory {
    /// Private memory: every host is in this process.
    Private,
    /// Sealed memfds (named `roce-<prefix>-qp<N>` and `roce-<prefix>-cq<N>` in
    /// /proc/PID/maps) whose descriptors go to hosts in other processes.
    Shared { prefix: String },
}

pub(crate) struct Engine {
    name: String,
    port: PortInfo,
    control: Receiver<Control>,
    waker: Arc<Waker>,
    /// The doorbell records of every host, and the list as last taken (with its version).
    records: Arc<Records>,
    record_list: Arc<[Record]>,
    records_seen: u64,
    tx: Tx,
    mrs: MrTable,
    pds: HashMap<u32, (PdId, ClientId)>,
    next_pd: u32,
    mr_owners: HashMap<u32, ClientId>,
    cqs: CqTable,
    qps: QpTable,
    /// The QPs with work or a timer: what a pass looks at.
    active: ActiveQps,
    /// Whether the next pass looks at every QP: after a completion queue's overrun (which takes
    /// its QPs into error). A host's requests need none: what they do to a QP goes through
    /// `EngineIo::drive`, which makes the QP active.
    sweep: bool,
    ahs: HashMap<u32, Path>,
    ah_owners: HashMap<u32, (ClientId, u32)>,
    /// The protection domain of each address handle: a UD send may only use an AH of its
    /// QP's domain (and so of its own host).
    ah_pds: HashMap<u32, PdId>,
    next_ah: u32,
    /// Shared receive queues by number; their QPs hold them too.
    srqs: HashMap<u32, crate::srq::SharedSrq>,
    next_srq: u32,
    counters: Arc<Counters>,
    rings: RingMemory,
    rxe_compat: bool,
    /// Whether RC QPs run the low retransmission timer.
    rto_low: bool,
    /// DCQCN's parameters, when the NIC runs it: every connected QP gets both ends.
    dcqcn: Option<crate::dcqcn::Params>,
    limits: crate::limits::Limits,
    /// The host (a process, numbered by the control socket) of each context opened by a host
    /// in another process; in-process contexts have none, and no per-host limits.
    client_hosts: HashMap<ClientId, u32>,
    /// QPs owed an ACK after the current batch of received frames.
    acks_due: Vec<u32>,
    /// Completions the transport made, held until their QP's ring slots are released (kept to
    /// reuse its allocation).
    completions: Vec<(u32, Wc)>,
    local_ips: Vec<IpAddr>,
    /// When the link next wants servicing (frames it holds back).
    link_deadline: Option<Instant>,
    /// ARP, neighbour discovery, ICMP and TCP: everything on the wire that is not RoCE.
    ip_stack: IpStack,
    /// The sender of the last frame learnt from, so that a stream of frames from one peer
    /// costs no table lookup each.
    last_sender: Option<(IpAddr, roce_wire::EthernetAddress)>,
    /// Requests held until a neighbour's MAC is known.
    awaiting_neighbour: Vec<neighbours::AwaitingNeighbour>,
    /// How long a held request waits for a MAC before it fails.
    resolve_timeout: Duration,
    /// What a sleeping engine watches (kept to reuse its allocation).
    interests: Vec<Interest>,
    /// Scratch space for `poll(2)` (kept to reuse its allocation).
    pollfds: Vec<libc::pollfd>,
    /// The connection manager on QP1.
    cm: cm::Agent,
    running: bool,
}

/// What the engine needs to start.
pub(crate) struct Setup {
    pub name: String,
    pub port: PortInfo,
    pub local_ips: Vec<IpAddr>,
    /// The port's addresses with their subnets, link-local first.
    pub subnets: Vec<IpCidr>,
    /// The link's IP MTU.
    pub mtu: u32,
    pub resolve_timeout: Duration,
    pub control: Receiver<Control>,
    pub waker: Arc<Waker>,
    pub records: Arc<Records>,
    pub link: Box<dyn Link>,
    pub pool: Arc<BufPool>,
    pub counters: Arc<Counters>,
    pub rings: RingMemory,
    pub rxe_compat: bool,
    pub rto_low: bool,
    pub dcqcn: Option<crate::dcqcn::Params>,
    pub limits: crate::limits::Limits,
    pub cm_response_timeout: u8,
}

impl Engine {
    pub fn new(setup: Setup) -> io::Result<Engine> {
        let mut link = setup.link;
        link.attach(&setup.pool, &setup.waker);
        let mut tx = Tx::new(link, setup.pool, Arc::clone(&setup.counters));
        let ip_stack = IpStack::new(setup.port.mac, &setup.subnets, setup.mtu, &mut tx)?;
        let cm = cm::Agent::new(setup.port.mac, setup.cm_response_timeout);
        Ok(Engine {
            name: setup.name,
            port: setup.port,
            control: setup.control,
            waker: setup.waker,
            record_list: Arc::new([]),
            records_seen: u64::MAX,
            records: setup.records,
            tx,
            mrs: MrTable::new(),
            pds: HashMap::new(),
            next_pd: 1,
            mr_owners: HashMap::new(),
            cqs: CqTable::default(),
            qps: QpTable::default(),
            active: ActiveQps::default(),
            sweep: false,
            ahs: HashMap::new(),
            ah_owners: HashMap::new(),
            ah_pds: HashMap::new(),
            next_ah: 1,
            srqs: HashMap::new(),
            next_srq: 1,
            counters: setup.counters,
            rings: setup.rings,
            rxe_compat: setup.rxe_compat,
            rto_low: setup.rto_low,
            dcqcn: setup.dcqcn,
            limits: setup.limits,
            client_hosts: HashMap::new(),
            acks_due: Vec::new(),
            completions: Vec::new(),
            local_ips: setup.local_ips,
            link_deadline: None,
            ip_stack,
            last_sender: None,
            awaiting_neighbour: Vec::new(),
            resolve_timeout: setup.resolve_timeout,
            interests: Vec::new(),
            pollfds: Vec::new(),
            cm,
            running: true,
        })
    }

    /// Runs until the device shuts down.
    pub fn run(mut self) {
        info!(nic = %self.name, link = %self.tx.link().describe(), "engine started");
        let mut idle_since: Option<Instant> = None;
        while self.running {
            if self.pass() {
                idle_since = None;
                continue;
            }
            let now = Instant::now();
            let since = *idle_since.get_or_insert(now);
            if now - since < SPIN {
                std::thread::yield_now();
                continue;
            }
            // Announce the sleep, then look once more: work published before the announcement
            // was seen by nobody else's wake-up.
            self.waker.prepare_sleep();
            if self.pass() {
                self.waker.awake();
                idle_since = None;
                continue;
            }
            let timeout = self
                .next_deadline()
                .map(|d| d.saturating_duration_since(Instant::now()));
            let mut interests = std::mem::take(&mut self.interests);
            interests.clear();
            if let Some(fd) = self.tx.link().poll_fd() {
                interests.push(Interest::new(fd, true, false));
            }
            self.ip_stack.interests(&mut interests);
            self.waker.sleep(&interests, timeout, &mut self.pollfds);
            self.interests = interests;
            idle_since = None;
        }
        self.shutdown();
    }

    /// One round of everything: control requests, received frames, posted work, the port's IP
    /// stack, timers. Returns whether anything happened.
    fn pass(&mut self) -> bool {
        self.link_deadline = self.tx.link().service(Instant::now());
        let mut busy = self.handle_control();
        busy |= self.receive();
        busy |= self.transmit();
        busy |= self.ip_stack.poll(&mut self.tx, Instant::now());
        self.timers();
        // What the link batched goes out before the engine looks for more work or sleeps.
        let lost = self.tx.link().flush_sends();
        if lost > 0 {
            crate::counters::add(&self.counters.tx_dropped, lost);
            debug!(lost, "the link could not send its whole batch");
        }
        busy
    }

    fn handle_control(&mut self) -> bool {
        let mut busy = false;
        while let Ok(message) = self.control.try_recv() {
            busy = true;
            match message {
                Control::Call(command) => self.serve(command),
                Control::Shutdown => self.running = false,
            }
        }
        busy
    }

    /// Answers a request: at once, or later for those that wait for the network (a TCP
    /// connection, a neighbour's MAC).
    fn serve(&mut self, command: Command) {
        let Command {
            client,
            request,
            reply,
        } = command;
        let now = Instant::now();
        match request {
            Request::TcpConnect { addr } => self.ip_stack.tcp_connect(addr, reply, now),
            Request::TcpAccept { port, timeout } => {
                self.ip_stack.tcp_accept(client, port, timeout, reply, now)
            }
            Request::CmGetEvent { timeout } => self.cm_get_event(client, timeout, reply),
            request => match self.neighbour_need(&request) {
                NeighbourNeed::Resolve(ip) => self.await_neighbour(
                    ip,
                    Command {
                        client,
                        request,
                        reply,
                    },
                ),
                NeighbourNeed::Unreachable(ip) => {
                    let _ = reply.send(Err(self.ip_stack.off_link(ip)));
                }
                NeighbourNeed::None => {
                    let _ = reply.send(self.execute(client, request));
                }
            },
        }
    }

    fn receive(&mut self) -> bool {
        // One clock read for the batch: its frames arrived together, and a batch takes
        // microseconds against timers of milliseconds.
        let now = Instant::now();
        let mut n = 0;
        while n < RX_BUDGET {
            match self.tx.link().recv() {
                Ok(Some(frame)) => {
                    self.handle_frame(frame, now);
                    n += 1;
                }
                Ok(None) => break,
                Err(e) => {
                    debug!(error = %e, "link receive failed");
                    break;
                }
            }
        }
        // One ACK per QP for the whole batch: ACK coalescing.
        let mut due = std::mem::take(&mut self.acks_due);
        let (qps, mut io) = self.io();
        for qpn in due.drain(..) {
            if let Some(qp) = qps.get_mut(qpn) {
                io.drive(qp, now, responder::flush_ack);
            }
        }
        self.acks_due = due;
        n > 0
    }

    /// Enrols the QPs whose hosts rang their doorbells since the last pass. A QP number a host
    /// rings is only a hint: the QP must exist and belong to that host, or the ring is counted
    /// as bad and ignored.
    fn take_doorbells(&mut self) {
        if let Some(list) = self.records.changed_since(&mut self.records_seen) {
            self.record_list = list;
        }
        let Engine {
            record_list,
            qps,
            client_hosts,
            active,
            counters,
            ..
        } = self;
        let mut bad = 0;
        for record in record_list.iter() {
            record.ready.drain(|qpn| match qps.get(qpn) {
                Some(qp) if client_hosts.get(&qp.owner).copied() == record.host => {
                    active.insert(qpn)
                }
                _ => bad += 1,
            });
        }
        if bad > 0 {
            crate::counters::add(&counters.bad_doorbells, bad);
            debug!(bad, "doorbells rung for QPs the ringing host does not own");
        }
    }

    /// The send-side work of the active QPs, after enrolling those whose doorbells rang (or,
    /// after an overrun, every QP).
    fn transmit(&mut self) -> bool {
        let mut busy = false;
        let now = Instant::now();
        self.take_doorbells();
        let sweep = std::mem::take(&mut self.sweep);
        let (qps, mut io) = self.io();
        if sweep {
            for qp in qps.iter() {
                io.active.insert(qp.qpn);
            }
        }
        let mut i = 0;
        while i < io.active.len() {
            let qpn = io.active.at(i);
            let Some(qp) = qps.get_mut(qpn) else {
                io.active.remove_at(i);
                continue;
            };
            let overran = io.cqs().overran(qp.send_cq) || io.cqs().overran(qp.recv_cq);
            let ah_pds = io.ah_pds;
            let worked = io.drive(qp, now, |qp, ctx| work(qp, ctx, overran, ah_pds));
            busy |= worked;
            if worked || qp.needs_engine() {
                i += 1;
            } else {
                io.active.remove_at(i);
            }
        }
        busy
    }

    fn timers(&mut self) {
        let now = Instant::now();
        self.expire_neighbour_waits(now);
        self.cm_timers(now);
        // A QP with a timer running is active.
        let (qps, mut io) = self.io();
        for i in 0..io.active.len() {
            let Some(qp) = qps.get_mut(io.active.at(i)) else {
                continue;
            };
            if qp.deadline().is_some_and(|t| t <= now) {
                io.drive(qp, now, transport::on_timers);
            }
        }
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.active
            .iter()
            .filter_map(|qpn| self.qps.get(qpn))
            // A QP with packets to send (requests, READ responses) also waits for its rate
            // limiter.
            .map(|qp| {
                let pending = qp.sq.next != qp.sq.fetched || qp.recv.has_replies();
                let limiter = crate::dcqcn::wake_at(qp).filter(|_| pending);
                qp.deadline().into_iter().chain(limiter).min()
            })
            .chain([
                self.link_deadline,
                self.ip_stack.deadline(),
                self.neighbour_wait_deadline(),
                self.cm.deadline(),
            ])
            .flatten()
            .min()
    }

    /// Runs `f` on QP `qpn` with a transport context, if the QP exists, and settles it.
    fn with_qp<R>(&mut self, qpn: u32, f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R) -> Option<R> {
        let (qps, mut io) = self.io();
        let qp = qps.get_mut(qpn)?;
        Some(io.drive(qp, Instant::now(), f))
    }

    /// The QP table and the engine's I/O for the transport, borrowed apart so that the
    /// transport functions can work on one QP with everything else at hand.
    fn io(&mut self) -> (&mut QpTable, EngineIo<'_>) {
        let Engine {
            qps,
            active,
            sweep,
            mrs,
            cqs,
            tx,
            ahs,
            ah_pds,
            counters,
            completions,
            ..
        } = self;
        let io = EngineIo {
            mrs,
            ahs,
            ah_pds,
            tx,
            cqs,
            completions,
            counters,
            active,
            sweep,
        };
        (qps, io)
    }

    fn shutdown(&mut self) {
        let qpns: Vec<u32> = self.qps.iter().map(|qp| qp.qpn).collect();
        for qpn in qpns {
            self.with_qp(qpn, |qp, ctx| qp.enter_error(ctx, ErrorCause::Requested));
        }
        if let Err(e) = self.tx.link().flush() {
            debug!(error = %e, "flushing the link at shutdown failed");
        }
        info!(nic = %self.name, "engine stopped");
    }
}

/// The engine's side of the transport's I/O: frames go onto the link, completions wait until
/// their QP's ring slots are released and then go into the completion queues, events go to the
/// logs.
pub(crate) struct EngineIo<'a> {
    mrs: &'a roce_hostmem::MrTable,
    ahs: &'a HashMap<u32, Path>,
    ah_pds: &'a HashMap<u32, PdId>,
    tx: &'a mut Tx,
    cqs: &'a mut CqTable,
    completions: &'a mut Vec<(u32, Wc)>,
    counters: &'a Counters,
    active: &'a mut ActiveQps,
    sweep: &'a mut bool,
}

impl EngineIo<'_> {
    /// Runs `f` on `qp` with a transport context at `now`, then settles the QP: its ring slots
    /// go back to the host, and only then are the completions published. The QP is active
    /// from then on, until a pass finds it idle.
    pub(crate) fn drive<R>(
        &mut self,
        qp: &mut Qp,
        now: Instant,
        f: impl FnOnce(&mut Qp, &mut Ctx<'_>) -> R,
    ) -> R {
        let result = {
            let (mrs, ahs, counters) = (self.mrs, self.ahs, self.counters);
            let mut ctx = Ctx {
                mrs,
                ahs,
                out: self,
                counters,
                now,
            };
            let result = f(qp, &mut ctx);
            qp.settle(&mut ctx);
            result
        };
        *self.sweep |= self
            .cqs
            .complete_all(self.completions.drain(..), self.counters);
        self.active.insert(qp.qpn);
        result
    }

    pub(crate) fn cqs(&self) -> &CqTable {
        self.cqs
    }
}

impl Output for EngineIo<'_> {
    fn can_send(&self) -> bool {
        self.tx.can_send()
    }

    fn send(
        &mut self,
        repr: &roce_wire::FrameRepr,
        fill: &mut transport::Fill<'_>,
    ) -> Result<(), roce_hostmem::AccessError> {
        self.tx.send(repr, fill)
    }

    fn complete(&mut self, cq: u32, wc: &Wc) {
        self.completions.push((cq, *wc));
    }

    fn event(&mut self, event: &Event<'_>) {
        event.log();
    }
}

/// The send-side work of one QP: in the error state nothing (settling flushes new posts);
/// otherwise fetch newly posted requests and let the transport work. Returns whether anything
/// happened.
fn work(qp: &mut Qp, ctx: &mut Ctx<'_>, cq_overran: bool, ah_pds: &HashMap<u32, PdId>) -> bool {
    let mut busy = false;
    // A completion queue in error takes its QPs with it (IBTA: CQ overrun).
    let live = !matches!(qp.state, QpState::Reset | QpState::Err);
    if live && cq_overran {
        qp.enter_error(ctx, ErrorCause::CqOverrun);
        busy = true;
    }
    if qp.state == QpState::Err {
        return busy || qp.unfetched() > 0;
    }
    if matches!(qp.state, QpState::Rts | QpState::Sqd) {
        let mtu = qp.attrs.path_mtu.bytes();
        let qp_type = qp.qp_type;
        let ahs = ctx.ahs;
        let pd = qp.pd;
        let fetched = qp.fetch_sends(|wqe| {
            // An AH of another domain (another host's, say) is no destination for this QP.
            let has_dest = wqe
                .ud
                .is_some_and(|u| ahs.contains_key(&u.ah) && ah_pds.get(&u.ah) == Some(&pd));
            requester::check(qp_type, mtu, &wqe.op, wqe.length, has_dest)
        });
        busy |= fetched > 0;
    }
    busy | transport::poll(qp, ctx, TX_BUDGET)
}

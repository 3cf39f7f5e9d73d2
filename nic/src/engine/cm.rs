//! The CM agent: the InfiniBand Communication Manager on QP1 with the RDMA CM's IP addressing
//! (the work of Linux's `ib_cm` and `rdma_cm`), run by the engine beside the transport.
//!
//! Active side: `connect` sends a REQ (the RDMA CM header with both addresses in its private
//! data), waits for a REP (an MRA stretches the wait), moves the QP to RTR and RTS with what
//! the REP says, and answers with an RTU; a REJ ends it. Passive side: a REQ to a port a host
//! listens on becomes a connect request event; `accept` moves the QP to RTR and RTS and sends a
//! REP, the RTU establishes; `reject` sends a REJ with the host's private data. A REQ for a port
//! nobody listens on is answered with REJ reason 8, invalid service ID, as Linux answers it.
//!
//! Every MAD that expects an answer (REQ, REP, DREQ) is sent again after twice the response
//! timeout, up to the REQ's "max CM retries" times; then the handshake fails and the QP goes
//! to the error state — a peer that vanished never leaves a QP half connected. Duplicates are
//! answered as `ib_cm` answers them: a repeated REQ not yet accepted gets an MRA, a repeated REP
//! gets the RTU again, a DREQ in timewait gets the DREP again. A disconnected ID stays in
//! timewait for a while, answering late MADs, before it is forgotten.
//!
//! UD services (the RDMA CM's UDP port space, udaddy's) are resolved rather than connected:
//! SIDR_REQ and SIDR_REP, in [`sidr`].

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use roce_wire::cm::{self, drep, dreq, mra, rej, rep, req, rtu, Message, MessageKind, Path};
use roce_wire::cma::{self, PortSpace};
use roce_wire::{EthernetAddress, EthernetRepr, NetworkRepr};
use smoltcp::wire::IpAddress;
use tracing::{debug, info};

use super::{Engine, GSI_QPN};

mod sidr;
use crate::cm::{CmEvent, CmEventKind, ConnParam, REJ_PRIVATE_DATA, REP_PRIVATE_DATA};
use crate::control::{ClientId, Reply, Response};
use crate::cq::EventLine;
use crate::error::VerbsError;
use crate::qp::MAX_RD_ATOMIC;
use crate::types::{AddressVector, Gid, Mtu, QpAttr, QpState, QpType};

/// The response timeout code our MADs carry when the device sets none: 20, 4.3 s, as the
/// RDMA CM sends (`CMA_CM_RESPONSE_TIMEOUT`).
pub const DEFAULT_RESPONSE_TIMEOUT: u8 = 20;
/// How often a REQ may be sent in all, as the RDMA CM asks (`CMA_MAX_CM_RETRIES`).
const MAX_CM_RETRIES: u8 = 15;
/// The ACK timeout our REQs propose for both QPs: 4.096 µs × 2^14, about 67 ms.
const LOCAL_ACK_TIMEOUT: u8 = 14;
/// The target ACK delay our REPs announce (Soft-RoCE's).
const TARGET_ACK_DELAY: u8 = 15;
/// Most events kept for a host that does not ask for them.
const MAX_QUEUED_EVENTS: usize = 1024;
/// Most connections the agent tracks at once: a peer flooding REQs gets REJ (no resources)
/// beyond, never the NIC's memory.
pub const MAX_CONNECTIONS: usize = 4096;

/// Where a connection is (IBTA 12.9's states, those a RoCE CM passes through).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Active: REQ sent, no answer yet (an MRA only stretched the wait).
    ReqSent,
    /// Passive: REQ received, the host has not answered.
    ReqRcvd,
    /// Passive: a duplicate REQ came before the host answered; an MRA told the peer to wait.
    MraSent,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    Established,
    /// DREQ sent, waiting for the DREP.
    DreqSent,
    /// Disconnected; late MADs are still answered until the time is up.
    Timewait,
    /// Over: the ID waits only for its owner to destroy it.
    Closed,
    /// Active, UD: SIDR_REQ sent, no SIDR_REP yet.
    SidrReqSent,
    /// Passive, UD: SIDR_REQ received, the host has not answered.
    SidrReqRcvd,
    /// Passive, UD: SIDR_REP sent; kept a while to send it again for a repeated SIDR_REQ.
    SidrRepSent,
}

/// A host's listening ID.
struct Listener {
    owner: ClientId,
    /// The address listened on; an unspecified IP listens on every address of the port.
    addr: SocketAddr,
    /// TCP (connections, REQ) or UDP (UD services, SIDR_REQ).
    space: PortSpace,
}

/// One connection, as one side of it sees it. Its key is the local communication ID.
struct Conn {
    /// The host that holds the ID; `None` once it destroyed the ID while the teardown went on.
    owner: Option<ClientId>,
    listen_id: Option<u32>,
    state: State,
    remote_comm_id: u32,
    /// The transaction ID of the REQ, which its REP, RTU, MRA and REJ carry too.
    tid: u64,
    /// The transaction ID of the last DREQ sent or received.
    dreq_tid: u64,
    qpn: Option<u32>,
    local: SocketAddr,
    peer: SocketAddr,
    peer_mac: EthernetAddress,
    peer_qpn: u32,
    /// The starting PSN the peer gave: what this side sends first.
    peer_psn: u32,
    /// The starting PSN this side gave: what its receive queue expects first.
    my_psn: u32,
    path_mtu: Mtu,
    /// What the peer offered: its responder resources and initiator depth.
    peer_resources: (u8, u8),
    /// The retry counts our QP uses (the REQ's retry count; the other side's RNR retry count).
    retry_count: u8,
    rnr_retry_count: u8,
    local_ack_timeout: u8,
    /// What this side offered.
    param: ConnParam,
    /// The MAD sent last that waits for an answer, sent again when the timer fires.
    pending: Option<(u64, Message)>,
    tries_left: u8,
    max_retries: u8,
    deadline: Option<Instant>,
    /// The user's private data of the REQ (passive side).
    req_private: Vec<u8>,
    /// A UD service's resolution (SIDR) rather than a connection.
    sidr: bool,
    /// The Q_Key a SIDR_REP named (active side).
    q_key: u32,
}

/// A host waiting for its next event.
struct Waiter {
    client: ClientId,
    deadline: Option<Instant>,
    reply: Reply,
}

/// The CM agent's state.
pub(super) struct Agent {
    listeners: HashMap<u32, Listener>,
    conns: HashMap<u32, Conn>,
    events: HashMap<ClientId, VecDeque<CmEvent>>,
    waiters: Vec<Waiter>,
    /// The hosts' event lines (those that asked for one): signalled at every queued event.
    lines: HashMap<ClientId, Arc<EventLine>>,
    next_id: u32,
    next_tid: u32,
    /// QP1's send PSN.
    psn: u32,
    rng: XorShiftRng,
    response_timeout: u8,
}

impl Agent {
    pub fn new(mac: EthernetAddress, response_timeout: u8) -> Agent {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let mac_bits = mac.0.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b));
        let mut rng = XorShiftRng::seed_from_u64(now ^ mac_bits.rotate_left(17));
        Agent {
            listeners: HashMap::new(),
            conns: HashMap::new(),
            events: HashMap::new(),
            waiters: Vec::new(),
            lines: HashMap::new(),
            next_id: rng.random::<u32>() | 1,
            next_tid: rng.random(),
            psn: 0,
            rng,
            response_timeout: response_timeout.min(31),
        }
    }

    /// A fresh ID (and local communication ID): never 0, never one in use.
    fn new_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1);
            if id != 0 && !self.conns.contains_key(&id) && !self.listeners.contains_key(&id) {
                return id;
            }
        }
    }

    fn new_tid(&mut self) -> u64 {
        self.next_tid = self.next_tid.wrapping_add(1);
        // The high half names the agent, as Linux's MAD layer does; ours is constant.
        (1u64 << 32) | u64::from(self.next_tid)
    }

    /// How long a MAD waits for its answer before it is sent again.
    fn retry_interval(&self) -> Duration {
        2 * cm::timeout(self.response_timeout)
    }

    /// How long a disconnected ID answers late MADs.
    fn timewait(&self) -> Duration {
        cm::timeout(self.response_timeout) + cm::timeout(LOCAL_ACK_TIMEOUT)
    }

    pub fn deadline(&self) -> Option<Instant> {
        self.conns
            .values()
            .filter_map(|c| c.deadline)
            .chain(self.waiters.iter().filter_map(|w| w.deadline))
            .min()
    }
}

/// The node GUID Linux gives a device: the EUI-64 of its MAC.
fn guid(mac: EthernetAddress) -> u64 {
    let m = mac.0;
    u64::from_be_bytes([m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]])
}

/// An IP address as a CM path's GID (`::ffff:a.b.c.d` for IPv4).
fn gid_of(ip: IpAddr) -> Ipv6Addr {
    match ip {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    }
}

fn timed_out(what: &str) -> VerbsError {
    VerbsError::Io(std::io::Error::new(std::io::ErrorKind::TimedOut, what))
}

fn no_id(id: u32) -> VerbsError {
    VerbsError::NoSuchObject { kind: "CM ID", id }
}

impl Engine {
    /// Listens on `addr` (an unspecified IP: every address of the port).
    pub(super) fn cm_listen(
        &mut self,
        client: ClientId,
        addr: SocketAddr,
        space: PortSpace,
    ) -> Result<Response, VerbsError> {
        if !addr.ip().is_unspecified() && !self.local_ips.contains(&addr.ip()) {
            return Err(VerbsError::Io(std::io::Error::new(
                std::io::ErrorKind::AddrNotAvailable,
                format!("{} is not an address of this port", addr.ip()),
            )));
        }
        let taken = self.cm.listeners.values().any(|l| {
            l.space == space
                && l.addr.port() == addr.port()
                && (l.addr.ip() == addr.ip()
                    || l.addr.ip().is_unspecified()
                    || addr.ip().is_unspecified())
        });
        if taken || addr.port() == 0 {
            return Err(VerbsError::Io(std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                format!("RDMA CM port {} is taken (or 0)", addr.port()),
            )));
        }
        let id = self.cm.new_id();
        self.cm.listeners.insert(
            id,
            Listener {
                owner: client,
                addr,
                space,
            },
        );
        info!(id, %addr, %space, "CM listening");
        Ok(Response::CmId(id))
    }

    /// Starts a connection of RC QP `qpn` to `dst`: the REQ goes out at once (the engine
    /// holds the request until `dst`'s MAC is known).
    pub(super) fn cm_connect(
        &mut self,
        client: ClientId,
        qpn: u32,
        dst: SocketAddr,
        param: ConnParam,
    ) -> Result<Response, VerbsError> {
        let qp = self.qp(client, qpn)?;
        if qp.qp_type == QpType::Ud {
            return self.sidr_resolve(client, qpn, dst, param);
        }
        if qp.qp_type != QpType::Rc {
            return Err(VerbsError::Invalid(
                "the RDMA CM connects RC QPs, and resolves UD services".into(),
            ));
        }
        if !matches!(qp.state, QpState::Reset | QpState::Init) {
            return Err(VerbsError::Invalid(format!(
                "QP {qpn:#x} is in {}: connect wants a QP in RESET or INIT",
                qp.state
            )));
        }
        if param.private_data.len() > crate::cm::REQ_PRIVATE_DATA {
            return Err(VerbsError::Invalid(format!(
                "a REQ carries at most {} bytes of private data, not {}",
                crate::cm::REQ_PRIVATE_DATA,
                param.private_data.len()
            )));
        }
        let src_ip = self
            .local_ips
            .iter()
            .copied()
            .find(|ip| ip.is_ipv4() == dst.is_ipv4())
            .ok_or_else(|| {
                VerbsError::Invalid(format!("the port has no address of {}'s family", dst.ip()))
            })?;
        let peer_mac = *self
            .port
            .neighbours
            .get(&dst.ip())
            .ok_or(crate::qp::ModifyError::NoNeighbour(dst.ip()))?;
        if qp.state == QpState::Reset {
            self.cm_modify(qpn, QpAttr::init(all_access()))?;
        }
        if self.cm.conns.len() >= MAX_CONNECTIONS {
            return Err(VerbsError::LimitReached {
                what: "connections",
                scope: "NIC",
                limit: MAX_CONNECTIONS as u64,
            });
        }
        let id = self.cm.new_id();
        let tid = self.cm.new_tid();
        let my_psn = self.cm.rng.random::<u32>() & 0xff_ffff;
        let src_port = self.cm.rng.random_range(32768..61000);
        let local = SocketAddr::new(src_ip, src_port);
        let cma_header = cma::Repr {
            version: cma::VERSION,
            src_port,
            src: IpAddress::from(src_ip),
            dst: IpAddress::from(dst.ip()),
        };
        let private_data = cma_header
            .private_data(&param.private_data)
            .map_err(|e| VerbsError::Invalid(e.to_string()))?;
        let exp = self.cm.response_timeout;
        let request = req::Repr {
            local_comm_id: id,
            service_id: PortSpace::Tcp.service_id(dst.port()),
            local_ca_guid: guid(self.port.mac),
            local_q_key: 0,
            local_qpn: qpn,
            responder_resources: param.responder_resources,
            local_eecn: 0,
            initiator_depth: param.initiator_depth,
            remote_eecn: 0,
            remote_cm_response_timeout: exp,
            transport: cm::ServiceType::Rc,
            end_to_end_flow_control: false,
            starting_psn: my_psn,
            local_cm_response_timeout: exp,
            retry_count: param.retry_count & 7,
            partition_key: 0xffff,
            path_mtu: self.port.max_mtu as u8,
            rdc_exists: false,
            rnr_retry_count: param.rnr_retry_count & 7,
            max_cm_retries: MAX_CM_RETRIES,
            srq: false,
            extended_transport_type: 0,
            primary_path: Path {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: gid_of(src_ip),
                remote_gid: gid_of(dst.ip()),
                hop_limit: 64,
                local_ack_timeout: LOCAL_ACK_TIMEOUT,
                ..Path::default()
            },
            alternate_path: Path::default(),
            sap_supported: false,
            private_data,
        };
        let conn = Conn {
            owner: Some(client),
            listen_id: None,
            state: State::ReqSent,
            remote_comm_id: 0,
            tid,
            dreq_tid: 0,
            qpn: Some(qpn),
            local,
            peer: dst,
            peer_mac,
            peer_qpn: 0,
            peer_psn: 0,
            my_psn,
            path_mtu: self.port.max_mtu,
            peer_resources: (0, 0),
            retry_count: param.retry_count & 7,
            rnr_retry_count: 0,
            local_ack_timeout: LOCAL_ACK_TIMEOUT,
            param,
            pending: None,
            tries_left: MAX_CM_RETRIES,
            max_retries: MAX_CM_RETRIES,
            deadline: None,
            req_private: Vec::new(),
            sidr: false,
            q_key: 0,
        };
        self.cm.conns.insert(id, conn);
        info!(id, qpn, %local, peer = %dst, "CM: REQ sent");
        self.cm_send_awaiting(id, tid, Message::Req(request));
        Ok(Response::CmId(id))
    }

    /// Accepts connect request `id` on RC QP `qpn`: the QP goes to RTR and RTS, the REP out.
    pub(super) fn cm_accept(
        &mut self,
        client: ClientId,
        id: u32,
        qpn: u32,
        param: ConnParam,
    ) -> Result<Response, VerbsError> {
        if self.cm_conn(client, id)?.sidr {
            return self.sidr_accept(id, client, qpn, param);
        }
        let qp = self.qp(client, qpn)?;
        if qp.qp_type != QpType::Rc || !matches!(qp.state, QpState::Reset | QpState::Init) {
            return Err(VerbsError::Invalid(format!(
                "accept wants an RC QP in RESET or INIT; QP {qpn:#x} is a {} QP in {}",
                qp.qp_type, qp.state
            )));
        }
        let conn = self.cm_conn(client, id)?;
        if !matches!(conn.state, State::ReqRcvd | State::MraSent) {
            return Err(VerbsError::Invalid(format!(
                "CM ID {id:#x} has no connect request to accept"
            )));
        }
        if param.private_data.len() > REP_PRIVATE_DATA {
            return Err(VerbsError::Invalid(format!(
                "a REP carries at most {REP_PRIVATE_DATA} bytes of private data"
            )));
        }
        let private_data = cm::PrivateData::from_slice(&param.private_data)
            .map_err(|e| VerbsError::Invalid(e.to_string()))?;
        let (peer_rr, peer_depth) = conn.peer_resources;
        let reply = rep::Repr {
            local_comm_id: id,
            remote_comm_id: conn.remote_comm_id,
            local_q_key: 0,
            local_qpn: qpn,
            local_eecn: 0,
            starting_psn: conn.my_psn,
            // Never more than the peer can use.
            responder_resources: param.responder_resources.min(peer_depth),
            initiator_depth: param.initiator_depth.min(peer_rr),
            target_ack_delay: TARGET_ACK_DELAY,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: param.rnr_retry_count & 7,
            srq: false,
            local_ca_guid: guid(self.port.mac),
            private_data,
        };
        let tid = conn.tid;
        let conn = self.cm.conns.get_mut(&id).expect("looked up above");
        conn.qpn = Some(qpn);
        conn.param = param;
        if let Err(e) = self.cm_bring_up(id) {
            // The QP could not take the peer's attributes: refuse, as ib_cm would.
            self.cm_reject_conn(id, rej::Reason::NO_QP, &[]);
            return Err(e);
        }
        info!(id, qpn, "CM: REP sent");
        self.cm_send_awaiting(id, tid, Message::Rep(reply));
        if let Some(conn) = self.cm.conns.get_mut(&id) {
            conn.state = State::RepSent;
        }
        Ok(Response::Done)
    }

    /// Refuses connect request `id` with reason 28 (consumer defined) and `private_data`.
    pub(super) fn cm_reject(
        &mut self,
        client: ClientId,
        id: u32,
        private_data: &[u8],
    ) -> Result<Response, VerbsError> {
        let conn = self.cm_conn(client, id)?;
        if conn.sidr && conn.state == State::SidrReqRcvd {
            return self.sidr_reject(id, private_data);
        }
        if !matches!(conn.state, State::ReqRcvd | State::MraSent) {
            return Err(VerbsError::Invalid(format!(
                "CM ID {id:#x} has no connect request to reject"
            )));
        }
        if private_data.len() > REJ_PRIVATE_DATA {
            return Err(VerbsError::Invalid(format!(
                "a REJ carries at most {REJ_PRIVATE_DATA} bytes of private data"
            )));
        }
        self.cm_reject_conn(id, rej::Reason::CONSUMER_DEFINED, private_data);
        Ok(Response::Done)
    }

    /// Disconnects `id`: its QP goes to the error state and a DREQ goes out.
    pub(super) fn cm_disconnect(
        &mut self,
        client: ClientId,
        id: u32,
    ) -> Result<Response, VerbsError> {
        let conn = self.cm_conn(client, id)?;
        if conn.sidr {
            // A UD service has nothing to disconnect (rdma_disconnect does nothing there).
            return Ok(Response::Done);
        }
        match conn.state {
            State::Established | State::RepSent => {
                self.cm_send_dreq(id);
                Ok(Response::Done)
            }
            State::DreqSent | State::Timewait | State::Closed => Ok(Response::Done),
            state => Err(VerbsError::Invalid(format!(
                "CM ID {id:#x} is not connected ({state:?})"
            ))),
        }
    }

    /// Destroys `id`: a listener stops; a connection being made is refused, an established
    /// one disconnected (the teardown finishes without the host).
    pub(super) fn cm_destroy(&mut self, client: ClientId, id: u32) -> Result<Response, VerbsError> {
        if self
            .cm
            .listeners
            .get(&id)
            .is_some_and(|l| l.owner == client)
        {
            self.cm.listeners.remove(&id);
            info!(id, "CM listener destroyed");
            return Ok(Response::Done);
        }
        self.cm_conn(client, id)?;
        self.cm_abandon(id);
        Ok(Response::Done)
    }

    /// Answers the host's next event now, or when it comes, or with a timeout.
    pub(super) fn cm_get_event(
        &mut self,
        client: ClientId,
        timeout: Option<Duration>,
        reply: Reply,
    ) {
        if let Some(event) = self
            .cm
            .events
            .get_mut(&client)
            .and_then(VecDeque::pop_front)
        {
            let _ = reply.send(Ok(Response::CmEvent(Box::new(event))));
            return;
        }
        if timeout == Some(Duration::ZERO) {
            let _ = reply.send(Err(timed_out("no CM event")));
            return;
        }
        self.cm.waiters.push(Waiter {
            client,
            deadline: timeout.map(|t| Instant::now() + t),
            reply,
        });
    }

    /// The host's event line, made at its first ask; signalled at once if events wait already.
    pub(super) fn cm_event_line(&mut self, client: ClientId) -> Result<Response, VerbsError> {
        let line = match self.cm.lines.get(&client) {
            Some(line) => Arc::clone(line),
            None => {
                let line = EventLine::new()?;
                self.cm.lines.insert(client, Arc::clone(&line));
                line
            }
        };
        if self.cm.events.get(&client).is_some_and(|q| !q.is_empty()) {
            line.signal();
        }
        Ok(Response::CmEventLine { line })
    }

    /// Forgets a host that went away: its listeners stop, its connections are refused or
    /// disconnected, its events dropped.
    pub(super) fn cm_forget_client(&mut self, client: ClientId) {
        self.cm.listeners.retain(|_, l| l.owner != client);
        let ids: Vec<u32> = self
            .cm
            .conns
            .iter()
            .filter(|(_, c)| c.owner == Some(client))
            .map(|(id, _)| *id)
            .collect();
        for id in ids {
            self.cm_abandon(id);
        }
        self.cm.events.remove(&client);
        self.cm.lines.remove(&client);
        self.cm.waiters.retain(|w| w.client != client);
    }

    /// The timers: MADs to send again, handshakes given up, timewaits over, waits for events
    /// timed out.
    pub(super) fn cm_timers(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .cm
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(id, _)| *id)
            .collect();
        for id in due {
            self.cm_timer_fired(id, now);
        }
        if self
            .cm
            .waiters
            .iter()
            .any(|w| w.deadline.is_some_and(|d| d <= now))
        {
            let (expired, rest) = std::mem::take(&mut self.cm.waiters)
                .into_iter()
                .partition(|w| w.deadline.is_some_and(|d| d <= now));
            self.cm.waiters = rest;
            for waiter in expired {
                let _ = waiter.reply.send(Err(timed_out("no CM event in time")));
            }
        }
    }

    fn cm_timer_fired(&mut self, id: u32, now: Instant) {
        let interval = self.cm.retry_interval();
        let Some(conn) = self.cm.conns.get_mut(&id) else {
            return;
        };
        conn.deadline = None;
        match conn.state {
            State::Timewait => {
                debug!(id, "CM: timewait over");
                conn.state = State::Closed;
                if conn.owner.is_none() {
                    self.cm.conns.remove(&id);
                }
            }
            State::SidrRepSent => {
                self.cm.conns.remove(&id);
            }
            State::ReqSent | State::RepSent | State::DreqSent | State::SidrReqSent
                if conn.tries_left > 0 =>
            {
                conn.tries_left -= 1;
                conn.deadline = Some(now + interval);
                if let Some((tid, message)) = conn.pending {
                    debug!(id, message = %message.attribute_id(), left = conn.tries_left, "CM: no answer, sending again");
                    let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
                    self.cm_send(to, tid, &message);
                }
            }
            State::ReqSent | State::RepSent | State::SidrReqSent => {
                info!(id, state = ?conn.state, "CM: the peer never answered: unreachable");
                conn.state = State::Closed;
                conn.pending = None;
                // A UD QP serves any number of peers: a resolution that failed leaves it be.
                let qpn = conn.qpn.filter(|_| !conn.sidr);
                self.cm_qp_error(qpn);
                self.cm_event(id, CmEventKind::Unreachable, Vec::new());
            }
            State::DreqSent => {
                debug!(id, "CM: no DREP: disconnected anyway");
                self.cm_enter_timewait(id);
            }
            _ => {}
        }
    }

    /// A CM MAD arrived on QP1 from `src` (`mac`) to our `dst`.
    pub(super) fn cm_receive(
        &mut self,
        mad: cm::Repr,
        src: IpAddr,
        dst: IpAddr,
        mac: EthernetAddress,
    ) {
        let tid = mad.transaction_id;
        debug!(message = %mad.message.attribute_id(), %src, tid = format_args!("{tid:#x}"), "CM MAD in");
        match mad.message {
            Message::Req(r) => self.cm_on_req(tid, &r, src, dst, mac),
            Message::Rep(r) => self.cm_on_rep(&r, src),
            Message::Rtu(r) => self.cm_on_rtu(&r, src),
            Message::Mra(r) => self.cm_on_mra(&r, src),
            Message::Rej(r) => self.cm_on_rej(&r, src),
            Message::Dreq(r) => self.cm_on_dreq(tid, &r, src, dst, mac),
            Message::Drep(r) => self.cm_on_drep(&r, src),
            Message::SidrReq(r) => self.sidr_on_req(tid, &r, src, dst, mac),
            Message::SidrRep(r) => self.sidr_on_rep(&r, src),
        }
    }

    /// The connection `remote_comm_id` of our ID `id` names, if it is ours and from `src`.
    fn cm_find(&self, id: u32, src: IpAddr) -> Option<&Conn> {
        self.cm.conns.get(&id).filter(|c| c.peer.ip() == src)
    }

    fn cm_on_req(
        &mut self,
        tid: u64,
        r: &req::Repr,
        src: IpAddr,
        dst: IpAddr,
        mac: EthernetAddress,
    ) {
        // A retransmission of a REQ we have: answer it as its connection's state says.
        let known = self.cm.conns.iter().find(|(_, c)| {
            c.remote_comm_id == r.local_comm_id && c.peer.ip() == src && c.peer_qpn == r.local_qpn
        });
        if let Some((&id, conn)) = known {
            match conn.state {
                State::ReqRcvd | State::MraSent => {
                    debug!(id, "CM: duplicate REQ before the host answered: MRA");
                    let mra = mra::Repr {
                        local_comm_id: id,
                        remote_comm_id: conn.remote_comm_id,
                        message_mraed: MessageKind::Req,
                        service_timeout: self.cm.response_timeout,
                        private_data: cm::PrivateData::default(),
                    };
                    let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
                    if let Some(c) = self.cm.conns.get_mut(&id) {
                        c.state = State::MraSent;
                    }
                    self.cm_send(to, tid, &Message::Mra(mra));
                }
                State::Timewait | State::Closed => {
                    let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
                    let remote = conn.remote_comm_id;
                    self.cm_send_rej(
                        to,
                        tid,
                        id,
                        remote,
                        MessageKind::Req,
                        rej::Reason::STALE_CONN,
                        &[],
                    );
                }
                // The REP timer answers a REQ whose REP was lost.
                _ => debug!(id, state = ?conn.state, "CM: duplicate REQ ignored"),
            }
            return;
        }
        let to = (dst, src, mac);
        let refuse = |engine: &mut Engine, reason| {
            engine.cm_send_rej(to, tid, 0, r.local_comm_id, MessageKind::Req, reason, &[]);
        };
        let Some((PortSpace::Tcp, port)) = cma::parse_service_id(r.service_id) else {
            info!(
                service_id = format_args!("{:#x}", r.service_id),
                "CM: REQ for a service we do not offer: REJ"
            );
            return refuse(self, rej::Reason::INVALID_SERVICE_ID);
        };
        let listener = self.cm.listeners.iter().find(|(_, l)| {
            l.space == PortSpace::Tcp
                && l.addr.port() == port
                && (l.addr.ip() == dst
                    || (l.addr.ip().is_unspecified() && l.addr.is_ipv4() == dst.is_ipv4()))
        });
        let Some((&listen_id, &Listener { owner, .. })) = listener else {
            info!(
                port,
                "CM: REQ for a port nobody listens on: REJ, invalid service ID"
            );
            return refuse(self, rej::Reason::INVALID_SERVICE_ID);
        };
        if r.transport != cm::ServiceType::Rc {
            return refuse(self, rej::Reason::INVALID_TRANSPORT_TYPE);
        }
        if self.cm.conns.len() >= MAX_CONNECTIONS {
            debug!("CM: too many connections: REJ, no resources");
            return refuse(self, rej::Reason::NO_RESOURCES);
        }
        let header = cma::Packet::new_checked(&r.private_data.as_bytes()[..])
            .and_then(|p| cma::Repr::parse(&p));
        let Ok(header) = header else {
            debug!("CM: REQ without a valid RDMA CM header: REJ");
            return refuse(self, rej::Reason::CONSUMER_DEFINED);
        };
        let id = self.cm.new_id();
        let my_psn = self.cm.rng.random::<u32>() & 0xff_ffff;
        let path_mtu = Mtu::from_u8(r.path_mtu)
            .unwrap_or(Mtu::M256)
            .min(self.port.max_mtu);
        let conn = Conn {
            owner: Some(owner),
            listen_id: Some(listen_id),
            state: State::ReqRcvd,
            remote_comm_id: r.local_comm_id,
            tid,
            dreq_tid: 0,
            qpn: None,
            local: SocketAddr::new(dst, port),
            peer: SocketAddr::new(src, header.src_port),
            peer_mac: mac,
            peer_qpn: r.local_qpn,
            peer_psn: r.starting_psn,
            my_psn,
            path_mtu,
            peer_resources: (r.responder_resources, r.initiator_depth),
            retry_count: r.retry_count,
            rnr_retry_count: r.rnr_retry_count,
            local_ack_timeout: r.primary_path.local_ack_timeout,
            param: ConnParam::default(),
            pending: None,
            tries_left: r.max_cm_retries,
            max_retries: r.max_cm_retries,
            deadline: None,
            req_private: r.private_data.as_bytes()[cma::HEADER_LEN..].to_vec(),
            sidr: false,
            q_key: 0,
        };
        self.cm.conns.insert(id, conn);
        info!(id, listen_id, peer = %SocketAddr::new(src, header.src_port), peer_qpn = r.local_qpn, "CM: connect request");
        let private = self.cm.conns[&id].req_private.clone();
        self.cm_event(id, CmEventKind::ConnectRequest, private);
    }

    fn cm_on_rep(&mut self, r: &rep::Repr, src: IpAddr) {
        let id = r.remote_comm_id;
        let Some(conn) = self.cm_find(id, src) else {
            debug!(id, "CM: REP for no connection of ours: ignored");
            return;
        };
        match conn.state {
            State::ReqSent => {}
            State::Established => {
                debug!(id, "CM: duplicate REP: the RTU again");
                let rtu = rtu::Repr {
                    local_comm_id: id,
                    remote_comm_id: conn.remote_comm_id,
                    ..rtu::Repr::default()
                };
                let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
                let tid = conn.tid;
                self.cm_send(to, tid, &Message::Rtu(rtu));
                return;
            }
            state => {
                debug!(id, ?state, "CM: REP out of turn: ignored");
                return;
            }
        }
        let conn = self.cm.conns.get_mut(&id).expect("found above");
        conn.remote_comm_id = r.local_comm_id;
        conn.peer_qpn = r.local_qpn;
        conn.peer_psn = r.starting_psn;
        conn.peer_resources = (r.responder_resources, r.initiator_depth);
        conn.rnr_retry_count = r.rnr_retry_count;
        conn.pending = None;
        conn.deadline = None;
        let tid = conn.tid;
        let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
        if let Err(e) = self.cm_bring_up(id) {
            info!(id, error = %e, "CM: the REP's attributes do not fit the QP: REJ");
            self.cm_send_rej(
                to,
                tid,
                id,
                r.local_comm_id,
                MessageKind::Rep,
                rej::Reason::NO_QP,
                &[],
            );
            let qpn = self.cm.conns.get(&id).and_then(|c| c.qpn);
            self.cm_qp_error(qpn);
            if let Some(c) = self.cm.conns.get_mut(&id) {
                c.state = State::Closed;
            }
            self.cm_event(id, CmEventKind::Unreachable, Vec::new());
            return;
        }
        let rtu = rtu::Repr {
            local_comm_id: id,
            remote_comm_id: r.local_comm_id,
            ..rtu::Repr::default()
        };
        self.cm_send(to, tid, &Message::Rtu(rtu));
        if let Some(c) = self.cm.conns.get_mut(&id) {
            c.state = State::Established;
        }
        info!(
            id,
            peer_qpn = r.local_qpn,
            "CM: REP received, RTU sent: established"
        );
        self.cm_event(
            id,
            CmEventKind::Established,
            r.private_data.as_bytes().to_vec(),
        );
    }

    fn cm_on_rtu(&mut self, r: &rtu::Repr, src: IpAddr) {
        let id = r.remote_comm_id;
        if self.cm_find(id, src).map(|c| c.state) != Some(State::RepSent) {
            debug!(id, "CM: RTU for no connection waiting for one: ignored");
            return;
        }
        let conn = self.cm.conns.get_mut(&id).expect("found above");
        conn.state = State::Established;
        conn.pending = None;
        conn.deadline = None;
        info!(id, "CM: RTU received: established");
        self.cm_event(id, CmEventKind::Established, Vec::new());
    }

    fn cm_on_mra(&mut self, r: &mra::Repr, src: IpAddr) {
        let id = r.remote_comm_id;
        let wait = cm::timeout(r.service_timeout) + self.cm.retry_interval();
        let Some(conn) = self.cm.conns.get_mut(&id).filter(|c| c.peer.ip() == src) else {
            return;
        };
        let answers = matches!(
            (conn.state, r.message_mraed),
            (State::ReqSent, MessageKind::Req) | (State::RepSent, MessageKind::Rep)
        );
        if answers {
            debug!(id, ?wait, "CM: MRA: the peer answers later");
            conn.remote_comm_id = r.local_comm_id;
            conn.deadline = Some(Instant::now() + wait);
        }
    }

    fn cm_on_rej(&mut self, r: &rej::Repr, src: IpAddr) {
        let id = r.remote_comm_id;
        let Some(conn) = self.cm_find(id, src) else {
            debug!(id, "CM: REJ for no connection of ours: ignored");
            return;
        };
        if !matches!(
            conn.state,
            State::ReqSent | State::RepSent | State::MraSent | State::ReqRcvd
        ) {
            debug!(id, state = ?conn.state, "CM: REJ out of turn: ignored");
            return;
        }
        info!(id, reason = r.reason.0, why = %r.reason, "CM: rejected");
        let qpn = conn.qpn;
        let conn = self.cm.conns.get_mut(&id).expect("found above");
        conn.state = State::Closed;
        conn.pending = None;
        conn.deadline = None;
        self.cm_qp_error(qpn);
        self.cm_event(
            id,
            CmEventKind::Rejected { reason: r.reason.0 },
            r.private_data.as_bytes().to_vec(),
        );
    }

    fn cm_on_dreq(
        &mut self,
        tid: u64,
        r: &dreq::Repr,
        src: IpAddr,
        dst: IpAddr,
        mac: EthernetAddress,
    ) {
        let id = r.remote_comm_id;
        let drep = |local, remote| {
            Message::Drep(drep::Repr {
                local_comm_id: local,
                remote_comm_id: remote,
                ..drep::Repr::default()
            })
        };
        let Some(conn) = self.cm_find(id, src) else {
            // Linux answers a DREQ for a connection it forgot, so the peer can finish.
            self.cm_send((dst, src, mac), tid, &drep(id, r.local_comm_id));
            return;
        };
        let state = conn.state;
        let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
        let remote = conn.remote_comm_id;
        match state {
            State::Established | State::RepSent | State::DreqSent => {
                info!(id, "CM: DREQ received: disconnected");
                let qpn = conn.qpn;
                self.cm_qp_error(qpn);
                if let Some(c) = self.cm.conns.get_mut(&id) {
                    c.dreq_tid = tid;
                }
                self.cm_send(to, tid, &drep(id, remote));
                self.cm_enter_timewait(id);
            }
            State::Timewait | State::Closed => {
                debug!(id, "CM: duplicate DREQ: the DREP again");
                self.cm_send(to, tid, &drep(id, remote));
            }
            _ => debug!(id, ?state, "CM: DREQ out of turn: ignored"),
        }
    }

    fn cm_on_drep(&mut self, r: &drep::Repr, src: IpAddr) {
        let id = r.remote_comm_id;
        if self.cm_find(id, src).map(|c| c.state) == Some(State::DreqSent) {
            info!(id, "CM: DREP received");
            self.cm_enter_timewait(id);
        }
    }

    /// The host's connection `id`, checked to be its own.
    fn cm_conn(&self, client: ClientId, id: u32) -> Result<&Conn, VerbsError> {
        self.cm
            .conns
            .get(&id)
            .filter(|c| c.owner == Some(client))
            .ok_or(no_id(id))
    }

    /// Moves the connection's QP to RTR and RTS (from RESET or INIT) with the negotiated
    /// attributes.
    fn cm_bring_up(&mut self, id: u32) -> Result<(), VerbsError> {
        let conn = &self.cm.conns[&id];
        let qpn = conn.qpn.ok_or(no_id(id))?;
        let sgid = Gid::from_ip(conn.local.ip());
        let sgid_index = self
            .port
            .gids
            .iter()
            .position(|g| *g == sgid)
            .ok_or_else(|| VerbsError::Invalid(format!("no GID for {}", conn.local.ip())))?;
        let av = AddressVector {
            dmac: Some(conn.peer_mac),
            ..AddressVector::to(Gid::from_ip(conn.peer.ip()), sgid_index as u8)
        };
        let (peer_rr, _) = conn.peer_resources;
        // A REQ's or REP's starting PSN is the one its sender's receive queue expects (as
        // Linux's ib_cm reads it): each side sends from the PSN the other one gave.
        let mut rtr = QpAttr::rtr(av, conn.peer_qpn, conn.my_psn, conn.path_mtu);
        rtr.max_dest_rd_atomic = Some(conn.param.responder_resources.min(MAX_RD_ATOMIC));
        let mut rts = QpAttr::rts(conn.peer_psn);
        rts.timeout = Some(conn.local_ack_timeout.min(31));
        rts.retry_cnt = Some(conn.retry_count & 7);
        rts.rnr_retry = Some(conn.rnr_retry_count & 7);
        rts.max_rd_atomic = Some(conn.param.initiator_depth.min(peer_rr).min(MAX_RD_ATOMIC));
        let init = (self.world().qp(qpn).map(|q| q.state) == Some(QpState::Reset))
            .then(|| QpAttr::init(all_access()));
        for attr in init.into_iter().chain([rtr, rts]) {
            if let Err(e) = self.cm_modify(qpn, attr) {
                self.cm_qp_error(Some(qpn));
                return Err(e);
            }
        }
        Ok(())
    }

    fn cm_modify(&mut self, qpn: u32, attr: QpAttr) -> Result<(), VerbsError> {
        let port = self.port.clone();
        let result = self.with_qp(qpn, |qp, ctx| {
            let (to, path) = qp.check_modify(&attr, &port)?;
            let from = qp.state;
            qp.apply_modify(&attr, to, path, &port.pkeys, ctx);
            info!(qpn, %from, %to, "QP modified by the CM");
            Ok::<_, VerbsError>(())
        });
        result.unwrap_or(Err(VerbsError::NoSuchObject {
            kind: "QP",
            id: qpn,
        }))
    }

    /// A failed or ended connection's QP goes to the error state (its work is flushed).
    fn cm_qp_error(&mut self, qpn: Option<u32>) {
        let Some(qpn) = qpn else { return };
        self.with_qp(qpn, |qp, ctx| {
            if qp.state != QpState::Reset {
                qp.enter_error(ctx, crate::transport::ErrorCause::Requested);
            }
        });
    }

    /// Sends `message` to the connection's peer and arms its retry timer.
    fn cm_send_awaiting(&mut self, id: u32, tid: u64, message: Message) {
        let deadline = Instant::now() + self.cm.retry_interval();
        let Some(conn) = self.cm.conns.get_mut(&id) else {
            return;
        };
        conn.pending = Some((tid, message));
        conn.tries_left = conn.max_retries;
        conn.deadline = Some(deadline);
        let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
        self.cm_send(to, tid, &message);
    }

    fn cm_send_dreq(&mut self, id: u32) {
        let tid = self.cm.new_tid();
        let Some(conn) = self.cm.conns.get_mut(&id) else {
            return;
        };
        let qpn = conn.qpn;
        let dreq = dreq::Repr {
            local_comm_id: id,
            remote_comm_id: conn.remote_comm_id,
            remote_qpn: conn.peer_qpn,
            ..dreq::Repr::default()
        };
        conn.state = State::DreqSent;
        conn.dreq_tid = tid;
        info!(id, "CM: DREQ sent");
        self.cm_qp_error(qpn);
        self.cm_send_awaiting(id, tid, Message::Dreq(dreq));
    }

    fn cm_enter_timewait(&mut self, id: u32) {
        let until = Instant::now() + self.cm.timewait();
        let Some(conn) = self.cm.conns.get_mut(&id) else {
            return;
        };
        let was = conn.state;
        conn.state = State::Timewait;
        conn.pending = None;
        conn.deadline = Some(until);
        if was != State::Timewait {
            self.cm_event(id, CmEventKind::Disconnected, Vec::new());
        }
    }

    /// Refuses the connection `id` being made and closes it.
    fn cm_reject_conn(&mut self, id: u32, reason: rej::Reason, private_data: &[u8]) {
        let Some(conn) = self.cm.conns.get_mut(&id) else {
            return;
        };
        let kind = if conn.state == State::RepSent {
            MessageKind::Rep
        } else {
            MessageKind::Req
        };
        conn.state = State::Closed;
        conn.pending = None;
        conn.deadline = None;
        let (to, tid, remote, qpn) = (
            (conn.local.ip(), conn.peer.ip(), conn.peer_mac),
            conn.tid,
            conn.remote_comm_id,
            conn.qpn,
        );
        info!(id, reason = reason.0, "CM: REJ sent");
        self.cm_send_rej(to, tid, id, remote, kind, reason, private_data);
        self.cm_qp_error(qpn);
    }

    /// The host gave up ID `id` (destroyed it, or went away).
    fn cm_abandon(&mut self, id: u32) {
        let Some(conn) = self.cm.conns.get(&id) else {
            return;
        };
        if conn.sidr {
            self.sidr_abandon(id);
            return;
        }
        match conn.state {
            State::ReqRcvd | State::MraSent | State::RepSent => {
                self.cm_reject_conn(id, rej::Reason::CONSUMER_DEFINED, &[])
            }
            State::ReqSent => self.cm_reject_conn(id, rej::Reason::TIMEOUT, &[]),
            State::Established => self.cm_send_dreq(id),
            State::DreqSent | State::Timewait | State::Closed => {}
            State::SidrReqSent | State::SidrReqRcvd | State::SidrRepSent => {}
        }
        let conn = self.cm.conns.get_mut(&id).expect("still there");
        conn.owner = None;
        if matches!(conn.state, State::Closed) {
            self.cm.conns.remove(&id);
        }
    }

    /// Tells the owner of `id` what happened to it.
    fn cm_event(&mut self, id: u32, kind: CmEventKind, private_data: Vec<u8>) {
        let Some(conn) = self.cm.conns.get(&id) else {
            return;
        };
        let Some(client) = conn.owner else {
            return;
        };
        let event = CmEvent {
            kind,
            id,
            listen_id: conn
                .listen_id
                .filter(|_| kind == CmEventKind::ConnectRequest),
            local: conn.local,
            peer: conn.peer,
            private_data,
            responder_resources: conn.peer_resources.0,
            initiator_depth: conn.peer_resources.1,
            peer_qpn: conn.peer_qpn,
            q_key: conn.q_key,
        };
        let mut event = Some(event);
        while let Some(at) = self.cm.waiters.iter().position(|w| w.client == client) {
            let waiter = self.cm.waiters.remove(at);
            let e = event.take().expect("sent only once");
            match waiter.reply.send(Ok(Response::CmEvent(Box::new(e)))) {
                Ok(()) => return,
                Err(back) => {
                    // The waiter went away: the event is for the next one.
                    match back.0 {
                        Ok(Response::CmEvent(e)) => event = Some(*e),
                        _ => return,
                    }
                }
            }
        }
        let queue = self.cm.events.entry(client).or_default();
        if queue.len() < MAX_QUEUED_EVENTS {
            queue.extend(event);
            if let Some(line) = self.cm.lines.get(&client) {
                line.signal();
            }
        } else {
            debug!(
                client,
                id, "CM: the host's event queue is full: event dropped"
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn cm_send_rej(
        &mut self,
        to: (IpAddr, IpAddr, EthernetAddress),
        tid: u64,
        local: u32,
        remote: u32,
        kind: MessageKind,
        reason: rej::Reason,
        private_data: &[u8],
    ) {
        let rej = rej::Repr {
            local_comm_id: local,
            remote_comm_id: remote,
            message_rejected: kind,
            reason,
            ari: cm::PrivateData::default(),
            ari_len: 0,
            private_data: cm::PrivateData::from_slice(private_data).unwrap_or_default(),
        };
        self.cm_send(to, tid, &Message::Rej(rej));
    }

    /// Sends one CM MAD from our `src` to `dst` at `mac`, as a UD SEND_ONLY from QP1 to QP1.
    fn cm_send(
        &mut self,
        (src, dst, mac): (IpAddr, IpAddr, EthernetAddress),
        tid: u64,
        message: &Message,
    ) {
        let sport = crate::transport::udp_src_port(0, GSI_QPN, GSI_QPN);
        let network = match (src, dst) {
            (IpAddr::V4(src), IpAddr::V4(dst)) => NetworkRepr::Ipv4 {
                src,
                dst,
                dscp: 0,
                ecn: 0,
                ident: 0,
                ttl: 64,
                udp_src_port: sport,
            },
            (IpAddr::V6(src), IpAddr::V6(dst)) => NetworkRepr::Ipv6 {
                src,
                dst,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                udp_src_port: sport,
            },
            _ => return,
        };
        let ethernet = EthernetRepr {
            dst: mac,
            src: self.port.mac,
            vlan: None,
        };
        let psn = self.cm.psn;
        self.cm.psn = (psn + 1) & 0xff_ffff;
        let frame = cm::frame_repr(Some(ethernet), network, psn);
        let mad = cm::Repr {
            transaction_id: tid,
            message: *message,
        };
        debug!(message = %message.attribute_id(), %dst, "CM MAD out");
        let _ = self.tx.send::<()>(&frame, |payload| {
            mad.emit(payload);
            Ok(())
        });
    }
}

/// What a QP the CM connects lets its peer do: everything; the memory registrations say
/// what each buffer allows (librdmacm's QPs are made the same way).
fn all_access() -> roce_hostmem::Access {
    use roce_hostmem::Access;
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

//! The control path between a host program and the NIC (the role of the uverbs kernel
//! interface): requests to create, change and destroy objects, and their answers. In-process
//! hosts hand these to the engine through a channel; other processes send them over the NIC's
//! Unix socket. The engine checks every request, and a host can only touch its own objects.

use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, MrKeys, Region, VaBase};
use serde::{Deserialize, Serialize};

use crate::cm::{CmEvent, ConnParam};
use crate::counters::Snapshot;
use crate::cq::EventLine;
use crate::error::VerbsError;
use crate::host::codec::fields;
use crate::ring::Geometry;
use crate::srq::SrqAttr;
use crate::types::{AddressVector, Gid, Mtu, QpAttr, QpCap, QpType};

/// Identifies one host program (one opened context) to the engine.
pub type ClientId = u64;

/// A request to the engine. It crosses the NIC's socket as it is declared here (see
/// [`crate::host`]): a new request is a new variant at the end.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    QueryDevice,
    AllocPd,
    DeallocPd {
        pd: u32,
    },
    RegMr {
        pd: u32,
        /// The memory, mapped in the engine's process: shared with an in-process host, or
        /// mapped from the descriptor a host in another process passed.
        #[serde(with = "fields::region")]
        region: Arc<Region>,
        offset: usize,
        len: usize,
        access: Access,
        va: VaBase,
    },
    DeregMr {
        lkey: u32,
    },
    CreateCq {
        entries: u32,
    },
    DestroyCq {
        cq: u32,
    },
    CreateQp {
        pd: u32,
        qp_type: QpType,
        send_cq: u32,
        recv_cq: u32,
        cap: QpCap,
        sq_sig_all: bool,
    },
    /// Opens QP1, the GSI: a UD QP with Q_Key 0x80010000, ready to send and receive.
    OpenGsi {
        pd: u32,
        send_cq: u32,
        recv_cq: u32,
        cap: QpCap,
    },
    ModifyQp {
        qpn: u32,
        attr: QpAttr,
    },
    QueryQp {
        qpn: u32,
    },
    /// The engine's view of a QP's outstanding work (for tests and tools, beyond verbs).
    QpStatus {
        qpn: u32,
    },
    DestroyQp {
        qpn: u32,
    },
    CreateAh {
        pd: u32,
        av: AddressVector,
    },
    DestroyAh {
        ah: u32,
    },
    Counters,
    /// Opens a TCP connection from the port's own IP stack to `addr`; answered with
    /// [`Response::TcpStream`] once connected (for out-of-band exchanges such as the QP numbers
    /// of ibv_rc_pingpong and perftest).
    TcpConnect {
        #[serde(with = "fields::socket_addr")]
        addr: SocketAddr,
    },
    /// Listens on TCP `port` of every address of the port, with a small backlog.
    TcpListen {
        port: u16,
    },
    /// Takes the next connection to a port this host listens on; answered when one arrives,
    /// or with a timed-out error after `timeout`.
    TcpAccept {
        port: u16,
        timeout: Option<Duration>,
    },
    /// Stops listening; connections not yet accepted are reset.
    TcpUnlisten {
        port: u16,
    },
    /// The host program is gone: destroy everything it owned.
    Disconnect,
    /// This context belongs to host `host` (a process, as the control socket numbers them),
    /// whose objects count against the per-host limits. Sent by the control socket only.
    BindHost {
        host: u32,
    },
    /// The RDMA CM: listens for connect requests to `addr` (an unspecified IP: every address
    /// of the port); answered with [`Response::CmId`], the listening ID.
    CmListen {
        #[serde(with = "fields::socket_addr")]
        addr: SocketAddr,
    },
    /// Connects RC QP `qpn` to a listener at `dst`: the engine sends the REQ and answers with
    /// [`Response::CmId`]; the outcome comes as an event. A UD QP resolves the UDP port space's
    /// service at `dst` instead (SIDR_REQ).
    CmConnect {
        qpn: u32,
        #[serde(with = "fields::socket_addr")]
        dst: SocketAddr,
        param: ConnParam,
    },
    /// Accepts the connect request `id` on RC QP `qpn` (moved to RTR and RTS, REP sent).
    CmAccept {
        id: u32,
        qpn: u32,
        param: ConnParam,
    },
    /// Refuses the connect request `id` (REJ, reason 28, with `private_data`).
    CmReject {
        id: u32,
        #[serde(deserialize_with = "fields::at_most::<_, _, { crate::cm::MAX_PRIVATE_DATA }>")]
        private_data: Vec<u8>,
    },
    /// Disconnects `id` (its QP to the error state, DREQ sent).
    CmDisconnect {
        id: u32,
    },
    /// Destroys `id`: a listener stops, a connection is refused or disconnected.
    CmDestroyId {
        id: u32,
    },
    /// The host's next CM event ([`Response::CmEvent`]); answered when one comes, or with a
    /// timed-out error after `timeout`.
    CmGetEvent {
        timeout: Option<Duration>,
    },
    /// The RDMA CM's UDP port space: listens for SIDR requests to `addr` (UD services, as
    /// udaddy's); answered with [`Response::CmId`].
    CmListenUdp {
        #[serde(with = "fields::socket_addr")]
        addr: SocketAddr,
    },
    /// A shared receive queue in protection domain `pd` holding at least `max_wr` receive
    /// requests of at most `max_sge` entries; answered with [`Response::Srq`]. Its limit
    /// event starts disarmed (IBTA: the limit is set by a modify).
    CreateSrq {
        pd: u32,
        max_wr: u32,
        max_sge: u32,
    },
    /// Arms the limit event of shared receive queue `srq` at `srq_limit` posted requests
    /// (0 disarms it).
    ModifySrq {
        srq: u32,
        srq_limit: u32,
    },
    /// The attributes of shared receive queue `srq` ([`Response::SrqAttr`]).
    QuerySrq {
        srq: u32,
    },
    /// Destroys shared receive queue `srq` (busy while a QP takes from it).
    DestroySrq {
        srq: u32,
    },
    /// As [`Request::CreateQp`], for a QP that takes its receives from shared receive queue
    /// `srq` of the same protection domain (the receive sizes of `cap` are the SRQ's).
    CreateQpWithSrq {
        pd: u32,
        qp_type: QpType,
        send_cq: u32,
        recv_cq: u32,
        srq: u32,
        cap: QpCap,
        sq_sig_all: bool,
    },
    /// The host's CM event line ([`Response::CmEventLine`]): signalled whenever an event is
    /// queued for it, so that a host waits for CM events on its own descriptor, not with a
    /// [`Request::CmGetEvent`] that holds its control connection meanwhile.
    CmEventLine,
}

/// What the device tells a host that opens it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    #[serde(with = "fields::mac")]
    pub mac: roce_wire::EthernetAddress,
    #[serde(deserialize_with = "fields::at_most::<_, _, MAX_GIDS>")]
    pub gids: Vec<Gid>,
    /// The largest path MTU the port carries.
    pub max_mtu: Mtu,
    pub max_qp_wr: u32,
    pub max_sge: u32,
    pub max_inline: u32,
    pub max_cqe: u32,
    pub max_qp_rd_atom: u8,
    /// Every limit of the device, in all and per host (`ibv_devinfo -v` shows the first).
    pub limits: crate::limits::Limits,
    /// The port's P_Key table (`ibv_query_pkey`).
    #[serde(with = "fields::pkey_table")]
    pub pkeys: crate::pkey::PKeyTable,
}

/// Most GIDs a device description may list.
pub const MAX_GIDS: usize = 64;

/// A ring the host maps: its memory and where in it the ring lies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RingMap {
    #[serde(with = "fields::region")]
    pub region: Arc<Region>,
    pub geometry: Geometry,
}

/// What a QP holds in flight, as the engine sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QpStatus {
    /// Send requests fetched from the ring and not yet completed.
    pub sends_outstanding: u32,
    /// READs and atomics sent and not yet answered.
    pub reads_outstanding: u32,
    /// READ responses the responder still has to send.
    pub replies_pending: u32,
    /// A receive is being filled by a multi-packet SEND.
    pub receive_in_progress: bool,
    pub retransmit_timer_armed: bool,
    pub rnr_waiting: bool,
}

/// The engine's answer. Not `Clone`: a TCP stream has one owner. It crosses the NIC's socket
/// as it is declared here: a new answer is a new variant at the end.
#[derive(Debug, Serialize, Deserialize)]
pub enum Response {
    Device(DeviceInfo),
    Pd(u32),
    Mr(MrKeys),
    Cq {
        cq: u32,
        ring: RingMap,
        #[serde(with = "fields::event_line")]
        event: Arc<EventLine>,
    },
    Qp {
        qpn: u32,
        cap: QpCap,
        sq: RingMap,
        rq: RingMap,
    },
    QpAttr(QpAttr),
    QpStatus(QpStatus),
    Ah(u32),
    Counters(Box<Snapshot>),
    /// A TCP connection of the port, as the host's end of a Unix stream pair: the engine moves
    /// the bytes between the other end and the TCP socket, and passes on half-closes.
    TcpStream {
        #[serde(with = "fields::stream")]
        stream: UnixStream,
        #[serde(with = "fields::socket_addr")]
        peer: SocketAddr,
    },
    Listening {
        port: u16,
    },
    Done,
    /// A new RDMA CM ID (listening or connecting).
    CmId(u32),
    CmEvent(Box<CmEvent>),
    /// A new shared receive queue: its number, its attributes and the ring the host posts
    /// receive requests into.
    Srq {
        srq: u32,
        attr: SrqAttr,
        ring: RingMap,
    },
    SrqAttr(SrqAttr),
    /// The host's CM event line (one per host, the same at every ask).
    CmEventLine {
        #[serde(with = "fields::event_line")]
        line: Arc<EventLine>,
    },
}

/// Where the engine sends the answer to one request (sometimes later, e.g. once a TCP
/// connection is established or a neighbour's MAC is known).
pub type Reply = crossbeam::channel::Sender<Result<Response, VerbsError>>;

/// A request in flight to the engine, with where to send the answer.
pub struct Command {
    pub client: ClientId,
    pub request: Request,
    pub reply: Reply,
}

/// Stops the engine (sent by the device when it is dropped).
pub enum Control {
    Call(Command),
    Shutdown,
}

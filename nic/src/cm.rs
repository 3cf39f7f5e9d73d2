//! The connection manager's side of the control path: what a host asks of the NIC's CM agent
//! and what the agent tells it, in the shape of librdmacm (an ID bound to an IP address and
//! port; listen, connect, accept, reject, disconnect, and a queue of events).
//!
//! The agent itself lives in the engine (as Linux's `ib_cm` and `rdma_cm` live in the kernel):
//! it owns QP1's CM traffic, retries its MADs, answers duplicates, and moves the QP it was
//! given through INIT, RTR and RTS with the negotiated attributes, so that a host never sees a
//! connection half made. IDs are numbered by the engine; an ID is also the local communication
//! ID its MADs carry.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::host::codec::fields;

/// The Q_Key of the UD QPs of the RDMA CM's UDP port space (`RDMA_UDP_QKEY`).
pub use roce_wire::cma::UDP_QKEY;

/// Bytes of the user's private data a REQ carries after the RDMA CM's 36-byte header.
pub const REQ_PRIVATE_DATA: usize = 56;
/// Bytes of private data a REP carries.
pub const REP_PRIVATE_DATA: usize = roce_wire::cm::rep::PRIVATE_DATA_LEN;
/// Bytes of private data a REJ carries.
pub const REJ_PRIVATE_DATA: usize = roce_wire::cm::rej::PRIVATE_DATA_LEN;
/// More private data than any CM message holds: the cap on what crosses the NIC's socket.
pub const MAX_PRIVATE_DATA: usize = 256;

/// What a side offers when it connects or accepts (librdmacm's `rdma_conn_param`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnParam {
    /// The user's private data: up to [`REQ_PRIVATE_DATA`] bytes in a connect, up to
    /// [`REP_PRIVATE_DATA`] in an accept.
    #[serde(deserialize_with = "fields::at_most::<_, _, MAX_PRIVATE_DATA>")]
    pub private_data: Vec<u8>,
    /// RDMA READs and atomics this side accepts at once from its peer.
    pub responder_resources: u8,
    /// RDMA READs and atomics this side keeps outstanding at once.
    pub initiator_depth: u8,
    /// How often the peer's QP retries a packet that was not acknowledged (3 bits).
    pub retry_count: u8,
    /// How often the peer's QP retries after an RNR NAK (3 bits; 7 is for ever).
    pub rnr_retry_count: u8,
}

impl Default for ConnParam {
    /// What rping asks for: one READ either way, 7 retries, RNR retries for ever.
    fn default() -> ConnParam {
        ConnParam {
            private_data: Vec::new(),
            responder_resources: 1,
            initiator_depth: 1,
            retry_count: 7,
            rnr_retry_count: 7,
        }
    }
}

/// What happened to an ID (librdmacm's `rdma_cm_event_type`, those a RoCE CM produces).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum CmEventKind {
    /// A REQ reached a listening ID; the event's `id` is the new connection's, to accept or
    /// reject.
    ConnectRequest,
    /// The handshake finished: the QP is in RTS on this side (REP received, or RTU received);
    /// for a UD QP, the SIDR_REP named the service's QP and Q_Key (`peer_qpn`, `q_key`).
    Established,
    /// The peer refused: the REJ's reason code (8, invalid service ID, when nobody listens;
    /// 28, consumer defined, from `reject`).
    Rejected { reason: u16 },
    /// The peer did not answer the REQ or the REP in all the retries; or, for a UD QP, its
    /// SIDR_REP refused (nobody serves the port, or the service rejected), as Linux reports it.
    Unreachable,
    /// Either side disconnected (DREQ sent and answered or timed out, or DREQ received).
    Disconnected,
}

/// One event of the CM agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmEvent {
    pub kind: CmEventKind,
    /// The ID the event is about.
    pub id: u32,
    /// For a connect request, the listening ID it reached.
    pub listen_id: Option<u32>,
    #[serde(with = "fields::socket_addr")]
    pub local: SocketAddr,
    #[serde(with = "fields::socket_addr")]
    pub peer: SocketAddr,
    /// The peer's private data: its REQ's (after the RDMA CM header), REP's or REJ's.
    #[serde(deserialize_with = "fields::at_most::<_, _, MAX_PRIVATE_DATA>")]
    pub private_data: Vec<u8>,
    /// What the peer offered (a REQ's or REP's responder resources and initiator depth).
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// The peer's QP number, once known.
    pub peer_qpn: u32,
    /// For a UD service resolved with SIDR, the Q_Key its QP takes (0 otherwise).
    pub q_key: u32,
}

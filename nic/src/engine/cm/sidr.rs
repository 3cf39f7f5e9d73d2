//! Service ID resolution (IBTA 12.11), the RDMA CM's UDP port space: a UD client asks which QP
//! and Q_Key serve a port (SIDR_REQ, with the RDMA CM header in its private data, as a REQ),
//! the server's CM answers with them (SIDR_REP), and there is nothing to set up or tear down
//! beyond that — both sides' UD QPs just take the port space's Q_Key.
//!
//! Active: `connect` on a UD QP moves it to RTS with [`cma::UDP_QKEY`] (as librdmacm's
//! `rdma_create_qp` does) and sends the SIDR_REQ, again after each retry interval; the SIDR_REP
//! brings Established with the service's QPN and Q_Key, or Unreachable with a refusal. Passive:
//! a SIDR_REQ to a port a host listens on in the UDP space becomes a connect request; `accept`
//! readies the host's UD QP and answers SUCCESS with it, `reject` answers REJECT. A SIDR_REQ for
//! a port nobody serves is answered "service ID not supported", as Linux's `ib_cm` answers it.
//! A repeated SIDR_REQ gets the same SIDR_REP again for a while; one not yet answered is
//! dropped (the answer is on its way).

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use rand::RngExt;
use roce_wire::cm::sidr_rep::{self, Status};
use roce_wire::cm::{self, sidr_req, Message};
use roce_wire::cma::{self, PortSpace};
use roce_wire::EthernetAddress;
use smoltcp::wire::IpAddress;
use tracing::{debug, info};

use super::{Conn, State, MAX_CM_RETRIES};
use crate::cm::{CmEventKind, ConnParam, MAX_PRIVATE_DATA};
use crate::control::{ClientId, Response};
use crate::engine::Engine;
use crate::error::VerbsError;
use crate::types::{QpAttr, QpState, QpType};

/// Bytes of the user's private data a SIDR_REQ carries after the RDMA CM header.
pub const SIDR_REQ_PRIVATE_DATA: usize = sidr_req::PRIVATE_DATA_LEN - cma::HEADER_LEN;

impl Engine {
    /// Resolves the UD service at `dst` for UD QP `qpn`: the QP to RTS, the SIDR_REQ out.
    pub(super) fn sidr_resolve(
        &mut self,
        client: ClientId,
        qpn: u32,
        dst: SocketAddr,
        param: ConnParam,
    ) -> Result<Response, VerbsError> {
        if param.private_data.len() > SIDR_REQ_PRIVATE_DATA {
            return Err(VerbsError::Invalid(format!(
                "a SIDR_REQ carries at most {SIDR_REQ_PRIVATE_DATA} bytes of private data"
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
        if self.cm.conns.len() >= super::MAX_CONNECTIONS {
            return Err(VerbsError::LimitReached {
                what: "connections",
                scope: "NIC",
                limit: super::MAX_CONNECTIONS as u64,
            });
        }
        self.sidr_ready_qp(client, qpn)?;
        let id = self.cm.new_id();
        let tid = self.cm.new_tid();
        let src_port = self.cm.rng.random_range(32768..61000);
        let header = cma::Repr {
            version: cma::VERSION,
            src_port,
            src: IpAddress::from(src_ip),
            dst: IpAddress::from(dst.ip()),
        };
        let private_data = header
            .private_data(&param.private_data)
            .map_err(|e| VerbsError::Invalid(e.to_string()))?;
        let request = sidr_req::Repr {
            request_id: id,
            partition_key: 0xffff,
            service_id: PortSpace::Udp.service_id(dst.port()),
            private_data,
        };
        let conn = sidr_conn(
            Some(client),
            None,
            State::SidrReqSent,
            tid,
            SocketAddr::new(src_ip, src_port),
            dst,
            peer_mac,
            Some(qpn),
            MAX_CM_RETRIES,
        );
        self.cm.conns.insert(id, conn);
        info!(id, qpn, peer = %dst, "CM: SIDR_REQ sent");
        self.cm_send_awaiting(id, tid, Message::SidrReq(request));
        Ok(Response::CmId(id))
    }

    /// Answers the SIDR request `id` with UD QP `qpn` (readied first) and `param`'s private
    /// data.
    pub(super) fn sidr_accept(
        &mut self,
        id: u32,
        client: ClientId,
        qpn: u32,
        param: ConnParam,
    ) -> Result<Response, VerbsError> {
        if self.cm.conns[&id].state != State::SidrReqRcvd {
            return Err(VerbsError::Invalid(format!(
                "CM ID {id:#x} has no SIDR request to answer"
            )));
        }
        let private_data = cm::PrivateData::from_slice(&param.private_data)
            .map_err(|e| VerbsError::Invalid(e.to_string()))?;
        self.sidr_ready_qp(client, qpn)?;
        let q_key = self
            .world()
            .qp(qpn)
            .map_or(cma::UDP_QKEY, |qp| qp.attrs.qkey);
        if let Some(conn) = self.cm.conns.get_mut(&id) {
            conn.qpn = Some(qpn);
        }
        info!(id, qpn, "CM: SIDR_REP sent (the service's QP)");
        self.sidr_answer(id, Status::SUCCESS, qpn, q_key, private_data);
        Ok(Response::Done)
    }

    /// Refuses the SIDR request `id`: SIDR_REP with status REJECT and `private_data`.
    pub(super) fn sidr_reject(
        &mut self,
        id: u32,
        private_data: &[u8],
    ) -> Result<Response, VerbsError> {
        let private_data = cm::PrivateData::from_slice(private_data)
            .map_err(|e| VerbsError::Invalid(e.to_string()))?;
        info!(id, "CM: SIDR_REP sent (rejected)");
        self.sidr_answer(id, Status::REJECT, 0, 0, private_data);
        Ok(Response::Done)
    }

    /// The host gave up `id`: a request it did not answer is refused, as `ib_cm` refuses it;
    /// anything else is forgotten (a UD service holds no connection).
    pub(super) fn sidr_abandon(&mut self, id: u32) {
        let Some(conn) = self.cm.conns.get(&id) else {
            return;
        };
        match conn.state {
            State::SidrReqRcvd => {
                self.sidr_answer(id, Status::REJECT, 0, 0, cm::PrivateData::default());
                if let Some(conn) = self.cm.conns.get_mut(&id) {
                    conn.owner = None;
                }
            }
            // Kept until its time is up, for repeated requests.
            State::SidrRepSent => {
                if let Some(conn) = self.cm.conns.get_mut(&id) {
                    conn.owner = None;
                }
            }
            _ => {
                self.cm.conns.remove(&id);
            }
        }
    }

    /// A UD QP of the host as the RDMA CM's UDP port space has it: in RTS with
    /// [`cma::UDP_QKEY`] (moved there from RESET, INIT or RTR; left as it is in RTS).
    fn sidr_ready_qp(&mut self, client: ClientId, qpn: u32) -> Result<(), VerbsError> {
        let qp = self.qp(client, qpn)?;
        if qp.qp_type != QpType::Ud {
            return Err(VerbsError::Invalid(format!(
                "QP {qpn:#x} is a {} QP: a UD service is served by a UD QP",
                qp.qp_type
            )));
        }
        let mut steps = Vec::new();
        if qp.state == QpState::Reset {
            steps.push(QpAttr::init_ud(cma::UDP_QKEY));
        }
        if matches!(qp.state, QpState::Reset | QpState::Init) {
            steps.push(QpAttr {
                qp_state: Some(QpState::Rtr),
                ..QpAttr::default()
            });
        }
        if matches!(qp.state, QpState::Reset | QpState::Init | QpState::Rtr) {
            steps.push(QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(self.cm.rng.random::<u32>() & 0xff_ffff),
                ..QpAttr::default()
            });
        } else if qp.state != QpState::Rts {
            return Err(VerbsError::Invalid(format!(
                "QP {qpn:#x} is in {}: a UD service wants it in RESET, INIT, RTR or RTS",
                qp.state
            )));
        }
        for attr in steps {
            self.cm_modify(qpn, attr)?;
        }
        Ok(())
    }

    /// Sends the SIDR_REP of request `id` and keeps it for repeated requests.
    fn sidr_answer(
        &mut self,
        id: u32,
        status: Status,
        qpn: u32,
        q_key: u32,
        private_data: cm::PrivateData<{ sidr_rep::PRIVATE_DATA_LEN }>,
    ) {
        let until = Instant::now() + self.cm.timewait();
        let Some(conn) = self.cm.conns.get_mut(&id) else {
            return;
        };
        let reply = Message::SidrRep(sidr_rep::Repr {
            request_id: conn.remote_comm_id,
            status,
            qpn,
            service_id: PortSpace::Udp.service_id(conn.local.port()),
            q_key,
            private_data,
            ..sidr_rep::Repr::default()
        });
        conn.state = State::SidrRepSent;
        conn.pending = Some((conn.tid, reply));
        conn.tries_left = 0;
        conn.deadline = Some(until);
        let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
        let tid = conn.tid;
        self.cm_send(to, tid, &reply);
    }

    /// A SIDR_REQ from `src` (`mac`) to our `dst`.
    pub(super) fn sidr_on_req(
        &mut self,
        tid: u64,
        r: &sidr_req::Repr,
        src: IpAddr,
        dst: IpAddr,
        mac: EthernetAddress,
    ) {
        let known = self.cm.conns.iter().find(|(_, c)| {
            c.sidr
                && c.listen_id.is_some()
                && c.remote_comm_id == r.request_id
                && c.peer.ip() == src
        });
        if let Some((&id, conn)) = known {
            match (conn.state, conn.pending) {
                (State::SidrRepSent, Some((tid, reply))) => {
                    debug!(id, "CM: repeated SIDR_REQ: the SIDR_REP again");
                    let to = (conn.local.ip(), conn.peer.ip(), conn.peer_mac);
                    self.cm_send(to, tid, &reply);
                }
                _ => debug!(
                    id,
                    "CM: repeated SIDR_REQ before the host answered: dropped"
                ),
            }
            return;
        }
        let refuse = |engine: &mut Engine, status: Status| {
            let reply = Message::SidrRep(sidr_rep::Repr {
                request_id: r.request_id,
                status,
                service_id: r.service_id,
                ..sidr_rep::Repr::default()
            });
            engine.cm_send((dst, src, mac), tid, &reply);
        };
        let Some((PortSpace::Udp, port)) = cma::parse_service_id(r.service_id) else {
            info!(
                service_id = format_args!("{:#x}", r.service_id),
                "CM: SIDR_REQ for a service we do not offer: not supported"
            );
            return refuse(self, Status::UNSUPPORTED);
        };
        let listener = self.cm.listeners.iter().find(|(_, l)| {
            l.space == PortSpace::Udp
                && l.addr.port() == port
                && (l.addr.ip() == dst
                    || (l.addr.ip().is_unspecified() && l.addr.is_ipv4() == dst.is_ipv4()))
        });
        let Some((&listen_id, listener)) = listener else {
            info!(
                port,
                "CM: SIDR_REQ for a UDP port nobody serves: not supported"
            );
            return refuse(self, Status::UNSUPPORTED);
        };
        let owner = listener.owner;
        if self.cm.conns.len() >= super::MAX_CONNECTIONS {
            debug!("CM: too many connections: SIDR_REP, no QP");
            return refuse(self, Status::NO_QP);
        }
        let header = cma::Packet::new_checked(&r.private_data.as_bytes()[..])
            .and_then(|p| cma::Repr::parse(&p));
        let Ok(header) = header else {
            debug!("CM: SIDR_REQ without a valid RDMA CM header: rejected");
            return refuse(self, Status::REJECT);
        };
        let id = self.cm.new_id();
        let mut conn = sidr_conn(
            Some(owner),
            Some(listen_id),
            State::SidrReqRcvd,
            tid,
            SocketAddr::new(dst, port),
            SocketAddr::new(src, header.src_port),
            mac,
            None,
            0,
        );
        conn.remote_comm_id = r.request_id;
        let private = r.private_data.as_bytes()[cma::HEADER_LEN..].to_vec();
        conn.req_private = private[..private.len().min(MAX_PRIVATE_DATA)].to_vec();
        self.cm.conns.insert(id, conn);
        info!(id, listen_id, peer = %SocketAddr::new(src, header.src_port), "CM: SIDR request");
        let private = self.cm.conns[&id].req_private.clone();
        self.cm_event(id, CmEventKind::ConnectRequest, private);
    }

    /// A SIDR_REP from `src`: the service's QP and Q_Key, or its refusal.
    pub(super) fn sidr_on_rep(&mut self, r: &sidr_rep::Repr, src: IpAddr) {
        let id = r.request_id;
        let waiting = self
            .cm_find(id, src)
            .is_some_and(|c| c.sidr && c.state == State::SidrReqSent);
        if !waiting {
            debug!(id, "CM: SIDR_REP for no request of ours waiting: ignored");
            return;
        }
        let conn = self.cm.conns.get_mut(&id).expect("found above");
        conn.pending = None;
        conn.deadline = None;
        conn.state = State::Closed;
        if r.status == Status::SUCCESS {
            conn.peer_qpn = r.qpn;
            conn.q_key = r.q_key;
            info!(
                id,
                qpn = r.qpn,
                q_key = format_args!("{:#x}", r.q_key),
                "CM: SIDR_REP: resolved"
            );
            self.cm_event(
                id,
                CmEventKind::Established,
                r.private_data.as_bytes().to_vec(),
            );
        } else {
            info!(id, status = r.status.0, why = %r.status, "CM: SIDR_REP: refused");
            self.cm_event(
                id,
                CmEventKind::Unreachable,
                r.private_data.as_bytes().to_vec(),
            );
        }
    }
}

/// A SIDR exchange's record, in the shape of a connection's.
#[allow(clippy::too_many_arguments)]
fn sidr_conn(
    owner: Option<ClientId>,
    listen_id: Option<u32>,
    state: State,
    tid: u64,
    local: SocketAddr,
    peer: SocketAddr,
    peer_mac: EthernetAddress,
    qpn: Option<u32>,
    retries: u8,
) -> Conn {
    Conn {
        owner,
        listen_id,
        state,
        remote_comm_id: 0,
        tid,
        dreq_tid: 0,
        qpn,
        local,
        peer,
        peer_mac,
        peer_qpn: 0,
        peer_psn: 0,
        my_psn: 0,
        path_mtu: crate::types::Mtu::M256,
        peer_resources: (0, 0),
        retry_count: 0,
        rnr_retry_count: 0,
        local_ack_timeout: 0,
        param: ConnParam::default(),
        pending: None,
        tries_left: retries,
        max_retries: retries,
        deadline: None,
        req_private: Vec::new(),
        sidr: true,
        q_key: 0,
    }
}

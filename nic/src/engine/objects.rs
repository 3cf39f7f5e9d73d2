//! Control requests: creating, changing and destroying the objects of the verbs model. Every
//! request is checked, and a host program can only name objects it created itself.

use std::sync::Arc;

use roce_hostmem::Region;
use roce_wire::cma::PortSpace;
use roce_wire::deth;
use tracing::{debug, info};

use super::limits::Object;
use super::{Engine, RingMemory, FIRST_QPN, GSI_QPN};
use crate::control::{ClientId, DeviceInfo, Request, Response, RingMap};
use crate::cq::{Cq, EventLine};
use crate::error::VerbsError;
use crate::pkey;
use crate::qp::{ring_layout, Qp, MAX_RD_ATOMIC};
use crate::ring::{Geometry, Ring};
use crate::srq;
use crate::transport::{udp_src_port, Event, Path};
use crate::types::{QpAttr, QpCap, QpState, QpType};
use crate::wqe::CQE_SIZE;

/// Most work requests one queue holds.
pub const MAX_QP_WR: u32 = 16384;
/// Most entries one completion queue holds.
pub const MAX_CQE: u32 = 65536;

fn none(kind: &'static str, id: u32) -> VerbsError {
    VerbsError::NoSuchObject { kind, id }
}

impl Engine {
    pub(super) fn device_info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.name.clone(),
            mac: self.port.mac,
            gids: self.port.gids.clone(),
            max_mtu: self.port.max_mtu,
            max_qp_wr: self.limits.max_qp_wr as u32,
            max_sge: self.limits.max_sge as u32,
            max_inline: self.limits.max_inline as u32,
            max_cqe: self.limits.max_cqe as u32,
            max_qp_rd_atom: MAX_RD_ATOMIC,
            limits: self.limits,
            pkeys: self.port.pkeys.clone(),
        }
    }

    /// Bytes of shared memory `bytes` of rings cost (private rings are the NIC's own memory).
    pub(super) fn shm_cost(&self, bytes: usize) -> u64 {
        match self.rings {
            RingMemory::Private => 0,
            RingMemory::Shared { .. } => bytes as u64,
        }
    }

    pub(super) fn execute(
        &mut self,
        client: ClientId,
        request: Request,
    ) -> Result<Response, VerbsError> {
        debug!(client, ?request, "control request");
        match request {
            Request::QueryDevice => Ok(Response::Device(self.device_info())),
            Request::BindHost { host } => {
                self.client_hosts.insert(client, host);
                Ok(Response::Done)
            }
            Request::AllocPd => {
                self.check_room(client, Object::Pd, 0)?;
                let pd = self.mrs.alloc_pd();
                let handle = self.next_pd;
                self.next_pd = self.next_pd.wrapping_add(1).max(1);
                self.pds.insert(handle, (pd, client));
                Ok(Response::Pd(handle))
            }
            Request::DeallocPd { pd } => {
                let id = self.pd(client, pd)?;
                // As ibv_dealloc_pd: EBUSY while anything still uses the domain.
                if self.qps.iter().any(|qp| qp.pd == id) {
                    return Err(VerbsError::Busy("the protection domain (a QP uses it)"));
                }
                if self.srqs.values().any(|s| srq::lock(s).pd == id) {
                    return Err(VerbsError::Busy(
                        "the protection domain (a shared receive queue uses it)",
                    ));
                }
                if self.ah_pds.values().any(|ah_pd| *ah_pd == id) {
                    return Err(VerbsError::Busy(
                        "the protection domain (an address handle uses it)",
                    ));
                }
                if self.mrs.registrations_in(id) > 0 {
                    return Err(VerbsError::Busy(
                        "the protection domain (a memory registration uses it)",
                    ));
                }
                self.mrs.dealloc_pd(id)?;
                self.pds.remove(&pd);
                Ok(Response::Done)
            }
            Request::RegMr {
                pd,
                region,
                offset,
                len,
                access,
                va,
            } => {
                let id = self.pd(client, pd)?;
                if len as u64 > self.limits.max_mr_size {
                    return Err(VerbsError::Invalid(format!(
                        "a registration of {len} bytes is above the device limit {}",
                        self.limits.max_mr_size
                    )));
                }
                self.check_room(client, Object::Mr, 0)?;
                let keys = self.mrs.register(id, region, offset, len, access, va)?;
                self.mr_owners.insert(keys.lkey, client);
                Event::MemoryRegistered {
                    lkey: keys.lkey,
                    rkey: keys.rkey,
                    va: keys.va,
                    len: keys.len,
                    access,
                }
                .log();
                Ok(Response::Mr(keys))
            }
            Request::DeregMr { lkey } => {
                if self.mr_owners.get(&lkey) != Some(&client) {
                    return Err(none("memory registration", lkey));
                }
                self.mrs.deregister(lkey)?;
                self.mr_owners.remove(&lkey);
                Ok(Response::Done)
            }
            Request::CreateCq { entries } => self.create_cq(client, entries),
            Request::DestroyCq { cq } => {
                self.cq(client, cq)?;
                if self
                    .qps
                    .iter()
                    .any(|qp| qp.send_cq == cq || qp.recv_cq == cq)
                {
                    return Err(VerbsError::Busy("the completion queue"));
                }
                self.cqs.remove(cq);
                Ok(Response::Done)
            }
            Request::CreateQp {
                pd,
                qp_type,
                send_cq,
                recv_cq,
                cap,
                sq_sig_all,
            } => self.create_qp(
                client, pd, qp_type, send_cq, recv_cq, cap, sq_sig_all, None, false,
            ),
            Request::CreateQpWithSrq {
                pd,
                qp_type,
                send_cq,
                recv_cq,
                srq,
                cap,
                sq_sig_all,
            } => self.create_qp(
                client,
                pd,
                qp_type,
                send_cq,
                recv_cq,
                cap,
                sq_sig_all,
                Some(srq),
                false,
            ),
            Request::OpenGsi {
                pd,
                send_cq,
                recv_cq,
                cap,
            } => self.create_qp(
                client,
                pd,
                QpType::Ud,
                send_cq,
                recv_cq,
                cap,
                false,
                None,
                true,
            ),
            Request::ModifyQp { qpn, attr } => {
                self.qp(client, qpn)?;
                let port = self.port.clone();
                let result = self.with_qp(qpn, |qp, ctx| {
                    let (to, path) = qp.check_modify(&attr, &port)?;
                    let from = qp.state;
                    qp.apply_modify(&attr, to, path, &port.pkeys, ctx);
                    info!(qpn, %from, %to, "QP modified");
                    Ok::<_, VerbsError>(())
                });
                result.unwrap_or_else(|| Err(none("QP", qpn)))?;
                Ok(Response::Done)
            }
            Request::QueryQp { qpn } => Ok(Response::QpAttr(self.qp(client, qpn)?.query())),
            Request::QpStatus { qpn } => Ok(Response::QpStatus(self.qp(client, qpn)?.status())),
            Request::DestroyQp { qpn } => {
                self.qp(client, qpn)?;
                self.destroy_qp(qpn);
                Ok(Response::Done)
            }
            Request::CreateAh { pd, av } => {
                let pd_id = self.pd(client, pd)?;
                self.check_room(client, Object::Ah, 0)?;
                let sgid = *self
                    .port
                    .gids
                    .get(usize::from(av.sgid_index))
                    .ok_or(crate::qp::ModifyError::NoGid(av.sgid_index))?;
                let dip = av.dgid.ip();
                let dmac = match av.dmac {
                    Some(m) => m,
                    None => *self
                        .port
                        .neighbours
                        .get(&dip)
                        .ok_or(crate::qp::ModifyError::NoNeighbour(dip))?,
                };
                let path = Path::new(
                    self.port.mac,
                    sgid.ip(),
                    dmac,
                    dip,
                    udp_src_port(av.flow_label, 0, 0),
                    &av,
                )
                .ok_or(crate::qp::ModifyError::Family {
                    src: sgid,
                    dst: av.dgid,
                })?;
                let ah = self.next_ah;
                self.next_ah = self.next_ah.wrapping_add(1).max(1);
                self.ahs.insert(ah, path);
                self.ah_owners.insert(ah, (client, pd));
                self.ah_pds.insert(ah, pd_id);
                Ok(Response::Ah(ah))
            }
            Request::DestroyAh { ah } => {
                if self.ah_owners.get(&ah).map(|o| o.0) != Some(client) {
                    return Err(none("address handle", ah));
                }
                self.ahs.remove(&ah);
                self.ah_owners.remove(&ah);
                self.ah_pds.remove(&ah);
                Ok(Response::Done)
            }
            Request::Counters => Ok(Response::Counters(Box::new(self.counters.snapshot()))),
            Request::TcpListen { port } => self.ip_stack.tcp_listen(client, port),
            Request::TcpUnlisten { port } => self.ip_stack.tcp_unlisten(client, port),
            // `Engine::serve` hands these to the IP stack, which answers once connected.
            Request::TcpConnect { .. } | Request::TcpAccept { .. } => Err(VerbsError::Invalid(
                "a TCP connect or accept is answered by the IP stack".into(),
            )),
            Request::Disconnect => {
                self.forget_client(client);
                Ok(Response::Done)
            }
            Request::CmListen { addr } => self.cm_listen(client, addr, PortSpace::Tcp),
            Request::CmListenUdp { addr } => self.cm_listen(client, addr, PortSpace::Udp),
            Request::CmConnect { qpn, dst, param } => self.cm_connect(client, qpn, dst, param),
            Request::CmAccept { id, qpn, param } => self.cm_accept(client, id, qpn, param),
            Request::CmReject { id, private_data } => self.cm_reject(client, id, &private_data),
            Request::CmDisconnect { id } => self.cm_disconnect(client, id),
            Request::CmDestroyId { id } => self.cm_destroy(client, id),
            Request::CmEventLine => self.cm_event_line(client),
            // `Engine::serve` answers these when an event comes.
            Request::CmGetEvent { .. } => Err(VerbsError::Invalid(
                "a CM event wait is answered by the CM agent".into(),
            )),
            Request::CreateSrq {
                pd,
                max_wr,
                max_sge,
            } => self.create_srq(client, pd, max_wr, max_sge),
            Request::ModifySrq { srq, srq_limit } => {
                srq::lock(&self.srq(client, srq)?).set_limit(srq_limit)?;
                Ok(Response::Done)
            }
            Request::QuerySrq { srq } => {
                Ok(Response::SrqAttr(srq::lock(&self.srq(client, srq)?).attr()))
            }
            Request::DestroySrq { srq } => self.destroy_srq(client, srq),
        }
    }

    pub(super) fn pd(&self, client: ClientId, pd: u32) -> Result<roce_hostmem::PdId, VerbsError> {
        match self.pds.get(&pd) {
            Some((id, owner)) if *owner == client => Ok(*id),
            _ => Err(none("protection domain", pd)),
        }
    }

    fn cq(&self, client: ClientId, cq: u32) -> Result<&Cq, VerbsError> {
        self.cqs
            .get(cq)
            .filter(|c| c.owner == client)
            .ok_or(none("completion queue", cq))
    }

    pub(super) fn qp(&self, client: ClientId, qpn: u32) -> Result<&Qp, VerbsError> {
        self.qps
            .get(qpn)
            .filter(|q| q.owner == client)
            .ok_or(none("QP", qpn))
    }

    /// Memory for a new ring set: private, or a sealed memfd whose descriptor goes to a host in
    /// another process (nothing in /dev/shm to leave behind, plant or shrink).
    pub(super) fn ring_region(&self, what: &str, size: usize) -> Result<Arc<Region>, VerbsError> {
        Ok(Arc::new(match &self.rings {
            RingMemory::Private => Region::anonymous(size)?,
            RingMemory::Shared { prefix } => {
                Region::device_memory(&format!("{prefix}-{what}"), size)?
            }
        }))
    }

    fn create_cq(&mut self, client: ClientId, entries: u32) -> Result<Response, VerbsError> {
        let max = self.limits.max_cqe;
        if entries == 0 || u64::from(entries) > max {
            return Err(VerbsError::Invalid(format!(
                "a completion queue holds 1 to {max} entries, not {entries}"
            )));
        }
        let geometry = Geometry::new(0, entries, CQE_SIZE);
        self.check_room(client, Object::Cq, self.shm_cost(geometry.bytes()))?;
        let event = EventLine::new()?;
        let cq = self.cqs.free_index();
        let region = self.ring_region(&format!("cq{cq}"), geometry.bytes())?;
        let ring = Ring::create(Arc::clone(&region), geometry)?;
        self.cqs.put(Cq::new(cq, client, ring, Arc::clone(&event)));
        Ok(Response::Cq {
            cq,
            ring: RingMap { region, geometry },
            event,
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn create_qp(
        &mut self,
        client: ClientId,
        pd: u32,
        qp_type: QpType,
        send_cq: u32,
        recv_cq: u32,
        cap: QpCap,
        sq_sig_all: bool,
        srq: Option<u32>,
        gsi: bool,
    ) -> Result<Response, VerbsError> {
        let pd_id = self.pd(client, pd)?;
        self.cq(client, send_cq)?;
        self.cq(client, recv_cq)?;
        let srq = match srq {
            Some(srqn) => Some(self.srq_of_pd(client, srqn, pd_id)?),
            None => None,
        };
        // A QP with a shared receive queue has a receive ring of one slot that nobody reads;
        // its receives are sized by the SRQ.
        let cap = match &srq {
            Some(s) => QpCap {
                max_recv_wr: 1,
                max_recv_sge: srq::lock(s).max_sge(),
                ..cap
            },
            None => cap,
        };
        let l = &self.limits;
        let limits = [
            ("max_send_wr", cap.max_send_wr, l.max_qp_wr),
            ("max_recv_wr", cap.max_recv_wr, l.max_qp_wr),
            ("max_send_sge", cap.max_send_sge, l.max_sge),
            ("max_recv_sge", cap.max_recv_sge, l.max_sge),
            ("max_inline_data", cap.max_inline_data, l.max_inline),
        ];
        for (name, value, max) in limits {
            if u64::from(value) > max {
                return Err(VerbsError::Invalid(format!(
                    "{name} {value} is above the device limit {max}"
                )));
            }
        }
        let cap = QpCap {
            max_send_wr: cap.max_send_wr.max(1),
            max_recv_wr: cap.max_recv_wr.max(1),
            max_send_sge: cap.max_send_sge.max(1),
            max_recv_sge: cap.max_recv_sge.max(1),
            max_inline_data: cap.max_inline_data,
        };
        let qpn = match qp_type {
            QpType::Ud if gsi => GSI_QPN,
            _ => self.qps.free_qpn(),
        };
        if self.qps.get(qpn).is_some() {
            return Err(VerbsError::Busy("QP1 (the GSI)"));
        }
        // A doorbell record names QP numbers up to a cap (a NIC allowed more QPs numbers none
        // past it).
        if qpn >= crate::doorbell::MAX_QPNS {
            return Err(VerbsError::LimitReached {
                what: "QPs",
                scope: "NIC",
                limit: u64::from(crate::doorbell::MAX_QPNS - FIRST_QPN),
            });
        }
        let (sq, rq) = ring_layout(&cap);
        self.check_room(client, Object::Qp, self.shm_cost(rq.end()))?;
        let region = self.ring_region(&format!("qp{qpn}"), rq.end())?;
        let mut qp = Qp::new(
            qpn,
            qp_type,
            client,
            pd_id,
            send_cq,
            recv_cq,
            cap,
            Arc::clone(&region),
            sq_sig_all,
        )?;
        qp.rxe_compat = self.rxe_compat;
        qp.rto_low = self.rto_low;
        let with_srq = srq.is_some();
        qp.srq = srq;
        qp.congestion = self.dcqcn.map(|p| {
            Box::new(crate::dcqcn::QpCongestion::new(
                p,
                std::time::Instant::now(),
            ))
        });
        qp.p_key = self.port.pkeys.get(0).unwrap_or(pkey::DEFAULT);
        if qp_type == QpType::Ud {
            qp.attrs.path_mtu = self.port.max_mtu;
        }
        let actual = match with_srq {
            false => QpCap {
                max_send_wr: sq.capacity,
                max_recv_wr: rq.capacity,
                ..cap
            },
            // No receive queue of its own: nothing to post to.
            true => QpCap {
                max_send_wr: sq.capacity,
                max_recv_wr: 0,
                max_recv_sge: 0,
                ..cap
            },
        };
        if qpn == GSI_QPN {
            // The GSI is ready at once, with the well-known Q_Key.
            let attr = QpAttr::init_ud(deth::GSI_Q_KEY);
            let pkeys = self.port.pkeys.clone();
            let (_, mut io) = self.io();
            io.drive(&mut qp, std::time::Instant::now(), |qp, ctx| {
                for (state, a) in [
                    (QpState::Init, attr),
                    (
                        QpState::Rtr,
                        QpAttr {
                            qp_state: Some(QpState::Rtr),
                            ..QpAttr::default()
                        },
                    ),
                    (
                        QpState::Rts,
                        QpAttr {
                            qp_state: Some(QpState::Rts),
                            sq_psn: Some(0),
                            ..QpAttr::default()
                        },
                    ),
                ] {
                    qp.apply_modify(&a, state, None, &pkeys, ctx);
                }
            });
        }
        self.qps.insert(qp);
        info!(qpn, %qp_type, "QP created");
        Ok(Response::Qp {
            qpn,
            cap: actual,
            sq: RingMap {
                region: Arc::clone(&region),
                geometry: sq,
            },
            rq: RingMap {
                region,
                geometry: rq,
            },
        })
    }

    /// Destroys a QP: its outstanding work is dropped without completions, as with
    /// `ibv_destroy_qp`.
    fn destroy_qp(&mut self, qpn: u32) {
        if self.qps.remove(qpn).is_some() {
            info!(qpn, "QP destroyed");
        }
    }

    /// Destroys every object of a host program that went away.
    fn forget_client(&mut self, client: ClientId) {
        self.client_hosts.remove(&client);
        // Connections first: their QPs still exist to be moved to the error state.
        self.cm_forget_client(client);
        self.forget_neighbour_waits(client);
        self.ip_stack.forget_client(client);
        let qpns: Vec<u32> = self
            .qps
            .iter()
            .filter(|q| q.owner == client)
            .map(|q| q.qpn)
            .collect();
        for qpn in qpns {
            self.destroy_qp(qpn);
        }
        self.srqs.retain(|_, s| srq::lock(s).owner != client);
        let cqns: Vec<u32> = self
            .cqs
            .iter()
            .filter(|c| c.owner == client)
            .map(|c| c.cqn)
            .collect();
        for cqn in cqns {
            self.cqs.remove(cqn);
        }
        self.ah_owners.retain(|ah, (owner, _)| {
            let keep = *owner != client;
            if !keep {
                self.ahs.remove(ah);
                self.ah_pds.remove(ah);
            }
            keep
        });
        let lkeys: Vec<u32> = self
            .mr_owners
            .iter()
            .filter(|(_, o)| **o == client)
            .map(|(k, _)| *k)
            .collect();
        for lkey in lkeys {
            let _ = self.mrs.deregister(lkey);
            self.mr_owners.remove(&lkey);
        }
        let pds: Vec<u32> = self
            .pds
            .iter()
            .filter(|(_, (_, o))| *o == client)
            .map(|(h, _)| *h)
            .collect();
        for pd in pds {
            if let Some((id, _)) = self.pds.remove(&pd) {
                let _ = self.mrs.dealloc_pd(id);
            }
        }
        debug!(client, "client's objects destroyed");
    }
}

//! Control requests for shared receive queues: create, destroy, and the checks that a host
//! names only its own SRQ, in the QP's own protection domain.

use std::sync::{Arc, Mutex};

use tracing::info;

use super::limits::Object;
use super::Engine;
use crate::control::{ClientId, Response, RingMap};
use crate::error::VerbsError;
use crate::srq::{self, SharedSrq, Srq};

impl Engine {
    /// The shared receive queue `srqn` of `client`.
    pub(super) fn srq(&self, client: ClientId, srqn: u32) -> Result<SharedSrq, VerbsError> {
        self.srqs
            .get(&srqn)
            .filter(|s| srq::lock(s).owner == client)
            .cloned()
            .ok_or(VerbsError::NoSuchObject {
                kind: "shared receive queue",
                id: srqn,
            })
    }

    /// The shared receive queue `srqn` of `client`, for a QP of protection domain `pd`: an SRQ
    /// of another domain is refused, since its receives name memory of that domain.
    pub(super) fn srq_of_pd(
        &self,
        client: ClientId,
        srqn: u32,
        pd: roce_hostmem::PdId,
    ) -> Result<SharedSrq, VerbsError> {
        let s = self.srq(client, srqn)?;
        if srq::lock(&s).pd != pd {
            return Err(VerbsError::Invalid(format!(
                "shared receive queue {srqn:#x} is in another protection domain than the QP"
            )));
        }
        Ok(s)
    }

    pub(super) fn create_srq(
        &mut self,
        client: ClientId,
        pd: u32,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<Response, VerbsError> {
        let pd_id = self.pd(client, pd)?;
        let l = &self.limits;
        if max_wr == 0 || u64::from(max_wr) > l.max_qp_wr {
            return Err(VerbsError::Invalid(format!(
                "a shared receive queue holds 1 to {} requests, not {max_wr}",
                l.max_qp_wr
            )));
        }
        if u64::from(max_sge) > l.max_sge {
            return Err(VerbsError::Invalid(format!(
                "max_sge {max_sge} is above the device limit {}",
                l.max_sge
            )));
        }
        let geometry = srq::ring_layout(max_wr, max_sge.max(1));
        self.check_room(client, Object::Srq, self.shm_cost(geometry.bytes()))?;
        let srqn = self.next_srq;
        self.next_srq = self.next_srq.wrapping_add(1).max(1);
        let region = self.ring_region(&format!("srq{srqn}"), geometry.bytes())?;
        let srq = Srq::new(
            srqn,
            client,
            pd_id,
            max_wr,
            max_sge.max(1),
            Arc::clone(&region),
        )?;
        let attr = srq.attr();
        self.srqs.insert(srqn, Arc::new(Mutex::new(srq)));
        info!(srqn, max_wr = attr.max_wr, "shared receive queue created");
        Ok(Response::Srq {
            srq: srqn,
            attr,
            ring: RingMap { region, geometry },
        })
    }

    /// Destroys a shared receive queue; EBUSY while a QP takes from it, as the kernel answers.
    pub(super) fn destroy_srq(
        &mut self,
        client: ClientId,
        srqn: u32,
    ) -> Result<Response, VerbsError> {
        let s = self.srq(client, srqn)?;
        let in_use = self
            .world()
            .qps()
            .any(|qp| qp.srq.as_ref().is_some_and(|q| Arc::ptr_eq(q, &s)));
        if in_use {
            return Err(VerbsError::Busy("the shared receive queue (a QP uses it)"));
        }
        self.srqs.remove(&srqn);
        info!(srqn, "shared receive queue destroyed");
        Ok(Response::Done)
    }
}

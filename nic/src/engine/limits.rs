//! The engine's side of [`crate::limits::Limits`]: counting what a host (and the whole NIC)
//! holds before it may create one more object. Counted from the objects themselves, so the
//! count can never drift from what exists.

use super::Engine;
use crate::control::ClientId;
use crate::error::VerbsError;
use crate::srq;

/// The kinds of object a host creates.
#[derive(Debug, Clone, Copy)]
pub(super) enum Object {
    Qp,
    Cq,
    Mr,
    Pd,
    Ah,
    Srq,
}

impl Engine {
    /// Err (ENOMEM) unless `client` may have one more `object` whose rings take `shm` bytes:
    /// within the NIC's limits, and within its host's if it is a host in another process.
    pub(super) fn check_room(
        &self,
        client: ClientId,
        object: Object,
        shm: u64,
    ) -> Result<(), VerbsError> {
        let l = &self.limits;
        let (what, nic_max, host_max) = match object {
            Object::Qp => ("QPs", l.max_qp, l.host_max_qp),
            Object::Cq => ("completion queues", l.max_cq, l.host_max_cq),
            Object::Mr => ("memory registrations", l.max_mr, l.host_max_mr),
            Object::Pd => ("protection domains", l.max_pd, l.host_max_pd),
            Object::Ah => ("address handles", l.max_ah, l.host_max_ah),
            Object::Srq => ("shared receive queues", l.max_srq, l.host_max_srq),
        };
        let full = |what, scope, limit| VerbsError::LimitReached { what, scope, limit };
        if self.count(object, |_| true) >= nic_max {
            return Err(full(what, "NIC", nic_max));
        }
        if shm > 0 && self.ring_bytes(|_| true).saturating_add(shm) > l.max_shm {
            return Err(full("bytes of rings", "NIC", l.max_shm));
        }
        if let Some(host) = self.client_hosts.get(&client) {
            let ours = |c: ClientId| self.client_hosts.get(&c) == Some(host);
            if self.count(object, ours) >= host_max {
                return Err(full(what, "host", host_max));
            }
            if shm > 0 && self.ring_bytes(ours).saturating_add(shm) > l.host_max_shm {
                return Err(full("bytes of rings", "host", l.host_max_shm));
            }
        }
        Ok(())
    }

    fn count(&self, object: Object, owned: impl Fn(ClientId) -> bool) -> u64 {
        let n = match object {
            Object::Qp => self.world().qps().filter(|q| owned(q.owner)).count(),
            Object::Cq => self
                .world()
                .tables
                .cqs
                .iter()
                .filter(|c| owned(c.owner))
                .count(),
            Object::Mr => self.mr_owners.values().filter(|o| owned(**o)).count(),
            Object::Pd => self.pds.values().filter(|(_, o)| owned(*o)).count(),
            Object::Ah => self.ah_owners.values().filter(|(o, _)| owned(*o)).count(),
            Object::Srq => self
                .srqs
                .values()
                .filter(|s| owned(srq::lock(s).owner))
                .count(),
        };
        n as u64
    }

    /// Bytes of the rings of the QPs, CQs and SRQs `owned` says are counted.
    fn ring_bytes(&self, owned: impl Fn(ClientId) -> bool) -> u64 {
        let qps = self
            .world()
            .qps()
            .filter(|q| owned(q.owner))
            .map(|q| q.rings().0.len() as u64);
        let cqs = self
            .world()
            .tables
            .cqs
            .iter()
            .filter(|c| owned(c.owner))
            .map(|c| c.ring().region().len() as u64);
        let srqs = self.srqs.values().filter_map(|s| {
            let s = srq::lock(s);
            owned(s.owner).then(|| s.ring().0.len() as u64)
        });
        qps.chain(cqs).chain(srqs).sum()
    }
}

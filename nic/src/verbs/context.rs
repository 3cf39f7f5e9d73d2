//! The host-side verbs objects. Each holds what it needs of its parents (a QP keeps its CQs and
//! PD alive), and dropping one destroys it in the NIC, as `ibv_destroy_*` would.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use roce_hostmem::Region;

use super::VerbsError;
use super::{
    backend::Backend,
    cq::{CompletionQueue, CqInner},
    pd::{PdInner, ProtectionDomain},
};
use crate::control::{ClientId, DeviceInfo, Request, Response};
use crate::counters::Snapshot;
use crate::cq::EventLine;
use crate::ring::{Consumer, Ring};
use crate::types::{Gid, PortAttr};

/// What a context knows of a memory registration, to copy inline data from it.
pub(super) struct LocalMr {
    pub(super) region: Arc<Region>,
    pub(super) offset: usize,
    pub(super) va: u64,
    pub(super) len: u64,
}

pub(super) struct Inner {
    pub(super) backend: Arc<dyn Backend>,
    pub(super) client: ClientId,
    pub(super) device: DeviceInfo,
    pub(super) mrs: Mutex<HashMap<u32, LocalMr>>,
    /// Set when a wait saw the NIC hang up, so the next post fails even before the backend
    /// has noticed.
    pub(super) gone: AtomicBool,
    /// The CM event line, asked of the NIC at the first [`Context::cm_wait`].
    pub(super) cm_line: OnceLock<Arc<EventLine>>,
}

impl Inner {
    pub(super) fn call(&self, request: Request) -> Result<Response, VerbsError> {
        self.backend.call(self.client, request)
    }

    pub(super) fn unexpected(&self, what: &str) -> VerbsError {
        VerbsError::Invalid(format!("the NIC answered {what} with something else"))
    }

    pub(super) fn device_gone(&self) -> VerbsError {
        VerbsError::DeviceGone {
            nic: self.device.name.clone(),
        }
    }

    /// Err once the NIC is known to have stopped; posting work would only fill dead rings.
    pub(super) fn check_alive(&self) -> Result<(), VerbsError> {
        if self.gone.load(Ordering::Relaxed) || !self.backend.alive() {
            return Err(self.device_gone());
        }
        Ok(())
    }

    pub(super) fn mrs(&self) -> MutexGuard<'_, HashMap<u32, LocalMr>> {
        self.mrs.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.backend.call(self.client, Request::Disconnect);
    }
}

/// An opened device (`ibv_context`).
#[derive(Clone)]
pub struct Context {
    pub(super) inner: Arc<Inner>,
}

impl Context {
    /// Opens the device behind `backend`.
    pub fn open(backend: Arc<dyn Backend>) -> Result<Context, VerbsError> {
        let client = backend.connect()?;
        let device = match backend.call(client, Request::QueryDevice)? {
            Response::Device(d) => d,
            _ => {
                return Err(VerbsError::Invalid(
                    "the NIC did not describe itself".into(),
                ))
            }
        };
        Ok(Context {
            inner: Arc::new(Inner {
                backend,
                client,
                device,
                mrs: Mutex::new(HashMap::new()),
                gone: AtomicBool::new(false),
                cm_line: OnceLock::new(),
            }),
        })
    }

    /// What the device told when it was opened.
    pub fn device(&self) -> &DeviceInfo {
        &self.inner.device
    }

    /// `ibv_query_device`: the device's attributes and limits, asked anew.
    pub fn query_device(&self) -> Result<DeviceInfo, VerbsError> {
        match self.inner.call(Request::QueryDevice)? {
            Response::Device(d) => Ok(d),
            _ => Err(self.inner.unexpected("query_device")),
        }
    }

    /// The GID at `index` of port 1.
    pub fn gid(&self, index: u8) -> Option<Gid> {
        self.inner.device.gids.get(usize::from(index)).copied()
    }

    /// `ibv_query_port` of port 1: its MTU and the sizes of its GID and P_Key tables.
    pub fn query_port(&self) -> Result<PortAttr, VerbsError> {
        let d = self.query_device()?;
        Ok(PortAttr {
            max_mtu: d.max_mtu,
            active_mtu: d.max_mtu,
            gid_tbl_len: d.gids.len() as u32,
            pkey_tbl_len: d.pkeys.len() as u16,
        })
    }

    /// `ibv_query_pkey` of port 1: the P_Key at `index` of its table, which a QP's
    /// `pkey_index` names. The table is fixed when the NIC starts (`roce nic --pkey`), so the
    /// copy the NIC gave at open time answers.
    pub fn query_pkey(&self, index: u16) -> Result<u16, VerbsError> {
        self.inner.device.pkeys.get(index).ok_or_else(|| {
            VerbsError::Invalid(format!(
                "P_Key index {index} is outside the port's table of {}",
                self.inner.device.pkeys.len()
            ))
        })
    }

    pub fn alloc_pd(&self) -> Result<ProtectionDomain, VerbsError> {
        match self.inner.call(Request::AllocPd)? {
            Response::Pd(pd) => Ok(ProtectionDomain {
                inner: Arc::new(PdInner {
                    ctx: Arc::clone(&self.inner),
                    pd,
                }),
            }),
            _ => Err(self.inner.unexpected("alloc_pd")),
        }
    }

    /// A completion queue of at least `entries` entries.
    pub fn create_cq(&self, entries: u32) -> Result<CompletionQueue, VerbsError> {
        match self.inner.call(Request::CreateCq { entries })? {
            Response::Cq { cq, ring, event } => Ok(CompletionQueue {
                inner: Arc::new(CqInner {
                    ctx: Arc::clone(&self.inner),
                    cq,
                    consumer: Mutex::new(Consumer::new(Ring::attach(ring.region, ring.geometry)?)),
                    event,
                    moderation: Mutex::default(),
                }),
            }),
            _ => Err(self.inner.unexpected("create_cq")),
        }
    }

    /// The NIC's counters now.
    pub fn counters(&self) -> Result<Snapshot, VerbsError> {
        match self.inner.call(Request::Counters)? {
            Response::Counters(s) => Ok(*s),
            _ => Err(self.inner.unexpected("a counters query")),
        }
    }
}

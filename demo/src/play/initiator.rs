//! The initiator program: the demo itself. It makes a QP on its NIC, connects it to the target's
//! with what the target shared, registers a buffer, and posts the scenario's one work request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region, VaBase};
use roce_nic::verbs::{
    AddressVector, CompletionQueue, Context, Gid, MemoryRegion, QpAttr, QpCap, QpType, QueuePair,
    SendFlags, SendOp, SendWr, Wc,
};

use crate::plan::{self, Plan};
use crate::target_host::{random_psn, Shared, GID_INDEX};
use crate::{DemoError, Scenario};

/// The work request's id.
pub const WR_ID: u64 = 1;

pub struct Initiator {
    pub qp: QueuePair,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
    /// The buffer the work request sends from or receives into.
    pub buffer: Arc<Region>,
    pub psn: u32,
    pub gid: Gid,
}

fn verbs(what: &str) -> impl Fn(roce_nic::verbs::VerbsError) -> DemoError + '_ {
    move |e| DemoError::because(what, e)
}

impl Initiator {
    /// A QP and a registered buffer on `ctx`, with the payload in the buffer when the work
    /// request sends it. `named`: the NIC is another process, which maps host memory by name.
    pub fn set_up(ctx: &Context, plan: &Plan, named: bool) -> Result<Initiator, DemoError> {
        let len = plan.local_len();
        let buffer = if named {
            let name = format!("demo{}i-mem", std::process::id());
            crate::shm::region(&name, len.next_multiple_of(4096))?
        } else {
            Region::anonymous(len)
                .map_err(|e| DemoError::because("cannot create the initiator's buffer", e))?
        };
        let buffer = Arc::new(buffer);
        let pd = ctx
            .alloc_pd()
            .map_err(verbs("cannot allocate a protection domain"))?;
        let cq = ctx
            .create_cq(64)
            .map_err(verbs("cannot create a completion queue"))?;
        let qp = pd
            .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
            .map_err(verbs("cannot create a queue pair"))?;
        let va = VaBase::At(buffer.as_ptr() as u64);
        let mr = pd
            .register_at(&buffer, 0, buffer.len(), Access::LOCAL_WRITE, va)
            .map_err(verbs("cannot register the initiator's buffer"))?;
        if let Some(name) = buffer.name() {
            // The NIC has mapped it: a killed run leaves nothing in /dev/shm. Filled only now,
            // as a gigabyte (`--size 1G`) takes a while to write, and a demo killed meanwhile
            // must not leave it behind.
            let _ = Region::remove(name);
        }
        if !matches!(plan.scenario, Scenario::Read | Scenario::Atomic) {
            plan.payload.fill(&buffer, 0)?;
        }
        let gid = ctx
            .gid(GID_INDEX)
            .ok_or_else(|| DemoError::failed("the initiator's NIC has no IPv4 GID"))?;
        Ok(Initiator {
            qp,
            cq,
            mr,
            buffer,
            psn: random_psn(),
            gid,
        })
    }

    /// Connects to the target's QP.
    pub fn connect(&self, target: &Shared, plan: &Plan) -> Result<(), DemoError> {
        let gid = Gid::parse(&target.gid)
            .ok_or_else(|| DemoError::failed("the target shared a GID that is not one"))?;
        let modify = |attr: &QpAttr| {
            self.qp
                .modify(attr)
                .map_err(verbs("cannot connect the initiator's queue pair"))
        };
        modify(&QpAttr::init(Access::LOCAL_WRITE))?;
        modify(&QpAttr::rtr(
            AddressVector::to(gid, GID_INDEX),
            target.qpn,
            target.psn,
            plan.mtu,
        ))?;
        modify(&QpAttr::rts(self.psn))
    }

    /// The scenario's work request, aimed at the target's memory.
    pub fn operation(plan: &Plan, target: &Shared) -> SendOp {
        let remote_addr = target.va + plan.offset;
        let rkey = target.rkey;
        match plan.scenario {
            // allreduce posts its own work requests (crate::allreduce::host); congestion none.
            Scenario::Write
            | Scenario::Loss
            | Scenario::TcpVsRdma
            | Scenario::Allreduce
            | Scenario::Connect
            | Scenario::Congestion => SendOp::RdmaWrite { remote_addr, rkey },
            Scenario::Read => SendOp::RdmaRead { remote_addr, rkey },
            Scenario::Send => SendOp::Send,
            // The immediate tells the target where the data is: its offset in the region.
            Scenario::Imm => SendOp::RdmaWriteWithImm {
                remote_addr,
                rkey,
                imm: plan.offset as u32,
            },
            Scenario::Atomic => SendOp::AtomicFetchAndAdd {
                remote_addr: target.va + plan::COUNTER_OFFSET,
                rkey,
                add: plan::COUNTER_ADD,
            },
        }
    }

    /// Posts `op` over the whole buffer (8 bytes for an atomic's result), signaled.
    pub fn post(&self, op: SendOp, plan: &Plan) -> Result<(), DemoError> {
        let len = if op.is_atomic() {
            8
        } else {
            plan.payload.len()
        };
        let sge = self.mr.sge(0, len as u32);
        self.qp
            .post_send(&[SendWr {
                wr_id: WR_ID,
                op,
                sg_list: &[sge],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .map_err(verbs("cannot post the work request"))
    }

    /// Waits for the completion, at most `timeout`, calling `tick` about ten times a second.
    pub fn completion(&self, timeout: Duration, mut tick: impl FnMut()) -> Result<Wc, DemoError> {
        let deadline = Instant::now() + timeout;
        let mut wc = [Wc::default()];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(DemoError::failed(format!(
                    "the work request did not complete within {} s",
                    timeout.as_secs()
                )));
            }
            let slice = left.min(Duration::from_millis(100));
            let n = self
                .cq
                .try_wait(&mut wc, Some(slice))
                .map_err(verbs("cannot wait for the completion"))?;
            if n == 1 {
                return Ok(wc[0]);
            }
            tick();
        }
    }

    /// `len` bytes of the buffer.
    pub fn read(&self, len: usize) -> Result<Vec<u8>, DemoError> {
        let mut bytes = vec![0; len];
        self.buffer
            .read(0, &mut bytes)
            .map_err(|e| DemoError::because("cannot read the initiator's buffer", e))?;
        Ok(bytes)
    }
}

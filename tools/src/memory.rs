//! Host memory for a tool run, and the waits for its completions.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, Region, VaBase};
use roce_nic::verbs::{CompletionQueue, MemoryRegion, ProtectionDomain, Sge, Wc, WcOpcode};

use crate::ToolError;

/// A registered buffer. The region is a named one, because a NIC in another process can only
/// map named memory; its name is removed as soon as the NIC has it, so nothing is left in
/// /dev/shm however the run ends. The registration's VA is the buffer's address in this
/// process, as with libibverbs.
pub struct Buffer {
    region: Arc<Region>,
    mr: MemoryRegion,
}

impl Buffer {
    pub fn new(pd: &ProtectionDomain, len: usize, access: Access) -> Result<Buffer, ToolError> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "tool-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let region = Arc::new(
            Region::create(&name, len.max(1))
                .map_err(|e| ToolError::Usage(format!("cannot make a {len}-byte buffer: {e}")))?,
        );
        let va = VaBase::At(region.as_ptr() as u64);
        let registered = pd.register_at(&region, 0, len.max(1), access, va);
        let _ = Region::remove(&name);
        Ok(Buffer {
            mr: registered?,
            region,
        })
    }

    pub fn va(&self, offset: usize) -> u64 {
        self.mr.va + offset as u64
    }

    pub fn rkey(&self) -> u32 {
        self.mr.rkey
    }

    pub fn sge(&self, offset: usize, len: u32) -> Sge {
        self.mr.sge(offset as u64, len)
    }

    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0; len];
        // Every offset the tools use lies inside the buffer they sized for it.
        self.region
            .read(offset, &mut out)
            .expect("a read inside the buffer");
        out
    }

    pub fn write(&self, offset: usize, data: &[u8]) {
        self.region
            .write(offset, data)
            .expect("a write inside the buffer");
    }

    pub fn fill(&self, offset: usize, len: usize, byte: u8) {
        self.write(offset, &vec![byte; len]);
    }

    /// The byte at `offset`, loaded afresh each call (for spinning on the peer's writes).
    pub fn poll_byte(&self, offset: usize) -> u8 {
        self.region
            .poll_byte(offset)
            .expect("a poll inside the buffer")
    }
}

/// Waits for at least one completion on `cq` (at most `step`), and checks that every one
/// returned succeeded.
pub fn completions(
    cq: &CompletionQueue,
    out: &mut [Wc],
    step: Duration,
    what: &'static str,
) -> Result<usize, ToolError> {
    let n = cq.try_wait(out, Some(step))?;
    if n == 0 {
        return Err(ToolError::timeout(format!("{what} completion"), step));
    }
    if let Some(bad) = out[..n].iter().find(|wc| !wc.is_success()) {
        return Err(ToolError::Completion {
            what: opcode_name(bad.opcode),
            status: bad.status,
        });
    }
    Ok(n)
}

fn opcode_name(op: WcOpcode) -> &'static str {
    match op {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA WRITE",
        WcOpcode::RdmaRead => "RDMA READ",
        WcOpcode::CompSwap => "compare-and-swap",
        WcOpcode::FetchAdd => "fetch-and-add",
        WcOpcode::Recv | WcOpcode::RecvRdmaWithImm => "receive",
    }
}

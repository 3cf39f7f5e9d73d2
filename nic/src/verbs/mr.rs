//! A memory registration (`ibv_mr`).

use std::sync::Arc;

use roce_hostmem::Access;

use super::pd::PdInner;
use crate::control::Request;
use crate::types::Sge;

/// A memory registration (`ibv_mr`). Deregistered when dropped.
pub struct MemoryRegion {
    pub(super) pd: Arc<PdInner>,
    pub lkey: u32,
    pub rkey: u32,
    /// First virtual address of the registered range.
    pub va: u64,
    pub len: u64,
    pub access: Access,
}

impl MemoryRegion {
    /// A scatter/gather entry for `length` bytes at `offset` into the registration.
    pub fn sge(&self, offset: u64, length: u32) -> Sge {
        Sge {
            addr: self.va + offset,
            length,
            lkey: self.lkey,
        }
    }
}

impl Drop for MemoryRegion {
    fn drop(&mut self) {
        self.pd.ctx.mrs().remove(&self.lkey);
        let _ = self.pd.ctx.call(Request::DeregMr { lkey: self.lkey });
    }
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MemoryRegion {{ lkey: {:#x}, rkey: {:#x}, va: {:#x}, len: {}, access: {} }}",
            self.lkey, self.rkey, self.va, self.len, self.access
        )
    }
}

//! The verbs API: what a host program uses, shaped like libibverbs and the `ibverbs` crate —
//! open a device, allocate a protection domain, register memory, create completion queues and
//! queue pairs, move QPs through RESET → INIT → RTR → RTS, post send and receive work requests
//! and poll completions.
//!
//! Control operations go to the NIC engine as requests; work requests and completions go
//! through rings in shared memory with a doorbell, without a round trip per request, as with a
//! hardware RNIC.

mod cm;
mod context;
mod tcp;

pub use crate::error::VerbsError;
pub use cm::CmId;
pub use context::{
    AddressHandle, Backend, CompletionQueue, Context, MemoryRegion, ProtectionDomain, QueuePair,
};
pub use tcp::PortListener;
// The vocabulary lives below the engine (crate::types), which speaks it too; the API re-exports it.
pub use crate::types::*;

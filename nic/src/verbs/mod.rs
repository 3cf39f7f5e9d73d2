//! The verbs API: what a host program uses, shaped like libibverbs and the `ibverbs` crate —
//! open a device, allocate a protection domain, register memory, create completion queues and
//! queue pairs, move QPs through RESET → INIT → RTR → RTS, post send and receive work requests
//! and poll completions.
//!
//! Control operations go to the NIC engine as requests; work requests and completions go
//! through rings in shared memory with a doorbell, without a round trip per request, as with a
//! hardware RNIC.

mod ah;
mod backend;
mod cm;
mod context;
mod cq;
mod mr;
mod pd;
mod qp;
mod srq;
mod tcp;

pub use crate::error::VerbsError;
pub use ah::AddressHandle;
pub use backend::Backend;
pub use cm::CmId;
pub use context::Context;
pub use cq::{CompletionQueue, Moderation};
pub use mr::MemoryRegion;
pub use pd::ProtectionDomain;
pub use qp::QueuePair;
pub use srq::SharedReceiveQueue;
// What `ibv_query_srq` answers.
pub use crate::srq::SrqAttr;
pub use tcp::PortListener;
// The vocabulary lives below the engine (crate::types), which speaks it too; the API re-exports it.
pub use crate::types::*;

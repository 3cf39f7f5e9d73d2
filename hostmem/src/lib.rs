//! Host memory for the emulated RNIC: the RAM a real RNIC reaches by DMA, and the tables that say
//! which parts of it a remote peer may touch.
//!
//! - [`Region`]: a named block of shared memory (a file under /dev/shm) that a host program
//!   creates and the NIC, possibly another process, attaches to.
//! - [`MrTable`]: protection domains and memory registrations with Soft-RoCE style keys, and the
//!   checked resolution of (key, domain, VA, length, access) that every wire access goes through.
//! - [`Place`] and [`AtomicPlace`]: DMA copies and real 64-bit atomics on a resolved range.
//! - [`parse_size`]: sizes such as `4K` or `1M` as people type them.

mod access;
mod dma;
mod error;
mod mr;
mod pd;
mod region;
mod shm;
mod size;

pub use access::Access;
pub use dma::{AtomicPlace, Place};
pub use error::{AccessError, MrError, RegionError, SizeError};
pub use mr::{MrKeys, MrTable, VaBase};
pub use pd::PdId;
pub use region::Region;
pub use size::{parse_size, MAX_SIZE};

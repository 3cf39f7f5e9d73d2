//! Host memory for the emulated RNIC: the RAM a real RNIC reaches by DMA, and the tables that say
//! which parts of it a remote peer may touch.
//!
//! - [`Region`]: a block of shared memory that a host program creates and the NIC, possibly
//!   another process, maps through a descriptor the host passes: a sealed memfd, or a named
//!   file under /dev/shm (mapped guarded, see `guard`), so no host can crash the NIC by
//!   shrinking its memory.
//! - [`MrTable`]: protection domains and memory registrations with Soft-RoCE style keys, and the
//!   checked resolution of (key, domain, VA, length, access) that every wire access goes through.
//! - [`Place`] and [`AtomicPlace`]: DMA copies and real 64-bit atomics on a resolved range.
//! - [`parse_size`]: sizes such as `4K` or `1M` as people type them.

mod access;
mod dma;
mod error;
mod guard;
mod mr;
mod pd;
mod region;
mod shm;
mod size;

pub use access::{Access, UnknownAccess};
pub use dma::{fence_writes, AtomicPlace, Place, STREAMING_MIN};
pub use error::{AccessError, MrError, RegionError, SizeError};
pub use mr::{MrKeys, MrTable, VaBase};
pub use pd::PdId;
pub use region::{is_device_memory, Region};
pub use shm::{FILE_PREFIX, MAX_NAME_LEN, SHM_DIR};
pub use size::{parse_size, MAX_SIZE};

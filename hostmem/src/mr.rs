//! Memory registration: which ranges of which regions a key opens, and the one checked entry
//! point through which every access from the wire goes.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::pd::PdTable;
use crate::{Access, AccessError, AtomicPlace, MrError, PdId, Place, Region};

/// Where the registered range starts in the address space the remote peer uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum VaBase {
    /// The VA is the offset into the region, so distinct registrations of one region never
    /// share addresses.
    #[default]
    Offset,
    /// The range starts at VA 0 (zero-based, as `IBV_ACCESS_ZERO_BASED`).
    Zero,
    /// The range starts at the given VA, as `ibv_reg_mr_iova` allows.
    At(u64),
}

/// What a registration hands back: the keys to name it by and its range in VA space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MrKeys {
    /// Key for local scatter/gather entries.
    pub lkey: u32,
    /// Key a remote peer puts in RDMA and atomic requests; equal to `lkey`, as in Soft-RoCE.
    pub rkey: u32,
    /// First virtual address of the range.
    pub va: u64,
    /// Length of the range in bytes.
    pub len: u64,
}

/// Keys are `index << 8 | key byte`, as Soft-RoCE makes them: the index finds the slot in one
/// step and the key byte changes each time a slot is reused, so a key kept after its
/// registration was removed names nothing (until the byte wraps after 256 reuses).
const KEY_BYTE_BITS: u32 = 8;
/// Index 0 is never used, so key 0 is never valid.
const MAX_INDEX: u32 = (1 << (32 - KEY_BYTE_BITS)) - 1;

/// The protection domains and memory registrations of one NIC.
///
/// Owned by the NIC engine's thread: changes take `&mut self`, and the places that resolving
/// hands out borrow the table, so no registration can vanish under a DMA in progress.
#[derive(Debug)]
pub struct MrTable {
    pds: PdTable,
    slots: Vec<Slot>,
    /// Freed slot indices, reused oldest first so that a key byte wraps as late as possible.
    free: VecDeque<u32>,
}

#[derive(Debug, Default)]
struct Slot {
    key_byte: u8,
    mr: Option<Mr>,
}

#[derive(Debug)]
struct Mr {
    key: u32,
    pd: PdId,
    region: Arc<Region>,
    offset: usize,
    va: u64,
    len: u64,
    access: Access,
    /// False once invalidated; the key is refused but the slot stays taken until deregistered.
    valid: bool,
}

impl Default for MrTable {
    fn default() -> Self {
        MrTable::new()
    }
}

impl MrTable {
    pub fn new() -> Self {
        MrTable {
            pds: PdTable::default(),
            slots: vec![Slot::default()],
            free: VecDeque::new(),
        }
    }

    pub fn alloc_pd(&mut self) -> PdId {
        self.pds.alloc()
    }

    /// How many registrations `pd` holds (0 for an unknown domain).
    pub fn registrations_in(&self, pd: PdId) -> usize {
        self.pds.registrations(pd)
    }

    /// Frees `pd`; refused while registrations still use it.
    pub fn dealloc_pd(&mut self, pd: PdId) -> Result<(), MrError> {
        self.pds.dealloc(pd)
    }

    /// Registers `len` bytes of `region` starting at `offset`, in domain `pd`, with `access`
    /// rights, at the VA chosen by `va`.
    ///
    /// As in verbs, remote write and remote atomic rights need local write as well.
    pub fn register(
        &mut self,
        pd: PdId,
        region: Arc<Region>,
        offset: usize,
        len: usize,
        access: Access,
        va: VaBase,
    ) -> Result<MrKeys, MrError> {
        if len == 0 {
            return Err(MrError::EmptyRange);
        }
        if offset.checked_add(len).is_none_or(|end| end > region.len()) {
            return Err(MrError::OutsideRegion {
                offset,
                len,
                region_len: region.len(),
            });
        }
        let changed_remotely =
            access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC);
        if changed_remotely && !access.contains(Access::LOCAL_WRITE) {
            return Err(MrError::RemoteWriteWithoutLocalWrite { access });
        }
        let va = match va {
            VaBase::Offset => offset as u64,
            VaBase::Zero => 0,
            VaBase::At(va) => va,
        };
        let len = len as u64;
        // The last byte must be addressable; the range may end exactly at the top of VA space.
        if va.checked_add(len - 1).is_none() {
            return Err(MrError::VaOverflow { va, len });
        }
        self.pds.add_registration(pd)?;
        let Some(index) = self.take_index() else {
            self.pds.remove_registration(pd);
            return Err(MrError::TableFull);
        };
        let slot = &mut self.slots[index as usize];
        let key = index << KEY_BYTE_BITS | u32::from(slot.key_byte);
        tracing::debug!(
            key = format_args!("{key:#x}"),
            ?pd,
            region = region.name(),
            offset,
            len,
            va = format_args!("{va:#x}"),
            %access,
            "memory registered"
        );
        slot.mr = Some(Mr {
            key,
            pd,
            region,
            offset,
            va,
            len,
            access,
            valid: true,
        });
        Ok(MrKeys {
            lkey: key,
            rkey: key,
            va,
            len,
        })
    }

    /// Removes the registration with key `lkey`, valid or invalidated. The key is refused from
    /// now on, also after its slot is reused.
    pub fn deregister(&mut self, lkey: u32) -> Result<(), MrError> {
        let index = lkey >> KEY_BYTE_BITS;
        let slot = self
            .slots
            .get_mut(index as usize)
            .filter(|slot| slot.mr.as_ref().is_some_and(|mr| mr.key == lkey))
            .ok_or(MrError::UnknownKey { key: lkey })?;
        if let Some(mr) = slot.mr.take() {
            self.pds.remove_registration(mr.pd);
        }
        slot.key_byte = slot.key_byte.wrapping_add(1);
        self.free.push_back(index);
        tracing::debug!(key = format_args!("{lkey:#x}"), "memory deregistered");
        Ok(())
    }

    /// Invalidates the registration with key `rkey` in domain `pd`, as SEND with Invalidate or a
    /// local invalidate does: its keys are refused from now on. Invalidating twice is harmless.
    pub fn invalidate(&mut self, rkey: u32, pd: PdId) -> Result<(), MrError> {
        let mr = self
            .slots
            .get_mut((rkey >> KEY_BYTE_BITS) as usize)
            .and_then(|slot| slot.mr.as_mut())
            .filter(|mr| mr.key == rkey)
            .ok_or(MrError::UnknownKey { key: rkey })?;
        if mr.pd != pd {
            return Err(MrError::PdMismatch { key: rkey });
        }
        mr.valid = false;
        tracing::debug!(key = format_args!("{rkey:#x}"), "memory invalidated");
        Ok(())
    }

    /// Checks a remote peer's access to `len` bytes at `va` under `rkey` (RDMA WRITE, READ or
    /// the data of a SEND) and returns where they are.
    ///
    /// A zero-length request names no memory, so it is granted without looking at the key, as
    /// Soft-RoCE does for a zero-byte RDMA WRITE; the place it returns is empty.
    pub fn resolve_remote(
        &self,
        rkey: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Place<'_>, AccessError> {
        self.resolve(rkey, pd, va, len, need)
    }

    /// Checks a local scatter/gather entry: `need` is empty to read the memory (sending) or
    /// `LOCAL_WRITE` to write it (receiving). Zero lengths are granted as in
    /// [`MrTable::resolve_remote`].
    pub fn resolve_local(
        &self,
        lkey: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Place<'_>, AccessError> {
        self.resolve(lkey, pd, va, len, need)
    }

    /// Checks a remote atomic operation on the 8-byte word at `va` under `rkey`.
    ///
    /// A `va` that is not a multiple of 8 is refused first, since it is malformed whatever the
    /// tables say; a word that would be misaligned in host memory (a registration whose VA and
    /// offset differ modulo 8) is refused as misaligned too, because a real atomic instruction
    /// cannot run on it.
    pub fn resolve_atomic(
        &self,
        rkey: u32,
        pd: PdId,
        va: u64,
    ) -> Result<AtomicPlace<'_>, AccessError> {
        if va % 8 != 0 {
            return Err(AccessError::Misaligned);
        }
        let mr = self.checked(rkey, pd, Access::REMOTE_ATOMIC)?;
        let offset = mr.offset_of(va, 8)?;
        if offset % 8 != 0 {
            return Err(AccessError::Misaligned);
        }
        Ok(AtomicPlace::new(&mr.region, offset))
    }

    fn resolve(
        &self,
        key: u32,
        pd: PdId,
        va: u64,
        len: u64,
        need: Access,
    ) -> Result<Place<'_>, AccessError> {
        if len == 0 {
            return Ok(Place::empty());
        }
        let mr = self.checked(key, pd, need)?;
        let offset = mr.offset_of(va, len)?;
        // `offset_of` bounded len by the registration's length, which came from a usize.
        Ok(Place::new(&mr.region, offset, len as usize))
    }

    /// The registration `key` names, if it is valid, in `pd` and grants `need`.
    fn checked(&self, key: u32, pd: PdId, need: Access) -> Result<&Mr, AccessError> {
        let mr = self
            .slots
            .get((key >> KEY_BYTE_BITS) as usize)
            .and_then(|slot| slot.mr.as_ref())
            .filter(|mr| mr.key == key)
            .ok_or(AccessError::UnknownKey)?;
        if !mr.valid {
            return Err(AccessError::Invalidated);
        }
        if mr.pd != pd {
            return Err(AccessError::PdMismatch);
        }
        if !mr.access.contains(need) {
            return Err(AccessError::AccessDenied);
        }
        Ok(mr)
    }

    fn take_index(&mut self) -> Option<u32> {
        if let Some(index) = self.free.pop_front() {
            return Some(index);
        }
        let index = u32::try_from(self.slots.len())
            .ok()
            .filter(|&index| index <= MAX_INDEX)?;
        self.slots.push(Slot::default());
        Some(index)
    }
}

impl Mr {
    /// The region offset of `len` bytes at `va`, if they all lie inside the registration.
    /// Overflow-safe for any `va` and `len`.
    fn offset_of(&self, va: u64, len: u64) -> Result<usize, AccessError> {
        let into = va.checked_sub(self.va).ok_or(AccessError::OutOfBounds)?;
        match into.checked_add(len) {
            // `into` is below the registration's length, which came from a usize.
            Some(end) if end <= self.len => Ok(self.offset + into as usize),
            _ => Err(AccessError::OutOfBounds),
        }
    }
}

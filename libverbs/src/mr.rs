//! Memory registration of ordinary memory (`malloc`, `memalign`, the stack, globals).
//!
//! The NIC runs in another process and reaches host memory only through shared memory it maps
//! (a sealed memfd passed over its control socket). So `ibv_reg_mr(addr, len)` re-backs the
//! program's pages with such memory, in place:
//!
//! 1. a new sealed memfd covering the whole pages of `[addr, addr + len)` is made;
//! 2. the pages' current contents are copied into it (`pwrite` from the program's addresses:
//!    an address that is not mapped or not readable fails with EFAULT instead of a crash);
//! 3. the memfd is mapped `MAP_SHARED | MAP_FIXED` over those same pages, so every pointer
//!    the program holds stays valid and now reaches memory the NIC writes into directly — no
//!    copy at completion, and a SIGSTOPped program's buffer still changes;
//! 4. the NIC registers the range at virtual address `addr` (`VaBase::At`), so the addresses
//!    and lengths the peer uses are the program's own.
//!
//! Consequences, documented in docs/libverbs.md:
//! - A buffer that is not page-aligned shares its first and last pages with other data
//!   (malloc's headers, neighbouring objects): those are re-backed too, contents kept, and the
//!   NIC can reach only the registered bytes (its MR bounds the range, as on hardware).
//! - A registration inside pages an earlier, still-registered one re-backed reuses that
//!   memfd (the two MRs see the same memory). One that only partly overlaps earlier ones gets
//!   pages of its own: the earlier registrations keep their memfd, which no longer backs the
//!   overlapping pages — the program should not register partly overlapping ranges (real
//!   RNICs allow it; we log a warning).
//! - `fork`: the re-backed pages are marked `MADV_DONTFORK`, as `ibv_fork_init` does in
//!   rdma-core: the child does not inherit them (touching them there faults), and the parent's
//!   buffer is never shared with or copied for the child.
//! - `ibv_dereg_mr` ends the NIC's access; the pages stay backed by the (now private) memfd
//!   until the program unmaps or frees them, so its pointers stay valid.
//! - A buffer freed (or unmapped) before `ibv_dereg_mr`: the NIC keeps its own mapping of the
//!   memfd, so its writes land in memory nobody sees; nothing crashes.

use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::ptr;
use std::sync::{Arc, Mutex};

use roce_hostmem::{Access, Region, VaBase};
use roce_nic::verbs::MemoryRegion;

use crate::abi::*;
use crate::device::page_size;
use crate::verbs::Pd;
use crate::{fail, guard, set_errno};

versions! {
    "IBVERBS_1.1": [ibv_reg_mr, ibv_dereg_mr]
    "IBVERBS_1.7": [ibv_reg_mr_iova]
    "IBVERBS_1.8": [ibv_reg_mr_iova2]
}

/// Pages this library re-backed, by first address, while a registration uses them.
struct Backing {
    region: Arc<Region>,
    start: usize,
    len: usize,
}

static BACKINGS: Mutex<BTreeMap<usize, Arc<Backing>>> = Mutex::new(BTreeMap::new());

#[repr(C)]
pub struct Mr {
    pub mr: ibv_mr,
    pub inner: MemoryRegion,
    backing: Arc<Backing>,
}

fn errno() -> c_int {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// Whether `[start, start + len)` is still mapped from `backing`'s memfd at the same offsets
/// (the program may have unmapped or freed it and mapped something else there since).
fn still_mapped(backing: &Backing, start: usize, len: usize) -> bool {
    let Some(fd) = backing.region.fd() else {
        return false;
    };
    let Ok(meta) = std::fs::metadata(format!("/proc/self/fd/{}", fd.as_raw_fd())) else {
        return false;
    };
    let ino = std::os::unix::fs::MetadataExt::ino(&meta);
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    let end = start + len;
    let mut covered = start;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), _, Some(offset), _, Some(inode)) =
            (f.next(), f.next(), f.next(), f.next(), f.next())
        else {
            continue;
        };
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi), Ok(offset), Ok(inode)) = (
            usize::from_str_radix(lo, 16),
            usize::from_str_radix(hi, 16),
            usize::from_str_radix(offset, 16),
            inode.parse::<u64>(),
        ) else {
            continue;
        };
        if lo <= covered && covered < hi {
            if inode != ino || offset + (covered - lo) != covered - backing.start {
                return false;
            }
            covered = hi;
            if covered >= end {
                return true;
            }
        }
    }
    false
}

/// Re-backs the whole pages of `[addr, addr + len)` (see the module's documentation), or finds
/// the backing that already covers them.
fn back(addr: usize, len: usize) -> Result<(Arc<Backing>, usize), c_int> {
    let page = page_size();
    let start = addr & !(page - 1);
    let end = addr
        .checked_add(len)
        .and_then(|e| e.checked_add(page - 1))
        .ok_or(libc::EINVAL)?
        & !(page - 1);
    let size = end - start;
    // Every page must be mapped (mincore fails with ENOMEM otherwise): checked before any
    // memory of ours is mapped, which could land on a hole in the range.
    let mut residency = vec![0u8; size / page];
    // SAFETY: mincore only reads the page tables of the range into a buffer of one byte per
    // page.
    if unsafe { libc::mincore(start as *mut c_void, size, residency.as_mut_ptr()) } != 0 {
        return Err(libc::EFAULT);
    }
    let mut backings = BACKINGS.lock().unwrap_or_else(|e| e.into_inner());
    // A backing that already holds these pages, and still backs them.
    if let Some((_, b)) = backings.range(..=start).next_back() {
        if b.start <= start && end <= b.start + b.len && still_mapped(b, start, size) {
            return Ok((Arc::clone(b), addr - b.start));
        }
    }
    if backings
        .values()
        .any(|b| b.start < end && start < b.start + b.len)
    {
        tracing::warn!(
            addr,
            len,
            "a registration partly overlaps the pages of an earlier one: the earlier one no \
             longer backs the shared pages"
        );
    }
    let region = Region::shared(size).map_err(|e| {
        tracing::debug!(%e, "no shared memory for a registration");
        libc::ENOMEM
    })?;
    let fd = region.fd().ok_or(libc::ENOMEM)?.as_raw_fd();
    // Copy the current contents: pwrite reads the program's pages, and says EFAULT for an
    // address that is not mapped or not readable.
    let mut done = 0;
    while done < size {
        // SAFETY: pwrite reads size - done bytes from the program's address range into the
        // memfd; the kernel checks the source addresses.
        let n = unsafe {
            libc::pwrite(
                fd,
                (start + done) as *const c_void,
                size - done,
                done as libc::off_t,
            )
        };
        if n < 0 {
            let e = errno();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(libc::EFAULT);
        }
        done += n as usize;
    }
    // SAFETY: maps the memfd over the program's own pages, which it asked us to register;
    // their contents were copied above, so every pointer into them sees the same bytes.
    let mapped = unsafe {
        libc::mmap(
            start as *mut c_void,
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        )
    };
    if mapped == libc::MAP_FAILED {
        return Err(errno());
    }
    // As ibv_fork_init: a child must not share (or copy-on-write) a buffer the NIC writes.
    // SAFETY: advice on the range just mapped.
    unsafe { libc::madvise(start as *mut c_void, size, libc::MADV_DONTFORK) };
    let backing = Arc::new(Backing {
        region: Arc::new(region),
        start,
        len: size,
    });
    backings.insert(start, Arc::clone(&backing));
    Ok((backing, addr - start))
}

/// Forgets a backing no registration uses any more (its pages stay mapped in the program).
fn release(backing: Arc<Backing>) {
    let mut backings = BACKINGS.lock().unwrap_or_else(|e| e.into_inner());
    // The table's reference and this one.
    if Arc::strong_count(&backing) == 2
        && backings
            .get(&backing.start)
            .is_some_and(|b| Arc::ptr_eq(b, &backing))
    {
        backings.remove(&backing.start);
    }
}

fn access_of(flags: c_int) -> Result<Access, c_int> {
    // Bits beyond the four we implement (MW_BIND, ZERO_BASED, ON_DEMAND, RELAXED_ORDERING,
    // ...) are refused, except relaxed ordering, an optional hint.
    const RELAXED_ORDERING: c_int = 1 << 20;
    let flags = flags & !RELAXED_ORDERING;
    if flags & !0xf != 0 {
        return Err(libc::EINVAL);
    }
    let access = Access::from_bits(flags as u32).ok_or(libc::EINVAL)?;
    // Remote write and atomics need local write, as the IBTA and libibverbs require.
    let needs_local = Access::REMOTE_WRITE.bits() | Access::REMOTE_ATOMIC.bits();
    if access.bits() & needs_local != 0 && !access.contains(Access::LOCAL_WRITE) {
        return Err(libc::EINVAL);
    }
    Ok(access)
}

fn reg(pd: *mut ibv_pd, addr: *mut c_void, len: usize, iova: u64, flags: c_int) -> *mut ibv_mr {
    let fail_with = |errno: c_int| {
        set_errno(errno);
        ptr::null_mut()
    };
    if pd.is_null() || addr.is_null() || len == 0 {
        return fail_with(libc::EINVAL);
    }
    let access = match access_of(flags) {
        Ok(a) => a,
        Err(e) => return fail_with(e),
    };
    // SAFETY: the program's PD came from this library.
    let p = unsafe { Pd::from_ptr(pd) };
    let (backing, offset) = match back(addr as usize, len) {
        Ok(b) => b,
        Err(e) => return fail_with(e),
    };
    let inner = match p
        .inner
        .register_at(&backing.region, offset, len, access, VaBase::At(iova))
    {
        Ok(mr) => mr,
        Err(e) => {
            release(backing);
            return fail_with(fail("ibv_reg_mr", &e));
        }
    };
    p.users.add();
    let mr = Box::new(Mr {
        mr: ibv_mr {
            // SAFETY: the program's PD.
            context: unsafe { (*pd).context },
            pd,
            addr,
            length: len,
            handle: inner.lkey,
            lkey: inner.lkey,
            rkey: inner.rkey,
        },
        inner,
        backing,
    });
    Box::into_raw(mr) as *mut ibv_mr
}

/// `ibv_reg_mr@IBVERBS_1.1`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    access: c_int,
) -> *mut ibv_mr {
    guard(ptr::null_mut(), || reg(pd, addr, len, addr as u64, access))
}

/// `ibv_reg_mr_iova2@IBVERBS_1.8`: the range is known to the peer at `iova`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: u32,
) -> *mut ibv_mr {
    guard(ptr::null_mut(), || {
        reg(pd, addr, len, iova, access as c_int)
    })
}

/// `ibv_reg_mr_iova@IBVERBS_1.7`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_reg_mr_iova(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    len: usize,
    iova: u64,
    access: c_int,
) -> *mut ibv_mr {
    guard(ptr::null_mut(), || reg(pd, addr, len, iova, access))
}

/// `ibv_dereg_mr`.
#[no_mangle]
pub unsafe extern "C" fn roce_ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    if mr.is_null() {
        return libc::EINVAL;
    }
    guard(libc::EIO, || {
        // SAFETY: made by Box::into_raw in reg; the program gives it up with this call.
        let mr = unsafe { Box::from_raw(mr as *mut Mr) };
        let Mr { mr, inner, backing } = *mr;
        drop(inner);
        release(backing);
        // SAFETY: an MR's PD outlives it (its dealloc answers EBUSY until then).
        let pd = unsafe { Pd::from_ptr(mr.pd) };
        pd.users.remove();
        0
    })
}

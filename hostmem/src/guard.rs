//! Mappings of files that someone else may shrink, made safe to touch.
//!
//! A process that maps a shared file and touches a page past the file's end gets SIGBUS, which
//! kills it. A sealed memfd cannot shrink (see [`crate::Region::shared`]), but a named region in
//! /dev/shm cannot be sealed: its owner may `ftruncate` it while the NIC copies into it. So the
//! NIC maps such files *guarded*: a SIGBUS handler looks the faulting address up in a table of
//! guarded ranges, puts a private zero page over the page that vanished (the copy then carries on
//! into or out of that page), and marks the range as faulted. The copy's caller asks
//! [`Guard::faulted`] afterwards and refuses the access; the mapping answers every later access
//! with an error too. The Wayland compositors protect themselves from their clients' shared
//! buffers the same way.
//!
//! Faults outside every guarded range go to the handler that was there before (Rust's own, for
//! stack overflows), or to the default action: a real bug still crashes as it should.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Most guarded mappings at once in one process.
pub const MAX_GUARDED: usize = 4096;

struct Slot {
    /// Start of the range; 0 while the slot is free or being filled.
    start: AtomicUsize,
    /// Length of the range; non-zero once the slot is taken.
    len: AtomicUsize,
    faulted: AtomicBool,
}

#[allow(clippy::declare_interior_mutable_const)] // the template of the array's slots
const FREE: Slot = Slot {
    start: AtomicUsize::new(0),
    len: AtomicUsize::new(0),
    faulted: AtomicBool::new(false),
};

static SLOTS: [Slot; MAX_GUARDED] = [FREE; MAX_GUARDED];

/// The handler that was installed before ours, to pass foreign faults on to. Written once,
/// before our handler is installed, and only read afterwards.
static mut PREVIOUS: MaybeUninit<libc::sigaction> = MaybeUninit::uninit();
static INSTALL: Once = Once::new();

/// A guarded range; dropping it stops guarding (drop it before unmapping the range).
#[derive(Debug)]
pub struct Guard {
    slot: usize,
}

impl Guard {
    /// Guards `len` bytes from `start`, or `None` if [`MAX_GUARDED`] ranges are guarded
    /// already.
    pub fn new(start: *mut u8, len: usize) -> Option<Guard> {
        install();
        for (slot, s) in SLOTS.iter().enumerate() {
            if s.len
                .compare_exchange(0, len, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                s.faulted.store(false, Ordering::SeqCst);
                s.start.store(start as usize, Ordering::SeqCst);
                return Some(Guard { slot });
            }
        }
        None
    }

    /// Whether a page of the range vanished under an access (and was replaced by zeros).
    pub fn faulted(&self) -> bool {
        SLOTS[self.slot].faulted.load(Ordering::SeqCst)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let s = &SLOTS[self.slot];
        s.start.store(0, Ordering::SeqCst);
        s.len.store(0, Ordering::SeqCst);
    }
}

fn install() {
    INSTALL.call_once(|| {
        // SAFETY: a zeroed sigaction is a valid value; sigaction gets valid pointers. PREVIOUS
        // is written here, before the handler that reads it can run.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let previous = &raw mut PREVIOUS;
            libc::sigaction(libc::SIGBUS, &action, (*previous).as_mut_ptr());
        }
    });
}

/// Async-signal-safe: atomics, `mmap` and `sigaction` only.
extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    for s in &SLOTS {
        let start = s.start.load(Ordering::SeqCst);
        let len = s.len.load(Ordering::SeqCst);
        if start == 0 || addr < start || addr - start >= len {
            continue;
        }
        // SAFETY: sysconf is async-signal-safe; the page lies inside a range this process
        // mapped and guards, so replacing it touches nothing else.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE).max(4096) as usize;
            let at = addr & !(page - 1);
            let zero = libc::mmap(
                at as *mut libc::c_void,
                page,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            if zero != libc::MAP_FAILED {
                s.faulted.store(true, Ordering::SeqCst);
                // Returning retries the access, now on the zero page.
                return;
            }
        }
    }
    // Not ours: what would have happened without us.
    // SAFETY: PREVIOUS was written before this handler was installed.
    unsafe {
        let previous = &*(&raw const PREVIOUS).cast::<libc::sigaction>();
        let handler = previous.sa_sigaction;
        if previous.sa_flags & libc::SA_SIGINFO != 0 && handler > libc::SIG_IGN {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(handler);
            f(signal, info, context);
        } else if handler > libc::SIG_IGN {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            f(signal);
        } else {
            // The default action: the access faults again and the process dies of SIGBUS.
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGBUS, &default, std::ptr::null_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_taken_and_given_back() {
        let a = Guard::new(0x1000 as *mut u8, 4096).unwrap();
        let b = Guard::new(0x3000 as *mut u8, 4096).unwrap();
        assert_ne!(a.slot, b.slot);
        assert!(!a.faulted());
        let freed = a.slot;
        drop(a);
        assert_eq!(SLOTS[freed].len.load(Ordering::SeqCst), 0);
    }
}

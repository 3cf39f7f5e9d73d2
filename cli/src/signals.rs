//! Ctrl-C, SIGTERM and SIGHUP as events a long-running command asks about, instead of handlers
//! that interrupt it: the signals are blocked in every thread (threads started later inherit the
//! mask) and taken with `sigwait`/`sigtimedwait` where the command is ready to shut down. SIGHUP
//! is among them so that a NIC started from a terminal that closes still cleans up its socket
//! and shared memory.

use std::mem::MaybeUninit;
use std::time::Duration;

/// SIGINT, SIGTERM and SIGHUP, blocked.
pub struct Shutdown {
    set: libc::sigset_t,
}

impl Shutdown {
    /// Blocks SIGINT, SIGTERM and SIGHUP in this thread. Call before starting any thread.
    pub fn block() -> Shutdown {
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set before it is read; the other calls get a
        // valid, initialised set.
        let set = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            let mut set = set.assume_init();
            libc::sigaddset(&mut set, libc::SIGINT);
            libc::sigaddset(&mut set, libc::SIGTERM);
            libc::sigaddset(&mut set, libc::SIGHUP);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            set
        };
        Shutdown { set }
    }

    /// Sleeps until one of the signals arrives; returns its name.
    pub fn wait(&self) -> &'static str {
        let mut signal = 0;
        // SAFETY: a valid set and a valid out-parameter. sigwait only fails for a bad set.
        unsafe { libc::sigwait(&self.set, &mut signal) };
        name(signal)
    }

    /// The signal that arrived within `timeout`, if one did.
    pub fn within(&self, timeout: Duration) -> Option<&'static str> {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a valid set and timespec; the siginfo out-parameter may be null.
        let signal = unsafe { libc::sigtimedwait(&self.set, std::ptr::null_mut(), &ts) };
        (signal > 0).then(|| name(signal))
    }
}

fn name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "SIGINT",
    }
}

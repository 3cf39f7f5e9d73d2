//! How an idle engine is woken: it sleeps in `poll(2)` on an eventfd (and on its links' file
//! descriptors, and on one eventfd per host program in another process), and anyone with work
//! for it — a doorbell, a frame from an in-process link, a
//! control command — writes to the eventfd. Writing costs a system call, so it is done only when
//! the engine has said it is about to sleep; while it is busy polling, a doorbell is just a store
//! to memory, as with a hardware NIC's doorbell record.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::eventfd::EventFd;

/// A file descriptor a sleeping engine watches, and for what.
#[derive(Debug, Clone, Copy)]
pub struct Interest {
    fd: RawFd,
    events: libc::c_short,
}

impl Interest {
    /// Wake when `fd` has something to read (a frame, bytes from a host), when it can take
    /// bytes again (a host drained its stream), or either.
    pub fn new(fd: RawFd, readable: bool, writable: bool) -> Interest {
        let mut events = 0;
        if readable {
            events |= libc::POLLIN;
        }
        if writable {
            events |= libc::POLLOUT;
        }
        Interest { fd, events }
    }
}

/// One engine's wake-up line.
#[derive(Debug)]
pub struct Waker {
    /// Non-zero while the engine sleeps (or is about to).
    sleeping: SharedWord,
    eventfd: EventFd,
    /// The doorbells of host programs in other processes, one each (a word in memory that host
    /// maps, and an eventfd): a host that clears its "sleeping" word or drains its eventfd
    /// only keeps its own doorbells from waking the engine, never another host's.
    hosts: Mutex<Arc<[Arc<Waker>]>>,
}

/// A 32-bit word that another process may map as well.
#[derive(Debug)]
pub struct SharedWord {
    word: *const AtomicU32,
    /// Keeps the memory behind `word` mapped.
    _keep: Arc<dyn Send + Sync + std::fmt::Debug>,
}

// SAFETY: the word is only accessed atomically, and `_keep` keeps its memory alive.
unsafe impl Send for SharedWord {}
// SAFETY: as for Send: every access to the word is atomic.
unsafe impl Sync for SharedWord {}

impl SharedWord {
    /// A word private to this process.
    pub fn private() -> SharedWord {
        let keep = Arc::new(AtomicU32::new(0));
        SharedWord {
            word: Arc::as_ptr(&keep),
            _keep: keep,
        }
    }

    /// A word at `ptr`, which stays valid as long as `keep` lives and is 4-byte aligned.
    ///
    /// # Safety
    /// `ptr` must be 4-byte aligned and point into memory that `keep` keeps mapped.
    pub unsafe fn at(ptr: *mut u8, keep: Arc<dyn Send + Sync + std::fmt::Debug>) -> SharedWord {
        SharedWord {
            word: ptr as *const AtomicU32,
            _keep: keep,
        }
    }

    pub fn get(&self) -> &AtomicU32 {
        // SAFETY: see the constructors.
        unsafe { &*self.word }
    }
}

impl AsFd for Waker {
    /// The eventfd that wakes the engine, to hand to host programs in other processes.
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.eventfd.as_fd()
    }
}

impl Waker {
    pub fn new(sleeping: SharedWord) -> io::Result<Arc<Waker>> {
        Ok(Waker::with_eventfd(sleeping, EventFd::new()?))
    }

    /// A waker whose eventfd another process handed over.
    pub fn from_parts(sleeping: SharedWord, eventfd: OwnedFd) -> Arc<Waker> {
        Waker::with_eventfd(sleeping, EventFd::from_fd(eventfd))
    }

    fn with_eventfd(sleeping: SharedWord, eventfd: EventFd) -> Arc<Waker> {
        Arc::new(Waker {
            sleeping,
            eventfd,
            hosts: Mutex::new(Arc::new([])),
        })
    }

    /// Engine side: also listen to `host`'s doorbell, until [`Waker::remove_host`].
    pub fn add_host(&self, host: &Arc<Waker>) {
        self.change_hosts(|hosts| hosts.push(Arc::clone(host)));
    }

    /// Engine side: stop listening to `host`'s doorbell.
    pub fn remove_host(&self, host: &Arc<Waker>) {
        self.change_hosts(|hosts| hosts.retain(|h| !Arc::ptr_eq(h, host)));
    }

    fn change_hosts(&self, change: impl FnOnce(&mut Vec<Arc<Waker>>)) {
        {
            let mut hosts = self.hosts();
            let mut list = hosts.to_vec();
            change(&mut list);
            *hosts = list.into();
        }
        // A sleeping engine looks at the new list.
        self.signal();
    }

    fn hosts(&self) -> std::sync::MutexGuard<'_, Arc<[Arc<Waker>]>> {
        self.hosts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes the engine if it sleeps. Call after publishing the work (the store that makes the
    /// work visible must come first; both sides use sequentially consistent ordering so that
    /// either the engine sees the work or we see it sleeping).
    pub fn wake(&self) {
        // The store that published the work may be a plain release store (a channel push); keep
        // it from being reordered after this load, or both sides could miss each other.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.get().load(Ordering::SeqCst) != 0 {
            self.signal();
        }
    }

    /// Wakes the engine unconditionally.
    pub fn signal(&self) {
        self.eventfd.signal();
    }

    /// Engine side: announce the intention to sleep. After this, re-check every work source
    /// before calling [`Waker::sleep`].
    pub fn prepare_sleep(&self) {
        self.sleeping.get().store(1, Ordering::SeqCst);
        for host in self.hosts().iter() {
            host.sleeping.get().store(1, Ordering::SeqCst);
        }
    }

    /// Whether the engine says it sleeps (or is about to).
    pub fn asleep(&self) -> bool {
        self.sleeping.get().load(Ordering::Relaxed) != 0
    }

    /// Engine side: back to busy.
    pub fn awake(&self) {
        self.sleeping.get().store(0, Ordering::SeqCst);
        for host in self.hosts().iter() {
            host.sleeping.get().store(0, Ordering::SeqCst);
        }
    }

    /// Engine side: sleeps until the eventfd is readable, one of `interests` is ready, or
    /// `timeout` passes.
    ///
    /// `pollfds` is scratch space the caller keeps, so that sleeping allocates nothing.
    pub fn sleep(
        &self,
        interests: &[Interest],
        timeout: Option<Duration>,
        pollfds: &mut Vec<libc::pollfd>,
    ) {
        // Held for the sleep, so that no host's eventfd closes while it is polled.
        let hosts = Arc::clone(&self.hosts());
        pollfds.clear();
        pollfds.extend(
            std::iter::once(self)
                .chain(hosts.iter().map(|h| &**h))
                .map(|w| libc::pollfd {
                    fd: w.eventfd.as_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }),
        );
        pollfds.extend(interests.iter().map(|i| libc::pollfd {
            fd: i.fd,
            events: i.events,
            revents: 0,
        }));
        // ppoll, not poll: poll's timeout is in milliseconds, and rounded up it turned every
        // sub-millisecond timer (the low retransmission timer's 100 µs, a probe after a few
        // round trips) into a millisecond or more of idle line. Capped to keep the engine
        // responsive.
        let wait = timeout.map(|t| {
            let t = t.min(Duration::from_secs(1));
            libc::timespec {
                tv_sec: t.as_secs() as libc::time_t,
                tv_nsec: t.subsec_nanos() as libc::c_long,
            }
        });
        let wait_ptr = wait
            .as_ref()
            .map_or(std::ptr::null(), |w| w as *const libc::timespec);
        // SAFETY: `pollfds` is a valid array of pollfd; `wait_ptr` is NULL or a live timespec;
        // no signal mask is changed (NULL).
        unsafe {
            libc::ppoll(
                pollfds.as_mut_ptr(),
                pollfds.len() as libc::nfds_t,
                wait_ptr,
                std::ptr::null(),
            )
        };
        for w in std::iter::once(self).chain(hosts.iter().map(|h| &**h)) {
            w.eventfd.drain();
        }
        self.awake();
    }
}

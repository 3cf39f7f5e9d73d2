//! A cable in shared memory between two NIC processes on one machine (`--link shm:NAME`, both
//! ends named alike): two single-producer, single-consumer rings of frame slots in
//! `/dev/shm/roce-link-NAME`, one each way. A frame costs one copy in and one copy out and no
//! system call while both engines are busy; the frames of one engine pass are published
//! together, at [`Link::flush_sends`]; an engine that sleeps is woken through a FIFO
//! (`/dev/shm/roce-link-NAME-wake0`/`-wake1`), written only when it asked for it.
//!
//! The first process to open the name creates the file and takes end 0; the second takes end 1.
//! An end whose process has died may be taken over, so a NIC can be restarted; the last end to
//! leave removes the files. The peer is another process and may misbehave: every index and
//! length read from the shared memory is clamped, so a corrupt ring can lose or garble frames
//! but never make us read or write outside it.
//!
//! ```text
//! offset 0     magic (u32, set last by the creator), version (u32)
//! offset 64    end 0's owner (pid, u32); offset 68: end 1's owner
//! offset 128   ring 0 → 1, then ring 1 → 0; each:
//!              +0 producer index (u32), +64 consumer index (u32), +96 wake-wanted flag (u32),
//!              +128 slots: length (u32), then the frame
//! ```

use std::cell::Cell;
use std::collections::hash_map::DefaultHasher;
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::hash::{Hash, Hasher};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Region, RegionError};

use super::Link;
use crate::buf::{BufPool, FrameBuf, FRAME_CAPACITY};
use crate::waker::Waker;

const MAGIC: u32 = 0x524c_4e4b; // "RLNK"
const VERSION: u32 = 1;
const OWNERS: usize = 64;
const RINGS: usize = 128;
const PRODUCER: usize = 0;
const CONSUMER: usize = 64;
const WAKE_WANTED: usize = 96;
const RING_HEADER: usize = 128;
/// Frames that may wait in one direction (like [`super::mem::QUEUE_DEPTH`]).
pub const SLOTS: u32 = 1024;
const SLOT_SIZE: usize = (4 + FRAME_CAPACITY).next_multiple_of(64);
const RING_BYTES: usize = RING_HEADER + SLOTS as usize * SLOT_SIZE;
const FILE_BYTES: usize = RINGS + 2 * RING_BYTES;
/// Room kept for acknowledgements when the engine is told to hold back data.
const HEADROOM: u32 = 64;

/// Why a shared-memory link could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ShmLinkError {
    #[error("{0:?} is not a link name: use letters, digits, '-' and '_' (at most 64)")]
    Name(String),
    #[error("the shared-memory link {0} already has two ends, both alive")]
    Full(String),
    #[error("/dev/shm/roce-link-{0} is not a shared-memory link (or of another version)")]
    NotALink(String),
    #[error("shared-memory link {name}: {source}")]
    Region { name: String, source: RegionError },
    #[error("shared-memory link {name}: {source}")]
    Io { name: String, source: io::Error },
}

impl From<ShmLinkError> for io::Error {
    fn from(e: ShmLinkError) -> io::Error {
        let kind = match &e {
            ShmLinkError::Name(_) | ShmLinkError::NotALink(_) => io::ErrorKind::InvalidInput,
            ShmLinkError::Full(_) => io::ErrorKind::AddrInUse,
            ShmLinkError::Region { .. } => io::ErrorKind::Other,
            ShmLinkError::Io { source, .. } => source.kind(),
        };
        io::Error::new(kind, e)
    }
}

/// One direction of the link in the mapping.
struct FrameRing {
    base: *mut u8,
}

impl FrameRing {
    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: the ring header lies within the mapping, 64-byte aligned; `at` is a multiple
        // of 4 within it.
        unsafe { &*(self.base.add(at) as *const AtomicU32) }
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let i = (index % SLOTS) as usize;
        // SAFETY: i < SLOTS, so the slot lies within the ring.
        unsafe { self.base.add(RING_HEADER + i * SLOT_SIZE) }
    }
}

/// One end of a shared-memory link.
pub struct ShmLink {
    name: String,
    end: usize,
    /// Keeps the mapping alive (`tx` and `rx` point into it).
    region: Arc<Region>,
    tx: FrameRing,
    rx: FrameRing,
    /// Our next slot to write, and the next to read (the copies in shared memory are the
    /// other side's to trust or not; these are ours).
    head: u32,
    tail: u32,
    /// The producer index the peer last saw: frames written since are published together at
    /// [`Link::flush_sends`], with one fenced store (and one look at the wake-up flag) per
    /// batch instead of per frame.
    published: u32,
    /// Our wake-up FIFO (read) and the peer's (write).
    wake_me: File,
    wake_peer: File,
    /// Set by `poll_fd` when it asked the peer for a wake-up, so that `recv` takes it back.
    armed: Cell<bool>,
    pool: Option<Arc<BufPool>>,
}

// SAFETY: the ring pointers point into `region`, which the link owns (an Arc) and which stays
// mapped while it lives; shared data is touched only through atomics and slot copies handed
// over by them. `armed` is only used by the thread that owns the link.
unsafe impl Send for ShmLink {}

fn check_name(name: &str) -> Result<(), ShmLinkError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ShmLinkError::Name(name.to_owned()))
    }
}

fn region_name(name: &str) -> String {
    format!("link-{name}")
}

fn fifo_path(name: &str, end: usize) -> PathBuf {
    PathBuf::from(format!("/dev/shm/roce-link-{name}-wake{end}"))
}

fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    pid != 0
        && (unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

impl ShmLink {
    /// Opens end 0 or end 1 of the link `name`, creating it if nobody has yet.
    pub fn open(name: &str) -> Result<ShmLink, ShmLinkError> {
        check_name(name)?;
        let region_error = |source| ShmLinkError::Region {
            name: name.to_owned(),
            source,
        };
        let io_error = |source| ShmLinkError::Io {
            name: name.to_owned(),
            source,
        };
        let (region, created) = match Region::create_persistent(&region_name(name), FILE_BYTES) {
            Ok(region) => (region, true),
            Err(RegionError::Exists { .. }) => (
                Region::attach(&region_name(name)).map_err(region_error)?,
                false,
            ),
            Err(e) => return Err(region_error(e)),
        };
        if region.len() < FILE_BYTES {
            return Err(ShmLinkError::NotALink(name.to_owned()));
        }
        let region = Arc::new(region);
        let word = |at: usize| {
            // SAFETY: `at` is a 4-aligned offset within the first page of the mapping.
            unsafe { &*(region.as_ptr().add(at) as *const AtomicU32) }
        };
        if created {
            for end in 0..2 {
                make_fifo(&fifo_path(name, end)).map_err(io_error)?;
            }
            word(4).store(VERSION, Ordering::SeqCst);
            word(0).store(MAGIC, Ordering::SeqCst);
        } else {
            // The creator may still be laying the file out.
            let deadline = Instant::now() + Duration::from_secs(2);
            while word(0).load(Ordering::SeqCst) != MAGIC {
                if Instant::now() > deadline {
                    return Err(ShmLinkError::NotALink(name.to_owned()));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            if word(4).load(Ordering::SeqCst) != VERSION {
                return Err(ShmLinkError::NotALink(name.to_owned()));
            }
        }
        let me = std::process::id();
        let end = (0..2)
            .find(|&end| {
                let owner = word(OWNERS + 4 * end);
                let current = owner.load(Ordering::SeqCst);
                (current == 0 || !alive(current))
                    && owner
                        .compare_exchange(current, me, Ordering::SeqCst, Ordering::SeqCst)
                        .is_ok()
            })
            .ok_or_else(|| ShmLinkError::Full(name.to_owned()))?;
        let ring = |n: usize| FrameRing {
            // SAFETY: both rings lie within the mapping (its length was checked).
            base: unsafe { region.as_ptr().add(RINGS + n * RING_BYTES) },
        };
        let (tx, rx) = (ring(end), ring(1 - end));
        let open_fifo = |end: usize| {
            OpenOptions::new()
                .read(true)
                .write(true)
                .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(fifo_path(name, end))
        };
        let (wake_me, wake_peer) = match (open_fifo(end), open_fifo(1 - end)) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(e), _) | (_, Err(e)) => {
                word(OWNERS + 4 * end).store(0, Ordering::SeqCst);
                return Err(io_error(e));
            }
        };
        let head = tx.word(PRODUCER).load(Ordering::SeqCst);
        let tail = rx.word(CONSUMER).load(Ordering::SeqCst);
        tracing::debug!(link = name, end, "shared-memory link open");
        Ok(ShmLink {
            name: name.to_owned(),
            end,
            region,
            tx,
            rx,
            head,
            tail,
            published: head,
            wake_me,
            wake_peer,
            armed: Cell::new(false),
            pool: None,
        })
    }

    /// Which end this is (0 for the process that created the link).
    pub fn end(&self) -> usize {
        self.end
    }

    fn owner(&self, end: usize) -> &AtomicU32 {
        // SAFETY: as in `open`: a 4-aligned offset within the first page of the mapping.
        unsafe { &*(self.region.as_ptr().add(OWNERS + 4 * end) as *const AtomicU32) }
    }

    /// Slots the peer has not yet read, as far as we can tell.
    fn in_flight(&self) -> u32 {
        let consumed = self.tx.word(CONSUMER).load(Ordering::Acquire);
        self.head.wrapping_sub(consumed).min(SLOTS)
    }

    /// Frames the peer has published that we have not read, clamped to what a well-behaved
    /// peer could have written.
    fn available(&self) -> u32 {
        let produced = self.rx.word(PRODUCER).load(Ordering::Acquire);
        produced.wrapping_sub(self.tail).min(SLOTS)
    }

    fn take_buf(&mut self) -> FrameBuf {
        self.pool.get_or_insert_with(|| BufPool::new(64)).take()
    }
}

fn make_fifo(path: &std::path::Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // A FIFO left by a crashed pair is reused.
    let _ = std::fs::remove_file(path);
    // SAFETY: a valid C string; mkfifo only creates a file.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl Link for ShmLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        if self.in_flight() >= SLOTS {
            return Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "shared-memory link full",
            ));
        }
        let slot = self.tx.slot(self.head);
        let len = frame.len().min(FRAME_CAPACITY);
        // SAFETY: the slot holds 4 + FRAME_CAPACITY bytes and is ours until we publish it (the
        // peer has consumed it: in_flight < SLOTS).
        unsafe {
            std::ptr::write_unaligned(slot.cast::<u32>(), len as u32);
            std::ptr::copy_nonoverlapping(frame.as_ptr(), slot.add(4), len);
        }
        self.head = self.head.wrapping_add(1);
        Ok(())
    }

    /// Publishes the frames written since the last call, and wakes the peer if it asked.
    fn flush_sends(&mut self) -> u64 {
        if self.published == self.head {
            return 0;
        }
        self.published = self.head;
        self.tx.word(PRODUCER).store(self.head, Ordering::SeqCst);
        // The peer asked to be woken (it may be going to sleep): tell it, once.
        if self.tx.word(WAKE_WANTED).load(Ordering::SeqCst) != 0
            && self.tx.word(WAKE_WANTED).swap(0, Ordering::SeqCst) != 0
        {
            let _ = (&self.wake_peer).write(&[1]);
        }
        0
    }

    fn can_send(&self) -> bool {
        self.in_flight() + HEADROOM < SLOTS
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_sends();
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        if self.armed.replace(false) {
            self.rx.word(WAKE_WANTED).store(0, Ordering::SeqCst);
            let mut drain = [0u8; 64];
            while matches!((&self.wake_me).read(&mut drain), Ok(n) if n > 0) {}
        }
        if self.available() == 0 {
            return Ok(None);
        }
        let slot = self.rx.slot(self.tail);
        let mut buf = self.take_buf();
        // SAFETY: the slot lies within the ring; the length read from it is clamped to the
        // slot's room and to the buffer's.
        unsafe {
            let len = (std::ptr::read_unaligned(slot.cast::<u32>()) as usize).min(FRAME_CAPACITY);
            std::ptr::copy_nonoverlapping(slot.add(4), buf.space().as_mut_ptr(), len);
            buf.set_len(len);
        }
        self.tail = self.tail.wrapping_add(1);
        self.rx.word(CONSUMER).store(self.tail, Ordering::Release);
        Ok(Some(buf))
    }

    fn attach(&mut self, pool: &Arc<BufPool>, _waker: &Arc<Waker>) {
        self.pool = Some(Arc::clone(pool));
    }

    /// The engine asks just before it sleeps: ask the peer for a wake-up, and wake ourselves
    /// if a frame slipped in before the peer could see the request.
    fn poll_fd(&self) -> Option<RawFd> {
        self.armed.set(true);
        self.rx.word(WAKE_WANTED).store(1, Ordering::SeqCst);
        if self.available() > 0 {
            let _ = (&self.wake_me).write(&[1]);
        }
        Some(self.wake_me.as_raw_fd())
    }

    fn describe(&self) -> String {
        format!("shared-memory link {} (end {})", self.name, self.end)
    }
}

impl Drop for ShmLink {
    fn drop(&mut self) {
        self.owner(self.end).store(0, Ordering::SeqCst);
        let other = self.owner(1 - self.end).load(Ordering::SeqCst);
        if !alive(other) {
            let _ = Region::remove(&region_name(&self.name));
            for end in 0..2 {
                let _ = std::fs::remove_file(fifo_path(&self.name, end));
            }
        }
    }
}

/// A name for a link that no other process is using, for tests and benchmarks.
pub fn unique_name(label: &str) -> String {
    let mut h = DefaultHasher::new();
    (std::process::id(), Instant::now()).hash(&mut h);
    format!(
        "{label}-{}-{:x}",
        std::process::id(),
        h.finish() & 0xffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recv_within(link: &mut ShmLink) -> FrameBuf {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(frame) = link.recv().unwrap() {
                return frame;
            }
            assert!(Instant::now() < deadline, "no frame within 5 s");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn frames_cross_both_ways_whole_and_in_order_and_the_files_go_with_the_last_end() {
        let name = unique_name("t");
        let mut a = ShmLink::open(&name).unwrap();
        let mut b = ShmLink::open(&name).unwrap();
        assert_eq!((a.end(), b.end()), (0, 1));
        assert!(matches!(ShmLink::open(&name), Err(ShmLinkError::Full(_))));
        let pool = BufPool::new(8);
        let big: Vec<u8> = (0..FRAME_CAPACITY).map(|i| i as u8).collect();
        for round in 0..3 * SLOTS {
            a.send(pool.copy_of(&round.to_le_bytes())).unwrap();
            a.flush_sends();
            assert_eq!(&recv_within(&mut b)[..], &round.to_le_bytes());
        }
        a.send(pool.copy_of(&big)).unwrap();
        b.send(pool.copy_of(b"back")).unwrap();
        // Written but not yet published: the peer sees nothing before the flush.
        assert!(b.recv().unwrap().is_none());
        a.flush_sends();
        b.flush_sends();
        assert_eq!(&recv_within(&mut b)[..], &big[..]);
        assert_eq!(&recv_within(&mut a)[..], b"back");
        assert!(a.recv().unwrap().is_none());
        drop(a);
        assert!(std::path::Path::new(&format!("/dev/shm/roce-link-{name}")).exists());
        drop(b);
        assert!(!std::path::Path::new(&format!("/dev/shm/roce-link-{name}")).exists());
        assert!(!fifo_path(&name, 0).exists());
    }

    #[test]
    fn a_full_link_refuses_and_tells_the_engine_to_hold_back() {
        let name = unique_name("full");
        let mut a = ShmLink::open(&name).unwrap();
        let mut b = ShmLink::open(&name).unwrap();
        let pool = BufPool::new(8);
        let mut sent = 0;
        while a.can_send() {
            a.send(pool.copy_of(b"x")).unwrap();
            sent += 1;
        }
        assert_eq!(sent, SLOTS - HEADROOM);
        for _ in 0..HEADROOM {
            a.send(pool.copy_of(b"ack")).unwrap();
        }
        assert!(a.send(pool.copy_of(b"one too many")).is_err());
        a.flush_sends();
        assert!(b.recv().unwrap().is_some());
        assert!(a.send(pool.copy_of(b"room again")).is_ok());
    }

    #[test]
    fn a_sleeping_end_is_woken_through_its_fifo() {
        let name = unique_name("wake");
        let mut a = ShmLink::open(&name).unwrap();
        let mut b = ShmLink::open(&name).unwrap();
        let fd = b.poll_fd().unwrap();
        let readable = |fd: RawFd| {
            let mut p = libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, 0) == 1 }
        };
        assert!(!readable(fd), "nothing sent yet");
        let pool = BufPool::new(8);
        a.send(pool.copy_of(b"wake up")).unwrap();
        assert!(
            !readable(fd),
            "not woken before the pass's frames are published"
        );
        a.flush_sends();
        assert!(readable(fd));
        assert_eq!(&b.recv().unwrap().unwrap()[..], b"wake up");
        assert!(!readable(fd), "the wake-up was taken back");
        // Not asked again: sending does not write to the FIFO.
        a.send(pool.copy_of(b"busy")).unwrap();
        a.flush_sends();
        assert!(!readable(fd));
        // A frame that came before the request wakes at once.
        assert!(readable(b.poll_fd().unwrap()));
    }

    #[test]
    fn names_are_checked() {
        for bad in ["", "a/b", "..", &"x".repeat(65)] {
            assert!(matches!(ShmLink::open(bad), Err(ShmLinkError::Name(_))));
        }
    }
}

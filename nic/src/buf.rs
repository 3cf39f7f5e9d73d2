//! Frame buffers that are recycled instead of allocated: the data path takes one from a pool,
//! builds a frame in it, hands it to a link, and when the last holder drops it the buffer goes
//! back to the pool it came from. After warm-up no frame costs an allocation.
//!
//! The pool hands out the buffer returned last: it is still in the cache (a frame is built, sent
//! and dropped within one engine pass), where the oldest idle buffer of a few hundred would be
//! cold — and every frame would start with cache misses on its header and payload.
//!
//! Each thread keeps a small stack of idle buffers of its own in front of the pools
//! ([`SPARE_MAX`]): two NICs in one process take every frame from one engine's pool and give it
//! back from the other engine's thread, and a shared stack behind a lock had the two cores meet
//! at it for every frame. Now a thread goes to a pool only when its stack is empty or full, and
//! moves [`SPARE_MOVE`] buffers at once.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, MutexGuard};

/// Room for the largest frame any link carries: a 9000-byte jumbo frame plus headers.
pub const FRAME_CAPACITY: usize = 9216;

/// Most idle buffers a thread keeps of its own.
const SPARE_MAX: usize = 64;
/// Buffers a thread moves between its stack and a pool at once.
const SPARE_MOVE: usize = SPARE_MAX / 2;

thread_local! {
    /// This thread's idle buffers, the most recently returned last (whichever pool they came
    /// from: all are [`FRAME_CAPACITY`] bytes).
    static SPARE: RefCell<Vec<Box<[u8]>>> = const { RefCell::new(Vec::new()) };
}

/// A bounded stock of frame buffers, shared by everyone who sends frames through one device.
#[derive(Debug)]
pub struct BufPool {
    /// Idle buffers, the most recently returned last. A lock, not a lock-free queue: buffers
    /// come back mostly from the thread that takes them, so it is uncontended, and a queue would
    /// hand out the coldest buffer.
    free: Mutex<Vec<Box<[u8]>>>,
    capacity: usize,
}

impl BufPool {
    /// A pool that keeps at most `capacity` idle buffers (more may exist while in flight).
    pub fn new(capacity: usize) -> Arc<BufPool> {
        let capacity = capacity.max(1);
        Arc::new(BufPool {
            free: Mutex::new(Vec::with_capacity(capacity)),
            capacity,
        })
    }

    /// A pool like [`BufPool::new`], stocked with `stock` buffers up front so that the data path
    /// does not allocate while it warms up or when a burst briefly needs more frames than usual.
    pub fn stocked(capacity: usize, stock: usize) -> Arc<BufPool> {
        let pool = BufPool::new(capacity);
        pool.free()
            .extend((0..stock.min(capacity)).map(|_| vec![0u8; FRAME_CAPACITY].into_boxed_slice()));
        pool
    }

    fn free(&self) -> MutexGuard<'_, Vec<Box<[u8]>>> {
        // A panic while holding the lock cannot leave the vector half-changed.
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes back a buffer: onto this thread's stack, which gives its oldest half to this pool
    /// when full; a full pool frees what it has no room for (enough buffers are idle already).
    fn give_back(&self, data: Box<[u8]>) {
        let mut data = Some(data);
        // Fails only while the thread exits (its stack is gone): then the buffer goes to the
        // pool.
        let _ = SPARE.try_with(|spare| {
            let mut spare = spare.borrow_mut();
            if spare.len() >= SPARE_MAX {
                let oldest = spare.drain(..SPARE_MOVE);
                let mut free = self.free();
                let room = self.capacity.saturating_sub(free.len());
                free.extend(oldest.take(room));
            }
            // Room for the whole stack at once: once warm, a thread never grows it.
            spare.reserve_exact(SPARE_MAX);
            spare.extend(data.take());
        });
        if let Some(data) = data {
            let mut free = self.free();
            if free.len() < self.capacity {
                free.push(data);
            }
        }
    }

    /// A buffer of [`FRAME_CAPACITY`] bytes with length 0: from this thread's stack, which
    /// takes the most recently returned of this pool's when empty.
    pub fn take(self: &Arc<Self>) -> FrameBuf {
        let data = SPARE
            .try_with(|spare| {
                let mut spare = spare.borrow_mut();
                if spare.is_empty() {
                    spare.reserve_exact(SPARE_MAX);
                    let mut free = self.free();
                    let newest = free.len().saturating_sub(SPARE_MOVE);
                    spare.extend(free.drain(newest..));
                }
                spare.pop()
            })
            .unwrap_or_else(|_| self.free().pop())
            .unwrap_or_else(|| vec![0u8; FRAME_CAPACITY].into_boxed_slice());
        FrameBuf {
            data: Some(data),
            len: 0,
            home: Arc::clone(self),
        }
    }

    /// A buffer holding a copy of `bytes` (truncated to the capacity).
    pub fn copy_of(self: &Arc<Self>, bytes: &[u8]) -> FrameBuf {
        let mut buf = self.take();
        let n = bytes.len().min(FRAME_CAPACITY);
        buf.space()[..n].copy_from_slice(&bytes[..n]);
        buf.set_len(n);
        buf
    }
}

/// One frame's bytes on their way through the device and its links.
pub struct FrameBuf {
    data: Option<Box<[u8]>>,
    len: usize,
    home: Arc<BufPool>,
}

impl FrameBuf {
    /// The whole buffer, to build a frame in.
    pub fn space(&mut self) -> &mut [u8] {
        self.data.as_deref_mut().unwrap_or_default()
    }

    /// Sets how many bytes of the buffer are the frame.
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(FRAME_CAPACITY);
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl std::ops::Deref for FrameBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data.as_deref().unwrap_or_default()[..self.len]
    }
}

impl std::ops::DerefMut for FrameBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        let len = self.len;
        &mut self.space()[..len]
    }
}

impl Drop for FrameBuf {
    fn drop(&mut self) {
        if let Some(data) = self.data.take() {
            self.home.give_back(data);
        }
    }
}

impl std::fmt::Debug for FrameBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FrameBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_return_to_their_pool() {
        let pool = BufPool::new(2);
        let a = pool.copy_of(b"hello");
        assert_eq!(&a[..], b"hello");
        let ptr = a.as_ptr();
        drop(a);
        let b = pool.take();
        assert_eq!(b.data.as_ref().unwrap().as_ptr(), ptr);
        assert!(b.is_empty());
    }

    #[test]
    fn the_buffer_returned_last_is_taken_first() {
        let pool = BufPool::stocked(8, 4);
        let (a, b) = (pool.take(), pool.take());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        drop(a);
        drop(b);
        let (c, d) = (pool.take(), pool.take());
        assert_eq!((c.as_ptr(), d.as_ptr()), (pb, pa));
    }

    #[test]
    fn a_thread_hands_its_oldest_half_to_the_pool_when_its_stack_is_full() {
        let pool = BufPool::new(100);
        let bufs: Vec<FrameBuf> = (0..=SPARE_MAX).map(|_| pool.take()).collect();
        let ptrs: Vec<*const u8> = bufs.iter().map(|b| b.as_ptr()).collect();
        drop(bufs);
        let pooled: Vec<*const u8> = pool.free().iter().map(|b| b.as_ptr()).collect();
        assert_eq!(pooled, ptrs[..SPARE_MOVE]);
        // The thread's own come first, newest first.
        assert_eq!(pool.take().as_ptr(), ptrs[SPARE_MAX]);
    }

    #[test]
    fn a_full_pool_frees_what_comes_back() {
        let pool = BufPool::new(2);
        let bufs: Vec<FrameBuf> = (0..=SPARE_MAX).map(|_| pool.take()).collect();
        drop(bufs);
        assert_eq!(pool.free().len(), 2);
        SPARE.with(|spare| assert_eq!(spare.borrow().len(), SPARE_MAX + 1 - SPARE_MOVE));
    }

    #[test]
    fn buffers_given_back_on_another_thread_come_back_through_the_pool() {
        let pool = BufPool::new(1000);
        let bufs: Vec<FrameBuf> = (0..4 * SPARE_MAX).map(|_| pool.take()).collect();
        let ptrs: std::collections::HashSet<usize> =
            bufs.iter().map(|b| b.as_ptr() as usize).collect();
        std::thread::spawn(move || drop(bufs)).join().unwrap();
        // The other thread kept some and handed the rest to the pool; this thread's stack is
        // empty, so it takes from the pool.
        assert!(pool.free().len() >= 2 * SPARE_MAX);
        let again = pool.take();
        assert!(ptrs.contains(&(again.as_ptr() as usize)));
    }
}

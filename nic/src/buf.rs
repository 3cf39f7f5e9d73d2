//! Frame buffers that are recycled instead of allocated: the data path takes one from a pool,
//! builds a frame in it, hands it to a link, and when the last holder drops it the buffer goes
//! back to the pool it came from. After warm-up no frame costs an allocation.
//!
//! The pool hands out the buffer returned last: it is still in the cache (a frame is built, sent
//! and dropped within one engine pass), where the oldest idle buffer of a few hundred would be
//! cold — and every frame would start with cache misses on its header and payload.

use std::sync::{Arc, Mutex, MutexGuard};

/// Room for the largest frame any link carries: a 9000-byte jumbo frame plus headers.
pub const FRAME_CAPACITY: usize = 9216;

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

    /// Takes back a buffer; a full pool frees it (enough buffers are idle already).
    fn give_back(&self, data: Box<[u8]>) {
        let mut free = self.free();
        if free.len() < self.capacity {
            free.push(data);
        }
    }

    /// A buffer of [`FRAME_CAPACITY`] bytes with length 0.
    pub fn take(self: &Arc<Self>) -> FrameBuf {
        let data = self
            .free()
            .pop()
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
    fn a_full_pool_frees_what_comes_back() {
        let pool = BufPool::new(2);
        let bufs: Vec<FrameBuf> = (0..5).map(|_| pool.take()).collect();
        drop(bufs);
        assert_eq!(pool.free().len(), 2);
    }
}

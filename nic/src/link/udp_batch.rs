//! Many datagrams per system call: `sendmmsg(2)`, with UDP segmentation offload (GSO,
//! `UDP_SEGMENT`) where the kernel has it ([`super::udp_recv`] is the other way). Each Ethernet frame stays one datagram on the
//! wire — GSO only lets one `sendmmsg` message carry a run of equal-sized datagrams through the
//! kernel's stack at once, which cuts them apart before any receiver sees them — so QEMU and
//! every other peer of the cable read exactly what they read before.
//!
//! Nothing here copies a frame: each datagram's bytes are gathered from the frame buffers
//! themselves by the kernel, through one `iovec` per frame.

use std::io;
use std::ops::Deref;
use std::os::fd::{AsRawFd, BorrowedFd};

/// Most frames sent with one system call.
pub const MAX_BATCH: usize = 64;
/// Most bytes one GSO message carries (a UDP datagram's payload limit, less some room).
const GSO_MAX_BYTES: usize = 65_000;
/// Most datagrams one GSO message may be cut into (the kernel's `UDP_MAX_SEGMENTS`).
const GSO_MAX_SEGMENTS: usize = 64;
/// Room for one `cmsghdr` carrying a `u16`, 8-byte aligned.
type Control = [u64; 4];

/// Reused scratch space for the system calls' arguments, so that a batch allocates nothing.
pub struct UdpBatch {
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    controls: Vec<Control>,
    /// Frames in each message of the batch being sent.
    counts: Vec<usize>,
    gso: bool,
}

// SAFETY: the raw pointers in `msgs` and `iovs` are written and used only within one call of
// `send` (which borrows everything they point to); between calls they are stale and
// never read.
unsafe impl Send for UdpBatch {}

/// Whether an error from a send means "the kernel cannot segment this" rather than a lost frame.
fn gso_unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP | libc::ENOPROTOOPT)
    )
}

impl UdpBatch {
    /// Scratch space for batches; with `gso`, runs of equal-sized frames share one message
    /// (turned off by itself the first time the kernel refuses it).
    pub fn new(gso: bool) -> UdpBatch {
        UdpBatch {
            msgs: Vec::with_capacity(MAX_BATCH),
            iovs: Vec::with_capacity(MAX_BATCH),
            controls: Vec::with_capacity(MAX_BATCH),
            counts: Vec::with_capacity(MAX_BATCH),
            gso,
        }
    }

    /// Whether segmentation offload is in use.
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Sends each of `frames` (at most [`MAX_BATCH`]) as one datagram on the connected socket
    /// `fd`, in order. Returns how many left; the rest were lost as on a wire (the socket's
    /// buffer was full, say). An error only when none left.
    pub fn send<T: Deref<Target = [u8]>>(
        &mut self,
        fd: BorrowedFd<'_>,
        frames: &[T],
    ) -> io::Result<usize> {
        let frames = &frames[..frames.len().min(MAX_BATCH)];
        let mut sent = 0;
        while sent < frames.len() {
            match self.send_some(fd, &frames[sent..]) {
                Ok(n) => sent += n,
                Err(e) if self.gso && gso_unsupported(&e) => {
                    tracing::debug!(error = %e, "no UDP segmentation offload: one message per frame");
                    self.gso = false;
                }
                // A send of ours found nobody listening; the error is reported once, the next
                // send goes on.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) if sent == 0 => return Err(e),
                Err(_) => break,
            }
        }
        Ok(sent)
    }

    /// One `sendmmsg`: returns the frames of the messages the kernel took.
    fn send_some<T: Deref<Target = [u8]>>(
        &mut self,
        fd: BorrowedFd<'_>,
        frames: &[T],
    ) -> io::Result<usize> {
        self.msgs.clear();
        self.iovs.clear();
        self.controls.clear();
        self.counts.clear();
        // The iovecs first, all of them, so that the messages' pointers into the vector stay
        // valid (it has the capacity and is not touched again).
        for frame in frames {
            self.iovs.push(libc::iovec {
                iov_base: frame.as_ptr() as *mut libc::c_void,
                iov_len: frame.len(),
            });
        }
        let mut at = 0;
        while at < frames.len() {
            let segment = frames[at].len();
            let mut count = 1;
            let mut bytes = segment;
            if self.gso {
                // Equal-sized frames, and one shorter one to end the run.
                while at + count < frames.len()
                    && count < GSO_MAX_SEGMENTS
                    && bytes + frames[at + count].len() <= GSO_MAX_BYTES
                    && frames[at + count].len() <= segment
                {
                    let len = frames[at + count].len();
                    bytes += len;
                    count += 1;
                    if len < segment {
                        break;
                    }
                }
            }
            // SAFETY: an all-zero mmsghdr is a valid empty message.
            let mut msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
            msg.msg_hdr.msg_iov = self.iovs[at..].as_mut_ptr();
            msg.msg_hdr.msg_iovlen = count as _;
            if count > 1 {
                self.controls.push([0; 4]);
                let control = self.controls.last_mut().expect("just pushed");
                msg.msg_hdr.msg_control = control.as_mut_ptr().cast();
                // SAFETY: CMSG_SPACE only computes a size.
                msg.msg_hdr.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as _;
                // SAFETY: the control buffer is CMSG_SPACE(2) bytes, aligned, and ours; the
                // header and its u16 fit in it.
                unsafe {
                    let cmsg = libc::CMSG_FIRSTHDR(&msg.msg_hdr);
                    (*cmsg).cmsg_level = libc::SOL_UDP;
                    (*cmsg).cmsg_type = libc::UDP_SEGMENT;
                    (*cmsg).cmsg_len = libc::CMSG_LEN(2) as _;
                    std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<u16>(), segment as u16);
                }
            }
            self.msgs.push(msg);
            self.counts.push(count);
            at += count;
        }
        // SAFETY: every message points into `iovs` and `controls` (not reallocated since: both
        // were given their capacity up front) and through them into `frames`, all alive for
        // the call.
        let rc = unsafe {
            libc::sendmmsg(
                fd.as_raw_fd(),
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(self.counts[..rc as usize].iter().sum())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::{BufPool, FrameBuf};
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    /// Frames of a 1 MiB WRITE (first, middles, a short last), acknowledgements between them:
    /// a plain receiver — QEMU's — reads each as a datagram of its own, whole and in order,
    /// with and without GSO.
    #[test]
    fn each_frame_is_one_datagram_in_order_with_and_without_gso() {
        for gso in [true, false] {
            let a = UdpSocket::bind("127.0.0.1:0").unwrap();
            let b = UdpSocket::bind("127.0.0.1:0").unwrap();
            a.connect(b.local_addr().unwrap()).unwrap();
            let pool = BufPool::new(MAX_BATCH);
            let sizes: Vec<usize> = [4170]
                .into_iter()
                .chain([4154; 20])
                .chain([1000, 60, 60, 4154, 4154, 77])
                .collect();
            let frames: Vec<FrameBuf> = sizes
                .iter()
                .enumerate()
                .map(|(i, &len)| pool.copy_of(&vec![i as u8; len]))
                .collect();
            let mut batch = UdpBatch::new(gso);
            assert_eq!(batch.send(a.as_fd(), &frames).unwrap(), frames.len());
            let mut buf = vec![0u8; 70_000];
            for (i, &len) in sizes.iter().enumerate() {
                let n = b.recv(&mut buf).unwrap();
                assert_eq!(n, len, "datagram {i} (gso {gso})");
                assert!(buf[..n].iter().all(|&x| x == i as u8));
            }
        }
    }
}

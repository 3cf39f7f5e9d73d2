//! Many datagrams per system call the other way: `recvmmsg(2)`, with UDP receive offload (GRO,
//! `UDP_GRO`) where the kernel has it.
//!
//! With GRO the kernel hands a run of datagrams that a sender sent with segmentation offload
//! (our cable's sends) to the receiving socket as one message, with the datagrams' size beside
//! it: on loopback the run is never cut into datagrams at all, which saves a socket buffer, a
//! queueing and a free per datagram on both sides. Each datagram is still one Ethernet frame:
//! the receiver cuts the message back into frames, and a peer that sends plain datagrams (QEMU's
//! `-netdev dgram`, a cable without GSO) is received as before.
//!
//! Cutting costs no copy in the common case: each message's bytes are scattered by the kernel
//! over a row of frame buffers, each given exactly the datagram size the last runs had, so that
//! every datagram of a run lands in a buffer of its own. A message that does not fit that
//! guess (another datagram size, a plain datagram longer than the guess) is copied into shape;
//! after a batch the guess follows what arrived. Nothing is ever cut short: behind each
//! message's buffers lies room for the rest of the largest message the kernel can build.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::Arc;

use crate::buf::{BufPool, FrameBuf, FRAME_CAPACITY};

/// Frame buffers kept ready for one `recvmmsg`: datagrams one call can bring in, when they come
/// as runs.
pub const RECV_BUFFERS: usize = 128;
/// Most messages one call takes: plain datagrams one call can bring in.
const MAX_MESSAGES: usize = 64;
/// Most datagrams the kernel coalesces into one message (its `UDP_GRO_CNT_MAX`).
const GRO_MAX_SEGMENTS: usize = 64;
/// Largest message: a UDP datagram's length field.
const MAX_MESSAGE: usize = 65_535;
/// Room for one `cmsghdr` carrying an `int`, 8-byte aligned.
type Control = [u64; 4];

/// Receives frames by the batch from a UDP socket, one datagram per frame; keeps its buffers
/// and the system call's arguments between calls, so that a batch allocates nothing.
pub struct BatchReceiver {
    /// Empty frame buffers for the next call.
    spare: Vec<FrameBuf>,
    /// The buffers of the call being taken apart (kept to reuse its allocation).
    used: Vec<FrameBuf>,
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    controls: Vec<Control>,
    /// The frame buffers each message of the call was given.
    given: Vec<usize>,
    /// Behind each message's buffers: room for the rest of a message longer than they hold.
    overflow: Vec<u8>,
    /// A message that did not fit its buffers, laid out in one piece to be cut, and the
    /// buffers it came in (both kept to reuse their allocations).
    whole: Vec<u8>,
    row: Vec<FrameBuf>,
    /// The datagram size of the runs that arrived last; `None`: plain datagrams.
    segment: Option<usize>,
    /// The buffers per message and bytes per buffer `msgs` are laid out for, while that layout
    /// still points at `spare` as it is: a call that found nothing changed neither, and the
    /// next reuses it (an engine that is busy sending asks at every pass, and mostly finds
    /// nothing: pointing 64 messages at 128 buffers each time cost as much as the call).
    laid_out: Option<(usize, usize)>,
    gro: bool,
}

// SAFETY: the raw pointers in `msgs` and `iovs` point only into memory the receiver owns (the
// heap storage of `iovs`, `controls`, `overflow` and the buffers of `spare`, none of which moves
// when the receiver does) and are used only within a call of `recv`; a layout kept between
// calls (`laid_out`) is used again only while none of that storage has changed.
unsafe impl Send for BatchReceiver {}

impl Default for BatchReceiver {
    fn default() -> Self {
        BatchReceiver::new()
    }
}

impl BatchReceiver {
    pub fn new() -> BatchReceiver {
        BatchReceiver {
            spare: Vec::with_capacity(RECV_BUFFERS),
            used: Vec::with_capacity(RECV_BUFFERS),
            msgs: Vec::with_capacity(MAX_MESSAGES),
            iovs: Vec::with_capacity(RECV_BUFFERS + MAX_MESSAGES),
            controls: vec![[0; 4]; MAX_MESSAGES],
            given: Vec::with_capacity(MAX_MESSAGES),
            // Zeroed memory that only the pages a long message reaches ever make resident.
            overflow: vec![0; MAX_MESSAGES * MAX_MESSAGE],
            whole: Vec::with_capacity(MAX_MESSAGE),
            row: Vec::with_capacity(GRO_MAX_SEGMENTS),
            segment: None,
            laid_out: None,
            gro: false,
        }
    }

    /// Asks the kernel to coalesce runs of datagrams on `fd` (`UDP_GRO`); returns whether it
    /// will. Without it every datagram is a message of its own, as before.
    pub fn enable_gro(&mut self, fd: BorrowedFd<'_>) -> bool {
        let on: libc::c_int = 1;
        // SAFETY: a valid socket option value of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_GRO,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        self.gro = rc == 0;
        self.gro
    }

    /// Whether the kernel coalesces runs of datagrams for us.
    pub fn gro(&self) -> bool {
        self.gro
    }

    /// Receives what is waiting on `fd` with one `recvmmsg` and appends its frames, one per
    /// datagram and in order, to `out`; buffers come from `pool`. A datagram larger than a
    /// frame buffer comes out as an empty buffer (the caller drops it). Returns how many
    /// buffers were appended (0: nothing there).
    pub fn recv(
        &mut self,
        fd: BorrowedFd<'_>,
        pool: &Arc<BufPool>,
        out: &mut VecDeque<FrameBuf>,
    ) -> io::Result<usize> {
        // Buffers per message: enough datagrams of the expected size for the largest message
        // (no more than the kernel coalesces); one for plain datagrams.
        let shape = match self.segment {
            Some(size) => (MAX_MESSAGE.div_ceil(size).min(GRO_MAX_SEGMENTS), size),
            None => (1, FRAME_CAPACITY),
        };
        let (per_message, room) = shape;
        if self.laid_out != Some(shape) {
            while self.spare.len() < RECV_BUFFERS {
                self.spare.push(pool.take());
            }
            let messages = (self.spare.len() / per_message).clamp(1, MAX_MESSAGES);
            self.lay_out(messages, per_message, room);
            self.laid_out = Some(shape);
        }
        let n = loop {
            // SAFETY: each message points at its iovecs and control buffer, which point into
            // buffers of `spare` and into `overflow`, all alive and unaliased for the call; no
            // timeout.
            let rc = unsafe {
                libc::recvmmsg(
                    fd.as_raw_fd(),
                    self.msgs.as_mut_ptr(),
                    self.msgs.len() as libc::c_uint,
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if rc >= 0 {
                break rc as usize;
            }
            // A failed call wrote nothing back (the kernel fills in a message's length, flags
            // and control only for messages it received): the layout stays valid.
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => return Ok(0),
                // A send of ours found no listener: reported once, then receiving goes on.
                io::ErrorKind::ConnectionRefused | io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        };
        Ok(self.take_apart(n, room, pool, out))
    }

    /// Points `messages` messages at rows of `per_message` spare buffers, `room` bytes of each,
    /// then at their share of the overflow.
    fn lay_out(&mut self, messages: usize, per_message: usize, room: usize) {
        self.msgs.clear();
        self.iovs.clear();
        self.given.clear();
        // The iovecs first, all of them, so that the messages' pointers into the vector stay
        // valid (it has the capacity and is not touched again).
        let overflow_len = MAX_MESSAGE.saturating_sub(per_message * room);
        let mut rows = self.spare.chunks_mut(per_message);
        let mut overflow = self.overflow.chunks_mut(MAX_MESSAGE);
        for _ in 0..messages {
            let (Some(row), Some(spill)) = (rows.next(), overflow.next()) else {
                break;
            };
            for buf in row.iter_mut() {
                self.iovs.push(libc::iovec {
                    iov_base: buf.space().as_mut_ptr().cast(),
                    iov_len: room,
                });
            }
            self.iovs.push(libc::iovec {
                iov_base: spill.as_mut_ptr().cast(),
                iov_len: overflow_len,
            });
            self.given.push(row.len());
        }
        let mut at = 0;
        for (i, &count) in self.given.iter().enumerate() {
            // SAFETY: an all-zero mmsghdr is a valid empty message.
            let mut msg: libc::mmsghdr = unsafe { std::mem::zeroed() };
            msg.msg_hdr.msg_iov = self.iovs[at..].as_mut_ptr();
            msg.msg_hdr.msg_iovlen = (count + 1) as _;
            msg.msg_hdr.msg_control = self.controls[i].as_mut_ptr().cast();
            msg.msg_hdr.msg_controllen = std::mem::size_of::<Control>() as _;
            self.msgs.push(msg);
            at += count + 1;
        }
    }

    /// Cuts the `n` messages received into frames, in order, onto `out`; puts the buffers
    /// they did not need back; updates the expected datagram size. Returns the frames.
    fn take_apart(
        &mut self,
        n: usize,
        room: usize,
        pool: &Arc<BufPool>,
        out: &mut VecDeque<FrameBuf>,
    ) -> usize {
        // The buffers move: the next call lays its messages out afresh.
        self.laid_out = None;
        std::mem::swap(&mut self.spare, &mut self.used);
        let mut bufs = self.used.drain(..);
        let before = out.len();
        // The datagram size of the longest run in this batch, if any came as runs.
        let mut longest: Option<(usize, usize)> = None;
        for (i, (msg, &count)) in self.msgs.iter().zip(&self.given).enumerate().take(n) {
            let mut row = bufs.by_ref().take(count);
            let len = msg.msg_len as usize;
            if msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || len == 0 {
                // Nothing to make frames of: a zero-length datagram, or one cut short (which
                // the overflow rules out; the caller counts the empty buffer as dropped).
                self.spare.extend(row);
                if len > 0 {
                    out.push_back(pool.take());
                }
                continue;
            }
            let segment = gro_segment(&msg.msg_hdr);
            let size = segment.unwrap_or(len);
            let frames = len.div_ceil(size);
            if let Some(size) = segment.filter(|_| frames > 1) {
                if longest.is_none_or(|(_, most)| frames > most) {
                    longest = Some((size, frames));
                }
            }
            let fits = frames <= count
                && if frames == 1 {
                    len <= room
                } else {
                    size == room
                };
            if fits {
                // Each datagram lies in a buffer of its own.
                for (j, mut buf) in row.by_ref().take(frames).enumerate() {
                    buf.set_len(size.min(len - j * size));
                    out.push_back(buf);
                }
                self.spare.extend(row);
                continue;
            }
            // Not as expected: the message is laid out in one piece, then cut.
            self.whole.clear();
            let mut left = len;
            for mut buf in row {
                let n = left.min(room);
                self.whole.extend_from_slice(&buf.space()[..n]);
                left -= n;
                self.row.push(buf);
            }
            let spill = &self.overflow[i * MAX_MESSAGE..][..MAX_MESSAGE];
            self.whole
                .extend_from_slice(&spill[..left.min(MAX_MESSAGE)]);
            let mut own = self.row.drain(..);
            for piece in self.whole.chunks(size) {
                let mut buf = own.next().unwrap_or_else(|| pool.take());
                if piece.len() <= FRAME_CAPACITY {
                    buf.space()[..piece.len()].copy_from_slice(piece);
                    buf.set_len(piece.len());
                } else {
                    // Larger than any frame: the caller drops it.
                    buf.set_len(0);
                }
                out.push_back(buf);
            }
            self.spare.extend(own);
        }
        // Messages that stayed empty keep their buffers.
        self.spare.extend(bufs);
        if n > 0 {
            // A buffer must hold the guessed size: a larger one stays a guess never made.
            self.segment = longest
                .map(|(size, _)| size)
                .filter(|&size| size <= FRAME_CAPACITY);
        }
        out.len() - before
    }
}

/// The datagram size of a coalesced message, from its `UDP_GRO` control message.
fn gro_segment(hdr: &libc::msghdr) -> Option<usize> {
    // SAFETY: the kernel filled `msg_control` up to `msg_controllen`; CMSG_FIRSTHDR and
    // CMSG_NXTHDR stay within it, and an int is read only from a header of that type.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_UDP && (*cmsg).cmsg_type == libc::UDP_GRO {
                let size = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
                return usize::try_from(size).ok().filter(|&s| s > 0);
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::udp_batch::{UdpBatch, MAX_BATCH};
    use std::net::UdpSocket;
    use std::os::fd::AsFd;
    use std::time::{Duration, Instant};

    /// Two connected sockets; the receiving one with room for every batch a test sends at
    /// once (the default buffer holds only three GRO messages of 4 KiB datagrams).
    fn pair() -> (UdpSocket, UdpSocket) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        b.connect(a.local_addr().unwrap()).unwrap();
        rustix::net::sockopt::set_socket_recv_buffer_size(&b, 2 << 20).unwrap();
        (a, b)
    }

    /// Frames numbered from `first`, of `sizes`: frame i is `len` bytes of `i as u8`, its
    /// first two bytes its number (so that a frame cut in the wrong place shows).
    fn frames(pool: &Arc<BufPool>, first: usize, sizes: &[usize]) -> Vec<FrameBuf> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, &len)| {
                let number = first + i;
                let mut bytes = vec![number as u8; len];
                bytes[..2].copy_from_slice(&(number as u16).to_le_bytes());
                pool.copy_of(&bytes)
            })
            .collect()
    }

    /// Receives until `count` buffers came out (or 5 s passed): their bytes.
    fn receive(rx: &mut BatchReceiver, socket: &UdpSocket, count: usize) -> Vec<Vec<u8>> {
        let pool = BufPool::new(RECV_BUFFERS);
        let mut out = VecDeque::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while out.len() < count {
            assert!(Instant::now() < deadline, "{} of {count} frames", out.len());
            if rx.recv(socket.as_fd(), &pool, &mut out).unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        out.iter().map(|f| f.to_vec()).collect()
    }

    fn expected(first: usize, sizes: &[usize]) -> Vec<Vec<u8>> {
        let pool = BufPool::new(4);
        frames(&pool, first, sizes)
            .iter()
            .map(|f| f.to_vec())
            .collect()
    }

    /// Batches whose runs change size from one to the next, runs shorter than their first
    /// datagram, single datagrams longer and shorter than the runs before: every frame comes out
    /// whole, alone and in order, whether the sender used GSO and whether the receiver asked
    /// for GRO.
    #[test]
    fn every_frame_comes_out_whole_and_in_order_whatever_the_runs() {
        let batches: Vec<Vec<usize>> = vec![
            // A WRITE's first packet (with its RETH), middles, and a short last.
            [4170].into_iter().chain([4154; 40]).chain([1000]).collect(),
            // Runs of one size...
            vec![4154; 60],
            // ...then of another, smaller and larger.
            vec![138; 64],
            vec![8000; 20],
            // One datagram longer than the runs before it, then short ones.
            vec![9000],
            vec![60, 60, 4154, 77],
            [4154; 30].into_iter().chain([60]).collect(),
        ];
        for gso in [true, false] {
            for gro in [true, false] {
                let (a, b) = pair();
                let pool = BufPool::new(MAX_BATCH);
                let mut tx = UdpBatch::new(gso);
                let mut rx = BatchReceiver::new();
                if gro {
                    assert!(rx.enable_gro(b.as_fd()), "the kernel has UDP_GRO");
                }
                let mut first = 0;
                for sizes in &batches {
                    for chunk in sizes.chunks(MAX_BATCH) {
                        let sent = frames(&pool, first, chunk);
                        assert_eq!(tx.send(a.as_fd(), &sent).unwrap(), chunk.len());
                        let got = receive(&mut rx, &b, chunk.len());
                        assert_eq!(
                            got.iter().map(Vec::len).collect::<Vec<_>>(),
                            chunk,
                            "gso {gso}, gro {gro}"
                        );
                        assert!(got == expected(first, chunk), "gso {gso}, gro {gro}");
                        first += chunk.len();
                    }
                }
                assert_eq!(rx.recv(b.as_fd(), &pool, &mut VecDeque::new()).unwrap(), 0);
            }
        }
    }

    /// With GRO, a run of equal datagrams arrives as one message and is cut into its frames in
    /// the buffers the kernel wrote: the guess follows the runs.
    #[test]
    fn runs_are_taken_in_one_message_each() {
        let (a, b) = pair();
        let pool = BufPool::new(MAX_BATCH);
        let mut tx = UdpBatch::new(true);
        let mut rx = BatchReceiver::new();
        assert!(rx.enable_gro(b.as_fd()));
        for round in 0..3 {
            let sizes = [4154; 45];
            let sent = frames(&pool, round * 45, &sizes);
            assert_eq!(tx.send(a.as_fd(), &sent).unwrap(), 45);
            assert_eq!(receive(&mut rx, &b, 45), expected(round * 45, &sizes));
            assert_eq!(rx.segment, Some(4154), "round {round}");
        }
    }

    /// Calls that find nothing keep the layout they were given; what arrives after them, in
    /// runs or plain, of the size expected or not, still comes out whole and in order.
    #[test]
    fn calls_that_find_nothing_leave_the_next_one_intact() {
        let (a, b) = pair();
        let pool = BufPool::new(MAX_BATCH);
        let mut tx = UdpBatch::new(true);
        let mut rx = BatchReceiver::new();
        assert!(rx.enable_gro(b.as_fd()));
        let mut none = VecDeque::new();
        let batches: [&[usize]; 4] = [&[4154; 30], &[4154; 12], &[138; 20], &[60, 4154, 77]];
        let mut first = 0;
        for sizes in batches {
            for _ in 0..3 {
                assert_eq!(rx.recv(b.as_fd(), &pool, &mut none).unwrap(), 0);
            }
            assert!(rx.laid_out.is_some());
            let sent = frames(&pool, first, sizes);
            assert_eq!(tx.send(a.as_fd(), &sent).unwrap(), sizes.len());
            assert_eq!(receive(&mut rx, &b, sizes.len()), expected(first, sizes));
            first += sizes.len();
        }
        assert!(none.is_empty());
    }

    #[test]
    fn a_datagram_too_large_for_a_frame_comes_out_empty() {
        for gro in [true, false] {
            let (a, b) = pair();
            a.send(&vec![1u8; FRAME_CAPACITY + 100]).unwrap();
            a.send(b"small").unwrap();
            let mut rx = BatchReceiver::new();
            if gro {
                rx.enable_gro(b.as_fd());
            }
            assert_eq!(receive(&mut rx, &b, 2), vec![Vec::new(), b"small".to_vec()]);
        }
    }
}

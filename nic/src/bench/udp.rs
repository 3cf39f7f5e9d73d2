//! The ceilings of the UDP cable, for comparing two `roce nic` processes with: the same bytes,
//! in datagrams of the same sizes as the cable's frames, sent from this process to a receiver
//! in another — one datagram per system call, or batched as the cable batches them
//! (sendmmsg with UDP GSO, recvmmsg with UDP GRO).
//!
//! The stream is flow-controlled by a window and acknowledgements, as RC is; any loss is
//! charged to it (its time is scaled by sent/received), so it is a goodput too. The receiver
//! is a child process the caller names (a program that calls [`run_sink_from_env`]).

use std::collections::VecDeque;
use std::io::{self, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::procs::{cpu_ns, line_starting, Guard};
use crate::buf::BufPool;
use crate::link::udp_batch::{UdpBatch, MAX_BATCH};
use crate::link::udp_recv::{BatchReceiver, RECV_BUFFERS};

/// Set in the environment of the receiver: `LOCAL,PEER` addresses.
pub const SINK_ENDS: &str = "ROCE_BENCH_UDP_SINK";
/// Set (to anything) in the environment of a receiver that takes datagrams by the batch.
pub const SINK_BATCHED: &str = "ROCE_BENCH_UDP_SINK_BATCHED";
/// Bytes a RoCE frame adds to its payload on the cable: Ethernet, IPv4, UDP, BTH, ICRC (a
/// first or only packet also has a 16-byte RETH).
const FRAME_OVERHEAD: usize = 14 + 20 + 8 + 12 + 4;
const RETH: usize = 16;
/// Datagrams sent ahead of the receiver's acknowledgements (about 2 MiB of full frames, well
/// inside the socket buffers), and how often it acknowledges, like RC's coalesced ACKs.
const WINDOW: u64 = 512;
const ACK_EVERY: u64 = 32;
/// Datagrams `run` sends between two confirmations by the receiver (eight windows).
const BLAST_FRAMES: u64 = 8 * WINDOW;

/// The cable datagram sizes of one RDMA WRITE of `len` bytes at path MTU `mtu`.
pub fn frames_for(len: usize, mtu: usize) -> Vec<usize> {
    let packets = len.div_ceil(mtu).max(1);
    (0..packets)
        .map(|i| {
            let payload = (len - i * mtu).min(mtu);
            FRAME_OVERHEAD + payload + if i == 0 { RETH } else { 0 }
        })
        .collect()
}

/// A UDP sender in this process and its receiver in a child process.
pub struct UdpBaseline {
    socket: UdpSocket,
    /// Send by the batch, as the cable does.
    batch: Option<std::cell::RefCell<UdpBatch>>,
    child: Guard,
}

impl UdpBaseline {
    /// CPU time used so far, in nanoseconds, by the sending end (the calling thread: the one
    /// that runs [`UdpBaseline::run`]) and by the receiving process, user and system: the
    /// difference over a run divided by its bytes is the baseline's cost per byte, to hold two
    /// NIC processes' ([`super::procs::NicPair::nic_cpu_ns`]) to. `None` where the system does
    /// not say.
    pub fn cpu_ns(&self) -> Option<[u64; 2]> {
        let mut now = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid clock and a timespec to write.
        if unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0 {
            return None;
        }
        let sender =
            u64::try_from(now.tv_sec).ok()? * 1_000_000_000 + u64::try_from(now.tv_nsec).ok()?;
        Some([sender, cpu_ns(self.child.0.id())?])
    }

    /// Starts the receiver with `sink` (a command that ends in [`run_sink_from_env`]; its
    /// environment is set here) and connects to it.
    pub fn start(batched: bool, mut sink: Command) -> io::Result<UdpBaseline> {
        let socket = UdpSocket::bind("127.0.0.1:0")?;
        grow(&socket);
        let to: SocketAddr = format!("127.0.0.1:{}", free_port()?)
            .parse()
            .map_err(io::Error::other)?;
        // Both ends connected, as the cable's sockets are (no route lookup per datagram).
        socket.connect(to)?;
        sink.env(SINK_ENDS, format!("{to},{}", socket.local_addr()?))
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        if batched {
            sink.env(SINK_BATCHED, "1");
        } else {
            sink.env_remove(SINK_BATCHED);
        }
        let mut child = Guard(sink.spawn()?);
        let stdout = child.0.stdout.take().ok_or(io::ErrorKind::BrokenPipe)?;
        line_starting(&mut BufReader::new(stdout), "sink ready")?;
        socket.set_read_timeout(Some(Duration::from_millis(100)))?;
        Ok(UdpBaseline {
            socket,
            batch: batched.then(|| std::cell::RefCell::new(UdpBatch::new(true))),
            child,
        })
    }

    /// Sends `frames`-sized datagrams (one message's) over and over for about `duration`, at
    /// most a window ahead of what the receiver acknowledged (a blast would only measure how
    /// fast a 2-core machine drops datagrams); returns the messages carried and the time until
    /// the receiver confirmed, scaled up by any loss.
    pub fn run(&self, frames: &[usize], duration: Duration) -> io::Result<super::Throughput> {
        // Each blast ends with a round trip to the receiver: enough frames per blast that the
        // round trip is not what is measured (16 messages of one 64-byte frame were 16
        // datagrams per round trip, a baseline far below what batched UDP carries).
        let per_blast = (BLAST_FRAMES / frames.len().max(1) as u64).max(16);
        let start = Instant::now();
        let (mut messages, mut elapsed) = (0u64, Duration::ZERO);
        while start.elapsed() < duration {
            elapsed += self.blast(per_blast, frames)?;
            messages += per_blast;
        }
        let bytes = messages * (frames.iter().sum::<usize>() as u64);
        Ok(super::Throughput {
            messages,
            bytes,
            elapsed,
        })
    }

    /// Sends `n` messages as datagrams of `frames` sizes; returns the time until the receiver
    /// confirmed, scaled up by any loss.
    pub fn blast(&self, n: u64, frames: &[usize]) -> io::Result<Duration> {
        let buf = vec![0x5au8; frames.iter().copied().max().unwrap_or(0)];
        let mut ack = [0u8; 16];
        let (mut sent, mut acked) = (0u64, 0u64);
        let mut pending: Vec<&[u8]> = Vec::with_capacity(MAX_BATCH);
        let start = Instant::now();
        for _ in 0..n {
            for &size in frames {
                while sent + pending.len() as u64 - acked >= WINDOW {
                    if !pending.is_empty() {
                        sent += self.send(&mut pending);
                        continue;
                    }
                    match self.socket.recv(&mut ack) {
                        Ok(8) => {
                            acked = acked.max(u64::from_le_bytes(ack[..8].try_into().unwrap()))
                        }
                        Ok(_) => {}
                        // Acknowledgements stopped: what is missing is lost.
                        Err(_) => acked = sent,
                    }
                }
                pending.push(&buf[..size]);
                if self.batch.is_none() || pending.len() == MAX_BATCH {
                    sent += self.send(&mut pending);
                }
            }
        }
        sent += self.send(&mut pending);
        let received = self.count()?;
        let elapsed = start.elapsed();
        if sent > 0 && received == 0 {
            return Err(io::Error::other("the UDP receiver received nothing"));
        }
        Ok(elapsed.mul_f64(sent.max(1) as f64 / received.clamp(1, sent.max(1)) as f64))
    }

    /// Sends what is pending, by the batch or one by one; returns how many were handed over
    /// (a datagram the receiver has no room for is lost, as on the cable, and counted sent).
    fn send(&self, pending: &mut Vec<&[u8]>) -> u64 {
        let n = pending.len() as u64;
        match &self.batch {
            Some(batch) => {
                let _ = batch.borrow_mut().send(self.socket.as_fd(), pending);
            }
            None => {
                for datagram in pending.iter() {
                    let _ = self.socket.send(datagram);
                }
            }
        }
        pending.clear();
        n
    }

    /// Asks the receiver how many datagrams arrived since the last question (its answer is
    /// the one 9-byte reply; 8-byte ones are acknowledgements still on their way).
    fn count(&self) -> io::Result<u64> {
        let mut reply = [0u8; 16];
        for _ in 0..100 {
            let _ = self.socket.send(b"?");
            loop {
                match self.socket.recv(&mut reply) {
                    Ok(9) => return Ok(u64::from_le_bytes(reply[1..9].try_into().unwrap())),
                    Ok(_) => continue,
                    Err(_) => break,
                }
            }
        }
        Err(io::Error::other("the UDP receiver does not answer"))
    }
}

/// A free UDP port on loopback.
pub fn free_port() -> io::Result<u16> {
    Ok(UdpSocket::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Large socket buffers, as the cable has.
fn grow(socket: &UdpSocket) {
    use rustix::net::sockopt;
    let _ = sockopt::set_socket_recv_buffer_size_force(socket, 8 << 20);
    let _ = sockopt::set_socket_send_buffer_size_force(socket, 8 << 20);
    let _ = sockopt::set_socket_recv_buffer_size(socket, 8 << 20);
    let _ = sockopt::set_socket_send_buffer_size(socket, 8 << 20);
}

/// The receiver's role, if this process was started as one: its addresses and whether it
/// takes datagrams by the batch.
pub fn sink_requested() -> Option<(String, bool)> {
    let ends = std::env::var(SINK_ENDS).ok()?;
    Some((ends, std::env::var_os(SINK_BATCHED).is_some()))
}

/// Runs the receiver [`UdpBaseline::start`] asked for in this process's environment.
pub fn run_sink_from_env() -> io::Result<()> {
    let (ends, batched) = sink_requested().ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{SINK_ENDS} is not set: this is started by a benchmark"),
        )
    })?;
    run_sink(&ends, batched)
}

/// The receiver, bound to the first address of `ends` and connected to the second: counts
/// datagrams and acknowledges every 32nd (`ACK_EVERY`); a one-byte datagram asks for the count
/// since the last ask. `batched`: it takes them with recvmmsg and GRO, cut into frames, as the
/// cable does. Ends when
/// its parent kills it, or after 15 minutes (a forgotten receiver does not live forever).
pub fn run_sink(ends: &str, batched: bool) -> io::Result<()> {
    let (local, peer) = ends
        .split_once(',')
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "LOCAL,PEER"))?;
    let socket = UdpSocket::bind(local)?;
    socket.connect(peer)?;
    grow(&socket);
    {
        use std::io::Write;
        let mut out = io::stdout().lock();
        writeln!(out, "sink ready")?;
        out.flush()?;
    }
    let pool = BufPool::new(RECV_BUFFERS);
    let mut frames = VecDeque::with_capacity(RECV_BUFFERS);
    let mut receiver = BatchReceiver::new();
    if batched {
        receiver.enable_gro(socket.as_fd());
    }
    let mut count = 0u64;
    let mut acked = 0u64;
    let deadline = Instant::now() + Duration::from_secs(900);
    while Instant::now() < deadline {
        let mut poll = libc::pollfd {
            fd: socket.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut poll, 1, 1000) } <= 0 {
            continue;
        }
        if batched {
            let _ = receiver.recv(socket.as_fd(), &pool, &mut frames);
        } else {
            let mut buf = pool.take();
            if let Ok(len) = socket.recv(buf.space()) {
                buf.set_len(len);
                frames.push_back(buf);
            }
        }
        for buf in frames.drain(..) {
            if buf.len() == 1 {
                let mut answer = [1u8; 9];
                answer[1..].copy_from_slice(&count.to_le_bytes());
                let _ = socket.send(&answer);
                count = 0;
                acked = 0;
            } else {
                count += 1;
            }
        }
        if count >= acked + ACK_EVERY {
            acked = count - count % ACK_EVERY;
            let _ = socket.send(&acked.to_le_bytes());
        }
    }
    Ok(())
}

//! Measurements of the data path, for `roce bench` and the criterion benches: RDMA WRITE
//! goodput, small-message rate and latency between two NICs, and the baselines they are
//! compared with in the same run — memcpy, crc32fast, both per byte ([`copy_crc_throughput`],
//! the limit model), plain and batched UDP between two processes ([`udp`]).
//!
//! The NICs are on a test bench in this process, two `roce nic` processes ([`procs`]), or many
//! QPs sharing the load ([`qps`]).

pub mod procs;
pub mod qps;
pub mod udp;

use std::time::{Duration, Instant};

use crate::testbed::Pair;
use crate::verbs::{
    CompletionQueue, MemoryRegion, Moderation, QueuePair, SendFlags, SendOp, SendWr, VerbsError,
    Wc, WcStatus,
};

/// Where a benchmark's WRITEs go from and to: the initiator's QP, CQ and source region, and
/// the target's region.
#[derive(Clone, Copy)]
pub struct Initiator<'a> {
    pub qp: &'a QueuePair,
    pub cq: &'a CompletionQueue,
    pub mr: &'a MemoryRegion,
    pub rkey: u32,
    pub va: u64,
    /// Bytes of the target region (WRITEs rotate over slots inside it).
    pub len: u64,
}

impl Pair {
    /// Host a writing into host b.
    pub fn initiator(&self) -> Initiator<'_> {
        Initiator {
            qp: &self.a.qp,
            cq: &self.a.cq,
            mr: &self.a.mr,
            rkey: self.b.mr.rkey,
            va: self.b.mr.va,
            len: self.b.region.len() as u64,
        }
    }
}

/// The outcome of one throughput run.
#[derive(Debug, Clone, Copy)]
pub struct Throughput {
    pub messages: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

impl Throughput {
    pub fn gbit_per_s(&self) -> f64 {
        self.bytes as f64 * 8.0 / self.elapsed.as_secs_f64() / 1e9
    }

    pub fn messages_per_s(&self) -> f64 {
        self.messages as f64 / self.elapsed.as_secs_f64()
    }
}

/// Latency percentiles of a run.
#[derive(Debug, Clone, Copy)]
pub struct Latency {
    pub samples: usize,
    pub median: Duration,
    pub p99: Duration,
    pub min: Duration,
}

/// How long a throughput run sleeps on its completion queue at most before it looks at the
/// clock again (a run that should stop by now stops at the end of the slice).
pub(crate) const WAIT_SLICE: Duration = Duration::from_millis(5);

/// RDMA WRITEs of `size` bytes from a to b, keeping `depth` in flight, posted in batches of
/// `batch` with only the last of each batch signaled (as perftest does), for about `duration`.
pub fn write_throughput(
    p: Initiator<'_>,
    size: usize,
    depth: usize,
    batch: usize,
    duration: Duration,
) -> Result<Throughput, VerbsError> {
    write_until(p, size, depth, batch, Until::Elapsed(duration))
}

/// Like [`write_throughput`], for exactly `messages` WRITEs (rounded up to whole batches):
/// a run whose work is fixed, for instruction counts (callgrind) that compare run to run.
pub fn write_messages(
    p: Initiator<'_>,
    size: usize,
    depth: usize,
    batch: usize,
    messages: u64,
) -> Result<Throughput, VerbsError> {
    write_until(p, size, depth, batch, Until::Posted(messages))
}

/// When a WRITE run stops posting.
#[derive(Clone, Copy)]
pub enum Until {
    Elapsed(Duration),
    Posted(u64),
}

impl Until {
    /// Whether a run that started at `start` and has posted `posted` messages stops posting.
    fn reached(self, start: Instant, posted: u64) -> bool {
        match self {
            Until::Elapsed(duration) => start.elapsed() >= duration,
            Until::Posted(messages) => posted >= messages,
        }
    }
}

fn write_until(
    p: Initiator<'_>,
    size: usize,
    depth: usize,
    batch: usize,
    until: Until,
) -> Result<Throughput, VerbsError> {
    let run = write_moderated(p, size, depth, batch, until);
    // The queue wakes its next user at every completion again, whatever the run's outcome.
    p.cq.moderate(Moderation::NONE);
    run
}

/// [`write_until`]'s run, which moderates the completion queue's wake-ups as it goes.
fn write_moderated(
    p: Initiator<'_>,
    size: usize,
    depth: usize,
    batch: usize,
    until: Until,
) -> Result<Throughput, VerbsError> {
    let batch = batch.clamp(1, depth.max(1));
    let slots = (p.len / size.max(1) as u64).clamp(1, 64);
    let mut wcs = vec![Wc::default(); 64];
    let mut wrs = Vec::with_capacity(batch);
    let sge = [p.mr.sge(0, size as u32)];
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut stop = false;
    while !stop || done < posted {
        stop = stop || until.reached(start, posted);
        while !stop && (posted - done) as usize + batch <= depth {
            wrs.clear();
            for i in 0..batch as u64 {
                let n = posted + i;
                wrs.push(SendWr {
                    wr_id: n,
                    op: SendOp::RdmaWrite {
                        remote_addr: p.va + (n % slots) * size as u64,
                        rkey: p.rkey,
                    },
                    sg_list: &sge,
                    flags: if i + 1 == batch as u64 {
                        SendFlags::SIGNALED
                    } else {
                        SendFlags::empty_flags()
                    },
                    ud: None,
                });
            }
            p.qp.post_send(&wrs)?;
            posted += batch as u64;
            // Checked at every batch: a moderated wake-up frees half the queue at once, and a
            // run of a given count must not post its last batches past it.
            stop = until.reached(start, posted);
        }
        // The queue holds all it may: nothing to do until a completion comes. Two cores run
        // three threads here (this one and two NIC engines), so this one sleeps on the
        // completion queue's event rather than spinning through the time the engines need:
        // spinning, even with a yield each round, cost as much CPU per message as an engine.
        // And it sleeps until half of what is in flight has completed, not the first batch: a
        // wake-up takes a core from an engine (a 64 B run woke 30-40 thousand times a second
        // at one per batch), and half the queue keeps the NIC busy while this thread posts.
        let signaled_in_flight = ((posted - done) as usize).div_ceil(batch);
        p.cq.moderate(Moderation {
            count: (signaled_in_flight / 2).max(1) as u32,
            period: WAIT_SLICE,
        });
        let n = p.cq.wait(&mut wcs, Some(WAIT_SLICE));
        for wc in &wcs[..n] {
            if wc.status != WcStatus::Success {
                return Err(VerbsError::Invalid(format!(
                    "a benchmark WRITE failed: {}",
                    wc.status
                )));
            }
            done = wc.wr_id + 1;
        }
    }
    let elapsed = start.elapsed();
    Ok(Throughput {
        messages: done,
        bytes: done * size as u64,
        elapsed,
    })
}

/// One RDMA WRITE of `size` bytes at a time: from post to completion, `samples` times or for
/// about `within`, whichever ends first (on a loaded machine each sample waits for the
/// engines to be scheduled), with at least one sample.
pub fn write_latency(
    p: Initiator<'_>,
    size: usize,
    samples: usize,
    within: Duration,
) -> Result<Latency, VerbsError> {
    let mut wcs = [Wc::default()];
    let sge = [p.mr.sge(0, size as u32)];
    let mut times = Vec::with_capacity(samples);
    let start = Instant::now();
    for i in 0..samples.max(1) as u64 {
        if i > 0 && start.elapsed() >= within {
            break;
        }
        let wr = SendWr {
            wr_id: i,
            op: SendOp::RdmaWrite {
                remote_addr: p.va,
                rkey: p.rkey,
            },
            sg_list: &sge,
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        let t = Instant::now();
        p.qp.post_send(&[wr])?;
        // Polled with a yield each round, not a bare spin: two cores run three threads here
        // (this one and two NIC engines). After a throughput run that slept on its CQ, the
        // scheduler favours this thread, and a bare spin kept an engine waiting on its core for
        // a whole tick (4 ms) per message in one run of six.
        while p.cq.poll(&mut wcs) == 0 {
            std::thread::yield_now();
        }
        times.push(t.elapsed());
        if wcs[0].status != WcStatus::Success {
            return Err(VerbsError::Invalid(format!(
                "a benchmark WRITE failed: {}",
                wcs[0].status
            )));
        }
    }
    times.sort();
    let samples = times.len();
    Ok(Latency {
        samples,
        median: times[samples / 2],
        p99: times[samples * 99 / 100],
        min: times[0],
    })
}

/// A plain copy of `size` bytes between two buffers, repeated for about `duration`: the
/// machine's memory bandwidth, the ceiling of any DMA.
pub fn memcpy_throughput(size: usize, duration: Duration) -> Throughput {
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    repeat(size, duration, || {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    })
}

/// crc32fast over `size` bytes in `packet`-byte pieces (one CRC per packet, as the ICRC is),
/// repeated for about `duration`: the other per-byte cost of the data path.
pub fn crc32_throughput(size: usize, packet: usize, duration: Duration) -> Throughput {
    let src = vec![1u8; size];
    let mut sum = 0u32;
    let t = repeat(size, duration, || {
        for piece in std::hint::black_box(&src).chunks(packet.max(1)) {
            sum ^= crc32fast::hash(piece);
        }
    });
    std::hint::black_box(sum);
    t
}

/// One copy and one CRC of every byte, packet by packet, as each side of a WRITE must do at
/// least (gather + ICRC on the sender, ICRC + scatter on the receiver), on one core, for about
/// `duration`. Two cores (one per side) can carry twice this: the limit `roce bench --all`
/// holds the in-process goodput to.
pub fn copy_crc_throughput(size: usize, packet: usize, duration: Duration) -> Throughput {
    let src = vec![1u8; size];
    let mut dst = vec![0u8; size];
    let mut sum = 0u32;
    let t = repeat(size, duration, || {
        let src = std::hint::black_box(&src);
        for (to, from) in dst.chunks_mut(packet.max(1)).zip(src.chunks(packet.max(1))) {
            to.copy_from_slice(from);
            sum ^= crc32fast::hash(to);
        }
        std::hint::black_box(&mut dst);
    });
    std::hint::black_box(sum);
    t
}

/// Runs `once` (which handles `size` bytes) in rounds of 16 for about `duration`.
fn repeat(size: usize, duration: Duration, mut once: impl FnMut()) -> Throughput {
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        for _ in 0..16 {
            once();
        }
        n += 16;
    }
    Throughput {
        messages: n,
        bytes: n * size as u64,
        elapsed: start.elapsed(),
    }
}

//! Measurements of the data path, for `roce bench`: RDMA WRITE goodput, small-message rate and
//! latency between two NICs on a test bench, and a plain memcpy in the same run for scale.

use std::time::{Duration, Instant};

use crate::testbed::Pair;
use crate::verbs::{SendFlags, SendOp, SendWr, VerbsError, Wc, WcStatus};

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

/// RDMA WRITEs of `size` bytes from a to b, keeping `depth` in flight, posted in batches of
/// `batch` with only the last of each batch signaled (as perftest does), for about `duration`.
pub fn write_throughput(
    p: &Pair,
    size: usize,
    depth: usize,
    batch: usize,
    duration: Duration,
) -> Result<Throughput, VerbsError> {
    let batch = batch.clamp(1, depth.max(1));
    let slots = (p.b.region.len() / size.max(1)).clamp(1, 64) as u64;
    let mut wcs = vec![Wc::default(); 64];
    let mut wrs = Vec::with_capacity(batch);
    let sge = [p.a.mr.sge(0, size as u32)];
    let start = Instant::now();
    let (mut posted, mut done) = (0u64, 0u64);
    let mut stop = false;
    while !stop || done < posted {
        stop = stop || start.elapsed() >= duration;
        while !stop && (posted - done) as usize + batch <= depth {
            wrs.clear();
            for i in 0..batch as u64 {
                let n = posted + i;
                wrs.push(SendWr {
                    wr_id: n,
                    op: SendOp::RdmaWrite {
                        remote_addr: p.b.mr.va + (n % slots) * size as u64,
                        rkey: p.b.mr.rkey,
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
            p.a.qp.post_send(&wrs)?;
            posted += batch as u64;
        }
        let n = p.a.cq.poll(&mut wcs);
        if n == 0 {
            // Two cores run three busy threads (this one and two NIC engines): let them work.
            std::thread::yield_now();
        }
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

/// One RDMA WRITE of `size` bytes at a time: from post to completion, `samples` times.
pub fn write_latency(p: &Pair, size: usize, samples: usize) -> Result<Latency, VerbsError> {
    let mut wcs = [Wc::default()];
    let sge = [p.a.mr.sge(0, size as u32)];
    let mut times = Vec::with_capacity(samples);
    for i in 0..samples as u64 {
        let wr = SendWr {
            wr_id: i,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            },
            sg_list: &sge,
            flags: SendFlags::SIGNALED,
            ud: None,
        };
        let t = Instant::now();
        p.a.qp.post_send(&[wr])?;
        while p.a.cq.poll(&mut wcs) == 0 {
            std::hint::spin_loop();
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
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < duration {
        for _ in 0..16 {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        n += 16;
    }
    Throughput {
        messages: n,
        bytes: n * size as u64,
        elapsed: start.elapsed(),
    }
}

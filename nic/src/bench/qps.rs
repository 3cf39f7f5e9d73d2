//! Many connected QPs sharing one load: two NICs in this process, `n` RC QPs on each joined
//! pairwise, one CQ per side, and WRITEs posted to the QPs in turn. The figures (goodput,
//! message rate) are held to the single-QP run; the memory an idle QP takes is measured as
//! the growth of this process's resident and mapped memory while the QPs are made.

use roce_hostmem::Region;

use super::{Throughput, Until};
use crate::link::mem;
use crate::testbed::{self, all_access};
use crate::verbs::*;
use crate::Device;

/// Bytes of each side's region.
const REGION: usize = 16 << 20;

/// `n` connected QP pairs between two NICs in this process.
pub struct ManyQps {
    a: Side,
    b: Side,
    /// Send queue slots of each QP.
    send_depth: usize,
    /// Growth of resident / mapped memory per QP while the QPs were made and connected (both
    /// sides' QPs live in this process, so the growth is divided by 2n).
    pub rss_per_qp: u64,
    pub mapped_per_qp: u64,
    // Devices last: the hosts' objects are destroyed first.
    devices: (Device, Device),
}

/// One side: its context, CQ, region and QPs.
struct Side {
    qps: Vec<QueuePair>,
    cq: CompletionQueue,
    mr: MemoryRegion,
    _region: std::sync::Arc<Region>,
    pd: ProtectionDomain,
    _ctx: Context,
}

fn side(dev: &Device) -> Result<Side, VerbsError> {
    let ctx = dev.open()?;
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4096)?;
    let region = std::sync::Arc::new(Region::anonymous(REGION)?);
    let mr = pd.register(&region, 0, region.len(), all_access())?;
    Ok(Side {
        qps: Vec::new(),
        cq,
        mr,
        _region: region,
        pd,
        _ctx: ctx,
    })
}

/// Resident and mapped bytes of this process (`/proc/self/statm`), zero where unreadable.
pub fn memory() -> (u64, u64) {
    // SAFETY: sysconf reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as u64;
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let mut fields = statm
        .split_whitespace()
        .map(|f| f.parse::<u64>().unwrap_or(0));
    let size = fields.next().unwrap_or(0);
    let resident = fields.next().unwrap_or(0);
    (resident * page, size * page)
}

impl ManyQps {
    /// Two NICs of `threads` engine threads with `n` QPs each, connected pairwise at `mtu`,
    /// each QP with room for `send_depth` WRITEs.
    pub fn start(
        n: usize,
        send_depth: usize,
        mtu: Mtu,
        threads: usize,
    ) -> Result<ManyQps, VerbsError> {
        let (la, lb) = mem::pair();
        let (dev_a, dev_b) = testbed::devices_with(la, lb, |config| {
            config.limits.max_qp = config.limits.max_qp.max(n as u64 + 16);
            config.limits.max_shm = u64::MAX;
            config.threads = threads;
        })?;
        let (mut a, mut b) = (side(&dev_a)?, side(&dev_b)?);
        let cap = QpCap {
            max_send_wr: send_depth as u32,
            max_recv_wr: 1,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let before = memory();
        for _ in 0..n {
            let qa = a.pd.create_qp(QpType::Rc, &a.cq, &a.cq, cap)?;
            let qb = b.pd.create_qp(QpType::Rc, &b.cq, &b.cq, cap)?;
            testbed::connect_qps(&qa, &qb, mtu, |_| {})?;
            a.qps.push(qa);
            b.qps.push(qb);
        }
        let after = memory();
        let per_qp = |grown: u64, had: u64| grown.saturating_sub(had) / (2 * n.max(1)) as u64;
        Ok(ManyQps {
            rss_per_qp: per_qp(after.0, before.0),
            mapped_per_qp: per_qp(after.1, before.1),
            a,
            b,
            send_depth,
            devices: (dev_a, dev_b),
        })
    }

    /// How many QP pairs there are.
    pub fn len(&self) -> usize {
        self.a.qps.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.a.qps.is_empty()
    }

    /// The counters of the two NICs (the writer's, the target's).
    pub fn counters(&self) -> (crate::counters::Snapshot, crate::counters::Snapshot) {
        (self.devices.0.counters(), self.devices.1.counters())
    }

    /// RDMA WRITEs of `size` bytes from side a to side b `until` the run stops posting, `depth` in
    /// flight over all QPs, posted to the QPs in turn in batches of `batch` (the last of each
    /// signalled), so every QP carries its share.
    pub fn writes(
        &self,
        size: usize,
        depth: usize,
        batch: usize,
        until: Until,
    ) -> Result<Throughput, VerbsError> {
        let n = self.len();
        let batch = batch.clamp(1, depth.max(1)).min(self.send_depth);
        let slots = (REGION / size.max(1)).clamp(1, 64) as u64;
        let sge = [self.a.mr.sge(0, size as u32)];
        let mut in_flight_per_qp = vec![0usize; n];
        let mut wcs = vec![Wc::default(); 64];
        let mut wrs = Vec::with_capacity(batch);
        let (mut posted, mut done, mut next) = (0u64, 0u64, 0usize);
        let start = std::time::Instant::now();
        let mut stop = false;
        while !stop || done < posted {
            stop = stop || until.reached(start, posted);
            // Post while the total allows, to the next QP in turn that has room.
            while !stop && (posted - done) as usize + batch <= depth {
                let q = next;
                if in_flight_per_qp[q] + batch > self.send_depth {
                    break;
                }
                next = (next + 1) % n;
                wrs.clear();
                for i in 0..batch {
                    let m = posted + i as u64;
                    wrs.push(SendWr {
                        wr_id: q as u64,
                        op: SendOp::RdmaWrite {
                            remote_addr: self.b.mr.va + (m % slots) * size as u64,
                            rkey: self.b.mr.rkey,
                        },
                        sg_list: &sge,
                        flags: if i + 1 == batch {
                            SendFlags::SIGNALED
                        } else {
                            SendFlags::empty_flags()
                        },
                        ud: None,
                    });
                }
                self.a.qps[q].post_send(&wrs)?;
                in_flight_per_qp[q] += batch;
                posted += batch as u64;
                // Checked at every batch: one wake-up may free several batches' room.
                stop = until.reached(start, posted);
            }
            // Nothing more may be posted until a completion comes: sleep for it, as
            // `write_throughput` does, rather than spin through the engines' time.
            let k = self.a.cq.wait(&mut wcs, Some(super::WAIT_SLICE));
            for wc in &wcs[..k] {
                if wc.status != WcStatus::Success {
                    return Err(VerbsError::Invalid(format!(
                        "a benchmark WRITE failed: {}",
                        wc.status
                    )));
                }
                // A signalled completion retires its whole batch on that QP.
                in_flight_per_qp[wc.wr_id as usize] -= batch;
                done += batch as u64;
            }
        }
        Ok(Throughput {
            messages: done,
            bytes: done * size as u64,
            elapsed: start.elapsed(),
        })
    }
}

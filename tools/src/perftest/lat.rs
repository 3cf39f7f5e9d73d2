//! The latency tests' data phase, one message at a time:
//!
//! - `ib_write_lat`: both sides RDMA WRITE `-s` bytes into each other's buffer in turn, the
//!   iteration number (modulo 256) in the last byte, and spin on their own buffer's last byte
//!   for the peer's next number. The server writes first.
//! - `ib_send_lat`: the same with SENDs into posted receives; the client sends first.
//! - `ib_read_lat`, `ib_atomic_lat`: the client READs (or runs an atomic), waits for the
//!   answer, does it again; the server does nothing.

use std::time::{Duration, Instant};

use roce_nic::verbs::{SendFlags, SendOp, SendWr, Wc};

use super::messages::QpRecord;
use super::receives::Receives;
use super::report::LatStats;
use super::resources::Resources;
use super::verify::{AtomicCheck, ReadCheck, SendCheck, FILL};
use super::{AtomicOp, Options, Verb};
use crate::memory::{completions, Buffer};
use crate::ToolError;

/// Polls of the buffer before the spinning side starts sleeping between polls: under a
/// loaded machine (a TCG guest on two cores) a spinning thread would starve the NIC and the
/// guest it waits for.
const SPINS: u32 = 200;
const NAP: Duration = Duration::from_micros(20);

/// Posts one signaled request and waits for its completion.
fn post_and_wait(res: &Resources, opts: &Options, wr: SendWr<'_>) -> Result<(), ToolError> {
    res.qp.post_send(&[wr])?;
    let mut wc = [Wc::default()];
    completions(&res.send_cq, &mut wc, opts.limits.step, "request")?;
    Ok(())
}

pub struct WriteLat<'a> {
    res: &'a Resources,
    opts: &'a Options,
    theirs: QpRecord,
    server: bool,
    checked: u64,
}

impl<'a> WriteLat<'a> {
    pub fn new(res: &'a Resources, opts: &'a Options, theirs: &QpRecord, server: bool) -> Self {
        WriteLat {
            res,
            opts,
            theirs: *theirs,
            server,
            checked: 0,
        }
    }

    pub fn run(&mut self) -> Result<LatStats, ToolError> {
        let iters = self.opts.iters;
        let size = self.opts.size as usize;
        let (mut sent, mut received) = (0u64, 0u64);
        let mut posted_at = Vec::with_capacity(iters as usize);
        while sent < iters || received < iters {
            // The server writes first; the client waits for it.
            if received < iters && !(sent == 0 && self.server) {
                received += 1;
                self.wait_for(received)?;
            }
            if sent < iters {
                posted_at.push(Instant::now());
                sent += 1;
                self.res.area.write(size - 1, &[sent as u8]);
                let sge = [self.res.area.sge(0, size as u32)];
                let wr = SendWr {
                    wr_id: sent,
                    op: SendOp::RdmaWrite {
                        remote_addr: self.theirs.vaddr,
                        rkey: self.theirs.rkey,
                    },
                    sg_list: &sge,
                    flags: SendFlags::SIGNALED,
                    ud: None,
                };
                post_and_wait(self.res, self.opts, wr)?;
            }
        }
        // The peer's last WRITE may still want our ACK again; in a sweep only the last size ends
        // the test.
        if !self.opts.all_sizes || self.opts.size == super::MAX_SIZE {
            std::thread::sleep(crate::LINGER);
        }
        Ok(LatStats::from_posts(self.opts.size, &posted_at, true))
    }

    /// Spins until the peer's WRITE number `n` has landed, then checks its zeros.
    fn wait_for(&mut self, n: u64) -> Result<(), ToolError> {
        let size = self.opts.size as usize;
        let base = self.res.layout.peer_half() as usize;
        let deadline = Instant::now() + self.opts.limits.step;
        let mut spins = 0;
        while self.res.area.poll_byte(base + size - 1) != n as u8 {
            spins += 1;
            if spins > SPINS {
                if Instant::now() > deadline {
                    return Err(ToolError::timeout(
                        format!("RDMA WRITE number {n} from the peer"),
                        self.opts.limits.step,
                    ));
                }
                std::thread::sleep(NAP);
            }
        }
        let body = self.res.area.read(base, size - 1);
        if let Some(at) = (0..body.len()).find(|at| body[*at] != self.filler(*at)) {
            return Err(ToolError::Data(format!(
                "byte {at} of RDMA WRITE {n} is {:#04x}, not {:#04x}",
                body[at],
                self.filler(at)
            )));
        }
        self.checked += 1;
        Ok(())
    }

    /// What byte `at` of a WRITE holds before the last: zero — but in `-a`'s sweep, the last
    /// byte of each smaller size still holds that size's final number, as neither side clears
    /// its buffer between sizes.
    fn filler(&self, at: usize) -> u8 {
        let end_of_smaller = (at + 1).is_power_of_two() && at > 0;
        if self.opts.all_sizes && end_of_smaller {
            self.opts.iters as u8
        } else {
            0
        }
    }

    pub fn verified(&self) -> String {
        format!(
            "each of the {} RDMA WRITEs from the peer held {} zero byte(s) (or an earlier size's last number) and its number in the last byte",
            self.checked,
            self.opts.size - 1
        )
    }
}

pub struct SendLat<'a> {
    res: &'a Resources,
    opts: &'a Options,
    server: bool,
    receives: Receives,
    check: SendCheck,
}

impl<'a> SendLat<'a> {
    /// Posts the receives (before the last round, after which the peer may send).
    pub fn new(
        res: &'a Resources,
        opts: &'a Options,
        server: bool,
        receives: u32,
    ) -> Result<SendLat<'a>, ToolError> {
        Ok(SendLat {
            res,
            opts,
            server,
            receives: Receives::post_first(res, opts, receives)?,
            // Every message comes from the start of the sender's buffer.
            check: SendCheck::new(opts.size as usize, 1),
        })
    }

    pub fn run(&mut self) -> Result<LatStats, ToolError> {
        let iters = self.opts.iters;
        let size = self.opts.size as usize;
        let (mut sent, mut received) = (0u64, 0u64);
        let mut posted_at = Vec::with_capacity(iters as usize);
        let mut wc = [Wc::default()];
        while sent < iters || received < iters {
            // The client sends first; the server waits for it.
            if received < iters && (self.server || sent > 0) {
                completions(
                    &self.res.recv_cq,
                    &mut wc,
                    self.opts.limits.step,
                    "SEND from the peer",
                )?;
                let data = self.receives.take(self.res, wc[0].wr_id)?;
                self.check.check(wc[0].byte_len, &data)?;
                received += 1;
            }
            if sent < iters {
                posted_at.push(Instant::now());
                sent += 1;
                let sge = [self.res.area.sge(0, size as u32)];
                let wr = SendWr {
                    wr_id: sent,
                    op: SendOp::Send,
                    sg_list: &sge,
                    flags: SendFlags::SIGNALED,
                    ud: None,
                };
                post_and_wait(self.res, self.opts, wr)?;
            }
        }
        Ok(LatStats::from_posts(self.opts.size, &posted_at, true))
    }

    pub fn verified(&self) -> String {
        format!(
            "{} messages of {} bytes arrived, all alike (ib_send_lat sends one buffer again and again)",
            self.check.received, self.opts.size
        )
    }
}

/// `ib_read_lat` and `ib_atomic_lat`: one READ or atomic at a time at the start of the
/// peer's buffer, the next once it has completed.
pub struct OneSidedLat<'a> {
    res: &'a Resources,
    opts: &'a Options,
    theirs: QpRecord,
    landing: Buffer,
    reads: ReadCheck,
    atomics: AtomicCheck,
}

impl<'a> OneSidedLat<'a> {
    pub fn new(
        res: &'a Resources,
        opts: &'a Options,
        theirs: &QpRecord,
    ) -> Result<OneSidedLat<'a>, ToolError> {
        Ok(OneSidedLat {
            res,
            opts,
            theirs: *theirs,
            landing: res.landing(opts.size as usize)?,
            reads: ReadCheck::default(),
            atomics: AtomicCheck::new(opts.atomic),
        })
    }

    fn op(&self) -> SendOp {
        let (remote_addr, rkey) = (self.theirs.vaddr, self.theirs.rkey);
        match self.opts.test.verb() {
            Verb::Atomic => self.opts.atomic.send_op(remote_addr, rkey),
            _ => SendOp::RdmaRead { remote_addr, rkey },
        }
    }

    pub fn run(&mut self) -> Result<LatStats, ToolError> {
        let size = self.opts.size as usize;
        let mut posted_at = Vec::with_capacity(self.opts.iters as usize);
        for n in 0..self.opts.iters {
            self.landing.fill(0, size, FILL);
            let sge = [self.landing.sge(0, size as u32)];
            let wr = SendWr {
                wr_id: n,
                op: self.op(),
                sg_list: &sge,
                flags: SendFlags::SIGNALED,
                ud: None,
            };
            posted_at.push(Instant::now());
            post_and_wait(self.res, self.opts, wr)?;
            let data = self.landing.read(0, size);
            if self.opts.test.verb() == Verb::Atomic {
                let value = u64::from_ne_bytes(data.try_into().unwrap_or_default());
                self.atomics.check(0, value)?;
            } else {
                self.reads.check(0, &data)?;
            }
        }
        Ok(LatStats::from_posts(self.opts.size, &posted_at, false))
    }

    pub fn verified(&self) -> String {
        match (self.opts.test.verb(), self.opts.atomic) {
            (Verb::Atomic, AtomicOp::FetchAndAdd) => format!(
                "{} fetch-and-adds, each returning one more than the last",
                self.atomics.results
            ),
            (Verb::Atomic, AtomicOp::CmpAndSwap) => format!(
                "{} compare-and-swaps, each returning the same value",
                self.atomics.results
            ),
            _ => format!(
                "{} RDMA READs of {} bytes brought the same bytes every time",
                self.reads.reads, self.opts.size
            ),
        }
    }
}

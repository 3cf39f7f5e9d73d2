//! The bandwidth tests' data phase: the client keeps `-t` requests in flight until `-n` have
//! completed, each at the next place of the buffers ([`Layout::place`]); the server of
//! `ib_send_bw` keeps receives posted and counts what arrives.
//!
//! [`Layout::place`]: super::layout::Layout::place

use std::time::Instant;

use roce_nic::verbs::{SendFlags, SendOp, SendWr, Sge, Wc};

use super::layout::Layout;
use super::messages::{BwReport, QpRecord};
use super::receives::Receives;
use super::resources::Resources;
use super::verify::{AtomicCheck, ReadCheck, SendCheck, FILL};
use super::{AtomicOp, Options, Verb};
use crate::memory::{completions, Buffer};
use crate::ToolError;

/// Landing memory a run may take for READ data or received messages; beyond it, fewer
/// requests or receives are kept outstanding.
const LANDING_BUDGET: u64 = 64 << 20;
/// Bytes of one atomic's result.
const ATOMIC_LEN: u64 = 8;

/// How many landing places of `len` bytes fit the budget, at most `want` and at least 1.
pub fn landing_places(want: u64, len: u64) -> u64 {
    want.min(LANDING_BUDGET / len.max(1)).max(1)
}

pub struct Client<'a> {
    res: &'a Resources,
    opts: &'a Options,
    /// Where this run's messages go: the resources' layout, or that of one size of `-a`.
    layout: Layout,
    theirs: QpRecord,
    /// Where READ data and atomic results land, one place per request in flight.
    landing: Option<Buffer>,
    places: u64,
    reads: ReadCheck,
    atomics: AtomicCheck,
    completed: u64,
}

impl<'a> Client<'a> {
    /// A run of `opts.size`-byte messages at the places of `layout`.
    pub fn new(
        res: &'a Resources,
        opts: &'a Options,
        layout: Layout,
        theirs: &QpRecord,
    ) -> Result<Client<'a>, ToolError> {
        let (places, landing) = match opts.test.verb() {
            Verb::Read => {
                let places = landing_places(u64::from(opts.tx_depth), opts.size);
                (places, Some(res.landing((places * opts.size) as usize)?))
            }
            Verb::Atomic => {
                let places = u64::from(opts.tx_depth);
                (places, Some(res.landing((places * ATOMIC_LEN) as usize)?))
            }
            Verb::Write | Verb::Send => (u64::from(opts.tx_depth), None),
        };
        Ok(Client {
            res,
            opts,
            layout,
            theirs: *theirs,
            landing,
            places,
            reads: ReadCheck::default(),
            atomics: AtomicCheck::new(opts.atomic),
            completed: 0,
        })
    }

    pub fn run(&mut self) -> Result<BwReport, ToolError> {
        let iters = self.opts.iters;
        let depth = u64::from(self.opts.tx_depth).min(self.places);
        let mut posted_at = Vec::with_capacity(iters as usize);
        let mut completed_at = Vec::with_capacity(iters as usize);
        let mut wcs = [Wc::default(); 64];
        while self.completed < iters {
            let posted = posted_at.len() as u64;
            let room = depth - (posted - self.completed);
            let batch = room.min(iters - posted);
            if batch > 0 {
                self.post(posted, batch)?;
                let now = Instant::now();
                posted_at.extend(std::iter::repeat_n(now, batch as usize));
            }
            let n = completions(
                &self.res.send_cq,
                &mut wcs,
                self.opts.limits.step,
                "RDMA request",
            )?;
            let now = Instant::now();
            for wc in &wcs[..n] {
                self.check(wc.wr_id)?;
                completed_at.push(now);
                self.completed += 1;
            }
        }
        Ok(BwReport::measure(self.opts.size, &posted_at, &completed_at))
    }

    /// Posts requests `first..first + count`, one doorbell for all.
    fn post(&self, first: u64, count: u64) -> Result<(), ToolError> {
        let layout = &self.layout;
        let size = self.opts.size;
        let sges: Vec<[Sge; 1]> = (first..first + count)
            .map(|n| match self.opts.test.verb() {
                Verb::Read => {
                    let at = ((n % self.places) * size) as usize;
                    let landing = self.landing.as_ref().expect("READs have a landing buffer");
                    landing.fill(at, size as usize, FILL);
                    [landing.sge(at, size as u32)]
                }
                Verb::Atomic => {
                    let at = ((n % self.places) * ATOMIC_LEN) as usize;
                    let landing = self
                        .landing
                        .as_ref()
                        .expect("atomics have a landing buffer");
                    [landing.sge(at, ATOMIC_LEN as u32)]
                }
                Verb::Write | Verb::Send => {
                    [self.res.area.sge(layout.place(n) as usize, size as u32)]
                }
            })
            .collect();
        let wrs: Vec<SendWr<'_>> = (first..first + count)
            .zip(&sges)
            .map(|(n, sge)| SendWr {
                wr_id: n,
                op: self.op(n),
                sg_list: sge,
                flags: SendFlags::SIGNALED,
                ud: None,
            })
            .collect();
        self.res.qp.post_send(&wrs)?;
        Ok(())
    }

    fn op(&self, n: u64) -> SendOp {
        let remote_addr = self.theirs.vaddr + self.layout.place(n);
        let rkey = self.theirs.rkey;
        match self.opts.test.verb() {
            Verb::Write => SendOp::RdmaWrite { remote_addr, rkey },
            Verb::Read => SendOp::RdmaRead { remote_addr, rkey },
            Verb::Send => SendOp::Send,
            Verb::Atomic => self.opts.atomic.send_op(remote_addr, rkey),
        }
    }

    /// Checks what request `n` brought back.
    fn check(&mut self, n: u64) -> Result<(), ToolError> {
        let place = self.layout.place(n);
        let Some(landing) = &self.landing else {
            return Ok(());
        };
        if self.opts.test.verb() == Verb::Read {
            let data = landing.read(
                ((n % self.places) * self.opts.size) as usize,
                self.opts.size as usize,
            );
            self.reads.check(place, &data)
        } else {
            let bytes = landing.read(
                ((n % self.places) * ATOMIC_LEN) as usize,
                ATOMIC_LEN as usize,
            );
            let value = u64::from_ne_bytes(bytes.try_into().unwrap_or_default());
            self.atomics.check(place, value)
        }
    }

    pub fn verified(&self) -> String {
        let size = self.opts.size;
        let n = self.completed;
        match (self.opts.test.verb(), self.opts.atomic) {
            (Verb::Write, _) => format!(
                "{n} RDMA WRITEs of {size} bytes completed (the peer's memory is out of reach)"
            ),
            (Verb::Send, _) => format!("{n} SENDs of {size} bytes completed"),
            (Verb::Read, _) => format!(
                "{} RDMA READs of {size} bytes; every READ of a place brought the same bytes",
                self.reads.reads
            ),
            (Verb::Atomic, AtomicOp::FetchAndAdd) => format!(
                "{} fetch-and-adds; at each of {} places each returned one more than the last",
                self.atomics.results,
                self.atomics.places()
            ),
            (Verb::Atomic, AtomicOp::CmpAndSwap) => format!(
                "{} compare-and-swaps; at each of {} places each returned the same value",
                self.atomics.results,
                self.atomics.places()
            ),
        }
    }
}

/// The receiving side of `ib_send_bw`.
pub struct Receiver<'a> {
    res: &'a Resources,
    opts: &'a Options,
    receives: Receives,
    check: SendCheck,
}

impl<'a> Receiver<'a> {
    /// Posts the receives (before the last round, after which the client sends); the sender
    /// takes the places of `layout` in turn.
    pub fn new(
        res: &'a Resources,
        opts: &'a Options,
        layout: Layout,
        receives: u32,
    ) -> Result<Receiver<'a>, ToolError> {
        Ok(Receiver {
            res,
            opts,
            receives: Receives::post_first(res, opts, receives)?,
            check: SendCheck::new(opts.size as usize, layout.places()),
        })
    }

    pub fn run(&mut self) -> Result<BwReport, ToolError> {
        let mut wcs = [Wc::default(); 64];
        let mut first = None;
        while self.check.received < self.opts.iters {
            let n = completions(
                &self.res.recv_cq,
                &mut wcs,
                self.opts.limits.step,
                "SEND from the client",
            )?;
            first.get_or_insert_with(Instant::now);
            for wc in &wcs[..n] {
                let data = self.receives.take(self.res, wc.wr_id)?;
                self.check.check(wc.byte_len, &data)?;
            }
        }
        let elapsed = first.map(|t| t.elapsed()).unwrap_or_default();
        Ok(BwReport::whole_run(
            self.opts.size,
            self.opts.iters,
            elapsed,
        ))
    }

    pub fn verified(&self) -> String {
        format!(
            "{} messages of {} bytes, each equal to the one sent from the same place of the sender's buffer",
            self.check.received, self.opts.size
        )
    }
}

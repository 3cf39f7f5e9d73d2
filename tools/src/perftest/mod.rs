//! perftest's `ib_write_bw`, `ib_write_lat`, `ib_read_bw`, `ib_read_lat`, `ib_send_bw`,
//! `ib_send_lat`, `ib_atomic_bw` and `ib_atomic_lat` (fetch-and-add and compare-and-swap), over
//! RC, with perftest's own out-of-band exchange ([`messages`], and `session.rs` for its order).
//!
//! The wire sees what it sees from perftest: the same QP attributes (path MTU the smaller of
//! both sides', timeout `-u`, 7 retries, responder resources from the records), requests of
//! `-s` bytes at the addresses perftest uses ([`layout`]), `-t` of them outstanding in the
//! bandwidth tests, the latency tests' ping-pong (`ib_write_lat` spins on the last byte of its
//! buffer). The client always asks for a completion per request (perftest asks for one in 100);
//! that is not visible to the peer.
//!
//! perftest checks no data. These runs do, as far as the data is knowable (perftest fills its
//! buffers with random bytes, except `ib_write_lat`'s zeros): each run ends with a `verified:`
//! line saying what was checked, see `verify.rs`.

mod bw;
mod lat;
pub mod layout;
pub mod messages;
mod rdma_cm;
mod receives;
mod report;
mod resources;
mod session;
mod sweep;
mod verify;

use std::io::Write;

use roce_nic::verbs::{Context, Mtu, SendOp};

use crate::oob::{Channel, Limits, Role};
use crate::ToolError;
use layout::Layout;
pub use messages::BwReport;
pub use report::LatStats;

/// The tests, by the real program's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Test {
    WriteBw,
    WriteLat,
    ReadBw,
    ReadLat,
    SendBw,
    SendLat,
    AtomicBw,
    AtomicLat,
}

/// What a test's requests do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Write,
    Read,
    Send,
    Atomic,
}

/// `ib_atomic_bw -A`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    FetchAndAdd,
    CmpAndSwap,
}

impl AtomicOp {
    pub fn name(self) -> &'static str {
        match self {
            AtomicOp::FetchAndAdd => "FETCH_AND_ADD",
            AtomicOp::CmpAndSwap => "CMP_AND_SWAP",
        }
    }

    /// The work request perftest posts for this atomic, with its operands.
    pub fn send_op(self, remote_addr: u64, rkey: u32) -> SendOp {
        match self {
            AtomicOp::FetchAndAdd => SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add: ATOMIC_ADD,
            },
            AtomicOp::CmpAndSwap => SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare: ATOMIC_COMPARE,
                swap: ATOMIC_SWAP,
            },
        }
    }
}

/// What perftest adds in a fetch-and-add, and compares and swaps in a compare-and-swap.
pub const ATOMIC_ADD: u64 = 1;
pub const ATOMIC_COMPARE: u64 = 0;
pub const ATOMIC_SWAP: u64 = 0;

impl Test {
    pub fn program(self) -> &'static str {
        match self {
            Test::WriteBw => "ib_write_bw",
            Test::WriteLat => "ib_write_lat",
            Test::ReadBw => "ib_read_bw",
            Test::ReadLat => "ib_read_lat",
            Test::SendBw => "ib_send_bw",
            Test::SendLat => "ib_send_lat",
            Test::AtomicBw => "ib_atomic_bw",
            Test::AtomicLat => "ib_atomic_lat",
        }
    }

    pub fn verb(self) -> Verb {
        match self {
            Test::WriteBw | Test::WriteLat => Verb::Write,
            Test::ReadBw | Test::ReadLat => Verb::Read,
            Test::SendBw | Test::SendLat => Verb::Send,
            Test::AtomicBw | Test::AtomicLat => Verb::Atomic,
        }
    }

    pub fn is_bw(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::SendBw | Test::AtomicBw
        )
    }

    /// Whether the server only answers while the client runs the test (and sends nothing).
    fn server_passive(self) -> bool {
        matches!(
            self,
            Test::WriteBw | Test::ReadBw | Test::AtomicBw | Test::ReadLat | Test::AtomicLat
        )
    }

    /// QP-record rounds before the data: the bandwidth tests of one-sided verbs make three;
    /// the others four.
    fn rounds_before_run(self) -> usize {
        match self {
            Test::WriteBw | Test::ReadBw | Test::AtomicBw => 3,
            _ => 4,
        }
    }
}

/// The options, named as perftest's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub test: Test,
    /// `-A`, for `ib_atomic_bw`.
    pub atomic: AtomicOp,
    /// `-s`: bytes per message (8 for atomics).
    pub size: u64,
    /// `-n`: messages.
    pub iters: u64,
    /// `-t`: requests outstanding at once.
    pub tx_depth: u32,
    /// `-r`: receives posted in the SEND tests.
    pub rx_depth: u32,
    /// `-m`: the path MTU offered (the smaller of both sides' is used); default the NIC's.
    pub mtu: Option<Mtu>,
    /// `-x`: the GID index.
    pub gid_index: u8,
    /// `-p`: the TCP port of the exchange.
    pub port: u16,
    /// `-u`: the QP's retransmission timeout (4.096 µs × 2^u).
    pub qp_timeout: u8,
    /// `--report_gbits`: bandwidth in Gb/s rather than MB/s.
    pub report_gbits: bool,
    /// `-a`: every size from 2 bytes to [`MAX_SIZE`] (not the atomic tests).
    pub all_sizes: bool,
    /// `-R`: connect the QPs through the RDMA CM, and exchange over it (port `-p`).
    pub rdma_cm: bool,
    pub limits: Limits,
}

/// The page size and cache line this side announces.
const PAGE: u32 = 4096;
const CACHE_LINE: u32 = 64;
/// Most messages a run takes: it keeps a timestamp or two per message (perftest itself stops
/// at 10^8).
const MAX_ITERS: u64 = 10_000_000;
/// perftest's largest message, the size of the buffers of `-a`.
pub const MAX_SIZE: u64 = 1 << 23;
/// perftest computes no peak bandwidth past this many messages.
const PEAK_LIMIT: u64 = 20_000;

impl Options {
    /// perftest's defaults (its GID index is the best RoCE v2 GID; here it is 1, the NIC's
    /// IPv4 one).
    pub fn new(test: Test) -> Options {
        let lat = !test.is_bw();
        Options {
            test,
            atomic: AtomicOp::FetchAndAdd,
            size: match test {
                Test::AtomicBw | Test::AtomicLat => 8,
                _ if lat => 2,
                _ => 65536,
            },
            iters: if test == Test::WriteBw { 5000 } else { 1000 },
            tx_depth: if lat { 1 } else { 128 },
            rx_depth: 512,
            mtu: None,
            gid_index: 1,
            port: 18515,
            qp_timeout: 14,
            report_gbits: false,
            all_sizes: false,
            rdma_cm: false,
            limits: Limits::default(),
        }
    }

    fn check_against(&self, ctx: &Context) -> Result<(), ToolError> {
        let usage = |m: String| Err(ToolError::Usage(m));
        if self.all_sizes && self.test.verb() == Verb::Atomic {
            // perftest refuses it too: atomics are 8 bytes.
            return usage("-a (every size) does not apply to atomics, which are 8 bytes".into());
        }
        if self.test.verb() == Verb::Atomic && self.size != 8 {
            return usage(format!("atomics are 8 bytes, not {}", self.size));
        }
        if self.size == 0 || self.size > u64::from(u32::MAX) {
            return usage(format!(
                "a message of {} bytes is not one a work request can carry",
                self.size
            ));
        }
        if !(5..=MAX_ITERS).contains(&self.iters) {
            return usage(format!(
                "perftest runs 5 to {MAX_ITERS} iterations here, not {}",
                self.iters
            ));
        }
        if self.tx_depth == 0 || self.rx_depth == 0 {
            return usage("the TX and RX depths must be above 0".into());
        }
        let max = ctx.device().max_mtu;
        if let Some(mtu) = self.mtu.filter(|m| *m > max) {
            return usage(format!(
                "path MTU {mtu} is above the NIC's largest, {max} (raise the link MTU)"
            ));
        }
        if ctx.gid(self.gid_index).is_none() {
            return usage(format!("the NIC has no GID at index {}", self.gid_index));
        }
        Ok(())
    }
}

/// What a finished run measured, and what it checked (one sentence).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub result: Measured,
    pub verified: String,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Measured {
    Bw(BwReport),
    /// `-a`: what each size measured, smallest first.
    Sweep(Vec<Measured>),
    Lat(LatStats),
    /// A latency test's passive server measures nothing (perftest prints no result there).
    Nothing,
}

/// Runs one perftest against a peer, printing perftest's kind of output to `out` and a
/// `verified:` line.
pub fn run(
    ctx: &Context,
    opts: &Options,
    role: Role,
    out: &mut dyn Write,
) -> Result<Outcome, ToolError> {
    opts.check_against(ctx)?;
    let mut opts = *opts;
    if opts.all_sizes {
        // As perftest: buffers for the largest size; each run of the sweep sets its own.
        opts.size = MAX_SIZE;
    }
    if opts.test.is_bw() {
        // As perftest: no more outstanding than there are messages.
        opts.tx_depth = opts.tx_depth.min(opts.iters as u32);
    }
    let opts = &opts;
    let link = if opts.rdma_cm {
        session::Link::Cm(rdma_cm::CmLink::open(ctx, role, opts.port, opts.limits)?)
    } else {
        session::Link::Tcp(Channel::open(ctx, role, opts.port, opts.limits)?)
    };
    let mut session = session::Session::start(link, ctx, opts)?;
    let layout = session.layout(opts.size);
    let receives = match opts.test {
        Test::SendBw | Test::SendLat => opts.rx_depth.min(opts.iters as u32),
        _ => 1,
    };
    let res = resources::Resources::new(ctx, opts, layout, receives)?;
    if let Some(link) = session.link_mut() {
        link.connect_test_qp(&res.qp, res.access, res.mine.out_reads.min(255) as u8)?;
    }
    verify::prepare_peer_half(&res, opts);
    report::header(out, opts, session.mtu(), ctx)?;
    let theirs = session.round(&res.mine)?;
    if !opts.rdma_cm {
        res.connect(&theirs, session.mtu(), opts, role)?;
    }
    let before = ctx.counters()?;
    let (measured, checked) = if opts.all_sizes {
        let (sends, before_sweep) = sweep::rounds(opts.test);
        for _ in 1..before_sweep {
            session.round(&res.mine)?;
        }
        report::addresses(out, opts, &res.mine, &theirs)?;
        let mut sizes = sweep::Sweep::new(&res, opts, role, &theirs, receives, sends);
        (sizes.run(&mut session, out)?, sizes.verified())
    } else {
        let mut phase = Phase::new(&res, opts, res.layout, role, &theirs, receives)?;
        for _ in 1..opts.test.rounds_before_run() {
            session.round(&res.mine)?;
        }
        report::addresses(out, opts, &res.mine, &theirs)?;
        let measured = in_units(phase.run()?, opts);
        (measured, phase.verified())
    };
    let result = finish(session, &res.mine, opts, role, measured)?;
    let verified = match checked {
        Some(v) => v,
        None => verify::passive_server(&res, opts, &theirs, &ctx.counters()?.since(&before))?,
    };
    report::result(out, &result, opts.report_gbits)?;
    writeln!(out, "verified: {verified}")?;
    Ok(Outcome { result, verified })
}

/// A bandwidth report in the units asked for (`--report_gbits`).
fn in_units(measured: Measured, opts: &Options) -> Measured {
    match measured {
        Measured::Bw(report) if opts.report_gbits => Measured::Bw(report.in_gbits()),
        measured => measured,
    }
}

/// What follows the data phase over TCP, as each test has it: a bandwidth test of a one-sided
/// verb swaps records, then the client's report, then records once more; the others swap records
/// once; `ib_write_lat` says nothing more. Returns what the side prints: a bandwidth server
/// prints the client's report as its own, as perftest's does.
fn finish(
    mut session: session::Session,
    mine: &messages::QpRecord,
    opts: &Options,
    role: Role,
    measured: Measured,
) -> Result<Measured, ToolError> {
    match opts.test {
        Test::WriteBw | Test::ReadBw | Test::AtomicBw => {
            let ours = match &measured {
                Measured::Bw(report) => *report,
                Measured::Sweep(sizes) => match sizes.last() {
                    Some(Measured::Bw(report)) => *report,
                    _ => BwReport::default(),
                },
                _ => BwReport::default(),
            };
            session.round(mine)?;
            let theirs = session.reports(&ours)?;
            session.round(mine)?;
            session.close(true)?;
            Ok(if role == Role::Server {
                Measured::Bw(theirs)
            } else {
                measured
            })
        }
        Test::SendBw | Test::SendLat | Test::ReadLat | Test::AtomicLat => {
            session.round(mine)?;
            session.close(true)?;
            Ok(measured)
        }
        Test::WriteLat => {
            session.close(false)?;
            Ok(measured)
        }
    }
}

/// The data phase of one side.
enum Phase<'a> {
    BwClient(bw::Client<'a>),
    SendBwServer(bw::Receiver<'a>),
    WriteLat(lat::WriteLat<'a>),
    SendLat(lat::SendLat<'a>),
    OneSidedLat(lat::OneSidedLat<'a>),
    /// The server of a one-sided test: its NIC answers, it does nothing.
    Passive,
}

impl<'a> Phase<'a> {
    /// Readies the phase; the SEND tests post their receives here, before the last round,
    /// after which the peer may send.
    fn new(
        res: &'a resources::Resources,
        opts: &'a Options,
        layout: Layout,
        role: Role,
        theirs: &messages::QpRecord,
        receives: u32,
    ) -> Result<Phase<'a>, ToolError> {
        let server = role == Role::Server;
        Ok(match opts.test {
            Test::WriteLat => Phase::WriteLat(lat::WriteLat::new(res, opts, theirs, server)),
            Test::SendLat => Phase::SendLat(lat::SendLat::new(res, opts, server, receives)?),
            Test::SendBw if server => {
                Phase::SendBwServer(bw::Receiver::new(res, opts, layout, receives)?)
            }
            _ if server && opts.test.server_passive() => Phase::Passive,
            Test::ReadLat | Test::AtomicLat => {
                Phase::OneSidedLat(lat::OneSidedLat::new(res, opts, theirs)?)
            }
            _ => Phase::BwClient(bw::Client::new(res, opts, layout, theirs)?),
        })
    }

    fn run(&mut self) -> Result<Measured, ToolError> {
        match self {
            Phase::BwClient(c) => c.run().map(Measured::Bw),
            Phase::SendBwServer(r) => r.run().map(Measured::Bw),
            Phase::WriteLat(l) => l.run().map(Measured::Lat),
            Phase::SendLat(l) => l.run().map(Measured::Lat),
            Phase::OneSidedLat(l) => l.run().map(Measured::Lat),
            Phase::Passive => Ok(Measured::Nothing),
        }
    }

    /// What an active side checked; `None` for a passive server, which checks afterwards.
    fn verified(&self) -> Option<String> {
        match self {
            Phase::BwClient(c) => Some(c.verified()),
            Phase::SendBwServer(r) => Some(r.verified()),
            Phase::WriteLat(l) => Some(l.verified()),
            Phase::SendLat(l) => Some(l.verified()),
            Phase::OneSidedLat(l) => Some(l.verified()),
            Phase::Passive => None,
        }
    }
}

//! `roce host serve`: the target side. It registers a region, keeps a QP, and connects that QP
//! to each peer whose `LID:QPN:PSN:GID` it is given. RDMA WRITEs, READs and atomics need no
//! code here at all: the NIC moves the bytes while this process sleeps (or is stopped). SENDs
//! land at the start of the region, and their completions are printed.
//!
//! Standard input takes one command a line: a peer's `LID:QPN:PSN:GID` (re-connects the QP to
//! it), `show OFFSET LEN` (prints the region's bytes as `hexdump -C` does), or `help`.

use std::io::{self, BufRead, Write};
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, TryRecvError};
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{parse_size, Access, Region};
use roce_nic::verbs::{
    CompletionQueue, MemoryRegion, Mtu, QpCap, QpType, QueuePair, RecvWr, Sge, Wc, WcOpcode,
    WcStatus,
};

use super::{completion_line, connect_qp, path_mtu, quoted, random_psn, verbs_failure, Endpoint};
use crate::mem::hexdump::{Hexdump, LINE};
use crate::mem::parse_offset;
use crate::signals::Shutdown;
use crate::Failure;

/// What peers may do to the served region (and a QP lets them do): everything.
pub fn remote_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// Receives kept posted for incoming SENDs.
const RECEIVES: u32 = 16;
/// How often the loop looks for Ctrl-C and for lines from standard input between completions.
const TICK: Duration = Duration::from_millis(100);
/// Bytes of a received SEND shown in its completion line.
const SHOWN: usize = 64;

pub const EXAMPLES: &str = "\
Examples:
  roce host serve --nic nic1 --region buf --size 1M
then paste each peer's `local` line (from roce host post or roce host connect), or type
  show 0 64           the region's first 64 bytes, as hexdump -C shows them
  help                the commands
The region stays readable from outside: roce mem dump buf.";

const HELP: &str = "\
commands, one a line:
  LID:QPN:PSN:GID     connect the QP to this peer (the `local` line of roce host post or connect)
  show OFFSET LEN     print LEN bytes of the region from OFFSET, as hexdump -C does
  help                this list
Ctrl-C ends the server.";

#[derive(clap::Args)]
pub struct Args {
    /// The NIC's name (as given to `roce nic --name`).
    #[arg(long)]
    nic: String,
    /// The region to serve; created with --size if it does not exist.
    #[arg(long)]
    region: String,
    /// Size of the region to create (K, M, G suffixes); rounded up to whole pages.
    #[arg(long)]
    size: Option<String>,
    /// The first peer's LID:QPN:PSN:GID (more can be given on standard input).
    #[arg(long, value_name = "LID:QPN:PSN:GID")]
    peer: Option<String>,
    /// Index of the GID to send from (1 is the NIC's IPv4 address).
    #[arg(long, default_value_t = 1)]
    gid_index: u8,
    /// Path MTU: 256, 512, 1024, 2048 or 4096 (default: the largest the NIC carries).
    #[arg(short, long)]
    mtu: Option<u32>,
}

/// The region: attached if it exists, otherwise created (and removed again at exit).
pub(super) fn region(name: &str, size: Option<usize>) -> Result<Region, Failure> {
    match Region::attach(name) {
        Ok(region) => Ok(region),
        Err(roce_hostmem::RegionError::NotFound { .. }) => {
            let Some(size) = size else {
                return Err(Failure::usage(format!(
                    "region {name} does not exist: give --size to create it"
                )));
            };
            Region::create(name, size).map_err(|e| Failure::new(e.to_string()))
        }
        Err(e) => Err(Failure::usage(e.to_string())),
    }
}

/// Everything the served QP needs.
struct Target {
    qp: QueuePair,
    cq: CompletionQueue,
    region: Arc<Region>,
    mr: MemoryRegion,
    psn: u32,
}

impl Target {
    /// Keeps receives posted, each for the whole region from its start.
    fn post_receives(&self, n: u32) -> Result<(), Failure> {
        let sge = [Sge {
            addr: self.mr.va,
            length: self.mr.len.min(u64::from(u32::MAX)) as u32,
            lkey: self.mr.lkey,
        }];
        for _ in 0..n {
            self.qp
                .post_recv(&[RecvWr {
                    wr_id: 0,
                    sg_list: &sge,
                }])
                .map_err(verbs_failure)?;
        }
        Ok(())
    }

    fn show(&self, offset: u64, len: u64) -> Result<(), Failure> {
        let end = offset.saturating_add(len).min(self.region.len() as u64);
        let mut bytes = vec![0; end.saturating_sub(offset) as usize];
        self.region
            .read(offset as usize, &mut bytes)
            .map_err(|e| Failure::usage(e.to_string()))?;
        let mut out = io::stdout().lock();
        let mut hexdump = Hexdump::default();
        for (i, line) in bytes.chunks(LINE).enumerate() {
            let _ = hexdump.line(&mut out, offset + (i * LINE) as u64, line);
        }
        let _ = writeln!(out, "{end:08x}");
        Ok(())
    }
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let shutdown = Shutdown::block();
    // Every argument is checked before anything is made.
    let first_peer: Option<Endpoint> = args
        .peer
        .as_deref()
        .map(str::parse)
        .transpose()
        .map_err(Failure::usage)?;
    let size = args
        .size
        .as_deref()
        .map(|text| parse_size(text).map_err(|e| Failure::usage(format!("--size {text}: {e}"))))
        .transpose()?;
    let ctx = super::open(&args.nic)?;
    let mtu = path_mtu(&ctx, args.mtu)?;
    let gid = ctx.gid(args.gid_index).ok_or_else(|| {
        Failure::usage(format!(
            "the NIC {} has no GID {}",
            args.nic, args.gid_index
        ))
    })?;
    let region = Arc::new(region(&args.region, size)?);
    let pd = ctx.alloc_pd().map_err(verbs_failure)?;
    let cq = ctx.create_cq(256).map_err(verbs_failure)?;
    let cap = QpCap {
        max_recv_wr: RECEIVES,
        ..QpCap::default()
    };
    let qp = pd
        .create_qp(QpType::Rc, &cq, &cq, cap)
        .map_err(verbs_failure)?;
    let mr = pd
        .register(&region, 0, region.len(), remote_access())
        .map_err(verbs_failure)?;
    let target = Target {
        qp,
        cq,
        region,
        mr,
        psn: random_psn(),
    };
    let me = Endpoint {
        lid: 0,
        qpn: target.qp.qp_num(),
        psn: target.psn,
        gid,
    };
    say!("local {me}");
    say!(
        "memory {} rkey={:#010x} va={:#x} len={}",
        args.region,
        target.mr.rkey,
        target.mr.va,
        target.mr.len
    );
    let peers = stdin_lines();
    let mut state = State {
        mtu,
        gid_index: args.gid_index,
        in_error: false,
    };
    if let Some(peer) = &first_peer {
        connect(&target, peer, &mut state)?;
    } else {
        tell!(
            "waiting for the peer's LID:QPN:PSN:GID on standard input (this is process {}; \
             help lists the commands)",
            std::process::id()
        );
    }
    serve(&target, &peers, &shutdown, &mut state)?;
    Ok(ExitCode::SUCCESS)
}

/// How the QP connects, and whether it has gone into the error state since it last did.
struct State {
    mtu: Mtu,
    gid_index: u8,
    in_error: bool,
}

/// Connects to `peer` and posts fresh receives (a reconnect flushes the old ones).
fn connect(target: &Target, peer: &Endpoint, state: &mut State) -> Result<(), Failure> {
    connect_qp(&target.qp, peer, target.psn, state.mtu, state.gid_index).map_err(verbs_failure)?;
    target.post_receives(RECEIVES)?;
    state.in_error = false;
    say!("connected to {peer}");
    Ok(())
}

/// Lines of standard input, read by a thread so the main loop never blocks on them.
fn stdin_lines() -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn serve(
    target: &Target,
    lines: &Receiver<String>,
    shutdown: &Shutdown,
    state: &mut State,
) -> Result<(), Failure> {
    let mut wcs = [Wc::default(); 16];
    let mut stdin_open = true;
    while shutdown.within(Duration::ZERO).is_none() {
        while stdin_open {
            match lines.try_recv() {
                Ok(line) => command(target, line.trim(), state),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => stdin_open = false,
            }
        }
        let n = target
            .cq
            .try_wait(&mut wcs, Some(TICK))
            .map_err(verbs_failure)?;
        for wc in &wcs[..n] {
            completed(target, wc, state)?;
        }
    }
    Ok(())
}

/// One line of standard input. A bad line is reported and the service goes on.
fn command(target: &Target, line: &str, state: &mut State) {
    let result = match line.split_whitespace().collect::<Vec<_>>()[..] {
        [] => Ok(()),
        ["help"] => {
            say!("{HELP}");
            Ok(())
        }
        ["show", offset, len] => parse_offset("OFFSET", offset)
            .and_then(|o| Ok((o, parse_offset("LEN", len)?)))
            .and_then(|(o, l)| target.show(o, l)),
        ["show", ..] => Err(Failure::usage("write it as `show OFFSET LEN`")),
        _ => match line.parse::<Endpoint>() {
            Ok(peer) => connect(target, &peer, state),
            Err(e) => Err(Failure::usage(format!(
                "{e}; or a command: help lists them"
            ))),
        },
    };
    if let Err(e) = result {
        tell!("roce: {e}");
    }
}

fn completed(target: &Target, wc: &Wc, state: &mut State) -> Result<(), Failure> {
    // A QP in the error state hands back every posted receive as flushed: one line says so,
    // not one line each.
    if wc.status == WcStatus::WrFlushErr {
        if !state.in_error {
            state.in_error = true;
            say!(
                "the QP went into the error state (a peer's request was refused) and flushed its \
                 posted receives; give a peer's line to connect again"
            );
        }
        return Ok(());
    }
    let mut line = completion_line(wc, u64::from(wc.byte_len));
    if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
        let mut head = vec![0; (wc.byte_len as usize).min(SHOWN)];
        let _ = target.region.read(0, &mut head);
        line = format!("{line} {}", quoted(&head));
    }
    say!("{line}");
    if wc.status == WcStatus::Success && wc.opcode == WcOpcode::Recv {
        target.post_receives(1)?;
    }
    Ok(())
}

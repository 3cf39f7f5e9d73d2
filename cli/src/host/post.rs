//! `roce host post`: the initiator side. It creates a QP, prints its `LID:QPN:PSN:GID` for the
//! server, waits for Enter (the server must have connected to it before anything is sent),
//! connects to the server's QP and posts one work request; then prints the completion, and
//! for a READ or an atomic what came back.

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, Region};
use roce_nic::verbs::{QpCap, QpType, SendFlags, SendOp, SendWr, Wc, WcStatus};

use super::{completion_line, connect_qp, path_mtu, quoted, random_psn, verbs_failure, Endpoint};
use crate::mem::hexdump::{Hexdump, LINE};
use crate::mem::parse_offset;
use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The NIC's name (as given to `roce nic --name`).
    #[arg(long)]
    nic: String,
    /// The server's LID:QPN:PSN:GID, as `roce host serve` printed it.
    #[arg(long, value_name = "LID:QPN:PSN:GID")]
    peer: String,
    /// RDMA WRITE the data (--data, --hex or --file) to --va.
    #[arg(long)]
    write: bool,
    /// SEND the data; it lands where the server's receive buffer is.
    #[arg(long)]
    send: bool,
    /// RDMA READ this many bytes from --va and print them.
    #[arg(long, value_name = "LEN")]
    read: Option<String>,
    /// Atomically add N to the 8 bytes at --va; prints the value before.
    #[arg(long, value_name = "N")]
    fetch_add: Option<String>,
    /// Atomically replace the 8 bytes at --va with S if they equal C; prints the value before.
    #[arg(long, value_name = "C,S")]
    cmp_swap: Option<String>,
    /// The data, as text.
    #[arg(long, value_name = "TEXT")]
    data: Option<String>,
    /// The data, as hex digits (spaces allowed).
    #[arg(long, value_name = "HEX")]
    hex: Option<String>,
    /// The data, from a file.
    #[arg(long, value_name = "PATH")]
    file: Option<PathBuf>,
    /// The server's rkey (decimal or 0x-hex).
    #[arg(long)]
    rkey: Option<String>,
    /// The remote virtual address (decimal or 0x-hex).
    #[arg(long)]
    va: Option<String>,
    /// Index of the GID to send from (1 is the NIC's IPv4 address).
    #[arg(long, default_value_t = 1)]
    gid_index: u8,
    /// Path MTU (default: the largest the NIC carries).
    #[arg(long)]
    mtu: Option<u32>,
    /// Seconds to wait for the completion.
    #[arg(long, default_value_t = 10)]
    timeout: u64,
}

/// The one operation asked for, with its operands but not yet its remote address.
#[derive(Debug, PartialEq, Eq)]
enum Op {
    Write(Vec<u8>),
    Send(Vec<u8>),
    Read(usize),
    FetchAdd(u64),
    CmpSwap(u64, u64),
}

impl Op {
    fn from_args(args: &Args) -> Result<Op, Failure> {
        let given = [
            args.write,
            args.send,
            args.read.is_some(),
            args.fetch_add.is_some(),
            args.cmp_swap.is_some(),
        ];
        if given.iter().filter(|g| **g).count() != 1 {
            return Err(Failure::usage(
                "give one operation: --write, --send, --read LEN, --fetch-add N or --cmp-swap C,S",
            ));
        }
        let number = |what, text: &str| parse_offset(what, text);
        Ok(if args.write {
            Op::Write(data(args)?)
        } else if args.send {
            Op::Send(data(args)?)
        } else if let Some(len) = &args.read {
            Op::Read(number("LEN", len)? as usize)
        } else if let Some(n) = &args.fetch_add {
            Op::FetchAdd(number("N", n)?)
        } else {
            let text = args.cmp_swap.as_deref().unwrap_or_default();
            let (c, s) = text
                .split_once(',')
                .ok_or_else(|| Failure::usage(format!("--cmp-swap {text:?} is not C,S")))?;
            Op::CmpSwap(number("C", c)?, number("S", s)?)
        })
    }

    /// Bytes of local memory the operation needs.
    fn local_len(&self) -> usize {
        match self {
            Op::Write(d) | Op::Send(d) => d.len(),
            Op::Read(n) => *n,
            Op::FetchAdd(_) | Op::CmpSwap(..) => 8,
        }
    }

    fn name(&self) -> &'static str {
        match self {
            Op::Write(_) => "RDMA WRITE",
            Op::Send(_) => "SEND",
            Op::Read(_) => "RDMA READ",
            Op::FetchAdd(_) => "fetch-and-add",
            Op::CmpSwap(..) => "compare-and-swap",
        }
    }
}

/// The data of a WRITE or SEND, from exactly one of --data, --hex and --file.
fn data(args: &Args) -> Result<Vec<u8>, Failure> {
    match (&args.data, &args.hex, &args.file) {
        (Some(text), None, None) => Ok(text.as_bytes().to_vec()),
        (None, Some(hex), None) => parse_hex(hex),
        (None, None, Some(path)) => std::fs::read(path)
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", path.display()))),
        _ => Err(Failure::usage(
            "give the data with one of --data TEXT, --hex HEX or --file PATH",
        )),
    }
}

fn parse_hex(text: &str) -> Result<Vec<u8>, Failure> {
    let digits: Vec<u8> = text.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    let bad = || {
        Failure::usage(format!(
            "--hex {text:?} is not an even number of hex digits"
        ))
    };
    if digits.len() % 2 != 0 {
        return Err(bad());
    }
    digits
        .chunks(2)
        .map(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|p| u8::from_str_radix(p, 16).ok())
                .ok_or_else(bad)
        })
        .collect()
}

/// The remote address and key, which every operation but SEND needs.
fn remote(args: &Args) -> Result<(u64, u32), Failure> {
    let (Some(va), Some(rkey)) = (&args.va, &args.rkey) else {
        return Err(Failure::usage("this operation needs --rkey and --va"));
    };
    let rkey = parse_offset("rkey", rkey)?;
    let rkey = u32::try_from(rkey)
        .map_err(|_| Failure::usage(format!("rkey {rkey:#x} is wider than 32 bits")))?;
    Ok((parse_offset("va", va)?, rkey))
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let op = Op::from_args(&args)?;
    let remote = match op {
        Op::Send(_) => (0, 0),
        _ => remote(&args)?,
    };
    let peer: Endpoint = args.peer.parse().map_err(Failure::usage)?;
    let ctx = super::open(&args.nic)?;
    let mtu = path_mtu(&ctx, args.mtu)?;
    let gid = ctx.gid(args.gid_index).ok_or_else(|| {
        Failure::usage(format!(
            "the NIC {} has no GID {}",
            args.nic, args.gid_index
        ))
    })?;
    // Host memory must be named to be registered with a NIC process. Once the NIC has mapped
    // it the name is removed, so nothing is left in /dev/shm however the command ends.
    let name = format!("{}-post-{}", args.nic, std::process::id());
    let region = Arc::new(
        Region::create(&name, op.local_len().max(8)).map_err(|e| Failure::new(e.to_string()))?,
    );
    if let Op::Write(d) | Op::Send(d) = &op {
        region
            .write(0, d)
            .map_err(|e| Failure::new(e.to_string()))?;
    }
    let pd = ctx.alloc_pd().map_err(verbs_failure)?;
    let cq = ctx.create_cq(4).map_err(verbs_failure)?;
    let qp = pd
        .create_qp(QpType::Rc, &cq, &cq, QpCap::default())
        .map_err(verbs_failure)?;
    let mr = pd
        .register(&region, 0, region.len(), Access::LOCAL_WRITE)
        .map_err(verbs_failure)?;
    let _ = Region::remove(&name);
    let psn = random_psn();
    say!(
        "local {}",
        Endpoint {
            lid: 0,
            qpn: qp.qp_num(),
            psn,
            gid
        }
    );
    tell!("give the line above to the server, then press Enter");
    let mut line = String::new();
    let _ = io::stdin().lock().read_line(&mut line);
    connect_qp(&qp, &peer, psn, mtu, args.gid_index).map_err(verbs_failure)?;

    let (va, rkey) = remote;
    let send_op = match &op {
        Op::Write(_) => SendOp::RdmaWrite {
            remote_addr: va,
            rkey,
        },
        Op::Send(_) => SendOp::Send,
        Op::Read(_) => SendOp::RdmaRead {
            remote_addr: va,
            rkey,
        },
        Op::FetchAdd(add) => SendOp::AtomicFetchAndAdd {
            remote_addr: va,
            rkey,
            add: *add,
        },
        Op::CmpSwap(compare, swap) => SendOp::AtomicCmpAndSwp {
            remote_addr: va,
            rkey,
            compare: *compare,
            swap: *swap,
        },
    };
    let len = op.local_len();
    let sge = mr.sge(0, len as u32);
    qp.post_send(&[SendWr {
        wr_id: 1,
        op: send_op,
        sg_list: &[sge],
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .map_err(verbs_failure)?;
    let mut wc = [Wc::default()];
    let n = cq
        .try_wait(&mut wc, Some(Duration::from_secs(args.timeout)))
        .map_err(verbs_failure)?;
    if n == 0 {
        return Err(Failure::new(format!(
            "the {} did not complete within {} s",
            op.name(),
            args.timeout
        )));
    }
    say!("{}", completion_line(&wc[0], len as u64));
    if wc[0].status != WcStatus::Success {
        return Err(Failure::new(format!(
            "the {} failed: {}",
            op.name(),
            wc[0].status
        )));
    }
    let mut back = vec![0; len];
    region
        .read(0, &mut back)
        .map_err(|e| Failure::new(e.to_string()))?;
    match op {
        Op::Read(_) => {
            let mut out = io::stdout().lock();
            let mut hexdump = Hexdump::default();
            for (i, line) in back.chunks(LINE).enumerate() {
                let _ = hexdump.line(&mut out, va + (i * LINE) as u64, line);
            }
            let _ = writeln!(out, "{}", quoted(&back));
        }
        Op::FetchAdd(_) | Op::CmpSwap(..) => {
            let before = u64::from_ne_bytes(back[..8].try_into().unwrap_or_default());
            say!("original value {before} ({before:#x})");
        }
        Op::Write(_) | Op::Send(_) => {}
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: Args,
    }

    fn op(extra: &[&str]) -> Result<Op, String> {
        let base = ["post", "--nic", "n", "--peer", "p"];
        let cli = Cli::try_parse_from(base.iter().chain(extra)).map_err(|e| e.to_string())?;
        Op::from_args(&cli.args).map_err(|e| e.to_string())
    }

    #[test]
    fn one_operation_with_its_operands() {
        assert_eq!(
            op(&["--write", "--data", "hi"]),
            Ok(Op::Write(b"hi".to_vec()))
        );
        assert_eq!(
            op(&["--send", "--hex", "de ad"]),
            Ok(Op::Send(vec![0xde, 0xad]))
        );
        assert_eq!(op(&["--read", "4K"]), Ok(Op::Read(4096)));
        assert_eq!(op(&["--fetch-add", "0x10"]), Ok(Op::FetchAdd(16)));
        assert_eq!(op(&["--cmp-swap", "1,2"]), Ok(Op::CmpSwap(1, 2)));
    }

    #[test]
    fn missing_or_conflicting_operands_are_one_line_errors() {
        let one =
            "give one operation: --write, --send, --read LEN, --fetch-add N or --cmp-swap C,S";
        assert_eq!(op(&[]), Err(one.into()));
        assert_eq!(
            op(&["--write", "--read", "8", "--data", "x"]),
            Err(one.into())
        );
        let data = "give the data with one of --data TEXT, --hex HEX or --file PATH";
        assert_eq!(op(&["--write"]), Err(data.into()));
        assert_eq!(
            op(&["--send", "--data", "a", "--hex", "00"]),
            Err(data.into())
        );
        assert_eq!(
            op(&["--write", "--hex", "abc"]),
            Err("--hex \"abc\" is not an even number of hex digits".into())
        );
        assert_eq!(
            op(&["--cmp-swap", "5"]),
            Err("--cmp-swap \"5\" is not C,S".into())
        );
    }
}

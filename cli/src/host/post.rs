//! `roce host post`: the initiator side, one work request. It creates a QP, prints its
//! `LID:QPN:PSN:GID` for the server, waits for Enter (the server must have connected to it
//! before anything is sent), connects to the server's QP and posts one work request; then
//! prints the completion, and for a READ or an atomic what came back.

use std::path::PathBuf;
use std::process::ExitCode;

use roce_nic::verbs::WcStatus;

use super::client::{ClientError, ConnArgs, Op};
use crate::mem::parse_offset;
use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  roce host post --nic nic0 --peer LINE --rkey 0x100 --va 0 --write --data \"hello from nic0\"
  roce host post --nic nic0 --peer LINE --rkey 0x100 --va 0 --read 15
  roce host post --nic nic0 --peer LINE --rkey 0x100 --va 0x1000 --fetch-add 1
  roce host post --nic nic0 --peer LINE --send --file message.txt
LINE is the `local` line roce host serve printed. This command prints its own `local` line:
give it to the server, then press Enter. For many operations over one connection (and a
server that is stopped meanwhile) use roce host connect.";

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    conn: ConnArgs,
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
}

/// The one operation asked for, with its operands.
fn op_from_args(args: &Args) -> Result<Op, Failure> {
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
    let has_data = args.data.is_some() || args.hex.is_some() || args.file.is_some();
    if has_data && !(args.write || args.send) {
        return Err(Failure::usage(
            "--data, --hex and --file give what --write or --send sends: the other operations take none",
        ));
    }
    if args.send && (args.rkey.is_some() || args.va.is_some()) {
        return Err(Failure::usage(
            "a SEND names no remote memory: --rkey and --va do not go with --send",
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

pub(super) fn parse_hex(text: &str) -> Result<Vec<u8>, Failure> {
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
    Ok((parse_offset("va", va)?, super::parse_rkey(rkey)?))
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let op = op_from_args(&args)?;
    let (va, rkey) = match op {
        Op::Send(_) => (0, 0),
        _ => remote(&args)?,
    };
    let peer = args.conn.peer()?;
    let (_ctx, mut client, me) = args.conn.open(op.local_len())?;
    client.introduce(&me);
    client.connect(&peer)?;
    match client.run(&op, va, rkey, args.conn.timeout()) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(ClientError::Refused(f) | ClientError::Broken(f)) => Err(f),
        Err(ClientError::Failed { op, status }) => Err(Failure::new(format!(
            "the {op} failed: {status}{}",
            hint(status)
        ))),
    }
}

/// Why a post most often fails, where the status alone does not say.
fn hint(status: WcStatus) -> &'static str {
    match status {
        WcStatus::RetryExcErr => {
            " (nothing answered: the server must connect to this post's line before Enter, which \
             a stopped server cannot do; to post while it is stopped, connect once with \
             roce host connect)"
        }
        _ => "",
    }
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
        op_from_args(&cli.args).map_err(|e| e.to_string())
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

    #[test]
    fn operands_that_mean_nothing_for_the_operation_are_refused() {
        let no_data = "--data, --hex and --file give what --write or --send sends: the other operations take none";
        assert_eq!(op(&["--read", "4", "--data", "x"]), Err(no_data.into()));
        assert_eq!(
            op(&["--fetch-add", "1", "--hex", "00"]),
            Err(no_data.into())
        );
        assert_eq!(
            op(&["--send", "--data", "x", "--rkey", "1"]),
            Err("a SEND names no remote memory: --rkey and --va do not go with --send".into())
        );
    }
}

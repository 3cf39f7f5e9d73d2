//! `roce host`: a host program at a shell, attached to a running `roce nic`. `serve` keeps a
//! registered region and a QP for peers to use; `post` connects a QP to it and posts one work
//! request; `connect` connects one and posts many; `listen` serves a region through the RDMA
//! CM, to which `connect IP:PORT` connects with no line to copy; `info` describes the NIC. QPs
//! die with the process that made them, so the target side stays running.

mod client;
mod connect;
mod endpoint;
mod info;
mod listen;
mod post;
mod serve;

use std::hash::{BuildHasher, RandomState};
use std::process::ExitCode;

use roce_nic::verbs::{
    AddressVector, Context, Mtu, QpAttr, QpState, QueuePair, VerbsError, Wc, WcOpcode,
};

use crate::Failure;
pub use endpoint::Endpoint;

#[derive(clap::Subcommand)]
pub enum Command {
    /// Register a region and keep a QP for peers: print LID:QPN:PSN:GID and the rkey, connect
    /// to each peer line read from standard input, print completions until Ctrl-C.
    #[command(after_long_help = serve::EXAMPLES)]
    Serve(serve::Args),
    /// Connect a QP to a serving peer and post one RDMA WRITE, READ, SEND or atomic.
    #[command(after_long_help = post::EXAMPLES)]
    Post(post::Args),
    /// Connect a QP to a peer — `roce host listen` at IP:PORT through the RDMA CM, or `roce
    /// host serve` by its line (--peer) — and post the operations typed on standard input, one
    /// a line: they go on while the server is stopped.
    #[command(after_long_help = connect::EXAMPLES)]
    Connect(connect::Args),
    /// Serve a region through the RDMA CM on PORT: each `roce host connect IP:PORT` gets a QP,
    /// and the region's rkey in the REP; print connections and completions until Ctrl-C.
    #[command(after_long_help = listen::EXAMPLES)]
    Listen(listen::Args),
    /// Describe a running NIC: MAC, GIDs, MTU and limits, and with --counters its counters.
    #[command(after_long_help = info::EXAMPLES)]
    Info(info::Args),
}

pub fn run(cmd: Command) -> Result<ExitCode, Failure> {
    match cmd {
        Command::Serve(args) => serve::run(args),
        Command::Post(args) => post::run(args),
        Command::Connect(args) => connect::run(args),
        Command::Listen(args) => listen::run(args),
        Command::Info(args) => info::run(args),
    }
}

/// A failed verb as one line; a NIC that is not running or stopped is the usual cause.
fn verbs_failure(e: VerbsError) -> Failure {
    Failure::new(e.to_string())
}

fn open(nic: &str) -> Result<Context, Failure> {
    roce_nic::host::connect(nic).map_err(verbs_failure)
}

/// A random 24-bit starting PSN, as ibv_rc_pingpong picks one.
fn random_psn() -> u32 {
    (RandomState::new().hash_one(std::process::id()) & 0xff_ffff) as u32
}

/// The largest path MTU both the NIC carries and `wanted` allows.
fn path_mtu(ctx: &Context, wanted: Option<u32>) -> Result<Mtu, Failure> {
    let max = ctx.device().max_mtu;
    match wanted {
        None => Ok(max),
        Some(bytes) => match crate::attach::path_mtu(bytes)? {
            m if m <= max => Ok(m),
            _ => Err(Failure::usage(format!(
                "--mtu {bytes} is above the NIC's largest path MTU {max}"
            ))),
        },
    }
}

/// An rkey: decimal or 0x-hex, 32 bits.
fn parse_rkey(text: &str) -> Result<u32, Failure> {
    let rkey = crate::mem::parse_offset("rkey", text)?;
    u32::try_from(rkey).map_err(|_| Failure::usage(format!("rkey {rkey:#x} is wider than 32 bits")))
}

/// Brings `qp` from any state to RTS, connected to `peer`, sending from PSN `psn`.
fn connect_qp(
    qp: &QueuePair,
    peer: &Endpoint,
    psn: u32,
    mtu: Mtu,
    gid_index: u8,
) -> Result<(), VerbsError> {
    let state = qp.query()?.qp_state;
    if state != Some(QpState::Reset) {
        qp.modify(&QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        })?;
    }
    qp.modify(&QpAttr::init(serve::remote_access()))?;
    let av = AddressVector::to(peer.gid, gid_index);
    qp.modify(&QpAttr::rtr(av, peer.qpn, peer.psn, mtu))?;
    qp.modify(&QpAttr::rts(psn))
}

/// The name libibverbs' `ibv_wc_opcode` constants have.
fn opcode_name(op: WcOpcode) -> &'static str {
    match op {
        WcOpcode::Send => "SEND",
        WcOpcode::RdmaWrite => "RDMA_WRITE",
        WcOpcode::RdmaRead => "RDMA_READ",
        WcOpcode::CompSwap => "COMP_SWAP",
        WcOpcode::FetchAdd => "FETCH_ADD",
        WcOpcode::Recv => "RECV",
        WcOpcode::RecvRdmaWithImm => "RECV_RDMA_WITH_IMM",
    }
}

/// `wr_id=1 RDMA_WRITE success 29 bytes`.
fn completion_line(wc: &Wc, bytes: u64) -> String {
    format!(
        "wr_id={} {} {} {bytes} bytes",
        wc.wr_id,
        opcode_name(wc.opcode),
        wc.status
    )
}

/// Bytes as a quoted string, with anything unprintable escaped.
fn quoted(bytes: &[u8]) -> String {
    format!("\"{}\"", bytes.escape_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_nic::verbs::WcStatus;

    #[test]
    fn completions_print_like_the_verbs_names() {
        let wc = Wc {
            wr_id: 1,
            status: WcStatus::Success,
            opcode: WcOpcode::RdmaWrite,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0x11,
            src_qp: 0,
            wc_flags: 0,
        };
        assert_eq!(
            completion_line(&wc, 29),
            "wr_id=1 RDMA_WRITE success 29 bytes"
        );
        let failed = Wc {
            status: WcStatus::RetryExcErr,
            opcode: WcOpcode::FetchAdd,
            ..wc
        };
        assert_eq!(
            completion_line(&failed, 8),
            "wr_id=1 FETCH_ADD transport retry counter exceeded 8 bytes"
        );
        assert_eq!(quoted(b"hi\n\x01"), "\"hi\\n\\x01\"");
    }

    #[test]
    fn psns_are_24_bits() {
        assert!(random_psn() <= 0xff_ffff);
    }
}

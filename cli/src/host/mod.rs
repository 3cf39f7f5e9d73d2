//! `roce host`: a host program at a shell, attached to a running `roce nic`. `serve` keeps a
//! registered region and a QP for peers to use; `post` connects a QP to it and posts one work
//! request; `info` describes the NIC. QPs die with the process that made them, so the target
//! side stays running.

mod endpoint;
mod info;
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
    Serve(serve::Args),
    /// Connect a QP to a serving peer and post one RDMA WRITE, READ, SEND or atomic.
    Post(post::Args),
    /// Describe a running NIC: MAC, GIDs, MTU and limits.
    Info(info::Args),
}

pub fn run(cmd: Command) -> Result<ExitCode, Failure> {
    match cmd {
        Command::Serve(args) => serve::run(args),
        Command::Post(args) => post::run(args),
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
        Some(bytes) => match Mtu::from_bytes(bytes) {
            Some(m) if m <= max => Ok(m),
            Some(_) => Err(Failure::usage(format!(
                "--mtu {bytes} is above the NIC's largest path MTU {max}"
            ))),
            None => Err(Failure::usage(format!(
                "--mtu {bytes} is not a path MTU: use 256, 512, 1024, 2048 or 4096"
            ))),
        },
    }
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

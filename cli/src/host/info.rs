//! `roce host info`: what a host program learns when it opens the NIC.

use std::process::ExitCode;

use crate::Failure;

#[derive(clap::Args)]
pub struct Args {
    /// The NIC's name (as given to `roce nic --name`).
    #[arg(long)]
    nic: String,
    /// Also print the NIC's counters, one `name value` line each (frames, drops by reason,
    /// NAKs, retransmissions, bytes moved).
    #[arg(long)]
    counters: bool,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let ctx = super::open(&args.nic)?;
    let d = ctx.device();
    say!("nic {} mac {} max_mtu {}", d.name, d.mac, d.max_mtu);
    for (index, gid) in d.gids.iter().enumerate() {
        say!("gid[{index}] {} ({gid})", gid.to_hex());
    }
    say!(
        "max_qp_wr {} max_sge {} max_inline {} max_cqe {} max_qp_rd_atom {}",
        d.max_qp_wr,
        d.max_sge,
        d.max_inline,
        d.max_cqe,
        d.max_qp_rd_atom
    );
    // The limits, as `ibv_devinfo -v` names them (host_* are per host program).
    for (name, value) in d.limits.iter() {
        say!("{name} {value}");
    }
    if args.counters {
        let counters = ctx.counters().map_err(super::verbs_failure)?;
        for (name, _, value) in counters.iter() {
            say!("{name} {value}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

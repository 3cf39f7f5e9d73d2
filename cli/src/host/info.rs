//! `roce host info`: what a host program learns when it opens the NIC, and its counters.

use std::process::ExitCode;

use crate::output::mac;
use crate::Failure;

pub const EXAMPLES: &str = "\\
Examples:
  roce host info --nic nic0
  roce host info --nic nic0 --counters | grep -v ' 0$'     the counters that moved
  roce host info --nic nic0 --counters --json | jq .counters.rx_icrc_errors";

#[derive(clap::Args)]
pub struct Args {
    /// The NIC's name (as given to `roce nic --name`).
    #[arg(long)]
    nic: String,
    /// Also print the NIC's counters, one `name value` line each (frames, drops by reason,
    /// NAKs, retransmissions, bytes moved).
    #[arg(long)]
    counters: bool,
    /// Print one JSON object (with the counters under "counters") instead of lines.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let ctx = super::open(&args.nic)?;
    let d = ctx.device();
    let counters = if args.counters {
        Some(ctx.counters().map_err(super::verbs_failure)?)
    } else {
        None
    };
    if args.json {
        let gids: Vec<serde_json::Value> = d
            .gids
            .iter()
            .map(|gid| serde_json::json!({ "hex": gid.to_hex(), "address": gid.to_string() }))
            .collect();
        let mut info = serde_json::json!({
            "nic": d.name,
            "mac": mac(d.mac),
            "max_mtu": d.max_mtu.bytes(),
            "gids": gids,
            "pkeys": d.pkeys.keys().iter().map(|k| format!("{k:#06x}")).collect::<Vec<_>>(),
            "max_qp_wr": d.max_qp_wr,
            "max_sge": d.max_sge,
            "max_inline": d.max_inline,
            "max_cqe": d.max_cqe,
            "max_qp_rd_atom": d.max_qp_rd_atom,
        });
        let limits: serde_json::Map<String, serde_json::Value> = d
            .limits
            .iter()
            .map(|(name, value)| (name.to_owned(), value.into()))
            .collect();
        info["limits"] = limits.into();
        if let Some(counters) = &counters {
            let map: serde_json::Map<String, serde_json::Value> = counters
                .iter()
                .map(|(name, _, value)| (name.to_owned(), value.into()))
                .collect();
            info["counters"] = map.into();
        }
        out!("{info}")?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("nic {} mac {} max_mtu {}", d.name, mac(d.mac), d.max_mtu)?;
    for (index, gid) in d.gids.iter().enumerate() {
        out!("gid[{index}] {} ({gid})", gid.to_hex())?;
    }
    for (index, key) in d.pkeys.keys().iter().enumerate() {
        let membership = if roce_nic::pkey::is_full_member(*key) {
            "full"
        } else {
            "limited"
        };
        out!("pkey[{index}] {key:#06x} ({membership} member)")?;
    }
    out!(
        "max_qp_wr {} max_sge {} max_inline {} max_cqe {} max_qp_rd_atom {}",
        d.max_qp_wr,
        d.max_sge,
        d.max_inline,
        d.max_cqe,
        d.max_qp_rd_atom
    )?;
    // The limits, as `ibv_devinfo -v` names them (host_* are per host program).
    for (name, value) in d.limits.iter() {
        out!("{name} {value}")?;
    }
    for (name, _, value) in counters.iter().flat_map(|c| c.iter()) {
        out!("{name} {value}")?;
    }
    Ok(ExitCode::SUCCESS)
}

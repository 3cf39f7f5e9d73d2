//! Helpers shared by the cross-crate test suites: where things are, how a test that needs an
//! outside tool skips (never under CI), and the captures the project records itself.

#![forbid(unsafe_code)]

pub mod bundled;
pub mod model;
pub mod netns;
pub mod oracle;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace root.
pub fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// `captures/`: the pcaps the project records itself (see [`bundled`]).
pub fn captures_dir() -> PathBuf {
    workspace().join("captures")
}

/// Real third-party captures, beside the workspace rather than in it: `../shared/captures`, or
/// `$ROCE_SHARED_CAPTURES` for a checkout that does not sit beside `shared/` (a git worktree
/// elsewhere, say).
pub fn shared_captures_dir() -> PathBuf {
    match std::env::var_os("ROCE_SHARED_CAPTURES") {
        Some(dir) => PathBuf::from(dir),
        None => workspace().join("../shared/captures"),
    }
}

/// A test that needs an outside tool may skip only where the tool truly cannot run, loudly, and
/// never under CI, which installs every tool; golden files are rewritten only on request.
pub use roce_testkit::{eventually, regenerate, skip, under_ci, warn};

/// Every file under `dir` (recursively) whose name ends in `.pcap` or `.pcapng`, sorted.
pub fn captures_under(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(Result::ok)
        .map(walkdir::DirEntry::into_path)
        .filter(|p| p.extension().is_some_and(|e| e == "pcap" || e == "pcapng"))
        .collect();
    found.sort();
    found
}

/// Dissectors that would claim RoCE payloads (RDMA storage protocols) or the packets
/// themselves, and so hide fields of plain RoCE traffic. `decode_as` does not help in tshark 4.0;
/// disabling them does (one option each).
const CLAIMING_DISSECTORS: [&str; 10] = [
    "dns",
    "tftp",
    "rpcordma",
    "smb_direct",
    "smc",
    "nvme-rdma",
    "lnet",
    "iser",
    "infiniband_sdp",
    "fcoib",
];

/// `tshark -r FILE -n -T fields` with the dissectors that would hide RoCE fields disabled; the
/// caller adds its `-E` options and the `-e` fields.
pub fn tshark_fields(file: &Path) -> Command {
    let mut command = Command::new("tshark");
    command.arg("-r").arg(file).args(["-n", "-T", "fields"]);
    for protocol in CLAIMING_DISSECTORS {
        command.args(["--disable-protocol", protocol]);
    }
    command
}

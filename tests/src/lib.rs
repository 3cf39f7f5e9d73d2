//! Helpers shared by the cross-crate test suites: where things are, how a test that needs an
//! outside tool skips (never under CI), and the captures the project records itself.

pub mod bundled;

use std::path::{Path, PathBuf};

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

/// Whether the run is CI's (`ROCE_CI=1`), where nothing may skip.
pub fn under_ci() -> bool {
    std::env::var("ROCE_CI").is_ok_and(|v| v == "1")
}

/// Skips the calling test loudly, or fails it under CI: a test that needs an outside tool may
/// skip only where the tool truly cannot run, and CI installs every tool.
pub fn skip(reason: &str) {
    assert!(!under_ci(), "{reason}, and ROCE_CI=1 forbids skipping");
    eprintln!("SKIPPED: {reason}");
}

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

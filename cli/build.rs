//! Puts the commit into `roce --version`: `roce 0.1.0 (27e9603 2025-06-01)`. Built outside a
//! git checkout (from a source archive, or without git installed) the version is the bare
//! package version.

use std::path::PathBuf;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["log", "-1", "--format=%h %cs"]);
    let suffix = match &commit {
        Some(commit) => format!(" ({commit})"),
        None => String::new(),
    };
    println!("cargo:rustc-env=ROCE_VERSION_SUFFIX={suffix}");
    if commit.is_none() {
        return;
    }
    // Build again when HEAD moves: a commit, a checkout, a reset. In a worktree HEAD lives in
    // its own git directory and the branches in the common one.
    let paths = |arg: &str| git(&["rev-parse", "--path-format=absolute", arg]).map(PathBuf::from);
    // A path that does not exist would make cargo run this script, and build the crate, every
    // time, so only existing ones are named.
    let mut watched = Vec::new();
    if let Some(dir) = paths("--git-dir") {
        watched.push(dir.join("HEAD"));
    }
    if let Some(common) = paths("--git-common-dir") {
        watched.push(common.join("packed-refs"));
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common.join(branch));
        }
    }
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}

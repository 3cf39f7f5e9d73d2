//! What the tests of every crate share, with no dependencies so that any crate can use it (even
//! `roce-nic`'s public test bed):
//!
//! - [`skip`]: a test that needs something this machine lacks says so where a person sees it —
//!   on the process's real standard error, which the test harness does not capture, and in the
//!   skip log `scripts/test` lists at the end (`ROCE_SKIP_LOG`). Under CI (`ROCE_CI=1`) a skip
//!   is a failure: CI installs every tool.
//! - [`warn`]: a test that passed only after surviving something (a frozen guest) says so in
//!   the same two places, the warning log being `ROCE_WARN_LOG`.
//! - [`regenerate`]: whether a golden-file test may rewrite its file instead of comparing with
//!   it — only when asked with the variable set to exactly `1`, and never under CI.
//! - [`eventually`]: a deadline-based poll, for tests that wait for an event.

#![forbid(unsafe_code)]

use std::io::Write;

/// The variable naming the file [`skip`] appends its line to (set by `scripts/test`).
pub const SKIP_LOG: &str = "ROCE_SKIP_LOG";

/// Whether the run is CI's (`ROCE_CI=1`), where nothing may skip and no golden file may be
/// rewritten.
pub fn under_ci() -> bool {
    std::env::var("ROCE_CI").is_ok_and(|v| v == "1")
}

/// Skips the rest of the calling test loudly, or fails it under CI. The caller returns after
/// this (or leaves out the part that cannot run).
///
/// `eprintln!` would not do: the test harness captures it and shows it only for failing tests,
/// so a skip would look exactly like a pass. The line is written to the process's standard
/// error itself, and appended to the skip log when there is one.
pub fn skip(reason: &str) {
    let test = test_name();
    assert!(
        !under_ci(),
        "{test}: {reason}, and ROCE_CI=1 forbids skipping"
    );
    let line = format!("SKIPPED {test}: {reason}\n");
    // Ignored write errors: a closed stderr must not turn a skip into a failure; the log below
    // still records it.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(SKIP_LOG) {
        if let Err(e) = append_line(&log, &line) {
            panic!("{test}: cannot append to the skip log {log:?} ({e}); skipping: {reason}");
        }
    }
}

/// The variable naming the file [`warn`] appends its line to (set by `scripts/test`).
pub const WARN_LOG: &str = "ROCE_WARN_LOG";

/// Says that the calling test passed only after surviving something that must not go
/// unnoticed (a guest that froze and was replaced): the whole `message` on the process's real
/// standard error, as [`skip`] writes, and its first line, after `WARNING <test>: `, in the
/// warning log `scripts/test` lists at the end.
pub fn warn(message: &str) {
    let test = test_name();
    let _ = std::io::stderr()
        .lock()
        .write_all(format!("{message}\n").as_bytes());
    if let Some(log) = std::env::var_os(WARN_LOG) {
        let first = message.lines().next().unwrap_or_default();
        let line = format!("WARNING {test}: {first}\n");
        if let Err(e) = append_line(&log, &line) {
            panic!("{test}: cannot append to the warning log {log:?} ({e}): {message}");
        }
    }
}

/// Appends `line` to the log file `log` in one `write` to a file opened for appending: lines of
/// tests running in parallel (threads or processes) never interleave.
fn append_line(log: &std::ffi::OsStr, line: &str) -> std::io::Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?
        .write_all(line.as_bytes())
}

/// `suite::test::path`: the test binary's name (without cargo's hash) and the test's, which the
/// harness gives the thread that runs it.
fn test_name() -> String {
    let suite = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.file_stem()?.to_string_lossy().into_owned()))
        .map(|stem| match stem.rsplit_once('-') {
            Some((name, hash)) if hash.chars().all(|c| c.is_ascii_hexdigit()) => name.to_owned(),
            _ => stem,
        })
        .unwrap_or_else(|| "?".to_owned());
    match std::thread::current().name() {
        Some(test) if test != "main" => format!("{suite}::{test}"),
        _ => suite,
    }
}

/// Whether a golden-file test should rewrite its file from what the code makes now (instead of
/// comparing with it): only when `variable` is set to exactly `1`.
///
/// Panics — failing the test rather than letting it pass without comparing — when `variable`
/// is set to anything else (a typo must not silently compare, nor `=0` silently rewrite), and
/// under CI, where the committed files are the reference and are never rewritten.
pub fn regenerate(variable: &str) -> bool {
    let Some(value) = std::env::var_os(variable) else {
        return false;
    };
    assert!(
        value == "1",
        "{variable}={value:?}: set it to exactly 1 to rewrite the golden files, or unset it"
    );
    assert!(
        !under_ci(),
        "{variable}=1 under CI (ROCE_CI=1): CI compares with the committed golden files and never \
         rewrites them"
    );
    true
}

/// How long [`eventually`] waits for a condition before the test fails: far beyond what any
/// condition needs on an idle machine, so that a loaded one (two cores shared by several test
/// binaries) slows a test down instead of failing it.
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(20);

/// Waits until `condition` holds, polling it, and fails the test naming `what` if it does not
/// within [`PATIENCE`]. Tests wait for the event they need instead of sleeping for a time that
/// is usually enough.
pub fn eventually(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + PATIENCE;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {PATIENCE:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

//! The Soft-RoCE guest: the harness that builds and boots it (tests/interop/softroce-vm),
//! whether this host can run it, and what its console says.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The guest's address, and ours, on the cable.
pub const GUEST_IP: &str = "10.77.0.2";
pub const NIC_IP: &str = "10.77.0.1";
/// The MACs on the wire: the harness derives the guest's from its IP, `roce nic` ours.
pub const GUEST_MAC: [u8; 6] = [0x52, 0x54, 0x00, 0x4d, 0x00, 0x02];
pub const NIC_MAC: [u8; 6] = [0x02, 0x00, 10, 77, 0, 1];

/// Host programs the harness needs (Debian packages qemu-system-x86, cpio, kmod, xz-utils, and
/// gcc, which compiles the guest's rxe-agent).
const HOST_TOOLS: [&str; 5] = ["qemu-system-x86_64", "cpio", "depmod", "xz", "gcc"];

pub fn harness() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/softroce-vm")
}

/// Cargo's target directory, where the harness keeps its downloads and image.
pub fn target_dir() -> PathBuf {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    tmp.parent().unwrap_or(tmp).to_path_buf()
}

/// Whether the guest can run here, building its image the first time (cached under target/).
/// A host that cannot run it makes the calling test skip with a loud line — or fail, under
/// CI (`ROCE_CI=1`), where every tool is installed and nothing may skip.
pub fn ready() -> bool {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let missing: Vec<&str> = HOST_TOOLS
            .into_iter()
            .filter(|tool| !on_path(tool))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "{} not installed (apt-get install qemu-system-x86 cpio kmod xz-utils gcc)",
                missing.join(", ")
            ));
        }
        let out = Command::new(harness())
            .arg("build")
            .env("CARGO_TARGET_DIR", target_dir())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", harness().display()))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "the guest image could not be built: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    });
    match built {
        Ok(()) => true,
        Err(reason) => {
            roce_tests::skip(&format!("the Soft-RoCE interop tests: {reason}"));
            false
        }
    }
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| dir.join(program).is_file())
            || ["/usr/sbin", "/sbin"]
                .iter()
                .any(|dir| Path::new(dir).join(program).is_file())
    })
}

/// The guest's console, as `softroce-vm run` echoed it.
pub struct Console {
    pub lines: Vec<String>,
}

/// What one scenario printed in the guest, and its exit status.
pub struct GuestRun {
    pub status: Option<i32>,
    pub output: String,
}

impl Console {
    /// The console's lines without the script's heartbeat. A heartbeat that came in the middle
    /// of a tool's line (between two of the tool's writes) ends that line early: the rest of
    /// the tool's line, on the next, is joined back to it.
    pub fn new(text: &str) -> Console {
        let mut lines = Vec::new();
        let mut cut_short = String::new();
        for line in text.lines() {
            let line = line.trim_end_matches('\r');
            match line.find(HEARTBEAT_MARK) {
                Some(at) => cut_short.push_str(&line[..at]),
                None => lines.push(std::mem::take(&mut cut_short) + line),
            }
        }
        if !cut_short.is_empty() {
            lines.push(cut_short);
        }
        Console { lines }
    }

    /// The lines between `SCENARIO-BEGIN n` and `SCENARIO-END n rc=...`.
    pub fn scenario(&self, n: usize) -> GuestRun {
        let begin = format!("SCENARIO-BEGIN {n}");
        let end = format!("SCENARIO-END {n} rc=");
        let mut output = String::new();
        let mut inside = false;
        for line in &self.lines {
            if *line == begin {
                inside = true;
            } else if let Some(rc) = line.strip_prefix(&end) {
                return GuestRun {
                    status: rc.trim().parse().ok(),
                    output,
                };
            } else if inside {
                output.push_str(line);
                output.push('\n');
            }
        }
        GuestRun {
            status: None,
            output,
        }
    }

    /// rxe0's hardware counters after the script (`SOFTROCE-COUNTER name=value`).
    pub fn counters(&self) -> BTreeMap<String, u64> {
        self.lines
            .iter()
            .filter_map(|l| l.strip_prefix("SOFTROCE-COUNTER "))
            .filter_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                Some((k.to_owned(), v.trim().parse().ok()?))
            })
            .collect()
    }

    /// The path MTU rxe0 reported.
    pub fn active_mtu(&self) -> Option<u32> {
        self.lines
            .iter()
            .find_map(|l| l.strip_prefix("rxe0 active_mtu: "))
            .and_then(|m| m.trim().parse().ok())
    }
}

/// What the guest prints as its heartbeat (see [`super::scenario::HEARTBEAT`]), before its
/// uptime.
pub const HEARTBEAT_MARK: &str = "SOFTROCE-ALIVE ";

#[test]
fn the_heartbeat_is_left_out_of_the_console_even_inside_a_line() {
    let console = Console::new(
        "SCENARIO-BEGIN 0\r\nSOFTROCE-ALIVE 12.34\r\n 8388608  SOFTROCE-ALIVE 13.01\n   5 0.42\nSCENARIO-END 0 rc=0\n",
    );
    assert_eq!(
        console.lines,
        [
            "SCENARIO-BEGIN 0",
            " 8388608     5 0.42",
            "SCENARIO-END 0 rc=0"
        ]
    );
}

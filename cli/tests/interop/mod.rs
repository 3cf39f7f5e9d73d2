//! Running a group of scenarios: one `roce nic` on a UDP cable, one guest boot whose script
//! runs the real tools one after the other, and `roce pingpong` / `roce perftest` facing each
//! of them in turn through the NIC. Each scenario has its own TCP port, so a run that fails
//! cannot confuse the next; each is bounded in time on both sides.

pub mod guest;
pub mod scenario;
pub mod wire;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::{free_udp_port, Env, Nic, Proc};
use guest::{Console, GUEST_MAC, NIC_IP, NIC_MAC};
use scenario::{Group, GUEST_TOOL_LIMIT_S};

/// One guest at a time: under TCG a guest takes a whole core.
static ONE_GUEST: Mutex<()> = Mutex::new(());
/// TCP port of a group's first scenario (the ports are the NIC's and the guest's, not the
/// host's, so any will do).
const FIRST_PORT: u16 = 19100;
/// Seconds any step of ours may wait, and a client of ours keeps trying to connect: longer
/// than a guest's tool may run, so that one failure does not make the next fail too.
const STEP_S: u64 = GUEST_TOOL_LIMIT_S as u64 + 30;
/// How long one of our runs may take in all before the test gives up on it.
const OUR_LIMIT: Duration = Duration::from_secs(2 * STEP_S);

/// What our side of one scenario did.
struct Ours {
    status: std::process::ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Where a group leaves its capture, guest script and console log.
pub fn output_dir(group: &str) -> PathBuf {
    guest::target_dir().join("softroce-interop").join(group)
}

/// Runs every scenario of `group` and checks both sides of each, the guest's counters and
/// the capture of the cable. Returns without running (after a SKIPPED line) where no guest
/// can run.
pub fn run(group: &Group) {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    if !guest::ready() {
        return;
    }
    let started = Instant::now();
    let dir = output_dir(group.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = Env::new(&group.name[..group.name.len().min(6)]);
    let (ours_port, guest_port) = (free_udp_port(), free_udp_port());
    let pcap = dir.join("nic.pcap");
    let mut extra = vec!["--mtu".to_owned(), group.link_mtu.to_string()];
    if let Some(faults) = group.faults {
        extra.extend(["--faults".into(), faults.into()]);
    }
    let nic = Nic {
        name: env.name("n"),
        ip: format!("{NIC_IP}/24"),
        local: format!("127.0.0.1:{ours_port}"),
        remote: format!("127.0.0.1:{guest_port}"),
        neighbours: Vec::new(),
        pcap: Some(pcap.clone()),
        extra,
    };
    let nic_proc = env.nic(&nic);
    let script = dir.join("guest.sh");
    std::fs::write(&script, group.guest_script(FIRST_PORT)).unwrap();
    let rcvbuf_before = wire::udp_receive_buffer_errors();
    let vm_limit = GUEST_TOOL_LIMIT_S * group.scenarios.len() as u32 + 60;
    let mut vm = Proc::spawn(
        {
            let mut cmd = Command::new(guest::harness());
            cmd.args(["run", "--local", &format!("127.0.0.1:{guest_port}")])
                .args(["--remote", &format!("127.0.0.1:{ours_port}")])
                .args(["--mtu", &group.link_mtu.to_string()])
                .args(["--timeout", &vm_limit.to_string()])
                .arg("--script")
                .arg(&script)
                .env("CARGO_TARGET_DIR", guest::target_dir());
            cmd
        },
        false,
    );

    let mut ours = Vec::new();
    for (n, scenario) in group.scenarios.iter().enumerate() {
        let mut args = scenario.our_args(FIRST_PORT + n as u16);
        let step = STEP_S.to_string();
        args.extend(["--nic".into(), nic.name.clone()]);
        args.extend(["--timeout".into(), step.clone()]);
        args.extend(["--connect-retry".into(), step]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let t0 = Instant::now();
        let mut proc = Proc::spawn(env.roce(&args), false);
        let status = proc.wait(OUR_LIMIT);
        ours.push(Ours {
            status,
            stdout: proc.drain_stdout(),
            stderr: proc.stderr(),
            took: t0.elapsed(),
        });
    }
    vm.wait(Duration::from_secs(u64::from(vm_limit) + 30));
    let console_text = vm.drain_stdout();
    std::fs::write(dir.join("console.log"), &console_text).unwrap();
    let console = Console::new(&console_text);
    let counters = env.run(&["host", "info", "--nic", &nic.name, "--counters"]);
    // The NIC flushes its capture as it stops.
    drop(nic_proc);
    let rcvbuf_errors = wire::udp_receive_buffer_errors() - rcvbuf_before;
    let wire = wire::inspect(&pcap, NIC_MAC, GUEST_MAC);

    let mut failures = Vec::new();
    let mut table = String::new();
    for (n, (scenario, ours)) in group.scenarios.iter().zip(&ours).enumerate() {
        let theirs = console.scenario(n);
        let mut problems = Vec::new();
        if !ours.status.success() || !ours.stdout.contains("\nverified: ") {
            problems.push(format!(
                "roce exited with {}: {}{}",
                ours.status,
                ours.stdout,
                ours.stderr.trim()
            ));
        }
        if theirs.status != Some(0) {
            problems.push(format!(
                "the guest's tool exited with {:?}:\n{}",
                theirs.status, theirs.output
            ));
        } else if let Some(text) = scenario.guest_success_text() {
            if !theirs.output.contains(&text) {
                problems.push(format!("the guest printed no {text:?}:\n{}", theirs.output));
            }
        }
        let verified = ours
            .stdout
            .lines()
            .find(|l| l.starts_with("verified: "))
            .unwrap_or("");
        let verdict = if problems.is_empty() { "ok" } else { "FAILED" };
        let _ = writeln!(
            table,
            "  {verdict:6} {:5.1} s  {}\n           {verified}",
            ours.took.as_secs_f64(),
            scenario.name()
        );
        if !problems.is_empty() {
            failures.push(format!("{}:\n{}", scenario.name(), problems.join("\n")));
        }
    }

    let want_mtu = if group.link_mtu >= 4176 { 4096 } else { 1024 };
    if console.active_mtu() != Some(want_mtu) {
        failures.push(format!(
            "rxe0's active MTU is {:?}, not {want_mtu}",
            console.active_mtu()
        ));
    }
    for counter in ["rx_icrc_errors", "rx_malformed"] {
        let line = format!("{counter} 0");
        if !counters.stdout.lines().any(|l| l == line) {
            failures.push(format!(
                "our NIC counted bad frames from rxe: {}",
                counters.stdout
            ));
        }
    }
    if !wire.bad.is_empty() {
        failures.push(format!("rxe sent bad frames: {}", wire.bad.join("; ")));
    }
    let guest_counters = console.counters();
    let received = guest_counters.get("rcvd_pkts").copied().unwrap_or(0);
    let sent = wire.sent_by_us();
    // Without faults, every RoCE frame we sent reached rxe and passed its ICRC check (rxe
    // counts rcvd_pkts only after it), unless the host dropped it on the way for lack of
    // socket buffer (counted) or rxe had already destroyed the QP it was for (only
    // ibv_srq_pingpong ends with messages in flight).
    let late: u64 = group
        .scenarios
        .iter()
        .map(|s| s.uncounted_frames_allowed())
        .sum();
    if group.faults.is_none() && sent > received + rcvbuf_errors + late {
        failures.push(format!(
            "we sent {sent} RoCE frames, rxe received {received}; the host dropped {rcvbuf_errors} for lack of buffer and at most {late} may have been for QPs already gone"
        ));
    }
    let counters_seen: Vec<String> = guest_counters
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    eprintln!(
        "group {} (link MTU {}{}): {} scenarios in {:.1} s\n{table}  wire: {} frames; RoCE from us {sent} (opcodes {:x?}), from rxe {} (opcodes {:x?}); rxe rcvd_pkts {received}; host UDP buffer drops {rcvbuf_errors}\n  rxe counters: {}",
        group.name,
        group.link_mtu,
        group.faults.map(|f| format!(", faults {f}")).unwrap_or_default(),
        group.scenarios.len(),
        started.elapsed().as_secs_f64(),
        wire.frames,
        wire.ours.keys().collect::<Vec<_>>(),
        wire.sent_by_guest(),
        wire.theirs.keys().collect::<Vec<_>>(),
        counters_seen.join(" ")
    );
    assert!(
        failures.is_empty(),
        "group {}: {} problem(s) (logs in {}):\n{}",
        group.name,
        failures.len(),
        dir.display(),
        failures.join("\n\n")
    );
}

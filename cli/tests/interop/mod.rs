//! Running a group of scenarios: one guest boot whose script runs the real tools one after
//! the other, and `roce pingpong` / `roce perftest` facing each of them in turn — through one
//! `roce nic` on the UDP cable, or each with a NIC of its own on it. Each scenario has its own
//! TCP port, so a run that fails cannot confuse the next; each is bounded in time on both
//! sides.

pub mod captures;
pub mod errors;
pub mod guest;
pub mod pair;
pub mod pkey;
pub mod scenario;
pub mod watch;
pub mod wire;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::{free_udp_port, Env, Nic, Proc};
use guest::{Console, GUEST_MAC, NIC_IP, NIC_MAC};
use scenario::{Group, Scenario, StopGuest, GUEST_TOOL_LIMIT_S};
use watch::Guest;

/// One guest at a time: under TCG a guest takes a whole core.
pub static ONE_GUEST: Mutex<()> = Mutex::new(());
/// TCP port of a group's first scenario (the ports are the NIC's and the guest's, not the
/// host's, so any will do).
const FIRST_PORT: u16 = 19100;
/// Our NIC's line rate on the cable. The guest takes about 25 MB/s under TCG, and QEMU's
/// socket in front of it holds 208 KiB: what we send faster than that in a burst (one 8 MiB
/// READ answer is 8000 frames) is mostly lost there, and recovery rather than the line would
/// set the pace.
const LINE_RATE: &str = "200M";
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
    /// What the group's NIC logged meanwhile (its connection manager's every step).
    nic_log: String,
}

/// Where a group leaves its captures, guest script and console log.
pub fn output_dir(group: &str) -> PathBuf {
    guest::target_dir().join("softroce-interop").join(group)
}

/// The two ends of the cable on loopback: where our NIC's frames arrive (or, through a switch,
/// the switch's port for the guest) and where the guest's do.
struct Cable {
    ours: String,
    guest: String,
}

/// A `roce switch` with the guest on port 1 and our NIC on port 2.
struct Switched {
    proc: Proc,
    /// Our NIC's end of its cable to port 2, and port 2's.
    nic: String,
    port: String,
    captures: PathBuf,
}

impl Switched {
    fn start(env: &Env, cable: &Cable, dir: &Path) -> Switched {
        let nic = format!("127.0.0.1:{}", free_udp_port());
        let port = format!("127.0.0.1:{}", free_udp_port());
        let captures = dir.join("switch");
        let guest_port = format!("{},{}", cable.ours, cable.guest);
        let nic_port = format!("{port},{nic}");
        let args = [
            "switch",
            "--port",
            &guest_port,
            "--port",
            &nic_port,
            "--pcap",
            captures.to_str().unwrap(),
        ];
        let mut proc = Proc::spawn(env.roce(&args), false);
        proc.expect(|l| l.starts_with("switch ready"));
        Switched {
            proc,
            nic,
            port,
            captures,
        }
    }

    /// Our NIC's cable: to the switch's port 2.
    fn link(&self) -> String {
        format!("cable:{},{}", self.nic, self.port)
    }

    /// Stops the switch; each port's capture must decode cleanly, and the switch must have
    /// dropped nothing.
    fn check(mut self, failures: &mut Vec<String>) -> String {
        self.proc.signal(libc::SIGTERM);
        let table = self.proc.drain_stdout();
        self.proc.wait(Duration::from_secs(20));
        for port in 1..=2 {
            decode_strict(&self.captures.join(format!("port{port}.pcap")), failures);
        }
        let dropped: u64 = table
            .lines()
            .filter_map(|l| l.split_whitespace().nth(4)?.parse::<u64>().ok())
            .sum();
        if dropped > 0 || !table.contains("switch stopped") {
            failures.push(format!(
                "the switch dropped frames or did not stop:\n{table}"
            ));
        }
        table
    }
}

/// What became of a group's run.
pub struct Outcome {
    pub captures: Vec<PathBuf>,
    /// Every problem found; none where the group passed.
    pub failures: Vec<String>,
    /// The scenario during which the guest froze and was replaced by a fresh one, if it did.
    pub froze_during: Option<usize>,
    /// How many times our side of each scenario ran.
    pub runs: Vec<u32>,
}

/// Runs every scenario of `group` and checks both sides of each, the guest's counters and
/// the captures of the cable; fails with every problem found, and returns the captures.
/// Returns nothing, without running (after a SKIPPED line), where no guest can run.
pub fn run(group: &Group) -> Vec<PathBuf> {
    let Some(outcome) = run_group(group) else {
        return Vec::new();
    };
    assert!(
        outcome.failures.is_empty(),
        "group {}: {} problem(s) (logs in {}):\n{}",
        group.name,
        outcome.failures.len(),
        output_dir(group.name).display(),
        outcome.failures.join("\n\n")
    );
    outcome.captures
}

/// [`run`], returning what went wrong rather than failing.
///
/// A guest that freezes (its console silent, heartbeat included, for
/// [`watch::SILENCE_LIMIT`]) is killed, and a fresh one runs the scenario it froze in and
/// the rest of the group, once: a second freeze is a failure, as is anything else that goes
/// wrong, which is never run again. A freeze survived is reported on a line of its own
/// starting `GUEST FROZE`.
pub fn run_group(group: &Group) -> Option<Outcome> {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    if !guest::ready() {
        return None;
    }
    let started = Instant::now();
    let dir = output_dir(group.name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = Env::new(&group.name[..group.name.len().min(6)]);
    let cable = Cable {
        ours: format!("127.0.0.1:{}", free_udp_port()),
        guest: format!("127.0.0.1:{}", free_udp_port()),
    };
    let switched = group
        .via_switch
        .then(|| Switched::start(&env, &cable, &dir));
    let our_link = match &switched {
        Some(s) => s.link(),
        None => format!("cable:{},{}", cable.ours, cable.guest),
    };
    let mut nic = (!group.capture_each).then(|| {
        let nic = Nic {
            name: env.name("n"),
            ip: format!("{NIC_IP}/24"),
            link: our_link.clone(),
            mtu: group.link_mtu,
            neighbours: Vec::new(),
            pcap: Some(dir.join("nic.pcap")),
            netns: None,
            extra: around_the_link(group),
        };
        let proc = env.nic_logging(&nic, Some(NIC_LOG));
        (nic, proc)
    });
    let rcvbuf_before = wire::udp_receive_buffer_errors();

    let captures: Vec<PathBuf> = match &nic {
        Some(_) => vec![dir.join("nic.pcap")],
        None => group
            .scenarios
            .iter()
            .map(|s| dir.join(format!("{}.pcap", s.capture_name())))
            .collect(),
    };
    let count = group.scenarios.len();
    let mut ours: Vec<Ours> = Vec::new();
    let mut runs = vec![0; count];
    let mut failures = Vec::new();
    let mut gave_up = None;
    // Every boot's console, for console.log; and what counts of each, for `Console`: all of
    // the last boot's, and of a frozen one what came before the scenario it froze in.
    let mut console_log = String::new();
    let mut console_text = String::new();
    let mut froze_during = None;
    let mut longest_silence = Duration::ZERO;
    let mut first = 0;
    loop {
        let (mut vm, vm_limit) = start_guest(group, &cable, &dir, first);
        let mut frozen_in = None;
        for (n, times) in runs.iter_mut().enumerate().skip(first) {
            gave_up = reason_to_give_up(group, &ours, nic.as_mut().map(|(_, proc)| proc), &mut vm);
            if gave_up.is_some() {
                break;
            }
            let stop = group
                .stop_guest
                .filter(|stop| froze_during.is_none() && stop.during == n);
            *times += 1;
            let our_nic = nic.as_ref().map(|(nic, _)| nic.name.as_str());
            let logged_before = nic.as_ref().map_or(0, |(_, proc)| proc.stderr().len());
            match run_scenario(
                group,
                n,
                &env,
                our_nic,
                &our_link,
                captures.get(n),
                &mut vm,
                stop,
            ) {
                Some(mut run) => {
                    if let Some((_, proc)) = &nic {
                        run.nic_log = proc.stderr().split_off(logged_before);
                    }
                    ours.push(run);
                }
                None => {
                    frozen_in = Some(n);
                    break;
                }
            }
        }
        let vm_wait = Duration::from_secs(u64::from(vm_limit) + 30);
        if gave_up.is_some() {
            // The guest's script would wait out each remaining tool's limit: stop it now.
            vm.terminate();
            if !vm.finish(vm_wait) {
                vm.kill();
            }
        } else if frozen_in.is_none() && !vm.finish(vm_wait) {
            // Frozen after our side of the last scenario: what the guest had not finished is
            // run again (nothing, if it froze printing its counters).
            frozen_in = Some(
                (first..count)
                    .find(|n| !vm.printed_starting(&format!("SCENARIO-END {n} rc=")))
                    .unwrap_or(count),
            );
        }
        longest_silence = longest_silence.max(vm.longest_silence);
        let Some(n) = frozen_in else {
            let text = vm.console();
            console_log.push_str(&text);
            console_text.push_str(&text);
            break;
        };
        let silent = vm.frozen().unwrap_or_default();
        let age = vm.age();
        let tail = vm.tail();
        vm.kill();
        let text = vm.console();
        console_log.push_str(&text);
        console_log.push_str("==== the guest froze here and was killed ====\n");
        let begin = format!("SCENARIO-BEGIN {n}");
        for line in text.lines().take_while(|l| *l != begin) {
            console_text.push_str(line);
            console_text.push('\n');
        }
        let during = match group.scenarios.get(n) {
            Some(s) => format!("scenario {n} ({})", s.name()),
            None => "its counters, after the last scenario".to_owned(),
        };
        let summary = format!(
            "the guest's console was silent for {:.0} s, {:.0} s after QEMU started, during {during}",
            silent.as_secs_f64(),
            age.as_secs_f64(),
        );
        if froze_during.is_some() {
            failures.push(format!(
                "the guest froze a second time: {summary}; its last lines:\n{tail}"
            ));
            gave_up = Some("the guest froze a second time".to_owned());
            break;
        }
        froze_during = Some(n);
        let then = if n < count {
            format!("a fresh guest runs scenarios {n} to {} again", count - 1)
        } else {
            "rxe's counters are lost".to_owned()
        };
        let report = format!(
            "in group {}: {summary}; QEMU killed, {then}. The console's last lines:\n{tail}",
            group.name
        );
        if group.stop_guest.is_some_and(|stop| stop.during == n) {
            eprintln!("guest stopped on purpose (SIGSTOP: the test of the recovery) {report}");
        } else {
            roce_tests::warn(&format!("GUEST FROZE {report}"));
        }
        if n == count {
            break;
        }
        ours.truncate(n);
        first = n;
    }
    if let Some(stop) = group.stop_guest.map(|stop| stop.during) {
        if froze_during != Some(stop) {
            failures.push(format!(
                "the guest was stopped during scenario {stop}, and the harness did not take it for frozen"
            ));
        }
    }

    if let Some(reason) = &gave_up {
        failures.push(format!(
            "gave up after {} of {} scenarios: {reason}",
            ours.len(),
            group.scenarios.len()
        ));
    }
    std::fs::write(dir.join("console.log"), &console_log).unwrap();
    let console = Console::new(&console_text);
    let mut nic_log = String::new();
    if let Some((nic, proc)) = nic.as_mut().filter(|_| gave_up.is_some()) {
        // Where a group gave up, our NIC may be the one that stopped (a CI run: its capture
        // went silent mid-WRITE, in both directions, while the guest lived): its counters and
        // its threads' stacks while it still runs, before it is asked to stop.
        if proc.exited().is_none() {
            let counters = env.run(&["host", "info", "--nic", &nic.name, "--counters"]);
            failures.push(format!(
                "our NIC when the group gave up: its counters\n{}{}\nits threads:\n{}",
                counters.stdout,
                counters.stderr,
                proc.stacks()
            ));
        }
        if let Some(stacks) = proc.stop_or_dump_stacks(Duration::from_secs(20)) {
            failures.push(format!(
                "our NIC did not stop on SIGTERM; its threads:\n{stacks}"
            ));
        }
        nic_log = proc.stderr();
    } else if let Some((nic, proc)) = nic.take() {
        let counters = env.run(&["host", "info", "--nic", &nic.name, "--counters"]);
        for counter in ["rx_icrc_errors", "rx_malformed"] {
            if !counters.stdout.lines().any(|l| l == format!("{counter} 0")) {
                failures.push(format!(
                    "our NIC counted bad frames from rxe: {}",
                    counters.stdout
                ));
            }
        }
        nic_log = proc.stderr();
        // The NIC flushes its capture as it stops.
        drop(proc);
    }
    if !nic_log.is_empty() {
        std::fs::write(dir.join("nic.log"), &nic_log).unwrap();
    }
    let rcvbuf_errors = wire::udp_receive_buffer_errors() - rcvbuf_before;
    let switch_table = switched.map(|s| s.check(&mut failures));
    let table = check_scenarios(group, &ours, &runs, &console, &mut failures);
    // A NIC that was killed or crashed may have left its capture cut short.
    let wire = match gave_up {
        None => check_wire(
            group,
            &captures,
            &console,
            rcvbuf_errors,
            froze_during.is_none(),
            &mut failures,
        ),
        Some(_) => "wire: not checked (the group gave up)".to_owned(),
    };
    // What the logs under target/ would have said: a CI run keeps only this output.
    if !failures.is_empty() {
        failures.push(format!(
            "our NIC's log (RUST_LOG={NIC_LOG}), its last {LOG_TAIL} lines:\n{}\n\nthe guest's console, its last {LOG_TAIL} lines:\n{}",
            last_lines(&nic_log, LOG_TAIL),
            last_lines(&console_log, LOG_TAIL)
        ));
    }

    let rxe_counters: Vec<String> = console
        .counters()
        .iter()
        .filter(|(_, v)| **v > 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    eprintln!(
        "group {} (link MTU {}{}): {} scenarios in {:.1} s\n{table}  {wire}\n  rxe counters: {}\n  the guest's longest silence: {:.1} s{}",
        group.name,
        group.link_mtu,
        group
            .faults
            .map(|f| format!(", faults {f}"))
            .unwrap_or_default(),
        group.scenarios.len(),
        started.elapsed().as_secs_f64(),
        rxe_counters.join(" "),
        longest_silence.as_secs_f64(),
        froze_during
            .map(|n| format!(" (it froze during scenario {n}: see the line above)"))
            .unwrap_or_default()
    );
    if let Some(table) = switch_table {
        eprintln!("  the switch between them:\n{table}");
    }
    Some(Outcome {
        captures,
        failures,
        froze_during,
        runs,
    })
}

/// What our NIC logs: warnings, and every step of its connection manager (each MAD in and
/// out), which is what an RDMA CM scenario's failure needs.
const NIC_LOG: &str = "warn,roce_nic::engine::cm=debug";
/// Lines of our NIC's log and of the guest's console a failing group shows.
const LOG_TAIL: usize = 60;
/// Lines of our NIC's log a failing scenario shows, of what it logged during the scenario.
const SCENARIO_LOG_LINES: usize = 200;

fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..].join("\n")
}

/// Why the rest of a group's scenarios would only wait out their time limits, if they would:
/// the group's NIC or the guest exited, or our side of the last two scenarios failed (each
/// scenario has its own port, so one failure does not cause the next; two in a row mean the
/// NIC, the cable or the guest is broken). Without this, a broken NIC costs every remaining
/// scenario its whole limit, hours for the perftest group, where the failure should show in
/// minutes.
fn reason_to_give_up(
    group: &Group,
    ours: &[Ours],
    nic: Option<&mut Proc>,
    vm: &mut Guest,
) -> Option<String> {
    if let Some(status) = nic.and_then(|proc| proc.exited()) {
        return Some(format!("our NIC exited ({status})"));
    }
    if let Some(status) = vm.exited() {
        return Some(format!("the guest exited ({status})"));
    }
    let failed = |(scenario, ours): (&Scenario, &Ours)| {
        scenario.our_status_counts() && !ours.status.success()
    };
    let last_two = group
        .scenarios
        .iter()
        .zip(ours)
        .skip(ours.len().saturating_sub(2));
    (ours.len() >= 2 && last_two.clone().all(failed)).then(|| {
        let names: Vec<String> = last_two.map(|(s, _)| s.name()).collect();
        format!(
            "our side of two scenarios in a row failed ({})",
            names.join("; ")
        )
    })
}

/// Boots a guest whose script runs the group's scenarios from `first` on; returns it and its
/// time limit in seconds.
fn start_guest(group: &Group, cable: &Cable, dir: &Path, first: usize) -> (Guest, u32) {
    let script = match first {
        0 => dir.join("guest.sh"),
        _ => dir.join(format!("guest-from-{first}.sh")),
    };
    std::fs::write(&script, group.guest_script(FIRST_PORT, first)).unwrap();
    let limit = GUEST_TOOL_LIMIT_S * (group.scenarios.len() - first) as u32 + 60;
    let mut cmd = Command::new(guest::harness());
    cmd.args(["run", "--local", &cable.guest, "--remote", &cable.ours])
        .args(["--mtu", &group.link_mtu.to_string()])
        .args(["--timeout", &limit.to_string()])
        .arg("--script")
        .arg(&script)
        .env("CARGO_TARGET_DIR", guest::target_dir());
    (Guest::start(cmd), limit)
}

/// Our side of scenario `n`, the guest watched meanwhile: nothing if the guest froze (our run
/// is then killed). `stop` stops the guest's QEMU during the scenario (the test of the
/// recovery).
#[allow(clippy::too_many_arguments)]
fn run_scenario(
    group: &Group,
    n: usize,
    env: &Env,
    nic: Option<&str>,
    link: &str,
    capture: Option<&PathBuf>,
    vm: &mut Guest,
    stop: Option<StopGuest>,
) -> Option<Ours> {
    let scenario = &group.scenarios[n];
    let mut args = scenario.our_args(FIRST_PORT + n as u16);
    if scenario.unmodified {
        let nic = nic.expect("unmodified programs run on the group's NIC");
        args.splice(1..1, ["--nic".into(), nic.into()]);
        return run_unmodified(env, args, vm, stop);
    }
    match nic {
        Some(nic) => args.extend(["--nic".into(), nic.into()]),
        None => args.extend(own_nic_args(
            group,
            link,
            capture.expect("each run of a group without a NIC has its capture"),
        )),
    }
    run_ours(env, args, vm, stop)
}

/// What makes one of our runs bring up a NIC of its own on the cable, recording `pcap`.
fn own_nic_args(group: &Group, link: &str, pcap: &Path) -> Vec<String> {
    let mut args = vec![
        "--link".to_owned(),
        link.to_owned(),
        "--ip".into(),
        format!("{NIC_IP}/24"),
        "--link-mtu".into(),
        group.link_mtu.to_string(),
        "--pcap".into(),
        pcap.display().to_string(),
    ];
    args.extend(around_the_link(group));
    args
}

/// The line rate, and the group's faults.
fn around_the_link(group: &Group) -> Vec<String> {
    let mut args = vec!["--rate".to_owned(), LINE_RATE.to_owned()];
    if let Some(faults) = group.faults {
        args.extend(["--faults".into(), faults.into()]);
    }
    args
}

fn run_ours(
    env: &Env,
    mut args: Vec<String>,
    vm: &mut Guest,
    stop: Option<StopGuest>,
) -> Option<Ours> {
    let step = STEP_S.to_string();
    args.extend([
        "--timeout".into(),
        step.clone(),
        "--connect-retry".into(),
        step,
    ]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut proc = Proc::spawn(env.roce(&args), false);
    let (status, took) = wait_watching(&mut proc, vm, stop)?;
    Some(Ours {
        status,
        stdout: proc.drain_stdout(),
        stderr: proc.stderr(),
        took,
        nic_log: String::new(),
    })
}

/// `roce run --nic NIC -- PROGRAM ...`: Debian's program on our NIC. As a client it is started
/// again while the guest's server is not listening yet (refused: nothing was exchanged).
fn run_unmodified(
    env: &Env,
    args: Vec<String>,
    vm: &mut Guest,
    stop: Option<StopGuest>,
) -> Option<Ours> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    loop {
        let attempt = t0.elapsed();
        let mut proc = Proc::spawn(env.roce(&args), false);
        let (status, took) = wait_watching(&mut proc, vm, stop)?;
        let ours = Ours {
            status,
            stdout: proc.drain_stdout(),
            stderr: proc.stderr(),
            took: attempt + took,
            nic_log: String::new(),
        };
        // Refused while the guest does not listen yet: by TCP, or by the CM with a REJ
        // (rping and ucmatose name the event; perftest -R gives its number, 8).
        let said = format!("{}{}", ours.stdout, ours.stderr);
        let refused = said.contains("Couldn't connect")
            || said.contains("REJECTED")
            || said.contains("Unexpected CM event bl blka 8");
        if ours.status.success() || !refused || t0.elapsed() > OUR_LIMIT {
            return Some(ours);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Waits for one of our runs (at most [`OUR_LIMIT`]) while watching the guest: its exit status,
/// or nothing if the guest froze first — our run, and any program it started, is then killed —
/// or if our run failed and the guest then turned out frozen (a requester of ours whose
/// retries ran out against a frozen guest fails in seconds, long before the guest's silence
/// says it froze). With `stop`, stops the guest's QEMU (SIGSTOP) when the guest's console
/// says so.
fn wait_watching(
    proc: &mut Proc,
    vm: &mut Guest,
    mut stop: Option<StopGuest>,
) -> Option<(std::process::ExitStatus, Duration)> {
    let started = Instant::now();
    let deadline = started + OUR_LIMIT;
    loop {
        if proc.exited().is_some() || Instant::now() > deadline {
            let status = proc.wait(Duration::ZERO);
            let took = started.elapsed();
            return (status.success() || vm.alive_after(Instant::now())).then_some((status, took));
        }
        if vm.frozen().is_some() {
            watch::kill_tree(proc.pid());
            proc.wait(Duration::from_secs(10));
            return None;
        }
        if let Some(StopGuest {
            during,
            once_printed,
        }) = stop
        {
            if vm.printed_in(during, once_printed) {
                assert!(vm.stop(), "no QEMU to stop");
                eprintln!(
                    "scenario {during}: the guest's QEMU stopped (SIGSTOP), as a frozen guest"
                );
                stop = None;
            }
        }
        vm.poll(Duration::from_millis(20));
    }
}

/// `roce decode --strict` of `capture`: a failure if it finds a bad ICRC or a malformed packet.
fn decode_strict(capture: &Path, failures: &mut Vec<String>) {
    let strict = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--strict"])
        .arg(capture)
        .stdout(std::process::Stdio::null())
        .output()
        .expect("running roce decode");
    if !strict.status.success() {
        failures.push(format!(
            "roce decode --strict {}: {}",
            capture.display(),
            String::from_utf8_lossy(&strict.stderr).trim()
        ));
    }
}

/// `roce conform` on a recording made under faults: both ends, rxe and our NIC, follow the
/// transport's rules through loss (and, the order rules aside, reordering: docs/conform.md).
fn conform(capture: &Path, reordering: bool, failures: &mut Vec<String>) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_roce"));
    command.arg("conform");
    if reordering {
        command.arg("--reordering");
    }
    let out = command.arg(capture).output().expect("running roce conform");
    if !out.status.success() {
        let report = String::from_utf8_lossy(&out.stdout);
        let violations: Vec<&str> = report
            .lines()
            .filter(|l| !l.starts_with("conversation") && !l.starts_with(' '))
            .take(20)
            .collect();
        failures.push(format!(
            "roce conform {}: {}{}",
            capture.display(),
            String::from_utf8_lossy(&out.stderr).trim(),
            violations.join("\n")
        ));
    }
}

/// Both sides of each scenario: our exit status and `verified:` line, the guest tool's exit
/// status and success output. Returns the table of results.
fn check_scenarios(
    group: &Group,
    ours: &[Ours],
    runs: &[u32],
    console: &Console,
    failures: &mut Vec<String>,
) -> String {
    let mut table = String::new();
    for (n, (scenario, ours)) in group.scenarios.iter().zip(ours).enumerate() {
        let problems = problems_of(scenario, ours, console, n);
        // Ours checks the data and says so; Debian's program under `roce run` reports as
        // it does anywhere (its last line).
        let verified = ours
            .stdout
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with("---"))
            .rfind(|l| l.starts_with("verified: ") || scenario.unmodified)
            .unwrap_or("")
            .trim();
        let verdict = if problems.is_empty() { "ok" } else { "FAILED" };
        let again = match runs[n] {
            1 => "",
            _ => " (run again on a fresh guest)",
        };
        let _ = writeln!(
            table,
            "  {verdict:6} {:5.1} s  {}{again}\n           {verified}",
            ours.took.as_secs_f64(),
            scenario.name()
        );
        if !problems.is_empty() {
            let logged = match ours.nic_log.as_str() {
                "" => String::new(),
                log => format!(
                    "\nour NIC's log meanwhile (its last {SCENARIO_LOG_LINES} lines at most):\n{}",
                    last_lines(log, SCENARIO_LOG_LINES)
                ),
            };
            failures.push(format!(
                "{}:\n{}{logged}",
                scenario.name(),
                problems.join("\n")
            ));
        }
    }
    table
}

fn problems_of(scenario: &Scenario, ours: &Ours, console: &Console, n: usize) -> Vec<String> {
    let mut problems = Vec::new();
    if scenario.unmodified {
        let text = scenario.success_text(!scenario.guest_serves);
        if (scenario.our_status_counts() && !ours.status.success())
            || text.is_some_and(|t| !ours.stdout.contains(&t))
        {
            problems.push(format!(
                "roce run exited with {}: {}{}",
                ours.status,
                ours.stdout,
                ours.stderr.trim()
            ));
        }
    } else if !ours.status.success() || !ours.stdout.contains("\nverified: ") {
        problems.push(format!(
            "roce exited with {}: {}{}",
            ours.status,
            ours.stdout,
            ours.stderr.trim()
        ));
    }
    let theirs = console.scenario(n);
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
    problems
}

/// The frames on the cable and the guest's view of them: rxe's path MTU, `roce decode
/// --strict` content with every capture, a good ICRC on every frame rxe sent (checked here
/// too, by sender), and (without faults) every RoCE frame we sent counted by rxe — which counts
/// only frames that passed its ICRC check — or dropped by the host for lack of socket buffer,
/// or (only ibv_srq_pingpong ends with messages in flight) meant for a QP already gone.
/// Returns a summary line. rxe's count is compared only where `one_boot` ran the whole
/// group: a guest that froze took its counters with it.
fn check_wire(
    group: &Group,
    captures: &[PathBuf],
    console: &Console,
    rcvbuf_errors: u64,
    one_boot: bool,
    failures: &mut Vec<String>,
) -> String {
    let want_mtu = if group.link_mtu >= 4176 { 4096 } else { 1024 };
    if console.active_mtu() != Some(want_mtu) {
        failures.push(format!(
            "rxe0's active MTU is {:?}, not {want_mtu}",
            console.active_mtu()
        ));
    }
    let mut all = wire::Wire::default();
    for capture in captures {
        decode_strict(capture, failures);
        if let Some(faults) = group.faults {
            conform(capture, faults.contains("reorder"), failures);
        }
        let wire = wire::inspect(capture, NIC_MAC, GUEST_MAC);
        if !wire.bad.is_empty() {
            failures.push(format!(
                "rxe sent bad frames ({}): {}",
                capture.display(),
                wire.bad.join("; ")
            ));
        }
        all.add(&wire);
    }
    let received = console.counters().get("rcvd_pkts").copied().unwrap_or(0);
    let sent = all.sent_by_us();
    let late: u64 = group
        .scenarios
        .iter()
        .map(|s| s.uncounted_frames_allowed())
        .sum();
    if group.faults.is_none() && one_boot && sent > received + rcvbuf_errors + late {
        failures.push(format!(
            "we sent {sent} RoCE frames, rxe received {received}; the host dropped {rcvbuf_errors} for lack of buffer and at most {late} may have been for QPs already gone"
        ));
    }
    format!(
        "wire: {} frames; RoCE from us {sent} (opcodes {:x?}), from rxe {} (opcodes {:x?}); rxe rcvd_pkts {received}{}; host UDP buffer drops {rcvbuf_errors}",
        all.frames,
        all.ours.keys().collect::<Vec<_>>(),
        all.sent_by_guest(),
        all.theirs.keys().collect::<Vec<_>>(),
        if one_boot {
            ""
        } else {
            " (the last boot's: not compared)"
        },
    )
}

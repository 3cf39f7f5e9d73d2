//! `roce demo` as a student runs it: every scenario, with its NICs and target as processes
//! (the default) and in one process, each run's proof lines checked against the numbers they
//! carry, against its pcap decoded by `roce decode --strict`, by tshark and by scapy, and —
//! for the frozen target — against the target's /proc and memory as this test reads them.

mod support;

use std::path::Path;
use std::time::Duration;

use roce_demo::Scenario;
use support::*;

/// Runs `roce demo ARGS` to its end and insists that it succeeded.
fn demo(env: &Env, args: &[&str]) -> String {
    let mut all = vec!["demo"];
    all.extend_from_slice(args);
    let done = env.run(&all);
    assert!(
        done.status.success(),
        "roce {all:?} failed ({:?})\nstdout:\n{}\nstderr:\n{}",
        done.status,
        done.stdout,
        done.stderr
    );
    assert!(
        !done.stdout.contains('\u{1b}'),
        "colours on a pipe:\n{}",
        done.stdout
    );
    done.stdout
}

/// The numbers in `text`, in order (decimal).
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// The first line that contains `part`.
fn line_with<'a>(out: &'a str, part: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(part))
        .unwrap_or_else(|| panic!("no line with {part:?} in\n{out}"))
}

/// CPU time, time on a CPU and context switches: the same numbers before and after.
fn assert_cpu_unchanged(out: &str) {
    let cpu = proof(out, "target CPU time: ");
    assert!(
        cpu.ends_with("(unchanged) across the frozen interval")
            || cpu.ends_with("(unchanged) while it waited"),
        "{cpu}"
    );
    let seconds: Vec<&str> = cpu.split_whitespace().filter(|w| w.contains('.')).collect();
    assert_eq!(seconds.len(), 2, "{cpu}");
    assert_eq!(seconds[0], seconds[1], "{cpu}");
    let on_cpu = numbers(proof(out, "target time on a CPU (schedstat): "));
    assert!(on_cpu[0] > 0, "the target ran to set up: {on_cpu:?}");
    assert_eq!(on_cpu[0], on_cpu[1]);
    let switches = numbers(proof(out, "target context switches: "));
    assert_eq!(switches.len(), 4, "{switches:?}");
    assert_eq!(switches[..2], switches[2..]);
}

/// The bytes the memory dump shows after the operation, from its `after` and `same` lines.
fn memory_after(out: &str) -> Vec<(u64, Vec<u8>)> {
    out.lines()
        .filter_map(|l| {
            let rest = l
                .trim()
                .strip_prefix("after")
                .or_else(|| l.trim().strip_prefix("same"))?;
            let rest = rest.trim_start();
            let (offset, rest) = rest.split_once("  ")?;
            let hex = rest.split('|').next()?;
            let bytes = hex
                .split_whitespace()
                .map(|b| u8::from_str_radix(b, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            Some((u64::from_str_radix(offset, 16).ok()?, bytes))
        })
        .collect()
}

/// The text between “ and ” on the first line that contains `part`.
fn quoted<'a>(out: &'a str, part: &str) -> &'a str {
    let line = line_with(out, part);
    let start = line.find('“').unwrap() + '“'.len_utf8();
    let end = line.rfind('”').unwrap();
    &line[start..end]
}

/// `roce decode --strict` of the run's capture: every ICRC valid. Returns its packet lines.
fn decoded(env: &Env, pcap: &Path) -> Vec<String> {
    let done = env.run(&["decode", "--strict", pcap.to_str().unwrap()]);
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    done.stdout
        .lines()
        .filter(|l| l.contains(" → "))
        .map(str::to_owned)
        .collect()
}

/// The count the ICRC proof line gives matches the capture, which `roce decode --strict`
/// finds all valid — and so do tshark (every field) and scapy (every ICRC), which share no code
/// with the demo.
fn assert_capture_valid(env: &Env, out: &str, pcap: &Path) -> Vec<String> {
    let lines = decoded(env, pcap);
    let claimed = numbers(proof(out, "all "))[0] as usize;
    assert_eq!(lines.len(), claimed, "{lines:#?}");
    let roce = Path::new(env!("CARGO_BIN_EXE_roce"));
    if let Some(checked) = roce_tests::oracle::check_from_outside(roce, pcap) {
        assert_eq!((checked.packets, checked.icrcs), (claimed, claimed));
    }
    lines
}

/// A scenario in its default (multi-process) form, with its capture.
fn run_scenario(scenario: &str) -> (Env, String, Vec<String>) {
    let env = Env::new(&format!("demo{scenario}"));
    let pcap = env.dir.join("demo.pcap");
    let out = demo(
        &env,
        &["--scenario", scenario, "--pcap", pcap.to_str().unwrap()],
    );
    assert!(
        out.contains("Two emulated RDMA NICs run as processes"),
        "{out}"
    );
    let lines = assert_capture_valid(&env, &out, &pcap);
    (env, out, lines)
}

/// The target's memory as the dump shows it, at `offset`.
fn dumped_at(out: &str, offset: u64, len: usize) -> Vec<u8> {
    let mut bytes = Vec::new();
    for (at, line) in memory_after(out) {
        if at + 16 > offset && at < offset + len as u64 {
            bytes.extend_from_slice(&line);
        }
    }
    let skip = (offset % 16) as usize;
    bytes[skip..skip + len].to_vec()
}

#[test]
fn write_puts_the_bytes_in_the_frozen_targets_memory() {
    let (_env, out, lines) = run_scenario("write");
    line_with(&out, "The demo freezes the target: SIGSTOP to process ");
    let sent = quoted(&out, "The buffer holds");
    let claim = proof(&out, "data verified byte for byte: ");
    assert_eq!(
        claim,
        format!(
            "✓ data verified byte for byte: the {} bytes at offset 0x40 of the target's memory are the ones the initiator sent",
            sent.len()
        )
    );
    // The dump, read while the target was frozen, holds exactly those bytes.
    assert_eq!(dumped_at(&out, 0x40, sent.len()), sent.as_bytes());
    assert_cpu_unchanged(&out);
    // What the target NIC logged, narrated: its checks and the DMA, at offset 0x40.
    for decision in [
        "target NIC  ICRC ok",
        "is the one it expects",
        "lie inside it and it allows remote writes",
        &format!(
            "DMA: {} bytes written into the target's memory (region ",
            sent.len()
        ),
        "target NIC  acknowledgement sent for PSN",
    ] {
        line_with(&out, decision);
    }
    assert!(line_with(&out, "DMA: ").ends_with("at offset 0x40"));
    assert_eq!(
        quoted(&out, "looks at offset 0x40 of its memory and finds"),
        sent
    );
    proof(&out, "the target finds the data already there");
    // The WRITE, then its ACK (a busy machine may add a probe: the WRITE again).
    assert!(lines[0].contains("RC RDMA_WRITE_ONLY"), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("RC ACKNOWLEDGE") && l.contains("[ACK]")),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("RDMA_WRITE_ONLY") || l.contains("[ACK]")),
        "{lines:#?}"
    );
}

#[test]
fn read_fetches_the_frozen_targets_bytes() {
    let (_env, out, lines) = run_scenario("read");
    let text = quoted(&out, "It wrote “");
    let claim = proof(&out, "data verified byte for byte: ");
    assert_eq!(numbers(claim)[0] as usize, text.len());
    proof(
        &out,
        "the target's memory is as it left it: a READ does not write",
    );
    assert_eq!(dumped_at(&out, 0x40, text.len()), text.as_bytes());
    assert!(
        !out.contains("     after "),
        "a READ changes nothing:\n{out}"
    );
    assert_cpu_unchanged(&out);
    line_with(&out, "and it allows remote reads");
    assert!(lines[0].contains("RC RDMA_READ_REQUEST"), "{lines:#?}");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("RC RDMA_READ_RESPONSE_ONLY")),
        "{lines:#?}"
    );
}

#[test]
fn atomic_adds_to_the_frozen_targets_counter() {
    let (_env, out, lines) = run_scenario("atomic");
    proof(&out, "counter verified: 41 + 1 = 42 in the target's memory");
    proof(&out, "the initiator received the value before the add: 41");
    assert_eq!(dumped_at(&out, 0x100, 8), 42u64.to_le_bytes());
    assert_cpu_unchanged(&out);
    line_with(&out, "the value before was 41");
    assert!(
        lines[0].contains("RC FETCH_ADD") && lines[0].contains("add=0x1"),
        "{lines:#?}"
    );
    // 0x29 = 41: the value before, carried back (a repeated request gets the saved answer).
    let acks: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("RC ATOMIC_ACKNOWLEDGE"))
        .collect();
    assert!(
        !acks.is_empty() && acks.iter().all(|l| l.contains("original=0x29")),
        "{lines:#?}"
    );
}

#[test]
fn send_is_refused_while_no_receive_is_posted_then_lands() {
    let (_env, out, lines) = run_scenario("send");
    let rnr = numbers(proof(&out, "RNR NAK seen "))[0];
    assert!(rnr >= 2, "{rnr}");
    // The capture holds them, before any success.
    let naks = lines.iter().filter(|l| l.contains("[RNR NAK")).count();
    assert_eq!(naks as u64, rnr, "{lines:#?}");
    let first_ack = lines.iter().position(|l| l.contains("[ACK]")).unwrap();
    let last_rnr = lines.iter().rposition(|l| l.contains("[RNR NAK")).unwrap();
    assert!(last_rnr < first_ack, "{lines:#?}");
    proof(
        &out,
        "nothing landed in the target's memory: a SEND needs a receive buffer",
    );
    // Frozen without a receive: its CPU did not move; then it had to run.
    assert_cpu_unchanged(&out);
    let ran = numbers(proof(&out, "the target ran to post the receive: "));
    assert!(ran[1] > ran[0], "{ran:?}");
    let sent = quoted(&out, "The buffer holds");
    assert_eq!(
        numbers(proof(&out, "data verified byte for byte: "))[0] as usize,
        sent.len()
    );
    assert_eq!(
        quoted(&out, "The target's completion: IBV_WC_RECV success"),
        sent
    );
}

#[test]
fn loss_shows_the_nak_and_the_retransmission() {
    let (_env, out, lines) = run_scenario("loss");
    let retransmitted = numbers(proof(&out, "retransmission seen: PSN "));
    let (psn, lost, again) = (retransmitted[0], retransmitted[1], retransmitted[2]);
    // Independently, in the capture: the lost frame and its second sending carry that PSN, and
    // a sequence NAK asks for it in between.
    let at = |n: u64| lines.iter().find(|l| numbers(l)[0] == n).unwrap();
    assert!(at(lost).contains(&format!("PSN={psn} ")), "{lines:#?}");
    assert!(at(again).contains(&format!("PSN={psn} ")), "{lines:#?}");
    assert!(at(lost).contains("RDMA_WRITE_MIDDLE"));
    let nak = numbers(proof(&out, "sequence NAK seen: "));
    assert_eq!(nak[0], psn);
    assert!(at(nak[1]).contains("[NAK, PSN sequence error]") && lost < nak[1] && nak[1] < again);
    line_with(
        &out,
        "frame 2  initiator NIC → target NIC  (314 bytes)  ↯ lost on the wire",
    );
    line_with(&out, &format!("sends a sequence NAK for {psn}"));
    line_with(&out, &format!("go-back-N: sends again from PSN {psn}"));
    assert_eq!(
        numbers(proof(&out, "data verified byte for byte: "))[0],
        700
    );
    assert_cpu_unchanged(&out);
}

#[test]
fn imm_wakes_the_target_only_once_the_data_is_in_place() {
    let (_env, out, lines) = run_scenario("imm");
    let sent = quoted(&out, "The buffer holds");
    assert_eq!(quoted(&out, "The target woke with a completion"), sent);
    assert!(line_with(
        &out,
        "The target woke with a completion: IBV_WC_RECV_RDMA_WITH_IMM success"
    )
    .contains("immediate data 0x40"));
    proof(
        &out,
        "the target found the data already in place when the completion woke it",
    );
    let before = numbers(proof(&out, "the NIC placed the data "));
    assert!(before[0] > 0);
    assert!(
        lines[0].contains("RDMA_WRITE_ONLY_WITH_IMMEDIATE") && lines[0].contains("Imm=0x00000040")
    );
}

#[test]
fn every_scenario_runs_in_one_process_too() {
    // tcp-vs-rdma and allreduce have tests of their own (demo_lessons.rs).
    for scenario in Scenario::ALL.into_iter().filter(|s| s.is_pair()) {
        let env = Env::new(&format!("inproc{scenario}"));
        let pcap = env.dir.join("inproc.pcap");
        let out = demo(
            &env,
            &[
                "--in-process",
                "--scenario",
                scenario.name(),
                "--quiet",
                "--pcap",
                pcap.to_str().unwrap(),
            ],
        );
        // Its frames, as `roce decode`, tshark and scapy see them, are those the proof counts.
        assert_capture_valid(&env, &out, &pcap);
        // --quiet: the proof lines only, every one held.
        assert!(out.lines().count() >= 2, "{scenario}: {out}");
        for line in out.lines() {
            assert!(line.starts_with("✓ "), "{scenario}: {line}");
        }
        match scenario {
            Scenario::Read => {
                proof(&out, "data verified byte for byte: ");
            }
            Scenario::Atomic => {
                proof(&out, "counter verified: 41 + 1 = 42");
            }
            Scenario::Loss => {
                proof(&out, "retransmission seen: ");
            }
            Scenario::Send => {
                proof(&out, "RNR NAK seen ");
            }
            _ => {
                proof(&out, "data verified byte for byte: ");
            }
        }
        if scenario.target_frozen() {
            let cpu = proof(&out, "target CPU time: ");
            assert!(cpu.ends_with("(unchanged) while it waited"), "{cpu}");
            assert_cpu_unchanged(&out);
        }
    }
}

#[test]
fn a_large_write_shows_its_rate_and_checks_every_byte() {
    let env = Env::new("demobig");
    let out = demo(&env, &["--size", "64M"]);
    let moved = line_with(&out, "Moved 67108864 bytes in ");
    assert!(moved.ends_with(" Gbit/s."), "{moved}");
    proof(
        &out,
        "data verified byte for byte: the 67108864 bytes at offset 0x40 of the target's memory",
    );
    assert_cpu_unchanged(&out);
    line_with(&out, "into 16384 packet(s)");
}

#[test]
fn help_explains_each_scenario_in_one_line() {
    let env = Env::new("demohelp");
    let done = env.run(&["demo", "--help"]);
    assert!(done.status.success());
    for scenario in Scenario::ALL {
        let line = line_with(&done.stdout, &format!("- {}:", scenario.name()));
        assert!(line.trim_end().ends_with(&scenario.summary()), "{line}");
    }
}

#[test]
fn bad_options_are_one_line_and_exit_code_2() {
    let env = Env::new("demobad");
    for (args, want) in [
        (&["demo", "--bogus"][..], "roce: unexpected argument '--bogus' found (see roce demo --help)\n"),
        (&["demo", "--scenario", "nope"][..], "roce: invalid value 'nope' for '--scenario <SCENARIO>' [possible values: write, read, send, atomic, loss, imm, tcp-vs-rdma, allreduce, connect, congestion] (see roce demo --help)\n"),
        (&["demo", "--size", "12Q"][..], "roce: --size 12Q: \"12Q\" is not a size: use a number with an optional K, M, G or T suffix\n"),
        (&["demo", "--scenario", "atomic", "--size", "1M"][..], "roce: --size does not apply to the atomic scenario (it moves what it needs)\n"),
        (&["demo", "--step", "--quiet"][..], "roce: the argument '--step' cannot be used with '--quiet' (see roce demo --help)\n"),
        (&["demo", "--html", "/nonexistent/page.html"][..], "roce: cannot create the page /nonexistent/page.html: No such file or directory (os error 2)\n"),
        (&["demo", "--pcap", "/nonexistent/run.pcap"][..], "roce: cannot create the capture file /nonexistent/run.pcap: No such file or directory (os error 2)\n"),
    ] {
        let done = env.run(args);
        assert_eq!(done.status.code(), Some(2), "{args:?}");
        assert_eq!(done.stderr, want, "{args:?}");
        assert_eq!(done.stdout, "");
    }
}

#[test]
fn step_without_a_terminal_says_so_and_runs_through() {
    let env = Env::new("demostep");
    let done = env.run(&["demo", "--step", "--scenario", "atomic"]);
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(
        done.stderr,
        "roce: --step waits for Enter on a terminal, and standard input is not a terminal: not pausing\n"
    );
    proof(&done.stdout, "counter verified");
}

/// Whether `pid` is still a process (a zombie counts as gone: it runs nothing).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'))
}

#[test]
fn a_demo_killed_while_its_target_is_frozen_leaves_nothing_behind() {
    // `--step` pauses on a terminal: `script` gives the demo one, fed by a pipe the test never
    // writes to, so the demo waits after step 1 with its target frozen.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        roce_tests::skip("`script` (util-linux) is not installed");
        return;
    }
    let env = Env::new("demokill");
    let mut cmd = std::process::Command::new("script");
    let roce = env!("CARGO_BIN_EXE_roce");
    cmd.args(["-qefc", &format!("{roce} demo --step"), "/dev/null"])
        .env("XDG_RUNTIME_DIR", &env.dir)
        .env("NO_COLOR", "1");
    let mut run = Proc::spawn(cmd, true);
    let nics = run.expect(|l| l.contains("Two emulated RDMA NICs run as processes"));
    let nic_pids: Vec<i32> = nics
        .split("(pid ")
        .skip(1)
        .map(|s| numbers(s)[0] as i32)
        .collect();
    let who = run.expect(|l| l.contains("the initiator program is this demo (pid "));
    let target = numbers(who.split("process ").nth(1).unwrap())[0] as i32;
    let demo = numbers(who.split("(pid ").nth(1).unwrap())[0] as i32;
    run.expect(|l| l.contains("SIGSTOP to process"));
    eventually("the target frozen", || {
        thread_states(target).iter().all(|s| *s == 'T')
    });
    // SAFETY: kill(2) of the demo, a descendant of this test, by its PID.
    assert_eq!(unsafe { libc::kill(demo, libc::SIGKILL) }, 0);
    for pid in nic_pids.iter().chain([&target]) {
        eventually(&format!("process {pid} gone"), || !alive(*pid));
    }
    // The NICs ended cleanly, on the SIGTERM the kernel sent them for the demo: they removed
    // their rings and doorbells from /dev/shm.
    let names: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("roce-demo{demo}")))
        .collect();
    assert!(names.is_empty(), "left in /dev/shm: {names:?}");
    let _ = run.wait(Duration::from_secs(10));
}

/// Nanoseconds the threads of `pid` spent on a CPU, by the scheduler's count (the first field
/// of each thread's schedstat).
fn on_cpu_ns(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// `len` bytes at `address` of process `pid`'s memory, read through /proc/PID/mem (the kernel's
/// view of that process's own address space; the target is a descendant of this test).
fn memory_of(pid: i32, address: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut bytes = vec![0; len];
    mem.read_exact_at(&mut bytes, address)
        .unwrap_or_else(|e| panic!("/proc/{pid}/mem at {address:#x}: {e}"));
    bytes
}

/// What the target looks like from outside, all read by this test from /proc.
#[derive(Debug, PartialEq)]
struct Outside {
    states: Vec<char>,
    cpu_ticks: u64,
    on_cpu_ns: u64,
    context_switches: u64,
}

fn outside(pid: i32) -> Outside {
    Outside {
        states: thread_states(pid),
        cpu_ticks: cpu_ticks(pid),
        on_cpu_ns: on_cpu_ns(pid),
        context_switches: context_switches(pid),
    }
}

#[test]
fn the_test_itself_sees_the_frozen_target_stand_still_while_its_memory_changes() {
    // `--step` pauses after each step on a terminal (`script` gives the demo one, fed by this
    // test): after step 1 the target is frozen, after step 4 the WRITE is done and the target
    // is still frozen. At both pauses this test reads the target's /proc and memory itself,
    // instead of believing the numbers the demo prints.
    if std::process::Command::new("script")
        .arg("--version")
        .output()
        .is_err()
    {
        roce_tests::skip("`script` (util-linux) is not installed");
        return;
    }
    let env = Env::new("demoproc");
    let mut cmd = std::process::Command::new("script");
    let roce = env!("CARGO_BIN_EXE_roce");
    cmd.args([
        "-qefc",
        &format!("{roce} demo --step --scenario write"),
        "/dev/null",
    ])
    .env("XDG_RUNTIME_DIR", &env.dir)
    .env("NO_COLOR", "1");
    let mut run = Proc::spawn(cmd, true);
    let who = run.expect(|l| l.contains("The target program is process "));
    let target = numbers(who.split("process ").nth(1).unwrap())[0] as i32;
    let va = run.expect(|l| l.trim_start().starts_with("VA "));
    let va = u64::from_str_radix(
        va.split_whitespace()
            .nth(1)
            .unwrap()
            .trim_start_matches("0x"),
        16,
    )
    .unwrap();
    run.expect(|l| l.contains("SIGSTOP to process"));
    run.expect(|l| l.contains("Its CPU time so far: "));
    eventually("the target frozen", || {
        thread_states(target).iter().all(|s| *s == 'T')
    });
    let before = outside(target);
    assert!(before.on_cpu_ns > 0, "the target ran to set up: {before:?}");
    let len = 69;
    assert_eq!(memory_of(target, va + 0x40, len), vec![0; len]);

    // Steps 2 to 4: the WRITE is posted, sent, written and acknowledged.
    for _ in 2..=4 {
        run.say("");
    }
    let sent = run.expect(|l| l.contains("The buffer holds “"));
    let sent = sent.split('“').nth(1).unwrap().split('”').next().unwrap();
    assert_eq!(sent.len(), len);
    run.expect(|l| l.contains("DMA: 69 bytes written into the target's memory"));
    run.expect(|l| l.trim_start().starts_with("target NIC     rx_frames"));
    // The demo now waits at the end of step 4; its target has not been let go.
    assert_eq!(
        memory_of(target, va + 0x40, len),
        sent.as_bytes(),
        "the target's memory, read through /proc/{target}/mem"
    );
    let after = outside(target);
    assert!(after.states.iter().all(|s| *s == 'T'), "{after:?}");
    assert_eq!(after, before, "the frozen target ran");

    // The rest: the proof, SIGCONT, and the target finding its data.
    for _ in 0..4 {
        run.say("");
    }
    run.expect(|l| l.contains("✓ the target finds the data already there"));
    assert!(run.wait(PATIENCE).success());
}

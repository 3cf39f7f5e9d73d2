//! `roce demo --scenario tcp-vs-rdma`, `--scenario allreduce` and `--scenario connect`, checked
//! from outside.
//!
//! tcp-vs-rdma: the test finds the receiving process in the narration and reads its CPU time
//! from /proc itself at the demo's `--step` pauses (a terminal from `script`, fed Enter by the
//! test): the receiver spends CPU time taking in the TCP bytes, more for far more bytes, and
//! none at all while the RDMA WRITE lands.
//!
//! allreduce: rings of 2, 3, 4 and 8 hosts, vectors that do and do not divide evenly among
//! them. Besides the demo's own proof lines, the capture is checked by `roce decode --strict`
//! and by tshark, from which the test rebuilds what every link carried and every summed chunk
//! of the all-gather, and compares them with its own sums of the hosts' inputs.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::process::Command;

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
    done.stdout
}

/// Every line of `out` is a proof line that held (`--quiet`).
fn all_held(out: &str) {
    assert!(out.lines().count() >= 3, "{out}");
    for line in out.lines() {
        assert!(line.starts_with("✓ "), "{line}\n{out}");
    }
}

/// The numbers in `text`, in order (decimal).
fn numbers(text: &str) -> Vec<u64> {
    text.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .filter_map(|s| s.parse().ok())
        .collect()
}

/// What a process has spent so far, as /proc has it: time on a CPU (nanoseconds, every
/// thread's `schedstat`), utime + stime (ticks), and context switches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Spent {
    on_cpu_ns: u64,
    ticks: u64,
    switches: u64,
}

fn spent(pid: i32) -> Spent {
    let on_cpu_ns = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|task| {
            let path = task.ok()?.path().join("schedstat");
            let text = std::fs::read_to_string(path).ok()?;
            text.split_whitespace().next()?.parse::<u64>().ok()
        })
        .sum();
    Spent {
        on_cpu_ns,
        ticks: cpu_ticks(pid),
        switches: context_switches(pid),
    }
}

/// The receiver's figures across the TCP step and across the RDMA step of a `tcp-vs-rdma` run
/// of `size`, read by the test from /proc at the demo's pauses.
fn receiver_from_outside(size: &str) -> (Spent, Spent) {
    let env = Env::new(&format!("tvr{size}"));
    let roce = env!("CARGO_BIN_EXE_roce");
    // `--step` pauses only with a terminal on standard input: `script` gives it one, fed by
    // the test's pipe.
    let mut cmd = Command::new("script");
    cmd.args([
        "-qefc",
        &format!("{roce} demo --scenario tcp-vs-rdma --step --size {size}"),
        "/dev/null",
    ])
    .env("XDG_RUNTIME_DIR", &env.dir)
    .env("NO_COLOR", "1");
    let mut run = Proc::spawn(cmd, true);
    let line = run.expect(|l| l.trim_start().starts_with("receiver ") && l.contains("process "));
    let pid = numbers(line.split("process ").nth(1).unwrap())[0] as i32;
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    assert!(
        String::from_utf8_lossy(&cmdline).contains("demo-target"),
        "{pid} is not the receiver: {}",
        String::from_utf8_lossy(&cmdline)
    );
    // End of step 1: the receiver waits in recv().
    run.expect(|l| l.contains("The receiver now waits in recv()"));
    let ready = spent(pid);
    run.say("");
    // End of step 2: the TCP bytes are in, the receiver waits for a command again.
    run.expect(|l| l.contains("The receiver now waits on its command channel again."));
    let after_tcp = spent(pid);
    run.say("");
    // End of step 3: the RDMA WRITE has landed.
    run.expect(|l| l.contains("The receiving program was not woken once."));
    let after_rdma = spent(pid);
    run.say("");
    run.expect(|l| l.contains("the receiver finds both copies in its memory"));
    run.say("");
    let status = run.wait(PATIENCE);
    assert!(status.success(), "{}", run.stderr());
    let delta = |a: Spent, b: Spent| Spent {
        on_cpu_ns: b.on_cpu_ns - a.on_cpu_ns,
        ticks: b.ticks - a.ticks,
        switches: b.switches - a.switches,
    };
    (delta(ready, after_tcp), delta(after_tcp, after_rdma))
}

#[test]
fn tcp_costs_the_receiver_cpu_time_growing_with_the_bytes_and_rdma_costs_it_none() {
    if Command::new("script").arg("--version").output().is_err() {
        roce_tests::skip("`script` (util-linux) is not installed");
        return;
    }
    let (small_tcp, small_rdma) = receiver_from_outside("1M");
    let (big_tcp, big_rdma) = receiver_from_outside("64M");
    eprintln!("receiver from /proc: 1M TCP {small_tcp:?} RDMA {small_rdma:?}; 64M TCP {big_tcp:?} RDMA {big_rdma:?}");
    // The receiver runs to take TCP's bytes in: it is woken, and it copies.
    assert!(
        small_tcp.on_cpu_ns > 0 && small_tcp.switches > 0,
        "{small_tcp:?}"
    );
    // 64 times the bytes: far more than 4 times the CPU, however loaded the machine (copying
    // 64 MiB from the kernel costs milliseconds, 1 MiB a tenth of one).
    assert!(
        big_tcp.on_cpu_ns > 4 * small_tcp.on_cpu_ns,
        "1M: {small_tcp:?}, 64M: {big_tcp:?}"
    );
    // RDMA: not a nanosecond, not a tick, not a context switch.
    let nothing = Spent {
        on_cpu_ns: 0,
        ticks: 0,
        switches: 0,
    };
    assert_eq!(small_rdma, nothing);
    assert_eq!(big_rdma, nothing);
}

#[test]
fn tcp_vs_rdma_tells_where_the_work_went_and_proves_it() {
    let env = Env::new("tvrnarr");
    let pcap = env.dir.join("tvr.pcap");
    let out = demo(
        &env,
        &[
            "--scenario",
            "tcp-vs-rdma",
            "--size",
            "2M",
            "--pcap",
            pcap.to_str().unwrap(),
        ],
    );
    let tcp = numbers(proof(&out, "TCP cost the receiver "));
    assert!(tcp[0] > 0, "{tcp:?}");
    let rdma = proof(&out, "RDMA cost the receiver ");
    assert!(rdma.ends_with("(unchanged)"), "{rdma}");
    assert!(numbers(rdma).iter().all(|n| *n == 0), "{rdma}");
    assert!(numbers(proof(&out, "the receiver's NIC did the RDMA work: "))[0] > 0);
    for what in ["TCP: the 2097152 bytes", "RDMA: the 2097152 bytes"] {
        proof(&out, what);
    }
    proof(&out, "the receiver finds both copies in its memory");
    // The capture is the RDMA half: one WRITE of 512 packets, and their ACKs.
    let claimed = numbers(proof(&out, "all "))[0] as usize;
    let done = env.run(&["decode", "--strict", pcap.to_str().unwrap()]);
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    let packets: Vec<&str> = done.stdout.lines().filter(|l| l.contains(" → ")).collect();
    assert_eq!(packets.len(), claimed);
    let writes = packets.iter().filter(|l| l.contains("RDMA_WRITE")).count();
    assert!(writes >= 512, "{writes}");
    for line in [
        "Where the work went: into the receiver.",
        "Where the work went: into the NICs.",
    ] {
        assert!(out.contains(line), "{out}");
    }
}

#[test]
fn both_lessons_run_in_one_process_too() {
    let env = Env::new("lessonsinproc");
    let out = demo(
        &env,
        &[
            "--scenario",
            "tcp-vs-rdma",
            "--in-process",
            "--size",
            "4M",
            "--quiet",
        ],
    );
    all_held(&out);
    assert!(proof(&out, "RDMA cost the receiver 0 ns").ends_with("(unchanged)"));
    let out = demo(
        &env,
        &[
            "--scenario",
            "allreduce",
            "--in-process",
            "--hosts",
            "3",
            "--size",
            "1000",
            "--quiet",
        ],
    );
    all_held(&out);
    for rank in 0..3 {
        proof(&out, &format!("host {rank}: all 250 floats equal the sum"));
    }
}

/// Host `rank`'s input, float `i`: the test's own copy of the rule the demo's hosts follow.
fn input(rank: usize, i: usize) -> f32 {
    ((i * 31 + rank * 17) % 1024) as f32 / 8.0 - 64.0
}

/// Floats `start..end` of chunk `k` of `floats` floats among `hosts`: the first
/// `floats % hosts` chunks have one more.
fn chunk(hosts: usize, floats: usize, k: usize) -> (usize, usize) {
    let (base, extra) = (floats / hosts, floats % hosts);
    let start = k * base + k.min(extra);
    (start, start + base + usize::from(k < extra))
}

/// One RDMA WRITE as the capture shows it: who sent it to whom, its immediate, its payload
/// (retransmissions left out).
#[derive(Debug)]
struct Write {
    from: String,
    to: String,
    imm: u32,
    payload: Vec<u8>,
}

/// The WRITEs in `pcap`, rebuilt from tshark's fields: per sender and destination QP, the
/// packets in PSN order, each PSN once.
fn writes_in(pcap: &Path) -> Vec<Write> {
    let mut tshark = roce_tests::tshark_fields(pcap);
    tshark.args(["-E", "separator=/t", "-E", "occurrence=f"]);
    for field in [
        "ip.src",
        "ip.dst",
        "infiniband.bth.opcode",
        "infiniband.bth.destqp",
        "infiniband.bth.psn",
        "infiniband.immdt",
        "data.data",
    ] {
        tshark.args(["-e", field]);
    }
    let output = tshark.output().expect("running tshark");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut next_psn: HashMap<(String, String), u32> = HashMap::new();
    let mut open: HashMap<(String, String), Write> = HashMap::new();
    let mut writes = Vec::new();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let opcode: u32 = f[2].parse().unwrap_or(u32::MAX);
        // RC RDMA WRITE FIRST (6) to ONLY WITH IMMEDIATE (11).
        if !(6..=11).contains(&opcode) {
            continue;
        }
        let key = (f[0].to_owned(), f[3].to_owned());
        let psn: u32 = f[4].parse().unwrap();
        let next = next_psn.entry(key.clone()).or_insert(psn);
        if psn != *next {
            // Sent again, or after a loss before the tap: its turn comes again.
            continue;
        }
        *next = (psn + 1) & 0xff_ffff;
        let bytes: Vec<u8> = (0..f[6].len() / 2)
            .map(|i| u8::from_str_radix(&f[6][2 * i..2 * i + 2], 16).unwrap())
            .collect();
        let write = open.entry(key.clone()).or_insert_with(|| Write {
            from: f[0].to_owned(),
            to: f[1].to_owned(),
            imm: 0,
            payload: Vec::new(),
        });
        write.payload.extend_from_slice(&bytes);
        // LAST WITH IMMEDIATE (9) and ONLY WITH IMMEDIATE (11) end a WRITE with immediate.
        if opcode == 9 || opcode == 11 {
            let mut write = open.remove(&key).unwrap();
            write.imm = u32::from_str_radix(f[5], 16).unwrap();
            writes.push(write);
        }
    }
    assert!(open.is_empty(), "WRITEs left unfinished: {open:?}");
    writes
}

/// A ring of `hosts` hosts reducing `size` bytes each: the demo's proofs, `roce decode
/// --strict` of its capture, and what tshark finds in it.
fn ring(env: &Env, hosts: usize, size: usize, in_process: bool) {
    let pcap = env.dir.join(format!("ring{hosts}-{size}.pcap"));
    let (hosts_arg, size_arg) = (hosts.to_string(), size.to_string());
    let mut args = vec![
        "--scenario",
        "allreduce",
        "--hosts",
        &hosts_arg,
        "--size",
        &size_arg,
        "--pcap",
        pcap.to_str().unwrap(),
    ];
    if in_process {
        args.push("--in-process");
    }
    let out = demo(env, &args);
    let floats = size / 4;
    for rank in 0..hosts {
        proof(
            &out,
            &format!(
                "host {rank}: all {floats} floats equal the sum of the {hosts} vectors computed \
                 directly"
            ),
        );
    }
    proof(&out, "each host sent the next exactly its ");
    proof(&out, "no frame went between hosts that are not neighbours");
    let decoded = env.run(&["decode", "--strict", pcap.to_str().unwrap()]);
    assert!(
        decoded.status.success(),
        "{}{}",
        decoded.stdout,
        decoded.stderr
    );
    let roce = numbers(proof(&out, "all "))[0];
    let lines = decoded.stdout.lines().filter(|l| l.contains(" → ")).count();
    assert_eq!(
        lines as u64, roce,
        "every frame the taps saw is in the capture"
    );

    if Command::new("tshark").arg("--version").output().is_err() {
        roce_tests::skip("tshark is not installed (scripts/test installs it)");
        return;
    }
    let writes = writes_in(&pcap);
    let ip = |rank: usize| format!("10.0.0.{}", rank + 1);
    let len = |k: usize| {
        let (a, b) = chunk(hosts, floats, k);
        (b - a) * 4
    };
    let sum = |i: usize| -> f32 { (0..hosts).map(|r| input(r, i)).sum() };
    let mut gathered: HashSet<(usize, usize)> = HashSet::new();
    for rank in 0..hosts {
        let next = (rank + 1) % hosts;
        let mine: Vec<&Write> = writes.iter().filter(|w| w.from == ip(rank)).collect();
        assert!(
            mine.iter().all(|w| w.to == ip(next)),
            "{rank} wrote past its neighbour"
        );
        // 2(N-1) WRITEs, in order: reduce-scatter sends chunk rank-s, all-gather rank+1-s.
        let want: Vec<(u32, usize)> = (0..hosts - 1)
            .map(|s| (0u32, s, (rank + hosts - s) % hosts))
            .chain((0..hosts - 1).map(|s| (1u32 << 31, s, (rank + 1 + hosts - s) % hosts)))
            .map(|(phase, s, k)| (phase | (s as u32) << 16 | k as u32, k))
            .collect();
        let got: Vec<(u32, usize)> = mine.iter().map(|w| (w.imm, w.payload.len())).collect();
        let want_sizes: Vec<(u32, usize)> = want.iter().map(|&(imm, k)| (imm, len(k))).collect();
        assert_eq!(got, want_sizes, "host {rank}'s WRITEs");
        let bytes: usize = mine.iter().map(|w| w.payload.len()).sum();
        // Every chunk but one in each phase.
        assert_eq!(
            bytes,
            2 * size - len((rank + 1) % hosts) - len((rank + 2) % hosts)
        );
        // An all-gather chunk is the sum itself, float for float.
        for (write, &(imm, k)) in mine.iter().zip(&want) {
            if imm >> 31 == 0 {
                continue;
            }
            let (start, _) = chunk(hosts, floats, k);
            for (i, float) in write.payload.chunks_exact(4).enumerate() {
                let have = f32::from_le_bytes(float.try_into().unwrap());
                assert_eq!(have, sum(start + i), "chunk {k} float {i} from host {rank}");
            }
            gathered.insert((next, k));
        }
    }
    // Every host received every chunk in all-gather but the one it summed itself.
    assert_eq!(gathered.len(), hosts * (hosts - 1));
}

#[test]
fn allreduce_rings_of_2_3_4_and_8_hosts_end_with_the_sum_everywhere() {
    let env = Env::new("allreduce");
    // Sizes that divide evenly (1024 floats among 2, a mebibyte among 4) and that do not (10
    // floats among 3, 1025 among 8, and 5 among 8: some chunks are empty).
    for (hosts, size) in [(2, 4096), (3, 40), (4, 1 << 20), (8, 4100), (8, 20)] {
        ring(&env, hosts, size, false);
    }
    // In one process too, the switch a thread on in-memory cables.
    ring(&env, 3, (1 << 20) + 4, true);
    ring(&env, 8, 4100, true);
}

#[test]
fn allreduce_shows_the_ring_the_links_and_where_the_cpu_went() {
    let env = Env::new("allreducenarr");
    let out = demo(&env, &["--scenario", "allreduce"]);
    assert!(out.contains("The ring: host 0 → host 1 → host 2 → host 3 → host 0."));
    // Six steps, each with four transfers.
    let steps: Vec<&str> = out
        .lines()
        .filter(|l| l.trim_start().starts_with("step "))
        .collect();
    assert_eq!(steps.len(), 6, "{out}");
    for step in &steps {
        assert!(
            step.contains("0→1 chunk ") && step.contains("3→0 chunk "),
            "{step}"
        );
        assert!(step.contains("4194304 bytes in all"), "{step}");
    }
    // Each link: 6 chunks of 1 MiB.
    for rank in 0..4 {
        let link = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("host {rank} → host ")))
            .unwrap();
        assert!(link.contains(": 6291456 bytes of RDMA payload"), "{link}");
    }
    // The CPU split: each host added 3 chunks of 262144 floats; adding, posting and the rest
    // add up to no more than its time on a CPU from /proc.
    for rank in 0..4 {
        let line = out
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("host {rank}  ")) && l.contains("adding"))
            .unwrap();
        assert!(line.contains("(786432 floats)"), "{line}");
        let ms: Vec<f64> = line
            .split(" ms")
            .filter_map(|s| s.rsplit(' ').next()?.parse().ok())
            .collect();
        let (total, add, post, rest) = (ms[0], ms[1], ms[2], ms[3]);
        assert!(add > 0.0 && post > 0.0, "{line}");
        assert!(
            (add + post + rest - total).abs() < 0.02 || rest == 0.0,
            "{line}"
        );
    }
    assert!(out.contains("no host copied a byte"), "{out}");
}

#[test]
fn lesson_options_that_cannot_work_are_one_line_and_exit_code_2() {
    let env = Env::new("lessonsbad");
    for (args, want) in [
        (
            &["demo", "--hosts", "3"][..],
            "roce: --hosts applies to the allreduce scenario only\n",
        ),
        (
            &["demo", "--scenario", "allreduce", "--hosts", "1"][..],
            "roce: --hosts must be 2 to 16 (a ring needs two)\n",
        ),
        (
            &["demo", "--scenario", "allreduce", "--size", "6"][..],
            "roce: --size 6 is not a whole number of floats (4 bytes each)\n",
        ),
        (
            &["demo", "--scenario", "tcp-vs-rdma", "--size", "2G"][..],
            "roce: --size is at most 1G for tcp-vs-rdma (its receiver holds the bytes twice)\n",
        ),
    ] {
        let done = env.run(args);
        assert_eq!(done.status.code(), Some(2), "{args:?}: {}", done.stderr);
        assert_eq!(done.stderr, want, "{args:?}");
        assert_eq!(done.stdout, "");
    }
}

/// The page headless Chromium lays out, as the page's own check reads it back (`data-rendered`
/// on the body); `None` when Chromium is not installed.
fn rendered(page: &Path) -> Option<String> {
    if Command::new("chromium").arg("--version").output().is_err() {
        roce_tests::skip("chromium is not installed (scripts/test installs it)");
        return None;
    }
    let html = std::fs::read_to_string(page).unwrap();
    for fetch in ["<link", " src=", " href=", "url(", "@import"] {
        assert!(!html.contains(fetch), "the page fetches something: {fetch}");
    }
    let profile = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--dump-dom",
    ])
    .arg(format!("--user-data-dir={}", profile.path().display()))
    .arg(format!("file://{}", page.display()));
    let mut run = Proc::spawn(cmd, false);
    let status = run.wait(PATIENCE);
    let dom = run.drain_stdout();
    assert!(status.success(), "chromium failed: {}", run.stderr());
    let at = dom
        .find("data-rendered=\"")
        .expect("the page's check did not run")
        + 15;
    Some(dom[at..at + dom[at..].find('"').unwrap()].to_owned())
}

#[test]
fn the_lessons_pages_draw_bars_lines_the_ring_and_every_transfer() {
    let env = Env::new("lessonspages");
    let page = env.dir.join("tvr.html");
    demo(
        &env,
        &[
            "--scenario",
            "tcp-vs-rdma",
            "--size",
            "256K",
            "--quiet",
            "--html",
            page.to_str().unwrap(),
        ],
    );
    let html = std::fs::read_to_string(&page).unwrap();
    // Five parties (receiver, sender, two NICs, the wire), a bar each for TCP and RDMA, and
    // a line each in both timelines; 64 WRITE packets and their ACKs in the ladder.
    assert_eq!(html.matches(r#"data-transfer="tcp""#).count(), 5);
    assert!(html.contains(r#"data-role="receiver" data-transfer="rdma" data-ns="0""#));
    if let Some(drawn) = rendered(&page) {
        let counts = numbers(&drawn);
        assert_eq!(counts[..3], [10, 5, 5], "{drawn}");
        assert!(counts[3] >= 64, "{drawn}");
    }
    let page = env.dir.join("ring.html");
    demo(
        &env,
        &[
            "--scenario",
            "allreduce",
            "--hosts",
            "3",
            "--size",
            "64K",
            "--quiet",
            "--html",
            page.to_str().unwrap(),
        ],
    );
    // Three links, 3 × 4 WRITEs on the timeline, four CPU parts per host, and the switch's and
    // the taps'.
    if let Some(drawn) = rendered(&page) {
        assert_eq!(drawn, "links=3 transfers=12 parts=14", "{drawn}");
    }
}

/// Whether `pid` is still a process (a zombie counts as gone: it runs nothing).
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|stat| !stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'))
}

#[test]
fn an_allreduce_killed_half_way_leaves_no_process_and_nothing_in_dev_shm() {
    if Command::new("script").arg("--version").output().is_err() {
        roce_tests::skip("`script` (util-linux) is not installed");
        return;
    }
    let env = Env::new("allreducekill");
    let roce = env!("CARGO_BIN_EXE_roce");
    let mut cmd = Command::new("script");
    cmd.args([
        "-qefc",
        &format!("{roce} demo --scenario allreduce --hosts 3 --step"),
        "/dev/null",
    ])
    .env("XDG_RUNTIME_DIR", &env.dir)
    .env("NO_COLOR", "1");
    let mut run = Proc::spawn(cmd, true);
    // The switch process, then every host process and NIC process, from step 1.
    let switch = run.expect(|l| l.contains("and the switch — roce switch, process "));
    let mut pids = vec![numbers(switch.split("roce switch, process ").nth(1).unwrap())[0] as i32];
    for rank in 0..3 {
        let row = run.expect(|l| {
            l.trim_start()
                .starts_with(&format!("host {rank}  process "))
        });
        let n = numbers(&row);
        // host R  process PID, NIC NAME (process PID), ...
        pids.push(n[1] as i32);
        pids.push(numbers(row.split("(process ").nth(1).unwrap())[0] as i32);
    }
    run.expect(|l| l.contains("The ring: host 0 → host 1 → host 2 → host 0."));
    run.say("");
    // Step 2 ends with every host connected and waiting: the demo waits for Enter.
    run.expect(|l| l.contains("Every host now waits for the go"));
    let demo = pids[1..]
        .iter()
        .map(|&pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            numbers(&stat[stat.rfind(')').unwrap() + 2..])[0] as i32
        })
        .next()
        .unwrap();
    assert!(pids.iter().all(|&p| alive(p)));
    eprintln!("killing demo {demo}: switch, hosts and NICs {pids:?}");
    // SAFETY: kill(2) of the demo, a descendant of this test (the parent of its hosts), by PID.
    assert_eq!(unsafe { libc::kill(demo, libc::SIGKILL) }, 0);
    for pid in &pids {
        eventually(&format!("process {pid} gone"), || !alive(*pid));
    }
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with(&format!("roce-demo{demo}")))
        .collect();
    assert!(left.is_empty(), "left in /dev/shm: {left:?}");
    let _ = run.wait(PATIENCE);
}

/// `roce demo ARGS --json`: its lines, each a JSON object.
fn json_lines(env: &Env, args: &[&str]) -> Vec<serde_json::Value> {
    let mut all = args.to_vec();
    all.push("--json");
    demo(env, &all)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// The lines whose `figures` is `kind`.
fn figures<'a>(lines: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["figures"] == kind).collect()
}

#[test]
fn the_lessons_figures_come_as_json_numbers() {
    let env = Env::new("lessonsjson");
    let lines = json_lines(
        &env,
        &["--scenario", "tcp-vs-rdma", "--in-process", "--size", "2M"],
    );
    assert!(lines
        .iter()
        .filter(|l| l.get("proof").is_some())
        .all(|l| l["held"] == true && l["scenario"] == "tcp-vs-rdma"));
    let party = |transfer: &str, party: &str| {
        figures(&lines, "party")
            .into_iter()
            .find(|l| l["transfer"] == transfer && l["party"] == party)
            .unwrap_or_else(|| panic!("no {party} of {transfer} in {lines:?}"))
            .clone()
    };
    assert!(party("tcp", "receiver")["on_cpu_ns"].as_u64().unwrap() > 0);
    let rdma = party("rdma", "receiver");
    for key in [
        "on_cpu_ns",
        "user_ticks",
        "system_ticks",
        "voluntary_switches",
        "involuntary_switches",
    ] {
        assert_eq!(rdma[key], 0, "{key}: {rdma}");
    }
    assert!(party("rdma", "receiver_nic")["on_cpu_ns"].as_u64().unwrap() > 0);
    for transfer in figures(&lines, "transfer") {
        assert_eq!(transfer["bytes"], 2 << 20);
        assert!(transfer["arrived_after_us"].as_u64().unwrap() > 0);
    }

    let lines = json_lines(
        &env,
        &["--scenario", "allreduce", "--hosts", "3", "--size", "40"],
    );
    let links = figures(&lines, "link");
    assert_eq!(links.len(), 3);
    for link in links {
        assert_eq!(link["payload_bytes"], link["schedule_bytes"], "{link}");
    }
    let hosts = figures(&lines, "host");
    assert_eq!(hosts.len(), 3);
    for host in hosts {
        let on_cpu = host["on_cpu_ns"].as_u64().unwrap();
        let (add, moving) = (
            host["adding_ns"].as_u64().unwrap(),
            host["moving_ns"].as_u64().unwrap(),
        );
        assert!(add + moving <= on_cpu, "{host}");
        assert!(host["nic_on_cpu_ns"].as_u64().unwrap() > 0, "{host}");
    }
    assert_eq!(figures(&lines, "step").len(), 4);
}

/// connect: the RDMA CM's handshake as a ladder. The capture the demo writes holds exactly the
/// five MADs its ladder names, in order and directions, which tshark decodes as CM messages;
/// each MAD is shown field by field; the QP states are the NIC's (RTS after the handshake, ERR
/// after the disconnect), and the proofs held.
#[test]
fn connect_shows_the_cm_handshake_and_the_qp_states_it_reaches() {
    let env = Env::new("democonn");
    let pcap = env.dir.join("connect.pcap");
    let out = demo(
        &env,
        &["--scenario", "connect", "--pcap", pcap.to_str().unwrap()],
    );
    proof(
        &out,
        "both QPs are in RTS, each aimed at the other's QP number",
    );
    proof(&out, "both QPs are in the error state after the disconnect");
    for field in [
        "Service ID: 0x0000000001061d2f (RDMA CM, TCP port 7471)",
        "Starting PSN: ",
        "Local QPN: 0x000011",
        "Primary local port GID: 10.0.0.2",
    ] {
        assert!(out.contains(field), "no {field:?} in\n{out}");
    }
    let ladder: Vec<String> = out
        .lines()
        .skip_while(|l| !l.contains("The ladder"))
        .filter(|l| l.contains("──"))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    assert_eq!(
        ladder,
        [
            "initiator INIT ── REQ ──────────────▶",
            "◀────────────── REP ── RTS target",
            "initiator RTS ── RTU ──────────────▶",
            "initiator ERR ── DREQ ──────────────▶",
            "◀────────────── DREP ── ERR target",
        ],
        "{out}"
    );
    let tshark = Command::new("tshark")
        .args(["-r", pcap.to_str().unwrap(), "-T", "fields"])
        .args(["-e", "ip.src", "-e", "infiniband.mad.attributeid"])
        .args(["-Y", "infiniband.bth.destqp == 1"])
        .output()
        .expect("tshark");
    let seen = String::from_utf8_lossy(&tshark.stdout).into_owned();
    assert_eq!(
        seen,
        "10.0.0.2\t0x0010\n10.0.0.1\t0x0013\n10.0.0.2\t0x0014\n10.0.0.2\t0x0015\n10.0.0.1\t0x0016\n",
        "{}",
        String::from_utf8_lossy(&tshark.stderr)
    );
}

#[test]
fn congestion_shows_drops_without_dcqcn_and_fair_shares_with_it() {
    let env = Env::new("cong");
    all_held(&demo(&env, &["--scenario", "congestion", "--quiet"]));
    let json = demo(&env, &["--scenario", "congestion", "--json"]);
    let figures: serde_json::Value = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|v| v["figures"] == "incast")
        .unwrap_or_else(|| panic!("no incast figures: {json}"));
    let (without, with) = (&figures["without"], &figures["with"]);
    assert!(without["dropped"].as_u64().unwrap() > 0, "{without}");
    assert_eq!(with["dropped"], 0, "{with}");
    assert!(with["cnps"].as_u64().unwrap() > 0, "{with}");
    assert!(with["jain"].as_f64().unwrap() >= 0.95, "{with}");
    assert!(without["jain"].as_f64().unwrap() < with["jain"].as_f64().unwrap());
    // The scenario is simulated: what it cannot take is refused in one line.
    let done = env.run(&["demo", "--scenario", "congestion", "--pcap", "x.pcap"]);
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    let done = env.run(&["demo", "--scenario", "congestion", "--hosts", "1"]);
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
}

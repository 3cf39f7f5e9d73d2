//! `roce pingpong` and `roce perftest` against each other, as a user runs them: each with a NIC
//! of its own on a UDP cable (`--link`), or through running `roce nic` processes (`--nic`);
//! and their failures, one line each.

mod support;

use support::*;

/// Runs a server and a client side by side; returns both once both have exited.
fn pair(env: &Env, server: &[&str], client: &[&str]) -> (Finished, Finished) {
    let mut procs = [server, client].map(|args| Proc::spawn(env.roce(args), false));
    let [s, c] = procs.each_mut().map(|p| {
        let status = p.wait(PATIENCE);
        Finished {
            status,
            stdout: p.drain_stdout(),
            stderr: p.stderr(),
        }
    });
    (s, c)
}

/// Two cable ends on loopback: (ours as seen from a, from b).
fn cable() -> (String, String) {
    let (pa, pb) = (free_udp_port(), free_udp_port());
    (
        format!("cable:127.0.0.1:{pa},127.0.0.1:{pb}"),
        format!("cable:127.0.0.1:{pb},127.0.0.1:{pa}"),
    )
}

fn assert_ran(done: &Finished, lines: &[&str]) {
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    for line in lines {
        assert!(
            done.stdout.contains(line),
            "no {line:?} in:\n{}",
            done.stdout
        );
    }
}

#[test]
fn pingpong_with_a_nic_of_its_own_on_each_end_of_a_cable() {
    let env = Env::new("ppl");
    let (a, b) = cable();
    let common = [
        "pingpong",
        "rc",
        "-n",
        "20",
        "-s",
        "5000",
        "--timeout",
        "20",
    ];
    let server: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--link", &a, "--ip", "10.81.0.1"])
        .collect();
    let client: Vec<&str> = common
        .iter()
        .copied()
        .chain(["--link", &b, "--ip", "10.81.0.2", "--connect-retry", "20"])
        .chain(["10.81.0.1"])
        .collect();
    let (s, c) = pair(&env, &server, &client);
    for done in [&s, &c] {
        assert_ran(
            done,
            &[
                "  local address:  LID 0x0000, QPN 0x",
                "200000 bytes in ",
                "20 iters in ",
                "verified: 20 messages received, each 5000 bytes as ibv_rc_pingpong sends them",
            ],
        );
    }
    assert!(s.stdout.contains("GID ::ffff:10.81.0.2"), "{}", s.stdout);
}

#[test]
fn perftest_through_two_nic_processes() {
    let env = Env::new("ptn");
    let (a, b) = cabled_pair(&env, 82);
    let _nics = (env.nic(&a), env.nic(&b));
    for (test, extra, server_checked, client_checked) in [
        (
            "read_bw",
            "-s 3000",
            "verified: our memory is unchanged and the NIC read ",
            "verified: 50 RDMA READs of 3000 bytes; every READ of a place brought the same bytes",
        ),
        (
            "atomic_bw",
            "-A CMP_AND_SWAP",
            "verified: memory is unchanged (compare 0, swap 0) and the NIC executed ",
            "verified: 50 compare-and-swaps; at each of ",
        ),
    ] {
        let mut args = vec!["perftest", test, "-n", "50", "--timeout", "20"];
        args.extend(extra.split(' '));
        let server: Vec<&str> = args.iter().copied().chain(["--nic", &a.name]).collect();
        let client: Vec<&str> = args
            .iter()
            .copied()
            .chain(["--nic", &b.name, "--connect-retry", "20", "10.82.0.1"])
            .collect();
        let (s, c) = pair(&env, &server, &client);
        for (done, checked) in [(&s, server_checked), (&c, client_checked)] {
            assert_ran(
                done,
                &[" #bytes     #iterations    BW peak[MB/sec]", checked],
            );
        }
        // The server prints the client's report, as perftest's server does.
        let row = |out: &str| {
            out.lines()
                .find(|l| l.starts_with(" 3000") || l.starts_with(" 8 "))
                .map(str::to_owned)
        };
        assert_eq!(row(&s.stdout), row(&c.stdout), "{}\n{}", s.stdout, c.stdout);
        assert!(row(&c.stdout).is_some(), "{}", c.stdout);
    }
}

/// Every line of a command's standard output as a JSON object.
fn json_lines(done: &Finished) -> Vec<serde_json::Value> {
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    done.stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

#[test]
fn pingpong_and_perftest_figures_come_as_json_lines() {
    let env = Env::new("pjs");
    let (a, b) = cabled_pair(&env, 83);
    let _nics = (env.nic(&a), env.nic(&b));
    let side = |extra: &[&str], nic: &str, peer: Option<&str>| -> Vec<String> {
        let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        args.extend(["--json", "--timeout", "20", "--nic", nic].map(String::from));
        if let Some(peer) = peer {
            args.extend(["--connect-retry", "20", peer].map(String::from));
        }
        args
    };
    let run = |extra: &[&str]| {
        let (s, c) = (
            side(extra, &a.name, None),
            side(extra, &b.name, Some("10.83.0.1")),
        );
        let s: Vec<&str> = s.iter().map(String::as_str).collect();
        let c: Vec<&str> = c.iter().map(String::as_str).collect();
        pair(&env, &s, &c)
    };

    let (s, c) = run(&["pingpong", "rc", "-n", "30", "-s", "3000"]);
    for done in [&s, &c] {
        let lines = json_lines(done);
        assert_eq!(lines.len(), 1, "{}", done.stdout);
        let l = &lines[0];
        assert_eq!(l["program"], "rc");
        assert_eq!(
            (l["size_bytes"].as_u64(), l["iterations"].as_u64()),
            (Some(3000), Some(30))
        );
        assert_eq!(l["bytes"].as_u64(), Some(2 * 3000 * 30));
        assert_eq!(l["verified_messages"].as_u64(), Some(30), "{l}");
        assert!(l["usec_per_iter"].as_f64().unwrap() > 0.0, "{l}");
        // The tool's own text still reaches the user, on standard error.
        assert!(done.stderr.contains("30 iters in "), "{}", done.stderr);
    }

    let (s, c) = run(&["perftest", "write_bw", "-n", "40", "-s", "4096"]);
    for done in [&s, &c] {
        let lines = json_lines(done);
        assert_eq!(lines.len(), 1, "{}", done.stdout);
        let l = &lines[0];
        assert_eq!(
            (l["test"].as_str(), l["size_bytes"].as_u64()),
            (Some("write_bw"), Some(4096))
        );
        assert!(l["average_mib_per_s"].as_f64().unwrap() > 0.0, "{l}");
        assert!(l["verified"].as_str().is_some_and(|v| !v.is_empty()), "{l}");
    }
    // Both sides print the client's report, as perftest does.
    assert_eq!(
        json_lines(&s)[0]["average_mib_per_s"],
        json_lines(&c)[0]["average_mib_per_s"]
    );

    let (_, c) = run(&["perftest", "send_lat", "-n", "30", "-s", "64"]);
    let l = &json_lines(&c)[0];
    assert_eq!(l["test"], "send_lat");
    let (min, typical) = (
        l["min_us"].as_f64().unwrap(),
        l["typical_us"].as_f64().unwrap(),
    );
    assert!(min > 0.0 && min <= typical, "{l}");
}

fn assert_fails(done: &Finished, code: i32, message: &str) {
    assert_eq!(done.status.code(), Some(code), "{}", done.stderr);
    assert_eq!(done.stderr, format!("roce: {message}\n"));
}

#[test]
fn tool_failures_are_one_clear_line() {
    let env = Env::new("tfail");
    let (a, _) = cable();
    let own = ["--link", a.as_str(), "--ip", "10.83.0.1"];
    let run = |args: &[&str]| env.run(args);
    let with_own = |args: &[&str]| {
        let all: Vec<&str> = args.iter().copied().chain(own).collect();
        env.run(&all)
    };
    let missing = env.name("none");
    assert_fails(
        &run(&["pingpong", "rc", "--nic", &missing]),
        1,
        &format!(
            "no NIC named {missing} is running (nothing answers at {})",
            env.socket(&missing).display()
        ),
    );
    assert_fails(
        &with_own(&["pingpong", "rc", "-m", "3000"]),
        2,
        "--mtu 3000 is not a path MTU: use 256, 512, 1024, 2048 or 4096",
    );
    assert_fails(
        &with_own(&["pingpong", "ud", "-s", "5000"]),
        2,
        "a UD message of 5000 bytes does not fit the NIC's MTU of 4096 bytes",
    );
    assert_fails(
        &with_own(&["perftest", "atomic_bw", "-s", "16"]),
        2,
        "atomics are 8 bytes, not 16",
    );
    assert_fails(
        &with_own(&["perftest", "write_bw", "-n", "3"]),
        2,
        "perftest runs 5 to 10000000 iterations here, not 3",
    );
    assert_fails(
        &with_own(&["perftest", "atomic_lat", "-a"]),
        2,
        "-a (every size) does not apply to atomics, which are 8 bytes",
    );
    assert_fails(
        &with_own(&["pingpong", "rc", "--rate", "fast"]),
        2,
        "--rate: \"fast\" is not a line rate: give bits per second of at least 8K, such as 200M or 1G",
    );
    assert_fails(
        &with_own(&["pingpong", "rc", "--timeout", "1"]),
        1,
        "no client connected to TCP port 18515 within 1 s",
    );
    assert_fails(
        &with_own(&["perftest", "send_lat", "10.99.0.1"]),
        1,
        "cannot reach 10.99.0.1:18515: 10.99.0.1 is on none of the NIC's subnets (fe80::aff:fe53:1/64, 10.83.0.1/24) and the NIC has no router",
    );
    let unknown = run(&["perftest", "write_bw_x", "--nic", "n"]);
    assert_eq!(unknown.status.code(), Some(2));
    assert_eq!(unknown.stderr.lines().count(), 1, "{}", unknown.stderr);
}

#[test]
fn an_address_without_a_wire_is_one_message_naming_what_is_missing() {
    let env = Env::new("tnoln");
    for tool in [&["perftest", "write_bw"][..], &["pingpong", "rc"]] {
        let with = |extra: &[&str]| {
            let all: Vec<&str> = tool.iter().chain(extra).copied().collect();
            env.run(&all)
        };
        assert_fails(
            &with(&["--ip", "10.84.0.1"]),
            2,
            "--ip is the address of a NIC the tool runs itself, which needs --link WIRE too (or \
             use --nic NAME for a running roce nic)",
        );
        assert_fails(
            &with(&[]),
            2,
            "which NIC? give --nic NAME (a running roce nic) or --link WIRE --ip ADDR (one of \
             the tool's own)",
        );
    }
}

#[test]
fn mtu_is_the_path_mtu_everywhere_and_the_link_mtu_has_its_own_name() {
    let env = Env::new("tmtu");
    // -m and --mtu are the path MTU, as in rdma-core's tools, on every command that takes one.
    for (cmd, help) in [
        (&["pingpong", "--help"][..], "-m, --mtu <MTU>"),
        (&["perftest", "--help"], "-m, --mtu <MTU>"),
        (&["bench", "--help"], "-m, --mtu <MTU>"),
        (&["host", "serve", "--help"], "-m, --mtu <MTU>"),
        (&["host", "post", "--help"], "-m, --mtu <MTU>"),
        (&["host", "connect", "--help"], "-m, --mtu <MTU>"),
        (&["nic", "--help"], "--link-mtu <BYTES>"),
        (&["pingpong", "--help"], "--link-mtu <BYTES>"),
    ] {
        let done = env.run(cmd);
        assert!(done.status.success(), "{cmd:?}: {}", done.stderr);
        assert!(
            done.stdout.contains(help),
            "{cmd:?} has no {help:?}:\n{}",
            done.stdout
        );
    }
    // The NIC's link MTU is not --mtu: the one-line error gives the right name.
    let nic = env.run(&[
        "nic",
        "--name",
        "x",
        "--ip",
        "10.85.0.1",
        "--link",
        "cable:127.0.0.1:1,127.0.0.1:2",
        "--mtu",
        "1500",
    ]);
    assert_fails(
        &nic,
        2,
        "the NIC's MTU is --link-mtu, the largest IP packet on its link (--mtu is the path MTU, \
         which the NIC derives from it)",
    );
    let bench = env.run(&["bench", "-m", "3000"]);
    assert_fails(
        &bench,
        2,
        "--mtu 3000 is not a path MTU: use 256, 512, 1024, 2048 or 4096",
    );
}

#[test]
fn perftest_help_says_which_tests_sweep_every_size() {
    let env = Env::new("tphelp");
    let help = env.run(&["perftest", "--help"]);
    let text = help.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        text.contains("Every message size from 2 bytes to 8 MiB in powers of two, as perftest sweeps (every test but atomic_bw and atomic_lat"),
        "{}",
        help.stdout
    );
}

/// The rows of `roce bench --all --json` (or `--qps`): every figure with its baseline.
fn bench_rows(stdout: &str) -> (serde_json::Value, Vec<(String, String)>) {
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("not one JSON object ({e}):\n{stdout}"));
    let mut rows = Vec::new();
    for row in v["rows"].as_array().expect("rows") {
        let (value, baseline) = (row["value"].as_f64(), row["baseline_value"].as_f64());
        let (value, baseline) = (value.expect("value"), baseline.expect("baseline_value"));
        assert!(value.is_finite() && value > 0.0, "{row}");
        assert!(baseline.is_finite() && baseline > 0.0, "{row}");
        let ratio = row["ratio"].as_f64().expect("ratio");
        assert!(
            (ratio - value / baseline).abs() <= 1e-9 * ratio.abs().max(1.0),
            "{row}"
        );
        assert!(row["unit"].as_str().is_some_and(|u| !u.is_empty()), "{row}");
        rows.push((
            row["figure"].as_str().expect("figure").to_owned(),
            row["baseline"].as_str().expect("baseline").to_owned(),
        ));
    }
    (v, rows)
}

/// `roce bench ARGS` to the end: it starts processes and takes several figures, which on a
/// loaded machine takes longer than a command's usual patience.
fn bench(env: &Env, args: &[&str]) -> Finished {
    let mut proc = Proc::spawn(env.roce(args), false);
    let status = proc.wait(std::time::Duration::from_secs(180));
    let stdout = proc.drain_stdout();
    Finished {
        status,
        stdout,
        stderr: proc.stderr(),
    }
}

fn has_row(rows: &[(String, String)], figure: &str, baseline: &str) -> bool {
    rows.iter()
        .any(|(f, b)| f.starts_with(figure) && b.starts_with(baseline))
}

#[test]
fn bench_with_faults_gives_the_goodput_as_a_ratio_to_a_clean_cable_in_the_same_run() {
    let env = Env::new("tbflt");
    let args = [
        "bench",
        "--faults",
        "drop=0.01,seed=3",
        "--seconds",
        "0.2",
        "-s",
        "64K",
    ];
    let mut json = args.to_vec();
    json.push("--json");
    let done = bench(&env, &json);
    assert!(done.status.success(), "{}", done.stderr);
    let v: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    let write = &v["write"];
    let (faulty, clean) = (
        write["gbit_per_s"].as_f64().unwrap(),
        write["fault_free_gbit_per_s"].as_f64().unwrap(),
    );
    assert!(faulty > 0.0 && clean > 0.0, "{write}");
    // The median of the slices' ratios: inside their range.
    let ratio = write["ratio_to_fault_free"].as_f64().unwrap();
    let range = &write["ratio_range"];
    let (low, high) = (range[0].as_f64().unwrap(), range[1].as_f64().unwrap());
    assert!(0.0 < low && low <= ratio && ratio <= high, "{write}");
    assert!(write["slice_pairs"].as_u64().unwrap() >= 4, "{write}");
    assert!(
        v["recovery"]["retransmitted_packets"].as_u64().unwrap() > 0,
        "{v}"
    );
    let text = bench(&env, &args);
    assert!(text.status.success(), "{}", text.stderr);
    assert!(
        text.stdout.contains("fault-free, alternating with it") && text.stdout.contains("% of it"),
        "{}",
        text.stdout
    );
}

#[test]
fn bench_all_gives_every_figure_beside_its_baseline_in_json() {
    let env = Env::new("tball");
    let done = bench(
        &env,
        &[
            "bench",
            "--all",
            "--json",
            "--seconds",
            "0.05",
            "-s",
            "64K",
            "--qps",
            "1,3",
            "--packets",
            "300",
        ],
    );
    assert!(done.status.success(), "{}", done.stderr);
    let (v, rows) = bench_rows(&done.stdout);
    for (figure, baseline) in [
        ("in-process WRITE 64 KiB", "memcpy 64 KiB"),
        ("in-process WRITE 64 KiB", "crc32fast"),
        ("in-process WRITE 64 KiB", "one copy + one CRC, one core"),
        ("in-process WRITE 64 KiB", "the limit"),
        ("cable WRITE 64 KiB", "UDP, same frames, 1 per call"),
        ("cable WRITE 64 KiB", "UDP, same frames, batched"),
        ("cable WRITE 64 KiB, CPU", "UDP, same frames, batched, CPU"),
        ("cable WRITE 64 B", "UDP, same frames, 1 per call"),
        ("cable WRITE 64 B", "UDP, same frames, batched"),
        ("shm WRITE 64 KiB", "in-process WRITE"),
        ("shm WRITE 64 B", "in-process WRITE 64 B"),
        ("3 QPs WRITE 64 KiB", "1 QP"),
        ("3 QPs WRITE 64 B", "1 QP"),
    ] {
        assert!(
            has_row(&rows, figure, baseline),
            "no {figure} vs {baseline}: {rows:?}"
        );
    }
    // Each side's CPU cost of the cable row, beside batched UDP's.
    assert!(
        v["notes"].as_array().expect("notes").iter().any(|n| n
            .as_str()
            .is_some_and(|n| n.starts_with("cable WRITE 64 KiB: CPU ms per MiB"))),
        "{v}"
    );
    let qps = v["extra"]["qps"].as_array().expect("qps figures");
    assert_eq!(
        qps.iter().map(|q| q["qps"].as_u64()).collect::<Vec<_>>(),
        [Some(1), Some(3)]
    );
    assert!(qps[1]["mapped_bytes_per_idle_qp"].as_u64() > Some(0), "{v}");
    assert!(v["extra"]["in_process"]["latency"]["median_us"].as_f64() > Some(0.0));
    let decode = &v["extra"]["decode"];
    assert_eq!(decode["packets"], 300);
    let tshark = has_row(&rows, "roce decode --json, 300 packets", "tshark -T fields");
    if std::env::var_os("ROCE_CI").is_some() || decode["tshark"] == "installed" {
        assert!(tshark, "no decode vs tshark: {rows:?}");
    } else {
        assert_eq!(decode["tshark"], "tshark not installed");
        assert!(!tshark);
    }
}

#[test]
fn bench_qps_alone_holds_many_qps_to_one_and_prints_lines() {
    let env = Env::new("tbqps");
    let done = bench(
        &env,
        &["bench", "--qps", "2", "--seconds", "0.05", "-s", "4K"],
    );
    assert!(done.status.success(), "{}", done.stderr);
    let lines: Vec<&str> = done.stdout.lines().collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("2 QPs WRITE 4 KiB") && l.contains(" vs 1 QP ")),
        "{}",
        done.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("memory per idle QP with 2: ")),
        "{}",
        done.stdout
    );
    // Only the QP figures: no cable, no decode.
    assert!(!done.stdout.contains("cable"), "{}", done.stdout);
    let json = env.run(&[
        "bench",
        "--qps",
        "2",
        "--seconds",
        "0.05",
        "-s",
        "4K",
        "--json",
    ]);
    assert!(json.status.success(), "{}", json.stderr);
    let (_, rows) = bench_rows(&json.stdout);
    assert!(has_row(&rows, "2 QPs WRITE 64 B", "1 QP"), "{rows:?}");
    assert!(has_row(&rows, "2 QPs WRITE 4 KiB", "1 QP"), "{rows:?}");
    // With --threads: every count again on NICs of that many engine threads, against one.
    let sharded = env.run(&[
        "bench",
        "--qps",
        "2",
        "--threads",
        "2",
        "--seconds",
        "0.05",
        "-s",
        "4K",
        "--json",
    ]);
    assert!(sharded.status.success(), "{}", sharded.stderr);
    let (v, rows) = bench_rows(&sharded.stdout);
    for figure in [
        "1 QPs WRITE 4 KiB, 2 threads",
        "2 QPs WRITE 64 B, 2 threads",
    ] {
        let baseline = format!("{} QPs, 1 thread", &figure[..1]);
        assert!(has_row(&rows, figure, &baseline), "{rows:?}");
    }
    let qps = v["extra"]["qps"].as_array().expect("qps figures");
    assert_eq!(
        qps.iter()
            .map(|q| (q["qps"].as_u64(), q["threads"].as_u64()))
            .collect::<Vec<_>>(),
        [
            (Some(1), Some(1)),
            (Some(2), Some(1)),
            (Some(1), Some(2)),
            (Some(2), Some(2))
        ]
    );
    assert_fails(
        &env.run(&["bench", "--threads", "2"]),
        2,
        "--threads measures the many-QP figures against one thread: give --qps (or --all)",
    );
    assert_fails(
        &env.run(&["bench", "--all", "--faults", "drop=0.01"]),
        2,
        "--faults is for the in-process figures alone, not with --all or --qps",
    );
}

/// `--pkey` for a NIC of the tool's own: a limited member of the default partition talks to a
/// full member, and not to another limited member.
#[test]
fn pingpong_between_partition_members() {
    let env = Env::new("ppk");
    for (server_key, client_key, talks) in [("0x7fff", "0xffff", true), ("0x7fff", "0x7fff", false)]
    {
        let (a, b) = cable();
        let common = ["pingpong", "rc", "-n", "3", "-s", "64", "--timeout", "3"];
        let server: Vec<&str> = common
            .iter()
            .copied()
            .chain(["--link", &a, "--ip", "10.82.0.1", "--pkey", server_key])
            .collect();
        let client: Vec<&str> = common
            .iter()
            .copied()
            .chain(["--link", &b, "--ip", "10.82.0.2", "--pkey", client_key])
            .chain(["--connect-retry", "20", "10.82.0.1"])
            .collect();
        let (s, c) = pair(&env, &server, &client);
        for done in [&s, &c] {
            if talks {
                assert_ran(done, &["verified: 3 messages received"]);
            } else {
                assert!(!done.status.success(), "{}", done.stdout);
            }
        }
        if !talks {
            // The client's SEND was never taken: its retries ran out.
            assert!(
                c.stderr.contains("transport retry counter exceeded"),
                "{}",
                c.stderr
            );
        }
    }
}

//! Debian's own verbs programs (/usr/bin, unmodified) on our NICs through `roce run`: our
//! libibverbs.so.1 (crate libverbs) and librdmacm.so.1 (crate librdmacm) load in their place
//! and drive `roce nic` processes.

mod support;

use std::process::Command;
use std::time::{Duration, Instant};

use support::{cabled_pair, Env, Finished, Proc, PATIENCE};

/// Whether Debian's program is installed; skips the test (a failure under ROCE_CI) if not.
/// Every program a test runs under `roce run` is named here first: tests/tests/test_command.rs
/// reads these calls to check that scripts/test installs it.
fn installed(program: &str, package: &str) -> bool {
    let there = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !there {
        roce_tests::skip(&format!(
            "{program} is not installed (Debian package {package})"
        ));
    }
    there
}

/// Two running NICs cabled together (`a` is 10.<net>.0.1, `b` 10.<net>.0.2), stopped with
/// this.
struct Pair {
    env: Env,
    a: support::Nic,
    b: support::Nic,
    _running: [Proc; 2],
}

/// A test's environment labelled `label` and its pair of NICs on subnet `net`; `setup` may
/// change a NIC's settings before it starts.
fn pair_with(label: &str, net: u8, setup: impl FnOnce(&mut support::Nic)) -> Pair {
    let env = Env::new(label);
    let (mut a, b) = cabled_pair(&env, net);
    setup(&mut a);
    let _running = [env.nic(&a), env.nic(&b)];
    Pair {
        env,
        a,
        b,
        _running,
    }
}

fn pair(label: &str, net: u8) -> Pair {
    pair_with(label, net, |_| {})
}

/// Runs `client` again while `refused` says its output is a refusal (the server listens a
/// moment after it starts), until PATIENCE; its successful run. `server` tells what the
/// server said, for the failure's message.
fn until_accepted(
    what: &str,
    mut client: impl FnMut() -> Finished,
    refused: impl Fn(&str) -> bool,
    server: impl Fn() -> String,
) -> Finished {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let done = client();
        if done.status.success() {
            return done;
        }
        let said = format!("{}{}", done.stdout, done.stderr);
        assert!(
            refused(&said) && Instant::now() < deadline,
            "{what} failed ({}):\n{said}\nserver stderr:\n{}",
            done.status,
            server()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `roce run [--nic NIC] -- ARGS` to its end.
fn run(env: &Env, nic: Option<&str>, args: &[&str]) -> Finished {
    let mut all = vec!["run"];
    if let Some(nic) = nic {
        all.extend(["--nic", nic]);
    }
    all.push("--");
    all.extend(args);
    env.run(&all)
}

/// `roce run --nic NIC -- ARGS` in the background.
fn start(env: &Env, nic: &str, args: &[&str]) -> Proc {
    let mut all = vec!["run", "--nic", nic, "--"];
    all.extend(args);
    Proc::spawn(env.roce(&all), false)
}

#[test]
fn ibv_devinfo_shows_the_nics_limits_gids_and_port() {
    if !installed("ibv_devinfo", "ibverbs-utils") || !installed("ibv_devices", "ibverbs-utils") {
        return;
    }
    let Pair {
        env,
        a,
        b,
        _running,
    } = pair_with("lvdev", 61, |a| {
        a.extra = vec!["--limit".into(), "max_qp=77".into()];
    });

    let listed = run(&env, None, &["ibv_devices"]);
    assert!(listed.status.success(), "{}", listed.stderr);
    for nic in [&a.name, &b.name] {
        assert!(
            listed
                .stdout
                .lines()
                .any(|l| l.split_whitespace().next() == Some(nic)),
            "ibv_devices does not list {nic}:\n{}",
            listed.stdout
        );
    }
    // The node GUID is the EUI-64 of the MAC (02:00:0a:3d:00:01).
    assert!(
        listed.stdout.contains("00000afffe3d0001"),
        "{}",
        listed.stdout
    );

    let shown = run(&env, Some(&a.name), &["ibv_devinfo", "-v"]);
    assert!(shown.status.success(), "{}", shown.stderr);
    let out = &shown.stdout;
    let field = |name: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(&format!("{name}:")))
            .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in:\n{out}"))
    };
    assert_eq!(field("hca_id"), a.name);
    assert_eq!(field("max_qp"), "77", "the limit given to roce nic");
    assert_eq!(field("max_qp_wr"), "16384");
    assert_eq!(field("state"), "PORT_ACTIVE (4)");
    assert_eq!(field("link_layer"), "Ethernet");
    assert_eq!(field("active_mtu"), "4096 (5)");
    assert!(out.contains("::ffff:10.61.0.1, RoCE v2"), "{out}");
    assert!(out.contains("fe80::aff:fe3d:1, RoCE v2"), "{out}");
    // Only the NIC named sees itself.
    assert!(!out.contains(&b.name), "{out}");
}

#[test]
fn a_nic_that_is_not_running_is_an_error_not_a_crash() {
    if !installed("ibv_devinfo", "ibverbs-utils") {
        return;
    }
    let env = Env::new("lvnone");
    let shown = run(&env, Some("nosuchnic"), &["ibv_devinfo"]);
    // ibv_devinfo says so and exits 1, as with a device it cannot open.
    assert_eq!(shown.status.code(), Some(1), "{}", shown.stderr);
    assert!(
        shown.stderr.contains("Failed to open device"),
        "{}",
        shown.stderr
    );
}

#[test]
fn roce_run_starts_a_nic_of_its_own_with_ip_and_link() {
    if !installed("ibv_devinfo", "ibverbs-utils") {
        return;
    }
    let env = Env::new("lvown");
    let port = support::free_udp_port();
    let link = format!(
        "cable:127.0.0.1:{port},127.0.0.1:{}",
        support::free_udp_port()
    );
    let name = env.name("own");
    let done = env.run(&[
        "run",
        "--ip",
        "10.62.0.5",
        "--link",
        &link,
        "--name",
        &name,
        "--",
        "ibv_devinfo",
        "-v",
    ]);
    assert!(done.status.success(), "{}", done.stderr);
    assert!(
        done.stdout.contains(&format!("hca_id:\t{name}")),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout.contains("::ffff:10.62.0.5, RoCE v2"),
        "{}",
        done.stdout
    );
    // The NIC was stopped with the program: its socket is gone.
    support::eventually("the started NIC to stop", || !env.socket(&name).exists());
}

/// Runs `args` as a server on `server` and as a client on `client` (which connects to
/// `server_ip`; rping's `-a ADDR` on both sides, ucmatose's `-s ADDR` on the client's), both
/// under `roce run`;
/// returns both outputs. The server listens a moment after it starts: the client is started
/// again while it is refused, until PATIENCE.
fn pingpong(env: &Env, server: &str, client: &str, server_ip: &str, args: &[&str]) -> [String; 2] {
    let mut server_args = args.to_vec();
    let mut client_args = args.to_vec();
    if args[0] == "rping" {
        // rping says its role, and names the server's address on both sides (-a, last here).
        server_args.insert(1, "-s");
        server_args.push(server_ip);
        client_args.insert(1, "-c");
    }
    if args[0] == "ucmatose" {
        // Only the client names the server (-s, last here).
        server_args.pop();
    }
    let mut srv = start(env, server, &server_args);
    client_args.push(server_ip);
    // Refused: by TCP (the pingpongs, perftest), or by the CM with a REJ while nobody listens
    // yet (rping and ucmatose name the event; perftest -R gives its number, 8).
    let done = until_accepted(
        &format!("client {args:?}"),
        || run(env, Some(client), &client_args),
        |said| {
            said.contains("Couldn't connect")
                || said.contains("REJECTED")
                || said.contains("Unexpected CM event bl blka 8")
        },
        || srv.stderr(),
    );
    let status = srv.wait(PATIENCE);
    let out = srv.drain_stdout();
    assert!(
        status.success(),
        "server {args:?} failed ({status}):\n{out}{}",
        srv.stderr()
    );
    [out, done.stdout]
}

/// The iteration count a pingpong reports (`N iters in S seconds`).
fn iters(out: &str) -> u64 {
    out.lines()
        .find_map(|l| {
            l.split(" iters in ")
                .next()
                .filter(|_| l.contains(" iters in "))
        })
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no iteration count in:\n{out}"))
}

#[test]
fn rdma_cores_pingpongs_run_between_two_nics() {
    let all = [
        installed("ibv_rc_pingpong", "ibverbs-utils"),
        installed("ibv_uc_pingpong", "ibverbs-utils"),
        installed("ibv_ud_pingpong", "ibverbs-utils"),
    ];
    if all.contains(&false) {
        return;
    }
    let Pair {
        env,
        a,
        b,
        _running,
    } = pair("lvpp", 63);
    // -g 1: the IPv4 GID (RoCEv2 needs a GRH); --chk: each side checks the bytes it received.
    let runs: [&[&str]; 6] = [
        &["ibv_rc_pingpong", "-g", "1", "-n", "200", "--chk"],
        &[
            "ibv_rc_pingpong",
            "-g",
            "1",
            "-n",
            "200",
            "--chk",
            "--new_send",
        ],
        &[
            "ibv_rc_pingpong",
            "-g",
            "1",
            "-n",
            "200",
            "--chk",
            "-e",
            "-s",
            "65536",
        ],
        &["ibv_uc_pingpong", "-g", "1", "-n", "200", "--chk"],
        &[
            "ibv_ud_pingpong",
            "-g",
            "1",
            "-n",
            "200",
            "--chk",
            "-s",
            "1024",
        ],
        &[
            "ibv_ud_pingpong",
            "-g",
            "1",
            "-n",
            "50",
            "--chk",
            "-e",
            "-s",
            "512",
        ],
    ];
    for (i, args) in runs.iter().enumerate() {
        let port = (18600 + i).to_string();
        let mut args = args.to_vec();
        args.extend(["-p", &port]);
        let [server, client] = pingpong(&env, &b.name, &a.name, "10.63.0.2", &args);
        let want: u64 = args[args.iter().position(|a| *a == "-n").unwrap() + 1]
            .parse()
            .unwrap();
        assert_eq!(iters(&server), want, "{args:?}");
        assert_eq!(iters(&client), want, "{args:?}");
        assert!(client.contains("GID ::ffff:10.63.0.2"), "{client}");
    }
}

#[test]
fn ibv_srq_pingpong_runs_between_two_nics_and_against_roce_pingpong() {
    if !installed("ibv_srq_pingpong", "ibverbs-utils") {
        return;
    }
    let env = Env::new("lvsrq");
    let (a, b) = cabled_pair(&env, 64);
    let _na = env.nic(&a);
    let _nb = env.nic(&b);
    // Two unmodified programs, each QP's receives taken from one shared receive queue.
    for (i, common) in [
        ["-g", "1", "-n", "200", "-q", "16", "-s", "4096"],
        ["-g", "1", "-n", "100", "-q", "4", "-s", "10000"],
    ]
    .iter()
    .enumerate()
    {
        let port = (18650 + i).to_string();
        let args = [&["ibv_srq_pingpong"][..], &common[..], &["-p", &port]].concat();
        let [server, client] = pingpong(&env, &b.name, &a.name, "10.64.0.2", &args);
        let want: u64 = common[3].parse().unwrap();
        for out in [&server, &client] {
            assert_eq!(iters(out), want, "{args:?}: {out}");
        }
        assert!(client.contains("GID ::ffff:10.64.0.2"), "{client}");
    }
    let common = ["-g", "1", "-n", "100", "-q", "8", "-s", "2048"];
    // roce pingpong srq serves; Debian's connects under roce run.
    let mut ours = env.spawn(
        &[
            &["pingpong", "srq", "--nic", &b.name, "-p", "18660"][..],
            &common,
        ]
        .concat()
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>(),
        false,
    );
    let deadline = Instant::now() + PATIENCE;
    let theirs = loop {
        let args = [
            &["ibv_srq_pingpong"][..],
            &common,
            &["-p", "18660", "10.64.0.2"],
        ]
        .concat();
        let done = run(&env, Some(&a.name), &args);
        if done.status.success() {
            break done.stdout;
        }
        assert!(
            done.stderr.contains("Couldn't connect") && Instant::now() < deadline,
            "ibv_srq_pingpong against roce pingpong srq: {}{}",
            done.stdout,
            done.stderr
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(ours.wait(PATIENCE).success(), "{}", ours.stderr());
    assert_eq!(iters(&theirs), 100, "{theirs}");
    assert!(ours.drain_stdout().contains("verified: "));
    // Debian's serves under roce run; roce pingpong srq connects.
    let mut server = start(
        &env,
        &b.name,
        &[&["ibv_srq_pingpong"][..], &common, &["-p", "18661"]].concat(),
    );
    let done = env.run(
        &[
            &[
                "pingpong",
                "srq",
                "--nic",
                &a.name,
                "-p",
                "18661",
                "--connect-retry",
                "20",
            ][..],
            &common,
            &["10.64.0.2"],
        ]
        .concat(),
    );
    assert!(
        done.status.success(),
        "roce pingpong srq against ibv_srq_pingpong: {}",
        done.stderr
    );
    assert!(done.stdout.contains("verified: "), "{}", done.stdout);
    assert!(server.wait(PATIENCE).success(), "{}", server.stderr());
    assert_eq!(iters(&server.drain_stdout()), 100);
}

/// Builds the C program `source` (relative to this crate) with the system's headers, as a user
/// would (`gcc -Wall -Wextra -Werror ... LIBS`); None (a skip) without gcc or without `header`
/// (the -dev package that ships it).
fn build_c(env: &Env, source: &str, header: &str, libs: &[&str]) -> Option<std::path::PathBuf> {
    if !installed("gcc", "gcc") {
        return None;
    }
    if !std::path::Path::new(header).exists() {
        roce_tests::skip(&format!("{header} is not installed (its -dev package)"));
        return None;
    }
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(source);
    let exe = env.dir.join(src.file_stem().unwrap());
    let built = Command::new("gcc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .args(libs)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    Some(exe)
}

const VERBS_H: &str = "/usr/include/infiniband/verbs.h";

/// Builds examples/c/rdma_write.c with the system's verbs header and library.
fn build_example(env: &Env) -> Option<std::path::PathBuf> {
    build_c(env, "../examples/c/rdma_write.c", VERBS_H, &["-libverbs"])
}

/// The `CASE what: answer` lines a C test program prints.
fn cases(stdout: &str) -> Vec<(&str, &str)> {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix("CASE ")?.split_once(": "))
        .collect()
}

/// `len` bytes of another process's memory at `addr` (/proc/PID/mem: works while it is
/// stopped, which is the point).
fn peek(pid: i32, addr: u64, len: usize) -> Vec<u8> {
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut buf = vec![0; len];
    mem.read_exact_at(&mut buf, addr).unwrap();
    buf
}

const MESSAGE: &[u8] = b"written by the client with one RDMA WRITE";

#[test]
fn a_stopped_servers_malloc_buffer_changes_under_an_rdma_write() {
    let env = Env::new("lvstop");
    let Some(example) = build_example(&env) else {
        return;
    };
    let example = example.to_str().unwrap();
    let (a, b) = cabled_pair(&env, 65);
    let _na = env.nic(&a);
    let _nb = env.nic(&b);
    let mut server = start(&env, &b.name, &[example, "-p", "18710"]);
    // The client waits for Enter before its write (-w). It may be refused while the server is
    // not listening yet: started again until PATIENCE.
    let deadline = Instant::now() + PATIENCE;
    let mut client = loop {
        let mut client = Proc::spawn(
            env.roce(&[
                "run",
                "--nic",
                &a.name,
                "--",
                example,
                "-w",
                "-p",
                "18710",
                "10.65.0.2",
            ]),
            true,
        );
        if client
            .try_line(PATIENCE)
            .is_some_and(|l| l.starts_with("client ready"))
        {
            break client;
        }
        let status = client.wait(PATIENCE);
        assert!(
            client.stderr().contains("connect") && Instant::now() < deadline,
            "client failed ({status}): {}",
            client.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let ready = server.expect(|l| l.starts_with("server "));
    // "server PID ready: buffer 0xADDR rkey 0xKEY"
    let words: Vec<&str> = ready.split_whitespace().collect();
    let pid: i32 = words[1].parse().unwrap();
    let addr = u64::from_str_radix(words[4].trim_start_matches("0x"), 16).unwrap();
    assert_ne!(
        addr % 4096,
        0,
        "malloc's buffer is not page-aligned: the interesting case"
    );

    // SAFETY: kill(2) of the server program, our grandchild, by its PID.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    support::eventually("the server to stop", || {
        support::thread_states(pid).iter().all(|s| *s == 'T')
    });
    let cpu = support::cpu_ticks(pid);
    assert_eq!(peek(pid, addr, MESSAGE.len()), vec![0; MESSAGE.len()]);

    client.say("");
    client.expect(|l| l.starts_with("client wrote 42 bytes"));
    // The bytes are in the stopped server's own buffer, at the address malloc gave it.
    assert_eq!(peek(pid, addr, MESSAGE.len()), MESSAGE);
    assert_eq!(
        support::cpu_ticks(pid),
        cpu,
        "the stopped server used no CPU"
    );
    assert!(support::thread_states(pid).iter().all(|s| *s == 'T'));

    // SAFETY: as above.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let received = server.expect(|l| l.starts_with("server received: "));
    assert!(
        received.ends_with(std::str::from_utf8(MESSAGE).unwrap()),
        "{received}"
    );
    assert!(server.wait(PATIENCE).success(), "{}", server.stderr());
    assert!(client.wait(PATIENCE).success(), "{}", client.stderr());
}

/// The figures row of a perftest report: the line after the `#bytes` header.
fn figures(out: &str) -> Vec<String> {
    let mut lines = out
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"));
    lines.next();
    lines
        .next()
        .unwrap_or_else(|| panic!("no figures in:\n{out}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

#[test]
fn perftest_runs_between_two_nics_at_two_sizes() {
    let all = [
        installed("ib_write_bw", "perftest"),
        installed("ib_read_bw", "perftest"),
        installed("ib_send_bw", "perftest"),
        installed("ib_atomic_bw", "perftest"),
        installed("ib_write_lat", "perftest"),
        installed("ib_read_lat", "perftest"),
        installed("ib_send_lat", "perftest"),
        installed("ib_atomic_lat", "perftest"),
    ];
    if all.contains(&false) {
        return;
    }
    let Pair {
        env,
        a,
        b,
        _running,
    } = pair("lvperf", 66);
    let mut port = 18900;
    for test in [
        "ib_write_bw",
        "ib_read_bw",
        "ib_send_bw",
        "ib_atomic_bw",
        "ib_write_lat",
        "ib_read_lat",
        "ib_send_lat",
        "ib_atomic_lat",
    ] {
        // Atomics move 8 bytes, whatever the size.
        let sizes: &[&str] = if test.contains("atomic") {
            &["8"]
        } else {
            &["64", "65536"]
        };
        for size in sizes {
            port += 1;
            let p = port.to_string();
            let mut args = vec![test, "-x", "1", "-n", "100", "-p", &p];
            if !test.contains("atomic") {
                args.extend(["-s", size]);
            }
            let [server, client] = pingpong(&env, &b.name, &a.name, "10.66.0.2", &args);
            // The client reports; a server of the READ and atomic tests says nothing.
            let reports = [&server, &client]
                .into_iter()
                .filter(|o| o.contains("#bytes"));
            assert!(client.contains("#bytes"), "{test}: {client}");
            for out in reports {
                let row = figures(out);
                assert_eq!(row[0], *size, "{test}: {out}");
                assert_eq!(row[1], "100", "{test}: {out}");
            }
            assert!(client.contains("Link type       : Ethernet"), "{client}");
        }
    }
}

#[test]
fn perftest_and_roce_perftest_talk_both_ways() {
    if !installed("ib_write_bw", "perftest") {
        return;
    }
    let Pair {
        env,
        a,
        b,
        _running,
    } = pair("lvrp", 67);
    for (i, (test, size)) in [
        ("write_bw", "65536"),
        ("send_lat", "64"),
        ("read_bw", "4096"),
    ]
    .into_iter()
    .enumerate()
    {
        let program = format!("ib_{test}");
        // Our roce perftest serves; Debian's ib_* connects under roce run.
        let p = (18950 + 2 * i).to_string();
        let mut ours = env.spawn(
            &[
                "perftest", test, "--nic", &b.name, "-n", "100", "-s", size, "-p", &p,
            ]
            .map(str::to_owned),
            false,
        );
        let args = [
            &program,
            "-x",
            "1",
            "-n",
            "100",
            "-s",
            size,
            "-p",
            &p,
            "10.67.0.2",
        ];
        let theirs = until_accepted(
            &format!("{program} against roce perftest"),
            || run(&env, Some(&a.name), &args),
            |said| said.contains("Couldn't connect"),
            || ours.stderr(),
        )
        .stdout;
        assert!(ours.wait(PATIENCE).success(), "{}", ours.stderr());
        assert_eq!(figures(&theirs)[..2], [size, "100"]);

        // Debian's ib_* serves under roce run; roce perftest connects.
        let p = (18951 + 2 * i).to_string();
        let mut server = start(
            &env,
            &b.name,
            &[&program, "-x", "1", "-n", "100", "-s", size, "-p", &p],
        );
        let done = env.run(&[
            "perftest",
            test,
            "--nic",
            &a.name,
            "-n",
            "100",
            "-s",
            size,
            "-p",
            &p,
            "--connect-retry",
            "20",
            "10.67.0.2",
        ]);
        assert!(
            done.status.success(),
            "roce perftest against {program}: {}",
            done.stderr
        );
        assert!(server.wait(PATIENCE).success(), "{}", server.stderr());
        assert_eq!(figures(&server.drain_stdout())[..2], [size, "100"]);
    }
}

#[test]
fn rdma_cm_programs_connect_through_the_nics_connection_manager() {
    let all = [
        installed("rping", "rdmacm-utils"),
        installed("ucmatose", "rdmacm-utils"),
        installed("ib_write_bw", "perftest"),
    ];
    if all.contains(&false) {
        return;
    }
    let Pair {
        env,
        a,
        b,
        _running,
    } = pair("lvcm", 68);
    // rping -v: every ping printed on both sides, through REQ/REP/RTU and DREQ/DREP; both
    // exit (each tears down with a dozen verbs while its CM thread waits for events).
    let [server, client] = pingpong(
        &env,
        &b.name,
        &a.name,
        "10.68.0.2",
        &["rping", "-v", "-C", "5", "-p", "7471", "-a"],
    );
    for n in 0..5 {
        assert!(
            client.contains(&format!("ping data: rdma-ping-{n}: ")),
            "{client}"
        );
        assert!(
            server.contains(&format!("server ping data: rdma-ping-{n}: ")),
            "{server}"
        );
    }
    let [server, client] = pingpong(
        &env,
        &b.name,
        &a.name,
        "10.68.0.2",
        &["ucmatose", "-p", "7472", "-s"],
    );
    for out in [&server, &client] {
        assert!(out.contains("data transfers complete"), "{out}");
        assert!(out.contains("return status 0"), "{out}");
    }
    let [_, client] = pingpong(
        &env,
        &b.name,
        &a.name,
        "10.68.0.2",
        &["ib_write_bw", "-R", "-x", "1", "-n", "100", "-p", "7473"],
    );
    assert_eq!(figures(&client)[..2], ["65536", "100"]);
}

#[test]
fn rdma_cm_calls_not_mapped_yet_fail_cleanly() {
    if !installed("rdma_server", "rdmacm-utils") {
        return;
    }
    let env = Env::new("lvcmx");
    let (a, _b) = cabled_pair(&env, 71);
    let _na = env.nic(&a);
    // rdma_server makes its endpoint with rdma_create_ep, which answers ENOSYS.
    let done = run(&env, Some(&a.name), &["rdma_server", "-p", "7474"]);
    assert!(
        done.status.code().is_some_and(|c| c != 0),
        "{}",
        done.status
    );
    let said = format!("{}{}", done.stdout, done.stderr);
    assert!(said.contains("rdma_create_ep"), "{said}");
}

#[test]
fn pingpongs_and_roce_pingpong_talk_both_ways() {
    let all = [
        installed("ibv_rc_pingpong", "ibverbs-utils"),
        installed("ibv_ud_pingpong", "ibverbs-utils"),
    ];
    if all.contains(&false) {
        return;
    }
    let Pair {
        env,
        a,
        b,
        _running,
    } = pair("lvrpp", 69);
    for (i, (name, size)) in [("rc", "4096"), ("ud", "1024")].into_iter().enumerate() {
        let program = format!("ibv_{name}_pingpong");
        let common = ["-g", "1", "-n", "100", "-s", size, "-c"];
        // roce pingpong serves; Debian's connects under roce run.
        let p = (19050 + 2 * i).to_string();
        let mut ours = env.spawn(
            &[&["pingpong", name, "--nic", &b.name, "-p", &p][..], &common]
                .concat()
                .into_iter()
                .map(str::to_owned)
                .collect::<Vec<_>>(),
            false,
        );
        let args = [&[program.as_str()][..], &common, &["-p", &p, "10.69.0.2"]].concat();
        let theirs = until_accepted(
            &format!("{program} against roce pingpong"),
            || run(&env, Some(&a.name), &args),
            |said| said.contains("Couldn't connect"),
            || ours.stderr(),
        )
        .stdout;
        assert!(ours.wait(PATIENCE).success(), "{}", ours.stderr());
        assert_eq!(iters(&theirs), 100);
        assert!(ours.drain_stdout().contains("verified: "));

        // Debian's serves under roce run; roce pingpong connects.
        let p = (19051 + 2 * i).to_string();
        let mut server = start(
            &env,
            &b.name,
            &[&[program.as_str()][..], &common, &["-p", &p]].concat(),
        );
        let done = env.run(
            &[
                &[
                    "pingpong",
                    name,
                    "--nic",
                    &a.name,
                    "-p",
                    &p,
                    "--connect-retry",
                    "20",
                ][..],
                &common,
                &["10.69.0.2"],
            ]
            .concat(),
        );
        assert!(
            done.status.success(),
            "roce pingpong against {program}: {}",
            done.stderr
        );
        assert!(done.stdout.contains("verified: "), "{}", done.stdout);
        assert!(server.wait(PATIENCE).success(), "{}", server.stderr());
        assert_eq!(iters(&server.drain_stdout()), 100);
    }
}

#[test]
fn bad_use_from_c_gets_libibverbs_errors_and_never_crashes() {
    let env = Env::new("lvbad");
    let Some(exe) = build_c(&env, "tests/c/bad_use.c", VERBS_H, &["-libverbs"]) else {
        return;
    };
    let (a, b) = cabled_pair(&env, 70);
    let _na = env.nic(&a);
    let nb = env.nic(&b);
    // Without --nic the program sees both NICs of this test's runtime directory.
    let done = run(&env, None, &[exe.to_str().unwrap()]);
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    let cases = cases(&done.stdout);
    let expected = [
        ("reg_mr of unmapped memory", "Bad address"),
        (
            "reg_mr remote write without local write",
            "Invalid argument",
        ),
        ("modify_qp RESET to RTS", "Invalid argument"),
        ("dealloc_pd in use", "Device or resource busy"),
        ("destroy_cq in use", "Device or resource busy"),
        ("connect", "ok"),
        ("reg_mr of malloc memory", "ok"),
        ("write", "success"),
        ("peer buffer", "aaaaa"),
        ("write with a wrong lkey", "local protection error"),
        ("write on a QP in error", "Work Request Flushed Error"),
        ("write with a wrong rkey", "remote access error"),
        ("write into a freed buffer", "success"),
        ("dereg_mr of a freed buffer", "ok"),
        ("destroy_qp", "ok"),
        ("dereg_mr", "ok"),
        ("destroy_cq", "ok"),
        ("dealloc_pd", "ok"),
        ("close_device", "ok"),
    ];
    assert_eq!(cases, expected, "\n{}", done.stderr);
    // Both NICs still run and answer.
    let info = env.run(&["host", "info", "--nic", &b.name]);
    assert!(info.status.success(), "{}", info.stderr);
    drop(nb);
}

#[test]
fn shared_receive_queues_from_c_answer_as_libibverbs_does() {
    let env = Env::new("lvsrqc");
    let Some(exe) = build_c(&env, "tests/c/srq_use.c", VERBS_H, &["-libverbs"]) else {
        return;
    };
    let (a, _b) = cabled_pair(&env, 71);
    let _na = env.nic(&a);
    let done = run(&env, Some(&a.name), &[exe.to_str().unwrap()]);
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    let cases = cases(&done.stdout);
    let expected = [
        ("query_device", "ok"),
        ("max_srq nonzero", "yes"),
        ("create_srq_ex", "ok"),
        ("granted max_wr at least 100", "yes"),
        ("create_srq too large", "Invalid argument"),
        ("modify_srq limit", "ok"),
        ("query_srq", "ok"),
        ("limit armed", "10"),
        ("modify_srq resize", "Invalid argument"),
        ("modify_srq limit above size", "Invalid argument"),
        ("create_qp with srq", "ok"),
        ("query_qp", "ok"),
        ("query_qp names the srq", "yes"),
        ("post_srq_recv", "ok"),
        ("post_srq_recv two entries", "Invalid argument"),
        ("bad names the request", "yes"),
        ("post_recv on a QP with an srq", "Invalid argument"),
        ("destroy_srq in use", "Device or resource busy"),
        ("destroy_qp", "ok"),
        ("dealloc_pd with an srq", "Device or resource busy"),
        ("destroy_srq", "ok"),
        ("dereg_mr", "ok"),
        ("destroy_cq", "ok"),
        ("dealloc_pd", "ok"),
        ("close_device", "ok"),
    ];
    assert_eq!(cases, expected, "\n{}", done.stderr);
}

/// An RDMA CM event channel's descriptor is readable while events wait on it and not once
/// they are taken; made non-blocking, `rdma_get_cm_event` answers EAGAIN (tests/c/cm_channel.c).
#[test]
fn an_event_channels_descriptor_is_readable_while_events_wait() {
    let env = Env::new("lvchan");
    // Linked --as-needed (the default of some distributions' gcc): the program calls no ibv_*
    // itself, so libibverbs drops out of its own list, and it finds the rdma_* calls through
    // our librdmacm.so.1's NEEDED libibverbs.so.1.
    let rdma_cma_h = "/usr/include/rdma/rdma_cma.h";
    let libs = ["-Wl,--as-needed", "-lrdmacm", "-libverbs"];
    let Some(exe) = build_c(&env, "tests/c/cm_channel.c", rdma_cma_h, &libs) else {
        return;
    };
    let (a, _b) = cabled_pair(&env, 73);
    let _na = env.nic(&a);
    let done = run(&env, Some(&a.name), &[exe.to_str().unwrap(), "10.73.0.2"]);
    assert!(done.status.success(), "{}{}", done.stdout, done.stderr);
    let cases = cases(&done.stdout);
    assert_eq!(
        cases,
        [
            ("fresh channel", "not readable"),
            ("after resolve_addr", "readable"),
            ("event", "RDMA_CM_EVENT_ADDR_RESOLVED"),
            ("taken", "not readable"),
            ("non-blocking get", "Resource temporarily unavailable"),
        ]
    );
}

//! Every subcommand piped into a reader that closes early (`roce bench | head -1`,
//! `roce host post ... 2>&1 | head -1`) ends with exit code 0 or a clean error — never a
//! panic; and the long-running ones (a NIC, a server, a watch) keep running until told to stop.

mod support;

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use support::*;

/// A pipe: (read end, write end).
fn pipe() -> (File, OwnedFd) {
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two new descriptors, which are then owned here.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the two descriptors pipe2 just made, each owned once.
    unsafe { (File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
}

/// How the reader goes away.
#[derive(Clone, Copy, Debug)]
enum Reader {
    /// `| head -1` on standard output; standard error is kept to look for a panic.
    HeadOfStdout,
    /// `2>&1 | head -1`: both into the pipe, which closes after one line.
    HeadOfBoth,
}

/// What a run into a closing pipe left: its exit status and, if standard error was kept, what
/// it said there.
struct Ended {
    status: ExitStatus,
    stderr: Option<String>,
}

/// Runs `cmd` with its output into a pipe of which one line (if any comes within a second) is
/// read before the reader closes; `then` runs after that (to stop a long-running command).
fn into_closing_pipe(mut cmd: Command, reader: Reader, then: impl FnOnce(u32)) -> Ended {
    let (read, write) = pipe();
    cmd.stdin(Stdio::null());
    let err_file = tempfile::NamedTempFile::new().unwrap();
    match reader {
        Reader::HeadOfStdout => {
            cmd.stdout(Stdio::from(write))
                .stderr(Stdio::from(err_file.reopen().unwrap()));
        }
        Reader::HeadOfBoth => {
            let both = write.try_clone().unwrap();
            cmd.stdout(Stdio::from(write)).stderr(Stdio::from(both));
        }
    }
    let mut child = cmd.spawn().unwrap();
    // Our copies of the write end went with the Command; the child has the only ones.
    drop(cmd);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(read).read_line(&mut line);
        let _ = tx.send(());
        // The read end is dropped here: the reader went away.
    });
    let _ = rx.recv_timeout(Duration::from_secs(1));
    then(child.id());
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{cmd_name} did not end", cmd_name = child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let stderr = matches!(reader, Reader::HeadOfStdout)
        .then(|| std::fs::read_to_string(err_file.path()).unwrap());
    Ended { status, stderr }
}

/// The run ended with 0, or with 1 or 2 and (where it could be read) one `roce:` line — not
/// with a panic (101) or a signal.
fn assert_clean(what: &str, reader: Reader, ended: &Ended) {
    let code = ended.status.code();
    assert!(
        matches!(code, Some(0..=2)),
        "{what} ({reader:?}) ended with {:?}; stderr: {:?}",
        ended.status,
        ended.stderr
    );
    if let Some(stderr) = &ended.stderr {
        assert!(!stderr.contains("panicked"), "{what}: {stderr}");
        if code != Some(0) {
            assert!(
                stderr
                    .lines()
                    .all(|l| l.starts_with("roce: ") || l.starts_with("give the line")),
                "{what} ({reader:?}): not a clean error: {stderr}"
            );
        }
    }
}

/// `roce ARGS` into each kind of closing reader; `then` stops it if it runs on.
fn both_readers(env: &Env, what: &str, args: &[&str], then: impl Fn(u32)) {
    for reader in [Reader::HeadOfStdout, Reader::HeadOfBoth] {
        let ended = into_closing_pipe(env.roce(args), reader, &then);
        assert_clean(what, reader, &ended);
    }
}

fn term(pid: u32) {
    // SAFETY: kill(2) of our own child, by its PID.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
}

#[test]
fn every_subcommand_ends_cleanly_when_its_reader_goes_away() {
    let env = Env::new("pipes");
    let (a, b) = cabled_pair(&env, 79);
    let _nics = (env.nic(&a), env.nic(&b));
    let region = RegionName(env.name("r"));
    let nothing = |_| {};
    let peer = "0000:000011:000000:00000000000000000000ffff0a4f0002";
    let mut covered: Vec<&str> = Vec::new();

    covered.push("bench");
    both_readers(&env, "bench", &["bench", "--seconds", "0.2"], nothing);
    covered.push("decode");
    for flags in [&[][..], &["-v"], &["--json"]] {
        let mut args = vec!["decode", "../captures/every-opcode-ipv4.pcap"];
        args.extend_from_slice(flags);
        both_readers(&env, "decode", &args, nothing);
    }
    covered.push("demo");
    both_readers(&env, "demo", &["demo", "--in-process"], nothing);
    both_readers(
        &env,
        "demo --json",
        &["demo", "--json", "--in-process"],
        nothing,
    );
    both_readers(&env, "demo --quiet", &["demo", "--quiet"], nothing);

    covered.push("mem");
    both_readers(
        &env,
        "mem create",
        &["mem", "create", &region.0, "64K"],
        nothing,
    );
    let _ = roce_hostmem::Region::remove(&region.0);
    assert!(env
        .run(&["mem", "create", &region.0, "64K"])
        .status
        .success());
    roce_hostmem::Region::attach(&region.0)
        .unwrap()
        .write(0, &[7; 4096])
        .unwrap();
    both_readers(&env, "mem dump", &["mem", "dump", &region.0], nothing);
    both_readers(
        &env,
        "mem watch",
        &["mem", "watch", &region.0, "--duration", "30"],
        term,
    );
    both_readers(&env, "mem rm", &["mem", "rm", &region.0], nothing);

    covered.push("nic");
    let c_name = env.name("c");
    let cable = format!("cable:127.0.0.1:{},127.0.0.1:9", free_udp_port());
    let socket = env.socket(&c_name);
    both_readers(
        &env,
        "nic",
        &[
            "nic",
            "--name",
            &c_name,
            "--ip",
            "10.79.0.3",
            "--link",
            &cable,
        ],
        |pid| {
            // It runs on with nobody reading, until it is told to stop.
            eventually("the NIC's socket", || socket.exists());
            std::thread::sleep(Duration::from_millis(200));
            assert!(std::fs::metadata(format!("/proc/{pid}")).is_ok());
            term(pid);
        },
    );

    covered.push("host");
    both_readers(
        &env,
        "host info",
        &["host", "info", "--nic", &a.name, "--counters"],
        nothing,
    );
    both_readers(
        &env,
        "host info --json",
        &["host", "info", "--nic", &a.name, "--json"],
        nothing,
    );
    let served = RegionName(env.name("s"));
    both_readers(
        &env,
        "host serve",
        &[
            "host", "serve", "--nic", &b.name, "--region", &served.0, "--size", "64K",
        ],
        |pid| {
            eventually("the served region", || shm_exists(&served.0));
            std::thread::sleep(Duration::from_millis(200));
            term(pid);
        },
    );
    let listened = RegionName(env.name("l"));
    both_readers(
        &env,
        "host listen",
        &[
            "host",
            "listen",
            "7000",
            "--nic",
            &b.name,
            "--region",
            &listened.0,
            "--size",
            "64K",
        ],
        |pid| {
            eventually("the listened region", || shm_exists(&listened.0));
            std::thread::sleep(Duration::from_millis(200));
            term(pid);
        },
    );
    both_readers(
        &env,
        "host post",
        &[
            "host", "post", "--nic", &a.name, "--peer", peer, "--write", "--data", "x", "--rkey",
            "1", "--va", "0",
        ],
        nothing,
    );
    both_readers(
        &env,
        "host connect",
        &[
            "host", "connect", "--nic", &a.name, "--peer", peer, "--rkey", "1",
        ],
        nothing,
    );

    covered.push("pingpong");
    both_readers(
        &env,
        "pingpong",
        &["pingpong", "rc", "--nic", &a.name, "--timeout", "1"],
        nothing,
    );
    covered.push("rping");
    both_readers(
        &env,
        "rping",
        &["rping", "-s", "--nic", &a.name, "--timeout", "1"],
        nothing,
    );
    covered.push("ucmatose");
    both_readers(
        &env,
        "ucmatose",
        &["ucmatose", "--nic", &a.name, "--timeout", "1"],
        nothing,
    );
    covered.push("conform");
    both_readers(
        &env,
        "conform",
        &["conform", "../captures/all-verbs.pcap"],
        nothing,
    );
    covered.push("run");
    // The program's output goes into the pipe; `roce run` itself stays quiet and passes on
    // how the program ended.
    both_readers(
        &env,
        "run",
        &["run", "--nic", &a.name, "--", "ibv_devices"],
        nothing,
    );
    covered.push("udaddy");
    both_readers(
        &env,
        "udaddy",
        &["udaddy", "--nic", &a.name, "--timeout", "1"],
        nothing,
    );
    covered.push("perftest");
    both_readers(
        &env,
        "perftest",
        &["perftest", "write_bw", "--nic", &a.name, "--timeout", "1"],
        nothing,
    );
    covered.push("switch");
    let port = format!("127.0.0.1:{},127.0.0.1:9", free_udp_port());
    both_readers(&env, "switch", &["switch", "--port", &port], |pid| {
        // It runs on with nobody reading, until it is told to stop.
        std::thread::sleep(Duration::from_millis(300));
        assert!(std::fs::metadata(format!("/proc/{pid}")).is_ok());
        term(pid);
    });
    covered.push("fabric");
    let topology = env.dir.join("pipes.fabric");
    std::fs::write(
        &topology,
        format!("switch\nnic {} 10.79.0.9/24\n", env.name("f")),
    )
    .unwrap();
    let state = env.dir.join("roce/fabric/pipes/fabric.json");
    both_readers(
        &env,
        "fabric up",
        &["fabric", "up", topology.to_str().unwrap()],
        |pid| {
            eventually("the fabric's state file", || state.exists());
            std::thread::sleep(Duration::from_millis(200));
            assert!(std::fs::metadata(format!("/proc/{pid}")).is_ok());
            term(pid);
            eventually("the fabric down", || !state.exists());
        },
    );
    // Nothing up: one clean error line each.
    both_readers(&env, "fabric status", &["fabric", "status"], nothing);
    both_readers(&env, "fabric down", &["fabric", "down"], nothing);
    covered.push("completions");
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        both_readers(&env, "completions", &["completions", shell], nothing);
    }
    covered.push("man");
    both_readers(&env, "man", &["man"], nothing);
    both_readers(&env, "--help", &["--help"], nothing);
    both_readers(&env, "--version", &["--version"], nothing);

    // A subcommand added later is added here too.
    let mut all = env.subcommands(&[]);
    all.retain(|c| !covered.contains(&c.as_str()));
    assert!(
        all.is_empty(),
        "subcommands this test does not pipe into a closing reader yet: {all:?}"
    );
    for (group, subs) in [
        (
            "host",
            ["serve", "post", "connect", "listen", "info"].as_slice(),
        ),
        ("mem", &["create", "rm", "dump", "watch"]),
    ] {
        let mut listed = env.subcommands(&[group]);
        listed.retain(|c| !subs.contains(&c.as_str()));
        assert!(listed.is_empty(), "roce {group}: not covered: {listed:?}");
    }
}

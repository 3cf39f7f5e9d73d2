//! Running `roce nic` and `roce host` processes from tests: each child is killed by its PID when
//! its guard is dropped, every wait is bounded, and each test has its own socket directory and
//! names, so tests run in parallel.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long any one expected thing may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A test's private runtime directory (where NIC sockets go) and name prefix.
pub struct Env {
    pub dir: PathBuf,
    pub prefix: String,
}

impl Env {
    pub fn new(label: &str) -> Env {
        let prefix = format!("p{}{label}", std::process::id());
        let dir = std::env::temp_dir().join(format!("roce-proc-{prefix}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Env { dir, prefix }
    }

    /// A name unique to this test: `<prefix><what>`.
    pub fn name(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    pub fn socket(&self, nic: &str) -> PathBuf {
        self.dir.join("roce").join(format!("{nic}.sock"))
    }

    /// `roce ARGS` with this test's runtime directory.
    pub fn roce(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_roce"));
        cmd.args(args).env("XDG_RUNTIME_DIR", &self.dir);
        cmd
    }

    /// Runs `roce ARGS` to the end (bounded by [`PATIENCE`]).
    pub fn run(&self, args: &[&str]) -> Finished {
        let mut proc = Proc::spawn(self.roce(args), false);
        let status = proc.wait(PATIENCE);
        let stdout = proc.drain_stdout();
        Finished {
            status,
            stdout,
            stderr: proc.stderr(),
        }
    }

    /// The subcommands `roce PATH --help` lists (without `help`).
    pub fn subcommands(&self, path: &[&str]) -> Vec<String> {
        let mut args = path.to_vec();
        args.push("--help");
        self.run(&args)
            .stdout
            .lines()
            .skip_while(|l| !l.starts_with("Commands:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .filter(|c| c != "help")
            .collect()
    }

    /// Starts `roce ARGS` (owned words) as a [`Proc`].
    pub fn spawn(&self, args: &[String], piped_stdin: bool) -> Proc {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Proc::spawn(self.roce(&args), piped_stdin)
    }

    /// Starts a NIC and waits for its ready line.
    pub fn nic(&self, nic: &Nic) -> Proc {
        self.nic_logging(nic, None)
    }

    /// Starts a NIC logging to its standard error as `filter` (`RUST_LOG`) says, and waits
    /// for its ready line.
    pub fn nic_logging(&self, nic: &Nic, filter: Option<&str>) -> Proc {
        let mut args = vec![
            "nic".to_owned(),
            "--name".into(),
            nic.name.clone(),
            "--ip".into(),
            nic.ip.clone(),
            "--link".into(),
            nic.link.clone(),
            "--link-mtu".into(),
            nic.mtu.to_string(),
        ];
        for n in &nic.neighbours {
            args.extend(["--neigh".into(), n.clone()]);
        }
        if let Some(pcap) = &nic.pcap {
            args.extend(["--pcap".into(), pcap.display().to_string()]);
        }
        args.extend(nic.extra.iter().cloned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let cmd = match &nic.netns {
            // `ip netns exec` keeps the environment, so the socket directory is shared.
            Some(ns) => {
                let mut cmd = Command::new("ip");
                cmd.args(["netns", "exec", ns, env!("CARGO_BIN_EXE_roce")])
                    .args(&args)
                    .env("XDG_RUNTIME_DIR", &self.dir);
                cmd
            }
            None => self.roce(&args),
        };
        let mut cmd = cmd;
        if let Some(filter) = filter {
            cmd.env("RUST_LOG", filter).env("NO_COLOR", "1");
        }
        let mut proc = Proc::spawn(cmd, false);
        proc.expect(|l| l.starts_with(&format!("{} ready: ", nic.name)));
        proc
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// What a finished command left.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// The settings of one `roce nic`.
pub struct Nic {
    pub name: String,
    pub ip: String,
    /// The `--link` argument.
    pub link: String,
    pub mtu: u32,
    pub neighbours: Vec<String>,
    pub pcap: Option<PathBuf>,
    /// The network namespace to run in (for `iface:` links on a veth end there).
    pub netns: Option<String>,
    /// More arguments (`--faults ...`).
    pub extra: Vec<String>,
}

/// Two NICs cabled to each other on loopback ports the kernel picked (`a` is 10.<n>.0.1,
/// `b` 10.<n>.0.2), each knowing the other's MAC.
pub fn cabled_pair(env: &Env, net: u8) -> (Nic, Nic) {
    let (pa, pb) = (free_udp_port(), free_udp_port());
    let ip = |host: u8| format!("10.{net}.0.{host}");
    let mac = |host: u8| format!("02:00:0a:{net:02x}:00:{host:02x}");
    let nic = |end: &str, me: u8, peer: u8, local: u16, remote: u16| Nic {
        name: env.name(end),
        ip: ip(me),
        link: format!("cable:127.0.0.1:{local},127.0.0.1:{remote}"),
        mtu: 4200,
        neighbours: vec![format!("{}={}", ip(peer), mac(peer))],
        pcap: None,
        netns: None,
        extra: Vec::new(),
    };
    (nic("a", 1, 2, pa, pb), nic("b", 2, 1, pb, pa))
}

/// Two NICs on the two ends of a veth pair inside the namespace `ns` (`a` is 10.<n>.0.1, `b`
/// 10.<n>.0.2); they find each other's MAC by ARP. The veth's MTU is 1500 (path MTU 1024).
pub fn veth_pair(env: &Env, ns: &roce_tests::netns::Netns, net: u8) -> (Nic, Nic) {
    let (va, vb) = (format!("{}a", env.prefix), format!("{}b", env.prefix));
    // Interface names are at most 15 bytes.
    let (va, vb) = (tail(&va, 15), tail(&vb, 15));
    ns.veth(&va, &vb);
    let nic = |end: &str, me: u8, ifname: &str| Nic {
        name: env.name(end),
        ip: format!("10.{net}.0.{me}"),
        link: format!("iface:{ifname}"),
        mtu: 1500,
        neighbours: Vec::new(),
        pcap: None,
        netns: Some(ns.name().to_owned()),
        extra: Vec::new(),
    };
    (nic("a", 1, &va), nic("b", 2, &vb))
}

fn tail(s: &str, n: usize) -> String {
    s[s.len().saturating_sub(n)..].to_owned()
}

/// A UDP port nobody uses right now.
pub fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process whose output lines the test reads with timeouts. Killed when dropped.
pub struct Proc {
    child: Child,
    pub stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// Every stdout line seen so far, for failure messages.
    seen: Vec<String>,
}

impl Proc {
    pub fn spawn(mut cmd: Command, piped_stdin: bool) -> Proc {
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if piped_stdin {
            Stdio::piped()
        } else {
            Stdio::null()
        });
        let mut child = cmd.spawn().unwrap();
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut err = child.stderr.take().unwrap();
        let sink = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Proc {
            stdin: child.stdin.take(),
            child,
            lines,
            stderr,
            stderr_reader: Some(stderr_reader),
            seen: Vec::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The next stdout line that satisfies `want`, skipping others; fails after [`PATIENCE`].
    pub fn expect(&mut self, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if want(&line) {
                        return line;
                    }
                }
                Err(_) => panic!(
                    "expected line not seen; stdout so far:\n{}\nstderr:\n{}",
                    self.seen.join("\n"),
                    self.stderr()
                ),
            }
        }
    }

    /// The next stdout line within `timeout`, if one came (it is kept in [`Proc::seen`]).
    pub fn try_line(&mut self, timeout: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    /// The stdout lines read so far by [`Proc::expect`] and [`Proc::try_line`].
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    /// The lines printed from now until the process exits.
    pub fn drain_stdout(&mut self) -> String {
        let mut out = String::new();
        while let Ok(line) = self.lines.recv_timeout(PATIENCE) {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }

    pub fn say(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin is piped");
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// Closes the process's standard input: the end of what a person types (Ctrl-D).
    pub fn close_stdin(&mut self) {
        self.stdin.take();
    }

    pub fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) of our own child, by its PID.
        assert_eq!(unsafe { libc::kill(self.pid(), signal) }, 0);
    }

    /// The exit status, if the process has exited.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Every thread's stack as gdb shows it, the process running on after it.
    pub fn stacks(&self) -> String {
        Command::new("gdb")
            .args([
                "-p",
                &self.pid().to_string(),
                "-batch",
                "-ex",
                "thread apply all bt",
            ])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|e| format!("gdb did not run: {e}"))
    }

    /// Stops the process with SIGTERM; if it has not exited after `limit`, returns every
    /// thread's stack as gdb shows it (where a hung process hangs) and kills it.
    pub fn stop_or_dump_stacks(&mut self, limit: Duration) -> Option<String> {
        if self.exited().is_none() {
            self.signal(libc::SIGTERM);
        }
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.exited().is_some() {
                self.wait(Duration::ZERO);
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let stacks = self.stacks();
        let _ = self.child.kill();
        self.wait(Duration::from_secs(5));
        Some(stacks)
    }

    /// Waits for the exit, killing the process if it takes longer than `limit`. Afterwards
    /// [`Proc::stderr`] holds everything the process wrote there.
    pub fn wait(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                if let Some(reader) = self.stderr_reader.take() {
                    let _ = reader.join();
                }
                return status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("process {} did not exit within {limit:?}", self.pid());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Proc {
    /// SIGTERM first, so a NIC removes its socket and shared memory; SIGKILL if that is not
    /// enough within a few seconds.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: kill(2) of our own child, by its PID.
            unsafe { libc::kill(self.pid(), libc::SIGCONT) };
            // SAFETY: as above.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// CPU time a process has used, in clock ticks (utime + stime of /proc/PID/stat).
pub fn cpu_ticks(pid: i32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

/// The states of all threads of a process (`T` = stopped).
pub fn thread_states(pid: i32) -> Vec<char> {
    tasks(pid)
        .iter()
        .filter_map(|task| std::fs::read_to_string(task.join("stat")).ok())
        .filter_map(|stat| stat[stat.rfind(')')? + 2..].chars().next())
        .collect()
}

/// Voluntary and involuntary context switches of all threads of a process.
pub fn context_switches(pid: i32) -> u64 {
    tasks(pid)
        .iter()
        .filter_map(|task| std::fs::read_to_string(task.join("status")).ok())
        .flat_map(|status| {
            status
                .lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn tasks(pid: i32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect()
}

/// Waits until `cond` holds, failing the test after [`PATIENCE`].
pub fn eventually(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !cond() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub fn shm_exists(name: &str) -> bool {
    Path::new(&format!("/dev/shm/roce-{name}")).exists()
}

/// Whether the process `pid` maps the memfd `roce-<name>` (a NIC's ring or doorbell, which
/// live in memfds, not in /dev/shm).
pub fn maps_memfd(pid: i32, name: &str) -> bool {
    let needle = format!("/memfd:roce-{name} ");
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|maps| maps.contains(&needle))
}

/// The files in /dev/shm whose names start with `roce-<prefix>`.
pub fn shm_files(prefix: &str) -> Vec<String> {
    let prefix = format!("roce-{prefix}");
    std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

/// A region name that is removed when the test ends, however it ends (a killed process cannot
/// remove the region it created).
pub struct RegionName(pub String);

impl Drop for RegionName {
    fn drop(&mut self) {
        let _ = roce_hostmem::Region::remove(&self.0);
    }
}

/// The demo's proof line that starts with `start` (after its tick), which must have held.
pub fn proof<'a>(out: &'a str, start: &str) -> &'a str {
    let line = out
        .lines()
        .map(str::trim)
        .find(|l| l.trim_start_matches(['✓', '✗', ' ']).starts_with(start))
        .unwrap_or_else(|| panic!("no proof line {start:?} in\n{out}"));
    assert!(line.starts_with('✓'), "did not hold: {line}");
    line
}

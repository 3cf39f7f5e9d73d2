//! `roce fabric`: a switch and the NICs on its ports, from a small topology file, started and
//! stopped as one. `up` runs in the foreground until Ctrl-C, SIGTERM or `roce fabric down`,
//! prefixing each member's output with its name; `status` shows the members and the switch's
//! port counters while it runs.
//!
//! The topology file, one member a line (`#` starts a comment):
//!
//! ```text
//! switch --rate 1G --buffer 256K --ecn kmin=20K,kmax=200K,pmax=0.01
//! nic a 10.0.0.1/24 --ecn
//! nic b 10.0.0.2/24
//! ```
//!
//! The switch line holds `roce switch` flags (its ports are made here: one per NIC, in order);
//! each `nic NAME IP` line may add `roce nic` flags. Every NIC is cabled to its port over UDP on
//! loopback; the NICs find each other by ARP through the switch. The NICs run DCQCN (`roce nic
//! --dcqcn`), as a fabric's NICs do, unless `up --no-dcqcn` or the NIC's line says `--no-dcqcn`,
//! and IRN's low retransmission timer (`--rto-low on`) unless the line says `--rto-low off`.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::UdpSocket;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::signals::Shutdown;
use crate::Failure;

#[derive(clap::Subcommand)]
pub enum FabricCommand {
    /// Start the switch and the NICs of a topology file; stop them all on Ctrl-C, SIGTERM or
    /// `roce fabric down`.
    #[command(after_long_help = "Examples:
  roce fabric up rack.fabric                    until Ctrl-C or `roce fabric down`
  roce fabric up rack.fabric --pcap /tmp/rack   every switch port and every NIC recorded
  roce fabric up rack.fabric --shm              NICs on shared-memory links, not UDP

A topology file, one member a line:
  switch --rate 1G --buffer 256K --ecn kmin=20K,kmax=200K,pmax=0.01
  nic s1 10.0.0.1/24 --ecn
  nic r  10.0.0.2/24")]
    Up(UpArgs),
    /// Stop a running fabric (the only one, or the one named).
    #[command(after_long_help = "Examples:\n  roce fabric down\n  roce fabric down rack")]
    Down(NameArgs),
    /// Show a running fabric's members and its switch's port counters.
    #[command(
        after_long_help = "Examples:\n  roce fabric status\n  roce fabric status rack --json | jq .ports"
    )]
    Status(StatusArgs),
}

#[derive(clap::Args)]
pub struct UpArgs {
    /// The topology file.
    file: PathBuf,
    /// The fabric's name (default: the file's name without its extension).
    #[arg(long)]
    name: Option<String>,
    /// Record every switch port (DIR/portN.pcap) and every NIC (DIR/NAME.pcap).
    #[arg(long, value_name = "DIR")]
    pcap: Option<PathBuf>,
    /// Cable the NICs to the switch with shared-memory links rather than UDP on loopback
    /// (faster, for fabrics of many local NICs; no QEMU guest can join such a port).
    #[arg(long)]
    shm: bool,
    /// Start the NICs without DCQCN congestion control (each NIC line may also say
    /// `--no-dcqcn`).
    #[arg(long)]
    no_dcqcn: bool,
}

#[derive(clap::Args)]
pub struct NameArgs {
    /// The fabric's name (may be left out when only one runs).
    name: Option<String>,
}

#[derive(clap::Args)]
pub struct StatusArgs {
    /// The fabric's name (may be left out when only one runs).
    name: Option<String>,
    /// One JSON object: the members and the switch's counters file as it is.
    #[arg(long)]
    json: bool,
}

/// The NIC-line flag that keeps a fabric NIC without DCQCN (the fabric's, not `roce nic`'s).
const NO_DCQCN: &str = "--no-dcqcn";

/// How long a member may take to say it is ready, and to stop.
const PATIENCE: Duration = Duration::from_secs(20);

/// A `nic` line of the topology file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NicLine {
    name: String,
    ip: String,
    flags: Vec<String>,
}

/// Reads a topology: one switch, at least one NIC, unique NIC names.
/// Returns the switch's flags and the NICs.
pub fn parse_topology(text: &str) -> Result<(Vec<String>, Vec<NicLine>), String> {
    let mut switch = None;
    let mut nics = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        let words: Vec<String> = line.split_whitespace().map(str::to_owned).collect();
        let at = |what: String| format!("line {}: {what}", n + 1);
        match words.first().map(String::as_str) {
            None => {}
            Some("switch") if switch.is_none() => switch = Some(words[1..].to_vec()),
            Some("switch") => return Err(at("a second switch (one fabric has one)".into())),
            Some("nic") => {
                let [_, name, ip, ..] = words.as_slice() else {
                    return Err(at("a NIC is `nic NAME IP [roce nic flags]`".into()));
                };
                roce_nic::host::check_name(name).map_err(|e| at(e.to_string()))?;
                if nics.iter().any(|m: &NicLine| &m.name == name) {
                    return Err(at(format!("a second NIC named {name}")));
                }
                nics.push(NicLine {
                    name: name.clone(),
                    ip: ip.clone(),
                    flags: words[3..].to_vec(),
                });
            }
            Some(other) => {
                return Err(at(format!(
                    "`{other}` is not a member: lines start with `switch` or `nic`"
                )))
            }
        }
    }
    let switch = switch.ok_or("the topology has no `switch` line")?;
    if nics.is_empty() {
        return Err("the topology has no `nic` line".into());
    }
    Ok((switch, nics))
}

/// What `up` leaves for `down` and `status`.
#[derive(Debug, Serialize, Deserialize)]
struct State {
    /// The `roce fabric up` process.
    pid: u32,
    members: Vec<StateMember>,
    /// The switch's counters file.
    stats: PathBuf,
}

#[derive(Debug, Serialize, Deserialize)]
struct StateMember {
    role: String,
    name: String,
    pid: u32,
    /// The switch port this NIC is on (1-based), or none for the switch.
    port: Option<usize>,
    link: String,
}

fn fabrics_dir() -> PathBuf {
    roce_nic::host::socket_dir().join("fabric")
}

pub fn run(command: FabricCommand) -> Result<ExitCode, Failure> {
    match command {
        FabricCommand::Up(args) => up(args),
        FabricCommand::Down(args) => down(args),
        FabricCommand::Status(args) => status(args),
    }
}

fn free_port() -> Result<u16, Failure> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| Failure::new(format!("cannot find a free UDP port on loopback: {e}")))
}

/// A started member: its process, and its output lines as they come.
struct Running {
    name: String,
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn start(name: &str, args: &[String]) -> Result<Running, Failure> {
        let exe = std::env::current_exe()
            .map_err(|e| Failure::new(format!("cannot find the roce program: {e}")))?;
        let mut child = Command::new(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start {name}: {e}")))?;
        let stdout = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        let prefix = name.to_owned();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                say!("[{prefix}] {line}");
                if tx.send(line).is_err() {
                    // Nobody listens any more; keep echoing.
                    continue;
                }
            }
        });
        Ok(Running {
            name: name.to_owned(),
            child,
            lines,
        })
    }

    /// Waits for the line that starts with `prefix`; fails if the member exits or is slow.
    fn await_line(&mut self, prefix: &str) -> Result<(), Failure> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self
                .lines
                .recv_timeout(left.min(Duration::from_millis(100)))
            {
                Ok(line) if line.starts_with(prefix) => return Ok(()),
                Ok(_) => {}
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if let Ok(Some(status)) = self.child.try_wait() {
                        return Err(Failure::new(format!(
                            "{} exited ({status}) before it was ready",
                            self.name
                        )));
                    }
                }
                Err(_) => {
                    return Err(Failure::new(format!(
                        "{} was not ready within {PATIENCE:?}",
                        self.name
                    )))
                }
            }
        }
    }

    /// SIGTERM, then SIGKILL if it does not end within [`PATIENCE`].
    fn stop(&mut self) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        // SAFETY: kill(2) of our own child, by its PID.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = Instant::now() + PATIENCE;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tell!(
            "roce: {} did not stop within {PATIENCE:?}: killed",
            self.name
        );
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn up(args: UpArgs) -> Result<ExitCode, Failure> {
    let shutdown = Shutdown::block();
    let text = std::fs::read_to_string(&args.file)
        .map_err(|e| Failure::usage(format!("cannot read {}: {e}", args.file.display())))?;
    let (switch_flags, nics) = parse_topology(&text)
        .map_err(|e| Failure::usage(format!("{}: {e}", args.file.display())))?;
    let name = match &args.name {
        Some(n) => n.clone(),
        None => args
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "fabric".into()),
    };
    roce_nic::host::check_name(&name).map_err(|e| Failure::usage(format!("fabric name: {e}")))?;
    let dir = fabrics_dir().join(&name);
    let state_path = dir.join("fabric.json");
    if let Some(state) = read_state(&state_path) {
        if alive(state.pid) {
            return Err(Failure::new(format!(
                "the fabric {name} is already up (process {}); `roce fabric down {name}` first",
                state.pid
            )));
        }
    }
    std::fs::create_dir_all(&dir)
        .map_err(|e| Failure::new(format!("cannot create {}: {e}", dir.display())))?;
    if let Some(pcap) = &args.pcap {
        std::fs::create_dir_all(pcap)
            .map_err(|e| Failure::new(format!("cannot create {}: {e}", pcap.display())))?;
    }
    let stats = dir.join("switch.json");
    // One link per NIC: (the switch's end, the NIC's).
    let mut cables = Vec::new();
    for nic in &nics {
        cables.push(if args.shm {
            // Shared-memory names take no '.', which NIC names may have.
            let link = format!("shm:{name}-{}", nic.name.replace('.', "_"));
            (link.clone(), link)
        } else {
            let (s, n) = (free_port()?, free_port()?);
            (
                format!("127.0.0.1:{s},127.0.0.1:{n}"),
                format!("cable:127.0.0.1:{n},127.0.0.1:{s}"),
            )
        });
    }
    let mut switch_args: Vec<String> = vec!["switch".into()];
    for (port, _) in &cables {
        switch_args.extend(["--port".into(), port.clone()]);
    }
    switch_args.extend(["--stats".into(), stats.display().to_string()]);
    if let Some(pcap) = &args.pcap {
        switch_args.extend(["--pcap".into(), pcap.display().to_string()]);
    }
    switch_args.extend(switch_flags);
    let mut members: Vec<(Running, StateMember)> = Vec::new();
    let started = (|| {
        let mut switch = Running::start("switch", &switch_args)?;
        switch.await_line("switch ready")?;
        let pid = switch.child.id();
        members.push((
            switch,
            StateMember {
                role: "switch".into(),
                name: "switch".into(),
                pid,
                port: None,
                link: format!("{} ports", cables.len()),
            },
        ));
        for (port, (nic, (_, link))) in nics.iter().zip(&cables).enumerate() {
            let NicLine { name, ip, flags } = nic;
            let mut nic_args: Vec<String> = vec![
                "nic".into(),
                "--name".into(),
                name.clone(),
                "--ip".into(),
                ip.clone(),
                "--link".into(),
                link.clone(),
            ];
            if let Some(pcap) = &args.pcap {
                nic_args.extend([
                    "--pcap".into(),
                    pcap.join(format!("{name}.pcap")).display().to_string(),
                ]);
            }
            let off = args.no_dcqcn || flags.iter().any(|f| f == NO_DCQCN);
            if !off && !flags.iter().any(|f| f == "--dcqcn") {
                nic_args.push("--dcqcn".into());
            }
            // Switches drop: the fabric's NICs recover from a lost tail with the low timer.
            if !flags.iter().any(|f| f.starts_with("--rto-low")) {
                nic_args.extend(["--rto-low".into(), "on".into()]);
            }
            nic_args.extend(flags.iter().filter(|f| *f != NO_DCQCN).cloned());
            let mut running = Running::start(name, &nic_args)?;
            running.await_line(&format!("{name} ready"))?;
            let pid = running.child.id();
            members.push((
                running,
                StateMember {
                    role: "nic".into(),
                    name: name.clone(),
                    pid,
                    port: Some(port + 1),
                    link: link.clone(),
                },
            ));
        }
        Ok::<(), Failure>(())
    })();
    let result = match started {
        Ok(()) => {
            let state = State {
                pid: std::process::id(),
                members: members.iter().map(|(_, m)| clone_member(m)).collect(),
                stats: stats.clone(),
            };
            let json = serde_json::to_string_pretty(&state).expect("state renders");
            std::fs::write(&state_path, json)
                .map_err(|e| Failure::new(format!("cannot write {}: {e}", state_path.display())))?;
            say!(
                "fabric {name} up: a switch and {} NICs; `roce fabric status {name}`, `roce fabric down {name}`",
                members.len() - 1
            );
            watch(&shutdown, &mut members)
        }
        Err(e) => Err(e),
    };
    // NICs first (their QPs flush while the switch still carries frames), then the switch.
    for (running, _) in members.iter_mut().rev() {
        running.stop();
    }
    let _ = std::fs::remove_file(&state_path);
    let _ = std::fs::remove_file(&stats);
    let _ = std::fs::remove_dir(&dir);
    result?;
    say!("fabric {name} down");
    Ok(ExitCode::SUCCESS)
}

fn clone_member(m: &StateMember) -> StateMember {
    StateMember {
        role: m.role.clone(),
        name: m.name.clone(),
        pid: m.pid,
        port: m.port,
        link: m.link.clone(),
    }
}

/// Until a signal: then Ok. A member that exits by itself is a failure of the fabric.
fn watch(shutdown: &Shutdown, members: &mut [(Running, StateMember)]) -> Result<(), Failure> {
    loop {
        if let Some(signal) = shutdown.within(Duration::from_millis(200)) {
            tracing::info!(signal, "fabric shutting down");
            return Ok(());
        }
        for (running, _) in members.iter_mut() {
            if let Ok(Some(status)) = running.child.try_wait() {
                return Err(Failure::new(format!(
                    "{} exited ({status}): stopping the fabric",
                    running.name
                )));
            }
        }
    }
}

/// Whether process `pid` runs (a zombie, ended but not yet reaped by its parent, does not).
fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    if pid == 0 || unsafe { libc::kill(pid as libc::pid_t, 0) } != 0 {
        return false;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rfind(')')
        .and_then(|at| stat[at + 1..].trim_start().chars().next());
    state != Some('Z')
}

fn read_state(path: &Path) -> Option<State> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The running fabric `name`, or the only one running.
fn find(name: Option<&str>) -> Result<(String, State), Failure> {
    let mut running = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir(fabrics_dir()) {
        for entry in entries.flatten() {
            let fabric = entry.file_name().to_string_lossy().into_owned();
            if let Some(state) = read_state(&entry.path().join("fabric.json")) {
                if alive(state.pid) {
                    running.insert(fabric, state);
                }
            }
        }
    }
    match name {
        Some(name) => running
            .remove_entry(name)
            .ok_or_else(|| Failure::new(format!("no fabric named {name} is up"))),
        None if running.len() == 1 => Ok(running.pop_first().expect("one")),
        None if running.is_empty() => Err(Failure::new("no fabric is up")),
        None => Err(Failure::usage(format!(
            "{} fabrics are up ({}): name one",
            running.len(),
            running.keys().cloned().collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn down(args: NameArgs) -> Result<ExitCode, Failure> {
    let (name, state) = find(args.name.as_deref())?;
    // SAFETY: kill(2) by PID of the process the state file names, which is alive.
    unsafe { libc::kill(state.pid as libc::pid_t, libc::SIGTERM) };
    let deadline = Instant::now() + PATIENCE * 2;
    while alive(state.pid) {
        if Instant::now() > deadline {
            return Err(Failure::new(format!(
                "the fabric {name} (process {}) did not stop within {:?}",
                state.pid,
                PATIENCE * 2
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out!("fabric {name} down")?;
    Ok(ExitCode::SUCCESS)
}

fn status(args: StatusArgs) -> Result<ExitCode, Failure> {
    let (name, state) = find(args.name.as_deref())?;
    let stats = std::fs::read_to_string(&state.stats)
        .map_err(|e| Failure::new(format!("cannot read {}: {e}", state.stats.display())))?;
    let stats: serde_json::Value = serde_json::from_str(&stats)
        .map_err(|e| Failure::new(format!("{}: {e}", state.stats.display())))?;
    if args.json {
        let members: Vec<serde_json::Value> = state
            .members
            .iter()
            .map(|m| {
                serde_json::json!({
                    "role": m.role, "name": m.name, "pid": m.pid, "port": m.port,
                    "link": m.link, "running": alive(m.pid),
                })
            })
            .collect();
        let all = serde_json::json!({
            "fabric": name, "pid": state.pid, "members": members, "ports": stats["ports"],
        });
        out!("{all}")?;
        return Ok(ExitCode::SUCCESS);
    }
    out!("fabric {name} (process {})", state.pid)?;
    for m in &state.members {
        let port = m.port.map(|p| format!("port {p}")).unwrap_or_default();
        let up = if alive(m.pid) { "running" } else { "GONE" };
        out!(
            "  {:6} {:12} pid {:<8} {up:8} {port:8} {}",
            m.role,
            m.name,
            m.pid,
            m.link
        )?;
    }
    let ports = stats["ports"].as_array().cloned().unwrap_or_default();
    out!(
        "  {:>4} {:12} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10} {:>6} {:>6}",
        "port",
        "nic",
        "rx",
        "tx",
        "dropped",
        "marked",
        "queue",
        "queue max",
        "xoff",
        "paused"
    )?;
    for port in ports {
        let n = port["port"].as_u64().unwrap_or(0) as usize;
        let nic = state
            .members
            .iter()
            .find(|m| m.port == Some(n))
            .map_or("", |m| m.name.as_str());
        let v = |k: &str| port[k].as_u64().unwrap_or(0);
        out!(
            "  {:>4} {:12} {:>10} {:>10} {:>8} {:>8} {:>10} {:>10} {:>6} {:>6}",
            n,
            nic,
            v("rx_frames"),
            v("tx_frames"),
            v("dropped"),
            v("ecn_marked"),
            v("queue_bytes"),
            v("queue_max_bytes"),
            v("pause_xoff_sent"),
            v("pause_received")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topologies_parse_with_comments_and_flags() {
        let (switch, nics) = parse_topology(
            "# a rack\nswitch --rate 1G  # slow\n\nnic a 10.0.0.1/24 --ecn\nnic b 10.0.0.2\n",
        )
        .unwrap();
        assert_eq!(switch, vec!["--rate", "1G"]);
        assert_eq!(
            nics[0],
            NicLine {
                name: "a".into(),
                ip: "10.0.0.1/24".into(),
                flags: vec!["--ecn".into()]
            }
        );
        assert_eq!(nics.len(), 2);
    }

    #[test]
    fn bad_topologies_say_which_line() {
        for (text, says) in [
            ("nic a 10.0.0.1", "no `switch`"),
            ("switch", "no `nic`"),
            ("switch\nswitch\nnic a 1.2.3.4", "line 2"),
            ("switch\nnic a", "line 2"),
            ("switch\nnic a 1.2.3.4\nnic a 1.2.3.5", "second NIC named a"),
            ("switch\nrouter r", "`router` is not a member"),
            ("switch\nnic -x 1.2.3.4", "line 2"),
        ] {
            let e = parse_topology(text).unwrap_err();
            assert!(e.contains(says), "{text:?}: {e}");
        }
    }
}

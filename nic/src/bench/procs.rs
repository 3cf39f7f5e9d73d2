//! Two `roce nic` processes joined by a UDP cable on loopback or a shared-memory link, a
//! `roce host serve` target on one, and an initiating QP in this process on the other: the
//! setting of the benchmarks between processes. The caller names the `roce` program.

use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region};

use super::udp::free_port;
use super::Initiator;
use crate::host::SocketBackend;
use crate::link::shm;
use crate::verbs::*;

/// Bytes of the target's and the initiator's regions.
const REGION: usize = 16 << 20;

/// A child process that is stopped (SIGTERM, then SIGKILL after 5 s) when dropped.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        // SAFETY: kill(2) of our own child, by its PID; SIGTERM lets a NIC clean up.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Reads lines until one starts with `prefix`; an error if the output ends first.
pub fn line_starting(out: &mut impl BufRead, prefix: &str) -> io::Result<String> {
    let mut line = String::new();
    loop {
        line.clear();
        if out.read_line(&mut line)? == 0 {
            return Err(io::Error::other(format!(
                "the process ended without a line starting {prefix:?}"
            )));
        }
        if line.starts_with(prefix) {
            return Ok(line.trim_end().to_owned());
        }
    }
}

/// What joins the two NIC processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Medium {
    /// `--link cable:` on loopback UDP.
    Cable,
    /// `--link shm:`.
    Shm,
}

/// Two NIC processes, a serving target host, and this process's initiating QP.
pub struct NicPair {
    pub qp: QueuePair,
    pub cq: CompletionQueue,
    pub mr: MemoryRegion,
    pub rkey: u32,
    pub va: u64,
    _pd: ProtectionDomain,
    _ctx: Context,
    _region: Arc<Region>,
    _target: (Guard, ChildStdin),
    nics: [Guard; 2],
    _dir: TempDir,
}

/// A directory removed when dropped (the NICs' sockets live in it).
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spawn(
    roce: &Path,
    dir: &Path,
    args: &[&str],
    stdin: Stdio,
) -> io::Result<(Child, BufReader<ChildStdout>)> {
    let mut child = Command::new(roce)
        .args(args)
        .env("XDG_RUNTIME_DIR", dir)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let out = BufReader::new(child.stdout.take().ok_or(io::ErrorKind::BrokenPipe)?);
    Ok((child, out))
}

fn bad(what: &str, line: &str) -> io::Error {
    io::Error::other(format!(
        "unexpected {what} line from roce host serve: {line}"
    ))
}

impl NicPair {
    /// Starts the NICs (with the `roce` program at `roce`) joined by `medium`, the target and
    /// the initiator, connected at path MTU 4096. `label` makes the names unique.
    pub fn start(roce: &Path, medium: Medium, label: &str) -> io::Result<NicPair> {
        let id = std::process::id();
        let tag = match medium {
            Medium::Cable => "c",
            Medium::Shm => "s",
        };
        let base = format!("{label}{id}{tag}");
        let dir = TempDir(std::env::temp_dir().join(format!("roce-{base}")));
        std::fs::create_dir_all(&dir.0)?;
        let (pa, pb) = (free_port()?, free_port()?);
        let (na, nb) = (format!("{base}a"), format!("{base}b"));
        let shm_name = shm::unique_name(label);
        let nic = |name: &str, ip: &str, local: u16, remote: u16, peer: &str| {
            let link = match medium {
                Medium::Cable => format!("cable:127.0.0.1:{local},127.0.0.1:{remote}"),
                Medium::Shm => format!("shm:{shm_name}"),
            };
            let args = [
                "nic", "--name", name, "--ip", ip, "--link", &link, "--neigh", peer,
            ];
            let (child, mut out) = spawn(roce, &dir.0, &args, Stdio::null())?;
            let guard = Guard(child);
            line_starting(&mut out, &format!("{name} ready"))?;
            Ok::<_, io::Error>(guard)
        };
        let nics = [
            nic(&na, "10.99.0.1", pa, pb, "10.99.0.2=02:00:0a:63:00:02")?,
            nic(&nb, "10.99.0.2", pb, pa, "10.99.0.1=02:00:0a:63:00:01")?,
        ];
        let region_b = format!("{base}target");
        let (target, mut out) = spawn(
            roce,
            &dir.0,
            &[
                "host", "serve", "--nic", &nb, "--region", &region_b, "--size", "16M",
            ],
            Stdio::piped(),
        )?;
        let mut target = Guard(target);
        let peer = line_starting(&mut out, "local ")?;
        let memory = line_starting(&mut out, "memory ")?;
        let field = |name: &str| {
            memory
                .split_whitespace()
                .find_map(|w| w.strip_prefix(name))
                .and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok())
                .ok_or_else(|| bad("memory", &memory))
        };
        let (rkey, va) = (field("rkey=")? as u32, field("va=")?);

        let socket = dir.0.join("roce").join(format!("{na}.sock"));
        let verbs = |e: VerbsError| io::Error::other(e.to_string());
        let backend = SocketBackend::connect_at(&na, &socket).map_err(verbs)?;
        let ctx = Context::open(backend).map_err(verbs)?;
        let pd = ctx.alloc_pd().map_err(verbs)?;
        let cq = ctx.create_cq(4096).map_err(verbs)?;
        let cap = QpCap {
            max_send_wr: 1024,
            ..QpCap::default()
        };
        let qp = pd.create_qp(QpType::Rc, &cq, &cq, cap).map_err(verbs)?;
        let region =
            Arc::new(Region::create(&format!("{base}init"), REGION).map_err(io::Error::other)?);
        region
            .write(0, &vec![0x5a; region.len()])
            .map_err(io::Error::other)?;
        let mr = pd
            .register(&region, 0, region.len(), Access::LOCAL_WRITE)
            .map_err(verbs)?;
        let gid = ctx
            .gid(1)
            .ok_or_else(|| io::Error::other("the NIC has no GID 1"))?;
        let mut stdin = target.0.stdin.take().ok_or(io::ErrorKind::BrokenPipe)?;
        writeln!(stdin, "0000:{:06x}:000000:{}", qp.qp_num(), gid.to_hex())?;
        line_starting(&mut out, "connected to ")?;
        let fields: Vec<&str> = peer["local ".len()..].splitn(4, ':').collect();
        let hex = |i: usize| {
            fields
                .get(i)
                .and_then(|f| u32::from_str_radix(f, 16).ok())
                .ok_or_else(|| bad("local", &peer))
        };
        let (qpn, psn) = (hex(1)?, hex(2)?);
        let gid = fields
            .get(3)
            .and_then(|g| Gid::parse(g))
            .ok_or_else(|| bad("local", &peer))?;
        qp.modify(&QpAttr::init(Access::LOCAL_WRITE))
            .map_err(verbs)?;
        let av = AddressVector::to(gid, 1);
        qp.modify(&QpAttr::rtr(av, qpn, psn, Mtu::M4096))
            .map_err(verbs)?;
        qp.modify(&QpAttr::rts(0)).map_err(verbs)?;
        Ok(NicPair {
            qp,
            cq,
            mr,
            rkey,
            va,
            _pd: pd,
            _ctx: ctx,
            _region: region,
            _target: (target, stdin),
            nics,
            _dir: dir,
        })
    }

    /// CPU time the two NIC processes (initiator's, target's) have used so far, all their
    /// threads, user and system, in nanoseconds (`/proc/PID/task/*/schedstat`): the difference
    /// over a run divided by its bytes is a cost that a loaded machine blurs far less than a
    /// rate does. `None` where `/proc` does not say.
    pub fn nic_cpu_ns(&self) -> Option<[u64; 2]> {
        let one = |guard: &Guard| cpu_ns(guard.0.id());
        Some([one(&self.nics[0])?, one(&self.nics[1])?])
    }

    /// This process's QP writing into the target's region.
    pub fn initiator(&self) -> Initiator<'_> {
        Initiator {
            qp: &self.qp,
            cq: &self.cq,
            mr: &self.mr,
            rkey: self.rkey,
            va: self.va,
            len: REGION as u64,
        }
    }
}

/// The CPU time of every thread of process `pid`, in nanoseconds: the first field of each
/// task's `schedstat`.
pub(crate) fn cpu_ns(pid: u32) -> Option<u64> {
    let mut total = 0;
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let stat = std::fs::read_to_string(task.ok()?.path().join("schedstat")).ok()?;
        total += stat.split_whitespace().next()?.parse::<u64>().ok()?;
    }
    Some(total)
}

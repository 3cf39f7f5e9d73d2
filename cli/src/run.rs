//! `roce run`: runs an unmodified verbs program (ibv_devinfo, ibv_rc_pingpong, perftest, your
//! own) on an emulated NIC. The program finds our `libibverbs.so.1` and `librdmacm.so.1`
//! (crates libverbs and librdmacm) first on its library path, and `ROCE_NIC` names the NIC
//! they open; with `--ip` and `--link` instead of `--nic`, a NIC process is started for the
//! program and stopped after it.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use roce_nic::host;

use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  List the NICs and show one as rdma-core's tools do:
    roce run -- ibv_devices
    roce run --nic nic0 -- ibv_devinfo -v
  rdma-core's pingpong between two NICs cabled together (see `roce nic --help`):
    roce run --nic nic1 -- ibv_rc_pingpong -g 1 &
    roce run --nic nic0 -- ibv_rc_pingpong -g 1 10.0.0.2
  A NIC of its own for one program:
    roce run --ip 10.0.0.1 --link cable:127.0.0.1:7001,127.0.0.1:7002 -- ib_write_bw -d run0";

#[derive(clap::Args)]
pub struct Args {
    /// The NIC the program opens (it is the only device it sees). Without --nic and --ip,
    /// the program sees every NIC running for this user.
    #[arg(long, conflicts_with_all = ["ip", "link"])]
    nic: Option<String>,
    /// Start a NIC for the program with this IP address (as `roce nic --ip`); needs --link.
    #[arg(long, requires = "link", value_name = "ADDR[/PREFIX]")]
    ip: Option<String>,
    /// The started NIC's wire (as `roce nic --link`); needs --ip.
    #[arg(long, requires = "ip")]
    link: Option<String>,
    /// The started NIC's name (default run<PID>).
    #[arg(long, requires = "ip")]
    name: Option<String>,
    /// The program and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    program: Vec<OsString>,
}

/// Where our libraries are: `ROCE_LIB_DIR`, else the newest of beside the roce executable
/// (cargo's target directory, where `cargo build` puts libibverbs.so), its `deps` (where a
/// build of the tests puts them) and `../lib/roce` of an installation.
fn library_dir() -> Result<PathBuf, Failure> {
    let has = |d: &Path| d.join("libibverbs.so").is_file() && d.join("librdmacm.so").is_file();
    if let Some(dir) = std::env::var_os("ROCE_LIB_DIR") {
        let dir = PathBuf::from(dir);
        return if has(&dir) {
            Ok(dir)
        } else {
            Err(Failure::usage(format!(
                "ROCE_LIB_DIR={} holds no libibverbs.so and librdmacm.so",
                dir.display()
            )))
        };
    }
    let exe = std::env::current_exe().map_err(|e| Failure::new(format!("where am I: {e}")))?;
    let bin = exe.parent().unwrap_or(Path::new("."));
    let candidates = [bin.to_path_buf(), bin.join("deps"), bin.join("../lib/roce")];
    // Cargo leaves a build in both the target directory and its deps/ (`cargo build` of the
    // crate, and a build of the tests that depend on it): the newer one is this source's.
    let built = |d: &PathBuf| {
        std::fs::metadata(d.join("libibverbs.so"))
            .and_then(|m| m.modified())
            .ok()
    };
    candidates
        .into_iter()
        .filter(|d| has(d))
        .max_by_key(built)
        .ok_or_else(|| {
            Failure::new(format!(
                "cannot find our libibverbs.so and librdmacm.so beside {} (build them with \
             `cargo build -p roce-libverbs -p roce-librdmacm`, or set ROCE_LIB_DIR)",
                exe.display()
            ))
        })
}

/// A directory of `libibverbs.so.1` and `librdmacm.so.1` (the sonames programs ask for)
/// pointing at ours; removed when dropped.
struct SonameDir(PathBuf);

impl SonameDir {
    fn new(libs: &Path) -> Result<SonameDir, Failure> {
        let base = host::socket_dir();
        std::fs::create_dir_all(&base)
            .and_then(|()| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o700))
            })
            .map_err(|e| Failure::new(format!("cannot make {}: {e}", base.display())))?;
        let dir = base.join(format!("run-{}", std::process::id()));
        let made = std::fs::create_dir_all(&dir).and_then(|()| {
            for (soname, file) in [
                ("libibverbs.so.1", "libibverbs.so"),
                ("librdmacm.so.1", "librdmacm.so"),
            ] {
                let link = dir.join(soname);
                let _ = std::fs::remove_file(&link);
                std::os::unix::fs::symlink(libs.join(file), link)?;
            }
            Ok(())
        });
        let dir = SonameDir(dir);
        made.map_err(|e| Failure::new(format!("cannot make {}: {e}", dir.0.display())))?;
        Ok(dir)
    }
}

impl Drop for SonameDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A NIC process started for the program; stopped (SIGTERM, by its PID) when dropped.
struct OwnNic(Child);

impl OwnNic {
    fn start(name: &str, ip: &str, link: &str) -> Result<OwnNic, Failure> {
        let exe = std::env::current_exe().map_err(|e| Failure::new(format!("where am I: {e}")))?;
        let child = Command::new(exe)
            .args(["nic", "--name", name, "--ip", ip, "--link", link])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .map_err(|e| Failure::new(format!("cannot start the NIC {name}: {e}")))?;
        let mut nic = OwnNic(child);
        // Bounded: a NIC that is not ready within 10 s has failed (its error is on stderr).
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if host::connect(name).is_ok() {
                return Ok(nic);
            }
            if let Ok(Some(status)) = nic.0.try_wait() {
                return Err(Failure::new(format!(
                    "the NIC {name} did not start ({status})"
                )));
            }
            if Instant::now() > deadline {
                return Err(Failure::new(format!(
                    "the NIC {name} was not ready within 10 s"
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for OwnNic {
    fn drop(&mut self) {
        // SAFETY: kill has no memory preconditions; the PID is our own child's, not reaped yet.
        unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let libs = library_dir()?;
    let (nic, _own) = match (&args.nic, &args.ip, &args.link) {
        (Some(nic), _, _) => {
            host::check_name(nic).map_err(|e| Failure::usage(e.to_string()))?;
            (Some(nic.clone()), None)
        }
        (None, Some(ip), Some(link)) => {
            let name = args
                .name
                .clone()
                .unwrap_or_else(|| format!("run{}", std::process::id()));
            host::check_name(&name).map_err(|e| Failure::usage(e.to_string()))?;
            let own = OwnNic::start(&name, ip, link)?;
            (Some(name), Some(own))
        }
        _ => (None, None),
    };
    let sonames = SonameDir::new(&libs)?;
    let mut path = OsString::from(&sonames.0);
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH").filter(|p| !p.is_empty()) {
        path.push(":");
        path.push(old);
    }
    let (program, rest) = args.program.split_first().expect("clap requires a program");
    let mut command = Command::new(program);
    command.args(rest).env("LD_LIBRARY_PATH", path);
    match &nic {
        Some(nic) => command.env(ibverbs_env::NIC, nic),
        None => command.env_remove(ibverbs_env::NIC),
    };
    let status = command
        .status()
        .map_err(|e| Failure::usage(format!("cannot run {}: {e}", program.to_string_lossy())))?;
    Ok(match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(code.clamp(0, 255) as u8),
        (None, Some(signal)) => ExitCode::from((128 + signal).clamp(0, 255) as u8),
        _ => ExitCode::FAILURE,
    })
}

/// The environment our libibverbs reads (kept here to avoid linking the library into roce).
mod ibverbs_env {
    /// The NICs the program sees (comma-separated).
    pub const NIC: &str = "ROCE_NIC";
}

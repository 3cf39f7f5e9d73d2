//! `roce decode --json` against tshark on the same million packets, measured in the same run:
//! the ratio is the figure (target: at least 60× a four-field `tshark -T fields`), beside the
//! decoder on one thread (what the other cores add) and its peak memory on captures of 100,000
//! and 1,000,000 packets (target: flat, the same for both).
//!
//! `cargo bench -p roce-cli --bench decode` (`-- --packets N` for another size). Each figure is
//! the best of three runs, in wall-clock time and in CPU time; on a machine shared with other
//! work the wall-clock ratio is the one that moves. Without tshark, only our own figures print.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use roce_tests::bundled;
use roce_wire::capture::Writer;

/// The fields tshark prints: as `roce decode --json` does, it must dissect every packet.
const TSHARK_FIELDS: [&str; 4] = [
    "frame.number",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
];
const RUNS: usize = 3;

/// One process's run: wall-clock and CPU time, and its peak resident memory.
#[derive(Clone, Copy)]
struct Run {
    wall: Duration,
    cpu: Duration,
    max_rss_kib: u64,
}

fn main() {
    let packets = std::env::args()
        .skip_while(|a| a != "--packets")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(1_000_000usize);
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("decode-bench");
    std::fs::create_dir_all(&dir).expect("a directory for the captures");
    let big = capture(&dir, packets);
    let small = capture(&dir, packets / 10);
    let roce = env!("CARGO_BIN_EXE_roce");
    let decode = |file: &Path, threads: Option<usize>| {
        let mut cmd = Command::new(roce);
        cmd.args(["decode", "--json"]);
        if let Some(n) = threads {
            cmd.args(["--threads", &n.to_string()]);
        }
        cmd.arg(file);
        cmd
    };
    let all = best(|| decode(&big, None));
    let one = best(|| decode(&big, Some(1)));
    let small_run = best(|| decode(&small, None));
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("roce decode --json, {packets} packets ({cores} cores):");
    report("every core", &all, packets);
    report("one thread", &one, packets);
    println!(
        "  the other cores make it {:.2}× faster (wall clock)",
        ratio(one.wall, all.wall)
    );
    println!(
        "  peak memory: {} KiB for {} packets, {} KiB for {packets} (×{:.2}; target: flat)",
        small_run.max_rss_kib,
        packets / 10,
        all.max_rss_kib,
        all.max_rss_kib as f64 / small_run.max_rss_kib.max(1) as f64
    );
    let tshark_here = Command::new("tshark")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !tshark_here {
        println!("tshark is not installed: no ratio");
        return;
    }
    let tshark = best(|| {
        let mut cmd = roce_tests::tshark_fields(&big);
        for field in TSHARK_FIELDS {
            cmd.args(["-e", field]);
        }
        cmd
    });
    println!("tshark -T fields with {} fields:", TSHARK_FIELDS.len());
    report("tshark", &tshark, packets);
    let wall = ratio(tshark.wall, all.wall);
    println!(
        "roce decode --json is {wall:.0}× tshark in wall-clock time ({:.0}× in CPU time); target 60×: {}",
        ratio(tshark.cpu, all.cpu),
        if wall >= 60.0 { "met" } else { "NOT met" }
    );
}

/// A capture of `packets` of the bundled every-opcode frames, made once.
fn capture(dir: &Path, packets: usize) -> PathBuf {
    let path = dir.join(format!("{packets}.pcap"));
    if path.exists() {
        return path;
    }
    let mut writer = Writer::new(std::io::BufWriter::new(
        std::fs::File::create(&path).expect("creating the capture"),
    ))
    .expect("a pcap header");
    for (i, frame) in bundled::endless_frames().take(packets).enumerate() {
        writer
            .write(bundled::time(i), &frame)
            .expect("writing the capture");
    }
    writer
        .into_inner()
        .into_inner()
        .expect("flushing the capture");
    path
}

/// The best of [`RUNS`] runs of the command `make` gives, output discarded.
fn best(make: impl Fn() -> Command) -> Run {
    (0..RUNS)
        .map(|_| measure(make()))
        .reduce(|a, b| Run {
            wall: a.wall.min(b.wall),
            cpu: a.cpu.min(b.cpu),
            max_rss_kib: a.max_rss_kib.max(b.max_rss_kib),
        })
        .expect("at least one run")
}

// The child is waited for with wait4, which also gives its resource usage; `Child::wait`
// would not.
#[allow(clippy::zombie_processes)]
fn measure(mut cmd: Command) -> Run {
    let start = Instant::now();
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the decoder");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed memory is a valid `rusage` (integers only).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (the `Child` is never waited on), and the
    // pointers are to live locals of the right types.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    assert_eq!(waited, pid, "waiting for the decoder");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the decoder failed: {status:#x}"
    );
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    Run {
        wall,
        cpu: time(usage.ru_utime) + time(usage.ru_stime),
        max_rss_kib: usage.ru_maxrss as u64,
    }
}

fn report(what: &str, run: &Run, packets: usize) {
    println!(
        "  {what:<11} {:>8.3} s wall ({:>5.2} M packets/s), {:>8.3} s CPU, {:>7} KiB peak",
        run.wall.as_secs_f64(),
        packets as f64 / run.wall.as_secs_f64() / 1e6,
        run.cpu.as_secs_f64(),
        run.max_rss_kib
    );
}

fn ratio(slow: Duration, fast: Duration) -> f64 {
    slow.as_secs_f64() / fast.as_secs_f64().max(1e-9)
}

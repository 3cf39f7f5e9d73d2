//! A fixed amount of RDMA WRITE work between two NICs in this process, for instruction counts
//! that compare run to run (the shared CPUs blur times, not counts):
//!
//! ```text
//! cargo build --release -p roce-nic --example write_profile
//! valgrind --tool=callgrind target/release/examples/write_profile 1M 200
//! valgrind --tool=callgrind target/release/examples/write_profile 64 20000
//! ```
//! Arguments: message size (as `roce bench --size`), message count and, optionally, a number
//! of QP pairs to share the load as `roce bench --qps` shares it (`write_profile 1M 400 64`). The in-flight depth and
//! batching are `roce bench`'s: 16 in flight, one by one, for large messages; 512 in flight in
//! batches of 32 for messages under 4 KiB.
//!
//! It also prints the CPU time each thread of the process (the host thread posting and polling,
//! the two NICs' engines) spent on the counted messages: on a shared machine, where wall-clock
//! rates wander, how the two cores' time divides between the threads still shows; and how
//! often each thread went to sleep (its voluntary context switches: for the host thread, its
//! waits on the completion queue).

use std::collections::BTreeMap;

use roce_nic::bench::{self, qps::ManyQps, Until};
use roce_nic::counters::Snapshot;
use roce_nic::testbed;
use roce_nic::verbs::{Mtu, QpType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size = roce_hostmem::parse_size(&args.next().unwrap_or_else(|| "1M".into()))?;
    let messages: u64 = args.next().unwrap_or_else(|| "100".into()).parse()?;
    let qps: Option<usize> = args.next().map(|n| n.parse()).transpose()?;
    let (depth, batch) = if size >= 4096 { (16, 1) } else { (512, 32) };
    let (t, (cpu, sleeps), (c, target)) = match qps {
        None => one_qp(size, depth, batch, messages)?,
        Some(n) => many_qps(n, size, depth, batch, messages)?,
    };
    // The target sends nothing but acknowledgements: how well they were coalesced.
    let acks = target.tx_frames;
    println!(
        "{} WRITEs of {size} B in {:.2?}: {:.2} Gbit/s, {:.3} M messages/s; {} retransmitted, {} tail probes; {acks} ACKs ({:.3} per message)",
        t.messages,
        t.elapsed,
        t.gbit_per_s(),
        t.messages_per_s() / 1e6,
        c.retransmitted_packets,
        c.tail_probes,
        acks as f64 / t.messages.max(1) as f64
    );
    for (name, spent) in &cpu {
        let slept = sleeps.get(name).copied().unwrap_or(0);
        println!(
            "  {name}: {:.2} s of CPU, {:.0} ns per message; slept {slept} times ({:.3} per message)",
            *spent as f64 / ticks_per_second(),
            *spent as f64 / ticks_per_second() * 1e9 / t.messages as f64,
            slept as f64 / t.messages as f64
        );
    }
    Ok(())
}

/// What a counted run measured: its throughput, each thread's CPU ticks and sleeps, and the
/// counters the run added on the writer and on the target.
type Measured = (
    bench::Throughput,
    (BTreeMap<String, u64>, BTreeMap<String, u64>),
    (Snapshot, Snapshot),
);

/// The counted run on one QP pair, after a warm-up.
fn one_qp(
    size: usize,
    depth: usize,
    batch: usize,
    messages: u64,
) -> Result<Measured, Box<dyn std::error::Error>> {
    let pair = testbed::pair(QpType::Rc, Mtu::M4096, 64 << 20)?;
    // Warm-up: buffers stocked, pages touched, before the counted run.
    bench::write_messages(pair.initiator(), size, depth, batch, depth as u64)?;
    let counters = || (pair.dev_a.counters(), pair.dev_b.counters());
    let (before, threads) = (counters(), (thread_cpu(), thread_sleeps()));
    let t = bench::write_messages(pair.initiator(), size, depth, batch, messages)?;
    Ok((t, since(threads), added(before, counters())))
}

/// The counted run over `n` QP pairs sharing the load, as `roce bench --qps` runs it, after a
/// warm-up.
fn many_qps(
    n: usize,
    size: usize,
    depth: usize,
    batch: usize,
    messages: u64,
) -> Result<Measured, Box<dyn std::error::Error>> {
    // Room for the 64-byte run's share of each QP, as `roce bench --qps` gives it.
    let send_depth = 512usize.div_ceil(n).max(64).next_power_of_two().min(1024);
    let qps = ManyQps::start(n, send_depth, Mtu::M4096, 1)?;
    qps.writes(size, depth, batch, Until::Posted(depth as u64))?;
    let (before, threads) = (qps.counters(), (thread_cpu(), thread_sleeps()));
    let t = qps.writes(size, depth, batch, Until::Posted(messages))?;
    Ok((t, since(threads), added(before, qps.counters())))
}

/// The ticks each thread spent and the times it slept since `before` (both by thread name).
fn since(
    before: (BTreeMap<String, u64>, BTreeMap<String, u64>),
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let grown = |before: BTreeMap<String, u64>, mut after: BTreeMap<String, u64>| {
        for (name, n) in after.iter_mut() {
            *n -= before.get(name).copied().unwrap_or(0).min(*n);
        }
        after
    };
    (
        grown(before.0, thread_cpu()),
        grown(before.1, thread_sleeps()),
    )
}

/// The counters that grew between two snapshots of the writer's and the target's.
fn added(before: (Snapshot, Snapshot), after: (Snapshot, Snapshot)) -> (Snapshot, Snapshot) {
    let minus = |a: Snapshot, b: Snapshot| Snapshot {
        retransmitted_packets: a.retransmitted_packets - b.retransmitted_packets,
        tail_probes: a.tail_probes - b.tail_probes,
        tx_frames: a.tx_frames - b.tx_frames,
        ..a
    };
    (minus(after.0, before.0), minus(after.1, before.1))
}

/// Voluntary context switches of each thread of this process by name, from
/// /proc/self/task/*/status (empty where there is no /proc).
fn thread_sleeps() -> BTreeMap<String, u64> {
    let mut sleeps = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return sleeps;
    };
    for task in tasks.flatten() {
        let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .map(|v| v.trim().to_string())
        };
        let (Some(name), Some(count)) = (field("Name:"), field("voluntary_ctxt_switches:")) else {
            continue;
        };
        *sleeps.entry(name).or_default() += count.parse::<u64>().unwrap_or(0);
    }
    sleeps
}

/// User plus system CPU time of each thread of this process by name, in clock ticks, from
/// /proc/self/task (empty where there is no /proc).
fn thread_cpu() -> BTreeMap<String, u64> {
    let mut cpu = BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return cpu;
    };
    for task in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // "tid (comm) state ..." — the name may hold spaces, so fields count from its ")".
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<u64>().ok())
                .unwrap_or(0)
        };
        *cpu.entry(stat[open + 1..close].to_string()).or_default() += ticks(11) + ticks(12);
    }
    cpu
}

fn ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

//! A fixed amount of RDMA WRITE work between two NICs in this process, for instruction counts
//! that compare run to run (the shared CPUs blur times, not counts):
//!
//! ```text
//! cargo build --release -p roce-nic --example write_profile
//! valgrind --tool=callgrind target/release/examples/write_profile 1M 200
//! valgrind --tool=callgrind target/release/examples/write_profile 64 20000
//! ```
//! Arguments: message size (as `roce bench --size`) and message count. The in-flight depth and
//! batching are `roce bench`'s: 16 in flight, one by one, for large messages; 512 in flight in
//! batches of 32 for messages under 4 KiB.
//!
//! It also prints the CPU time each thread of the process (the host thread posting and polling,
//! the two NICs' engines) spent on the counted messages: on a shared machine, where wall-clock
//! rates wander, how the two cores' time divides between the threads still shows; and how
//! often each thread went to sleep (its voluntary context switches: for the host thread, its
//! waits on the completion queue).

use std::collections::BTreeMap;

use roce_nic::bench;
use roce_nic::testbed;
use roce_nic::verbs::{Mtu, QpType};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size = roce_hostmem::parse_size(&args.next().unwrap_or_else(|| "1M".into()))?;
    let messages: u64 = args.next().unwrap_or_else(|| "100".into()).parse()?;
    let (depth, batch) = if size >= 4096 { (16, 1) } else { (512, 32) };
    let pair = testbed::pair(QpType::Rc, Mtu::M4096, 64 << 20)?;
    // Warm-up: buffers stocked, pages touched, before the counted run.
    bench::write_messages(pair.initiator(), size, depth, batch, depth as u64)?;
    let acks_before = pair.dev_b.counters().tx_frames;
    let before = thread_cpu();
    let sleeps_before = thread_sleeps();
    let t = bench::write_messages(pair.initiator(), size, depth, batch, messages)?;
    let after = thread_cpu();
    let sleeps_after = thread_sleeps();
    let c = pair.dev_a.counters();
    // The target sends nothing but acknowledgements: how well they were coalesced.
    let acks = pair.dev_b.counters().tx_frames - acks_before;
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
    for (name, ticks) in &after {
        let spent = ticks - before.get(name).copied().unwrap_or(0);
        let sleeps = sleeps_after.get(name).copied().unwrap_or(0)
            - sleeps_before.get(name).copied().unwrap_or(0);
        println!(
            "  {name}: {:.2} s of CPU, {:.0} ns per message; slept {sleeps} times ({:.3} per message)",
            spent as f64 / ticks_per_second(),
            spent as f64 / ticks_per_second() * 1e9 / t.messages as f64,
            sleeps as f64 / t.messages as f64
        );
    }
    Ok(())
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

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
    let t = bench::write_messages(pair.initiator(), size, depth, batch, messages)?;
    let c = pair.dev_a.counters();
    println!(
        "{} WRITEs of {size} B in {:.2?}: {:.2} Gbit/s, {:.3} M messages/s; {} retransmitted, {} tail probes",
        t.messages,
        t.elapsed,
        t.gbit_per_s(),
        t.messages_per_s() / 1e6,
        c.retransmitted_packets,
        c.tail_probes
    );
    Ok(())
}

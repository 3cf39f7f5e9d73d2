//! Two processes, one region: what the NIC writes through a registration the host sees, byte for
//! byte, and atomics from both sides on one word lose nothing.
//!
//! The other process is this test binary again, running the ignored test `child_process` with
//! its task in environment variables.

use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, MrKeys, MrTable, PdId, Region, VaBase};

const TASK: &str = "ROCE_HOSTMEM_CHILD_TASK";
const REGION: &str = "ROCE_HOSTMEM_CHILD_REGION";
const REGION_LEN: usize = 64 * 1024;
/// Where the pattern goes: region offset, and its length.
const PATTERN_OFFSET: usize = 4096 + 100;
const PATTERN_LEN: usize = 5000;
const ATOMIC_ROUNDS: u64 = 50_000;
/// Offsets of the words the atomic test uses.
const READY: u64 = 0;
const GO: u64 = 8;
const COUNTER: u64 = 64;

fn pattern() -> Vec<u8> {
    (0..PATTERN_LEN).map(|i| (i * 131 + 7) as u8).collect()
}

/// Registers the whole region zero-based with every right, as the NIC would.
fn register_all(region: &Arc<Region>) -> (MrTable, PdId, MrKeys) {
    let mut table = MrTable::new();
    let pd = table.alloc_pd();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    let keys = table
        .register(pd, region.clone(), 0, region.len(), all, VaBase::Zero)
        .unwrap();
    (table, pd, keys)
}

/// Writes the pattern through a registration of the region, as an RDMA WRITE would.
fn write_pattern_through_an_mr(region: &Arc<Region>) {
    let (table, pd, keys) = register_all(region);
    let place = table
        .resolve_remote(
            keys.rkey,
            pd,
            PATTERN_OFFSET as u64,
            PATTERN_LEN as u64,
            Access::REMOTE_WRITE,
        )
        .unwrap();
    place.write(0, &pattern()).unwrap();
}

/// Checks the region holds the pattern at its place and zeros everywhere else.
fn assert_exactly_the_pattern(region: &Region) {
    let mut all = vec![0; region.len()];
    region.read(0, &mut all).unwrap();
    let range = PATTERN_OFFSET..PATTERN_OFFSET + PATTERN_LEN;
    assert_eq!(all[range.clone()], pattern()[..]);
    let stray = (0..all.len()).find(|&i| all[i] != 0 && !range.contains(&i));
    assert_eq!(stray, None, "a byte outside the written range changed");
}

/// Runs `task` in a child process on the region `name` and returns what it printed.
fn run_child(task: &str, name: &str) -> Output {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["child_process", "--exact", "--ignored", "--nocapture"])
        .env(TASK, task)
        .env(REGION, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains(&format!("child done: {task}")),
        "child {task} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn unique(label: &str) -> String {
    format!("test-{}-{label}", std::process::id())
}

#[test]
fn the_child_sees_exactly_what_the_parent_wrote_through_an_mr() {
    let name = unique("parent-writes");
    let region = Arc::new(Region::create(&name, REGION_LEN).unwrap());
    write_pattern_through_an_mr(&region);
    run_child("expect-pattern", &name);
}

#[test]
fn the_parent_sees_exactly_what_the_child_wrote_through_an_mr() {
    let name = unique("child-writes");
    let region = Region::create(&name, REGION_LEN).unwrap();
    run_child("write-pattern", &name);
    assert_exactly_the_pattern(&region);
}

#[test]
fn atomics_from_two_processes_on_one_word_are_exact() {
    let name = unique("atomics");
    let region = Arc::new(Region::create(&name, REGION_LEN).unwrap());
    let child = std::thread::spawn({
        let name = name.clone();
        move || run_child("count", &name)
    });
    let (table, pd, keys) = register_all(&region);
    let word = |va| table.resolve_atomic(keys.rkey, pd, va).unwrap();
    wait_for(|| word(READY).fetch_and_add(0) == 1, "the child to attach");
    word(GO).fetch_and_add(1);
    count(&table, pd, keys.rkey);
    child.join().unwrap();
    assert_eq!(word(COUNTER).fetch_and_add(0), 2 * 2 * ATOMIC_ROUNDS);
}

/// Adds 1 to the counter ATOMIC_ROUNDS times by fetch-and-add and as often by compare-and-swap.
fn count(table: &MrTable, pd: PdId, rkey: u32) {
    let counter = table.resolve_atomic(rkey, pd, COUNTER).unwrap();
    for _ in 0..ATOMIC_ROUNDS {
        counter.fetch_and_add(1);
        let mut seen = counter.fetch_and_add(0);
        loop {
            let original = counter.compare_and_swap(seen, seen + 1);
            if original == seen {
                break;
            }
            seen = original;
        }
    }
}

fn wait_for(condition: impl Fn() -> bool, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !condition() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

#[test]
#[ignore = "the other process of the cross-process tests, which start it themselves"]
fn child_process() {
    let task = std::env::var(TASK).expect("started by a cross-process test");
    let region = Arc::new(Region::attach(&std::env::var(REGION).unwrap()).unwrap());
    match task.as_str() {
        "expect-pattern" => assert_exactly_the_pattern(&region),
        "write-pattern" => write_pattern_through_an_mr(&region),
        "count" => {
            let (table, pd, keys) = register_all(&region);
            let word = |va| table.resolve_atomic(keys.rkey, pd, va).unwrap();
            word(READY).fetch_and_add(1);
            wait_for(|| word(GO).fetch_and_add(0) == 1, "the parent to start");
            count(&table, pd, keys.rkey);
        }
        other => panic!("unknown task {other}"),
    }
    println!("child done: {task}");
}

//! The transport in simulated time: two NICs and their hosts in one thread, a seeded faulty
//! wire between them, no thread, sleep or wall clock (see [`world`]).
//!
//! - `random_mixes_under_faults` (proptest): random mixes of SEND, WRITE, READ and atomics,
//!   with immediates, sizes from 0 to many packets, PSNs that wrap at 2^24 and receivers that
//!   are not ready, under random loss, duplication, reordering and corruption: every request
//!   completes exactly once and in order, and memory equals the model ([`workload`]). A
//!   failure prints the case and the one command that replays it.
//! - `replay`: runs the case in `ROCE_SIM_CASE` (what a failure prints); with
//!   `ROCE_SIM_TRACE` set, a failure ends with the last events of both nodes.
//! - `throughput` (ignored: a measurement): a million messages under faults, with the rate.
//! - [`conformance`]: scripted peers, one IBTA rule (or rxe behaviour) each.
//! - [`low_timer`]: IRN's two-level retransmission timer, scripted and in random runs.
//! - [`goodput`]: `roce bench`'s goodput run on a wire with a line rate, fault-free and under
//!   loss, as a ratio the loss window's tests pin.
//!
//! The simulator is test code, outside the product crate: it drives the transport only
//! through the API the engine uses (fetch, `transport::{on_packet, poll, on_timers}`,
//! settle), so what it proves holds for the engine's transport, and nothing of it ships.

mod conformance;
mod goodput;
mod low_timer;
mod peer;

mod workload;
mod world;

use proptest::prelude::*;
use roce_nic::verbs::Mtu;
use workload::Case;

fn mtu() -> impl Strategy<Value = Mtu> {
    prop_oneof![Just(Mtu::M256), Just(Mtu::M1024), Just(Mtu::M4096)]
}

/// A starting PSN: anywhere, or just before the 24-bit wrap.
fn psn() -> impl Strategy<Value = u32> {
    prop_oneof![0u32..0x100_0000, (0u32..200).prop_map(|d| 0xff_ffff - d)]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (any::<u64>(), 1usize..60, mtu(), psn()),
        (0.0..0.15f64, 0.0..0.05f64, 0.0..0.03f64, 0.0..0.2f64),
        (any::<bool>(), 1usize..16, 1u8..=16, any::<bool>()),
        any::<bool>(),
    )
        .prop_map(
            |(
                (seed, ops, mtu, psn),
                (loss, duplicate, corrupt, reorder),
                (rnr, window, rd, both_ways),
                rto_low,
            )| {
                Case {
                    seed,
                    ops,
                    mtu,
                    psn,
                    loss,
                    duplicate,
                    corrupt,
                    reorder,
                    rnr,
                    window,
                    max_rd_atomic: rd,
                    both_ways,
                    rto_low,
                }
            },
        )
}

/// Cases per run: a few seconds in a debug build (`PROPTEST_CASES` asks for more).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        // A failing case runs until it is stuck: keep shrinking to a minute.
        max_shrink_time: 60_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_mixes_under_faults(case in case()) {
        if let Err(e) = workload::run(&case) {
            prop_assert!(false, "{e}\ncase: {case}\nreplay: {}", case.replay_command());
        }
    }
}

/// Runs the case a failure printed: `ROCE_SIM_CASE='seed=…' cargo test -p roce-nic --test
/// sim -- --exact replay --nocapture`. Without the variable it runs a fixed case, so it always
/// runs.
#[test]
fn replay() {
    let text = std::env::var("ROCE_SIM_CASE").unwrap_or_else(|_| {
        "seed=0x1,ops=200,mtu=256,psn=0xffffc0,loss=0.05,dup=0.02,corrupt=0.01,reorder=0.1,rnr=true,window=8,rd=4,both=true".into()
    });
    let case: Case = text.parse().expect("a case");
    match workload::run(&case) {
        Ok(outcome) => println!("{case}: {outcome:?}"),
        Err(e) => panic!("{e}\ncase: {case}"),
    }
}

/// A case is a function of its parameters alone: run twice, it takes the same course (the
/// same frames, faults, retransmissions and simulated time), so the command a failure prints
/// replays it exactly.
#[test]
fn a_case_runs_the_same_every_time() {
    let case: Case = "seed=0x77,ops=80,mtu=256,psn=0xffff00,loss=0.05,dup=0.03,corrupt=0.02,reorder=0.1,rnr=true,window=6,rd=3,both=true"
        .parse()
        .expect("a case");
    let runs = [workload::run(&case), workload::run(&case)].map(|r| {
        let o = r.expect("the case passes");
        (
            o.simulated,
            o.frames,
            o.lost,
            o.retransmitted,
            o.rnr_naks,
            o.go_backs,
        )
    });
    assert_eq!(runs[0], runs[1]);
    assert!(
        runs[0].2 > 0 && runs[0].3 > 0,
        "faults happened: {:?}",
        runs[0]
    );
}

/// How fast the simulator runs: `ROCE_SIM_MESSAGES` messages (a million by default) under
/// faults, in cases of 2000 messages from consecutive seeds. Run with
/// `cargo test -p roce-nic --test sim --release throughput -- --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a test"]
fn throughput() {
    let total: usize = std::env::var("ROCE_SIM_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let per_case = 2000;
    let start = std::time::Instant::now();
    let (mut messages, mut frames, mut lost, mut retransmitted) = (0, 0, 0, 0);
    let (mut simulated, mut rnr_naks, mut go_backs) = (0, 0, 0);
    let mut seed = 1u64;
    while messages < total {
        // Every other case sends both ways: half the messages each way.
        let ways = if seed % 2 == 0 { 2 } else { 1 };
        let case = Case {
            seed,
            ops: (per_case.min(total - messages) / ways).max(1),
            mtu: [Mtu::M256, Mtu::M1024, Mtu::M4096][seed as usize % 3],
            psn: 0xff_ffff - (seed as u32 % 100),
            loss: 0.02,
            duplicate: 0.01,
            corrupt: 0.005,
            reorder: 0.05,
            rnr: seed % 4 == 0,
            window: 16,
            max_rd_atomic: 8,
            both_ways: ways == 2,
            rto_low: seed % 2 == 1,
        };
        let outcome = workload::run(&case)
            .unwrap_or_else(|e| panic!("{e}\nreplay: {}", case.replay_command()));
        messages += outcome.messages;
        frames += outcome.frames;
        lost += outcome.lost;
        retransmitted += outcome.retransmitted;
        simulated += outcome.simulated;
        rnr_naks += outcome.rnr_naks;
        go_backs += outcome.go_backs;
        seed += 1;
    }
    let took = start.elapsed();
    println!(
        "{messages} messages ({frames} frames, {lost} lost, {retransmitted} packets sent again, \
         {rnr_naks} RNR NAKs, {go_backs} go-backs, {:.1} s simulated) in {:.2} s: {:.0} \
         simulated messages per second",
        simulated as f64 / 1e9,
        took.as_secs_f64(),
        messages as f64 / took.as_secs_f64()
    );
}

//! The error paths against Soft-RoCE, both ways, in one guest boot: our NIC provokes each
//! error at rxe and rxe provokes it at our NIC; each case checks the NAK the responder put on
//! the wire (decoded from our NIC's capture with roce-wire) and the completion status the
//! requester's program reports.
//!
//! rdma-core's tools never do anything wrong, so the guest runs `rxe-agent`
//! (tests/interop/guest/rxe-agent.c, compiled against the guest's libibverbs when the image is
//! built): a verbs program that this test drives over TCP through our NIC's own IP stack, one
//! command a line ("qp rc 1", "post write RKEY VA LEN", "poll 5000", ...). Every case uses
//! fresh QPs on both sides, since most errors leave the QPs in the error state.
//!
//! Where rxe and the IBTA spec part, the case's documentation says which one the test expects,
//! as docs/rxe-differences.md does: rxe refuses to post a misaligned atomic (so that case
//! cannot be provoked at us), and Linux 6.1's rxe answers a READ over 2^31 bytes with a
//! remote access error, where our NIC (as the spec and newer kernels) answers invalid request.
//! Retry counts are 2, not 7: at 7 rxe retries for ever where the spec gives up.

// Only tests/softroce_errors.rs runs these; the other suites share the module.
#![allow(dead_code)]

mod agent;
mod cases;
mod on_wire;
mod ours;

// What the submodules use, with `use super::*`: they share one set of names.
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region};
use roce_nic::host::SocketBackend;
use roce_nic::verbs::{
    AddressVector, Backend, CompletionQueue, Context, Gid, MemoryRegion, Mtu, ProtectionDomain,
    QpAttr, QpCap, QpState, QpType, QueuePair, RecvWr, SendFlags, SendOp, SendWr, UdDest, Wc,
    WcStatus,
};
use roce_wire::aeth::{NakCode, Syndrome};
use roce_wire::{Frame, NetworkRepr};

use super::guest::{self, Console, GUEST_IP, GUEST_MAC, NIC_IP, NIC_MAC};
use super::{output_dir, wire, ONE_GUEST};
use crate::support::{free_udp_port, Env, Nic, Proc};
use agent::{Agent, Remote};
use cases::CASES;
use on_wire::{check, frames_of, OnWire};
use ours::{Local, Ours};

/// Our NIC's TCP port the agent connects to.
const AGENT_PORT: u16 = 19300;
/// The longest the whole boot may take: booting, every case, and the agent's goodbye.
const BOOT_LIMIT_S: u64 = 300;
/// Bytes of the agent's registered buffer (tests/interop/guest/rxe-agent.c: BUF_SIZE), and of
/// ours.
const AGENT_BUF: u64 = 8192;
const OUR_BUF: usize = 4096;
/// GID index 1 on both sides: the IPv4 address's RoCEv2 GID.
const GID_INDEX: u8 = 1;
/// The path MTU of a 1500-byte link.
const MTU: Mtu = Mtu::M1024;
/// Q_Keys of the UD cases (bit 31 clear: a set bit 31 means "the sender's own Q_Key").
const QKEY: u32 = 0x1111_1111;
const WRONG_QKEY: u32 = 0x2222_2222;
/// The retry counts every requester in these cases gets: small, so that exhaustion comes
/// quickly, and not 7, which rxe takes as "for ever" for both counts.
const RETRY_CNT: u8 = 2;
const RNR_RETRY: u8 = 2;
/// timeout 10: 4.096 µs × 2^10 ≈ 4 ms before a retransmission.
const TIMEOUT: u8 = 10;
/// The smallest RNR timer (0.01 ms) the responders ask for.
const MIN_RNR_TIMER: u8 = 1;
/// How long a completion may take to come (an error after 3 retries of 4 ms each, under TCG).
const COMPLETION_WAIT: Duration = Duration::from_secs(20);
/// One case's outcome, for the table, and its expectations on the wire.
struct Case {
    name: &'static str,
    /// Whether rxe is the requester (it provokes the error at us).
    rxe_provokes: bool,
    result: String,
    wire: Vec<OnWire>,
}

/// Boots the guest with the agent, runs every case in both directions, and checks the
/// capture. Skips (loudly) where no guest can run.
pub fn run() {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    if !guest::ready() {
        return;
    }
    let started = Instant::now();
    let dir = output_dir("errors");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = Env::new("errs");
    let (ours_end, guest_end) = (
        format!("127.0.0.1:{}", free_udp_port()),
        format!("127.0.0.1:{}", free_udp_port()),
    );
    let pcap = dir.join("nic.pcap");
    let nic = Nic {
        name: env.name("n"),
        ip: format!("{NIC_IP}/24"),
        link: format!("cable:{ours_end},{guest_end}"),
        mtu: 1500,
        neighbours: Vec::new(),
        pcap: Some(pcap.clone()),
        netns: None,
        extra: vec!["--rate".into(), super::LINE_RATE.into()],
    };
    let nic_proc = env.nic(&nic);
    let mut ours = Ours::open(&env, &nic.name, &guest_end);
    let listener = ours.ctx.tcp_listen(AGENT_PORT).unwrap();
    let mut vm = boot(&dir, &ours_end, &guest_end);
    let (stream, _) = listener
        .accept_timeout(Duration::from_secs(BOOT_LIMIT_S / 2))
        .expect("the guest's agent connected");
    let booted = started.elapsed();
    let mut agent = Agent::new(stream);

    let cases: Vec<Case> = CASES
        .iter()
        .map(|(name, rxe_provokes, case)| {
            let (result, wire) = case(&mut agent, &mut ours);
            Case {
                name,
                rxe_provokes: *rxe_provokes,
                result,
                wire,
            }
        })
        .collect();
    assert_eq!(agent.ask("quit"), "bye");
    let status = vm.wait(Duration::from_secs(BOOT_LIMIT_S));
    let console_text = vm.drain_stdout();
    std::fs::write(dir.join("console.log"), &console_text).unwrap();
    let console = Console::new(&console_text);
    drop(ours);
    // The NIC flushes its capture as it stops.
    drop(nic_proc);

    let mut failures = Vec::new();
    if !status.success() || !console.lines.iter().any(|l| l == "AGENT-END rc=0") {
        failures.push(format!("the guest's agent did not end well ({status})"));
    }
    let frames = frames_of(&pcap);
    let mut table = String::new();
    for case in &cases {
        let problems: Vec<String> = case
            .wire
            .iter()
            .filter_map(|expect| check(expect, &frames).err())
            .collect();
        table.push_str(&format!(
            "  {:6} {:38} {}\n",
            if problems.is_empty() { "ok" } else { "FAILED" },
            format!(
                "{} ({})",
                case.name,
                if case.rxe_provokes {
                    "rxe → us"
                } else {
                    "us → rxe"
                }
            ),
            case.result
        ));
        for problem in problems {
            failures.push(format!("{}: {problem}", case.name));
        }
    }
    let all = wire::inspect(&pcap, NIC_MAC, GUEST_MAC);
    if !all.bad.is_empty() {
        failures.push(format!("rxe sent bad frames: {}", all.bad.join("; ")));
    }
    check_rxe_counters(&console, &frames, &mut failures);
    eprintln!(
        "group errors: {} cases in {:.1} s (guest booted and agent connected after {:.1} s)\n{table}  wire: {} frames; RoCE from us {} (opcodes {:x?}), from rxe {} (opcodes {:x?})",
        cases.len(),
        started.elapsed().as_secs_f64(),
        booted.as_secs_f64(),
        all.frames,
        all.sent_by_us(),
        all.ours.keys().collect::<Vec<_>>(),
        all.sent_by_guest(),
        all.theirs.keys().collect::<Vec<_>>(),
    );
    assert!(
        failures.is_empty(),
        "group errors: {} problem(s) (logs in {}):\n{}",
        failures.len(),
        dir.display(),
        failures.join("\n")
    );
}

/// rxe's own account of the errors (its hw_counters, printed after the script): exactly one
/// transport and one RNR retry exhaustion (its two cases as requester), the RNR NAKs of ours it
/// received in its RNR case, and as many RNR NAKs sent as the capture holds from it.
fn check_rxe_counters(console: &Console, frames: &[(bool, Vec<u8>)], failures: &mut Vec<String>) {
    let rnr_naks_from_rxe = frames
        .iter()
        .filter(|(guest, data)| {
            *guest
                && Frame::parse(data).is_ok_and(|f| {
                    matches!(
                        f.repr.ext.aeth.map(|a| a.syndrome),
                        Some(Syndrome::RnrNak { .. })
                    )
                })
        })
        .count() as u64;
    let counters = console.counters();
    for (name, want) in [
        ("retry_exceeded_err", 1),
        ("retry_rnr_exceeded_err", 1),
        ("rcvd_rnr_err", u64::from(RNR_RETRY) + 1),
        ("send_rnr_err", rnr_naks_from_rxe),
    ] {
        let got = counters.get(name).copied();
        if got != Some(want) {
            failures.push(format!("rxe's counter {name} is {got:?}, not {want}"));
        }
    }
}

/// Boots the guest, whose script runs the agent against our NIC.
fn boot(dir: &Path, ours_end: &str, guest_end: &str) -> Proc {
    let script = dir.join("guest.sh");
    std::fs::write(
        &script,
        format!(
            "timeout {} rxe-agent {NIC_IP} {AGENT_PORT}\necho \"AGENT-END rc=$?\"\n",
            BOOT_LIMIT_S - 30
        ),
    )
    .unwrap();
    let mut cmd = Command::new(guest::harness());
    cmd.args(["run", "--local", guest_end, "--remote", ours_end])
        .args(["--mtu", "1500", "--timeout", &BOOT_LIMIT_S.to_string()])
        .arg("--script")
        .arg(&script)
        .env("CARGO_TARGET_DIR", guest::target_dir());
    Proc::spawn(cmd, false)
}

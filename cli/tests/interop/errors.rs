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
//! remote access error, as our NIC does. Retry counts are 2, not 7: at 7 rxe retries for ever
//! where the spec gives up.

// Only tests/softroce_errors.rs runs these; the other suites share the module.
#![allow(dead_code)]

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

/// The agent in the guest, over its TCP connection.
struct Agent {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

/// A QP the agent made: what its peer needs to know.
#[derive(Debug, Clone, Copy)]
struct Remote {
    qpn: u32,
    psn: u32,
    rkey: u32,
    va: u64,
    gid: Gid,
}

/// A completion the agent reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct AgentWc {
    status: WcStatus,
    opcode: u32,
    byte_len: u32,
}

impl Agent {
    fn new(stream: UnixStream) -> Agent {
        stream
            .set_read_timeout(Some(COMPLETION_WAIT + Duration::from_secs(30)))
            .unwrap();
        Agent {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// One command, one answer.
    fn ask(&mut self, command: &str) -> String {
        writeln!(self.writer, "{command}").expect("writing to the agent");
        let mut answer = String::new();
        let n = self
            .reader
            .read_line(&mut answer)
            .unwrap_or_else(|e| panic!("the agent's answer to {command:?}: {e}"));
        assert!(n > 0, "the agent hung up after {command:?}");
        answer.trim_end().to_owned()
    }

    fn ok(&mut self, command: &str) {
        let answer = self.ask(command);
        assert_eq!(answer, "ok", "the agent's answer to {command:?}");
    }

    /// A fresh QP: RC (left in INIT) or UD with `qkey` (in RTS).
    fn qp(&mut self, ud_qkey: Option<u32>) -> Remote {
        let command = match ud_qkey {
            None => format!("qp rc {GID_INDEX}"),
            Some(qkey) => format!("qp ud {GID_INDEX} {qkey:#x}"),
        };
        let answer = self.ask(&command);
        let words: Vec<&str> = answer.split_whitespace().collect();
        let parsed = match words[..] {
            ["qp", qpn, psn, rkey, va, gid] => (|| {
                Some(Remote {
                    qpn: qpn.parse().ok()?,
                    psn: psn.parse().ok()?,
                    rkey: rkey.parse().ok()?,
                    va: va.parse().ok()?,
                    gid: Gid::parse(gid)?,
                })
            })(),
            _ => None,
        };
        parsed.unwrap_or_else(|| panic!("the agent's answer to {command:?}: {answer:?}"))
    }

    /// Connects the agent's RC QP to ours.
    fn connect(&mut self, ours: &Local, timeout: u8, retry: u8, rnr_retry: u8) {
        self.ok(&format!(
            "rtr {} {} {} {GID_INDEX} {} {timeout} {retry} {rnr_retry} {MIN_RNR_TIMER}",
            ours.qp.qp_num(),
            ours.psn,
            ours.gid.to_hex(),
            MTU as u8,
        ));
    }

    /// Posts one request; the errno when ibv_post_send refuses it.
    fn post(&mut self, request: &str) -> Result<(), i32> {
        let answer = self.ask(&format!("post {request}"));
        if answer == "ok" {
            return Ok(());
        }
        answer
            .strip_prefix("err ")
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .map_or_else(
                || panic!("the agent's answer to post {request}: {answer:?}"),
                Err,
            )
    }

    fn poll(&mut self, wait: Duration) -> Option<AgentWc> {
        let answer = self.ask(&format!("poll {}", wait.as_millis()));
        if answer == "none" {
            return None;
        }
        let words: Vec<u32> = answer
            .strip_prefix("wc ")
            .map(|r| {
                r.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        match words[..] {
            [status, opcode, byte_len] => Some(AgentWc {
                status: WcStatus::from_u8(status as u8),
                opcode,
                byte_len,
            }),
            _ => panic!("the agent's answer to poll: {answer:?}"),
        }
    }

    fn peek(&mut self, offset: u32, len: u32) -> Vec<u8> {
        let answer = self.ask(&format!("peek {offset} {len}"));
        let hex = answer
            .strip_prefix("mem ")
            .unwrap_or_else(|| panic!("the agent's answer to peek: {answer:?}"));
        (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }
}

/// Our side of one case: a QP with a CQ of its own, in a protection domain with one buffer.
struct Local {
    qp: QueuePair,
    cq: CompletionQueue,
    psn: u32,
    gid: Gid,
}

/// Our NIC, reached as a host process reaches it.
struct Ours {
    /// The guest's end of the cable, where a frame our NIC would never send can be put.
    guest_end: String,
    ctx: Context,
    pd: ProtectionDomain,
    region: Arc<Region>,
    mr: MemoryRegion,
    next_psn: u32,
    /// Every QP made, kept until the end so that no QP number is used twice: the capture is
    /// checked by QP number once all cases have run. [`Ours::destroy`] takes one out.
    kept: Vec<QueuePair>,
}

impl Ours {
    fn open(env: &Env, nic: &str, guest_end: &str) -> Ours {
        let backend = SocketBackend::connect_at(nic, &env.socket(nic)).expect("our NIC's socket");
        let ctx = Context::open(backend as Arc<dyn Backend>).expect("opening our NIC");
        let pd = ctx.alloc_pd().unwrap();
        let region = Arc::new(Region::shared(OUR_BUF).unwrap());
        let access = Access::LOCAL_WRITE
            | Access::REMOTE_WRITE
            | Access::REMOTE_READ
            | Access::REMOTE_ATOMIC;
        let mr = pd.register(&region, 0, OUR_BUF, access).unwrap();
        Ours {
            guest_end: guest_end.to_owned(),
            ctx,
            pd,
            region,
            mr,
            next_psn: 0x10_0000,
            kept: Vec::new(),
        }
    }

    fn gid(&self) -> Gid {
        self.ctx.gid(GID_INDEX).expect("GID index 1")
    }

    fn qp(&mut self, qp_type: QpType) -> Local {
        let cq = self.ctx.create_cq(16).unwrap();
        let qp = self
            .pd
            .create_qp(qp_type, &cq, &cq, QpCap::default())
            .unwrap();
        self.kept.push(qp.clone());
        self.next_psn += 0x1000;
        Local {
            qp,
            cq,
            psn: self.next_psn,
            gid: self.gid(),
        }
    }

    /// A fresh RC QP connected to the agent's `remote`, with these requester settings.
    fn rc(&mut self, remote: &Remote, timeout: u8, retry: u8, rnr_retry: u8) -> Local {
        let local = self.qp(QpType::Rc);
        let access = Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
        local.qp.modify(&QpAttr::init(access)).unwrap();
        let av = AddressVector::to(remote.gid, GID_INDEX);
        let rtr = QpAttr {
            min_rnr_timer: Some(MIN_RNR_TIMER),
            ..QpAttr::rtr(av, remote.qpn, remote.psn, MTU)
        };
        local.qp.modify(&rtr).expect("our QP to RTR");
        let rts = QpAttr {
            timeout: Some(timeout),
            retry_cnt: Some(retry),
            rnr_retry: Some(rnr_retry),
            ..QpAttr::rts(local.psn)
        };
        local.qp.modify(&rts).expect("our QP to RTS");
        local
    }

    /// A fresh UD QP with `qkey`, in RTS.
    fn ud(&mut self, qkey: u32) -> Local {
        let local = self.qp(QpType::Ud);
        local.qp.modify(&QpAttr::init_ud(qkey)).unwrap();
        for state in [QpState::Rtr, QpState::Rts] {
            let attr = QpAttr {
                qp_state: Some(state),
                sq_psn: (state == QpState::Rts).then_some(local.psn),
                ..QpAttr::default()
            };
            local.qp.modify(&attr).unwrap();
        }
        local
    }

    /// Posts one signaled request from the start of our buffer and waits for its completion.
    fn post_and_wait(&self, local: &Local, op: SendOp, len: u32) -> Wc {
        let sge = [self.mr.sge(0, len)];
        self.post(local, op, &sge, None);
        self.wait(local)
    }

    fn post(&self, local: &Local, op: SendOp, sge: &[roce_nic::verbs::Sge], ud: Option<UdDest>) {
        let wr = SendWr {
            wr_id: 1,
            op,
            sg_list: sge,
            flags: SendFlags::SIGNALED,
            ud,
        };
        local.qp.post_send(&[wr]).expect("post_send");
    }

    fn wait(&self, local: &Local) -> Wc {
        let mut wc = [Wc::default()];
        let n = local.cq.wait(&mut wc, Some(COMPLETION_WAIT));
        assert_eq!(
            n,
            1,
            "no completion on our QP {} in {COMPLETION_WAIT:?}",
            local.qp.qp_num()
        );
        wc[0]
    }

    /// Destroys the QP of `local`.
    fn destroy(&mut self, local: Local) {
        let qpn = local.qp.qp_num();
        self.kept.retain(|qp| qp.qp_num() != qpn);
    }

    fn counter(&self, name: &str) -> u64 {
        let snapshot = self.ctx.counters().unwrap();
        snapshot
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|(_, _, v)| v)
            .unwrap_or_else(|| panic!("no counter {name}"))
    }
}

/// What a case expects to find in the capture, checked once the NIC has written it.
#[derive(Debug)]
enum OnWire {
    /// Exactly one NAK with `code`, for `psn`, from `responder` to the requester's QP `to_qp`.
    Nak {
        from_guest: bool,
        to_qp: u32,
        psn: u32,
        code: NakCode,
    },
    /// Only RNR NAKs carrying the responder's timer to the requester's `to_qp`, one for each
    /// SEND the requester sent to `responder_qp`: exactly `count` of them, or (`probes`) at least
    /// `count` where the requester is our NIC, whose tail probes repeat the SEND when rxe is slow
    /// to answer (each probe gets its RNR NAK too).
    RnrNaks {
        from_guest: bool,
        to_qp: u32,
        responder_qp: u32,
        count: usize,
        probes: bool,
    },
    /// At least `count` copies of the request with `psn` to the silent `to_qp`, and not one
    /// frame back to `requester_qp`.
    Unanswered {
        from_guest: bool,
        to_qp: u32,
        requester_qp: u32,
        psn: u32,
        count: usize,
    },
    /// The datagrams to `to_qp`, in order, carried these Q_Keys.
    QKeys {
        from_guest: bool,
        to_qp: u32,
        qkeys: Vec<u32>,
    },
    /// The AETH syndromes of every frame from the responder to the requester's `to_qp`, in
    /// order.
    Answers {
        from_guest: bool,
        to_qp: u32,
        syndromes: Vec<Syndrome>,
    },
    /// Not one frame between our QP `ours` and the agent's `theirs`, either way.
    Nothing { ours: u32, theirs: u32 },
}

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

type CaseFn = fn(&mut Agent, &mut Ours) -> (String, Vec<OnWire>);

/// Every case: its name, whether rxe is the requester, and how it runs. Each returns what
/// happened (for the table) and what must be on the wire; it asserts the completions itself.
const CASES: &[(&str, bool, CaseFn)] = &[
    ("bad rkey", false, we_write_with_a_bad_rkey),
    ("out of bounds", false, we_write_out_of_bounds),
    ("misaligned atomic", false, we_send_a_misaligned_atomic),
    ("READ over 2^31 bytes", false, we_cannot_read_over_2_gib),
    (
        "READ over 2^31 bytes, put on the cable",
        false,
        a_read_over_2_gib_reaches_rxe,
    ),
    (
        "RNR until the retries run out",
        false,
        we_send_with_no_receive_posted,
    ),
    ("silent responder", false, we_write_to_a_destroyed_qp),
    (
        "wrong Q_Key on UD",
        false,
        we_send_a_datagram_with_the_wrong_qkey,
    ),
    ("SEND with invalidate", false, we_send_with_invalidate),
    ("bad rkey", true, rxe_writes_with_a_bad_rkey),
    ("out of bounds", true, rxe_writes_out_of_bounds),
    ("misaligned atomic", true, rxe_refuses_a_misaligned_atomic),
    (
        "RNR until the retries run out",
        true,
        rxe_sends_with_no_receive_posted,
    ),
    ("silent responder", true, rxe_writes_to_a_destroyed_qp),
    (
        "wrong Q_Key on UD",
        true,
        rxe_sends_a_datagram_with_the_wrong_qkey,
    ),
    ("SEND with invalidate", true, rxe_sends_with_invalidate),
];

/// Our WRITE completes with `want`, and rxe's NAK with `code` answers it.
fn we_provoke(
    agent: &mut Agent,
    ours: &mut Ours,
    op: impl Fn(&Remote) -> SendOp,
    want: WcStatus,
    code: NakCode,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let wc = ours.post_and_wait(&local, op(&remote), 64);
    assert_eq!(wc.status, want, "our completion");
    (
        format!("our completion: {}; rxe's NAK: {code}", wc.status),
        vec![OnWire::Nak {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            psn: local.psn,
            code,
        }],
    )
}

fn we_write_with_a_bad_rkey(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let op = |r: &Remote| SendOp::RdmaWrite {
        remote_addr: r.va,
        rkey: r.rkey ^ 0x5a00,
    };
    we_provoke(
        agent,
        ours,
        op,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
    )
}

fn we_write_out_of_bounds(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    // 64 bytes from 32 before the end of the agent's buffer.
    let op = |r: &Remote| SendOp::RdmaWrite {
        remote_addr: r.va + AGENT_BUF - 32,
        rkey: r.rkey,
    };
    we_provoke(
        agent,
        ours,
        op,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
    )
}

/// IBTA and rxe agree: a misaligned atomic is an invalid request (class C).
fn we_send_a_misaligned_atomic(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let op = |r: &Remote| SendOp::AtomicFetchAndAdd {
        remote_addr: r.va + 4,
        rkey: r.rkey,
        add: 1,
    };
    we_provoke(
        agent,
        ours,
        op,
        WcStatus::RemInvReqErr,
        NakCode::INVALID_REQUEST,
    )
}

/// A message may be 2^31 bytes at most: our NIC refuses a longer READ when it fetches the
/// request (a local length error) and sends nothing, so rxe never sees one from us.
fn we_cannot_read_over_2_gib(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    // Two SGEs over our whole buffer and one of 2^31: 2^31 + 8 KiB in all (never touched).
    let sge = [
        ours.mr.sge(0, OUR_BUF as u32),
        ours.mr.sge(0, OUR_BUF as u32),
        roce_nic::verbs::Sge {
            addr: ours.mr.va,
            length: 1 << 31,
            lkey: ours.mr.lkey,
        },
    ];
    let op = SendOp::RdmaRead {
        remote_addr: remote.va,
        rkey: remote.rkey,
    };
    ours.post(&local, op, &sge, None);
    let wc = ours.wait(&local);
    assert_eq!(wc.status, WcStatus::LocLenErr, "our completion");
    (
        format!("our completion: {} (nothing sent)", wc.status),
        vec![OnWire::Nothing {
            ours: local.qp.qp_num(),
            theirs: remote.qpn,
        }],
    )
}

/// The READ our NIC refuses to send, put on the cable by hand as our QP would have sent it
/// (RETH DMA length 2^31 + 4096 at the agent's buffer, its rkey): rxe (Linux 6.1) answers with
/// a remote-access-error NAK — its range check of the registration refuses it; newer kernels
/// check the DMA length against 2^31 first and answer invalid request. Our QP, which sent
/// nothing, takes the NAK all the same (counted in naks_received_remote_access).
fn a_read_over_2_gib_reaches_rxe(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    use roce_wire::{reth, EthernetAddress, EthernetRepr, Extensions, FrameRepr, Ipv4Address};
    use roce_wire::{Kind, Opcode, Transport};
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let opcode = Opcode::new(Transport::Rc, Kind::ReadRequest).unwrap();
    let mut ext = Extensions::for_opcode(opcode);
    ext.reth = Some(reth::Repr {
        va: remote.va,
        r_key: remote.rkey,
        dma_len: (1 << 31) + 4096,
    });
    let mut bth = roce_wire::bth::Repr::new(opcode, remote.qpn, local.psn);
    bth.ack_req = true;
    let ip = |s: &str| s.parse::<std::net::Ipv4Addr>().unwrap().octets();
    let repr = FrameRepr {
        ethernet: Some(EthernetRepr {
            dst: EthernetAddress(GUEST_MAC),
            src: EthernetAddress(NIC_MAC),
            vlan: None,
        }),
        network: NetworkRepr::Ipv4 {
            src: Ipv4Address::from(ip(NIC_IP)),
            dst: Ipv4Address::from(ip(GUEST_IP)),
            dscp: 0,
            ecn: 0,
            ident: 1,
            ttl: 64,
            udp_src_port: 0xc000,
        },
        bth,
        ext,
        payload_len: 0,
    };
    let mut frame = [0u8; 128];
    let len = repr.emit(&mut frame, &[]).unwrap();
    let naks = ours.counter("naks_received_remote_access");
    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.send_to(&frame[..len], &ours.guest_end).unwrap();
    let deadline = Instant::now() + COMPLETION_WAIT;
    while ours.counter("naks_received_remote_access") == naks && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        ours.counter("naks_received_remote_access"),
        naks + 1,
        "our naks_received_remote_access"
    );
    (
        "rxe's NAK: remote access error".into(),
        vec![OnWire::Nak {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            psn: local.psn,
            code: NakCode::REMOTE_ACCESS_ERROR,
        }],
    )
}

/// rxe's QP has no receive posted: it answers each SEND with an RNR NAK, and our QP gives up
/// after RNR_RETRY retries, as the spec says (rxe would retry for ever only at 7). Our tail
/// probes may add SENDs (and so RNR NAKs) when the guest is slow to answer.
fn we_send_with_no_receive_posted(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, RNR_RETRY);
    agent.connect(&local, 14, 7, 7);
    let wc = ours.post_and_wait(&local, SendOp::Send, 64);
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "our completion");
    (
        format!("our completion: {}", wc.status),
        vec![OnWire::RnrNaks {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            responder_qp: remote.qpn,
            count: usize::from(RNR_RETRY) + 1,
            probes: true,
        }],
    )
}

/// rxe's QP is destroyed after the connection is made: rxe drops what comes for it without a
/// word, and our QP gives up after RETRY_CNT retransmissions.
fn we_write_to_a_destroyed_qp(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, TIMEOUT, RETRY_CNT, 7);
    agent.connect(&local, 14, 7, 7);
    agent.ok("destroy");
    let op = SendOp::RdmaWrite {
        remote_addr: remote.va,
        rkey: remote.rkey,
    };
    let wc = ours.post_and_wait(&local, op, 64);
    assert_eq!(wc.status, WcStatus::RetryExcErr, "our completion");
    (
        format!("our completion: {}", wc.status),
        vec![OnWire::Unanswered {
            from_guest: false,
            to_qp: remote.qpn,
            requester_qp: local.qp.qp_num(),
            psn: local.psn,
            count: usize::from(RETRY_CNT) + 1,
        }],
    )
}

/// A datagram with the wrong Q_Key, then one with the right Q_Key: rxe drops the first without
/// a word (UD has no NAK) and delivers the second, first.
fn we_send_a_datagram_with_the_wrong_qkey(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(Some(QKEY));
    agent.ok("recv 2 1064");
    let local = ours.ud(0x3333_3333);
    let ah = ours
        .pd
        .create_ah(AddressVector::to(remote.gid, GID_INDEX))
        .expect("an address handle to the guest");
    for (qkey, fill) in [(WRONG_QKEY, 0xaa), (QKEY, 0xbb)] {
        ours.region.write(0, &[fill; 64]).unwrap();
        let ud = UdDest {
            ah: ah.handle(),
            remote_qpn: remote.qpn,
            remote_qkey: qkey,
        };
        ours.post(&local, SendOp::Send, &[ours.mr.sge(0, 64)], Some(ud));
        let wc = ours.wait(&local);
        assert_eq!(wc.status, WcStatus::Success, "our UD send");
    }
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("rxe received the datagram with the right Q_Key");
    assert_eq!(
        (wc.status, wc.byte_len),
        (WcStatus::Success, 40 + 64),
        "rxe's completion"
    );
    let first = agent.peek(40, 4);
    assert_eq!(
        first, [0xbb; 4],
        "the first datagram rxe delivered is the one with the right Q_Key"
    );
    (
        "rxe delivered only the datagram with the right Q_Key".into(),
        vec![OnWire::QKeys {
            from_guest: false,
            to_qp: remote.qpn,
            qkeys: vec![WRONG_QKEY, QKEY],
        }],
    )
}

/// rxe's request completes with `want` at the agent, and our NAK with `code` answers it.
fn rxe_provokes(
    agent: &mut Agent,
    ours: &mut Ours,
    request: impl Fn(&Ours) -> String,
    want: WcStatus,
    code: NakCode,
    counter: &str,
) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let before = ours.counter(counter);
    agent
        .post(&request(ours))
        .expect("the agent's request posted");
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    assert_eq!(wc.status, want, "rxe's completion");
    assert_eq!(ours.counter(counter), before + 1, "our {counter}");
    (
        format!("rxe's completion: {}; our NAK: {code}", wc.status),
        vec![OnWire::Nak {
            from_guest: false,
            to_qp: remote.qpn,
            psn: remote.psn,
            code,
        }],
    )
}

fn rxe_writes_with_a_bad_rkey(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let request = |o: &Ours| format!("write {:#x} {} 64", o.mr.rkey ^ 0x5a00, o.mr.va);
    rxe_provokes(
        agent,
        ours,
        request,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
        "naks_sent_remote_access",
    )
}

fn rxe_writes_out_of_bounds(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let request = |o: &Ours| {
        format!(
            "write {:#x} {} 64",
            o.mr.rkey,
            o.mr.va + OUR_BUF as u64 - 32
        )
    };
    rxe_provokes(
        agent,
        ours,
        request,
        WcStatus::RemAccessErr,
        NakCode::REMOTE_ACCESS_ERROR,
        "naks_sent_remote_access",
    )
}

/// rxe checks the alignment when the request is posted (rxe_verbs.c): ibv_post_send fails with
/// EINVAL and nothing goes on the wire, so rxe cannot make our NIC answer one.
fn rxe_refuses_a_misaligned_atomic(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let posted = agent.post(&format!("faa {:#x} {} 8", ours.mr.rkey, ours.mr.va + 4));
    assert_eq!(
        posted,
        Err(libc::EINVAL),
        "rxe's ibv_post_send of a misaligned atomic"
    );
    (
        "rxe's ibv_post_send: EINVAL (nothing sent)".into(),
        vec![OnWire::Nothing {
            ours: local.qp.qp_num(),
            theirs: remote.qpn,
        }],
    )
}

/// Our QP has no receive posted: we answer each of rxe's SENDs with an RNR NAK carrying our
/// timer, and rxe gives up after RNR_RETRY retries.
fn rxe_sends_with_no_receive_posted(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, RNR_RETRY);
    let before = ours.counter("rnr_naks_sent");
    agent.post("send 0 0 64").expect("the agent's SEND posted");
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    assert_eq!(wc.status, WcStatus::RnrRetryExcErr, "rxe's completion");
    let count = usize::from(RNR_RETRY) + 1;
    assert_eq!(
        ours.counter("rnr_naks_sent"),
        before + count as u64,
        "our rnr_naks_sent"
    );
    (
        format!("rxe's completion: {}", wc.status),
        vec![OnWire::RnrNaks {
            from_guest: false,
            to_qp: remote.qpn,
            responder_qp: local.qp.qp_num(),
            count,
            probes: false,
        }],
    )
}

/// Our QP is destroyed after the connection is made: our NIC drops what comes for it without a
/// word (counted in rx_unknown_qp), and rxe gives up after RETRY_CNT retransmissions.
fn rxe_writes_to_a_destroyed_qp(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, TIMEOUT, RETRY_CNT, 7);
    let qpn = local.qp.qp_num();
    let (rkey, va) = (ours.mr.rkey, ours.mr.va);
    ours.destroy(local);
    let before = ours.counter("rx_unknown_qp");
    agent
        .post(&format!("write {rkey:#x} {va} 64"))
        .expect("the agent's WRITE posted");
    let wc = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    assert_eq!(wc.status, WcStatus::RetryExcErr, "rxe's completion");
    let count = usize::from(RETRY_CNT) + 1;
    let dropped = ours.counter("rx_unknown_qp") - before;
    assert!(
        dropped >= count as u64,
        "our rx_unknown_qp rose by {dropped}, not {count}"
    );
    (
        format!("rxe's completion: {}; we dropped {dropped}", wc.status),
        vec![OnWire::Unanswered {
            from_guest: true,
            to_qp: qpn,
            requester_qp: remote.qpn,
            psn: remote.psn,
            count,
        }],
    )
}

/// rxe sends a datagram with the wrong Q_Key, then one with the right Q_Key: we drop the first
/// (counted in rx_qkey_mismatch) and deliver the second, first.
fn rxe_sends_a_datagram_with_the_wrong_qkey(
    agent: &mut Agent,
    ours: &mut Ours,
) -> (String, Vec<OnWire>) {
    agent.qp(Some(0x3333_3333));
    let local = ours.ud(QKEY);
    for _ in 0..2 {
        let wr = RecvWr {
            wr_id: 7,
            sg_list: &[ours.mr.sge(0, 1064)],
        };
        local.qp.post_recv(&[wr]).unwrap();
    }
    ours.region.write(0, &[0u8; 128]).unwrap();
    let before = ours.counter("rx_qkey_mismatch");
    for (qkey, fill) in [(WRONG_QKEY, 0xaa), (QKEY, 0xbb)] {
        agent
            .post(&format!(
                "ud {} {qkey:#x} {} {GID_INDEX} 64 {fill}",
                local.qp.qp_num(),
                local.gid.to_hex()
            ))
            .expect("the agent's datagram posted");
        let wc = agent
            .poll(COMPLETION_WAIT)
            .expect("the agent's send completed");
        assert_eq!(wc.status, WcStatus::Success, "rxe's UD send");
    }
    let wc = ours.wait(&local);
    assert_eq!(
        (wc.status, wc.byte_len),
        (WcStatus::Success, 40 + 64),
        "our receive"
    );
    let mut first = [0u8; 4];
    ours.region.read(40, &mut first).unwrap();
    assert_eq!(
        first, [0xbb; 4],
        "the first datagram we delivered is the one with the right Q_Key"
    );
    assert_eq!(
        ours.counter("rx_qkey_mismatch"),
        before + 1,
        "our rx_qkey_mismatch"
    );
    (
        "we delivered only the datagram with the right Q_Key".into(),
        vec![OnWire::QKeys {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            qkeys: vec![WRONG_QKEY, QKEY],
        }],
    )
}

/// A SEND asking rxe to invalidate the rkey of its buffer, an ordinary memory registration:
/// Linux 6.1 invalidates only fast-registered MRs, so its responder refuses — and, as its
/// "class J" error, completes the receive with a remote-invalid-request error and moves its QP
/// to the error state, but acknowledges the SEND with a plain ACK: our SEND completes
/// successfully, and the requester never learns. Our NIC, in rxe's place, answers with an
/// invalid-request NAK (see `rxe_sends_with_invalidate`). The test expects what rxe does
/// (docs/rxe-differences.md).
fn we_send_with_invalidate(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    agent.ok("recv 1 64");
    let local = ours.rc(&remote, 14, 7, 7);
    agent.connect(&local, 14, 7, 7);
    let wc = ours.post_and_wait(&local, SendOp::SendWithInv { rkey: remote.rkey }, 64);
    let theirs = agent
        .poll(COMPLETION_WAIT)
        .expect("a receive completion at the agent");
    assert_eq!(
        (wc.status, theirs.status),
        (WcStatus::Success, WcStatus::RemInvReqErr),
        "our completion and rxe's"
    );
    (
        format!(
            "our completion: {}; rxe's receive: {}; rxe's answer: ACK",
            wc.status, theirs.status
        ),
        vec![OnWire::Answers {
            from_guest: true,
            to_qp: local.qp.qp_num(),
            syndromes: vec![Syndrome::ack()],
        }],
    )
}

/// rxe's SEND asks us to invalidate an rkey that names no memory of ours: our receive completes
/// with a remote-invalid-request error and we answer with an invalid-request NAK, so that rxe's
/// SEND completes with a remote-invalid-request error too.
fn rxe_sends_with_invalidate(agent: &mut Agent, ours: &mut Ours) -> (String, Vec<OnWire>) {
    let remote = agent.qp(None);
    let local = ours.rc(&remote, 14, 7, 7);
    let wr = RecvWr {
        wr_id: 9,
        sg_list: &[ours.mr.sge(0, 64)],
    };
    local.qp.post_recv(&[wr]).unwrap();
    agent.connect(&local, 14, 7, 7);
    let before = ours.counter("naks_sent_invalid_request");
    let unknown = ours.mr.rkey ^ 0x5a00;
    agent
        .post(&format!("sendinv {unknown:#x} 0 64"))
        .expect("the agent's SEND posted");
    let theirs = agent
        .poll(COMPLETION_WAIT)
        .expect("a completion at the agent");
    let wc = ours.wait(&local);
    assert_eq!(
        (wc.status, theirs.status),
        (WcStatus::RemInvReqErr, WcStatus::RemInvReqErr),
        "our receive's completion and rxe's SEND's"
    );
    assert_eq!(
        ours.counter("naks_sent_invalid_request"),
        before + 1,
        "our naks_sent_invalid_request"
    );
    (
        format!(
            "our receive: {}; rxe's completion: {}; our NAK: invalid request",
            wc.status, theirs.status
        ),
        vec![OnWire::Nak {
            from_guest: false,
            to_qp: remote.qpn,
            psn: remote.psn,
            code: NakCode::INVALID_REQUEST,
        }],
    )
}

/// The RoCE frames of a capture, each with whether the guest sent it.
fn frames_of(pcap: &Path) -> Vec<(bool, Vec<u8>)> {
    let file = std::fs::File::open(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("a pcap file");
    let mut frames = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let data = packet.expect("a whole pcap record").data.into_owned();
        if Frame::parse(&data).is_ok() {
            frames.push((data[6..12] == GUEST_MAC[..], data));
        }
    }
    frames
}

/// Checks one expectation against the capture's RoCE frames.
fn check(expect: &OnWire, frames: &[(bool, Vec<u8>)]) -> Result<(), String> {
    let parsed = || {
        frames
            .iter()
            .map(|(guest, data)| (*guest, Frame::parse(data).unwrap()))
    };
    match *expect {
        OnWire::Nak {
            from_guest,
            to_qp,
            psn,
            code,
        } => {
            let naks: Vec<(u32, Syndrome)> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .filter_map(|(_, f)| Some((f.repr.bth.psn, f.repr.ext.aeth?.syndrome)))
                .filter(|(_, s)| matches!(s, Syndrome::Nak(_)))
                .collect();
            if naks == [(psn, Syndrome::Nak(code))] {
                Ok(())
            } else {
                Err(format!("want one NAK ({code}) for PSN {psn:#x} to QP {to_qp:#x}, the wire has {naks:x?}"))
            }
        }
        OnWire::RnrNaks {
            from_guest,
            to_qp,
            responder_qp,
            count,
            probes,
        } => {
            let answers: Vec<Option<Syndrome>> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .map(|(_, f)| f.repr.ext.aeth.map(|a| a.syndrome))
                .collect();
            let sends = parsed()
                .filter(|(g, f)| *g != from_guest && f.repr.bth.dest_qp == responder_qp)
                .filter(|(_, f)| f.repr.bth.opcode.kind().is_send())
                .count();
            let rnr = Some(Syndrome::RnrNak {
                timer: MIN_RNR_TIMER,
            });
            let enough = if probes {
                answers.len() >= count
            } else {
                answers.len() == count
            };
            if enough && answers.iter().all(|a| *a == rnr) && sends == answers.len() {
                Ok(())
            } else {
                Err(format!("want {count} RNR NAKs with timer {MIN_RNR_TIMER} to QP {to_qp:#x} ({}), one per SEND; the wire has {answers:?} for {sends} SEND(s)", if probes { "or more" } else { "exactly" }))
            }
        }
        OnWire::Unanswered {
            from_guest,
            to_qp,
            requester_qp,
            psn,
            count,
        } => {
            let sent = parsed()
                .filter(|(g, f)| {
                    *g == from_guest && f.repr.bth.dest_qp == to_qp && f.repr.bth.psn == psn
                })
                .count();
            let answers = parsed()
                .filter(|(g, f)| *g != from_guest && f.repr.bth.dest_qp == requester_qp)
                .count();
            if sent >= count && answers == 0 {
                Ok(())
            } else {
                Err(format!("want {count} or more copies of PSN {psn:#x} to QP {to_qp:#x} and no answer; the wire has {sent} and {answers} answer(s)"))
            }
        }
        OnWire::QKeys {
            from_guest,
            to_qp,
            ref qkeys,
        } => {
            let seen: Vec<u32> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .filter_map(|(_, f)| Some(f.repr.ext.deth?.q_key))
                .collect();
            if seen == *qkeys {
                Ok(())
            } else {
                Err(format!("want datagrams with Q_Keys {qkeys:#x?} to QP {to_qp:#x}, the wire has {seen:#x?}"))
            }
        }
        OnWire::Answers {
            from_guest,
            to_qp,
            ref syndromes,
        } => {
            let seen: Vec<Syndrome> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .filter_map(|(_, f)| Some(f.repr.ext.aeth?.syndrome))
                .collect();
            if seen == *syndromes {
                Ok(())
            } else {
                Err(format!(
                    "want the answers {syndromes:?} to QP {to_qp:#x}, the wire has {seen:?}"
                ))
            }
        }
        OnWire::Nothing { ours, theirs } => {
            let n = parsed()
                .filter(|(g, f)| f.repr.bth.dest_qp == if *g { ours } else { theirs })
                .count();
            if n == 0 {
                Ok(())
            } else {
                Err(format!("want nothing between our QP {ours:#x} and rxe's {theirs:#x}, the wire has {n} frame(s)"))
            }
        }
    }
}

//! `roce demo --scenario tcp-vs-rdma`: what RDMA saves.
//!
//! The same bytes go from a sender to the same receiving program twice: over a kernel TCP
//! socket on loopback, then by an RDMA WRITE through the two emulated NICs. For each transfer
//! the demo reads from /proc what every party spent — the receiver above all, its CPU time
//! (user and system) and context switches, and when its data was in its memory — and says where
//! the work went: for TCP into the receiver's kernel and process, for RDMA into the NIC (here a
//! process standing in for the card's hardware), while the receiving program runs no code.
//!
//! The receiver is the target program ([`crate::target_host`]): its TCP socket is ready and its
//! QP connected before anything is measured, it waits in `recv()` for the TCP data, then on its
//! command channel while the RDMA WRITE lands, and is asked nothing in between — so that
//! anyone can check its figures from outside, in /proc, at the end of each step (`--step`).

pub mod html;
pub mod measure;
pub mod stream;

use std::net::{Ipv4Addr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use roce_nic::verbs::{SendOp, WcStatus};
use serde_json::json;

use crate::cpu::{self, Whom};
use crate::events::since_epoch;
use crate::plan::{self, Plan};
use crate::play::initiator::Initiator;
use crate::rig::{Layout, Rig, ANSWER};
use crate::story::Story;
use crate::target_host::{FromTarget, ToTarget};
use crate::text::packet::printable;
use crate::wire::{Seen, LISTED};
use crate::{DemoError, Side};
use measure::{millis, Party, Role, Sampling, SenderThread, Series, Spent};

/// How often the parties' time on a CPU is sampled for the timelines.
const SAMPLING: Duration = Duration::from_millis(2);
/// Bytes of each copy the receiver is asked to show.
const LOOKED_AT: u64 = 32;

/// One transfer, as measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    /// When the sender began, when the last byte was in the receiver's memory, and when the
    /// measurement ended (since the Unix epoch).
    pub started: Duration,
    pub arrived: Duration,
    pub ended: Duration,
    /// What each party spent, in the order of [`Record::parties`].
    pub spent: Vec<(Role, Spent)>,
    pub series: Vec<Series>,
}

impl Transfer {
    pub fn of(&self, role: Role) -> Option<Spent> {
        self.spent.iter().find(|(r, _)| *r == role).map(|(_, s)| *s)
    }

    /// From the sender's start to the last byte in the receiver's memory.
    pub fn took(&self) -> Duration {
        self.arrived.saturating_sub(self.started)
    }
}

/// What the run leaves for the page.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    pub size: usize,
    pub parties: Vec<Party>,
    pub tcp: Transfer,
    pub rdma: Transfer,
    /// The frames of the RDMA WRITE (TCP runs on the kernel's loopback, which the demo cannot
    /// see without root).
    pub frames: Vec<Seen>,
    pub frame_count: u32,
}

/// Gbit/s of `bytes` in `took`.
fn gbits(bytes: usize, took: Duration) -> f64 {
    bytes as f64 * 8.0 / took.as_secs_f64().max(1e-9) / 1e9
}

/// The parties of `rig`, the sender being `sender`.
fn parties(rig: &Rig, sender: &SenderThread) -> Result<Vec<Party>, DemoError> {
    let me = std::process::id();
    let mut parties = vec![
        Party {
            role: Role::Receiver,
            whom: rig.target.whom,
            label: match rig.target.whom {
                Whom::Process(pid) => format!("process {pid} (roce demo-target)"),
                Whom::Thread(tid) => format!("thread {tid} of this process"),
            },
        },
        Party {
            role: Role::Sender,
            whom: Whom::Thread(sender.tid),
            label: format!("thread {} of this demo (pid {me})", sender.tid),
        },
    ];
    match &rig.layout {
        Layout::Processes { nics, .. } => {
            for (role, (name, pid)) in [Role::SenderNic, Role::ReceiverNic].into_iter().zip(nics) {
                parties.push(Party {
                    role,
                    whom: Whom::Process(*pid),
                    label: format!("process {pid} ({name})"),
                });
            }
            if let Some(tid) = cpu::thread_named("demo-wire") {
                parties.push(Party {
                    role: Role::Wire,
                    whom: Whom::Thread(tid),
                    label: format!("thread {tid} of this demo, forwarding the NICs' frames"),
                });
            }
        }
        Layout::Threads { nics, .. } => {
            for (role, name) in [Role::SenderNic, Role::ReceiverNic].into_iter().zip(nics) {
                let engine = format!("{name}-engine");
                let tid = cpu::thread_named(&engine).ok_or_else(|| {
                    DemoError::failed(format!("cannot find the engine thread of {name}"))
                })?;
                parties.push(Party {
                    role,
                    whom: Whom::Thread(tid),
                    label: format!("engine thread {tid} of {name}, in this process"),
                });
            }
        }
    }
    Ok(parties)
}

/// The time allowed for `len` bytes: generous for a gigabyte on two shared cores.
fn limit(len: usize) -> Duration {
    Duration::from_secs(30) + Duration::from_secs(len as u64 >> 25)
}

/// A run in progress.
struct Comparison<'a, 'o> {
    rig: &'a mut Rig,
    plan: &'a Plan,
    story: &'a mut Story<'o>,
    sender: SenderThread,
    parties: Vec<Party>,
    initiator: Arc<Initiator>,
    stream: Arc<TcpStream>,
}

/// Plays the scenario on `rig`, telling it to `story`.
pub fn play(rig: &mut Rig, plan: &Plan, story: &mut Story) -> Result<Record, DemoError> {
    let sender = SenderThread::start()?;
    let parties = parties(rig, &sender)?;
    introduce(plan, &parties, story);
    story.step("The receiver gets ready: memory, a TCP socket, an RDMA queue pair");
    let (initiator, stream) = get_ready(rig, plan, story)?;
    let mut run = Comparison {
        rig,
        plan,
        story,
        sender,
        parties,
        initiator: Arc::new(initiator),
        stream: Arc::new(stream),
    };
    let tcp = run.tcp()?;
    let rdma = run.rdma()?;
    let record = Record {
        size: plan.payload.len(),
        parties: run.parties.clone(),
        tcp,
        rdma,
        frames: run.rig.wire.frames(),
        frame_count: run.rig.wire.count(),
    };
    run.compare(&record)?;
    run.story.end_step();
    Ok(record)
}

fn introduce(plan: &Plan, parties: &[Party], story: &mut Story) {
    story.say(format!(
        "roce demo --scenario tcp-vs-rdma: {}",
        crate::Scenario::TcpVsRdma.summary()
    ));
    story.say(format!(
        "The same {} bytes go from a sender to the same receiving program twice: over a TCP \
         socket on loopback, as most programs move data, then by one RDMA WRITE through two \
         emulated NICs. For each, the demo reads from /proc what the receiver spent — its CPU \
         time (user and system), its context switches, when its data was in its memory — and \
         the same for the sender and the NICs.",
        plan.payload.len()
    ));
    let rows: Vec<(String, String)> = parties
        .iter()
        .map(|p| (p.role.name().to_owned(), p.label.clone()))
        .collect();
    story.tell(crate::Beat::Table(rows));
}

/// Step 1: the receiver's memory, its TCP connection, its QP; then it waits in `recv()`.
fn get_ready(
    rig: &mut Rig,
    plan: &Plan,
    story: &mut Story,
) -> Result<(Initiator, TcpStream), DemoError> {
    let shared = rig.target.shared.clone();
    let len = plan.payload.len();
    story.say(format!(
        "The receiver made {} bytes of memory, touched every page of it (so that no page fault \
         is counted later), and registered it with its NIC: rkey {:#010x}, VA {:#x}. The TCP \
         copy will land at offset {:#x}, the RDMA copy at offset {:#x}.",
        shared.len,
        shared.rkey,
        shared.va,
        plan::tcp_offset(len),
        plan.offset
    ));
    let FromTarget::Listening { port } = rig.target.ask(&ToTarget::Listen)? else {
        return Err(DemoError::failed("the receiver did not listen"));
    };
    let stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port))
        .map_err(|e| DemoError::because("cannot connect to the receiver", e))?;
    let FromTarget::Accepted = rig.target.ask(&ToTarget::Accept {
        timeout_ms: ANSWER.as_millis() as u64,
    })?
    else {
        return Err(DemoError::failed("the receiver did not accept"));
    };
    story.say(format!(
        "TCP: the receiver listens on 127.0.0.1:{port}; the sender connected, and the receiver \
         accepted the connection."
    ));
    let initiator = Initiator::set_up(&rig.initiator, plan, rig.target.is_process())?;
    initiator.connect(&shared, plan)?;
    rig.target.ask(&ToTarget::Connect {
        qpn: initiator.qp.qp_num(),
        psn: initiator.psn,
        gid: initiator.gid.to_hex(),
    })?;
    story.say(format!(
        "RDMA: the sender made QP {:#08x} and connected it to the receiver's QP {:#08x}; the \
         receiver connected back. The sender's buffer holds {len} bytes of a test pattern, the \
         same for both.",
        initiator.qp.qp_num(),
        shared.qpn
    ));
    rig.target.tell(&ToTarget::ReceiveTcp {
        offset: plan::tcp_offset(len),
        len: len as u64,
        timeout_ms: limit(len).as_millis() as u64,
    })?;
    rig.target.asleep()?;
    story.say(
        "The receiver now waits in recv() for the TCP data (state S). The demo asks nothing \
         more of it until both transfers are done.",
    );
    Ok((initiator, stream))
}

impl Comparison<'_, '_> {
    /// What every party spent while `transfer` ran; `transfer` returns when the data arrived.
    fn measure(
        &mut self,
        transfer: impl FnOnce(&mut Self) -> Result<Duration, DemoError>,
    ) -> Result<Transfer, DemoError> {
        let before = measure::measure(&self.parties)?;
        let sampler = Sampling::start(&self.parties, SAMPLING);
        let started = since_epoch();
        let arrived = transfer(self)?;
        // The receiver back in its sleep (after TCP) or never out of it (RDMA).
        self.rig.target.asleep()?;
        let after = measure::measure(&self.parties)?;
        let series = sampler.finish();
        Ok(Transfer {
            started,
            arrived,
            ended: since_epoch(),
            spent: measure::spent(&self.parties, &before, &after),
            series,
        })
    }

    /// The figures of every party, aligned (and for `--json`, the transfer's `name`).
    fn tell_spent(&mut self, name: &str, transfer: &Transfer) {
        let rows: Vec<(String, String)> = transfer
            .spent
            .iter()
            .map(|(role, spent)| (role.name().to_owned(), spent.describe()))
            .collect();
        self.story.tell(crate::Beat::Table(rows));
        for (role, spent) in &transfer.spent {
            self.story.figures(json!({
                "figures": "party",
                "transfer": name,
                "party": role.word().replace('-', "_"),
                "on_cpu_ns": spent.on_cpu.as_nanos() as u64,
                "user_ticks": spent.user_ticks,
                "system_ticks": spent.system_ticks,
                "voluntary_switches": spent.voluntary,
                "involuntary_switches": spent.involuntary,
            }));
        }
        self.story.figures(json!({
            "figures": "transfer",
            "transfer": name,
            "bytes": self.plan.payload.len(),
            "arrived_after_us": transfer.took().as_micros() as u64,
        }));
    }

    /// Step 2: the bytes over TCP.
    fn tcp(&mut self) -> Result<Transfer, DemoError> {
        let len = self.plan.payload.len();
        self.story.step(format!(
            "TCP: the sender writes {len} bytes to its socket; the receiver's kernel and \
             process take them in"
        ));
        let mut reads = 0;
        let transfer = self.measure(|run| {
            let (stream, initiator) = (Arc::clone(&run.stream), Arc::clone(&run.initiator));
            let sent = run
                .sender
                .run(move || stream::send_from(&stream, &initiator.buffer, 0, len, limit(len)))?;
            let FromTarget::TcpReceived {
                last_at_us,
                reads: n,
                ..
            } = run.rig.target.answer(limit(len) + ANSWER)?
            else {
                return Err(DemoError::failed("the receiver did not report its data"));
            };
            sent.recv()
                .map_err(|_| DemoError::failed("the sender thread ended"))?
                .map_err(|e| DemoError::because("cannot send over TCP", e))?;
            reads = n;
            Ok(Duration::from_micros(last_at_us))
        })?;
        self.story.say(format!(
            "The sender called send() until the kernel had taken all {len} bytes; the \
             receiver's recv() returned {reads} times as they came. The last byte was in the \
             receiver's memory {} after the sender began ({:.2} Gbit/s).",
            millis(transfer.took()),
            gbits(len, transfer.took())
        ));
        self.story.say(format!(
            "What each party spent meanwhile, from /proc: its time on a CPU by the scheduler's \
             count (schedstat, to the nanosecond), how much of it was in the program and how \
             much in the kernel (utime and stime, which /proc counts in ticks of 1/{} s), its \
             context switches:",
            procfs::ticks_per_second()
        ));
        self.tell_spent("tcp", &transfer);
        self.story.say(
            "Where the work went: into the receiver. Its kernel copied every byte from the \
             socket into the program's buffer and acknowledged it (system time), and the program \
             was woken again and again to ask for more (context switches). On loopback the \
             sender's CPU also runs the receive path of the kernel, which a real network leaves \
             to the receiver's interrupts. The receiver now waits on its command channel again.",
        );
        Ok(transfer)
    }

    /// Step 3: the same bytes by RDMA WRITE.
    fn rdma(&mut self) -> Result<Transfer, DemoError> {
        let len = self.plan.payload.len();
        let op = Initiator::operation(self.plan, &self.rig.target.shared);
        let SendOp::RdmaWrite { remote_addr, rkey } = op else {
            return Err(DemoError::failed("tcp-vs-rdma sends by RDMA WRITE"));
        };
        self.story.step(format!(
            "RDMA WRITE: the NICs move the same {len} bytes into the receiver's memory"
        ));
        self.story.say(format!(
            "The sender posts one IBV_WR_RDMA_WRITE of {len} bytes to VA {remote_addr:#x} with \
             rkey {rkey:#010x}; its NIC cuts it into {} packets, and the receiver's NIC checks \
             each and writes it into memory.",
            self.plan.packets()
        ));
        let mark = self.rig.wire.mark();
        let transfer = self.measure(|run| {
            let initiator = Arc::clone(&run.initiator);
            let plan = run.plan.clone();
            let done = run.sender.run(move || {
                initiator.post(op, &plan)?;
                let wc = initiator.completion(limit(plan.payload.len()), || {})?;
                Ok::<_, DemoError>((wc, since_epoch()))
            })?;
            let total = len as u64;
            let deadline = limit(len) + ANSWER;
            let started = std::time::Instant::now();
            let (wc, at) = loop {
                match done.recv_timeout(Duration::from_millis(100)) {
                    Ok(result) => break result?,
                    Err(_) if started.elapsed() > deadline => {
                        return Err(DemoError::failed("the RDMA WRITE did not complete"))
                    }
                    Err(_) => run
                        .story
                        .progress(run.rig.wire.payload_to(Side::Target), total),
                }
            };
            run.story.progress(total, total);
            if wc.status != WcStatus::Success {
                return Err(DemoError::failed(format!(
                    "the RDMA WRITE completed with an error: {}",
                    wc.status
                )));
            }
            Ok(at)
        })?;
        let frames = self.rig.wire.count() as usize - mark.min(self.rig.wire.count() as usize);
        self.story.say(format!(
            "The completion came {} after the post, {frames} frames later: the receiver's NIC \
             acknowledges only data it has placed, so the bytes were in the receiver's memory \
             by then ({:.2} Gbit/s through emulated NICs).",
            millis(transfer.took()),
            gbits(len, transfer.took())
        ));
        self.story
            .say("What each party spent meanwhile, from /proc:");
        self.tell_spent("rdma", &transfer);
        if let Some(wire) = transfer.of(Role::Wire) {
            self.story.say(format!(
                "The wire's {} is the demo passing every frame from one NIC's UDP socket to the \
                 other's: a cable's job, which costs no CPU at all on real hardware.",
                millis(wire.on_cpu)
            ));
        }
        let nic = transfer.of(Role::ReceiverNic).unwrap_or_default();
        let what = match self.rig.layout {
            Layout::Processes { .. } => "a process",
            Layout::Threads { .. } => "an engine thread",
        };
        self.story.say(format!(
            "Where the work went: into the NICs. The receiver's NIC — {what} standing in for the \
             card's hardware — took in every packet and wrote it into the receiver's memory ({} \
             on a CPU). The receiving program was not woken once.",
            millis(nic.on_cpu)
        ));
        Ok(transfer)
    }

    /// Step 4: both side by side, and the proof.
    fn compare(&mut self, record: &Record) -> Result<(), DemoError> {
        let len = record.size;
        self.story
            .step("Proof: TCP cost the receiver's CPU, RDMA cost it nothing");
        let (tcp, rdma) = (&record.tcp, &record.rdma);
        let receiver = |t: &Transfer| t.of(Role::Receiver).unwrap_or_default();
        let mut rows = vec![(
            "receiver".to_owned(),
            format!(
                "TCP {} on a CPU, {}   RDMA {} on a CPU, {}",
                millis(receiver(tcp).on_cpu),
                receiver(tcp).switches_text(),
                millis(receiver(rdma).on_cpu),
                receiver(rdma).switches_text()
            ),
        )];
        rows.push((
            "data arrived".to_owned(),
            format!(
                "TCP after {}   RDMA after {}",
                millis(tcp.took()),
                millis(rdma.took())
            ),
        ));
        for party in record.parties.iter().skip(1) {
            let (t, r) = (
                tcp.of(party.role).unwrap_or_default(),
                rdma.of(party.role).unwrap_or_default(),
            );
            rows.push((
                party.role.name().to_owned(),
                format!(
                    "TCP {} on a CPU   RDMA {} on a CPU",
                    millis(t.on_cpu),
                    millis(r.on_cpu)
                ),
            ));
        }
        self.story.tell(crate::Beat::Table(rows));
        if rdma.took() > tcp.took() {
            self.story.say(
                "On one machine the emulated RDMA is the slower of the two: its NICs are \
                 programs passing frames to each other through sockets, where a card does it in \
                 hardware at line rate. What the figures show is where the work goes.",
            );
        }
        let region = &self.rig.target.region;
        for (what, offset) in [("TCP", plan::tcp_offset(len)), ("RDMA", self.plan.offset)] {
            let diff = self
                .plan
                .payload
                .first_difference(region, offset as usize)?;
            self.story.proof(
                diff.is_none(),
                match diff {
                    None => format!(
                        "{what}: the {len} bytes at offset {offset:#x} of the receiver's memory \
                         are the ones the sender sent, byte for byte"
                    ),
                    Some(i) => format!(
                        "{what}: the receiver's memory differs from what the sender sent, first \
                         at byte {i}"
                    ),
                },
            );
        }
        let spent = receiver(tcp);
        self.story.proof(
            spent.on_cpu > Duration::ZERO,
            format!(
                "TCP cost the receiver {} ns on a CPU ({}) and {}",
                spent.on_cpu.as_nanos(),
                spent.ticks(),
                spent.switches_text()
            ),
        );
        let spent = receiver(rdma);
        self.story.proof(
            spent.is_nothing(),
            format!(
                "RDMA cost the receiver {} ns on a CPU ({}) and {}{}",
                spent.on_cpu.as_nanos(),
                spent.ticks(),
                spent.switches_text(),
                if spent.is_nothing() {
                    " (unchanged)"
                } else {
                    ""
                }
            ),
        );
        let nic = rdma.of(Role::ReceiverNic).unwrap_or_default();
        self.story.proof(
            nic.on_cpu > Duration::ZERO,
            format!(
                "the receiver's NIC did the RDMA work: {} ns on a CPU while the data landed",
                nic.on_cpu.as_nanos()
            ),
        );
        self.icrc_proof(record);
        self.receiver_looks(len)
    }

    fn icrc_proof(&mut self, record: &Record) {
        let roce: Vec<_> = record.frames.iter().filter_map(|f| f.brief).collect();
        let bad = roce.iter().filter(|b| !b.icrc_ok).count();
        let which = if record.frames.len() >= LISTED {
            format!("the first {} RoCE frames on the wire", roce.len())
        } else {
            format!("all {} RoCE frames on the wire", roce.len())
        };
        self.story.proof(
            bad == 0 && !roce.is_empty(),
            if bad == 0 {
                format!("{which} carry a valid ICRC")
            } else {
                format!("{bad} of {which} carry a bad ICRC")
            },
        );
    }

    /// The receiver, asked at last, looks at both copies itself.
    fn receiver_looks(&mut self, len: usize) -> Result<(), DemoError> {
        let shown = LOOKED_AT.min(len as u64);
        let mut want = vec![0; shown as usize];
        self.plan.payload.chunk(0, &mut want);
        let mut found = Vec::new();
        for offset in [plan::tcp_offset(len), self.plan.offset] {
            let FromTarget::Found { bytes, .. } = self
                .rig
                .target
                .ask(&ToTarget::Look { offset, len: shown })?
            else {
                return Err(DemoError::failed("the receiver did not say what it found"));
            };
            found.push(bytes);
        }
        self.story.say(format!(
            "Asked at last, the receiver program looks at both copies: at {:#x} it finds “{}”…, \
             at {:#x} “{}”….",
            plan::tcp_offset(len),
            printable(&found[0]),
            self.plan.offset,
            printable(&found[1])
        ));
        self.story.proof(
            found.iter().all(|f| *f == want),
            "the receiver finds both copies in its memory",
        );
        Ok(())
    }
}

//! `roce demo --scenario allreduce`: why AI clusters need RDMA.
//!
//! Training a model on many accelerators, each computes gradients on its share of the data, and
//! before the next step every one of them needs their sum: an all-reduce, thousands of times a
//! second. Here N hosts, each with its own NIC, all cabled to one switch (`roce switch`), the
//! demo tapping every cable ([`fabric`]), run the ring all-reduce of collective libraries such
//! as NCCL ([`ring`]): reduce-scatter,
//! then all-gather, every chunk an RDMA WRITE with immediate straight into the next host's
//! memory. Every figure is measured: the result of every host against the sum computed
//! directly, the bytes each host sent to each other (counted on the cables), and each host's CPU time —
//! from /proc, from outside — against what it spent in its add loops and on posting work
//! requests and taking completions (its own thread CPU clock, [`host`]).

pub mod fabric;
pub mod host;
pub mod html;
pub mod ring;
mod stage;

use std::fs::File;
use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use roce_nic::DeviceConfig;
use roce_wire::EthernetAddress;
use serde_json::json;

use crate::cpu::{self, CpuUse, Whom};
use crate::play::{failed_proofs, Mode, Options};
use crate::rig::ANSWER;
use crate::story::{Observer, Story};
use crate::target_host::protocol::{QpEnd, RingPeer};
use crate::target_host::{FromTarget, ToTarget};
use crate::{events, DemoError};
use host::Report;
pub use ring::{Phase, Ring, FLOAT};
use stage::Stage;

/// Hosts in the ring without `--hosts`.
pub const DEFAULT_HOSTS: usize = 4;
/// The most hosts: two processes each, on a machine that may have two cores.
pub const MAX_HOSTS: usize = 16;
/// Each host's vector without `--size`: a million floats.
pub const DEFAULT_SIZE: usize = 4 << 20;
/// The largest `--size`: every host holds its vector and a slot for each step's chunk.
pub const MAX_SIZE: usize = 256 << 20;

/// The ring of `hosts` hosts reducing `floats` floats, if it can run.
pub fn ring_of(hosts: usize, floats: usize) -> Result<Ring, DemoError> {
    if !(2..=MAX_HOSTS).contains(&hosts) {
        return Err(DemoError::Usage(format!(
            "--hosts must be 2 to {MAX_HOSTS} (a ring needs two)"
        )));
    }
    if floats == 0 {
        return Err(DemoError::Usage(
            "--size must hold at least one float (4 bytes)".into(),
        ));
    }
    Ok(Ring::new(hosts, floats))
}

/// The ring `--hosts` and `--size` ask for.
fn ring_for(options: &Options) -> Result<Ring, DemoError> {
    let size = options.size.unwrap_or(DEFAULT_SIZE);
    if size % FLOAT != 0 {
        return Err(DemoError::Usage(format!(
            "--size {size} is not a whole number of floats (4 bytes each)"
        )));
    }
    if size > MAX_SIZE {
        return Err(DemoError::Usage(
            "--size is at most 256M for allreduce (each host holds its vector and a chunk more \
             per step)"
                .into(),
        ));
    }
    ring_of(options.hosts.unwrap_or(DEFAULT_HOSTS), size / FLOAT)
}

/// The MAC of the NIC at `ip`, as the NIC derives it.
pub fn mac(ip: [u8; 4]) -> EthernetAddress {
    DeviceConfig::new("peer", IpAddr::from(ip)).mac
}

/// A MAC as `ip link` shows it.
fn mac_text(mac: EthernetAddress) -> String {
    let b = mac.0;
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        b[0], b[1], b[2], b[3], b[4], b[5]
    )
}

/// What one host did, as it and /proc tell it.
#[derive(Debug, Clone)]
pub struct HostRun {
    /// "process 1234" or "thread 1234".
    pub label: String,
    pub report: Report,
    /// Its time on a CPU while the all-reduce ran (from /proc, every thread of it).
    pub on_cpu: Duration,
    /// Where its vector first differs from the direct sum, if anywhere (a float's index).
    pub difference: Option<usize>,
}

/// What one NIC spent.
#[derive(Debug, Clone)]
pub struct NicRun {
    pub name: String,
    pub label: String,
    pub on_cpu: Duration,
}

/// What the fabric spent while the all-reduce ran: the switch, and the demo's thread that
/// passes the cables' frames (between processes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FabricRun {
    pub switch: Duration,
    pub taps: Option<Duration>,
}

/// What a run leaves for the page.
#[derive(Debug, Clone)]
pub struct Record {
    pub ring: Ring,
    pub in_process: bool,
    pub hosts: Vec<HostRun>,
    pub nics: Vec<NicRun>,
    pub fabric: FabricRun,
    pub seen: fabric::Seen,
}

/// Runs the scenario and tells it to `observer`. Installs this process's logging (warnings to
/// standard error).
pub fn run(options: &Options, observer: &mut dyn Observer) -> Result<(), DemoError> {
    let ring = ring_for(options)?;
    let page_file = match &options.html {
        Some(path) => Some((path, crate::play::create_page(path)?)),
        None => None,
    };
    let macs = (0..ring.hosts).map(|r| mac(stage::ip(r)).0).collect();
    let taps = fabric::Taps::new(macs, options.pcap.as_deref())?;
    events::install_plain_logging();
    let mut stage = match &options.mode {
        Mode::InProcess => stage::threads(ring, &taps)?,
        Mode::Processes { roce } => stage::processes(roce, ring, &taps)?,
    };
    let mut story = Story::new(observer);
    let record = play(&mut stage, ring, &taps, &mut story)?;
    // The NICs stop before the capture is closed, so it holds every frame they sent.
    drop(stage);
    taps.finish()?;
    if let Some((path, file)) = page_file {
        write_page(
            path,
            file,
            &html::Page {
                record: &record,
                beats: story.beats(),
            },
        )?;
    }
    failed_proofs(&story)
}

fn write_page(path: &Path, mut file: File, page: &html::Page) -> Result<(), DemoError> {
    file.write_all(page.render().as_bytes())
        .map_err(|e| DemoError::because(&format!("cannot write the page {}", path.display()), e))
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn ns_ms(ns: u64) -> String {
    ms(Duration::from_nanos(ns))
}

/// How long `limit` the run may take: generous for 16 hosts' processes on two cores.
fn limit(ring: Ring) -> Duration {
    let bytes = (ring.floats * FLOAT * ring.hosts) as u64;
    Duration::from_secs(60) + Duration::from_secs(bytes >> 22)
}

/// Who runs where, for the narration.
fn label(whom: Whom) -> String {
    match whom {
        Whom::Process(pid) => format!("process {pid}"),
        Whom::Thread(tid) => format!("thread {tid}"),
    }
}

/// Everyone's CPU use at one moment, from /proc: the hosts, their NICs, the switch, the
/// demo's thread that passes the cables' frames.
struct Readings {
    hosts: Vec<CpuUse>,
    nics: Vec<CpuUse>,
    switch: CpuUse,
    taps: Option<CpuUse>,
}

impl Readings {
    fn of(stage: &Stage) -> Result<Readings, DemoError> {
        Ok(Readings {
            hosts: stage
                .hosts
                .iter()
                .map(|h| h.cpu())
                .collect::<Result<_, _>>()?,
            nics: stage
                .nics
                .iter()
                .map(|n| cpu::measure(n.whom))
                .collect::<Result<_, _>>()?,
            switch: cpu::measure(stage.switch.whom)?,
            taps: stage
                .taps_thread
                .map(|tid| cpu::measure(Whom::Thread(tid)))
                .transpose()?,
        })
    }
}

fn play(
    stage: &mut Stage,
    ring: Ring,
    taps: &fabric::Taps,
    story: &mut Story,
) -> Result<Record, DemoError> {
    introduce(stage, ring, story);
    connect(stage, ring, story)?;
    let before = Readings::of(stage)?;
    story.say(format!(
        "Every host now waits for the go (state S). Their time on a CPU so far, from /proc: {}.",
        before
            .hosts
            .iter()
            .enumerate()
            .map(|(r, c)| format!("host {r} {}", ms(c.on_cpu)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // Go: every host at once, then every report.
    story.step(format!(
        "Reduce-scatter: each host passes a chunk to the next and adds in the one it receives, \
         {} times",
        ring.steps()
    ));
    let timeout_ms = limit(ring).as_millis() as u64;
    for host in &mut stage.hosts {
        host.tell(&ToTarget::AllReduce { timeout_ms })?;
    }
    story.say(
        "The demo tells every host to start (a line on its command channel). From here the hosts \
         and their NICs run the ring by themselves: each posts a WRITE with immediate of its \
         chunk into the next host's memory, and sleeps until the completions come.",
    );
    let mut reports = Vec::new();
    for (rank, host) in stage.hosts.iter_mut().enumerate() {
        match host.answer(limit(ring) + ANSWER)? {
            FromTarget::Reduced(report) => reports.push(report),
            _ => {
                return Err(DemoError::failed(format!(
                    "host {rank} did not report its all-reduce"
                )))
            }
        }
    }
    for host in &stage.hosts {
        host.asleep()?;
    }
    let after = Readings::of(stage)?;
    tell_phase(ring, &reports, Phase::ReduceScatter, story);
    story.say(format!(
        "After reduce-scatter each host holds the whole sum of one chunk: {}.",
        (0..ring.hosts)
            .map(|r| format!("host {r} chunk {}", ring.owned(r)))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    story.step(format!(
        "All-gather: each host passes on a summed chunk, which the next keeps as it is, {} times",
        ring.steps()
    ));
    tell_phase(ring, &reports, Phase::AllGather, story);
    story.say(
        "The NIC wrote each all-gather chunk straight to its place in the vector, and the next \
         step sent it on from there: no host copied it.",
    );
    let seen = taps.seen();
    links(ring, &seen, story);
    let hosts: Vec<HostRun> = stage
        .hosts
        .iter()
        .zip(reports)
        .zip(before.hosts.iter().zip(&after.hosts))
        .map(|((handle, report), (before, after))| {
            Ok(HostRun {
                label: label(handle.whom),
                report,
                on_cpu: after.on_cpu.saturating_sub(before.on_cpu),
                difference: first_difference(ring, &handle.region)?,
            })
        })
        .collect::<Result<_, DemoError>>()?;
    let nics: Vec<NicRun> = stage
        .nics
        .iter()
        .zip(before.nics.iter().zip(&after.nics))
        .map(|(nic, (before, after))| NicRun {
            name: nic.name.clone(),
            label: label(nic.whom),
            on_cpu: after.on_cpu.saturating_sub(before.on_cpu),
        })
        .collect();
    let fabric = FabricRun {
        switch: after.switch.on_cpu.saturating_sub(before.switch.on_cpu),
        taps: before
            .taps
            .zip(after.taps)
            .map(|(before, after)| after.on_cpu.saturating_sub(before.on_cpu)),
    };
    cpu_split(&hosts, &nics, &fabric, stage.in_process(), story);
    let record = Record {
        ring,
        in_process: stage.in_process(),
        hosts,
        nics,
        fabric,
        seen,
    };
    proofs(&record, story);
    story.end_step();
    Ok(record)
}

/// Step 1: the hosts, their NICs, the switch, the ring.
fn introduce(stage: &Stage, ring: Ring, story: &mut Story) {
    story.say(format!(
        "roce demo --scenario allreduce: {}",
        crate::Scenario::Allreduce.summary()
    ));
    story.say(
        "Training a model on many accelerators, each computes gradients on its share of the \
         data, and before the next step every one needs the sum of all of them: an all-reduce, \
         thousands of times a second. The ring all-reduce of collective libraries (NCCL) gets \
         there with each host sending about twice its vector, however many hosts there are.",
    );
    story.step(format!(
        "{} hosts, each with its own NIC, cabled to one switch",
        ring.hosts
    ));
    if stage.in_process() {
        story.say(format!(
            "Every NIC, the switch and every host program run in this process (--in-process): \
             each NIC is an engine thread, the switch (roce switch's: learning, line-rate \
             queues, tail drop) is {}, each host a thread. Every NIC is cabled in memory to a \
             port of the switch, and the demo taps every cable: it sees each frame a NIC sends.",
            label(stage.switch.whom)
        ));
    } else {
        story.say(format!(
            "Each NIC runs as a process (roce nic), each host program as a process of its own, \
             and the switch — roce switch, {}: learning, line-rate queues, tail drop — as \
             another. Every NIC is cabled over loopback UDP to a port of the switch, each cable \
             through the demo, which sees every frame a NIC sends.",
            label(stage.switch.whom)
        ));
    }
    let rows: Vec<(String, String)> = stage
        .hosts
        .iter()
        .zip(&stage.nics)
        .enumerate()
        .map(|(rank, (host, nic))| {
            let ip = stage::ip(rank);
            (
                format!("host {rank}"),
                format!(
                    "{}, NIC {} ({}), {}, MAC {}, switch port {}",
                    label(host.whom),
                    nic.name,
                    label(nic.whom),
                    IpAddr::from(ip),
                    mac_text(mac(ip)),
                    rank + 1
                ),
            )
        })
        .collect();
    story.tell(crate::Beat::Table(rows));
    let order: Vec<String> = (0..=ring.hosts)
        .map(|r| format!("host {}", r % ring.hosts))
        .collect();
    story.say(format!(
        "The ring: {}. Each host writes only to the next and is written to only by the one \
         before it.",
        order.join(" → ")
    ));
}

/// Step 2: the vectors, their chunks, and the QPs between neighbours.
fn connect(stage: &mut Stage, ring: Ring, story: &mut Story) -> Result<(), DemoError> {
    story.step("Each host registers its vector and connects to its neighbours");
    story.say(format!(
        "Each host holds a vector of {} floats ({} bytes), its own numbers (its “gradients”), \
         cut into {} chunks:",
        ring.floats,
        ring.floats * FLOAT,
        ring.hosts
    ));
    let chunks: Vec<(String, String)> = (0..ring.hosts)
        .map(|k| {
            let c = ring.chunk(k);
            (
                format!("chunk {k}"),
                format!("floats {}..{} ({} bytes)", c.start, c.end, c.len() * FLOAT),
            )
        })
        .collect();
    story.tell(crate::Beat::Table(chunks));
    let first = &stage.hosts[0].shared;
    story.say(format!(
        "Its memory is the vector, then {} slots where the previous host's reduce-scatter \
         chunks land. Host 0 registered its {} bytes with remote write: rkey {:#010x}, VA {:#x}; \
         it sends on QP {:#08x} and is written to through QP {:#08x}.",
        ring.steps(),
        first.len,
        first.rkey,
        first.va,
        first.send_qp.map(|q| q.qpn).unwrap_or_default(),
        first.qpn
    ));
    let peers: Vec<(RingPeer, RingPeer)> = (0..ring.hosts)
        .map(|rank| {
            let next = &stage.hosts[ring.next(rank)].shared;
            let prev = &stage.hosts[ring.prev(rank)].shared;
            let sender = prev
                .send_qp
                .ok_or_else(|| DemoError::failed("a host of the ring shared no QP to send on"))?;
            Ok((
                RingPeer {
                    qp: QpEnd {
                        qpn: next.qpn,
                        psn: next.psn,
                    },
                    gid: next.gid.clone(),
                    rkey: next.rkey,
                    va: next.va,
                },
                RingPeer {
                    qp: sender,
                    gid: prev.gid.clone(),
                    rkey: prev.rkey,
                    va: prev.va,
                },
            ))
        })
        .collect::<Result<_, DemoError>>()?;
    for (host, (next, prev)) in stage.hosts.iter_mut().zip(peers) {
        match host.ask(&ToTarget::JoinRing { next, prev })? {
            FromTarget::Connected => {}
            _ => return Err(DemoError::failed("a host did not join the ring")),
        }
    }
    story.say(format!(
        "The demo passed each host its neighbours' QP numbers, GIDs and keys (out of band, as \
         NCCL's bootstrap does over TCP). Each host connected both QPs (RC, path MTU {}) and \
         posted {} receives: a WRITE with immediate consumes one, to deliver its completion.",
        host::MTU.bytes(),
        2 * ring.steps()
    ));
    for host in &stage.hosts {
        host.asleep()?;
    }
    Ok(())
}

/// The steps of `phase`, one line each, from the hosts' reports.
fn tell_phase(ring: Ring, reports: &[Report], phase: Phase, story: &mut Story) {
    for step in 0..ring.steps() {
        let of_step: Vec<&host::StepReport> = reports
            .iter()
            .filter_map(|r| {
                r.steps
                    .iter()
                    .find(|s| s.phase == phase && s.step as usize == step)
            })
            .collect();
        let transfers: Vec<String> = of_step
            .iter()
            .enumerate()
            .map(|(rank, s)| format!("{rank}→{} chunk {}", ring.next(rank), s.sent_chunk))
            .collect();
        let bytes: u64 = of_step.iter().map(|s| s.sent_bytes).sum();
        let start = of_step.iter().map(|s| s.posted_us).min().unwrap_or(0);
        let end = of_step.iter().map(|s| s.done_us).max().unwrap_or(0);
        let what = match phase {
            Phase::ReduceScatter => "the last chunk added",
            Phase::AllGather => "the last chunk in place",
        };
        story.say(format!(
            "step {}: {}; {bytes} bytes in all, {} from the first WRITE posted to {what}",
            step + 1,
            transfers.join(", "),
            ms(Duration::from_micros(end.saturating_sub(start)))
        ));
        story.figures(json!({
            "figures": "step",
            "phase": phase.name(),
            "step": step + 1,
            "bytes": bytes,
            "took_us": end.saturating_sub(start),
        }));
    }
}

/// What each host sent to the next, as the taps on the cables counted it.
fn links(ring: Ring, seen: &fabric::Seen, story: &mut Story) {
    story.step("What each host sent to the next, as the demo's taps on the cables counted it");
    for rank in 0..ring.hosts {
        let next = ring.next(rank);
        let out = seen.link(rank, next);
        let back = seen.link(next, rank);
        let again = if out.again > 0 {
            format!(", and {} bytes sent again after a loss", out.again)
        } else {
            String::new()
        };
        story.say(format!(
            "host {rank} → host {next}: {} bytes of RDMA payload in {} frames{again} (the \
             schedule's 2×{} chunks: {} bytes); {} acknowledgements back",
            out.payload,
            out.frames - out.acks,
            ring.steps(),
            ring.bytes_per_link(rank),
            back.acks
        ));
        story.figures(json!({
            "figures": "link",
            "from": rank,
            "to": next,
            "payload_bytes": out.payload,
            "resent_bytes": out.again,
            "data_frames": out.frames - out.acks,
            "acks_back": back.acks,
            "schedule_bytes": ring.bytes_per_link(rank),
        }));
    }
    story.say(format!(
        "In all the NICs sent {} frames into the switch ({} RoCE, {} to every host, {} to an \
         address that is no host's).",
        seen.frames, seen.roce, seen.broadcast, seen.unknown
    ));
    story.figures(json!({
        "figures": "taps",
        "frames": seen.frames,
        "roce_frames": seen.roce,
        "bad_icrc_frames": seen.bad_icrc,
        "broadcast_frames": seen.broadcast,
        "unknown_frames": seen.unknown,
    }));
}

/// Where each host's CPU time went, and the NICs'.
fn cpu_split(
    hosts: &[HostRun],
    nics: &[NicRun],
    fabric: &FabricRun,
    in_process: bool,
    story: &mut Story,
) {
    story.step("Where each host's CPU went: adding numbers, not moving them");
    story.say(
        "Each host's time on a CPU while the all-reduce ran, from /proc (every thread of it), \
         against its own thread's CPU clock around its add loops and around posting WRITEs and \
         taking completions:",
    );
    let rows: Vec<(String, String)> = hosts
        .iter()
        .enumerate()
        .map(|(rank, h)| {
            let add = h.report.add_ns();
            let post = h.report.move_ns();
            let rest = (h.on_cpu.as_nanos() as u64).saturating_sub(add + post);
            (
                format!("host {rank}"),
                format!(
                    "{} on a CPU: adding {} ({} floats), posting and completions {}, the rest {} \
                     (its command channel, its report)",
                    ms(h.on_cpu),
                    ns_ms(add),
                    h.report.added,
                    ns_ms(post),
                    ns_ms(rest)
                ),
            )
        })
        .collect();
    story.tell(crate::Beat::Table(rows));
    for (rank, (h, nic)) in hosts.iter().zip(nics).enumerate() {
        story.figures(json!({
            "figures": "host",
            "host": rank,
            "on_cpu_ns": h.on_cpu.as_nanos() as u64,
            "adding_ns": h.report.add_ns(),
            "moving_ns": h.report.move_ns(),
            "floats_added": h.report.added,
            "nic": nic.name,
            "nic_on_cpu_ns": nic.on_cpu.as_nanos() as u64,
        }));
    }
    let posted: u64 = hosts.iter().map(|h| h.report.move_ns()).sum();
    let added: u64 = hosts.iter().map(|h| h.report.add_ns()).sum();
    let nic_total: Duration = nics.iter().map(|n| n.on_cpu).sum();
    story.say(format!(
        "Moving the numbers: no host copied a byte — its CPU touched the vector only in the add \
         loops. What moving did cost the hosts is posting the WRITEs and taking the completions: \
         {} in all, against {} adding. The bytes were moved by the NICs: {} in all ({}), each {} \
         standing in for a card's hardware.",
        ns_ms(posted),
        ns_ms(added),
        ms(nic_total),
        nics.iter()
            .map(|n| format!("{} {}", n.name, ms(n.on_cpu)))
            .collect::<Vec<_>>()
            .join(", "),
        if in_process {
            "an engine thread"
        } else {
            "a process"
        }
    ));
    story.say(format!(
        "The switch, passing their frames from port to port, spent {} — what a switch's \
         hardware does at no host's expense{}.",
        ms(fabric.switch),
        match fabric.taps {
            Some(taps) => format!(
                "; the demo's taps, passing on every frame of the cables (a cable's job), {}",
                ms(taps)
            ),
            None => String::new(),
        }
    ));
    story.figures(json!({
        "figures": "fabric",
        "switch_on_cpu_ns": fabric.switch.as_nanos() as u64,
        "taps_on_cpu_ns": fabric.taps.map(|t| t.as_nanos() as u64),
    }));
}

/// Where `region`'s vector first differs from the direct sum (a float's index), if anywhere.
fn first_difference(ring: Ring, region: &roce_hostmem::Region) -> Result<Option<usize>, DemoError> {
    const AT_ONCE: usize = 1 << 18;
    let mut bytes = vec![0u8; AT_ONCE.min(ring.floats) * FLOAT];
    let mut at = 0;
    while at < ring.floats {
        let n = AT_ONCE.min(ring.floats - at);
        let buf = &mut bytes[..n * FLOAT];
        region
            .read(at * FLOAT, buf)
            .map_err(|e| DemoError::because("cannot read a host's vector", e))?;
        for (i, float) in buf.chunks_exact(FLOAT).enumerate() {
            let have = f32::from_ne_bytes([float[0], float[1], float[2], float[3]]);
            if have.to_bits() != ring::direct_sum(ring.hosts, at + i).to_bits() {
                return Ok(Some(at + i));
            }
        }
        at += n;
    }
    Ok(None)
}

/// The proof lines.
fn proofs(record: &Record, story: &mut Story) {
    let ring = record.ring;
    story.step("Proof: every host holds the sum, and the NICs moved it");
    for (rank, host) in record.hosts.iter().enumerate() {
        story.proof(
            host.difference.is_none(),
            match host.difference {
                None => format!(
                    "host {rank}: all {} floats equal the sum of the {} vectors computed \
                     directly, bit for bit (read through the demo's own mapping of its memory)",
                    ring.floats, ring.hosts
                ),
                Some(i) => format!(
                    "host {rank}: float {i} is not the sum computed directly ({})",
                    ring::direct_sum(ring.hosts, i)
                ),
            },
        );
    }
    let steps = 2 * ring.steps();
    let short: Vec<String> = record
        .hosts
        .iter()
        .enumerate()
        .filter(|(_, h)| h.report.steps.len() != steps)
        .map(|(rank, _)| format!("host {rank}"))
        .collect();
    story.proof(
        short.is_empty(),
        if short.is_empty() {
            format!(
                "every host took {steps} WRITEs with immediate, each with the immediate and \
                 length its step expects"
            )
        } else {
            format!("{} took fewer than {steps} WRITEs", short.join(", "))
        },
    );
    let seen = &record.seen;
    let wrong: Vec<String> = (0..ring.hosts)
        .filter(|&r| seen.link(r, ring.next(r)).payload != ring.bytes_per_link(r))
        .map(|r| {
            format!(
                "host {r} → host {}: {} bytes, not {}",
                ring.next(r),
                seen.link(r, ring.next(r)).payload,
                ring.bytes_per_link(r)
            )
        })
        .collect();
    story.proof(
        wrong.is_empty(),
        if wrong.is_empty() {
            let per: Vec<String> = (0..ring.hosts)
                .map(|r| ring.bytes_per_link(r).to_string())
                .collect();
            format!(
                "each host sent the next exactly its 2×{} chunks of payload ({} bytes), \
                 counted on its cable",
                ring.steps(),
                dedup(per).join(" or ")
            )
        } else {
            wrong.join("; ")
        },
    );
    let strays: u64 = (0..ring.hosts)
        .flat_map(|from| (0..ring.hosts).map(move |to| (from, to)))
        .filter(|&(from, to)| from != to && to != ring.next(from) && from != ring.next(to))
        .map(|(from, to)| seen.link(from, to).frames)
        .sum();
    story.proof(
        strays == 0,
        if strays == 0 {
            "no frame went between hosts that are not neighbours in the ring".to_owned()
        } else {
            format!("{strays} frames went between hosts that are not neighbours")
        },
    );
    story.proof(
        seen.bad_icrc == 0 && seen.roce > 0,
        if seen.bad_icrc == 0 {
            format!(
                "all {} RoCE frames on the cables carry a valid ICRC",
                seen.roce
            )
        } else {
            format!(
                "{} of the {} RoCE frames on the cables carry a bad ICRC",
                seen.bad_icrc, seen.roce
            )
        },
    );
}

/// `items` without repeats, in order.
fn dedup(items: Vec<String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(hosts: Option<usize>, size: Option<usize>) -> Options {
        Options {
            scenario: crate::Scenario::Allreduce,
            mode: Mode::InProcess,
            size,
            hosts,
            pcap: None,
            html: None,
        }
    }

    #[test]
    fn rings_that_cannot_run_are_refused_in_one_line() {
        for (hosts, size, message) in [
            (Some(1), None, "--hosts must be 2 to 16 (a ring needs two)"),
            (Some(17), None, "--hosts must be 2 to 16 (a ring needs two)"),
            (
                None,
                Some(6),
                "--size 6 is not a whole number of floats (4 bytes each)",
            ),
            (
                None,
                Some(0),
                "--size must hold at least one float (4 bytes)",
            ),
        ] {
            let e = ring_for(&options(hosts, size)).unwrap_err();
            assert_eq!(e.to_string(), message);
        }
        let ring = ring_for(&options(None, None)).unwrap();
        assert_eq!((ring.hosts, ring.floats), (4, 1 << 20));
        assert_eq!(mac_text(mac([10, 0, 0, 3])), "02:00:0a:00:00:03");
    }

    #[test]
    fn a_vector_is_checked_float_for_float_against_the_direct_sum() {
        let ring = Ring::new(3, 300_000);
        let region = roce_hostmem::Region::anonymous(ring.region_len()).unwrap();
        let sums: Vec<u8> = (0..ring.floats)
            .flat_map(|i| ring::direct_sum(3, i).to_ne_bytes())
            .collect();
        region.write(0, &sums).unwrap();
        assert_eq!(first_difference(ring, &region).unwrap(), None);
        // One float off, past the first batch the check reads.
        let at = 299_999;
        region
            .write(at * FLOAT, &(ring::direct_sum(3, at) + 0.125).to_ne_bytes())
            .unwrap();
        assert_eq!(first_difference(ring, &region).unwrap(), Some(at));
    }
}

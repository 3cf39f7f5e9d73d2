//! The page of `allreduce`: the ring with the bytes each link carried, every step's transfers
//! as a table and as a timeline (a lane per host: each WRITE from its post to its completion,
//! each add), each host's CPU time split between adding and moving beside its NIC's, then the
//! narration.
//!
//! Stable ids and classes for scripts and tests: `#ring .link[data-from][data-to][data-bytes]`,
//! `#steps`, `#ring-timeline .transfer[data-host][data-phase][data-step]`, `#cpu-split
//! .part[data-host][data-part][data-ns]`, `#transcript`; the body's `data-rendered` says, once
//! laid out, how many of them have a size.

use std::f64::consts::PI;
use std::time::Duration;

use maud::{html, Markup};

use super::host::StepReport;
use super::ring::Phase;
use super::Record;
use crate::html::{document, proofs};
use crate::story::Beat;
use crate::Scenario;

const EXTRA_CSS: &str = r#"
.host-node { fill: #eef1f4; stroke: #555; stroke-width: 2; }
.switch-node { fill: #fff8c5; stroke: #555; stroke-width: 2; }
.cable { stroke: #c8cdd3; stroke-width: 2; }
.link { stroke: #1f6feb; stroke-width: 3; fill: none; }
.head { fill: #1f6feb; }
.transfer.reduce-scatter { fill: #1f6feb; } .transfer.all-gather { fill: #1a7f37; }
.adding { fill: #cf222e; }
.part.adding { fill: #cf222e; } .part.moving { fill: #bf8700; } .part.rest { fill: #8c959f; }
.part.nic { fill: #1f6feb; } .part.switch { fill: #9a6700; } .part.taps { fill: #c8cdd3; }
table.steps { border-collapse: collapse; font-family: ui-monospace, monospace; font-size: 12px; }
table.steps td, table.steps th { border: 1px solid #ddd; padding: 3px 6px; text-align: left; }
.legend .reduce-scatter i { background: #1f6feb; } .legend .all-gather i { background: #1a7f37; }
.legend .adding i { background: #cf222e; } .legend .moving i { background: #bf8700; }
.legend .rest i { background: #8c959f; } .legend .nic i { background: #1f6feb; }
.legend .switch i { background: #9a6700; }
"#;

/// How many links, transfers and CPU parts have a size once laid out (see [`document`]).
const CHECK: &str =
    "'links=' + count('#ring .link') + ' transfers=' + count('#ring-timeline .transfer') + \
    ' parts=' + count('#cpu-split .part')";

const WIDTH: f64 = 900.0;
const LANE: f64 = 26.0;
const PLOT_X: f64 = 90.0;
const PLOT_W: f64 = 780.0;

/// What the page is made of.
pub struct Page<'a> {
    pub record: &'a Record,
    pub beats: &'a [Beat],
}

fn ms(ns: u64) -> String {
    format!("{:.2} ms", ns as f64 / 1e6)
}

/// The hosts on a circle around the switch, each cabled to it; an arrow from each host to the
/// next with the bytes counted on its cable.
fn ring(record: &Record) -> Markup {
    let n = record.ring.hosts;
    let (cx, cy, radius) = (WIDTH / 2.0, 190.0, 140.0);
    let at = |rank: usize| {
        let angle = -PI / 2.0 + 2.0 * PI * rank as f64 / n as f64;
        (cx + radius * angle.cos(), cy + radius * angle.sin())
    };
    html! {
        svg #ring xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height="390"
            viewBox=(format!("0 0 {WIDTH} 390")) role="img" aria-label="the ring of hosts" {
            @for rank in 0..n {
                @let (x, y) = at(rank);
                line.cable x1=(format!("{x:.1}")) y1=(format!("{y:.1}")) x2=(cx) y2=(cy) {}
            }
            rect.switch-node x=(cx - 34.0) y=(cy - 16.0) width="68" height="32" rx="4" {
                title { "the switch: every frame goes through it" }
            }
            text.lane-name x=(cx) y=(cy + 5.0) text-anchor="middle" { "switch" }
            @for rank in 0..n {
                @let next = record.ring.next(rank);
                @let ((x1, y1), (x2, y2)) = (at(rank), at(next));
                // Shortened to the nodes' edges, and bent a little so that two hosts' links
                // both show.
                @let (dx, dy) = (x2 - x1, y2 - y1);
                @let len = (dx * dx + dy * dy).sqrt().max(1.0);
                @let (ux, uy) = (dx / len, dy / len);
                @let (sx, sy, ex, ey) = (x1 + ux * 30.0, y1 + uy * 30.0, x2 - ux * 34.0, y2 - uy * 34.0);
                @let (mx, my) = ((sx + ex) / 2.0 + uy * 22.0, (sy + ey) / 2.0 - ux * 22.0);
                @let link = record.seen.link(rank, next);
                path class="link" data-from=(rank) data-to=(next) data-bytes=(link.payload)
                    d=(format!("M {sx:.1} {sy:.1} Q {mx:.1} {my:.1} {ex:.1} {ey:.1}")) {
                    title { (format!("host {rank} → host {next}: {} bytes in {} frames", link.payload, link.frames)) }
                }
                circle.head cx=(format!("{ex:.1}")) cy=(format!("{ey:.1}")) r="4" {}
                text.axis x=(format!("{:.1}", mx + uy * 14.0)) y=(format!("{:.1}", my - ux * 14.0)) text-anchor="middle" {
                    (format!("{} B", link.payload))
                }
            }
            @for (rank, host) in record.hosts.iter().enumerate() {
                @let (x, y) = at(rank);
                circle.host-node cx=(format!("{x:.1}")) cy=(format!("{y:.1}")) r="28" {
                    title { (format!("host {rank}: {}", host.label)) }
                }
                text.lane-name x=(format!("{x:.1}")) y=(format!("{:.1}", y + 5.0)) text-anchor="middle" {
                    (format!("host {rank}"))
                }
            }
        }
    }
}

/// When the first host began and the last ended (microseconds since the Unix epoch), at
/// least a microsecond apart.
fn span(record: &Record) -> (u64, u64) {
    let reports = || record.hosts.iter().map(|h| &h.report);
    let start = reports().map(|r| r.started_us).min().unwrap_or(0);
    let end = reports().map(|r| r.ended_us).max().unwrap_or(start);
    (start, end.max(start + 1))
}

/// A table: a row per step, a column per host, what it sent and when.
fn steps(record: &Record) -> Markup {
    let (start, _) = span(record);
    let ring = record.ring;
    html! {
        table.steps #steps {
            tr {
                th { "step" }
                @for rank in 0..ring.hosts { th { "host " (rank) " → " (ring.next(rank)) } }
            }
            @for (phase, step) in ring.schedule() {
                tr {
                    td { (phase.name()) " " (step + 1) }
                    @for host in &record.hosts {
                        @if let Some(s) = find(&host.report.steps, phase, step) {
                            td title=(format!("posted at +{:.2} ms, done at +{:.2} ms",
                                (s.posted_us - start.min(s.posted_us)) as f64 / 1e3,
                                (s.done_us - start.min(s.done_us)) as f64 / 1e3)) {
                                "chunk " (s.sent_chunk) ", " (s.sent_bytes) " B"
                            }
                        } @else {
                            td { "—" }
                        }
                    }
                }
            }
        }
    }
}

fn find(steps: &[StepReport], phase: Phase, step: usize) -> Option<&StepReport> {
    steps
        .iter()
        .find(|s| s.phase == phase && s.step as usize == step)
}

/// A lane per host: each WRITE from its post to its completion, each add after.
fn timeline(record: &Record) -> Markup {
    let (start, end) = span(record);
    let x = |us: u64| PLOT_X + (us.saturating_sub(start)) as f64 / (end - start) as f64 * PLOT_W;
    let height = LANE * record.hosts.len() as f64 + 50.0;
    html! {
        svg #ring-timeline xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
            aria-label="every host's WRITEs and adds over time" {
            @for (rank, host) in record.hosts.iter().enumerate() {
                @let y = 10.0 + rank as f64 * LANE;
                text.lane-name x="0" y=(y + 14.0) { "host " (rank) }
                @for s in &host.report.steps {
                    @let (x1, x2) = (x(s.posted_us), x(s.sent_us.max(s.received_us)));
                    rect class=(format!("transfer {}", s.phase.name())) data-host=(rank)
                        data-phase=(s.phase.name()) data-step=(s.step + 1)
                        x=(format!("{x1:.1}")) y=(y) width=(format!("{:.1}", (x2 - x1).max(1.0))) height=(LANE - 10.0) {
                        title { (format!("{} step {}: chunk {} out ({} B), chunk {} in ({} B)",
                            s.phase.name(), s.step + 1, s.sent_chunk, s.sent_bytes, s.received_chunk, s.received_bytes)) }
                    }
                    @if s.phase == Phase::ReduceScatter {
                        @let (a1, a2) = (x(s.received_us), x(s.done_us));
                        rect.adding x=(format!("{a1:.1}")) y=(y + LANE - 10.0) width=(format!("{:.1}", (a2 - a1).max(1.0))) height="4" {
                            title { (format!("adding chunk {}: {}", s.received_chunk, ms(s.add_ns))) }
                        }
                    }
                }
            }
            @let axis = 10.0 + LANE * record.hosts.len() as f64 + 14.0;
            text.axis x=(PLOT_X) y=(axis) { "0 ms" }
            text.axis x=(PLOT_X + PLOT_W) y=(axis) text-anchor="end" {
                (format!("{:.2} ms", (end - start) as f64 / 1e3))
            }
        }
    }
}

/// Parts laid end to end from x = 150: (name, ns, x, width), each at least a hairline wide.
fn stack(parts: &[(&'static str, u64)], scale: f64) -> Vec<(&'static str, u64, f64, f64)> {
    let mut left = 150.0;
    parts
        .iter()
        .map(|&(name, ns)| {
            let w = (ns as f64 * scale).max(1.0);
            let part = (name, ns, left, w);
            left += w;
            part
        })
        .collect()
}

/// Each host's CPU time, stacked: adding, posting and completions, the rest; and its NIC's.
fn cpu_split(record: &Record) -> Markup {
    let most = record
        .hosts
        .iter()
        .map(|h| h.on_cpu)
        .chain(record.nics.iter().map(|n| n.on_cpu))
        .max()
        .unwrap_or_default()
        .max(Duration::from_micros(1))
        .as_nanos() as f64;
    let most = most.max(record.fabric.switch.as_nanos() as f64);
    let row = 2.0 * 18.0 + 10.0;
    let height = row * (record.hosts.len() + 1) as f64 + 10.0;
    let scale = 600.0 / most;
    let fabric_y = 5.0 + record.hosts.len() as f64 * row;
    let fabric: Vec<(&str, u64)> = std::iter::once(("switch", record.fabric.switch))
        .chain(record.fabric.taps.map(|t| ("taps", t)))
        .map(|(name, d)| (name, d.as_nanos() as u64))
        .collect();
    html! {
        svg #cpu-split xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
            aria-label="each host's CPU time: adding, moving; and its NIC's" {
            @for (rank, (host, nic)) in record.hosts.iter().zip(&record.nics).enumerate() {
                @let y = 5.0 + rank as f64 * row;
                @let add = host.report.add_ns();
                @let moving = host.report.move_ns();
                @let rest = (host.on_cpu.as_nanos() as u64).saturating_sub(add + moving);
                text.lane-name x="0" y=(y + 13.0) { "host " (rank) }
                @let parts = stack(&[("adding", add), ("moving", moving), ("rest", rest)], scale);
                @let left = parts.last().map_or(150.0, |p| p.2 + p.3);
                @for (name, ns, x, w) in parts {
                    rect class=(format!("part {name}")) data-host=(rank) data-part=(name) data-ns=(ns)
                        x=(format!("{x:.1}")) y=(y) width=(format!("{w:.1}")) height="14" {
                        title { (format!("host {rank} {name}: {}", ms(ns))) }
                    }
                }
                text.axis x=(format!("{:.1}", left + 6.0)) y=(y + 12.0) {
                    (format!("{} on a CPU: adding {}, moving {}", ms(host.on_cpu.as_nanos() as u64), ms(add), ms(moving)))
                }
                @let nic_ns = nic.on_cpu.as_nanos() as u64;
                rect class="part nic" data-host=(rank) data-part="nic" data-ns=(nic_ns)
                    x="150" y=(y + 18.0) width=(format!("{:.1}", (nic_ns as f64 * scale).max(1.0))) height="14" {
                    title { (format!("{}: {}", nic.name, ms(nic_ns))) }
                }
                text.axis x=(format!("{:.1}", 156.0 + (nic_ns as f64 * scale).max(1.0))) y=(y + 30.0) {
                    (format!("its NIC {}", ms(nic_ns)))
                }
            }
            text.lane-name x="0" y=(fabric_y + 13.0) { "the fabric" }
            @for (i, (name, ns)) in fabric.iter().enumerate() {
                @let (y, w) = (fabric_y + 18.0 * i as f64, (*ns as f64 * scale).max(1.0));
                rect class=(format!("part {name}")) data-part=(name) data-ns=(ns)
                    x="150" y=(y) width=(format!("{w:.1}")) height="14" {}
                text.axis x=(format!("{:.1}", 156.0 + w)) y=(y + 12.0) {
                    (match *name {
                        "switch" => format!("the switch {}", ms(*ns)),
                        _ => format!("the demo's taps on the cables {}", ms(*ns)),
                    })
                }
            }
        }
    }
}

impl Page<'_> {
    pub fn render(&self) -> String {
        let r = self.record;
        let setup = if r.in_process {
            "Every NIC and every host is a thread of one process (--in-process)."
        } else {
            "Every NIC and every host is a process of its own."
        };
        let body = html! {
            p.summary {
                (Scenario::Allreduce.summary()) ": " (r.ring.hosts) " hosts, "
                (r.ring.floats) " floats each. " (setup)
            }
            h2 { "Proof" }
            (proofs(self.beats))
            h2 { "The ring, and what each link carried" }
            (ring(r))
            h2 { "Every step's transfers" }
            (steps(r))
            h2 { "The steps over time" }
            p.legend {
                span.reduce-scatter { i {} "reduce-scatter WRITE, post to completion" }
                span.all-gather { i {} "all-gather WRITE" }
                span.adding { i {} "adding" }
            }
            (timeline(r))
            h2 { "Where each host's CPU went" }
            p.legend {
                span.adding { i {} "adding (its thread's CPU clock)" }
                span.moving { i {} "posting WRITEs, taking completions" }
                span.rest { i {} "the rest of its time on a CPU (/proc)" }
                span.nic { i {} "its NIC, which moved the bytes" }
                span.switch { i {} "the switch" }
            }
            (cpu_split(r))
        };
        document(Scenario::Allreduce, EXTRA_CSS, body, self.beats, CHECK)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fabric::Seen;
    use super::super::host::{Report, StepReport};
    use super::super::{FabricRun, HostRun, NicRun, Ring};
    use super::*;

    /// A ring of three whose hosts each sent 20 bytes a step, the taps having counted 40 bytes
    /// a link.
    fn record() -> Record {
        let ring = Ring::new(3, 15);
        let hosts = (0..3)
            .map(|rank| HostRun {
                label: format!("process {rank}"),
                report: Report {
                    steps: ring
                        .schedule()
                        .enumerate()
                        .map(|(i, (phase, step))| StepReport {
                            phase,
                            step: step as u32,
                            sent_chunk: ring.sent(rank, phase, step) as u32,
                            sent_bytes: 20,
                            received_chunk: ring.received(rank, phase, step) as u32,
                            received_bytes: 20,
                            posted_us: 1000 + 100 * i as u64,
                            sent_us: 1050 + 100 * i as u64,
                            received_us: 1060 + 100 * i as u64,
                            done_us: 1080 + 100 * i as u64,
                            add_ns: 20_000,
                            move_ns: 5_000,
                        })
                        .collect(),
                    started_us: 1000,
                    ended_us: 1400,
                    added: 10,
                },
                on_cpu: Duration::from_micros(100),
                difference: None,
            })
            .collect();
        let mut seen = Seen {
            hosts: 3,
            links: vec![Default::default(); 9],
            ..Seen::default()
        };
        for rank in 0..3 {
            seen.links[rank * 3 + ring.next(rank)].payload = 40;
        }
        Record {
            ring,
            in_process: false,
            hosts,
            nics: (0..3)
                .map(|rank| NicRun {
                    name: format!("nic{rank}"),
                    label: format!("process {}", 10 + rank),
                    on_cpu: Duration::from_millis(2),
                })
                .collect(),
            fabric: FabricRun {
                switch: Duration::from_millis(3),
                taps: None,
            },
            seen,
        }
    }

    #[test]
    fn the_ring_the_steps_and_the_cpu_are_drawn_from_the_record() {
        let record = record();
        let svg = ring(&record).into_string();
        assert_eq!(svg.matches(r#"class="link""#).count(), 3);
        assert!(
            svg.contains(r#"data-from="2" data-to="0" data-bytes="40""#),
            "{svg}"
        );
        let table = steps(&record).into_string();
        assert_eq!(table.matches("<tr>").count(), 1 + 4);
        assert!(table.contains("<td>all-gather 2</td>"), "{table}");
        let lanes = timeline(&record).into_string();
        assert_eq!(lanes.matches(r#"class="transfer "#).count(), 12);
        // Four steps over 400 µs: the first WRITE starts at the left edge.
        assert!(
            lanes.contains(r#"data-phase="reduce-scatter" data-step="1" x="90.0""#),
            "{lanes}"
        );
        let cpu = cpu_split(&record).into_string();
        // 100 µs on a CPU: 20 adding and 5 moving in each of four steps, nothing left over.
        assert!(
            cpu.contains(r#"data-part="adding" data-ns="80000""#),
            "{cpu}"
        );
        assert!(
            cpu.contains(r#"data-part="moving" data-ns="20000""#),
            "{cpu}"
        );
        assert!(cpu.contains(r#"data-part="rest" data-ns="0""#), "{cpu}");
        assert!(
            cpu.contains(r#"data-part="nic" data-ns="2000000""#),
            "{cpu}"
        );
    }
}

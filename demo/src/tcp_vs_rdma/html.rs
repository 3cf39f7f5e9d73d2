//! The page of `tcp-vs-rdma`: where the work went, as bars (each party's time on a CPU for TCP
//! and for RDMA side by side) and as timelines (each party's CPU time over wall-clock time
//! during each transfer, the moment the data arrived marked), then the frames of the RDMA WRITE
//! and the narration.
//!
//! Stable ids and classes for scripts and tests: `#bars .bar[data-role][data-transfer]
//! [data-ns]`, `#tcp-timeline` and `#rdma-timeline` with a `.cpu-line[data-role]` each, `#ladder`,
//! `#transcript`; the body's `data-rendered` says, once laid out, how many bars and lines have
//! a size.

use std::time::Duration;

use maud::{html, Markup};

use super::measure::{millis, Role};
use super::{Record, Transfer};
use crate::cpu::Sample;
use crate::html::{document, ladder, proofs};
use crate::rig::Layout;
use crate::story::Beat;
use crate::Scenario;

const EXTRA_CSS: &str = r#"
.bar.tcp { fill: #bf8700; } .bar.rdma { fill: #1f6feb; }
.cpu-line { fill: none; stroke-width: 2.5; }
.cpu-line.receiver { stroke: #cf222e; } .cpu-line.sender { stroke: #8250df; }
.cpu-line.receiver-nic { stroke: #1f6feb; } .cpu-line.sender-nic { stroke: #1a7f37; }
.cpu-line.wire { stroke: #8c959f; stroke-dasharray: 4 3; }
.arrived { stroke: #1d1d1f; stroke-dasharray: 2 3; }
.legend .receiver i { background: #cf222e; } .legend .sender i { background: #8250df; }
.legend .receiver-nic i { background: #1f6feb; } .legend .sender-nic i { background: #1a7f37; }
.legend .wire i { background: #8c959f; }
.legend .tcp i { background: #bf8700; } .legend .rdma i { background: #1f6feb; }
"#;

/// How many bars, lines and frames have a size once laid out (see [`document`]).
const CHECK: &str =
    "'bars=' + count('#bars .bar') + ' tcp-lines=' + count('#tcp-timeline .cpu-line') + \
    ' rdma-lines=' + count('#rdma-timeline .cpu-line') + ' packets=' + count('#ladder .packet')";

const WIDTH: f64 = 900.0;
const LABEL_W: f64 = 150.0;
const BAR_W: f64 = 600.0;
const BAR_H: f64 = 16.0;
const PLOT_X: f64 = 70.0;
const PLOT_Y: f64 = 20.0;
const PLOT_W: f64 = 800.0;
const PLOT_H: f64 = 200.0;
/// Points of a line at most.
const POINTS: usize = 600;

/// What the page is made of.
pub struct Page<'a> {
    pub layout: &'a Layout,
    pub record: &'a Record,
    pub beats: &'a [Beat],
}

fn nanos(d: Duration) -> u128 {
    d.as_nanos()
}

/// Each party's time on a CPU for TCP and RDMA, side by side, on one scale.
fn bars(record: &Record) -> Markup {
    let most = record
        .tcp
        .spent
        .iter()
        .chain(&record.rdma.spent)
        .map(|(_, s)| s.on_cpu)
        .max()
        .unwrap_or_default()
        .max(Duration::from_micros(1));
    let row = 2.0 * BAR_H + 14.0;
    let height = row * record.parties.len() as f64 + 10.0;
    html! {
        svg #bars xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
            aria-label="each party's time on a CPU, TCP and RDMA" {
            @for (i, party) in record.parties.iter().enumerate() {
                @let y = 5.0 + i as f64 * row;
                text.lane-name x="0" y=(y + BAR_H + 4.0) { (party.role.name()) }
                @for (j, (transfer, name)) in [(&record.tcp, "tcp"), (&record.rdma, "rdma")].into_iter().enumerate() {
                    @let spent = transfer.of(party.role).unwrap_or_default();
                    @let w = spent.on_cpu.as_secs_f64() / most.as_secs_f64() * BAR_W;
                    @let by = y + j as f64 * BAR_H;
                    // At least a hairline, so that nothing reads as missing: the figure says 0.
                    rect class=(format!("bar {name} {}", party.role.word()))
                        data-role=(party.role.word()) data-transfer=(name)
                        data-ns=(nanos(spent.on_cpu))
                        x=(LABEL_W) y=(by) width=(w.max(1.0)) height=(BAR_H - 2.0) {
                        title { (format!("{}, {}: {}", party.role.name(), name.to_uppercase(), spent.describe())) }
                    }
                    text.axis x=(LABEL_W + w.max(1.0) + 6.0) y=(by + BAR_H - 4.0) {
                        (format!("{} {}", name.to_uppercase(), millis(spent.on_cpu)))
                    }
                }
            }
        }
    }
}

/// One transfer's timeline: every party's CPU time since the start against wall-clock time.
fn timeline(id: &str, transfer: &Transfer, top: Duration) -> Markup {
    let from = transfer.started;
    let to = transfer.ended.max(from + Duration::from_millis(1));
    let span = to.saturating_sub(from).as_secs_f64();
    let x = |at: Duration| PLOT_X + at.saturating_sub(from).as_secs_f64().min(span) / span * PLOT_W;
    let y = |cpu: Duration| PLOT_Y + PLOT_H - cpu.as_secs_f64() / top.as_secs_f64() * PLOT_H;
    let line = |samples: &[Sample]| -> String {
        let base = samples
            .iter()
            .take_while(|s| s.at <= from)
            .last()
            .or(samples.first())
            .map(|s| s.on_cpu)
            .unwrap_or_default();
        let step = samples.len().div_ceil(POINTS).max(1);
        let mut points: Vec<String> =
            std::iter::once(format!("{PLOT_X:.1},{:.1}", y(Duration::ZERO)))
                .chain(
                    samples
                        .iter()
                        .step_by(step)
                        .filter(|s| s.at >= from)
                        .map(|s| format!("{:.1},{:.1}", x(s.at), y(s.on_cpu.saturating_sub(base)))),
                )
                .collect();
        if let Some(last) = samples.last() {
            points.push(format!(
                "{:.1},{:.1}",
                x(last.at.max(to)),
                y(last.on_cpu.saturating_sub(base))
            ));
        }
        points.join(" ")
    };
    let height = PLOT_H + 60.0;
    let arrived = x(transfer.arrived);
    html! {
        svg id=(id) xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
            aria-label="each party's CPU time during the transfer" {
            rect.plot x=(PLOT_X) y=(PLOT_Y) width=(PLOT_W) height=(PLOT_H) {}
            line.arrived x1=(arrived) y1=(PLOT_Y) x2=(arrived) y2=(PLOT_Y + PLOT_H) {
                title { "the last byte is in the receiver's memory" }
            }
            text.axis x=(arrived + 4.0) y=(PLOT_Y + 12.0) { "data arrived" }
            @for series in &transfer.series {
                polyline class=(format!("cpu-line {}", series.role.word()))
                    data-role=(series.role.word()) points=(line(&series.samples)) {
                    title { (series.role.name()) }
                }
            }
            text.axis x=(PLOT_X) y=(PLOT_Y + PLOT_H + 18.0) { "0 ms" }
            text.axis x=(PLOT_X + PLOT_W) y=(PLOT_Y + PLOT_H + 18.0) text-anchor="end" {
                (millis(to.saturating_sub(from)))
            }
            text.axis x=(PLOT_X + PLOT_W / 2.0) y=(PLOT_Y + PLOT_H + 36.0) text-anchor="middle" {
                "wall-clock time from the sender's start; up: time on a CPU since then"
            }
            text.axis x=(PLOT_X - 8.0) y=(PLOT_Y + PLOT_H) text-anchor="end" { "0" }
            text.axis x=(PLOT_X - 8.0) y=(PLOT_Y + 10.0) text-anchor="end" { (millis(top)) }
        }
    }
}

impl Page<'_> {
    pub fn render(&self) -> String {
        let r = self.record;
        // One CPU scale for both timelines, so that their heights compare.
        let top = [&r.tcp, &r.rdma]
            .iter()
            .flat_map(|t| t.series.iter())
            .filter_map(|s| {
                Some(
                    s.samples
                        .last()?
                        .on_cpu
                        .saturating_sub(s.samples.first()?.on_cpu),
                )
            })
            .max()
            .unwrap_or_default()
            .max(Duration::from_millis(1));
        let setup = match self.layout {
            Layout::Processes { .. } => "The receiver and each NIC are processes of their own; the sender is a thread of the demo.",
            Layout::Threads { .. } => "Everything runs in one process (--in-process): the receiver, the sender and each NIC's engine are threads of it.",
        };
        let legend = [
            Role::Receiver,
            Role::Sender,
            Role::ReceiverNic,
            Role::SenderNic,
            Role::Wire,
        ];
        let body = html! {
            p.summary {
                (Scenario::TcpVsRdma.summary()) ": " (r.size) " bytes each way. " (setup)
            }
            h2 { "Proof" }
            (proofs(self.beats))
            h2 { "Where the work went" }
            p.legend {
                span.tcp { i {} "over TCP" }
                span.rdma { i {} "by RDMA WRITE" }
                "Each party's time on a CPU while the data moved, from /proc."
            }
            (bars(r))
            h2 { "TCP: CPU time while the data moves" }
            p.legend {
                @for role in legend {
                    span class=(role.word()) { i {} (role.name()) }
                }
                "The same scale in both."
            }
            (timeline("tcp-timeline", &r.tcp, top))
            h2 { "RDMA WRITE: CPU time while the data moves" }
            (timeline("rdma-timeline", &r.rdma, top))
            h2 { "The frames of the RDMA WRITE" }
            p { "TCP ran on the kernel's loopback, which the demo cannot watch without root; the RDMA WRITE crossed the demo's wire." }
            (ladder::render(&r.frames, r.frame_count))
        };
        document(Scenario::TcpVsRdma, EXTRA_CSS, body, self.beats, CHECK)
    }
}

#[cfg(test)]
mod tests {
    use super::super::measure::{Party, Series, Spent};
    use super::*;
    use crate::cpu::Whom;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn transfer(receiver_ms: u64) -> Transfer {
        let spent = Spent {
            on_cpu: ms(receiver_ms),
            ..Spent::default()
        };
        Transfer {
            started: ms(1000),
            arrived: ms(1040),
            ended: ms(1050),
            spent: vec![
                (Role::Receiver, spent),
                (Role::ReceiverNic, Spent::default()),
            ],
            series: vec![Series {
                role: Role::Receiver,
                samples: vec![
                    Sample {
                        at: ms(999),
                        on_cpu: ms(5),
                    },
                    Sample {
                        at: ms(1030),
                        on_cpu: ms(5 + receiver_ms),
                    },
                ],
            }],
        }
    }

    #[test]
    fn bars_scale_to_the_largest_and_keep_the_figures() {
        let parties = vec![
            Party {
                role: Role::Receiver,
                whom: Whom::Process(1),
                label: "r".into(),
            },
            Party {
                role: Role::ReceiverNic,
                whom: Whom::Process(2),
                label: "n".into(),
            },
        ];
        let record = Record {
            size: 10,
            parties,
            tcp: transfer(20),
            rdma: transfer(0),
            frames: Vec::new(),
            frame_count: 0,
        };
        let svg = bars(&record).into_string();
        assert!(svg.contains(r#"data-role="receiver" data-transfer="tcp" data-ns="20000000" x="150" y="5" width="600""#), "{svg}");
        assert!(svg.contains(r#"data-transfer="rdma" data-ns="0""#), "{svg}");
        let line = timeline("tcp-timeline", &record.tcp, ms(20)).into_string();
        // From 0 at the start, up by 20 ms at 30 ms of 50, flat to the end.
        assert!(
            line.contains(r#"points="70.0,220.0 550.0,20.0 870.0,20.0""#),
            "{line}"
        );
        assert!(line.contains(r#"<line class="arrived" x1="710""#), "{line}");
    }
}

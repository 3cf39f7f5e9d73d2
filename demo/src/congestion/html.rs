//! The congestion scenario's page: for the run without DCQCN and the one with it, each flow's
//! goodput, the port's queue, and the marks and CNPs per millisecond over time — inline SVG
//! line charts (`#without-rates`, `#with-queue`, ... each line a `path.series[data-series]`).

use maud::{html, Markup};

use roce_switch::incast::{Report, RED_1G};

use super::Record;
use crate::html::{document, proofs};
use crate::story::Beat;
use crate::Scenario;

const EXTRA_CSS: &str = r#"
.chart .frame { fill: none; stroke: #8c959f; }
.chart .grid { stroke: #eaeef2; }
.chart .guide { stroke: #9a6700; stroke-dasharray: 5 4; }
.chart .guide-label { fill: #9a6700; font-size: 11px; }
.series { fill: none; stroke-width: 1.8; }
.s0 { stroke: #1f6feb; border-color: #1f6feb; } .s1 { stroke: #1a7f37; border-color: #1a7f37; }
.s2 { stroke: #bf8700; border-color: #bf8700; } .s3 { stroke: #8250df; border-color: #8250df; }
.s4 { stroke: #cf222e; border-color: #cf222e; } .s5 { stroke: #0a3069; border-color: #0a3069; }
.s6 { stroke: #6e7781; border-color: #6e7781; } .s7 { stroke: #953800; border-color: #953800; }
.queue { stroke: #cf222e; border-color: #cf222e; } .marks { stroke: #bf8700; border-color: #bf8700; }
.cnps { stroke: #8250df; border-color: #8250df; }
.swatch { display: inline-block; width: 18px; margin-right: 4px; border-top-width: 3px; border-top-style: solid; vertical-align: middle; }
"#;

/// Every chart drew a line.
const CHECK: &str = "'charts=' + count('svg.chart') + ' lines=' + count('svg.chart path.series')";

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 200.0;
const LEFT: f64 = 70.0;
const TOP: f64 = 20.0;
const PLOT_W: f64 = WIDTH - LEFT - 20.0;
const PLOT_H: f64 = HEIGHT - TOP - 30.0;

pub struct Page<'a> {
    pub record: &'a Record,
    pub beats: &'a [Beat],
}

/// One line of a chart: its CSS class, its name, its points (seconds, value).
struct Series {
    class: String,
    name: String,
    points: Vec<(f64, f64)>,
}

impl Page<'_> {
    pub fn render(&self) -> String {
        let r = self.record;
        let line = r.config.line_rate as f64 / 1e6;
        let body = html! {
            p.summary {
                (Scenario::Congestion.summary()) ": " (r.senders) " senders into one 1 Gbit/s \
                port, in simulated time, with roce switch's queue code and the NIC's DCQCN code."
            }
            h2 { "Proof" }
            (proofs(self.beats))
            @for (name, report) in [("without", &r.without), ("with", &r.with)] {
                h2 { (name) " DCQCN" }
                (rates(name, report, line))
                (queue(name, report, r.config.buffer))
                (signals(name, report))
            }
        };
        document(Scenario::Congestion, EXTRA_CSS, body, self.beats, CHECK)
    }
}

fn rates(run: &str, report: &Report, line: f64) -> Markup {
    let flows = report.delivered.len();
    let series: Vec<Series> = (0..flows)
        .map(|f| Series {
            class: format!("s{}", f % 8),
            name: format!("sender {f}"),
            points: report
                .samples
                .iter()
                .map(|s| (s.t, s.delivered[f] / 1e6))
                .collect(),
        })
        .collect();
    chart(
        &format!("{run}-rates"),
        "goodput per flow, Mbit/s",
        &series,
        line,
        &[],
    )
}

fn queue(run: &str, report: &Report, buffer: usize) -> Markup {
    let series = [Series {
        class: "queue".into(),
        name: "queue".into(),
        points: report
            .samples
            .iter()
            .map(|s| (s.t, s.queue as f64 / 1000.0))
            .collect(),
    }];
    let top = report
        .samples
        .iter()
        .map(|s| s.queue)
        .max()
        .unwrap_or(0)
        .max(RED_1G.kmax)
        .min(buffer) as f64
        / 1000.0;
    chart(
        &format!("{run}-queue"),
        "the receiver port's queue, KB",
        &series,
        top * 1.1,
        &[
            (RED_1G.kmin as f64 / 1000.0, "Kmin"),
            (RED_1G.kmax as f64 / 1000.0, "Kmax"),
            (buffer as f64 / 1000.0, "buffer"),
        ],
    )
}

/// Marks and CNPs per millisecond (from the running totals).
fn signals(run: &str, report: &Report) -> Markup {
    let per_ms = |pick: fn(&roce_switch::incast::Sample) -> u64| -> Vec<(f64, f64)> {
        let mut last = 0;
        let mut last_t = 0.0;
        report
            .samples
            .iter()
            .map(|s| {
                let (v, dt) = (pick(s) - last, s.t - last_t);
                last = pick(s);
                last_t = s.t;
                (s.t, v as f64 / (dt * 1e3).max(1e-9))
            })
            .collect()
    };
    let drops = per_ms(|s| s.dropped);
    let series = [
        Series {
            class: "marks".into(),
            name: "marks".into(),
            points: per_ms(|s| s.marked),
        },
        Series {
            class: "cnps".into(),
            name: "CNPs".into(),
            points: per_ms(|s| s.cnps),
        },
        Series {
            class: "s6".into(),
            name: "drops".into(),
            points: drops,
        },
    ];
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(1.0, f64::max);
    chart(
        &format!("{run}-signals"),
        "marks, CNPs and drops per ms",
        &series,
        top * 1.1,
        &[],
    )
}

fn chart(id: &str, title: &str, series: &[Series], y_max: f64, guides: &[(f64, &str)]) -> Markup {
    let t_max = series
        .iter()
        .flat_map(|s| s.points.last().map(|p| p.0))
        .fold(1e-9, f64::max);
    let x = |t: f64| LEFT + t / t_max * PLOT_W;
    let y = |v: f64| TOP + PLOT_H - (v / y_max).min(1.05) * PLOT_H;
    let path = |points: &[(f64, f64)]| -> String {
        points
            .iter()
            .enumerate()
            .map(|(n, (t, v))| {
                format!(
                    "{}{:.1},{:.1}",
                    if n == 0 { "M" } else { " L" },
                    x(*t),
                    y(*v)
                )
            })
            .collect()
    };
    let ticks = 4;
    html! {
        p.legend {
            (title) ": "
            @for s in series {
                span { i class=(format!("swatch {}", s.class)) {} (s.name) " " }
            }
        }
        svg.chart id=(id) width=(WIDTH) height=(HEIGHT) viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) {
            @for k in 0..=ticks {
                @let v = y_max * k as f64 / ticks as f64;
                line.grid x1=(LEFT) x2=(LEFT + PLOT_W) y1=(y(v)) y2=(y(v)) {}
                text.axis x=(LEFT - 6.0) y=(y(v) + 4.0) text-anchor="end" { (format!("{v:.0}")) }
            }
            @for k in 0..=ticks {
                @let t = t_max * k as f64 / ticks as f64;
                text.axis x=(x(t)) y=(TOP + PLOT_H + 16.0) text-anchor="middle" { (format!("{:.0} ms", t * 1e3)) }
            }
            @for (v, label) in guides {
                @if *v <= y_max {
                    line.guide x1=(LEFT) x2=(LEFT + PLOT_W) y1=(y(*v)) y2=(y(*v)) {}
                    text.guide-label x=(LEFT + PLOT_W - 4.0) y=(y(*v) - 3.0) text-anchor="end" { (label) }
                }
            }
            rect.frame x=(LEFT) y=(TOP) width=(PLOT_W) height=(PLOT_H) {}
            @for s in series {
                path class=(format!("series {}", s.class)) data-series=(s.name) d=(path(&s.points)) {}
            }
        }
    }
}

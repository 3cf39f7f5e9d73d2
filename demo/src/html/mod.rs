//! `--html FILE`: the run as one self-contained page (inline CSS and SVG, a few lines of inline
//! script, no fetches) — the [`ladder`] diagram of the frames, the target's [`memory_map`] with
//! the bytes the NICs touched, the [`timeline`] of the target's CPU while the data landed, the
//! proof lines and the whole narration.
//!
//! Elements carry stable ids and classes (`#ladder .packet[data-opcode][data-psn]`,
//! `#written-range`, `#cpu-line`) for tests and for anyone who wants to script the page. The
//! script only checks, once the browser has laid the page out, that the drawings have a size,
//! and says so in `data-rendered` on the body: what a headless browser test reads back.

pub mod ladder;
pub mod memory_map;
pub mod timeline;

use std::time::Duration;

use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::plan::Plan;
use crate::play::Record;
use crate::rig::Layout;
use crate::story::Beat;
use crate::{text, Scenario};

const CSS: &str = r#"
body { font-family: system-ui, sans-serif; margin: 24px auto; max-width: 940px; color: #1d1d1f; background: #fff; }
h1 { font-size: 26px; margin-bottom: 4px; }
h2 { font-size: 19px; margin-top: 28px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
p.summary { color: #444; margin-top: 0; }
ul.proofs { list-style: none; padding-left: 4px; }
ul.proofs li { margin: 3px 0; font-family: ui-monospace, monospace; font-size: 13px; }
li.held::before { content: "✓ "; color: #1a7f37; font-weight: bold; }
li.failed::before { content: "✗ "; color: #cf222e; font-weight: bold; }
svg text { font-family: ui-monospace, monospace; font-size: 12px; fill: #1d1d1f; }
.lane { stroke: #555; stroke-width: 3; }
.lane-name { font-weight: bold; font-size: 14px; }
.lane-sub, .time, .axis { fill: #666; font-size: 11px; }
.packet .arrow { stroke-width: 2.5; }
.packet:hover .arrow { stroke-width: 5; }
.packet:hover .label { font-weight: bold; }
.packet.lost .arrow { stroke-dasharray: 6 4; }
.packet.violation .label { fill: #cf222e; font-weight: bold; text-decoration: underline wavy; }
.cross { fill: #9a6700; font-size: 20px; font-weight: bold; }
.op-write .arrow, .op-write .head, .frame-tick.op-write { stroke: #1f6feb; fill: #1f6feb; }
.op-read .arrow, .op-read .head, .frame-tick.op-read { stroke: #1a7f37; fill: #1a7f37; }
.op-send .arrow, .op-send .head, .frame-tick.op-send { stroke: #bf8700; fill: #bf8700; }
.op-atomic .arrow, .op-atomic .head, .frame-tick.op-atomic { stroke: #8250df; fill: #8250df; }
.op-ack .arrow, .op-ack .head, .frame-tick.op-ack { stroke: #6e7781; fill: #6e7781; }
.op-nak .arrow, .op-nak .head, .frame-tick.op-nak { stroke: #cf222e; fill: #cf222e; }
.op-other .arrow, .op-other .head { stroke: #aaa; fill: #aaa; }
.frame-tick { stroke-width: 2; }
#region-bar { fill: #eef1f4; stroke: #8c959f; }
rect.written { fill: #1f6feb; }
rect.read { fill: #1a7f37; }
.plot { fill: none; stroke: #8c959f; }
#frozen-band { fill: #ddf4ff; }
.band-label { fill: #0969da; }
#cpu-line { fill: none; stroke: #cf222e; stroke-width: 2.5; }
.legend span { display: inline-block; margin-right: 14px; font-size: 13px; }
.legend i { display: inline-block; width: 22px; height: 4px; margin-right: 5px; vertical-align: middle; }
.legend .op-write i { background: #1f6feb; } .legend .op-read i { background: #1a7f37; }
.legend .op-send i { background: #bf8700; } .legend .op-atomic i { background: #8250df; }
.legend .op-ack i { background: #6e7781; } .legend .op-nak i { background: #cf222e; }
pre { background: #f6f8fa; padding: 12px; font-size: 12px; overflow-x: auto; }
"#;

/// Which drawings have a size, once laid out (see the module's documentation): a JavaScript
/// expression over `drawn(element)` and `count(selector)`.
const CHECK: &str = "'packets=' + count('#ladder .packet') + \
    ' memory=' + drawn(document.getElementById('written-range') || document.getElementById('read-range')) + \
    ' cpu=' + drawn(document.getElementById('cpu-line'))";

/// What the page is made of.
pub struct Page<'a> {
    pub scenario: Scenario,
    pub plan: &'a Plan,
    pub layout: &'a Layout,
    pub record: &'a Record,
    pub beats: &'a [Beat],
}

impl Page<'_> {
    /// The time the timeline spans: from just before the work request to just after its
    /// completion (and the last frame), padded by a tenth either side, at least 5 ms.
    fn window(&self) -> (Duration, Duration) {
        let r = self.record;
        let last_frame = r.frames.last().map(|f| f.at).unwrap_or_default();
        let end = r.completed_at.max(last_frame).max(r.posted_at);
        let pad = (end.saturating_sub(r.posted_at) / 10).max(Duration::from_millis(5));
        (r.posted_at.saturating_sub(pad), end + pad)
    }

    /// The scenario's summary as this run played it (a thread is idle, not frozen).
    fn summary(&self) -> String {
        match self.layout {
            Layout::Processes { .. } => self.scenario.summary(),
            Layout::Threads { .. } => self.scenario.summary_with("idle"),
        }
    }

    fn setup(&self) -> String {
        match self.layout {
            Layout::Processes { nics, target } => format!(
                "Two NIC processes ({} pid {}, {} pid {}) cabled over loopback UDP through the \
                 demo; the target program is process {target}.",
                nics[0].0, nics[0].1, nics[1].0, nics[1].1
            ),
            Layout::Threads { nics, target } => format!(
                "Two NICs in one process ({}, {}), cabled in memory; the target program is \
                 thread {target}.",
                nics[0], nics[1]
            ),
        }
    }

    pub fn render(&self) -> String {
        let r = self.record;
        let timeline = timeline::Timeline {
            samples: &r.samples,
            frames: &r.frames,
            window: self.window(),
            frozen: r.frozen,
        };
        let legend = [
            ("op-write", "RDMA WRITE"),
            ("op-read", "RDMA READ"),
            ("op-send", "SEND"),
            ("op-atomic", "atomic"),
            ("op-ack", "ACK"),
            ("op-nak", "NAK / RNR NAK"),
        ];
        let body = html! {
            p.summary { (self.summary()) ". " (self.setup()) }
            h2 { "Proof" }
            (proofs(self.beats))
            h2 { "The frames between the two NICs" }
            p.legend {
                @for (class, name) in legend {
                    span class=(class) { i {} (name) }
                }
                "Hover over a frame for its fields."
            }
            (ladder::render(&r.frames, r.frame_count))
            h2 { "The target's memory" }
            (memory_map::render(r.region_len, r.region_va, r.written.as_ref(), r.read.as_ref()))
            h2 { "The target's CPU while the data lands" }
            p { "The target's time on a CPU (from /proc), sampled every millisecond; the ticks are the frames." }
            (timeline.render())
        };
        document(self.scenario, "", body, self.beats, CHECK)
    }
}

/// The proof lines of `beats`, ✓ or ✗ each: `#proofs`.
pub(crate) fn proofs(beats: &[Beat]) -> Markup {
    html! {
        ul.proofs #proofs {
            @for beat in beats {
                @if let Beat::Proof { held, text } = beat {
                    li class=(if *held { "held" } else { "failed" }) { (text) }
                }
            }
        }
    }
}

/// A page of `scenario`: the shared styles and `css`, its heading, `body`, what the demo said
/// (`#transcript`), and a script that, once the browser has laid the page out, sets the body's
/// `data-rendered` to `check`: a JavaScript expression that may use `drawn(element)` (whether
/// it has a size) and `count(selector)` (how many of those elements do).
pub(crate) fn document(
    scenario: Scenario,
    css: &str,
    body: Markup,
    beats: &[Beat],
    check: &str,
) -> String {
    let page: Markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "roce demo — " (scenario) }
                style { (PreEscaped(CSS)) (PreEscaped(css)) }
            }
            body {
                h1 { "roce demo --scenario " (scenario) }
                (body)
                h2 { "What the demo said" }
                pre #transcript { (text::plain(beats)) }
                script {
                    (PreEscaped(format!(
                        "window.addEventListener('load', function () {{\n\
                         function drawn(el) {{ if (!el) return false; var b = el.getBBox(); return b.width > 0 || b.height > 0; }}\n\
                         function count(sel) {{ return Array.prototype.filter.call(document.querySelectorAll(sel), drawn).length; }}\n\
                         document.body.setAttribute('data-rendered', {check});\n}});\n"
                    )))
                }
            }
        }
    };
    page.into_string()
}

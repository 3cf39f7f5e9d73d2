//! The ladder (sequence) diagram: the two NICs as vertical lines, each frame an arrow from the
//! sender to the receiver, top to bottom in the order they crossed, coloured by opcode, labelled
//! with opcode and PSN; hovering over one shows its fields and `roce conform`'s verdict on it
//! (a frame that breaks a transport rule is outlined). A lost frame stops half way.

use maud::{html, Markup};
use roce_tools::conform::{Checker, Options, Report, Violation};
use roce_wire::aeth::Syndrome;
use roce_wire::describe::Description;
use roce_wire::{Frame, Kind};

use crate::wire::{Brief, Seen};
use crate::Side;

/// Frames drawn at most; a gigabyte's quarter million are summed up below the last.
pub const DRAWN: usize = 200;
const WIDTH: u32 = 900;
const LEFT: u32 = 170;
const RIGHT: u32 = 730;
const TOP: u32 = 60;
const ROW: u32 = 34;
/// How far an arrow drops while it crosses: frames take time.
const SLANT: u32 = 14;

/// The colour class of a frame: what kind of operation it belongs to.
pub fn class(brief: Option<&Brief>) -> &'static str {
    let Some(b) = brief else { return "op-other" };
    let kind = b.opcode.kind();
    match b.syndrome {
        Some(Syndrome::Nak(_)) | Some(Syndrome::RnrNak { .. }) => return "op-nak",
        _ => {}
    }
    if kind.is_write() {
        "op-write"
    } else if kind.is_send() {
        "op-send"
    } else if kind == Kind::ReadRequest || kind.is_read_response() {
        "op-read"
    } else if kind.is_atomic() || kind == Kind::AtomicAcknowledge {
        "op-atomic"
    } else {
        "op-ack"
    }
}

/// The arrow's label: the opcode without its transport, the PSN, an acknowledgement's verdict.
fn label(frame: &Seen) -> String {
    let Some(b) = &frame.brief else {
        return format!("not RoCE ({} bytes)", frame.len);
    };
    let name = b.opcode.to_string();
    let name = name.strip_prefix("RC ").unwrap_or(&name);
    let mut text = format!("{name}  PSN {}", b.psn);
    if let Some(s) = b.syndrome {
        text.push_str(&format!("  [{s}]"));
    }
    if b.payload > 0 {
        text.push_str(&format!("  {} B", b.payload));
    }
    text
}

/// `roce conform`'s report on the frames, as a capture of the wire taken at the sender.
fn judge(frames: &[Seen]) -> Report {
    let mut checker = Checker::new(Options::default());
    for frame in frames {
        if let Some(parsed) = frame.bytes.as_deref().and_then(|b| Frame::parse(b).ok()) {
            checker.packet(u64::from(frame.number), frame.at, &parsed);
        }
    }
    checker.finish()
}

/// The verdict on one frame: the rules it takes part in breaking.
fn verdict<'a>(report: &'a Report, frame: &Seen) -> Vec<&'a Violation> {
    report
        .violations
        .iter()
        .filter(|v| v.frames.contains(&u64::from(frame.number)))
        .collect()
}

/// What hovering over a frame shows: its summary, `roce conform`'s verdict, then every field
/// with its value.
fn hover(frame: &Seen, broken: &[&Violation]) -> String {
    let mut text = format!(
        "frame {}: {} NIC → {} NIC, {} bytes{}",
        frame.number,
        frame.from,
        frame.from.peer(),
        frame.len,
        if frame.dropped {
            " (LOST on the wire)"
        } else {
            ""
        }
    );
    let Some(bytes) = &frame.bytes else {
        return text;
    };
    if let Ok(parsed) = Frame::parse(bytes) {
        let description = Description::new(&parsed);
        text.push_str(&format!("\n{}", description.summary()));
        if broken.is_empty() {
            text.push_str("\nroce conform: follows the transport rules");
        }
        for v in broken {
            text.push_str(&format!(
                "\nroce conform: breaks {} ({}): expected {}; found {}",
                v.rule,
                v.rule.citation(),
                v.expected,
                v.found
            ));
        }
        for field in description.fields() {
            text.push_str(&format!("\n{} {}: {field}", field.layer, field.name()));
        }
    }
    text
}

/// The diagram of `frames` (the first [`DRAWN`] of them), `total` frames in all.
pub fn render(frames: &[Seen], total: u32) -> Markup {
    let drawn = &frames[..frames.len().min(DRAWN)];
    let height = TOP + ROW * drawn.len() as u32 + 60;
    let start = drawn.first().map(|f| f.at).unwrap_or_default();
    let middle = (LEFT + RIGHT) / 2;
    let report = judge(frames);
    html! {
        svg #ladder xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(height)
            viewBox=(format!("0 0 {WIDTH} {height}")) role="img"
            aria-label="ladder diagram of the frames between the two NICs" {
            text.lane-name x=(LEFT) y="24" text-anchor="middle" { "initiator NIC" }
            text.lane-sub x=(LEFT) y="42" text-anchor="middle" { "10.0.0.1" }
            text.lane-name x=(RIGHT) y="24" text-anchor="middle" { "target NIC" }
            text.lane-sub x=(RIGHT) y="42" text-anchor="middle" { "10.0.0.2" }
            line.lane x1=(LEFT) y1=(TOP - 8) x2=(LEFT) y2=(height - 40) {}
            line.lane x1=(RIGHT) y1=(TOP - 8) x2=(RIGHT) y2=(height - 40) {}
            @for (i, frame) in drawn.iter().enumerate() {
                @let y = TOP + ROW * i as u32 + 10;
                @let (x1, x2) = if frame.from == Side::Initiator { (LEFT, RIGHT) } else { (RIGHT, LEFT) };
                @let end = if frame.dropped { middle } else { x2 };
                @let y2 = if frame.dropped { y + SLANT / 2 } else { y + SLANT };
                @let psn = frame.brief.map(|b| b.psn.to_string()).unwrap_or_default();
                @let opcode = frame.brief.map(|b| b.opcode.to_string()).unwrap_or_default();
                @let broken = verdict(&report, frame);
                @let class = format!("packet {}{}{}", class(frame.brief.as_ref()), if frame.dropped { " lost" } else { "" }, if broken.is_empty() { "" } else { " violation" });
                @let conform = if frame.brief.is_none() { "-".to_owned() } else if broken.is_empty() { "ok".to_owned() } else { broken.iter().map(|v| v.rule.id()).collect::<Vec<_>>().join(",") };
                g class=(class) id=(format!("packet-{}", frame.number))
                    data-opcode=(opcode) data-psn=(psn) data-from=(frame.from.word())
                    data-lost=(frame.dropped) data-conform=(conform) {
                    title { (hover(frame, &broken)) }
                    text.time x="8" y=(y + 4) {
                        (format!("+{} µs", frame.at.saturating_sub(start).as_micros()))
                    }
                    line.arrow x1=(x1) y1=(y) x2=(end) y2=(y2) {}
                    @if frame.dropped {
                        text.cross x=(end) y=(y2 + 6) text-anchor="middle" { "↯" }
                    } @else {
                        @let back = if x2 > x1 { x2 - 9 } else { x2 + 9 };
                        polygon.head points=(format!("{x2},{} {back},{} {back},{}", y + SLANT, y + SLANT - 5, y + SLANT + 5)) {}
                    }
                    text.label x=(middle) y=(y - 4) text-anchor="middle" { (label(frame)) }
                }
            }
            @if (total as usize) > drawn.len() {
                text.more x=(middle) y=(height - 16) text-anchor="middle" {
                    (format!("… and {} more frames", total as usize - drawn.len()))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::roce_frame;
    use crate::wire::Wire;

    #[test]
    fn one_element_per_frame_with_its_opcode_psn_and_fields() {
        let wire = Wire::new(None, Some(1)).unwrap();
        wire.carry(Side::Initiator, &roce_frame(Kind::WriteFirst, 5, &[1; 256]));
        wire.carry(
            Side::Initiator,
            &roce_frame(Kind::WriteMiddle, 6, &[2; 256]),
        );
        wire.carry(Side::Initiator, &roce_frame(Kind::ReadRequest, 7, &[]));
        let svg = render(&wire.frames(), 3).into_string();
        assert_eq!(svg.matches("<g class=\"packet").count(), 3);
        assert!(svg.contains(r#"<g class="packet op-write" id="packet-1" data-opcode="RC RDMA_WRITE_FIRST" data-psn="5" data-from="initiator" data-lost="false" data-conform="ok">"#), "{svg}");
        // A READ while the WRITE is under way: `roce conform`'s verdict marks both frames.
        assert!(svg.contains(r#"class="packet op-write lost violation" id="packet-2""#));
        assert!(svg.contains(r#"class="packet op-read violation" id="packet-3""#));
        assert!(svg.contains(r#"data-conform="opcode-sequence""#));
        assert!(
            svg.contains("roce conform: breaks opcode-sequence"),
            "{svg}"
        );
        assert!(svg.contains("roce conform: follows the transport rules"));
        assert!(svg.contains("RDMA_WRITE_FIRST  PSN 5  256 B"));
        assert!(svg.contains("BTH PSN: 5"), "hover shows the fields");
        assert!(svg.contains("(LOST on the wire)"));
        assert!(!svg.contains("more frames"));
        let more = render(&wire.frames(), 1000).into_string();
        assert!(more.contains("… and 997 more frames"));
    }
}

//! `roce conform`: judge every queue-pair conversation of captures against the transport rules
//! (`roce_tools::conform`), print a summary per conversation and each broken rule with its
//! frames, and exit 1 when a rule not allowed is broken.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use roce_tools::conform::{self, Conversation, Counts, End, Report, Rule};
use roce_wire::capture::{self, CaptureError};
use serde_json::{json, Value};

use crate::Failure;

pub const EXAMPLES: &str = "\
Examples:
  roce conform capture.pcap                      a summary per conversation, each broken rule
  roce conform --json capture.pcap | jq .        the same as one JSON object per capture
  roce conform --allow resend-cause rxe.pcap     accept a documented deviation
  roce conform --reordering faults.pcap          the network reorders: skip the order rules
  roce conform --at 10.0.0.1 nic.pcap            taken at 10.0.0.1 (roce nic --faults --pcap)
  roce conform --rules                           list the rules with their citations

Exit codes: 0 every rule held (or was allowed), 1 a rule was broken, 2 bad usage or input.";

#[derive(clap::Args)]
pub struct Args {
    /// One JSON object per capture on standard output.
    #[arg(long)]
    json: bool,
    /// Accept a broken rule (its identifier, see --rules); repeat or separate with commas.
    #[arg(long, value_name = "RULE", value_delimiter = ',', value_parser = parse_rule)]
    allow: Vec<Rule>,
    /// The network may reorder packets (fault injection, several paths): do not judge the
    /// rules that depend on the order of the two directions (resend-cause, nak-go-back,
    /// ack-coverage, ack-credits). They are not judged either where a capture shows reordering.
    #[arg(long)]
    reordering: bool,
    /// The capture was taken at the host with this address (`roce nic --pcap` records at the
    /// NIC, before its own --faults drop what it sends): resend-cause is then judged only for
    /// the requesters there, as an answer it sends may be lost or overtaken after the capture.
    #[arg(long, value_name = "ADDRESS")]
    at: Option<std::net::IpAddr>,
    /// List the rules, their identifiers and citations, and exit.
    #[arg(long, conflicts_with_all = ["json", "allow"])]
    rules: bool,
    /// Capture files (pcap or pcapng; Ethernet or Linux cooked).
    #[arg(required_unless_present = "rules")]
    files: Vec<PathBuf>,
}

fn parse_rule(text: &str) -> Result<Rule, String> {
    Rule::from_id(text).ok_or_else(|| {
        let ids: Vec<&str> = Rule::ALL.iter().map(|r| r.id()).collect();
        format!("no rule '{text}' (rules: {})", ids.join(", "))
    })
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    if args.rules {
        for rule in Rule::ALL {
            out!(
                "{:<18} {} [{}]",
                rule.id(),
                rule.statement(),
                rule.citation()
            )?;
        }
        return Ok(ExitCode::SUCCESS);
    }
    let mut broken = false;
    let several = args.files.len() > 1;
    for path in &args.files {
        let name = path.display().to_string();
        let report = capture::open(path)
            .and_then(|reader| {
                conform::check_with(
                    reader,
                    conform::Options {
                        reordering: args.reordering,
                        at: args.at,
                    },
                )
            })
            .map_err(|e| capture_failure(&name, e))?;
        broken |= report.broken(&args.allow).next().is_some();
        if args.json {
            out!("{}", to_json(&name, &report, &args.allow))?;
        } else {
            let mut text = String::new();
            if several {
                let _ = writeln!(text, "{name}:");
            }
            render(&mut text, &report, &args.allow);
            out!("{}", text.trim_end())?;
        }
    }
    Ok(if broken {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn capture_failure(name: &str, e: CaptureError) -> Failure {
    match e {
        CaptureError::Io(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Failure::usage(format!("{name}: no such file"))
        }
        other => Failure::usage(format!("{name}: {other}")),
    }
}

fn end(e: &End) -> String {
    match e.qpn {
        Some(q) => format!("{} QP {q:#x}", e.addr),
        None => format!("{} QP ?", e.addr),
    }
}

fn naks(c: &Counts) -> String {
    let kinds = [
        (c.naks_sequence, "sequence"),
        (c.naks_invalid_request, "invalid request"),
        (c.naks_remote_access, "remote access"),
        (c.naks_remote_operational, "remote operational"),
        (c.naks_other, "other"),
        (c.rnr_naks, "RNR"),
    ];
    let listed: Vec<String> = kinds
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!("{n} {what}"))
        .collect();
    if listed.is_empty() {
        "no NAKs".to_string()
    } else {
        format!("NAKs: {}", listed.join(", "))
    }
}

fn render(text: &mut String, report: &Report, allowed: &[Rule]) {
    for c in &report.conversations {
        render_conversation(text, c);
    }
    if !report.missing.is_empty() {
        let _ = writeln!(text, "missing from the capture:");
        for m in &report.missing {
            let _ = writeln!(
                text,
                "  conversation {}: {} packet(s) from PSN {:#08x}, before frame {}: {}",
                m.conversation, m.count, m.from_psn, m.before_frame, m.evidence
            );
        }
    }
    let (mut broken, mut accepted) = (0, 0);
    for v in &report.violations {
        let allowed = allowed.contains(&v.rule);
        if allowed {
            accepted += 1;
        } else {
            broken += 1;
        }
        let frames: Vec<String> = v.frames.iter().map(u64::to_string).collect();
        let _ = writeln!(
            text,
            "{} frame{} {}: [{}] {} ({})\n  conversation {}: expected {}; found {}",
            if allowed { "allowed:" } else { "VIOLATION:" },
            if v.frames.len() == 1 { "" } else { "s" },
            frames.join(", "),
            v.rule.id(),
            v.rule.statement(),
            v.rule.citation(),
            v.conversation,
            v.expected,
            v.found
        );
    }
    let _ = writeln!(
        text,
        "{} frames, {} RoCE ({} bad ICRC, {} malformed), {} conversation{}: {}",
        report.frames,
        report.roce,
        report.bad_icrc,
        report.malformed,
        report.conversations.len(),
        if report.conversations.len() == 1 {
            ""
        } else {
            "s"
        },
        match (broken, accepted) {
            (0, 0) => "conformant".to_string(),
            (0, a) => format!("conformant, {a} allowed violation(s)"),
            (b, _) => format!("{b} violation(s)"),
        }
    );
}

fn render_conversation(text: &mut String, c: &Conversation) {
    let mtu = match (c.path_mtu, c.mtu_source) {
        (Some(m), Some(src)) => format!("path MTU {m} ({src})"),
        _ => "path MTU unknown".to_string(),
    };
    let _ = writeln!(
        text,
        "conversation {}: {} {} <-> {}{}, {mtu}{}",
        c.number,
        c.transport,
        end(&c.ends[0]),
        end(&c.ends[1]),
        if c.via_cm { " (CM)" } else { "" },
        if c.started_late {
            ", capture started mid-conversation"
        } else {
            ""
        }
    );
    if !c.order_judged {
        let _ = writeln!(
            text,
            "  the network reordered packets: resend-cause, nak-go-back, ack-coverage and ack-credits not judged"
        );
    }
    for (i, d) in c.directions.iter().enumerate() {
        if d.packets == 0 && d.acks + d.read_responses + d.atomic_acks + d.rnr_naks == 0 {
            continue;
        }
        if c.order_judged && !c.resends_judged[i] && c.transport == "RC" {
            let _ = writeln!(
                text,
                "  taken elsewhere than at {}: its resends not judged (resend-cause)",
                c.ends[i].addr
            );
        }
        let (from, to) = (&c.ends[i], &c.ends[1 - i]);
        if c.transport == "UD" {
            let _ = writeln!(
                text,
                "  {} -> {}: {} datagrams, {} bytes",
                from.addr, to.addr, d.packets, d.bytes
            );
            continue;
        }
        let _ = writeln!(
            text,
            "  {} -> {}: {} packets, {} messages, {} bytes; {} retransmitted, {} reordered, {} missing",
            from.addr, to.addr, d.packets, d.messages, d.bytes, d.retransmitted, d.reordered, d.missing,
        );
        if c.transport != "RC" {
            continue;
        }
        let _ = writeln!(
            text,
            "    answers: {} ACKs, {} READ responses, {} atomic ACKs; {}; {} RNR waits",
            d.acks,
            d.read_responses,
            d.atomic_acks,
            naks(d),
            d.rnr_waits
        );
    }
    if c.cnps + c.ecn_ce > 0 {
        let _ = writeln!(text, "  {} CNPs, {} ECN CE marks", c.cnps, c.ecn_ce);
    }
}

fn counts_json(c: &Counts) -> Value {
    json!({
        "packets": c.packets, "messages": c.messages, "bytes": c.bytes,
        "retransmitted": c.retransmitted, "reordered": c.reordered, "missing": c.missing,
        "acks": c.acks, "read_responses": c.read_responses, "atomic_acks": c.atomic_acks,
        "naks": {
            "sequence": c.naks_sequence, "invalid_request": c.naks_invalid_request,
            "remote_access": c.naks_remote_access,
            "remote_operational": c.naks_remote_operational, "other": c.naks_other,
            "rnr": c.rnr_naks,
        },
        "rnr_waits": c.rnr_waits,
    })
}

fn to_json(name: &str, report: &Report, allowed: &[Rule]) -> Value {
    let end = |e: &End| json!({"address": e.addr.to_string(), "qpn": e.qpn});
    json!({
        "file": name,
        "conformant": report.broken(allowed).next().is_none(),
        "frames": report.frames,
        "roce": report.roce,
        "bad_icrc": report.bad_icrc,
        "malformed": report.malformed,
        "conversations": report.conversations.iter().map(|c| json!({
            "number": c.number,
            "transport": c.transport,
            "ends": [end(&c.ends[0]), end(&c.ends[1])],
            "via_cm": c.via_cm,
            "path_mtu": c.path_mtu,
            "mtu_source": c.mtu_source,
            "started_late": c.started_late,
            "order_judged": c.order_judged,
            "resends_judged": c.resends_judged,
            "directions": [counts_json(&c.directions[0]), counts_json(&c.directions[1])],
            "cnps": c.cnps,
            "ecn_ce": c.ecn_ce,
        })).collect::<Vec<_>>(),
        "violations": report.violations.iter().map(|v| json!({
            "rule": v.rule.id(),
            "citation": v.rule.citation(),
            "statement": v.rule.statement(),
            "allowed": allowed.contains(&v.rule),
            "conversation": v.conversation,
            "frames": v.frames,
            "expected": v.expected,
            "found": v.found,
        })).collect::<Vec<_>>(),
        "missing": report.missing.iter().map(|m| json!({
            "conversation": m.conversation,
            "from_psn": m.from_psn,
            "count": m.count,
            "before_frame": m.before_frame,
            "evidence": m.evidence,
        })).collect::<Vec<_>>(),
    })
}

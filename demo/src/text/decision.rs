//! A NIC's logged decision in plain words, with the values it logged. Events the demo has no
//! words for are shown as the NIC wrote them: the message and its fields.

use crate::events::NicEvent;

/// The event as a sentence.
pub fn sentence(e: &NicEvent) -> String {
    let n = |key: &str| e.number(key).unwrap_or(0);
    let t = |key: &str| e.text(key).unwrap_or_default();
    match e.message.as_str() {
        "frame in: headers parsed" => format!(
            "a {}-byte frame arrives: Ethernet, IPv4, UDP port 4791 and the transport headers parse",
            n("len")
        ),
        "ICRC ok" => "ICRC ok: the invariant CRC the sender computed over the packet matches".into(),
        "bad ICRC: packet dropped" => format!(
            "bad ICRC (expected {}, found {}): packet dropped",
            t("expected"),
            t("found")
        ),
        "PSN in sequence" => format!(
            "QP {:#08x} exists and is connected; PSN {} is the one it expects",
            e.packet.as_ref().and_then(|p| p.qpn).unwrap_or(0),
            e.psn().unwrap_or(0)
        ),
        "packet ahead of the expected PSN: sequence NAK" => format!(
            "PSN {} is ahead of the expected PSN {}: a packet is missing, so it sends a \
             sequence NAK for {} and drops this one",
            e.psn().unwrap_or(0),
            n("expected"),
            n("expected")
        ),
        "SEND with no receive posted: RNR NAK" => {
            "a SEND, but the target has posted no receive: RNR NAK (receiver not ready)".into()
        }
        "rkey checked: WRITE allowed" | "rkey checked: READ allowed" => format!(
            "rkey {} names a registered region; {} bytes from VA {} lie inside it and it allows \
             remote {}",
            t("rkey"),
            n("len"),
            t("va"),
            if e.message.ends_with("WRITE allowed") { "writes" } else { "reads" }
        ),
        "DMA: WRITE data placed in host memory" => format!(
            "DMA: {} bytes written into the target's memory ({}) at offset {:#x}",
            n("len"),
            region_name(&t("region")),
            n("region_offset")
        ),
        "DMA: READ response data read from host memory" => format!(
            "DMA: {} bytes read from the target's memory for the READ response (PSN {})",
            n("len"),
            n("psn")
        ),
        "SEND data placed in the posted receive" => format!(
            "DMA: {} bytes placed in the receive buffer the target posted, at offset {}",
            n("len"),
            n("offset")
        ),
        "atomic executed on host memory" => format!(
            "atomic executed on the target's memory ({}) at offset {:#x}: the value before was {}",
            region_name(&t("region")),
            n("region_offset"),
            n("original")
        ),
        "ACK sent" => format!("acknowledgement sent for PSN {}: {}", n("psn"), t("syndrome")),
        "atomic ACK sent" => format!(
            "atomic acknowledgement sent for PSN {} carrying the original value {}",
            n("psn"),
            n("original")
        ),
        "receive completed" => format!(
            "receive completed ({}, {} bytes): a completion for the target program",
            t("status"),
            n("len")
        ),
        "NAK received" => format!("NAK received for PSN {}: {}", n("psn"), t("nak")),
        "RNR NAK: the peer has no receive posted; waiting" => format!(
            "RNR NAK received for PSN {}: waits {:.2} ms (the target's RNR timer), then sends again",
            n("psn"),
            n("wait_us") as f64 / 1000.0
        ),
        "RNR wait over: sending again" => format!("RNR wait over: sends PSN {} again", n("psn")),
        "go-back-N" => format!("go-back-N: sends again from PSN {} ({})", n("psn"), t("why")),
        "retransmission timeout: going back" => format!(
            "retransmission timer expired: sends again from PSN {}",
            n("psn")
        ),
        "line quiet: probing with the oldest unacknowledged packet" => format!(
            "the line went quiet with PSN {} unacknowledged: sends it again asking for an ACK",
            n("psn")
        ),
        "send request completed" => format!(
            "work request {} retired ({}): a completion for the initiator program",
            n("wr_id"),
            t("status")
        ),
        "READ response data placed" => format!(
            "DMA: {} bytes of the READ response written into the initiator's buffer at offset {}",
            n("len"),
            n("offset")
        ),
        "atomic result placed" => format!(
            "DMA: the original value {} written into the initiator's buffer",
            n("original")
        ),
        "duplicate request" => format!(
            "PSN {} was already executed (expecting {}): acknowledged again, not executed again",
            e.psn().unwrap_or(0),
            n("expected")
        ),
        "memory registered" => format!(
            "memory registered: rkey {}, VA {}, {} bytes, {}",
            t("rkey"),
            t("va"),
            n("len"),
            t("access")
        ),
        _ => as_logged(e),
    }
}

/// A region's name as the NIC logged it: `-` for an anonymous region (the in-process demo).
fn region_name(name: &str) -> String {
    match name {
        "" | "-" => "an anonymous region".into(),
        name => format!("region {name}"),
    }
}

/// The message and fields as the NIC logged them.
fn as_logged(e: &NicEvent) -> String {
    let mut text = e.message.clone();
    for (key, _) in e.fields.iter() {
        text.push_str(&format!(" {key}={}", e.text(key).unwrap_or_default()));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::PacketTag;
    use crate::Side;
    use std::time::Duration;

    fn event(message: &str, fields: serde_json::Value) -> NicEvent {
        NicEvent {
            nic: Side::Target,
            at: Duration::ZERO,
            level: "TRACE".into(),
            target: "roce_nic::transport::responder".into(),
            message: message.into(),
            fields: fields.as_object().unwrap().clone(),
            packet: Some(PacketTag {
                span: "responder".into(),
                qpn: Some(0x12),
                psn: Some(77),
                opcode: Some("RC RDMA_WRITE_ONLY".into()),
            }),
        }
    }

    #[test]
    fn decisions_read_as_sentences_with_the_logged_values() {
        use serde_json::json;
        assert_eq!(
            sentence(&event(
                "DMA: WRITE data placed in host memory",
                json!({"region": "demo1t-mem", "region_offset": 64, "len": 69})
            )),
            "DMA: 69 bytes written into the target's memory (region demo1t-mem) at offset 0x40"
        );
        assert_eq!(
            sentence(&event("PSN in sequence", json!({}))),
            "QP 0x000012 exists and is connected; PSN 77 is the one it expects"
        );
        assert_eq!(
            sentence(&event("rkey checked: WRITE allowed", json!({"rkey": "0x201", "va": "0x7f0000000040", "len": 69}))),
            "rkey 0x201 names a registered region; 69 bytes from VA 0x7f0000000040 lie inside it and it allows remote writes"
        );
        assert_eq!(
            sentence(&event("something new", json!({"a": 1, "b": "x"}))),
            "something new a=1 b=x"
        );
    }
}

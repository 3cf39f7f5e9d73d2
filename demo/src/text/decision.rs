//! A NIC's logged decision in plain words, with the values it logged, recognised by its typed
//! kind ([`EventKind`]) and never by its message. Events the demo has no words for are shown
//! as the NIC wrote them: the message and its fields.

use roce_nic::transport::EventKind;

use crate::events::NicEvent;

/// The event as a sentence.
pub fn sentence(e: &NicEvent) -> String {
    let n = |key: &str| e.number(key).unwrap_or(0);
    let t = |key: &str| e.text(key).unwrap_or_default();
    use EventKind as K;
    match e.kind {
        Some(K::FrameIn) => format!(
            "a {}-byte frame arrives: Ethernet, IPv4, UDP port 4791 and the transport headers parse",
            n("len")
        ),
        Some(K::IcrcOk) => "ICRC ok: the invariant CRC the sender computed over the packet matches".into(),
        Some(K::BadIcrc) => format!(
            "bad ICRC (expected {}, found {}): packet dropped",
            t("expected"),
            t("found")
        ),
        Some(K::InSequence) => format!(
            "QP {:#08x} exists and is connected; PSN {} is the one it expects",
            e.packet.as_ref().and_then(|p| p.qpn).unwrap_or(0),
            e.psn().unwrap_or(0)
        ),
        Some(K::SequenceNak) => format!(
            "PSN {} is ahead of the expected PSN {}: a packet is missing, so it sends a \
             sequence NAK for {} and drops this one",
            e.psn().unwrap_or(0),
            n("expected"),
            n("expected")
        ),
        Some(K::RnrNakSent) => {
            "a SEND, but the target has posted no receive: RNR NAK (receiver not ready)".into()
        }
        Some(K::WriteAllowed | K::ReadAllowed) => format!(
            "rkey {} names a registered region; {} bytes from VA {} lie inside it and it allows \
             remote {}",
            t("rkey"),
            n("len"),
            t("va"),
            if e.is(K::WriteAllowed) { "writes" } else { "reads" }
        ),
        Some(K::WritePlaced) => format!(
            "DMA: {} bytes written into the target's memory ({}) at offset {:#x}",
            n("len"),
            region_name(&t("region")),
            n("region_offset")
        ),
        Some(K::ReadResponseSent) => format!(
            "DMA: {} bytes read from the target's memory for the READ response (PSN {})",
            n("len"),
            n("psn")
        ),
        Some(K::SendPlaced) => format!(
            "DMA: {} bytes placed in the receive buffer the target posted, at offset {}",
            n("len"),
            n("offset")
        ),
        Some(K::AtomicExecuted) => format!(
            "atomic executed on the target's memory ({}) at offset {:#x}: the value before was {}",
            region_name(&t("region")),
            n("region_offset"),
            n("original")
        ),
        Some(K::AckSent) => format!("acknowledgement sent for PSN {}: {}", n("psn"), t("syndrome")),
        Some(K::AtomicAckSent) => format!(
            "atomic acknowledgement sent for PSN {} carrying the original value {}",
            n("psn"),
            n("original")
        ),
        Some(K::ReceiveCompleted) => format!(
            "receive completed ({}, {} bytes): a completion for the target program",
            t("status"),
            n("len")
        ),
        Some(K::NakReceived) => format!("NAK received for PSN {}: {}", n("psn"), t("nak")),
        Some(K::RnrWait) => format!(
            "RNR NAK received for PSN {}: waits {:.2} ms (the target's RNR timer), then sends again",
            n("psn"),
            n("wait_us") as f64 / 1000.0
        ),
        Some(K::RnrWaitOver) => format!("RNR wait over: sends PSN {} again", n("psn")),
        Some(K::GoBack) => format!("go-back-N: sends again from PSN {} ({})", n("psn"), t("why")),
        Some(K::RetransmitTimeout) => format!(
            "retransmission timer expired: sends again from PSN {}",
            n("psn")
        ),
        Some(K::Probe) => format!(
            "the line went quiet with PSN {} unacknowledged: sends it again asking for an ACK",
            n("psn")
        ),
        Some(K::SendCompleted) => format!(
            "work request {} retired ({}): a completion for the initiator program",
            n("wr_id"),
            t("status")
        ),
        Some(K::ReadResponsePlaced) => format!(
            "DMA: {} bytes of the READ response written into the initiator's buffer at offset {}",
            n("len"),
            n("offset")
        ),
        Some(K::AtomicResultPlaced) => format!(
            "DMA: the original value {} written into the initiator's buffer",
            n("original")
        ),
        Some(K::Duplicate) => format!(
            "PSN {} was already executed (expecting {}): acknowledged again, not executed again",
            e.psn().unwrap_or(0),
            n("expected")
        ),
        Some(K::MemoryRegistered) => format!(
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

    fn event(kind: Option<EventKind>, message: &str, fields: serde_json::Value) -> NicEvent {
        NicEvent {
            nic: Side::Target,
            at: Duration::ZERO,
            level: "TRACE".into(),
            target: "roce_nic::transport::event".into(),
            message: message.into(),
            kind,
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
                Some(EventKind::WritePlaced),
                "DMA: WRITE data placed in host memory",
                json!({"region": "demo1t-mem", "region_offset": 64, "len": 69})
            )),
            "DMA: 69 bytes written into the target's memory (region demo1t-mem) at offset 0x40"
        );
        assert_eq!(
            sentence(&event(
                Some(EventKind::InSequence),
                "PSN in sequence",
                json!({})
            )),
            "QP 0x000012 exists and is connected; PSN 77 is the one it expects"
        );
        assert_eq!(
            sentence(&event(Some(EventKind::WriteAllowed), "rkey checked: WRITE allowed", json!({"rkey": "0x201", "va": "0x7f0000000040", "len": 69}))),
            "rkey 0x201 names a registered region; 69 bytes from VA 0x7f0000000040 lie inside it and it allows remote writes"
        );
        assert_eq!(
            sentence(&event(None, "something new", json!({"a": 1, "b": "x"}))),
            "something new a=1 b=x"
        );
    }

    #[test]
    fn the_kind_not_the_wording_picks_the_sentence() {
        use serde_json::json;
        let reworded = event(
            Some(EventKind::AckSent),
            "acknowledged, in other words",
            json!({"psn": 9, "syndrome": "ACK"}),
        );
        assert_eq!(sentence(&reworded), "acknowledgement sent for PSN 9: ACK");
        let untyped = event(None, "ACK sent", json!({"psn": 9}));
        assert_eq!(sentence(&untyped), "ACK sent psn=9");
    }
}

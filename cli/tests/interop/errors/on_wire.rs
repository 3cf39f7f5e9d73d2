//! What each case expects to find in our NIC's capture, and the check, with roce-wire's
//! decoder, once the NIC has written it.

use super::*;

/// What a case expects to find in the capture, checked once the NIC has written it.
#[derive(Debug)]
pub(super) enum OnWire {
    /// Exactly one NAK with `code`, for `psn`, from `responder` to the requester's QP `to_qp`.
    Nak {
        from_guest: bool,
        to_qp: u32,
        psn: u32,
        code: NakCode,
    },
    /// Only RNR NAKs carrying the responder's timer to the requester's `to_qp`, one for each
    /// SEND the requester sent to `responder_qp`: exactly `count` of them, or (`probes`) at least
    /// `count` where the requester is our NIC, whose tail probes repeat the SEND when rxe is slow
    /// to answer (each probe gets its RNR NAK too).
    RnrNaks {
        from_guest: bool,
        to_qp: u32,
        responder_qp: u32,
        count: usize,
        probes: bool,
    },
    /// At least `count` copies of the request with `psn` to the silent `to_qp`, and not one
    /// frame back to `requester_qp`.
    Unanswered {
        from_guest: bool,
        to_qp: u32,
        requester_qp: u32,
        psn: u32,
        count: usize,
    },
    /// The datagrams to `to_qp`, in order, carried these Q_Keys.
    QKeys {
        from_guest: bool,
        to_qp: u32,
        qkeys: Vec<u32>,
    },
    /// The AETH syndromes of every frame from the responder to the requester's `to_qp`, in
    /// order.
    Answers {
        from_guest: bool,
        to_qp: u32,
        syndromes: Vec<Syndrome>,
    },
    /// Not one frame between our QP `ours` and the agent's `theirs`, either way.
    Nothing { ours: u32, theirs: u32 },
}

/// The RoCE frames of a capture, each with whether the guest sent it.
pub(super) fn frames_of(pcap: &Path) -> Vec<(bool, Vec<u8>)> {
    let file = std::fs::File::open(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    let mut reader = pcap_file::pcap::PcapReader::new(file).expect("a pcap file");
    let mut frames = Vec::new();
    while let Some(packet) = reader.next_packet() {
        let data = packet.expect("a whole pcap record").data.into_owned();
        if Frame::parse(&data).is_ok() {
            frames.push((data[6..12] == GUEST_MAC[..], data));
        }
    }
    frames
}

/// Checks one expectation against the capture's RoCE frames.
pub(super) fn check(expect: &OnWire, frames: &[(bool, Vec<u8>)]) -> Result<(), String> {
    let parsed = || {
        frames
            .iter()
            .map(|(guest, data)| (*guest, Frame::parse(data).unwrap()))
    };
    match *expect {
        OnWire::Nak {
            from_guest,
            to_qp,
            psn,
            code,
        } => {
            let naks: Vec<(u32, Syndrome)> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .filter_map(|(_, f)| Some((f.repr.bth.psn, f.repr.ext.aeth?.syndrome)))
                .filter(|(_, s)| matches!(s, Syndrome::Nak(_)))
                .collect();
            if naks == [(psn, Syndrome::Nak(code))] {
                Ok(())
            } else {
                Err(format!("want one NAK ({code}) for PSN {psn:#x} to QP {to_qp:#x}, the wire has {naks:x?}"))
            }
        }
        OnWire::RnrNaks {
            from_guest,
            to_qp,
            responder_qp,
            count,
            probes,
        } => {
            let answers: Vec<Option<Syndrome>> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .map(|(_, f)| f.repr.ext.aeth.map(|a| a.syndrome))
                .collect();
            let sends = parsed()
                .filter(|(g, f)| *g != from_guest && f.repr.bth.dest_qp == responder_qp)
                .filter(|(_, f)| f.repr.bth.opcode.kind().is_send())
                .count();
            let rnr = Some(Syndrome::RnrNak {
                timer: MIN_RNR_TIMER,
            });
            let enough = if probes {
                answers.len() >= count
            } else {
                answers.len() == count
            };
            if enough && answers.iter().all(|a| *a == rnr) && sends == answers.len() {
                Ok(())
            } else {
                Err(format!("want {count} RNR NAKs with timer {MIN_RNR_TIMER} to QP {to_qp:#x} ({}), one per SEND; the wire has {answers:?} for {sends} SEND(s)", if probes { "or more" } else { "exactly" }))
            }
        }
        OnWire::Unanswered {
            from_guest,
            to_qp,
            requester_qp,
            psn,
            count,
        } => {
            let sent = parsed()
                .filter(|(g, f)| {
                    *g == from_guest && f.repr.bth.dest_qp == to_qp && f.repr.bth.psn == psn
                })
                .count();
            let answers = parsed()
                .filter(|(g, f)| *g != from_guest && f.repr.bth.dest_qp == requester_qp)
                .count();
            if sent >= count && answers == 0 {
                Ok(())
            } else {
                Err(format!("want {count} or more copies of PSN {psn:#x} to QP {to_qp:#x} and no answer; the wire has {sent} and {answers} answer(s)"))
            }
        }
        OnWire::QKeys {
            from_guest,
            to_qp,
            ref qkeys,
        } => {
            let seen: Vec<u32> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .filter_map(|(_, f)| Some(f.repr.ext.deth?.q_key))
                .collect();
            if seen == *qkeys {
                Ok(())
            } else {
                Err(format!("want datagrams with Q_Keys {qkeys:#x?} to QP {to_qp:#x}, the wire has {seen:#x?}"))
            }
        }
        OnWire::Answers {
            from_guest,
            to_qp,
            ref syndromes,
        } => {
            let seen: Vec<Syndrome> = parsed()
                .filter(|(g, f)| *g == from_guest && f.repr.bth.dest_qp == to_qp)
                .filter_map(|(_, f)| Some(f.repr.ext.aeth?.syndrome))
                .collect();
            if seen == *syndromes {
                Ok(())
            } else {
                Err(format!(
                    "want the answers {syndromes:?} to QP {to_qp:#x}, the wire has {seen:?}"
                ))
            }
        }
        OnWire::Nothing { ours, theirs } => {
            let n = parsed()
                .filter(|(g, f)| f.repr.bth.dest_qp == if *g { ours } else { theirs })
                .count();
            if n == 0 {
                Ok(())
            } else {
                Err(format!("want nothing between our QP {ours:#x} and rxe's {theirs:#x}, the wire has {n} frame(s)"))
            }
        }
    }
}

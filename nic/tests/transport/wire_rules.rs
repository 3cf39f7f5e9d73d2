//! What a connected QP accepts from the wire, and what its requester puts on it, beyond the PSN
//! and the keys: packets only from the address the QP was connected to, no invalidation of
//! plain registrations, no DMA length above 2^31, and nothing sent twice that need not be — a
//! silent responder gets a request at most 1 + retry_cnt times, a fault-free run no duplicate
//! at all. Forged frames come from a tap on a's end of the cable, as from a third sender.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::counters::Snapshot;
use roce_nic::link::mem::{self, MemLink};
use roce_nic::link::Link;
use roce_nic::testbed::*;
use roce_nic::transport::responder::MAX_DMA_LEN;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;
use roce_nic::Device;
use roce_wire::aeth::{NakCode, Syndrome};
use roce_wire::{
    reth, EthernetAddress, Extensions, Frame, FrameRepr, Kind, NetworkRepr, Opcode, Transport,
};

/// One end of the in-process cable with a tap: it records every frame its NIC sends, can mute
/// the NIC (a silent peer), and puts the test's own frames on the wire.
#[derive(Clone)]
struct Tap {
    cable: Arc<Mutex<MemLink>>,
    sent: Arc<Mutex<Vec<Vec<u8>>>>,
    mute: Arc<AtomicBool>,
    pool: Arc<BufPool>,
}

impl Tap {
    fn new(end: MemLink) -> Tap {
        Tap {
            cable: Arc::new(Mutex::new(end)),
            sent: Arc::default(),
            mute: Arc::default(),
            pool: BufPool::new(4),
        }
    }

    /// Sends `frame` to the other end, as if a third host on the wire had.
    fn inject(&self, frame: &[u8]) {
        let buf = self.pool.copy_of(frame);
        self.cable.lock().unwrap().send(buf).unwrap();
    }

    /// The frames the NIC sent that `keep` selects.
    fn sent_where(&self, keep: impl Fn(&Frame<'_>) -> bool) -> Vec<Vec<u8>> {
        let sent = self.sent.lock().unwrap();
        sent.iter()
            .filter(|f| Frame::parse(f).is_ok_and(|f| keep(&f)))
            .cloned()
            .collect()
    }
}

impl Link for Tap {
    fn send(&mut self, frame: FrameBuf) -> std::io::Result<()> {
        self.sent.lock().unwrap().push(frame[..].to_vec());
        if self.mute.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.cable.lock().unwrap().send(frame)
    }
    fn can_send(&self) -> bool {
        self.cable.lock().unwrap().can_send()
    }
    fn recv(&mut self) -> std::io::Result<Option<FrameBuf>> {
        self.cable.lock().unwrap().recv()
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.cable.lock().unwrap().attach(pool, waker)
    }
    fn describe(&self) -> String {
        "tapped in-process cable".into()
    }
}

/// b's second address, which no QP is connected to.
fn b_other_ip() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, 4))
}

/// A pair of `qp_type` whose ends are tapped; b also answers to 10.0.0.4.
fn tapped_pair(qp_type: QpType, tune: impl Fn(&mut QpAttr)) -> (Pair, Tap, Tap) {
    let (la, lb) = mem::pair();
    let (ta, tb) = (Tap::new(la), Tap::new(lb));
    let configure = |c: &mut roce_nic::DeviceConfig| {
        if c.name == "nic-b" {
            c.add_ip(b_other_ip(), 24);
        }
    };
    let p = pair_over(
        ta.clone(),
        tb.clone(),
        qp_type,
        Mtu::M1024,
        1 << 20,
        configure,
        tune,
    )
    .unwrap();
    (p, ta, tb)
}

/// Polls `dev`'s counters until `done` holds, for at most 10 s.
fn wait_for(dev: &Device, what: &str, done: impl Fn(&Snapshot) -> bool) -> Snapshot {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = dev.counters();
        if done(&c) {
            return c;
        }
        assert!(Instant::now() < deadline, "{what} never happened: {c:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn post(h: &Host, wr_id: u64, op: SendOp, sg: &[Sge]) {
    h.qp.post_send(&[SendWr {
        wr_id,
        op,
        sg_list: sg,
        flags: SendFlags::SIGNALED,
        ud: None,
    }])
    .unwrap();
}

fn expect(h: &Host, wr_id: u64, status: WcStatus) -> Wc {
    let wc = h.completion();
    assert_eq!((wc.wr_id, wc.status), (wr_id, status), "{wc:?}");
    wc
}

/// a WRITEs `data` into b at `at`; returns the frame that carried it (one packet).
fn legit_write(p: &Pair, tap: &Tap, wr_id: u64, data: &[u8], at: u64) -> Vec<u8> {
    p.a.write(0, data);
    let op = SendOp::RdmaWrite {
        remote_addr: p.b.mr.va + at,
        rkey: p.b.mr.rkey,
    };
    post(&p.a, wr_id, op, &[p.a.mr.sge(0, data.len() as u32)]);
    expect(&p.a, wr_id, WcStatus::Success);
    // UC completes once sent: the data lands a moment later.
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.b.read(at as usize, data.len()) != data {
        assert!(Instant::now() < deadline, "the WRITE never landed");
        std::thread::sleep(Duration::from_millis(1));
    }
    tap.sent_where(|f| f.repr.bth.opcode.kind() == Kind::WriteOnly)
        .pop()
        .expect("the WRITE went over the tap")
}

/// `template` changed by `edit`, carrying `payload`, with a correct ICRC.
fn forge(template: &[u8], payload: &[u8], edit: impl FnOnce(&mut FrameRepr)) -> Vec<u8> {
    let mut repr = Frame::parse(template).unwrap().repr;
    edit(&mut repr);
    repr.payload_len = payload.len();
    let mut buf = vec![0u8; repr.frame_len()];
    let n = repr.emit(&mut buf, payload).unwrap();
    buf.truncate(n);
    assert!(Frame::parse(&buf).unwrap().icrc().is_ok());
    buf
}

fn set_ipv4(repr: &mut FrameRepr, from: IpAddr, to: IpAddr) {
    let (IpAddr::V4(from), IpAddr::V4(to)) = (from, to) else {
        unreachable!("the bench is IPv4")
    };
    if let NetworkRepr::Ipv4 { src, dst, .. } = &mut repr.network {
        *src = from;
        *dst = to;
    }
}

fn rq_psn(h: &Host) -> u32 {
    h.qp.query().unwrap().rq_psn.unwrap()
}

#[test]
fn a_packet_from_or_to_another_address_is_dropped_and_counted() {
    for qp_type in [QpType::Rc, QpType::Uc] {
        let (p, ta, _tb) = tapped_pair(qp_type, |_| {});
        let template = legit_write(&p, &ta, 1, &pattern(64, 1), 0);
        let epsn = rq_psn(&p.b);
        let before = p.dev_b.counters();
        // The right QPN, PSN, R_Key and VA; only the addresses are wrong: first a stranger
        // (10.0.0.3, another MAC) sending to the connected address, then the connected peer
        // sending to b's other address.
        let stranger = forge(&template, &[0xee; 64], |r| {
            set_ipv4(r, ip(3), ip(2));
            if let Some(e) = &mut r.ethernet {
                e.src = EthernetAddress([0x02, 0, 0, 0, 0, 0x33]);
            }
            r.bth.psn = epsn;
            r.ext.reth.as_mut().unwrap().va = p.b.mr.va + 4096;
        });
        let misaddressed = forge(&template, &[0xdd; 64], |r| {
            set_ipv4(r, ip(1), b_other_ip());
            r.bth.psn = epsn;
            r.ext.reth.as_mut().unwrap().va = p.b.mr.va + 8192;
        });
        for (n, frame) in [stranger, misaddressed].iter().enumerate() {
            ta.inject(frame);
            let c = wait_for(&p.dev_b, "the forged frame's drop", |c| {
                c.rx_wrong_address == before.rx_wrong_address + n as u64 + 1
            });
            let d = c.since(&before);
            assert_eq!(d.dma_write_bytes, 0, "{qp_type}: nothing written: {d:?}");
            assert_eq!(d.acks_sent + d.naks_sent_invalid_request, 0, "{d:?}");
            assert_eq!(d.rx_out_of_sequence + d.rx_duplicates, 0, "{d:?}");
        }
        assert_eq!(p.b.read(4096, 64), vec![0; 64], "{qp_type}");
        assert_eq!(p.b.read(8192, 64), vec![0; 64], "{qp_type}");
        // The QP took nothing from them: the peer's next WRITE is the expected PSN.
        assert_eq!(rq_psn(&p.b), epsn);
        assert_eq!(p.b.qp.query().unwrap().qp_state, Some(QpState::Rts));
        legit_write(&p, &ta, 2, &pattern(64, 2), 4096);
        let d = p.dev_b.counters().since(&before);
        assert_eq!(d.rx_wrong_address, 2, "{qp_type}: {d:?}");
        assert_eq!(
            d.dma_write_bytes, 64,
            "{qp_type}: only the peer's WRITE: {d:?}"
        );
    }
}

/// Sends `forged` to b, which must answer with one NAK `nak` for `psn` and nothing else, leave
/// its memory untouched and put its QP in the error state.
fn expect_nak(p: &Pair, ta: &Tap, tb: &Tap, forged: &[u8], psn: u32, nak: NakCode) {
    let before = p.dev_b.counters();
    let region = p.b.read(0, 1 << 16);
    let answers_before = tb.sent_where(|_| true).len();
    ta.inject(forged);
    let c = wait_for(&p.dev_b, "the NAK", |c| {
        c.since(&before).naks_sent_invalid_request + c.since(&before).naks_sent_remote_access > 0
    });
    let d = c.since(&before);
    let expected = match nak {
        NakCode::INVALID_REQUEST => (1, 0),
        _ => (0, 1),
    };
    assert_eq!(
        (d.naks_sent_invalid_request, d.naks_sent_remote_access),
        expected,
        "{d:?}"
    );
    assert_eq!(
        d.dma_write_bytes + d.dma_read_bytes + d.read_responses_sent,
        0
    );
    assert_eq!(p.b.read(0, 1 << 16), region);
    assert_eq!(p.b.qp.query().unwrap().qp_state, Some(QpState::Err));
    let answers = tb.sent_where(|_| true).split_off(answers_before);
    let [answer] = &answers[..] else {
        panic!("one answer expected, b sent {}", answers.len())
    };
    let answer = Frame::parse(answer).unwrap();
    assert_eq!(answer.repr.bth.opcode.kind(), Kind::Acknowledge);
    assert_eq!(answer.repr.bth.psn, psn);
    assert_eq!(
        answer.repr.ext.aeth.map(|a| a.syndrome),
        Some(Syndrome::Nak(nak))
    );
}

#[test]
fn a_reth_dma_length_above_2_pow_31_is_an_invalid_request_before_any_key_lookup() {
    let long = MAX_DMA_LEN + 1;
    // (opcode, DMA length, whether the R_Key is b's real one, the NAK b must send). A key
    // lookup would find a bad key or a range past the registration: remote access errors.
    let cases = [
        (Kind::WriteOnly, long, false, NakCode::INVALID_REQUEST),
        (Kind::WriteFirst, u32::MAX, true, NakCode::INVALID_REQUEST),
        (Kind::ReadRequest, long, true, NakCode::INVALID_REQUEST),
        (Kind::ReadRequest, u32::MAX, false, NakCode::INVALID_REQUEST),
        // 2^31 itself is a legal length: the key lookup refuses it as too long for the MR.
        (Kind::WriteOnly, 1 << 31, true, NakCode::REMOTE_ACCESS_ERROR),
        (
            Kind::ReadRequest,
            1 << 31,
            true,
            NakCode::REMOTE_ACCESS_ERROR,
        ),
    ];
    for (kind, dma_len, real_key, nak) in cases {
        let (p, ta, tb) = tapped_pair(QpType::Rc, |_| {});
        let template = legit_write(&p, &ta, 1, &pattern(64, 1), 0);
        let epsn = rq_psn(&p.b);
        let r_key = if real_key {
            p.b.mr.rkey
        } else {
            p.b.mr.rkey ^ 0x5a00
        };
        let payload: &[u8] = match kind {
            Kind::ReadRequest => &[],
            Kind::WriteFirst => &[0xee; 1024],
            _ => &[0xee; 64],
        };
        let forged = forge(&template, payload, |r| {
            r.bth.opcode = Opcode::new(Transport::Rc, kind).unwrap();
            r.bth.psn = epsn;
            r.ext = Extensions {
                reth: Some(reth::Repr {
                    va: p.b.mr.va,
                    r_key,
                    dma_len,
                }),
                ..Extensions::default()
            };
        });
        eprintln!("{kind:?} with DMA length {dma_len:#x}, real key {real_key}: {nak}");
        expect_nak(&p, &ta, &tb, &forged, epsn, nak);
    }
}

#[test]
fn send_with_invalidate_cannot_invalidate_a_plain_registration() {
    let (p, ta, tb) = tapped_pair(QpType::Rc, |_| {});
    let extra = p.b.pd.register(&p.b.region, 0, 4096, all_access()).unwrap();
    // A multi-packet SEND (FIRST, MIDDLE, LAST with the IETH) naming b's registration.
    p.b.qp
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &[p.b.mr.sge(65536, 4096)],
        }])
        .unwrap();
    p.a.write(0, &pattern(2500, 4));
    post(
        &p.a,
        1,
        SendOp::SendWithInv { rkey: extra.rkey },
        &[p.a.mr.sge(0, 2500)],
    );
    // Refused as an invalid request: both sides see the error, the QPs go to the error state.
    expect(&p.a, 1, WcStatus::RemInvReqErr);
    let wc = expect(&p.b, 9, WcStatus::RemInvReqErr);
    assert_eq!(wc.invalidated_rkey(), None);
    assert_eq!(p.dev_b.counters().naks_sent_invalid_request, 1);
    let inv = ta.sent_where(|f| f.repr.ext.ieth.is_some());
    assert_eq!(
        inv.len(),
        1,
        "the SEND_LAST_WITH_INVALIDATE went on the wire once"
    );
    let nak = tb.sent_where(|f| {
        f.repr.ext.aeth.map(|a| a.syndrome) == Some(Syndrome::Nak(NakCode::INVALID_REQUEST))
    });
    assert_eq!(nak.len(), 1);

    // The owner keeps its registration: over QPs connected again, a peer WRITEs and READs
    // through the very key the SEND named, and b sends from it.
    for h in [&p.a, &p.b] {
        h.qp.modify(&QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        })
        .unwrap();
    }
    connect(&p.a, &p.b, Mtu::M1024, |_| {}).unwrap();
    p.a.write(0, &pattern(3000, 5));
    let write = SendOp::RdmaWrite {
        remote_addr: extra.va + 100,
        rkey: extra.rkey,
    };
    post(&p.a, 2, write, &[p.a.mr.sge(0, 3000)]);
    expect(&p.a, 2, WcStatus::Success);
    assert_eq!(p.b.read(100, 3000), pattern(3000, 5));
    let read = SendOp::RdmaRead {
        remote_addr: extra.va,
        rkey: extra.rkey,
    };
    post(&p.a, 3, read, &[p.a.mr.sge(8192, 4096)]);
    expect(&p.a, 3, WcStatus::Success);
    assert_eq!(p.a.read(8192 + 100, 3000), pattern(3000, 5));
    p.a.qp
        .post_recv(&[RecvWr {
            wr_id: 4,
            sg_list: &[p.a.mr.sge(16384, 64)],
        }])
        .unwrap();
    post(&p.b, 5, SendOp::Send, &[extra.sge(100, 64)]);
    expect(&p.b, 5, WcStatus::Success);
    expect(&p.a, 4, WcStatus::Success);
    assert_eq!(p.a.read(16384, 64), pattern(3000, 5)[..64]);
}

/// READ requests on a's end of the cable.
fn read_requests(ta: &Tap) -> usize {
    ta.sent_where(|f| f.repr.bth.opcode.kind() == Kind::ReadRequest)
        .len()
}

#[test]
fn a_silent_responder_gets_a_read_at_most_1_plus_retry_cnt_times() {
    // (timeout, retry_cnt): 4.096 µs × 2^12 ≈ 17 ms, 2^10 ≈ 4 ms.
    for (timeout, retry_cnt) in [(12, 7), (10, 2), (10, 0)] {
        let (p, ta, tb) = tapped_pair(QpType::Rc, |attr| {
            if attr.timeout.is_some() {
                attr.timeout = Some(timeout);
                attr.retry_cnt = Some(retry_cnt);
            }
        });
        // b hears everything and answers nothing.
        tb.mute.store(true, Ordering::Relaxed);
        let read = SendOp::RdmaRead {
            remote_addr: p.b.mr.va,
            rkey: p.b.mr.rkey,
        };
        post(&p.a, 1, read, &[p.a.mr.sge(0, 64 * 1024)]);
        expect(&p.a, 1, WcStatus::RetryExcErr);
        let a = p.dev_a.counters();
        let sent = read_requests(&ta);
        eprintln!("timeout {timeout}, retry_cnt {retry_cnt}: {sent} READ requests, {a:?}");
        assert_eq!(sent, 1 + usize::from(retry_cnt), "{a:?}");
        assert!(a.tail_probes <= 1, "{a:?}");
        // b executed the first and answered every copy from memory: what a's copies cost it.
        // b's engine may take in the last copy after a gave up (on a loaded machine): wait
        // for b to count at least as many, then check it counted no more.
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.dev_b.counters().rx_duplicates < u64::from(retry_cnt) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let b = p.dev_b.counters();
        assert_eq!(b.rx_duplicates, u64::from(retry_cnt), "{b:?}");
    }
}

#[test]
fn a_fault_free_run_sends_nothing_twice() {
    // A timer of about a second (timeout 18), so a probe needs the engine to stall for a
    // quarter of it: what is judged is the protocol, not whether a loaded machine runs the
    // engine thread within the default timer's 16 ms (it once did not, under load 10).
    let (la, lb) = mem::pair();
    let p = pair_over(
        la,
        lb,
        QpType::Rc,
        Mtu::M1024,
        8 << 20,
        |_| {},
        |attr| {
            if attr.timeout.is_some() {
                attr.timeout = Some(18);
            }
        },
    )
    .unwrap();
    let size = 256 * 1024;
    p.a.write(0, &pattern(size, 6));
    // Pipelined WRITEs and READs of many packets, then small WRITEs, 16 in flight.
    let ops: Vec<(SendOp, u32)> = (0..400u64)
        .map(|i| {
            let at = p.b.mr.va + (i % 16) * size as u64;
            let op = match i % 4 {
                0 | 1 => SendOp::RdmaWrite {
                    remote_addr: at,
                    rkey: p.b.mr.rkey,
                },
                2 => SendOp::RdmaRead {
                    remote_addr: at,
                    rkey: p.b.mr.rkey,
                },
                _ => SendOp::RdmaWrite {
                    remote_addr: at,
                    rkey: p.b.mr.rkey,
                },
            };
            let len = if i % 4 == 3 { 64 } else { size as u32 };
            (op, len)
        })
        .chain((0..2000).map(|i| {
            let op = SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + (i % 64) * 64,
                rkey: p.b.mr.rkey,
            };
            (op, 64)
        }))
        .collect();
    let depth = 16;
    let (mut posted, mut done) = (0, 0);
    while done < ops.len() {
        while posted < ops.len() && posted - done < depth {
            let (op, len) = ops[posted];
            let local = if matches!(op, SendOp::RdmaRead { .. }) {
                p.a.mr.sge(size as u64, len)
            } else {
                p.a.mr.sge(0, len)
            };
            post(&p.a, posted as u64, op, &[local]);
            posted += 1;
        }
        expect(&p.a, done as u64, WcStatus::Success);
        done += 1;
    }
    // A small READ and a WRITE right behind it, again and again: b executes both in one batch,
    // and its ACK for the WRITE must not overtake the READ's response.
    for i in 0..200u64 {
        let read = SendOp::RdmaRead {
            remote_addr: p.b.mr.va,
            rkey: p.b.mr.rkey,
        };
        let write = SendOp::RdmaWrite {
            remote_addr: p.b.mr.va + 64,
            rkey: p.b.mr.rkey,
        };
        post(&p.a, 20_000 + 2 * i, read, &[p.a.mr.sge(size as u64, 64)]);
        post(&p.a, 20_001 + 2 * i, write, &[p.a.mr.sge(0, 64)]);
        expect(&p.a, 20_000 + 2 * i, WcStatus::Success);
        expect(&p.a, 20_001 + 2 * i, WcStatus::Success);
    }
    // One message at a time with pauses, as a latency test or a quiet application sends: the
    // engines fall asleep between messages, and waking takes longer than a round trip.
    for i in 0..300u64 {
        std::thread::sleep(Duration::from_micros(200));
        let op = if i % 2 == 0 {
            SendOp::RdmaWrite {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            }
        } else {
            SendOp::RdmaRead {
                remote_addr: p.b.mr.va,
                rkey: p.b.mr.rkey,
            }
        };
        post(&p.a, 10_000 + i, op, &[p.a.mr.sge(size as u64, 64)]);
        expect(&p.a, 10_000 + i, WcStatus::Success);
    }
    let (a, b) = (p.dev_a.counters(), p.dev_b.counters());
    eprintln!("a: {a:?}\nb: {b:?}");
    for (who, c) in [("a", &a), ("b", &b)] {
        assert_eq!(
            (
                c.retransmitted_packets,
                c.retransmit_timeouts,
                c.tail_probes
            ),
            (0, 0, 0),
            "{who} sent something twice: {c:?}"
        );
        assert_eq!(c.rx_duplicates + c.rx_stale_responses, 0, "{who}: {c:?}");
    }
}

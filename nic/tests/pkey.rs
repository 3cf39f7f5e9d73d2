//! Partitions as the IBTA has them: a packet is taken when its P_Key and the receiving QP's
//! name the same partition and at least one of the two is a full member (0x8000 set). Two NICs
//! on the in-process cable, the port tables of each set per case; where a NIC would never send
//! the P_Key a case needs, the cable rewrites the frames of one kind (requests, or responses)
//! with it, ICRC recomputed by roce-wire — so the receiver can drop them only for their P_Key.
//!
//! Each case is checked both ways: the P_Key on a requester's packets (RC, UC, UD, QP1) and on
//! a responder's answers (ACKs, READ responses). A refused packet is counted in `rx_bad_pkey`,
//! one count per rewritten frame, and never touches memory or completes anything.

use std::collections::BTreeMap;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::{mem, Link};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;
use roce_nic::{Device, DeviceConfig};
use roce_wire::Frame;

/// Which of a NIC's frames the cable rewrites.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Requests,
    Responses,
}

/// A rewrite: frames of `kind` leave with `p_key`, at most `budget` of them.
#[derive(Debug, Clone, Copy)]
struct Rewrite {
    kind: Kind,
    p_key: u16,
    budget: u64,
}

/// What a NIC's end of the cable saw and did.
#[derive(Default)]
struct Tap {
    /// Frames rewritten so far.
    rewritten: AtomicU64,
    /// P_Keys of the RoCE frames that left, as they left (after any rewrite).
    p_keys: Mutex<Vec<u16>>,
}

/// One end of the in-process cable that rewrites the P_Key of some of the frames sent through
/// it, re-emitting each with roce-wire so that its ICRC is right for the new P_Key.
struct Rekey {
    inner: mem::MemLink,
    rewrite: Option<Rewrite>,
    tap: Arc<Tap>,
}

fn rekeyed(bytes: &[u8], p_key: u16) -> Vec<u8> {
    let frame = Frame::parse(bytes).expect("the NIC sends frames that parse");
    let mut repr = frame.repr;
    repr.bth.p_key = p_key;
    let mut out = vec![0; repr.frame_len()];
    repr.emit(&mut out, frame.payload())
        .expect("room for the frame");
    let rekeyed = Frame::parse(&out).expect("a rewritten frame parses");
    assert!(rekeyed.icrc().is_ok(), "the rewritten frame's ICRC holds");
    // Only the P_Key (BTH bytes 2..4) and the ICRC may differ.
    let differ: Vec<usize> = (0..out.len()).filter(|&i| out[i] != bytes[i]).collect();
    let bth = repr.header_len() - repr.ext.headers().len() - 12;
    let icrc = out.len() - 4;
    assert!(
        differ
            .iter()
            .all(|&i| (bth + 2..bth + 4).contains(&i) || i >= icrc),
        "bytes {differ:?} changed"
    );
    out
}

impl Link for Rekey {
    fn send(&mut self, mut frame: FrameBuf) -> io::Result<()> {
        if let Ok(parsed) = Frame::parse(&frame) {
            let is_response = parsed.repr.bth.opcode.kind().is_response();
            let kind = if is_response {
                Kind::Responses
            } else {
                Kind::Requests
            };
            let mut p_key = parsed.repr.bth.p_key;
            if let Some(r) = self.rewrite.filter(|r| r.kind == kind) {
                if self.tap.rewritten.load(Ordering::Relaxed) < r.budget {
                    let out = rekeyed(&frame, r.p_key);
                    frame.copy_from_slice(&out);
                    self.tap.rewritten.fetch_add(1, Ordering::Relaxed);
                    p_key = r.p_key;
                }
            }
            self.tap.p_keys.lock().unwrap().push(p_key);
        }
        self.inner.send(frame)
    }
    fn can_send(&self) -> bool {
        self.inner.can_send()
    }
    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        self.inner.recv()
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }
    fn describe(&self) -> String {
        format!("{} rewriting P_Keys", self.inner.describe())
    }
}

/// A NIC and its end of the cable.
struct Nic {
    dev: Device,
    tap: Arc<Tap>,
}

/// Two NICs, 10.0.0.1 (`a`) and 10.0.0.2 (`b`), with the P_Key tables given; `a`'s and `b`'s
/// sends rewritten as said.
fn nics(label: &str, tables: [&str; 2], rewrites: [Option<Rewrite>; 2]) -> (Nic, Nic) {
    let (la, lb) = mem::pair();
    let mut configs = [
        DeviceConfig::new(&format!("{label}-a"), ip(1)),
        DeviceConfig::new(&format!("{label}-b"), ip(2)),
    ];
    let macs = [configs[0].mac, configs[1].mac];
    configs[0].neighbours.push((ip(2), macs[1]));
    configs[1].neighbours.push((ip(1), macs[0]));
    let mut nics = Vec::new();
    for ((mut config, link), (table, rewrite)) in configs
        .into_iter()
        .zip([la, lb])
        .zip(tables.into_iter().zip(rewrites))
    {
        config.pkeys = table.parse().unwrap();
        let tap = Arc::new(Tap::default());
        let link = Rekey {
            inner: link,
            rewrite,
            tap: Arc::clone(&tap),
        };
        nics.push(Nic {
            dev: Device::start(config, link).unwrap(),
            tap,
        });
    }
    let b = nics.pop().unwrap();
    (nics.pop().unwrap(), b)
}

/// Waits (at most 10 s) until the receiver has counted, as refused for their P_Key, as many
/// frames as `sent` says the sender sent; returns both counts.
fn refused_and_sent(receiver: &Device, sent: impl Fn() -> u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sent = sent();
        let refused = receiver.counters().rx_bad_pkey;
        if refused == sent || Instant::now() > deadline {
            return (refused, sent);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A case: the receiving port's table, the P_Key its packets carry, whether it takes them.
struct Case {
    receiver: &'static str,
    carried: u16,
    taken: bool,
}

const CASES: [Case; 5] = [
    Case {
        receiver: "0xffff",
        carried: 0x7fff,
        taken: true,
    },
    Case {
        receiver: "0x7fff",
        carried: 0xffff,
        taken: true,
    },
    Case {
        receiver: "0x7fff",
        carried: 0x7fff,
        taken: false,
    },
    Case {
        receiver: "0xffff",
        carried: 0x1234,
        taken: false,
    },
    Case {
        receiver: "0x7fff",
        carried: 0x1234,
        taken: false,
    },
];

impl Case {
    fn name(&self) -> String {
        format!("{:#06x} at a port holding {}", self.carried, self.receiver)
    }
}

/// RC with a short timer (timeout 13, 33 ms) and few retries (3): a refused exchange ends in a
/// retry-exceeded completion in about 130 ms, while a taken one would need the engine to stall
/// that long to fail.
fn rc_pair(a: &Nic, b: &Nic) -> (Host, Host) {
    let ha = host(&a.dev, QpType::Rc, 1 << 16, bench_cap()).unwrap();
    let hb = host(&b.dev, QpType::Rc, 1 << 16, bench_cap()).unwrap();
    connect(&ha, &hb, Mtu::M1024, |attr| {
        if attr.qp_state == Some(QpState::Rts) {
            attr.timeout = Some(13);
            attr.retry_cnt = Some(3);
        }
    })
    .unwrap();
    (ha, hb)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    Read,
}

/// `requester` does one 3000-byte `op` at `responder` (3 packets each way at MTU 1024).
fn rc_op(requester: &Host, responder: &Host, op: Op) -> Wc {
    let data = pattern(3000, 7);
    let (local, remote) = match op {
        Op::Write => (requester, responder),
        Op::Read => (responder, requester),
    };
    local.write(0, &data);
    remote.write(0, &[0; 3000]);
    let target = SendOp::RdmaWrite {
        remote_addr: responder.mr.va,
        rkey: responder.mr.rkey,
    };
    let op = match op {
        Op::Write => target,
        Op::Read => SendOp::RdmaRead {
            remote_addr: responder.mr.va,
            rkey: responder.mr.rkey,
        },
    };
    requester
        .qp
        .post_send(&[SendWr {
            wr_id: 9,
            op,
            sg_list: &[requester.mr.sge(0, 3000)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    requester.completion()
}

/// One RC case, one way: the requester (a, whose port is full) has its requests carry the
/// case's P_Key to the responder (b, the case's port), or the requester (a, the case's port)
/// receives responses carrying it from the responder (b, full).
fn rc_case(case: &Case, kind: Kind, op: Op, label: &str) {
    let rewrite = Rewrite {
        kind,
        p_key: case.carried,
        budget: u64::MAX,
    };
    let (a, b) = match kind {
        Kind::Requests => nics(label, ["0xffff", case.receiver], [Some(rewrite), None]),
        Kind::Responses => nics(label, [case.receiver, "0xffff"], [None, Some(rewrite)]),
    };
    let (receiver, sender) = match kind {
        Kind::Requests => (&b, &a),
        Kind::Responses => (&a, &b),
    };
    let (ha, hb) = rc_pair(&a, &b);
    let wc = rc_op(&ha, &hb, op);
    let what = format!("{} as {kind:?} of an RDMA {op:?}", case.name());
    let rewritten = sender.tap.rewritten.load(Ordering::Relaxed);
    assert!(rewritten > 0, "{what}: nothing was rewritten");
    let moved = match op {
        Op::Write => hb.read(0, 3000),
        Op::Read => ha.read(0, 3000),
    };
    // A WRITE whose requests were taken lands in the responder's memory even when its ACKs are
    // refused; a READ's data reaches the requester's memory only in responses it takes.
    let lands = case.taken || (kind, op) == (Kind::Responses, Op::Write);
    let want = if lands {
        pattern(3000, 7)
    } else {
        vec![0; 3000]
    };
    assert!(
        moved == want,
        "{what}: the data moved {}",
        moved != vec![0; 3000]
    );
    if case.taken {
        assert_eq!(wc.status, WcStatus::Success, "{what}");
        assert_eq!(receiver.dev.counters().rx_bad_pkey, 0, "{what}");
    } else {
        assert_eq!(wc.status, WcStatus::RetryExcErr, "{what}");
        // Every rewritten frame was dropped for its P_Key — not for its ICRC.
        let (refused, rewritten) = refused_and_sent(&receiver.dev, || {
            sender.tap.rewritten.load(Ordering::Relaxed)
        });
        assert_eq!(refused, rewritten, "{what}");
    }
    for nic in [&a, &b] {
        assert_eq!(nic.dev.counters().rx_icrc_errors, 0, "{what}");
    }
}

#[test]
fn rc_requests_and_responses_are_taken_or_refused_by_the_ibta_rule() {
    for (n, case) in CASES.iter().enumerate() {
        for kind in [Kind::Requests, Kind::Responses] {
            for op in [Op::Write, Op::Read] {
                rc_case(case, kind, op, &format!("rc{n}{kind:?}{op:?}"));
            }
        }
    }
}

/// Sends two messages from `from` to the QP `to_qpn` of `to`, the first with its frames
/// rewritten, and returns whether the first receive completion holds the first message — so
/// whether the first was taken — once the second, which the receiver takes, has arrived.
fn first_of_two_taken(
    from: &Host,
    ud: Option<(&AddressHandle, u32, u32)>,
    to: &Host,
    sender_tap: &Tap,
) -> bool {
    for wr_id in [1, 2] {
        to.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: &[to.mr.sge(wr_id * 1024, 1024)],
            }])
            .unwrap();
    }
    let grh = if ud.is_some() { 40 } else { 0 };
    for n in [1u8, 2] {
        from.write(usize::from(n) * 100, &[n; 100]);
        from.qp
            .post_send(&[SendWr {
                wr_id: u64::from(n),
                op: SendOp::Send,
                sg_list: &[from.mr.sge(u64::from(n) * 100, 100 - grh)],
                flags: SendFlags::SIGNALED,
                ud: ud.map(|(ah, qpn, qkey)| UdDest {
                    ah: ah.handle(),
                    remote_qpn: qpn,
                    remote_qkey: qkey,
                }),
            }])
            .unwrap();
        assert!(from.completion().is_success());
    }
    assert_eq!(sender_tap.rewritten.load(Ordering::Relaxed), 1);
    let first = to.completion();
    assert!(first.is_success(), "{first:?}");
    let got = to.read(1024 + grh as usize, 1)[0];
    if got == 2 {
        return false;
    }
    assert_eq!(got, 1);
    let second = to.completion();
    assert!(second.is_success(), "{second:?}");
    true
}

fn one_rewritten(p_key: u16) -> Option<Rewrite> {
    Some(Rewrite {
        kind: Kind::Requests,
        p_key,
        budget: 1,
    })
}

#[test]
fn uc_sends_are_taken_or_refused_by_the_ibta_rule() {
    for (n, case) in CASES.iter().enumerate() {
        let (a, b) = nics(
            &format!("uc{n}"),
            ["0xffff", case.receiver],
            [one_rewritten(case.carried), None],
        );
        let ha = host(&a.dev, QpType::Uc, 1 << 16, bench_cap()).unwrap();
        let hb = host(&b.dev, QpType::Uc, 1 << 16, bench_cap()).unwrap();
        connect(&ha, &hb, Mtu::M1024, |_| {}).unwrap();
        let taken = first_of_two_taken(&ha, None, &hb, &a.tap);
        assert_eq!(taken, case.taken, "UC: {}", case.name());
        assert_eq!(
            b.dev.counters().rx_bad_pkey,
            u64::from(!taken),
            "{}",
            case.name()
        );
    }
}

const QKEY: u32 = 0x2222_0000;

/// A UD host (or QP1, the GSI) on `dev`, ready.
fn ud_host(dev: &Device, gsi: bool) -> Host {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = if gsi {
        pd.open_gsi(&cq, &cq, bench_cap()).unwrap()
    } else {
        let qp = pd.create_qp(QpType::Ud, &cq, &cq, bench_cap()).unwrap();
        for attr in [
            QpAttr::init_ud(QKEY),
            QpAttr {
                qp_state: Some(QpState::Rtr),
                ..QpAttr::default()
            },
            QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(0),
                ..QpAttr::default()
            },
        ] {
            qp.modify(&attr).unwrap();
        }
        qp
    };
    let region = Arc::new(roce_hostmem::Region::anonymous(1 << 16).unwrap());
    let mr = pd.register(&region, 0, region.len(), all_access()).unwrap();
    Host {
        ctx,
        pd,
        cq,
        qp,
        region,
        mr,
    }
}

/// Whether a datagram carrying `carried` reaches a UD QP (or QP1) on a port holding `table`.
fn datagram_taken(label: &str, table: &str, carried: u16, gsi: bool) -> bool {
    let (a, b) = nics(label, ["0xffff", table], [one_rewritten(carried), None]);
    // QP1 talks to QP1: its Q_Key is the GSI's.
    let from = ud_host(&a.dev, gsi);
    let to = ud_host(&b.dev, gsi);
    let ah = from
        .pd
        .create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
        .unwrap();
    let qkey = if gsi { 0x8001_0000 } else { QKEY };
    let taken = first_of_two_taken(&from, Some((&ah, to.qp.qp_num(), qkey)), &to, &a.tap);
    assert_eq!(b.dev.counters().rx_bad_pkey, u64::from(!taken), "{label}");
    taken
}

#[test]
fn ud_datagrams_are_taken_or_refused_by_the_ibta_rule() {
    for (n, case) in CASES.iter().enumerate() {
        let taken = datagram_taken(&format!("ud{n}"), case.receiver, case.carried, false);
        assert_eq!(taken, case.taken, "UD: {}", case.name());
    }
}

/// QP1 takes a datagram of any partition its port belongs to; another UD QP only one of its
/// own partition (its pkey_index, 0 here).
#[test]
fn the_gsi_takes_every_partition_of_its_port_and_other_qps_only_their_own() {
    let table = "0x7fff,0x8001";
    let cases = [
        (0xffff, true, true),
        (0x0001, true, false),
        (0x8001, true, false),
        (0x7fff, false, false),
        (0x1234, false, false),
    ];
    for (n, (carried, gsi_takes, ud_takes)) in cases.into_iter().enumerate() {
        let label = format!("gsi{n}");
        assert_eq!(
            datagram_taken(&label, table, carried, true),
            gsi_takes,
            "QP1: {carried:#06x}"
        );
        let label = format!("udp{n}");
        assert_eq!(
            datagram_taken(&label, table, carried, false),
            ud_takes,
            "UD QP at index 0: {carried:#06x}"
        );
    }
}

/// A limited port's QPs send its P_Key, requests and answers alike, and a full member takes
/// them; two limited members of one partition exchange nothing.
#[test]
fn a_limited_member_talks_to_full_members_only() {
    let (a, b) = nics("lim", ["0xffff", "0x7fff"], [None, None]);
    let (ha, hb) = rc_pair(&a, &b);
    // Requests from the full member, answers from the limited one, and the reverse.
    assert!(rc_op(&ha, &hb, Op::Write).is_success());
    assert!(rc_op(&hb, &ha, Op::Read).is_success());
    assert!(rc_op(&hb, &ha, Op::Write).is_success());
    let keys = |nic: &Nic| -> Vec<u16> {
        let mut keys = nic.tap.p_keys.lock().unwrap().clone();
        keys.dedup();
        keys
    };
    assert_eq!(keys(&a), [0xffff]);
    assert_eq!(keys(&b), [0x7fff]);
    for nic in [&a, &b] {
        assert_eq!(nic.dev.counters().rx_bad_pkey, 0);
    }

    let (c, d) = nics("lim2", ["0x7fff", "0x7fff"], [None, None]);
    let (hc, hd) = rc_pair(&c, &d);
    assert_eq!(rc_op(&hc, &hd, Op::Write).status, WcStatus::RetryExcErr);
    let (refused, sent) = refused_and_sent(&d.dev, || c.tap.p_keys.lock().unwrap().len() as u64);
    assert!(sent >= 6, "the WRITE was sent, and sent again");
    assert_eq!(refused, sent);
}

/// `pkey_index` picks the QP's entry of the table: its packets carry that P_Key, and only an
/// index inside the table is accepted.
#[test]
fn a_qp_sends_the_p_key_its_pkey_index_names() {
    // Both QPs at index 1: a full member of partition 1, and a limited one.
    let (a, b) = nics("idx", ["0xffff,0x8001", "0x0002,0x0001"], [None, None]);
    let ctx = a.dev.open().unwrap();
    let port = ctx.query_port().unwrap();
    assert_eq!(port.pkey_tbl_len, 2);
    assert_eq!([0, 1].map(|i| ctx.query_pkey(i).unwrap()), [0xffff, 0x8001]);
    assert!(ctx.query_pkey(2).is_err());
    assert_eq!(b.dev.open().unwrap().query_pkey(1).unwrap(), 0x0001);

    let ha = host(&a.dev, QpType::Rc, 1 << 16, bench_cap()).unwrap();
    let hb = host(&b.dev, QpType::Rc, 1 << 16, bench_cap()).unwrap();
    let mut outside = QpAttr::init(all_access());
    outside.pkey_index = Some(2);
    assert!(matches!(ha.qp.modify(&outside), Err(VerbsError::Modify(_))));
    connect(&ha, &hb, Mtu::M1024, |attr| {
        if attr.qp_state == Some(QpState::Init) {
            attr.pkey_index = Some(1);
        }
    })
    .unwrap();
    assert_eq!(ha.qp.query().unwrap().pkey_index, Some(1));
    assert!(rc_op(&ha, &hb, Op::Write).is_success());
    assert!(rc_op(&hb, &ha, Op::Read).is_success());
    for (nic, want) in [(&a, 0x8001), (&b, 0x0001)] {
        let mut keys = nic.tap.p_keys.lock().unwrap().clone();
        keys.dedup();
        assert_eq!(keys, [want]);
    }
    // Back to RESET, the QP is at index 0 again.
    ha.qp
        .modify(&QpAttr {
            qp_state: Some(QpState::Reset),
            ..QpAttr::default()
        })
        .unwrap();
    assert_eq!(ha.qp.query().unwrap().pkey_index, Some(0));
}

#[derive(Debug, Clone)]
struct Seen {
    thread: String,
    message: String,
    fields: BTreeMap<String, String>,
}

struct Recorder(Arc<Mutex<Vec<Seen>>>);

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        if message.contains("P_Key") {
            let thread = std::thread::current().name().unwrap_or("").to_owned();
            self.0.lock().unwrap().push(Seen {
                thread,
                message,
                fields: fields.0,
            });
        }
    }
}

fn recorded() -> &'static Arc<Mutex<Vec<Seen>>> {
    static SEEN: OnceLock<Arc<Mutex<Vec<Seen>>>> = OnceLock::new();
    SEEN.get_or_init(|| {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::Layer;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(
            Recorder(Arc::clone(&seen)).with_filter(tracing_subscriber::filter::LevelFilter::DEBUG),
        );
        tracing::subscriber::set_global_default(subscriber).unwrap();
        seen
    })
}

/// The drop is a decision the NIC tells: the P_Key it saw, the QP's, and why they differ.
#[test]
fn a_refused_p_key_is_told_with_both_keys_and_the_reason() {
    let seen = recorded();
    for (label, carried, receiver, reason) in [
        ("evt1", 0x1234, "0xffff", "another partition"),
        (
            "evt2",
            0x7fff,
            "0x7fff",
            "both limited members of the partition",
        ),
    ] {
        assert!(!datagram_taken(label, receiver, carried, false));
        let thread = format!("{label}-b-engine");
        let events: Vec<Seen> = seen
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.thread == thread)
            .cloned()
            .collect();
        assert_eq!(events.len(), 1, "{events:#?}");
        let e = &events[0];
        assert_eq!(e.message, "P_Key does not match: dropped");
        assert_eq!(e.fields["p_key"], format!("{carried:#06x}"));
        assert_eq!(e.fields["qp_p_key"], receiver);
        assert_eq!(e.fields["reason"], reason);
    }
}

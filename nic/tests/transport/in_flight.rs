//! Many QPs of one engine thread sharing a load keep no more bytes in flight together than the
//! thread's budget (twice one QP's window of 4 KiB packets), where each QP's window alone would
//! let them keep a window each: at 1 MiB WRITEs over many QPs, those frames no longer fit the
//! caches the copies and CRCs run from.

use std::collections::HashMap;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::{mem, Link};
use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::waker::Waker;
use roce_wire::Frame;

/// A frame the writer's engine sent (true) or took in (false), in the engine's order.
type Log = Arc<Mutex<Vec<(bool, Vec<u8>)>>>;

/// The writer's link, recording every frame it carries.
struct Recorder<L: Link> {
    inner: L,
    log: Log,
}

impl<L: Link> Link for Recorder<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        self.log.lock().unwrap().push((true, frame.to_vec()));
        self.inner.send(frame)
    }
    fn can_send(&self) -> bool {
        self.inner.can_send()
    }
    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        let frame = self.inner.recv()?;
        if let Some(f) = &frame {
            self.log.lock().unwrap().push((false, f.to_vec()));
        }
        Ok(frame)
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }
    fn describe(&self) -> String {
        format!("{} recorded", self.inner.describe())
    }
}

#[test]
fn qps_sharing_a_load_keep_the_engines_budget_in_flight_not_a_window_each() {
    const QPS: usize = 8;
    const MESSAGE: usize = 1 << 20;
    let (la, lb) = mem::pair();
    let log = Log::default();
    let recorder = Recorder {
        inner: la,
        log: log.clone(),
    };
    let (dev_a, dev_b) = devices_with(recorder, lb, |_| {}).expect("devices start");
    let (ctx_a, ctx_b) = (dev_a.open().unwrap(), dev_b.open().unwrap());
    let (pd_a, pd_b) = (ctx_a.alloc_pd().unwrap(), ctx_b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (ctx_a.create_cq(64).unwrap(), ctx_b.create_cq(64).unwrap());
    let region_a = Arc::new(Region::anonymous(MESSAGE).unwrap());
    let region_b = Arc::new(Region::anonymous(QPS * MESSAGE).unwrap());
    let mr_a = pd_a.register(&region_a, 0, MESSAGE, all_access()).unwrap();
    let mr_b = pd_b
        .register(&region_b, 0, QPS * MESSAGE, all_access())
        .unwrap();
    let mut pairs = Vec::new();
    for _ in 0..QPS {
        let qa = pd_a
            .create_qp(QpType::Rc, &cq_a, &cq_a, bench_cap())
            .unwrap();
        let qb = pd_b
            .create_qp(QpType::Rc, &cq_b, &cq_b, bench_cap())
            .unwrap();
        connect_qps(&qa, &qb, Mtu::M4096, |_| {}).unwrap();
        pairs.push((qa, qb));
    }
    log.lock().unwrap().clear();
    // One WRITE on every QP at once: each could send its whole window of 64 packets at once.
    let sge = [mr_a.sge(0, MESSAGE as u32)];
    for (i, (qa, _)) in pairs.iter().enumerate() {
        qa.post_send(&[SendWr {
            wr_id: i as u64,
            op: SendOp::RdmaWrite {
                remote_addr: mr_b.va + (i * MESSAGE) as u64,
                rkey: mr_b.rkey,
            },
            sg_list: &sge,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut wcs = [Wc::default(); 16];
    let mut done = 0;
    while done < QPS && Instant::now() < deadline {
        let n = cq_a.wait(&mut wcs, Some(Duration::from_millis(100)));
        for wc in &wcs[..n] {
            assert_eq!(wc.status, WcStatus::Success);
            done += 1;
        }
    }
    assert_eq!(done, QPS, "every WRITE completes");

    // Replay the writer's view: requests sent (by the target's QP number) against the
    // acknowledgements taken in (by the writer's), both by PSN.
    let target_of: HashMap<u32, u32> = pairs
        .iter()
        .map(|(qa, qb)| (qa.qp_num(), qb.qp_num()))
        .collect();
    // Per target QP: one past the highest PSN sent, and the oldest unacknowledged.
    let mut sent_to: HashMap<u32, (u32, u32)> = HashMap::new();
    let (mut most, mut requests) = (0u32, 0u64);
    for (sent, bytes) in log.lock().unwrap().iter() {
        let Ok(frame) = Frame::parse(bytes) else {
            continue;
        };
        let bth = frame.repr.bth;
        let response = bth.opcode.kind().is_response();
        let next = (bth.psn + 1) & PSN_MASK;
        if *sent && !response {
            requests += 1;
            let (high, _) = sent_to.entry(bth.dest_qp).or_insert((next, bth.psn));
            if ahead(next, *high) {
                *high = next;
            }
        } else if !*sent && response {
            let target = target_of[&bth.dest_qp];
            if let Some((_, una)) = sent_to.get_mut(&target) {
                if ahead(next, *una) {
                    *una = next;
                }
            }
        }
        let packets: u32 = sent_to
            .values()
            .map(|&(high, una)| high.wrapping_sub(una) & PSN_MASK)
            .sum();
        most = most.max(packets);
    }
    assert!(
        requests >= (QPS * MESSAGE / 4096) as u64,
        "every packet sent"
    );
    // Twice one QP's window of 64 packets per engine thread (the budget is each thread's, over
    // the QPs it serves: `ROCE_TEST_THREADS=2` shards the eight QPs over two); the QPs' own
    // windows would allow 8 × 64.
    let threads = test_threads() as u32;
    assert!(
        most <= 128 * threads,
        "{most} packets in flight over {QPS} QPs on {threads} engine thread(s) at once"
    );
    // The budget is used, not a QP at a time.
    assert!(most > 64, "only {most} packets in flight at most");
}

const PSN_MASK: u32 = 0xff_ffff;

/// Whether PSN `a` is after `b` (within half the PSN space).
fn ahead(a: u32, b: u32) -> bool {
    let d = a.wrapping_sub(b) & PSN_MASK;
    d != 0 && d < 0x80_0000
}

//! The data path allocates nothing once warm: after a warm-up, thousands of RDMA WRITEs, READs,
//! SENDs and atomics run through two NICs (requester, link, responder, completer, completion
//! queues) without a single heap allocation in any thread.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use roce_nic::testbed::*;
use roce_nic::verbs::*;

struct Counting;

static COUNTING: AtomicBool = AtomicBool::new(false);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: the caller's layout, passed on as it came.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from System.alloc with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: `ptr` came from System.alloc with this layout.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn round(p: &Pair, wcs: &mut [Wc], sges: &[Sge; 2]) {
    let ops = [
        SendOp::RdmaWrite {
            remote_addr: p.b.mr.va,
            rkey: p.b.mr.rkey,
        },
        SendOp::RdmaRead {
            remote_addr: p.b.mr.va + 65536,
            rkey: p.b.mr.rkey,
        },
        SendOp::Send,
        SendOp::AtomicFetchAndAdd {
            remote_addr: p.b.mr.va + 4096,
            rkey: p.b.mr.rkey,
            add: 1,
        },
    ];
    for (i, op) in ops.into_iter().enumerate() {
        let sge = if op.is_atomic() { sges[1] } else { sges[0] };
        if op == SendOp::Send {
            p.b.qp
                .post_recv(&[RecvWr {
                    wr_id: 0,
                    sg_list: &[p.b.mr.sge(8192, 16384)],
                }])
                .unwrap();
        }
        p.a.qp
            .post_send(&[SendWr {
                wr_id: i as u64,
                op,
                sg_list: &[sge],
                flags: SendFlags::SIGNALED,
                ud: None,
            }])
            .unwrap();
        while p.a.cq.poll(&mut wcs[..1]) == 0 {
            std::thread::yield_now();
        }
        assert!(wcs[0].is_success(), "{:?}", wcs[0]);
        if op == SendOp::Send {
            while p.b.cq.poll(&mut wcs[..1]) == 0 {
                std::thread::yield_now();
            }
        }
    }
}

/// With one engine thread, and with the QPs sharded over two (frames then move between the
/// threads through queues, still without an allocation). One test, not two: the count is
/// global to the process.
#[test]
fn the_warm_data_path_allocates_nothing() {
    for threads in [1, 2] {
        let (la, lb) = roce_nic::link::mem::pair();
        let p = pair_over(
            la,
            lb,
            QpType::Rc,
            Mtu::M1024,
            1 << 20,
            |c| c.threads = threads,
            |_| {},
        )
        .unwrap();
        let mut wcs = [Wc::default(); 4];
        // 10 KiB messages: several packets each, so segmentation and reassembly run too.
        let sges = [p.a.mr.sge(0, 10 * 1024), p.a.mr.sge(32768, 8)];
        for _ in 0..200 {
            round(&p, &mut wcs, &sges);
        }
        ALLOCATIONS.store(0, Ordering::SeqCst);
        COUNTING.store(true, Ordering::SeqCst);
        for _ in 0..2000 {
            round(&p, &mut wcs, &sges);
        }
        COUNTING.store(false, Ordering::SeqCst);
        let n = ALLOCATIONS.load(Ordering::SeqCst);
        assert_eq!(
            n, 0,
            "{n} allocations in 8000 warm operations with {threads} engine threads"
        );
    }
}

//! Helpers for the port and iface tests, over the library's test bench.

#![allow(dead_code)]

pub use roce_nic::testbed::*;
use roce_nic::verbs::*;
use roce_nic::Device;

/// Connects two RC or UC QPs of hosts at 10.0.0.1 and 10.0.0.2.
pub fn connect(a: &Host, b: &Host, mtu: Mtu) {
    roce_nic::testbed::connect(a, b, mtu, |_| {}).unwrap();
}

/// Connects two RC or UC QPs whose ports have the GIDs `gids` at index `sgid_index`.
pub fn connect_gids(a: &Host, b: &Host, mtu: Mtu, gids: [Gid; 2], sgid_index: u8) {
    for (me, peer, gid) in [(a, b, gids[1]), (b, a, gids[0])] {
        me.qp.modify(&QpAttr::init(all_access())).unwrap();
        let av = AddressVector::to(gid, sgid_index);
        me.qp
            .modify(&QpAttr::rtr(av, peer.qp.qp_num(), 100, mtu))
            .unwrap();
        me.qp.modify(&QpAttr::rts(100)).unwrap();
    }
}

/// A host with an RC QP (not yet connected) on each device.
pub fn hosts(dev_a: &Device, dev_b: &Device, qp_type: QpType, region_size: usize) -> (Host, Host) {
    (
        host(dev_a, qp_type, region_size, bench_cap()).unwrap(),
        host(dev_b, qp_type, region_size, bench_cap()).unwrap(),
    )
}

fn post(host: &Host, wr_id: u64, op: SendOp, sg: &[Sge]) {
    host.qp
        .post_send(&[SendWr {
            wr_id,
            op,
            sg_list: sg,
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    let wc = host.completion();
    assert_eq!((wc.wr_id, wc.status), (wr_id, WcStatus::Success), "{wc:?}");
}

/// A WRITE of several packets, a READ of them back, a fetch-and-add and a compare-and-swap
/// from `a` to `b`, each checked byte for byte (needs regions of at least 64 KiB).
pub fn write_read_and_atomics(a: &Host, b: &Host) {
    let data = pattern(10_000, 3);
    a.write(0, &data);
    let write = SendOp::RdmaWrite {
        remote_addr: b.mr.va + 4096,
        rkey: b.mr.rkey,
    };
    post(a, 1, write, &[a.mr.sge(0, data.len() as u32)]);
    assert_eq!(b.read(4096, data.len()), data);
    let read = SendOp::RdmaRead {
        remote_addr: b.mr.va + 4096,
        rkey: b.mr.rkey,
    };
    post(a, 2, read, &[a.mr.sge(32768, data.len() as u32)]);
    assert_eq!(a.read(32768, data.len()), data);
    b.write(64, &100u64.to_ne_bytes());
    let add = SendOp::AtomicFetchAndAdd {
        remote_addr: b.mr.va + 64,
        rkey: b.mr.rkey,
        add: 5,
    };
    post(a, 3, add, &[a.mr.sge(16384, 8)]);
    assert_eq!(a.read(16384, 8), 100u64.to_ne_bytes());
    let swap = SendOp::AtomicCmpAndSwp {
        remote_addr: b.mr.va + 64,
        rkey: b.mr.rkey,
        compare: 105,
        swap: 7,
    };
    post(a, 4, swap, &[a.mr.sge(16392, 8)]);
    assert_eq!(a.read(16392, 8), 105u64.to_ne_bytes());
    assert_eq!(b.read(64, 8), 7u64.to_ne_bytes());
}

/// A private socket directory for one test, removed at the end.
pub struct Dir(pub std::path::PathBuf);

impl Dir {
    pub fn new(label: &str) -> Dir {
        let dir = std::env::temp_dir().join(format!("roce-sock-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

//! Two emulated NICs in one process, cabled back to back, each with a host memory region and a
//! connected QP: the setting of most transport tests.

#![allow(dead_code)]

pub mod netns;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, Region};
use roce_nic::link::mem;
use roce_nic::link::Link;
use roce_nic::verbs::*;
use roce_nic::{Device, DeviceConfig};

pub fn all_access() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// One host: its context, PD, CQ, QP and a registered region.
pub struct Host {
    pub ctx: Context,
    pub pd: ProtectionDomain,
    pub cq: CompletionQueue,
    pub qp: QueuePair,
    pub region: Arc<Region>,
    pub mr: MemoryRegion,
}

impl Host {
    /// Waits for the next completion (panics after 10 s: a test that hangs is a failure).
    pub fn completion(&self) -> Wc {
        let mut wc = [self.completion_placeholder()];
        let n = self.cq.wait(&mut wc, Some(Duration::from_secs(10)));
        assert_eq!(n, 1, "no completion within 10 s");
        wc[0]
    }

    /// A completion value to fill arrays for `poll`.
    pub fn completion_placeholder(&self) -> Wc {
        Wc {
            wr_id: 0,
            status: WcStatus::GeneralErr,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
        }
    }

    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.region.read(offset, &mut buf).unwrap();
        buf
    }

    pub fn write(&self, offset: usize, data: &[u8]) {
        self.region.write(offset, data).unwrap();
    }
}

pub struct Pair {
    pub a: Host,
    pub b: Host,
    // Devices last: hosts' objects are destroyed first.
    pub dev_a: Device,
    pub dev_b: Device,
}

pub fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// Two devices joined by `link_a`/`link_b`.
pub fn devices(link_a: impl Link + 'static, link_b: impl Link + 'static) -> (Device, Device) {
    let mut ca = DeviceConfig::new("nic-a", ip(1));
    let mut cb = DeviceConfig::new("nic-b", ip(2));
    ca.neighbours.push((ip(2), cb.mac));
    cb.neighbours.push((ip(1), ca.mac));
    (
        Device::start(ca, link_a).unwrap(),
        Device::start(cb, link_b).unwrap(),
    )
}

fn host(dev: &Device, qp_type: QpType, region_size: usize, cap: QpCap) -> Host {
    let ctx = dev.open().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4096).unwrap();
    let qp = pd.create_qp(qp_type, &cq, &cq, cap).unwrap();
    let region = Arc::new(Region::anonymous(region_size).unwrap());
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

/// Connects two RC or UC QPs of hosts at 10.0.0.1 and 10.0.0.2.
pub fn connect(a: &Host, b: &Host, mtu: Mtu) {
    connect_gids(a, b, mtu, [Gid::from_ip(ip(1)), Gid::from_ip(ip(2))], 1);
}

/// Connects two RC or UC QPs whose ports have the GIDs `gids` at index `sgid_index`.
pub fn connect_gids(a: &Host, b: &Host, mtu: Mtu, gids: [Gid; 2], sgid_index: u8) {
    for (me, peer, gid) in [(a, b, gids[1]), (b, a, gids[0])] {
        let qp_type = me.qp.qp_type();
        let access = all_access();
        me.qp.modify(&QpAttr::init(access)).unwrap();
        let av = AddressVector::to(gid, sgid_index);
        let mut rtr = QpAttr::rtr(av, peer.qp.qp_num(), 100, mtu);
        let mut rts = QpAttr::rts(100);
        if qp_type == QpType::Uc {
            rtr.max_dest_rd_atomic = None;
            rtr.min_rnr_timer = None;
            rts.timeout = None;
            rts.retry_cnt = None;
            rts.rnr_retry = None;
            rts.max_rd_atomic = None;
        }
        me.qp.modify(&rtr).unwrap();
        me.qp.modify(&rts).unwrap();
    }
}

/// Two hosts with connected QPs of `qp_type` over an in-process cable.
pub fn pair(qp_type: QpType, mtu: Mtu, region_size: usize) -> Pair {
    let (la, lb) = mem::pair();
    pair_over(la, lb, qp_type, mtu, region_size)
}

pub fn pair_over(
    la: impl Link + 'static,
    lb: impl Link + 'static,
    qp_type: QpType,
    mtu: Mtu,
    region_size: usize,
) -> Pair {
    let (dev_a, dev_b) = devices(la, lb);
    let (a, b) = hosts(&dev_a, &dev_b, qp_type, region_size);
    connect(&a, &b, mtu);
    Pair { a, b, dev_a, dev_b }
}

/// A host with a QP of `qp_type` (not yet connected) on each device.
pub fn hosts(dev_a: &Device, dev_b: &Device, qp_type: QpType, region_size: usize) -> (Host, Host) {
    let cap = QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 256,
    };
    (
        host(dev_a, qp_type, region_size, cap),
        host(dev_b, qp_type, region_size, cap),
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

/// Deterministic test data.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

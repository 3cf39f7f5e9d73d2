//! A test bench: two emulated NICs in one process, cabled back to back, each with a host memory
//! region and a connected QP. The setting of the transport tests, the soak tests, the benchmarks
//! and the in-process demo.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, Region};

use crate::link::mem;
use crate::link::Link;
use crate::verbs::*;
use crate::{Device, DeviceConfig};

/// Every access right.
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
    /// Waits for the next completion, at most `timeout`.
    pub fn next_completion(&self, timeout: Duration) -> Option<Wc> {
        let mut wc = [Wc::default()];
        (self.cq.wait(&mut wc, Some(timeout)) == 1).then_some(wc[0])
    }

    /// Waits for the next completion; panics after 10 s (in a test, a hang is a failure).
    pub fn completion(&self) -> Wc {
        self.next_completion(Duration::from_secs(10))
            .expect("no completion within 10 s")
    }

    /// `len` bytes of the host's region from `offset` (panics outside the region).
    pub fn read(&self, offset: usize, len: usize) -> Vec<u8> {
        let mut buf = vec![0; len];
        self.region
            .read(offset, &mut buf)
            .expect("read inside the region");
        buf
    }

    /// Writes into the host's region (panics outside the region).
    pub fn write(&self, offset: usize, data: &[u8]) {
        self.region
            .write(offset, data)
            .expect("write inside the region");
    }
}

/// Two hosts on two cabled devices.
pub struct Pair {
    pub a: Host,
    pub b: Host,
    // Devices last: the hosts' objects are destroyed first.
    pub dev_a: Device,
    pub dev_b: Device,
}

/// The test bench's addresses: 10.0.0.n.
pub fn ip(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// Two devices (10.0.0.1 and 10.0.0.2, each knowing the other's MAC) joined by
/// `link_a`/`link_b`.
pub fn devices(
    link_a: impl Link + 'static,
    link_b: impl Link + 'static,
) -> Result<(Device, Device), VerbsError> {
    devices_with(link_a, link_b, |_| {})
}

/// Like [`devices`], with each device's configuration adjusted by `configure`. The devices run
/// [`test_threads`] engine threads unless `configure` says otherwise.
pub fn devices_with(
    link_a: impl Link + 'static,
    link_b: impl Link + 'static,
    configure: impl Fn(&mut DeviceConfig),
) -> Result<(Device, Device), VerbsError> {
    let mut ca = DeviceConfig::new("nic-a", ip(1));
    let mut cb = DeviceConfig::new("nic-b", ip(2));
    ca.threads = test_threads();
    cb.threads = test_threads();
    ca.neighbours.push((ip(2), cb.mac));
    cb.neighbours.push((ip(1), ca.mac));
    configure(&mut ca);
    configure(&mut cb);
    Ok((Device::start(ca, link_a)?, Device::start(cb, link_b)?))
}

/// Engine threads of the test bench's devices: `ROCE_TEST_THREADS` (default 1), so that a whole
/// test suite can run again with its QPs sharded (`ROCE_TEST_THREADS=2 cargo test ...`).
pub fn test_threads() -> usize {
    std::env::var("ROCE_TEST_THREADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// QP sizes the bench uses.
pub fn bench_cap() -> QpCap {
    QpCap {
        max_send_wr: 1024,
        max_recv_wr: 1024,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 256,
    }
}

/// A host on `dev` with a QP of `qp_type` and a registered region of `region_size` bytes.
pub fn host(
    dev: &Device,
    qp_type: QpType,
    region_size: usize,
    cap: QpCap,
) -> Result<Host, VerbsError> {
    let region = Arc::new(Region::anonymous(region_size)?);
    host_on(dev.open()?, qp_type, region, cap)
}

/// A host with context `ctx` (on a device in this process, or through a NIC's socket): a PD,
/// a CQ, a QP of `qp_type` and `region` registered with every access.
pub fn host_on(
    ctx: Context,
    qp_type: QpType,
    region: Arc<Region>,
    cap: QpCap,
) -> Result<Host, VerbsError> {
    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(4096)?;
    let qp = pd.create_qp(qp_type, &cq, &cq, cap)?;
    let mr = pd.register(&region, 0, region.len(), all_access())?;
    Ok(Host {
        ctx,
        pd,
        cq,
        qp,
        region,
        mr,
    })
}

/// Connects two RC or UC QPs (a on 10.0.0.1, b on 10.0.0.2), both starting at PSN 100. `tune`
/// may change the attributes of each step before it is applied.
pub fn connect(a: &Host, b: &Host, mtu: Mtu, tune: impl Fn(&mut QpAttr)) -> Result<(), VerbsError> {
    connect_qps(&a.qp, &b.qp, mtu, tune)
}

/// [`connect`] for bare QPs: `a` on 10.0.0.1, `b` on 10.0.0.2.
pub fn connect_qps(
    a: &QueuePair,
    b: &QueuePair,
    mtu: Mtu,
    tune: impl Fn(&mut QpAttr),
) -> Result<(), VerbsError> {
    for (me, peer, peer_ip) in [(a, b, ip(2)), (b, a, ip(1))] {
        let connected_only = me.qp_type() == QpType::Rc;
        let mut init = QpAttr::init(all_access());
        let av = AddressVector::to(Gid::from_ip(peer_ip), 1);
        let mut rtr = QpAttr::rtr(av, peer.qp_num(), 100, mtu);
        let mut rts = QpAttr::rts(100);
        if !connected_only {
            // UC has no responder resources, timers or retries.
            rtr.max_dest_rd_atomic = None;
            rtr.min_rnr_timer = None;
            rts.timeout = None;
            rts.retry_cnt = None;
            rts.rnr_retry = None;
            rts.max_rd_atomic = None;
        }
        for attr in [&mut init, &mut rtr, &mut rts] {
            tune(attr);
            me.modify(attr)?;
        }
    }
    Ok(())
}

/// Two hosts with connected QPs of `qp_type` over an in-process cable.
pub fn pair(qp_type: QpType, mtu: Mtu, region_size: usize) -> Result<Pair, VerbsError> {
    let (la, lb) = mem::pair();
    pair_over(la, lb, qp_type, mtu, region_size, |_| {}, |_| {})
}

/// Like [`pair`], over the links given, with the devices configured by `configure` and the QP
/// attributes tuned by `tune`.
pub fn pair_over(
    la: impl Link + 'static,
    lb: impl Link + 'static,
    qp_type: QpType,
    mtu: Mtu,
    region_size: usize,
    configure: impl Fn(&mut DeviceConfig),
    tune: impl Fn(&mut QpAttr),
) -> Result<Pair, VerbsError> {
    let (dev_a, dev_b) = devices_with(la, lb, configure)?;
    let a = host(&dev_a, qp_type, region_size, bench_cap())?;
    let b = host(&dev_b, qp_type, region_size, bench_cap())?;
    if qp_type != QpType::Ud {
        connect(&a, &b, mtu, tune)?;
    }
    Ok(Pair { a, b, dev_a, dev_b })
}

/// Deterministic test data.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

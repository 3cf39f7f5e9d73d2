use std::sync::Arc;
use std::time::{Duration, Instant};

use roce_hostmem::{Access, Region};
use roce_nic::link::mem;
use roce_nic::verbs::*;
use roce_nic::{Device, DeviceConfig};

fn main() {
    let ipa = "10.0.0.1".parse().unwrap();
    let ipb = "10.0.0.2".parse().unwrap();
    let mut ca = DeviceConfig::new("a", ipa);
    let mut cb = DeviceConfig::new("b", ipb);
    ca.neighbours.push((ipb, cb.mac));
    cb.neighbours.push((ipa, ca.mac));
    let (la, lb) = mem::pair();
    let da = Device::start(ca, la).unwrap();
    let db = Device::start(cb, lb).unwrap();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let mk = |d: &Device| {
        let ctx = d.open().unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8192).unwrap();
        let qp = pd
            .create_qp(
                QpType::Rc,
                &cq,
                &cq,
                QpCap {
                    max_send_wr: 1024,
                    max_recv_wr: 16,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 64,
                },
            )
            .unwrap();
        let region = Arc::new(Region::anonymous(64 << 20).unwrap());
        let mr = pd.register(&region, 0, region.len(), all).unwrap();
        (ctx, pd, cq, qp, region, mr)
    };
    let a = mk(&da);
    let b = mk(&db);
    a.3.modify(&QpAttr::init(all)).unwrap();
    b.3.modify(&QpAttr::init(all)).unwrap();
    a.3.modify(&QpAttr::rtr(
        AddressVector::to(Gid::from_ip(ipb), 1),
        b.3.qp_num(),
        0,
        Mtu::M4096,
    ))
    .unwrap();
    b.3.modify(&QpAttr::rtr(
        AddressVector::to(Gid::from_ip(ipa), 1),
        a.3.qp_num(),
        0,
        Mtu::M4096,
    ))
    .unwrap();
    a.3.modify(&QpAttr::rts(0)).unwrap();
    b.3.modify(&QpAttr::rts(0)).unwrap();
    let mut wcs = vec![
        Wc {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0
        };
        256
    ];

    for (size, count, depth) in [(1usize << 20, 2000u64, 16u64), (64, 2_000_000, 512)] {
        let start = Instant::now();
        let mut posted = 0u64;
        let mut done = 0u64;
        while done < count {
            while posted < count && posted - done < depth {
                let sge = a.5.sge(0, size as u32);
                a.3.post_send(&[SendWr {
                    wr_id: posted,
                    op: SendOp::RdmaWrite {
                        remote_addr: b.5.va + ((posted % 32) * size as u64) % (32 << 20),
                        rkey: b.5.rkey,
                    },
                    sg_list: &[sge],
                    flags: SendFlags::SIGNALED,
                    ud: None,
                }])
                .unwrap();
                posted += 1;
            }
            let n = a.2.poll(&mut wcs);
            for wc in &wcs[..n] {
                assert_eq!(wc.status, WcStatus::Success);
            }
            done += n as u64;
        }
        let el = start.elapsed();
        println!(
            "size {size}: {:.2} Gbit/s, {:.0} msg/s",
            (count * size as u64 * 8) as f64 / el.as_secs_f64() / 1e9,
            count as f64 / el.as_secs_f64()
        );
    }
    // latency
    let mut lats = Vec::new();
    for i in 0..20000u64 {
        let sge = a.5.sge(0, 64);
        let t = Instant::now();
        a.3.post_send(&[SendWr {
            wr_id: i,
            op: SendOp::RdmaWrite {
                remote_addr: b.5.va,
                rkey: b.5.rkey,
            },
            sg_list: &[sge],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
        loop {
            if a.2.poll(&mut wcs[..1]) == 1 {
                break;
            }
        }
        lats.push(t.elapsed());
    }
    lats.sort();
    println!(
        "latency median {:?} p99 {:?}",
        lats[lats.len() / 2],
        lats[lats.len() * 99 / 100]
    );
    let _ = Duration::ZERO;
}

use roce_nic::testbed::*;
use roce_nic::verbs::*;

#[test]
fn rdma_write_lands_in_the_target_region() {
    let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
    let data = pattern(5000, 7);
    p.a.write(0, &data);
    let sge = p.a.mr.sge(0, data.len() as u32);
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 42,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + 4096,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[sge],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    let wc = p.a.completion();
    assert_eq!(wc.status, WcStatus::Success, "{wc:?}");
    assert_eq!(wc.wr_id, 42);
    assert_eq!(p.b.read(4096, data.len()), data);
    assert_eq!(p.b.read(4095, 1), [0]);
    assert_eq!(p.b.read(4096 + data.len(), 1), [0]);
}

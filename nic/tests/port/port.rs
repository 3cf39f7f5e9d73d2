//! The port's own network identity over an in-process cable: peers' MACs resolved by ARP and
//! neighbour discovery instead of configured, and TCP connections between two NICs' IP stacks
//! bridged to host streams.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv6Addr, Shutdown, SocketAddr};
use std::os::unix::net::UnixStream;
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use roce_nic::link::mem;
use roce_nic::verbs::*;
use roce_nic::{Device, DeviceConfig};

/// Two devices at 10.0.0.1 and 10.0.0.2 on an in-process cable, knowing nothing of each other.
fn strangers() -> (Device, Device) {
    let (la, lb) = mem::pair();
    let ca = DeviceConfig::new("nic-a", ip(1));
    let cb = DeviceConfig::new("nic-b", ip(2));
    (
        Device::start(ca, la).unwrap(),
        Device::start(cb, lb).unwrap(),
    )
}

fn failure_kind(result: Result<impl Sized, VerbsError>) -> ErrorKind {
    match result {
        Err(VerbsError::Io(e)) => e.kind(),
        Err(e) => panic!("expected an I/O error, got {e}"),
        Ok(_) => panic!("expected a failure"),
    }
}

#[test]
fn qps_connect_with_macs_resolved_by_arp() {
    let (dev_a, dev_b) = strangers();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 1 << 16);
    connect(&a, &b, Mtu::M1024);
    write_read_and_atomics(&a, &b);
    write_read_and_atomics(&b, &a);
    // Only ARP and RoCE crossed the cable: A asked, B answered (B learnt A's MAC from the
    // request), and neither side needed a second round.
    assert!(dev_a.counters().rx_not_roce >= 1);
    assert!(dev_b.counters().rx_not_roce >= 1);
}

#[test]
fn qps_connect_over_ipv6_with_macs_resolved_by_neighbour_discovery() {
    let (la, lb) = mem::pair();
    let ips: [IpAddr; 2] = ["fd00:77::1".parse().unwrap(), "fd00:77::2".parse().unwrap()];
    let dev_a = Device::start(DeviceConfig::new("nic-a", ips[0]), la).unwrap();
    let dev_b = Device::start(DeviceConfig::new("nic-b", ips[1]), lb).unwrap();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 1 << 16);
    connect_gids(&a, &b, Mtu::M1024, ips.map(Gid::from_ip), 1);
    write_read_and_atomics(&a, &b);
}

#[test]
fn qps_connect_over_link_local_gids() {
    let (dev_a, dev_b) = strangers();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 1 << 16);
    let gids = [&a, &b].map(|h| h.ctx.gid(0).unwrap());
    assert!(matches!(gids[0].ip(), IpAddr::V6(v6) if v6.segments()[0] == 0xfe80));
    connect_gids(&a, &b, Mtu::M1024, gids, 0);
    write_read_and_atomics(&b, &a);
}

#[test]
fn a_peer_nobody_answers_for_fails_after_the_resolve_timeout() {
    let (la, lb) = mem::pair();
    let mut ca = DeviceConfig::new("nic-a", ip(1));
    ca.resolve_timeout = Duration::from_millis(300);
    let dev_a = Device::start(ca, la).unwrap();
    let _dev_b = Device::start(DeviceConfig::new("nic-b", ip(2)), lb).unwrap();
    let (a, _) = hosts(&dev_a, &_dev_b, QpType::Rc, 4096);
    a.qp.modify(&QpAttr::init(all_access())).unwrap();
    let av = AddressVector::to(Gid::from_ip(ip(9)), 1);
    let started = Instant::now();
    let result = a.qp.modify(&QpAttr::rtr(av, 0x11, 0, Mtu::M1024));
    let waited = started.elapsed();
    assert!(
        matches!(
            result,
            Err(VerbsError::Modify(roce_nic::qp::ModifyError::NoNeighbour(ip))) if ip == common::ip(9)
        ),
        "{result:?}"
    );
    assert!(waited >= Duration::from_millis(300), "{waited:?}");
    // Not stuck: a generous bound, for a loaded machine.
    assert!(waited < Duration::from_secs(20), "{waited:?}");
    assert_eq!(a.qp.query().unwrap().qp_state, Some(QpState::Init));
    // The same peer with its MAC given needs no resolution.
    let mut av = av;
    av.dmac = Some(roce_wire::EthernetAddress([2, 0, 10, 0, 0, 9]));
    a.qp.modify(&QpAttr::rtr(av, 0x11, 0, Mtu::M1024)).unwrap();
}

#[test]
fn a_peer_off_the_subnet_fails_at_once() {
    // A resolve timeout far beyond any scheduling delay: failing well within it shows that
    // nothing was resolved (nor waited for).
    let (la, lb) = mem::pair();
    let mut ca = DeviceConfig::new("nic-a", ip(1));
    ca.resolve_timeout = Duration::from_secs(60);
    let dev_a = Device::start(ca, la).unwrap();
    let dev_b = Device::start(DeviceConfig::new("nic-b", ip(2)), lb).unwrap();
    let (a, _b) = hosts(&dev_a, &dev_b, QpType::Rc, 4096);
    a.qp.modify(&QpAttr::init(all_access())).unwrap();
    let far = IpAddr::from([10, 0, 1, 2]);
    let av = AddressVector::to(Gid::from_ip(far), 1);
    let started = Instant::now();
    let result = a.qp.modify(&QpAttr::rtr(av, 0x11, 0, Mtu::M1024));
    assert_eq!(failure_kind(result), ErrorKind::NetworkUnreachable);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(a.qp.query().unwrap().qp_state, Some(QpState::Init));
}

#[test]
fn address_handles_wait_for_the_peers_mac() {
    let (dev_a, dev_b) = strangers();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Ud, 4096);
    let ah =
        a.pd.create_ah(AddressVector::to(Gid::from_ip(ip(2)), 1))
            .unwrap();
    // The handle came back once B had answered A's ARP request...
    assert!(dev_b.counters().rx_not_roce >= 1, "B saw no ARP request");
    assert!(dev_a.counters().rx_not_roce >= 1, "A got no ARP answer");
    // ...and holds B's MAC: a datagram sent through it lands in B's QP at once.
    for host in [&a, &b] {
        host.qp.modify(&QpAttr::init_ud(0x42)).unwrap();
        host.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rtr),
                ..QpAttr::default()
            })
            .unwrap();
        host.qp
            .modify(&QpAttr {
                qp_state: Some(QpState::Rts),
                sq_psn: Some(0),
                ..QpAttr::default()
            })
            .unwrap();
    }
    b.qp.post_recv(&[RecvWr {
        wr_id: 7,
        sg_list: &[b.mr.sge(0, 1024)],
    }])
    .unwrap();
    a.write(0, &pattern(100, 5));
    a.qp.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        sg_list: &[a.mr.sge(0, 100)],
        flags: SendFlags::SIGNALED,
        ud: Some(UdDest {
            ah: ah.handle(),
            remote_qpn: b.qp.qp_num(),
            remote_qkey: 0x42,
        }),
    }])
    .unwrap();
    assert_eq!(a.completion().status, WcStatus::Success);
    let wc = b.completion();
    assert_eq!(
        (wc.wr_id, wc.status, wc.byte_len),
        (7, WcStatus::Success, 140)
    );
    // After the 40-byte GRH area, the datagram.
    assert_eq!(b.read(40, 100), pattern(100, 5));
}

fn stream_pair(a: &Device, b: &Device, port: u16) -> (UnixStream, UnixStream, SocketAddr) {
    let ctx_a = a.open().unwrap();
    let ctx_b = b.open().unwrap();
    let listener = ctx_a.tcp_listen(port).unwrap();
    let dialer = thread::spawn(move || ctx_b.tcp_connect(SocketAddr::new(ip(1), port)));
    let (server, peer) = listener.accept_timeout(Duration::from_secs(10)).unwrap();
    let client = dialer.join().unwrap().unwrap();
    (server, client, peer)
}

fn timeouts(streams: &[&UnixStream]) {
    for s in streams {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    }
}

#[test]
fn tcp_between_two_nics_carries_bytes_both_ways_and_half_closes() {
    let (dev_a, dev_b) = strangers();
    let (mut server, mut client, peer) = stream_pair(&dev_a, &dev_b, 18515);
    timeouts(&[&server, &client]);
    assert_eq!(peer.ip(), ip(2));
    assert!(peer.port() >= 49152, "{peer}");
    // The record exchange of ibv_rc_pingpong: one 52-byte write, one read of exactly 52.
    let record = b"0000:000011:8fe4ca:00000000000000000000ffff0a000002\0";
    client.write_all(record).unwrap();
    let mut got = [0u8; 52];
    server.read_exact(&mut got).unwrap();
    assert_eq!(&got, record);
    server.write_all(b"done\0").unwrap();
    let mut done = [0u8; 5];
    client.read_exact(&mut done).unwrap();
    assert_eq!(&done, b"done\0");
    // The client stops sending: the server reads end-of-file, and can still answer.
    client.shutdown(Shutdown::Write).unwrap();
    let mut rest = Vec::new();
    server.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty());
    server.write_all(b"after your FIN").unwrap();
    drop(server);
    let mut tail = Vec::new();
    client.read_to_end(&mut tail).unwrap();
    assert_eq!(tail, b"after your FIN");
}

#[test]
fn tcp_moves_a_megabyte_each_way_through_bounded_buffers() {
    let (dev_a, dev_b) = strangers();
    let (server, client, _) = stream_pair(&dev_a, &dev_b, 7000);
    timeouts(&[&server, &client]);
    let up = pattern(1 << 20, 11);
    let down = pattern(1 << 20, 29);
    let send = |mut s: UnixStream, data: Vec<u8>| {
        thread::spawn(move || {
            s.write_all(&data).unwrap();
            s.shutdown(Shutdown::Write).unwrap();
        })
    };
    let receive = |mut s: UnixStream| {
        thread::spawn(move || {
            let mut got = Vec::new();
            s.read_to_end(&mut got).unwrap();
            got
        })
    };
    let writers = [
        send(client.try_clone().unwrap(), up.clone()),
        send(server.try_clone().unwrap(), down.clone()),
    ];
    let at_server = receive(server);
    let at_client = receive(client);
    for w in writers {
        w.join().unwrap();
    }
    assert!(at_server.join().unwrap() == up);
    assert!(at_client.join().unwrap() == down);
}

#[test]
fn tcp_connect_to_a_port_nobody_listens_on_is_refused() {
    let (dev_a, dev_b) = strangers();
    let _ = dev_a;
    let ctx = dev_b.open().unwrap();
    let started = Instant::now();
    let result = ctx.tcp_connect(SocketAddr::new(ip(1), 18515));
    assert_eq!(failure_kind(result), ErrorKind::ConnectionRefused);
    // Refused by the peer's reset, not given up on at the connect timeout.
    assert!(started.elapsed() < roce_nic::port::CONNECT_TIMEOUT / 2);
}

#[test]
fn tcp_connect_off_the_subnet_fails_at_once() {
    let (_dev_a, dev_b) = strangers();
    let ctx = dev_b.open().unwrap();
    let far = SocketAddr::new(IpAddr::from(Ipv6Addr::LOCALHOST), 1);
    assert_eq!(
        failure_kind(ctx.tcp_connect(far)),
        ErrorKind::NetworkUnreachable
    );
}

#[test]
fn tcp_listeners_hold_a_backlog_and_time_out_accepts() {
    let (dev_a, dev_b) = strangers();
    let ctx_a = dev_a.open().unwrap();
    let listener = ctx_a.tcp_listen(9000).unwrap();
    assert_eq!(failure_kind(ctx_a.tcp_listen(9000)), ErrorKind::AddrInUse);
    assert_eq!(
        failure_kind(listener.accept_timeout(Duration::from_millis(100))),
        ErrorKind::TimedOut
    );
    // Connections made before anyone accepts wait in the backlog, in order.
    let ctx_b = dev_b.open().unwrap();
    let mut clients = Vec::new();
    for n in 0..roce_nic::port::BACKLOG as u8 {
        let mut c = ctx_b.tcp_connect(SocketAddr::new(ip(1), 9000)).unwrap();
        c.write_all(&[n]).unwrap();
        clients.push(c);
    }
    for n in 0..roce_nic::port::BACKLOG as u8 {
        let (mut s, _) = listener.accept_timeout(Duration::from_secs(5)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut byte = [0u8];
        s.read_exact(&mut byte).unwrap();
        assert_eq!(byte, [n]);
    }
    // Closing the listener refuses new connections.
    drop(listener);
    let result = ctx_b.tcp_connect(SocketAddr::new(ip(1), 9000));
    assert_eq!(failure_kind(result), ErrorKind::ConnectionRefused);
}

#[test]
fn address_limits_are_checked_when_the_device_starts() {
    let mut config = DeviceConfig::new("nic", ip(1));
    config.prefix_lens.insert(ip(1), 33);
    let err = Device::start(config, mem::pair().0).err().unwrap();
    assert_eq!(
        err.to_string(),
        "a prefix length of 33 is too long for 10.0.0.1"
    );
    let mut config = DeviceConfig::new("nic", ip(1));
    for n in 2..=8 {
        config.add_ip(ip(n), 16);
    }
    let err = Device::start(config, mem::pair().0).err().unwrap();
    assert!(err.to_string().contains("at most 8 IP addresses"), "{err}");
}

#[test]
fn prefix_lengths_decide_who_is_on_link() {
    // 10.0.1.2 is off a /24 but on a /16: with the wider subnet, A resolves B there.
    let (la, lb) = mem::pair();
    let far = IpAddr::from([10, 0, 1, 2]);
    let mut ca = DeviceConfig::new("nic-a", ip(1));
    ca.prefix_lens.insert(ip(1), 16);
    let mut cb = DeviceConfig::new("nic-b", far);
    cb.prefix_lens.insert(far, 16);
    let dev_a = Device::start(ca, la).unwrap();
    let dev_b = Device::start(cb, lb).unwrap();
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 1 << 16);
    connect_gids(&a, &b, Mtu::M1024, [ip(1), far].map(Gid::from_ip), 1);
    write_read_and_atomics(&a, &b);
}

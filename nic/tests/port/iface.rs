//! The NIC on real Linux interfaces: veth pairs in network namespaces the tests create. Two NICs
//! do RDMA with each other's MACs learnt by ARP; the kernel pings a NIC (IPv4 and IPv6) and
//! learns its MAC; TCP runs between the kernel and a NIC both ways. Needs root (CAP_NET_ADMIN
//! for the namespace, CAP_NET_RAW for the raw socket); skipped with a loud line without it,
//! never when ROCE_CI=1.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::*;
use roce_nic::link::iface::{IfaceError, IfaceLink};
use roce_nic::verbs::*;
use roce_nic::{Device, DeviceConfig};
use roce_tests::netns::{Killed, Netns};

/// A NIC at `ip` on interface `ifname` of `ns`, with a link MTU of 1500 like the veth's.
fn nic(ns: &Netns, name: &str, ifname: &str, ip: IpAddr) -> Device {
    let link = ns.enter(|| IfaceLink::open(ifname)).unwrap();
    let mut config = DeviceConfig::new(name, ip);
    config.mtu = 1500;
    Device::start(config, link).unwrap()
}

#[test]
fn rdma_between_two_nics_on_a_veth_pair() {
    let Some(ns) = Netns::create("rdma") else {
        return;
    };
    ns.veth("a0", "b0");
    let dev_a = nic(&ns, "nic-a", "a0", ip(1));
    let dev_b = nic(&ns, "nic-b", "b0", ip(2));
    let (a, b) = hosts(&dev_a, &dev_b, QpType::Rc, 1 << 16);
    connect(&a, &b, Mtu::M1024);
    write_read_and_atomics(&a, &b);
    write_read_and_atomics(&b, &a);
    // The MACs came from ARP on the wire (nothing was configured).
    assert!(dev_a.counters().rx_not_roce >= 1);
    assert!(dev_b.counters().rx_not_roce >= 1);
}

/// A namespace with a veth pair: the kernel on `k0` at 10.0.0.1/24 and fd00:77::1/64, the NIC
/// on `n0` at 10.0.0.2 and fd00:77::2.
fn kernel_and_nic(test: &str) -> Option<(Netns, Device)> {
    let ns = Netns::create(test)?;
    ns.veth("k0", "n0");
    ns.ip(&["addr", "add", "10.0.0.1/24", "dev", "k0"]);
    // No TCP segmentation offload towards the NIC: a wire carries MTU-sized frames, but over a
    // veth the kernel would hand over 64 KiB super-frames for the peer's hardware to cut up.
    ns.ip(&["link", "set", "k0", "gso_max_size", "1500"]);
    ns.ip(&["addr", "add", "fd00:77::1/64", "dev", "k0", "nodad"]);
    let link = ns.enter(|| IfaceLink::open("n0")).unwrap();
    let mut config = DeviceConfig::new("nic", ip(2));
    config.mtu = 1500;
    config.ips.push("fd00:77::2".parse().unwrap());
    let dev = Device::start(config, link).unwrap();
    Some((ns, dev))
}

fn ping(ns: &Netns, args: &[&str]) -> String {
    let mut argv = vec!["ping", "-c", "3", "-i", "0.2", "-W", "1", "-w", "5"];
    argv.extend_from_slice(args);
    let out = ns.command(&argv).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{argv:?}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("3 received"), "{text}");
    text
}

#[test]
fn the_kernel_pings_the_nic_and_learns_its_mac() {
    let Some((ns, dev)) = kernel_and_nic("ping") else {
        return;
    };
    let mac = dev.config().mac.0.map(|b| format!("{b:02x}")).join(":");
    ping(&ns, &["10.0.0.2"]);
    let neigh = ns.ip(&["neigh", "show", "10.0.0.2", "dev", "k0"]);
    assert!(
        neigh.contains(&mac),
        "kernel's ARP table: {neigh:?}, NIC MAC {mac}"
    );
    ping(&ns, &["-6", "fd00:77::2"]);
    let neigh = ns.ip(&["-6", "neigh", "show", "fd00:77::2", "dev", "k0"]);
    assert!(
        neigh.contains(&mac),
        "kernel's ND table: {neigh:?}, NIC MAC {mac}"
    );
    // The link-local address the NIC derives from its MAC (its GID 0) answers too.
    let link_local = format!("{}%k0", dev.open().unwrap().gid(0).unwrap().ip());
    ping(&ns, &["-6", &link_local]);
}

/// A python3 program in the namespace, bounded by an alarm so it can never hang the test.
fn python(ns: &Netns, program: &str) -> Killed {
    let bounded = format!("import signal, socket, sys\nsignal.alarm(20)\n{program}");
    ns.spawn(&["/usr/bin/python3", "-c", &bounded])
}

#[test]
fn tcp_between_the_kernel_and_the_nic_both_ways() {
    let Some((ns, dev)) = kernel_and_nic("tcp") else {
        return;
    };
    let ctx = dev.open().unwrap();

    // The kernel connects to the NIC's listener.
    let listener = ctx.tcp_listen(18515).unwrap();
    let client = python(
        &ns,
        "s = socket.create_connection(('10.0.0.2', 18515), timeout=10)\n\
         s.sendall(b'hello from the kernel ' * 10000)\n\
         s.shutdown(socket.SHUT_WR)\n\
         got = b''\n\
         while True:\n    \
             d = s.recv(4096)\n    \
             if not d: break\n    \
             got += d\n\
         sys.stdout.write(got.decode())\n",
    );
    let (mut stream, peer) = listener.accept_timeout(Duration::from_secs(10)).unwrap();
    assert_eq!(peer.ip(), ip(1));
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = Vec::new();
    stream.read_to_end(&mut got).unwrap();
    assert_eq!(got, b"hello from the kernel ".repeat(10000));
    stream.write_all(b"hello from the NIC").unwrap();
    drop(stream);
    assert_eq!(client.finish("python client"), "hello from the NIC");

    // The NIC connects to a listener of the kernel's.
    let server = python(
        &ns,
        "l = socket.socket()\n\
         l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n\
         l.bind(('10.0.0.1', 18516))\n\
         l.listen(1)\n\
         l.settimeout(10)\n\
         c, _ = l.accept()\n\
         c.settimeout(10)\n\
         got = b''\n\
         while True:\n    \
             d = c.recv(4096)\n    \
             if not d: break\n    \
             got += d\n\
         c.sendall(got.upper())\n\
         c.close()\n",
    );
    let started = Instant::now();
    let mut stream = loop {
        // The server may not listen yet: retry refusals, a bounded number of times.
        match ctx.tcp_connect(SocketAddr::new(ip(1), 18516)) {
            Ok(s) => break s,
            Err(VerbsError::Io(e)) if e.kind() == ErrorKind::ConnectionRefused => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "nobody listened"
                );
                thread::sleep(Duration::from_millis(50));
            }
            Err(e) => panic!("connect failed: {e}"),
        }
    };
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(b"shout this").unwrap();
    stream.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).unwrap();
    assert_eq!(answer, b"SHOUT THIS");
    server.finish("python server");
}

#[test]
fn opening_a_missing_interface_names_it() {
    let Some(ns) = Netns::create("missing") else {
        return;
    };
    let err = ns.enter(|| IfaceLink::open("nope0")).err().unwrap();
    assert!(matches!(err, IfaceError::NoInterface(_)), "{err}");
    assert_eq!(err.to_string(), "no network interface named nope0");
}

/// Drops one capability from the calling thread's effective set (capabilities are per thread
/// on Linux, so the rest of the test process keeps it).
fn drop_effective_capability(cap: u32) {
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let mut header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: capget/capset with a version-3 header and two data words, as the ABI asks.
    unsafe {
        assert_eq!(
            libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()),
            0
        );
        data[(cap / 32) as usize].effective &= !(1 << (cap % 32));
        assert_eq!(
            libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()),
            0
        );
    }
}

#[test]
fn opening_without_cap_net_raw_names_the_capability() {
    const CAP_NET_RAW: u32 = 13;
    let err = thread::spawn(|| {
        drop_effective_capability(CAP_NET_RAW);
        IfaceLink::open("lo").err()
    })
    .join()
    .unwrap()
    .expect("opening an interface without CAP_NET_RAW must fail");
    assert!(matches!(err, IfaceError::NotPermitted(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "opening lo needs the CAP_NET_RAW capability (run as root or grant it)"
    );
}

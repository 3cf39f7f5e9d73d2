//! udaddy against itself between two emulated NICs: the server's UD QP found through the RDMA
//! CM's UDP port space (SIDR_REQ, SIDR_REP), datagrams both ways, each side's checks.

use std::time::Duration;

use roce_nic::link::mem;
use roce_nic::testbed::{devices, ip};
use roce_tools::udaddy::{self, Options};
use roce_tools::Limits;

fn opts(addr: std::net::IpAddr, size: u32, count: u32) -> Options {
    Options {
        size,
        count,
        limits: Limits {
            step: Duration::from_secs(10),
            connect_retry: Duration::from_secs(10),
        },
        ..Options::new(addr)
    }
}

#[test]
fn udaddy_client_and_server_resolve_and_exchange_datagrams() {
    for size in [100, 1024] {
        let (la, lb) = mem::pair();
        let (dev_a, dev_b) = devices(la, lb).unwrap();
        let (a, b) = (dev_a.open().unwrap(), dev_b.open().unwrap());
        let (server, client) = std::thread::scope(|s| {
            let server = s.spawn(|| {
                let mut out = Vec::new();
                let r = udaddy::server(&a, &opts(roce_tools::rping::ANY, size, 10), &mut out);
                (r, String::from_utf8(out).unwrap())
            });
            let client = s.spawn(|| {
                let mut out = Vec::new();
                let r = udaddy::client(&b, &opts(ip(1), size, 10), &mut out);
                (r, String::from_utf8(out).unwrap())
            });
            (server.join().unwrap(), client.join().unwrap())
        });
        assert!(server.0.is_ok(), "{:?}\n{}", server.0, server.1);
        assert!(client.0.is_ok(), "{:?}\n{}", client.0, client.1);
        assert!(
            client.1.contains("Q_Key 0x1234567; 10 datagrams of"),
            "{}",
            client.1
        );
        assert!(client.1.contains("10 answers from that QP"), "{}", client.1);
        assert!(
            server.1.contains("verified: 10 datagrams of"),
            "{}",
            server.1
        );
        println!("{size}:\n{}\n{}", server.1, client.1);
    }
}

#[test]
fn a_datagram_larger_than_the_path_mtu_is_refused() {
    let (la, lb) = mem::pair();
    let (dev_a, _dev_b) = devices(la, lb).unwrap();
    let a = dev_a.open().unwrap();
    let err = udaddy::client(&a, &opts(ip(2), 5000, 1), &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string().contains("larger than the path MTU"),
        "{err}"
    );
}

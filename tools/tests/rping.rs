//! rping against itself between two emulated NICs: the RDMA CM handshake, then every ping's
//! SEND, RDMA READ, SEND, RDMA WRITE and SEND, verified on both sides, and the disconnect.

use std::time::Duration;

use roce_nic::link::mem;
use roce_nic::testbed::{devices, ip};
use roce_tools::rping::{self, Options};
use roce_tools::Limits;

fn opts(addr: std::net::IpAddr, size: usize, count: u64) -> Options {
    Options {
        size,
        count,
        verbose: true,
        validate: true,
        limits: Limits {
            step: Duration::from_secs(10),
            connect_retry: Duration::from_secs(10),
        },
        ..Options::new(addr)
    }
}

#[test]
fn rping_client_and_server_ping_and_verify() {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let (a, b) = (dev_a.open().unwrap(), dev_b.open().unwrap());
    let (server, client) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let mut out = Vec::new();
            let report = rping::server(&a, &opts(rping::ANY, 100, 0), &mut out);
            (report, String::from_utf8(out).unwrap())
        });
        let client = s.spawn(|| {
            let mut out = Vec::new();
            let report = rping::client(&b, &opts(ip(1), 100, 300), &mut out);
            (report, String::from_utf8(out).unwrap())
        });
        (server.join().unwrap(), client.join().unwrap())
    });
    assert_eq!(client.0.expect("client").pings, 300, "{}", client.1);
    assert_eq!(server.0.expect("server").pings, 300, "{}", server.1);
    let first = String::from_utf8(rping::ping_data(0, 100)[..99].to_vec()).unwrap();
    assert!(
        client.1.contains(&format!("ping data: {first}\n")),
        "{}",
        client.1
    );
    assert!(server.1.contains(&format!("server ping data: {first}\n")));
    assert!(client.1.contains("verified: 300 pings"));
}

#[test]
fn the_ping_pattern_is_rpings() {
    let p = rping::ping_data(0, 30);
    assert_eq!(&p, b"rdma-ping-0: ABCDEFGHIJKLMNOP\0");
    // The run starts one letter later each ping, and wraps from z to A.
    assert_eq!(&rping::ping_data(1, 16), b"rdma-ping-1: BC\0");
    assert_eq!(rping::ping_data(57, 18)[14..17], *b"zAB");
}

#[test]
fn ucmatose_server_and_client_exchange_their_messages() {
    use roce_tools::ucmatose;
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let (a, b) = (dev_a.open().unwrap(), dev_b.open().unwrap());
    let limits = Limits {
        step: Duration::from_secs(10),
        connect_retry: Duration::from_secs(10),
    };
    let opts = |addr| ucmatose::Options {
        count: 20,
        size: 1000,
        limits,
        ..ucmatose::Options::new(addr)
    };
    let (server, client) = std::thread::scope(|s| {
        let server = s.spawn(|| {
            let mut out = Vec::new();
            let done = ucmatose::server(&a, &opts(rping::ANY), &mut out);
            (done, String::from_utf8(out).unwrap())
        });
        let client = s.spawn(|| {
            let mut out = Vec::new();
            let done = ucmatose::client(&b, &opts(ip(1)), &mut out);
            (done, String::from_utf8(out).unwrap())
        });
        (server.join().unwrap(), client.join().unwrap())
    });
    server.0.expect("server");
    client.0.expect("client");
    for out in [&server.1, &client.1] {
        assert!(
            out.contains("\nverified: 20 messages of 1000 bytes each way"),
            "{out}"
        );
    }
    assert!(server.1.contains("\ndisconnected\n"));
}

//! The pingpongs against themselves, between two emulated NICs on an in-process cable: both
//! roles, every transport, the exchange and the data checks.

use std::time::Duration;

use roce_nic::link::mem;
use roce_nic::testbed::{devices, ip};
use roce_nic::verbs::Mtu;
use roce_tools::pingpong::{self, Options, Transport};
use roce_tools::{Limits, Role, ToolError};

fn limits() -> Limits {
    Limits {
        step: Duration::from_secs(10),
        connect_retry: Duration::from_secs(10),
    }
}

/// Runs a server on 10.0.0.1 and a client on 10.0.0.2 with the same options; returns both
/// outputs.
fn both(opts: Options) -> (Result<String, ToolError>, Result<String, ToolError>) {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let (a, b) = (dev_a.open().unwrap(), dev_b.open().unwrap());
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let mut out = Vec::new();
            pingpong::run(&a, &opts, Role::Server, &mut out)
                .map(|_| String::from_utf8(out).unwrap())
        });
        let client = s.spawn(|| {
            let mut out = Vec::new();
            pingpong::run(&b, &opts, Role::Client(ip(1)), &mut out)
                .map(|_| String::from_utf8(out).unwrap())
        });
        (server.join().unwrap(), client.join().unwrap())
    })
}

fn opts(transport: Transport, size: u32, iters: u32) -> Options {
    Options {
        size,
        iters,
        limits: limits(),
        ..Options::new(transport)
    }
}

fn assert_ok((server, client): (Result<String, ToolError>, Result<String, ToolError>), iters: u32) {
    let server = server.expect("server");
    let client = client.expect("client");
    for out in [&server, &client] {
        assert!(out.contains(&format!("{iters} iters in ")), "{out}");
        assert!(
            out.contains(&format!("verified: {iters} messages received")),
            "{out}"
        );
    }
}

#[test]
fn rc_pingpong_both_ways_with_multi_packet_messages() {
    assert_ok(both(opts(Transport::Rc, 65536, 20)), 20);
    assert_ok(
        both(Options {
            check: true,
            mtu: Mtu::M4096,
            ..opts(Transport::Rc, 10000, 5)
        }),
        5,
    );
}

#[test]
fn uc_ud_and_srq_pingpong() {
    assert_ok(both(opts(Transport::Uc, 4096, 20)), 20);
    assert_ok(both(opts(Transport::Ud, 1024, 20)), 20);
    let (server, client) = both(Options {
        num_qp: 4,
        ..opts(Transport::Srq, 512, 40)
    });
    let (server, client) = (server.expect("server"), client.expect("client"));
    assert_eq!(client.matches("local address").count(), 4, "{client}");
    assert_eq!(client.matches("remote address").count(), 4, "{client}");
    // Each side received and checked every one of the 40 messages, over its 4 QPs. As in
    // ibv_srq_pingpong, a side counts its SENDs when they complete, so QPs that become free in
    // the same batch of completions may each post one more: up to 3 beyond the 40.
    for out in [&server, &client] {
        assert!(out.contains("40 iters in "), "{out}");
        let line = out
            .lines()
            .find(|l| l.starts_with("verified: "))
            .unwrap_or_else(|| panic!("no verified line: {out}"));
        let received: u32 = line["verified: ".len()..]
            .split(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{line}"));
        assert!((40..=43).contains(&received), "{line}");
        assert_eq!(
            line,
            format!(
                "verified: {received} messages received, each 512 bytes as ibv_srq_pingpong \
                 sends them"
            )
        );
    }
}

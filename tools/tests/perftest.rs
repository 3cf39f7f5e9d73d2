//! perftest against itself, between two emulated NICs on an in-process cable: every test, both
//! roles, messages of one and of many packets, and the checks of each side.

use std::time::Duration;

use roce_nic::link::mem;
use roce_nic::testbed::{devices, ip};
use roce_nic::verbs::Mtu;
use roce_tools::perftest::{self, AtomicOp, Measured, Options, Outcome, Test};
use roce_tools::{Limits, Role, ToolError};

fn limits() -> Limits {
    Limits {
        step: Duration::from_secs(10),
        connect_retry: Duration::from_secs(10),
    }
}

/// A server on 10.0.0.1 and a client on 10.0.0.2 with the same options.
fn both(opts: Options) -> (Outcome, String, Outcome, String) {
    let (la, lb) = mem::pair();
    let (dev_a, dev_b) = devices(la, lb).unwrap();
    let (a, b) = (dev_a.open().unwrap(), dev_b.open().unwrap());
    let run = |ctx, role| -> Result<(Outcome, String), ToolError> {
        let mut out = Vec::new();
        let outcome = perftest::run(ctx, &opts, role, &mut out)?;
        Ok((outcome, String::from_utf8(out).unwrap()))
    };
    let (server, client) = std::thread::scope(|s| {
        let server = s.spawn(|| run(&a, Role::Server));
        let client = s.spawn(|| run(&b, Role::Client(ip(1))));
        (server.join().unwrap(), client.join().unwrap())
    });
    let ((server, server_out), (client, client_out)) = match (server, client) {
        (Ok(s), Ok(c)) => (s, c),
        (s, c) => panic!("server: {:?}\nclient: {:?}", s.err(), c.err()),
    };
    (server, server_out, client, client_out)
}

fn opts(test: Test, size: u64, iters: u64) -> Options {
    Options {
        size,
        iters,
        limits: limits(),
        ..Options::new(test)
    }
}

#[test]
fn bandwidth_tests_both_ways() {
    for (test, size) in [
        (Test::WriteBw, 65536),
        (Test::WriteBw, 100),
        (Test::ReadBw, 10000),
        (Test::ReadBw, 64),
        (Test::SendBw, 5000),
        (Test::SendBw, 2),
    ] {
        let (server, server_out, client, client_out) = both(opts(test, size, 300));
        let Measured::Bw(report) = client.result else {
            panic!("{test:?}: {client_out}")
        };
        assert_eq!((report.size, report.iters), (size, 300), "{client_out}");
        assert!(
            report.average > 0.0 && report.peak >= report.average * 0.999,
            "{report:?}"
        );
        // The server of a one-sided test prints the client's report as its own.
        if test != Test::SendBw {
            assert_eq!(server.result, Measured::Bw(report), "{server_out}");
        }
        for out in [&server_out, &client_out] {
            assert!(
                out.contains(" #bytes     #iterations    BW peak[MB/sec]"),
                "{out}"
            );
        }
        // What each side checked, exactly: our tools face each other, so the server of a WRITE
        // test finds precisely the client's bytes, not just bytes other than its fill.
        let (server_checked, client_checked) = match test {
            Test::WriteBw => (
                "writes hold exactly the bytes our client sends from the same places, and the NIC \
                 wrote "
                    .to_owned(),
                format!("300 RDMA WRITEs of {size} bytes completed"),
            ),
            Test::ReadBw => (
                "our memory is unchanged and the NIC read ".to_owned(),
                format!(
                    "300 RDMA READs of {size} bytes; every READ of a place brought the same bytes"
                ),
            ),
            _ => (
                format!(
                    "300 messages of {size} bytes, each equal to the one sent from the same place \
                     of the sender's buffer"
                ),
                format!("300 SENDs of {size} bytes completed"),
            ),
        };
        for (outcome, out, checked) in [
            (&server, &server_out, server_checked),
            (&client, &client_out, client_checked),
        ] {
            assert!(
                outcome.verified.contains(&checked),
                "{test:?} {size}: {:?} does not say {checked:?}",
                outcome.verified
            );
            assert!(
                out.contains(&format!("verified: {}\n", outcome.verified)),
                "{out}"
            );
        }
        println!(
            "{test:?} {size}:\n  server: {}\n  client: {}",
            server.verified, client.verified
        );
    }
}

#[test]
fn report_gbits_prints_and_sends_gigabits() {
    let size = 4096;
    let (server, server_out, client, client_out) = both(Options {
        report_gbits: true,
        ..opts(Test::WriteBw, size, 200)
    });
    let Measured::Bw(report) = client.result else {
        panic!("{client_out}")
    };
    // msg_rate is in millions of messages per second: bits per second over 10^9 follow.
    let gbits = report.msg_rate * 1e6 * (size * 8) as f64 / 1e9;
    assert!(
        (report.average - gbits).abs() < 1e-9 * gbits.max(1.0),
        "{report:?}"
    );
    // The server prints what the client sent it.
    assert_eq!(server.result, Measured::Bw(report), "{server_out}");
    for out in [&server_out, &client_out] {
        assert!(
            out.contains("BW peak[Gb/sec]    BW average[Gb/sec]"),
            "{out}"
        );
    }
}

#[test]
fn all_sizes_sweeps_two_bytes_to_eight_mebibytes() {
    let expected: Vec<u64> = (1..24).map(|i| 1 << i).collect();
    for test in [
        Test::WriteBw,
        Test::ReadBw,
        Test::SendBw,
        Test::WriteLat,
        Test::ReadLat,
        Test::SendLat,
    ] {
        let (server, server_out, client, client_out) = both(Options {
            all_sizes: true,
            mtu: Some(Mtu::M1024),
            ..opts(test, 65536, 5)
        });
        let Measured::Sweep(sizes) = &client.result else {
            panic!("{test:?}: {client_out}")
        };
        let measured: Vec<(u64, u64)> = sizes
            .iter()
            .map(|m| match m {
                Measured::Bw(r) => (r.size, r.iters),
                Measured::Lat(l) => (l.size, l.iters),
                other => panic!("{test:?}: {other:?}"),
            })
            .collect();
        assert_eq!(
            measured,
            expected.iter().map(|s| (*s, 5)).collect::<Vec<_>>(),
            "{test:?}: {client_out}"
        );
        // One line per size on the client.
        let lines = client_out
            .lines()
            .filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .count();
        assert_eq!(lines, 23, "{test:?}: {client_out}");
        assert!(
            client.verified.starts_with("23 sizes"),
            "{}",
            client.verified
        );
        match test {
            // The server of a one-sided bandwidth test prints the last size's report.
            Test::WriteBw | Test::ReadBw => {
                assert_eq!(Some(&server.result), sizes.last(), "{server_out}")
            }
            Test::ReadLat => {
                assert_eq!(server.result, Measured::Sweep(vec![Measured::Nothing; 23]))
            }
            // Both sides of the SEND and write-latency tests run every size.
            _ => {
                let Measured::Sweep(theirs) = &server.result else {
                    panic!("{test:?}: {server_out}")
                };
                assert_eq!(theirs.len(), 23, "{server_out}");
                assert!(
                    server.verified.starts_with("23 sizes"),
                    "{}",
                    server.verified
                );
            }
        }
        println!(
            "{test:?} -a:\n  server: {}\n  client: {}",
            server.verified, client.verified
        );
    }
}

#[test]
fn all_sizes_is_refused_for_atomics_as_perftest_refuses_it() {
    let (la, _lb) = mem::pair();
    let (dev, _) = devices(la, _lb).unwrap();
    let ctx = dev.open().unwrap();
    let opts = Options {
        all_sizes: true,
        ..opts(Test::AtomicBw, 8, 5)
    };
    match perftest::run(&ctx, &opts, Role::Server, &mut Vec::new()) {
        Err(ToolError::Usage(m)) => assert!(m.contains("-a"), "{m}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn atomic_bandwidth_with_both_operations() {
    for atomic in [AtomicOp::FetchAndAdd, AtomicOp::CmpAndSwap] {
        let (server, _, client, client_out) = both(Options {
            atomic,
            ..opts(Test::AtomicBw, 8, 200)
        });
        assert!(client_out.contains(atomic.name()), "{client_out}");
        assert!(client.verified.contains("200 "), "{}", client.verified);
        println!(
            "{atomic:?}:\n  server: {}\n  client: {}",
            server.verified, client.verified
        );
    }
}

#[test]
fn latency_tests_both_ways() {
    for (test, size) in [
        (Test::WriteLat, 2),
        (Test::WriteLat, 9000),
        (Test::SendLat, 2),
        (Test::SendLat, 9000),
        (Test::ReadLat, 2),
        (Test::ReadLat, 9000),
        (Test::AtomicLat, 8),
    ] {
        let (server, server_out, client, client_out) = both(Options {
            mtu: Some(Mtu::M1024),
            ..opts(test, size, 50)
        });
        let Measured::Lat(stats) = &client.result else {
            panic!("{test:?}: {client_out}")
        };
        assert_eq!((stats.size, stats.iters), (size, 50));
        assert!(
            stats.min <= stats.typical && stats.typical <= stats.max,
            "{stats:?}"
        );
        if matches!(test, Test::ReadLat | Test::AtomicLat) {
            assert_eq!(server.result, Measured::Nothing, "{server_out}");
        }
        println!(
            "{test:?} {size}:\n  server: {}\n  client: {}",
            server.verified, client.verified
        );
    }
}

/// `-R`: every test with its QPs connected through the RDMA CM and the exchange over a CM
/// connection of its own (binary records, no TCP), both sides checking what they check over TCP.
#[test]
fn every_test_through_the_rdma_cm() {
    for (test, size) in [
        (Test::WriteBw, 65536),
        (Test::ReadBw, 4096),
        (Test::SendBw, 1000),
        (Test::AtomicBw, 8),
        (Test::WriteLat, 2),
        (Test::SendLat, 2),
        (Test::ReadLat, 64),
        (Test::AtomicLat, 8),
    ] {
        let (server, server_out, client, client_out) = both(Options {
            rdma_cm: true,
            ..opts(test, size, 50)
        });
        for out in [&server_out, &client_out] {
            assert!(out.contains(" Data ex. method : rdma_cm\n"), "{out}");
        }
        match (&client.result, test.is_bw()) {
            (Measured::Bw(r), true) => assert_eq!((r.size, r.iters), (size, 50)),
            (Measured::Lat(l), false) => assert_eq!((l.size, l.iters), (size, 50)),
            (other, _) => panic!("{test:?}: {other:?}\n{client_out}"),
        }
        for outcome in [&server, &client] {
            assert!(
                outcome.verified.contains("50 ") || outcome.verified.contains("NIC"),
                "{test:?}: {}",
                outcome.verified
            );
        }
        println!(
            "{test:?} -R:\n  server: {}\n  client: {}",
            server.verified, client.verified
        );
    }
    // -a over the RDMA CM: every size on one connection.
    for test in [Test::WriteBw, Test::SendLat] {
        let (_, _, client, client_out) = both(Options {
            rdma_cm: true,
            all_sizes: true,
            mtu: Some(Mtu::M1024),
            ..opts(test, 65536, 5)
        });
        let Measured::Sweep(sizes) = &client.result else {
            panic!("{test:?}: {client_out}")
        };
        assert_eq!(sizes.len(), 23, "{test:?}: {client_out}");
    }
}

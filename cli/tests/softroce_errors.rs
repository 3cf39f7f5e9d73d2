//! Interop with Linux Soft-RoCE (rdma_rxe) in a QEMU guest where things go wrong, and over
//! IPv6 GIDs: each test is one guest boot (see cli/tests/softroce.rs for the harness, and
//! docs/rxe-differences.md for where rxe and the IBTA spec differ).
//!
//! `cargo test -p roce-cli --test softroce_errors -- --nocapture` shows each group's table.
//! Needs what cli/tests/softroce.rs needs, and gcc (the guest's agent is compiled when the
//! guest image is built); skips loudly without them, except under ROCE_CI=1.

#[allow(dead_code)]
mod interop;
mod support;

use interop::guest::{GUEST_MAC, NIC_MAC};
use interop::scenario::{Group, Kind, Scenario};
use roce_wire::{Frame, NetworkRepr};

/// Each error both ways — bad rkey, out of bounds, misaligned atomic, a READ over the 2^31
/// bytes a message may have, RNR until the retries run out, a silent responder until the
/// transport retries run out, a wrong Q_Key on UD, SEND with invalidate of an rkey the
/// responder cannot invalidate — with the responder's answer checked on the
/// wire and the requester's completion status (`interop::errors` has the cases; where rxe
/// cannot make a case happen, its function says why).
#[test]
fn error_paths_both_ways() {
    interop::errors::run();
}

/// rdma-core's pingpongs and perftest against ours with GID index 0 on both sides: the
/// link-local GID of the MAC (fe80::), so every RoCE frame goes over IPv6, both ways, while the
/// tools' TCP exchange stays on IPv4.
#[test]
fn transfers_over_ipv6_gids() {
    let list: Vec<Scenario> = [
        (Kind::Pingpong("rc"), "-n 100 -s 4096 -g 0"),
        (Kind::Pingpong("ud"), "-n 100 -s 1024 -g 0"),
        (Kind::Perftest("write_bw"), "-s 65536 -n 100 -x 0"),
        (Kind::Perftest("read_bw"), "-s 65536 -n 100 -x 0"),
    ]
    .iter()
    .flat_map(|(kind, args)| Scenario::both_ways(*kind, args))
    .collect();
    let captures = interop::run(&Group {
        name: "ipv6",
        link_mtu: 1500,
        faults: None,
        capture_each: false,
        via_switch: false,
        stop_guest: None,
        scenarios: list,
    });
    for capture in &captures {
        let (mut v6, mut v4) = ([0u64; 2], [0u64; 2]);
        let file = std::fs::File::open(capture).unwrap();
        let mut reader = pcap_file::pcap::PcapReader::new(file).unwrap();
        while let Some(packet) = reader.next_packet() {
            let data = packet.unwrap().data;
            let Ok(frame) = Frame::parse(&data) else {
                continue;
            };
            let from = if data[6..12] == GUEST_MAC[..] {
                1
            } else {
                assert_eq!(data[6..12], NIC_MAC[..]);
                0
            };
            match frame.repr.network {
                NetworkRepr::Ipv6 { src, dst, .. } => {
                    assert!(
                        src.is_unicast_link_local() && dst.is_unicast_link_local(),
                        "{src} -> {dst}"
                    );
                    v6[from] += 1;
                }
                _ => v4[from] += 1,
            }
        }
        eprintln!(
            "RoCE over IPv6: {} frames from us, {} from rxe",
            v6[0], v6[1]
        );
        assert!(
            v6[0] > 0 && v6[1] > 0,
            "{}: no IPv6 RoCE both ways",
            capture.display()
        );
        assert_eq!(v4, [0, 0], "{}: RoCE over IPv4", capture.display());
    }
}

//! Interop with the real thing: Linux Soft-RoCE (rdma_rxe) in a QEMU guest, cabled to a
//! `roce nic` over UDP on loopback, running rdma-core's pingpongs and perftest against
//! `roce pingpong` and `roce perftest`, in both roles. Each group is one guest boot.
//!
//! A scenario passes when both programs succeed — the real one printing its own success
//! lines, ours its `verified:` line after checking the data — and a group when, in addition,
//! rxe reports the path MTU expected, our NIC dropped nothing from rxe for a bad ICRC or a
//! malformed header (where one `roce nic` serves the group; its counters say so), every
//! capture passes `roce decode --strict` and every frame rxe sent has a good ICRC, and
//! (without faults) rxe counted every RoCE frame we sent as received — so none failed its ICRC
//! check — unless the host dropped it for lack of socket buffer.
//!
//! Needs qemu-system-x86, cpio, kmod and xz-utils and Debian's package archive (the guest is
//! built once into target/softroce-vm); skips loudly without them, except under ROCE_CI=1.
//! `cargo test -p roce-cli --test softroce -- --nocapture` shows each group's table.

mod interop;
mod support;

use std::collections::BTreeSet;

use interop::guest::{GUEST_MAC, NIC_MAC};
use interop::scenario::{Group, Kind, Scenario, StopGuest};
use Kind::{Perftest, Pingpong, Rping, Ucmatose, Udaddy};

fn scenarios(list: &[(Kind, &str)]) -> Vec<Scenario> {
    list.iter()
        .flat_map(|(kind, args)| Scenario::both_ways(*kind, args))
        .collect()
}

#[test]
fn pingpongs_at_path_mtu_1024() {
    interop::run(&Group {
        name: "pingpong-1024",
        link_mtu: 1500,
        faults: None,
        capture_each: false,
        via_switch: false,
        stop_guest: None,
        scenarios: scenarios(&[
            (Pingpong("rc"), "-n 100 -s 1"),
            (Pingpong("rc"), "-n 100 -s 64"),
            (Pingpong("rc"), "-n 100 -s 1024"),
            (Pingpong("rc"), "-n 100 -s 4096"),
            (Pingpong("rc"), "-n 100 -s 65536 -c"),
            (Pingpong("uc"), "-n 100 -s 4096"),
            (Pingpong("ud"), "-n 100 -s 1024"),
            (Pingpong("srq"), "-n 200 -s 4096 -q 16"),
        ])
        .into_iter()
        // Debian's own programs on our NIC too, under `roce run` (our libibverbs.so.1).
        .chain(
            [
                (Pingpong("rc"), "-n 100 -s 4096 -c"),
                (Pingpong("rc"), "-n 100 -s 1024 -N"),
                (Pingpong("uc"), "-n 100 -s 4096 -c"),
                (Pingpong("ud"), "-n 100 -s 1024 -c"),
                (Pingpong("srq"), "-n 200 -s 4096 -q 16"),
            ]
            .into_iter()
            .flat_map(|(kind, args)| Scenario::unmodified_both_ways(kind, args)),
        )
        .collect(),
    });
}

#[test]
fn perftest_at_path_mtu_1024() {
    let mut list = scenarios(&[
        (Perftest("write_bw"), "-s 65536 -n 200"),
        (Perftest("write_bw"), "-s 100 -n 500"),
        (Perftest("read_bw"), "-s 65536 -n 200"),
        (Perftest("read_bw"), "-s 8 -n 500"),
        // Sweeps to 8 MiB: `-u 18` (1 s) on both sides, as for the READ sweeps below. A guest
        // under TCG that loses its core for longer than perftest's timeout 14 allows seven
        // times (470 ms; seen on a loaded machine, in the middle of an 8 MiB WRITE) would
        // otherwise end the run with "transport retry counter exceeded".
        (Perftest("write_bw"), "-a -n 5 -u 18"),
        (Perftest("send_bw"), "-a -n 5 -u 18"),
        (Perftest("write_lat"), "-a -n 5 -u 18"),
        (Perftest("send_lat"), "-a -n 5 -u 18"),
        (Perftest("send_bw"), "-s 65536 -n 200"),
        (Perftest("send_bw"), "-s 1000 -n 500"),
        (Perftest("atomic_bw"), "-n 500 -A FETCH_AND_ADD"),
        (Perftest("atomic_bw"), "-n 500 -A CMP_AND_SWAP"),
        (Perftest("write_lat"), "-s 2 -n 200"),
        (Perftest("write_lat"), "-s 8192 -n 100"),
        (Perftest("read_lat"), "-s 2 -n 200"),
        (Perftest("read_lat"), "-s 8192 -n 100"),
        (Perftest("send_lat"), "-s 2 -n 200"),
        (Perftest("send_lat"), "-s 8192 -n 100"),
        (Perftest("atomic_lat"), "-n 200 -A FETCH_AND_ADD"),
        (Perftest("atomic_lat"), "-n 200 -A CMP_AND_SWAP"),
    ]);
    // Debian's own perftest on our NIC too, under `roce run` (our libibverbs.so.1).
    for (test, args) in [
        ("write_bw", "-s 65536 -n 200"),
        ("write_bw", "-s 100 -n 500"),
        ("read_bw", "-s 65536 -n 200"),
        ("send_bw", "-s 1000 -n 500"),
        ("atomic_bw", "-n 500 -A FETCH_AND_ADD"),
        ("write_lat", "-s 2 -n 200"),
        ("read_lat", "-s 8192 -n 100"),
        ("send_lat", "-s 2 -n 200"),
    ] {
        list.extend(Scenario::unmodified_both_ways(Perftest(test), args));
    }
    // READ sweeps: the guest's of us, and ours of the guest, where under TCG its 4–8 MiB answers
    // pause longer than timeout 14 (67 ms) allows, so those runs give it 1 s.
    for test in ["read_bw", "read_lat"] {
        list.push(Scenario::new(Perftest(test), "-a -n 5", false));
        list.push(Scenario::new(Perftest(test), "-a -n 5 -u 18", true));
    }
    interop::run(&Group {
        name: "perftest-1024",
        link_mtu: 1500,
        faults: None,
        capture_each: false,
        via_switch: false,
        stop_guest: None,
        scenarios: list,
    });
}

#[test]
fn path_mtu_4096() {
    interop::run(&Group {
        name: "mtu-4096",
        link_mtu: 4200,
        faults: None,
        capture_each: false,
        via_switch: false,
        stop_guest: None,
        scenarios: scenarios(&[
            (Pingpong("rc"), "-n 100 -s 16384 -m 4096"),
            (Pingpong("ud"), "-n 100 -s 4096"),
            (Pingpong("srq"), "-n 100 -s 10000 -m 4096 -q 4"),
            (Perftest("write_bw"), "-s 65536 -n 200"),
            (Perftest("read_bw"), "-s 65536 -n 200"),
            (Perftest("send_bw"), "-s 65536 -n 200"),
            (Perftest("atomic_bw"), "-n 200"),
            (Perftest("write_lat"), "-s 16384 -n 100"),
            (Perftest("read_lat"), "-s 16384 -n 100"),
            (Perftest("send_lat"), "-s 16384 -n 100"),
        ]),
    });
}

/// Our link drops and reorders a few percent of the frames both ways: rxe recovers from our
/// losses and we from its, through each other's NAKs, retransmissions and duplicate answers
/// (atomics included: each must still be executed exactly once).
///
/// Where a tool ends without a last word over TCP (the pingpongs, ib_write_lat), the side that
/// ACKs the last message must stay to answer its retransmission, should that ACK be lost:
/// `roce` does (it lingers), but the real tools do not, and rxe then retries for ever (or we,
/// 7 times). So those run only in the role where `roce` sends that last ACK: as pingpong
/// client, as ib_write_lat server. ibv_srq_pingpong, whose last messages go either way, is left
/// out.
#[test]
fn transfers_survive_loss_and_reordering() {
    let mut list = scenarios(&[
        (Perftest("write_bw"), "-s 65536 -n 50"),
        (Perftest("read_bw"), "-s 65536 -n 50"),
        (Perftest("send_bw"), "-s 65536 -n 50"),
        (Perftest("atomic_bw"), "-n 300"),
        (Perftest("read_lat"), "-s 4096 -n 100"),
        (Perftest("send_lat"), "-s 4096 -n 100"),
        (Perftest("atomic_lat"), "-n 100"),
    ]);
    list.push(Scenario::new(Pingpong("rc"), "-n 100 -s 4096", true));
    list.push(Scenario::new(
        Perftest("write_lat"),
        "-s 4096 -n 100",
        false,
    ));
    interop::run(&Group {
        name: "faults",
        link_mtu: 1500,
        faults: Some("drop=0.02,reorder=0.02,seed=4791"),
        capture_each: false,
        via_switch: false,
        stop_guest: None,
        scenarios: list,
    });
}

/// The same tools with a `roce switch` between the guest and our NIC: the switch learns both
/// MACs, forwards ARP and RoCE alike, and both sides see exactly what they saw on a direct
/// cable (one guest boot).
#[test]
fn through_a_roce_switch() {
    let mut list = scenarios(&[
        (Pingpong("rc"), "-n 100 -s 4096"),
        (Pingpong("ud"), "-n 100 -s 1024"),
        (Perftest("write_bw"), "-s 65536 -n 200"),
        (Perftest("read_bw"), "-s 65536 -n 200"),
        (Perftest("send_bw"), "-s 65536 -n 200"),
        (Perftest("atomic_bw"), "-n 300"),
    ]);
    list.push(Scenario::new(Perftest("read_lat"), "-s 8192 -n 100", true));
    interop::run(&Group {
        name: "switch",
        link_mtu: 1500,
        faults: None,
        capture_each: false,
        via_switch: true,
        stop_guest: None,
        scenarios: list,
    });
}

/// Short runs, each with a NIC of its own (`roce ... --link`, the in-process mode) recording
/// its own capture, chosen so that rxe sends every opcode these tools use. With
/// `ROCE_REGENERATE_CAPTURES=1` they replace `captures/softroce/`, where the decoder's
/// conformance test reads them.
#[test]
fn captures_of_every_opcode_rxe_sends() {
    let list = vec![
        Scenario::new(Pingpong("rc"), "-n 5 -s 4096", true),
        Scenario::new(Pingpong("uc"), "-n 5 -s 4096", false),
        Scenario::new(Pingpong("ud"), "-n 5 -s 1024", true),
        Scenario::new(Pingpong("srq"), "-n 8 -s 1024 -q 2", false),
        Scenario::new(Perftest("write_bw"), "-s 4096 -n 5", false),
        Scenario::new(Perftest("write_lat"), "-s 2 -n 5", true),
        Scenario::new(Perftest("read_bw"), "-s 4096 -n 5", false),
        Scenario::new(Perftest("read_bw"), "-s 4096 -n 5", true),
        Scenario::new(Perftest("read_lat"), "-s 2 -n 5", true),
        Scenario::new(Perftest("send_bw"), "-s 4096 -n 5", false),
        Scenario::new(Perftest("send_lat"), "-s 2 -n 5", false),
        Scenario::new(Perftest("atomic_bw"), "-n 5 -A FETCH_AND_ADD", false),
        Scenario::new(Perftest("atomic_bw"), "-n 5 -A CMP_AND_SWAP", false),
        Scenario::new(Perftest("atomic_bw"), "-n 5 -A FETCH_AND_ADD", true),
    ];
    let captures = interop::run(&Group {
        name: "captures",
        link_mtu: 1500,
        faults: None,
        capture_each: true,
        via_switch: false,
        stop_guest: None,
        scenarios: list,
    });
    if captures.is_empty() {
        return;
    }
    let mut from_rxe = BTreeSet::new();
    for capture in &captures {
        let wire = interop::wire::inspect(capture, NIC_MAC, GUEST_MAC);
        assert!(
            wire.frames < 600,
            "{} has {} frames",
            capture.display(),
            wire.frames
        );
        from_rxe.extend(wire.theirs.keys().copied());
    }
    // RC SEND first/middle/last/only, WRITE first/middle/last/only, READ request and
    // responses, ACK, atomic ACK, compare-and-swap, fetch-and-add; UC SEND first/middle/last;
    // UD SEND only.
    let every: BTreeSet<u8> = [
        0x00, 0x01, 0x02, 0x04, 0x06, 0x07, 0x08, 0x0a, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x12,
        0x13, 0x14, 0x20, 0x21, 0x22, 0x64,
    ]
    .into();
    let missing: Vec<&u8> = every.difference(&from_rxe).collect();
    assert!(missing.is_empty(), "rxe sent no {missing:02x?}");
    if interop::captures::regenerate() {
        interop::captures::commit(&captures);
    }
}

/// The committed captures (no guest needed): every frame rxe sent parses with a good ICRC,
/// and each capture has its field dump beside it, one row per RoCE frame.
#[test]
fn committed_captures_hold_real_rxe_frames_and_their_field_dumps() {
    let dir = interop::captures::committed_dir();
    let mut pcaps: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "pcap"))
        .collect();
    pcaps.sort();
    assert_eq!(pcaps.len(), 14, "{pcaps:?}");
    for pcap in &pcaps {
        let wire = interop::wire::inspect(pcap, NIC_MAC, GUEST_MAC);
        assert!(wire.bad.is_empty(), "{}: {:?}", pcap.display(), wire.bad);
        assert!(
            wire.sent_by_guest() > 0,
            "{} holds no rxe frame",
            pcap.display()
        );
        let dump = std::fs::read_to_string(pcap.with_extension("fields.txt"))
            .unwrap_or_else(|e| panic!("the field dump of {}: {e}", pcap.display()));
        assert!(dump.starts_with("frame.number\t"), "{}", pcap.display());
        assert_eq!(
            dump.lines().count() as u64 - 1,
            wire.sent_by_us() + wire.sent_by_guest(),
            "{}: one row per RoCE frame",
            pcap.display()
        );
    }
}

/// rdma-core's rping both ways, connected by the guest kernel's RDMA CM and our NIC's CM
/// agent: the handshake (REQ, REP, RTU), 300 pings each way with every ping's SEND, RDMA READ,
/// SEND, RDMA WRITE and SEND, verified (the client's `-V`; our server checks every ping it
/// reads), and the teardown (DREQ, DREP); then ucmatose both ways (100 messages of 1000 bytes
/// each way, the server disconnecting); then `ib_write_bw -R` and `ib_send_lat -R` both ways
/// against `roce perftest -R` (two CM connections each: perftest's exchange and the test's QP,
/// no TCP); then udaddy both ways (the server's UD QP found with SIDR_REQ and SIDR_REP, 50
/// datagrams of 1000 bytes each way). With `ROCE_REGENERATE_CAPTURES=1` the CM MADs of the
/// run replace `captures/softroce/rdma-cm-tools/rdma-cm-tools-rxe.pcap`.
#[test]
fn rping_through_the_rdma_cm() {
    let captures = interop::run(&Group {
        name: "rping",
        link_mtu: 1500,
        faults: None,
        capture_each: false,
        via_switch: false,
        stop_guest: None,
        scenarios: scenarios(&[
            (Rping, "-C 300 -V"),
            (Ucmatose, "-C 100 -S 1000"),
            (Perftest("write_bw"), "-R -s 65536 -n 200"),
            (Perftest("send_lat"), "-R -s 2 -n 200"),
            (Udaddy, "-C 50 -S 1000"),
        ])
        .into_iter()
        // Debian's own rping, ucmatose and ib_write_bw -R on our NIC too, under `roce run`
        // (our librdmacm calls on the NIC's connection manager).
        .chain(Scenario::unmodified_both_ways(Rping, "-C 100 -V"))
        .chain(Scenario::unmodified_both_ways(Ucmatose, "-C 50 -S 1000"))
        .chain(Scenario::unmodified_both_ways(
            Perftest("write_bw"),
            "-R -s 65536 -n 200",
        ))
        .collect(),
    });
    if let (Some(nic), true) = (captures.first(), interop::captures::regenerate()) {
        interop::pair::commit_handshakes(nic, RPING_CAPTURE);
    }
}

/// Where the RDMA CM tools' handshakes (rping, ucmatose, perftest -R, udaddy) are committed.
const RPING_CAPTURE: &str = "rdma-cm-tools/rdma-cm-tools-rxe.pcap";

/// The committed handshakes of the RDMA CM tools (no guest needed): connections both ways, ours
/// to the guest's servers and the guest's clients to ours, each REQ, REP, RTU, DREQ and DREP,
/// every REQ with the RDMA CM header of its sender and receiver; perftest -R's two connections
/// to one port each way; and udaddy's SIDR_REQ each way, answered by a SIDR_REP that names a QP
/// and the UDP port space's Q_Key. (`--test tshark` compares every field with tshark's.)
#[test]
fn the_committed_rdma_cm_tools_capture_holds_handshakes_both_ways() {
    use roce_wire::cm::Message;
    use roce_wire::{cma, Ipv4Address};
    let pcap = interop::captures::committed_dir().join(RPING_CAPTURE);
    let mads = interop::pair::cm_mads(&pcap);
    let (us, guest) = (
        Ipv4Address::new(10, 77, 0, 1),
        Ipv4Address::new(10, 77, 0, 2),
    );
    for (from, to) in [(us, guest), (guest, us)] {
        let sent = |by: Ipv4Address, name: &str| {
            mads.iter()
                .filter(|m| m.from == by && m.cm.message.attribute_id().name() == name)
                .count()
        };
        let accepted: Vec<_> = mads
            .iter()
            .filter_map(|m| match m.cm.message {
                Message::Req(r) if m.from == from => Some(r),
                _ => None,
            })
            .collect();
        assert!(!accepted.is_empty(), "no REQ from {from}");
        for req in &accepted {
            let header = cma::Repr::parse(&cma::Packet::new_unchecked(
                &req.private_data.as_bytes()[..cma::HEADER_LEN],
            ))
            .unwrap();
            assert_eq!((header.src, header.dst), (from.into(), to.into()));
        }
        // The passive side's REP and the active side's RTU: one connection each way.
        assert!(
            sent(to, "REP") >= 1 && sent(from, "RTU") >= 1,
            "{from}: {mads:?}"
        );
        // perftest -R: its exchange's connection and its test's, to one port, both accepted.
        let accepted_ids = |service: u64| {
            let ids: std::collections::BTreeSet<u32> = mads
                .iter()
                .filter_map(|m| match m.cm.message {
                    Message::Req(r) if m.from == from && r.service_id == service => {
                        Some(r.local_comm_id)
                    }
                    _ => None,
                })
                .filter(|id| {
                    mads.iter().any(|m| {
                        matches!(m.cm.message, Message::Rep(p) if m.from == to && p.remote_comm_id == *id)
                    })
                })
                .collect();
            ids.len()
        };
        assert!(
            accepted.iter().any(|r| accepted_ids(r.service_id) == 2),
            "{from}: no port with two connections"
        );
        // udaddy: SIDR_REQ to UDP port 7174 with the RDMA CM header, its SIDR_REP a QP and
        // the Q_Key.
        let sidr: Vec<_> = mads
            .iter()
            .filter_map(|m| match m.cm.message {
                Message::SidrReq(r) if m.from == from => Some(r),
                _ => None,
            })
            .collect();
        assert!(!sidr.is_empty(), "no SIDR_REQ from {from}");
        for request in &sidr {
            assert_eq!(request.service_id, cma::PortSpace::Udp.service_id(7174));
            let header = cma::Repr::parse(&cma::Packet::new_unchecked(
                &request.private_data.as_bytes()[..cma::HEADER_LEN],
            ))
            .unwrap();
            assert_eq!((header.src, header.dst), (from.into(), to.into()));
        }
        let resolved = mads.iter().any(|m| match m.cm.message {
            Message::SidrRep(p) => {
                m.from == to
                    && p.status.0 == 0
                    && p.q_key == cma::UDP_QKEY
                    && p.qpn != 0
                    && sidr.iter().any(|r| r.request_id == p.request_id)
            }
            _ => false,
        });
        assert!(
            resolved,
            "no SIDR_REP from {to} resolving {from}'s SIDR_REQ"
        );
    }
    for message in ["DREQ", "DREP"] {
        assert!(
            mads.iter()
                .filter(|m| m.cm.message.attribute_id().name() == message)
                .count()
                >= 2,
            "{message}"
        );
    }
}

/// Two guests, no NIC of ours: the RDMA CM's tools connect one rxe to the other through the
/// kernels' CMs, every message of a handshake on the wire — REJ for an unused port, MRA from a
/// server slow to accept, SIDR for a UD port — as `interop::pair::check` lists. With
/// `ROCE_REGENERATE_CAPTURES=1` the capture replaces `captures/softroce/two-guests/`.
#[test]
fn rdma_cm_handshakes_between_two_guests() {
    let Some(pcap) = interop::pair::record() else {
        return;
    };
    let count = interop::pair::check(&pcap);
    eprintln!("CM messages between two rxe guests: {count:?}");
    let strict = std::process::Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--strict"])
        .arg(&pcap)
        .output()
        .expect("running roce decode");
    assert!(strict.status.success(), "{strict:?}");
    if interop::captures::regenerate() {
        interop::pair::commit(&pcap);
    }
}

/// The committed capture of two guests' handshakes (no guest needed) holds what a new run
/// would, message by message, with its field dump beside it.
#[test]
fn the_committed_rdma_cm_capture_holds_every_handshake_message() {
    let pcap = interop::captures::committed_dir().join(interop::pair::COMMITTED);
    interop::pair::check(&pcap);
    let dump = std::fs::read_to_string(pcap.with_extension("fields.txt")).expect("its field dump");
    assert!(dump
        .lines()
        .next()
        .is_some_and(|h| h.ends_with("infiniband.cm.req.remoteqpneecn")));
}

/// P_Keys (issue 22), one guest boot. rxe's port is a full member of the default partition and
/// nothing else (its table holds 0xffff alone, recorded below), and rxe matches by the IBTA's
/// rule; our NIC runs as a limited member (`--pkey 0x7fff`). rxe's answers, case by case:
///
/// - 0x7fff (limited) on our requests and our ACKs, as our NIC sends them: taken — rxe executes
///   and ACKs every request and completes its own sends on our ACKs; and rxe's 0xffff is taken
///   by our limited port (nothing counted in our `rx_bad_pkey`).
/// - 0x1234 on our ACKs (a relay rewrites them): dropped — not counted in `rcvd_pkts`, and rxe
///   sends its request again and again, as if the ACK were lost.
/// - 0x1234 on our requests: dropped silently — no ACK, no NAK, nothing counted.
/// - 0x7fff at a limited member: rxe cannot be one (its table is fixed), so the case is ours:
///   rxe's frames rewritten to 0x7fff, requests and ACKs, reach our limited port, which refuses
///   them (`rx_bad_pkey`); rxe resends its unacknowledged pong until its tool is killed.
#[test]
fn p_keys_rxe_takes_and_refuses() {
    use interop::pkey::{self, Frames, Mode, Run};
    use std::net::SocketAddr;
    use std::time::{Duration, Instant};
    use support::{free_udp_port, Env, Nic};

    let _one = interop::ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    if !interop::guest::ready() {
        return;
    }
    let started = Instant::now();
    let dir = interop::output_dir("pkey");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let env = Env::new("pkey");
    let addr = || -> SocketAddr { format!("127.0.0.1:{}", free_udp_port()).parse().unwrap() };
    let (guest, ours) = (addr(), addr());
    let relay = pkey::Relay::start(guest, ours);
    let nic = Nic {
        name: env.name("n"),
        ip: format!("{}/24", interop::guest::NIC_IP),
        link: format!("cable:{ours},{}", relay.nic_side),
        mtu: 1500,
        neighbours: Vec::new(),
        pcap: Some(dir.join("nic.pcap")),
        netns: None,
        extra: ["--pkey", "0x7fff", "--rate", "200M"]
            .map(String::from)
            .to_vec(),
    };
    let nic_proc = env.nic(&nic);
    let runs = [
        Run {
            name: "0x7fff (ours, a limited member) on requests and ACKs",
            guest_serves: true,
            guest_limit: 60,
            our_limit: 60,
            rewrite: None,
        },
        Run {
            name: "0x1234 on our ACKs",
            guest_serves: false,
            guest_limit: 8,
            our_limit: 12,
            rewrite: Some((Frames::OurResponses, 0x1234)),
        },
        Run {
            name: "0x1234 on our requests",
            guest_serves: true,
            guest_limit: 8,
            our_limit: 15,
            rewrite: Some((Frames::OurRequests, 0x1234)),
        },
        Run {
            name: "0x7fff on rxe's requests and ACKs, at our limited port",
            guest_serves: true,
            guest_limit: 8,
            our_limit: 15,
            rewrite: Some((Frames::Rxes, 0x7fff)),
        },
    ];
    const FIRST_PORT: u16 = 19400;
    let script = dir.join("guest.sh");
    std::fs::write(&script, pkey::guest_script(&runs, FIRST_PORT)).unwrap();
    let limit = 120 + runs.iter().map(|r| r.guest_limit).sum::<u32>();
    let mut vm = pkey::start_guest(guest, relay.guest_side, &script, limit);

    // Our NIC's counters before the first run and after each.
    let refused = || {
        let info = env.run(&["host", "info", "--nic", &nic.name, "--counters"]);
        let value = |name: &str| -> u64 {
            info.stdout
                .lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {name} in {}", info.stdout))
        };
        (value("rx_bad_pkey"), value("rx_unknown_qp"))
    };
    let mut ours_refused = vec![refused()];
    let mut our_runs = Vec::new();
    for (n, run) in runs.iter().enumerate() {
        relay.set(Mode {
            scenario: n,
            rewrite: run.rewrite,
        });
        let mut args: Vec<String> = ["pingpong", "rc", "-p"].map(String::from).to_vec();
        args.push((FIRST_PORT + n as u16).to_string());
        args.extend(pkey::PINGPONG.split_whitespace().map(String::from));
        if run.guest_serves {
            args.push(interop::guest::GUEST_IP.into());
        }
        let step = run.our_limit.to_string();
        args.extend(["--nic".into(), nic.name.clone(), "--timeout".into(), step]);
        args.extend(["--connect-retry".into(), limit.to_string()]);
        let mut proc = env.spawn(&args, false);
        let status = proc.wait(Duration::from_secs(u64::from(limit) + 60));
        our_runs.push((status, proc.drain_stdout(), proc.stderr()));
        ours_refused.push(refused());
    }
    vm.wait(Duration::from_secs(u64::from(limit) + 30));
    let console_text = vm.drain_stdout();
    std::fs::write(dir.join("console.log"), &console_text).unwrap();
    let console = interop::guest::Console::new(&console_text);
    let (bad_pkey_at_end, unknown_qp_at_end) = refused();
    drop(nic_proc);
    let crossed = relay.finish();

    let rxe_table: Vec<&str> = console
        .lines
        .iter()
        .filter_map(|l| l.strip_prefix("RXE-PKEY "))
        .collect();
    assert_eq!(rxe_table, ["0 0xffff", "1 none"], "rxe's P_Key table");
    let rcvd = pkey::rcvd_pkts(&console);
    assert_eq!(rcvd.len(), runs.len() + 1, "{console_text}");
    let mut table = String::new();
    for (n, run) in runs.iter().enumerate() {
        let here: Vec<&pkey::Crossed> = crossed.iter().filter(|c| c.scenario == n).collect();
        let ours: Vec<&&pkey::Crossed> = here.iter().filter(|c| !c.from_guest).collect();
        let theirs: Vec<&&pkey::Crossed> = here.iter().filter(|c| c.from_guest).collect();
        let rewritten = here.iter().filter(|c| c.rewritten).count() as u64;
        let taken = rcvd[n + 1] - rcvd[n];
        let we_refused = ours_refused[n + 1].0 - ours_refused[n].0;
        let guest = console.scenario(n);
        let (status, stdout, stderr) = &our_runs[n];
        let what = format!(
            "{}:\nours: {status} {stdout}{stderr}\nguest: {:?} {}",
            run.name, guest.status, guest.output
        );
        // The first request rxe sent, and how often it sent it.
        let first = theirs.iter().find(|c| c.opcode < 0x10);
        let sent_again = first.map_or(0, |f| {
            theirs
                .iter()
                .filter(|c| c.opcode == f.opcode && c.psn == f.psn)
                .count()
        });
        let _ = std::fmt::Write::write_fmt(
            &mut table,
            format_args!(
                "  {:55} {rewritten:3} rewritten; ours {:3}, rxe took {taken:3}; rxe's {:3}, we refused {we_refused:3}; rxe's first request {sent_again}x\n",
                run.name,
                ours.len(),
                theirs.len()
            ),
        );
        match run.rewrite {
            None => {
                assert!(status.success() && stdout.contains("verified: "), "{what}");
                assert_eq!(guest.status, Some(0), "{what}");
                assert!(guest.output.contains("5 iters in"), "{what}");
                assert!(ours.iter().all(|c| c.p_key == 0x7fff), "{what}");
                assert!(theirs.iter().all(|c| c.p_key == 0xffff), "{what}");
                // rxe took every packet we sent, requests and ACKs alike, and we all of its.
                assert!(
                    ours.iter().any(|c| c.opcode == 0x11),
                    "{what}: no ACK of ours"
                );
                assert_eq!(taken, ours.len() as u64, "{what}");
                assert_eq!(we_refused, 0, "{what}");
            }
            Some((Frames::OurResponses, _)) => {
                assert!(!status.success(), "{what}");
                assert!(killed_by_its_limit(guest.status), "{what}");
                assert!(rewritten > 0, "{what}");
                // rxe took our requests (the pong) but none of our ACKs, and sent its ping again.
                assert_eq!(taken, ours.len() as u64 - rewritten, "{what}");
                assert!(sent_again >= 2, "{what}");
            }
            Some((Frames::OurRequests, _)) => {
                assert!(!status.success(), "{what}");
                assert!(killed_by_its_limit(guest.status), "{what}");
                assert!(rewritten >= 2, "{what}: sent, and sent again");
                assert_eq!(rewritten, ours.len() as u64, "{what}");
                assert_eq!(taken, 0, "{what}");
                assert!(theirs.is_empty(), "{what}: rxe answered");
            }
            Some((Frames::Rxes, _)) => {
                assert!(!status.success(), "{what}");
                assert!(killed_by_its_limit(guest.status), "{what}");
                assert_eq!(rewritten, theirs.len() as u64, "{what}");
                // rxe took our requests; we refused its ACKs and its pong while our QP lived,
                // and what came after was for a QP gone.
                assert_eq!(taken, ours.len() as u64, "{what}");
                assert!(we_refused >= 1, "{what}");
                let unknown = unknown_qp_at_end - ours_refused[n].1;
                assert_eq!(
                    bad_pkey_at_end - ours_refused[n].0 + unknown,
                    rewritten,
                    "{what}"
                );
                assert!(sent_again >= 2, "{what}: rxe resent its pong");
            }
        }
    }
    eprintln!(
        "group pkey: {} runs in {:.1} s\n{table}",
        runs.len(),
        started.elapsed().as_secs_f64()
    );
}

/// `timeout` ended the guest's tool: 124, or 143 (SIGTERM) when busybox's applet runs it.
fn killed_by_its_limit(status: Option<i32>) -> bool {
    matches!(status, Some(124 | 143))
}

/// The harness's answer to a guest that freezes (one did in a CI run, under TCG: rxe stopped
/// in the middle of a SEND, its console in the middle of a line, for good). The guest's QEMU
/// is stopped (SIGSTOP) during scenario 1's transfer: the harness must take the silent guest for frozen,
/// kill it, and run scenario 1 and the rest on a fresh guest, where they pass; the freeze is
/// reported. Scenario 0 fails for a reason of its own — both programs refuse path MTU 9999 —
/// and must fail the group without being run again.
#[test]
fn a_frozen_guest_is_replaced_once_and_a_real_failure_is_not_run_again() {
    let Some(outcome) = interop::run_group(&Group {
        name: "freeze",
        link_mtu: 1500,
        faults: None,
        capture_each: false,
        via_switch: false,
        // Its tool connected (the transfer, 500 round trips of 4 KiB, takes over a second).
        stop_guest: Some(StopGuest {
            during: 1,
            once_printed: "  remote address:",
        }),
        scenarios: vec![
            Scenario::new(Pingpong("rc"), "-n 5 -m 9999", true),
            Scenario::new(Pingpong("rc"), "-n 500 -s 4096", true),
            Scenario::new(Pingpong("rc"), "-n 20 -s 1024", false),
        ],
    }) else {
        return;
    };
    let failures = outcome.failures.join("\n\n");
    assert_eq!(outcome.froze_during, Some(1), "{failures}");
    assert_eq!(outcome.runs, [1, 2, 1], "{failures}");
    // Scenario 0's failure, and the logs that come with any failure: nothing else.
    assert_eq!(outcome.failures.len(), 2, "{failures}");
    assert!(
        outcome.failures[0].starts_with("ibv_rc_pingpong -n 5 -m 9999 (guest serves):"),
        "{failures}"
    );
    assert!(
        outcome.failures[1].starts_with("our NIC's log"),
        "{failures}"
    );
}

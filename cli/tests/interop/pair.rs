//! Two Soft-RoCE guests cabled straight to each other (`softroce-vm pair`): the RDMA CM's own
//! tools (rping, ucmatose, udaddy) connect one Linux kernel's CM to the other's, and QEMU records
//! the cable. Our NIC takes no part: these are the real handshakes a CM agent must match, kept
//! in `captures/softroce/two-guests/` (with `ROCE_REGENERATE_CAPTURES=1`) for the decoder's
//! conformance test and for reading. The guests' scripts are `tests/interop/rdma-cm/`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use roce_wire::capture::Reader;
use roce_wire::cm::{self, Message};
use roce_wire::cma::{self, PortSpace};
use roce_wire::{mad, IpAddress, Ipv4Address};

use super::{guest, output_dir, ONE_GUEST};
use crate::support::Proc;

/// Where the capture is committed, under `captures/softroce/`.
pub const COMMITTED: &str = "two-guests/rdma_cm.pcap";
/// The guests' addresses: A serves, B connects.
const SERVER: Ipv4Address = Ipv4Address::new(10, 77, 0, 1);
const CLIENT: Ipv4Address = Ipv4Address::new(10, 77, 0, 2);
/// Two guest boots and a server made to wait out one REQ timeout (about 6 s).
const LIMIT_S: u64 = 240;

/// The CM fields of the committed capture's field dump, after the harness's own.
pub const CM_FIELDS: &[&str] = &[
    "infiniband.mad.attributeid",
    "infiniband.mad.transactionid",
    "infiniband.cm.req",
    "infiniband.cm.req.serviceid",
    "infiniband.cm.req.localqpn",
    "infiniband.cm.req.startpsn",
    "infiniband.cm.req.ip_cm.sport",
    "infiniband.cm.req.ip_cm.sip4",
    "infiniband.cm.req.ip_cm.dip4",
    "infiniband.cm.rep",
    "infiniband.cm.rep.localqpn",
    "infiniband.cm.rep.startpsn",
    "infiniband.cm.rej.reason",
    "infiniband.cm.req.remoteqpneecn",
];

/// Boots the pair, runs the scripts and returns the capture of the cable; `None` (after a
/// SKIPPED line) where no guest can run.
pub fn record() -> Option<PathBuf> {
    let _one = ONE_GUEST.lock().unwrap_or_else(|e| e.into_inner());
    if !guest::ready() {
        return None;
    }
    let dir = output_dir("rdma-cm-pair");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let scripts = guest::harness().with_file_name("rdma-cm");
    let pcap = dir.join("rdma_cm.pcap");
    let mut cmd = Command::new(guest::harness());
    cmd.arg("pair")
        .arg("--server")
        .arg(scripts.join("server.sh"))
        .arg("--client")
        .arg(scripts.join("client.sh"))
        .args(["--client-after", "SERVERS-LISTENING"])
        .arg("--pcap")
        .arg(&pcap)
        .arg("--keep")
        .arg(&dir)
        .args(["--timeout", &LIMIT_S.to_string()])
        .env("CARGO_TARGET_DIR", guest::target_dir());
    let mut pair = Proc::spawn(cmd, false);
    let status = pair.wait(Duration::from_secs(LIMIT_S + 30));
    let consoles =
        ["A.log", "B.log"].map(|log| std::fs::read_to_string(dir.join(log)).unwrap_or_default());
    assert!(
        status.success(),
        "softroce-vm pair exited with {status}:\n{}\n{}\nserver:\n{}\nclient:\n{}",
        pair.drain_stdout(),
        pair.stderr(),
        consoles[0],
        consoles[1]
    );
    Some(pcap)
}

/// One CM MAD of the capture: who sent it and what it says.
#[derive(Debug)]
pub struct Mad {
    pub frame: u64,
    pub from: Ipv4Address,
    pub cm: cm::Repr,
}

/// Every CM MAD of a capture, in order; panics on a RoCE frame that does not parse, has a bad
/// ICRC, or is a QP1 datagram that is not a CM message.
pub fn cm_mads(pcap: &Path) -> Vec<Mad> {
    let file = std::fs::File::open(pcap).unwrap_or_else(|e| panic!("{}: {e}", pcap.display()));
    let mut reader = Reader::new(file).expect("a capture");
    let mut mads = Vec::new();
    while let Some(record) = reader.next_record() {
        let record = record.expect("a whole record");
        let frame = match record.frame() {
            Ok(frame) => frame,
            Err(roce_wire::Error::NotRoce(_)) => continue,
            Err(e) => panic!("frame {}: {e}", record.number),
        };
        assert!(frame.icrc().is_ok(), "frame {}: bad ICRC", record.number);
        if frame.repr.bth.dest_qp != mad::GSI_QPN {
            continue;
        }
        let roce_wire::NetworkRepr::Ipv4 { src, .. } = frame.repr.network else {
            panic!("frame {}: not IPv4", record.number)
        };
        let packet = mad::Packet::new_checked(frame.payload()).expect("a whole MAD");
        let cm = cm::Repr::parse(&packet)
            .unwrap_or_else(|e| panic!("frame {}: not a CM message: {e}", record.number));
        mads.push(Mad {
            frame: record.number,
            from: src,
            cm,
        });
    }
    mads
}

/// Checks that the capture holds what the scripts do, message by message: a REQ to an unused
/// port answered by REJ (invalid service ID), three connections (REQ, REP, RTU, DREQ, DREP) of
/// which the last has its REQ sent twice and answered with an MRA first, and a SIDR exchange
/// for UDP port 7174; every REQ and SIDR_REQ carrying the RDMA CM header of the client's
/// address and the server's. Returns the count of each message.
pub fn check(pcap: &Path) -> BTreeMap<&'static str, usize> {
    let mads = cm_mads(pcap);
    let mut count: BTreeMap<&'static str, usize> = BTreeMap::new();
    for mad in &mads {
        *count
            .entry(mad.cm.message.attribute_id().name())
            .or_default() += 1;
    }
    let ports: Vec<(PortSpace, u16)> = mads
        .iter()
        .filter_map(|m| match m.cm.message {
            Message::Req(r) => {
                assert_eq!(m.from, CLIENT, "frame {}", m.frame);
                check_rdma_cm_header(r.private_data.as_bytes(), m.frame);
                cma::parse_service_id(r.service_id)
            }
            Message::SidrReq(r) => {
                check_rdma_cm_header(r.private_data.as_bytes(), m.frame);
                cma::parse_service_id(r.service_id)
            }
            _ => None,
        })
        .collect();
    use PortSpace::{Tcp, Udp};
    assert_eq!(
        ports,
        [
            (Tcp, 7999),
            (Tcp, 7174),
            (Tcp, 7471),
            (Udp, 7174),
            (Tcp, 7176),
            (Tcp, 7176)
        ],
        "{}",
        pcap.display()
    );
    let rejected: Vec<cm::rej::Reason> = mads
        .iter()
        .filter_map(|m| match m.cm.message {
            Message::Rej(r) => Some(r.reason),
            _ => None,
        })
        .collect();
    assert_eq!(rejected, [cm::rej::Reason::INVALID_SERVICE_ID]);
    // The slow server's REQ, sent twice with one transaction ID, then the MRA answering it.
    let slow: Vec<&Mad> = mads
        .iter()
        .filter(|m| matches!(m.cm.message, Message::Req(r) if r.service_id == Tcp.service_id(7176)))
        .collect();
    assert_eq!(slow[0].cm.transaction_id, slow[1].cm.transaction_id);
    let mra = mads
        .iter()
        .find_map(|m| match m.cm.message {
            Message::Mra(r) => Some((m, r)),
            _ => None,
        })
        .expect("an MRA");
    assert_eq!(mra.0.from, SERVER);
    assert_eq!(mra.0.cm.transaction_id, slow[0].cm.transaction_id);
    assert_eq!(mra.1.message_mraed, cm::MessageKind::Req);
    for (message, n) in [
        ("REP", 3),
        ("RTU", 3),
        ("DREQ", 3),
        ("DREP", 3),
        ("SIDR_REP", 1),
    ] {
        assert_eq!(count.get(message), Some(&n), "{message}: {count:?}");
    }
    count
}

fn check_rdma_cm_header(private_data: &[u8], frame: u64) {
    let header = cma::Repr::parse(&cma::Packet::new_unchecked(
        &private_data[..cma::HEADER_LEN],
    ))
    .unwrap_or_else(|e| panic!("frame {frame}: {e}"));
    assert_eq!(
        (header.src, header.dst),
        (IpAddress::Ipv4(CLIENT), IpAddress::Ipv4(SERVER)),
        "frame {frame}"
    );
}

/// Copies the capture into the repository with tshark's dump of its fields, CM ones included.
pub fn commit(pcap: &Path) {
    let to = super::captures::committed_dir().join(COMMITTED);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(pcap, &to).unwrap();
    let mut fields: Vec<&str> = super::captures::FIELDS.to_vec();
    fields.extend(CM_FIELDS);
    std::fs::write(
        to.with_extension("fields.txt"),
        super::captures::field_dump_of(&to, &fields),
    )
    .unwrap();
    eprintln!("rewrote {}", to.display());
}

/// Copies the CM MADs of `pcap` (every datagram to QP1: the handshakes and teardowns, not the
/// traffic between them) into `captures/softroce/<name>`, with tshark's dump of their fields.
pub fn commit_handshakes(pcap: &Path, name: &str) {
    let to = super::captures::committed_dir().join(name);
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    let mut filter = std::process::Command::new("tshark");
    filter.arg("-r").arg(pcap);
    filter
        .args(["-Y", "infiniband.bth.destqp == 1", "-w"])
        .arg(&to);
    let out = filter.output().expect("tshark, to cut the handshakes out");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut fields: Vec<&str> = super::captures::FIELDS.to_vec();
    fields.extend(CM_FIELDS);
    std::fs::write(
        to.with_extension("fields.txt"),
        super::captures::field_dump_of(&to, &fields),
    )
    .unwrap();
    eprintln!("rewrote {}", to.display());
}

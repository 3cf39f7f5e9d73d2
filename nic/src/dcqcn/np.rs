//! The notification point: a receiving QP that sees packets marked CE (a switch on the way was
//! congested) tells the sender with a CNP — at most one per `np_min_time_between_cnps` per QP,
//! however many marked packets come.
//!
//! A CNP is laid out as a ConnectX-4 Lx sends one (`connectx4lx-cnp.pcap` in the shared
//! captures): BTH opcode 0x81 with BECN set, the P_Key of the QP, the sender's QP as
//! destination, PSN 0, sixteen reserved zero bytes and the ICRC; IP DSCP `np_cnp_dscp` (CS6),
//! ECT(0), don't-fragment, TTL of the path, UDP source port 0.

use std::time::Instant;

use roce_wire::{bth, Extensions, FrameRepr, NetworkRepr, Opcode};

use super::params::Params;
use crate::transport::Path;

/// What follows a CNP's BTH: 16 reserved bytes.
pub const CNP_PAYLOAD: [u8; 16] = [0; 16];

/// The IP ECN codepoint ECT(0): what a CNP carries, as everything a DCQCN NIC sends.
const ECT0: u8 = 2;

/// One QP's notification point.
#[derive(Debug, Clone, Default)]
pub struct NotificationPoint {
    last_cnp: Option<Instant>,
}

impl NotificationPoint {
    /// A packet marked CE arrived at `now`: whether to send a CNP for it.
    pub fn on_ce(&mut self, now: Instant, params: &Params) -> bool {
        let gap = Params::us(params.np_min_time_between_cnps);
        if self.last_cnp.is_some_and(|last| now < last + gap) {
            return false;
        }
        self.last_cnp = Some(now);
        true
    }
}

/// The CNP that tells QP `dest_qp` at the other end of `path` that its packets were marked.
pub fn cnp(path: &Path, dest_qp: u32, p_key: u16, params: &Params) -> FrameRepr {
    let mut bth = bth::Repr::new(Opcode::CNP, dest_qp, 0);
    bth.p_key = p_key;
    bth.becn = true;
    let network = match path.network {
        NetworkRepr::Ipv4 { src, dst, ttl, .. } => NetworkRepr::Ipv4 {
            src,
            dst,
            dscp: params.np_cnp_dscp,
            ecn: ECT0,
            ident: 0,
            ttl,
            udp_src_port: 0,
        },
        NetworkRepr::Ipv6 {
            src,
            dst,
            flow_label,
            hop_limit,
            ..
        } => NetworkRepr::Ipv6 {
            src,
            dst,
            traffic_class: (params.np_cnp_dscp << 2) | ECT0,
            flow_label,
            hop_limit,
            udp_src_port: 0,
        },
        grh => grh,
    };
    FrameRepr {
        ethernet: Some(path.ethernet),
        network,
        bth,
        ext: Extensions::for_opcode(Opcode::CNP),
        payload_len: CNP_PAYLOAD.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::AddressVector;
    use roce_wire::EthernetAddress;
    use std::time::Duration;

    /// The ConnectX-4 Lx CNP of the shared captures, byte for byte (as the wire crate's ICRC
    /// test vector has it).
    const CONNECTX4_LX_CNP: &str = "e41d2dab2bc2 7cfe90643b32 0800 45c2
         003c 718c 4000 4011 9161 0a001101 0a00
         1201 0000 12b7 0028 0000 8100 ffff 4000
         0118 0000 0000 0000 0000 0000 0000 0000
         0000 0000 0000 82fd 002a";

    fn hex(text: &str) -> Vec<u8> {
        let digits: String = text.split_whitespace().collect();
        (0..digits.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn our_cnp_is_byte_for_byte_the_connectx4_lx_one() {
        let av = AddressVector {
            dgid: crate::types::Gid::from_ip("10.0.18.1".parse().unwrap()),
            sgid_index: 0,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            dmac: None,
        };
        // The QP at 10.0.17.1 whose peer QP 0x118 at 10.0.18.1 sent marked packets.
        let path = Path::new(
            EthernetAddress([0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32]),
            "10.0.17.1".parse().unwrap(),
            EthernetAddress([0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2]),
            "10.0.18.1".parse().unwrap(),
            0xc123,
            &av,
        )
        .unwrap();
        let mut repr = cnp(&path, 0x118, 0xffff, &Params::default());
        // The IP identification is the sender's running count; this one was at 0x718c.
        if let NetworkRepr::Ipv4 { ident, .. } = &mut repr.network {
            *ident = 0x718c;
        }
        let mut buf = [0u8; 128];
        let len = repr.emit(&mut buf, &CNP_PAYLOAD).unwrap();
        assert_eq!(buf[..len], hex(CONNECTX4_LX_CNP)[..]);
        let parsed = roce_wire::Frame::parse(&buf[..len]).unwrap();
        assert!(parsed.icrc().is_ok());
        assert_eq!(parsed.repr.bth.opcode, Opcode::CNP);
    }

    #[test]
    fn at_most_one_cnp_per_interval() {
        let t0 = Instant::now();
        let p = Params::default();
        let gap = Duration::from_micros(u64::from(p.np_min_time_between_cnps));
        let mut np = NotificationPoint::default();
        assert!(np.on_ce(t0, &p));
        assert!(!np.on_ce(t0 + gap / 2, &p));
        assert!(!np.on_ce(t0 + gap - Duration::from_nanos(1), &p));
        assert!(np.on_ce(t0 + gap, &p));
        assert!(!np.on_ce(t0 + gap, &p));
        // Marked packets every microsecond for a millisecond: one CNP per interval.
        let mut np = NotificationPoint::default();
        let sent = (0..1000)
            .filter(|n| np.on_ce(t0 + Duration::from_micros(*n), &p))
            .count();
        assert_eq!(sent, 1000 / p.np_min_time_between_cnps as usize);
    }
}

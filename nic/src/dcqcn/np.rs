//! The notification point: a receiving QP that sees packets marked CE (a switch on the way was
//! congested) tells the sender with a CNP — at most one per `np_min_time_between_cnps` per QP,
//! however many marked packets come.
//!
//! A CNP is laid out as a ConnectX-4 Lx sends one (`connectx4lx-cnp.pcap` in the shared
//! captures): BTH opcode 0x81 with BECN set, the P_Key of the QP, the sender's QP as
//! destination, PSN 0, sixteen reserved zero bytes and the ICRC; IP DSCP `np_cnp_dscp` (CS6),
//! ECT(0), don't-fragment, TTL of the path, UDP source port 0.

use std::net::IpAddr;
use std::time::Instant;

use roce_wire::{bth, EthernetRepr, Extensions, FrameRepr, NetworkRepr, Opcode};

use super::params::Params;
use crate::transport::Path;

/// A UD QP's senders whose last CNP it remembers; a newer one takes the oldest's place.
pub const UD_SENDERS: usize = 64;

/// Who sent a UD packet: its source IP address and QP.
pub type UdSender = (IpAddr, u32);

/// What follows a CNP's BTH: 16 reserved bytes.
pub const CNP_PAYLOAD: [u8; 16] = [0; 16];

/// The IP ECN codepoint ECT(0): what a CNP carries, as everything a DCQCN NIC sends.
const ECT0: u8 = 2;

/// One QP's notification point.
#[derive(Debug, Clone, Default)]
pub struct NotificationPoint {
    last_cnp: Option<Instant>,
    /// A UD QP's: when each sender last got a CNP (a UD QP hears from many).
    ud_senders: Vec<(UdSender, Instant)>,
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

    /// A UD packet from `sender` marked CE arrived at `now`: whether to send that sender a CNP
    /// (at most one per interval per sender, as per connected QP).
    pub fn on_ce_from(&mut self, now: Instant, params: &Params, sender: UdSender) -> bool {
        let gap = Params::us(params.np_min_time_between_cnps);
        if let Some((_, last)) = self.ud_senders.iter_mut().find(|(s, _)| *s == sender) {
            if now < *last + gap {
                return false;
            }
            *last = now;
            return true;
        }
        if self.ud_senders.len() == UD_SENDERS {
            let oldest = (0..self.ud_senders.len())
                .min_by_key(|&i| self.ud_senders[i].1)
                .unwrap_or(0);
            self.ud_senders.swap_remove(oldest);
        }
        self.ud_senders.push((sender, now));
        true
    }
}

/// The way back to whoever sent `frame`: its addresses swapped, hop limit 64. `None` for a
/// frame without an Ethernet header or IP addresses (RoCEv1).
pub fn reply_path(frame: &FrameRepr) -> Option<Path> {
    let ethernet = frame.ethernet?;
    let network = match frame.network {
        NetworkRepr::Ipv4 { src, dst, .. } => NetworkRepr::Ipv4 {
            src: dst,
            dst: src,
            dscp: 0,
            ecn: 0,
            ident: 0,
            ttl: 64,
            udp_src_port: 0,
        },
        NetworkRepr::Ipv6 {
            src,
            dst,
            flow_label,
            ..
        } => NetworkRepr::Ipv6 {
            src: dst,
            dst: src,
            traffic_class: 0,
            flow_label,
            hop_limit: 64,
            udp_src_port: 0,
        },
        NetworkRepr::Grh { .. } => return None,
    };
    Some(Path {
        ethernet: EthernetRepr {
            src: ethernet.dst,
            dst: ethernet.src,
            ..ethernet
        },
        network,
    })
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

    #[test]
    fn a_ud_qp_limits_cnps_per_sender_and_forgets_the_oldest() {
        let t0 = Instant::now();
        let p = Params::default();
        let gap = Duration::from_micros(u64::from(p.np_min_time_between_cnps));
        let a: UdSender = ("10.0.0.1".parse().unwrap(), 0x11);
        let b: UdSender = ("10.0.0.1".parse().unwrap(), 0x12);
        let mut np = NotificationPoint::default();
        assert!(np.on_ce_from(t0, &p, a));
        // Another QP at the same address is another sender.
        assert!(np.on_ce_from(t0, &p, b));
        assert!(!np.on_ce_from(t0 + gap / 2, &p, a));
        assert!(np.on_ce_from(t0 + gap, &p, a));
        // A full table makes room by forgetting the sender heard from longest ago (b).
        for n in 0..UD_SENDERS as u32 - 2 {
            assert!(np.on_ce_from(t0 + gap, &p, (a.0, 0x100 + n)));
        }
        assert!(np.on_ce_from(t0 + gap, &p, (a.0, 0x999)));
        assert_eq!(np.ud_senders.len(), UD_SENDERS);
        assert!(np.ud_senders.iter().all(|(s, _)| *s != b));
        assert!(!np.on_ce_from(t0 + gap, &p, a), "a was kept");
    }

    #[test]
    fn the_reply_path_goes_back_to_the_sender() {
        let there = Path::new(
            EthernetAddress([2, 0, 0, 0, 0, 1]),
            "10.0.0.1".parse().unwrap(),
            EthernetAddress([2, 0, 0, 0, 0, 2]),
            "10.0.0.2".parse().unwrap(),
            0xc000,
            &crate::types::AddressVector::to(
                crate::types::Gid::from_ip("10.0.0.2".parse().unwrap()),
                1,
            ),
        )
        .unwrap();
        let opcode = Opcode::new(roce_wire::Transport::Ud, roce_wire::Kind::SendOnly).unwrap();
        let frame = there.frame(
            bth::Repr::new(opcode, 0x22, 7),
            Extensions::for_opcode(opcode),
            8,
        );
        let back = reply_path(&frame).unwrap();
        assert_eq!(back.ethernet.src, there.ethernet.dst);
        assert_eq!(back.ethernet.dst, there.ethernet.src);
        assert!(back.is_reverse_of(&there.network));
        let cnp = cnp(&back, 0x11, 0xffff, &Params::default());
        assert_eq!((cnp.bth.opcode, cnp.bth.dest_qp), (Opcode::CNP, 0x11));
    }
}

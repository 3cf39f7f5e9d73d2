//! The walk through a management datagram: its common header, then, for the CM, the message
//! its attribute ID names, with the parts that depend on the packet chosen as tshark chooses
//! them (the service ID's pieces and the RDMA CM header only for an RDMA CM service ID; the
//! path's GIDs as IPv4 addresses in an IPv4 frame; the header's addresses by its IP version).

use core::fmt;

use super::mad_tables as t;
use super::tables::Spec;
use super::walk::Walker;
use super::{Visit, Words};
use crate::cm::{self, AttributeId, Message};
use crate::frame::{Frame, NetworkRepr};
use crate::mad::{self, Class};
use crate::{be, cma, IpAddress, Layer};

/// Whether a frame's payload is a management datagram: a UD datagram to or from QP0 or QP1
/// (tshark's test) that holds a whole MAD.
pub(super) fn is_mad(frame: &Frame) -> bool {
    let repr = &frame.repr;
    repr.ext.deth.is_some_and(|deth| {
        let management = repr.bth.dest_qp <= mad::GSI_QPN || deth.src_qp <= mad::GSI_QPN;
        management && repr.payload_len >= mad::MAD_LEN
    })
}

impl<'a> Walker<'_, 'a> {
    /// Where the MAD starts, if the payload is one.
    pub(super) fn mad_at(&self) -> Option<usize> {
        is_mad(self.frame).then_some(self.frame.layout.payload.start)
    }

    pub(super) fn mad<V: Visit<'a>>(&self, each: &mut V, at: usize) -> Result<(), V::Error> {
        self.table(each, Layer::Mad, at, t::MAD)?;
        let data = at + mad::HEADER_LEN;
        let bytes = &self.bytes[at..at + mad::MAD_LEN];
        if Class(bytes[1]) != Class::CM {
            return Ok(());
        }
        let message = &bytes[mad::HEADER_LEN..];
        let rdma_cm = |service_at: usize| cma::has_ip_prefix(be::u64(&message[service_at..]));
        let ip_cm = |header_at: usize, v4, v6| {
            if message[header_at + 1] >> 4 == 4 {
                v4
            } else {
                v6
            }
        };
        let cm = |each: &mut V, table: &'static [Spec]| self.table(each, Layer::Cm, data, table);
        match AttributeId(be::u16(&bytes[16..18])) {
            AttributeId::REQ => {
                cm(each, t::REQ)?;
                if rdma_cm(8) {
                    cm(each, t::REQ_IP_SERVICE_ID)?;
                }
                cm(each, t::REQ_QP)?;
                match self.frame.repr.network {
                    NetworkRepr::Ipv4 { .. } => cm(each, &t::PRIMARY_PATH_IPV4)?,
                    _ => cm(each, &t::PRIMARY_PATH_IPV6)?,
                }
                self.one(each, Layer::Cm, data, &t::PRIMARY_RESERVED)?;
                cm(each, &t::ALTERNATE_PATH)?;
                cm(each, t::ALTERNATE_END)?;
                if rdma_cm(8) {
                    cm(each, ip_cm(140, &t::REQ_IP_CM_V4, &t::REQ_IP_CM_V6))
                } else {
                    self.one(each, Layer::Cm, data, &t::REQ_PRIVATE)
                }
            }
            AttributeId::MRA => cm(each, t::MRA),
            AttributeId::REJ => cm(each, t::REJ),
            AttributeId::REP => cm(each, t::REP),
            AttributeId::RTU => cm(each, t::RTU),
            AttributeId::DREQ => cm(each, t::DREQ),
            AttributeId::DREP => cm(each, t::DREP),
            AttributeId::SIDR_REQ => {
                cm(each, t::SIDR_REQ)?;
                if rdma_cm(8) {
                    cm(
                        each,
                        ip_cm(16, &t::SIDR_REQ_IP_CM_V4, &t::SIDR_REQ_IP_CM_V6),
                    )
                } else {
                    self.one(each, Layer::Cm, data, &t::SIDR_REQ_PRIVATE)
                }
            }
            AttributeId::SIDR_REP => cm(each, t::SIDR_REP),
            // LAP, APR, ClassPortInfo: the MAD data above is all there is.
            _ => Ok(()),
        }
    }

    /// One row on its own.
    fn one<V: Visit<'a>>(
        &self,
        each: &mut V,
        layer: Layer,
        base: usize,
        spec: &'static Spec,
    ) -> Result<(), V::Error> {
        self.table(each, layer, base, core::slice::from_ref(spec))
    }
}

/// The summary's words for a MAD: the CM message and what matters in it, or the MAD header's
/// class, method and attribute.
pub(super) fn summary(f: &mut fmt::Formatter<'_>, mad_bytes: &[u8]) -> fmt::Result {
    let packet = mad::Packet::new_unchecked(mad_bytes);
    let Ok(cm) = cm::Repr::parse(&packet) else {
        return write!(
            f,
            " MAD class={:#04x} ({}) method={} attribute={:#06x}",
            packet.mgmt_class().0,
            packet.mgmt_class(),
            packet.method(),
            packet.attribute_id(),
        );
    };
    write!(f, " CM {}", cm.message.attribute_id())?;
    let ids = |f: &mut fmt::Formatter<'_>, local: u32, remote: u32| {
        write!(f, " comm={local:#010x} remote_comm={remote:#010x}")
    };
    match cm.message {
        Message::Req(r) => {
            write!(
                f,
                " comm={:#010x} service={:#x}",
                r.local_comm_id, r.service_id
            )?;
            if let Some((space, port)) = cma::parse_service_id(r.service_id) {
                write!(f, " ({space} port {port})")?;
            }
            write!(f, " QPN={:#08x} PSN={}", r.local_qpn, r.starting_psn)?;
            if cma::has_ip_prefix(r.service_id) {
                let data = r.private_data.as_bytes();
                if let Ok(h) = cma::Repr::parse(&cma::Packet::new_unchecked(&data[..])) {
                    match h.src {
                        IpAddress::Ipv4(src) => write!(f, " from {src}:{}", h.src_port)?,
                        IpAddress::Ipv6(src) => write!(f, " from [{src}]:{}", h.src_port)?,
                    }
                    write!(f, " to {}", h.dst)?;
                }
            }
            Ok(())
        }
        Message::Mra(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            let timeout = Words::Timeout(cm::timeout(r.service_timeout));
            let of = ["REQ", "REP", "LAP", "reserved"][usize::from(r.message_mraed.to_bits())];
            write!(f, " of {of}, answer within {timeout}")
        }
        Message::Rej(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            let of = ["REQ", "REP", "other", "reserved"][usize::from(r.message_rejected.to_bits())];
            write!(f, " of {of} reason={} ({})", r.reason.0, r.reason)
        }
        Message::Rep(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            write!(f, " QPN={:#08x} PSN={}", r.local_qpn, r.starting_psn)
        }
        Message::Rtu(r) => ids(f, r.local_comm_id, r.remote_comm_id),
        Message::Dreq(r) => {
            ids(f, r.local_comm_id, r.remote_comm_id)?;
            write!(f, " QPN={:#08x}", r.remote_qpn)
        }
        Message::Drep(r) => ids(f, r.local_comm_id, r.remote_comm_id),
        Message::SidrReq(r) => {
            write!(
                f,
                " request={:#010x} service={:#x}",
                r.request_id, r.service_id
            )?;
            match cma::parse_service_id(r.service_id) {
                Some((space, port)) => write!(f, " ({space} port {port})"),
                None => Ok(()),
            }
        }
        Message::SidrRep(r) => write!(
            f,
            " request={:#010x} status={} ({}) QPN={:#08x} Q_Key={:#010x}",
            r.request_id, r.status.0, r.status, r.qpn, r.q_key
        ),
    }
}

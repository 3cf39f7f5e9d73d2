//! SIDR_REP, service ID resolution reply (IBTA 12.11.2, table 120): the QP and Q_Key that serve
//! the service, or a status saying why not.
//!
//! ```text
//!  0 request ID   4 status | additional information length | reserved (16)
//!  8 QPN (24) | reserved   12 service ID (64)   20 Q_Key
//! 24 additional information (72)   96 private data (136)
//! ```

use core::fmt;

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::PrivateData;

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

mod field {
    pub const INFO: usize = 24;
}

/// Bytes of additional information a SIDR_REP has room for.
pub const INFO_LEN: usize = 72;

message_fields! {
    request_id / set_request_id: u32(0);
    status / set_status: u8(4);
    additional_info_len / set_additional_info_len: u8(5);
    qpn / set_qpn: u24(8);
    service_id / set_service_id: u64(12);
    q_key / set_q_key: u32(20);
}

private_data!(96, 136);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn additional_info(&self) -> &[u8] {
        &self.bytes()[field::INFO..field::INFO + INFO_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn additional_info_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[field::INFO..field::INFO + INFO_LEN]
    }
}

/// A SIDR_REP's status (IBTA table 121; Linux's `enum ib_cm_sidr_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Status(pub u8);

impl Status {
    pub const SUCCESS: Status = Status(0);
    pub const UNSUPPORTED: Status = Status(1);
    pub const REJECT: Status = Status(2);
    pub const NO_QP: Status = Status(3);
    pub const REDIRECT: Status = Status(4);
    pub const UNSUPPORTED_VERSION: Status = Status(5);

    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "valid QPN",
            1 => "service ID not supported",
            2 => "rejected by the service",
            3 => "no QP available",
            4 => "redirected (see the additional information)",
            5 => "unsupported class version",
            _ => "reserved status",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed SIDR_REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub request_id: u32,
    pub status: Status,
    pub qpn: u32,
    pub service_id: u64,
    pub q_key: u32,
    /// For a redirect, a ClassPortInfo; its length is sent as the additional information
    /// length.
    pub additional_info: PrivateData<INFO_LEN>,
    pub additional_info_len: u8,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            request_id: packet.request_id(),
            status: Status(packet.status()),
            qpn: packet.qpn(),
            service_id: packet.service_id(),
            q_key: packet.q_key(),
            additional_info: PrivateData::read(packet.additional_info()),
            additional_info_len: packet.additional_info_len(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_request_id(self.request_id);
        packet.set_status(self.status.0);
        packet.set_additional_info_len(self.additional_info_len);
        packet.set_qpn(self.qpn);
        packet.set_service_id(self.service_id);
        packet.set_q_key(self.q_key);
        packet
            .additional_info_mut()
            .copy_from_slice(self.additional_info.as_bytes());
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

//! REJ, connection rejected (IBTA 12.6.7, table 108): which message is refused (REQ, REP or
//! other), why (the reason code), up to 72 bytes of additional reject information (ARI: for
//! some reasons, the value the rejecter would have accepted) and private data. Linux answers a
//! REQ for a service nobody listens on with reason 8, invalid service ID.
//!
//! ```text
//!  0 local communication ID   4 remote communication ID
//!  8 message rejected (2), reserved (6) | reject info length (7), reserved (1) | reason (16)
//! 12 additional reject information (72)
//! 84 private data (148)
//! ```

use core::fmt;

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::{MessageKind, PrivateData};

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

mod field {
    pub const ARI: usize = 12;
}

/// Bytes of additional reject information a REJ has room for.
pub const ARI_LEN: usize = 72;

message_fields! {
    local_comm_id / set_local_comm_id: u32(0);
    remote_comm_id / set_remote_comm_id: u32(4);
    /// 0: the REQ, 1: the REP, 2: another message.
    message_rejected / set_message_rejected: bits(8, 0xc0);
    /// Bytes of the ARI that mean something.
    reject_info_len / set_reject_info_len: bits(9, 0xfe);
    reason / set_reason: u16(10);
}

private_data!(84, 148);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn ari(&self) -> &[u8] {
        &self.bytes()[field::ARI..field::ARI + ARI_LEN]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn ari_mut(&mut self) -> &mut [u8] {
        &mut self.bytes_mut()[field::ARI..field::ARI + ARI_LEN]
    }
}

/// Why a connection was rejected (IBTA table 109; Linux's `enum ib_cm_rej_reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Reason(pub u16);

impl Reason {
    pub const NO_QP: Reason = Reason(1);
    pub const NO_EEC: Reason = Reason(2);
    pub const NO_RESOURCES: Reason = Reason(3);
    pub const TIMEOUT: Reason = Reason(4);
    pub const UNSUPPORTED: Reason = Reason(5);
    pub const INVALID_COMM_ID: Reason = Reason(6);
    pub const INVALID_COMM_INSTANCE: Reason = Reason(7);
    pub const INVALID_SERVICE_ID: Reason = Reason(8);
    pub const INVALID_TRANSPORT_TYPE: Reason = Reason(9);
    pub const STALE_CONN: Reason = Reason(10);
    pub const RDC_NOT_EXIST: Reason = Reason(11);
    pub const INVALID_GID: Reason = Reason(12);
    pub const INVALID_LID: Reason = Reason(13);
    pub const INVALID_SL: Reason = Reason(14);
    pub const INVALID_TRAFFIC_CLASS: Reason = Reason(15);
    pub const INVALID_HOP_LIMIT: Reason = Reason(16);
    pub const INVALID_PACKET_RATE: Reason = Reason(17);
    pub const INVALID_ALT_GID: Reason = Reason(18);
    pub const INVALID_ALT_LID: Reason = Reason(19);
    pub const INVALID_ALT_SL: Reason = Reason(20);
    pub const INVALID_ALT_TRAFFIC_CLASS: Reason = Reason(21);
    pub const INVALID_ALT_HOP_LIMIT: Reason = Reason(22);
    pub const INVALID_ALT_PACKET_RATE: Reason = Reason(23);
    pub const PORT_CM_REDIRECT: Reason = Reason(24);
    pub const PORT_REDIRECT: Reason = Reason(25);
    pub const INVALID_MTU: Reason = Reason(26);
    pub const INSUFFICIENT_RESP_RESOURCES: Reason = Reason(27);
    /// The user refused (`rdma_reject`); the private data says why.
    pub const CONSUMER_DEFINED: Reason = Reason(28);
    pub const INVALID_RNR_RETRY: Reason = Reason(29);
    pub const DUPLICATE_LOCAL_COMM_ID: Reason = Reason(30);
    pub const INVALID_CLASS_VERSION: Reason = Reason(31);
    pub const INVALID_FLOW_LABEL: Reason = Reason(32);
    pub const INVALID_ALT_FLOW_LABEL: Reason = Reason(33);
    pub const VENDOR_OPTION_NOT_SUPPORTED: Reason = Reason(35);

    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "no QP available",
            2 => "no EE context available",
            3 => "no resources available",
            4 => "timeout",
            5 => "unsupported request",
            6 => "invalid communication ID",
            7 => "invalid communication instance",
            8 => "invalid service ID",
            9 => "invalid transport service type",
            10 => "stale connection",
            11 => "RDC does not exist",
            12 => "primary remote port GID rejected",
            13 => "primary remote port LID rejected",
            14 => "invalid primary SL",
            15 => "invalid primary traffic class",
            16 => "invalid primary hop limit",
            17 => "invalid primary packet rate",
            18 => "alternate remote port GID rejected",
            19 => "alternate remote port LID rejected",
            20 => "invalid alternate SL",
            21 => "invalid alternate traffic class",
            22 => "invalid alternate hop limit",
            23 => "invalid alternate packet rate",
            24 => "port CM redirect",
            25 => "port redirect",
            26 => "invalid path MTU",
            27 => "insufficient responder resources",
            28 => "consumer defined",
            29 => "invalid RNR retry count",
            30 => "duplicate local communication ID",
            31 => "unsupported class version",
            32 => "invalid primary flow label",
            33 => "invalid alternate flow label",
            35 => "vendor option not supported",
            _ => "reserved reason",
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A parsed REJ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_rejected: MessageKind,
    pub reason: Reason,
    /// The additional reject information; its length is sent as the reject info length.
    pub ari: PrivateData<ARI_LEN>,
    pub ari_len: u8,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_rejected: MessageKind::from_bits(packet.message_rejected()),
            reason: Reason(packet.reason()),
            ari: PrivateData::read(packet.ari()),
            ari_len: packet.reject_info_len(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_message_rejected(self.message_rejected.to_bits());
        packet.set_reject_info_len(self.ari_len);
        packet.set_reason(self.reason.0);
        packet.ari_mut().copy_from_slice(self.ari.as_bytes());
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

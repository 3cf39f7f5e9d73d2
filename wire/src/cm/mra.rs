//! MRA, message receipt acknowledgement (IBTA 12.6.6, table 107): "I have your REQ (or REP, or
//! LAP), the answer will take a while" — it stretches the sender's timeout to the service
//! timeout given. Linux's RDMA CM sends one for every REQ a user-space listener has not
//! accepted yet, so real handshakes usually read REQ, MRA, REP, RTU.
//!
//! ```text
//!  0 local communication ID   4 remote communication ID
//!  8 message MRAed (2), reserved (6) | service timeout (5), reserved (3) | private data (222)
//! ```

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::{MessageKind, PrivateData};

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

message_fields! {
    local_comm_id / set_local_comm_id: u32(0);
    remote_comm_id / set_remote_comm_id: u32(4);
    /// 0: the REQ, 1: the REP, 2: a LAP.
    message_mraed / set_message_mraed: bits(8, 0xc0);
    /// How long the sender will take to answer: 4.096 µs × 2^value.
    service_timeout / set_service_timeout: bits(9, 0xf8);
}

private_data!(10, 222);

/// A parsed MRA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub message_mraed: MessageKind,
    pub service_timeout: u8,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            message_mraed: MessageKind::from_bits(packet.message_mraed()),
            service_timeout: packet.service_timeout(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_message_mraed(self.message_mraed.to_bits());
        packet.set_service_timeout(self.service_timeout);
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

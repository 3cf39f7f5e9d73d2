//! SIDR_REQ, service ID resolution request (IBTA 12.11.1, table 119): a UD client asks which QP
//! and Q_Key serve a service ID. The RDMA CM's UDP port space (udaddy, `rdma_resolve_route` on a
//! UD ID) resolves this way, with the same IP header in its private data as a REQ.
//!
//! ```text
//!  0 request ID   4 P_Key (16) | reserved (16)   8 service ID (64)   16 private data (216)
//! ```

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::PrivateData;

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

message_fields! {
    /// The requester's handle, echoed by the SIDR_REP.
    request_id / set_request_id: u32(0);
    partition_key / set_partition_key: u16(4);
    service_id / set_service_id: u64(8);
}

private_data!(16, 216);

/// A parsed SIDR_REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub request_id: u32,
    pub partition_key: u16,
    pub service_id: u64,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            request_id: packet.request_id(),
            partition_key: packet.partition_key(),
            service_id: packet.service_id(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_request_id(self.request_id);
        packet.set_partition_key(self.partition_key);
        packet.set_service_id(self.service_id);
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

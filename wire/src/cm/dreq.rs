//! DREQ, the disconnection request (IBTA 12.6.10, table 112): either side ends the connection;
//! it names the QP the receiver is to find it by. Answered with a DREP.
//!
//! ```text
//!  0 local communication ID   4 remote communication ID
//!  8 remote QPN or EECN (24) | reserved   12 private data (220)
//! ```

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::PrivateData;

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

message_fields! {
    local_comm_id / set_local_comm_id: u32(0);
    remote_comm_id / set_remote_comm_id: u32(4);
    /// The receiver's QP (or EE context) that is being disconnected.
    remote_qpn / set_remote_qpn: u24(8);
}

private_data!(12, 220);

/// A parsed DREQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub remote_qpn: u32,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            remote_qpn: packet.remote_qpn(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_remote_qpn(self.remote_qpn);
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

//! REP, the connection reply (IBTA 12.6.8, table 110): the passive side accepts and gives its
//! own QP, starting PSN, resources and 196 bytes of private data. The active side answers with
//! an RTU.
//!
//! ```text
//!  0 local communication ID   4 remote communication ID   8 local Q_Key
//! 12 local QPN (24) | reserved   16 local EECN (24) | reserved   20 starting PSN (24) | reserved
//! 24 responder resources | initiator depth | target ACK delay (5), failover accepted (2), E2E flow control (1)
//!    | RNR retry count (3), SRQ (1), reserved (4)
//! 28 local CA GUID (64)
//! 36 private data (196)
//! ```

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::PrivateData;

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

message_fields! {
    local_comm_id / set_local_comm_id: u32(0);
    /// The REQ's local communication ID.
    remote_comm_id / set_remote_comm_id: u32(4);
    local_q_key / set_local_q_key: u32(8);
    local_qpn / set_local_qpn: u24(12);
    local_eecn / set_local_eecn: u24(16);
    starting_psn / set_starting_psn: u24(20);
    responder_resources / set_responder_resources: u8(24);
    initiator_depth / set_initiator_depth: u8(25);
    target_ack_delay / set_target_ack_delay: bits(26, 0xf8);
    /// 0: the alternate path is accepted, 1: refused, 2: not supported.
    failover_accepted / set_failover_accepted: bits(26, 0x06);
    end_to_end_flow_control / set_end_to_end_flow_control: flag(26, 0x01);
    rnr_retry_count / set_rnr_retry_count: bits(27, 0xe0);
    srq / set_srq: flag(27, 0x10);
    local_ca_guid / set_local_ca_guid: u64(28);
}

private_data!(36, 196);

/// A parsed REP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_q_key: u32,
    pub local_qpn: u32,
    pub local_eecn: u32,
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub target_ack_delay: u8,
    pub failover_accepted: u8,
    pub end_to_end_flow_control: bool,
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            remote_comm_id: packet.remote_comm_id(),
            local_q_key: packet.local_q_key(),
            local_qpn: packet.local_qpn(),
            local_eecn: packet.local_eecn(),
            starting_psn: packet.starting_psn(),
            responder_resources: packet.responder_resources(),
            initiator_depth: packet.initiator_depth(),
            target_ack_delay: packet.target_ack_delay(),
            failover_accepted: packet.failover_accepted(),
            end_to_end_flow_control: packet.end_to_end_flow_control(),
            rnr_retry_count: packet.rnr_retry_count(),
            srq: packet.srq(),
            local_ca_guid: packet.local_ca_guid(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_remote_comm_id(self.remote_comm_id);
        packet.set_local_q_key(self.local_q_key);
        packet.set_local_qpn(self.local_qpn);
        packet.set_local_eecn(self.local_eecn);
        packet.set_starting_psn(self.starting_psn);
        packet.set_responder_resources(self.responder_resources);
        packet.set_initiator_depth(self.initiator_depth);
        packet.set_target_ack_delay(self.target_ack_delay);
        packet.set_failover_accepted(self.failover_accepted);
        packet.set_end_to_end_flow_control(self.end_to_end_flow_control);
        packet.set_rnr_retry_count(self.rnr_retry_count);
        packet.set_srq(self.srq);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

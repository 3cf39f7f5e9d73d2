//! REQ, the connection request (IBTA 12.6.5, table 106): the active side's QP and its
//! attributes, the service it wants (the service ID), the path, and 92 bytes of private data
//! (for the RDMA CM, a [`crate::cma`] header and the user's own bytes).
//!
//! ```text
//!   0 local communication ID      4 reserved
//!   8 service ID (64)            16 local CA GUID (64)
//!  24 reserved                   28 local Q_Key
//!  32 local QPN (24) | responder resources      36 local EECN (24) | initiator depth
//!  40 remote EECN (24) | remote CM response timeout (5), transport service type (2), E2E flow control (1)
//!  44 starting PSN (24) | local CM response timeout (5), retry count (3)
//!  48 P_Key (16) | path MTU (4), RDC exists (1), RNR retry count (3) | max CM retries (4), SRQ (1), extended transport type (3)
//!  52 primary path (44 bytes, see `Path`)
//!  96 alternate path (44 bytes; the last byte's bit 2 is "SAP supported")
//! 140 private data (92)
//! ```

use crate::error::{Error, Layer};
use crate::view::fixed_header_view;

use super::path::{self, Path};
use super::{PrivateData, ServiceType};

fixed_header_view!(Layer::Cm, crate::mad::DATA_LEN);

/// Where the parts that are not plain fields start.
mod field {
    pub const PRIMARY_PATH: usize = 52;
    pub const ALTERNATE_PATH: usize = 96;
}

message_fields! {
    /// The sender's handle for this connection; the REP echoes it as the remote ID.
    local_comm_id / set_local_comm_id: u32(0);
    service_id / set_service_id: u64(8);
    local_ca_guid / set_local_ca_guid: u64(16);
    local_q_key / set_local_q_key: u32(28);
    local_qpn / set_local_qpn: u24(32);
    /// RDMA READs and atomics the sender will accept at once.
    responder_resources / set_responder_resources: u8(35);
    local_eecn / set_local_eecn: u24(36);
    /// RDMA READs and atomics the sender will have outstanding at once.
    initiator_depth / set_initiator_depth: u8(39);
    remote_eecn / set_remote_eecn: u24(40);
    /// How long the peer may take to answer: 4.096 µs × 2^value.
    remote_cm_response_timeout / set_remote_cm_response_timeout: bits(43, 0xf8);
    transport_service_type / set_transport_service_type: bits(43, 0x06);
    end_to_end_flow_control / set_end_to_end_flow_control: flag(43, 0x01);
    starting_psn / set_starting_psn: u24(44);
    local_cm_response_timeout / set_local_cm_response_timeout: bits(47, 0xf8);
    retry_count / set_retry_count: bits(47, 0x07);
    partition_key / set_partition_key: u16(48);
    /// IBTA's MTU code: 1 = 256 bytes ... 5 = 4096.
    path_mtu / set_path_mtu: bits(50, 0xf0);
    rdc_exists / set_rdc_exists: flag(50, 0x08);
    rnr_retry_count / set_rnr_retry_count: bits(50, 0x07);
    max_cm_retries / set_max_cm_retries: bits(51, 0xf0);
    srq / set_srq: flag(51, 0x08);
    extended_transport_type / set_extended_transport_type: bits(51, 0x07);
    sap_supported / set_sap_supported: flag(139, 0x04);
}

private_data!(140, 92);

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn primary_path(&self) -> Path {
        Path::read(&self.bytes()[field::PRIMARY_PATH..field::PRIMARY_PATH + path::LEN])
    }
    pub fn alternate_path(&self) -> Path {
        Path::read(&self.bytes()[field::ALTERNATE_PATH..field::ALTERNATE_PATH + path::LEN])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Writes the primary path (reserved bits zero).
    pub fn set_primary_path(&mut self, value: &Path) {
        value.write(&mut self.bytes_mut()[field::PRIMARY_PATH..field::PRIMARY_PATH + path::LEN])
    }
    /// Writes the alternate path (reserved bits zero, "SAP supported" included: set it after).
    pub fn set_alternate_path(&mut self, value: &Path) {
        let at = field::ALTERNATE_PATH;
        value.write(&mut self.bytes_mut()[at..at + path::LEN])
    }
}

/// A parsed REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub local_comm_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_q_key: u32,
    pub local_qpn: u32,
    pub responder_resources: u8,
    pub local_eecn: u32,
    pub initiator_depth: u8,
    pub remote_eecn: u32,
    pub remote_cm_response_timeout: u8,
    pub transport: ServiceType,
    pub end_to_end_flow_control: bool,
    pub starting_psn: u32,
    pub local_cm_response_timeout: u8,
    pub retry_count: u8,
    pub partition_key: u16,
    pub path_mtu: u8,
    pub rdc_exists: bool,
    pub rnr_retry_count: u8,
    pub max_cm_retries: u8,
    pub srq: bool,
    pub extended_transport_type: u8,
    pub primary_path: Path,
    pub alternate_path: Path,
    pub sap_supported: bool,
    pub private_data: PrivateData<PRIVATE_DATA_LEN>,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        Ok(Repr {
            local_comm_id: packet.local_comm_id(),
            service_id: packet.service_id(),
            local_ca_guid: packet.local_ca_guid(),
            local_q_key: packet.local_q_key(),
            local_qpn: packet.local_qpn(),
            responder_resources: packet.responder_resources(),
            local_eecn: packet.local_eecn(),
            initiator_depth: packet.initiator_depth(),
            remote_eecn: packet.remote_eecn(),
            remote_cm_response_timeout: packet.remote_cm_response_timeout(),
            transport: ServiceType::from_bits(packet.transport_service_type()),
            end_to_end_flow_control: packet.end_to_end_flow_control(),
            starting_psn: packet.starting_psn(),
            local_cm_response_timeout: packet.local_cm_response_timeout(),
            retry_count: packet.retry_count(),
            partition_key: packet.partition_key(),
            path_mtu: packet.path_mtu(),
            rdc_exists: packet.rdc_exists(),
            rnr_retry_count: packet.rnr_retry_count(),
            max_cm_retries: packet.max_cm_retries(),
            srq: packet.srq(),
            extended_transport_type: packet.extended_transport_type(),
            primary_path: packet.primary_path(),
            alternate_path: packet.alternate_path(),
            sap_supported: packet.sap_supported(),
            private_data: PrivateData::read(packet.private_data()),
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes every field; the caller zeroes the buffer first for reserved bytes to be zero
    /// ([`super::Message::emit`] does).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_local_comm_id(self.local_comm_id);
        packet.set_service_id(self.service_id);
        packet.set_local_ca_guid(self.local_ca_guid);
        packet.set_local_q_key(self.local_q_key);
        packet.set_local_qpn(self.local_qpn);
        packet.set_responder_resources(self.responder_resources);
        packet.set_local_eecn(self.local_eecn);
        packet.set_initiator_depth(self.initiator_depth);
        packet.set_remote_eecn(self.remote_eecn);
        packet.set_remote_cm_response_timeout(self.remote_cm_response_timeout);
        packet.set_transport_service_type(self.transport.to_bits());
        packet.set_end_to_end_flow_control(self.end_to_end_flow_control);
        packet.set_starting_psn(self.starting_psn);
        packet.set_local_cm_response_timeout(self.local_cm_response_timeout);
        packet.set_retry_count(self.retry_count);
        packet.set_partition_key(self.partition_key);
        packet.set_path_mtu(self.path_mtu);
        packet.set_rdc_exists(self.rdc_exists);
        packet.set_rnr_retry_count(self.rnr_retry_count);
        packet.set_max_cm_retries(self.max_cm_retries);
        packet.set_srq(self.srq);
        packet.set_extended_transport_type(self.extended_transport_type);
        packet.set_primary_path(&self.primary_path);
        packet.set_alternate_path(&self.alternate_path);
        packet.set_sap_supported(self.sap_supported);
        packet
            .private_data_mut()
            .copy_from_slice(self.private_data.as_bytes());
    }
}

//! The UDP header of RoCEv2 (8 bytes): destination port 4791, a source port the sender picks
//! per flow for ECMP entropy, and a zero checksum (the ICRC protects the packet instead).
//! Read and written with `smoltcp::wire::UdpPacket`.

use smoltcp::wire::UdpPacket;

use crate::error::{check_len, malformed, Error, Layer};

/// The UDP destination port that marks RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;

/// Bytes of a UDP header.
pub const HEADER_LEN: usize = 8;

/// Checks that the UDP header at the start of `datagram` (an IP payload, possibly cut short by
/// the capture) goes to RoCEv2's port. The source port says nothing: RoCE picks it for ECMP
/// entropy, and it may well be a well-known port such as 53 or 69.
pub(crate) fn check_roce_port(datagram: &[u8]) -> Result<(), Error> {
    check_len(Layer::Udp, HEADER_LEN, datagram.len())?;
    let udp = UdpPacket::new_unchecked(datagram);
    if udp.dst_port() != ROCE_V2_PORT {
        return Err(Error::NotRoce(crate::NotRoce::UdpPort(udp.dst_port())));
    }
    Ok(())
}

/// Checks that the UDP length agrees with the IP length (`datagram` is the whole IP payload),
/// and returns the source port.
pub(crate) fn check_len_and_read_src_port(datagram: &[u8]) -> Result<u16, Error> {
    check_len(Layer::Udp, HEADER_LEN, datagram.len())?;
    let udp = UdpPacket::new_unchecked(datagram);
    if usize::from(udp.len()) != datagram.len() {
        return Err(malformed(
            Layer::Udp,
            "length",
            udp.len().into(),
            "disagrees with the IP length",
        ));
    }
    Ok(udp.src_port())
}

/// Writes a RoCEv2 UDP header for a datagram of `udp_len` bytes, header included.
pub(crate) fn emit(buf: &mut [u8], src_port: u16, udp_len: usize) {
    let mut udp = UdpPacket::new_unchecked(&mut buf[..HEADER_LEN]);
    udp.set_src_port(src_port);
    udp.set_dst_port(ROCE_V2_PORT);
    udp.set_len(udp_len as u16);
    udp.set_checksum(0);
}

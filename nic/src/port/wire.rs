//! smoltcp's view of the port: a `phy::Device` whose receive side yields the frames the engine
//! handed to the IP stack, and whose transmit side builds a frame in one of the engine's
//! buffers and sends it through the engine's [`Tx`], like any RoCE packet.

use std::collections::VecDeque;

use smoltcp::phy::{self, Checksum, DeviceCapabilities, Medium};
use smoltcp::time::Instant;
use tracing::trace;

use crate::buf::{FrameBuf, FRAME_CAPACITY};
use crate::transport::Tx;

/// The device for one poll of the interface.
pub(super) struct Wire<'a> {
    pub inbox: &'a mut VecDeque<FrameBuf>,
    pub tx: &'a mut Tx,
    /// The link's IP MTU.
    pub mtu: usize,
    /// Frames sent during this poll.
    pub sent: usize,
}

/// One received frame.
pub(super) struct Incoming(FrameBuf);

/// The right to send one frame.
pub(super) struct Outgoing<'a> {
    tx: &'a mut Tx,
    sent: &'a mut usize,
}

/// Bytes of an (untagged) Ethernet header, which smoltcp counts in the device's MTU.
const ETHERNET_HEADER: usize = 14;

impl phy::Device for Wire<'_> {
    type RxToken<'b>
        = Incoming
    where
        Self: 'b;
    type TxToken<'b>
        = Outgoing<'b>
    where
        Self: 'b;

    fn receive(&mut self, _: Instant) -> Option<(Incoming, Outgoing<'_>)> {
        let frame = self.inbox.pop_front()?;
        Some((
            Incoming(frame),
            Outgoing {
                tx: self.tx,
                sent: &mut self.sent,
            },
        ))
    }

    fn transmit(&mut self, _: Instant) -> Option<Outgoing<'_>> {
        Some(Outgoing {
            tx: self.tx,
            sent: &mut self.sent,
        })
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut caps = DeviceCapabilities::default();
        caps.medium = Medium::Ethernet;
        // Never more than a frame buffer holds, so a frame smoltcp builds always fits.
        caps.max_transmission_unit = (self.mtu + ETHERNET_HEADER).min(FRAME_CAPACITY);
        // TCP and UDP checksums are computed on send but not verified on receive, as by a NIC
        // with receive checksum offload: a kernel on the same machine (the far end of a veth
        // or tap) hands over its segments with the checksum left for hardware to fill in
        // (CHECKSUM_PARTIAL), and a real wire's frames are guarded by the Ethernet FCS.
        caps.checksum.tcp = Checksum::Tx;
        caps.checksum.udp = Checksum::Tx;
        caps
    }
}

impl phy::RxToken for Incoming {
    fn consume<R, F>(self, f: F) -> R
    where
        F: FnOnce(&[u8]) -> R,
    {
        trace!(len = self.0.len(), "frame in: to the port's IP stack");
        f(&self.0)
    }
}

impl phy::TxToken for Outgoing<'_> {
    fn consume<R, F>(self, len: usize, f: F) -> R
    where
        F: FnOnce(&mut [u8]) -> R,
    {
        let mut buf = self.tx.pool().take();
        buf.set_len(len);
        let result = f(&mut buf);
        trace!(len = buf.len(), "frame out: from the port's IP stack");
        self.tx.transmit(buf);
        *self.sent += 1;
        result
    }
}

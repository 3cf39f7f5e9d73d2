//! What each port saw: the figures a switch's CLI shows, and what the fabric's tests and the
//! congestion-control work read.

use serde::Serialize;

/// One port's counters. Queue figures are of the port's egress queue, in bytes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct PortCounters {
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    /// Frames sent out of this port because their destination was unknown or a group.
    pub flooded: u64,
    /// Frames dropped at this port's full egress queue (tail drop).
    pub dropped: u64,
    /// ECN-capable frames marked CE at this port's egress queue.
    pub ecn_marked: u64,
    /// ECN-capable frames that joined the queue (marked or not).
    pub ecn_capable: u64,
    /// Bytes waiting in the egress queue now, and the most there ever were.
    pub queue_bytes: u64,
    pub queue_max_bytes: u64,
    /// Pause frames this port sent to its peer: asking it to stop (XOFF) and to go on (XON).
    pub pause_xoff_sent: u64,
    pub pause_xon_sent: u64,
    /// Pause frames this port's peer sent us.
    pub pause_received: u64,
    /// Frames the link could not take (its socket buffer was full).
    pub tx_lost: u64,
}

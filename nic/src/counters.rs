//! The NIC's counters: every frame in and out, every drop by its reason, every NAK and retry.
//! Each engine thread writes a set of its own ([`CounterSets`]); anyone may read their sum at any
//! time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

macro_rules! counters {
    ($($field:ident: $doc:literal,)*) => {
        /// Live counters, updated by the engine.
        #[derive(Debug, Default)]
        pub struct Counters {
            $(#[doc = $doc] pub $field: AtomicU64,)*
        }

        /// A copy of the counters at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
        pub struct Snapshot {
            $(#[doc = $doc] pub $field: u64,)*
        }

        impl Counters {
            pub fn snapshot(&self) -> Snapshot {
                Snapshot { $($field: self.$field.load(Ordering::Relaxed),)* }
            }
        }

        impl Snapshot {
            /// Every counter with its name and meaning, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, &'static str, u64)> {
                [$((stringify!($field), $doc, self.$field),)*].into_iter()
            }

            /// The sum `self + other`, counter by counter.
            pub fn plus(&self, other: &Snapshot) -> Snapshot {
                Snapshot { $($field: self.$field.wrapping_add(other.$field),)* }
            }

            /// The difference `self - earlier`, counter by counter.
            pub fn since(&self, earlier: &Snapshot) -> Snapshot {
                Snapshot { $($field: self.$field.wrapping_sub(earlier.$field),)* }
            }
        }
    };
}

counters! {
    rx_frames: "frames received from the link",
    rx_bytes: "bytes received from the link",
    tx_frames: "frames sent to the link",
    tx_bytes: "bytes sent to the link",
    tx_dropped: "frames the link could not take (dropped as on a full wire)",
    rx_not_roce: "frames that were not RoCE (given to the port's IP stack)",
    rx_looped: "frames from our own MAC (looped back to us) dropped",
    port_rx_dropped: "frames for the port's IP stack dropped because its queue was full",
    rx_icrc_errors: "RoCE packets dropped for a bad ICRC",
    rx_malformed: "RoCE packets dropped as malformed (bad lengths or fields)",
    rx_not_for_us: "RoCE packets for another MAC or IP address",
    rx_unknown_qp: "RoCE packets for a QP that does not exist",
    rx_wrong_transport: "packets whose opcode does not fit the QP's transport",
    rx_wrong_address: "RC/UC packets dropped for coming from or going to an address other than the connected QP's",
    rx_bad_state: "packets dropped because the QP's state does not accept them",
    rx_bad_tver: "packets dropped for a transport version (BTH TVer) other than 0",
    rx_bad_pkey: "packets dropped because their P_Key does not match the QP's (another partition, or both limited members)",
    rx_qkey_mismatch: "UD datagrams dropped for a wrong Q_Key",
    rx_no_receive: "UC/UD messages dropped because no receive was posted",
    malformed_receives: "receive requests a host posted malformed (completed with a local length error)",
    srq_limit_events: "SRQ limit events (a take left fewer receives posted than the armed limit)",
    rx_duplicates: "duplicate request packets (re-acknowledged, never re-executed)",
    rx_out_of_sequence: "request packets ahead of the expected PSN",
    rx_stale_responses: "responses for PSNs already acknowledged, or unexpected",
    uc_messages_dropped: "UC messages dropped whole after a lost packet",
    acks_sent: "ACK packets sent",
    acks_received: "ACK packets received",
    naks_sent_psn_sequence: "NAKs sent: PSN sequence error",
    naks_sent_invalid_request: "NAKs sent: invalid request",
    naks_sent_remote_access: "NAKs sent: remote access error",
    naks_sent_remote_operational: "NAKs sent: remote operational error",
    rnr_naks_sent: "RNR NAKs sent (SEND with no receive posted)",
    naks_received_psn_sequence: "NAKs received: PSN sequence error",
    naks_received_invalid_request: "NAKs received: invalid request",
    naks_received_remote_access: "NAKs received: remote access error",
    naks_received_remote_operational: "NAKs received: remote operational error",
    rnr_naks_received: "RNR NAKs received",
    retransmitted_packets: "request packets sent again (go-back-N)",
    retransmit_timeouts: "retransmission timer expiries",
    tail_probes: "oldest unacknowledged packets sent again because the line went quiet",
    loss_window_cuts: "times a requester's loss window was cut (a loss episode, or a timeout)",
    rnr_retries: "retries after an RNR wait",
    read_responses_sent: "RDMA READ response packets sent",
    atomics_executed: "atomic operations executed on host memory",
    atomic_replays: "duplicate atomics answered from the saved result",
    dma_write_bytes: "bytes written into host memory",
    dma_read_bytes: "bytes read from host memory",
    completions: "completion queue entries written",
    completion_errors: "completions with an error status",
    cq_overflows: "completions lost because a completion queue was full (it is in error then)",
    ecn_ce_received: "RoCE packets received marked CE (a queue on the way was congested)",
    cnps_sent: "CNPs sent (DCQCN notification point: marked packets arrived)",
    cnps_received: "CNPs received for a QP with DCQCN",
    cnps_ignored: "CNPs received for a QP without DCQCN, or for no QP",
    dcqcn_rate_cuts: "rate cuts made by DCQCN reaction points",
    dcqcn_throttled: "times a requester waited for its QP's DCQCN rate limiter",
    bad_doorbells: "QP numbers rung in a doorbell record that the ringing host does not own (or no longer has)",
    shard_rx_dropped: "frames for a QP dropped because its engine thread's queue was full (`--threads`)",
}

/// Adds one. Each set has one writer (its engine thread), so a relaxed load and store suffice
/// (no locked instruction on the data path).
#[inline]
pub fn bump(counter: &AtomicU64) {
    add(counter, 1)
}

#[inline]
pub fn add(counter: &AtomicU64, n: u64) {
    counter.store(
        counter.load(Ordering::Relaxed).wrapping_add(n),
        Ordering::Relaxed,
    );
}

/// The counters of a device: one set per engine thread, each written by that thread alone (so
/// that no counter is a contended cache line or a locked instruction), read as their sum.
#[derive(Debug)]
pub struct CounterSets {
    sets: Box<[Arc<Counters>]>,
}

impl CounterSets {
    /// `n` sets (at least one), all zero.
    pub fn new(n: usize) -> Arc<CounterSets> {
        Arc::new(CounterSets {
            sets: (0..n.max(1)).map(|_| Arc::default()).collect(),
        })
    }

    /// The set of engine thread `k` (0: the port thread).
    pub fn set(&self, k: usize) -> &Arc<Counters> {
        &self.sets[k]
    }

    /// Thread `k`'s counters alone, `None` past the last thread.
    pub fn snapshot_of(&self, k: usize) -> Option<Snapshot> {
        self.sets.get(k).map(|set| set.snapshot())
    }

    /// The device's counters: every thread's added up.
    pub fn snapshot(&self) -> Snapshot {
        self.sets
            .iter()
            .fold(Snapshot::default(), |sum, set| sum.plus(&set.snapshot()))
    }
}

//! What the demo and the target program say to each other: one JSON object a line, over the
//! target's standard input and output (or channels, when the target is a thread). This is the
//! "out of band" of RDMA: real programs exchange the same keys over TCP or rdma_cm.

use serde::{Deserialize, Serialize};

/// What the target shares so that the initiator can reach its memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Shared {
    pub pid: u32,
    /// The thread that runs the target program (the target of the in-process demo is a thread).
    pub tid: i32,
    pub qpn: u32,
    pub psn: u32,
    /// The GID as 32 hex digits.
    pub gid: String,
    pub rkey: u32,
    pub lkey: u32,
    /// The registered memory's first address, in the target's own address space.
    pub va: u64,
    pub len: u64,
    /// The rights granted, as ibverbs access bits.
    pub access: u32,
    /// A host of the allreduce ring has a second QP, to send to the next host on (`qpn` and
    /// `psn` are those of the QP the previous host sends to).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_qp: Option<QpEnd>,
}

/// A QP's number and first PSN: what its peer needs to connect to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpEnd {
    pub qpn: u32,
    pub psn: u32,
}

/// A neighbour in the allreduce ring, as a host connects to it: its QP, its NIC's GID, and
/// (for the next host, which this one writes to) its memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RingPeer {
    pub qp: QpEnd,
    pub gid: String,
    pub rkey: u32,
    pub va: u64,
}

/// From the target to the demo.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "say", rename_all = "snake_case")]
pub enum FromTarget {
    /// Memory registered and a QP made: here is what the initiator needs.
    Ready(Shared),
    Connected,
    ReceivePosted {
        addr: u64,
        length: u32,
    },
    /// Bytes of its own memory, as the target program reads them.
    Found {
        offset: u64,
        bytes: Vec<u8>,
    },
    /// A completion woke the target; `bytes` is what it then found where the data landed.
    Woken {
        opcode: String,
        status: String,
        byte_len: u32,
        imm: Option<u32>,
        offset: u64,
        bytes: Vec<u8>,
        /// When it woke, in microseconds since the Unix epoch.
        at_us: u64,
    },
    /// tcp-vs-rdma: listening on this loopback TCP port.
    Listening {
        port: u16,
    },
    /// tcp-vs-rdma: accepted the sender's connection.
    Accepted,
    /// tcp-vs-rdma: the bytes came over TCP; when the first and the last were in its memory (in
    /// microseconds since the Unix epoch), in how many reads.
    TcpReceived {
        first_at_us: u64,
        last_at_us: u64,
        reads: u64,
    },
    /// allreduce: the ring all-reduce ran; what each step did.
    Reduced(crate::allreduce::host::Report),
    Failed {
        why: String,
    },
}

/// From the demo to the target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "do", rename_all = "snake_case")]
pub enum ToTarget {
    /// Connect the QP to the initiator's.
    Connect { qpn: u32, psn: u32, gid: String },
    /// Post a receive for the rest of the region from the scenario's offset.
    PostReceive,
    /// Sleep until a completion arrives (at most `timeout_ms`).
    AwaitCompletion { timeout_ms: u64 },
    /// Read `len` bytes of the region from `offset`.
    Look { offset: u64, len: u64 },
    /// tcp-vs-rdma: listen on a loopback TCP port for the sender.
    Listen,
    /// tcp-vs-rdma: accept the sender's connection (at most `timeout_ms`).
    Accept { timeout_ms: u64 },
    /// tcp-vs-rdma: read `len` bytes from the connection into the region at `offset`, as a
    /// TCP receiver does (at most `timeout_ms`).
    ReceiveTcp {
        offset: u64,
        len: u64,
        timeout_ms: u64,
    },
    /// allreduce: connect to both neighbours in the ring.
    JoinRing { next: RingPeer, prev: RingPeer },
    /// allreduce: run the ring all-reduce (at most `timeout_ms`).
    AllReduce { timeout_ms: u64 },
}

/// Most bytes a target reports of what it found: enough to show, not to move a gigabyte
/// through a pipe (the demo checks every byte itself, through its own mapping).
pub const REPORTED: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_one_json_line_each_and_read_back() {
        let shared = FromTarget::Ready(Shared {
            pid: 7,
            tid: 8,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: "00000000000000000000ffff0a000002".into(),
            rkey: 0x100,
            lkey: 0x100,
            va: 0x7f00_0000_0000,
            len: 65536,
            access: 3,
            send_qp: None,
        });
        for message in [shared, FromTarget::Connected] {
            let line = serde_json::to_string(&message).unwrap();
            assert!(!line.contains('\n'));
            assert_eq!(serde_json::from_str::<FromTarget>(&line).unwrap(), message);
        }
        let line = serde_json::to_string(&ToTarget::Look { offset: 64, len: 8 }).unwrap();
        assert_eq!(line, r#"{"do":"look","offset":64,"len":8}"#);
        // Shared without the ring's second QP reads as before.
        let line = r#"{"say":"ready","pid":1,"tid":2,"qpn":17,"psn":5,"gid":"00","rkey":1,"lkey":1,"va":0,"len":8,"access":3}"#;
        let FromTarget::Ready(shared) = serde_json::from_str(line).unwrap() else {
            panic!("not ready")
        };
        assert_eq!(shared.send_qp, None);
    }
}

//! The scenarios: each a different way of moving bytes between two hosts, chosen to show one
//! thing about RDMA.

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    Write,
    Read,
    Send,
    Atomic,
    Loss,
    Imm,
    TcpVsRdma,
    Allreduce,
    Connect,
    Congestion,
}

impl Scenario {
    pub const ALL: [Scenario; 10] = [
        Scenario::Write,
        Scenario::Read,
        Scenario::Send,
        Scenario::Atomic,
        Scenario::Loss,
        Scenario::Imm,
        Scenario::TcpVsRdma,
        Scenario::Allreduce,
        Scenario::Connect,
        Scenario::Congestion,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scenario::Write => "write",
            Scenario::Read => "read",
            Scenario::Send => "send",
            Scenario::Atomic => "atomic",
            Scenario::Loss => "loss",
            Scenario::Imm => "imm",
            Scenario::TcpVsRdma => "tcp-vs-rdma",
            Scenario::Allreduce => "allreduce",
            Scenario::Connect => "connect",
            Scenario::Congestion => "congestion",
        }
    }

    /// What the scenario shows, in one line (for `--help`), as the default mode runs it: with
    /// the target frozen.
    pub fn summary(self) -> String {
        self.summary_with("frozen")
    }

    /// The summary with `target` saying what the target does meanwhile: "frozen" for a process
    /// stopped with SIGSTOP, "idle" for `--in-process`, where the target is a waiting thread.
    pub fn summary_with(self, target: &str) -> String {
        match self {
            Scenario::Write => format!(
                "RDMA WRITE: the initiator puts bytes into the {target} target's memory (default)"
            ),
            Scenario::Read => {
                format!("RDMA READ: the initiator fetches bytes from the {target} target's memory")
            }
            Scenario::Send => format!(
                "two-sided SEND: refused (RNR NAK) while the {target} target has no receive \
                 posted, delivered once it posts one"
            ),
            Scenario::Atomic => {
                format!("fetch-and-add on a counter in the {target} target's memory")
            }
            Scenario::Loss => {
                "RDMA WRITE with one packet dropped on the wire: sequence NAK and retransmission"
                    .to_owned()
            }
            Scenario::Imm => "RDMA WRITE with immediate: the sleeping target is woken by a \
                 completion once the data is in place"
                .to_owned(),
            Scenario::TcpVsRdma => "the same bytes over a kernel TCP socket and by RDMA WRITE: \
                 what each costs the receiving computer's CPU"
                .to_owned(),
            Scenario::Allreduce => "ring all-reduce over RDMA WRITE with immediate, as AI \
                 training does: every host ends with the sum, its CPU only adding"
                .to_owned(),
            Scenario::Connect => "the RDMA connection manager's handshake on QP1 (REQ, REP, RTU, \
                 DREQ, DREP), each MAD field by field, and the QP state each side reaches"
                .to_owned(),
            Scenario::Congestion => "an incast of several senders into one switch port, \
                 without and with DCQCN: tail drops, then ECN marks, CNPs and fair shares"
                .to_owned(),
        }
    }

    /// Whether the scenario is one operation between an initiator and a target (the others
    /// are lessons of their own: [`crate::tcp_vs_rdma`], [`crate::allreduce`]).
    pub fn is_pair(self) -> bool {
        !matches!(
            self,
            Scenario::TcpVsRdma | Scenario::Allreduce | Scenario::Connect | Scenario::Congestion
        )
    }

    /// Whether the target stays frozen (SIGSTOP) while the NICs do the work: true for the
    /// one-sided operations, whose proof is the target's unchanged CPU time. A SEND needs the
    /// target to post a receive, and a WRITE with immediate wakes it.
    pub fn target_frozen(self) -> bool {
        matches!(
            self,
            Scenario::Write | Scenario::Read | Scenario::Atomic | Scenario::Loss
        )
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(text: &str) -> Result<Scenario, String> {
        Scenario::ALL
            .into_iter()
            .find(|s| s.name() == text)
            .ok_or_else(|| {
                let names: Vec<&str> = Scenario::ALL.iter().map(|s| s.name()).collect();
                format!("{text:?} is not a scenario (known: {})", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_others_are_refused() {
        for s in Scenario::ALL {
            assert_eq!(s.name().parse::<Scenario>(), Ok(s));
            assert!(!s.summary().contains('\n'));
        }
        assert_eq!(
            "writ".parse::<Scenario>(),
            Err("\"writ\" is not a scenario (known: write, read, send, atomic, loss, imm, tcp-vs-rdma, \
             allreduce, connect, congestion)".into())
        );
    }
}

//! The agent in the guest (tests/interop/guest/rxe-agent.c), driven over its TCP connection:
//! one command a line, one answer a line.

use super::*;

/// The agent in the guest, over its TCP connection.
pub(super) struct Agent {
    pub(super) reader: BufReader<UnixStream>,
    pub(super) writer: UnixStream,
}

/// A QP the agent made: what its peer needs to know.
#[derive(Debug, Clone, Copy)]
pub(super) struct Remote {
    pub(super) qpn: u32,
    pub(super) psn: u32,
    pub(super) rkey: u32,
    pub(super) va: u64,
    pub(super) gid: Gid,
}

/// A completion the agent reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct AgentWc {
    pub(super) status: WcStatus,
    pub(super) opcode: u32,
    pub(super) byte_len: u32,
}

impl Agent {
    pub(super) fn new(stream: UnixStream) -> Agent {
        stream
            .set_read_timeout(Some(COMPLETION_WAIT + Duration::from_secs(30)))
            .unwrap();
        Agent {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        }
    }

    /// One command, one answer.
    pub(super) fn ask(&mut self, command: &str) -> String {
        writeln!(self.writer, "{command}").expect("writing to the agent");
        let mut answer = String::new();
        let n = self
            .reader
            .read_line(&mut answer)
            .unwrap_or_else(|e| panic!("the agent's answer to {command:?}: {e}"));
        assert!(n > 0, "the agent hung up after {command:?}");
        answer.trim_end().to_owned()
    }

    pub(super) fn ok(&mut self, command: &str) {
        let answer = self.ask(command);
        assert_eq!(answer, "ok", "the agent's answer to {command:?}");
    }

    /// A fresh QP: RC (left in INIT) or UD with `qkey` (in RTS).
    pub(super) fn qp(&mut self, ud_qkey: Option<u32>) -> Remote {
        let command = match ud_qkey {
            None => format!("qp rc {GID_INDEX}"),
            Some(qkey) => format!("qp ud {GID_INDEX} {qkey:#x}"),
        };
        let answer = self.ask(&command);
        let words: Vec<&str> = answer.split_whitespace().collect();
        let parsed = match words[..] {
            ["qp", qpn, psn, rkey, va, gid] => (|| {
                Some(Remote {
                    qpn: qpn.parse().ok()?,
                    psn: psn.parse().ok()?,
                    rkey: rkey.parse().ok()?,
                    va: va.parse().ok()?,
                    gid: Gid::parse(gid)?,
                })
            })(),
            _ => None,
        };
        parsed.unwrap_or_else(|| panic!("the agent's answer to {command:?}: {answer:?}"))
    }

    /// Connects the agent's RC QP to ours.
    pub(super) fn connect(&mut self, ours: &Local, timeout: u8, retry: u8, rnr_retry: u8) {
        self.ok(&format!(
            "rtr {} {} {} {GID_INDEX} {} {timeout} {retry} {rnr_retry} {MIN_RNR_TIMER}",
            ours.qp.qp_num(),
            ours.psn,
            ours.gid.to_hex(),
            MTU as u8,
        ));
    }

    /// Posts one request; the errno when ibv_post_send refuses it.
    pub(super) fn post(&mut self, request: &str) -> Result<(), i32> {
        let answer = self.ask(&format!("post {request}"));
        if answer == "ok" {
            return Ok(());
        }
        answer
            .strip_prefix("err ")
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .map_or_else(
                || panic!("the agent's answer to post {request}: {answer:?}"),
                Err,
            )
    }

    pub(super) fn poll(&mut self, wait: Duration) -> Option<AgentWc> {
        let answer = self.ask(&format!("poll {}", wait.as_millis()));
        if answer == "none" {
            return None;
        }
        let words: Vec<u32> = answer
            .strip_prefix("wc ")
            .map(|r| {
                r.split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        match words[..] {
            [status, opcode, byte_len] => Some(AgentWc {
                status: WcStatus::from_u8(status as u8),
                opcode,
                byte_len,
            }),
            _ => panic!("the agent's answer to poll: {answer:?}"),
        }
    }

    pub(super) fn peek(&mut self, offset: u32, len: u32) -> Vec<u8> {
        let answer = self.ask(&format!("peek {offset} {len}"));
        let hex = answer
            .strip_prefix("mem ")
            .unwrap_or_else(|| panic!("the agent's answer to peek: {answer:?}"));
        (0..hex.len() / 2)
            .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    }
}

//! rdma-core's `ibv_rc_pingpong`, `ibv_uc_pingpong`, `ibv_ud_pingpong` and `ibv_srq_pingpong`:
//! two sides swap QP addresses over TCP, then bounce a SEND of `size` bytes back and forth
//! `iters` times.
//!
//! What goes on the wire is the real tools': the same address records ([`dest`]), the same QP
//! attributes (path MTU from `-m`, 1024 unless given; timeout 14, retry 7, RNR retry 7, one
//! outstanding READ/atomic each way; UD Q_Key 0x11111111), SENDs of exactly `size` bytes, and
//! the same ping-pong schedule (`traffic.rs`). `srq` makes the same 256-record exchange and the
//! same traffic on `-q` QPs as `ibv_srq_pingpong`, whose QPs take their receives from one
//! shared receive queue, as the real tool's do.
//!
//! What is checked that the real tools do not check: every message that arrives has exactly
//! `size` bytes (plus the 40-byte GRH area for UD, whose IPv4 header must name the peer), and
//! every byte is what the tools send — their fill byte ([`Transport::fill`]), except with `-c`
//! (the tools' `--chk`), where the first byte of each 4 KiB page is 0.

pub mod dest;
mod setup;
mod traffic;

use std::fmt;
use std::io::Write;
use std::time::Duration;

use roce_nic::verbs::{Context, Mtu};

use crate::oob::{Channel, Limits, Role};
use crate::ToolError;
use dest::{AddressLine, Dest, DONE, RECORD_LEN};

/// The four pingpong programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Rc,
    Uc,
    Ud,
    Srq,
}

impl Transport {
    /// The byte the real program fills its buffer with (and so sends): ibv_srq_pingpong
    /// clears it, the others fill it with 0x7b.
    pub fn fill(self) -> u8 {
        match self {
            Transport::Srq => 0,
            Transport::Rc | Transport::Uc | Transport::Ud => 0x7b,
        }
    }

    /// The real program's name.
    pub fn program(self) -> &'static str {
        match self {
            Transport::Rc => "ibv_rc_pingpong",
            Transport::Uc => "ibv_uc_pingpong",
            Transport::Ud => "ibv_ud_pingpong",
            Transport::Srq => "ibv_srq_pingpong",
        }
    }
}

/// ibv_srq_pingpong always exchanges this many records, whatever `-q` says.
pub const SRQ_RECORDS: usize = 256;
/// The page size whose first bytes `-c` sets to zero (the guest's `sysconf(_SC_PAGESIZE)`).
pub const CHECK_PAGE: usize = 4096;

/// The options, named as the real tools' flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    pub transport: Transport,
    /// `-s`: bytes per message.
    pub size: u32,
    /// `-n`: round trips (in total over all QPs for `srq`).
    pub iters: u32,
    /// `-m`: the path MTU of connected QPs.
    pub mtu: Mtu,
    /// `-g`: the GID index to send from (1 is the NIC's IPv4 address).
    pub gid_index: u8,
    /// `-p`: the TCP port of the exchange.
    pub port: u16,
    /// `-r`: receives kept posted (over all QPs).
    pub rx_depth: u32,
    /// `-q`: QPs of `srq`.
    pub num_qp: u32,
    /// `-c`: the client marks each page's first byte (and the real server checks it).
    pub check: bool,
    pub limits: Limits,
}

impl Options {
    /// The real tools' defaults, except the GID index: they send no GID unless given `-g`,
    /// which cannot work on RoCE.
    pub fn new(transport: Transport) -> Options {
        Options {
            transport,
            size: if transport == Transport::Ud {
                1024
            } else {
                4096
            },
            iters: 1000,
            mtu: Mtu::M1024,
            gid_index: 1,
            port: 18515,
            rx_depth: 500,
            num_qp: 16,
            check: false,
            limits: Limits::default(),
        }
    }

    fn qps(&self) -> usize {
        if self.transport == Transport::Srq {
            self.num_qp as usize
        } else {
            1
        }
    }

    fn records(&self) -> usize {
        if self.transport == Transport::Srq {
            SRQ_RECORDS
        } else {
            1
        }
    }

    fn check_against(&self, ctx: &Context) -> Result<(), ToolError> {
        let usage = |m: String| Err(ToolError::Usage(m));
        let max = ctx.device().max_mtu;
        if self.size == 0 || self.iters == 0 || self.rx_depth == 0 {
            return usage("the size, the iterations and the receive depth must be above 0".into());
        }
        if self.transport == Transport::Srq && !(1..SRQ_RECORDS as u32).contains(&self.num_qp) {
            return usage(format!(
                "ibv_srq_pingpong takes 1 to {} QPs, not {}",
                SRQ_RECORDS - 1,
                self.num_qp
            ));
        }
        if self.transport == Transport::Ud && self.size > max.bytes() {
            return usage(format!(
                "a UD message of {} bytes does not fit the NIC's MTU of {max} bytes",
                self.size
            ));
        }
        if self.transport != Transport::Ud && self.mtu > max {
            return usage(format!(
                "path MTU {} is above the NIC's largest, {max} (raise the link MTU)",
                self.mtu
            ));
        }
        if ctx.gid(self.gid_index).is_none() {
            return usage(format!("the NIC has no GID at index {}", self.gid_index));
        }
        Ok(())
    }
}

/// What a finished run measured and checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub size: u32,
    pub iters: u32,
    pub elapsed: Duration,
    /// Messages received and checked byte by byte.
    pub verified: u64,
}

impl fmt::Display for Report {
    /// The tools' two result lines (bytes counted both ways, as they count them).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let usec = self.elapsed.as_secs_f64() * 1e6;
        let bytes = 2 * u64::from(self.size) * u64::from(self.iters);
        writeln!(
            f,
            "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
            usec / 1e6,
            bytes as f64 * 8.0 / usec
        )?;
        write!(
            f,
            "{} iters in {:.2} seconds = {:.2} usec/iter",
            self.iters,
            usec / 1e6,
            usec / f64::from(self.iters)
        )
    }
}

/// Runs one pingpong against a real (or emulated) peer, printing what the real tool prints to
/// `out`, and one more line saying what was checked.
pub fn run(
    ctx: &Context,
    opts: &Options,
    role: Role,
    out: &mut dyn Write,
) -> Result<Report, ToolError> {
    opts.check_against(ctx)?;
    let mut side = setup::Side::new(ctx, opts)?;
    let local = side.local_dests();
    let sep = if opts.transport == Transport::Ud {
        ':'
    } else {
        ','
    };
    for dest in &local {
        writeln!(
            out,
            "{}",
            AddressLine {
                side: "local",
                dest,
                sep
            }
        )?;
    }
    let remote = exchange(ctx, opts, role, &local, &mut side)?;
    for dest in &remote {
        let line = AddressLine {
            side: "remote",
            dest,
            sep: ',',
        };
        writeln!(out, "{line}")?;
    }
    let report = traffic::run(&side, opts, role)?;
    writeln!(out, "{report}")?;
    writeln!(
        out,
        "verified: {} messages received, each {} bytes as {} sends them",
        report.verified,
        opts.size,
        opts.transport.program()
    )?;
    Ok(report)
}

/// The address exchange. A server connects its QPs before it answers (so that the client's
/// first SEND, which follows the exchange at once, finds them ready); a client connects its
/// QPs once it has sent `done`.
fn exchange(
    ctx: &Context,
    opts: &Options,
    role: Role,
    local: &[Dest],
    side: &mut setup::Side,
) -> Result<Vec<Dest>, ToolError> {
    let mut channel = Channel::open(ctx, role, opts.port, opts.limits)?;
    let records = opts.records();
    let mine: Vec<[u8; RECORD_LEN]> = (0..records)
        .map(|i| local.get(i).copied().unwrap_or_default().encode())
        .collect();
    let remote = if channel.is_server() {
        let remote = receive_records(&mut channel, records, opts.qps())?;
        side.connect(&remote, opts)?;
        for record in &mine {
            channel.send(record)?;
        }
        let done = channel.recv(DONE.len(), "done")?;
        if done != DONE {
            return Err(ToolError::Protocol(format!(
                "{:?} where the client says done",
                done.escape_ascii().to_string()
            )));
        }
        channel.finish(b"")?;
        remote
    } else {
        for record in &mine {
            channel.send(record)?;
        }
        let remote = receive_records(&mut channel, records, opts.qps())?;
        channel.send(DONE)?;
        channel.finish(b"")?;
        side.connect(&remote, opts)?;
        remote
    };
    Ok(remote)
}

/// Reads `records` address records and keeps the first `used`.
fn receive_records(
    channel: &mut Channel,
    records: usize,
    used: usize,
) -> Result<Vec<Dest>, ToolError> {
    let mut remote = Vec::with_capacity(used);
    for i in 0..records {
        let record = channel.recv(RECORD_LEN, "its QP address")?;
        if i < used {
            remote.push(Dest::decode(&record).map_err(ToolError::Protocol)?);
        }
    }
    Ok(remote)
}

/// The bytes of one message as the real `transport` program sends it.
pub fn expected_message(transport: Transport, size: usize, check: bool) -> Vec<u8> {
    let mut msg = vec![transport.fill(); size];
    if check {
        for page in msg.iter_mut().step_by(CHECK_PAGE) {
            *page = 0;
        }
    }
    msg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_print_as_the_tools_print_them() {
        let report = Report {
            size: 4096,
            iters: 100,
            elapsed: Duration::from_micros(349_198),
            verified: 100,
        };
        assert_eq!(
            report.to_string(),
            "819200 bytes in 0.35 seconds = 18.77 Mbit/sec\n\
             100 iters in 0.35 seconds = 3491.98 usec/iter"
        );
    }

    #[test]
    fn messages_are_fill_bytes_with_page_marks_under_check() {
        assert_eq!(expected_message(Transport::Rc, 3, false), vec![0x7b; 3]);
        assert_eq!(expected_message(Transport::Srq, 3, true), vec![0; 3]);
        let marked = expected_message(Transport::Ud, 8193, true);
        let zeros: Vec<usize> = (0..marked.len()).filter(|i| marked[*i] == 0).collect();
        assert_eq!(zeros, vec![0, 4096, 8192]);
    }
}

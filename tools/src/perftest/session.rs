//! perftest's exchange, step by step: versions, page size and cache line (each side takes the
//! larger), path MTU (each side takes the smaller), then rounds of QP records — the same
//! record each time — a bandwidth report, and `done`. Over TCP, or with `-R` over a connection
//! of the RDMA CM ([`super::rdma_cm`]), where the records are binary and there is no `done`.

use roce_nic::verbs::{Context, Mtu};
use tracing::debug;

use super::layout::Layout;
use super::messages::{self, BwReport, QpRecord, BINARY_RECORD_LEN, DONE, RECORD_LEN, VERSION_LEN};
use super::rdma_cm::CmLink;
use super::{Options, CACHE_LINE, PAGE};
use crate::oob::Channel;
use crate::ToolError;

/// What carries the exchange.
pub enum Link {
    /// TCP, through the NIC's own IP stack.
    Tcp(Channel),
    /// `-R`: SENDs on a QP the RDMA CM connected.
    Cm(CmLink),
}

impl Link {
    fn swap(&mut self, mine: &[u8], what: &'static str) -> Result<Vec<u8>, ToolError> {
        match self {
            Link::Tcp(channel) => channel.swap(mine, what),
            Link::Cm(link) => link.swap(mine, what),
        }
    }
}

pub struct Session {
    channel: Link,
    /// The GID index, which a binary record carries.
    gid_index: u8,
    mtu: Mtu,
    cycle: u64,
    cache_line: u64,
    /// The peer's first record: every later one must repeat it.
    theirs: Option<QpRecord>,
}

impl Session {
    /// The exchanges before any QP record.
    pub fn start(mut channel: Link, ctx: &Context, opts: &Options) -> Result<Session, ToolError> {
        let theirs = channel.swap(&messages::version(), "its perftest version")?;
        let version =
            messages::peer_version(&theirs[..VERSION_LEN]).map_err(ToolError::Protocol)?;
        debug!(version, "peer's perftest version");
        let page = messages::read_int(&channel.swap(&messages::int(PAGE), "its page size")?);
        let line = messages::read_int(&channel.swap(&messages::int(CACHE_LINE), "its cache line")?);
        let ours = opts.mtu.unwrap_or(ctx.device().max_mtu);
        let peer = messages::read_mtu(&channel.swap(&messages::mtu(ours), "its MTU")?);
        Ok(Session {
            channel,
            gid_index: opts.gid_index,
            mtu: peer.map_or(ours, |p| p.min(ours)),
            cycle: u64::from(page.max(PAGE)),
            cache_line: u64::from(line.max(CACHE_LINE)),
            theirs: None,
        })
    }

    pub fn mtu(&self) -> Mtu {
        self.mtu
    }

    pub fn layout(&self, size: u64) -> Layout {
        Layout {
            size,
            cycle: self.cycle,
            cache_line: self.cache_line,
        }
    }

    /// One round of records; returns the peer's.
    pub fn round(&mut self, mine: &QpRecord) -> Result<QpRecord, ToolError> {
        let theirs = match &mut self.channel {
            Link::Tcp(channel) => {
                let record = channel.swap(&mine.encode(), "its QP record")?;
                QpRecord::decode(&record[..RECORD_LEN])
            }
            Link::Cm(link) => {
                let record = link.swap(&mine.encode_binary(self.gid_index), "its QP record")?;
                QpRecord::decode_binary(&record[..BINARY_RECORD_LEN])
            }
        }
        .map_err(ToolError::Protocol)?;
        match self.theirs {
            Some(first) if first != theirs => Err(ToolError::Protocol(format!(
                "a QP record that changed during the exchange ({first:?}, then {theirs:?})"
            ))),
            _ => {
                self.theirs = Some(theirs);
                Ok(theirs)
            }
        }
    }

    /// The bandwidth report: ours out, theirs in, five numbers one after the other.
    pub fn reports(&mut self, ours: &BwReport) -> Result<BwReport, ToolError> {
        let mut theirs = [[0u8; 8]; 5];
        for (mine, slot) in ours.encode().iter().zip(theirs.iter_mut()) {
            let part = self.channel.swap(mine, "its bandwidth report")?;
            slot.copy_from_slice(&part);
        }
        Ok(BwReport::decode(&theirs))
    }

    /// The RDMA CM's connection of the test's QP (`-R`), in the exchange's order.
    pub fn link_mut(&mut self) -> Option<&mut CmLink> {
        match &mut self.channel {
            Link::Cm(link) => Some(link),
            Link::Tcp(_) => None,
        }
    }

    /// The end: over TCP `done` (unless the test says nothing more), then the close; over the
    /// RDMA CM, the disconnects.
    pub fn close(self, done: bool) -> Result<(), ToolError> {
        match self.channel {
            Link::Tcp(mut channel) if done => {
                channel.send(DONE)?;
                channel.finish(DONE)
            }
            Link::Tcp(channel) => channel.finish(b""),
            Link::Cm(link) => link.close(),
        }
    }
}

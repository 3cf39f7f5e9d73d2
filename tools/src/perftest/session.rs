//! perftest's exchange, step by step: versions, page size and cache line (each side takes the
//! larger), path MTU (each side takes the smaller), then rounds of QP records — the same
//! record each time — a bandwidth report, and `done`.

use roce_nic::verbs::{Context, Mtu};
use tracing::debug;

use super::layout::Layout;
use super::messages::{self, BwReport, QpRecord, DONE, RECORD_LEN, VERSION_LEN};
use super::{Options, CACHE_LINE, PAGE};
use crate::oob::Channel;
use crate::ToolError;

pub struct Session {
    channel: Channel,
    mtu: Mtu,
    cycle: u64,
    cache_line: u64,
    /// The peer's first record: every later one must repeat it.
    theirs: Option<QpRecord>,
}

impl Session {
    /// The exchanges before any QP record.
    pub fn start(
        mut channel: Channel,
        ctx: &Context,
        opts: &Options,
    ) -> Result<Session, ToolError> {
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
        let record = self.channel.swap(&mine.encode(), "its QP record")?;
        let theirs = QpRecord::decode(&record[..RECORD_LEN]).map_err(ToolError::Protocol)?;
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

    /// The end: `done` (unless the test says nothing more), then the close.
    pub fn close(mut self, done: bool) -> Result<(), ToolError> {
        if done {
            self.channel.send(DONE)?;
            self.channel.finish(DONE)
        } else {
            self.channel.finish(b"")
        }
    }
}

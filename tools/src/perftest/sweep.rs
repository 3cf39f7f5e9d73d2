//! `-a`: the test at every size from 2 bytes to [`MAX_SIZE`] in powers of two, one line each,
//! with the buffers of the largest. What passes between the sizes is perftest's own: nothing in
//! the one-sided and `ib_write_lat` tests; in the SEND tests the receiver posts the size's
//! receives and both sides swap records before the size runs, and `ib_send_bw` swaps them again
//! after it.

use std::io::Write;

use super::layout::Layout;
use super::messages::QpRecord;
use super::resources::Resources;
use super::session::Session;
use super::{in_units, report, Measured, Options, Phase, Test, Verb, MAX_SIZE};
use crate::oob::Role;
use crate::ToolError;

/// Whether each size is preceded by a swap of records (the SEND tests), and how many rounds of
/// records come before the sweep (counting the first): the regular test's, less that one.
pub fn rounds(test: Test) -> (bool, usize) {
    let sends = test.verb() == Verb::Send;
    (sends, test.rounds_before_run() - usize::from(sends))
}

pub struct Sweep<'a> {
    res: &'a Resources,
    opts: &'a Options,
    role: Role,
    theirs: QpRecord,
    receives: u32,
    sends: bool,
    verified: Option<String>,
}

impl<'a> Sweep<'a> {
    pub fn new(
        res: &'a Resources,
        opts: &'a Options,
        role: Role,
        theirs: &QpRecord,
        receives: u32,
        sends: bool,
    ) -> Sweep<'a> {
        Sweep {
            res,
            opts,
            role,
            theirs: *theirs,
            receives,
            sends,
            verified: None,
        }
    }

    /// Runs every size, printing each line as its size ends.
    pub fn run(
        &mut self,
        session: &mut Session,
        out: &mut dyn Write,
    ) -> Result<Measured, ToolError> {
        let passive = self.role == Role::Server && self.opts.test.server_passive();
        if !passive {
            if self.opts.test.is_bw() {
                report::bw_header(out, self.opts.report_gbits)?;
            } else {
                report::lat_header(out)?;
            }
        }
        let mut sizes = Vec::new();
        let mut size = 2;
        while size <= MAX_SIZE {
            let opts = Options { size, ..*self.opts };
            let layout = Layout {
                size,
                ..self.res.layout
            };
            let mut phase = Phase::new(
                self.res,
                &opts,
                layout,
                self.role,
                &self.theirs,
                self.receives,
            )?;
            if self.sends {
                session.round(&self.res.mine)?;
            }
            let measured = in_units(phase.run()?, self.opts);
            match &measured {
                Measured::Bw(r) => report::bw_line(out, r)?,
                Measured::Lat(l) => report::lat_line(out, l)?,
                _ => {}
            }
            if self.opts.test == Test::SendBw {
                session.round(&self.res.mine)?;
            }
            self.verified = phase.verified().map(|last| {
                format!(
                    "{} sizes from 2 to {size} bytes, each checked as one run; the last: {last}",
                    sizes.len() + 1
                )
            });
            sizes.push(measured);
            size *= 2;
        }
        Ok(Measured::Sweep(sizes))
    }

    /// What an active side checked; `None` for a passive server, which checks afterwards.
    pub fn verified(&self) -> Option<String> {
        self.verified.clone()
    }
}

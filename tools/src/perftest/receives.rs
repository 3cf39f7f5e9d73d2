//! The receives `ib_send_bw` and `ib_send_lat` keep posted: a landing buffer cut into as many
//! message-sized places as the budget allows, used in turn. Each place is filled before it is
//! posted, so that a message shorter than promised shows in the check.

use roce_nic::verbs::RecvWr;

use super::bw::landing_places;
use super::resources::Resources;
use super::verify::FILL;
use super::Options;
use crate::memory::Buffer;
use crate::ToolError;

pub struct Receives {
    landing: Buffer,
    places: u64,
    size: u64,
    /// Receives posted so far; also the next one's wr_id.
    posted: u64,
    /// Receives the run needs in all.
    iters: u64,
}

impl Receives {
    /// Makes room for up to `want` receives and posts as many as the run needs of them.
    pub fn post_first(res: &Resources, opts: &Options, want: u32) -> Result<Receives, ToolError> {
        let places = landing_places(u64::from(want), opts.size);
        let mut receives = Receives {
            landing: res.landing((places * opts.size) as usize)?,
            places,
            size: opts.size,
            posted: 0,
            iters: opts.iters,
        };
        for _ in 0..places.min(opts.iters) {
            receives.post(res)?;
        }
        Ok(receives)
    }

    /// The message that completed receive `wr_id`; its place is posted again while the run
    /// needs more receives.
    pub fn take(&mut self, res: &Resources, wr_id: u64) -> Result<Vec<u8>, ToolError> {
        let data = self.landing.read(self.at(wr_id), self.size as usize);
        if self.posted < self.iters {
            self.post(res)?;
        }
        Ok(data)
    }

    fn post(&mut self, res: &Resources) -> Result<(), ToolError> {
        let at = self.at(self.posted);
        self.landing.fill(at, self.size as usize, FILL);
        let sge = [self.landing.sge(at, self.size as u32)];
        res.qp.post_recv(&[RecvWr {
            wr_id: self.posted,
            sg_list: &sge,
        }])?;
        self.posted += 1;
        Ok(())
    }

    fn at(&self, wr_id: u64) -> usize {
        ((wr_id % self.places) * self.size) as usize
    }
}

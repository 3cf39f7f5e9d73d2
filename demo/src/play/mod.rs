//! Running a scenario: set up the [`Rig`](crate::rig::Rig), play the script (`act`), keep
//! what the HTML page needs ([`Record`]), and fail if a proof did not hold.

mod act;
mod initiator;
mod memory;

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::cpu::Sample;
use crate::events::{self, Capture};
use crate::plan::Plan;
use crate::rig::{processes, threads, Layout};
use crate::story::{Observer, Story};
use crate::wire::{Seen, Wire};
use crate::{html, DemoError, Scenario};

/// Where the NICs and the target program run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    /// Each NIC and the target program a process of its own, started from `roce`, the path
    /// of the `roce` program (this one).
    Processes { roce: PathBuf },
    /// Everything in this process (`--in-process`).
    InProcess,
}

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub scenario: Scenario,
    pub mode: Mode,
    /// Bytes to move instead of the scenario's sentence.
    pub size: Option<usize>,
    /// Write every frame to this pcap file.
    pub pcap: Option<PathBuf>,
    /// Write the HTML page to this file.
    pub html: Option<PathBuf>,
}

/// What a run leaves for the HTML page: what crossed the wire, what the target's CPU did, and
/// where its memory changed.
#[derive(Debug, Clone, Default)]
pub struct Record {
    pub frames: Vec<Seen>,
    /// Frames that crossed, listed or not.
    pub frame_count: u32,
    /// The target's time on a CPU, sampled from just before the work request to the end.
    pub samples: Vec<Sample>,
    /// When the target was frozen and thawed (since the Unix epoch), if it was.
    pub frozen: Option<(Duration, Option<Duration>)>,
    pub posted_at: Duration,
    pub completed_at: Duration,
    /// The bytes of the target's memory the NICs wrote (offsets), if any.
    pub written: Option<Range<u64>>,
    /// The bytes the NICs read from it, if any.
    pub read: Option<Range<u64>>,
    pub region_len: u64,
    pub region_va: u64,
}

/// Runs `options` and tells it to `observer`. Installs this process's logging (warnings to
/// standard error, and for `--in-process` the capture of the NICs' events), so the caller must
/// not have installed its own. Fails if a proof line did not hold, after telling it.
pub fn run(options: &Options, observer: &mut dyn Observer) -> Result<(), DemoError> {
    let plan = Plan::new(options.scenario, options.size)?;
    let wire = Wire::new(options.pcap.as_deref(), plan.dropped_frame())?;
    // Created now, so that a page that cannot be written fails the run before it starts.
    let page_file = match &options.html {
        Some(path) => Some((
            path,
            File::create(path).map_err(|e| {
                DemoError::Usage(format!("cannot create the page {}: {e}", path.display()))
            })?,
        )),
        None => None,
    };
    let mut rig = match &options.mode {
        Mode::InProcess => {
            let capture = Capture::install(plan.detailed())?;
            threads::start(&plan, Arc::clone(&wire), &capture)?
        }
        Mode::Processes { roce } => {
            events::install_plain_logging();
            processes::start(roce, &plan, Arc::clone(&wire))?
        }
    };
    let mut story = Story::new(observer);
    let record = act::play(&mut rig, &plan, &mut story)?;
    let layout: Layout = rig.layout.clone();
    // The NICs stop before the capture is closed, so it holds every frame they sent.
    drop(rig);
    wire.finish()?;
    if let Some((path, mut file)) = page_file {
        let page = html::Page {
            scenario: options.scenario,
            plan: &plan,
            layout: &layout,
            record: &record,
            beats: story.beats(),
        };
        file.write_all(page.render().as_bytes()).map_err(|e| {
            DemoError::because(&format!("cannot write the page {}", path.display()), e)
        })?;
    }
    let failed: Vec<String> = story
        .proofs()
        .filter(|(held, _)| !held)
        .map(|(_, text)| text.to_owned())
        .collect();
    match failed.first() {
        Some(first) => Err(DemoError::ProofFailed(first.clone())),
        None => Ok(()),
    }
}

//! Running a scenario: set up the [`Rig`](crate::rig::Rig), play the script (`act`), keep
//! what the HTML page needs ([`Record`]), and fail if a proof did not hold.

mod act;
pub(crate) mod initiator;
mod memory;

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::cpu::Sample;
use crate::events::{self, Capture};
use crate::plan::Plan;
use crate::rig::{processes, threads, Layout};
use crate::story::{Observer, Story};
use crate::wire::{Seen, Wire};
use crate::{html, tcp_vs_rdma, DemoError, Scenario};

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
    /// Hosts in the allreduce ring.
    pub hosts: Option<usize>,
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
    if options.scenario == Scenario::Allreduce {
        return crate::allreduce::run(options, observer);
    }
    if options.scenario == Scenario::Connect {
        return crate::connect::run(options, observer);
    }
    if options.scenario == Scenario::Congestion {
        return crate::congestion::run(options, observer);
    }
    if options.hosts.is_some() {
        return Err(DemoError::Usage(
            "--hosts applies to the allreduce scenario only".into(),
        ));
    }
    let plan = Plan::new(options.scenario, options.size)?;
    let wire = Wire::new(options.pcap.as_deref(), plan.dropped_frame())?;
    // Created now, so that a page that cannot be written fails the run before it starts.
    let page_file = match &options.html {
        Some(path) => Some((path, create_page(path)?)),
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
    let played = if options.scenario == Scenario::TcpVsRdma {
        Played::Comparison(tcp_vs_rdma::play(&mut rig, &plan, &mut story)?)
    } else {
        Played::Pair(act::play(&mut rig, &plan, &mut story)?)
    };
    let layout: Layout = rig.layout.clone();
    // The NICs stop before the capture is closed, so it holds every frame they sent.
    drop(rig);
    wire.finish()?;
    if let Some((path, mut file)) = page_file {
        let page = match &played {
            Played::Pair(record) => html::Page {
                scenario: options.scenario,
                plan: &plan,
                layout: &layout,
                record,
                beats: story.beats(),
            }
            .render(),
            Played::Comparison(record) => tcp_vs_rdma::html::Page {
                layout: &layout,
                record,
                beats: story.beats(),
            }
            .render(),
        };
        file.write_all(page.as_bytes()).map_err(|e| {
            DemoError::because(&format!("cannot write the page {}", path.display()), e)
        })?;
    }
    failed_proofs(&story)
}

/// What a scenario of two hosts leaves for its page.
enum Played {
    Pair(Record),
    Comparison(tcp_vs_rdma::Record),
}

/// The file of `--html`, created before the run so that a page that cannot be written fails
/// it at once.
pub(crate) fn create_page(path: &Path) -> Result<File, DemoError> {
    File::create(path)
        .map_err(|e| DemoError::Usage(format!("cannot create the page {}: {e}", path.display())))
}

/// Fails with the first proof line of `story` that did not hold, if any.
pub(crate) fn failed_proofs(story: &Story) -> Result<(), DemoError> {
    match story.proofs().find(|(held, _)| !held) {
        Some((_, text)) => Err(DemoError::ProofFailed(text.to_owned())),
        None => Ok(()),
    }
}

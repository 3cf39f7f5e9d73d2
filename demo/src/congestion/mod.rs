//! `roce demo --scenario congestion`: an incast — several senders writing into one receiver at
//! once through one switch port — first without congestion control, then with DCQCN. Without
//! it the port's queue fills to its buffer and the tail drops starve some flows; with it the
//! switch marks packets (RED/ECN), the receiver's NIC answers with CNPs, the senders' NICs cut
//! their rates and share the port fairly.
//!
//! It runs in simulated time (`roce_switch::incast`): the switch is `roce switch`'s own queue,
//! RED and learning code, the senders and the receiver are the NIC's own DCQCN reaction and
//! notification points, the CNPs real CNP frames — only the clock is a counter, so the curves
//! are exact and the same on every machine. (`roce fabric` runs the same code in real time.)

pub mod html;

use std::io::Write;

use roce_switch::incast::{self, jain, Config, Report, RED_1G};

use crate::play::{create_page, failed_proofs, Options};
use crate::story::{Observer, Story};
use crate::DemoError;

/// Senders by default, and the most `--hosts` takes.
pub const DEFAULT_SENDERS: usize = 4;
pub const MAX_SENDERS: usize = 16;
/// The window the fairness and the queue are judged over: after the start-up, to the end.
const SETTLED: (f64, f64) = (0.1, 0.2);

/// Both runs, for the page.
pub struct Record {
    pub senders: usize,
    pub without: Report,
    pub with: Report,
    pub config: Config,
}

pub fn run(options: &Options, observer: &mut dyn Observer) -> Result<(), DemoError> {
    if options.size.is_some() || options.pcap.is_some() {
        return Err(DemoError::Usage(
            "--size and --pcap do not apply to the congestion scenario (it runs in simulated \
             time; --hosts sets the senders)"
                .into(),
        ));
    }
    let senders = options.hosts.unwrap_or(DEFAULT_SENDERS);
    if !(2..=MAX_SENDERS).contains(&senders) {
        return Err(DemoError::Usage(format!(
            "--hosts for the congestion scenario is the senders: 2 to {MAX_SENDERS}"
        )));
    }
    let page_file = match &options.html {
        Some(path) => Some((path, create_page(path)?)),
        None => None,
    };
    let mut story = Story::new(observer);
    let record = play(senders, &mut story);
    if let Some((path, mut file)) = page_file {
        let page = html::Page {
            record: &record,
            beats: story.beats(),
        };
        file.write_all(page.render().as_bytes()).map_err(|e| {
            DemoError::because(&format!("cannot write the page {}", path.display()), e)
        })?;
    }
    failed_proofs(&story)
}

fn config(senders: usize, dcqcn: bool) -> Config {
    Config {
        flows: senders,
        ..Config::four_to_one(dcqcn)
    }
}

fn mbps(bits: f64) -> String {
    format!("{:.0} Mbit/s", bits / 1e6)
}

fn play(senders: usize, story: &mut Story) -> Record {
    let base = config(senders, true);
    story.say(format!(
        "roce demo --scenario congestion: {}",
        crate::Scenario::Congestion.summary()
    ));
    story.say(format!(
        "{senders} senders, each on its own 1 Gbit/s switch port, write as fast as they can to \
         one receiver behind one 1 Gbit/s port with a {} KiB buffer: {senders} times what the \
         port can carry. This runs in simulated time: the switch is roce switch's own queue and \
         marking code, the senders' and the receiver's congestion control the NIC's own DCQCN \
         code, the CNPs real CNP frames; only the clock is simulated, so the curves are exact \
         and the same on every machine.",
        base.buffer / 1024
    ));

    story.step("Without congestion control");
    let without = incast::run(&config(senders, false));
    let goodput = without.goodput(SETTLED.0, SETTLED.1);
    tell_run(story, &without, &goodput);
    story.say(
        "Nothing tells the senders to slow down: the queue fills to the buffer and stays there, \
         and every frame that finds it full is dropped. Which flow's frames those are is luck \
         of timing, and RDMA's go-back-N would send every one of them again.",
    );
    story.proof(
        without.dropped > 0,
        format!("without DCQCN the port dropped {} frames", without.dropped),
    );
    story.proof(
        without.mean_queue(SETTLED.0, SETTLED.1) > 0.9 * base.buffer as f64,
        format!(
            "without DCQCN the queue sat at the buffer: {:.0} KiB on average of {} KiB",
            without.mean_queue(SETTLED.0, SETTLED.1) / 1024.0,
            base.buffer / 1024
        ),
    );
    story.end_step();

    story.step("With DCQCN");
    story.say(format!(
        "Now every NIC runs DCQCN, as RoCE NICs do in hardware: the senders mark their packets \
         ECN-capable (ECT(0)); the switch marks them CE with a probability rising from 0 at \
         Kmin = {} KB of queue to {:.0}% at Kmax = {} KB (RED); the receiver's NIC answers \
         marked packets with a CNP (at most one per QP every 50 µs); each CNP cuts the sender's \
         rate by alpha/2, and while none come its rate climbs back (fast recovery, then \
         additive and hyper increase).",
        RED_1G.kmin / 1000,
        RED_1G.pmax * 100.0,
        RED_1G.kmax / 1000
    ));
    let with = incast::run(&base);
    let goodput_with = with.goodput(SETTLED.0, SETTLED.1);
    tell_run(story, &with, &goodput_with);
    let fairness = jain(&goodput_with);
    let queue = with.mean_queue(SETTLED.0, SETTLED.1);
    story.proof(
        with.marked > 0 && with.cnps > 0 && with.cuts > 0,
        format!(
            "the switch marked {} packets, the receiver sent {} CNPs, the senders cut their \
             rates {} times",
            with.marked, with.cnps, with.cuts
        ),
    );
    story.proof(
        with.dropped == 0,
        format!("with DCQCN the port dropped {} frames", with.dropped),
    );
    story.proof(
        queue < RED_1G.kmax as f64,
        format!(
            "with DCQCN the queue stayed near Kmin–Kmax: {:.1} KB on average",
            queue / 1000.0
        ),
    );
    story.proof(
        fairness >= 0.95,
        format!(
            "the flows shared the port fairly: Jain's index {fairness:.3} (1 is equal shares; \
             without DCQCN {:.3})",
            jain(&goodput)
        ),
    );
    let full: f64 = goodput.iter().sum();
    let used: f64 = goodput_with.iter().sum();
    story.proof(
        used > 0.9 * full,
        format!(
            "and the port stayed busy: {} of the {} the full queue got",
            mbps(used),
            mbps(full)
        ),
    );
    story.end_step();
    story.figures(serde_json::json!({
        "scenario": "congestion",
        "figures": "incast",
        "senders": senders,
        "without": summary(&without, &goodput),
        "with": summary(&with, &goodput_with),
    }));
    Record {
        senders,
        without,
        with,
        config: base,
    }
}

fn tell_run(story: &mut Story, report: &Report, goodput: &[f64]) {
    let mut rows: Vec<(String, String)> = goodput
        .iter()
        .enumerate()
        .map(|(n, g)| (format!("sender {n}"), mbps(*g)))
        .collect();
    rows.push((
        "queue".into(),
        format!(
            "{:.1} KB on average",
            report.mean_queue(SETTLED.0, SETTLED.1) / 1000.0
        ),
    ));
    rows.push((
        "port".into(),
        format!(
            "{} frames dropped, {} marked CE; {} CNPs",
            report.dropped, report.marked, report.cnps
        ),
    ));
    story.tell(crate::Beat::Table(rows));
}

fn summary(report: &Report, goodput: &[f64]) -> serde_json::Value {
    serde_json::json!({
        "goodput_bits_per_s": goodput,
        "jain": jain(goodput),
        "mean_queue_bytes": report.mean_queue(SETTLED.0, SETTLED.1),
        "dropped": report.dropped,
        "marked": report.marked,
        "cnps": report.cnps,
        "rate_cuts": report.cuts,
        "seconds": SETTLED,
    })
}

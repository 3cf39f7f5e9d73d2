//! An incast in simulated time: several senders into one receiver through a [`Switch`], each
//! sender's QP driven by the NIC's own DCQCN reaction point and the receiver's by its
//! notification point (`roce_nic::dcqcn`), the CNPs real CNP frames through the same switch.
//! Time passes in steps of [`STEP`]; nothing here waits, so a run is exact, repeatable and
//! takes milliseconds however loaded the machine is. The tests check DCQCN's behaviour here
//! (cuts, convergence, fairness, recovery); `roce demo --scenario congestion` plots the
//! samples; the same code runs in real time between NIC processes in the fabric.

use std::time::{Duration, Instant};

use roce_nic::dcqcn::np::{self, NotificationPoint, CNP_PAYLOAD};
use roce_nic::dcqcn::rp::ReactionPoint;
use roce_nic::dcqcn::Params;
use roce_nic::link::ecn::{self, Ecn};
use roce_nic::transport::Path;
use roce_nic::verbs::{AddressVector, Gid};
use roce_wire::{bth, EthernetAddress, Extensions, Kind, Opcode, Transport};

use crate::red::Red;
use crate::switch::{PortConfig, Switch, SwitchConfig, Transmit};

/// The simulation's clock step: shorter than one 1 KiB frame at 1 Gbit/s (8.6 µs).
pub const STEP: Duration = Duration::from_micros(1);
/// Payload of every data packet (path MTU 1024).
const PAYLOAD: usize = 1024;

/// RED for DCQCN on 1 Gbit/s ports: Kmin 5 KB as in the DCQCN paper, Kmax 50 KB (the paper's
/// 200 KB is 40 µs of its 40 Gbit/s line; 50 KB is already 400 µs of ours, and a mark takes
/// the queue's delay to reach the receiver), Pmax 10%.
pub const RED_1G: Red = Red {
    kmin: 5_000,
    kmax: 50_000,
    pmax: 0.1,
};

/// One incast.
#[derive(Debug, Clone)]
pub struct Config {
    /// Senders, each on its own port at the line rate, all to one receiver port.
    pub flows: usize,
    /// Every port's line rate (and the senders' NICs'), bits/s.
    pub line_rate: u64,
    /// The receiver port's egress buffer, bytes.
    pub buffer: usize,
    pub red: Option<Red>,
    /// DCQCN in the NICs (and ECT on their packets); `None`: senders send at line rate.
    pub dcqcn: Option<Params>,
    pub duration: Duration,
    /// When all senders but the first stop (to watch it recover), if they do.
    pub others_stop_at: Option<Duration>,
    /// How often a [`Sample`] is taken.
    pub sample_every: Duration,
}

impl Config {
    /// 4:1 at 1 Gbit/s, a 512 KiB buffer, [`RED_1G`] marking, DCQCN with the NIC's defaults,
    /// 200 ms.
    pub fn four_to_one(dcqcn: bool) -> Config {
        Config {
            flows: 4,
            line_rate: 1_000_000_000,
            buffer: 512 * 1024,
            red: Some(RED_1G),
            dcqcn: dcqcn.then(|| Params::default().with_line_rate(1_000_000_000)),
            duration: Duration::from_millis(200),
            others_stop_at: None,
            sample_every: Duration::from_millis(1),
        }
    }
}

/// The state of the incast over one sampling interval.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// End of the interval, seconds from the start.
    pub t: f64,
    /// Goodput each flow delivered to the receiver in the interval, bits/s.
    pub delivered: Vec<f64>,
    /// Each sender's rate limit at the end (its line rate without DCQCN or a limiter), bits/s.
    pub limit: Vec<f64>,
    /// The receiver port's queue at the end, bytes.
    pub queue: usize,
    /// Totals so far at the receiver port: frames marked CE, tail drops; and CNPs sent.
    pub marked: u64,
    pub dropped: u64,
    pub cnps: u64,
}

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Report {
    pub samples: Vec<Sample>,
    /// Data bytes each flow got to the receiver in all.
    pub delivered: Vec<u64>,
    pub marked: u64,
    pub dropped: u64,
    pub cnps: u64,
    /// Rate cuts by all reaction points.
    pub cuts: u64,
}

impl Report {
    /// Each flow's mean goodput over `[from, to)` seconds, bits/s.
    pub fn goodput(&self, from: f64, to: f64) -> Vec<f64> {
        let chosen: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.t > from && s.t <= to)
            .collect();
        let flows = self.delivered.len();
        (0..flows)
            .map(|f| {
                chosen.iter().map(|s| s.delivered[f]).sum::<f64>() / chosen.len().max(1) as f64
            })
            .collect()
    }

    /// The receiver port's mean queue over `[from, to)` seconds, bytes.
    pub fn mean_queue(&self, from: f64, to: f64) -> f64 {
        let q: Vec<f64> = self
            .samples
            .iter()
            .filter(|s| s.t > from && s.t <= to)
            .map(|s| s.queue as f64)
            .collect();
        q.iter().sum::<f64>() / q.len().max(1) as f64
    }
}

/// Jain's fairness index of `x`: 1 when all are equal, 1/n when one has everything.
pub fn jain(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if squares == 0.0 {
        return 1.0;
    }
    sum * sum / (x.len() as f64 * squares)
}

fn mac(host: u8) -> EthernetAddress {
    EthernetAddress([2, 0, 10, 0, 0, host])
}

fn ip(host: u8) -> std::net::IpAddr {
    std::net::Ipv4Addr::new(10, 0, 0, host).into()
}

/// Sender `f` is host `f + 1` on port `f` with QP `0x100 + f`; the receiver is host 100 on
/// port `flows`, its QP for flow `f` is `0x200 + f`.
fn path(from: u8, to: u8) -> Path {
    let av = AddressVector {
        dgid: Gid::from_ip(ip(to)),
        sgid_index: 0,
        flow_label: 0,
        hop_limit: 64,
        traffic_class: 0,
        dmac: None,
    };
    Path::new(
        mac(from),
        ip(from),
        mac(to),
        ip(to),
        0xc000 | u16::from(from),
        &av,
    )
    .expect("both IPv4")
}

const RECEIVER: u8 = 100;

fn data_frame(flow: usize, ect: bool) -> Vec<u8> {
    let opcode = Opcode::new(Transport::Rc, Kind::WriteMiddle).expect("an RC opcode");
    let repr = path(flow as u8 + 1, RECEIVER).frame(
        bth::Repr::new(opcode, 0x200 + flow as u32, 0),
        Extensions::for_opcode(opcode),
        PAYLOAD,
    );
    let mut buf = vec![0u8; repr.frame_len()];
    let len = repr.emit(&mut buf, &[0x5a; PAYLOAD]).expect("a data frame");
    buf.truncate(len);
    if ect {
        ecn::set_ecn(&mut buf, Ecn::Ect0);
    }
    buf
}

fn cnp_frame(flow: usize, params: &Params) -> Vec<u8> {
    let repr = np::cnp(
        &path(RECEIVER, flow as u8 + 1),
        0x100 + flow as u32,
        0xffff,
        params,
    );
    let mut buf = vec![0u8; repr.frame_len()];
    let len = repr.emit(&mut buf, &CNP_PAYLOAD).expect("a CNP");
    buf.truncate(len);
    buf
}

/// The flow a frame at the receiver belongs to (by its destination QP), if it is data.
fn flow_of(frame: &[u8]) -> Option<usize> {
    let parsed = roce_wire::Frame::parse(frame).ok()?;
    let qp = parsed.repr.bth.dest_qp;
    (parsed.repr.bth.opcode != Opcode::CNP && qp >= 0x200).then(|| (qp - 0x200) as usize)
}

/// Runs one incast.
pub fn run(config: &Config) -> Report {
    let n = config.flows;
    let port = PortConfig {
        rate: config.line_rate,
        buffer: config.buffer,
        red: config.red,
        pfc: None,
    };
    let mut switch: Switch<Vec<u8>> = Switch::new(SwitchConfig::new(vec![port; n + 1]));
    let t0 = Instant::now();
    let ect = config.dcqcn.is_some();
    let templates: Vec<Vec<u8>> = (0..n).map(|f| data_frame(f, ect)).collect();
    let mut rps: Vec<Option<ReactionPoint>> = (0..n)
        .map(|_| config.dcqcn.map(|p| ReactionPoint::new(p, t0)))
        .collect();
    let mut nps = vec![NotificationPoint::default(); n];
    let mut cnps: Vec<Vec<u8>> = Vec::new();
    if let Some(p) = &config.dcqcn {
        cnps = (0..n).map(|f| cnp_frame(f, p)).collect();
    }
    let serialisation = |len: usize| crate::queue::serialisation(len, config.line_rate);
    // The switch learns where the receiver is from one frame of its own.
    switch.receive(n, cnp_frame(0, &Params::default()), t0, |b| b.to_vec());
    let mut busy_until = vec![t0; n];
    let mut delivered = vec![0u64; n];
    let mut in_interval = vec![0u64; n];
    let mut cnps_sent = 0u64;
    let mut samples = Vec::new();
    let mut next_sample = t0 + config.sample_every;
    let end = t0 + config.duration;
    let mut now = t0;
    while now < end {
        let elapsed = now - t0;
        for f in 0..n {
            let stopped = f > 0 && config.others_stop_at.is_some_and(|s| elapsed >= s);
            if stopped || now < busy_until[f] {
                continue;
            }
            if let Some(rp) = &mut rps[f] {
                if !rp.may_send(now) {
                    continue;
                }
            }
            let frame = templates[f].clone();
            let len = frame.len();
            if let Some(rp) = &mut rps[f] {
                rp.on_sent(len as u64);
            }
            busy_until[f] = now + serialisation(len);
            switch.receive(f, frame, now, |b| b.to_vec());
        }
        while let Some((out, sent)) = switch.poll_transmit(now) {
            let Transmit::Frame(frame) = sent else {
                continue;
            };
            if out == n {
                let Some(f) = flow_of(&frame) else { continue };
                delivered[f] += PAYLOAD as u64;
                in_interval[f] += PAYLOAD as u64;
                if ecn::ecn(&frame) == Some(Ecn::Ce) {
                    if let Some(p) = &config.dcqcn {
                        if nps[f].on_ce(now, p) {
                            cnps_sent += 1;
                            switch.receive(n, cnps[f].clone(), now, |b| b.to_vec());
                        }
                    }
                }
            } else if let Some(rp) = &mut rps[out] {
                let is_cnp =
                    roce_wire::Frame::parse(&frame).is_ok_and(|p| p.repr.bth.opcode == Opcode::CNP);
                if is_cnp {
                    rp.on_cnp(now);
                }
            }
        }
        now += STEP;
        if now >= next_sample {
            let seconds = config.sample_every.as_secs_f64();
            let counters = switch.counters(n);
            samples.push(Sample {
                t: (now - t0).as_secs_f64(),
                delivered: in_interval
                    .iter()
                    .map(|b| *b as f64 * 8.0 / seconds)
                    .collect(),
                limit: rps
                    .iter_mut()
                    .map(|rp| match rp {
                        Some(rp) => {
                            rp.advance(now);
                            rp.rate()
                        }
                        None => config.line_rate as f64,
                    })
                    .collect(),
                queue: switch.queue_bytes(n),
                marked: counters.ecn_marked,
                dropped: counters.dropped,
                cnps: cnps_sent,
            });
            in_interval.iter_mut().for_each(|b| *b = 0);
            next_sample += config.sample_every;
        }
    }
    let counters = switch.counters(n);
    Report {
        samples,
        delivered,
        marked: counters.ecn_marked,
        dropped: counters.dropped,
        cnps: cnps_sent,
        cuts: rps.iter().flatten().map(|rp| rp.cuts).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds → the samples' time axis.
    const SETTLED: (f64, f64) = (0.1, 0.2);

    /// The goodput of a full line: what the incast without DCQCN gets (the port never idles).
    fn full_line() -> f64 {
        let r = run(&Config::four_to_one(false));
        r.goodput(SETTLED.0, SETTLED.1).iter().sum()
    }

    #[test]
    fn without_dcqcn_the_queue_sits_at_the_buffer_and_drops() {
        let r = run(&Config::four_to_one(false));
        assert_eq!(
            (r.marked, r.cnps, r.cuts),
            (0, 0, 0),
            "nothing is ECN-capable"
        );
        assert!(r.dropped > 10_000, "tail drops: {}", r.dropped);
        let full = Config::four_to_one(false).buffer as f64;
        assert!(r.mean_queue(SETTLED.0, SETTLED.1) > 0.95 * full);
    }

    #[test]
    fn with_dcqcn_marks_become_cnps_and_cuts_and_nothing_is_dropped() {
        let r = run(&Config::four_to_one(true));
        assert!(r.marked > 0 && r.cnps > 0 && r.cuts > 0, "{r:?}");
        assert!(r.cnps <= r.marked, "at most one CNP per marked packet");
        assert_eq!(r.dropped, 0);
        let queue = r.mean_queue(SETTLED.0, SETTLED.1);
        let red = RED_1G;
        assert!(
            queue > red.kmin as f64 / 2.0 && queue < red.kmax as f64,
            "the queue stays near Kmin–Kmax: {queue:.0} bytes"
        );
        let settled = r.samples.iter().filter(|s| s.t > SETTLED.0);
        let most = settled.map(|s| s.queue).max().unwrap();
        assert!(most < 2 * red.kmax, "{most}");
    }

    #[test]
    fn with_dcqcn_the_flows_share_fairly_and_fill_the_link() {
        let config = Config::four_to_one(true);
        let r = run(&config);
        let goodput = r.goodput(SETTLED.0, SETTLED.1);
        let fairness = jain(&goodput);
        assert!(fairness >= 0.95, "Jain {fairness:.3} of {goodput:?}");
        let utilisation = goodput.iter().sum::<f64>() / full_line();
        assert!(utilisation > 0.9, "{utilisation:.3}");
        // Without DCQCN, the tail drops starve some flows.
        let unfair = jain(&run(&Config::four_to_one(false)).goodput(SETTLED.0, SETTLED.1));
        assert!(unfair < fairness, "{unfair} vs {fairness}");
    }

    #[test]
    fn a_flow_left_alone_recovers_its_line_rate() {
        let mut config = Config::four_to_one(true);
        config.others_stop_at = Some(Duration::from_millis(100));
        config.duration = Duration::from_millis(200);
        let r = run(&config);
        let before = r.goodput(0.05, 0.1)[0];
        // Fast recovery, then additive and hyper increase: back within 60 ms.
        let after = r.goodput(0.16, 0.2)[0];
        let ceiling = full_line();
        assert!(before < 0.4 * ceiling, "a fair share first: {before}");
        assert!(after > 0.95 * ceiling, "then the whole line: {after}");
        let last = r.samples.last().unwrap();
        assert_eq!(
            last.limit[0], config.line_rate as f64,
            "the limiter is released"
        );
    }

    #[test]
    fn a_run_is_repeatable() {
        let config = Config::four_to_one(true);
        let (a, b) = (run(&config), run(&config));
        assert_eq!(a.samples, b.samples);
    }

    #[test]
    fn jain_is_one_for_equal_shares_and_one_over_n_for_one_hog() {
        assert!((jain(&[3.0, 3.0, 3.0, 3.0]) - 1.0).abs() < 1e-12);
        assert!((jain(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
    }

    #[test]
    fn frames_are_what_the_receiver_and_the_senders_take_them_for() {
        let data = data_frame(2, true);
        assert_eq!(flow_of(&data), Some(2));
        assert_eq!(ecn::ecn(&data), Some(Ecn::Ect0));
        assert!(roce_wire::Frame::parse(&data).unwrap().icrc().is_ok());
        let cnp = cnp_frame(3, &Params::default());
        assert_eq!(flow_of(&cnp), None);
        let parsed = roce_wire::Frame::parse(&cnp).unwrap();
        assert_eq!(
            (parsed.repr.bth.opcode, parsed.repr.bth.dest_qp),
            (Opcode::CNP, 0x103)
        );
    }
}

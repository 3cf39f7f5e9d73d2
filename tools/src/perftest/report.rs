//! perftest's numbers and how it prints them: the parameters block, the two addresses, and the
//! bandwidth or latency table.

use std::io::{self, Write};
use std::time::{Duration, Instant};

use roce_nic::verbs::{Context, Mtu};

use super::messages::{BwReport, QpRecord};
use super::{Measured, Options, Verb, PEAK_LIMIT};

const RULE: &str =
    "---------------------------------------------------------------------------------------";
/// Bytes per second in perftest's Gb/s.
const GBIT: f64 = 125_000_000.0;
/// Bytes in perftest's MB.
const MB: f64 = 1_048_576.0;
/// The CQ moderation perftest's peak is computed over (every 100th completion).
const PEAK_STRIDE: usize = 100;

impl BwReport {
    /// The client's numbers from when each message was posted and completed: the average over
    /// the whole run, and perftest's peak — the best rate over any stretch of messages that
    /// ends on a moderated (every 100th) or the last completion.
    pub fn measure(size: u64, posted: &[Instant], completed: &[Instant]) -> BwReport {
        let n = posted.len().min(completed.len());
        let rate = |elapsed: Duration, messages: f64| messages / elapsed.as_secs_f64().max(1e-9);
        let total = completed[n - 1].saturating_duration_since(posted[0]);
        let per_second = rate(total, n as f64);
        let peak = if n as u64 > PEAK_LIMIT {
            0.0
        } else {
            let mut best = f64::MAX;
            for (i, start) in posted[..n].iter().enumerate() {
                let first = (i + 1).next_multiple_of(PEAK_STRIDE) - 1;
                let ends = (first..n)
                    .step_by(PEAK_STRIDE)
                    .chain(std::iter::once(n - 1));
                for j in ends.filter(|j| *j >= i) {
                    let took = completed[j].saturating_duration_since(*start).as_secs_f64();
                    best = best.min(took / (j - i + 1) as f64);
                }
            }
            size as f64 / best.max(1e-12) / MB
        };
        BwReport {
            size,
            iters: n as u64,
            peak,
            average: size as f64 * per_second / MB,
            msg_rate: per_second / 1e6,
        }
    }

    /// The same numbers in Gb/s, for `--report_gbits`.
    pub fn in_gbits(self) -> BwReport {
        BwReport {
            peak: self.peak * MB / GBIT,
            average: self.average * MB / GBIT,
            ..self
        }
    }

    /// A receiver's numbers: it sees only the whole run, so its peak is its average.
    pub fn whole_run(size: u64, iters: u64, elapsed: Duration) -> BwReport {
        let per_second = iters as f64 / elapsed.as_secs_f64().max(1e-9);
        BwReport {
            size,
            iters,
            peak: size as f64 * per_second / MB,
            average: size as f64 * per_second / MB,
            msg_rate: per_second / 1e6,
        }
    }
}

/// Latency statistics in microseconds, perftest's way: the gaps between successive posts
/// (halved when each is a round trip of two messages), the two largest dropped.
#[derive(Debug, Clone, PartialEq)]
pub struct LatStats {
    pub size: u64,
    pub iters: u64,
    pub min: f64,
    pub max: f64,
    pub typical: f64,
    pub average: f64,
    pub stdev: f64,
    pub p99: f64,
    pub p99_9: f64,
}

/// The largest gaps perftest leaves out.
const TAIL: usize = 2;

impl LatStats {
    pub fn from_posts(size: u64, posted: &[Instant], round_trip: bool) -> LatStats {
        let factor = if round_trip { 2.0 } else { 1.0 };
        let mut gaps: Vec<f64> = posted
            .windows(2)
            .map(|w| w[1].saturating_duration_since(w[0]).as_secs_f64() * 1e6 / factor)
            .collect();
        gaps.sort_by(f64::total_cmp);
        let all = gaps.len();
        let kept = if all > TAIL { all - TAIL } else { all.max(1) };
        let at = |i: usize| {
            gaps.get(i.min(all.saturating_sub(1)))
                .copied()
                .unwrap_or(0.0)
        };
        let used = &gaps[..kept.min(all)];
        let average = used.iter().sum::<f64>() / used.len().max(1) as f64;
        let variance =
            used.iter().map(|g| (g - average).powi(2)).sum::<f64>() / used.len().max(1) as f64;
        let percentile = |p: f64| at((kept as f64 * p).ceil() as usize);
        LatStats {
            size,
            iters: posted.len() as u64,
            min: at(0),
            max: at(kept),
            typical: if kept % 2 == 0 && kept > 1 {
                (at(kept / 2) + at(kept / 2 - 1)) / 2.0
            } else {
                at(kept / 2)
            },
            average,
            stdev: variance.sqrt(),
            p99: percentile(0.99),
            p99_9: percentile(0.999),
        }
    }
}

fn title(opts: &Options) -> String {
    let verb = match opts.test.verb() {
        Verb::Send => "Send".to_owned(),
        Verb::Write => "RDMA_Write".to_owned(),
        Verb::Read => "RDMA_Read".to_owned(),
        Verb::Atomic => format!("Atomic {}", opts.atomic.name()),
    };
    let kind = if opts.test.is_bw() { "BW" } else { "Latency" };
    format!("{verb} {kind} Test")
}

/// The parameters block.
pub fn header(out: &mut dyn Write, opts: &Options, mtu: Mtu, ctx: &Context) -> io::Result<()> {
    writeln!(out, "{RULE}")?;
    writeln!(out, "                    {}", title(opts))?;
    writeln!(
        out,
        " Number of qps   : 1\t\tTransport type : IB\n Connection type : RC\t\tUsing SRQ      : OFF"
    )?;
    writeln!(out, " Device          : {}", ctx.device().name)?;
    writeln!(out, " TX depth        : {}", opts.tx_depth)?;
    if opts.test.verb() == Verb::Send {
        writeln!(out, " RX depth        : {}", opts.rx_depth)?;
    }
    writeln!(out, " Mtu             : {}[B]", mtu.bytes())?;
    writeln!(out, " Link type       : Ethernet")?;
    writeln!(out, " GID index       : {}", opts.gid_index)?;
    if opts.rdma_cm {
        writeln!(out, " rdma_cm QPs\t : ON")?;
        writeln!(out, " Data ex. method : rdma_cm")?;
    } else {
        writeln!(out, " Data ex. method : Ethernet")?;
    }
    writeln!(out, "{RULE}")
}

/// The local and remote address lines, as perftest prints them.
pub fn addresses(
    out: &mut dyn Write,
    opts: &Options,
    mine: &QpRecord,
    theirs: &QpRecord,
) -> io::Result<()> {
    for (side, record) in [("local", mine), ("remote", theirs)] {
        write!(
            out,
            " {side} address: LID {} QPN {} PSN {}",
            alt_hex(u64::from(record.lid), 4),
            alt_hex(u64::from(record.qpn), 6),
            alt_hex(u64::from(record.psn), 6)
        )?;
        let verb = opts.test.verb();
        if matches!(verb, Verb::Read | Verb::Atomic) {
            write!(out, " OUT {}", alt_hex(u64::from(record.out_reads), 4))?;
        }
        if verb != Verb::Send {
            write!(
                out,
                " RKey {} VAddr {}",
                alt_hex(u64::from(record.rkey), 8),
                alt_hex(record.vaddr, 16)
            )?;
        }
        let gid: Vec<String> = record.gid.0.iter().map(|b| format!("{b:02}")).collect();
        writeln!(out, "\n GID: {}", gid.join(":"))?;
    }
    writeln!(out, "{RULE}")
}

/// C's `%#0Nx`: zero-padded to `width` characters with a `0x` prefix, except that zero has no
/// prefix (`0000`).
fn alt_hex(value: u64, width: usize) -> String {
    if value == 0 {
        format!("{:0width$}", 0)
    } else {
        format!("{value:#0width$x}")
    }
}

/// The result table; a sweep's lines are printed as its sizes end, so only the rule is left.
pub fn result(out: &mut dyn Write, measured: &Measured, gbits: bool) -> io::Result<()> {
    match measured {
        Measured::Bw(r) => {
            bw_header(out, gbits)?;
            bw_line(out, r)?;
        }
        Measured::Sweep(_) => {}
        Measured::Lat(l) => {
            lat_header(out)?;
            lat_line(out, l)?;
        }
        Measured::Nothing => {}
    }
    writeln!(out, "{RULE}")
}

/// The heading of the bandwidth table.
pub fn bw_header(out: &mut dyn Write, gbits: bool) -> io::Result<()> {
    let unit = if gbits { "Gb/sec" } else { "MB/sec" };
    writeln!(
        out,
        " #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]"
    )
}

/// The heading of the latency table.
pub fn lat_header(out: &mut dyn Write) -> io::Result<()> {
    writeln!(
        out,
        " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] "
    )
}

/// One line of the latency table.
pub fn lat_line(out: &mut dyn Write, l: &LatStats) -> io::Result<()> {
    writeln!(
        out,
        " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
        l.size, l.iters, l.min, l.max, l.typical, l.average, l.stdev, l.p99, l.p99_9
    )
}

/// One line of the bandwidth table.
pub fn bw_line(out: &mut dyn Write, r: &BwReport) -> io::Result<()> {
    writeln!(
        out,
        " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
        r.size, r.iters, r.peak, r.average, r.msg_rate
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_print_in_perftest_s_c_formats() {
        assert_eq!(alt_hex(0, 4), "0000");
        assert_eq!(alt_hex(0x12, 6), "0x0012");
        assert_eq!(alt_hex(0xfa166e, 6), "0xfa166e");
        assert_eq!(alt_hex(0x7fbb84eb1000, 16), "0x007fbb84eb1000");
    }

    #[test]
    fn bandwidth_is_bytes_over_the_whole_run_and_peak_is_the_best_stretch() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Four 1 MiB messages: the first takes 10 ms, the other three 1 ms each.
        let posted = vec![t0, t0 + ms(10), t0 + ms(11), t0 + ms(12)];
        let completed = vec![t0 + ms(10), t0 + ms(11), t0 + ms(12), t0 + ms(13)];
        let r = BwReport::measure(1 << 20, &posted, &completed);
        assert_eq!(r.iters, 4);
        assert!((r.average - 4000.0 / 13.0).abs() < 1e-6, "{r:?}");
        assert!((r.msg_rate - 4.0 / 0.013 / 1e6).abs() < 1e-9, "{r:?}");
        // The best stretch (ending on the last completion) leaves out the slow first message.
        assert!((r.peak - 1000.0).abs() < 1e-6, "{r:?}");
    }

    #[test]
    fn gbits_are_bits_over_ten_to_the_nine() {
        // 1000 MB/s is 1000 × 2^20 × 8 bits per second.
        let mb = BwReport {
            size: 65536,
            iters: 10,
            peak: 2000.0,
            average: 1000.0,
            msg_rate: 0.016,
        };
        let gb = mb.in_gbits();
        assert!((gb.average - 8.388_608).abs() < 1e-9, "{gb:?}");
        assert!((gb.peak - 16.777_216).abs() < 1e-9, "{gb:?}");
        assert_eq!((gb.size, gb.iters, gb.msg_rate), (65536, 10, 0.016));
    }

    #[test]
    fn latency_drops_the_two_largest_gaps_and_halves_round_trips() {
        let t0 = Instant::now();
        let us = Duration::from_micros;
        let gaps = [10u64, 20, 30, 40, 1000, 2000];
        let mut posted = vec![t0];
        for g in gaps {
            posted.push(*posted.last().unwrap() + us(g));
        }
        let l = LatStats::from_posts(2, &posted, true);
        assert_eq!(l.iters, 7);
        assert!((l.min - 5.0).abs() < 1e-6, "{l:?}");
        assert!((l.typical - 12.5).abs() < 1e-6, "{l:?}");
        assert!((l.average - 12.5).abs() < 1e-6, "{l:?}");
        assert!((l.max - 500.0).abs() < 1e-6, "{l:?}");
    }
}

//! The target's CPU time while the data lands: the time it has spent on a CPU (sampled every
//! millisecond from /proc) against wall-clock time, from just before the work request to just
//! after its completion, with a tick for every frame on the wire and the frozen interval
//! shaded. For a one-sided operation the line is flat.

use std::time::Duration;

use maud::{html, Markup};

use super::ladder;
use crate::cpu::Sample;
use crate::wire::Seen;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const PLOT_X: f64 = 70.0;
const PLOT_Y: f64 = 20.0;
const PLOT_W: f64 = 800.0;
const PLOT_H: f64 = 180.0;
/// Points of the line at most: enough for any screen.
const POINTS: usize = 1000;
/// The smallest height of the CPU axis: a line that rises by a few microseconds shows as such,
/// not as a cliff.
const MIN_CPU_SPAN: Duration = Duration::from_millis(1);

/// What the timeline shows.
pub struct Timeline<'a> {
    pub samples: &'a [Sample],
    pub frames: &'a [Seen],
    /// From and to (since the Unix epoch).
    pub window: (Duration, Duration),
    /// When the target was frozen and thawed, clipped to the window by the drawing.
    pub frozen: Option<(Duration, Option<Duration>)>,
}

impl Timeline<'_> {
    fn x(&self, at: Duration) -> f64 {
        let (from, to) = self.window;
        let span = to.saturating_sub(from).as_secs_f64().max(1e-9);
        let t = at.saturating_sub(from).as_secs_f64().min(span);
        PLOT_X + t / span * PLOT_W
    }

    /// The target's time on a CPU at `at`: the latest sample then (the first, before any).
    fn on_cpu(&self, at: Duration) -> Duration {
        self.samples
            .iter()
            .take_while(|s| s.at <= at)
            .last()
            .or(self.samples.first())
            .map(|s| s.on_cpu)
            .unwrap_or_default()
    }

    pub fn render(&self) -> Markup {
        let (from, to) = self.window;
        // CPU time only grows, and stays put between samples: the line runs from the value at
        // the window's start through every sample inside to the value at its end.
        let mut line: Vec<Sample> = vec![Sample {
            at: from,
            on_cpu: self.on_cpu(from),
        }];
        line.extend(self.samples.iter().filter(|s| s.at > from && s.at < to));
        line.push(Sample {
            at: to,
            on_cpu: self.on_cpu(to),
        });
        let inside = line.len() - 2;
        let base = line[0].on_cpu;
        let used = line[line.len() - 1].on_cpu.saturating_sub(base);
        let top = used.max(MIN_CPU_SPAN);
        let y = |cpu: Duration| {
            let f = cpu.saturating_sub(base).as_secs_f64() / top.as_secs_f64();
            PLOT_Y + PLOT_H - f * PLOT_H
        };
        let step = line.len().div_ceil(POINTS).max(1);
        let mut points: Vec<String> = line
            .iter()
            .step_by(step)
            .map(|s| format!("{:.1},{:.1}", self.x(s.at), y(s.on_cpu)))
            .collect();
        // The end always, where the line stops.
        if let Some(s) = line.last().filter(|_| (line.len() - 1) % step != 0) {
            points.push(format!("{:.1},{:.1}", self.x(s.at), y(s.on_cpu)));
        }
        let ticks: Vec<&Seen> = self
            .frames
            .iter()
            .filter(|f| f.at >= from && f.at <= to)
            .take(ladder::DRAWN)
            .collect();
        let span_ms = to.saturating_sub(from).as_secs_f64() * 1e3;
        html! {
            svg #cpu-timeline xmlns="http://www.w3.org/2000/svg" width=(WIDTH) height=(HEIGHT)
                viewBox=(format!("0 0 {WIDTH} {HEIGHT}")) role="img"
                aria-label="the target's CPU time while the data lands" {
                @if let Some((frozen, thawed)) = self.frozen {
                    @let x1 = self.x(frozen.max(from));
                    @let x2 = self.x(thawed.unwrap_or(to).min(to));
                    rect #frozen-band x=(x1) y=(PLOT_Y) width=((x2 - x1).max(0.0)) height=(PLOT_H) {
                        title { "the target process is frozen (SIGSTOP)" }
                    }
                    text.band-label x=(x1 + 6.0) y=(PLOT_Y + 16.0) { "target frozen (SIGSTOP)" }
                }
                rect.plot x=(PLOT_X) y=(PLOT_Y) width=(PLOT_W) height=(PLOT_H) {}
                @for frame in &ticks {
                    line class=(format!("frame-tick {}", ladder::class(frame.brief.as_ref())))
                        x1=(self.x(frame.at)) y1=(PLOT_Y + PLOT_H) x2=(self.x(frame.at)) y2=(PLOT_Y + PLOT_H - 14.0) {
                        title { (format!("frame {} on the wire", frame.number)) }
                    }
                }
                polyline #cpu-line points=(points.join(" ")) {}
                text.axis x=(PLOT_X) y=(PLOT_Y + PLOT_H + 18.0) { "0 ms" }
                text.axis x=(PLOT_X + PLOT_W) y=(PLOT_Y + PLOT_H + 18.0) text-anchor="end" {
                    (format!("{span_ms:.1} ms"))
                }
                text.axis x=(PLOT_X + PLOT_W / 2.0) y=(PLOT_Y + PLOT_H + 36.0) text-anchor="middle" {
                    "wall-clock time from just before the work request (ticks: frames on the wire)"
                }
                text.axis x=(PLOT_X - 8.0) y=(PLOT_Y + PLOT_H) text-anchor="end" { "+0" }
                text.axis x=(PLOT_X - 8.0) y=(PLOT_Y + 10.0) text-anchor="end" {
                    (format!("+{:.1} ms", top.as_secs_f64() * 1e3))
                }
                text #cpu-delta x=(PLOT_X + 8.0) y=(PLOT_Y + PLOT_H - 22.0) {
                    (format!("target CPU used in this window: {} ns ({inside} samples)", used.as_nanos()))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_line_spans_the_window_even_with_no_sample_inside() {
        let samples = [Sample {
            at: ms(0),
            on_cpu: ms(3),
        }];
        let t = Timeline {
            samples: &samples,
            frames: &[],
            window: (ms(10), ms(12)),
            frozen: None,
        };
        let svg = t.render().into_string();
        assert!(svg.contains(r#"points="70.0,200.0 870.0,200.0""#), "{svg}");
    }

    #[test]
    fn a_flat_line_across_the_window_with_the_frozen_interval() {
        let samples: Vec<Sample> = (0..100)
            .map(|i| Sample {
                at: ms(1000 + i),
                on_cpu: ms(5),
            })
            .collect();
        let t = Timeline {
            samples: &samples,
            frames: &[],
            window: (ms(1010), ms(1090)),
            frozen: Some((ms(900), None)),
        };
        let svg = t.render().into_string();
        assert!(
            svg.contains("target CPU used in this window: 0 ns (79 samples)"),
            "{svg}"
        );
        let points = svg
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let ys: Vec<&str> = points
            .split(' ')
            .map(|p| p.split(',').nth(1).unwrap())
            .collect();
        assert!(
            ys.iter().all(|y| *y == "200.0"),
            "flat at the bottom: {points}"
        );
        assert!(
            svg.contains(r#"<rect id="frozen-band" x="70" y="20" width="800""#),
            "{svg}"
        );
    }

    #[test]
    fn cpu_used_rises() {
        let samples = [
            Sample {
                at: ms(0),
                on_cpu: ms(0),
            },
            Sample {
                at: ms(5),
                on_cpu: ms(4),
            },
        ];
        let t = Timeline {
            samples: &samples,
            frames: &[],
            window: (ms(0), ms(10)),
            frozen: None,
        };
        let svg = t.render().into_string();
        // Flat, up at the second sample, flat to the end.
        assert!(
            svg.contains(r#"points="70.0,200.0 470.0,20.0 870.0,20.0""#),
            "{svg}"
        );
        assert!(svg.contains("4000000 ns"));
        assert!(!svg.contains("frozen-band"));
    }
}

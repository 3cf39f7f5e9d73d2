//! `roce mem watch`: the host program's view of its RAM while the NIC writes into it.
//!
//! It looks ten times a second and compares with the previous look. That is deliberately simple:
//! the point is that the writer is someone else, and the watcher's own CPU time and context
//! switches, printed beside every change, show that the host spends next to nothing.

use std::io::{self, Write};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use roce_hostmem::Region;

use super::hexdump::{write_line, LINE};
use crate::output::count;

const PERIOD: Duration = Duration::from_millis(100);
/// Changed bytes closer together than this are one change, so one write shows as one change.
const GAP: usize = LINE;
/// Bytes shown in the "old → new" summary of one change.
const SHOWN_BYTES: usize = 16;
/// Lines of hexdump shown for one change.
const SHOWN_LINES: usize = 8;

/// When to stop (with neither a count nor a duration, only Ctrl-C stops), and how to print.
pub struct Until {
    pub count: Option<u64>,
    pub duration: Option<Duration>,
    /// One JSON object per line instead of text.
    pub json: bool,
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_interrupt(_signal: libc::c_int) {
    INTERRUPTED.store(true, Ordering::Relaxed);
}

pub fn watch(region: &Region, name: &str, until: Until, out: &mut impl Write) -> io::Result<()> {
    // Ctrl-C, SIGTERM (kill, timeout(1), a service manager) and SIGHUP (the terminal closed)
    // end the watch like --count does, so the closing CPU summary is still printed.
    let handler = on_interrupt as extern "C" fn(libc::c_int) as *const ();
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
    let mut old = vec![0; region.len()];
    let mut new = vec![0; region.len()];
    read_all(region, &mut old)?;
    if until.json {
        let start = serde_json::json!({
            "event": "watching",
            "region": name,
            "size_bytes": region.len(),
            "looks_per_s": 10,
        });
        writeln!(out, "{start}")?;
    } else {
        writeln!(
            out,
            "watching region {name} ({}), 10 looks a second; Ctrl-C ends",
            count(region.len() as u64, "byte")
        )?;
    }
    let start = Instant::now();
    // A duration too long to add to the clock is as good as none.
    let deadline = until.duration.and_then(|d| start.checked_add(d));
    let mut changes = 0u64;
    while until.count.is_none_or(|count| changes < count) && !INTERRUPTED.load(Ordering::Relaxed) {
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            break;
        }
        std::thread::sleep(deadline.map_or(PERIOD, |deadline| PERIOD.min(deadline - now)));
        read_all(region, &mut new)?;
        for range in changed_ranges(&old, &new) {
            if until.count.is_some_and(|count| changes >= count) {
                break;
            }
            changes += 1;
            if until.json {
                let change = serde_json::json!({
                    "event": "change",
                    "at_s": start.elapsed().as_secs_f64(),
                    "offset": range.start,
                    "len_bytes": range.len(),
                    "old_hex": hex(&old[range.clone()]),
                    "new_hex": hex(&new[range.clone()]),
                    "watcher": CpuUse::now().json(),
                });
                writeln!(out, "{change}")?;
            } else {
                show_change(out, start.elapsed(), &old, &new, range)?;
            }
        }
        std::mem::swap(&mut old, &mut new);
    }
    if until.json {
        let summary = serde_json::json!({
            "event": "summary",
            "changes": changes,
            "elapsed_s": start.elapsed().as_secs_f64(),
            "watcher": CpuUse::now().json(),
        });
        return writeln!(out, "{summary}");
    }
    writeln!(
        out,
        "saw {} in {:.1} s; {}",
        count(changes, "change"),
        start.elapsed().as_secs_f64(),
        CpuUse::now()
    )
}

fn read_all(region: &Region, buf: &mut [u8]) -> io::Result<()> {
    region
        .read(0, buf)
        .map_err(|err| io::Error::other(err.to_string()))
}

/// The ranges where `new` differs from `old`; changes fewer than [`GAP`] bytes apart are merged.
/// Unchanged pages are skipped with a fast slice comparison.
fn changed_ranges(old: &[u8], new: &[u8]) -> Vec<Range<usize>> {
    const PAGE: usize = 4096;
    let mut ranges: Vec<Range<usize>> = Vec::new();
    let pages = old.chunks(PAGE).zip(new.chunks(PAGE)).enumerate();
    for (page, (old_page, new_page)) in pages.filter(|(_, (o, n))| o != n) {
        let differing = old_page.iter().zip(new_page).enumerate();
        for (i, _) in differing.filter(|(_, (o, n))| o != n) {
            let at = page * PAGE + i;
            match ranges.last_mut() {
                Some(last) if at - last.end < GAP => last.end = at + 1,
                _ => ranges.push(at..at + 1),
            }
        }
    }
    ranges
}

/// Prints one change: when and where, the bytes before and after, the changed lines as they are
/// now, and what watching has cost so far.
fn show_change(
    out: &mut impl Write,
    elapsed: Duration,
    old: &[u8],
    new: &[u8],
    range: Range<usize>,
) -> io::Result<()> {
    writeln!(
        out,
        "+{:.1}s  {} changed at {:#x}: {} → {}",
        elapsed.as_secs_f64(),
        count(range.len() as u64, "byte"),
        range.start,
        hex(&old[range.clone()]),
        hex(&new[range.clone()]),
    )?;
    let first_line = range.start / LINE * LINE;
    let lines = (range.end - first_line).div_ceil(LINE);
    for at in (first_line..range.end).step_by(LINE).take(SHOWN_LINES) {
        write_line(out, at as u64, &new[at..(at + LINE).min(new.len())])?;
    }
    if lines > SHOWN_LINES {
        writeln!(out, "... {} more lines", lines - SHOWN_LINES)?;
    }
    writeln!(out, "        {}", CpuUse::now())
}

/// Bytes in hex, the first [`SHOWN_BYTES`] of them.
fn hex(bytes: &[u8]) -> String {
    let mut text: Vec<String> = bytes
        .iter()
        .take(SHOWN_BYTES)
        .map(|b| format!("{b:02x}"))
        .collect();
    if bytes.len() > SHOWN_BYTES {
        text.push("…".to_owned());
    }
    text.join(" ")
}

/// This process's CPU time and context switches so far, from getrusage.
struct CpuUse {
    user: Duration,
    system: Duration,
    voluntary_switches: i64,
    involuntary_switches: i64,
}

impl CpuUse {
    fn now() -> CpuUse {
        // SAFETY: rusage is plain old data, filled in by the call; RUSAGE_SELF cannot fail.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: a valid, writable rusage.
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
        let time = |tv: libc::timeval| {
            Duration::from_secs(tv.tv_sec.max(0) as u64)
                + Duration::from_micros(tv.tv_usec.max(0) as u64)
        };
        CpuUse {
            user: time(usage.ru_utime),
            system: time(usage.ru_stime),
            voluntary_switches: usage.ru_nvcsw,
            involuntary_switches: usage.ru_nivcsw,
        }
    }
}

impl CpuUse {
    fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "user_s": self.user.as_secs_f64(),
            "system_s": self.system.as_secs_f64(),
            "voluntary_switches": self.voluntary_switches,
            "involuntary_switches": self.involuntary_switches,
        })
    }
}

impl std::fmt::Display for CpuUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "watcher CPU: user {:.3} s, system {:.3} s; context switches: {} voluntary, {} involuntary",
            self.user.as_secs_f64(),
            self.system.as_secs_f64(),
            self.voluntary_switches,
            self.involuntary_switches
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_changed_means_no_ranges() {
        let data = vec![3u8; 10_000];
        assert_eq!(changed_ranges(&data, &data), Vec::<Range<usize>>::new());
    }

    #[test]
    fn nearby_changes_merge_and_distant_ones_do_not() {
        let old = vec![0u8; 3 * 4096];
        let mut new = old.clone();
        new[10] = 1;
        new[10 + GAP] = 1; // GAP - 1 equal bytes between: one change
        new[100] = 1;
        new[4095] = 1; // across a page boundary
        new[4096] = 1;
        new[9000] = 1;
        assert_eq!(
            changed_ranges(&old, &new),
            vec![10..11 + GAP, 100..101, 4095..4097, 9000..9001]
        );
    }

    #[test]
    fn a_change_shows_old_and_new_bytes_and_its_lines() {
        let old = vec![0u8; 64];
        let mut new = old.clone();
        new[18..23].copy_from_slice(b"hello");
        let mut out = Vec::new();
        show_change(&mut out, Duration::from_millis(1234), &old, &new, 18..23).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "+1.2s  5 bytes changed at 0x12: 00 00 00 00 00 → 68 65 6c 6c 6f"
        );
        assert!(
            lines[1].starts_with("00000010  00 00 68 65 6c 6c 6f"),
            "{text}"
        );
        assert!(lines[2].contains("watcher CPU: user"), "{text}");
    }

    #[test]
    fn one_byte_is_a_byte() {
        let old = vec![0u8; 16];
        let mut new = old.clone();
        new[3] = 1;
        let mut out = Vec::new();
        show_change(&mut out, Duration::ZERO, &old, &new, 3..4).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.starts_with("+0.0s  1 byte changed at 0x3: 00 → 01\n"),
            "{text}"
        );
    }

    #[test]
    fn a_large_change_is_shown_abridged() {
        let old = vec![0u8; 4096];
        let new = vec![0xffu8; 4096];
        let mut out = Vec::new();
        show_change(&mut out, Duration::ZERO, &old, &new, 0..4096).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.lines().next().unwrap().ends_with("ff ff …"), "{text}");
        assert!(text.contains(&format!("... {} more lines", 256 - SHOWN_LINES)));
        assert_eq!(text.lines().count(), 1 + SHOWN_LINES + 1 + 1);
    }
}

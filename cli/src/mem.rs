//! `roce mem`: host memory regions seen from a shell: create, remove, dump and watch them.

pub(crate) mod hexdump;
mod watch;

use std::io::{self, Write};
use std::process::ExitCode;
use std::time::Duration;

use roce_hostmem::{parse_size, Region, RegionError};

use crate::output::count;
use crate::Failure;
use hexdump::{Hexdump, LINE};

#[derive(clap::Subcommand)]
pub enum Command {
    /// Create a region that stays until `roce mem rm` removes it.
    #[command(after_long_help = "Examples:\n  roce mem create buf 1M\n  roce mem create big 2G")]
    Create {
        /// Region name; the region is the file /dev/shm/roce-NAME.
        name: String,
        /// Size in bytes, with an optional K, M or G suffix; rounded up to whole pages.
        size: String,
    },
    /// Remove a region. Processes that have it mapped keep their mapping.
    #[command(after_long_help = "Examples:\n  roce mem rm buf")]
    Rm {
        /// Region name.
        name: String,
    },
    /// Print a region's bytes like `hexdump -C`; a run of zero lines is shown as `*`.
    #[command(
        after_long_help = "Examples:\n  roce mem dump buf                 the whole region\n  roce mem dump buf 0x1000 64       64 bytes from offset 0x1000\n  roce mem dump buf 4K | head"
    )]
    Dump {
        /// Region name.
        name: String,
        /// First byte to show: decimal, 0x-hex or with a K, M or G suffix (default 0).
        offset: Option<String>,
        /// Number of bytes to show, in the same forms (default: to the end of the region).
        len: Option<String>,
    },
    /// Show each change to a region as it appears, with what watching costs this process.
    ///
    /// Checks ten times a second by comparing the region with the previous look: the writer is
    /// someone else (the NIC), and the watcher's own CPU time shows the host spends nothing.
    /// Ctrl-C or SIGTERM ends it with the summary.
    #[command(
        after_long_help = "Examples:\n  roce mem watch buf                until Ctrl-C\n  roce mem watch buf --count 1      until the first change\n  roce mem watch buf --duration 30\n  roce mem watch buf --json | jq .offset     one JSON object per change"
    )]
    Watch {
        /// Region name.
        name: String,
        /// Stop after this many changes.
        #[arg(long, value_name = "N")]
        count: Option<u64>,
        /// Stop after this many seconds.
        #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
        duration: Option<Duration>,
        /// One JSON object per line: the start, each change, the summary.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: Command) -> Result<ExitCode, Failure> {
    match cmd {
        Command::Create { name, size } => create(&name, &size),
        Command::Rm { name } => {
            Region::remove(&name).map_err(region_failure)?;
            out!("removed region {name}")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Dump { name, offset, len } => dump(&name, offset.as_deref(), len.as_deref()),
        Command::Watch {
            name,
            count,
            duration,
            json,
        } => {
            let region = Region::attach(&name).map_err(region_failure)?;
            let until = watch::Until {
                count,
                duration,
                json,
            };
            finish_output(watch::watch(
                &region,
                &name,
                until,
                &mut io::stdout().lock(),
            ))
        }
    }
}

fn create(name: &str, size: &str) -> Result<ExitCode, Failure> {
    let size = parse_size(size).map_err(|err| Failure::usage(err.to_string()))?;
    // Persistent: the command exits at once, and the region is for other programs to use.
    let region = Region::create_persistent(name, size).map_err(region_failure)?;
    out!(
        "created region {name}: {}, {}",
        region
            .path()
            .map_or(String::new(), |p| p.display().to_string()),
        count(region.len() as u64, "byte")
    )?;
    Ok(ExitCode::SUCCESS)
}

fn dump(name: &str, offset: Option<&str>, len: Option<&str>) -> Result<ExitCode, Failure> {
    let region = Region::attach(name).map_err(region_failure)?;
    let size = region.len() as u64;
    let start = offset.map_or(Ok(0), |text| parse_offset("OFFSET", text))?;
    if start > size {
        return Err(Failure::usage(format!(
            "offset {start:#x} is past the end of region {name} ({})",
            count(size, "byte")
        )));
    }
    let end = match len {
        // Like hexdump -n, a length past the end shows what there is.
        Some(text) => start.saturating_add(parse_offset("LEN", text)?).min(size),
        None => size,
    };
    finish_output(write_dump(&region, start, end, &mut io::stdout().lock()))
}

/// Writes bytes `start..end` of `region` a chunk at a time, so a large region is never copied
/// whole, and then the end offset, as hexdump does.
fn write_dump(region: &Region, start: u64, end: u64, out: &mut impl Write) -> io::Result<()> {
    const CHUNK: u64 = (LINE * 4096) as u64;
    let mut hexdump = Hexdump::default();
    let mut buf = Vec::new();
    let mut at = start;
    while at < end {
        let n = (end - at).min(CHUNK);
        buf.resize(n as usize, 0);
        region
            .read(at as usize, &mut buf)
            .map_err(|err| io::Error::other(err.to_string()))?;
        for (i, line) in buf.chunks(LINE).enumerate() {
            hexdump.line(out, at + (i * LINE) as u64, line)?;
        }
        at += n;
    }
    writeln!(out, "{end:08x}")
}

/// A byte offset or count: decimal, `0x` hex, or a size with a suffix (`4K`).
pub(crate) fn parse_offset(what: &str, text: &str) -> Result<u64, Failure> {
    let parsed = if let Some(hex) = text.strip_prefix("0x").or(text.strip_prefix("0X")) {
        u64::from_str_radix(hex, 16).ok()
    } else if text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse().ok()
    } else {
        parse_size(text).ok().map(|n| n as u64)
    };
    parsed.ok_or_else(|| {
        Failure::usage(format!(
            "{what} {text:?} is not a byte count: use decimal, 0x-hex or a K, M or G suffix"
        ))
    })
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    text.parse::<f64>()
        .ok()
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| format!("{text:?} is not a number of seconds"))
}

/// Bad input exits with 2: a bad name or size, and a name that does not exist (rm, dump,
/// watch) or already does (create) — the name given was the wrong one either way. Failed
/// operations exit with 1.
fn region_failure(err: RegionError) -> Failure {
    match err {
        RegionError::BadName { .. }
        | RegionError::ZeroSize
        | RegionError::TooLarge { .. }
        | RegionError::NotFound { .. }
        | RegionError::Exists { .. }
        | RegionError::NotAFile { .. }
        | RegionError::Empty { .. }
        | RegionError::OutOfBounds { .. } => Failure::usage(err.to_string()),
        RegionError::NoRoom { .. }
        | RegionError::Io { .. }
        | RegionError::Anonymous { .. }
        | RegionError::Untrusted { .. }
        | RegionError::DeviceMemory
        | RegionError::TooManyGuarded { .. }
        | RegionError::NoDescriptor => Failure::new(err.to_string()),
    }
}

/// A reader that went away (`roce mem dump x | head`) is a normal end, not a failure.
fn finish_output(result: io::Result<()>) -> Result<ExitCode, Failure> {
    result.map_err(Failure::output)?;
    Ok(ExitCode::SUCCESS)
}

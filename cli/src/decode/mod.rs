//! `roce decode`: print the RoCE packets of captures, one line each (or a field tree, or JSON),
//! checking every ICRC. A thin renderer: reading captures, parsing frames and listing their
//! fields are `roce_wire::capture` and `roce_wire::describe`.

mod json;
mod tally;
mod text;

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use roce_wire::capture::{self, CaptureError, Link, Reader, Record};
use roce_wire::describe::Description;
use roce_wire::Error;

use crate::Failure;
use tally::Tally;

#[derive(clap::Args)]
pub struct Args {
    /// Show every field with its byte offsets, bits and tshark name (the teaching view); with
    /// --json, put every field in the JSON rather than the essential ones.
    #[arg(short, long)]
    verbose: bool,
    /// Print one JSON object per packet, keyed by tshark's field names (ours start with `roce.`).
    #[arg(long)]
    json: bool,
    /// Exit with status 1 if any ICRC is bad or any RoCE packet is malformed.
    #[arg(long)]
    strict: bool,
    /// Capture files (pcap or pcapng; Ethernet or Linux cooked).
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// How each packet is shown.
enum View {
    Line,
    Tree,
    Json(json::Json),
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    // Open every file before printing anything, so that a mistyped last name fails at once.
    let readers = args
        .files
        .iter()
        .map(|path| capture::open(path).map_err(|e| capture_failure(path, e)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut view = match (args.json, args.verbose) {
        (true, every_field) => View::Json(json::Json::new(every_field)),
        (false, true) => View::Tree,
        (false, false) => View::Line,
    };
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let mut tally = Tally::default();
    let several = args.files.len() > 1;
    for (path, reader) in args.files.iter().zip(readers) {
        let file = several.then_some(path.as_path());
        match decode_file(reader, file, &mut view, &mut out, &mut tally) {
            Ok(()) => {}
            Err(Stop::Output(e)) => return output_failure(e),
            Err(Stop::Capture(e)) => {
                // Show what was read before the damage.
                out.flush().ok();
                return Err(capture_failure(path, e));
            }
        }
    }
    let summary = if matches!(view, View::Json(_)) {
        // Standard output stays one JSON object per line.
        tally.write_summary(&mut io::stderr().lock())
    } else {
        tally.write_summary(&mut out)
    };
    if let Err(e) = summary.and_then(|()| out.flush()) {
        return output_failure(e);
    }
    Ok(if args.strict && !tally.clean() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

enum Stop {
    Output(io::Error),
    Capture(CaptureError),
}

impl From<io::Error> for Stop {
    fn from(e: io::Error) -> Stop {
        Stop::Output(e)
    }
}

fn decode_file(
    mut reader: Reader<std::fs::File>,
    file: Option<&Path>,
    view: &mut View,
    out: &mut impl Write,
    tally: &mut Tally,
) -> Result<(), Stop> {
    if let (Some(path), View::Line | View::Tree) = (file, &view) {
        writeln!(out, "{}:", path.display())?;
    }
    let decoded = decode_records(&mut reader, file, view, out, tally);
    // Whatever was decoded goes out, even before a damaged record.
    if let View::Json(json) = view {
        json.flush(out)?;
    }
    decoded
}

fn decode_records(
    reader: &mut Reader<std::fs::File>,
    file: Option<&Path>,
    view: &mut View,
    out: &mut impl Write,
    tally: &mut Tally,
) -> Result<(), Stop> {
    let mut first_time = None;
    while let Some(record) = reader.next_record() {
        let record = record.map_err(Stop::Capture)?;
        let since_first = record
            .timestamp
            .saturating_sub(*first_time.get_or_insert(record.timestamp));
        match record.frame() {
            Ok(frame) => {
                let description = Description::new(&frame);
                tally.roce(frame.repr.bth.opcode, description.icrc().is_ok());
                match view {
                    View::Line => text::line(out, &record, since_first, &description)?,
                    View::Tree => text::tree(out, &record, since_first, &description)?,
                    View::Json(json) => json.packet(out, &record, file, &description)?,
                }
            }
            Err(Error::NotRoce(_)) => tally.not_roce(),
            Err(error) => {
                tally.malformed();
                match view {
                    View::Line | View::Tree => text::malformed(out, &record, since_first, &error)?,
                    View::Json(json) => json.malformed(out, &record, file, &error)?,
                }
            }
        }
    }
    Ok(())
}

/// Where a record's network packet starts, for the tree's first heading.
fn link_header_len(record: &Record) -> usize {
    match record.link {
        Link::Ethernet => 0,
        Link::LinuxSll => 16,
        Link::LinuxSll2 => 20,
    }
}

fn capture_failure(path: &Path, e: CaptureError) -> Failure {
    let what = match e {
        CaptureError::Io(e) if e.kind() == io::ErrorKind::NotFound => "no such file".to_string(),
        CaptureError::Io(e) => format!("cannot read it: {}", io_words(&e)),
        other => other.to_string(),
    };
    Failure::usage(format!("{}: {what}", path.display()))
}

/// The I/O error without the "(os error N)" that std appends.
fn io_words(e: &io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// A reader that went away (`roce decode ... | head`) is not a failure.
fn output_failure(e: io::Error) -> Result<ExitCode, Failure> {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Ok(ExitCode::SUCCESS)
    } else {
        Err(Failure::new(format!(
            "cannot write the output: {}",
            io_words(&e)
        )))
    }
}

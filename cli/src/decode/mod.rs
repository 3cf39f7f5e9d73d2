//! `roce decode`: print the RoCE packets of captures, one line each (or a field tree, or JSON),
//! checking every ICRC. A thin renderer: reading captures, parsing frames and listing their
//! fields are `roce_wire::capture` and `roce_wire::describe`; [`pipeline`] spreads the work
//! over every core and keeps the output in capture order.

mod json;
mod pipeline;
mod tally;
mod text;

use std::cell::RefCell;
use std::io::{self, Read};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use roce_wire::capture::{CaptureError, Link, Reader, Record};
use roce_wire::describe::Description;
use roce_wire::Error;

use crate::Failure;
use pipeline::{Batch, Input, Live};
use tally::Tally;

#[derive(clap::Args)]
pub struct Args {
    /// Show every field with its byte offsets (hex, as the demo shows them), bits and tshark
    /// name (the teaching view); with --json, put every field in the JSON rather than the
    /// essential ones.
    #[arg(short, long)]
    verbose: bool,
    /// Print one JSON object per packet, keyed by tshark's field names (ours start with `roce.`).
    #[arg(long)]
    json: bool,
    /// Exit with status 1 if any ICRC is bad or any RoCE packet is malformed.
    #[arg(long)]
    strict: bool,
    /// Threads that decode [default: one per core].
    #[arg(long, value_name = "N")]
    threads: Option<NonZeroUsize>,
    /// Capture files (pcap or pcapng; Ethernet or Linux cooked); `-` reads standard input.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

/// How each packet is shown.
#[derive(Clone, Copy)]
enum View {
    Line,
    Tree,
    Json { every_field: bool },
}

/// The name standard input goes by in headings and messages.
const STDIN: &str = "standard input";

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    // Open every file before printing anything, so that a mistyped last name fails at once.
    let inputs = open(&args.files)?;
    let view = match (args.json, args.verbose) {
        (true, every_field) => View::Json { every_field },
        (false, true) => View::Tree,
        (false, false) => View::Line,
    };
    let workers = args
        .threads
        .or_else(|| std::thread::available_parallelism().ok())
        .map_or(1, NonZeroUsize::get);
    let several = args.files.len() > 1;
    let outcome = pipeline::run(
        inputs,
        several,
        workers,
        |batch| render(batch, view),
        io::stdout(),
    );
    if let Some(e) = outcome.output {
        return output_failure(e);
    }
    let summary = summary(&outcome.tally, &outcome.damaged);
    // JSON keeps standard output to one object per line: its summary goes to standard error.
    let written = match view {
        View::Json { .. } => io::Write::write_all(&mut io::stderr(), summary.as_bytes()),
        _ => io::Write::write_all(&mut io::stdout(), summary.as_bytes()),
    };
    if let Err(e) = written.and_then(|()| io::Write::flush(&mut io::stdout())) {
        return output_failure(e);
    }
    if let Some((name, e)) = outcome.damaged.into_iter().next() {
        return Err(capture_failure(&name, e));
    }
    Ok(if args.strict && !outcome.tally.clean() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Opens every capture (`-` is standard input, at most once).
fn open(files: &[PathBuf]) -> Result<Vec<Input<Box<dyn Read>>>, Failure> {
    let mut stdin_used = false;
    files
        .iter()
        .map(|path| {
            if path.as_os_str() == "-" {
                if std::mem::replace(&mut stdin_used, true) {
                    return Err(Failure::usage("standard input (-) can be read only once"));
                }
                let (live, before_wait) = Live::new(io::stdin());
                let reader = Reader::new(Box::new(live) as Box<dyn Read>)
                    .map_err(|e| capture_failure(STDIN, e))?;
                return Ok(Input {
                    reader,
                    name: Arc::from(STDIN),
                    before_wait: Some(before_wait),
                });
            }
            let name = path.display().to_string();
            let file = std::fs::File::open(path)
                .map_err(|e| capture_failure(&name, CaptureError::Io(e)))?;
            let reader = Reader::new(Box::new(file) as Box<dyn Read>)
                .map_err(|e| capture_failure(&name, e))?;
            Ok(Input {
                reader,
                name: Arc::from(name),
                before_wait: None,
            })
        })
        .collect()
}

/// Renders a batch's records into its output (on a worker thread).
fn render(batch: &mut Batch, view: View) {
    let (file, heading, first_time) = (batch.file.clone(), batch.heading, batch.first_time);
    if let (Some(_), View::Line | View::Tree) = (batch.end, view) {
        // Room the JSON lines left: text is appended to what the output holds.
        batch.end = None;
        batch.out.clear();
    }
    if let (true, Some(name), View::Line | View::Tree) = (heading, &file, view) {
        batch.out.extend_from_slice(format!("{name}:\n").as_bytes());
    }
    let file = file.as_deref();
    // Each worker keeps the JSON plans it has made from batch to batch.
    thread_local! {
        static PLANS: RefCell<json::Plans> = RefCell::default();
    }
    PLANS.with_borrow_mut(|plans| render_records(batch, view, file, first_time, plans));
}

fn render_records(
    batch: &mut Batch,
    view: View,
    file: Option<&str>,
    first_time: std::time::Duration,
    plans: &mut json::Plans,
) {
    let mut lines = json::Lines::at(batch.end.unwrap_or(batch.out.len()));
    batch.render_each(|record, out, tally| {
        let since_first = record.timestamp.saturating_sub(first_time);
        // Matched by reference: moving the frame out of the result would copy its 400 bytes.
        match &record.frame() {
            Ok(frame) => {
                let description = Description::new(frame);
                tally.roce(frame.repr.bth.opcode, description.icrc().is_ok());
                match view {
                    View::Line => text::line(out, record, since_first, &description),
                    View::Tree => text::tree(out, record, since_first, &description),
                    View::Json { every_field } => {
                        lines.packet(out, plans, every_field, record, file, &description)
                    }
                }
            }
            Err(Error::NotRoce(_)) => tally.not_roce(),
            Err(error) => {
                tally.malformed();
                match view {
                    View::Line | View::Tree => text::malformed(out, record, since_first, error),
                    View::Json { every_field } => {
                        lines.malformed(out, every_field, record, file, error)
                    }
                }
            }
        }
    });
    if let View::Json { .. } = view {
        batch.end = Some(lines.end());
    }
}

/// The closing summary, and a line for each capture that ends in damage.
fn summary(tally: &Tally, damaged: &[(Arc<str>, CaptureError)]) -> String {
    let mut text = tally.summary();
    for (name, error) in damaged {
        let what = match error {
            CaptureError::Truncated => "truncated: it ends in the middle of a record".to_string(),
            other => format!("damaged: {other}"),
        };
        text.push_str(&format!(
            "{name} is {what}; the summary counts the records before it\n"
        ));
    }
    text
}

/// Where a record's network packet starts, for the tree's first heading.
fn link_header_len(record: &Record) -> usize {
    match record.link {
        Link::Ethernet => 0,
        Link::LinuxSll => 16,
        Link::LinuxSll2 => 20,
    }
}

fn capture_failure(name: &str, e: CaptureError) -> Failure {
    let what = match e {
        CaptureError::Io(e) if e.kind() == io::ErrorKind::NotFound => "no such file".to_string(),
        CaptureError::Io(e) => format!("cannot read it: {}", io_words(&e)),
        other => other.to_string(),
    };
    Failure::usage(format!("{name}: {what}"))
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

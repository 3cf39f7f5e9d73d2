//! Decoding on every core with the output in capture order and memory bounded whatever the
//! capture's size: the main thread reads records into batches, workers render each batch into
//! its own output buffer, and one writer thread writes the batches out in the order they were
//! read. A fixed set of batches circulates (reader, worker, writer, back to the reader), so the
//! reader can never run more than that many batches ahead of the output, and nothing is
//! allocated per packet once the batches have grown to their working size.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam::channel::{self, Receiver, Sender};
use roce_wire::capture::{CaptureError, Link, Reader, Record};

use super::tally::Tally;

/// Records per batch: enough that handing a batch between threads costs little per record, few
/// enough that the batches in flight stay small (about 0.5 MiB of input and 3 MiB of JSON).
const BATCH_RECORDS: usize = 4096;
/// A batch also ends once its input reaches this size, so a capture of jumbo frames keeps the
/// same bound.
const BATCH_BYTES: usize = 1 << 20;

/// Where a record's bytes lie in its batch, and the rest of the record.
struct Meta {
    number: u64,
    timestamp: Duration,
    link: Link,
    original_len: u32,
    start: usize,
    end: usize,
}

/// Records of one capture, read in a row, and what rendering them made.
pub struct Batch {
    seq: u64,
    /// The capture the records come from, as the user named it, when there are several.
    pub file: Option<Arc<str>>,
    /// Whether the text views head this batch with the file's name (its first batch).
    pub heading: bool,
    /// The timestamp of the capture's first record, which the lines count from.
    pub first_time: Duration,
    records: Vec<Meta>,
    data: Vec<u8>,
    /// The rendered records.
    pub out: Vec<u8>,
    /// What the records were (opcodes, bad ICRCs, ...), merged into the total by the writer.
    pub tally: Tally,
}

impl Batch {
    fn new() -> Batch {
        Batch {
            seq: 0,
            file: None,
            heading: false,
            first_time: Duration::ZERO,
            records: Vec::with_capacity(BATCH_RECORDS),
            data: Vec::new(),
            out: Vec::new(),
            tally: Tally::default(),
        }
    }

    fn full(&self) -> bool {
        self.records.len() >= BATCH_RECORDS || self.data.len() >= BATCH_BYTES
    }

    /// Hands each record, in order, to `each` with the batch's output and tally.
    pub fn render_each(&mut self, mut each: impl FnMut(&Record, &mut Vec<u8>, &mut Tally)) {
        let Batch {
            records,
            data,
            out,
            tally,
            ..
        } = self;
        for m in records.iter() {
            let record = Record {
                number: m.number,
                timestamp: m.timestamp,
                link: m.link,
                data: &data[m.start..m.end],
                original_len: m.original_len,
            };
            each(&record, out, tally);
        }
    }

    fn push(&mut self, record: &Record) {
        let start = self.data.len();
        self.data.extend_from_slice(record.data);
        self.records.push(Meta {
            number: record.number,
            timestamp: record.timestamp,
            link: record.link,
            original_len: record.original_len,
            start,
            end: self.data.len(),
        });
    }

    /// Empties a batch for the records that follow number `seq` (counted up).
    fn start(&mut self, seq: &mut u64, file: Option<Arc<str>>, heading: bool, first: Duration) {
        self.records.clear();
        self.data.clear();
        self.out.clear();
        self.tally = Tally::default();
        self.seq = *seq;
        *seq += 1;
        self.file = file;
        self.heading = heading;
        self.first_time = first;
    }
}

/// One capture to decode.
pub struct Input<R: io::Read> {
    pub reader: Reader<R>,
    /// How the user named it, for headings and messages.
    pub name: Arc<str>,
}

/// How the run ended.
pub struct Outcome {
    /// Every record's tally, summed.
    pub tally: Tally,
    /// Captures that could not be read to their end, with why.
    pub damaged: Vec<(Arc<str>, CaptureError)>,
    /// Why the output could not be written, if it could not.
    pub output: Option<io::Error>,
}

/// Decodes `inputs` in order with `workers` threads rendering batches with `render`, and writes
/// the results to `out` in capture order. `several` says whether batches carry their file's
/// name.
pub fn run<R, W>(
    inputs: Vec<Input<R>>,
    several: bool,
    workers: usize,
    render: impl Fn(&mut Batch) + Sync,
    out: W,
) -> Outcome
where
    R: io::Read,
    W: Write + Send,
{
    let workers = workers.max(1);
    // Batches in flight: one being read, one being written, two per worker (one rendering, one
    // queued), and one more so the reader need not wait for the writer to hand one back.
    let in_flight = 2 * workers + 3;
    let (free_tx, free_rx) = channel::bounded::<Batch>(in_flight);
    let (work_tx, work_rx) = channel::bounded::<Batch>(in_flight);
    let (done_tx, done_rx) = channel::bounded::<Batch>(in_flight);
    for _ in 0..in_flight {
        free_tx.send(Batch::new()).expect("room for every batch");
    }
    thread::scope(|scope| {
        for _ in 0..workers {
            let (work_rx, done_tx) = (work_rx.clone(), done_tx.clone());
            let render = &render;
            scope.spawn(move || {
                for mut batch in work_rx {
                    render(&mut batch);
                    if done_tx.send(batch).is_err() {
                        return; // the writer stopped
                    }
                }
            });
        }
        drop((work_rx, done_tx));
        let writer = scope.spawn(move || write_in_order(done_rx, free_tx, out));
        let damaged = read(inputs, several, &free_rx, &work_tx);
        drop(work_tx);
        let (tally, output) = writer.join().expect("the writer does not panic");
        Outcome {
            tally,
            damaged,
            output,
        }
    })
}

/// Reads every input into batches for the workers; returns the inputs that ended in damage.
/// Stops early if the writer stopped (nothing comes back to fill).
fn read<R: io::Read>(
    inputs: Vec<Input<R>>,
    several: bool,
    free: &Receiver<Batch>,
    work: &Sender<Batch>,
) -> Vec<(Arc<str>, CaptureError)> {
    let mut damaged = Vec::new();
    let mut seq = 0;
    for Input { mut reader, name } in inputs {
        let file = several.then(|| name.clone());
        let Ok(mut batch) = free.recv() else {
            return damaged;
        };
        batch.start(&mut seq, file.clone(), several, Duration::ZERO);
        let mut first_time = None;
        loop {
            match reader.next_record() {
                Some(Ok(record)) => {
                    let first = *first_time.get_or_insert(record.timestamp);
                    batch.first_time = first;
                    batch.push(&record);
                    if batch.full() {
                        if work.send(batch).is_err() {
                            return damaged;
                        }
                        let Ok(next) = free.recv() else {
                            return damaged;
                        };
                        batch = next;
                        batch.start(&mut seq, file.clone(), false, first);
                    }
                }
                Some(Err(error)) => {
                    damaged.push((name.clone(), error));
                    break;
                }
                None => break,
            }
        }
        // The last batch of a capture goes out even when empty: it may carry the heading.
        if work.send(batch).is_err() {
            return damaged;
        }
    }
    damaged
}

/// Writes rendered batches in the order they were read, handing each back to the reader once
/// written. After a write error it writes nothing more but keeps receiving, so no thread waits
/// for ever, and the error is returned.
fn write_in_order<W: Write>(
    done: Receiver<Batch>,
    free: Sender<Batch>,
    mut out: W,
) -> (Tally, Option<io::Error>) {
    let mut tally = Tally::default();
    let mut error = None;
    let mut waiting: BTreeMap<u64, Batch> = BTreeMap::new();
    let mut next = 0;
    for batch in done {
        waiting.insert(batch.seq, batch);
        while let Some(batch) = waiting.remove(&next) {
            next += 1;
            tally.add(&batch.tally);
            if error.is_none() {
                if let Err(e) = out.write_all(&batch.out) {
                    error = Some(e);
                }
            }
            if error.is_some() {
                // Stop the reader: nothing more is handed back.
                drop(batch);
                continue;
            }
            let _ = free.send(batch);
        }
        if error.is_some() {
            break;
        }
    }
    if error.is_none() {
        error = out.flush().err();
    }
    (tally, error)
}

//! Decoding on every core with the output in capture order and memory bounded whatever the
//! capture's size: the main thread reads records into batches, workers render each batch into
//! its own output buffer, and one writer thread writes the batches out in the order they were
//! read. A fixed set of batches circulates (reader, worker, writer, back to the reader), so the
//! reader can never run more than that many batches ahead of the output, and nothing is
//! allocated per packet once the batches have grown to their working size.
//!
//! A live stream (`tcpdump -U -w - | roce decode -`) must not wait for a batch to fill: its
//! [`Live`] reader hands on what has been read whenever the next read would have to wait.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::os::fd::AsFd;
use std::rc::Rc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crossbeam::channel::{self, Receiver, Sender};
use roce_wire::capture::{CaptureError, Link, Reader, Record};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

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
    /// The rendered records: all of `out`, or its first `end` bytes when the JSON lines wrote
    /// it, the rest being room the next batch's lines are written into (bytes already
    /// initialized: the room is zeroed once, when it first grows, not again for every batch).
    pub out: Vec<u8>,
    pub end: Option<usize>,
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
            end: None,
            tally: Tally::default(),
        }
    }

    /// What rendering the records wrote.
    pub fn output(&self) -> &[u8] {
        match self.end {
            Some(end) => &self.out[..end],
            None => &self.out,
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
        match self.end {
            // The JSON lines' room stays for the next batch's lines.
            Some(_) => self.end = Some(0),
            None => self.out.clear(),
        }
        self.tally = Tally::default();
        self.seq = *seq;
        *seq += 1;
        self.file = file;
        self.heading = heading;
        self.first_time = first;
    }
}

/// What a [`Live`] reader calls before it waits for more input.
pub type BeforeWait = Rc<RefCell<Option<Box<dyn FnMut()>>>>;

/// A stream that may keep the reader waiting (standard input from a live capture): before a
/// read that would wait, it calls the hook the pipeline sets, which sends on the batch read so
/// far. A file, always ready, never calls it.
pub struct Live<R: io::Read + AsFd> {
    inner: R,
    before_wait: BeforeWait,
}

impl<R: io::Read + AsFd> Live<R> {
    pub fn new(inner: R) -> (Live<R>, BeforeWait) {
        let before_wait = BeforeWait::default();
        let live = Live {
            inner,
            before_wait: before_wait.clone(),
        };
        (live, before_wait)
    }
}

impl<R: io::Read + AsFd> io::Read for Live<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut fds = [PollFd::new(&self.inner, PollFlags::IN)];
        let ready = poll(&mut fds, Some(&Timespec::default())).map_or(true, |n| n > 0);
        if !ready {
            if let Some(hand_on) = self.before_wait.borrow_mut().as_mut() {
                hand_on();
            }
        }
        self.inner.read(buf)
    }
}

/// One capture to decode.
pub struct Input<R: io::Read> {
    pub reader: Reader<R>,
    /// How the user named it, for headings and messages.
    pub name: Arc<str>,
    /// For a live stream, the hook through which it hands on what it has before waiting.
    pub before_wait: Option<BeforeWait>,
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

/// The batch being filled, and what it takes to hand it on and start the next.
struct Feeder {
    batch: Batch,
    seq: u64,
    free: Receiver<Batch>,
    work: Sender<Batch>,
    /// Set once the writer has stopped: nothing more is read.
    stopped: bool,
}

impl Feeder {
    /// Hands the batch on and starts the next of the same capture (no heading).
    fn hand_on(&mut self) {
        if self.stopped {
            return;
        }
        let (file, first) = (self.batch.file.clone(), self.batch.first_time);
        // Out first, then a free batch in: the writer may be waiting for this one.
        let full = std::mem::replace(&mut self.batch, Batch::new());
        if self.work.send(full).is_err() {
            self.stopped = true;
            return;
        }
        let Ok(next) = self.free.recv() else {
            self.stopped = true;
            return;
        };
        self.batch = next;
        self.batch.start(&mut self.seq, file, false, first);
    }

    /// Hands on what has been read, if anything: for a live stream about to wait.
    fn hand_on_what_there_is(&mut self) {
        if !self.batch.records.is_empty() || self.batch.heading {
            self.hand_on();
        }
    }
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
    let Ok(mut batch) = free.recv() else {
        return damaged;
    };
    let mut seq = 0;
    batch.start(&mut seq, None, false, Duration::ZERO);
    let feeder = Rc::new(RefCell::new(Feeder {
        batch,
        seq,
        free: free.clone(),
        work: work.clone(),
        stopped: false,
    }));
    for input in inputs {
        let Input {
            mut reader,
            name,
            before_wait,
        } = input;
        {
            // The batch in hand is empty: the previous capture's last one has gone out.
            let batch = &mut feeder.borrow_mut().batch;
            batch.file = several.then(|| name.clone());
            batch.heading = several;
            batch.first_time = Duration::ZERO;
        }
        if let Some(hook) = &before_wait {
            let feeder = feeder.clone();
            *hook.borrow_mut() = Some(Box::new(move || {
                feeder.borrow_mut().hand_on_what_there_is()
            }));
        }
        let mut first_time = None;
        loop {
            let next = reader.next_record();
            let mut f = feeder.borrow_mut();
            if f.stopped {
                break;
            }
            match next {
                Some(Ok(record)) => {
                    f.batch.first_time = *first_time.get_or_insert(record.timestamp);
                    f.batch.push(&record);
                    if f.batch.full() {
                        f.hand_on();
                    }
                }
                Some(Err(error)) => {
                    damaged.push((name.clone(), error));
                    break;
                }
                None => break,
            }
        }
        if let Some(hook) = before_wait {
            hook.borrow_mut().take();
        }
        // The last batch of a capture goes out even when empty: it may carry the heading.
        let mut f = feeder.borrow_mut();
        f.hand_on();
        if f.stopped {
            break;
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
                if let Err(e) = out.write_all(batch.output()) {
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
        debug_assert!(waiting.is_empty(), "batches numbered with a gap");
        error = out.flush().err();
    }
    (tally, error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Instant;

    /// Bytes of each generated record's frame: large, so that batches end on their size.
    const FRAME: usize = 4000;
    /// A pcap record: its 16-byte header and the frame.
    const RECORD: u64 = 16 + FRAME as u64;

    /// A pcap stream of `records` records made as it is read, counting the bytes handed out.
    struct Endless {
        records: u64,
        made: u64,
        pending: Vec<u8>,
        at: usize,
        handed_out: Arc<AtomicU64>,
    }

    impl io::Read for Endless {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.at == self.pending.len() {
                if self.made == self.records {
                    return Ok(0);
                }
                self.pending.clear();
                self.at = 0;
                if self.made == 0 {
                    // Little-endian pcap, microseconds, snaplen 65535, Ethernet.
                    self.pending
                        .extend_from_slice(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]);
                    self.pending.extend_from_slice(&[0; 8]);
                    self.pending.extend_from_slice(&65535u32.to_le_bytes());
                    self.pending.extend_from_slice(&1u32.to_le_bytes());
                }
                self.made += 1;
                self.pending
                    .extend_from_slice(&(self.made as u32).to_le_bytes());
                self.pending.extend_from_slice(&0u32.to_le_bytes());
                self.pending
                    .extend_from_slice(&(FRAME as u32).to_le_bytes());
                self.pending
                    .extend_from_slice(&(FRAME as u32).to_le_bytes());
                self.pending.resize(self.pending.len() + FRAME, 0);
            }
            let n = buf.len().min(self.pending.len() - self.at);
            buf[..n].copy_from_slice(&self.pending[self.at..self.at + n]);
            self.at += n;
            self.handed_out.fetch_add(n as u64, Ordering::Relaxed);
            Ok(n)
        }
    }

    /// Checks, at every write, that the reader is no further ahead of the output than the
    /// batches in flight and the capture reader's own buffer allow, and that the records come out
    /// numbered 1, 2, 3, ... The first write waits until the reader has had time to run ahead.
    struct Checked {
        handed_out: Arc<AtomicU64>,
        written: u64,
        bound: u64,
        /// How many records the whole run must write.
        expected: u64,
    }

    impl Checked {
        fn check(&mut self) {
            let ahead = self
                .handed_out
                .load(Ordering::Relaxed)
                .saturating_sub(self.written * RECORD);
            assert!(
                ahead <= self.bound,
                "the reader ran {ahead} bytes ahead of the output (bound {})",
                self.bound
            );
        }
    }

    impl Write for Checked {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.written == 0 {
                // Hold the output back: an unbounded reader would now read on and on.
                let deadline = Instant::now() + Duration::from_secs(2);
                while Instant::now() < deadline {
                    self.check();
                    thread::sleep(Duration::from_millis(10));
                }
            }
            for line in std::str::from_utf8(buf).expect("text").lines() {
                self.written += 1;
                assert_eq!(line, self.written.to_string(), "out of order");
            }
            self.check();
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            // The writer flushes once, at the end.
            assert_eq!(self.written, self.expected, "records lost");
            Ok(())
        }
    }

    #[test]
    fn a_batch_keeps_the_room_its_json_lines_left_and_writes_only_the_lines() {
        let mut batch = Batch::new();
        let mut seq = 0;
        batch.start(&mut seq, None, false, Duration::ZERO);
        // Lines of 6 bytes, and room after them.
        batch.out.extend_from_slice(b"line1\n\0\0\0\0");
        batch.end = Some(6);
        assert_eq!(batch.output(), b"line1\n");
        batch.start(&mut seq, None, false, Duration::ZERO);
        assert_eq!(batch.output(), b"");
        assert_eq!(batch.out.len(), 10, "the room stays");
        // A batch whose output is all its own (the text views) starts empty.
        batch.end = None;
        batch.start(&mut seq, None, false, Duration::ZERO);
        assert!(batch.out.is_empty());
    }

    #[test]
    fn the_reader_stays_a_bounded_distance_ahead_of_the_output_which_keeps_capture_order() {
        // 400 MB of capture, far more than the bound.
        let records = 100_000;
        let workers = 3;
        let handed_out = Arc::new(AtomicU64::new(0));
        let endless = Endless {
            records,
            made: 0,
            pending: Vec::new(),
            at: 0,
            handed_out: handed_out.clone(),
        };
        let input = Input {
            reader: Reader::new(endless).expect("a pcap header"),
            name: Arc::from("generated"),
            before_wait: None,
        };
        // pcap-file reads ahead up to 8 MB; each batch in flight holds up to BATCH_BYTES and
        // one record more.
        let in_flight = 2 * workers as u64 + 3;
        let bound = 8_000_000 + in_flight * (BATCH_BYTES as u64 + RECORD) + RECORD;
        let out = Checked {
            handed_out,
            written: 0,
            bound,
            expected: records,
        };
        let outcome = run(
            vec![input],
            false,
            workers,
            |batch: &mut Batch| {
                batch.render_each(|record, out, _| {
                    out.extend_from_slice(format!("{}\n", record.number).as_bytes())
                })
            },
            out,
        );
        assert!(outcome.output.is_none() && outcome.damaged.is_empty());
        assert!(bound < records * RECORD / 10);
    }
}

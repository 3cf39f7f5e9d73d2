//! A tee that writes every frame a link sends and receives to a pcap file, for Wireshark and for
//! `roce decode --strict`.
//!
//! A capture that cannot be written (a full disk) never stops the NIC, and never spoils the file
//! either: a record goes into the file's buffer whole or not at all, so the frames that could not
//! be written are left out of it and everything before and after stays readable. Frames left
//! out are said at warn (and counted again when the capture is flushed at shutdown).

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapPacket, PcapWriter};
use tracing::warn;

use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// Bytes of a pcap record before its frame: two timestamps and two lengths.
const RECORD_HEADER: usize = 16;
/// The capture file's buffer: room for several of the largest records, so that a record always
/// fits in it whole once it has been flushed.
const FILE_BUFFER: usize = 64 * 1024;
/// While the file refuses frames (a disk that is full, or nearly: it may take some and refuse
/// the next), a warning at most this often.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// A pcap file that several tees may share (the two ends of a demo cable write one capture).
#[derive(Clone)]
pub struct PcapSink {
    recorder: Arc<Mutex<Recorder>>,
}

/// The pcap writer, and the file's buffer beneath it (which the writer owns, but which
/// [`Recorder::append`] must see to keep records whole).
struct Recorder {
    pcap: PcapWriter<SharedFile>,
    file: SharedFile,
    /// The file's name, for the warnings.
    name: String,
    /// Frames left out because the file refused them, in all.
    left_out: u64,
    /// When a refusal was last said (at most one line per [`WARN_EVERY`]).
    warned: Option<Instant>,
}

/// The capture file's buffer, reachable both by the pcap writer and by the recorder.
#[derive(Clone)]
struct SharedFile(Arc<Mutex<BufWriter<Box<dyn Write + Send>>>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock()?.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.lock()?.flush()
    }
}

impl SharedFile {
    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, BufWriter<Box<dyn Write + Send>>>> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("capture file lock poisoned"))
    }
}

impl PcapSink {
    pub fn create(path: &Path) -> io::Result<PcapSink> {
        PcapSink::over(Box::new(File::create(path)?), path.display().to_string())
    }

    /// A capture written to `out`, called `name` in warnings.
    fn over(out: Box<dyn Write + Send>, name: String) -> io::Result<PcapSink> {
        let file = SharedFile(Arc::new(Mutex::new(BufWriter::with_capacity(
            FILE_BUFFER,
            out,
        ))));
        let pcap = PcapWriter::new(file.clone()).map_err(io::Error::other)?;
        Ok(PcapSink {
            recorder: Arc::new(Mutex::new(Recorder {
                pcap,
                file,
                name,
                left_out: 0,
                warned: None,
            })),
        })
    }

    fn recorder(&self) -> io::Result<std::sync::MutexGuard<'_, Recorder>> {
        self.recorder
            .lock()
            .map_err(|_| io::Error::other("pcap writer lock poisoned"))
    }

    /// Appends one Ethernet frame, stamped now. A frame the file cannot take is left out whole
    /// (the error says why).
    pub fn write(&self, frame: &[u8]) -> io::Result<()> {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let mut recorder = self.recorder()?;
        let result = recorder.append(&PcapPacket::new(timestamp, frame.len() as u32, frame));
        if let Err(e) = &result {
            recorder.left_out(e);
        }
        result
    }

    /// Pushes buffered frames to the file; says at warn how many the file could not take.
    pub fn flush(&self) -> io::Result<()> {
        let recorder = self.recorder()?;
        if recorder.left_out > 0 {
            warn!(
                capture = %recorder.name,
                left_out = recorder.left_out,
                "the capture misses frames the file could not take"
            );
        }
        recorder.file.clone().flush()
    }
}

impl Recorder {
    /// Counts a frame the file refused, and says so (at most every [`WARN_EVERY`]).
    fn left_out(&mut self, error: &io::Error) {
        self.left_out += 1;
        let now = Instant::now();
        if self.warned.is_none_or(|at| now - at >= WARN_EVERY) {
            self.warned = Some(now);
            warn!(
                capture = %self.name,
                error = %error,
                left_out = self.left_out,
                "the capture cannot be written: frames are left out of it, each whole, until it \
                 can (the NIC goes on)"
            );
        }
    }

    /// Appends one record, whole or not at all. The pcap writer writes a record in five pieces,
    /// and a file that refused one of them would be left with half a record, which makes every
    /// record after it unreadable (a reader sees a capture that ends there). So the record goes
    /// only into a buffer with room for all of it: if the buffer lacks the room, it is flushed
    /// first, and if the file refuses that, the record is left out.
    fn append(&mut self, packet: &PcapPacket<'_>) -> io::Result<()> {
        {
            let mut file = self.file.lock()?;
            if file.capacity() - file.buffer().len() < RECORD_HEADER + packet.data.len() {
                // On failure the buffer keeps what the file did not take: whole records.
                file.flush()?;
            }
        }
        self.pcap.write_packet(packet).map_err(io::Error::other)?;
        Ok(())
    }
}

/// Wraps a link and records what crosses it.
pub struct PcapTee<L: Link> {
    inner: L,
    sink: PcapSink,
    /// Record received frames too (off when the peer's tee records them already).
    record_rx: bool,
}

impl<L: Link> PcapTee<L> {
    pub fn new(inner: L, sink: PcapSink, record_rx: bool) -> PcapTee<L> {
        PcapTee {
            inner,
            sink,
            record_rx,
        }
    }
}

impl<L: Link> Link for PcapTee<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        // A capture that cannot be written must not stop the NIC; the frame still goes out.
        let _ = self.sink.write(&frame);
        self.inner.send(frame)
    }

    fn can_send(&self) -> bool {
        self.inner.can_send()
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        let frame = self.inner.recv()?;
        if let (Some(f), true) = (&frame, self.record_rx) {
            let _ = self.sink.write(f);
        }
        Ok(frame)
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn service(&mut self, now: std::time::Instant) -> Option<std::time::Instant> {
        self.inner.service(now)
    }

    fn flush_sends(&mut self) -> u64 {
        self.inner.flush_sends()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sink.flush()?;
        self.inner.flush()
    }

    fn describe(&self) -> String {
        format!("{} with pcap tee", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pcap_file::pcap::PcapReader;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A disk that fills: takes bytes while it has room (writing part of a write when it has
    /// only that much), then refuses with "no space left", as `write(2)` does.
    #[derive(Clone, Default)]
    struct Disk {
        bytes: Arc<Mutex<Vec<u8>>>,
        room: Arc<AtomicUsize>,
    }

    impl Write for Disk {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let room = self.room.load(Ordering::SeqCst);
            if room == 0 {
                return Err(io::Error::from(io::ErrorKind::StorageFull));
            }
            let n = buf.len().min(room);
            self.room.fetch_sub(n, Ordering::SeqCst);
            self.bytes.lock().unwrap().extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Frame `i`: `len` bytes of `i`.
    fn frame(i: usize, len: usize) -> Vec<u8> {
        vec![i as u8; len]
    }

    /// The disk fills in the middle of a run of frames (of every size up to a jumbo frame's)
    /// and later has room again: the frames it could not take are missing, each whole, and the
    /// file reads to its end with every frame written before and after, in order.
    #[test]
    fn a_full_disk_leaves_frames_out_whole_and_the_capture_readable() {
        let disk = Disk::default();
        disk.room.store(200_000, Ordering::SeqCst);
        let sink = PcapSink::over(Box::new(disk.clone()), "test".into()).unwrap();
        let sizes = [60, 1082, 4154, 9216, 77, 1082, 1082];
        let mut kept = Vec::new();
        let mut refused = 0;
        for i in 0..400 {
            if i == 300 {
                // Room again.
                disk.room.store(usize::MAX / 2, Ordering::SeqCst);
            }
            let f = frame(i, sizes[i % sizes.len()]);
            match sink.write(&f) {
                Ok(()) => kept.push(f),
                Err(_) => refused += 1,
            }
        }
        sink.flush().unwrap();
        assert!(refused > 0, "the disk never filled");
        assert!(
            kept.len() > 300 - refused,
            "frames after the disk had room were kept"
        );
        let bytes = disk.bytes.lock().unwrap().clone();
        let mut reader = PcapReader::new(&bytes[..]).unwrap();
        let mut read = Vec::new();
        while let Some(packet) = reader.next_packet() {
            read.push(packet.expect("every record whole").data.into_owned());
        }
        assert_eq!(read.len(), kept.len());
        assert!(read == kept, "the frames kept, in order");
    }
}

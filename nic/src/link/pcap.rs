//! A tee that writes every frame a link sends and receives to a pcap file, for Wireshark and for
//! `roce decode --strict`.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::os::fd::RawFd;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use pcap_file::pcap::{PcapPacket, PcapWriter};

use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// A pcap file that several tees may share (the two ends of a demo cable write one capture).
#[derive(Clone)]
pub struct PcapSink {
    writer: Arc<Mutex<PcapWriter<SharedFile>>>,
    file: SharedFile,
}

/// The capture file's buffer, reachable both by the pcap writer and by `flush`.
#[derive(Clone)]
struct SharedFile(Arc<Mutex<BufWriter<File>>>);

impl Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.lock()?.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.lock()?.flush()
    }
}

impl SharedFile {
    fn lock(&self) -> io::Result<std::sync::MutexGuard<'_, BufWriter<File>>> {
        self.0
            .lock()
            .map_err(|_| io::Error::other("capture file lock poisoned"))
    }
}

impl PcapSink {
    pub fn create(path: &Path) -> io::Result<PcapSink> {
        let file = SharedFile(Arc::new(Mutex::new(BufWriter::new(File::create(path)?))));
        let writer = PcapWriter::new(file.clone()).map_err(io::Error::other)?;
        Ok(PcapSink {
            writer: Arc::new(Mutex::new(writer)),
            file,
        })
    }

    /// Appends one Ethernet frame, stamped now.
    pub fn write(&self, frame: &[u8]) -> io::Result<()> {
        let timestamp = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let packet = PcapPacket::new(timestamp, frame.len() as u32, frame);
        let mut writer = self
            .writer
            .lock()
            .map_err(|_| io::Error::other("pcap writer lock poisoned"))?;
        writer.write_packet(&packet).map_err(io::Error::other)?;
        Ok(())
    }

    /// Pushes buffered frames to the file.
    pub fn flush(&self) -> io::Result<()> {
        self.file.clone().flush()
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

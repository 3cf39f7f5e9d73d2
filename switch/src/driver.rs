//! The switch as a process: one thread moves frames between the ports' links and the
//! [`Switch`], sleeps in `ppoll(2)` on the links and until the next frame is due on a line, and
//! publishes the ports' counters to a file as it goes.

use std::io;
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::pfc::{Pause, FRAME_LEN};
use roce_nic::link::Link;
use roce_nic::waker::{SharedWord, Waker};
use serde::Serialize;
use tracing::{debug, info, warn};

use crate::counters::PortCounters;
use crate::switch::{Switch, Transmit};

/// Frames taken from one port before looking at the others.
const RX_BUDGET: usize = 64;
/// Deadlines closer than this are waited for by yielding rather than sleeping.
const SPIN_BELOW: Duration = Duration::from_micros(5);
/// The switch thread's timer slack: how late the kernel may end its sleeps (50 µs by default,
/// longer than a 4 KiB frame takes at 1 Gbit/s). The line rate holds however late the thread
/// wakes (the queues keep virtual time); this keeps the bursts it then sends small.
const TIMER_SLACK_NS: libc::c_ulong = 2_000;
/// The longest sleep, so that a stop request is seen even if a wake-up were lost.
const MAX_SLEEP: Duration = Duration::from_millis(200);

/// One port: its link and how to describe it.
pub struct PortLink {
    pub link: Box<dyn Link>,
    pub describe: String,
}

/// Where and how often the counters are written: `path` replaced whole each time (the latest
/// figures), `log` appended to (one JSON line per interval: the history, for plotting queue
/// depths and marks over time). At least one of them.
#[derive(Debug, Clone)]
pub struct StatsFile {
    pub path: Option<PathBuf>,
    pub log: Option<PathBuf>,
    pub every: Duration,
}

/// What the stats file holds.
#[derive(Debug, Serialize)]
pub struct Snapshot<'a> {
    /// Seconds since the Unix epoch.
    pub time: f64,
    pub ports: Vec<PortSnapshot<'a>>,
}

#[derive(Debug, Serialize)]
pub struct PortSnapshot<'a> {
    pub port: usize,
    pub link: &'a str,
    pub rate: u64,
    pub buffer: usize,
    pub paused: bool,
    #[serde(flatten)]
    pub counters: PortCounters,
}

/// Stops a running switch from another thread.
#[derive(Clone)]
pub struct Stopper {
    flag: Arc<AtomicBool>,
    waker: Arc<Waker>,
}

impl Stopper {
    pub fn stop(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.waker.signal();
    }
}

/// A switch with its ports, ready to run.
pub struct Driver {
    switch: Switch<FrameBuf>,
    ports: Vec<PortLink>,
    pool: Arc<BufPool>,
    waker: Arc<Waker>,
    stop: Arc<AtomicBool>,
    stats: Option<StatsFile>,
    /// The open history file of `stats.log`.
    log: Option<std::io::BufWriter<std::fs::File>>,
    pollfds: Vec<libc::pollfd>,
}

impl Driver {
    pub fn new(
        switch: Switch<FrameBuf>,
        mut ports: Vec<PortLink>,
        stats: Option<StatsFile>,
    ) -> io::Result<Driver> {
        let waker = Waker::new(SharedWord::private())?;
        // Buffers for every queue's worth of frames would be too many to stock; these cover
        // the usual burst and more are allocated (and kept) as queues grow.
        let pool = BufPool::stocked(16_384, 1024);
        for port in &mut ports {
            port.link.attach(&pool, &waker);
        }
        let log = match stats.as_ref().and_then(|s| s.log.as_ref()) {
            Some(path) => Some(std::io::BufWriter::new(std::fs::File::create(path)?)),
            None => None,
        };
        Ok(Driver {
            switch,
            ports,
            pool,
            waker,
            stop: Arc::new(AtomicBool::new(false)),
            stats,
            log,
            pollfds: Vec::new(),
        })
    }

    pub fn stopper(&self) -> Stopper {
        Stopper {
            flag: Arc::clone(&self.stop),
            waker: Arc::clone(&self.waker),
        }
    }

    /// Runs until stopped; returns the last counters of every port.
    pub fn run(mut self) -> Vec<PortCounters> {
        info!(ports = self.ports.len(), "switch running");
        // SAFETY: prctl(PR_SET_TIMERSLACK) changes only this thread's timer slack.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, TIMER_SLACK_NS, 0, 0, 0) };
        let mut next_stats = Instant::now();
        while !self.stop.load(Ordering::SeqCst) {
            let now = Instant::now();
            let mut busy = self.receive(now);
            let mut deadline = self.switch.next_deadline();
            for port in &mut self.ports {
                if let Some(t) = port.link.service(now) {
                    deadline = Some(deadline.map_or(t, |d| d.min(t)));
                }
            }
            busy |= self.transmit(now);
            if let Some(every) = self.stats.as_ref().map(|s| s.every) {
                if now >= next_stats {
                    self.write_stats();
                    next_stats = now + every;
                }
                deadline = Some(deadline.map_or(next_stats, |d| d.min(next_stats)));
            }
            if busy {
                continue;
            }
            let deadline = self
                .switch
                .next_deadline()
                .into_iter()
                .chain(deadline)
                .min();
            // Announce the sleep, then look once more: a link without a file descriptor (the
            // in-process cable) wakes the switch through the waker only while it is announced,
            // and a frame put on one before the announcement woke nobody.
            self.waker.prepare_sleep();
            if self.receive(Instant::now()) {
                self.waker.awake();
                continue;
            }
            self.sleep(deadline);
            self.waker.awake();
        }
        for port in &mut self.ports {
            if let Err(e) = port.link.flush() {
                warn!(link = %port.describe, error = %e, "flushing at shutdown failed");
            }
        }
        self.write_stats();
        info!("switch stopped");
        (0..self.switch.port_count())
            .map(|p| self.switch.counters(p).clone())
            .collect()
    }

    fn receive(&mut self, now: Instant) -> bool {
        let mut busy = false;
        let pool = &self.pool;
        for (p, port) in self.ports.iter_mut().enumerate() {
            for _ in 0..RX_BUDGET {
                match port.link.recv() {
                    Ok(Some(frame)) => {
                        busy = true;
                        self.switch
                            .receive(p, frame, now, |bytes| pool.copy_of(bytes));
                    }
                    Ok(None) => break,
                    Err(e) => {
                        debug!(link = %port.describe, error = %e, "receive failed");
                        break;
                    }
                }
            }
        }
        busy
    }

    fn transmit(&mut self, now: Instant) -> bool {
        let mut busy = false;
        while let Some((p, out)) = self.switch.poll_transmit(now) {
            busy = true;
            let frame = match out {
                Transmit::Frame(frame) => frame,
                Transmit::Pause { quanta, source } => {
                    let mut buf = self.pool.take();
                    let len = Pause::priority(self.switch.pfc_priority(), quanta)
                        .emit(source, buf.space());
                    debug_assert_eq!(len, FRAME_LEN);
                    buf.set_len(len);
                    buf
                }
            };
            if self.ports[p].link.send(frame).is_err() {
                self.switch.lost(p, 1);
            }
        }
        for (p, port) in self.ports.iter_mut().enumerate() {
            let lost = port.link.flush_sends();
            if lost > 0 {
                self.switch.lost(p, lost);
            }
        }
        busy
    }

    fn sleep(&mut self, deadline: Option<Instant>) {
        let now = Instant::now();
        let wait = deadline.map_or(MAX_SLEEP, |d| {
            d.saturating_duration_since(now).min(MAX_SLEEP)
        });
        if wait < SPIN_BELOW {
            std::thread::yield_now();
            return;
        }
        self.pollfds.clear();
        self.pollfds.push(libc::pollfd {
            fd: self.waker.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        });
        for port in &self.ports {
            if let Some(fd) = port.link.poll_fd() {
                self.pollfds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
        }
        let ts = libc::timespec {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_nsec: wait.subsec_nanos() as libc::c_long,
        };
        // SAFETY: a valid array of pollfd and a valid timespec; no signal mask change.
        unsafe {
            libc::ppoll(
                self.pollfds.as_mut_ptr(),
                self.pollfds.len() as libc::nfds_t,
                &ts,
                std::ptr::null(),
            )
        };
        if self.pollfds[0].revents != 0 {
            let mut count = 0u64;
            // SAFETY: reads 8 bytes into a valid u64 from the waker's non-blocking eventfd.
            unsafe {
                libc::read(
                    self.pollfds[0].fd,
                    (&mut count as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                )
            };
        }
    }

    fn snapshot(&self) -> Snapshot<'_> {
        let now = Instant::now();
        Snapshot {
            time: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64(),
            ports: self
                .ports
                .iter()
                .enumerate()
                .map(|(p, port)| PortSnapshot {
                    port: p + 1,
                    link: &port.describe,
                    rate: self.switch.config(p).rate,
                    buffer: self.switch.config(p).buffer,
                    paused: self.switch.is_paused(p, now),
                    counters: self.switch.counters(p).clone(),
                })
                .collect(),
        }
    }

    /// Replaces the stats file at once (written beside it, then renamed), so a reader never
    /// sees half of it, and appends a line to the history.
    fn write_stats(&mut self) {
        let Some(stats) = &self.stats else {
            return;
        };
        let snapshot = self.snapshot();
        if let Some(path) = &stats.path {
            let text = serde_json::to_string_pretty(&snapshot).unwrap_or_default();
            let tmp = path.with_extension("tmp");
            if let Err(e) = std::fs::write(&tmp, text).and_then(|()| std::fs::rename(&tmp, path)) {
                warn!(path = %path.display(), error = %e, "cannot write the counters");
            }
        }
        let line = self
            .log
            .is_some()
            .then(|| serde_json::to_string(&snapshot).unwrap_or_default());
        if let (Some(log), Some(line)) = (&mut self.log, line) {
            use std::io::Write;
            if let Err(e) = writeln!(log, "{line}").and_then(|()| log.flush()) {
                warn!(error = %e, "cannot append to the counters' history");
            }
        }
    }
}

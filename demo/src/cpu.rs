//! How much CPU the target used: the proof that it did nothing while its memory changed.
//!
//! Read from /proc, as `ps` and `top` do: user and system time in clock ticks (`utime` and
//! `stime` of `/proc/PID/stat`), the nanoseconds on a CPU the scheduler counts
//! (`/proc/PID/task/*/schedstat`, far finer than ticks), and the voluntary and involuntary
//! context switches of every thread (`/proc/PID/task/*/status`); and, for the timelines, the
//! time on a CPU sampled every millisecond or so ([`Sampler`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use procfs::process::{Process, Task};

use crate::events::since_epoch;
use crate::DemoError;

/// Whose CPU use is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whom {
    /// A process with all its threads.
    Process(i32),
    /// One thread of this process (the target of the in-process demo).
    Thread(i32),
}

/// CPU use at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuUse {
    /// utime + stime, in clock ticks.
    pub ticks: u64,
    /// utime and stime apart: in the program, and in the kernel on its behalf.
    pub user_ticks: u64,
    pub system_ticks: u64,
    /// Time on a CPU by the scheduler's count.
    pub on_cpu: Duration,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}

impl CpuUse {
    /// utime + stime in seconds.
    pub fn seconds(&self) -> f64 {
        ticks_to_seconds(self.ticks)
    }

    pub fn switches(&self) -> (u64, u64) {
        (self.voluntary_switches, self.involuntary_switches)
    }
}

/// Clock ticks (of utime and stime) in seconds.
pub fn ticks_to_seconds(ticks: u64) -> f64 {
    ticks as f64 / procfs::ticks_per_second() as f64
}

fn proc_error(e: procfs::ProcError) -> DemoError {
    DemoError::because("cannot read the target's CPU use from /proc", e)
}

/// The CPU use of `whom` now.
pub fn measure(whom: Whom) -> Result<CpuUse, DemoError> {
    match whom {
        Whom::Process(pid) => {
            let process = Process::new(pid).map_err(proc_error)?;
            let stat = process.stat().map_err(proc_error)?;
            let mut total = CpuUse {
                ticks: stat.utime + stat.stime,
                user_ticks: stat.utime,
                system_ticks: stat.stime,
                on_cpu: Duration::ZERO,
                voluntary_switches: 0,
                involuntary_switches: 0,
            };
            for task in process.tasks().map_err(proc_error)?.flatten() {
                // A thread that ended between the listing and the read has nothing to add.
                if let Ok(task_use) = task_use(&task) {
                    total.on_cpu += task_use.on_cpu;
                    total.voluntary_switches += task_use.voluntary_switches;
                    total.involuntary_switches += task_use.involuntary_switches;
                }
            }
            Ok(total)
        }
        Whom::Thread(tid) => {
            let task = Process::myself()
                .and_then(|me| me.task_from_tid(tid))
                .map_err(proc_error)?;
            task_use(&task)
        }
    }
}

fn task_use(task: &Task) -> Result<CpuUse, DemoError> {
    let stat = task.stat().map_err(proc_error)?;
    let status = task.status().map_err(proc_error)?;
    let schedstat = task.schedstat().map_err(proc_error)?;
    Ok(CpuUse {
        ticks: stat.utime + stat.stime,
        user_ticks: stat.utime,
        system_ticks: stat.stime,
        on_cpu: Duration::from_nanos(schedstat.sum_exec_runtime),
        voluntary_switches: status.voluntary_ctxt_switches.unwrap_or(0),
        involuntary_switches: status.nonvoluntary_ctxt_switches.unwrap_or(0),
    })
}

/// The calling thread's CPU time so far (its CPU clock: the same count as its `schedstat`,
/// without reading a file).
pub fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The thread of this process named `name` (as `/proc/self/task/*/comm` shows it: cut to 15
/// bytes), if there is one.
pub fn thread_named(name: &str) -> Option<i32> {
    let name = &name.as_bytes()[..name.len().min(15)];
    Process::myself()
        .and_then(|me| me.tasks())
        .ok()?
        .flatten()
        .find(|task| {
            std::fs::read(format!("/proc/self/task/{}/comm", task.tid))
                .is_ok_and(|comm| comm.strip_suffix(b"\n").unwrap_or(&comm) == name)
        })
        .map(|task| task.tid)
}

/// The state (`R`, `S`, `T`...) of each thread of `whom`; empty if it is gone.
fn states(whom: Whom) -> Vec<char> {
    match whom {
        Whom::Thread(tid) => Process::myself()
            .and_then(|me| me.task_from_tid(tid))
            .and_then(|t| t.stat())
            .map(|s| vec![s.state])
            .unwrap_or_default(),
        Whom::Process(pid) => match Process::new(pid).and_then(|p| p.tasks()) {
            Ok(tasks) => tasks
                .flatten()
                .filter_map(|t| t.stat().ok().map(|s| s.state))
                .collect(),
            Err(_) => Vec::new(),
        },
    }
}

/// Whether every thread of process `pid` is stopped (state `T`): SIGSTOP has taken effect.
pub fn is_stopped(pid: i32) -> bool {
    let states = states(Whom::Process(pid));
    !states.is_empty() && states.iter().all(|&s| s == 'T')
}

/// Whether every thread of `whom` is asleep (state `S`), waiting for something.
pub fn is_sleeping(whom: Whom) -> bool {
    let states = states(whom);
    !states.is_empty() && states.iter().all(|&s| s == 'S')
}

/// One reading of the sampler: when (since the Unix epoch) and the time on a CPU so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: Duration,
    pub on_cpu: Duration,
}

/// Most samples kept: an hour at the sampling period would be far more; a scenario lasts
/// seconds (or however long `--step` waits).
const MAX_SAMPLES: usize = 200_000;

/// The `schedstat` files of one measured party's threads, opened once and read again at every
/// sample: a system call per thread and sample, so that sampling every millisecond costs
/// little. Threads that start later are not counted; the parties' threads are all there by the
/// time anything is measured.
struct Schedstats {
    files: Vec<File>,
    /// The last value read from each, kept if its thread ends.
    last: Vec<Duration>,
}

impl Schedstats {
    fn open(whom: Whom) -> Schedstats {
        let paths: Vec<String> = match whom {
            Whom::Thread(tid) => vec![format!("/proc/self/task/{tid}/schedstat")],
            Whom::Process(pid) => Process::new(pid)
                .and_then(|p| p.tasks())
                .map(|tasks| {
                    tasks
                        .flatten()
                        .map(|t| format!("/proc/{pid}/task/{}/schedstat", t.tid))
                        .collect()
                })
                .unwrap_or_default(),
        };
        let files: Vec<File> = paths.iter().filter_map(|p| File::open(p).ok()).collect();
        Schedstats {
            last: vec![Duration::ZERO; files.len()],
            files,
        }
    }

    /// The threads' time on a CPU, summed.
    fn on_cpu(&mut self) -> Duration {
        let mut buf = [0u8; 96];
        for (file, last) in self.files.iter().zip(&mut self.last) {
            let Ok(n) = file.read_at(&mut buf, 0) else {
                continue;
            };
            let first = buf[..n].split(|b| b.is_ascii_whitespace()).next();
            if let Some(ns) = first
                .and_then(|f| std::str::from_utf8(f).ok())
                .and_then(|f| f.parse::<u64>().ok())
            {
                *last = Duration::from_nanos(ns);
            }
        }
        self.last.iter().sum()
    }
}

/// Reads the time on a CPU of one or more parties every `period`, on a thread of its own: for
/// the timelines of the HTML page.
pub struct Sampler {
    samples: Arc<Mutex<Vec<Vec<Sample>>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    pub fn start(whoms: &[Whom], period: Duration) -> Sampler {
        let mut parties: Vec<Schedstats> = whoms.iter().map(|w| Schedstats::open(*w)).collect();
        let samples = Arc::new(Mutex::new(vec![Vec::new(); whoms.len()]));
        let stop = Arc::new(AtomicBool::new(false));
        let (out, done) = (Arc::clone(&samples), Arc::clone(&stop));
        let thread = std::thread::spawn(move || loop {
            let at = since_epoch();
            let values: Vec<Duration> = parties.iter_mut().map(Schedstats::on_cpu).collect();
            let mut samples = out.lock().unwrap_or_else(|e| e.into_inner());
            for (party, on_cpu) in samples.iter_mut().zip(values) {
                if party.len() < MAX_SAMPLES {
                    party.push(Sample { at, on_cpu });
                }
            }
            drop(samples);
            // One last sample once told to stop, so that the lines reach the end.
            if done.load(Ordering::Relaxed) {
                break;
            }
            std::thread::sleep(period);
        });
        Sampler {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling and returns each party's samples, in the order given.
    pub fn finish(mut self) -> Vec<Vec<Sample>> {
        self.stop_thread();
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    #[test]
    fn a_blocked_thread_uses_no_cpu_and_a_busy_one_does() {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            tid_tx
                .send(rustix::thread::gettid().as_raw_nonzero().get())
                .unwrap();
            go_rx.recv().unwrap();
            let start = std::time::Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(30) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        });
        let whom = Whom::Thread(tid_rx.recv().unwrap());
        std::thread::sleep(Duration::from_millis(20));
        assert!(is_sleeping(whom));
        let before = measure(whom).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(measure(whom).unwrap(), before, "blocked on a channel");
        go_tx.send(()).unwrap();
        let sampler = Sampler::start(&[whom], Duration::from_millis(1));
        std::thread::sleep(Duration::from_millis(10));
        let during = measure(whom).unwrap();
        worker.join().unwrap();
        assert!(during.on_cpu > before.on_cpu);
        let samples = sampler.finish().remove(0);
        assert!(samples.len() >= 2);
        assert!(samples
            .windows(2)
            .all(|w| w[0].at <= w[1].at && w[0].on_cpu <= w[1].on_cpu));
    }

    #[test]
    fn threads_are_found_by_name() {
        let (tid_tx, tid_rx) = mpsc::channel();
        let (end_tx, end_rx) = mpsc::channel::<()>();
        let named = std::thread::Builder::new()
            .name("cpu-test-a-long-thread-name".into())
            .spawn(move || {
                tid_tx
                    .send(rustix::thread::gettid().as_raw_nonzero().get())
                    .unwrap();
                let _ = end_rx.recv();
            })
            .unwrap();
        let tid = tid_rx.recv().unwrap();
        assert_eq!(thread_named("cpu-test-a-long-thread-name"), Some(tid));
        assert_eq!(thread_named("no-such-thread"), None);
        drop(end_tx);
        named.join().unwrap();
    }

    #[test]
    fn this_process_is_running_not_stopped() {
        let me = std::process::id() as i32;
        assert!(!is_stopped(me));
        assert!(!is_sleeping(Whom::Process(me)), "this thread is running");
        let cpu = measure(Whom::Process(me)).unwrap();
        assert!(cpu.on_cpu > Duration::ZERO);
        assert!(cpu.seconds() >= 0.0);
    }
}

//! Who is measured and how: every party to a transfer (the receiver, the sender, the two NICs,
//! the demo's wire), its CPU time before and after from /proc, and its time on a CPU sampled
//! every few milliseconds for the timelines.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::cpu::{self, CpuUse, Sample, Sampler, Whom};
use crate::DemoError;

/// What a party stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Receiver,
    Sender,
    /// The NIC of the receiver (the target), and of the sender (the initiator).
    ReceiverNic,
    SenderNic,
    /// The demo forwarding frames between the NIC processes: the cable, on real hardware.
    Wire,
}

impl Role {
    /// Its name in the narration.
    pub fn name(self) -> &'static str {
        match self {
            Role::Receiver => "receiver",
            Role::Sender => "sender",
            Role::ReceiverNic => "receiver's NIC",
            Role::SenderNic => "sender's NIC",
            Role::Wire => "wire",
        }
    }

    /// A word for HTML classes.
    pub fn word(self) -> &'static str {
        match self {
            Role::Receiver => "receiver",
            Role::Sender => "sender",
            Role::ReceiverNic => "receiver-nic",
            Role::SenderNic => "sender-nic",
            Role::Wire => "wire",
        }
    }
}

/// One party: what it is and where /proc has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Party {
    pub role: Role,
    pub whom: Whom,
    /// "process 1234 (roce demo-target)", "thread 1234 of this process".
    pub label: String,
}

/// What a party spent between two readings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spent {
    /// Time on a CPU, by the scheduler's count (`schedstat`).
    pub on_cpu: Duration,
    /// utime and stime, in clock ticks.
    pub user_ticks: u64,
    pub system_ticks: u64,
    pub voluntary: u64,
    pub involuntary: u64,
}

impl Spent {
    pub fn between(before: &CpuUse, after: &CpuUse) -> Spent {
        Spent {
            on_cpu: after.on_cpu.saturating_sub(before.on_cpu),
            user_ticks: after.user_ticks.saturating_sub(before.user_ticks),
            system_ticks: after.system_ticks.saturating_sub(before.system_ticks),
            voluntary: after
                .voluntary_switches
                .saturating_sub(before.voluntary_switches),
            involuntary: after
                .involuntary_switches
                .saturating_sub(before.involuntary_switches),
        }
    }

    /// Nothing at all: no time on a CPU, no tick, no context switch.
    pub fn is_nothing(&self) -> bool {
        *self == Spent::default()
    }

    pub fn switches(&self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// "12.34 ms on a CPU (ticks: 0 user, 1 system), 130 context switches (6 voluntary)".
    pub fn describe(&self) -> String {
        format!(
            "{} on a CPU ({}), {} ({} voluntary)",
            millis(self.on_cpu),
            self.ticks(),
            self.switches_text(),
            self.voluntary
        )
    }

    /// "1 context switch", "3 context switches".
    pub fn switches_text(&self) -> String {
        match self.switches() {
            1 => "1 context switch".to_owned(),
            n => format!("{n} context switches"),
        }
    }

    /// utime and stime: "ticks: 0 user, 1 system".
    pub fn ticks(&self) -> String {
        format!(
            "ticks: {} user, {} system",
            self.user_ticks, self.system_ticks
        )
    }
}

/// A duration in milliseconds, two decimals.
pub fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

/// Every party's CPU use now.
pub fn measure(parties: &[Party]) -> Result<Vec<CpuUse>, DemoError> {
    parties.iter().map(|p| cpu::measure(p.whom)).collect()
}

/// What each party spent between `before` and `after`.
pub fn spent(parties: &[Party], before: &[CpuUse], after: &[CpuUse]) -> Vec<(Role, Spent)> {
    parties
        .iter()
        .zip(before.iter().zip(after))
        .map(|(p, (b, a))| (p.role, Spent::between(b, a)))
        .collect()
}

/// One party's time on a CPU over wall-clock time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Series {
    pub role: Role,
    pub samples: Vec<Sample>,
}

/// Samples every party's time on a CPU every `period`, until [`Sampling::finish`].
pub struct Sampling {
    roles: Vec<Role>,
    sampler: Sampler,
}

impl Sampling {
    pub fn start(parties: &[Party], period: Duration) -> Sampling {
        let whoms: Vec<Whom> = parties.iter().map(|p| p.whom).collect();
        Sampling {
            roles: parties.iter().map(|p| p.role).collect(),
            sampler: Sampler::start(&whoms, period),
        }
    }

    /// Each party's samples.
    pub fn finish(self) -> Vec<Series> {
        self.roles
            .into_iter()
            .zip(self.sampler.finish())
            .map(|(role, samples)| Series { role, samples })
            .collect()
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// The sender: a thread of the demo that does nothing but send, so that its CPU time is the
/// sending's alone (not the demo's reading of /proc, nor its narration).
pub struct SenderThread {
    pub tid: i32,
    jobs: Option<mpsc::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl SenderThread {
    pub fn start() -> Result<SenderThread, DemoError> {
        let (jobs, queue) = mpsc::channel::<Job>();
        let (tid_tx, tid_rx) = mpsc::channel();
        let thread = std::thread::Builder::new()
            .name("demo-sender".into())
            .spawn(move || {
                let _ = tid_tx.send(rustix::thread::gettid().as_raw_nonzero().get());
                for job in queue {
                    job();
                }
            })
            .map_err(|e| DemoError::because("cannot start the sender", e))?;
        let tid = tid_rx
            .recv()
            .map_err(|_| DemoError::failed("the sender thread did not start"))?;
        Ok(SenderThread {
            tid,
            jobs: Some(jobs),
            thread: Some(thread),
        })
    }

    /// Runs `job` on the sender thread; its result comes on the channel returned.
    pub fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Result<mpsc::Receiver<T>, DemoError> {
        let (tx, rx) = mpsc::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(job());
        });
        self.jobs
            .as_ref()
            .and_then(|jobs| jobs.send(job).ok())
            .ok_or_else(|| DemoError::failed("the sender thread has ended"))?;
        Ok(rx)
    }
}

impl Drop for SenderThread {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::time::Instant;

    #[test]
    fn the_sender_runs_jobs_on_its_own_thread_and_its_cpu_is_its_own() {
        let sender = SenderThread::start().unwrap();
        let me = rustix::thread::gettid().as_raw_nonzero().get();
        assert_ne!(sender.tid, me);
        let party = Party {
            role: Role::Sender,
            whom: Whom::Thread(sender.tid),
            label: "the sender".into(),
        };
        let parties = [party];
        let before = measure(&parties).unwrap();
        let sampler = Sampling::start(&parties, Duration::from_millis(1));
        let tid = sender
            .run(|| {
                // 20 ms of this thread's CPU time, however long a loaded machine takes to give
                // it (bounded all the same).
                let cpu = cpu::thread_cpu;
                let (start, deadline) = (cpu(), Instant::now() + Duration::from_secs(60));
                let mut x = 0u64;
                while cpu() - start < Duration::from_millis(20) && Instant::now() < deadline {
                    for _ in 0..1000 {
                        x = std::hint::black_box(x.wrapping_add(1));
                    }
                }
                rustix::thread::gettid().as_raw_nonzero().get()
            })
            .unwrap()
            .recv()
            .unwrap();
        assert_eq!(tid, sender.tid);
        let after = measure(&parties).unwrap();
        let spent = spent(&parties, &before, &after);
        assert_eq!(spent[0].0, Role::Sender);
        assert!(spent[0].1.on_cpu >= Duration::from_millis(10), "{spent:?}");
        assert!(!spent[0].1.is_nothing());
        let series = sampler.finish();
        let samples = &series[0].samples;
        assert!(samples.windows(2).all(|w| w[0].on_cpu <= w[1].on_cpu));
        // The last sample is taken once stopped, after the job.
        assert!(samples.last().unwrap().on_cpu >= Duration::from_millis(10));
    }

    #[test]
    fn nothing_spent_is_nothing() {
        let cpu = cpu::measure(Whom::Process(std::process::id() as i32)).unwrap();
        let none = Spent::between(&cpu, &cpu);
        assert!(none.is_nothing());
        assert_eq!(
            none.describe(),
            "0.00 ms on a CPU (ticks: 0 user, 0 system), 0 context switches (0 voluntary)"
        );
    }
}

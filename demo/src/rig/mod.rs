//! Everything a scenario plays on: two NICs joined by the demo's [`Wire`], the target program
//! with its registered memory, and the initiator's context — either as separate processes
//! ([`processes`], the default: the separation is real, and the target can be frozen with
//! SIGSTOP) or as threads of this process ([`threads`], `--in-process`: nothing to start).

pub mod processes;
pub mod threads;

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::verbs::Context;
use rustix::process::Signal;

use crate::child::Child;
use crate::cpu::{self, CpuUse, Whom};
use crate::events::EventLog;
use crate::target_host::{FromTarget, Shared, ToTarget};
use crate::wire::Wire;
use crate::DemoError;

/// The addresses of the two NICs: 10.0.0.1 (initiator) and 10.0.0.2 (target). They exist only
/// inside the emulated NICs, so they collide with nothing on the machine.
pub const INITIATOR_IP: [u8; 4] = [10, 0, 0, 1];
pub const TARGET_IP: [u8; 4] = [10, 0, 0, 2];
/// How long the target program may take to answer a command.
pub const ANSWER: Duration = Duration::from_secs(10);
/// How long a frozen process may take to stop, or a target thread to go to sleep.
const STOPPING: Duration = Duration::from_secs(2);
/// How long a sleeping target thread's CPU time must stay put to count as asleep.
const SETTLE: Duration = Duration::from_millis(5);

/// How the pieces run, for the narration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `roce nic` processes (name, pid) for the initiator and the target, and the target
    /// program's pid.
    Processes {
        nics: [(String, i32); 2],
        target: i32,
    },
    /// NICs named `nics` in this process; the target program is the thread `target`.
    Threads { nics: [String; 2], target: i32 },
}

/// The stage of a scenario.
pub struct Rig {
    /// The initiator host's context on its NIC.
    pub initiator: Context,
    /// A context on the target's NIC, to read its counters as a driver would (`ethtool -S`);
    /// the target program has its own.
    pub target_nic: Context,
    pub target: TargetHandle,
    pub wire: Arc<Wire>,
    pub events: EventLog,
    pub layout: Layout,
    /// The NICs and the wire: ended after everything above.
    _stage: Stage,
}

/// What keeps the NICs and the wire running.
enum Stage {
    Processes {
        _forwarder: crate::wire::forward::Forwarder,
        _nics: Vec<Child>,
    },
    Threads {
        _devices: Vec<roce_nic::Device>,
    },
}

/// How the demo reaches the target program: command lines in, answer lines out — the
/// process's standard input and output, or a socket to the thread.
pub(crate) struct Channel {
    commands: Box<dyn Write + Send>,
    answers: Receiver<String>,
    /// The target process and what it wrote to standard error (its reason, if it fails);
    /// `None` for a thread.
    process: Option<(Child, Arc<Mutex<String>>)>,
}

/// The target program, seen from the demo.
pub struct TargetHandle {
    /// What it shared when it was ready.
    pub shared: Shared,
    /// The demo's own mapping of the target's memory: read while the target is frozen.
    pub region: Arc<Region>,
    pub whom: Whom,
    channel: Channel,
}

impl Channel {
    /// The channel to a target process.
    pub(crate) fn process(
        mut child: Child,
        stderr: Arc<Mutex<String>>,
    ) -> Result<Channel, DemoError> {
        let commands = child
            .stdin
            .take()
            .ok_or_else(|| DemoError::failed("the target program's input is closed"))?;
        Ok(Channel {
            commands: Box::new(commands),
            answers: child.take_lines(),
            process: Some((child, stderr)),
        })
    }

    /// The channel to a target thread, over its socket.
    pub(crate) fn thread(socket: UnixStream) -> Result<Channel, DemoError> {
        let commands = socket
            .try_clone()
            .map_err(|e| DemoError::because("cannot talk to the target thread", e))?;
        Ok(Channel {
            commands: Box::new(commands),
            answers: crate::child::lines(socket),
            process: None,
        })
    }

    /// Gives the target a command.
    fn tell(&mut self, command: &ToTarget) -> Result<(), DemoError> {
        let mut line = serde_json::to_string(command)
            .map_err(|e| DemoError::because("cannot encode a command", e))?;
        line.push('\n');
        self.commands
            .write_all(line.as_bytes())
            .and_then(|()| self.commands.flush())
            .map_err(|e| DemoError::because("the target program does not listen", e))
    }

    /// The target's next answer, waiting at most `timeout`. A `Failed` answer is an error.
    fn answer(&mut self, timeout: Duration) -> Result<FromTarget, DemoError> {
        let deadline = Instant::now() + timeout;
        let answer = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.answers.recv_timeout(left) {
                // A line that is no message is nothing the demo asked for.
                Ok(line) => match serde_json::from_str::<FromTarget>(&line) {
                    Ok(answer) => break answer,
                    Err(_) => continue,
                },
                Err(RecvTimeoutError::Timeout) => {
                    return Err(DemoError::failed(format!(
                        "the target program said nothing for {} s",
                        timeout.as_secs()
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => return Err(self.ended()),
            }
        };
        match answer {
            FromTarget::Failed { why } => Err(DemoError::failed(format!(
                "the target program failed: {why}"
            ))),
            answer => Ok(answer),
        }
    }

    /// Why the target stopped answering: its last words, if it is a process.
    fn ended(&self) -> DemoError {
        let Some((_, stderr)) = &self.process else {
            return DemoError::failed("the target thread has ended");
        };
        // Give its standard error a moment to arrive.
        std::thread::sleep(Duration::from_millis(50));
        let said = stderr.lock().unwrap_or_else(|e| e.into_inner());
        let last = said.lines().last().unwrap_or("no reason given");
        DemoError::failed(format!("the target program exited: {last}"))
    }
}

impl TargetHandle {
    /// Waits for the target's `Ready`; `region` maps the memory it shared.
    pub(crate) fn ready(
        mut channel: Channel,
        region: impl FnOnce(&Shared) -> Result<Arc<Region>, DemoError>,
    ) -> Result<TargetHandle, DemoError> {
        let FromTarget::Ready(shared) = channel.answer(ANSWER)? else {
            return Err(DemoError::failed(
                "the target program did not start as expected",
            ));
        };
        let whom = match &channel.process {
            Some((child, _)) => Whom::Process(child.pid()),
            None => Whom::Thread(shared.tid),
        };
        Ok(TargetHandle {
            region: region(&shared)?,
            shared,
            whom,
            channel,
        })
    }

    /// Whether the target is a process of its own (and can be frozen).
    pub fn is_process(&self) -> bool {
        self.channel.process.is_some()
    }

    pub fn tell(&mut self, command: &ToTarget) -> Result<(), DemoError> {
        self.channel.tell(command)
    }

    pub fn answer(&mut self, timeout: Duration) -> Result<FromTarget, DemoError> {
        self.channel.answer(timeout)
    }

    /// Gives a command and waits for its answer.
    pub fn ask(&mut self, command: &ToTarget) -> Result<FromTarget, DemoError> {
        self.tell(command)?;
        self.answer(ANSWER)
    }

    /// Freezes the target process (SIGSTOP) and waits until every thread of it has stopped.
    /// A target thread cannot be frozen alone; it blocks on its command channel instead,
    /// which runs no code either: this waits until it is asleep there.
    pub fn freeze(&self) -> Result<(), DemoError> {
        let Some((child, _)) = &self.channel.process else {
            return self.asleep();
        };
        child.signal(Signal::STOP)?;
        let deadline = Instant::now() + STOPPING;
        while !cpu::is_stopped(child.pid()) {
            if Instant::now() > deadline {
                return Err(DemoError::failed(
                    "the target process did not stop after SIGSTOP",
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Waits until the target sleeps — it has answered its last command and gone back to
    /// waiting for something — so that its CPU time stays put (two readings `SETTLE` apart).
    pub fn asleep(&self) -> Result<(), DemoError> {
        let deadline = Instant::now() + STOPPING;
        let mut last = self.cpu()?;
        loop {
            std::thread::sleep(SETTLE);
            let now = self.cpu()?;
            if now == last && cpu::is_sleeping(self.whom) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(DemoError::failed("the target program does not go to sleep"));
            }
            last = now;
        }
    }

    /// Lets a frozen target process run again (SIGCONT).
    pub fn thaw(&self) -> Result<(), DemoError> {
        match &self.channel.process {
            Some((child, _)) => child.signal(Signal::CONT),
            None => Ok(()),
        }
    }

    pub fn cpu(&self) -> Result<CpuUse, DemoError> {
        cpu::measure(self.whom)
    }
}

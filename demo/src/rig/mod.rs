//! Everything a scenario plays on: two NICs joined by the demo's [`Wire`], the target program
//! with its registered memory, and the initiator's context — either as separate processes
//! ([`processes`], the default: the separation is real, and the target can be frozen with
//! SIGSTOP) or as threads of this process ([`threads`], `--in-process`: nothing to start).

pub mod processes;
pub mod threads;

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roce_hostmem::Region;
use roce_nic::verbs::Context;
use rustix::process::Signal;

use crate::child::Child;
use crate::cpu::{self, CpuUse, Whom};
use crate::events::EventLog;
use crate::target::{FromTarget, Shared, ToTarget};
use crate::wire::Wire;
use crate::DemoError;

/// The addresses of the two NICs: 10.0.0.1 (initiator) and 10.0.0.2 (target). They exist only
/// inside the emulated NICs, so they collide with nothing on the machine.
pub const INITIATOR_IP: [u8; 4] = [10, 0, 0, 1];
pub const TARGET_IP: [u8; 4] = [10, 0, 0, 2];
/// How long the target program may take to answer a command.
pub const ANSWER: Duration = Duration::from_secs(10);
/// How long a frozen process may take to stop.
const STOPPING: Duration = Duration::from_secs(2);

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

/// How the demo reaches the target program.
enum Channel {
    Process {
        child: Child,
        /// Its standard error, for the reason it failed.
        stderr: Arc<Mutex<String>>,
    },
    Thread {
        commands: Sender<ToTarget>,
        answers: Receiver<FromTarget>,
    },
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
    /// Gives the target a command.
    fn tell(&mut self, command: &ToTarget) -> Result<(), DemoError> {
        match self {
            Channel::Process { child, .. } => {
                use std::io::Write;
                let stdin = child
                    .stdin
                    .as_mut()
                    .ok_or_else(|| DemoError::failed("the target program's input is closed"))?;
                let mut line = serde_json::to_string(command)
                    .map_err(|e| DemoError::because("cannot encode a command", e))?;
                line.push('\n');
                stdin
                    .write_all(line.as_bytes())
                    .and_then(|()| stdin.flush())
                    .map_err(|e| DemoError::because("the target program does not listen", e))
            }
            Channel::Thread { commands, .. } => commands
                .send(command.clone())
                .map_err(|_| DemoError::failed("the target thread has ended")),
        }
    }

    /// The target's next answer, waiting at most `timeout`. A `Failed` answer is an error.
    fn answer(&mut self, timeout: Duration) -> Result<FromTarget, DemoError> {
        let answer = match self {
            Channel::Process { child, stderr } => {
                let deadline = Instant::now() + timeout;
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    match child.line(left)? {
                        Some(line) => match serde_json::from_str::<FromTarget>(&line) {
                            Ok(answer) => break answer,
                            // Not a message: nothing the demo asked for.
                            Err(_) => continue,
                        },
                        None => {
                            // Give its standard error a moment to arrive.
                            std::thread::sleep(Duration::from_millis(50));
                            let said = stderr.lock().unwrap_or_else(|e| e.into_inner());
                            let last = said.lines().last().unwrap_or("no reason given");
                            return Err(DemoError::failed(format!(
                                "the target program exited: {last}"
                            )));
                        }
                    }
                }
            }
            Channel::Thread { answers, .. } => match answers.recv_timeout(timeout) {
                Ok(answer) => answer,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(DemoError::failed(format!(
                        "the target thread said nothing for {} s",
                        timeout.as_secs()
                    )))
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(DemoError::failed("the target thread has ended"))
                }
            },
        };
        match answer {
            FromTarget::Failed { why } => Err(DemoError::failed(format!(
                "the target program failed: {why}"
            ))),
            answer => Ok(answer),
        }
    }
}

impl TargetHandle {
    /// Waits for the target's `Ready`; `region` maps the memory it shared.
    fn ready(
        mut channel: Channel,
        region: impl FnOnce(&Shared) -> Result<Arc<Region>, DemoError>,
    ) -> Result<TargetHandle, DemoError> {
        let FromTarget::Ready(shared) = channel.answer(ANSWER)? else {
            return Err(DemoError::failed(
                "the target program did not start as expected",
            ));
        };
        let whom = match &channel {
            Channel::Process { child, .. } => Whom::Process(child.pid()),
            Channel::Thread { .. } => Whom::Thread(shared.tid),
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
        matches!(self.channel, Channel::Process { .. })
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
    /// which runs no code either, and this does nothing.
    pub fn freeze(&self) -> Result<(), DemoError> {
        let Channel::Process { child, .. } = &self.channel else {
            return Ok(());
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

    /// Lets a frozen target process run again (SIGCONT).
    pub fn thaw(&self) -> Result<(), DemoError> {
        match &self.channel {
            Channel::Process { child, .. } => child.signal(Signal::CONT),
            Channel::Thread { .. } => Ok(()),
        }
    }

    pub fn cpu(&self) -> Result<CpuUse, DemoError> {
        cpu::measure(self.whom)
    }
}

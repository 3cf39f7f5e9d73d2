//! The demo's child processes (two NICs and the target program), each in a guard that ends it
//! when dropped: continued first (it may be frozen), then asked to stop, then killed. The
//! kernel ends them too if the demo dies first (a parent-death signal), so no frozen target
//! and no NIC outlives a killed demo, and a NIC still removes its shared memory.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child as StdChild, ChildStderr, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use rustix::process::{kill_process, Pid, Signal};

use crate::DemoError;

/// How long a child has to end after SIGTERM before it is killed.
const GRACE: Duration = Duration::from_secs(3);

pub struct Child {
    child: StdChild,
    what: String,
    stdout: Receiver<String>,
    pub stdin: Option<ChildStdin>,
    pub stderr: Option<ChildStderr>,
}

impl Child {
    /// Starts `cmd` with piped standard streams. `on_parent_death` is what the kernel sends
    /// it if the demo dies first. The calling thread must outlive the child: the kernel sends
    /// that signal when the thread that started the child ends.
    pub fn spawn(
        mut cmd: Command,
        what: &str,
        on_parent_death: Signal,
    ) -> Result<Child, DemoError> {
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // A process group of its own: a Ctrl-C or a hang-up of the demo's terminal goes to
            // the demo, whose end then ends the child in order (below), not to the child
            // directly, which a hang-up would kill before a NIC cleans up its shared memory.
            .process_group(0);
        // SAFETY: the closure runs between fork and exec and makes only the prctl system call,
        // which is async-signal-safe; it touches no memory of the parent.
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(on_parent_death))
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| DemoError::because(&format!("cannot start the {what}"), e))?;
        let stdout = match child.stdout.take() {
            Some(out) => lines(out),
            None => mpsc::channel().1,
        };
        Ok(Child {
            stdin: child.stdin.take(),
            stderr: child.stderr.take(),
            child,
            what: what.to_owned(),
            stdout,
        })
    }

    /// Its standard output's lines, for the caller to read from now on.
    pub fn take_lines(&mut self) -> Receiver<String> {
        std::mem::replace(&mut self.stdout, mpsc::channel().1)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The next line of its standard output, waiting at most `timeout`. `Ok(None)` when the
    /// child closed it (it exited).
    pub fn line(&self, timeout: Duration) -> Result<Option<String>, DemoError> {
        match self.stdout.recv_timeout(timeout) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => Err(DemoError::failed(format!(
                "the {} said nothing for {} s",
                self.what,
                timeout.as_secs()
            ))),
        }
    }

    /// Sends a signal to the child.
    pub fn signal(&self, signal: Signal) -> Result<(), DemoError> {
        let pid = Pid::from_raw(self.pid())
            .ok_or_else(|| DemoError::failed(format!("the {} has no process id", self.what)))?;
        kill_process(pid, signal)
            .map_err(|e| DemoError::because(&format!("cannot signal the {}", self.what), e))
    }

    /// Whether it has exited.
    pub fn has_exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits up to `limit` for the exit.
    fn wait_for_exit(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if self.has_exited() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

/// The lines of `from`, read by a thread of their own as they come.
pub fn lines(from: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(from).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

impl Drop for Child {
    /// Continued (a frozen process cannot act on SIGTERM), asked to end, killed after
    /// [`GRACE`], and reaped.
    fn drop(&mut self) {
        if self.has_exited() {
            return;
        }
        let _ = self.signal(Signal::CONT);
        let _ = self.signal(Signal::TERM);
        if !self.wait_for_exit(GRACE) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_reports_its_lines_and_a_stopped_child_is_ended_on_drop() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo hello; exec sleep 30"]);
        let mut child = Child::spawn(cmd, "test child", Signal::KILL).unwrap();
        assert_eq!(
            child.line(Duration::from_secs(5)).unwrap().as_deref(),
            Some("hello")
        );
        assert!(child.line(Duration::from_millis(20)).is_err());
        child.signal(Signal::STOP).unwrap();
        assert!(!child.has_exited());
        let pid = child.pid();
        let start = Instant::now();
        drop(child);
        assert!(
            start.elapsed() < GRACE,
            "SIGCONT then SIGTERM ends it at once"
        );
        // Reaped: the process is gone.
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
    }
}

//! A running guest, watched for signs of life. Under TCG a guest has been seen to freeze
//! outright (a CI run: rxe stopped in the middle of a SEND, the console in the middle of a
//! line, no ARP answered, no `timeout` in the guest ever firing), and every scenario after that
//! only waited out its time limit. While the group's script runs, the guest prints a heartbeat
//! every second ([`super::scenario::HEARTBEAT`]); a console silent for [`SILENCE_LIMIT`] means
//! a frozen guest, whose QEMU the harness then kills by its PID.

use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use crate::support::Proc;

/// How long a guest whose script runs may print nothing, heartbeat included, before it counts
/// as frozen: thirty heartbeats missed. The longest silence of a guest that was alive is in
/// each group's summary line.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(30);
/// How long a guest may take from QEMU's start to its first line (about 4 s on an idle
/// machine).
const BOOT_SILENCE_LIMIT: Duration = Duration::from_secs(120);
/// How late a console line may reach us: `softroce-vm` follows the console file every 0.1 s.
const CONSOLE_LAG: Duration = Duration::from_millis(500);
/// The console lines of a frozen guest's evidence.
const TAIL_LINES: usize = 25;

/// `softroce-vm run`, with the console it printed so far.
pub struct Guest {
    proc: Proc,
    started: Instant,
    /// When the console last printed a line, and whether the script's heartbeat has begun.
    last_line: Instant,
    beating: bool,
    /// The longest silence of the console since the heartbeat began.
    pub longest_silence: Duration,
    /// Whether [`Guest::stop`] stopped QEMU: a stopped QEMU ignores the harness's SIGTERM.
    stopped: bool,
}

impl Drop for Guest {
    fn drop(&mut self) {
        if self.stopped {
            self.signal_qemu(libc::SIGKILL);
        }
    }
}

impl Guest {
    pub fn start(command: Command) -> Guest {
        let now = Instant::now();
        Guest {
            proc: Proc::spawn(command, false),
            started: now,
            last_line: now,
            beating: false,
            longest_silence: Duration::ZERO,
            stopped: false,
        }
    }

    /// Reads what the console prints within `wait`, and all it printed before.
    pub fn poll(&mut self, wait: Duration) {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.proc.try_line(left) {
                Some(line) => {
                    let now = Instant::now();
                    if self.beating {
                        self.longest_silence =
                            self.longest_silence.max(now.duration_since(self.last_line));
                    }
                    self.beating |= line.contains(super::guest::HEARTBEAT_MARK);
                    self.last_line = now;
                }
                None => {
                    // An ended console answers at once: wait out the rest.
                    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    return;
                }
            }
        }
    }

    /// How long the console has been silent, where that means the guest froze: longer than
    /// [`SILENCE_LIMIT`] while the heartbeat runs, or than [`BOOT_SILENCE_LIMIT`] before it.
    /// Nothing once QEMU has exited.
    pub fn frozen(&mut self) -> Option<Duration> {
        self.poll(Duration::ZERO);
        if self.proc.exited().is_some() {
            return None;
        }
        let silent = self.last_line.elapsed();
        let limit = if self.beating {
            SILENCE_LIMIT
        } else {
            BOOT_SILENCE_LIMIT
        };
        (silent > limit).then_some(silent)
    }

    /// Whether the guest shows a sign of life after `since`: waits for a line the console
    /// prints later than that (the next heartbeat, within a second or so), or for the guest to
    /// count as frozen. A line read within [`CONSOLE_LAG`] of `since` may have been printed
    /// before it.
    pub fn alive_after(&mut self, since: Instant) -> bool {
        loop {
            self.poll(Duration::from_millis(20));
            if self.last_line > since + CONSOLE_LAG || self.proc.exited().is_some() {
                return true;
            }
            if self.frozen().is_some() {
                return false;
            }
        }
    }

    /// Whether the console has printed, during scenario `n` (this boot), a line that starts
    /// with `start`.
    pub fn printed_in(&self, n: usize, start: &str) -> bool {
        let begin = format!("SCENARIO-BEGIN {n}");
        self.proc
            .seen()
            .iter()
            .skip_while(|l| **l != begin)
            .any(|l| l.starts_with(start))
    }

    /// Whether the console has printed a line that starts with `start` (this boot).
    pub fn printed_starting(&self, start: &str) -> bool {
        self.proc.seen().iter().any(|l| l.starts_with(start))
    }

    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.proc.exited()
    }

    /// Waits until the guest powers off, bounded by `limit`, watching it: false if it froze.
    pub fn finish(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while self.proc.exited().is_none() && Instant::now() < deadline {
            if self.frozen().is_some() {
                return false;
            }
            self.poll(Duration::from_millis(200));
        }
        self.proc.wait(Duration::from_secs(30));
        true
    }

    /// SIGTERM to the harness, which stops its QEMU (a guest that is alive but whose script
    /// would only wait out its tools' limits).
    pub fn terminate(&mut self) {
        if self.proc.exited().is_none() {
            self.proc.signal(libc::SIGTERM);
        }
    }

    /// The PID of the QEMU that `softroce-vm` started (it logs it), while it runs.
    fn qemu_pid(&self) -> Option<i32> {
        let pid: i32 = self
            .proc
            .stderr()
            .lines()
            .find_map(|l| l.strip_prefix("softroce-vm: vm: QEMU pid "))?
            .trim()
            .parse()
            .ok()?;
        // Still QEMU, and still our harness's child (not a PID reused since).
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let parent: i32 = stat
            .rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()?;
        (parent == self.proc.pid()).then_some(pid)
    }

    /// Stops QEMU (SIGSTOP), as a guest that froze: the test of the recovery. False if no
    /// QEMU runs.
    pub fn stop(&mut self) -> bool {
        self.stopped = self.signal_qemu(libc::SIGSTOP);
        self.stopped
    }

    /// Sends `signal` to QEMU; false if it is gone.
    fn signal_qemu(&self, signal: libc::c_int) -> bool {
        let Some(pid) = self.qemu_pid() else {
            return false;
        };
        // SAFETY: kill(2) of the QEMU our child started, by its PID, checked just above.
        unsafe { libc::kill(pid, signal) == 0 }
    }

    /// Kills a frozen guest's QEMU (SIGKILL: a stopped process takes nothing else) and waits
    /// for the harness to end.
    pub fn kill(&mut self) {
        self.signal_qemu(libc::SIGKILL);
        self.proc.wait(Duration::from_secs(30));
    }

    /// How long since QEMU started.
    pub fn age(&self) -> Duration {
        self.started.elapsed()
    }

    /// The last lines the console printed, heartbeat included (it shows when the guest was
    /// last alive).
    pub fn tail(&self) -> String {
        let seen = self.proc.seen();
        seen[seen.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    /// Everything the console printed, once the harness has ended.
    pub fn console(mut self) -> String {
        let mut text = self.proc.seen().join("\n");
        text.push('\n');
        text.push_str(&self.proc.drain_stdout());
        text
    }
}

/// Kills `pid` and every process under it, the deepest first, by PID: one of our runs, and
/// under `roce run` the program it started, which would outlive it.
pub fn kill_tree(pid: i32) {
    for child in children(pid) {
        kill_tree(child);
    }
    // SAFETY: kill(2) of a process we started, or one it started, by its PID.
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

fn children(pid: i32) -> Vec<i32> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect()
}

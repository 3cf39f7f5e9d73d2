//! A look at the port thread from outside it. Once a second a thread of its own checks that the
//! engine still takes the frames waiting at its link and still finishes its passes, and says at
//! warn when it has not for [`STALL`] seconds, with what the engine's counters say — so that a
//! NIC that stops moving frames while it lives says so in its log, whatever its capture shows.
//! (A CI run's capture once went silent in both directions mid-WRITE; nothing in the NIC's log
//! said whether the engine was stuck in a pass, asleep with frames waiting, or spinning without
//! taking them.)
//!
//! Nothing here is on the data path: the engine counts its passes (one relaxed add each) and
//! this thread reads that, the engine's counters, its "sleeping" word and whether the link's
//! descriptor is readable.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{self, RecvTimeoutError, Sender};
use tracing::warn;

use crate::counters::Counters;
use crate::waker::Waker;

/// How often the watchdog looks.
const EVERY: Duration = Duration::from_secs(1);
/// Looks in a row that must find the engine stalled before it is said.
const STALL: u32 = 5;

/// What the engine shares with its watchdog.
#[derive(Debug, Default)]
pub(crate) struct Signs {
    /// Passes the port thread has finished.
    pub passes: AtomicU64,
}

/// One look: what the watchdog sees of the engine at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Look {
    passes: u64,
    /// Frames the engine has taken from the link, in all.
    rx_frames: u64,
    /// Whether the link's descriptor has frames waiting.
    waiting: bool,
    /// Whether the engine says it sleeps.
    asleep: bool,
}

/// Why the engine looks stalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stall {
    /// Frames wait at the link and the engine took none since the last look.
    FramesWait,
    /// The engine, awake, finished no pass since the last look.
    NoPass,
}

/// What the watchdog has to say after a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Say {
    /// The engine has been stalled for `seconds` (said once per stall).
    Stalled { stall: Stall, seconds: u32 },
    /// A stall that was said is over.
    Moving { seconds: u32 },
}

/// The watchdog's memory between looks.
#[derive(Debug, Default)]
struct Judge {
    last: Option<Look>,
    /// Looks in a row that found a stall.
    stalled: u32,
    said: bool,
}

impl Judge {
    fn look(&mut self, now: Look) -> Option<Say> {
        let stall = self.last.and_then(|last| {
            if now.waiting && now.rx_frames == last.rx_frames {
                Some(Stall::FramesWait)
            } else if !now.asleep && !last.asleep && now.passes == last.passes {
                Some(Stall::NoPass)
            } else {
                None
            }
        });
        self.last = Some(now);
        match stall {
            Some(stall) => {
                self.stalled += 1;
                (self.stalled >= STALL && !std::mem::replace(&mut self.said, true)).then_some(
                    Say::Stalled {
                        stall,
                        seconds: self.stalled,
                    },
                )
            }
            None => {
                let seconds = std::mem::take(&mut self.stalled);
                std::mem::take(&mut self.said).then_some(Say::Moving { seconds })
            }
        }
    }
}

/// The watchdog's thread, stopped when this is dropped.
pub(crate) struct Watchdog {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching the engine `nic` whose link reads from `fd` (if it has one). `fd` must
    /// stay open until the watchdog is dropped.
    pub fn start(
        nic: String,
        fd: Option<RawFd>,
        counters: Arc<Counters>,
        waker: Arc<Waker>,
        signs: Arc<Signs>,
    ) -> std::io::Result<Watchdog> {
        let (stop, stopped) = channel::bounded::<()>(1);
        let thread = std::thread::Builder::new()
            .name(format!("{nic}-watchdog"))
            .spawn(move || {
                let mut judge = Judge::default();
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(EVERY) {
                    let look = Look {
                        passes: signs.passes.load(Ordering::Relaxed),
                        rx_frames: counters.rx_frames.load(Ordering::Relaxed),
                        waiting: fd.is_some_and(readable),
                        asleep: waker.asleep(),
                    };
                    match judge.look(look) {
                        Some(Say::Stalled { stall, seconds }) => {
                            let c = counters.snapshot();
                            let why = match stall {
                                Stall::FramesWait => {
                                    "frames wait at the link and the engine has taken none"
                                }
                                Stall::NoPass => "the engine has finished no pass",
                            };
                            warn!(
                                %nic,
                                seconds,
                                asleep = look.asleep,
                                passes = look.passes,
                                rx_frames = c.rx_frames,
                                tx_frames = c.tx_frames,
                                tx_dropped = c.tx_dropped,
                                port_rx_dropped = c.port_rx_dropped,
                                "engine stalled: {why} for {seconds} s"
                            );
                        }
                        Some(Say::Moving { seconds }) => {
                            warn!(%nic, seconds, "engine moving again after a stall of {seconds} s");
                        }
                        None => {}
                    }
                }
            })?;
        Ok(Watchdog {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Whether `fd` has something to read now.
fn readable(fd: RawFd) -> bool {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd; no waiting.
    let n = unsafe { libc::poll(&mut pollfd, 1, 0) };
    n > 0 && pollfd.revents & libc::POLLIN != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn look(passes: u64, rx_frames: u64, waiting: bool, asleep: bool) -> Look {
        Look {
            passes,
            rx_frames,
            waiting,
            asleep,
        }
    }

    /// Runs `looks` through a judge: what it says after each.
    fn judge(looks: &[Look]) -> Vec<Option<Say>> {
        let mut judge = Judge::default();
        looks.iter().map(|&l| judge.look(l)).collect()
    }

    #[test]
    fn frames_waiting_that_the_engine_does_not_take_are_said_once_then_the_recovery() {
        // The engine spins (passes go on) but takes nothing while frames wait.
        let mut looks: Vec<Look> = (0..8).map(|i| look(100 * i, 7, true, false)).collect();
        looks.push(look(900, 8, true, false));
        let said = judge(&looks);
        assert_eq!(said[..5], [None; 5]);
        assert_eq!(
            said[5],
            Some(Say::Stalled {
                stall: Stall::FramesWait,
                seconds: STALL
            })
        );
        assert_eq!(said[6..8], [None; 2], "said once per stall");
        assert_eq!(said[8], Some(Say::Moving { seconds: 7 }));
    }

    #[test]
    fn an_engine_stuck_in_a_pass_is_said_and_one_asleep_with_nothing_to_do_is_not() {
        let stuck: Vec<Look> = (0..6).map(|_| look(42, 7, false, false)).collect();
        assert_eq!(
            judge(&stuck)[5],
            Some(Say::Stalled {
                stall: Stall::NoPass,
                seconds: STALL
            })
        );
        // Asleep with nothing waiting: an idle NIC, not a stall.
        let idle: Vec<Look> = (0..20).map(|_| look(42, 7, false, true)).collect();
        assert!(judge(&idle).iter().all(Option::is_none));
        // Asleep while frames wait (a wake-up lost): a stall.
        let deaf: Vec<Look> = (0..6).map(|_| look(42, 7, true, true)).collect();
        assert!(matches!(
            judge(&deaf)[5],
            Some(Say::Stalled {
                stall: Stall::FramesWait,
                ..
            })
        ));
    }

    #[test]
    fn a_busy_engine_is_never_said_stalled() {
        // Frames wait at every look (a busy link), and the engine takes some between looks.
        let busy: Vec<Look> = (0..30).map(|i| look(10 * i, 3 * i, true, false)).collect();
        assert!(judge(&busy).iter().all(Option::is_none));
        // A stall shorter than STALL looks is not said, nor its end.
        let mut short: Vec<Look> = (0..4).map(|_| look(1, 1, true, false)).collect();
        short.push(look(2, 2, true, false));
        assert!(judge(&short).iter().all(Option::is_none));
    }

    #[test]
    fn a_socket_with_a_datagram_waiting_is_readable() {
        use std::os::fd::AsRawFd;
        let a = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!readable(b.as_raw_fd()));
        a.send_to(b"frame", b.local_addr().unwrap()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !readable(b.as_raw_fd()) {
            assert!(std::time::Instant::now() < deadline, "never readable");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

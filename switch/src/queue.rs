//! An egress port's queue: frames wait here for the line, which sends them one after the other
//! at the port's rate. Time is virtual: the line is busy until `free_at`, which advances by
//! each frame's serialisation time, so the rate holds exactly however late the caller comes to
//! take frames out (a late caller gets several at once). A full buffer drops what arrives
//! (tail drop); a pause from the peer (PFC) stops the line at the next frame boundary.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One frame waiting, with the port it came in on (for PFC's ingress accounting).
#[derive(Debug)]
pub struct Queued<F> {
    pub frame: F,
    pub len: usize,
    pub ingress: usize,
}

#[derive(Debug)]
pub struct EgressQueue<F> {
    frames: VecDeque<Queued<F>>,
    bytes: usize,
    capacity: usize,
    /// Line rate in bits per second.
    rate: u64,
    /// When the line is free for the next frame.
    free_at: Option<Instant>,
    /// Until when the peer asked us not to send.
    paused_until: Option<Instant>,
}

/// Why a frame was not queued.
#[derive(Debug, PartialEq, Eq)]
pub struct Full;

/// How long `len` bytes take on a line of `rate` bits per second.
pub fn serialisation(len: usize, rate: u64) -> Duration {
    Duration::from_nanos((len as u128 * 8 * 1_000_000_000 / u128::from(rate.max(1))) as u64)
}

impl<F> EgressQueue<F> {
    /// A queue of `capacity` bytes in front of a line of `rate` bits per second.
    pub fn new(capacity: usize, rate: u64) -> EgressQueue<F> {
        EgressQueue {
            frames: VecDeque::new(),
            bytes: 0,
            capacity,
            rate,
            free_at: None,
            paused_until: None,
        }
    }

    /// Bytes waiting.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn frames(&self) -> usize {
        self.frames.len()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Queues a frame of `len` bytes, or gives it back if the buffer has no room.
    pub fn push(&mut self, frame: F, len: usize, ingress: usize, now: Instant) -> Result<(), F> {
        if self.bytes + len > self.capacity {
            return Err(frame);
        }
        if self.frames.is_empty() {
            // An idle line starts with this frame, not in the past.
            self.free_at = Some(self.free_at.map_or(now, |t| t.max(now)));
        }
        self.bytes += len;
        self.frames.push_back(Queued {
            frame,
            len,
            ingress,
        });
        Ok(())
    }

    /// The next frame whose turn on the line has come by `now`.
    pub fn pop(&mut self, now: Instant) -> Option<Queued<F>> {
        let start = self.next_start()?;
        if start > now {
            return None;
        }
        let queued = self.frames.pop_front()?;
        self.bytes -= queued.len;
        self.free_at = Some(start + serialisation(queued.len, self.rate));
        Some(queued)
    }

    /// When the head frame may start: when the line is free and no pause holds it.
    pub fn next_start(&self) -> Option<Instant> {
        if self.frames.is_empty() {
            return None;
        }
        let free = self.free_at?;
        Some(match self.paused_until {
            Some(until) if until > free => until,
            _ => free,
        })
    }

    /// The peer asked for a pause until `until` (a later request replaces an earlier one).
    pub fn pause(&mut self, until: Instant) {
        self.paused_until = Some(until);
    }

    /// Whether a pause holds the line at `now`.
    pub fn is_paused(&self, now: Instant) -> bool {
        self.paused_until.is_some_and(|t| t > now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn frames_leave_at_the_line_rate_however_late_they_are_asked_for() {
        let t0 = Instant::now();
        // 8 Mbit/s: 1000 bytes take 1 ms.
        let mut q = EgressQueue::new(10_000, 8_000_000);
        for i in 0..5 {
            q.push(i, 1000, 0, t0).unwrap();
        }
        assert_eq!(q.bytes(), 5000);
        assert_eq!(q.pop(t0).unwrap().frame, 0);
        assert!(q.pop(t0 + Duration::from_micros(999)).is_none());
        assert_eq!(q.next_start(), Some(t0 + ms(1)));
        // Asked 2.5 ms late: the frames due at 1 and 2 ms leave, the 3 ms one waits.
        let late = t0 + Duration::from_micros(2500);
        assert_eq!(q.pop(late).unwrap().frame, 1);
        assert_eq!(q.pop(late).unwrap().frame, 2);
        assert!(q.pop(late).is_none());
        assert_eq!(q.next_start(), Some(t0 + ms(3)));
    }

    #[test]
    fn an_idle_line_starts_with_the_next_frame_not_in_the_past() {
        let t0 = Instant::now();
        let mut q = EgressQueue::new(10_000, 8_000_000);
        q.push('a', 1000, 0, t0).unwrap();
        q.pop(t0).unwrap();
        let later = t0 + ms(50);
        q.push('b', 1000, 0, later).unwrap();
        q.push('c', 1000, 0, later).unwrap();
        assert_eq!(q.pop(later).unwrap().frame, 'b');
        assert!(q.pop(later).is_none(), "no credit saved up while idle");
        assert_eq!(q.next_start(), Some(later + ms(1)));
    }

    #[test]
    fn a_full_buffer_drops_what_arrives() {
        let now = Instant::now();
        let mut q = EgressQueue::new(2500, 8_000_000);
        assert!(q.push(1, 1000, 0, now).is_ok());
        assert!(q.push(2, 1000, 0, now).is_ok());
        assert_eq!(q.push(3, 1000, 0, now), Err(3));
        assert!(q.push(4, 500, 0, now).is_ok());
        assert_eq!(q.bytes(), 2500);
    }

    #[test]
    fn a_pause_holds_the_line_until_it_ends() {
        let t0 = Instant::now();
        let mut q = EgressQueue::new(10_000, 8_000_000);
        q.push(1, 1000, 0, t0).unwrap();
        q.push(2, 1000, 0, t0).unwrap();
        q.pop(t0).unwrap();
        q.pause(t0 + ms(10));
        assert!(q.is_paused(t0 + ms(5)));
        assert!(q.pop(t0 + ms(5)).is_none());
        assert_eq!(q.next_start(), Some(t0 + ms(10)));
        // An XON (a pause until now) lets it go at once.
        q.pause(t0 + ms(6));
        assert_eq!(q.pop(t0 + ms(6)).unwrap().frame, 2);
    }
}

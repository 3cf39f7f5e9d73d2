//! The MAC address table: which port each source address was last seen on, forgotten after an
//! idle time (802.1D's ageing) so that a NIC that moves is found again by flooding.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// 802.1D's default ageing time.
pub const DEFAULT_AGEING: Duration = Duration::from_secs(300);
/// Most addresses kept: a port sending from ever new source addresses cannot make the table
/// grow without bound (new ones are not learned while it is full of live entries).
pub const CAPACITY: usize = 8192;

#[derive(Debug)]
pub struct MacTable {
    entries: HashMap<[u8; 6], (usize, Instant)>,
    ageing: Duration,
}

fn is_group(mac: &[u8; 6]) -> bool {
    mac[0] & 1 != 0
}

impl MacTable {
    pub fn new(ageing: Duration) -> MacTable {
        MacTable {
            entries: HashMap::new(),
            ageing,
        }
    }

    /// Notes that `mac` sent a frame that arrived on `port`. Group addresses are never sources.
    pub fn learn(&mut self, mac: [u8; 6], port: usize, now: Instant) {
        if is_group(&mac) {
            return;
        }
        if self.entries.len() >= CAPACITY && !self.entries.contains_key(&mac) {
            let ageing = self.ageing;
            self.entries
                .retain(|_, (_, seen)| now.saturating_duration_since(*seen) < ageing);
            if self.entries.len() >= CAPACITY {
                return;
            }
        }
        self.entries.insert(mac, (port, now));
    }

    /// The port to send a frame for `mac` to, if known and not aged out; `None` means flood.
    pub fn lookup(&self, mac: &[u8; 6], now: Instant) -> Option<usize> {
        if is_group(mac) {
            return None;
        }
        let (port, seen) = self.entries.get(mac)?;
        (now.saturating_duration_since(*seen) < self.ageing).then_some(*port)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: [u8; 6] = [2, 0, 0, 0, 0, 1];
    const B: [u8; 6] = [2, 0, 0, 0, 0, 2];

    #[test]
    fn addresses_are_learned_moved_and_aged_out() {
        let t0 = Instant::now();
        let mut table = MacTable::new(Duration::from_secs(10));
        assert_eq!(table.lookup(&A, t0), None);
        table.learn(A, 1, t0);
        table.learn(B, 2, t0);
        assert_eq!(table.lookup(&A, t0), Some(1));
        // A moves to port 3.
        table.learn(A, 3, t0 + Duration::from_secs(1));
        assert_eq!(table.lookup(&A, t0 + Duration::from_secs(2)), Some(3));
        // B is silent for the ageing time and is forgotten; A, heard since, is not.
        assert_eq!(table.lookup(&B, t0 + Duration::from_secs(10)), None);
        assert_eq!(table.lookup(&A, t0 + Duration::from_secs(10)), Some(3));
    }

    #[test]
    fn group_addresses_are_never_learned_and_always_flooded() {
        let now = Instant::now();
        let mut table = MacTable::new(DEFAULT_AGEING);
        let broadcast = [0xff; 6];
        table.learn(broadcast, 1, now);
        table.learn([0x01, 0, 0x5e, 0, 0, 1], 1, now);
        assert!(table.is_empty());
        assert_eq!(table.lookup(&broadcast, now), None);
    }

    #[test]
    fn a_full_table_makes_room_only_from_aged_entries() {
        let t0 = Instant::now();
        let mut table = MacTable::new(Duration::from_secs(1));
        for i in 0..CAPACITY as u32 {
            let b = i.to_be_bytes();
            table.learn([2, 0, b[0], b[1], b[2], b[3]], 1, t0);
        }
        let new = [6, 0, 0, 0, 0, 1];
        table.learn(new, 2, t0);
        assert_eq!(table.lookup(&new, t0), None, "full of live entries");
        table.learn(new, 2, t0 + Duration::from_secs(2));
        assert_eq!(table.lookup(&new, t0 + Duration::from_secs(2)), Some(2));
        assert_eq!(table.len(), 1);
    }
}

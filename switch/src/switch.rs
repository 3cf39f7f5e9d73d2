//! The switch itself, with no I/O: frames go in with [`Switch::receive`], come out of
//! [`Switch::poll_transmit`], and time passes only through the `now` each call is given, so
//! the whole switch runs in simulated time in tests. The process around it
//! ([`crate::driver`]) moves frames between these calls and the ports' links.

use std::time::{Duration, Instant};

use rand::{RngExt, SeedableRng};
use rand_xorshift::XorShiftRng;
use roce_nic::link::ecn::{self, Ecn};
use roce_nic::link::paced::Rate;
use roce_nic::link::pfc::{pause_time, Pause};
use roce_wire::EthernetAddress;
use tracing::trace;

use crate::counters::PortCounters;
use crate::learning::{MacTable, DEFAULT_AGEING};
use crate::pfc::{IngressPfc, Thresholds};
use crate::queue::EgressQueue;
use crate::red::Red;

/// One port's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PortConfig {
    /// Line rate in bits per second.
    pub rate: u64,
    /// Bytes the egress queue holds.
    pub buffer: usize,
    /// ECN marking; `None`: never mark.
    pub red: Option<Red>,
    /// PFC on this port's ingress; `None`: never send pause frames.
    pub pfc: Option<Thresholds>,
}

impl Default for PortConfig {
    fn default() -> PortConfig {
        PortConfig {
            rate: 10_000_000_000,
            buffer: 1 << 20,
            red: None,
            pfc: None,
        }
    }
}

/// The whole switch's settings.
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    pub ports: Vec<PortConfig>,
    /// The lossless priority: the one our pause frames name and received ones are obeyed for
    /// (the switch has one queue per port, so all traffic is in this class).
    pub pfc_priority: u8,
    pub ageing: Duration,
    /// Seeds the RED marking decisions, so a run can be replayed.
    pub seed: u64,
    /// Source address of the pause frames; port `n` uses this with `n` added to its last byte.
    pub mac: EthernetAddress,
}

impl SwitchConfig {
    pub fn new(ports: Vec<PortConfig>) -> SwitchConfig {
        SwitchConfig {
            ports,
            pfc_priority: roce_nic::link::pfc::DEFAULT_PRIORITY,
            ageing: DEFAULT_AGEING,
            seed: 1,
            mac: EthernetAddress([0x02, 0x5e, 0x00, 0x00, 0x00, 0x00]),
        }
    }
}

/// What leaves a port.
#[derive(Debug)]
pub enum Transmit<F> {
    /// A frame that came in on another port.
    Frame(F),
    /// A PFC frame of the switch's own: the peer is to pause for `quanta` (0: go on).
    Pause {
        quanta: u16,
        source: EthernetAddress,
    },
}

struct Port<F> {
    config: PortConfig,
    queue: EgressQueue<F>,
    pfc: Option<IngressPfc>,
    /// A pause frame to send ahead of the queue.
    pause_due: Option<u16>,
    counters: PortCounters,
    mac: EthernetAddress,
}

pub struct Switch<F> {
    ports: Vec<Port<F>>,
    table: MacTable,
    rng: XorShiftRng,
    priority: u8,
    /// Where `poll_transmit` looks first, so that no port is always served last.
    next_port: usize,
}

/// Bridges never forward 01:80:c2:00:00:0x (pause frames, spanning tree, LLDP).
fn is_link_local(mac: &[u8]) -> bool {
    mac[..5] == [0x01, 0x80, 0xc2, 0x00, 0x00] && mac[5] & 0xf0 == 0
}

impl<F: std::ops::DerefMut<Target = [u8]>> Switch<F> {
    pub fn new(config: SwitchConfig) -> Switch<F> {
        let ports = config
            .ports
            .iter()
            .enumerate()
            .map(|(n, p)| {
                let mut mac = config.mac;
                mac.0[5] = mac.0[5].wrapping_add(n as u8 + 1);
                Port {
                    config: *p,
                    queue: EgressQueue::new(p.buffer, p.rate),
                    pfc: p.pfc.map(|t| IngressPfc::new(t, p.rate)),
                    pause_due: None,
                    counters: PortCounters::default(),
                    mac,
                }
            })
            .collect();
        Switch {
            ports,
            table: MacTable::new(config.ageing),
            rng: XorShiftRng::seed_from_u64(config.seed),
            priority: config.pfc_priority & 7,
            next_port: 0,
        }
    }

    /// The priority of the pause frames the switch sends and obeys.
    pub fn pfc_priority(&self) -> u8 {
        self.priority
    }

    pub fn port_count(&self) -> usize {
        self.ports.len()
    }

    pub fn counters(&self, port: usize) -> &PortCounters {
        &self.ports[port].counters
    }

    pub fn config(&self, port: usize) -> &PortConfig {
        &self.ports[port].config
    }

    /// Counts frames the port's link could not take.
    pub fn lost(&mut self, port: usize, frames: u64) {
        self.ports[port].counters.tx_lost += frames;
    }

    /// A frame arrived on `ingress`. `copy` makes another frame with the same bytes, for
    /// flooding to more than one port.
    pub fn receive(
        &mut self,
        ingress: usize,
        frame: F,
        now: Instant,
        mut copy: impl FnMut(&[u8]) -> F,
    ) {
        let Some(port) = self.ports.get_mut(ingress) else {
            return;
        };
        port.counters.rx_frames += 1;
        port.counters.rx_bytes += frame.len() as u64;
        if frame.len() < 14 {
            return;
        }
        if let Some(pause) = Pause::parse(&frame) {
            port.counters.pause_received += 1;
            if let Some(quanta) = pause.quanta_for(self.priority) {
                let until = now + pause_time(quanta, Rate(port.config.rate));
                trace!(port = ingress, quanta, "paused by the peer");
                port.queue.pause(until);
            }
            return;
        }
        let dst: [u8; 6] = frame[0..6].try_into().expect("14 bytes at least");
        let src: [u8; 6] = frame[6..12].try_into().expect("14 bytes at least");
        if is_link_local(&dst) {
            return;
        }
        self.table.learn(src, ingress, now);
        match self.table.lookup(&dst, now) {
            // A frame for the port it came from is filtered, as bridges do.
            Some(egress) if egress == ingress => {}
            Some(egress) => self.enqueue(egress, frame, ingress, now),
            None => {
                // Every other port gets a copy, the last one the frame itself.
                let Some(last) = (0..self.ports.len()).rev().find(|&p| p != ingress) else {
                    return;
                };
                for p in (0..last).filter(|&p| p != ingress) {
                    let copy = copy(&frame);
                    self.ports[p].counters.flooded += 1;
                    self.enqueue(p, copy, ingress, now);
                }
                self.ports[last].counters.flooded += 1;
                self.enqueue(last, frame, ingress, now);
            }
        }
    }

    fn enqueue(&mut self, egress: usize, mut frame: F, ingress: usize, now: Instant) {
        let port = &mut self.ports[egress];
        let len = frame.len();
        let queue = port.queue.bytes();
        if queue + len > port.queue.capacity() {
            port.counters.dropped += 1;
            trace!(port = egress, queue, "tail drop");
            return;
        }
        if let (Some(red), Some(mark)) = (port.config.red, ecn::ecn(&frame)) {
            if mark.is_capable() {
                port.counters.ecn_capable += 1;
                let p = red.probability(queue);
                if p > 0.0 && self.rng.random_bool(p) {
                    ecn::set_ecn(&mut frame, Ecn::Ce);
                    port.counters.ecn_marked += 1;
                }
            }
        }
        if port.queue.push(frame, len, ingress, now).is_err() {
            port.counters.dropped += 1;
            return;
        }
        let depth = port.queue.bytes() as u64;
        port.counters.queue_bytes = depth;
        port.counters.queue_max_bytes = port.counters.queue_max_bytes.max(depth);
        if let Some(pfc) = &mut self.ports[ingress].pfc {
            pfc.added(len);
        }
        self.check_pfc(ingress, now);
    }

    fn check_pfc(&mut self, port: usize, now: Instant) {
        let port = &mut self.ports[port];
        if let Some(quanta) = port.pfc.as_mut().and_then(|p| p.due(now)) {
            port.pause_due = Some(quanta);
        }
    }

    /// The next thing to send, on which port, if anything is due by `now`. Call until `None`.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<(usize, Transmit<F>)> {
        let n = self.ports.len();
        for i in 0..n {
            let p = (self.next_port + i) % n;
            self.check_pfc(p, now);
            let port = &mut self.ports[p];
            if let Some(quanta) = port.pause_due.take() {
                if quanta == 0 {
                    port.counters.pause_xon_sent += 1;
                } else {
                    port.counters.pause_xoff_sent += 1;
                }
                self.next_port = (p + 1) % n;
                let source = port.mac;
                return Some((p, Transmit::Pause { quanta, source }));
            }
            if let Some(queued) = port.queue.pop(now) {
                port.counters.tx_frames += 1;
                port.counters.tx_bytes += queued.len as u64;
                port.counters.queue_bytes = port.queue.bytes() as u64;
                if let Some(pfc) = &mut self.ports[queued.ingress].pfc {
                    pfc.removed(queued.len);
                }
                self.check_pfc(queued.ingress, now);
                self.next_port = (p + 1) % n;
                return Some((p, Transmit::Frame(queued.frame)));
            }
        }
        None
    }

    /// When something next becomes due if no frame arrives: a queue's head frame, a pause to
    /// renew.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.ports
            .iter()
            .flat_map(|p| {
                [
                    p.queue.next_start(),
                    p.pfc.as_ref().and_then(|f| f.deadline()),
                ]
            })
            .flatten()
            .min()
    }

    /// Bytes waiting at each port's egress.
    pub fn queue_bytes(&self, port: usize) -> usize {
        self.ports[port].queue.bytes()
    }

    /// Whether the port's peer has paused it at `now`.
    pub fn is_paused(&self, port: usize, now: Instant) -> bool {
        self.ports[port].queue.is_paused(now)
    }
}

#[cfg(test)]
mod tests;

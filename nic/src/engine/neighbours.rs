//! Peers' MACs for QPs and address handles, so that an address vector needs only a GID.
//!
//! The engine learns (IP → MAC) from every frame it accepts: ARP and neighbour discovery, and
//! the source addresses of IP packets, RoCE ones included. A modify to RTR or an address handle
//! naming an IP whose MAC is not known yet is held back — as `ib_modify_qp` and `ib_create_ah`
//! block in Linux while the kernel resolves the address — while the port's IP stack asks the
//! wire. It is carried out the moment the MAC is learnt, or, after the device's resolve
//! timeout, fails with [`crate::qp::ModifyError::NoNeighbour`]. The engine never waits: other
//! requests, frames and work go on meanwhile. A MAC in the address vector is used as given.
//!
//! Learnt entries do not age; a peer that changes its MAC is re-learnt from its next frame, but
//! QPs already connected keep the path they were given, as rxe's do.

use std::net::IpAddr;
use std::time::Instant;

use roce_wire::ethernet::Mac;
use roce_wire::EthernetAddress;
use tracing::debug;

use super::Engine;
use crate::control::{ClientId, Command, Request};

/// What a request needs of the neighbour table.
pub(super) enum NeighbourNeed {
    /// Nothing it does not have.
    None,
    /// The MAC of an address on the port's subnets, which the port can ask for.
    Resolve(IpAddr),
    /// The MAC of an address off the port's subnets: nobody to ask (there is no router).
    Unreachable(IpAddr),
}

/// A request held back until a neighbour's MAC is known.
pub(super) struct AwaitingNeighbour {
    ip: IpAddr,
    deadline: Instant,
    command: Command,
}

impl Engine {
    /// Learns that `ip` is at `mac`. Runs for every accepted frame, so the usual case — the
    /// same sender as the frame before — is one comparison, and otherwise nothing new is one
    /// table lookup. (Entries change only here, so a sender found in the table stays there.)
    #[inline]
    pub(super) fn learn(&mut self, ip: IpAddr, mac: EthernetAddress) {
        if self.last_sender == Some((ip, mac)) {
            return;
        }
        if self.port.neighbours.get(&ip) == Some(&mac) {
            self.last_sender = Some((ip, mac));
        } else {
            // The last sender's entry may be the one that changes.
            self.last_sender = None;
            self.learn_new(ip, mac);
        }
    }

    fn learn_new(&mut self, ip: IpAddr, mac: EthernetAddress) {
        if self.local_ips.contains(&ip) {
            return;
        }
        let old = self.port.neighbours.insert(ip, mac);
        debug!(%ip, mac = %Mac(mac), old = ?old.map(Mac), "neighbour learnt");
        self.ip_stack.resolved(ip);
        let (ready, rest) = std::mem::take(&mut self.awaiting_neighbour)
            .into_iter()
            .partition(|w| w.ip == ip);
        self.awaiting_neighbour = rest;
        // Served once the world is held (at the start of the next pass).
        self.resolved
            .extend(ready.into_iter().map(|w: AwaitingNeighbour| w.command));
    }

    /// Whether `request` needs a MAC the engine does not know.
    pub(super) fn neighbour_need(&self, request: &Request) -> NeighbourNeed {
        let ip = match request {
            Request::ModifyQp { attr, .. } => attr.av.filter(|av| av.dmac.is_none()),
            Request::CreateAh { av, .. } => Some(*av).filter(|av| av.dmac.is_none()),
            _ => None,
        }
        .map(|av| av.dgid.ip());
        // A CM connect sends its REQ straight to the peer's MAC.
        let ip = match request {
            Request::CmConnect { dst, .. } => Some(dst.ip()),
            _ => ip,
        };
        let Some(ip) = ip else {
            return NeighbourNeed::None;
        };
        if self.port.neighbours.contains_key(&ip) {
            NeighbourNeed::None
        } else if self.ip_stack.on_link(ip) {
            NeighbourNeed::Resolve(ip)
        } else {
            NeighbourNeed::Unreachable(ip)
        }
    }

    /// Holds `command` until `ip` is resolved or the resolve timeout passes.
    pub(super) fn await_neighbour(&mut self, ip: IpAddr, command: Command) {
        let deadline = Instant::now() + self.resolve_timeout;
        self.ip_stack.resolve(ip, deadline);
        self.awaiting_neighbour.push(AwaitingNeighbour {
            ip,
            deadline,
            command,
        });
    }

    /// Carries out the held requests whose time is up: unresolved, they fail.
    pub(super) fn expire_neighbour_waits(&mut self, now: Instant) {
        if self.awaiting_neighbour.iter().all(|w| w.deadline > now) {
            return;
        }
        let (expired, rest) = std::mem::take(&mut self.awaiting_neighbour)
            .into_iter()
            .partition(|w| w.deadline <= now);
        self.awaiting_neighbour = rest;
        for waiting in expired {
            debug!(ip = %waiting.ip, "no neighbour answered in time");
            let Command {
                client,
                request,
                reply,
            } = waiting.command;
            let _ = reply.send(self.execute(client, request));
        }
    }

    pub(super) fn neighbour_wait_deadline(&self) -> Option<Instant> {
        self.awaiting_neighbour.iter().map(|w| w.deadline).min()
    }

    /// Drops the held requests of a host program that went away.
    pub(super) fn forget_neighbour_waits(&mut self, client: ClientId) {
        self.awaiting_neighbour
            .retain(|w| w.command.client != client);
        self.resolved.retain(|c| c.client != client);
    }
}

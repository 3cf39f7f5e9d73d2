//! Requests the responder has seen before (a PSN behind the expected one): the requester missed
//! the answer. They are answered again, never executed again: READs from memory (all of the
//! READ, or from the packet the duplicate names), atomics from their saved result, SENDs and
//! WRITEs by acknowledging again up to the last PSN executed.

use roce_wire::{bth, Extensions, Kind};

use super::replies::reply_atomic;
use super::{ReadReply, Reply, Resource};
use crate::counters;
use crate::qp::Qp;
use crate::transport::{psn, Ctx, Event};

/// A request PSN before the expected one: the requester did not see our answer.
pub(super) fn duplicate(qp: &mut Qp, ctx: &mut Ctx<'_>, bth: &bth::Repr, ext: &Extensions) {
    counters::bump(&ctx.counters.rx_duplicates);
    let p = bth.psn;
    let kind = bth.opcode.kind();
    ctx.event(Event::Duplicate {
        expected: qp.recv.epsn,
    });
    match kind {
        Kind::ReadRequest => {
            let reth = ext.reth.unwrap_or_default();
            let mtu = u64::from(qp.attrs.path_mtu.bytes());
            let found = qp.recv.resources.iter().rev().find_map(|r| match *r {
                Resource::Read {
                    first_psn,
                    npkts,
                    va,
                    rkey,
                    len,
                } => {
                    let d = psn::diff(p, first_psn);
                    let within = d >= 0 && (d as u32) < npkts;
                    let offset = d.max(0) as u64 * mtu;
                    (within
                        && reth.r_key == rkey
                        && reth.va == va.wrapping_add(offset)
                        && u64::from(reth.dma_len) == len - offset)
                        .then_some(ReadReply {
                            first_psn,
                            va,
                            rkey,
                            len,
                            offset,
                        })
                }
                Resource::Atomic { .. } => None,
            });
            match found {
                Some(reply) => {
                    // Answer again from memory, replacing a reply to the same READ in progress
                    // where it stands: answers leave in PSN order, and an atomic ACK or a NAK
                    // queued behind the READ must not overtake it (the requester would take
                    // the READ's responses for lost and go back again — found by `roce
                    // conform` on our own NIC under loss).
                    let replies = &mut qp.recv.replies;
                    replies.retain(|r| r.psn() != reply.first_psn);
                    let at = replies
                        .iter()
                        .position(|r| psn::before(reply.first_psn, r.psn()))
                        .unwrap_or(replies.len());
                    replies.insert(at, Reply::Read(reply));
                    ctx.event(Event::DuplicateReadReplayed {
                        first_psn: reply.first_psn,
                    });
                }
                None => ctx.event(Event::DuplicateReadUnknown),
            }
        }
        Kind::CompareSwap | Kind::FetchAdd => {
            let saved = qp.recv.resources.iter().find_map(|r| match *r {
                Resource::Atomic { psn, original } if psn == p => Some(original),
                _ => None,
            });
            match saved {
                Some(original) => {
                    counters::bump(&ctx.counters.atomic_replays);
                    ctx.event(Event::AtomicReplayed { original });
                    reply_atomic(qp, ctx, p, original);
                }
                None => ctx.event(Event::DuplicateAtomicUnknown),
            }
        }
        _ => {
            // SEND and WRITE: acknowledge again up to the last PSN executed.
            let last = psn::add(qp.recv.epsn, psn::MASK);
            qp.recv.ack_pending = Some(last);
        }
    }
}

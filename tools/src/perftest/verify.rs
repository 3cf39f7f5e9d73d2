//! What can be checked of perftest's data. perftest fills its buffers with random bytes (zeros
//! for `ib_write_lat`) and checks nothing, so:
//!
//! - READs (client): every READ of one remote place brings the same bytes (the server never
//!   changes its buffer), and the first brings something (not our fill, for 8 bytes or more).
//! - fetch-and-add (client): at each remote place, each result is the previous one plus 1;
//!   compare-and-swap (compare 0, swap 0, so memory never changes): every result is the same.
//! - SENDs received: exactly `-s` bytes each, each equal to the one a whole walk of the
//!   sender's buffer earlier, and not our fill.
//! - `ib_write_lat`: each WRITE holds zeros and the iteration number in its last byte.
//! - Atomics, in the latency test, all go to the start of the peer's buffer.
//! - The passive server of a one-sided test, afterwards: for WRITEs, every place the client
//!   writes now holds other bytes than our fill, and the NIC wrote at least `-n` × `-s` bytes;
//!   for READs, our memory is unchanged and the NIC read at least that much; for
//!   fetch-and-add, each place grew by exactly the number of additions perftest aims at it;
//!   for compare-and-swap, memory is unchanged and the NIC executed at least `-n` atomics.
//!
//! Against an RDMA WRITE client nothing can be checked on the client side: the peer's memory
//! is out of reach.

use std::collections::HashMap;

use roce_nic::counters::Snapshot;

use super::layout::Layout;
use super::messages::QpRecord;
use super::resources::Resources;
use super::{AtomicOp, Options, Test, Verb, ATOMIC_ADD, MAX_SIZE};
use crate::ToolError;

/// What fills memory that the peer is to overwrite, or a landing place before its data comes.
pub const FILL: u8 = 0xee;
/// Shorter data may be all [`FILL`] by chance too often to call that an error.
const FILL_CHECK_MIN: usize = 8;

/// The most bytes of `total` random ones (what a real perftest writes) that may equal [`FILL`]
/// without calling the run a failure: the mean (one in 256) plus six standard deviations plus
/// two, so that a real peer fails by chance far less than once in a million runs while a WRITE
/// that did not land (every byte still our fill) fails from 8 bytes on.
fn random_fill_bound(total: usize) -> usize {
    let mean = total as f64 / 256.0;
    (mean + 6.0 * (mean * 255.0 / 256.0).sqrt()) as usize + 2
}

/// Bytes this side sends from (WRITE and SEND sources), and offers to READs.
pub fn pattern(offset: usize) -> u8 {
    (offset as u8).wrapping_mul(31).wrapping_add(7) ^ (offset >> 8) as u8
}

/// What an atomic place of the peer half holds before the run (never 0, not small).
fn atomic_start(place: u64) -> u64 {
    0xfff0_0000_0000_0000 | place.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 12
}

/// The half this side offers to the peer, as it should be before the run (`after` = false)
/// or after a run that did what perftest does (`after` = true; for WRITEs only the bytes
/// outside the written places are known, and those are not compared).
fn peer_image(opts: &Options, layout: &Layout, after: bool) -> Vec<u8> {
    let len = (layout.buffer_len() - layout.peer_half()) as usize;
    let base = layout.peer_half() as usize;
    match opts.test {
        Test::WriteLat => vec![0; len],
        Test::WriteBw => vec![FILL; len],
        Test::AtomicBw | Test::AtomicLat => {
            let mut image: Vec<u8> = (0..len).map(|i| pattern(base + i)).collect();
            let places = places_used(opts, layout);
            for place in 0..places {
                let mut value = atomic_start(place);
                if after && opts.atomic == AtomicOp::FetchAndAdd {
                    value = value.wrapping_add(ATOMIC_ADD * hits(opts.iters, places, place));
                }
                let at = layout.place(place) as usize;
                image[at..at + 8].copy_from_slice(&value.to_ne_bytes());
            }
            image
        }
        _ => (0..len).map(|i| pattern(base + i)).collect(),
    }
}

/// The places a test's messages take in turn: a bandwidth test walks the buffer, a latency
/// test stays at its start.
fn places_used(opts: &Options, layout: &Layout) -> u64 {
    if opts.test.is_bw() {
        layout.places()
    } else {
        1
    }
}

/// How many of `iters` messages go to place `place` of `places` taken in turn.
fn hits(iters: u64, places: u64, place: u64) -> u64 {
    iters / places + u64::from(place < iters % places)
}

/// Fills the buffer before the first record is sent: the source half with [`pattern`] (zeros
/// for `ib_write_lat`, whose messages are zeros), the peer half with its starting image.
pub fn prepare_peer_half(res: &Resources, opts: &Options) {
    let peer = res.layout.peer_half() as usize;
    let source: Vec<u8> = if opts.test == Test::WriteLat {
        vec![0; peer]
    } else {
        (0..peer).map(pattern).collect()
    };
    res.area.write(0, &source);
    res.area.write(peer, &peer_image(opts, &res.layout, false));
}

/// The check of a passive server, once the client is done; `delta` is the NIC's counters
/// over the run.
pub fn passive_server(
    res: &Resources,
    opts: &Options,
    theirs: &QpRecord,
    delta: &Snapshot,
) -> Result<String, ToolError> {
    let layout = &res.layout;
    let peer = layout.peer_half() as usize;
    let now = res
        .area
        .read(peer, (layout.buffer_len() - layout.peer_half()) as usize);
    // What the client moves: `-n` messages of `-s` bytes, or of every size of `-a`'s sweep.
    let (bytes, messages) = if opts.all_sizes {
        (
            opts.iters * (2 * MAX_SIZE - 2),
            format!("{} of each size from 2 to {MAX_SIZE} bytes", opts.iters),
        )
    } else {
        (
            opts.iters * opts.size,
            format!("{} of {} bytes", opts.iters, opts.size),
        )
    };
    let program = opts.test.program();
    let fail = |m: String| Err(ToolError::Data(m));
    match opts.test.verb() {
        Verb::Write => {
            let size = opts.size as usize;
            let used = opts.iters.min(layout.places());
            let (mut total, mut still, mut ours) = (0, 0, true);
            for place in 0..used {
                let at = layout.place(place) as usize;
                let landed = &now[at..at + size];
                total += size;
                still += landed.iter().filter(|b| **b == FILL).count();
                ours &= landed.iter().zip(at..).all(|(b, i)| *b == pattern(i));
            }
            if still > random_fill_bound(total) {
                return fail(format!(
                    "{still} of the {total} bytes {program} writes still hold our fill (random \
                     bytes would leave at most {})",
                    random_fill_bound(total)
                ));
            }
            if delta.dma_write_bytes < bytes {
                return fail(format!(
                    "the NIC wrote {} bytes for {bytes} bytes of RDMA WRITEs",
                    delta.dma_write_bytes
                ));
            }
            let what = if ours {
                // Our perftest writes `pattern` from the same places of its own buffer.
                "exactly the bytes our client sends from the same places".to_owned()
            } else {
                format!(
                    "new bytes ({} of {total} differ from our fill)",
                    total - still
                )
            };
            Ok(format!(
                "the {used} place(s) {program} writes hold {what}, and the NIC wrote {} bytes for the WRITEs ({messages}) from QP {:#x}",
                delta.dma_write_bytes, theirs.qpn
            ))
        }
        Verb::Read | Verb::Atomic => {
            let want = peer_image(opts, layout, true);
            if let Some(at) = (0..want.len()).find(|i| now[*i] != want[*i]) {
                return fail(format!(
                    "byte {at} of the memory offered to {program} is {:#04x}, not {:#04x}",
                    now[at], want[at]
                ));
            }
            if opts.test.verb() == Verb::Read {
                if delta.dma_read_bytes < bytes {
                    return fail(format!(
                        "the NIC read {} bytes for {bytes} bytes of RDMA READs",
                        delta.dma_read_bytes
                    ));
                }
                return Ok(format!(
                    "our memory is unchanged and the NIC read {} bytes for the READs ({messages})",
                    delta.dma_read_bytes
                ));
            }
            if delta.atomics_executed < opts.iters {
                return fail(format!(
                    "the NIC executed {} atomics for {}",
                    delta.atomics_executed, opts.iters
                ));
            }
            Ok(match opts.atomic {
                AtomicOp::FetchAndAdd => format!(
                    "each of the {} place(s) grew by exactly the number of fetch-and-adds aimed at it ({} in all), and the NIC executed {}",
                    places_used(opts, layout), opts.iters, delta.atomics_executed
                ),
                AtomicOp::CmpAndSwap => format!(
                    "memory is unchanged (compare 0, swap 0) and the NIC executed {} compare-and-swaps",
                    delta.atomics_executed
                ),
            })
        }
        // A SEND test's server receives, and checks as it does.
        Verb::Send => Ok("what the receiver checked".into()),
    }
}

/// Checks the data READs bring back: the same at each remote place every time.
#[derive(Default)]
pub struct ReadCheck {
    first: HashMap<u64, Vec<u8>>,
    pub reads: u64,
}

impl ReadCheck {
    pub fn check(&mut self, place: u64, data: &[u8]) -> Result<(), ToolError> {
        self.reads += 1;
        match self.first.get(&place) {
            Some(first) if first != data => Err(ToolError::Data(format!(
                "READ {} of remote offset {place} brought other bytes than the first READ there",
                self.reads
            ))),
            Some(_) => Ok(()),
            None if data.len() >= FILL_CHECK_MIN && data.iter().all(|b| *b == FILL) => {
                Err(ToolError::Data(format!(
                    "READ {} brought nothing: its landing place still holds our fill",
                    self.reads
                )))
            }
            None => {
                self.first.insert(place, data.to_vec());
                Ok(())
            }
        }
    }
}

/// Checks atomic results: per remote place, each fetch-and-add returns one more than the last,
/// each compare-and-swap the same as the last.
pub struct AtomicCheck {
    op: AtomicOp,
    last: HashMap<u64, u64>,
    pub results: u64,
}

impl AtomicCheck {
    pub fn new(op: AtomicOp) -> AtomicCheck {
        AtomicCheck {
            op,
            last: HashMap::new(),
            results: 0,
        }
    }

    pub fn check(&mut self, place: u64, value: u64) -> Result<(), ToolError> {
        self.results += 1;
        if let Some(last) = self.last.insert(place, value) {
            let want = match self.op {
                AtomicOp::FetchAndAdd => last.wrapping_add(ATOMIC_ADD),
                AtomicOp::CmpAndSwap => last,
            };
            if value != want {
                return Err(ToolError::Data(format!(
                    "atomic {} at remote offset {place} returned {value:#x} after {last:#x}",
                    self.results
                )));
            }
        }
        Ok(())
    }

    pub fn places(&self) -> usize {
        self.last.len()
    }
}

/// Checks received SENDs against the one a whole walk earlier (perftest's sender takes its
/// messages from successive places of its buffer).
pub struct SendCheck {
    size: usize,
    walk: usize,
    recent: Vec<Vec<u8>>,
    pub received: u64,
}

impl SendCheck {
    pub fn new(size: usize, walk: u64) -> SendCheck {
        SendCheck {
            size,
            walk: walk as usize,
            recent: Vec::new(),
            received: 0,
        }
    }

    pub fn check(&mut self, byte_len: u32, data: &[u8]) -> Result<(), ToolError> {
        let n = self.received as usize;
        self.received += 1;
        if byte_len as usize != self.size {
            return Err(ToolError::Data(format!(
                "message {n} has {byte_len} bytes, not {}",
                self.size
            )));
        }
        if n < self.walk {
            if data.len() >= FILL_CHECK_MIN && data.iter().all(|b| *b == FILL) {
                return Err(ToolError::Data(format!(
                    "message {n} left its receive buffer as we filled it"
                )));
            }
            self.recent.push(data.to_vec());
        } else if self.recent[n % self.walk] != data {
            return Err(ToolError::Data(format!(
                "message {n} differs from message {}, sent from the same place",
                n - self.walk
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_must_agree_with_the_first_read_of_their_place() {
        let mut check = ReadCheck::default();
        check.check(0, &[1, 2, 3]).unwrap();
        check.check(64, &[4, 5, 6]).unwrap();
        check.check(0, &[1, 2, 3]).unwrap();
        assert!(check.check(64, &[4, 5, 7]).is_err());
        let mut fresh = ReadCheck::default();
        assert!(fresh.check(0, &[FILL; 8]).is_err());
    }

    #[test]
    fn random_bytes_pass_the_fill_bound_and_unwritten_ones_do_not() {
        // Every byte still the fill fails from 8 bytes on.
        for total in [8, 100, 4096, 1 << 20] {
            assert!(random_fill_bound(total) < total, "{total}");
        }
        // 1 MiB of random bytes holds about 4096 fills, with a standard deviation of 64.
        assert!((4096 + 5 * 64..4096 + 7 * 64).contains(&random_fill_bound(1 << 20)));
    }

    #[test]
    fn fetch_and_add_results_count_up_per_place_and_swaps_stay() {
        let mut add = AtomicCheck::new(AtomicOp::FetchAndAdd);
        for v in [10, 20, 11, 21, 12] {
            let place = if v < 20 { 0 } else { 64 };
            add.check(place, v).unwrap();
        }
        assert!(add.check(0, 12).is_err());
        let mut swap = AtomicCheck::new(AtomicOp::CmpAndSwap);
        swap.check(0, 5).unwrap();
        swap.check(0, 5).unwrap();
        assert!(swap.check(0, 6).is_err());
        assert_eq!(swap.places(), 1);
    }

    #[test]
    fn sends_repeat_after_a_walk_of_the_senders_buffer() {
        let mut check = SendCheck::new(2, 2);
        for msg in [[1u8, 2], [3, 4], [1, 2], [3, 4]] {
            check.check(2, &msg).unwrap();
        }
        assert!(check.check(2, &[9, 9]).is_err());
        assert!(SendCheck::new(2, 1).check(3, &[1, 2]).is_err());
    }

    #[test]
    fn fetch_and_add_hits_are_spread_over_the_places_in_turn() {
        let layout = Layout {
            size: 8,
            cycle: 4096,
            cache_line: 64,
        };
        assert_eq!(layout.places(), 64);
        assert_eq!(hits(130, layout.places(), 0), 3);
        assert_eq!(hits(130, layout.places(), 1), 3);
        assert_eq!(hits(130, layout.places(), 2), 2);
        assert_eq!((0..64).map(|p| hits(130, 64, p)).sum::<u64>(), 130);
        assert_eq!(hits(130, 1, 0), 130);
    }
}

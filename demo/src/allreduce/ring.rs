//! The ring all-reduce's schedule, with no I/O: which chunk each host sends and receives at
//! each step, where it lands, and what the immediate data says.
//!
//! N hosts in a ring (each sends to the next, receives from the previous) hold a vector each,
//! cut into N chunks. Reduce-scatter: at step s host r sends chunk r−s to host r+1, which adds
//! it into its own copy of that chunk; after N−1 steps host r holds the whole sum of chunk r+1.
//! All-gather: at step s host r passes on chunk r+1−s, which the next host keeps as it is;
//! after N−1 more steps every host holds every summed chunk. Each link carries 2(N−1) chunks,
//! whatever N is: why collective libraries (NCCL, Gloo) use a ring for large vectors.

use std::ops::Range;

use serde::{Deserialize, Serialize};

/// The two halves of the all-reduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    ReduceScatter,
    AllGather,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::ReduceScatter => "reduce-scatter",
            Phase::AllGather => "all-gather",
        }
    }
}

/// Bytes of a float.
pub const FLOAT: usize = 4;

/// The ring of `hosts` hosts reducing `floats` floats each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ring {
    pub hosts: usize,
    pub floats: usize,
}

impl Ring {
    pub fn new(hosts: usize, floats: usize) -> Ring {
        Ring { hosts, floats }
    }

    pub fn next(&self, rank: usize) -> usize {
        (rank + 1) % self.hosts
    }

    pub fn prev(&self, rank: usize) -> usize {
        (rank + self.hosts - 1) % self.hosts
    }

    /// The floats of chunk `k`: the first `floats % hosts` chunks have one more than the
    /// others, so a length that does not divide evenly still covers every float once.
    pub fn chunk(&self, k: usize) -> Range<usize> {
        let base = self.floats / self.hosts;
        let extra = self.floats % self.hosts;
        let start = k * base + k.min(extra);
        let len = base + usize::from(k < extra);
        start..start + len
    }

    /// The longest chunk, in floats.
    pub fn max_chunk(&self) -> usize {
        self.floats.div_ceil(self.hosts)
    }

    /// Steps per phase.
    pub fn steps(&self) -> usize {
        self.hosts - 1
    }

    /// Every step in order: reduce-scatter's, then all-gather's.
    pub fn schedule(&self) -> impl Iterator<Item = (Phase, usize)> {
        let steps = self.steps();
        [Phase::ReduceScatter, Phase::AllGather]
            .into_iter()
            .flat_map(move |phase| (0..steps).map(move |step| (phase, step)))
    }

    /// The chunk host `rank` sends to the next host at `step` of `phase`.
    pub fn sent(&self, rank: usize, phase: Phase, step: usize) -> usize {
        let n = self.hosts;
        match phase {
            Phase::ReduceScatter => (rank + n - step % n) % n,
            Phase::AllGather => (rank + 1 + n - step % n) % n,
        }
    }

    /// The chunk host `rank` receives from the previous host at `step` of `phase`.
    pub fn received(&self, rank: usize, phase: Phase, step: usize) -> usize {
        self.sent(self.prev(rank), phase, step)
    }

    /// The chunk whose sum host `rank` completes in reduce-scatter (and sends first in
    /// all-gather).
    pub fn owned(&self, rank: usize) -> usize {
        self.next(rank)
    }

    /// Where in a host's memory the vector's scratch slots begin: after the vector, aligned.
    pub fn scratch_offset(&self) -> usize {
        (self.floats * FLOAT).next_multiple_of(64)
    }

    /// Where in the receiving host's memory a chunk sent at `step` of `phase` lands: a
    /// reduce-scatter chunk in the scratch slot of its step (to be added, and never overwritten
    /// before it is), an all-gather chunk in its place in the vector (final as it is).
    pub fn landing(&self, phase: Phase, step: usize, chunk: usize) -> usize {
        match phase {
            Phase::ReduceScatter => self.scratch_offset() + step * self.max_chunk() * FLOAT,
            Phase::AllGather => self.chunk(chunk).start * FLOAT,
        }
    }

    /// Bytes of a host's memory: the vector and a scratch slot for each reduce-scatter step.
    pub fn region_len(&self) -> usize {
        (self.scratch_offset() + self.steps() * self.max_chunk() * FLOAT)
            .next_multiple_of(4096)
            .max(4096)
    }

    /// The immediate data of the WRITE sent at `step` of `phase` carrying `chunk`: it tells the
    /// receiver which step arrived without it looking at memory.
    pub fn imm(phase: Phase, step: usize, chunk: usize) -> u32 {
        let phase = match phase {
            Phase::ReduceScatter => 0,
            Phase::AllGather => 1 << 31,
        };
        phase | ((step as u32 & 0x7fff) << 16) | (chunk as u32 & 0xffff)
    }

    /// Bytes each link carries: every chunk but one in each phase.
    pub fn bytes_per_link(&self, sender: usize) -> u64 {
        self.schedule()
            .map(|(phase, step)| self.chunk(self.sent(sender, phase, step)).len() * FLOAT)
            .sum::<usize>() as u64
    }
}

/// Host `rank`'s input: float `i` of its vector. Multiples of 1/8 between −64 and 64, so that
/// any sum of up to [`MAX_HOSTS`](super::MAX_HOSTS) of them is exact in a float, added in any
/// order: the ring's sums can be compared with the direct sum bit for bit.
pub fn input(rank: usize, i: usize) -> f32 {
    ((i * 31 + rank * 17) % 1024) as f32 / 8.0 - 64.0
}

/// Float `i` of the sum over `hosts` hosts, computed directly.
pub fn direct_sum(hosts: usize, i: usize) -> f32 {
    (0..hosts).map(|rank| input(rank, i)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays the schedule on plain vectors, as the hosts and NICs do on memory.
    fn simulate(ring: Ring) -> Vec<Vec<f32>> {
        let mut vectors: Vec<Vec<f32>> = (0..ring.hosts)
            .map(|r| (0..ring.floats).map(|i| input(r, i)).collect())
            .collect();
        for (phase, step) in ring.schedule() {
            // Every host sends at once: what is sent is read before anything lands.
            let sent: Vec<(usize, Vec<f32>)> = (0..ring.hosts)
                .map(|r| {
                    let chunk = ring.sent(r, phase, step);
                    (chunk, vectors[r][ring.chunk(chunk)].to_vec())
                })
                .collect();
            for (r, (chunk, data)) in sent.into_iter().enumerate() {
                let to = ring.next(r);
                assert_eq!(ring.received(to, phase, step), chunk);
                let place = &mut vectors[to][ring.chunk(chunk)];
                for (have, got) in place.iter_mut().zip(data) {
                    match phase {
                        Phase::ReduceScatter => *have += got,
                        Phase::AllGather => *have = got,
                    }
                }
            }
        }
        vectors
    }

    #[test]
    fn every_host_ends_with_the_direct_sum_whatever_the_split() {
        for hosts in 2..=16 {
            for floats in [1, 2, hosts - 1, hosts, hosts + 1, 3 * hosts, 1000, 1025] {
                let ring = Ring::new(hosts, floats);
                let want: Vec<f32> = (0..floats).map(|i| direct_sum(hosts, i)).collect();
                for (r, v) in simulate(ring).iter().enumerate() {
                    assert_eq!(v, &want, "{hosts} hosts, {floats} floats, host {r}");
                }
            }
        }
    }

    #[test]
    fn chunks_cover_the_vector_once_and_differ_by_at_most_one() {
        let ring = Ring::new(4, 10);
        let chunks: Vec<Range<usize>> = (0..4).map(|k| ring.chunk(k)).collect();
        assert_eq!(chunks, [0..3, 3..6, 6..8, 8..10]);
        assert_eq!(ring.max_chunk(), 3);
        let few = Ring::new(8, 5);
        assert_eq!(few.chunk(4), 4..5);
        assert!(few.chunk(5).is_empty() && few.chunk(7) == (5..5));
    }

    #[test]
    fn reduce_scatter_leaves_each_host_owning_the_next_chunk() {
        let ring = Ring::new(4, 40);
        for r in 0..4 {
            // The last chunk it adds into is the one it owns, and all-gather starts with it.
            assert_eq!(ring.received(r, Phase::ReduceScatter, 2), ring.owned(r));
            assert_eq!(ring.sent(r, Phase::AllGather, 0), ring.owned(r));
            // In all-gather it passes on what it received the step before.
            assert_eq!(
                ring.sent(r, Phase::AllGather, 1),
                ring.received(r, Phase::AllGather, 0)
            );
        }
        assert_eq!(ring.schedule().count(), 6);
    }

    #[test]
    fn landings_stay_apart_and_inside_the_region() {
        let ring = Ring::new(3, 10);
        assert_eq!(ring.scratch_offset(), 64);
        let slots: Vec<usize> = (0..2)
            .map(|s| ring.landing(Phase::ReduceScatter, s, 0))
            .collect();
        assert_eq!(slots, [64, 64 + 16]);
        assert_eq!(ring.landing(Phase::AllGather, 1, 2), 7 * FLOAT);
        assert!(
            ring.landing(Phase::ReduceScatter, 1, 0) + ring.max_chunk() * FLOAT
                <= ring.region_len()
        );
        // A reduce-scatter slot is never where a host adds into or where all-gather lands.
        assert!(slots.iter().all(|&s| s >= ring.floats * FLOAT));
    }

    #[test]
    fn immediates_name_the_phase_step_and_chunk() {
        assert_eq!(Ring::imm(Phase::ReduceScatter, 0, 3), 3);
        assert_eq!(Ring::imm(Phase::AllGather, 2, 1), 0x8002_0001);
        let ring = Ring::new(4, 10);
        // 2(N-1) chunks per link: 3+3+2 then 3+3+2... by the sender's schedule.
        assert_eq!(
            ring.bytes_per_link(0),
            ring.schedule()
                .map(|(p, s)| ring.chunk(ring.sent(0, p, s)).len() as u64 * 4)
                .sum::<u64>()
        );
        let even = Ring::new(4, 1024);
        assert_eq!(even.bytes_per_link(2), 6 * 256 * 4);
    }

    #[test]
    fn inputs_are_exact_in_any_order() {
        for i in 0..2048 {
            let forward: f32 = (0..16).map(|r| input(r, i)).sum();
            let backward: f32 = (0..16).rev().map(|r| input(r, i)).sum();
            assert_eq!(forward.to_bits(), backward.to_bits());
            assert_eq!(forward, direct_sum(16, i));
        }
    }
}

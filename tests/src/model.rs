//! What a responder's memory holds after a random RC workload, executed one request at a time:
//! the bytes WRITEs leave and READs find, and the 64-bit counters the atomics work on. The soak
//! suite (`tests/tests/soak.rs`) and the NIC's deterministic simulator (`nic/tests/sim`) both
//! check the NIC against it: whatever the faults did, the target must end as the model does and
//! every READ and atomic must return what the model returned at its turn.

use rand::RngExt;
use roce_nic::verbs::SendOp;

/// An atomic request on one of the model's counters, and the original value a sequential
/// execution returns for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Atomic {
    pub counter: usize,
    pub kind: AtomicKind,
    pub expect: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicKind {
    FetchAdd { add: u64 },
    CompareSwap { compare: u64, swap: u64 },
}

impl Atomic {
    /// The work request's operation, on the counter at `remote_addr`.
    pub fn send_op(&self, remote_addr: u64, rkey: u32) -> SendOp {
        match self.kind {
            AtomicKind::FetchAdd { add } => SendOp::AtomicFetchAndAdd {
                remote_addr,
                rkey,
                add,
            },
            AtomicKind::CompareSwap { compare, swap } => SendOp::AtomicCmpAndSwp {
                remote_addr,
                rkey,
                compare,
                swap,
            },
        }
    }
}

/// The target's memory and counters as the requests executed so far leave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Model {
    pub memory: Vec<u8>,
    pub counters: Vec<u64>,
}

impl Model {
    /// A model of `memory` as it starts, and `counters` counters at zero.
    pub fn new(memory: Vec<u8>, counters: usize) -> Model {
        Model {
            memory,
            counters: vec![0; counters],
        }
    }

    /// A WRITE of `data` at `at`.
    pub fn write(&mut self, at: usize, data: &[u8]) {
        self.memory[at..at + data.len()].copy_from_slice(data);
    }

    /// What a READ of `len` bytes at `at` returns now.
    pub fn read(&self, at: usize, len: usize) -> Vec<u8> {
        self.memory[at..at + len].to_vec()
    }

    /// A random atomic on a random counter, executed: a fetch-and-add, or a compare-and-swap
    /// whose compare value matches half the time.
    pub fn atomic(&mut self, rng: &mut impl RngExt) -> Atomic {
        let counter = rng.random_range(0..self.counters.len());
        let expect = self.counters[counter];
        let kind = if rng.random_bool(0.5) {
            let add = rng.random_range(1..1000);
            self.counters[counter] = expect.wrapping_add(add);
            AtomicKind::FetchAdd { add }
        } else {
            let compare = if rng.random_bool(0.5) {
                expect
            } else {
                expect ^ 1
            };
            let swap = rng.random();
            if compare == expect {
                self.counters[counter] = swap;
            }
            AtomicKind::CompareSwap { compare, swap }
        };
        Atomic {
            counter,
            kind,
            expect,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn atomics_return_what_the_counter_held_and_change_it_as_executed() {
        let mut model = Model::new(vec![0; 16], 2);
        let mut rng = rand_xorshift::XorShiftRng::seed_from_u64(7);
        let mut counters = [0u64; 2];
        let (mut adds, mut swaps, mut misses) = (0, 0, 0);
        for _ in 0..200 {
            let a = model.atomic(&mut rng);
            assert_eq!(a.expect, counters[a.counter]);
            match a.kind {
                AtomicKind::FetchAdd { add } => {
                    counters[a.counter] = counters[a.counter].wrapping_add(add);
                    adds += 1;
                }
                AtomicKind::CompareSwap { compare, swap } if compare == a.expect => {
                    counters[a.counter] = swap;
                    swaps += 1;
                }
                AtomicKind::CompareSwap { .. } => misses += 1,
            }
            assert_eq!(model.counters, counters);
        }
        assert!(
            adds > 50 && swaps > 20 && misses > 20,
            "{adds} {swaps} {misses}"
        );
    }

    #[test]
    fn writes_are_what_reads_find() {
        let mut model = Model::new(vec![0; 16], 0);
        model.write(4, &[1, 2, 3]);
        assert_eq!(model.read(3, 5), [0, 1, 2, 3, 0]);
    }
}

//! What a run will do, worked out from the scenario and `--size` alone, so the demo and the
//! target program (which may be another process) agree on it without talking: the bytes that
//! move, where they land, the target's region and access rights, the path MTU.

use roce_hostmem::{Access, Region};
use roce_nic::verbs::Mtu;

use crate::{DemoError, Scenario};

/// Where in the target's region the operation lands: not at 0, so the memory dump shows the
/// untouched bytes before it too.
pub const OFFSET: u64 = 0x40;
/// The smallest target region: 16 pages, most of which stay zero.
pub const MIN_REGION: usize = 64 << 10;
/// The largest `--size`: a WRITE's DMA length is 32 bits, and two regions of this size must fit
/// in /dev/shm.
pub const MAX_SIZE: usize = 2 << 30;
/// Up to this many packets per message every packet is shown and every decision of the NICs
/// logged; beyond it the demo shows the first packets and counts the rest.
pub const DETAILED_PACKETS: u32 = 16;
/// The packet of the `loss` scenario's WRITE that the wire drops (0 is the first).
pub const LOST_PACKET: u32 = 1;
/// The `atomic` scenario's counter: where it is, what it holds at first, what is added.
pub const COUNTER_OFFSET: u64 = 0x100;
pub const COUNTER_START: u64 = 41;
pub const COUNTER_ADD: u64 = 1;
/// The `send` scenario's RNR timer (40.96 ms): how long the initiator's NIC waits after an
/// RNR NAK before it tries again, long enough to see each retry.
pub const SEND_RNR_TIMER: u8 = 24;
/// The RNR timer of the other scenarios (0.64 ms, the verbs default).
pub const DEFAULT_RNR_TIMER: u8 = 12;
/// What `tcp-vs-rdma` moves each way without `--size`: enough for the receiver's CPU time to
/// show in /proc's 10 ms ticks, not only in the scheduler's nanoseconds.
pub const COMPARED_SIZE: usize = 64 << 20;
/// The largest `--size` of `tcp-vs-rdma`: its receiver holds the bytes twice.
pub const MAX_COMPARED_SIZE: usize = 1 << 30;

const WRITE_TEXT: &[u8] = b"Hello, target! RDMA WRITE put these bytes here while you did nothing.";
const READ_TEXT: &[u8] =
    b"Written by the target before it froze; RDMA READ fetches it without waking it.";
const SEND_TEXT: &[u8] = b"A SEND lands only in a receive buffer the target has posted.";
const IMM_TEXT: &[u8] =
    b"Written with immediate data: the completion tells the target where to look.";
const LOSS_TEXT: &[u8] = b"One packet of this WRITE is lost on the wire and sent again. ";
/// The `loss` WRITE: three packets at its path MTU of 256.
const LOSS_LEN: usize = 700;

/// The bytes a run moves: a sentence, or `--size` bytes of a pattern that can be made and
/// checked piecewise, so a gigabyte never needs a second gigabyte to compare against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    Text(&'static [u8]),
    /// `len` bytes of the text repeated.
    Repeated(&'static [u8], usize),
    Pattern(usize),
}

impl Payload {
    pub fn len(&self) -> usize {
        match *self {
            Payload::Text(text) => text.len(),
            Payload::Repeated(_, len) | Payload::Pattern(len) => len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Fills `buf` with the payload's bytes from `at` on.
    pub fn chunk(&self, at: usize, buf: &mut [u8]) {
        for (i, byte) in buf.iter_mut().enumerate() {
            let n = at + i;
            *byte = match *self {
                Payload::Text(text) => text[n],
                Payload::Repeated(text, _) => text[n % text.len()],
                // Changes with every byte and does not repeat within a page.
                Payload::Pattern(_) => {
                    (n as u8).wrapping_mul(31) ^ (n >> 8) as u8 ^ (n >> 16) as u8
                }
            };
        }
    }

    /// All of it (for the small payloads that are shown).
    pub fn bytes(&self) -> Vec<u8> {
        let mut buf = vec![0; self.len()];
        self.chunk(0, &mut buf);
        buf
    }

    /// Writes the payload into `region` at `offset`.
    pub fn fill(&self, region: &Region, offset: usize) -> Result<(), DemoError> {
        let mut buf = vec![0; CHUNK.min(self.len())];
        let mut at = 0;
        while at < self.len() {
            let n = CHUNK.min(self.len() - at);
            self.chunk(at, &mut buf[..n]);
            region
                .write(offset + at, &buf[..n])
                .map_err(|e| DemoError::because("cannot fill the region", e))?;
            at += n;
        }
        Ok(())
    }

    /// The first byte at which `region` from `offset` differs from the payload, if any.
    pub fn first_difference(
        &self,
        region: &Region,
        offset: usize,
    ) -> Result<Option<usize>, DemoError> {
        let mut want = vec![0; CHUNK.min(self.len())];
        let mut have = vec![0; want.len()];
        let mut at = 0;
        while at < self.len() {
            let n = CHUNK.min(self.len() - at);
            self.chunk(at, &mut want[..n]);
            region
                .read(offset + at, &mut have[..n])
                .map_err(|e| DemoError::because("cannot read the region", e))?;
            if let Some(i) = (0..n).find(|&i| want[i] != have[i]) {
                return Ok(Some(at + i));
            }
            at += n;
        }
        Ok(None)
    }
}

/// Where `tcp-vs-rdma`'s TCP copy of `len` bytes lands in the receiver's memory: after the
/// RDMA copy (at [`OFFSET`]), at the same offset into the next page.
pub fn tcp_offset(len: usize) -> u64 {
    (OFFSET + len as u64).next_multiple_of(4096) + OFFSET
}

/// Bytes made or compared at a time.
const CHUNK: usize = 1 << 20;

/// A run, worked out in advance.
#[derive(Debug, Clone)]
pub struct Plan {
    pub scenario: Scenario,
    /// What is written (write, send, imm, loss) or read (read, prefilled by the target).
    pub payload: Payload,
    /// Where the operation lands in the target's region.
    pub offset: u64,
    pub region_len: usize,
    /// The rights the target grants on its region.
    pub access: Access,
    pub mtu: Mtu,
    pub rnr_timer: u8,
}

impl Plan {
    /// The plan for `scenario`, moving `size` bytes instead of its sentence if given.
    pub fn new(scenario: Scenario, size: Option<usize>) -> Result<Plan, DemoError> {
        let payload = match (scenario, size) {
            (Scenario::Allreduce | Scenario::Connect | Scenario::Congestion, _) => {
                return Err(DemoError::failed(format!(
                    "the {scenario} scenario has no plan of this kind"
                )))
            }
            (Scenario::Atomic | Scenario::Loss, Some(_)) => {
                return Err(DemoError::Usage(format!(
                    "--size does not apply to the {scenario} scenario (it moves what it needs)"
                )))
            }
            (_, Some(0)) => return Err(DemoError::Usage("--size must be at least 1 byte".into())),
            (_, Some(n)) if n > MAX_SIZE => {
                return Err(DemoError::Usage("--size is at most 2G".into()))
            }
            (Scenario::TcpVsRdma, Some(n)) if n > MAX_COMPARED_SIZE => {
                return Err(DemoError::Usage(
                    "--size is at most 1G for tcp-vs-rdma (its receiver holds the bytes twice)"
                        .into(),
                ))
            }
            (Scenario::TcpVsRdma, None) => Payload::Pattern(COMPARED_SIZE),
            (_, Some(n)) => Payload::Pattern(n),
            (Scenario::Write, None) => Payload::Text(WRITE_TEXT),
            (Scenario::Read, None) => Payload::Text(READ_TEXT),
            (Scenario::Send, None) => Payload::Text(SEND_TEXT),
            (Scenario::Imm, None) => Payload::Text(IMM_TEXT),
            (Scenario::Loss, None) => Payload::Repeated(LOSS_TEXT, LOSS_LEN),
            (Scenario::Atomic, None) => Payload::Text(b""),
        };
        let mtu = match payload.len() {
            _ if scenario == Scenario::Loss => Mtu::M256,
            n if n <= 16 << 10 => Mtu::M1024,
            _ => Mtu::M4096,
        };
        let end = match scenario {
            Scenario::Atomic => COUNTER_OFFSET as usize + 8,
            Scenario::TcpVsRdma => tcp_offset(payload.len()) as usize + payload.len(),
            _ => OFFSET as usize + payload.len(),
        };
        let access = Access::LOCAL_WRITE
            | match scenario {
                Scenario::Write | Scenario::Loss | Scenario::Imm | Scenario::TcpVsRdma => {
                    Access::REMOTE_WRITE
                }
                Scenario::Read => Access::REMOTE_READ,
                Scenario::Atomic => Access::REMOTE_ATOMIC,
                Scenario::Send | Scenario::Allreduce | Scenario::Connect | Scenario::Congestion => {
                    Access::empty()
                }
            };
        Ok(Plan {
            scenario,
            payload,
            offset: OFFSET,
            region_len: end.next_multiple_of(4096).max(MIN_REGION),
            access,
            mtu,
            rnr_timer: if scenario == Scenario::Send {
                SEND_RNR_TIMER
            } else {
                DEFAULT_RNR_TIMER
            },
        })
    }

    /// Packets of the request (READ: of the response).
    pub fn packets(&self) -> u32 {
        let mtu = self.mtu.bytes() as usize;
        self.payload.len().div_ceil(mtu).max(1) as u32
    }

    /// Whether every packet is shown and every decision logged.
    pub fn detailed(&self) -> bool {
        self.packets() <= DETAILED_PACKETS
    }

    /// The initiator's frame the wire drops: the `loss` scenario's second packet.
    pub fn dropped_frame(&self) -> Option<u32> {
        (self.scenario == Scenario::Loss).then_some(LOST_PACKET)
    }

    /// Bytes of the initiator's buffer: the payload, or the 8 bytes of an atomic's result.
    pub fn local_len(&self) -> usize {
        self.payload.len().max(8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scenario_has_a_plan_that_fits_its_region() {
        for scenario in Scenario::ALL.into_iter().filter(|s| s.is_pair()) {
            let plan = Plan::new(scenario, None).unwrap();
            assert!(plan.region_len >= MIN_REGION);
            assert!(plan.offset as usize + plan.payload.len() <= plan.region_len);
            assert!(plan.detailed(), "{scenario}");
        }
        let loss = Plan::new(Scenario::Loss, None).unwrap();
        assert_eq!(loss.packets(), 3);
        assert_eq!(loss.dropped_frame(), Some(1));
        assert!(Plan::new(Scenario::Write, None)
            .unwrap()
            .dropped_frame()
            .is_none());
    }

    #[test]
    fn sizes_choose_the_mtu_and_the_detail() {
        let big = Plan::new(Scenario::Write, Some(1 << 30)).unwrap();
        assert_eq!(big.mtu, Mtu::M4096);
        assert_eq!(big.packets(), 1 << 18);
        assert!(!big.detailed());
        assert_eq!(big.region_len, (1 << 30) + 4096);
        let small = Plan::new(Scenario::Read, Some(5000)).unwrap();
        assert_eq!((small.mtu, small.packets()), (Mtu::M1024, 5));
        assert!(small.access.contains(Access::REMOTE_READ));
    }

    #[test]
    fn tcp_vs_rdma_holds_both_copies_apart() {
        let plan = Plan::new(Scenario::TcpVsRdma, None).unwrap();
        assert_eq!(plan.payload, Payload::Pattern(COMPARED_SIZE));
        let tcp = tcp_offset(COMPARED_SIZE);
        assert!(tcp >= plan.offset + COMPARED_SIZE as u64);
        assert_eq!(tcp % 4096, OFFSET);
        assert!(tcp as usize + COMPARED_SIZE <= plan.region_len);
        assert!(plan.access.contains(Access::REMOTE_WRITE));
        let small = Plan::new(Scenario::TcpVsRdma, Some(100)).unwrap();
        assert_eq!(tcp_offset(100), 4096 + OFFSET);
        assert_eq!(small.region_len, MIN_REGION);
    }

    #[test]
    fn sizes_that_cannot_work_are_refused_in_one_line() {
        for (scenario, size, message) in [
            (
                Scenario::Atomic,
                8,
                "--size does not apply to the atomic scenario (it moves what it needs)",
            ),
            (Scenario::Write, 0, "--size must be at least 1 byte"),
            (Scenario::Write, MAX_SIZE + 1, "--size is at most 2G"),
            (
                Scenario::TcpVsRdma,
                MAX_COMPARED_SIZE + 1,
                "--size is at most 1G for tcp-vs-rdma (its receiver holds the bytes twice)",
            ),
        ] {
            let e = Plan::new(scenario, Some(size)).unwrap_err();
            assert_eq!(e.to_string(), message);
        }
    }

    #[test]
    fn a_pattern_is_the_same_made_whole_or_in_pieces() {
        let p = Payload::Pattern(3 * CHUNK + 17);
        let mut piece = vec![0; 100];
        p.chunk(CHUNK - 50, &mut piece);
        let whole = p.bytes();
        assert_eq!(&whole[CHUNK - 50..CHUNK + 50], &piece[..]);
        // Not periodic within a page, so a misplaced page is caught.
        assert_ne!(&whole[..256], &whole[256..512]);
    }

    #[test]
    fn differences_are_found_where_they_are() {
        let region = Region::anonymous(3 * CHUNK).unwrap();
        let p = Payload::Pattern(2 * CHUNK + 5);
        p.fill(&region, 7).unwrap();
        assert_eq!(p.first_difference(&region, 7).unwrap(), None);
        region
            .write(7 + CHUNK + 3, &[0xAA ^ region_byte(&region, 7 + CHUNK + 3)])
            .unwrap();
        assert_eq!(p.first_difference(&region, 7).unwrap(), Some(CHUNK + 3));
        let text = Payload::Repeated(b"abc", 7);
        assert_eq!(text.bytes(), b"abcabca");
    }

    fn region_byte(region: &Region, at: usize) -> u8 {
        let mut b = [0];
        region.read(at, &mut b).unwrap();
        b[0]
    }
}

//! Partitions: the port's P_Key table and the IBTA's rule for when a packet's P_Key lets it in.
//!
//! A P_Key is a 15-bit partition number and, in its top bit, the kind of membership: full
//! (0x8000 set) or limited. Two P_Keys match when their partitions are equal (and valid, not 0)
//! and at least one of them is a full member, so limited members of a partition talk to its
//! full members but never to each other (the IBTA's partitioning, Vol. 1 chapter 10.9). The
//! default partition is 0x7fff: 0xffff is its full membership, 0x7fff its limited one.
//!
//! Every QP belongs to the partition of the table entry its `pkey_index` names, sends that
//! P_Key in every packet it sends — requests and responses alike — and takes only packets whose
//! P_Key matches it. QP1, the GSI, takes a packet whose P_Key matches any entry of the table,
//! since management must reach a port in every partition it belongs to.

use std::fmt;

/// The full-membership bit.
pub const FULL_MEMBER: u16 = 0x8000;
/// The default partition, full member: what a port's table holds unless told otherwise.
pub const DEFAULT: u16 = 0xffff;
/// Most entries a port's P_Key table holds.
pub const MAX_PKEYS: usize = 16;

/// The partition number of a P_Key (its low 15 bits).
pub fn partition(p_key: u16) -> u16 {
    p_key & !FULL_MEMBER
}

/// Whether `p_key` is a full member of its partition.
pub fn is_full_member(p_key: u16) -> bool {
    p_key & FULL_MEMBER != 0
}

/// Why a packet's P_Key did not match the QP's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// Partition 0 is no partition: 0x0000 and 0x8000 match nothing.
    Invalid,
    /// The two keys name different partitions.
    OtherPartition,
    /// Same partition, but both are limited members.
    BothLimited,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mismatch::Invalid => "invalid P_Key (partition 0)",
            Mismatch::OtherPartition => "another partition",
            Mismatch::BothLimited => "both limited members of the partition",
        })
    }
}

/// The IBTA's matching rule: `Ok` when `theirs` and `ours` match.
pub fn check(theirs: u16, ours: u16) -> Result<(), Mismatch> {
    if partition(theirs) == 0 || partition(ours) == 0 {
        Err(Mismatch::Invalid)
    } else if partition(theirs) != partition(ours) {
        Err(Mismatch::OtherPartition)
    } else if !is_full_member(theirs) && !is_full_member(ours) {
        Err(Mismatch::BothLimited)
    } else {
        Ok(())
    }
}

/// A port's P_Key table: the partitions it belongs to, each with its membership. Index 0 is
/// the one QPs use unless their `pkey_index` says otherwise.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PKeyTable(Vec<u16>);

/// Why a P_Key table was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TableError {
    #[error("a P_Key table holds 1 to {MAX_PKEYS} keys, not {0}")]
    Size(usize),
    #[error("P_Key {0:#06x} is in partition 0, which is no partition")]
    Invalid(u16),
    #[error("P_Key {0:#06x} is in the table twice")]
    Repeated(u16),
}

impl PKeyTable {
    /// A table of `keys`, in this order: 1 to [`MAX_PKEYS`] distinct valid keys.
    pub fn new(keys: Vec<u16>) -> Result<PKeyTable, TableError> {
        if keys.is_empty() || keys.len() > MAX_PKEYS {
            return Err(TableError::Size(keys.len()));
        }
        for (i, &key) in keys.iter().enumerate() {
            if partition(key) == 0 {
                return Err(TableError::Invalid(key));
            }
            if keys[..i].contains(&key) {
                return Err(TableError::Repeated(key));
            }
        }
        Ok(PKeyTable(keys))
    }

    /// The key at `index` (`ibv_query_pkey`).
    pub fn get(&self, index: u16) -> Option<u16> {
        self.0.get(usize::from(index)).copied()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn keys(&self) -> &[u16] {
        &self.0
    }

    /// What the GSI (QP1) checks: `theirs` matches one of the table's keys. On a mismatch, the
    /// reason given is the one of the entry that came closest (the same partition, if any).
    pub fn check_any(&self, theirs: u16) -> Result<(), Mismatch> {
        let mut worst = Mismatch::OtherPartition;
        for &ours in &self.0 {
            match check(theirs, ours) {
                Ok(()) => return Ok(()),
                Err(m @ (Mismatch::Invalid | Mismatch::BothLimited)) => worst = m,
                Err(Mismatch::OtherPartition) => {}
            }
        }
        Err(worst)
    }
}

impl Default for PKeyTable {
    /// The default partition, full member: 0xffff alone.
    fn default() -> PKeyTable {
        PKeyTable(vec![DEFAULT])
    }
}

impl std::str::FromStr for PKeyTable {
    type Err = String;

    /// Keys in hex (0x optional), separated by commas: `0x7fff,0x8001`.
    fn from_str(s: &str) -> Result<PKeyTable, String> {
        let keys = s
            .split(',')
            .map(|word| {
                let word = word.trim();
                let digits = word
                    .strip_prefix("0x")
                    .or_else(|| word.strip_prefix("0X"))
                    .unwrap_or(word);
                u16::from_str_radix(digits, 16)
                    .map_err(|_| format!("{word:?} is not a 16-bit P_Key in hex"))
            })
            .collect::<Result<Vec<u16>, String>>()?;
        PKeyTable::new(keys).map_err(|e| e.to_string())
    }
}

impl fmt::Display for PKeyTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, key) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{key:#06x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ibta_rule_on_the_default_partition_and_another() {
        // (packet, QP, expected)
        let cases = [
            (0xffff, 0xffff, Ok(())),
            (0x7fff, 0xffff, Ok(())),
            (0xffff, 0x7fff, Ok(())),
            (0x7fff, 0x7fff, Err(Mismatch::BothLimited)),
            (0x1234, 0xffff, Err(Mismatch::OtherPartition)),
            (0x1234, 0x7fff, Err(Mismatch::OtherPartition)),
            (0x9234, 0x1234, Ok(())),
            (0x1234, 0x1234, Err(Mismatch::BothLimited)),
            (0x8000, 0xffff, Err(Mismatch::Invalid)),
            (0x0000, 0x8000, Err(Mismatch::Invalid)),
        ];
        for (theirs, ours, want) in cases {
            assert_eq!(
                check(theirs, ours),
                want,
                "{theirs:#06x} against {ours:#06x}"
            );
            assert_eq!(check(ours, theirs), want, "the rule is symmetric");
        }
    }

    #[test]
    fn tables_are_checked_parsed_and_printed() {
        assert_eq!(PKeyTable::default().keys(), [0xffff]);
        let t: PKeyTable = "0x7fff, 8001".parse().unwrap();
        assert_eq!(t.keys(), [0x7fff, 0x8001]);
        assert_eq!(t.to_string(), "0x7fff,0x8001");
        assert_eq!((t.get(1), t.get(2)), (Some(0x8001), None));
        assert!("0x8000".parse::<PKeyTable>().is_err());
        assert!("0xffff,0xffff".parse::<PKeyTable>().is_err());
        assert!("0x1ffff".parse::<PKeyTable>().is_err());
        assert!("".parse::<PKeyTable>().is_err());
        assert_eq!(PKeyTable::new(vec![1; 0]), Err(TableError::Size(0)));
    }

    #[test]
    fn the_gsi_takes_any_partition_of_the_port() {
        let t = PKeyTable::new(vec![0x7fff, 0x8001]).unwrap();
        assert_eq!(t.check_any(0xffff), Ok(()));
        assert_eq!(t.check_any(0x0001), Ok(()));
        assert_eq!(t.check_any(0x7fff), Err(Mismatch::BothLimited));
        assert_eq!(t.check_any(0x1234), Err(Mismatch::OtherPartition));
    }
}

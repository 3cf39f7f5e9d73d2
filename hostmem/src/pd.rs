//! Protection domains: which memory registrations a queue pair may use.

use std::collections::hash_map::Entry;
use std::collections::HashMap;

use crate::MrError;

/// A protection domain handle. An access is granted only when the queue pair's domain is the
/// registration's domain, so two applications sharing one NIC cannot reach each other's memory
/// even with a guessed key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PdId(u32);

/// The live protection domains and how many registrations each holds.
#[derive(Debug, Default)]
pub(crate) struct PdTable {
    last: u32,
    registrations: HashMap<PdId, usize>,
}

impl PdTable {
    /// A new domain. Handles are not reused until the 32-bit counter wraps, so a stale handle
    /// does not silently name a newer domain.
    pub fn alloc(&mut self) -> PdId {
        loop {
            self.last = self.last.wrapping_add(1);
            let pd = PdId(self.last);
            if let Entry::Vacant(entry) = self.registrations.entry(pd) {
                entry.insert(0);
                return pd;
            }
        }
    }

    /// Frees `pd`, refused while registrations still use it (as `ibv_dealloc_pd` is).
    pub fn dealloc(&mut self, pd: PdId) -> Result<(), MrError> {
        match self.registrations.get(&pd) {
            None => Err(MrError::UnknownPd),
            Some(0) => {
                self.registrations.remove(&pd);
                Ok(())
            }
            Some(&mrs) => Err(MrError::PdBusy { mrs }),
        }
    }

    /// How many registrations `pd` holds.
    pub fn registrations(&self, pd: PdId) -> usize {
        self.registrations.get(&pd).copied().unwrap_or(0)
    }

    /// Counts one more registration in `pd`.
    pub fn add_registration(&mut self, pd: PdId) -> Result<(), MrError> {
        let count = self.registrations.get_mut(&pd).ok_or(MrError::UnknownPd)?;
        *count += 1;
        Ok(())
    }

    /// Counts one registration less in `pd`.
    pub fn remove_registration(&mut self, pd: PdId) {
        if let Some(count) = self.registrations.get_mut(&pd) {
            *count = count.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_are_distinct() {
        let mut table = PdTable::default();
        let a = table.alloc();
        let b = table.alloc();
        assert_ne!(a, b);
        table.dealloc(a).unwrap();
        assert_ne!(table.alloc(), a, "a freed handle came back at once");
    }

    #[test]
    fn a_domain_with_registrations_cannot_be_freed() {
        let mut table = PdTable::default();
        let pd = table.alloc();
        table.add_registration(pd).unwrap();
        assert_eq!(table.dealloc(pd), Err(MrError::PdBusy { mrs: 1 }));
        table.remove_registration(pd);
        assert_eq!(table.dealloc(pd), Ok(()));
        assert_eq!(table.dealloc(pd), Err(MrError::UnknownPd));
        assert_eq!(table.add_registration(pd), Err(MrError::UnknownPd));
    }

    #[test]
    fn a_wrapped_counter_skips_live_domains() {
        let mut table = PdTable::default();
        let first = table.alloc();
        table.last = u32::MAX;
        assert_eq!(table.alloc(), PdId(0));
        assert_ne!(table.alloc(), first, "a live handle was handed out twice");
    }
}

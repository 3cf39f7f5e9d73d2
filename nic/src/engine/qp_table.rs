//! The engine's queue pairs by number: QP1, the General Services Interface (a UD QP with the
//! well-known Q_Key, where connection management will live), and the QPs hosts create, numbered
//! from [`FIRST_QPN`] as in Soft-RoCE.

use crate::qp::Qp;

/// The number of the first QP a host creates (0 and 1 are the special QPs, as in Soft-RoCE).
pub const FIRST_QPN: u32 = 0x11;
/// The General Services Interface QP.
pub const GSI_QPN: u32 = 1;

#[derive(Debug, Default)]
pub struct QpTable {
    gsi: Option<Box<Qp>>,
    user: Vec<Option<Box<Qp>>>,
}

impl QpTable {
    pub fn get(&self, qpn: u32) -> Option<&Qp> {
        if qpn == GSI_QPN {
            return self.gsi.as_deref();
        }
        self.user
            .get(qpn.checked_sub(FIRST_QPN)? as usize)?
            .as_deref()
    }

    pub fn get_mut(&mut self, qpn: u32) -> Option<&mut Qp> {
        if qpn == GSI_QPN {
            return self.gsi.as_deref_mut();
        }
        self.user
            .get_mut(qpn.checked_sub(FIRST_QPN)? as usize)?
            .as_deref_mut()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Qp> {
        self.gsi
            .iter()
            .chain(self.user.iter().flatten())
            .map(|q| &**q)
    }

    /// Adds a QP under its number.
    pub fn insert(&mut self, qp: Qp) {
        if qp.qpn == GSI_QPN {
            self.gsi = Some(Box::new(qp));
            return;
        }
        let index = (qp.qpn - FIRST_QPN) as usize;
        if index >= self.user.len() {
            self.user.resize_with(index + 1, || None);
        }
        self.user[index] = Some(Box::new(qp));
    }

    pub fn remove(&mut self, qpn: u32) -> Option<Box<Qp>> {
        if qpn == GSI_QPN {
            return self.gsi.take();
        }
        self.user
            .get_mut(qpn.checked_sub(FIRST_QPN)? as usize)?
            .take()
    }
}

/// The QPs the engine looks at each pass: those with work or a timer. A QP joins when anything
/// happens to it (a frame, a request, newly posted work) and leaves once a pass finds it with
/// nothing to send, nothing outstanding and no timer, so that a pass costs what the busy QPs
/// cost, however many idle QPs the NIC holds.
#[derive(Debug, Default)]
pub struct ActiveQps {
    list: Vec<u32>,
    /// Membership, indexed by QP number.
    member: Vec<bool>,
}

impl ActiveQps {
    pub fn insert(&mut self, qpn: u32) {
        let i = qpn as usize;
        if i >= self.member.len() {
            self.member.resize(i + 1, false);
        }
        if !self.member[i] {
            self.member[i] = true;
            self.list.push(qpn);
        }
    }

    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The QP at position `i` (positions shift only through [`ActiveQps::remove_at`]).
    pub fn at(&self, i: usize) -> u32 {
        self.list[i]
    }

    /// Removes the QP at position `i`; the last one takes its place.
    pub fn remove_at(&mut self, i: usize) {
        let qpn = self.list.swap_remove(i);
        self.member[qpn as usize] = false;
    }

    /// Moves the first QP to the end: the next pass starts with the one after it.
    pub fn rotate(&mut self) {
        if !self.list.is_empty() {
            self.list.rotate_left(1);
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.list.iter().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::ActiveQps;

    #[test]
    fn a_qp_is_active_once_and_leaves_with_the_last_taking_its_place() {
        let mut active = ActiveQps::default();
        for qpn in [0x11, 1, 0x2000, 0x11] {
            active.insert(qpn);
        }
        assert_eq!(active.iter().collect::<Vec<_>>(), [0x11, 1, 0x2000]);
        active.remove_at(0);
        assert_eq!(active.iter().collect::<Vec<_>>(), [0x2000, 1]);
        active.insert(0x11);
        assert_eq!((active.len(), active.at(2)), (3, 0x11));
    }

    #[test]
    fn rotating_moves_the_first_qp_to_the_end() {
        let mut active = ActiveQps::default();
        active.rotate();
        assert_eq!(active.len(), 0);
        for qpn in [3, 4, 5] {
            active.insert(qpn);
        }
        active.rotate();
        assert_eq!(active.iter().collect::<Vec<_>>(), [4, 5, 3]);
        // Still a member once each.
        active.insert(3);
        assert_eq!(active.len(), 3);
    }
}

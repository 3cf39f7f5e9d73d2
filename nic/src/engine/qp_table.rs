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

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Qp> {
        self.gsi
            .iter_mut()
            .chain(self.user.iter_mut().flatten())
            .map(|q| &mut **q)
    }

    /// The number a new host QP gets.
    pub fn free_qpn(&self) -> u32 {
        let index = self
            .user
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.user.len());
        FIRST_QPN + index as u32
    }

    /// Adds a QP under its number (from [`QpTable::free_qpn`], or [`GSI_QPN`]).
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

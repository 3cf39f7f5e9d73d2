//! An address handle (`ibv_ah`) for UD sends.

use std::sync::Arc;

use super::pd::PdInner;
use crate::control::Request;

/// An address handle for UD sends (`ibv_ah`).
pub struct AddressHandle {
    pub(super) pd: Arc<PdInner>,
    pub(super) ah: u32,
}

impl AddressHandle {
    pub fn handle(&self) -> u32 {
        self.ah
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        let _ = self.pd.ctx.call(Request::DestroyAh { ah: self.ah });
    }
}

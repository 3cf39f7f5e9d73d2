//! The extension headers of one packet, between the BTH and the payload; which are present is
//! fixed by the opcode, and they always come in the same order.
//!
//! Each header is a module of its own (`deth`, `reth`, ...) with the same shape: `HEADER_LEN`, a
//! `Packet` view and a `Repr` with `parse` and `emit`. The [`Extensions`] struct and its
//! parse and emit are generated from one list of them, in wire order, so adding a header is one
//! line and the order cannot differ between the struct, the parser and the emitter.

use crate::error::Error;
use crate::opcode::{Headers, Opcode};
use crate::{aeth, atomic_ack_eth, atomic_eth, deth, feth, ieth, immdt, reth};

/// Declares [`Extensions`] from `field: module = flag` rows in wire order.
macro_rules! extension_headers {
    ($($field:ident: $module:ident = $flag:ident),* $(,)?) => {
        /// The extension headers of one packet; which are present is fixed by the opcode.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
        pub struct Extensions {
            $(pub $field: Option<$module::Repr>,)*
        }

        impl Extensions {
            /// The headers of the list, with their sizes, in the order the list gives them
            /// (checked against [`Headers::WIRE_ORDER`] by a test).
            #[cfg(test)]
            const LISTED: &'static [(Headers, usize)] = &[$((Headers::$flag, $module::HEADER_LEN),)*];

            /// The extension headers `opcode` calls for, each at its default (zero fields; an
            /// AETH says ACK without credit information), ready for the caller to fill in.
            pub fn for_opcode(opcode: Opcode) -> Extensions {
                let present = opcode.headers();
                Extensions {
                    $($field: present.contains(Headers::$flag).then(<$module::Repr>::default),)*
                }
            }

            /// The set of headers present.
            pub fn headers(&self) -> Headers {
                let mut set = Headers::NONE;
                $(if self.$field.is_some() {
                    set = set | Headers::$flag;
                })*
                set
            }

            /// Parses the headers `which` from the start of `bytes`.
            // Inlined, like the network parsers: a result handed back through memory is read
            // back in wider loads than it was written with, which stalls store forwarding. One
            // test per header, in wire order (struct fields are evaluated in the order
            // written), rather than a loop over a table: this runs for every packet.
            #[inline(always)]
            // The offset after the last header is counted but not needed.
            #[allow(unused_assignments)]
            pub(crate) fn parse(which: Headers, bytes: &[u8]) -> Result<Extensions, Error> {
                let mut at = 0;
                Ok(Extensions {
                    $($field: if which.contains(Headers::$flag) {
                        let header = bytes.get(at..).unwrap_or_default();
                        at += $module::HEADER_LEN;
                        Some($module::Repr::parse(&$module::Packet::new_checked(header)?)?)
                    } else {
                        None
                    },)*
                })
            }

            /// Writes the present headers in wire order; `buf` holds exactly `headers().len()`
            /// bytes.
            #[allow(unused_assignments)]
            pub(crate) fn emit(&self, buf: &mut [u8]) {
                let mut at = 0;
                $(if let Some(repr) = &self.$field {
                    let end = at + $module::HEADER_LEN;
                    repr.emit(&mut $module::Packet::new_unchecked(&mut buf[at..end]));
                    at = end;
                })*
            }
        }
    };
}

extension_headers! {
    deth: deth = DETH,
    feth: feth = FETH,
    reth: reth = RETH,
    atomic_eth: atomic_eth = ATOMIC_ETH,
    aeth: aeth = AETH,
    atomic_ack_eth: atomic_ack_eth = ATOMIC_ACK_ETH,
    immdt: immdt = IMMDT,
    ieth: ieth = IETH,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_list_is_in_wire_order_with_the_sizes_the_opcode_table_knows() {
        assert_eq!(Extensions::LISTED, Headers::WIRE_ORDER);
    }

    #[test]
    fn extensions_for_an_opcode_are_the_ones_it_carries() {
        for op in Opcode::all() {
            let ext = Extensions::for_opcode(op);
            assert_eq!(ext.headers(), op.headers(), "{op}");
        }
    }

    #[test]
    fn a_default_aeth_is_an_ack_without_credit_information() {
        assert_eq!(
            aeth::Repr::default(),
            aeth::Repr {
                syndrome: aeth::Syndrome::ack(),
                msn: 0
            }
        );
    }

    #[test]
    fn every_set_of_headers_round_trips_through_emit_and_parse() {
        for set in 0..=u8::MAX {
            let which = Headers::WIRE_ORDER
                .iter()
                .enumerate()
                .filter(|(i, _)| set & (1 << i) != 0)
                .fold(Headers::NONE, |acc, (_, (h, _))| acc | *h);
            let mut ext = Extensions::default();
            // Distinct non-zero values in every header present.
            if which.contains(Headers::DETH) {
                ext.deth = Some(deth::Repr {
                    q_key: 0x8001_0000,
                    src_qp: 0x12_3456,
                });
            }
            if which.contains(Headers::FETH) {
                ext.feth = Some(feth::Repr {
                    selectivity: 1,
                    placement_type: 3,
                });
            }
            if which.contains(Headers::RETH) {
                ext.reth = Some(reth::Repr {
                    va: 0x1122_3344_5566_7788,
                    r_key: 0x99aa_bbcc,
                    dma_len: 0xddee,
                });
            }
            if which.contains(Headers::ATOMIC_ETH) {
                ext.atomic_eth = Some(atomic_eth::Repr {
                    va: 8,
                    r_key: 9,
                    swap_add: 10,
                    compare: 11,
                });
            }
            if which.contains(Headers::AETH) {
                ext.aeth = Some(aeth::Repr {
                    syndrome: aeth::Syndrome::from_u8(0x62),
                    msn: 0xabcdef,
                });
            }
            if which.contains(Headers::ATOMIC_ACK_ETH) {
                ext.atomic_ack_eth = Some(atomic_ack_eth::Repr { original: 12 });
            }
            if which.contains(Headers::IMMDT) {
                ext.immdt = Some(immdt::Repr { imm: 13 });
            }
            if which.contains(Headers::IETH) {
                ext.ieth = Some(ieth::Repr { r_key: 14 });
            }
            assert_eq!(ext.headers(), which);
            let mut buf = vec![0u8; which.len()];
            ext.emit(&mut buf);
            assert_eq!(Extensions::parse(which, &buf), Ok(ext), "{which:?}");
            if !which.is_empty() {
                assert!(Extensions::parse(which, &buf[..which.len() - 1]).is_err());
            }
        }
    }
}

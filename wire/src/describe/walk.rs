//! Walks a parsed frame header by header and turns each table row into a [`Field`]; the few
//! fields no table can hold (IPv4 options, payload, pad, ICRC, Ethernet padding) are made here.

use core::ops::Range;

use super::tables::{self, other, Depth, Meaning, Shape, Spec};
use super::{wire_order, Base, Field, LayoutKey, Value, Words};
use crate::aeth::{self, NakCode, Syndrome};
use crate::frame::{Frame, NetworkRepr};
use crate::icrc::Check;
use crate::opcode::{Headers, Opcode};
use crate::{EthernetAddress, Ipv4Address, Ipv6Address, Layer};

use super::Visit;

pub(super) struct Walker<'f, 'a> {
    pub(super) frame: &'f Frame<'a>,
    pub(super) bytes: &'a [u8],
    icrc: Check,
    essential_only: bool,
}

impl<'f, 'a> Walker<'f, 'a> {
    pub(super) fn new(frame: &'f Frame<'a>, icrc: Check, essential_only: bool) -> Walker<'f, 'a> {
        Walker {
            frame,
            bytes: frame.bytes(),
            icrc,
            essential_only,
        }
    }

    /// Hands on a field the walker makes itself (not read from a table row), unless only
    /// essential fields are wanted and it is not one.
    fn give<V: Visit<'a>>(
        &self,
        each: &mut V,
        (layer, spec): (Layer, &'static Spec),
        bytes: Range<usize>,
        value: Value<'a>,
        meaning: Meaning,
    ) -> Result<(), V::Error> {
        if self.essential_only && spec.depth == Depth::Detail {
            return Ok(());
        }
        each.field(&Field {
            layer,
            spec,
            bytes,
            value,
            meaning,
        })
    }

    pub(super) fn walk<V: Visit<'a>>(&self, each: &mut V) -> Result<(), V::Error> {
        let layout = &self.frame.layout;
        if let Some(eth) = self.frame.repr.ethernet {
            self.table(each, Layer::Ethernet, 0, tables::ETHERNET)?;
            if eth.vlan.is_some() {
                self.table(each, Layer::Vlan, 14, tables::VLAN)?;
            }
        }
        let n = layout.network.start;
        match self.frame.repr.network {
            NetworkRepr::Ipv4 { .. } => {
                self.table(each, Layer::Ipv4, n, tables::IPV4)?;
                self.ipv4_options(each)?;
            }
            NetworkRepr::Ipv6 { .. } => self.table(each, Layer::Ipv6, n, tables::IPV6)?,
            NetworkRepr::Grh { .. } => self.table(each, Layer::Grh, n, tables::GRH)?,
        }
        if let Some(udp) = &layout.udp {
            self.table(each, Layer::Udp, udp.start, tables::UDP)?;
        }
        self.table(each, Layer::Bth, layout.bth.start, tables::BTH)?;
        let present = self.frame.repr.bth.opcode.headers();
        for (header, _) in present.iter() {
            if let Some(range) = layout.ext_header(header, present) {
                self.extension(each, header, range.start)?;
            }
        }
        let mad = self.mad_at();
        if let Some(at) = mad {
            self.mad(each, at)?;
        }
        self.payload(each, mad.is_some())?;
        self.trailer(each)
    }

    /// Everything [`Walker::walk`] decides by, apart from the values it reads: the optional
    /// parts it walks, the offsets of the headers it reads rows from (the extension headers
    /// follow from the BTH's and the opcode), the opcode, the AETH's kind (which picks its
    /// detail row) and whether the length-dependent fields are there at all. Keep the two in
    /// step: a test checks that frames with equal keys give the same fields.
    pub(super) fn layout_key(&self) -> Option<LayoutKey> {
        if self.mad_at().is_some() {
            return None;
        }
        let (repr, layout) = (&self.frame.repr, &self.frame.layout);
        let opcode = repr.bth.opcode;
        let network: u16 = match repr.network {
            NetworkRepr::Ipv4 { .. } => 0,
            NetworkRepr::Ipv6 { .. } => 1,
            NetworkRepr::Grh { .. } => 2,
        };
        // The kind, bits 6:5 of the syndrome byte (which the parsed syndrome keeps).
        let aeth_kind = repr
            .ext
            .aeth
            .map_or(0, |aeth| (aeth.syndrome.to_u8() >> 5) & 0x3);
        let has_ethernet = repr.ethernet.is_some();
        let flags = [
            has_ethernet,
            repr.ethernet.is_some_and(|eth| eth.vlan.is_some()),
            layout.udp.is_some(),
            layout.payload.start < layout.pad.end,
            !layout.pad.is_empty(),
            !layout.trailer.is_empty(),
        ];
        let parts = flags
            .iter()
            .enumerate()
            .fold(network | u16::from(aeth_kind) << 2, |parts, (i, &on)| {
                parts | u16::from(on) << (4 + i)
            });
        let offset = |at: usize| u16::try_from(at).ok();
        Some(LayoutKey {
            opcode: opcode.value(),
            parts,
            network: (offset(layout.network.start)?, offset(layout.network.end)?),
            bth: offset(layout.bth.start)?,
        })
    }

    pub(super) fn table<V: Visit<'a>>(
        &self,
        each: &mut V,
        layer: Layer,
        base: usize,
        specs: &'static [Spec],
    ) -> Result<(), V::Error> {
        for spec in specs {
            if self.essential_only && spec.depth == Depth::Detail {
                continue;
            }
            if let Some(field) = self.read(layer, base, spec) {
                each.field(&field)?;
            }
        }
        Ok(())
    }

    fn extension<V: Visit<'a>>(
        &self,
        each: &mut V,
        header: Headers,
        at: usize,
    ) -> Result<(), V::Error> {
        let (layer, specs) = match header {
            Headers::DETH => (Layer::Deth, tables::DETH),
            Headers::FETH => (Layer::Feth, tables::FETH),
            Headers::RETH => (Layer::Reth, tables::RETH),
            Headers::ATOMIC_ETH => (Layer::AtomicEth, tables::ATOMIC_ETH),
            Headers::ATOMIC_ACK_ETH => (Layer::AtomicAckEth, tables::ATOMIC_ACK_ETH),
            Headers::IMMDT => (Layer::ImmDt, tables::IMMDT),
            Headers::IETH => (Layer::Ieth, tables::IETH),
            Headers::AETH => return self.aeth(each, at),
            _ => return Ok(()),
        };
        self.table(each, layer, at, specs)
    }

    fn aeth<V: Visit<'a>>(&self, each: &mut V, at: usize) -> Result<(), V::Error> {
        self.table(each, Layer::Aeth, at, tables::AETH)?;
        let Some(&syndrome) = self.bytes.get(at) else {
            return Ok(());
        };
        let detail = &tables::AETH_DETAIL[usize::from((syndrome >> 5) & 0x3)];
        for spec in [detail, &tables::AETH_MSN] {
            if let Some(field) = self.read(Layer::Aeth, at, spec) {
                each.field(&field)?;
            }
        }
        Ok(())
    }

    /// The field a table row describes, for a header starting at `base`; `None` if the frame
    /// does not hold its bytes (which a parsed frame always does).
    #[inline(always)]
    pub(super) fn read(&self, layer: Layer, base: usize, spec: &'static Spec) -> Option<Field<'a>> {
        let bytes = base + spec.at..base + spec.at + spec.len;
        let raw = self.bytes.get(bytes.clone())?;
        // Big-endian numbers of the sizes headers use; addresses and byte strings are not read
        // as numbers.
        let whole = match *raw {
            [a] => u64::from(a),
            [a, b] => u16::from_be_bytes([a, b]).into(),
            [a, b, c] => u32::from_be_bytes([0, a, b, c]).into(),
            [a, b, c, d] => u32::from_be_bytes([a, b, c, d]).into(),
            [a, b, c, d, e, f, g, h] => u64::from_be_bytes([a, b, c, d, e, f, g, h]),
            _ => 0,
        };
        let number = match spec.mask {
            0 => whole,
            mask => (whole & u64::from(mask)) >> mask.trailing_zeros(),
        };
        let value = match spec.shape {
            Shape::Dec => Value::Uint(number, Base::Dec),
            Shape::Hex(digits) => Value::Uint(number, Base::Hex(digits)),
            Shape::Flag => Value::Flag(number != 0),
            Shape::Words32 => Value::Uint(number * 4, Base::Dec),
            Shape::Mac => Value::Mac(EthernetAddress(array(raw))),
            Shape::Ipv4 => Value::Ipv4(Ipv4Address::from(array::<4>(raw))),
            Shape::Ipv6 => Value::Ipv6(Ipv6Address::from(array::<16>(raw))),
            Shape::Bytes => Value::Bytes(raw),
        };
        Some(Field {
            layer,
            spec,
            bytes,
            value,
            meaning: spec.meaning,
        })
    }

    fn ipv4_options<V: Visit<'a>>(&self, each: &mut V) -> Result<(), V::Error> {
        let network = &self.frame.layout.network;
        let options = network.start + 20..network.end;
        match self.bytes.get(options.clone()) {
            Some(raw) if !raw.is_empty() => self.give(
                each,
                (Layer::Ipv4, &other::IP_OPTIONS),
                options,
                Value::Bytes(raw),
                Meaning::None,
            ),
            _ => Ok(()),
        }
    }

    /// Payload, pad and ICRC. tshark's `data.len` counts payload and pad together, and is
    /// there only when there is at least one byte of either and the payload is not a MAD
    /// (whose fields are then shown instead).
    fn payload<V: Visit<'a>>(&self, each: &mut V, mad: bool) -> Result<(), V::Error> {
        let layout = &self.frame.layout;
        let count = |range: &Range<usize>| Value::Uint(range.len() as u64, Base::Dec);
        let data = layout.payload.start..layout.pad.end;
        if !data.is_empty() && !mad {
            let len = count(&data);
            self.give(
                each,
                (Layer::Payload, &other::DATA_LEN),
                data,
                len,
                Meaning::None,
            )?;
        }
        if self.frame.repr.bth.opcode.has_payload() {
            let payload = layout.payload.clone();
            let len = count(&payload);
            self.give(
                each,
                (Layer::Payload, &other::PAYLOAD_LEN),
                payload,
                len,
                Meaning::None,
            )?;
        }
        if let Some(pad) = self.bytes.get(layout.pad.clone()).filter(|p| !p.is_empty()) {
            let range = layout.pad.clone();
            self.give(
                each,
                (Layer::Payload, &other::PAD),
                range,
                Value::Bytes(pad),
                Meaning::None,
            )?;
        }
        let icrc = layout.icrc.clone();
        let crc = |value: u32| Value::Uint(wire_order(value).into(), Base::Hex(8));
        let check = self.icrc;
        let found = crc(check.found);
        self.give(
            each,
            (Layer::Payload, &other::ICRC),
            icrc.clone(),
            found,
            Meaning::Icrc(check),
        )?;
        let expected = crc(check.expected);
        self.give(
            each,
            (Layer::Payload, &other::ICRC_EXPECTED),
            icrc.clone(),
            expected,
            Meaning::None,
        )?;
        let status = Value::Text(if check.is_ok() { "ok" } else { "bad" });
        self.give(
            each,
            (Layer::Payload, &other::ICRC_STATUS),
            icrc,
            status,
            Meaning::None,
        )
    }

    /// Bytes after the IP packet: Ethernet's minimum-size padding.
    fn trailer<V: Visit<'a>>(&self, each: &mut V) -> Result<(), V::Error> {
        let trailer = self.frame.layout.trailer.clone();
        match self.bytes.get(trailer.clone()) {
            Some(raw) if !raw.is_empty() && self.frame.repr.ethernet.is_some() => self.give(
                each,
                (Layer::Ethernet, &other::ETH_PADDING),
                trailer,
                Value::Bytes(raw),
                Meaning::None,
            ),
            _ => Ok(()),
        }
    }
}

/// The static rate a path's 6-bit code stands for (IBTA table 205 and its later additions;
/// Linux's `enum ib_rate`).
fn rate(code: u8) -> &'static str {
    match code {
        0 => "port current",
        2 => "2.5 Gb/s",
        3 => "10 Gb/s",
        4 => "30 Gb/s",
        5 => "5 Gb/s",
        6 => "20 Gb/s",
        7 => "40 Gb/s",
        8 => "60 Gb/s",
        9 => "80 Gb/s",
        10 => "120 Gb/s",
        11 => "14 Gb/s",
        12 => "56 Gb/s",
        13 => "112 Gb/s",
        14 => "168 Gb/s",
        15 => "25 Gb/s",
        16 => "100 Gb/s",
        17 => "200 Gb/s",
        18 => "300 Gb/s",
        19 => "28 Gb/s",
        20 => "50 Gb/s",
        21 => "400 Gb/s",
        22 => "600 Gb/s",
        _ => "reserved",
    }
}

/// `raw` as an array (the tables make it exactly `N` long; zeros if not): a fixed-size load,
/// where copying a slice of run-time length would be a call to memcpy per address.
#[inline(always)]
fn array<const N: usize>(raw: &[u8]) -> [u8; N] {
    raw.try_into().unwrap_or([0; N])
}

/// The words for a value of `n` that means `meaning`.
pub(super) fn words(meaning: Meaning, n: u64) -> Words {
    let byte = n as u8;
    match meaning {
        Meaning::None => Words::None,
        Meaning::Fixed(text) => Words::Text(text),
        Meaning::EtherType => Words::Text(match n {
            0x0800 => "IPv4",
            0x86dd => "IPv6",
            0x8100 => "802.1Q",
            0x8915 => "RoCEv1",
            _ => "unknown",
        }),
        Meaning::Ecn => Words::Text(match n {
            0 => "not ECN-capable",
            1 => "ECT(1)",
            2 => "ECT(0)",
            _ => "congestion experienced",
        }),
        Meaning::Opcode => Opcode::from_u8(byte).map_or(Words::None, Words::Opcode),
        Meaning::Syndrome => Words::Syndrome(Syndrome::from_u8(byte)),
        Meaning::SyndromeKind => {
            Words::Text(["ACK", "RNR NAK", "reserved", "NAK"][usize::from(byte & 3)])
        }
        Meaning::Credits if byte == aeth::UNLIMITED_CREDITS => Words::Text("no credit information"),
        Meaning::Credits => Words::None,
        Meaning::RnrTimer => Words::Wait(aeth::rnr_timer(byte)),
        Meaning::NakCode => Words::Text(NakCode(byte).name()),
        Meaning::Selectivity => Words::Text(match n {
            0 => "the whole memory region",
            1 => "the range in the RETH",
            _ => "reserved",
        }),
        Meaning::Placement => Words::Text(match n {
            1 => "global visibility",
            2 => "persistence",
            3 => "global visibility and persistence",
            _ => "reserved",
        }),
        Meaning::UdpChecksum => Words::Text(if n == 0 { "none" } else { "not checked" }),
        Meaning::Icrc(check) => Words::Icrc(check),
        Meaning::MgmtClass => Words::Text(crate::mad::Class(byte).name()),
        Meaning::MadMethod => Words::Text(crate::mad::Method(byte).name()),
        Meaning::CmAttribute => Words::Text(crate::cm::AttributeId(n as u16).meaning()),
        Meaning::ServiceId => Words::Service(n),
        Meaning::PortSpaceLow => Words::Text(match byte {
            0x06 => "TCP",
            0x11 => "UDP",
            0x3f => "IB",
            _ => "unknown",
        }),
        // 4.096 µs × 2^n, for the 5-bit codes (31 is about 2.5 hours).
        Meaning::Timeout => Words::Timeout(crate::cm::timeout(byte)),
        Meaning::ServiceType => Words::Text(crate::cm::ServiceType::from_bits(byte).name()),
        Meaning::Mtu => Words::Text(match n {
            1 => "256 bytes",
            2 => "512 bytes",
            3 => "1024 bytes",
            4 => "2048 bytes",
            5 => "4096 bytes",
            _ => "reserved",
        }),
        Meaning::RnrRetry if n == 7 => Words::Text("retry for ever"),
        Meaning::RnrRetry => Words::None,
        Meaning::Rate => Words::Text(rate(byte)),
        Meaning::MraMessage => {
            Words::Text(["REQ", "REP", "LAP", "reserved"][usize::from(byte & 3)])
        }
        Meaning::RejMessage => {
            Words::Text(["REQ", "REP", "other", "reserved"][usize::from(byte & 3)])
        }
        Meaning::RejReason => Words::Text(crate::cm::rej::Reason(n as u16).name()),
        Meaning::Failover => Words::Text(match n {
            0 => "accepted",
            1 => "rejected",
            2 => "not supported",
            _ => "reserved",
        }),
        Meaning::SidrStatus => Words::Text(crate::cm::sidr_rep::Status(byte).name()),
    }
}

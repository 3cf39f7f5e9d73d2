//! Capture files: read pcap and pcapng, write pcap.
//!
//! The decoder, the tests and the NIC's packet tee all meet RoCE frames in capture files, so the
//! reading and writing lives here, next to the frame parser, rather than in each of them. The
//! file formats themselves are `pcap-file`'s; this module adds what it leaves to its users:
//! telling pcap from pcapng by the magic number, numbering records as tshark does, turning
//! pcapng's per-interface timestamp units into time, and the Linux cooked capture headers (16
//! bytes for `LINUX_SLL`, 20 for `LINUX_SLL2`), whose only field that matters here is the
//! protocol.
//!
//! Reading streams: one record at a time, borrowed from the reader's buffer, so a capture of
//! any size is read in constant memory.

use std::borrow::Cow;
use std::fs::File;
use std::io::{self, Cursor, Read, Write};
use std::path::Path;
use std::time::Duration;

use pcap_file::pcap::{PcapHeader, PcapPacket, PcapReader, PcapWriter};
use pcap_file::pcapng::blocks::interface_description::{
    InterfaceDescriptionBlock, InterfaceDescriptionOption,
};
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

use crate::error::check_len;
use crate::frame::VLAN_ETHERTYPE;
use crate::{be, Error, Frame, Layer};

/// How the bytes of a record start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Link {
    /// An Ethernet header (link type 1).
    Ethernet,
    /// A 16-byte Linux cooked capture header (link type 113, `tcpdump -i any` before libpcap 1.10).
    LinuxSll,
    /// A 20-byte Linux cooked capture v2 header (link type 276).
    LinuxSll2,
}

impl Link {
    fn from_data_link(link: DataLink) -> Result<Link, CaptureError> {
        match link {
            DataLink::ETHERNET => Ok(Link::Ethernet),
            DataLink::LINUX_SLL => Ok(Link::LinuxSll),
            DataLink::LINUX_SLL2 => Ok(Link::LinuxSll2),
            other => Err(CaptureError::UnsupportedLink(other.into())),
        }
    }

    /// Length of the cooked header and where its protocol field sits.
    fn cooked_header(self) -> Option<(usize, usize)> {
        match self {
            Link::Ethernet => None,
            Link::LinuxSll => Some((16, 14)),
            Link::LinuxSll2 => Some((20, 0)),
        }
    }
}

/// One packet record of a capture.
#[derive(Debug, Clone, Copy)]
pub struct Record<'a> {
    /// Position in the file counting every packet record from 1, as tshark's `frame.number`.
    pub number: u64,
    /// Time since the Unix epoch.
    pub timestamp: Duration,
    pub link: Link,
    /// The bytes as captured; fewer than `original_len` if the capture was snapped.
    pub data: &'a [u8],
    /// Length of the packet on the wire.
    pub original_len: u32,
}

impl<'a> Record<'a> {
    /// Parses the record as a RoCE frame, whatever its link header. The frame's layout gives
    /// offsets into [`Record::data`], cooked header included.
    pub fn frame(&self) -> Result<Frame<'a>, Error> {
        let Some((header_len, protocol_at)) = self.link.cooked_header() else {
            return Frame::parse(self.data);
        };
        check_len(Layer::Ethernet, header_len, self.data.len())?;
        let mut ethertype = be::u16(&self.data[protocol_at..protocol_at + 2]);
        let mut network_at = header_len;
        // Cooked captures normally drop the 802.1Q tag; when one is kept, the protocol says so
        // and the tag sits in front of the packet.
        if ethertype == VLAN_ETHERTYPE {
            check_len(Layer::Vlan, header_len + 4, self.data.len())?;
            ethertype = be::u16(&self.data[header_len + 2..header_len + 4]);
            network_at += 4;
        }
        Frame::parse_network_layer_at(self.data, network_at, ethertype)
    }
}

/// Why a capture could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("not a pcap or pcapng capture")]
    NotACapture,
    #[error("link type {0} is not supported (only Ethernet and Linux cooked captures are)")]
    UnsupportedLink(u32),
    #[error("the capture ends in the middle of a record")]
    Truncated,
    #[error("the capture is corrupt: {0}")]
    Corrupt(String),
}

impl From<PcapError> for CaptureError {
    fn from(e: PcapError) -> CaptureError {
        match e {
            PcapError::IoError(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                CaptureError::Truncated
            }
            PcapError::IoError(e) => CaptureError::Io(e),
            PcapError::IncompleteBuffer => CaptureError::Truncated,
            other => CaptureError::Corrupt(other.to_string()),
        }
    }
}

const PCAPNG_MAGIC: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];
const PCAP_MAGICS: [[u8; 4]; 4] = [
    [0xa1, 0xb2, 0xc3, 0xd4],
    [0xd4, 0xc3, 0xb2, 0xa1],
    [0xa1, 0xb2, 0x3c, 0x4d],
    [0x4d, 0x3c, 0xb2, 0xa1],
];

/// The magic number already read, put back in front of the rest of the stream.
type Rewound<R> = io::Chain<Cursor<[u8; 4]>, R>;

enum Format<R: Read> {
    Pcap {
        reader: PcapReader<Rewound<R>>,
        link: Link,
        nanos: bool,
    },
    PcapNg {
        reader: PcapNgReader<Rewound<R>>,
        /// The interfaces of the current section, in the order they were described.
        interfaces: Vec<Interface>,
    },
}

/// What a pcapng interface description says about the packets captured on it.
struct Interface {
    link: Result<Link, u32>,
    /// `if_tsresol`: units of 10^-n seconds, or 2^-n if the top bit is set.
    resolution: u8,
    /// `if_tsoffset`: seconds to add to every timestamp.
    offset: u64,
}

impl Interface {
    fn new(description: &InterfaceDescriptionBlock) -> Interface {
        let mut interface = Interface {
            link: Link::from_data_link(description.linktype)
                .map_err(|_| description.linktype.into()),
            resolution: 6,
            offset: 0,
        };
        for option in &description.options {
            match option {
                InterfaceDescriptionOption::IfTsResol(r) => interface.resolution = *r,
                InterfaceDescriptionOption::IfTsOffset(o) => interface.offset = *o,
                _ => {}
            }
        }
        interface
    }

    /// Converts a timestamp counted in this interface's units into time since the epoch.
    fn time(&self, raw: u64) -> Duration {
        const NANOS: u128 = 1_000_000_000;
        let raw = u128::from(raw);
        let nanos = if self.resolution & 0x80 == 0 {
            let exponent = u32::from(self.resolution);
            if exponent <= 9 {
                raw * 10u128.pow(9 - exponent)
            } else {
                10u128
                    .checked_pow(exponent - 9)
                    .map_or(0, |divisor| raw / divisor)
            }
        } else {
            (raw * NANOS)
                .checked_shr(u32::from(self.resolution & 0x7f))
                .unwrap_or(0)
        };
        let secs = u64::try_from(nanos / NANOS).unwrap_or(u64::MAX);
        Duration::new(secs.saturating_add(self.offset), (nanos % NANOS) as u32)
    }
}

/// Reads the packet records of a pcap or pcapng stream, one at a time.
pub struct Reader<R: Read> {
    format: Format<R>,
    /// Where a record is kept when it cannot be lent straight from the reader's buffer.
    spare: Vec<u8>,
    records: u64,
}

/// Opens a capture file.
pub fn open(path: &Path) -> Result<Reader<File>, CaptureError> {
    Reader::new(File::open(path)?)
}

impl<R: Read> Reader<R> {
    /// Reads the file header, telling pcap from pcapng by its magic number.
    pub fn new(mut source: R) -> Result<Reader<R>, CaptureError> {
        let mut magic = [0u8; 4];
        match source.read_exact(&mut magic) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                return Err(CaptureError::NotACapture)
            }
            Err(e) => return Err(e.into()),
        }
        let rewound = Cursor::new(magic).chain(source);
        let format = if magic == PCAPNG_MAGIC {
            Format::PcapNg {
                reader: PcapNgReader::new(rewound).map_err(header_error)?,
                interfaces: Vec::new(),
            }
        } else if PCAP_MAGICS.contains(&magic) {
            let reader = PcapReader::new(rewound).map_err(header_error)?;
            let header = reader.header();
            Format::Pcap {
                link: Link::from_data_link(header.datalink)?,
                nanos: header.ts_resolution == TsResolution::NanoSecond,
                reader,
            }
        } else {
            return Err(CaptureError::NotACapture);
        };
        Ok(Reader {
            format,
            spare: Vec::new(),
            records: 0,
        })
    }

    /// The next packet record, `None` at the end of the capture. Blocks that hold no packet
    /// (pcapng interface descriptions, statistics, ...) are read past.
    pub fn next_record(&mut self) -> Option<Result<Record<'_>, CaptureError>> {
        let number = self.records + 1;
        let record = match &mut self.format {
            Format::Pcap {
                reader,
                link,
                nanos,
            } => {
                let raw = match reader.next_raw_packet()? {
                    Ok(raw) => raw,
                    Err(e) => return Some(Err(e.into())),
                };
                let frac = if *nanos {
                    raw.ts_frac
                } else {
                    raw.ts_frac.saturating_mul(1000)
                };
                Record {
                    number,
                    timestamp: Duration::from_secs(raw.ts_sec.into())
                        + Duration::from_nanos(frac.into()),
                    link: *link,
                    original_len: raw.orig_len,
                    data: lend(raw.data, &mut self.spare),
                }
            }
            Format::PcapNg { reader, interfaces } => {
                let (timestamp, link, original_len) =
                    match next_pcapng_packet(reader, interfaces, &mut self.spare)? {
                        Ok(parts) => parts,
                        Err(e) => return Some(Err(e)),
                    };
                Record {
                    number,
                    timestamp,
                    link,
                    original_len,
                    data: &self.spare,
                }
            }
        };
        self.records = number;
        Some(Ok(record))
    }
}

/// The bytes of a record: borrowed from the reader's buffer when they are there (always, with
/// today's pcap-file), else kept in `spare`.
fn lend<'r>(data: Cow<'r, [u8]>, spare: &'r mut Vec<u8>) -> &'r [u8] {
    match data {
        Cow::Borrowed(data) => data,
        Cow::Owned(data) => {
            *spare = data;
            spare
        }
    }
}

/// A file that starts like a capture but whose header cannot be read is "not a capture" to the
/// person who passed it, unless reading itself failed.
fn header_error(e: PcapError) -> CaptureError {
    match e {
        PcapError::IoError(e) if e.kind() != io::ErrorKind::UnexpectedEof => CaptureError::Io(e),
        _ => CaptureError::NotACapture,
    }
}

/// Reads pcapng blocks up to the next packet, whose bytes it copies into `data`: the block
/// borrows the reader, and the loop past other blocks could not lend it out.
fn next_pcapng_packet<R: Read>(
    reader: &mut PcapNgReader<R>,
    interfaces: &mut Vec<Interface>,
    data: &mut Vec<u8>,
) -> Option<Result<(Duration, Link, u32), CaptureError>> {
    loop {
        let block = match reader.next_block()? {
            Ok(block) => block,
            Err(e) => return Some(Err(e.into())),
        };
        let (interface, raw_time, bytes, original_len) = match block {
            Block::SectionHeader(_) => {
                interfaces.clear();
                continue;
            }
            Block::InterfaceDescription(description) => {
                interfaces.push(Interface::new(&description));
                continue;
            }
            // pcap-file keeps the raw timestamp, in the interface's units, as nanoseconds.
            Block::EnhancedPacket(p) => (
                p.interface_id,
                u64::try_from(p.timestamp.as_nanos()).unwrap_or(u64::MAX),
                p.data,
                p.original_len,
            ),
            Block::SimplePacket(p) => (0, 0, p.data, p.original_len),
            Block::Packet(p) => (p.interface_id.into(), p.timestamp, p.data, p.original_len),
            _ => continue,
        };
        let Some(interface) = interfaces.get(interface as usize) else {
            return Some(Err(CaptureError::Corrupt(format!(
                "a packet names interface {interface}, which is not described"
            ))));
        };
        let link = match interface.link {
            Ok(link) => link,
            Err(link_type) => return Some(Err(CaptureError::UnsupportedLink(link_type))),
        };
        data.clear();
        data.extend_from_slice(&bytes);
        return Some(Ok((interface.time(raw_time), link, original_len)));
    }
}

/// Frames longer than this are refused by the writer (tcpdump's default snap length; the
/// largest RoCE frame is far shorter).
pub const WRITER_SNAPLEN: u32 = 262_144;

/// Writes Ethernet frames to a pcap stream with nanosecond timestamps.
///
/// The byte order is fixed (little-endian) rather than the host's, so that the same frames
/// always make the same file: the project commits captures and compares them byte for byte.
pub struct Writer<W: Write> {
    inner: PcapWriter<W>,
}

impl<W: Write> Writer<W> {
    /// Writes the file header.
    pub fn new(sink: W) -> Result<Writer<W>, CaptureError> {
        let header = PcapHeader {
            snaplen: WRITER_SNAPLEN,
            datalink: DataLink::ETHERNET,
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
            ..PcapHeader::default()
        };
        Ok(Writer {
            inner: PcapWriter::with_header(sink, header)?,
        })
    }

    /// Appends one frame, captured whole, at `timestamp` since the Unix epoch.
    pub fn write(&mut self, timestamp: Duration, frame: &[u8]) -> Result<(), CaptureError> {
        let len = u32::try_from(frame.len())
            .ok()
            .filter(|&len| len <= WRITER_SNAPLEN)
            .ok_or_else(|| {
                CaptureError::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "a {}-byte frame is longer than the snap length",
                        frame.len()
                    ),
                ))
            })?;
        self.inner
            .write_packet(&PcapPacket::new(timestamp, len, frame))?;
        Ok(())
    }

    /// The sink, for flushing or closing.
    pub fn into_inner(self) -> W {
        self.inner.into_writer()
    }
}

#[cfg(test)]
mod tests {
    use pcap_file::pcapng::blocks::enhanced_packet::EnhancedPacketBlock;
    use pcap_file::pcapng::blocks::simple_packet::SimplePacketBlock;
    use pcap_file::pcapng::PcapNgWriter;

    use super::*;
    use crate::frame::{EthernetRepr, Extensions, FrameRepr, NetworkRepr, VlanTag};
    use crate::opcode::{Kind, Opcode, Transport};
    use crate::{bth, EthernetAddress, Ipv4Address};

    fn frame(vlan: Option<VlanTag>) -> Vec<u8> {
        let op = Opcode::new(Transport::Rc, Kind::SendOnly).unwrap();
        let repr = FrameRepr {
            ethernet: Some(EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan,
            }),
            network: NetworkRepr::Ipv4 {
                src: Ipv4Address::new(10, 0, 0, 1),
                dst: Ipv4Address::new(10, 0, 0, 2),
                dscp: 0,
                ecn: 0,
                ident: 1,
                ttl: 64,
                udp_src_port: 0xc000,
            },
            bth: bth::Repr::new(op, 0x11, 5),
            ext: Extensions::for_opcode(op),
            payload_len: 6,
        };
        let mut buf = vec![0; repr.frame_len()];
        repr.emit(&mut buf, b"abcdef").unwrap();
        buf
    }

    /// Number, time, link and bytes of a record.
    type Owned = (u64, Duration, Link, Vec<u8>);

    fn read_all(bytes: &[u8]) -> Result<Vec<Owned>, CaptureError> {
        let mut reader = Reader::new(bytes)?;
        let mut out = Vec::new();
        while let Some(record) = reader.next_record() {
            let r = record?;
            out.push((r.number, r.timestamp, r.link, r.data.to_vec()));
        }
        Ok(out)
    }

    #[test]
    fn what_the_writer_writes_the_reader_reads_back() {
        let frames = [frame(None), frame(Some(VlanTag::default()))];
        let times = [
            Duration::new(1_700_000_000, 1),
            Duration::new(1_700_000_001, 999_999_999),
        ];
        let mut writer = Writer::new(Vec::new()).unwrap();
        for (t, f) in times.iter().zip(&frames) {
            writer.write(*t, f).unwrap();
        }
        let file = writer.into_inner();
        // Nanosecond magic, little-endian; link type 1.
        assert_eq!(file[..4], [0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(file[20..24], 1u32.to_le_bytes());
        let records = read_all(&file).unwrap();
        assert_eq!(records.len(), 2);
        for (i, (number, time, link, data)) in records.iter().enumerate() {
            assert_eq!(*number, i as u64 + 1);
            assert_eq!(*time, times[i]);
            assert_eq!(*link, Link::Ethernet);
            assert_eq!(data, &frames[i]);
        }
    }

    #[test]
    fn the_writer_refuses_a_frame_longer_than_its_snap_length() {
        let mut writer = Writer::new(Vec::new()).unwrap();
        let huge = vec![0u8; WRITER_SNAPLEN as usize + 1];
        assert!(writer.write(Duration::ZERO, &huge).is_err());
    }

    #[test]
    fn microsecond_big_endian_pcap_is_read_too() {
        let header = PcapHeader {
            endianness: Endianness::Big,
            ts_resolution: TsResolution::MicroSecond,
            ..PcapHeader::default()
        };
        let mut writer = PcapWriter::with_header(Vec::new(), header).unwrap();
        let f = frame(None);
        let t = Duration::new(1_600_000_000, 123_456_000);
        writer
            .write_packet(&PcapPacket::new(t, f.len() as u32, &f))
            .unwrap();
        let records = read_all(&writer.into_writer()).unwrap();
        assert_eq!(records, vec![(1, t, Link::Ethernet, f)]);
    }

    fn pcapng_with(options: Vec<InterfaceDescriptionOption<'static>>, raw_time: u64) -> Vec<u8> {
        let f = frame(None);
        let mut writer = PcapNgWriter::new(Vec::new()).unwrap();
        let mut interface = InterfaceDescriptionBlock::new(DataLink::ETHERNET, 65535);
        interface.options = options;
        writer.write_pcapng_block(interface).unwrap();
        writer
            .write_pcapng_block(EnhancedPacketBlock {
                interface_id: 0,
                timestamp: Duration::from_nanos(raw_time),
                original_len: f.len() as u32,
                data: Cow::Borrowed(&f),
                options: vec![],
            })
            .unwrap();
        writer
            .write_pcapng_block(SimplePacketBlock {
                original_len: f.len() as u32,
                data: Cow::Borrowed(&f),
            })
            .unwrap();
        writer.into_inner()
    }

    #[test]
    fn pcapng_timestamps_follow_the_interface_resolution_and_offset() {
        let cases = [
            // No if_tsresol: microseconds.
            (
                vec![],
                1_500_000_000_250_000,
                Duration::new(1_500_000_000, 250_000_000),
            ),
            (
                vec![InterfaceDescriptionOption::IfTsResol(9)],
                1_500_000_000_000_000_007,
                Duration::new(1_500_000_000, 7),
            ),
            // 2^-10 s units: 1024 of them are a second.
            (
                vec![InterfaceDescriptionOption::IfTsResol(0x80 | 10)],
                3 * 1024 + 512,
                Duration::new(3, 500_000_000),
            ),
            (
                vec![
                    InterfaceDescriptionOption::IfTsResol(0),
                    InterfaceDescriptionOption::IfTsOffset(100),
                ],
                5,
                Duration::from_secs(105),
            ),
        ];
        for (options, raw, expected) in cases {
            let records = read_all(&pcapng_with(options, raw)).unwrap();
            assert_eq!(records.len(), 2, "the simple packet block counts too");
            assert_eq!(records[0].1, expected);
            assert_eq!(records[0].3, frame(None));
            assert_eq!(records[1].0, 2);
        }
    }

    #[test]
    fn pcapng_packet_on_an_undescribed_or_unsupported_interface_is_an_error() {
        let f = frame(None);
        let packet = EnhancedPacketBlock {
            interface_id: 0,
            timestamp: Duration::ZERO,
            original_len: f.len() as u32,
            data: Cow::Borrowed(&f),
            options: vec![],
        };
        let mut writer = PcapNgWriter::with_endianness(Vec::new(), Endianness::Little).unwrap();
        writer
            .write_pcapng_block(InterfaceDescriptionBlock::new(DataLink::RAW, 65535))
            .unwrap();
        writer.write_pcapng_block(packet.clone()).unwrap();
        let second_at = writer.get_ref().len();
        writer.write_pcapng_block(packet).unwrap();
        let mut file = writer.into_inner();
        // pcap-file will not write a packet on an undescribed interface; make one by hand. The
        // interface id follows the block type and length.
        file[second_at + 8..second_at + 12].copy_from_slice(&1u32.to_le_bytes());
        let mut reader = Reader::new(&file[..]).unwrap();
        assert!(matches!(
            reader.next_record(),
            Some(Err(CaptureError::UnsupportedLink(101)))
        ));
        assert!(matches!(
            reader.next_record(),
            Some(Err(CaptureError::Corrupt(_)))
        ));
    }

    fn cooked_pcap(link: DataLink, record: &[u8]) -> Vec<u8> {
        let header = PcapHeader {
            datalink: link,
            endianness: Endianness::Little,
            ..PcapHeader::default()
        };
        let mut writer = PcapWriter::with_header(Vec::new(), header).unwrap();
        writer
            .write_packet(&PcapPacket::new(
                Duration::ZERO,
                record.len() as u32,
                record,
            ))
            .unwrap();
        writer.into_writer()
    }

    #[test]
    fn linux_cooked_captures_parse_from_the_protocol_field() {
        let ip_packet = &frame(None)[14..];
        // SLL: packet type, ARPHRD, address length, 8 address bytes, protocol.
        let mut sll = vec![0, 4, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0, 0x08, 0x00];
        sll.extend_from_slice(ip_packet);
        // SLL2: protocol, reserved, interface index, ARPHRD, packet type, address length, address.
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 2, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0,
        ];
        sll2.extend_from_slice(ip_packet);
        // SLL keeping an 802.1Q tag in front of the packet.
        let mut tagged = sll.clone();
        tagged[14..16].copy_from_slice(&[0x81, 0x00]);
        tagged.splice(16..16, [0x00, 0x64, 0x08, 0x00]);
        for (link, record, network_at) in [
            (DataLink::LINUX_SLL, &sll, 16),
            (DataLink::LINUX_SLL2, &sll2, 20),
            (DataLink::LINUX_SLL, &tagged, 20),
        ] {
            let file = cooked_pcap(link, record);
            let mut reader = Reader::new(&file[..]).unwrap();
            let r = reader.next_record().unwrap().unwrap();
            let frame = r.frame().unwrap();
            assert_eq!(frame.layout.network.start, network_at);
            assert_eq!(frame.payload(), b"abcdef");
            assert!(frame.icrc().is_ok());
        }
        let file = cooked_pcap(DataLink::LINUX_SLL2, &sll2[..12]);
        let mut reader = Reader::new(&file[..]).unwrap();
        let r = reader.next_record().unwrap().unwrap();
        assert!(matches!(r.frame(), Err(Error::Truncated { .. })));
    }

    #[test]
    fn files_that_are_not_captures_are_refused_by_name() {
        for bytes in [
            &b""[..],
            b"ab",
            b"hello, this is text\n",
            &[0xa1, 0xb2, 0xc3, 0xd4, 0],
        ] {
            assert!(
                matches!(Reader::new(bytes), Err(CaptureError::NotACapture)),
                "{bytes:?}"
            );
        }
        assert!(matches!(
            Reader::new(&cooked_pcap(DataLink::RAW, &[0x45])[..]),
            Err(CaptureError::UnsupportedLink(101))
        ));
    }

    #[test]
    fn a_capture_cut_inside_a_record_says_so() {
        let mut writer = Writer::new(Vec::new()).unwrap();
        writer.write(Duration::ZERO, &frame(None)).unwrap();
        let file = writer.into_inner();
        let mut reader = Reader::new(&file[..file.len() - 3]).unwrap();
        assert!(matches!(
            reader.next_record(),
            Some(Err(CaptureError::Truncated))
        ));
    }

    #[test]
    fn a_missing_file_is_an_io_error() {
        assert!(matches!(
            open(Path::new("/nonexistent/capture.pcap")),
            Err(CaptureError::Io(e)) if e.kind() == io::ErrorKind::NotFound
        ));
    }
}

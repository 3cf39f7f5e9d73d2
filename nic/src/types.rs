//! The values that cross the verbs API and every layer below it: work requests, completions,
//! QP attributes. The engine and the transport speak them too, so they sit at the bottom of the
//! crate and the API re-exports them. Names and numeric values follow libibverbs
//! (`ibv_wr_opcode`, `ibv_wc_status`, `ibv_qp_state`, ...), so that users who know verbs
//! recognise them and so that they cross process boundaries as the same integers.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub use roce_hostmem::Access;
use roce_wire::EthernetAddress;
use serde::{Deserialize, Serialize};

/// A scatter/gather entry: `length` bytes at virtual address `addr` of the registration `lkey`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// What a send work request asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    Send,
    /// `imm` is the 32-bit immediate, in the byte order it travels in (big-endian on the wire).
    SendWithImm {
        imm: u32,
    },
    /// Asks the receiver to invalidate `rkey` on delivery.
    SendWithInv {
        rkey: u32,
    },
    RdmaWrite {
        remote_addr: u64,
        rkey: u32,
    },
    RdmaWriteWithImm {
        remote_addr: u64,
        rkey: u32,
        imm: u32,
    },
    RdmaRead {
        remote_addr: u64,
        rkey: u32,
    },
    AtomicCmpAndSwp {
        remote_addr: u64,
        rkey: u32,
        compare: u64,
        swap: u64,
    },
    AtomicFetchAndAdd {
        remote_addr: u64,
        rkey: u32,
        add: u64,
    },
}

impl SendOp {
    /// The `ibv_wr_opcode` value.
    pub fn code(&self) -> u8 {
        match self {
            SendOp::RdmaWrite { .. } => 0,
            SendOp::RdmaWriteWithImm { .. } => 1,
            SendOp::Send => 2,
            SendOp::SendWithImm { .. } => 3,
            SendOp::RdmaRead { .. } => 4,
            SendOp::AtomicCmpAndSwp { .. } => 5,
            SendOp::AtomicFetchAndAdd { .. } => 6,
            SendOp::SendWithInv { .. } => 9,
        }
    }

    /// The completion opcode of this request on the sender's side.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::SendWithInv { .. } => {
                WcOpcode::Send
            }
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::AtomicCmpAndSwp { .. } => WcOpcode::CompSwap,
            SendOp::AtomicFetchAndAdd { .. } => WcOpcode::FetchAdd,
        }
    }

    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            SendOp::AtomicCmpAndSwp { .. } | SendOp::AtomicFetchAndAdd { .. }
        )
    }

    /// READ and atomics: the responder answers with data, and they count against max_rd_atomic.
    pub fn is_read_or_atomic(&self) -> bool {
        matches!(self, SendOp::RdmaRead { .. }) || self.is_atomic()
    }
}

/// `ibv_send_flags`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SendFlags(pub u8);

impl SendFlags {
    pub const FENCE: SendFlags = SendFlags(1);
    pub const SIGNALED: SendFlags = SendFlags(2);
    pub const SOLICITED: SendFlags = SendFlags(4);
    pub const INLINE: SendFlags = SendFlags(8);

    pub const fn contains(self, other: SendFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// No flags: an unsignaled request.
    pub const fn empty_flags() -> SendFlags {
        SendFlags(0)
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, rhs: SendFlags) -> SendFlags {
        SendFlags(self.0 | rhs.0)
    }
}

/// Where a UD send goes: an address handle, the remote QP and its Q_Key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    pub ah: u32,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// A send work request.
#[derive(Debug, Clone, Copy)]
pub struct SendWr<'a> {
    pub wr_id: u64,
    pub op: SendOp,
    pub sg_list: &'a [Sge],
    pub flags: SendFlags,
    /// UD only.
    pub ud: Option<UdDest>,
}

/// A receive work request.
#[derive(Debug, Clone, Copy)]
pub struct RecvWr<'a> {
    pub wr_id: u64,
    pub sg_list: &'a [Sge],
}

/// `ibv_wc_status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcStatus {
    Success = 0,
    LocLenErr = 1,
    LocQpOpErr = 2,
    LocEecOpErr = 3,
    LocProtErr = 4,
    WrFlushErr = 5,
    MwBindErr = 6,
    BadRespErr = 7,
    LocAccessErr = 8,
    RemInvReqErr = 9,
    RemAccessErr = 10,
    RemOpErr = 11,
    RetryExcErr = 12,
    RnrRetryExcErr = 13,
    LocRddViolErr = 14,
    RemInvRdReqErr = 15,
    RemAbortErr = 16,
    InvEecnErr = 17,
    InvEecStateErr = 18,
    FatalErr = 19,
    RespTimeoutErr = 20,
    GeneralErr = 21,
}

impl WcStatus {
    pub fn from_u8(v: u8) -> WcStatus {
        use WcStatus::*;
        match v {
            0 => Success,
            1 => LocLenErr,
            2 => LocQpOpErr,
            3 => LocEecOpErr,
            4 => LocProtErr,
            5 => WrFlushErr,
            6 => MwBindErr,
            7 => BadRespErr,
            8 => LocAccessErr,
            9 => RemInvReqErr,
            10 => RemAccessErr,
            11 => RemOpErr,
            12 => RetryExcErr,
            13 => RnrRetryExcErr,
            14 => LocRddViolErr,
            15 => RemInvRdReqErr,
            16 => RemAbortErr,
            17 => InvEecnErr,
            18 => InvEecStateErr,
            19 => FatalErr,
            20 => RespTimeoutErr,
            _ => GeneralErr,
        }
    }

    /// The text `ibv_wc_status_str` gives.
    pub fn as_str(self) -> &'static str {
        use WcStatus::*;
        match self {
            Success => "success",
            LocLenErr => "local length error",
            LocQpOpErr => "local QP operation error",
            LocEecOpErr => "local EE context operation error",
            LocProtErr => "local protection error",
            WrFlushErr => "Work Request Flushed Error",
            MwBindErr => "memory management operation error",
            BadRespErr => "bad response error",
            LocAccessErr => "local access error",
            RemInvReqErr => "remote invalid request error",
            RemAccessErr => "remote access error",
            RemOpErr => "remote operation error",
            RetryExcErr => "transport retry counter exceeded",
            RnrRetryExcErr => "RNR retry counter exceeded",
            LocRddViolErr => "local RDD violation error",
            RemInvRdReqErr => "remote invalid RD request",
            RemAbortErr => "aborted error",
            InvEecnErr => "invalid EE context number",
            InvEecStateErr => "invalid EE context state",
            FatalErr => "fatal error",
            RespTimeoutErr => "response timeout error",
            GeneralErr => "general error",
        }
    }
}

impl fmt::Display for WcStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `ibv_wc_opcode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum WcOpcode {
    Send = 0,
    RdmaWrite = 1,
    RdmaRead = 2,
    CompSwap = 3,
    FetchAdd = 4,
    Recv = 128,
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    pub fn from_u8(v: u8) -> Option<WcOpcode> {
        Some(match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompSwap,
            4 => WcOpcode::FetchAdd,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            _ => return None,
        })
    }
}

/// `ibv_wc_flags` bits we set.
pub mod wc_flags {
    /// The receive buffer starts with a 40-byte GRH area (UD).
    pub const GRH: u8 = 1;
    pub const WITH_IMM: u8 = 2;
    pub const WITH_INV: u8 = 8;
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    pub wr_id: u64,
    pub status: WcStatus,
    pub opcode: WcOpcode,
    pub byte_len: u32,
    /// Immediate data (with `WITH_IMM`) or the invalidated R_Key (with `WITH_INV`).
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: u8,
}

/// An empty entry (wr_id 0, status GENERAL_ERR), to fill the arrays `poll` writes into.
impl Default for Wc {
    fn default() -> Wc {
        Wc {
            wr_id: 0,
            status: WcStatus::GeneralErr,
            opcode: WcOpcode::Send,
            byte_len: 0,
            imm_data: 0,
            qp_num: 0,
            src_qp: 0,
            wc_flags: 0,
        }
    }
}

impl Wc {
    pub fn is_success(&self) -> bool {
        self.status == WcStatus::Success
    }

    pub fn imm(&self) -> Option<u32> {
        (self.wc_flags & wc_flags::WITH_IMM != 0).then_some(self.imm_data)
    }

    pub fn invalidated_rkey(&self) -> Option<u32> {
        (self.wc_flags & wc_flags::WITH_INV != 0).then_some(self.imm_data)
    }
}

/// The transport service of a QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum QpType {
    Rc = 2,
    Uc = 3,
    Ud = 4,
}

impl QpType {
    pub fn from_u8(v: u8) -> Option<QpType> {
        Some(match v {
            2 => QpType::Rc,
            3 => QpType::Uc,
            4 => QpType::Ud,
            _ => return None,
        })
    }
}

impl fmt::Display for QpType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpType::Rc => "RC",
            QpType::Uc => "UC",
            QpType::Ud => "UD",
        })
    }
}

/// `ibv_qp_state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum QpState {
    Reset = 0,
    Init = 1,
    Rtr = 2,
    Rts = 3,
    Sqd = 4,
    Sqe = 5,
    Err = 6,
}

impl QpState {
    pub fn from_u8(v: u8) -> Option<QpState> {
        Some(match v {
            0 => QpState::Reset,
            1 => QpState::Init,
            2 => QpState::Rtr,
            3 => QpState::Rts,
            4 => QpState::Sqd,
            5 => QpState::Sqe,
            6 => QpState::Err,
            _ => return None,
        })
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            QpState::Reset => "RESET",
            QpState::Init => "INIT",
            QpState::Rtr => "RTR",
            QpState::Rts => "RTS",
            QpState::Sqd => "SQD",
            QpState::Sqe => "SQE",
            QpState::Err => "ERR",
        })
    }
}

/// `ibv_mtu`: the path MTU, 256 to 4096 bytes of payload per packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum Mtu {
    M256 = 1,
    M512 = 2,
    M1024 = 3,
    M2048 = 4,
    M4096 = 5,
}

impl Mtu {
    pub const ALL: [Mtu; 5] = [Mtu::M256, Mtu::M512, Mtu::M1024, Mtu::M2048, Mtu::M4096];

    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    pub fn from_u8(v: u8) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| *m as u8 == v)
    }

    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        Mtu::ALL.into_iter().find(|m| m.bytes() == bytes)
    }

    /// The largest path MTU whose packets fit in an Ethernet MTU of `link_mtu` bytes (IP MTU),
    /// as Soft-RoCE chooses it: 1500 gives 1024.
    pub fn for_link_mtu(link_mtu: u32) -> Option<Mtu> {
        // IPv4 + UDP + BTH + the largest extension headers + ICRC.
        const OVERHEAD: u32 = 20 + 8 + 12 + 28 + 4;
        Mtu::ALL
            .into_iter()
            .rev()
            .find(|m| m.bytes() + OVERHEAD <= link_mtu)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bytes())
    }
}

/// A 128-bit global identifier. For RoCEv2 it is an IPv6 address or an IPv4-mapped one.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    pub fn from_ip(ip: IpAddr) -> Gid {
        match ip {
            IpAddr::V4(v4) => Gid(v4.to_ipv6_mapped().octets()),
            IpAddr::V6(v6) => Gid(v6.octets()),
        }
    }

    /// The IP address this GID stands for on RoCEv2.
    pub fn ip(&self) -> IpAddr {
        let v6 = Ipv6Addr::from(self.0);
        match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        }
    }

    /// The link-local GID of a MAC address (fe80:: + modified EUI-64), index 0 of every port.
    pub fn link_local(mac: EthernetAddress) -> Gid {
        let m = mac.0;
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8] = m[0] ^ 0x02;
        g[9] = m[1];
        g[10] = m[2];
        g[11] = 0xff;
        g[12] = 0xfe;
        g[13] = m[3];
        g[14] = m[4];
        g[15] = m[5];
        Gid(g)
    }

    /// Parses the 32 hex digits of the raw 16 bytes (the ibv_*_pingpong form), or an IP address.
    pub fn parse(text: &str) -> Option<Gid> {
        if let Ok(ip) = text.parse::<IpAddr>() {
            return Some(Gid::from_ip(ip));
        }
        let hex: Vec<u8> = text.bytes().filter(|b| *b != b':').collect();
        if hex.len() != 32 {
            return None;
        }
        let mut g = [0u8; 16];
        for (i, pair) in hex.chunks(2).enumerate() {
            g[i] = u8::from_str_radix(std::str::from_utf8(pair).ok()?, 16).ok()?;
        }
        Some(Gid(g))
    }

    /// The 32 hex digits of the raw bytes.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", Ipv6Addr::from(self.0))
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<Ipv4Addr> for Gid {
    fn from(ip: Ipv4Addr) -> Gid {
        Gid::from_ip(IpAddr::V4(ip))
    }
}

/// Where a connected QP's packets go (`ibv_ah_attr` with its GRH, for RoCE).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressVector {
    pub dgid: Gid,
    pub sgid_index: u8,
    /// 0 lets the NIC derive the flow label (and the UDP source port) from the QP numbers.
    pub flow_label: u32,
    pub hop_limit: u8,
    pub traffic_class: u8,
    /// The peer's MAC; `None` resolves it from the NIC's neighbour table.
    #[serde(with = "crate::host::codec::fields::opt_mac")]
    pub dmac: Option<EthernetAddress>,
}

impl AddressVector {
    /// A vector to `dgid` from GID index `sgid_index`, with the usual defaults.
    pub fn to(dgid: Gid, sgid_index: u8) -> AddressVector {
        AddressVector {
            dgid,
            sgid_index,
            flow_label: 0,
            hop_limit: 64,
            traffic_class: 0,
            dmac: None,
        }
    }
}

/// Sizes a QP is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct QpCap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

impl Default for QpCap {
    fn default() -> QpCap {
        QpCap {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 4,
            max_recv_sge: 4,
            max_inline_data: 64,
        }
    }
}

/// Attributes for `modify` (a `Some` field is in the attribute mask) and from `query`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QpAttr {
    pub qp_state: Option<QpState>,
    pub pkey_index: Option<u16>,
    pub port_num: Option<u8>,
    pub qp_access_flags: Option<Access>,
    pub qkey: Option<u32>,
    pub path_mtu: Option<Mtu>,
    pub dest_qp_num: Option<u32>,
    pub rq_psn: Option<u32>,
    pub sq_psn: Option<u32>,
    pub av: Option<AddressVector>,
    pub timeout: Option<u8>,
    pub retry_cnt: Option<u8>,
    pub rnr_retry: Option<u8>,
    pub min_rnr_timer: Option<u8>,
    pub max_rd_atomic: Option<u8>,
    pub max_dest_rd_atomic: Option<u8>,
}

impl QpAttr {
    /// RESET → INIT for a connected QP.
    pub fn init(access: Access) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qp_access_flags: Some(access),
            ..QpAttr::default()
        }
    }

    /// RESET → INIT for a UD QP.
    pub fn init_ud(qkey: u32) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Init),
            pkey_index: Some(0),
            port_num: Some(1),
            qkey: Some(qkey),
            ..QpAttr::default()
        }
    }

    /// INIT → RTR for an RC QP, with the usual responder defaults (16 outstanding reads and
    /// atomics, RNR timer 12 = 0.64 ms).
    pub fn rtr(av: AddressVector, dest_qp_num: u32, rq_psn: u32, path_mtu: Mtu) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rtr),
            av: Some(av),
            dest_qp_num: Some(dest_qp_num),
            rq_psn: Some(rq_psn),
            path_mtu: Some(path_mtu),
            max_dest_rd_atomic: Some(16),
            min_rnr_timer: Some(12),
            ..QpAttr::default()
        }
    }

    /// RTR → RTS for an RC QP, with the usual requester defaults (timeout 14 ≈ 67 ms, 7 retries,
    /// 7 RNR retries = infinite, 16 outstanding reads and atomics).
    pub fn rts(sq_psn: u32) -> QpAttr {
        QpAttr {
            qp_state: Some(QpState::Rts),
            sq_psn: Some(sq_psn),
            timeout: Some(14),
            retry_cnt: Some(7),
            rnr_retry: Some(7),
            max_rd_atomic: Some(16),
            ..QpAttr::default()
        }
    }
}

/// What `ibv_query_port` tells of the NIC's one port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// The largest path MTU the link carries.
    pub max_mtu: Mtu,
    /// The path MTU in use: the port is always up, at its largest.
    pub active_mtu: Mtu,
    pub gid_tbl_len: u32,
    /// Entries of the P_Key table (`Context::query_pkey` reads them).
    pub pkey_tbl_len: u16,
}

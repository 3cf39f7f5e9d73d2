//! Where every field of a management datagram lies: the MAD common header and each CM message,
//! in the same rows as [`super::tables`] (offsets from the start of the MAD for the header, from
//! the start of the MAD data for a message).
//!
//! tshark 4.0 names the MAD header, REQ, REP, RTU, REJ, DREQ and DREP fields (with a few
//! quirks kept here so the keys match: a REQ's and a REP's local communication IDs are
//! `infiniband.cm.req` and `infiniband.cm.rep`, a DREQ's remote QPN is
//! `infiniband.cm.req.remoteqpneecn`, a DREP's fields are `drsp`). It does not decode MRA,
//! SIDR_REQ or SIDR_REP; their fields are ours, under `roce.cm.`, as are reserved bits tshark
//! lumps with others.

use super::tables::Depth::{Detail as D, Essential as E};
use super::tables::{spec, Meaning as M, Shape::*, Spec};

const NONE: M = M::None;

#[rustfmt::skip]
pub(super) const MAD: &[Spec] = &[
    spec!(E, "Base version",       "infiniband.mad.baseversion",       (0, 1, 0),   Hex(2), NONE),
    spec!(E, "Management class",   "infiniband.mad.mgmtclass",         (1, 1, 0),   Hex(2), M::MgmtClass),
    spec!(E, "Class version",      "infiniband.mad.classversion",      (2, 1, 0),   Dec,    NONE),
    spec!(E, "Method",             "infiniband.mad.method",            (3, 1, 0),   Hex(2), M::MadMethod),
    spec!(D, "Status",             "infiniband.mad.status",            (4, 2, 0),   Hex(4), NONE),
    spec!(D, "Class specific",     "infiniband.mad.classspecific",     (6, 2, 0),   Hex(4), NONE),
    spec!(E, "Transaction ID",     "infiniband.mad.transactionid",     (8, 8, 0),   Hex(16), NONE),
    spec!(E, "Attribute ID",       "infiniband.mad.attributeid",       (16, 2, 0),  Hex(4), M::CmAttribute),
    spec!(D, "Reserved",           "roce.mad.reserved",                (18, 2, 0),  Hex(4), NONE),
    spec!(D, "Attribute modifier", "infiniband.mad.attributemodifier", (20, 4, 0),  Hex(8), NONE),
    spec!(D, "MAD data",           "infiniband.mad.data",              (24, 232, 0), Bytes, NONE),
];

/// A REQ up to its primary path.
#[rustfmt::skip]
pub(super) const REQ: &[Spec] = &[
    spec!(E, "Local communication ID",     "infiniband.cm.req",                (0, 4, 0),     Hex(8),  NONE),
    spec!(D, "Reserved",                   "roce.cm.req.reserved",             (4, 4, 0),     Hex(8),  NONE),
    spec!(E, "Service ID",                 "infiniband.cm.req.serviceid",      (8, 8, 0),     Hex(16), M::ServiceId),
];

/// The service ID of the RDMA CM, in the pieces tshark shows (after the whole).
#[rustfmt::skip]
pub(super) const REQ_IP_SERVICE_ID: &[Spec] = &[
    spec!(D, "Service ID prefix",          "infiniband.cm.req.serviceid.prefix",   (8, 5, 0),  Bytes,  NONE),
    spec!(E, "Port space protocol",        "infiniband.cm.req.serviceid.protocol", (13, 1, 0), Hex(2), M::PortSpaceLow),
    spec!(E, "Destination port",           "infiniband.cm.req.serviceid.dport",    (14, 2, 0), Dec,    NONE),
];

#[rustfmt::skip]
pub(super) const REQ_QP: &[Spec] = &[
    spec!(E, "Local CA GUID",              "infiniband.cm.req.localcaguid",    (16, 8, 0),    Hex(16), NONE),
    spec!(D, "Reserved",                   "roce.cm.req.reserved2",            (24, 4, 0),    Hex(8),  NONE),
    spec!(E, "Local Q_Key",                "infiniband.cm.req.localqkey",      (28, 4, 0),    Hex(8),  NONE),
    spec!(E, "Local QPN",                  "infiniband.cm.req.localqpn",       (32, 3, 0),    Hex(6),  NONE),
    spec!(E, "Responder resources",        "infiniband.cm.req.responderres",   (35, 1, 0),    Dec,     NONE),
    spec!(E, "Local EECN",                 "infiniband.cm.req.localeecn",      (36, 3, 0),    Hex(6),  NONE),
    spec!(E, "Initiator depth",            "infiniband.cm.req.initdepth",      (39, 1, 0),    Dec,     NONE),
    spec!(E, "Remote EECN",                "infiniband.cm.req.remoteeecn",     (40, 3, 0),    Hex(6),  NONE),
    spec!(E, "Remote CM response timeout", "infiniband.cm.req.remoteresptout", (43, 1, 0xf8), Dec,     M::Timeout),
    spec!(E, "Transport service type",     "infiniband.cm.req.transpsvctype",  (43, 1, 0x06), Dec,     M::ServiceType),
    spec!(E, "End-to-end flow control",    "infiniband.cm.req.e2eflowctrl",    (43, 1, 0x01), Flag,    NONE),
    spec!(E, "Starting PSN",               "infiniband.cm.req.startpsn",       (44, 3, 0),    Dec,     NONE),
    spec!(E, "Local CM response timeout",  "infiniband.cm.req.localresptout",  (47, 1, 0xf8), Dec,     M::Timeout),
    spec!(E, "Retry count",                "infiniband.cm.req.retrcount",      (47, 1, 0x07), Dec,     NONE),
    spec!(E, "P_Key",                      "infiniband.cm.req.pkey",           (48, 2, 0),    Hex(4),  NONE),
    spec!(E, "Path MTU",                   "infiniband.cm.req.pppmtu",         (50, 1, 0xf0), Dec,     M::Mtu),
    spec!(E, "RDC exists",                 "infiniband.cm.req.rdcexist",       (50, 1, 0x08), Flag,    NONE),
    spec!(E, "RNR retry count",            "infiniband.cm.req.rnrretrcount",   (50, 1, 0x07), Dec,     M::RnrRetry),
    spec!(E, "Max CM retries",             "infiniband.cm.req.maxcmretr",      (51, 1, 0xf0), Dec,     NONE),
    spec!(E, "SRQ",                        "infiniband.cm.req.srq",            (51, 1, 0x08), Flag,    NONE),
    spec!(E, "Extended transport type",    "infiniband.cm.req.ext_transport",  (51, 1, 0x07), Dec,     NONE),
];

/// Declares the rows of one REQ path (44 bytes from `$at`), its GIDs as IPv4 or IPv6.
macro_rules! path_rows {
    ($at:expr, $p:literal, $name:literal, $local_gid:expr, $remote_gid:expr) => {
        [
            spec!(
                E,
                concat!($name, " local port LID"),
                concat!("infiniband.cm.req.", $p, "_locallid"),
                ($at, 2, 0),
                Hex(4),
                NONE
            ),
            spec!(
                E,
                concat!($name, " remote port LID"),
                concat!("infiniband.cm.req.", $p, "_remotelid"),
                ($at + 2, 2, 0),
                Hex(4),
                NONE
            ),
            $local_gid,
            $remote_gid,
            spec!(
                E,
                concat!($name, " flow label"),
                concat!("infiniband.cm.req.", $p, "_flowlabel"),
                ($at + 36, 4, 0xffff_f000),
                Hex(5),
                NONE
            ),
            spec!(
                D,
                "Reserved",
                concat!("roce.cm.req.", $p, "_reserved0"),
                ($at + 36, 4, 0xfc0),
                Dec,
                NONE
            ),
            spec!(
                E,
                concat!($name, " packet rate"),
                concat!("infiniband.cm.req.", $p, "_pktrate"),
                ($at + 36, 4, 0x3f),
                Dec,
                M::Rate
            ),
            spec!(
                E,
                concat!($name, " traffic class"),
                concat!("infiniband.cm.req.", $p, "_tfcclass"),
                ($at + 40, 1, 0),
                Hex(2),
                NONE
            ),
            spec!(
                E,
                concat!($name, " hop limit"),
                concat!("infiniband.cm.req.", $p, "_hoplim"),
                ($at + 41, 1, 0),
                Dec,
                NONE
            ),
            spec!(
                E,
                concat!($name, " SL"),
                concat!("infiniband.cm.req.", $p, "_sl"),
                ($at + 42, 1, 0xf0),
                Dec,
                NONE
            ),
            spec!(
                E,
                concat!($name, " subnet local"),
                concat!("infiniband.cm.req.", $p, "_subnetlocal"),
                ($at + 42, 1, 0x08),
                Flag,
                NONE
            ),
            spec!(
                D,
                "Reserved",
                concat!("infiniband.cm.req.", $p, "_reserved1"),
                ($at + 42, 1, 0x07),
                Dec,
                NONE
            ),
            spec!(
                E,
                concat!($name, " local ACK timeout"),
                concat!("infiniband.cm.req.", $p, "_localacktout"),
                ($at + 43, 1, 0xf8),
                Dec,
                M::Timeout
            ),
        ]
    };
}

/// The primary path, for a REQ in a RoCEv2-over-IPv4 frame: tshark shows the GIDs' last four
/// bytes as IPv4 addresses there.
#[rustfmt::skip]
pub(super) static PRIMARY_PATH_IPV4: [Spec; 13] = path_rows!(52, "prim", "Primary",
    spec!(E, "Primary local port GID",  "infiniband.cm.req.prim_localgid_ipv4",  (68, 4, 0), Ipv4, NONE),
    spec!(E, "Primary remote port GID", "infiniband.cm.req.prim_remotegid_ipv4", (84, 4, 0), Ipv4, NONE));

#[rustfmt::skip]
pub(super) static PRIMARY_PATH_IPV6: [Spec; 13] = path_rows!(52, "prim", "Primary",
    spec!(E, "Primary local port GID",  "infiniband.cm.req.prim_localgid",  (56, 16, 0), Ipv6, NONE),
    spec!(E, "Primary remote port GID", "infiniband.cm.req.prim_remotegid", (72, 16, 0), Ipv6, NONE));

#[rustfmt::skip]
pub(super) static PRIMARY_RESERVED: Spec =
    spec!(D, "Reserved", "infiniband.cm.req.prim_reserved2", (95, 1, 0x07), Dec, NONE);

#[rustfmt::skip]
pub(super) static ALTERNATE_PATH: [Spec; 13] = path_rows!(96, "alt", "Alternate",
    spec!(E, "Alternate local port GID",  "infiniband.cm.req.alt_localgid",  (100, 16, 0), Ipv6, NONE),
    spec!(E, "Alternate remote port GID", "infiniband.cm.req.alt_remotegid", (116, 16, 0), Ipv6, NONE));

#[rustfmt::skip]
pub(super) const ALTERNATE_END: &[Spec] = &[
    spec!(E, "SAP supported", "roce.cm.req.sap_supported", (139, 1, 0x04), Flag, NONE),
    spec!(D, "Reserved",      "roce.cm.req.alt_reserved2", (139, 1, 0x03), Dec,  NONE),
];

#[rustfmt::skip]
pub(super) static REQ_PRIVATE: Spec =
    spec!(D, "Private data", "infiniband.cm.req.private", (140, 92, 0), Bytes, NONE);

/// Declares the rows of the RDMA CM header at `$at` and the user's private data after it, up
/// to `$end`, its addresses IPv4 (`4`) or IPv6 (`6`).
macro_rules! ip_cm_rows {
    ($at:expr, $end:expr, $k:literal, 4) => {
        ip_cm_rows!(@rows $at, $end, $k,
            spec!(E, "Source IP",      concat!($k, ".ip_cm.sip4"), ($at + 16, 4, 0), Ipv4, NONE),
            spec!(E, "Destination IP", concat!($k, ".ip_cm.dip4"), ($at + 32, 4, 0), Ipv4, NONE))
    };
    ($at:expr, $end:expr, $k:literal, 6) => {
        ip_cm_rows!(@rows $at, $end, $k,
            spec!(E, "Source IP",      concat!($k, ".ip_cm.sip6"), ($at + 4, 16, 0),  Ipv6, NONE),
            spec!(E, "Destination IP", concat!($k, ".ip_cm.dip6"), ($at + 20, 16, 0), Ipv6, NONE))
    };
    (@rows $at:expr, $end:expr, $k:literal, $src:expr, $dst:expr) => {
        [
            spec!(D, "RDMA CM private data",   concat!($k, ".ip_cm"),          ($at, $end - $at, 0), Bytes, NONE),
            spec!(E, "RDMA CM major version",  concat!($k, ".ip_cm.majv"),     ($at, 1, 0xf0),       Dec,   NONE),
            spec!(E, "RDMA CM minor version",  concat!($k, ".ip_cm.minv"),     ($at, 1, 0x0f),       Dec,   NONE),
            spec!(E, "IP version",             concat!($k, ".ip_cm.ipv"),      ($at + 1, 1, 0xf0),   Dec,   NONE),
            spec!(D, "Reserved",               concat!($k, ".ip_cm.reserved"), ($at + 1, 1, 0x0f),   Dec,   NONE),
            spec!(E, "Source port",            concat!($k, ".ip_cm.sport"),    ($at + 2, 2, 0),      Dec,   NONE),
            $src,
            $dst,
            spec!(E, "User's private data",    concat!($k, ".ip_cm.private"),  ($at + 36, $end - $at - 36, 0), Bytes, NONE),
        ]
    };
}

#[rustfmt::skip]
pub(super) static REQ_IP_CM_V4: [Spec; 9] = ip_cm_rows!(140, 232, "infiniband.cm.req", 4);
#[rustfmt::skip]
pub(super) static REQ_IP_CM_V6: [Spec; 9] = ip_cm_rows!(140, 232, "infiniband.cm.req", 6);

#[rustfmt::skip]
pub(super) const MRA: &[Spec] = &[
    spec!(E, "Local communication ID",  "roce.cm.mra.localcommid",    (0, 4, 0),    Hex(8), NONE),
    spec!(E, "Remote communication ID", "roce.cm.mra.remotecommid",   (4, 4, 0),    Hex(8), NONE),
    spec!(E, "Message MRAed",           "roce.cm.mra.msgmraed",       (8, 1, 0xc0), Dec,    M::MraMessage),
    spec!(D, "Reserved",                "roce.cm.mra.reserved0",      (8, 1, 0x3f), Dec,    NONE),
    spec!(E, "Service timeout",         "roce.cm.mra.servicetimeout", (9, 1, 0xf8), Dec,    M::Timeout),
    spec!(D, "Reserved",                "roce.cm.mra.reserved1",      (9, 1, 0x07), Dec,    NONE),
    spec!(D, "Private data",            "roce.cm.mra.private",        (10, 222, 0), Bytes,  NONE),
];

#[rustfmt::skip]
pub(super) const REJ: &[Spec] = &[
    spec!(E, "Local communication ID",  "infiniband.cm.rej.localcommid",  (0, 4, 0),    Hex(8), NONE),
    spec!(E, "Remote communication ID", "infiniband.cm.rej.remotecommid", (4, 4, 0),    Hex(8), NONE),
    spec!(E, "Message rejected",        "infiniband.cm.rej.msgrej",       (8, 1, 0xc0), Dec,    M::RejMessage),
    spec!(D, "Reserved",                "roce.cm.rej.reserved0",          (8, 1, 0x3f), Dec,    NONE),
    spec!(E, "Reject info length",      "infiniband.cm.rej.rejinfolen",   (9, 1, 0xfe), Dec,    NONE),
    spec!(D, "Reserved",                "infiniband.cm.rej.reserved1",    (9, 1, 0x01), Dec,    NONE),
    spec!(E, "Reason",                  "infiniband.cm.rej.reason",       (10, 2, 0),   Dec,    M::RejReason),
    spec!(D, "Additional reject information", "infiniband.cm.rej.ari",    (12, 72, 0),  Bytes,  NONE),
    spec!(D, "Private data",            "infiniband.cm.rej.private",      (84, 148, 0), Bytes,  NONE),
];

#[rustfmt::skip]
pub(super) const REP: &[Spec] = &[
    spec!(E, "Local communication ID",  "infiniband.cm.rep",              (0, 4, 0),     Hex(8),  NONE),
    spec!(E, "Remote communication ID", "infiniband.cm.rep.remotecommid", (4, 4, 0),     Hex(8),  NONE),
    spec!(E, "Local Q_Key",             "infiniband.cm.rep.localqkey",    (8, 4, 0),     Hex(8),  NONE),
    spec!(E, "Local QPN",               "infiniband.cm.rep.localqpn",     (12, 3, 0),    Hex(6),  NONE),
    spec!(D, "Reserved",                "roce.cm.rep.reserved0",          (15, 1, 0),    Hex(2),  NONE),
    spec!(E, "Local EECN",              "infiniband.cm.rep.localeecn",    (16, 3, 0),    Hex(6),  NONE),
    spec!(D, "Reserved",                "roce.cm.rep.reserved1",          (19, 1, 0),    Hex(2),  NONE),
    spec!(E, "Starting PSN",            "infiniband.cm.rep.startpsn",     (20, 3, 0),    Dec,     NONE),
    spec!(D, "Reserved",                "roce.cm.rep.reserved2",          (23, 1, 0),    Hex(2),  NONE),
    spec!(E, "Responder resources",     "infiniband.cm.rep.respres",      (24, 1, 0),    Dec,     NONE),
    spec!(E, "Initiator depth",         "infiniband.cm.rep.initdepth",    (25, 1, 0),    Dec,     NONE),
    spec!(E, "Target ACK delay",        "infiniband.cm.rep.tgtackdelay",  (26, 1, 0xf8), Dec,     M::Timeout),
    spec!(E, "Failover accepted",       "infiniband.cm.rep.failoveracc",  (26, 1, 0x06), Dec,     M::Failover),
    spec!(E, "End-to-end flow control", "infiniband.cm.rep.e2eflowctrl",  (26, 1, 0x01), Flag,    NONE),
    spec!(E, "RNR retry count",         "infiniband.cm.rep.rnrretrcount", (27, 1, 0xe0), Dec,     M::RnrRetry),
    spec!(E, "SRQ",                     "infiniband.cm.rep.srq",          (27, 1, 0x10), Flag,    NONE),
    spec!(D, "Reserved",                "infiniband.cm.rep.reserved",     (27, 1, 0x0f), Dec,     NONE),
    spec!(E, "Local CA GUID",           "infiniband.cm.rep.localcaguid",  (28, 8, 0),    Hex(16), NONE),
    spec!(D, "Private data",            "infiniband.cm.rep.private",      (36, 196, 0),  Bytes,   NONE),
];

#[rustfmt::skip]
pub(super) const RTU: &[Spec] = &[
    spec!(E, "Local communication ID",  "infiniband.cm.rtu.localcommid",  (0, 4, 0),   Hex(8), NONE),
    spec!(E, "Remote communication ID", "infiniband.cm.rtu.remotecommid", (4, 4, 0),   Hex(8), NONE),
    spec!(D, "Private data",            "infiniband.cm.rtu.private",      (8, 224, 0), Bytes,  NONE),
];

#[rustfmt::skip]
pub(super) const DREQ: &[Spec] = &[
    spec!(E, "Local communication ID",  "infiniband.cm.dreq.localcommid",  (0, 4, 0),    Hex(8), NONE),
    spec!(E, "Remote communication ID", "infiniband.cm.dreq.remotecommid", (4, 4, 0),    Hex(8), NONE),
    spec!(E, "Remote QPN",              "infiniband.cm.req.remoteqpneecn", (8, 3, 0),    Hex(6), NONE),
    spec!(D, "Reserved",                "roce.cm.dreq.reserved",           (11, 1, 0),   Hex(2), NONE),
    spec!(D, "Private data",            "infiniband.cm.dreq.private",      (12, 220, 0), Bytes,  NONE),
];

#[rustfmt::skip]
pub(super) const DREP: &[Spec] = &[
    spec!(E, "Local communication ID",  "infiniband.cm.drsp.localcommid",  (0, 4, 0),   Hex(8), NONE),
    spec!(E, "Remote communication ID", "infiniband.cm.drsp.remotecommid", (4, 4, 0),   Hex(8), NONE),
    spec!(D, "Private data",            "infiniband.cm.drsp.private",      (8, 224, 0), Bytes,  NONE),
];

#[rustfmt::skip]
pub(super) const SIDR_REQ: &[Spec] = &[
    spec!(E, "Request ID", "roce.cm.sidr_req.requestid", (0, 4, 0), Hex(8),  NONE),
    spec!(E, "P_Key",      "roce.cm.sidr_req.pkey",      (4, 2, 0), Hex(4),  NONE),
    spec!(D, "Reserved",   "roce.cm.sidr_req.reserved",  (6, 2, 0), Hex(4),  NONE),
    spec!(E, "Service ID", "roce.cm.sidr_req.serviceid", (8, 8, 0), Hex(16), M::ServiceId),
];

#[rustfmt::skip]
pub(super) static SIDR_REQ_PRIVATE: Spec =
    spec!(D, "Private data", "roce.cm.sidr_req.private", (16, 216, 0), Bytes, NONE);
#[rustfmt::skip]
pub(super) static SIDR_REQ_IP_CM_V4: [Spec; 9] = ip_cm_rows!(16, 232, "roce.cm.sidr_req", 4);
#[rustfmt::skip]
pub(super) static SIDR_REQ_IP_CM_V6: [Spec; 9] = ip_cm_rows!(16, 232, "roce.cm.sidr_req", 6);

#[rustfmt::skip]
pub(super) const SIDR_REP: &[Spec] = &[
    spec!(E, "Request ID",             "roce.cm.sidr_rep.requestid", (0, 4, 0),    Hex(8),  NONE),
    spec!(E, "Status",                 "roce.cm.sidr_rep.status",    (4, 1, 0),    Dec,     M::SidrStatus),
    spec!(E, "Additional information length", "roce.cm.sidr_rep.addinfolen", (5, 1, 0), Dec, NONE),
    spec!(D, "Reserved",               "roce.cm.sidr_rep.reserved0", (6, 2, 0),    Hex(4),  NONE),
    spec!(E, "QPN",                    "roce.cm.sidr_rep.qpn",       (8, 3, 0),    Hex(6),  NONE),
    spec!(D, "Reserved",               "roce.cm.sidr_rep.reserved1", (11, 1, 0),   Hex(2),  NONE),
    spec!(E, "Service ID",             "roce.cm.sidr_rep.serviceid", (12, 8, 0),   Hex(16), M::ServiceId),
    spec!(E, "Q_Key",                  "roce.cm.sidr_rep.qkey",      (20, 4, 0),   Hex(8),  NONE),
    spec!(D, "Additional information", "roce.cm.sidr_rep.addinfo",   (24, 72, 0),  Bytes,   NONE),
    spec!(D, "Private data",           "roce.cm.sidr_rep.private",   (96, 136, 0), Bytes,   NONE),
];

/// Every table of this file, for listing the keys.
pub(super) fn all() -> impl Iterator<Item = &'static Spec> {
    let tables: [&'static [Spec]; 23] = [
        MAD,
        REQ,
        REQ_IP_SERVICE_ID,
        REQ_QP,
        &PRIMARY_PATH_IPV4,
        &PRIMARY_PATH_IPV6,
        core::slice::from_ref(&PRIMARY_RESERVED),
        &ALTERNATE_PATH,
        ALTERNATE_END,
        core::slice::from_ref(&REQ_PRIVATE),
        &REQ_IP_CM_V4,
        &REQ_IP_CM_V6,
        MRA,
        REJ,
        REP,
        RTU,
        DREQ,
        DREP,
        SIDR_REQ,
        core::slice::from_ref(&SIDR_REQ_PRIVATE),
        &SIDR_REQ_IP_CM_V4,
        &SIDR_REQ_IP_CM_V6,
        SIDR_REP,
    ];
    tables.into_iter().flatten()
}

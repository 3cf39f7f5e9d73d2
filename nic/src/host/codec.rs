//! Control requests, answers and errors as bytes, for the NIC's socket.
//!
//! A hand-written binary codec rather than serde: the values are made of types owned by other
//! crates (smoltcp's `EthernetAddress`, hostmem's `Access`, ...), shared memory and event lines
//! travel as descriptors beside the bytes (the receiver maps a region's descriptor itself,
//! after checking it: see [`Map`]), and every decoded value goes through the same checks as its
//! typed constructor (`Access::from_bits`, `Mtu::from_u8`, ...), so a request the NIC reads is
//! one the verbs API could have made.
//!
//! Layout: a one-byte tag per enum, then the fields in declaration order (see
//! [`super::wire_format`] for the primitives).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use roce_hostmem::{Access, MrKeys, Region, VaBase};

use roce_wire::EthernetAddress;

use super::wire_format::{code, DecodeError, Reader, Writer};
use crate::control::{DeviceInfo, QpStatus, Request, Response, RingMap};
use crate::counters::Snapshot;
use crate::cq::EventLine;
use crate::limits::Limits;
use crate::ring::Geometry;
use crate::verbs::types::{AddressVector, Gid, Mtu, QpAttr, QpCap, QpState, QpType};
use crate::verbs::VerbsError;

/// Most GIDs a device description may list.
const MAX_GIDS: usize = 64;
/// Most counters a snapshot may carry.
const MAX_COUNTERS: usize = 1024;

/// Maps a region's descriptor that came with a message (the NIC: a host's memory; a host: the
/// NIC's rings), after whatever checks the receiver makes.
pub type Map<'a> = dyn FnMut(OwnedFd) -> Result<Arc<Region>, VerbsError> + 'a;

/// The descriptor of a region, which must have one to cross to another process.
fn region_fd<'a>(region: &'a Region, what: &str) -> Result<BorrowedFd<'a>, VerbsError> {
    region
        .fd()
        .ok_or_else(|| VerbsError::Invalid(what.to_owned()))
}

/// Encodes a request. A region crosses as its descriptor, which the NIC maps.
pub fn put_request<'a>(w: &mut Writer<'a>, request: &'a Request) -> Result<(), VerbsError> {
    match request {
        Request::QueryDevice => w.u8(0),
        Request::AllocPd => w.u8(1),
        Request::DeallocPd { pd } => {
            w.u8(2);
            w.u32(*pd);
        }
        Request::RegMr {
            pd,
            region,
            offset,
            len,
            access,
            va,
        } => {
            let fd = region_fd(
                region,
                "only shared memory (Region::shared or Region::create) can be registered with a \
                 NIC in another process",
            )?;
            w.u8(3);
            w.u32(*pd);
            w.fd(fd);
            w.u64(*offset as u64);
            w.u64(*len as u64);
            w.u32(access.bits());
            put_va(w, *va);
        }
        Request::DeregMr { lkey } => {
            w.u8(4);
            w.u32(*lkey);
        }
        Request::CreateCq { entries } => {
            w.u8(5);
            w.u32(*entries);
        }
        Request::DestroyCq { cq } => {
            w.u8(6);
            w.u32(*cq);
        }
        Request::CreateQp {
            pd,
            qp_type,
            send_cq,
            recv_cq,
            cap,
            sq_sig_all,
        } => {
            w.u8(7);
            w.u32(*pd);
            w.u8(*qp_type as u8);
            w.u32(*send_cq);
            w.u32(*recv_cq);
            put_cap(w, cap);
            w.bool(*sq_sig_all);
        }
        Request::ModifyQp { qpn, attr } => {
            w.u8(8);
            w.u32(*qpn);
            put_attr(w, attr);
        }
        Request::QueryQp { qpn } => {
            w.u8(9);
            w.u32(*qpn);
        }
        Request::DestroyQp { qpn } => {
            w.u8(10);
            w.u32(*qpn);
        }
        Request::CreateAh { pd, av } => {
            w.u8(11);
            w.u32(*pd);
            put_av(w, av);
        }
        Request::DestroyAh { ah } => {
            w.u8(12);
            w.u32(*ah);
        }
        Request::Counters => w.u8(13),
        Request::Disconnect => w.u8(14),
        Request::OpenGsi {
            pd,
            send_cq,
            recv_cq,
            cap,
        } => {
            w.u8(15);
            w.u32(*pd);
            w.u32(*send_cq);
            w.u32(*recv_cq);
            put_cap(w, cap);
        }
        Request::QpStatus { qpn } => {
            w.u8(16);
            w.u32(*qpn);
        }
        Request::TcpConnect { addr } => {
            w.u8(17);
            put_socket_addr(w, addr);
        }
        Request::TcpListen { port } => {
            w.u8(18);
            w.u16(*port);
        }
        Request::TcpAccept { port, timeout } => {
            w.u8(19);
            w.u16(*port);
            w.opt(*timeout, |w, t| {
                w.u64(t.as_secs());
                w.u32(t.subsec_nanos());
            });
        }
        Request::TcpUnlisten { port } => {
            w.u8(20);
            w.u16(*port);
        }
        Request::BindHost { .. } => {
            return Err(VerbsError::Invalid(
                "a host is numbered by the NIC's control socket, not by itself".into(),
            ))
        }
    }
    Ok(())
}

/// Decodes a request, mapping the region it passes with `map`.
pub fn get_request(r: &mut Reader<'_>, map: &mut Map<'_>) -> Result<Request, VerbsError> {
    Ok(match r.u8()? {
        0 => Request::QueryDevice,
        1 => Request::AllocPd,
        2 => Request::DeallocPd { pd: r.u32()? },
        3 => Request::RegMr {
            pd: r.u32()?,
            region: map(r.fd()?)?,
            offset: r.usize("offset")?,
            len: r.usize("length")?,
            access: get_access(r)?,
            va: get_va(r)?,
        },
        4 => Request::DeregMr { lkey: r.u32()? },
        5 => Request::CreateCq { entries: r.u32()? },
        6 => Request::DestroyCq { cq: r.u32()? },
        7 => Request::CreateQp {
            pd: r.u32()?,
            qp_type: code(r.u8()?, "QP type", QpType::from_u8)?,
            send_cq: r.u32()?,
            recv_cq: r.u32()?,
            cap: get_cap(r)?,
            sq_sig_all: r.bool()?,
        },
        8 => Request::ModifyQp {
            qpn: r.u32()?,
            attr: get_attr(r)?,
        },
        9 => Request::QueryQp { qpn: r.u32()? },
        10 => Request::DestroyQp { qpn: r.u32()? },
        11 => Request::CreateAh {
            pd: r.u32()?,
            av: get_av(r)?,
        },
        12 => Request::DestroyAh { ah: r.u32()? },
        13 => Request::Counters,
        14 => Request::Disconnect,
        15 => Request::OpenGsi {
            pd: r.u32()?,
            send_cq: r.u32()?,
            recv_cq: r.u32()?,
            cap: get_cap(r)?,
        },
        16 => Request::QpStatus { qpn: r.u32()? },
        17 => Request::TcpConnect {
            addr: get_socket_addr(r)?,
        },
        18 => Request::TcpListen { port: r.u16()? },
        19 => Request::TcpAccept {
            port: r.u16()?,
            timeout: r.opt(get_duration)?,
        },
        20 => Request::TcpUnlisten { port: r.u16()? },
        tag => return Err(invalid("request", tag).into()),
    })
}

/// Encodes an answer. Ring memory and event lines go as descriptors.
pub fn put_response<'a>(w: &mut Writer<'a>, response: &'a Response) -> Result<(), VerbsError> {
    match response {
        Response::Device(d) => {
            w.u8(0);
            w.str(&d.name);
            w.raw(&d.mac.0);
            w.u16(d.gids.len().min(MAX_GIDS) as u16);
            for gid in d.gids.iter().take(MAX_GIDS) {
                w.raw(&gid.0);
            }
            w.u8(d.max_mtu as u8);
            w.u32(d.max_qp_wr);
            w.u32(d.max_sge);
            w.u32(d.max_inline);
            w.u32(d.max_cqe);
            w.u8(d.max_qp_rd_atom);
            let limits = d.limits.to_vec();
            w.u16(limits.len() as u16);
            for v in limits {
                w.u64(v);
            }
        }
        Response::Pd(pd) => {
            w.u8(1);
            w.u32(*pd);
        }
        Response::Mr(keys) => {
            w.u8(2);
            w.u32(keys.lkey);
            w.u32(keys.rkey);
            w.u64(keys.va);
            w.u64(keys.len);
        }
        Response::Cq { cq, ring, event } => {
            w.u8(3);
            w.u32(*cq);
            put_ring(w, ring)?;
            w.fd(event.as_fd());
        }
        Response::Qp { qpn, cap, sq, rq } => {
            if !Arc::ptr_eq(&sq.region, &rq.region) {
                return Err(VerbsError::Invalid(
                    "a QP's two rings must share one region to cross".into(),
                ));
            }
            w.u8(4);
            w.u32(*qpn);
            put_cap(w, cap);
            put_ring(w, sq)?;
            put_geometry(w, &rq.geometry);
        }
        Response::QpAttr(attr) => {
            w.u8(5);
            put_attr(w, attr);
        }
        Response::Ah(ah) => {
            w.u8(6);
            w.u32(*ah);
        }
        Response::Counters(snapshot) => {
            w.u8(7);
            let values = snapshot.to_vec();
            w.u16(values.len() as u16);
            for v in values {
                w.u64(v);
            }
        }
        Response::Done => w.u8(8),
        Response::QpStatus(status) => {
            w.u8(9);
            w.u32(status.sends_outstanding);
            w.u32(status.reads_outstanding);
            w.u32(status.replies_pending);
            w.bool(status.receive_in_progress);
            w.bool(status.retransmit_timer_armed);
            w.bool(status.rnr_waiting);
        }
        Response::TcpStream { stream, peer } => {
            w.u8(10);
            w.fd(stream.as_fd());
            put_socket_addr(w, peer);
        }
        Response::Listening { port } => {
            w.u8(11);
            w.u16(*port);
        }
    }
    Ok(())
}

/// Decodes an answer, mapping the regions it passes with `attach`.
pub fn get_response(r: &mut Reader<'_>, attach: &mut Map<'_>) -> Result<Response, VerbsError> {
    Ok(match r.u8()? {
        0 => {
            let name = r.str()?;
            let mac = EthernetAddress(r.raw()?);
            let n = usize::from(r.u16()?);
            if n > MAX_GIDS {
                return Err(invalid("GID count", n as u64).into());
            }
            let gids = (0..n)
                .map(|_| r.raw().map(Gid))
                .collect::<Result<Vec<_>, _>>()?;
            Response::Device(DeviceInfo {
                name,
                mac,
                gids,
                max_mtu: code(r.u8()?, "MTU", Mtu::from_u8)?,
                max_qp_wr: r.u32()?,
                max_sge: r.u32()?,
                max_inline: r.u32()?,
                max_cqe: r.u32()?,
                max_qp_rd_atom: r.u8()?,
                limits: {
                    let n = usize::from(r.u16()?);
                    let values = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
                    Limits::from_slice(&values).ok_or(invalid("limit count", n as u64))?
                },
            })
        }
        1 => Response::Pd(r.u32()?),
        2 => Response::Mr(MrKeys {
            lkey: r.u32()?,
            rkey: r.u32()?,
            va: r.u64()?,
            len: r.u64()?,
        }),
        3 => Response::Cq {
            cq: r.u32()?,
            ring: get_ring(r, attach)?,
            event: EventLine::from_fd(r.fd()?),
        },
        4 => {
            let qpn = r.u32()?;
            let cap = get_cap(r)?;
            // Both queues of a QP share one region, mapped once.
            let sq = get_ring(r, attach)?;
            let rq = RingMap {
                region: Arc::clone(&sq.region),
                geometry: get_geometry(r)?,
            };
            Response::Qp { qpn, cap, sq, rq }
        }
        5 => Response::QpAttr(get_attr(r)?),
        6 => Response::Ah(r.u32()?),
        7 => {
            let n = usize::from(r.u16()?);
            if n > MAX_COUNTERS {
                return Err(invalid("counter count", n as u64).into());
            }
            let values = (0..n).map(|_| r.u64()).collect::<Result<Vec<_>, _>>()?;
            Response::Counters(Box::new(Snapshot::from_slice(&values)))
        }
        8 => Response::Done,
        9 => Response::QpStatus(QpStatus {
            sends_outstanding: r.u32()?,
            reads_outstanding: r.u32()?,
            replies_pending: r.u32()?,
            receive_in_progress: r.bool()?,
            retransmit_timer_armed: r.bool()?,
            rnr_waiting: r.bool()?,
        }),
        10 => Response::TcpStream {
            stream: UnixStream::from(r.fd()?),
            peer: get_socket_addr(r)?,
        },
        11 => Response::Listening { port: r.u16()? },
        tag => return Err(invalid("answer", tag).into()),
    })
}

/// The kinds of I/O error that cross as themselves (the port's TCP fails like the socket calls
/// it stands for: refused, timed out, reset...); others arrive as `Other`. The index is the
/// code on the wire, so the list only grows at its end.
const IO_KINDS: [io::ErrorKind; 14] = [
    io::ErrorKind::Other,
    io::ErrorKind::NotFound,
    io::ErrorKind::PermissionDenied,
    io::ErrorKind::ConnectionRefused,
    io::ErrorKind::ConnectionReset,
    io::ErrorKind::ConnectionAborted,
    io::ErrorKind::NotConnected,
    io::ErrorKind::AddrInUse,
    io::ErrorKind::AddrNotAvailable,
    io::ErrorKind::BrokenPipe,
    io::ErrorKind::WouldBlock,
    io::ErrorKind::InvalidInput,
    io::ErrorKind::TimedOut,
    io::ErrorKind::NetworkUnreachable,
];

/// Encodes an error as its kind and sentence. The structured errors whose parts are static
/// (which object, what is busy) keep their kind; the others arrive as their sentence, the same
/// one the in-process API gives.
pub fn put_error(w: &mut Writer<'_>, error: &VerbsError) {
    match error {
        VerbsError::NoSuchObject { kind, id } => {
            w.u8(0);
            w.str(kind);
            w.u32(*id);
        }
        VerbsError::Busy(what) => {
            w.u8(1);
            w.str(what);
        }
        VerbsError::SendQueueFull(n) => {
            w.u8(2);
            w.u32(*n);
        }
        VerbsError::RecvQueueFull(n) => {
            w.u8(3);
            w.u32(*n);
        }
        VerbsError::DeviceGone { nic } => {
            w.u8(4);
            w.str(nic);
        }
        VerbsError::LimitReached { what, scope, limit } => {
            w.u8(7);
            w.str(what);
            w.str(scope);
            w.u64(*limit);
        }
        VerbsError::Io(e) => {
            w.u8(6);
            w.u8(IO_KINDS.iter().position(|k| *k == e.kind()).unwrap_or(0) as u8);
            w.str(&e.to_string());
        }
        other => {
            w.u8(5);
            w.str(&other.to_string());
            w.u32(other.errno() as u32);
        }
    }
}

pub fn get_error(r: &mut Reader<'_>) -> Result<VerbsError, DecodeError> {
    /// The names the engine uses; an unknown one keeps its sentence.
    const KINDS: [&str; 20] = [
        "protection domain",
        "memory registration",
        "completion queue",
        "QP",
        "address handle",
        "the completion queue",
        "the protection domain (a QP uses it)",
        "the protection domain (an address handle uses it)",
        "QP1 (the GSI)",
        "QPs",
        "completion queues",
        "memory registrations",
        "protection domains",
        "address handles",
        "bytes of rings",
        "NIC",
        "host",
        "the protection domain (a memory registration uses it)",
        "contexts",
        "connections",
    ];
    let known = |text: &str| KINDS.iter().copied().find(|k| *k == text);
    Ok(match r.u8()? {
        0 => {
            let kind = r.str()?;
            let id = r.u32()?;
            match known(&kind) {
                Some(kind) => VerbsError::NoSuchObject { kind, id },
                None => VerbsError::Invalid(format!("no {kind} {id:#x} in this context")),
            }
        }
        1 => {
            let what = r.str()?;
            match known(&what) {
                Some(what) => VerbsError::Busy(what),
                None => VerbsError::Invalid(format!("{what} is still in use")),
            }
        }
        2 => VerbsError::SendQueueFull(r.u32()?),
        3 => VerbsError::RecvQueueFull(r.u32()?),
        4 => VerbsError::DeviceGone { nic: r.str()? },
        5 => {
            let message = r.str()?;
            match r.u32()? as i32 {
                libc::EINVAL => VerbsError::Invalid(message),
                errno => VerbsError::Remote { errno, message },
            }
        }
        6 => {
            let kind = IO_KINDS
                .get(usize::from(r.u8()?))
                .copied()
                .unwrap_or(io::ErrorKind::Other);
            VerbsError::Io(io::Error::new(kind, r.str()?))
        }
        7 => {
            let (what, scope, limit) = (r.str()?, r.str()?, r.u64()?);
            match (known(&what), known(&scope)) {
                (Some(what), Some(scope)) => VerbsError::LimitReached { what, scope, limit },
                _ => {
                    VerbsError::Invalid(format!("the {scope}'s limit of {limit} {what} is reached"))
                }
            }
        }
        tag => return Err(invalid("error kind", tag)),
    })
}

fn invalid(what: &'static str, value: impl Into<u64>) -> DecodeError {
    DecodeError::Invalid {
        what,
        value: value.into(),
    }
}

impl From<DecodeError> for VerbsError {
    fn from(e: DecodeError) -> VerbsError {
        VerbsError::Invalid(format!("a control message could not be read: {e}"))
    }
}

fn put_socket_addr(w: &mut Writer<'_>, addr: &SocketAddr) {
    match addr {
        SocketAddr::V4(a) => {
            w.u8(4);
            w.raw(&a.ip().octets());
            w.u16(a.port());
        }
        SocketAddr::V6(a) => {
            w.u8(6);
            w.raw(&a.ip().octets());
            w.u16(a.port());
            w.u32(a.flowinfo());
            w.u32(a.scope_id());
        }
    }
}

fn get_socket_addr(r: &mut Reader<'_>) -> Result<SocketAddr, DecodeError> {
    Ok(match r.u8()? {
        4 => SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(r.raw::<4>()?), r.u16()?)),
        6 => SocketAddr::V6(SocketAddrV6::new(
            Ipv6Addr::from(r.raw::<16>()?),
            r.u16()?,
            r.u32()?,
            r.u32()?,
        )),
        family => return Err(invalid("address family", family)),
    })
}

fn get_duration(r: &mut Reader<'_>) -> Result<Duration, DecodeError> {
    let secs = r.u64()?;
    let nanos = r.u32()?;
    if nanos >= 1_000_000_000 {
        return Err(invalid("nanoseconds", nanos));
    }
    Ok(Duration::new(secs, nanos))
}

fn put_va(w: &mut Writer<'_>, va: VaBase) {
    match va {
        VaBase::Offset => w.u8(0),
        VaBase::Zero => w.u8(1),
        VaBase::At(at) => {
            w.u8(2);
            w.u64(at);
        }
    }
}

fn get_va(r: &mut Reader<'_>) -> Result<VaBase, DecodeError> {
    Ok(match r.u8()? {
        0 => VaBase::Offset,
        1 => VaBase::Zero,
        2 => VaBase::At(r.u64()?),
        tag => return Err(invalid("VA base", tag)),
    })
}

fn get_access(r: &mut Reader<'_>) -> Result<Access, DecodeError> {
    let bits = r.u32()?;
    Access::from_bits(bits).ok_or(invalid("access flags", bits))
}

fn put_cap(w: &mut Writer<'_>, cap: &QpCap) {
    w.u32(cap.max_send_wr);
    w.u32(cap.max_recv_wr);
    w.u32(cap.max_send_sge);
    w.u32(cap.max_recv_sge);
    w.u32(cap.max_inline_data);
}

fn get_cap(r: &mut Reader<'_>) -> Result<QpCap, DecodeError> {
    Ok(QpCap {
        max_send_wr: r.u32()?,
        max_recv_wr: r.u32()?,
        max_send_sge: r.u32()?,
        max_recv_sge: r.u32()?,
        max_inline_data: r.u32()?,
    })
}

fn put_av(w: &mut Writer<'_>, av: &AddressVector) {
    w.raw(&av.dgid.0);
    w.u8(av.sgid_index);
    w.u32(av.flow_label);
    w.u8(av.hop_limit);
    w.u8(av.traffic_class);
    w.opt(av.dmac, |w, mac| w.raw(&mac.0));
}

fn get_av(r: &mut Reader<'_>) -> Result<AddressVector, DecodeError> {
    Ok(AddressVector {
        dgid: Gid(r.raw()?),
        sgid_index: r.u8()?,
        flow_label: r.u32()?,
        hop_limit: r.u8()?,
        traffic_class: r.u8()?,
        dmac: r.opt(|r| r.raw().map(EthernetAddress))?,
    })
}

fn put_attr(w: &mut Writer<'_>, a: &QpAttr) {
    w.opt(a.qp_state, |w, v| w.u8(v as u8));
    w.opt(a.pkey_index, |w, v| w.u16(v));
    w.opt(a.port_num, |w, v| w.u8(v));
    w.opt(a.qp_access_flags, |w, v| w.u32(v.bits()));
    w.opt(a.qkey, |w, v| w.u32(v));
    w.opt(a.path_mtu, |w, v| w.u8(v as u8));
    w.opt(a.dest_qp_num, |w, v| w.u32(v));
    w.opt(a.rq_psn, |w, v| w.u32(v));
    w.opt(a.sq_psn, |w, v| w.u32(v));
    w.opt(a.av.as_ref(), put_av);
    for v in [
        a.timeout,
        a.retry_cnt,
        a.rnr_retry,
        a.min_rnr_timer,
        a.max_rd_atomic,
        a.max_dest_rd_atomic,
    ] {
        w.opt(v, |w, v| w.u8(v));
    }
}

fn get_attr(r: &mut Reader<'_>) -> Result<QpAttr, DecodeError> {
    Ok(QpAttr {
        qp_state: r.opt(|r| code(r.u8()?, "QP state", QpState::from_u8))?,
        pkey_index: r.opt(|r| r.u16())?,
        port_num: r.opt(|r| r.u8())?,
        qp_access_flags: r.opt(get_access)?,
        qkey: r.opt(|r| r.u32())?,
        path_mtu: r.opt(|r| code(r.u8()?, "MTU", Mtu::from_u8))?,
        dest_qp_num: r.opt(|r| r.u32())?,
        rq_psn: r.opt(|r| r.u32())?,
        sq_psn: r.opt(|r| r.u32())?,
        av: r.opt(get_av)?,
        timeout: r.opt(|r| r.u8())?,
        retry_cnt: r.opt(|r| r.u8())?,
        rnr_retry: r.opt(|r| r.u8())?,
        min_rnr_timer: r.opt(|r| r.u8())?,
        max_rd_atomic: r.opt(|r| r.u8())?,
        max_dest_rd_atomic: r.opt(|r| r.u8())?,
    })
}

fn put_ring<'a>(w: &mut Writer<'a>, ring: &'a RingMap) -> Result<(), VerbsError> {
    w.fd(region_fd(
        &ring.region,
        "this NIC keeps its rings in private memory and cannot serve other processes",
    )?);
    put_geometry(w, &ring.geometry);
    Ok(())
}

fn put_geometry(w: &mut Writer<'_>, geometry: &Geometry) {
    w.u64(geometry.offset as u64);
    w.u32(geometry.capacity);
    w.u64(geometry.slot_size as u64);
}

fn get_geometry(r: &mut Reader<'_>) -> Result<Geometry, DecodeError> {
    let geometry = Geometry {
        offset: r.usize("ring offset")?,
        capacity: r.u32()?,
        slot_size: r.usize("slot size")?,
    };
    // What `Geometry::new` would make; the ring itself checks that it fits its region.
    if !geometry.capacity.is_power_of_two() {
        return Err(invalid("ring capacity", geometry.capacity));
    }
    if geometry.slot_size == 0 || geometry.slot_size % 64 != 0 {
        return Err(invalid("ring slot size", geometry.slot_size as u64));
    }
    Ok(geometry)
}

fn get_ring(r: &mut Reader<'_>, attach: &mut Map<'_>) -> Result<RingMap, VerbsError> {
    let region = attach(r.fd()?)?;
    Ok(RingMap {
        region,
        geometry: get_geometry(r)?,
    })
}

#[cfg(test)]
mod tests;

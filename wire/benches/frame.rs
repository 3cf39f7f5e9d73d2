//! The data-path costs of a frame, measured against the floor: parsing the headers, checking the
//! ICRC of a parsed frame, both together, and emitting, for a 64-byte and a 4096-byte payload;
//! and raw `crc32fast` over the same bytes, which the ICRC check cannot beat.
//!
//! Targets on the project's 2-core machine: header parse at most 50 ns per packet; the ICRC
//! check of a 4 KiB frame at least 80% of raw crc32fast's throughput (masking costs little).
//!
//! `cargo bench -p roce-wire --bench frame`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use roce_wire::{
    bth, reth, EthernetAddress, EthernetRepr, Extensions, Frame, FrameRepr, Ipv4Address, Kind,
    NetworkRepr, Opcode, Transport,
};

const PAYLOADS: [usize; 2] = [64, 4096];

/// An RC RDMA WRITE ONLY over IPv4, as a NIC sends most bytes.
fn repr(payload_len: usize) -> FrameRepr {
    let op = Opcode::new(Transport::Rc, Kind::WriteOnly).expect("RC WRITE_ONLY exists");
    let mut ext = Extensions::for_opcode(op);
    ext.reth = Some(reth::Repr {
        va: 0x7f00_0000_1000,
        r_key: 0x2b8,
        dma_len: payload_len as u32,
    });
    FrameRepr {
        ethernet: Some(EthernetRepr {
            dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
            src: EthernetAddress([2, 0, 0, 0, 0, 1]),
            vlan: None,
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
        bth: bth::Repr::new(op, 0x11, 0x123),
        ext,
        payload_len,
    }
}

fn frame(payload_len: usize) -> Vec<u8> {
    let r = repr(payload_len);
    let mut buf = vec![0; r.frame_len()];
    r.emit_with(&mut buf, |p| p.fill(0xa5))
        .expect("a valid frame");
    buf
}

fn benches(c: &mut Criterion) {
    let mut parse = c.benchmark_group("parse");
    parse.throughput(Throughput::Elements(1));
    for len in PAYLOADS {
        let bytes = frame(len);
        parse.bench_function(BenchmarkId::new("headers", len), |b| {
            b.iter(|| Frame::parse(black_box(&bytes)).map(|f| f.repr.bth.psn))
        });
    }
    parse.finish();

    let mut crc = c.benchmark_group("crc");
    for len in PAYLOADS {
        let bytes = frame(len);
        crc.throughput(Throughput::Bytes(bytes.len() as u64));
        let parsed = Frame::parse(&bytes).expect("a valid frame");
        crc.bench_function(BenchmarkId::new("verify", len), |b| {
            b.iter(|| black_box(&parsed).icrc().is_ok())
        });
        crc.bench_function(BenchmarkId::new("parse_and_verify", len), |b| {
            b.iter(|| match Frame::parse(black_box(&bytes)) {
                Ok(frame) => frame.icrc().is_ok(),
                Err(_) => false,
            })
        });
        crc.bench_function(BenchmarkId::new("raw_crc32fast", len), |b| {
            b.iter(|| crc32fast::hash(black_box(&bytes)))
        });
    }
    crc.finish();

    let mut emit = c.benchmark_group("emit");
    for len in PAYLOADS {
        let r = repr(len);
        let payload = vec![0xa5; len];
        let mut buf = vec![0; r.frame_len()];
        emit.throughput(Throughput::Bytes(buf.len() as u64));
        emit.bench_function(BenchmarkId::new("frame", len), |b| {
            b.iter(|| black_box(&r).emit(&mut buf, black_box(&payload)))
        });
    }
    emit.finish();
}

criterion_group!(frame_benches, benches);
criterion_main!(frame_benches);

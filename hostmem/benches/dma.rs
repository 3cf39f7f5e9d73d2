//! DMA into a shared-memory region against a plain memcpy of the same size in the same run, and
//! the cost of resolving a key.
//!
//! Targets: a DMA write of 4 KiB and of 1 MiB at >= 90% of memcpy's throughput; key resolution
//! <= 20 ns.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use roce_hostmem::{Access, MrKeys, MrTable, PdId, Region, VaBase};

const SIZES: [(usize, &str); 2] = [(4 << 10, "4KiB"), (1 << 20, "1MiB")];
/// Registrations in the table besides the one used, so a lookup is not a lucky first entry.
const OTHER_MRS: usize = 1000;

struct Fixture {
    table: MrTable,
    pd: PdId,
    keys: MrKeys,
    /// Keeps the shared-memory file alive for the run.
    _region: Arc<Region>,
}

/// A named (shared, /dev/shm backed) region of 1 MiB, registered whole, pages touched once so
/// page faults do not count, in a table with many other registrations.
fn fixture() -> Fixture {
    let name = format!("bench-{}", std::process::id());
    let region = Arc::new(Region::create(&name, 1 << 20).unwrap());
    region.write(0, &vec![1; region.len()]).unwrap();
    let mut table = MrTable::new();
    let pd = table.alloc_pd();
    let all =
        Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC;
    for i in 0..OTHER_MRS {
        table
            .register(pd, region.clone(), i, 64, all, VaBase::Zero)
            .unwrap();
    }
    let keys = table
        .register(pd, region.clone(), 0, region.len(), all, VaBase::Zero)
        .unwrap();
    Fixture {
        table,
        pd,
        keys,
        _region: region,
    }
}

/// Plain heap memory with the page alignment of a mapping. Copy speed depends on where the
/// buffers sit relative to each other (4 KiB aliasing makes a copy between two buffers at nearly
/// the same page offset much slower), so the memcpy baseline gets the same alignment as the
/// region it is compared with.
struct PageAligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl PageAligned {
    fn new(len: usize) -> PageAligned {
        let buf = vec![0u8; len + 4096];
        let start = buf.as_ptr().align_offset(4096);
        PageAligned { buf, start, len }
    }

    fn bytes(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

fn dma_write(c: &mut Criterion) {
    let f = fixture();
    let mut group = c.benchmark_group("dma_write");
    for (size, label) in SIZES {
        let src = vec![0xa5u8; size];
        let mut plain = PageAligned::new(size);
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::new("memcpy", label), |b| {
            b.iter(|| black_box(plain.bytes()).copy_from_slice(black_box(&src)))
        });
        let place = f
            .table
            .resolve_remote(f.keys.rkey, f.pd, 0, size as u64, Access::REMOTE_WRITE)
            .unwrap();
        group.bench_function(BenchmarkId::new("place_write", label), |b| {
            b.iter(|| black_box(&place).write(0, black_box(&src)).unwrap())
        });
        group.bench_function(BenchmarkId::new("resolve_and_write", label), |b| {
            b.iter(|| {
                f.table
                    .resolve_remote(
                        black_box(f.keys.rkey),
                        f.pd,
                        0,
                        size as u64,
                        Access::REMOTE_WRITE,
                    )
                    .unwrap()
                    .write(0, black_box(&src))
                    .unwrap()
            })
        });
    }
    group.finish();
}

fn dma_read(c: &mut Criterion) {
    let f = fixture();
    let mut group = c.benchmark_group("dma_read");
    for (size, label) in SIZES {
        let mut plain = PageAligned::new(size);
        plain.bytes().fill(0xa5);
        let mut frame = vec![0u8; size];
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_function(BenchmarkId::new("memcpy", label), |b| {
            b.iter(|| black_box(&mut frame[..]).copy_from_slice(black_box(plain.bytes())))
        });
        let place = f
            .table
            .resolve_remote(f.keys.rkey, f.pd, 0, size as u64, Access::REMOTE_READ)
            .unwrap();
        group.bench_function(BenchmarkId::new("place_read_into", label), |b| {
            b.iter(|| {
                black_box(&place)
                    .read_into(0, black_box(&mut frame[..]))
                    .unwrap()
            })
        });
    }
    group.finish();
}

fn resolve(c: &mut Criterion) {
    let f = fixture();
    let mut group = c.benchmark_group("resolve");
    group.bench_function("remote_4KiB", |b| {
        b.iter(|| {
            f.table
                .resolve_remote(
                    black_box(f.keys.rkey),
                    f.pd,
                    black_box(8192),
                    4096,
                    Access::REMOTE_WRITE,
                )
                .unwrap()
                .len()
        })
    });
    group.bench_function("atomic", |b| {
        b.iter(|| {
            f.table
                .resolve_atomic(black_box(f.keys.rkey), f.pd, black_box(8192))
                .unwrap()
                .region_offset()
        })
    });
    group.bench_function("refused_unknown_key", |b| {
        b.iter(|| {
            f.table
                .resolve_remote(
                    black_box(f.keys.rkey ^ 0x40),
                    f.pd,
                    0,
                    8,
                    Access::REMOTE_READ,
                )
                .is_err()
        })
    });
    group.finish();
    let word = f.table.resolve_atomic(f.keys.rkey, f.pd, 0).unwrap();
    c.bench_function("atomic/fetch_and_add", |b| {
        b.iter(|| word.fetch_and_add(black_box(1)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    targets = dma_write, dma_read, resolve
}
criterion_main!(benches);

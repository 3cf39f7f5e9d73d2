//! Protection domains, registration and resolution, and DMA on what resolves.

use std::sync::Arc;

use roce_hostmem::{Access, AccessError, MrError, MrKeys, MrTable, PdId, Region, VaBase};

const RW: Access = Access::LOCAL_WRITE;

fn all() -> Access {
    Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ | Access::REMOTE_ATOMIC
}

/// A table with one domain and one 8 KiB anonymous region.
fn setup() -> (MrTable, PdId, Arc<Region>) {
    let mut table = MrTable::new();
    let pd = table.alloc_pd();
    (table, pd, Arc::new(Region::anonymous(8192).unwrap()))
}

fn register(
    table: &mut MrTable,
    pd: PdId,
    region: &Arc<Region>,
    offset: usize,
    len: usize,
) -> MrKeys {
    table
        .register(pd, region.clone(), offset, len, all(), VaBase::Offset)
        .unwrap()
}

#[test]
fn keys_are_index_and_key_byte_and_lkey_equals_rkey() {
    let (mut table, pd, region) = setup();
    let a = register(&mut table, pd, &region, 0, 4096);
    let b = register(&mut table, pd, &region, 4096, 4096);
    assert_eq!(a.lkey, a.rkey);
    assert_ne!(a.lkey >> 8, b.lkey >> 8, "two registrations share an index");
    assert_ne!(a.lkey >> 8, 0, "index 0 would make key 0 valid");
}

#[test]
fn the_va_base_decides_where_the_range_starts() {
    let (mut table, pd, region) = setup();
    let at_offset = table
        .register(pd, region.clone(), 4096, 100, all(), VaBase::Offset)
        .unwrap();
    assert_eq!((at_offset.va, at_offset.len), (4096, 100));
    let zero = table
        .register(pd, region.clone(), 4096, 100, all(), VaBase::Zero)
        .unwrap();
    assert_eq!(zero.va, 0);
    let chosen = table
        .register(
            pd,
            region.clone(),
            4096,
            100,
            all(),
            VaBase::At(0x7f00_0000_1000),
        )
        .unwrap();
    assert_eq!(chosen.va, 0x7f00_0000_1000);

    // All three name the same bytes.
    region.write(4096 + 10, b"abc").unwrap();
    for keys in [at_offset, zero, chosen] {
        let place = table
            .resolve_remote(keys.rkey, pd, keys.va + 10, 3, Access::REMOTE_READ)
            .unwrap();
        assert_eq!(place.region_offset(), 4096 + 10);
        let mut seen = [0; 3];
        place.read_into(0, &mut seen).unwrap();
        assert_eq!(&seen, b"abc");
    }
}

#[test]
fn a_write_through_a_place_lands_at_its_offset_and_nowhere_else() {
    let (mut table, pd, region) = setup();
    let keys = register(&mut table, pd, &region, 1000, 100);
    let place = table
        .resolve_remote(keys.rkey, pd, keys.va + 50, 50, Access::REMOTE_WRITE)
        .unwrap();
    assert_eq!(place.len(), 50);
    place.write(10, &[0xab; 40]).unwrap();
    assert_eq!(place.write(11, &[0xcd; 40]), Err(AccessError::OutOfBounds));
    assert_eq!(place.write(usize::MAX, &[1]), Err(AccessError::OutOfBounds));
    let mut back = [0; 50];
    place.read_into(0, &mut back).unwrap();
    assert_eq!(back[..10], [0; 10]);
    assert_eq!(back[10..], [0xab; 40]);
    assert_eq!(place.read_into(1, &mut back), Err(AccessError::OutOfBounds));

    let mut everything = vec![0; region.len()];
    region.read(0, &mut everything).unwrap();
    let written: Vec<usize> = (0..everything.len())
        .filter(|&i| everything[i] != 0)
        .collect();
    assert_eq!(written, (1060..1100).collect::<Vec<_>>());
}

#[test]
fn each_refusal_says_why() {
    let (mut table, pd, region) = setup();
    let other_pd = table.alloc_pd();
    let read_only = table
        .register(
            pd,
            region.clone(),
            0,
            4096,
            Access::REMOTE_READ,
            VaBase::Offset,
        )
        .unwrap();
    let rkey = read_only.rkey;
    let read = Access::REMOTE_READ;

    assert!(table.resolve_remote(rkey, pd, 0, 4096, read).is_ok());
    assert_eq!(
        table.resolve_remote(rkey ^ 1, pd, 0, 8, read).unwrap_err(),
        AccessError::UnknownKey
    );
    assert_eq!(
        table
            .resolve_remote(0x00ff_ff00, pd, 0, 8, read)
            .unwrap_err(),
        AccessError::UnknownKey
    );
    assert_eq!(
        table
            .resolve_remote(rkey, other_pd, 0, 8, read)
            .unwrap_err(),
        AccessError::PdMismatch
    );
    assert_eq!(
        table
            .resolve_remote(rkey, pd, 0, 8, Access::REMOTE_WRITE)
            .unwrap_err(),
        AccessError::AccessDenied
    );
    assert_eq!(
        table.resolve_local(rkey, pd, 0, 8, RW).unwrap_err(),
        AccessError::AccessDenied
    );
    assert!(table.resolve_local(rkey, pd, 0, 8, Access::empty()).is_ok());
    for (va, len) in [
        (4089, 8),
        (4096, 1),
        (0, 4097),
        (u64::MAX, 1),
        (8, u64::MAX),
    ] {
        assert_eq!(
            table.resolve_remote(rkey, pd, va, len, read).unwrap_err(),
            AccessError::OutOfBounds,
            "{va:#x}+{len}"
        );
    }
}

#[test]
fn ranges_near_the_top_of_va_space_are_overflow_safe() {
    let (mut table, pd, region) = setup();
    let top = table
        .register(
            pd,
            region.clone(),
            0,
            4096,
            all(),
            VaBase::At(u64::MAX - 4095),
        )
        .unwrap();
    let read = Access::REMOTE_READ;
    let last = table
        .resolve_remote(top.rkey, pd, u64::MAX, 1, read)
        .unwrap();
    assert_eq!(last.region_offset(), 4095);
    assert_eq!(
        table
            .resolve_remote(top.rkey, pd, u64::MAX, 2, read)
            .unwrap_err(),
        AccessError::OutOfBounds
    );
    assert_eq!(
        table
            .resolve_remote(top.rkey, pd, u64::MAX - 4095, u64::MAX, read)
            .unwrap_err(),
        AccessError::OutOfBounds
    );
    assert_eq!(
        table
            .register(pd, region, 0, 4096, all(), VaBase::At(u64::MAX - 4094))
            .unwrap_err(),
        MrError::VaOverflow {
            va: u64::MAX - 4094,
            len: 4096
        }
    );
}

#[test]
fn zero_length_requests_are_granted_without_a_key_and_name_no_memory() {
    let (table, pd, _region) = setup();
    let place = table
        .resolve_remote(0, pd, u64::MAX, 0, Access::REMOTE_WRITE)
        .unwrap();
    assert!(place.is_empty());
    assert_eq!(place.region_name(), None);
    place.write(0, &[]).unwrap();
    assert_eq!(place.write(0, &[1]), Err(AccessError::OutOfBounds));
}

#[test]
fn registration_refuses_bad_ranges_rights_and_domains() {
    let (mut table, pd, region) = setup();
    assert_eq!(
        table
            .register(pd, region.clone(), 0, 0, all(), VaBase::Offset)
            .unwrap_err(),
        MrError::EmptyRange
    );
    assert!(matches!(
        table.register(pd, region.clone(), 4096, 4097, all(), VaBase::Offset),
        Err(MrError::OutsideRegion { .. })
    ));
    assert!(matches!(
        table.register(pd, region.clone(), usize::MAX, 2, all(), VaBase::Offset),
        Err(MrError::OutsideRegion { .. })
    ));
    for access in [
        Access::REMOTE_WRITE,
        Access::REMOTE_ATOMIC | Access::REMOTE_READ,
    ] {
        assert!(matches!(
            table.register(pd, region.clone(), 0, 8, access, VaBase::Offset),
            Err(MrError::RemoteWriteWithoutLocalWrite { .. })
        ));
    }
    let freed = table.alloc_pd();
    table.dealloc_pd(freed).unwrap();
    assert_eq!(
        table
            .register(freed, region, 0, 8, all(), VaBase::Offset)
            .unwrap_err(),
        MrError::UnknownPd
    );
}

#[test]
fn a_stale_key_is_refused_after_its_slot_is_reused() {
    let (mut table, pd, region) = setup();
    let old = register(&mut table, pd, &region, 0, 4096);
    table.deregister(old.lkey).unwrap();
    assert_eq!(
        table
            .resolve_remote(old.rkey, pd, 0, 8, Access::REMOTE_READ)
            .unwrap_err(),
        AccessError::UnknownKey
    );
    let new = register(&mut table, pd, &region, 0, 4096);
    assert_eq!(new.lkey >> 8, old.lkey >> 8, "the freed slot is reused");
    assert_ne!(new.lkey, old.lkey);
    assert_eq!(
        table
            .resolve_remote(old.rkey, pd, 0, 8, Access::REMOTE_READ)
            .unwrap_err(),
        AccessError::UnknownKey
    );
    assert_eq!(
        table.deregister(old.lkey),
        Err(MrError::UnknownKey { key: old.lkey })
    );
    assert!(table
        .resolve_remote(new.rkey, pd, 0, 8, Access::REMOTE_READ)
        .is_ok());
}

#[test]
fn an_invalidated_key_is_refused_until_deregistered() {
    let (mut table, pd, region) = setup();
    let other_pd = table.alloc_pd();
    let keys = register(&mut table, pd, &region, 0, 4096);
    assert_eq!(
        table.invalidate(keys.rkey, other_pd),
        Err(MrError::PdMismatch { key: keys.rkey })
    );
    assert!(table.resolve_atomic(keys.rkey, pd, 0).is_ok());
    table.invalidate(keys.rkey, pd).unwrap();
    table.invalidate(keys.rkey, pd).unwrap();
    assert_eq!(
        table
            .resolve_remote(keys.rkey, pd, 0, 8, Access::REMOTE_READ)
            .unwrap_err(),
        AccessError::Invalidated
    );
    assert_eq!(
        table
            .resolve_local(keys.lkey, pd, 0, 8, Access::empty())
            .unwrap_err(),
        AccessError::Invalidated
    );
    assert_eq!(
        table.resolve_atomic(keys.rkey, pd, 0).unwrap_err(),
        AccessError::Invalidated
    );
    assert_eq!(
        table.invalidate(keys.rkey + 1, pd),
        Err(MrError::UnknownKey { key: keys.rkey + 1 })
    );
    table.deregister(keys.lkey).unwrap();
    assert_eq!(
        table
            .resolve_remote(keys.rkey, pd, 0, 8, Access::REMOTE_READ)
            .unwrap_err(),
        AccessError::UnknownKey
    );
}

#[test]
fn a_domain_is_freed_only_without_registrations() {
    let (mut table, pd, region) = setup();
    let keys = register(&mut table, pd, &region, 0, 8);
    assert_eq!(table.dealloc_pd(pd), Err(MrError::PdBusy { mrs: 1 }));
    table.invalidate(keys.rkey, pd).unwrap();
    assert_eq!(table.dealloc_pd(pd), Err(MrError::PdBusy { mrs: 1 }));
    table.deregister(keys.lkey).unwrap();
    table.dealloc_pd(pd).unwrap();
    assert_eq!(table.dealloc_pd(pd), Err(MrError::UnknownPd));
}

#[test]
fn the_registration_keeps_its_region_alive() {
    let (mut table, pd, region) = setup();
    let keys = register(&mut table, pd, &region, 0, 8);
    let weak = Arc::downgrade(&region);
    drop(region);
    assert!(weak.upgrade().is_some());
    table.deregister(keys.lkey).unwrap();
    assert!(weak.upgrade().is_none(), "deregistration leaked the region");
}

#[test]
fn atomics_need_the_right_key_alignment_and_bounds() {
    let (mut table, pd, region) = setup();
    let keys = register(&mut table, pd, &region, 0, 64);
    for va in [1, 4, 7, 63] {
        assert_eq!(
            table.resolve_atomic(keys.rkey, pd, va).unwrap_err(),
            AccessError::Misaligned
        );
    }
    assert_eq!(
        table.resolve_atomic(keys.rkey, pd, 64).unwrap_err(),
        AccessError::OutOfBounds
    );
    let no_atomics = table
        .register(
            pd,
            region.clone(),
            0,
            64,
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            VaBase::Offset,
        )
        .unwrap();
    assert_eq!(
        table.resolve_atomic(no_atomics.rkey, pd, 0).unwrap_err(),
        AccessError::AccessDenied
    );
    // VA 8 is aligned, but lands on region offset 12: no real atomic can run there.
    let skewed = table
        .register(pd, region, 4, 64, all(), VaBase::Zero)
        .unwrap();
    assert_eq!(
        table.resolve_atomic(skewed.rkey, pd, 8).unwrap_err(),
        AccessError::Misaligned
    );
    assert!(AccessError::Misaligned.is_invalid_request());
    for err in [
        AccessError::UnknownKey,
        AccessError::Invalidated,
        AccessError::PdMismatch,
        AccessError::AccessDenied,
        AccessError::OutOfBounds,
    ] {
        assert!(!err.is_invalid_request(), "{err:?}");
    }
}

#[test]
fn compare_and_swap_and_fetch_and_add_return_the_original_value() {
    let (mut table, pd, region) = setup();
    let keys = register(&mut table, pd, &region, 0, 4096);
    region.write(16, &41u64.to_ne_bytes()).unwrap();
    let word = table.resolve_atomic(keys.rkey, pd, 16).unwrap();
    assert_eq!(word.region_offset(), 16);
    assert_eq!(word.fetch_and_add(1), 41);
    assert_eq!(
        word.compare_and_swap(0, 7),
        42,
        "a failed compare swaps nothing"
    );
    assert_eq!(word.compare_and_swap(42, 7), 42);
    assert_eq!(word.fetch_and_add(u64::MAX), 7, "adding wraps, as in verbs");
    let mut host_view = [0; 8];
    region.read(16, &mut host_view).unwrap();
    assert_eq!(u64::from_ne_bytes(host_view), 6);
}

#[test]
fn atomics_from_two_threads_on_one_word_lose_no_update() {
    const ROUNDS: u64 = 100_000;
    let (mut table, pd, region) = setup();
    let keys = register(&mut table, pd, &region, 0, 4096);
    let table = &table;
    std::thread::scope(|scope| {
        for _ in 0..2 {
            scope.spawn(move || {
                let word = table.resolve_atomic(keys.rkey, pd, 8).unwrap();
                for _ in 0..ROUNDS {
                    word.fetch_and_add(1);
                    // An increment by compare-and-swap retries until nobody raced it.
                    let mut seen = word.fetch_and_add(0);
                    loop {
                        let original = word.compare_and_swap(seen, seen + 1);
                        if original == seen {
                            break;
                        }
                        seen = original;
                    }
                }
            });
        }
    });
    let mut host_view = [0; 8];
    region.read(8, &mut host_view).unwrap();
    assert_eq!(u64::from_ne_bytes(host_view), 4 * ROUNDS);
}

#[test]
fn places_name_their_region_for_tracing() {
    let name = format!("test-{}-names", std::process::id());
    let region = Arc::new(Region::create(&name, 4096).unwrap());
    let mut table = MrTable::new();
    let pd = table.alloc_pd();
    let keys = register(&mut table, pd, &region, 0, 4096);
    let place = table
        .resolve_remote(keys.rkey, pd, 8, 8, Access::REMOTE_READ)
        .unwrap();
    assert_eq!(place.region_name(), Some(name.as_str()));
    let word = table.resolve_atomic(keys.rkey, pd, 8).unwrap();
    assert_eq!(word.region_name(), Some(name.as_str()));
}

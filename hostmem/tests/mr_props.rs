//! Property tests of the key and bounds checks against a plain reference model: whatever key,
//! domain, VA, length and rights a request names, exactly the accesses the model allows are
//! granted, and nothing outside a registered range is ever reached.

use std::sync::Arc;

use proptest::prelude::*;
use roce_hostmem::{Access, AccessError, MrError, MrTable, Region, VaBase};

const REGION_LEN: usize = 4 * 4096;

fn access() -> impl Strategy<Value = Access> {
    (0u32..16).prop_map(|bits| Access::from_bits(bits).unwrap())
}

fn va_base() -> impl Strategy<Value = VaBase> {
    prop_oneof![
        Just(VaBase::Offset),
        Just(VaBase::Zero),
        any::<u64>().prop_map(VaBase::At),
        (0u64..(1 << 16)).prop_map(|below| VaBase::At(u64::MAX - below)),
    ]
}

/// A registration request: offset, length, rights, VA base.
fn registration() -> impl Strategy<Value = (usize, usize, Access, VaBase)> {
    (0..REGION_LEN)
        .prop_flat_map(|offset| (Just(offset), 1..=REGION_LEN - offset))
        .prop_flat_map(|(offset, len)| (Just(offset), Just(len), access(), va_base()))
}

/// What a request names relative to the registration, biased towards its edges where an
/// off-by-one would hide.
#[derive(Debug, Clone)]
struct Request {
    va: VaChoice,
    len: LenChoice,
    need: Access,
    key: KeyChoice,
    right_pd: bool,
}

#[derive(Debug, Clone)]
enum VaChoice {
    FromStart(i64),
    FromEnd(i64),
    Any(u64),
}

#[derive(Debug, Clone)]
enum LenChoice {
    /// Up to the registration's end, plus this.
    ToEnd(i64),
    Exactly(u64),
}

#[derive(Debug, Clone)]
enum KeyChoice {
    Real,
    FlippedBits(u32),
    Any(u32),
}

fn request() -> impl Strategy<Value = Request> {
    let va = prop_oneof![
        2 => (-16i64..REGION_LEN as i64 + 16).prop_map(VaChoice::FromStart),
        1 => (-16i64..=16).prop_map(VaChoice::FromStart),
        1 => (-16i64..=16).prop_map(VaChoice::FromEnd),
        1 => any::<u64>().prop_map(VaChoice::Any),
    ];
    let len = prop_oneof![
        2 => (-2i64..=2).prop_map(LenChoice::ToEnd),
        2 => (0u64..=16).prop_map(LenChoice::Exactly),
        1 => (0..REGION_LEN as u64 + 16).prop_map(LenChoice::Exactly),
        1 => any::<u64>().prop_map(LenChoice::Exactly),
    ];
    let key = prop_oneof![
        6 => Just(KeyChoice::Real),
        1 => (1u32..).prop_map(KeyChoice::FlippedBits),
        1 => any::<u32>().prop_map(KeyChoice::Any),
    ];
    (va, len, access(), key, prop::bool::weighted(0.9)).prop_map(
        |(va, len, need, key, right_pd)| Request {
            va,
            len,
            need,
            key,
            right_pd,
        },
    )
}

/// The VA and length `req` names for a registration of `mr_len` bytes at `start`.
fn pick_range(req: &Request, start: u64, mr_len: usize) -> (u64, u64) {
    let end = start.wrapping_add(mr_len as u64);
    let va = match req.va {
        VaChoice::FromStart(delta) => start.wrapping_add_signed(delta),
        VaChoice::FromEnd(delta) => end.wrapping_add_signed(delta),
        VaChoice::Any(va) => va,
    };
    let len = match req.len {
        LenChoice::ToEnd(delta) => end.wrapping_sub(va).wrapping_add_signed(delta),
        LenChoice::Exactly(len) => len,
    };
    (va, len)
}

fn pick_key(choice: &KeyChoice, real: u32) -> u32 {
    match *choice {
        KeyChoice::Real => real,
        KeyChoice::FlippedBits(bits) => real ^ bits,
        KeyChoice::Any(key) => key,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn resolution_grants_exactly_what_the_model_allows(
        (offset, mr_len, rights, base) in registration(),
        req in request(),
    ) {
        let region = Arc::new(Region::anonymous(REGION_LEN).unwrap());
        let mut table = MrTable::new();
        let pd = table.alloc_pd();
        let other_pd = table.alloc_pd();
        let keys = match table.register(pd, region.clone(), offset, mr_len, rights, base) {
            Ok(keys) => keys,
            Err(MrError::RemoteWriteWithoutLocalWrite { .. }) => {
                let writes_remotely = rights.contains(Access::REMOTE_WRITE)
                    || rights.contains(Access::REMOTE_ATOMIC);
                prop_assert!(writes_remotely && !rights.contains(Access::LOCAL_WRITE));
                return Ok(());
            }
            Err(MrError::VaOverflow { va, len }) => {
                prop_assert!(u128::from(va) + u128::from(len) > 1 << 64);
                return Ok(());
            }
            Err(err) => return Err(TestCaseError::fail(format!("refused: {err}"))),
        };
        let (va, len) = pick_range(&req, keys.va, mr_len);
        let key = pick_key(&req.key, keys.rkey);
        let asked_pd = if req.right_pd { pd } else { other_pd };

        let expected = if len == 0 {
            Ok(0)
        } else if key != keys.rkey {
            Err(AccessError::UnknownKey)
        } else if !req.right_pd {
            Err(AccessError::PdMismatch)
        } else if !rights.contains(req.need) {
            Err(AccessError::AccessDenied)
        } else if va < keys.va
            || u128::from(va) + u128::from(len) > u128::from(keys.va) + mr_len as u128
        {
            Err(AccessError::OutOfBounds)
        } else {
            Ok(offset + (va - keys.va) as usize)
        };

        let got = table.resolve_remote(key, asked_pd, va, len, req.need);
        match (&got, expected) {
            (Ok(place), Ok(start)) => {
                prop_assert_eq!(place.len() as u64, len);
                if len > 0 {
                    prop_assert_eq!(place.region_offset(), start);
                }
                // Fill the whole place; nothing outside the registration may change.
                place.write(0, &vec![0xff; place.len()]).unwrap();
                let mut all = vec![0; REGION_LEN];
                region.read(0, &mut all).unwrap();
                let outside = all
                    .iter()
                    .enumerate()
                    .filter(|&(i, &b)| b != 0 && !(offset..offset + mr_len).contains(&i))
                    .count();
                prop_assert_eq!(outside, 0);
            }
            (Err(err), Err(want)) => prop_assert_eq!(*err, want),
            (got, want) => {
                return Err(TestCaseError::fail(format!("got {got:?}, model says {want:?}")))
            }
        }
    }

    #[test]
    fn atomics_are_granted_only_on_aligned_words_inside_the_range(
        (offset, mr_len, rights, base) in registration(),
        req in request(),
    ) {
        let region = Arc::new(Region::anonymous(REGION_LEN).unwrap());
        let mut table = MrTable::new();
        let pd = table.alloc_pd();
        let other_pd = table.alloc_pd();
        let Ok(keys) = table.register(pd, region, offset, mr_len, rights, base) else {
            return Ok(());
        };
        let (va, _) = pick_range(&req, keys.va, mr_len);
        let key = pick_key(&req.key, keys.rkey);
        let asked_pd = if req.right_pd { pd } else { other_pd };
        let in_range = va >= keys.va
            && u128::from(va) + 8 <= u128::from(keys.va) + mr_len as u128;
        let host_offset = (offset as u64).wrapping_add(va.wrapping_sub(keys.va));

        let expected = if va % 8 != 0 {
            Err(AccessError::Misaligned)
        } else if key != keys.rkey {
            Err(AccessError::UnknownKey)
        } else if !req.right_pd {
            Err(AccessError::PdMismatch)
        } else if !rights.contains(Access::REMOTE_ATOMIC) {
            Err(AccessError::AccessDenied)
        } else if !in_range {
            Err(AccessError::OutOfBounds)
        } else if host_offset % 8 != 0 {
            Err(AccessError::Misaligned)
        } else {
            Ok(host_offset as usize)
        };
        let got = table
            .resolve_atomic(key, asked_pd, va)
            .map(|word| word.region_offset());
        prop_assert_eq!(got, expected);
    }

    /// Registrations come and go; every key ever handed out is checked after every step.
    #[test]
    fn stale_and_invalidated_keys_are_always_refused(ops in prop::collection::vec(op(), 1..60)) {
        let region = Arc::new(Region::anonymous(REGION_LEN).unwrap());
        let mut table = MrTable::new();
        let pd = table.alloc_pd();
        // Every key ever issued, with its state in the model.
        let mut keys: Vec<(u32, KeyState)> = Vec::new();
        for op in ops {
            match op {
                Op::Register => {
                    let issued = table
                        .register(pd, region.clone(), 0, 64, Access::REMOTE_READ, VaBase::Zero)
                        .unwrap();
                    prop_assert!(
                        keys.iter().all(|&(key, _)| key != issued.rkey),
                        "key {:#x} was handed out twice", issued.rkey
                    );
                    keys.push((issued.rkey, KeyState::Valid));
                }
                Op::Deregister(_) | Op::Invalidate(_) if keys.is_empty() => continue,
                Op::Deregister(pick) => {
                    let i = pick.index(keys.len());
                    let (key, state) = &mut keys[i];
                    let result = table.deregister(*key);
                    if *state == KeyState::Gone {
                        prop_assert_eq!(result, Err(MrError::UnknownKey { key: *key }));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        *state = KeyState::Gone;
                    }
                }
                Op::Invalidate(pick) => {
                    let i = pick.index(keys.len());
                    let (key, state) = &mut keys[i];
                    let result = table.invalidate(*key, pd);
                    if *state == KeyState::Gone {
                        prop_assert_eq!(result, Err(MrError::UnknownKey { key: *key }));
                    } else {
                        prop_assert_eq!(result, Ok(()));
                        *state = KeyState::Invalidated;
                    }
                }
            }
            for &(key, state) in &keys {
                let got = table
                    .resolve_remote(key, pd, 0, 8, Access::REMOTE_READ)
                    .map(|place| place.len());
                let want = match state {
                    KeyState::Valid => Ok(8),
                    KeyState::Invalidated => Err(AccessError::Invalidated),
                    KeyState::Gone => Err(AccessError::UnknownKey),
                };
                prop_assert_eq!(got, want, "key {:#x}", key);
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyState {
    Valid,
    Invalidated,
    Gone,
}

#[derive(Debug, Clone)]
enum Op {
    Register,
    Deregister(prop::sample::Index),
    Invalidate(prop::sample::Index),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => Just(Op::Register),
        2 => any::<prop::sample::Index>().prop_map(Op::Deregister),
        1 => any::<prop::sample::Index>().prop_map(Op::Invalidate),
    ]
}

//! Regions as a host program sees them: naming, lifetime, sharing and the errors.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use roce_hostmem::{Region, RegionError, MAX_SIZE};

/// A region name no other test (or concurrent test run) uses.
fn unique(label: &str) -> String {
    format!("test-{}-{label}", std::process::id())
}

fn shm_path(name: &str) -> PathBuf {
    Path::new("/dev/shm").join(format!("roce-{name}"))
}

#[test]
fn create_makes_a_page_aligned_file_in_dev_shm_removed_on_drop() {
    let name = unique("lifetime");
    let region = Region::create(&name, 100).unwrap();
    assert_eq!(region.name(), Some(name.as_str()));
    assert_eq!(region.path(), Some(shm_path(&name).as_path()));
    assert_eq!(region.len(), 4096, "size is rounded up to a whole page");
    assert_eq!(region.as_ptr() as usize % 4096, 0);
    assert_eq!(std::fs::metadata(shm_path(&name)).unwrap().len(), 4096);
    drop(region);
    assert!(
        !shm_path(&name).exists(),
        "the owner's drop removes the file"
    );
}

#[test]
fn an_attached_mapping_sees_the_same_pages_and_never_removes_them() {
    let name = unique("shared");
    let owner = Region::create(&name, 8192).unwrap();
    let attached = Region::attach(&name).unwrap();
    assert_eq!(attached.len(), 8192);
    assert_ne!(
        owner.as_ptr(),
        attached.as_ptr(),
        "two mappings of one file"
    );

    owner.write(5000, b"host ram").unwrap();
    let mut seen = [0; 8];
    attached.read(5000, &mut seen).unwrap();
    assert_eq!(&seen, b"host ram");

    attached.write(0, b"from the nic").unwrap();
    let mut seen = [0; 12];
    owner.read(0, &mut seen).unwrap();
    assert_eq!(&seen, b"from the nic");

    drop(attached);
    assert!(
        shm_path(&name).exists(),
        "an attacher's drop keeps the file"
    );
    let again = Region::attach(&name).unwrap();
    drop(owner);
    assert!(!shm_path(&name).exists());
    again.write(0, b"still mapped").unwrap();
}

#[test]
fn a_persistent_region_survives_its_creator_until_removed() {
    let name = unique("persistent");
    drop(Region::create_persistent(&name, 4096).unwrap());
    assert!(shm_path(&name).exists());
    Region::attach(&name).unwrap();
    Region::remove(&name).unwrap();
    assert!(!shm_path(&name).exists());
    assert!(matches!(
        Region::remove(&name),
        Err(RegionError::NotFound { .. })
    ));
}

#[test]
fn dropping_the_owner_leaves_a_newer_file_of_the_same_name_alone() {
    let name = unique("recreated");
    let first = Region::create(&name, 4096).unwrap();
    Region::remove(&name).unwrap();
    let second = Region::create_persistent(&name, 4096).unwrap();
    drop(first);
    assert!(
        shm_path(&name).exists(),
        "the first owner removed the second file"
    );
    drop(second);
    Region::remove(&name).unwrap();
}

#[test]
fn creating_an_existing_name_is_an_error_and_leaves_it_intact() {
    let name = unique("exists");
    let region = Region::create(&name, 4096).unwrap();
    region.write(0, b"keep").unwrap();
    let err = Region::create(&name, 8192).unwrap_err();
    assert!(matches!(err, RegionError::Exists { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("region /dev/shm/roce-{name} already exists")
    );
    let mut kept = [0; 4];
    Region::attach(&name).unwrap().read(0, &mut kept).unwrap();
    assert_eq!(&kept, b"keep");
    assert_eq!(region.len(), 4096);
}

#[test]
fn attaching_a_missing_name_is_an_error() {
    let name = unique("missing");
    let err = Region::attach(&name).unwrap_err();
    assert!(matches!(err, RegionError::NotFound { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("region /dev/shm/roce-{name} does not exist")
    );
}

#[test]
fn zero_and_absurd_sizes_are_errors() {
    let name = unique("sizes");
    assert!(matches!(
        Region::create(&name, 0),
        Err(RegionError::ZeroSize)
    ));
    assert!(matches!(
        Region::create(&name, MAX_SIZE as usize + 1),
        Err(RegionError::TooLarge { .. })
    ));
    assert!(matches!(
        Region::create(&name, usize::MAX),
        Err(RegionError::TooLarge { .. })
    ));
    assert!(matches!(Region::anonymous(0), Err(RegionError::ZeroSize)));
    assert!(!shm_path(&name).exists());
}

#[test]
fn bad_names_are_errors_before_touching_the_file_system() {
    for name in ["", "../etc/passwd", "a/b", "..", "x y"] {
        assert!(
            matches!(Region::create(name, 4096), Err(RegionError::BadName { .. })),
            "{name:?} accepted"
        );
        assert!(matches!(
            Region::attach(name),
            Err(RegionError::BadName { .. })
        ));
        assert!(matches!(
            Region::remove(name),
            Err(RegionError::BadName { .. })
        ));
    }
}

#[test]
fn running_out_of_room_is_an_error_and_leaves_no_file() {
    let name = unique("no-room");
    // More than the whole of /dev/shm, so it cannot fit however much others free meanwhile.
    let too_big = dev_shm_size() + 4096;
    assert!(
        too_big <= MAX_SIZE,
        "/dev/shm is larger than {MAX_SIZE} bytes: this test cannot exhaust it"
    );
    let err = Region::create(&name, too_big as usize).unwrap_err();
    assert!(matches!(err, RegionError::NoRoom { .. }), "{err:?}");
    assert!(err.to_string().starts_with("not enough room for"), "{err}");
    assert!(
        !shm_path(&name).exists(),
        "a half-made region was left behind"
    );
}

fn dev_shm_size() -> u64 {
    let dir = std::fs::File::open("/dev/shm").unwrap();
    // SAFETY: statvfs is plain old data, filled in by the call on a valid descriptor.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a writable statvfs.
    assert_eq!(unsafe { libc::fstatvfs(dir.as_raw_fd(), &mut stat) }, 0);
    stat.f_blocks * stat.f_frsize
}

#[test]
fn regions_at_a_given_path_work_like_named_ones() {
    let dir = std::env::temp_dir().join(unique("at-dir"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ram");
    let region = Region::create_at(&path, 3 * 4096).unwrap();
    assert_eq!(region.name(), None);
    assert_eq!(region.path(), Some(path.as_path()));
    region.write(4096, b"page two").unwrap();

    let attached = Region::attach_at(&path).unwrap();
    let mut seen = [0; 8];
    attached.read(4096, &mut seen).unwrap();
    assert_eq!(&seen, b"page two");
    assert!(matches!(
        Region::create_at(&path, 4096),
        Err(RegionError::Exists { .. })
    ));
    drop(region);
    assert!(!path.exists());
    assert!(matches!(
        Region::attach_at(&path),
        Err(RegionError::NotFound { .. })
    ));
    assert!(matches!(
        Region::attach_at(&dir),
        Err(RegionError::Io { .. } | RegionError::NotAFile { .. })
    ));
    std::fs::remove_dir(&dir).unwrap();
}

#[test]
fn an_empty_file_is_not_a_region() {
    let name = unique("empty");
    std::os::unix::fs::OpenOptionsExt::mode(
        std::fs::OpenOptions::new().write(true).create_new(true),
        0o600,
    )
    .open(shm_path(&name))
    .unwrap();
    let err = Region::attach(&name).unwrap_err();
    std::fs::remove_file(shm_path(&name)).unwrap();
    assert!(matches!(err, RegionError::Empty { .. }), "{err:?}");
}

#[test]
fn attach_by_name_does_not_follow_a_planted_symlink() {
    let name = unique("symlink");
    let target = std::env::temp_dir().join(unique("symlink-target"));
    std::fs::write(&target, [7u8; 4096]).unwrap();
    std::os::unix::fs::symlink(&target, shm_path(&name)).unwrap();
    let result = Region::attach(&name);
    std::fs::remove_file(shm_path(&name)).unwrap();
    std::fs::remove_file(&target).unwrap();
    match result {
        Err(RegionError::Io { source, .. }) => {
            assert_eq!(source.raw_os_error(), Some(libc::ELOOP), "{source}")
        }
        other => panic!("a symlink in /dev/shm was not refused: {other:?}"),
    }
}

#[test]
fn anonymous_regions_are_page_aligned_and_private() {
    let region = Region::anonymous(5000).unwrap();
    assert_eq!(region.len(), 8192);
    assert_eq!(region.as_ptr() as usize % 4096, 0);
    assert_eq!(region.name(), None);
    assert_eq!(region.path(), None);
    let mut zeros = [1; 16];
    region.read(8192 - 16, &mut zeros).unwrap();
    assert_eq!(zeros, [0; 16], "fresh memory reads as zeros");
}

#[test]
fn host_reads_and_writes_are_bounds_checked_and_write_nothing_when_refused() {
    let region = Region::anonymous(4096).unwrap();
    region.write(4090, b"edge!!").unwrap();
    for (offset, len) in [(4091, 6), (4096, 1), (usize::MAX, 2), (0, 4097)] {
        let data = vec![0xee; len];
        let err = region.write(offset, &data).unwrap_err();
        assert!(
            matches!(err, RegionError::OutOfBounds { .. }),
            "{offset}+{len}: {err:?}"
        );
        let mut buf = vec![0; len];
        assert!(region.read(offset, &mut buf).is_err());
    }
    let mut all = vec![0; 4096];
    region.read(0, &mut all).unwrap();
    assert!(all[..4090].iter().all(|&b| b == 0));
    assert_eq!(&all[4090..], b"edge!!");
    region.write(4096, &[]).unwrap();
}

#[test]
fn one_region_can_be_used_from_several_threads() {
    let region = std::sync::Arc::new(Region::anonymous(4096).unwrap());
    let writer = {
        let region = region.clone();
        std::thread::spawn(move || region.write(100, b"other thread").unwrap())
    };
    writer.join().unwrap();
    let mut seen = [0; 12];
    region.read(100, &mut seen).unwrap();
    assert_eq!(&seen, b"other thread");
}

#[test]
fn a_poll_sees_what_another_mapping_writes_while_it_spins() {
    let name = unique("poll");
    let owner = Region::create(&name, 4096).unwrap();
    let device = Region::attach(&name).unwrap();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(20));
        device.write(4095, &[7]).unwrap();
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while owner.poll_byte(4095).unwrap() != 7 {
        assert!(
            std::time::Instant::now() < deadline,
            "the write was never seen"
        );
        std::hint::spin_loop();
    }
    writer.join().unwrap();
    assert!(matches!(
        owner.poll_byte(4096),
        Err(RegionError::OutOfBounds { .. })
    ));
}

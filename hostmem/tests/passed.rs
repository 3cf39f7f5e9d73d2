//! Memory passed between processes as a descriptor, as a host registers it with a NIC process:
//! what is accepted, what is refused, and why no owner can crash the mapper by shrinking it.

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;

use roce_hostmem::{is_device_memory, Access, MrTable, Region, RegionError, VaBase};

fn unique(label: &str) -> String {
    format!("test-{}-{label}", std::process::id())
}

fn me() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::geteuid() }
}

/// Another handle on `region`'s descriptor, as the receiving process would get it.
fn passed(region: &Region) -> OwnedFd {
    region.fd().unwrap().try_clone_to_owned().unwrap()
}

fn truncate(fd: &impl AsRawFd, len: i64) -> i32 {
    // SAFETY: a valid descriptor.
    unsafe { libc::ftruncate(fd.as_raw_fd(), len) }
}

#[test]
fn a_shared_region_is_sealed_and_maps_the_same_pages_elsewhere() {
    let host = Region::shared(10_000).unwrap();
    assert_eq!(host.len(), 12_288);
    let nic = Region::from_fd(passed(&host), me()).unwrap();
    host.write(5000, b"through the descriptor").unwrap();
    let mut seen = [0u8; 22];
    nic.read(5000, &mut seen).unwrap();
    assert_eq!(&seen, b"through the descriptor");
    // Nobody can change its size: not the creator, not the receiver.
    assert_ne!(truncate(&host.fd().unwrap(), 0), 0);
    assert_ne!(truncate(&nic.fd().unwrap(), 1 << 20), 0);
    assert!(!nic.faulted());
}

#[test]
fn a_named_file_shrunk_under_its_mapper_fails_the_access_instead_of_killing_it() {
    let name = unique("shrink");
    let host = Region::create(&name, 4 * 4096).unwrap();
    let nic = Arc::new(Region::from_fd(passed(&host), me()).unwrap());
    assert_eq!(nic.name(), Some(name.as_str()), "the name is kept for logs");
    let mut table = MrTable::new();
    let pd = table.alloc_pd();
    let all = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let keys = table
        .register(pd, Arc::clone(&nic), 0, nic.len(), all, VaBase::Zero)
        .unwrap();
    let place = |va, len| table.resolve_remote(keys.rkey, pd, va, len, Access::REMOTE_WRITE);
    place(0, 8).unwrap().write(0, b"before..").unwrap();

    // The owner shrinks the file to one page: the pages behind the rest are gone.
    assert_eq!(truncate(&host.fd().unwrap(), 4096), 0);
    let err = place(3 * 4096, 100)
        .unwrap()
        .write(0, &[7; 100])
        .unwrap_err();
    assert_eq!(err, roce_hostmem::AccessError::OutOfBounds);
    assert!(nic.faulted());
    // From now on every access fails, also to pages that are still there.
    let mut buf = [0u8; 8];
    assert!(place(0, 8).unwrap().read_into(0, &mut buf).is_err());
    // The owner's own view is untouched by what the mapper's copy did.
    let mut kept = [0u8; 8];
    host.read(0, &mut kept).unwrap();
    assert_eq!(&kept, b"before..");
}

#[test]
fn device_memory_is_known_while_it_lives() {
    let ring = Region::device_memory("test-ring", 4096).unwrap();
    let other = Region::shared(4096).unwrap();
    assert!(is_device_memory(ring.fd().unwrap()));
    assert!(!is_device_memory(other.fd().unwrap()));
    let fd = passed(&ring);
    drop(ring);
    assert!(!is_device_memory(fd.as_fd()));
}

#[test]
fn descriptors_that_are_not_shared_memory_are_refused() {
    let disk = tempfile_in(&std::env::temp_dir());
    assert!(matches!(
        Region::from_fd(disk.into(), me()),
        Err(RegionError::Untrusted { .. })
    ));
    let dir = File::open("/dev/shm").unwrap();
    assert!(matches!(
        Region::from_fd(dir.into(), me()),
        Err(RegionError::NotAFile { .. })
    ));
    // An empty memfd maps nothing, sealed or not (an unsealed one has mode 777: refused too).
    let name = std::ffi::CString::new("empty").unwrap();
    // SAFETY: a valid name and descriptor; the results are checked.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: `fd` is new and ours.
    let unsealed = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    assert!(matches!(
        Region::from_fd(unsealed, me()),
        Err(RegionError::Untrusted { .. })
    ));
    // SAFETY: as above.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    assert!(fd >= 0);
    assert_eq!(
        // SAFETY: `fd` is a valid memfd of ours.
        unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) },
        0
    );
    // SAFETY: `fd` is new and ours.
    let empty = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    assert!(matches!(
        Region::from_fd(empty, me()),
        Err(RegionError::Empty { .. })
    ));
}

#[test]
fn an_unsealed_file_must_belong_to_the_peer_and_be_writable_by_nobody_else() {
    let name = unique("others");
    let host = Region::create(&name, 4096).unwrap();
    let path = host.path().unwrap().to_owned();
    assert!(matches!(
        Region::from_fd(passed(&host), me() + 1),
        Err(RegionError::Untrusted { .. })
    ));
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = Region::from_fd(passed(&host), me()).unwrap_err();
    assert!(err.to_string().contains("mode 666"), "{err}");
}

#[test]
fn attach_refuses_a_name_another_user_planted() {
    if me() != 0 {
        roce_testkit::skip("planting a file as another user needs root");
        return;
    }
    let name = unique("planted");
    let path = Path::new("/dev/shm").join(format!("roce-{name}"));
    std::fs::write(&path, vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
    let err = Region::attach(&name).unwrap_err();
    std::fs::remove_file(&path).unwrap();
    assert!(
        matches!(&err, RegionError::Untrusted { reason, .. } if reason.contains("user 65534")),
        "{err}"
    );
}

#[test]
fn attach_refuses_a_file_of_ours_that_others_may_read() {
    let name = unique("readable");
    let region = Region::create(&name, 4096).unwrap();
    std::fs::set_permissions(
        region.path().unwrap(),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let err = Region::attach(&name).unwrap_err();
    assert!(err.to_string().contains("read"), "{err}");
}

/// A plain file on a disk file system, already removed.
fn tempfile_in(dir: &Path) -> File {
    let path = dir.join(unique("disk"));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    file.set_len(4096).unwrap();
    std::fs::remove_file(&path).unwrap();
    file
}

//! Named regions whose name appears only once their pages are there. Reserving a gigabyte of
//! /dev/shm (`--size 1G`) takes a good part of a second; a region made by name the usual way
//! is visible all that time, and a demo killed meanwhile (SIGKILL, the OOM killer) would leave
//! it behind. Here the file is made without a name (O_TMPFILE), its pages reserved, and only
//! then linked under the name the NIC maps it by — which the demo removes again as soon as the
//! NIC has mapped it. Where O_TMPFILE is not supported, the region is made the usual way.

use std::path::Path;

use roce_hostmem::{Region, FILE_PREFIX, SHM_DIR};
use rustix::fs::{AtFlags, FallocateFlags, Mode, OFlags, CWD};
use rustix::io::Errno;

use crate::DemoError;

/// The region `name` of `len` bytes (a whole number of pages), mapped.
pub fn region(name: &str, len: usize) -> Result<Region, DemoError> {
    let what = |e: Errno| DemoError::because(&format!("cannot make the region {name}"), e);
    let unnamed = rustix::fs::open(
        SHM_DIR,
        OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
        Mode::RUSR | Mode::WUSR,
    );
    let file = match unnamed {
        Ok(file) => file,
        Err(Errno::OPNOTSUPP | Errno::ISDIR | Errno::INVAL) => {
            return Region::create(name, len)
                .map_err(|e| DemoError::because(&format!("cannot make the region {name}"), e))
        }
        Err(e) => return Err(what(e)),
    };
    rustix::fs::fallocate(&file, FallocateFlags::empty(), 0, len as u64).map_err(|e| {
        if e == Errno::NOSPC {
            DemoError::Usage(format!(
                "/dev/shm has no room for {} MiB: choose a smaller --size or use --in-process",
                len >> 20
            ))
        } else {
            what(e)
        }
    })?;
    let path = Path::new(SHM_DIR).join(format!("{FILE_PREFIX}{name}"));
    let fd = format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&file));
    rustix::fs::linkat(CWD, fd.as_str(), CWD, &path, AtFlags::SYMLINK_FOLLOW).map_err(what)?;
    Region::attach(name).map_err(|e| {
        let _ = Region::remove(name);
        DemoError::because(&format!("cannot map the region {name}"), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_region_has_its_size_and_is_shared_by_name() {
        let name = format!("demoshm{}", std::process::id());
        let region = region(&name, 1 << 20).unwrap();
        assert_eq!(region.len(), 1 << 20);
        region.write(100, b"seen").unwrap();
        let again = Region::attach(&name).unwrap();
        let mut back = [0; 4];
        again.read(100, &mut back).unwrap();
        assert_eq!(&back, b"seen");
        Region::remove(&name).unwrap();
    }
}

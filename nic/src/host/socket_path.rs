//! Where a NIC's control socket lives, and which NIC names are allowed.
//!
//! A NIC's name is also the prefix of the memfds it creates for its rings (`roce-<name>-qp17`,
//! seen in /proc/PID/maps), so names follow the region rules with room to spare.

use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Longest NIC name: its region names (`<name>-doorbell`, `<name>-cq65535`) must stay within
/// the 64 bytes a region name may have.
pub const MAX_NIC_NAME: usize = 32;

/// Why a NIC name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("NIC name {name:?} is not valid: {reason}")]
pub struct NameError {
    pub name: String,
    pub reason: &'static str,
}

/// Checks that `name` can name a NIC: 1 to 32 letters, digits, '.', '_' or '-', not starting
/// with '-' or '.'.
pub fn check_name(name: &str) -> Result<(), NameError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NIC_NAME {
        Some("it is longer than 32 bytes")
    } else if name.starts_with(['-', '.']) {
        Some("it starts with '-' or '.'")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("only letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(NameError {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The directory of control sockets: `$XDG_RUNTIME_DIR/roce`, or `/tmp/roce-<uid>` where
/// there is no runtime directory (a root shell, CI).
pub fn socket_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => PathBuf::from(dir).join("roce"),
        // SAFETY: getuid has no preconditions and cannot fail.
        None => PathBuf::from(format!("/tmp/roce-{}", unsafe { libc::getuid() })),
    }
}

/// The control socket of the NIC called `name`.
pub fn socket_path(name: &str) -> PathBuf {
    socket_dir().join(format!("{name}.sock"))
}

/// Checks that `dir` may hold this user's control sockets: a real directory (not a symlink),
/// owned by this user and writable by nobody else. `/tmp/roce-<uid>` is a name anyone can take
/// first: a directory another user made there could hold their socket in our NIC's place.
pub fn check_dir(dir: &Path) -> io::Result<()> {
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    let refuse = |why: String| {
        Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("refusing the socket directory {}: {why}", dir.display()),
        ))
    };
    if !meta.is_dir() {
        return refuse("it is not a directory".into());
    }
    if meta.uid() != me {
        return refuse(format!(
            "it belongs to user {}, not to user {me} (remove it, or set XDG_RUNTIME_DIR)",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "its mode {:03o} lets other users put files in it",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Makes `dir` (private to this user) if it is missing, then checks it as [`check_dir`] does.
pub fn prepare_dir(dir: &Path) -> io::Result<()> {
    if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(dir) {
        if e.kind() != io::ErrorKind::AlreadyExists {
            // A missing parent (XDG_RUNTIME_DIR/roce under a runtime directory that is gone).
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
    }
    check_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_region_rules_with_room_for_suffixes() {
        for good in ["nic0", "a", "host-A_1.x", &"n".repeat(MAX_NIC_NAME)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
            assert!(format!("{good}-cq65535").len() <= roce_hostmem::MAX_NAME_LEN);
        }
        for bad in [
            "",
            "-x",
            ".x",
            "a/b",
            "a b",
            "é",
            &"n".repeat(MAX_NIC_NAME + 1),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn sockets_live_under_the_runtime_directory() {
        let path = socket_path("nic0");
        assert!(path.ends_with("nic0.sock"));
        assert_eq!(path.parent(), Some(socket_dir().as_path()));
    }

    #[test]
    fn a_directory_of_another_user_or_open_to_others_is_refused() {
        let base = std::env::temp_dir().join(format!("roce-dircheck-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        prepare_dir(&base).unwrap();
        let meta = std::fs::metadata(&base).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o700);
        std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let err = prepare_dir(&base).unwrap_err();
        assert!(err.to_string().contains("mode 777"), "{err}");
        let link = base.with_extension("link");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&base, &link).unwrap();
        assert!(
            check_dir(&link).is_err(),
            "a symlink was taken for a directory"
        );
        std::fs::remove_file(&link).unwrap();
        // SAFETY: no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o700))
                .unwrap();
            std::os::unix::fs::chown(&base, Some(65534), None).unwrap();
            let err = check_dir(&base).unwrap_err();
            assert!(err.to_string().contains("user 65534"), "{err}");
        } else {
            roce_testkit::skip("a directory of another user needs root to make");
        }
        std::fs::remove_dir(&base).unwrap();
    }
}

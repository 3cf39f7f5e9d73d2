//! Where a NIC's control socket lives, and which NIC names are allowed.
//!
//! A NIC's name is also the prefix of the shared-memory regions it creates for its rings
//! (`<name>-qp17`, `<name>-doorbell`), so names follow the region rules with room to spare.

use std::path::PathBuf;

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
}

//! `libibverbs.so.1` of our own: unmodified verbs programs (rdma-core's `ibv_*_pingpong`,
//! perftest, your own C) drive a `roce nic` process.
//!
//! Real libibverbs finds devices through the kernel and loads a provider through a private ABI
//! that changes with every rdma-core release; a device without a kernel driver cannot be found
//! that way. So this crate is the library itself: the same soname, the same symbol versions
//! (`libibverbs.map` and [`symbols`]) and the same structure layouts ([`abi`]) as rdma-core
//! 44, over the Rust host client of `roce_nic::host`. `roce run --nic NAME -- PROGRAM` puts it
//! first on the program's library path and names the NIC in `ROCE_NIC`.
//!
//! - Devices ([`device`]): one per NIC named in `ROCE_NIC` (comma-separated), or every NIC
//!   whose control socket is in this user's socket directory.
//! - Objects ([`verbs`]): each C object (`ibv_pd`, `ibv_cq`, `ibv_qp`, ...) is the first field
//!   of a Rust struct that holds the Rust object behind it; the inline `ibv_post_send`,
//!   `ibv_poll_cq`, ... reach us through `context->ops`, the extended verbs through the
//!   `verbs_context` before the context ([`qp_ex`] for the `ibv_wr_*` API).
//! - Memory ([`mr`]): `ibv_reg_mr` re-backs the program's pages with shared memory the NIC maps
//!   too, so the NIC writes straight into the program's buffer.
//! - The out-of-band TCP of the programs ([`oob`]): connections to the peer's address go over
//!   the NIC's own TCP, never the host's network.
//!
//! Every entry point reports errors as libibverbs does (NULL or an errno, never a panic
//! across the C boundary: see [`guard`]).

// Every `unsafe extern "C"` entry point has the contract of the libibverbs call it implements
// (its man page): pointers from the program are the objects this library gave it.
#![allow(clippy::missing_safety_doc)]

/// Binds each `roce_<name>` function of the invoking module to `<name>@@<node>` with a
/// `.symver` directive (the nodes are declared in `libibverbs.map`; rustc's own version script
/// for a cdylib is anonymous and cannot name them). Invoked in the module that defines the
/// functions: the directive must be in the same object file as the definition, and a function
/// so bound is called only from its own module (another module's call can make rustc put the
/// definition in another codegen unit than the directive): other modules call its body.
macro_rules! versions {
    ($($node:literal: [$($name:ident),* $(,)?])*) => {
        std::arch::global_asm!(concat!($($(
            ".symver roce_", stringify!($name), ", ", stringify!($name), "@@", $node, "\n",
        )*)*));
    };
}

/// `from_ptr` for a Rust object whose first field is the C object the program holds.
macro_rules! c_object {
    ($rust:ident: $c:ident, made by $maker:literal) => {
        impl $rust {
            /// # Safety
            #[doc = concat!("`ptr` must come from ", $maker, " and not be destroyed.")]
            pub unsafe fn from_ptr<'a>(ptr: *mut $c) -> &'a $rust {
                // SAFETY: the C object is the first field of the repr(C) Rust one (the
                // caller's promise).
                unsafe { &*(ptr as *const $rust) }
            }
        }
    };
}

pub mod abi;
pub mod cm;
pub mod device;
pub mod mr;
pub mod oob;
pub mod qp_ex;
pub mod srq;
mod symbols;
pub mod verbs;

use std::ffi::c_int;

/// Sets the calling thread's `errno`.
pub(crate) fn set_errno(errno: c_int) {
    // SAFETY: __errno_location returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = errno };
}

/// Runs an entry point's body, turning a panic (a bug of ours) into `failed` with errno EIO
/// instead of unwinding into C, which would abort the program.
pub(crate) fn guard<T>(failed: T, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(value) => value,
        Err(_) => {
            set_errno(libc::EIO);
            failed
        }
    }
}

/// The environment variable that makes every failed verb say why on standard error (an
/// errno alone rarely tells which attribute the NIC refused).
pub const DEBUG_ENV: &str = "ROCE_VERBS_DEBUG";

/// The errno of a failed verb; with `ROCE_VERBS_DEBUG` set, the NIC's sentence on stderr too.
pub(crate) fn fail(what: &str, error: &roce_nic::verbs::VerbsError) -> c_int {
    static DEBUG: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *DEBUG.get_or_init(|| std::env::var_os(DEBUG_ENV).is_some()) {
        eprintln!("libibverbs (roce): {what}: {error}");
    }
    error.errno()
}

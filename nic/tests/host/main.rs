//! Hosts in other processes: the control socket, shared-memory rings and the doorbell, and the
//! host boundary as a trust boundary (hostile hosts). One test binary
//! (`cargo test -p roce-nic --test host hostile_host::`).

#[path = "../common/mod.rs"]
mod common;

mod host_socket;
mod hostile_host;

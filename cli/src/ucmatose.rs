//! `roce ucmatose`: librdmacm's ucmatose with one connection, connected with the RDMA CM (see
//! [`crate::cm_example`]).

pub use crate::cm_example::{ucmatose as run, Args};

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce ucmatose --nic nic0
    roce ucmatose -s 10.0.0.1 -C 100 -S 4096 --nic nic1
  Against rdma-core's ucmatose in a Soft-RoCE guest (there: ucmatose), with a NIC of the
  tool's own:
    roce ucmatose -s 10.77.0.2 --connect-retry 60 --link cable:127.0.0.1:47911,127.0.0.1:47910 \\
        --ip 10.77.0.1 --link-mtu 1500";

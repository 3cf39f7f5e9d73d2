//! `roce udaddy`: librdmacm's udaddy with one connection — UD QPs found through the RDMA CM's
//! UDP port space (SIDR); see [`crate::cm_example`].

pub use crate::cm_example::{udaddy as run, Args};

pub const EXAMPLES: &str = "\
Examples:
  Server and client on two running NICs (see roce nic --help):
    roce udaddy --nic nic0
    roce udaddy -s 10.0.0.1 -C 100 -S 1000 --nic nic1
  Against rdma-core's udaddy in a Soft-RoCE guest (there: udaddy), with a NIC of the
  tool's own:
    roce udaddy -s 10.77.0.2 --connect-retry 60 --link cable:127.0.0.1:47911,127.0.0.1:47910 \\
        --ip 10.77.0.1 --link-mtu 1500";

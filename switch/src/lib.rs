//! An Ethernet switch for emulated RoCE fabrics, as `roce switch` runs it: L2 learning,
//! per-port egress queues with a line rate and a buffer, ECN marking by RED, tail drop, and
//! 802.1Qbb PFC. Its ports are links (`roce_nic::link`), usually UDP cables in the same format
//! as `roce nic`'s, so our NICs, QEMU guests and other switches plug into it alike.
//!
//! The switch's decisions ([`switch::Switch`], with [`queue`], [`red`], [`pfc`],
//! [`learning`]) are code with no I/O, driven by frames and `now`, and tested in simulated
//! time; [`driver`] is the process loop around them.

pub mod counters;
pub mod driver;
pub mod incast;
pub mod learning;
pub mod pfc;
pub mod queue;
pub mod red;
pub mod switch;
pub mod units;

pub use counters::PortCounters;
pub use switch::{PortConfig, Switch, SwitchConfig, Transmit};

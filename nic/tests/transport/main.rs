//! The transport through the NIC's engine: RC, UC and UD between threaded devices, errors and
//! recovery, the wire's rules, QP states, DCQCN and the connection manager. One test binary for
//! all of them (linked once; run one part with `cargo test -p roce-nic --test transport wire_rules::`).

#[path = "../common/mod.rs"]
mod common;

mod cm;
mod cq_moderation;
mod cq_overrun;
mod dcqcn;
mod in_flight;
mod qp_states;
mod rc_basic;
mod rc_bypass;
mod rc_cable;
mod rc_errors;
mod rc_verbs;
mod recovery;
mod srq;
mod threads;
mod uc;
mod ud;
mod wire_rules;

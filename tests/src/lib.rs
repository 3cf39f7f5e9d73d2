//! Helpers shared by the cross-crate test suites.

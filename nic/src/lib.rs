//! The emulated RNIC.

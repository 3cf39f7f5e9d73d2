//! Host memory for the emulated RNIC.

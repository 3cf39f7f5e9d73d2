//! The out-of-band TCP of verbs programs (filled in below).

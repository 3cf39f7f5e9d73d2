//! RoCEv2 on the wire: zero-copy views and representations of every header.

//! `librdmacm.so.1` of our own: the soname and version nodes of rdma-core's (`RDMACM_1.0` to
//! `RDMACM_1.3`, from `librdmacm.map`), and nothing else. A program's `rdma_*@RDMACM_1.0`
//! references are found in our `libibverbs.so.1` (crate libverbs, module `cm`), beside the
//! contexts, PDs and QPs the RDMA CM calls work on: the dynamic loader looks a versioned symbol
//! up in every loaded object, not only in the file its version came from (as for the functions
//! glibc 2.34 moved from libpthread into libc). The loader still requires this file to exist
//! and to declare the nodes a program names.
//!
//! This file names `libibverbs.so.1` as NEEDED (build.rs), as rdma-core's does, so our
//! libibverbs is loaded to answer even for a program that calls no `ibv_*` itself.

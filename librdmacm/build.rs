//! Links the cdylib as rdma-core's librdmacm: its soname, its version nodes (bound to the
//! symbols by `.symver` directives in src/lib.rs), and a NEEDED entry for `libibverbs.so.1`,
//! where our `rdma_*` calls live. Without that entry a program that calls only `rdma_*`,
//! linked with the toolchain's default `--as-needed`, would drop libibverbs from its own
//! NEEDED list and find none of the calls; rdma-core's librdmacm names libibverbs too.
//!
//! The entry is recorded by linking against a stub with libibverbs' soname and no symbols,
//! made here with the C compiler that links Rust programs on Linux: librdmacm takes no symbol
//! from it, so which libibverbs.so.1 the loader later finds (ours, first on `roce run`'s
//! library path) is all that matters.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rerun-if-changed=librdmacm.map");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmacm.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,--version-script={dir}/librdmacm.map");

    let stub_dir = out.join("needed");
    std::fs::create_dir_all(&stub_dir).expect("make OUT_DIR/needed");
    let source = stub_dir.join("empty.c");
    std::fs::write(&source, "/* libibverbs.so.1's soname, nothing else */\n")
        .expect("write the stub's source");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-shared", "-nostdlib", "-Wl,-soname,libibverbs.so.1", "-o"])
        .arg(stub_dir.join("libibverbs.so"))
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("run {cc} to make the libibverbs.so.1 stub: {e}"));
    assert!(
        status.success(),
        "{cc} could not make the libibverbs.so.1 stub"
    );
    println!("cargo:rustc-cdylib-link-arg=-L{}", stub_dir.display());
    println!("cargo:rustc-cdylib-link-arg=-Wl,--no-as-needed");
    println!("cargo:rustc-cdylib-link-arg=-libverbs");
}

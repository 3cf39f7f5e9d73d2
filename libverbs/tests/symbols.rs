//! Every symbol Debian's verbs programs and the rdma-core providers they link import from
//! libibverbs or librdmacm, at the version they name (`objdump -T`), is defined by our
//! libibverbs.so.1 at that version (the RDMA CM calls too: see the `cm` module), and our
//! librdmacm.so.1 declares every librdmacm node they name. A missing one would stop the
//! program at load time: they bind immediately.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The `(version, name)` pairs of `objdump -T FILE` that are defined (`defined`) or imported.
fn dynamic_symbols(file: &Path, defined: bool) -> BTreeSet<(String, String)> {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "objdump -T {}", file.display());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| l.contains("*UND*") != defined)
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let (version, name) = (words.get(words.len().wrapping_sub(2))?, words.last()?);
            let version = version.trim_matches(|c| c == '(' || c == ')');
            (version.starts_with("IBVERBS_") || version.starts_with("RDMACM_"))
                .then(|| (version.to_owned(), (*name).to_owned()))
        })
        .collect()
}

/// The version nodes `objdump -p FILE` lists under "Version definitions".
fn version_nodes(file: &Path) -> BTreeSet<String> {
    let out = Command::new("objdump")
        .arg("-p")
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .skip_while(|l| !l.starts_with("Version definitions"))
        .skip(1)
        .take_while(|l| !l.starts_with("Version References"))
        .filter_map(|l| l.split_whitespace().nth(3).map(str::to_owned))
        .collect()
}

/// Where cargo put this crate's cdylib: beside the test executable.
fn ours(file: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap();
    [dir.join(file), dir.join("..").join(file)]
        .into_iter()
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("{file} is not built beside {}", dir.display()))
}

#[test]
fn we_define_everything_the_programs_and_providers_import() {
    if Command::new("objdump").arg("--version").output().is_err() {
        roce_testkit::skip("objdump is not installed (Debian package binutils)");
        return;
    }
    let importers: Vec<PathBuf> = [
        "/usr/bin/ibv_devices",
        "/usr/bin/ibv_devinfo",
        "/usr/bin/ibv_rc_pingpong",
        "/usr/bin/ibv_uc_pingpong",
        "/usr/bin/ibv_ud_pingpong",
        "/usr/bin/ibv_srq_pingpong",
        "/usr/bin/ib_write_bw",
        "/usr/bin/ib_read_bw",
        "/usr/bin/ib_send_bw",
        "/usr/bin/ib_atomic_bw",
        "/usr/bin/ib_write_lat",
        "/usr/bin/ib_read_lat",
        "/usr/bin/ib_send_lat",
        "/usr/bin/ib_atomic_lat",
        "/usr/bin/rping",
        "/usr/bin/ucmatose",
        "/usr/bin/rdma_server",
        "/usr/lib/x86_64-linux-gnu/libmlx5.so.1",
        "/usr/lib/x86_64-linux-gnu/libefa.so.1",
    ]
    .into_iter()
    .map(PathBuf::from)
    .filter(|p| p.exists())
    .collect();
    if importers.len() < 19 {
        roce_testkit::skip("ibverbs-utils, perftest or rdmacm-utils is not installed");
        return;
    }
    let defined = dynamic_symbols(&ours("libibverbs.so"), true);
    let mut missing = BTreeSet::new();
    let mut rdmacm_nodes = BTreeSet::new();
    for file in &importers {
        for (version, name) in dynamic_symbols(file, false) {
            if version.starts_with("RDMACM_") {
                rdmacm_nodes.insert(version.clone());
            }
            if !defined.contains(&(version.clone(), name.clone())) {
                missing.insert(format!("{name}@{version} (imported by {})", file.display()));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not defined by our libibverbs: {missing:#?}"
    );
    // The ones this test must have seen, so that a parse that finds nothing cannot pass.
    for (version, name) in [
        ("IBVERBS_1.1", "ibv_open_device"),
        ("IBVERBS_1.0", "ibv_create_comp_channel"),
        ("IBVERBS_1.6", "ibv_qp_to_qp_ex"),
        ("IBVERBS_1.8", "ibv_reg_mr_iova2"),
        ("IBVERBS_PRIVATE_34", "ibv_query_gid_type"),
        ("RDMACM_1.0", "rdma_connect"),
    ] {
        assert!(
            defined.contains(&(version.into(), name.into())),
            "{name}@{version}"
        );
    }
    let nodes = version_nodes(&ours("librdmacm.so"));
    assert!(
        rdmacm_nodes.is_subset(&nodes),
        "our librdmacm.so.1 declares {nodes:?}, the programs name {rdmacm_nodes:?}"
    );
    let soname = Command::new("objdump")
        .arg("-p")
        .arg(ours("libibverbs.so"))
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&soname.stdout).contains("SONAME               libibverbs.so.1")
    );
    // As rdma-core's, our librdmacm names libibverbs (where its calls are): a program calling
    // only rdma_*, linked --as-needed, still loads it.
    let rdmacm = Command::new("objdump")
        .arg("-p")
        .arg(ours("librdmacm.so"))
        .output()
        .unwrap();
    let rdmacm = String::from_utf8_lossy(&rdmacm.stdout);
    assert!(
        rdmacm.contains("SONAME               librdmacm.so.1"),
        "{rdmacm}"
    );
    assert!(
        rdmacm.contains("NEEDED               libibverbs.so.1"),
        "{rdmacm}"
    );
}

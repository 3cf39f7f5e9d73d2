//! The structures of `abi` and `cm` against the system's `infiniband/verbs.h`
//! (libibverbs-dev) and `rdma/rdma_cma.h` (librdmacm-dev): a C program prints every size and
//! offset they name, compiled with gcc, and each must equal ours.

use std::process::Command;

#[test]
fn structures_match_the_system_header() {
    let header = std::path::Path::new("/usr/include/infiniband/verbs.h");
    if !header.exists() {
        roce_testkit::skip("libibverbs-dev is not installed (no infiniband/verbs.h)");
        return;
    }
    let mut ours = ibverbs::abi::layout();
    let mut c =
        String::from("#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\n");
    // The RDMA CM's structures too, where librdmacm-dev gives their header.
    if std::path::Path::new("/usr/include/rdma/rdma_cma.h").exists() {
        c.push_str("#include <rdma/rdma_cma.h>\n");
        ours.extend(ibverbs::cm::layout());
    } else {
        roce_testkit::skip("librdmacm-dev is not installed (no rdma/rdma_cma.h)");
    }
    c.push_str("int main(void) {\n");
    for (expr, _) in &ours {
        c.push_str(&format!("  printf(\"%zu\\n\", (size_t){expr});\n"));
    }
    c.push_str("  return 0;\n}\n");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("layout.c");
    let exe = dir.path().join("layout");
    std::fs::write(&src, c).unwrap();
    let built = Command::new("gcc")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "gcc failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let out = Command::new(&exe).output().unwrap();
    let theirs: Vec<usize> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(theirs.len(), ours.len());
    let wrong: Vec<String> = ours
        .iter()
        .zip(&theirs)
        .filter(|((_, a), b)| a != *b)
        .map(|((e, a), b)| format!("{e}: ours {a}, verbs.h {b}"))
        .collect();
    assert!(wrong.is_empty(), "layouts differ:\n{}", wrong.join("\n"));
}

//! The committed captures of real rxe traffic, `captures/softroce/<scenario>.pcap`, each with
//! tshark's field dump beside it (`<scenario>.fields.txt`). Real traffic differs from run to
//! run, so they are rewritten only on demand: `ROCE_REGENERATE_CAPTURES=1`.

use std::path::{Path, PathBuf};

/// Where the captures live in the repository.
pub fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../captures/softroce")
}

/// Whether to rewrite them: `ROCE_REGENERATE_CAPTURES=1`, refused under CI.
pub fn regenerate() -> bool {
    roce_tests::regenerate("ROCE_REGENERATE_CAPTURES")
}

/// The fields of the dump: where each frame came from, and every RoCE header field tshark
/// knows, as tshark names them (tshark 4.0 files an AtomicETH's VA and R_Key under `reth`).
pub const FIELDS: &[&str] = &[
    "frame.number",
    "frame.len",
    "eth.src",
    "eth.dst",
    "ip.src",
    "ip.dst",
    "udp.srcport",
    "udp.dstport",
    "infiniband.bth.opcode",
    "infiniband.bth.se",
    "infiniband.bth.m",
    "infiniband.bth.padcnt",
    "infiniband.bth.tver",
    "infiniband.bth.p_key",
    "infiniband.bth.destqp",
    "infiniband.bth.a",
    "infiniband.bth.psn",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.deth.q_key",
    "infiniband.deth.srcqp",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "data.len",
    "infiniband.invariant.crc",
];

/// tshark's dump of the RoCE frames of `pcap`: a header line, then one tab-separated line per
/// frame.
pub fn field_dump(pcap: &Path) -> String {
    field_dump_of(pcap, FIELDS)
}

/// tshark's dump of `fields` of the RoCE frames of `pcap`, laid out as [`field_dump`]'s.
pub fn field_dump_of(pcap: &Path, fields: &[&str]) -> String {
    let mut cmd = roce_tests::tshark_fields(pcap);
    cmd.args(["-Y", "infiniband"]);
    cmd.args(["-E", "header=y", "-E", "separator=/t", "-E", "occurrence=f"]);
    for field in fields {
        cmd.args(["-e", field]);
    }
    let out = cmd
        .output()
        .expect("tshark, to regenerate the captures' field dumps");
    assert!(
        out.status.success(),
        "tshark failed on {}: {}",
        pcap.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("tshark prints UTF-8")
}

/// Copies the captures into the repository, each with its field dump.
pub fn commit(captures: &[PathBuf]) {
    let dir = committed_dir();
    std::fs::create_dir_all(&dir).unwrap();
    for capture in captures {
        let name = capture.file_name().expect("a capture file");
        let to = dir.join(name);
        std::fs::copy(capture, &to).unwrap();
        std::fs::write(to.with_extension("fields.txt"), field_dump(&to)).unwrap();
        eprintln!("rewrote {}", to.display());
    }
}

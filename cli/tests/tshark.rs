//! tshark and `roce decode -v --json` (every field, not just the essential ones) must agree on
//! every field of every packet in every capture under `captures/` (and the real ones in
//! `../shared/captures/`, when they are there); how the two are brought to the same terms, and
//! where tshark 4.0 cannot follow, is in `roce_tests::oracle`.

use std::path::Path;

use roce_tests::oracle::{self, Comparison};
use roce_tests::{captures_dir, captures_under, shared_captures_dir, skip};

fn roce() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_roce"))
}

#[test]
fn tshark_and_roce_decode_agree_on_every_field() {
    if !oracle::tshark_available() {
        skip("tshark is not installed; the tshark conformance test did not run");
        return;
    }
    let mut files = captures_under(&captures_dir());
    assert!(
        !files.is_empty(),
        "no captures under {}",
        captures_dir().display()
    );
    files.extend(captures_under(&shared_captures_dir()));
    let fields = oracle::fields();
    let mut outcome = Comparison::default();
    for file in &files {
        outcome.add(roce(), file, &fields);
    }
    eprintln!(
        "tshark conformance: {} files, {} RoCE packets, {} fields agreed, {} fields excused \
         (opcodes tshark 4.0 does not know, CM path fields it misreads)",
        outcome.files, outcome.packets, outcome.fields, outcome.excused
    );
    outcome.assert_agreement();
    // Every opcode of the bundled captures was seen: the comparison was not vacuous.
    assert!(
        outcome.packets >= 4 * 40,
        "only {} packets",
        outcome.packets
    );
    // Nor was any field left out because both decoders passed over it.
    let never = outcome.never_compared(&fields);
    assert!(
        never.is_empty(),
        "fields neither decoder reported in any packet: {never:?}"
    );
}

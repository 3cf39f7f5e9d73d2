//! `roce decode` as a user meets it: its lines, tree, JSON, exit codes and error messages.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use roce_tests::{bundled, captures_dir, shared_captures_dir, skip};
use roce_wire::capture::Writer;

fn roce(args: &[&str], files: &[&Path]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("decode")
        .args(args)
        .args(files)
        .output()
        .expect("running roce")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8")
}

/// A capture of `frames`, in a temporary directory that lives as long as the returned guard.
fn capture_of(frames: &[Vec<u8>]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("made.pcap");
    let mut writer = Writer::new(Vec::new()).expect("writing to memory");
    for (i, frame) in frames.iter().enumerate() {
        writer
            .write(bundled::time(i), frame)
            .expect("writing to memory");
    }
    std::fs::write(&path, writer.into_inner()).expect("writing the capture");
    (dir, path)
}

fn shared(name: &str) -> Option<PathBuf> {
    let path = shared_captures_dir().join(name);
    if path.exists() {
        Some(path)
    } else {
        skip(&format!(
            "{} is absent; the real-capture CLI test did not run",
            path.display()
        ));
        None
    }
}

#[test]
fn lines_for_the_soft_roce_ping_pong_are_exactly_these() {
    let Some(path) = shared("softroce-rc-pingpong.pcap") else {
        return;
    };
    let output = roce(&[], &[&path]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(
        stdout(&output),
        "   10   0.029409 10.77.0.2 → 10.77.0.1 RC SEND_ONLY QP=0x000123 PSN=12214977 AckReq payload=64 ICRC ok
   11   0.029682 10.77.0.1 → 10.77.0.2 RC ACKNOWLEDGE QP=0x000011 PSN=12214977 [ACK] MSN=1 ICRC ok
   12   0.029723 10.77.0.1 → 10.77.0.2 RC SEND_ONLY QP=0x000011 PSN=43981 AckReq payload=64 ICRC ok
   13   0.033407 10.77.0.2 → 10.77.0.1 RC ACKNOWLEDGE QP=0x000123 PSN=43981 [ACK] MSN=1 ICRC ok
15 packets: 4 RoCE, 0 malformed, 11 not RoCE (skipped); 0 bad ICRC
        2  RC SEND_ONLY
        2  RC ACKNOWLEDGE
"
    );
    assert_eq!(stderr(&output), "");
}

#[test]
fn the_tree_shows_each_field_at_its_byte_offset() {
    let path = captures_dir().join("every-opcode-vlan.pcap");
    let output = roce(&["-v"], &[&path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    // Frame 12: RC RDMA_WRITE_ONLY_WITH_IMMEDIATE over IPv6 in an 802.1Q tag: Ethernet 14,
    // tag 4, IPv6 40, UDP 8, so the BTH starts at byte 66 (0x42), the RETH at 78 (0x4e), the
    // ImmDt at 94 (0x5e).
    let frame = text
        .split("\n\n")
        .find(|block| block.trim_start().starts_with("12 "))
        .expect("frame 12");
    // Offsets in hex, four digits, as the demo shows them; first and last byte of a field.
    for expected in [
        "    802.1Q tag, bytes 000e-0011",
        "      000e-000f .... 0100 0010 1100 = VLAN ID: 1068  [vlan.id]",
        "    IPv6, bytes 0012-0039",
        "      0012-0013 .... 0110 0011 .... = Traffic class: 0x63  [ipv6.tclass]",
        "      0012-0013 .... .... ..11 .... = ECN: 3 (congestion experienced)  [ipv6.tclass.ecn]",
        "      0013-0015 .... 1100 1000 0011 1111 0111 = Flow label: 0xc83f7  [ipv6.flow]",
        "    Base Transport Header (BTH), bytes 0042-004d",
        "      0042      Opcode: 11 (RC RDMA_WRITE_ONLY_WITH_IMMEDIATE)  [infiniband.bth.opcode]",
        "      0046      .1.. .... = BECN: true (congestion on the way back)  [roce.bth.becn]",
        "      0047-0049 Destination QP: 0x00b0cb  [infiniband.bth.destqp]",
        "    RDMA Extended Transport Header (RETH), bytes 004e-005d",
        "      004e-0055 Virtual address: 0x00007f00000b0058  [infiniband.reth.va]",
        "      005e-0061 Immediate data: ca:fe:00:0b  [infiniband.immdt]",
        "      009a-009d ICRC status: ok  [roce.icrc.status]",
    ] {
        assert!(frame.contains(expected), "no {expected:?} in\n{frame}");
    }
}

#[test]
fn json_has_one_object_per_roce_packet_keyed_by_tshark_names() {
    let path = captures_dir().join("every-opcode-ipv4.pcap");
    let output = roce(&["--json"], &[&path]);
    assert!(output.status.success(), "{}", stderr(&output));
    let objects: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON object per line"))
        .collect();
    // 40 opcodes and the two from well-known ports; the ARP request and plain UDP are skipped.
    assert_eq!(objects.len(), 42);
    let read_request = objects
        .iter()
        .find(|o| o["infiniband.bth.opcode"] == 12)
        .expect("an RDMA READ request");
    assert_eq!(read_request["frame.number"], 15);
    assert_eq!(read_request["frame.time_epoch"], "1700000000.014000182");
    assert_eq!(read_request["ip.src"], "10.0.0.1");
    assert_eq!(read_request["udp.dstport"], 4791);
    assert_eq!(read_request["infiniband.bth.a"], true);
    assert_eq!(read_request["infiniband.reth.va"], 0x7f00_000c_0060u64);
    assert_eq!(read_request["roce.icrc.status"], "ok");
    assert!(
        read_request.get("data.len").is_none(),
        "no payload, no data.len"
    );
    let from_dns_port = &objects[41];
    assert_eq!(from_dns_port["udp.srcport"], 69);
    // The summary goes to standard error, keeping standard output pure JSON.
    assert!(stderr(&output).starts_with("44 packets: 42 RoCE, 0 malformed, 2 not RoCE"));
}

fn every_opcode_frames() -> Vec<Vec<u8>> {
    bundled::endless_frames().take(40).collect()
}

#[test]
fn strict_fails_on_a_bad_icrc_and_the_line_shows_both_values() {
    let mut frames = every_opcode_frames();
    let last = frames[3].len() - 1;
    frames[3][last] ^= 0x01;
    let (_dir, path) = capture_of(&frames);

    let lenient = roce(&[], &[&path]);
    assert_eq!(lenient.status.code(), Some(0));
    let text = stdout(&lenient);
    let bad: Vec<&str> = text.lines().filter(|l| l.contains("ICRC BAD")).collect();
    assert_eq!(bad.len(), 1, "{text}");
    assert!(bad[0].starts_with("    4 "), "{}", bad[0]);
    assert!(bad[0].contains("(expected 0x"), "{}", bad[0]);
    assert!(text.contains("; 1 bad ICRC"), "{text}");

    let strict = roce(&["--strict"], &[&path]);
    assert_eq!(strict.status.code(), Some(1));
    let json = roce(&["--strict", "--json"], &[&path]);
    assert_eq!(json.status.code(), Some(1));
    assert!(stdout(&json).contains(r#""roce.icrc.status":"bad""#));
}

#[test]
fn strict_fails_on_a_malformed_packet_which_is_shown_not_skipped() {
    let mut frames = every_opcode_frames();
    let cut = frames[0].len() - 5;
    frames[0].truncate(cut);
    let (_dir, path) = capture_of(&frames);
    let output = roce(&["--strict"], &[&path]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    assert!(
        text.lines()
            .next()
            .is_some_and(|l| l.contains("malformed: truncated IPv4")),
        "{text}"
    );
    assert!(
        text.contains("40 packets: 39 RoCE, 1 malformed, 0 not RoCE"),
        "{text}"
    );
    assert_eq!(roce(&[], &[&path]).status.code(), Some(0));
}

#[test]
fn only_the_destination_port_makes_roce() {
    // RoCE's port as the source, DNS's as the destination: a DNS packet, whatever tshark says.
    let mut frames = every_opcode_frames();
    frames[0][34..36].copy_from_slice(&4791u16.to_be_bytes());
    frames[0][36..38].copy_from_slice(&53u16.to_be_bytes());
    let (_dir, path) = capture_of(&frames[..2]);
    let output = roce(&[], &[&path]);
    assert!(stdout(&output).contains("2 packets: 1 RoCE, 0 malformed, 1 not RoCE"));
}

#[test]
fn several_files_are_headed_by_name_and_summed() {
    let a = captures_dir().join("aeth-syndromes.pcap");
    let b = captures_dir().join("linux-cooked-sll2.pcap");
    let output = roce(&[], &[&a, &b]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with(&format!("{}:\n", a.display())), "{text}");
    assert!(text.contains(&format!("\n{}:\n", b.display())), "{text}");
    assert!(text.contains("28 packets: 28 RoCE"), "{text}");
    assert!(
        text.contains("[NAK, remote access error] MSN=1011"),
        "{text}"
    );
    assert!(text.contains("[RNR NAK, retry after 655.36 ms]"), "{text}");
}

/// Exit code 2 and exactly one line on standard error, nothing on standard output.
fn assert_one_line_failure(output: &Output, expected: &str) {
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stderr(output), format!("roce: {expected}\n"));
    assert_eq!(stdout(output), "");
}

#[test]
fn a_missing_file_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let missing = dir.path().join("missing.pcap");
    let good = captures_dir().join("padding.pcap");
    let output = roce(&[], &[&good, &missing]);
    assert_one_line_failure(&output, &format!("{}: no such file", missing.display()));
}

#[test]
fn a_file_that_is_not_a_capture_is_one_line_and_exit_2() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "these are notes, not packets\n").expect("writing a file");
    let output = roce(&["--json"], &[&text]);
    assert_one_line_failure(
        &output,
        &format!("{}: not a pcap or pcapng capture", text.display()),
    );
    let output = roce(&[], &[dir.path()]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(stderr(&output).lines().count(), 1, "{}", stderr(&output));
}

#[test]
fn a_capture_cut_short_prints_what_it_has_and_the_summary_then_one_error_line() {
    let bytes = std::fs::read(captures_dir().join("every-opcode-ipv4.pcap")).expect("reading");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cut = dir.path().join("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).expect("writing a file");
    let output = roce(&[], &[&cut]);
    assert_eq!(output.status.code(), Some(2));
    assert_eq!(
        stderr(&output),
        format!(
            "roce: {}: the capture ends in the middle of a record\n",
            cut.display()
        )
    );
    // The 43 records before the cut (41 RoCE), then the summary of them, which says so.
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.iter().filter(|l| l.contains(" ICRC ok")).count(), 41);
    assert!(lines.contains(&"43 packets: 41 RoCE, 0 malformed, 2 not RoCE (skipped); 0 bad ICRC"));
    assert_eq!(
        lines.last().copied(),
        Some(
            format!(
                "{} is truncated: it ends in the middle of a record; the summary counts the records before it",
                cut.display()
            )
            .as_str()
        )
    );
    // JSON, which is handed on in batches, also shows everything before the damage, and its
    // summary (on standard error) says the same.
    let json = roce(&["--json"], &[&cut]);
    assert_eq!(json.status.code(), Some(2));
    assert_eq!(stdout(&json).lines().count(), 41);
    assert!(stderr(&json).contains("is truncated: it ends in the middle of a record"));
}

/// `roce decode` with the capture on standard input.
fn roce_stdin(args: &[&str], input: &[u8]) -> Output {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .arg("decode")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running roce");
    let mut stdin = child.stdin.take().expect("a pipe");
    // Written from another thread: roce may print before it has read everything.
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().expect("roce's output");
    writer
        .join()
        .expect("the writer")
        .expect("writing the capture");
    output
}

#[test]
fn a_capture_on_standard_input_decodes_as_the_file_does_pcap_and_pcapng() {
    for name in ["every-opcode-ipv4.pcap", "two-interfaces.pcapng"] {
        let path = captures_dir().join(name);
        let bytes = std::fs::read(&path).expect("reading");
        for args in [&[][..], &["-v"], &["--json"]] {
            let from_file = roce(args, &[&path]);
            let mut with_dash: Vec<&str> = args.to_vec();
            with_dash.push("-");
            let from_stdin = roce_stdin(&with_dash, &bytes);
            assert!(from_stdin.status.success(), "{}", stderr(&from_stdin));
            assert_eq!(stdout(&from_stdin), stdout(&from_file), "{name} {args:?}");
        }
    }
    // With a file beside it, standard input is headed by that name.
    let path = captures_dir().join("padding.pcap");
    let bytes = std::fs::read(captures_dir().join("aeth-syndromes.pcap")).expect("reading");
    let path_arg = path.to_str().expect("a UTF-8 path");
    let both = roce_stdin(&[path_arg, "-"], &bytes);
    assert!(both.status.success(), "{}", stderr(&both));
    assert!(
        stdout(&both).contains("\nstandard input:\n"),
        "{}",
        stdout(&both)
    );
    // Nothing, or text, on standard input is refused by name.
    for input in [&b""[..], b"not a capture\n"] {
        let refused = roce_stdin(&["-"], input);
        assert_eq!(refused.status.code(), Some(2));
        assert_eq!(
            stderr(&refused),
            "roce: standard input: not a pcap or pcapng capture\n"
        );
    }
}

#[test]
fn json_names_the_opcode_beside_its_number() {
    let output = roce(
        &["--json"],
        &[&captures_dir().join("every-opcode-ipv4.pcap")],
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let mut names = Vec::new();
    for line in stdout(&output).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("JSON");
        let opcode = v["infiniband.bth.opcode"].as_u64().expect("an opcode");
        let name = v["roce.bth.opcode_name"].as_str().expect("its name");
        let expected = roce_wire::Opcode::from_u8(opcode as u8)
            .expect("an opcode")
            .to_string();
        assert_eq!(name, expected);
        names.push(name.to_owned());
    }
    assert!(names.contains(&"UD SEND_ONLY_WITH_IMMEDIATE".to_owned()));
    assert!(names.contains(&"CNP".to_owned()));
}

#[test]
fn a_cnp_is_named_and_its_ecn_bits_shown() {
    let Some(path) = shared("connectx4lx-cnp.pcap") else {
        return;
    };
    let output = roce(&[], &[&path]);
    assert!(output.status.success(), "{}", stderr(&output));
    // DSCP 48 (CS6) and ECT(0), as tshark reads the IP header; BECN set, 16 reserved bytes.
    assert_eq!(
        stdout(&output).lines().next(),
        Some("    1   0.000000 10.0.17.1 → 10.0.18.1 DSCP=48 ECN=ECT(0) CNP QP=0x000118 PSN=0 BECN ICRC ok")
    );
    assert!(stdout(&output).ends_with("        1  CNP\n"));
    let json = roce(&["--json"], &[&path]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("JSON");
    assert_eq!(v["roce.bth.opcode_name"], "CNP");
    assert_eq!(v["ip.dsfield.ecn"], 2);
    assert_eq!(v["roce.bth.becn"], true);
}

#[test]
fn decoding_on_several_threads_keeps_the_capture_order() {
    // Enough records for many batches, so that the workers finish them out of order.
    let frames: Vec<Vec<u8>> = bundled::endless_frames().take(20_000).collect();
    let (_dir, path) = capture_of(&frames);
    for args in [&[][..], &["--json"], &["-v"]] {
        let mut one: Vec<&str> = args.to_vec();
        one.extend(["--threads", "1"]);
        let mut four: Vec<&str> = args.to_vec();
        four.extend(["--threads", "4"]);
        let (a, b) = (roce(&one, &[&path]), roce(&four, &[&path]));
        assert!(a.status.success() && b.status.success());
        assert_eq!(stdout(&a), stdout(&b), "{args:?}");
        assert_eq!(stderr(&a), stderr(&b), "{args:?}");
    }
    let json = roce(&["--json", "--threads", "3"], &[&path]);
    let numbers: Vec<u64> = stdout(&json)
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["frame.number"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(numbers, (1..=20_000).collect::<Vec<u64>>());
}

#[test]
fn a_reader_that_goes_away_ends_the_decode_quietly() {
    let frames: Vec<Vec<u8>> = bundled::endless_frames().take(50_000).collect();
    let (_dir, path) = capture_of(&frames);
    for args in [&[][..], &["--json"]] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
            .arg("decode")
            .args(args)
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running roce");
        let mut stdout = child.stdout.take().expect("a pipe");
        let mut first = [0u8; 100];
        std::io::Read::read_exact(&mut stdout, &mut first).expect("some output");
        drop(stdout);
        let output = child.wait_with_output().expect("roce ends");
        assert_eq!(
            output.status.code(),
            Some(0),
            "{args:?}: {}",
            stderr(&output)
        );
        assert_eq!(stderr(&output), "", "{args:?}");
    }
}

#[test]
fn a_live_capture_on_standard_input_shows_each_packet_as_it_arrives() {
    use std::io::{BufRead, Write};
    // The capture's header and first packet, then (once that packet is shown) the second.
    let bytes = std::fs::read(captures_dir().join("aeth-syndromes.pcap")).expect("reading");
    let first_end = 24 + 16 + 62;
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("running roce");
    let mut stdin = child.stdin.take().expect("a pipe");
    let stdout = child.stdout.take().expect("a pipe");
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            if lines_tx.send(line.expect("UTF-8")).is_err() {
                return;
            }
        }
    });
    stdin.write_all(&bytes[..first_end]).expect("writing");
    stdin.flush().expect("flushing");
    let limit = std::time::Duration::from_secs(30);
    let first = lines
        .recv_timeout(limit)
        .expect("the first packet, before any other is sent");
    assert!(first.starts_with("    1 "), "{first}");
    stdin.write_all(&bytes[first_end..]).expect("writing");
    drop(stdin);
    let rest: Vec<String> = lines.iter().collect();
    assert!(rest.iter().any(|l| l.starts_with("   16 ")), "{rest:?}");
    assert!(child.wait().expect("roce ends").success());
    reader.join().expect("the reader");
}

/// A capture of `packets` of the bundled frames, written straight to a file.
fn big_capture(dir: &Path, packets: usize) -> PathBuf {
    let path = dir.join(format!("{packets}.pcap"));
    let file = std::fs::File::create(&path).expect("creating the capture");
    let mut writer = Writer::new(std::io::BufWriter::new(file)).expect("a pcap header");
    for (i, frame) in bundled::endless_frames().take(packets).enumerate() {
        writer
            .write(bundled::time(i), &frame)
            .expect("writing the capture");
    }
    std::io::Write::flush(&mut writer.into_inner()).expect("flushing the capture");
    path
}

/// Runs `roce decode --json FILE` with its output discarded; returns its peak resident memory
/// in KiB, which only `wait4` reports for a child.
// The child is waited for with wait4; `Child::wait` would not give its resource usage.
#[allow(clippy::zombie_processes)]
fn peak_memory_kib(file: &Path) -> u64 {
    let child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["decode", "--json"])
        .arg(file)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("running roce");
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: zeroed memory is a valid `rusage` (integers only).
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our child, not yet waited for (the `Child` is never waited on), and the
    // pointers are to live locals of the right types.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "waiting for the decoder");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);
    usage.ru_maxrss as u64
}

/// Decoding holds a fixed number of batches, so a capture ten times larger — here about 420 MB
/// against 42 MB — takes no more memory. Ignored as it writes half a gigabyte of captures:
/// `cargo test -p roce-cli --test decode -- --ignored peak_memory`.
#[test]
#[ignore = "writes 460 MB of captures to the temporary directory"]
fn peak_memory_is_flat_in_the_capture_size() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let small = big_capture(dir.path(), 400_000);
    let big = big_capture(dir.path(), 4_000_000);
    let big_bytes = std::fs::metadata(&big).expect("the capture").len();
    assert!(big_bytes > 300_000_000, "{big_bytes} bytes");
    let (small_kib, big_kib) = (peak_memory_kib(&small), peak_memory_kib(&big));
    eprintln!("peak memory: {small_kib} KiB for 400,000 packets, {big_kib} KiB for 4,000,000 ({big_bytes} bytes)");
    // A little slack for the allocator; growth with the capture would be hundreds of MiB.
    assert!(
        big_kib <= small_kib + small_kib / 5 + 4096,
        "{small_kib} KiB for 400,000 packets but {big_kib} KiB for 4,000,000"
    );
}

//! `roce mem` as a user runs it: the built binary, its output and its error lines.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Output, Stdio};

use roce_hostmem::Region;

fn roce(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Asserts the command failed with `code` and exactly the one error line `message`.
fn assert_fails(output: &Output, code: i32, message: &str) {
    assert_eq!(output.status.code(), Some(code), "{}", stderr(output));
    assert_eq!(stderr(output), format!("roce: {message}\n"));
    assert_eq!(stdout(output), "");
}

/// A region name no other test (or concurrent test run) uses, removed at the end of the test.
struct Name(String);

impl Name {
    fn new(label: &str) -> Name {
        Name(format!("clitest-{}-{label}", std::process::id()))
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = Region::remove(&self.0);
    }
}

#[test]
fn create_makes_a_region_that_outlives_the_command_and_rm_removes_it() {
    let name = Name::new("create");
    let path = format!("/dev/shm/roce-{}", name.0);
    let created = roce(&["mem", "create", &name.0, "5K"]);
    assert!(created.status.success(), "{}", stderr(&created));
    assert_eq!(
        stdout(&created),
        format!("created region {}: {path}, 8192 bytes\n", name.0)
    );
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 8192);

    let removed = roce(&["mem", "rm", &name.0]);
    assert!(removed.status.success());
    assert_eq!(stdout(&removed), format!("removed region {}\n", name.0));
    assert!(!std::path::Path::new(&path).exists());
}

#[test]
fn bad_names_sizes_and_missing_regions_are_one_clear_line() {
    let name = Name::new("errors");
    let path = format!("/dev/shm/roce-{}", name.0);
    assert!(roce(&["mem", "create", &name.0, "4K"]).status.success());
    // A name that is taken is bad input, like a name that does not exist: both exit with 2.
    assert_fails(
        &roce(&["mem", "create", &name.0, "4K"]),
        2,
        &format!("region {path} already exists"),
    );
    assert_fails(
        &roce(&["mem", "create", "x", "0"]),
        2,
        "a size of zero bytes is not allowed",
    );
    assert_fails(
        &roce(&["mem", "create", "x", "4Q"]),
        2,
        "\"4Q\" is not a size: use a number with an optional K, M, G or T suffix",
    );
    assert_fails(
        &roce(&["mem", "create", "x", "65G"]),
        2,
        "\"65G\" is too large: the limit is 64 GiB",
    );
    assert_fails(
        &roce(&["mem", "create", "../x", "4K"]),
        2,
        "region name \"../x\" is not valid: it contains '..'",
    );
    let missing = Name::new("missing");
    let missing_path = format!("/dev/shm/roce-{}", missing.0);
    for cmd in ["rm", "dump", "watch"] {
        assert_fails(
            &roce(&["mem", cmd, &missing.0]),
            2,
            &format!("region {missing_path} does not exist"),
        );
    }
    assert_fails(
        &roce(&["mem", "dump", &name.0, "8K"]),
        2,
        &format!(
            "offset 0x2000 is past the end of region {} (4096 bytes)",
            name.0
        ),
    );
    assert_fails(
        &roce(&["mem", "dump", &name.0, "0", "lots"]),
        2,
        "LEN \"lots\" is not a byte count: use decimal, 0x-hex or a K, M or G suffix",
    );
}

#[test]
fn dump_prints_a_hexdump_with_zero_runs_collapsed() {
    let name = Name::new("dump");
    assert!(roce(&["mem", "create", &name.0, "8K"]).status.success());
    let region = Region::attach(&name.0).unwrap();
    region.write(0x1004, b"Hello, shared RAM").unwrap();

    let whole = roce(&["mem", "dump", &name.0]);
    assert!(whole.status.success(), "{}", stderr(&whole));
    assert_eq!(
        stdout(&whole),
        "\
00000000  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|
*
00001000  00 00 00 00 48 65 6c 6c  6f 2c 20 73 68 61 72 65  |....Hello, share|
00001010  64 20 52 41 4d 00 00 00  00 00 00 00 00 00 00 00  |d RAM...........|
00001020  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|
*
00002000
"
    );

    let part = roce(&["mem", "dump", &name.0, "0x1008", "12"]);
    assert_eq!(
        stdout(&part),
        "00001008  6f 2c 20 73 68 61 72 65  64 20 52 41              |o, shared RA|\n00001014\n"
    );
    let past_the_end = roce(&["mem", "dump", &name.0, "8176", "1M"]);
    assert_eq!(
        stdout(&past_the_end),
        "00001ff0  00 00 00 00 00 00 00 00  00 00 00 00 00 00 00 00  |................|\n00002000\n"
    );
}

/// Starts `roce mem watch` and waits for its first line, so the region is mapped and the first
/// look taken before the test changes anything.
fn start_watch(args: &[&str]) -> (Child, BufReader<std::process::ChildStdout>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_roce"))
        .args(["mem", "watch"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    out.read_line(&mut header).unwrap();
    (child, out, header)
}

#[test]
fn watch_prints_a_change_made_by_another_process_with_its_own_cpu_cost() {
    let name = Name::new("watch");
    assert!(roce(&["mem", "create", &name.0, "4K"]).status.success());
    let (mut child, mut out, header) = start_watch(&[&name.0, "--count", "1", "--duration", "30"]);
    assert_eq!(
        header,
        format!(
            "watching region {} (4096 bytes), 10 looks a second; Ctrl-C ends\n",
            name.0
        )
    );
    Region::attach(&name.0)
        .unwrap()
        .write(0x12, b"hello")
        .unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let lines: Vec<&str> = rest.lines().collect();
    assert_eq!(lines.len(), 4, "{rest}");
    assert!(
        lines[0].ends_with("5 bytes changed at 0x12: 00 00 00 00 00 → 68 65 6c 6c 6f"),
        "{rest}"
    );
    assert_eq!(
        lines[1],
        "00000010  00 00 68 65 6c 6c 6f 00  00 00 00 00 00 00 00 00  |..hello.........|"
    );
    assert!(
        lines[2].trim_start().starts_with("watcher CPU: user "),
        "{rest}"
    );
    assert!(lines[3].starts_with("saw 1 change in "), "{rest}");
    assert!(lines[3].contains("voluntary"), "{rest}");
}

#[test]
fn watch_json_is_one_object_per_line_for_the_start_each_change_and_the_summary() {
    let name = Name::new("watchjson");
    assert!(roce(&["mem", "create", &name.0, "4K"]).status.success());
    let (mut child, mut out, header) =
        start_watch(&[&name.0, "--json", "--count", "1", "--duration", "30"]);
    let header: serde_json::Value = serde_json::from_str(&header).unwrap();
    assert_eq!(header["event"], "watching");
    assert_eq!(header["region"], name.0.as_str());
    assert_eq!(header["size_bytes"], 4096);
    Region::attach(&name.0)
        .unwrap()
        .write(0x12, b"hello")
        .unwrap();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let lines: Vec<serde_json::Value> = rest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{rest}");
    let change = &lines[0];
    assert_eq!(change["event"], "change");
    assert_eq!(
        (change["offset"].as_u64(), change["len_bytes"].as_u64()),
        (Some(0x12), Some(5))
    );
    assert_eq!(change["old_hex"], "00 00 00 00 00");
    assert_eq!(change["new_hex"], "68 65 6c 6c 6f");
    assert!(change["watcher"]["user_s"].is_f64(), "{change}");
    assert_eq!(lines[1]["event"], "summary");
    assert_eq!(lines[1]["changes"], 1);
    assert!(lines[1]["watcher"]["voluntary_switches"].is_i64(), "{rest}");
}

#[test]
fn watch_ends_after_its_duration_or_on_ctrl_c() {
    let name = Name::new("watch-end");
    assert!(roce(&["mem", "create", &name.0, "4K"]).status.success());

    let (mut child, mut out, _) = start_watch(&[&name.0, "--duration", "0.3"]);
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success());
    let seconds: f64 = rest
        .strip_prefix("saw 0 changes in ")
        .and_then(|tail| tail.split_once(" s; watcher CPU"))
        .and_then(|(secs, _)| secs.parse().ok())
        .unwrap_or_else(|| panic!("{rest}"));
    assert!(seconds >= 0.25, "stopped early: {rest}");

    let forever = roce(&[
        "mem",
        "watch",
        &name.0,
        "--count",
        "0",
        "--duration",
        "1e19",
    ]);
    assert!(forever.status.success(), "{}", stderr(&forever));
    assert!(stdout(&forever).contains("saw 0 changes in "));

    // Ctrl-C, and SIGTERM as kill(1) and timeout(1) send it, end the watch with its summary.
    for signal in [libc::SIGINT, libc::SIGTERM] {
        let (mut child, mut out, _) = start_watch(&[&name.0, "--duration", "30"]);
        // SAFETY: plain kill(2) of our own child.
        assert_eq!(unsafe { libc::kill(child.id() as i32, signal) }, 0);
        let mut rest = String::new();
        out.read_to_string(&mut rest).unwrap();
        assert!(
            child.wait().unwrap().success(),
            "signal {signal} is a normal end"
        );
        assert!(
            rest.starts_with("saw 0 changes in "),
            "signal {signal}: {rest}"
        );
    }
}

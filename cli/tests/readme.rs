//! The README, executed: every command block in it is run by this test, in the README's order,
//! and the output it shows is checked — exactly where it is deterministic, by shape (numbers
//! and hex may differ) where it is not. The bypass recipe runs as a user at three terminals
//! follows it: serve, connect, freeze the server, post, look, thaw.
//!
//! What the test changes, and only that: `cargo run --release --bin roce --` and `roce` are
//! this build's `roce`; the UDP ports 7001 and 7002 are ports free now; the region `buf` and
//! the NICs get names of this test's own (NIC sockets live in a private runtime directory);
//! `4242` is the server's real process number; a `--peer` line is the real one; `~` is a
//! temporary directory. Blocks that need a QEMU guest, a benchmark's minutes, the network or
//! this very test suite are listed in [`skipped`] with the reason; any other block this test
//! does not run fails it, so a new README block needs a step here.

mod support;

use std::collections::VecDeque;
use std::time::Duration;

use support::*;

/// One code block of the README.
#[derive(Debug, Clone)]
struct Block {
    /// 1-based line of its first line.
    line: usize,
    text: String,
    rust: bool,
}

/// The fenced (```) and indented (4 spaces) blocks of `readme`, in order.
fn blocks(readme: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let lines: Vec<&str> = readme.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let trimmed = lines[i].trim_start();
        if let Some(tag) = trimmed.strip_prefix("```") {
            let indent = lines[i].len() - trimmed.len();
            let start = i + 1;
            i += 1;
            while i < lines.len() && !lines[i].trim_start().starts_with("```") {
                i += 1;
            }
            let text: Vec<&str> = lines[start..i.min(lines.len())]
                .iter()
                .map(|l| l.get(indent..).unwrap_or(l.trim_start()))
                .collect();
            out.push(Block {
                line: start + 1,
                text: text.join("\n"),
                rust: tag.trim() == "rust",
            });
            i += 1;
            continue;
        }
        let after_blank = i == 0 || lines[i - 1].trim().is_empty();
        if after_blank && lines[i].starts_with("    ") && !lines[i].trim().is_empty() {
            let start = i;
            while i < lines.len() && (lines[i].starts_with("    ") || lines[i].trim().is_empty()) {
                i += 1;
            }
            let text: Vec<&str> = lines[start..i]
                .iter()
                .map(|l| l.get(4..).unwrap_or(""))
                .collect();
            out.push(Block {
                line: start + 1,
                text: text.join("\n").trim_end().to_owned(),
                rust: false,
            });
            continue;
        }
        i += 1;
    }
    out
}

/// Why a block is not run here, if it is not.
fn skipped(block: &Block) -> Option<&'static str> {
    let t = block.text.as_str();
    if block.rust {
        return Some("a Rust fragment of the verbs API, not a command");
    }
    let reasons: [(&str, &str); 14] = [
        (
            "tests/interop/softroce-vm",
            "needs the QEMU guest (cli/tests/softroce.rs runs it)",
        ),
        (
            "roce pingpong rc -n 100 --link cable:127.0.0.1:47911",
            "needs the QEMU guest",
        ),
        (
            "ROCE_REGENERATE_CAPTURES=1",
            "rewrites the bundled captures (tests/bundled_captures.rs checks them)",
        ),
        ("scripts/test", "runs every suite, this one among them"),
        (
            "cargo install cargo-fuzz",
            "installs a tool and fuzzes with nightly for minutes",
        ),
        (
            "cargo bench",
            "a criterion benchmark: minutes, and no pass or fail",
        ),
        (
            "cargo run --release -p roce-tests --example synthetic_capture",
            "a benchmark against tshark on a million packets",
        ),
        (
            "roce perftest write_bw -s 65536 -n 200 --connect-retry 60",
            "needs the QEMU guest",
        ),
        (
            "cargo test -p roce-cli --test softroce",
            "needs the QEMU guest",
        ),
        (
            "tests/interop/softroce-vm run -- rping",
            "needs the QEMU guest",
        ),
        (
            "cargo build --release -p roce-nic --example write_profile",
            "a profile under valgrind: a release build and minutes, no pass or fail",
        ),
        (
            "valgrind --tool=callgrind roce decode",
            "instruction counts under valgrind of the decode bench's captures: minutes, no pass or fail",
        ),
        (
            "roce bench --incast",
            "seconds of real-time processes and no exact output (cli/tests/fabric.rs runs it)",
        ),
        (
            "switch --rate",
            "a topology file for roce fabric up, not a command (cli/tests/fabric.rs runs fabrics)",
        ),
    ];
    reasons
        .iter()
        .find(|(start, _)| t.trim_start().starts_with(start) || t.contains(&format!("\n{start}")))
        .map(|(_, why)| *why)
}

/// The README's blocks, handed out in order to the steps that run them.
struct Readme {
    blocks: VecDeque<Block>,
}

impl Readme {
    fn load() -> Readme {
        let text =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md")).unwrap();
        Readme {
            blocks: blocks(&text).into(),
        }
    }

    /// The next block that is run here, which must start with `start`.
    fn next(&mut self, start: &str) -> Block {
        while let Some(block) = self.blocks.pop_front() {
            if skipped(&block).is_some() {
                continue;
            }
            assert!(
                block.text.trim_start().starts_with(start),
                "README line {}: this test expected a block starting with {start:?} here, found \
                 {:?}. A block added to the README needs a step in cli/tests/readme.rs (or a \
                 reason in `skipped`).",
                block.line,
                block.text
            );
            return block;
        }
        panic!("the README has no more blocks; expected one starting with {start:?}");
    }

    /// Every block has been run (or is skipped with a reason).
    fn done(mut self) {
        while let Some(block) = self.blocks.pop_front() {
            assert!(
                skipped(&block).is_some(),
                "README line {}: no step of cli/tests/readme.rs runs this block:\n{}",
                block.line,
                block.text
            );
        }
    }
}

/// A command block's commands (`$ ` lines, or every line if none has the prompt), joined
/// over `\` line ends, each with the output lines that follow it.
fn commands(block: &Block) -> Vec<(String, Vec<String>)> {
    let prompted = block.text.lines().any(|l| l.starts_with("$ "));
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut continued = false;
    for line in block.text.lines() {
        if continued {
            let (command, _) = out.last_mut().unwrap();
            command.push(' ');
            command.push_str(line.trim().trim_end_matches('\\').trim_end());
            continued = line.trim_end().ends_with('\\');
        } else if !prompted || line.starts_with("$ ") {
            let command = line.trim_start_matches("$ ");
            continued = command.trim_end().ends_with('\\');
            out.push((
                command
                    .trim_end()
                    .trim_end_matches('\\')
                    .trim_end()
                    .to_owned(),
                Vec::new(),
            ));
        } else if let Some((_, output)) = out.last_mut() {
            output.push(line.to_owned());
        }
    }
    out
}

/// Words of a command line as a shell splits them (double quotes; no expansion).
fn words(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut quoted = false;
    let mut any = false;
    for c in command.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                any = true;
            }
            c if c.is_whitespace() && !quoted => {
                if any {
                    out.push(std::mem::take(&mut word));
                    any = false;
                }
            }
            c => {
                word.push(c);
                any = true;
            }
        }
    }
    if any {
        out.push(word);
    }
    out
}

/// The names and numbers the README uses, and this run's own.
struct Names {
    swaps: Vec<(String, String)>,
}

impl Names {
    /// `word` with the README's names replaced by this run's.
    fn ours(&self, word: &str) -> String {
        let mut word = word.to_owned();
        for (theirs, ours) in &self.swaps {
            if word == *theirs || theirs.len() >= 4 && word.contains(theirs.as_str()) {
                word = word.replace(theirs.as_str(), ours);
            }
        }
        word
    }

    /// `text` with this run's names put back as the README's (not its numbers, which may
    /// turn up inside other numbers).
    fn theirs(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (theirs, ours) in &self.swaps {
            if !theirs.bytes().all(|b| b.is_ascii_digit()) {
                text = text.replace(ours.as_str(), theirs);
            }
        }
        text
    }

    fn swap(&mut self, theirs: &str, ours: &str) {
        self.swaps.push((theirs.to_owned(), ours.to_owned()));
    }
}

/// Whether a word may differ from run to run: it has a digit, or it is one hexdump byte.
fn variable(word: &str) -> bool {
    word.bytes().any(|b| b.is_ascii_digit())
        || word.len() == 2 && word.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `word` with every run of hex digits as `#`.
fn skeleton(word: &str) -> String {
    let mut out = String::new();
    let mut in_run = false;
    for c in word.chars() {
        if c.is_ascii_hexdigit() {
            if !in_run {
                out.push('#');
            }
            in_run = true;
        } else {
            out.push(c);
            in_run = false;
        }
    }
    out
}

/// Whether `actual` reads like `shown`: the same words, where words with numbers (process
/// numbers, PSNs, addresses, timings) may have other numbers of the same shape.
fn alike(shown: &str, actual: &str) -> bool {
    let (a, b): (Vec<&str>, Vec<&str>) = (
        shown.split_whitespace().collect(),
        actual.split_whitespace().collect(),
    );
    a.len() == b.len()
        && a.iter()
            .zip(&b)
            .all(|(x, y)| x == y || variable(x) && variable(y) && skeleton(x) == skeleton(y))
}

/// Every line `shown` (but `…`, which marks what it leaves out) is in `actual`, in order:
/// exactly, or with `alike` numbers when `loose`.
fn shows(shown: &[String], actual: &str, loose: bool, what: &str) {
    let actual: Vec<&str> = actual.lines().collect();
    let mut at = 0;
    for line in shown
        .iter()
        .filter(|l| l.trim() != "…" && !l.trim().is_empty())
    {
        let found = actual[at..].iter().position(|a| {
            if loose {
                alike(line, a)
            } else {
                a.trim_end() == line.trim_end() || a.trim() == line.trim()
            }
        });
        match found {
            Some(i) => at += i + 1,
            None => panic!(
                "{what}: the README shows {line:?}, not in the output (from line {at} on):\n{}",
                actual.join("\n")
            ),
        }
    }
}

#[test]
fn every_readme_block_runs_as_shown() {
    let mut readme = Readme::load();
    let env = Env::new("readme");
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let roce_run = |args: &[String]| {
        let mut cmd = env.roce(&args.iter().map(String::as_str).collect::<Vec<_>>());
        cmd.current_dir(root).env("NO_COLOR", "1");
        let mut proc = Proc::spawn(cmd, false);
        let status = proc.wait(Duration::from_secs(120));
        let stdout = proc.drain_stdout();
        (status, stdout, proc.stderr())
    };
    // `cargo run --release --bin roce -- ARGS` and `roce ARGS` alike: this build's roce.
    let roce_args = |command: &str, names: &Names| -> Vec<String> {
        let command = command.trim_start_matches("cargo run --release --bin roce -- ");
        let command = command.trim_start_matches("roce ");
        words(command).iter().map(|w| names.ours(w)).collect()
    };
    let mut names = Names { swaps: Vec::new() };

    // See it: roce demo, and the excerpt of what it prints.
    let block = readme.next("cargo run --release --bin roce -- demo");
    let (status, out, err) = roce_run(&roce_args(&block.text, &names));
    assert!(status.success(), "{err}");
    let excerpt = readme.next("1. The target registers memory");
    let lines: Vec<String> = excerpt.text.lines().map(str::to_owned).collect();
    shows(&lines, &out, true, "roce demo");

    // The two lessons, and the excerpts of what they print.
    for (command, excerpt) in [
        ("roce demo --scenario tcp-vs-rdma", "receiver        TCP "),
        ("roce demo --scenario allreduce", "host 0  "),
        (
            "roce demo --scenario congestion",
            "1. Without congestion control",
        ),
    ] {
        let block = readme.next(command);
        let (status, out, err) = roce_run(&roce_args(&block.text, &names));
        assert!(status.success(), "{err}");
        let lines: Vec<String> = readme
            .next(excerpt)
            .text
            .lines()
            .map(str::to_owned)
            .collect();
        shows(&lines, &out, true, command);
    }

    // Decode captures: the lines shown come from the two captures named.
    let block =
        readme.next("cargo run --release --bin roce -- decode captures/every-opcode-ipv4.pcap");
    let (status, first, err) = roce_run(&roce_args(&block.text, &names));
    assert!(status.success(), "{err}");
    let (_, second, _) = roce_run(&roce_args(
        "roce decode captures/aeth-syndromes.pcap",
        &names,
    ));
    let shown = readme.next("15   0.014000");
    for line in shown.text.lines() {
        assert!(
            first.lines().chain(second.lines()).any(|l| l == line),
            "decode: {line:?} is in neither capture's output"
        );
    }
    let verbose = readme.next("Base Transport Header (BTH)");
    let (_, out, _) = roce_run(&roce_args(
        "roce decode -v captures/every-opcode-ipv4.pcap",
        &names,
    ));
    let lines: Vec<String> = verbose.text.lines().map(str::to_owned).collect();
    shows(&lines, &out, false, "roce decode -v");

    // Check conformance: the lines shown are the recording's verdict.
    let block = readme.next("cargo run --release --bin roce -- conform captures/all-verbs.pcap");
    let (status, out, err) = roce_run(&roce_args(&block.text, &names));
    assert!(status.success(), "{err}");
    let shown = readme.next("conversation 1: RC");
    let lines: Vec<String> = shown.text.lines().map(str::to_owned).collect();
    shows(&lines, &out, false, "roce conform");

    // Two NICs and two terminals, as the README starts them, on free ports.
    let block = readme.next("roce nic --name nic0");
    let (p1, p2) = (free_udp_port(), free_udp_port());
    names.swap("127.0.0.1:7001", &format!("127.0.0.1:{p1}"));
    names.swap("127.0.0.1:7002", &format!("127.0.0.1:{p2}"));
    let region = RegionName(env.name("buf"));
    names.swap("buf", &region.0);
    let mut nics = Vec::new();
    for (command, _) in commands(&block) {
        let command = command.trim_end_matches('&').trim_end();
        let args = roce_args(command, &names);
        let mut nic = env.spawn(&args, false);
        let name = args[2].clone();
        nic.expect(|l| l.starts_with(&format!("{name} ready: mac 02:00:0a:00:00:0")));
        nics.push(nic);
    }

    // Terminal 1: the server.
    let block = readme.next("$ roce host serve --nic nic1 --region buf --size 1M");
    let (command, shown) = commands(&block).remove(0);
    let args = roce_args(&command, &names);
    let mut server = env.spawn(&args, true);
    let local = server.expect(|l| l.starts_with("local "));
    assert!(alike(&shown[0], &local), "{local}");
    let memory = server.expect(|l| l.starts_with("memory "));
    assert_eq!(names.theirs(&memory), shown[1]);
    let pid = server.pid();
    // The whole line: stderr may be read while the prompt is half written.
    eventually("the server's prompt", || {
        server.stderr().contains("help lists the commands)")
    });
    let waiting = server.stderr();
    assert!(alike(&shown[2], waiting.trim_end()), "{waiting}");
    assert!(
        waiting.contains(&format!("this is process {pid};")),
        "{waiting}"
    );
    let server_line = local.strip_prefix("local ").unwrap().to_owned();
    names.swap(
        "0000:000011:313d49:00000000000000000000ffff0a000002",
        &server_line,
    );
    names.swap("4242", &pid.to_string());

    // Terminal 2: one post; its line goes to the server, then Enter.
    let block = readme.next("$ roce host post --nic nic0 --peer");
    let (command, shown) = commands(&block).remove(0);
    let args = roce_args(&command, &names);
    let mut post = env.spawn(&args, true);
    let post_local = post.expect(|l| l.starts_with("local "));
    assert!(alike(&shown[0], &post_local), "{post_local}");
    eventually("post's prompt", || post.stderr().contains(&shown[1]));
    let endpoint = post_local.strip_prefix("local ").unwrap();
    server.say(endpoint);
    server.expect(|l| l == format!("connected to {endpoint}"));
    post.say("");
    assert!(post.wait(PATIENCE).success(), "{}", post.stderr());
    let done = readme.next("wr_id=1 RDMA_WRITE success 15 bytes");
    assert_eq!(post.drain_stdout().trim_end(), done.text);
    // `show 0 16` in terminal 1.
    let shown = readme.next("00000000  68 65 6c 6c 6f 20 66 72");
    server.say("show 0 16");
    server.expect(|l| l == shown.text);

    // Watch the bypass: one connection, then the server frozen.
    let block = readme.next("$ roce host connect --nic nic0 --peer");
    let (command, shown) = commands(&block).remove(0);
    let args = roce_args(&command, &names);
    let mut client = env.spawn(&args, true);
    let client_local = client.expect(|l| l.starts_with("local "));
    assert!(alike(&shown[0], &client_local), "{client_local}");
    eventually("connect's prompt", || client.stderr().contains(&shown[1]));
    let endpoint = client_local.strip_prefix("local ").unwrap();
    server.say(endpoint);
    server.expect(|l| l == format!("connected to {endpoint}"));

    let block = readme.next("$ kill -STOP 4242");
    let mut frozen_at = None;
    let shell = |command: &str, names: &Names| -> String {
        let w: Vec<String> = words(command).iter().map(|w| names.ours(w)).collect();
        match w[0].as_str() {
            "kill" => {
                let signal = match w[1].as_str() {
                    "-STOP" => libc::SIGSTOP,
                    "-CONT" => libc::SIGCONT,
                    other => panic!("kill {other}"),
                };
                let target: i32 = w[2].parse().unwrap();
                assert_eq!(target, pid, "the README kills the server");
                // SAFETY: kill(2) of the server this test started, by its PID.
                assert_eq!(unsafe { libc::kill(target, signal) }, 0);
                if signal == libc::SIGSTOP {
                    eventually("the server stopped", || {
                        thread_states(target).iter().all(|s| *s == 'T')
                    });
                }
                String::new()
            }
            "cat" => std::fs::read_to_string(&w[1]).unwrap(),
            other => panic!("the README runs {other}, which this test does not know"),
        }
    };
    for (command, shown) in commands(&block) {
        let out = shell(&command, &names);
        if command.starts_with("cat ") {
            assert!(alike(&shown[0], out.trim_end()), "{out}");
            frozen_at = Some(out);
        }
    }

    // Enter, then the operations typed in terminal 2, each with what it prints.
    let typed = readme.next("write 0 hello while you sleep");
    client.say("");
    let ops = [
        "write",
        "read",
        "fetch-add",
        "cmp-swap",
        "send",
        "write-hex",
        "help",
    ];
    let mut expected: Vec<String> = Vec::new();
    for line in typed.text.lines() {
        let word = line.split_whitespace().next().unwrap_or_default();
        if ops.contains(&word) {
            for want in expected.drain(..) {
                client.expect(|l| l == want);
            }
            client.say(line);
        } else {
            expected.push(line.to_owned());
        }
    }
    for want in expected.drain(..) {
        client.expect(|l| l == want);
    }

    // Terminal 3: the memory from outside, the CPU time again, then thaw.
    let block = readme.next("$ roce mem dump buf 0 32");
    for (command, shown) in commands(&block) {
        if command.starts_with("roce ") {
            let (status, out, err) = roce_run(&roce_args(&command, &names));
            assert!(status.success(), "{err}");
            assert_eq!(out.lines().collect::<Vec<_>>(), shown, "{command}");
        } else {
            let out = shell(&command, &names);
            if command.starts_with("cat ") {
                assert_eq!(
                    Some(&out),
                    frozen_at.as_ref(),
                    "the frozen server's time on a CPU moved"
                );
                let ns = |s: &str| s.split_whitespace().next().unwrap().to_owned();
                assert_eq!(ns(&out), ns(frozen_at.as_deref().unwrap()));
            }
        }
    }
    drop(client);
    server.signal(libc::SIGINT);
    assert!(server.wait(PATIENCE).success(), "{}", server.stderr());
    drop(nics);

    // Host memory from the shell.
    let block = readme.next("$ roce mem create buf 64K");
    for (command, shown) in commands(&block) {
        let args = roce_args(&command, &names);
        if command.starts_with("roce mem watch") {
            let mut watch = env.spawn(&args, false);
            let first = watch.expect(|_| true);
            assert_eq!(names.theirs(&first), shown[0]);
            // Another program writes into the region, as the README's watch saw.
            roce_hostmem::Region::attach(&region.0)
                .unwrap()
                .write(0x12, b"hello")
                .unwrap();
            assert!(watch.wait(PATIENCE).success(), "{}", watch.stderr());
            let rest = watch.drain_stdout();
            shows(&shown[1..], &names.theirs(&rest), true, "roce mem watch");
            continue;
        }
        let (status, out, err) = roce_run(&args);
        assert!(status.success(), "{command}: {err}");
        assert_eq!(
            names.theirs(&out).lines().collect::<Vec<_>>(),
            shown,
            "{command}"
        );
    }

    // roce bench: its figures vary, their lines do not.
    let block = readme.next("$ roce bench --seconds 1");
    let (command, shown) = commands(&block).remove(0);
    let (status, out, err) = roce_run(&roce_args(&command, &names));
    assert!(status.success(), "{err}");
    shows(&shown, &out, true, "roce bench");
    let block = readme.next("$ roce bench --all");
    let (command, shown) = commands(&block).remove(0);
    let (status, out, err) = roce_run(&roce_args(&command, &names));
    assert!(status.success(), "{err}");
    shows(&shown, &out, true, "roce bench --all");

    // Completions and manual pages, into a home of this test's own.
    let block = readme.next("roce completions bash");
    let home = env.dir.join("home");
    for (command, _) in commands(&block) {
        let (command, into) = match command.split_once(" > ") {
            Some((c, file)) => (c.to_owned(), Some(file.to_owned())),
            None => (command.clone(), None),
        };
        let home_of = |w: &str| w.replace('~', home.to_str().unwrap());
        let args: Vec<String> = roce_args(&command, &names)
            .iter()
            .map(|w| home_of(w))
            .collect();
        let (status, out, err) = roce_run(&args);
        assert!(status.success(), "{command}: {err}");
        if let Some(file) = into {
            assert!(
                out.contains("complete -F _roce") && out.contains("host"),
                "{out}"
            );
            let file = std::path::PathBuf::from(home_of(&file));
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, out).unwrap();
        }
    }
    let man = home.join(".local/share/man/man1");
    for page in [
        "roce.1",
        "roce-demo.1",
        "roce-host-serve.1",
        "roce-mem-watch.1",
    ] {
        let text =
            std::fs::read_to_string(man.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page}");
    }
    assert!(
        !man.join("roce-demo-target.1").exists(),
        "a page for a hidden command"
    );

    readme.done();
}

#[test]
fn the_block_reader_finds_fenced_and_indented_blocks() {
    let text = "intro\n\n    cargo run -- demo\n\ntext\n```\n$ roce x \\\n    --y \"a b\"\nout\n```\n  ```rust\n  let x;\n  ```\n";
    let found = blocks(text);
    assert_eq!(found.len(), 3, "{found:?}");
    assert_eq!(found[0].text, "cargo run -- demo");
    assert_eq!(
        commands(&found[1]),
        vec![("roce x --y \"a b\"".to_owned(), vec!["out".to_owned()])]
    );
    assert_eq!(words("roce x --y \"a b\""), ["roce", "x", "--y", "a b"]);
    assert!(found[2].rust);
    assert!(alike("pid 4242, psn 0x00ab12", "pid 77, psn 0x001234"));
    assert!(!alike("hello 12", "world 12"));
    assert!(!alike("0x0012", "12"));
}

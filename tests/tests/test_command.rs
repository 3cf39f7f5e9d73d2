//! `scripts/test` installs every program a test executes: the programs named in the test
//! sources (`Command::new("tshark")`, `ns.command(&["ping", ...])`, ...) and in the tools a
//! script the tests run declares (`need_tools cpio xz`) must each be in the script's list of
//! requirements, and each program of that list must be executed by some test — on a fresh
//! machine a missing one fails a suite (as `ping` once did), a stale one installs for nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use roce_tests::workspace;

/// Where the tests' sources are: every crate's `tests/`, this crate (its library too), and the
/// test bed `roce-nic` exports for tests.
fn test_sources() -> Vec<PathBuf> {
    let root = workspace();
    let mut dirs = vec![root.join("tests"), root.join("nic/src/testbed")];
    for entry in std::fs::read_dir(&root).unwrap() {
        let dir = entry.unwrap().path().join("tests");
        if dir.is_dir() && !dir.starts_with(root.join("tests")) {
            dirs.push(dir);
        }
    }
    let mut files: Vec<PathBuf> = dirs
        .iter()
        .flat_map(|dir| {
            walkdir::WalkDir::new(dir)
                .into_iter()
                .filter_map(Result::ok)
        })
        .map(walkdir::DirEntry::into_path)
        // This file names programs only as examples of what the scan finds.
        .filter(|p| p.is_file() && !p.ends_with(file!()))
        .collect();
    files.sort();
    files
}

/// `const NAME: &str = "value";` anywhere in `text`.
fn string_constants(text: &str, into: &mut BTreeMap<String, String>) {
    for line in text.lines() {
        let line = line.trim_start().trim_start_matches("pub ");
        let Some(rest) = line.strip_prefix("const ") else {
            continue;
        };
        let Some((name, value)) = rest.split_once(": &str = \"") else {
            continue;
        };
        if let Some(value) = value.strip_suffix("\";") {
            into.insert(name.to_owned(), value.to_owned());
        }
    }
}

/// The string literal (or the name of a string constant) at the start of `text`.
fn literal_or_constant<'a>(
    text: &'a str,
    constants: &'a BTreeMap<String, String>,
) -> Option<&'a str> {
    if let Some(rest) = text.strip_prefix('"') {
        return rest.split('"').next();
    }
    let name: String = text
        .chars()
        .take_while(|c| c.is_ascii_uppercase() || *c == '_')
        .collect();
    constants.get(&name).map(String::as_str)
}

/// The programs a Rust source executes: `Command::new(P)` (a literal or a string constant),
/// argument vectors handed to a namespace's `command`/`spawn` or built as `argv = vec![...]`,
/// and the verbs programs a test checks with `installed(P, package)` before `roce run`s them.
fn executed_by_rust(text: &str, constants: &BTreeMap<String, String>) -> Vec<String> {
    let mut found = Vec::new();
    for (pattern, skip) in [
        ("Command::new(", ""),
        (".command(&[", "&["),
        (".spawn(&[", "&["),
        ("argv = vec![", ""),
        // A verbs program a test runs under `roce run` (cli/tests/libverbs.rs).
        ("installed(", ""),
    ] {
        for (at, _) in text.match_indices(pattern) {
            let rest = &text[at + pattern.len()..];
            let rest = rest
                .trim_start()
                .strip_prefix(skip)
                .unwrap_or(rest)
                .trim_start();
            if let Some(program) = literal_or_constant(rest, constants) {
                found.push(program.to_owned());
            }
        }
    }
    found
}

/// The programs a bash script declares it runs: `need_tools A B` and `command -v A` (a tool it
/// uses when present). `$NAME` stands for the default of `NAME=${NAME:-default}`.
fn executed_by_script(text: &str) -> Vec<String> {
    let default = |word: &str| -> Option<String> {
        let name = word.trim_matches('"').strip_prefix('$')?;
        let assignment = format!("{name}=${{{name}:-");
        let at = text.find(&assignment)? + assignment.len();
        Some(text[at..].split('}').next()?.to_owned())
    };
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        let words: Vec<&str> = match (line.strip_prefix("need_tools "), line.find("command -v ")) {
            (Some(tools), _) => tools.split_whitespace().collect(),
            (None, Some(at)) if !line.starts_with('#') => line[at + 11..]
                .split_whitespace()
                .take(1)
                .filter(|w| !w.starts_with('"'))
                .collect(),
            _ => continue,
        };
        for word in words {
            match default(word) {
                Some(program) => found.push(program),
                None if !word.starts_with('$') => found.push(word.to_owned()),
                None => {}
            }
        }
    }
    found
}

/// The programs `scripts/test` installs when missing, from its `requirements` list.
fn required() -> BTreeSet<String> {
    let script = std::fs::read_to_string(workspace().join("scripts/test")).unwrap();
    let list = script
        .split("requirements=(\n")
        .nth(1)
        .and_then(|rest| rest.split("\n)").next())
        .expect("scripts/test has a requirements=( ... ) list");
    list.lines()
        .map(|line| line.trim().trim_matches('"'))
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .flat_map(|line| {
            let programs = line.split('|').nth(1).expect("package|programs|check");
            programs
                .split_whitespace()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Each program executed, with the files that execute it.
fn executed() -> BTreeMap<String, BTreeSet<String>> {
    let files = test_sources();
    let mut constants = BTreeMap::new();
    let rust: Vec<(&PathBuf, String)> = files
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "rs"))
        .map(|p| (p, std::fs::read_to_string(p).unwrap()))
        .collect();
    for (_, text) in &rust {
        string_constants(text, &mut constants);
    }
    let mut executed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut note = |program: String, file: &Path| {
        let file = file.strip_prefix(workspace()).unwrap_or(file);
        executed
            .entry(program)
            .or_default()
            .insert(file.display().to_string());
    };
    for (file, text) in &rust {
        for program in executed_by_rust(text, &constants) {
            note(program, file);
        }
    }
    for file in &files {
        let Ok(text) = std::fs::read_to_string(file) else {
            continue;
        };
        if text.starts_with("#!/usr/bin/env bash") || text.starts_with("#!/bin/bash") {
            for program in executed_by_script(&text) {
                note(program, file);
            }
        }
    }
    executed
}

#[test]
fn scripts_test_installs_every_program_the_tests_execute() {
    let executed = executed();
    let required = required();
    // The scan sees what it must: a test pings, one runs tshark, the guest harness needs cpio.
    for known in ["ping", "tshark", "ip", "cpio", "/usr/bin/python3"] {
        assert!(
            executed.contains_key(known),
            "the scan missed {known}: {executed:?}"
        );
    }
    let missing: Vec<String> = executed
        .iter()
        .filter(|(program, _)| !required.contains(*program))
        .map(|(program, files)| format!("{program} (executed by {files:?})"))
        .collect();
    assert!(
        missing.is_empty(),
        "scripts/test does not install: {}",
        missing.join(", ")
    );
    let stale: Vec<&String> = required
        .iter()
        .filter(|program| !executed.contains_key(*program))
        .collect();
    assert!(
        stale.is_empty(),
        "scripts/test installs what no test executes: {stale:?}"
    );
}

#[test]
fn the_scan_finds_each_way_a_test_names_a_program() {
    let rust = r#"
        const VIEWER: &str = "chromium";
        Command::new("tshark"); Command::new(VIEWER); Command::new(env!("CARGO_BIN_EXE_roce"));
        ns.command(&["nft", "-f", file]); ns.command(&[&["tc"], args].concat());
        ns.spawn(&["/usr/bin/python3", "-c", program]);
        let mut argv = vec!["ping", "-c", "3"];
        installed("ibv_devinfo", "ibverbs-utils");
    "#;
    let mut constants = BTreeMap::new();
    string_constants(rust, &mut constants);
    let mut found = executed_by_rust(rust, &constants);
    found.sort();
    assert_eq!(
        found,
        [
            "/usr/bin/python3",
            "chromium",
            "ibv_devinfo",
            "nft",
            "ping",
            "tc",
            "tshark"
        ]
    );
    let script = "QEMU=${QEMU:-qemu-system-x86_64}\n  need_tools \"$QEMU\" cpio\n  \
                  if command -v editcap >/dev/null; then\n  # command -v ignored\n";
    assert_eq!(
        executed_by_script(script),
        ["qemu-system-x86_64", "cpio", "editcap"]
    );
}

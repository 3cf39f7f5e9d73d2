//! The conventions every `roce` command follows (docs/cli-conventions.md), checked across the
//! whole command tree as `roce --help` lists it: examples in each long help, a manual page for
//! each command, the commit in `--version`, a suggestion for a typo.

mod support;

use support::*;

/// Every command path `roce --help` leads to: `["bench"]`, `["host", "serve"]`, ...
fn command_paths(env: &Env) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for top in env.subcommands(&[]) {
        let subs = env.subcommands(&[top.as_str()]);
        if subs.is_empty() {
            paths.push(vec![top]);
        } else {
            paths.extend(subs.into_iter().map(|s| vec![top.clone(), s]));
        }
    }
    paths
}

#[test]
fn every_command_has_examples_in_its_long_help_and_a_manual_page() {
    let env = Env::new("conv");
    let paths = command_paths(&env);
    assert!(paths.len() >= 15, "{paths:?}");
    for path in &paths {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let help = env.run(&args);
        assert!(help.status.success(), "{path:?}: {}", help.stderr);
        assert!(
            help.stdout.contains("\nExamples:\n"),
            "roce {} --help has no examples",
            path.join(" ")
        );
        let example = help
            .stdout
            .split("\nExamples:\n")
            .nth(1)
            .unwrap_or_default();
        assert!(
            example.contains(&format!("roce {}", path.join(" "))),
            "roce {}: the examples do not use the command:\n{example}",
            path.join(" ")
        );
    }
    let dir = env.dir.join("man");
    let done = env.run(&["man", "--dir", dir.to_str().unwrap()]);
    assert!(done.status.success(), "{}", done.stderr);
    for path in &paths {
        let page = dir.join(format!("roce-{}.1", path.join("-")));
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        assert!(
            text.contains(".SH EXAMPLES") || text.contains("Examples:"),
            "{}",
            page.display()
        );
    }
    let roce = env.run(&["man"]);
    assert!(
        roce.stdout.starts_with(".ie \\n(.g .ds Aq \\(aq") || roce.stdout.contains(".TH roce 1")
    );
}

#[test]
fn the_version_names_the_commit() {
    let env = Env::new("ver");
    let version = env.run(&["--version"]);
    assert!(version.status.success());
    let head = std::process::Command::new("git")
        .args(["log", "-1", "--format=%h"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match head {
        Ok(out) if out.status.success() => {
            let commit = String::from_utf8(out.stdout).unwrap();
            assert!(
                version.stdout.starts_with(&format!(
                    "roce {} ({} ",
                    env!("CARGO_PKG_VERSION"),
                    commit.trim()
                )),
                "{}",
                version.stdout
            );
        }
        // Not a git checkout (a source archive): the bare version.
        _ => assert_eq!(
            version.stdout,
            format!("roce {}\n", env!("CARGO_PKG_VERSION"))
        ),
    }
}

#[test]
fn a_typo_gets_a_suggestion_on_the_one_error_line() {
    let env = Env::new("typo");
    let done = env.run(&["deocde", "x.pcap"]);
    assert_eq!(done.status.code(), Some(2));
    assert_eq!(
        done.stderr,
        "roce: unrecognized subcommand 'deocde'; did you mean 'demo' or 'decode'? (see roce --help)\n"
    );
    let done = env.run(&["mem", "dupm", "x"]);
    assert_eq!(
        done.stderr,
        "roce: unrecognized subcommand 'dupm'; did you mean 'dump'? (see roce mem --help)\n"
    );
    let done = env.run(&["demo", "--scenaro", "loss"]);
    assert_eq!(
        done.stderr,
        "roce: unexpected argument '--scenaro' found; did you mean '--scenario'? (see roce demo --help)\n"
    );
}

#[test]
fn completion_scripts_cover_the_whole_tree() {
    let env = Env::new("compl");
    let paths = command_paths(&env);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let done = env.run(&["completions", shell]);
        assert!(done.status.success(), "{shell}: {}", done.stderr);
        for path in &paths {
            let last = path.last().unwrap();
            assert!(done.stdout.contains(last.as_str()), "{shell}: no {last}");
        }
        // The demo's own target program is started by `roce demo`, never typed.
        assert!(
            !done.stdout.contains("demo-target"),
            "{shell} offers demo-target"
        );
    }
    let bad = env.run(&["completions", "tcsh"]);
    assert_eq!(bad.status.code(), Some(2));
}

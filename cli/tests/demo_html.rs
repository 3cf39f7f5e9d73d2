//! `roce demo --html`: the page must render in a real browser. Headless Chromium (Debian's
//! `chromium`, which scripts/test installs) loads it, and the test reads back the laid-out
//! page: one drawn element per frame of the run's capture, with its opcode and PSN, the
//! written range of the memory map and the CPU line, all with a size. It also takes the
//! screenshot kept as a build artefact (target/demo/demo.png); with
//! ROCE_REGENERATE_SCREENSHOT=1 it refreshes the README's docs/demo.png as well.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use support::*;

const CHROMIUM: &str = "chromium";

/// Chromium with what a test needs: no sandbox (containers), no GPU, no network chatter, a
/// fresh profile.
fn chromium(profile: &Path) -> Command {
    let mut cmd = Command::new(CHROMIUM);
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
    ])
    .arg(format!("--user-data-dir={}", profile.display()))
    .stdin(Stdio::null());
    cmd
}

/// Runs `cmd` to its end, at most [`PATIENCE`]; its standard output.
fn output(cmd: Command) -> String {
    let mut run = Proc::spawn(cmd, false);
    let status = run.wait(PATIENCE);
    let out = run.drain_stdout();
    assert!(status.success(), "chromium failed: {}", run.stderr());
    out
}

fn artefact_dir() -> PathBuf {
    let dir = roce_tests::workspace().join("target/demo");
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn the_page_renders_in_chromium_with_every_frame() {
    if Command::new(CHROMIUM).arg("--version").output().is_err() {
        roce_tests::skip("chromium is not installed (scripts/test installs it)");
        return;
    }
    let env = Env::new("demohtml");
    let page = env.dir.join("demo.html");
    let pcap = env.dir.join("demo.pcap");
    let done = env.run(&[
        "demo",
        "--scenario",
        "loss",
        "--html",
        page.to_str().unwrap(),
        "--pcap",
        pcap.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(done.status.success(), "{}", done.stderr);
    let html = std::fs::read_to_string(&page).unwrap();
    // Self-contained: nothing for the browser to fetch.
    for fetch in ["<link", " src=", " href=", "url(", "@import"] {
        assert!(!html.contains(fetch), "the page fetches something: {fetch}");
    }
    let decoded = env.run(&["decode", "--strict", pcap.to_str().unwrap()]);
    assert!(decoded.status.success());
    let frames: Vec<(u32, String)> = decoded
        .stdout
        .lines()
        .filter(|l| l.contains(" → "))
        .map(|l| {
            let n = l.split_whitespace().next().unwrap().parse().unwrap();
            let psn = l
                .split("PSN=")
                .nth(1)
                .unwrap()
                .split(' ')
                .next()
                .unwrap()
                .to_owned();
            (n, psn)
        })
        .collect();
    // WRITE FIRST, MIDDLE (lost), LAST, the NAK, MIDDLE and LAST again, the ACK; a tail probe
    // on a busy machine may add a frame.
    assert!(frames.len() >= 7, "{}", decoded.stdout);

    let profile = tempfile::tempdir().unwrap();
    let mut dump = chromium(profile.path());
    dump.arg("--dump-dom")
        .arg(format!("file://{}", page.display()));
    let dom = output(dump);
    // The page's own check, run by the browser once it had laid the page out.
    assert!(
        dom.contains(&format!(
            r#"data-rendered="packets={} memory=true cpu=true""#,
            frames.len()
        )),
        "{}",
        dom.lines().find(|l| l.contains("<body")).unwrap_or(&dom)
    );
    for (number, psn) in &frames {
        let element = format!(r#"id="packet-{number}" data-opcode="RC "#);
        let at = dom.find(&element).unwrap_or_else(|| panic!("no {element}"));
        let tag = &dom[at..at + dom[at..].find('>').unwrap()];
        assert!(tag.contains(&format!(r#"data-psn="{psn}""#)), "{tag}");
        // `roce conform`'s verdict: a loss recovered by the book breaks no rule.
        assert!(tag.contains(r#"data-conform="ok""#), "{tag}");
    }
    assert_eq!(dom.matches(r#"data-lost="true""#).count(), 1);
    for id in [
        "ladder",
        "memory-map",
        "written-range",
        "cpu-timeline",
        "cpu-line",
        "frozen-band",
        "transcript",
    ] {
        assert!(dom.contains(&format!(r#"id="{id}""#)), "no #{id}");
    }

    let shot = artefact_dir().join("demo.png");
    let _ = std::fs::remove_file(&shot);
    let mut screenshot = chromium(profile.path());
    screenshot
        .arg(format!("--screenshot={}", shot.display()))
        .arg("--window-size=1000,1500")
        .arg(format!("file://{}", page.display()));
    output(screenshot);
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    if roce_tests::regenerate("ROCE_REGENERATE_SCREENSHOT") {
        std::fs::copy(&shot, roce_tests::workspace().join("docs/demo.png")).unwrap();
    }
}

#[test]
fn the_congestion_page_draws_every_chart_in_chromium() {
    if Command::new(CHROMIUM).arg("--version").output().is_err() {
        roce_tests::skip("chromium is not installed (scripts/test installs it)");
        return;
    }
    let env = Env::new("demohtmlcc");
    let page = env.dir.join("congestion.html");
    let done = env.run(&[
        "demo",
        "--scenario",
        "congestion",
        "--hosts",
        "3",
        "--html",
        page.to_str().unwrap(),
        "--quiet",
    ]);
    assert!(done.status.success(), "{}", done.stderr);
    let profile = tempfile::tempdir().unwrap();
    let mut dump = chromium(profile.path());
    dump.arg("--dump-dom")
        .arg(format!("file://{}", page.display()));
    let dom = output(dump);
    // Two runs × three charts; rates: a line per sender (3), queue: 1, signals: 3.
    assert!(
        dom.contains(r#"data-rendered="charts=6 lines=14""#),
        "{}",
        dom.lines().find(|l| l.contains("<body")).unwrap_or(&dom)
    );
    for run in ["without", "with"] {
        for chart in ["rates", "queue", "signals"] {
            assert!(
                dom.contains(&format!(r#"id="{run}-{chart}""#)),
                "no #{run}-{chart}"
            );
        }
    }
    assert_eq!(dom.matches(r#"data-series="sender 2""#).count(), 2);
    assert!(!dom.contains(r#"data-series="sender 3""#));
}

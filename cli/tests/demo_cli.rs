//! `roce demo`'s command line as issue 19 found it wanting: what `--help` promises is printed,
//! the marks mean one thing, the in-process mode does not claim a frozen target, `--json`
//! gives the proof lines to scripts, and a demo killed in the middle of a gigabyte leaves
//! nothing in /dev/shm.

mod support;

use support::*;

fn demo(env: &Env, args: &[&str]) -> Finished {
    let mut all = vec!["demo"];
    all.extend_from_slice(args);
    let done = env.run(&all);
    assert!(
        done.status.success(),
        "roce {all:?} failed\nstdout:\n{}\nstderr:\n{}",
        done.stdout,
        done.stderr
    );
    done
}

#[test]
fn a_long_send_reports_its_rate_and_the_pcap_is_named_only_when_there_is_one() {
    let env = Env::new("dsend");
    let out = demo(
        &env,
        &["--in-process", "--scenario", "send", "--size", "2M"],
    )
    .stdout;
    let rate = out
        .lines()
        .find(|l| l.contains("Gbit/s"))
        .unwrap_or_else(|| panic!("no Gbit/s figure:\n{out}"));
    assert!(
        rate.trim_start().starts_with("Moved 2097152 bytes in ")
            && rate.contains(" s from the target's wake-up to the completion: "),
        "{rate}"
    );
    // Without --pcap no pcap has every frame; the long timeline says how to get one.
    assert!(!out.contains("the pcap has every frame"), "{out}");
    assert!(out.contains("(--pcap FILE records every frame)"), "{out}");
    let pcap = env.dir.join("send.pcap");
    let pcap_arg = pcap.to_str().unwrap();
    let out = demo(
        &env,
        &[
            "--in-process",
            "--scenario",
            "send",
            "--size",
            "2M",
            "--pcap",
            pcap_arg,
        ],
    )
    .stdout;
    assert!(out.contains("(the pcap has every frame)"), "{out}");
}

#[test]
fn a_lost_frame_is_not_marked_as_a_failed_proof() {
    let env = Env::new("dloss");
    let out = demo(&env, &["--in-process", "--scenario", "loss"]).stdout;
    let lost: Vec<&str> = out
        .lines()
        .filter(|l| l.contains("lost on the wire"))
        .collect();
    assert!(!lost.is_empty(), "{out}");
    for line in lost.iter().filter(|l| l.contains("frame ")) {
        assert!(!line.contains('✗'), "{line}");
        assert!(line.contains("↯ lost on the wire"), "{line}");
    }
    // ✗ is left for proofs that failed, and none did.
    assert!(!out.contains('✗'), "{out}");
}

#[test]
fn in_process_the_target_is_never_called_frozen() {
    let env = Env::new("didle");
    for scenario in ["write", "read", "send", "atomic", "loss", "imm"] {
        let out = demo(&env, &["--in-process", "--scenario", scenario]).stdout;
        for line in out.lines() {
            let said = line.to_lowercase();
            // "without --in-process the demo freezes a real process" tells what the other mode
            // does; nothing may say this run's target is frozen.
            if said.contains("frozen") {
                panic!("--in-process --scenario {scenario} says: {line}");
            }
        }
        assert!(
            out.lines()
                .next()
                .unwrap_or_default()
                .contains("idle target")
                || !["write", "read", "send", "atomic"].contains(&scenario),
            "{scenario}: {out}"
        );
    }
}

#[test]
fn json_prints_the_proof_lines_only() {
    let env = Env::new("djson");
    let done = demo(&env, &["--json", "--scenario", "atomic"]);
    let proofs: Vec<serde_json::Value> = done
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert!(proofs.len() >= 4, "{}", done.stdout);
    for proof in &proofs {
        assert_eq!(proof["scenario"], "atomic");
        assert_eq!(proof["held"], true);
        assert!(proof["proof"].as_str().is_some_and(|p| !p.is_empty()));
    }
    assert!(proofs.iter().any(|p| p["proof"]
        .as_str()
        .unwrap()
        .starts_with("counter verified: ")));
}

/// The regions this demo process put in /dev/shm (its names start with `roce-demo<pid>`).
fn left_by(pid: u32) -> Vec<(String, u64)> {
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let len = e.metadata().ok()?.len();
            name.starts_with(&format!("roce-demo{pid}"))
                .then_some((name, len))
        })
        .collect()
}

#[test]
fn a_demo_killed_during_a_gigabyte_leaves_no_region_behind() {
    let env = Env::new("dkill");
    let mut run = Proc::spawn(env.roce(&["demo", "--size", "1G"]), false);
    let pid = run.pid() as u32;
    // The story begins once the target's gigabyte is mapped; right after it the demo makes
    // its own gigabyte for the initiator. Killed then, while that is reserved and filled.
    run.expect(|l| l.contains("Two emulated RDMA NICs run as processes"));
    run.signal(libc::SIGKILL);
    let _ = run.wait(PATIENCE);
    // The NICs end on the SIGTERM the kernel sends them for the demo, and remove their rings;
    // the target is killed. Nothing of this run may stay.
    eventually(&format!("/dev/shm empty of demo {pid}"), || {
        left_by(pid).is_empty()
    });
}

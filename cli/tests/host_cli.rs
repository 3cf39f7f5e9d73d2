//! `roce nic` and `roce host` as a person at two terminals uses them: the server prints its
//! `LID:QPN:PSN:GID`, each `post` prints its own for the server, and every error is one line.

mod support;

use std::net::UdpSocket;

use support::*;

/// Runs one `roce host post` against the serving `server`, doing the two-terminal exchange.
fn post(env: &Env, server: &mut Proc, nic: &str, peer: &str, op: &[&str]) -> Finished {
    let mut args = vec!["host", "post", "--nic", nic, "--peer", peer];
    args.extend_from_slice(op);
    let mut post = Proc::spawn(env.roce(&args), true);
    let local = post.expect(|l| l.starts_with("local "));
    // Its buffer is already out of /dev/shm: nothing to leave behind if it is killed.
    assert!(!shm_exists(&format!("{nic}-post-{}", post.pid())));
    let endpoint = local.strip_prefix("local ").unwrap();
    server.say(endpoint);
    server.expect(|l| l == format!("connected to {endpoint}"));
    post.say("");
    let status = post.wait(PATIENCE);
    Finished {
        status,
        stdout: post.drain_stdout(),
        stderr: post.stderr(),
    }
}

#[test]
fn serve_and_post_from_two_terminals() {
    let env = Env::new("flow");
    let (mut a, mut b) = cabled_pair(&env, 71);
    // As a person would start them: the NICs find each other's MAC by ARP.
    a.neighbours.clear();
    b.neighbours.clear();
    let _nic_a = env.nic(&a);
    let _nic_b = env.nic(&b);
    let region = RegionName(env.name("buf"));
    let serve = [
        "host", "serve", "--nic", &b.name, "--region", &region.0, "--size", "64K",
    ];
    let mut server = Proc::spawn(env.roce(&serve), true);
    let local = server.expect(|l| l.starts_with("local "));
    let peer = local.strip_prefix("local ").unwrap().to_owned();
    let memory = server.expect(|l| l.starts_with("memory "));
    let rkey = memory
        .split_whitespace()
        .nth(2)
        .unwrap()
        .strip_prefix("rkey=")
        .unwrap()
        .to_owned();
    assert!(rkey.starts_with("0x") && rkey.len() == 10, "{memory}");
    assert_eq!(
        memory,
        format!("memory {} rkey={rkey} va=0x0 len=65536", region.0)
    );

    let at = |va: &str| ["--rkey", &rkey, "--va", va].map(str::to_owned);
    let run = |server: &mut Proc, op: &[&str], extra: [String; 4]| {
        let mut all: Vec<&str> = op.to_vec();
        all.extend(extra.iter().map(String::as_str));
        let done = post(&env, server, &a.name, &peer, &all);
        assert!(done.status.success(), "{}", done.stderr);
        done.stdout
    };
    let out = run(
        &mut server,
        &["--write", "--data", "hello over the cable"],
        at("0"),
    );
    assert_eq!(out, "wr_id=1 RDMA_WRITE success 20 bytes\n");
    let out = run(&mut server, &["--read", "20"], at("0"));
    assert_eq!(
        out,
        "wr_id=1 RDMA_READ success 20 bytes\n\
         00000000  68 65 6c 6c 6f 20 6f 76  65 72 20 74 68 65 20 63  |hello over the c|\n\
         00000010  61 62 6c 65                                       |able|\n\
         \"hello over the cable\"\n"
    );
    let out = run(&mut server, &["--fetch-add", "7"], at("0x2000"));
    assert_eq!(
        out,
        "wr_id=1 FETCH_ADD success 8 bytes\noriginal value 0 (0x0)\n"
    );
    let out = run(&mut server, &["--cmp-swap", "7,99"], at("8192"));
    assert_eq!(
        out,
        "wr_id=1 COMP_SWAP success 8 bytes\noriginal value 7 (0x7)\n"
    );
    let file = env.dir.join("data.bin");
    std::fs::write(&file, [0xde, 0xad, 0xbe, 0xef]).unwrap();
    let out = run(
        &mut server,
        &["--write", "--file", file.to_str().unwrap()],
        at("0x3000"),
    );
    assert_eq!(out, "wr_id=1 RDMA_WRITE success 4 bytes\n");

    server.say("show 0x2000 8");
    server
        .expect(|l| l == "00002000  63 00 00 00 00 00 00 00                           |c.......|");
    server.say("show 0x3000 4");
    server.expect(|l| l == "00003000  de ad be ef                                       |....|");

    let done = post(
        &env,
        &mut server,
        &a.name,
        &peer,
        &["--send", "--hex", "73 65 6e 64"],
    );
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(done.stdout, "wr_id=1 SEND success 4 bytes\n");
    server.expect(|l| l == "wr_id=0 RECV success 4 bytes \"send\"");

    // A line that is neither a peer nor a command is reported; the server carries on.
    server.say("nonsense");
    server.say("show 0 1");
    server.expect(|l| l.starts_with("00000000  73"));
    server.signal(libc::SIGINT);
    assert!(server.wait(PATIENCE).success());
    assert!(server
        .stderr()
        .contains("roce: \"nonsense\" is not LID:QPN:PSN:GID"));
}

/// The command failed with `code` and printed exactly `roce: <message>`.
fn assert_fails(done: &Finished, code: i32, message: &str) {
    assert_eq!(done.status.code(), Some(code), "{}", done.stderr);
    assert_eq!(done.stderr, format!("roce: {message}\n"));
    assert_eq!(done.stdout, "");
}

#[test]
fn nic_errors_are_one_clear_line() {
    let env = Env::new("errs");
    let (a, _b) = cabled_pair(&env, 72);
    let nic = |name: &str, ip: &str, link: &str| {
        env.run(&["nic", "--name", name, "--ip", ip, "--link", link])
    };
    let cable = a.link.clone();
    assert_fails(
        &nic("bad/name", "10.0.0.1", &cable),
        2,
        "NIC name \"bad/name\" is not valid: only letters, digits, '.', '_' and '-' are allowed",
    );
    assert_fails(
        &nic(&a.name, "10.0.0", &cable),
        2,
        "\"10.0.0\" is not an IP address",
    );
    assert_fails(
        &nic(&a.name, "10.0.0.1", "tap0"),
        2,
        "--link \"tap0\" is not a link: use cable:LOCAL_UDP_ADDR,REMOTE_UDP_ADDR, iface:IFNAME or shm:NAME",
    );
    assert_fails(
        &nic(&a.name, "10.0.0.1", "cable:127.0.0.1:1"),
        2,
        "--link cable:127.0.0.1:1: a cable is LOCAL_UDP_ADDR,REMOTE_UDP_ADDR (for example \
         127.0.0.1:7001,127.0.0.1:7002), not \"127.0.0.1:1\"",
    );
    assert_fails(
        &nic(&a.name, "10.0.0.1", "iface:nosuch0"),
        1,
        "cannot open the link iface:nosuch0: no network interface named nosuch0",
    );
    assert_fails(
        &nic(&a.name, "10.0.0.1/33", &cable),
        2,
        "/33 is not a prefix length for 10.0.0.1 (0 to 32)",
    );
    assert_fails(
        &env.run(&[
            "nic", "--name", &a.name, "--ip", "10.0.0.1", "--link", &cable, "--faults", "drop=2",
        ]),
        2,
        "--faults drop=2: drop=2: a probability is a number from 0 to 1",
    );
    let taken = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let busy = format!("cable:127.0.0.1:{port},127.0.0.1:9");
    assert_fails(
        &nic(&a.name, "10.0.0.1", &busy),
        1,
        &format!("cannot open the link {busy}: the local address 127.0.0.1:{port} is in use"),
    );
    assert!(
        !env.socket(&a.name).exists(),
        "a failed start leaves no socket"
    );

    let _running = env.nic(&a);
    let other = format!("cable:127.0.0.1:{},127.0.0.1:9", free_udp_port());
    assert_fails(
        &nic(&a.name, "10.0.0.1", &other),
        1,
        &format!(
            "a NIC named {} is already running (its socket is {})",
            a.name,
            env.socket(&a.name).display()
        ),
    );
    // The running NIC is untouched by the refused start.
    let info = env.run(&["host", "info", "--nic", &a.name]);
    assert!(info.status.success(), "{}", info.stderr);
    assert!(info
        .stdout
        .starts_with(&format!("nic {} mac 02:00:0a:48:00:01", a.name)));
    assert!(!info.stdout.contains("rx_icrc_errors"), "{}", info.stdout);
    let counters = env.run(&["host", "info", "--nic", &a.name, "--counters"]);
    assert!(counters.status.success(), "{}", counters.stderr);
    for line in ["rx_icrc_errors 0", "cq_overflows 0"] {
        assert!(
            counters.stdout.lines().any(|l| l == line),
            "{}",
            counters.stdout
        );
    }
}

/// `roce nic ARGS` without the capabilities for raw sockets and low ports (this test runs as
/// root, so they are taken away with setpriv).
fn unprivileged(env: &Env, args: &[&str]) -> Finished {
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(["--bounding-set=-net_raw,-net_bind_service", "--"])
        .arg(env!("CARGO_BIN_EXE_roce"))
        .args(args)
        .env("XDG_RUNTIME_DIR", &env.dir);
    let mut proc = Proc::spawn(cmd, false);
    let status = proc.wait(PATIENCE);
    Finished {
        status,
        stdout: proc.drain_stdout(),
        stderr: proc.stderr(),
    }
}

#[test]
fn a_missing_privilege_is_named() {
    let env = Env::new("priv");
    let name = env.name("a");
    let nic = |link: &str| {
        unprivileged(
            &env,
            &["nic", "--name", &name, "--ip", "10.0.0.1", "--link", link],
        )
    };
    assert_fails(
        &nic("iface:lo"),
        1,
        "cannot open the link iface:lo: opening lo needs the CAP_NET_RAW capability (run as root or grant it)",
    );
    let low = format!("cable:127.0.0.1:80,127.0.0.1:{}", free_udp_port());
    assert_fails(
        &nic(&low),
        1,
        &format!("cannot open the link {low}: binding UDP port 80 needs the CAP_NET_BIND_SERVICE capability (run as root or grant it)"),
    );
}

#[test]
fn host_errors_are_one_clear_line() {
    let env = Env::new("herrs");
    let missing = env.name("none");
    assert_fails(
        &env.run(&["host", "info", "--nic", &missing]),
        1,
        &format!(
            "no NIC named {missing} is running (nothing answers at {})",
            env.socket(&missing).display()
        ),
    );
    let (a, _b) = cabled_pair(&env, 73);
    let _nic = env.nic(&a);
    let peer = "0000:000011:000000:00000000000000000000ffff0a490002";
    assert_fails(
        &env.run(&[
            "host", "post", "--nic", &a.name, "--peer", peer, "--read", "8", "--send",
        ]),
        2,
        "give one operation: --write, --send, --read LEN, --fetch-add N or --cmp-swap C,S",
    );
    assert_fails(
        &env.run(&[
            "host", "post", "--nic", &a.name, "--peer", peer, "--read", "8",
        ]),
        2,
        "this operation needs --rkey and --va",
    );
    assert_fails(
        &env.run(&["host", "post", "--nic", &a.name, "--peer", "0:11", "--send", "--data", "x"]),
        2,
        "\"0:11\" is not LID:QPN:PSN:GID (for example 0000:000011:0a1b2c:00000000000000000000ffff0a000001)",
    );
    let region = env.name("absent");
    assert_fails(
        &env.run(&["host", "serve", "--nic", &a.name, "--region", &region]),
        2,
        &format!("region {region} does not exist: give --size to create it"),
    );
    // A peer that never answers: the retries run out and the completion says so.
    let post = env.run(&[
        "host", "post", "--nic", &a.name, "--peer", peer, "--write", "--data", "x", "--rkey", "1",
        "--va", "0",
    ]);
    assert_eq!(post.status.code(), Some(1), "{}", post.stderr);
    assert!(
        post.stdout
            .ends_with("wr_id=1 RDMA_WRITE transport retry counter exceeded 1 bytes\n"),
        "{}",
        post.stdout
    );
    assert!(
        post.stderr.ends_with(
            "roce: the RDMA WRITE failed: transport retry counter exceeded (nothing answered: the \
             server must connect to this post's line before Enter, which a stopped server cannot \
             do; to post while it is stopped, connect once with roce host connect)\n"
        ),
        "{}",
        post.stderr
    );
    // Operands that mean nothing for the operation are refused, not ignored.
    assert_fails(
        &env.run(&[
            "host", "post", "--nic", &a.name, "--peer", peer, "--read", "4", "--data", "x",
            "--rkey", "1", "--va", "0",
        ]),
        2,
        "--data, --hex and --file give what --write or --send sends: the other operations take none",
    );
    // A bad --peer is refused before the region or the QP is made.
    let region = RegionName(env.name("garbage"));
    assert_fails(
        &env.run(&[
            "host", "serve", "--nic", &a.name, "--region", &region.0, "--size", "64K", "--peer",
            "garbage",
        ]),
        2,
        "\"garbage\" is not LID:QPN:PSN:GID (for example 0000:000011:0a1b2c:00000000000000000000ffff0a000001)",
    );
    assert!(!shm_exists(&region.0), "a refused serve made its region");
    let counters = env.run(&["host", "info", "--nic", &a.name, "--counters", "--json"]);
    assert!(counters.status.success(), "{}", counters.stderr);
    let info: serde_json::Value = serde_json::from_str(&counters.stdout).unwrap();
    assert_eq!(info["nic"], a.name.as_str());
    assert_eq!(info["mac"], "02:00:0a:49:00:01");
    assert_eq!(info["max_mtu"], 4096);
    assert_eq!(info["gids"][1]["address"], "::ffff:10.73.0.1");
    assert!(
        info["counters"]["tx_frames"].as_u64().unwrap() > 0,
        "{info}"
    );
    assert_eq!(info["counters"]["rx_icrc_errors"], 0);
}

#[test]
fn the_server_prompt_has_help_and_a_refused_request_is_one_line() {
    let env = Env::new("hprompt");
    let (a, b) = cabled_pair(&env, 74);
    let _nics = (env.nic(&a), env.nic(&b));
    let region = RegionName(env.name("buf"));
    let serve = [
        "host", "serve", "--nic", &b.name, "--region", &region.0, "--size", "64K",
    ];
    let mut server = Proc::spawn(env.roce(&serve), true);
    let local = server.expect(|l| l.starts_with("local "));
    let peer = local.strip_prefix("local ").unwrap().to_owned();
    server.say("help");
    server.expect(|l| l == "commands, one a line:");
    server.expect(|l| l.starts_with("  show OFFSET LEN "));
    // A WRITE with a wrong rkey: the server's NIC refuses it, and its QP goes into the error
    // state, flushing its 16 posted receives. One line says so.
    let done = post(
        &env,
        &mut server,
        &a.name,
        &peer,
        &["--write", "--data", "x", "--rkey", "0x999", "--va", "0"],
    );
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    server.expect(|l| l.starts_with("the QP went into the error state"));
    // The next peer connects it again; nothing was printed in between.
    let done = post(
        &env,
        &mut server,
        &a.name,
        &peer,
        &["--write", "--data", "y", "--rkey", "0x100", "--va", "0"],
    );
    assert!(done.status.success(), "{}", done.stderr);
    server.signal(libc::SIGINT);
    assert!(server.wait(PATIENCE).success());
    let rest = server.drain_stdout();
    let all: Vec<&str> = server
        .seen()
        .iter()
        .map(String::as_str)
        .chain(rest.lines())
        .collect();
    let flushed = all
        .iter()
        .filter(|l| l.contains("Flush") || l.starts_with("the QP went"))
        .count();
    assert_eq!(flushed, 1, "{all:#?}");
}

/// `roce nic --pkey`: the port's P_Key table, as host programs see it; a key of no partition is
/// refused before the NIC starts.
#[test]
fn a_nic_holds_the_p_keys_it_is_given() {
    let env = Env::new("pkeys");
    let (mut a, _b) = cabled_pair(&env, 75);
    let refused = env.run(&[
        "nic",
        "--name",
        &a.name,
        "--ip",
        &a.ip,
        "--link",
        &a.link,
        "--pkey",
        "0x7fff,0x8000",
    ]);
    assert_eq!(refused.status.code(), Some(2), "{}", refused.stderr);
    assert!(
        refused
            .stderr
            .contains("P_Key 0x8000 is in partition 0, which is no partition"),
        "{}",
        refused.stderr
    );
    a.extra = vec!["--pkey".into(), "0x7fff,0x8001".into()];
    let _nic = env.nic(&a);
    let info = env.run(&["host", "info", "--nic", &a.name]);
    assert!(info.status.success(), "{}", info.stderr);
    let lines: Vec<&str> = info
        .stdout
        .lines()
        .filter(|l| l.starts_with("pkey["))
        .collect();
    assert_eq!(
        lines,
        [
            "pkey[0] 0x7fff (limited member)",
            "pkey[1] 0x8001 (full member)"
        ]
    );
    let json = env.run(&["host", "info", "--nic", &a.name, "--json"]);
    let info: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(info["pkeys"], serde_json::json!(["0x7fff", "0x8001"]));
}

/// `roce host listen PORT` and `roce host connect IP:PORT` at two terminals: nothing to copy
/// between them — the NICs' connection managers connect the QPs, and the REP brings the
/// region's rkey, VA and length. The operations typed land (a WRITE read back, a SEND shown by
/// the listener, a fetch-and-add), and Ctrl-D disconnects: the listener says so.
#[test]
fn listen_and_connect_through_the_rdma_cm_from_two_terminals() {
    let env = Env::new("listen");
    let (a, b) = cabled_pair(&env, 76);
    let _nic_a = env.nic(&a);
    let _nic_b = env.nic(&b);
    let region = RegionName(env.name("buf"));
    let listen = [
        "host", "listen", "7000", "--nic", &b.name, "--region", &region.0, "--size", "64K",
    ];
    let mut server = Proc::spawn(env.roce(&listen), false);
    server.expect(|l| l == "listening on 0.0.0.0:7000 (RDMA CM, TCP port space)");
    let memory = server.expect(|l| l.starts_with("memory "));
    let rkey = memory.split_whitespace().nth(2).unwrap().to_owned();

    let mut client = Proc::spawn(
        env.roce(&["host", "connect", "10.76.0.2:7000", "--nic", &a.name]),
        true,
    );
    let connected = client.expect(|l| l.starts_with("connected to "));
    assert_eq!(
        connected,
        format!("connected to 10.76.0.2:7000 through the RDMA CM: region {rkey} va=0x0 len=65536")
    );
    let line = server.expect(|l| l.starts_with("connected: "));
    assert!(line.starts_with("connected: 10.76.0.1:"), "{line}");
    client.say("write 0 hello through the CM");
    client.expect(|l| l == "wr_id=1 RDMA_WRITE success 20 bytes");
    client.say("read 0 20");
    client.expect(|l| l == "wr_id=2 RDMA_READ success 20 bytes");
    client.expect(|l| l == "\"hello through the CM\"");
    client.say("fetch-add 0x100 5");
    client.expect(|l| l == "original value 0 (0x0)");
    client.say("send over the connection");
    server.expect(|l| l == "wr_id=0 RECV success 19 bytes \"over the connection\"");
    client.close_stdin();
    assert!(client.wait(PATIENCE).success(), "{}", client.stderr());
    let gone = server.expect(|l| l.starts_with("disconnected: "));
    assert_eq!(
        gone,
        line.replace("connected: ", "disconnected: ")
            .split(" (")
            .next()
            .unwrap()
    );
    server.signal(libc::SIGTERM);
    assert!(server.wait(PATIENCE).success());
}

/// `roce host connect IP:PORT` where nobody listens: one line, the REJ's reason.
#[test]
fn connect_to_a_port_nobody_listens_on_is_one_line() {
    let env = Env::new("nolisten");
    let (a, b) = cabled_pair(&env, 77);
    let _nic_a = env.nic(&a);
    let _nic_b = env.nic(&b);
    let done = env.run(&["host", "connect", "10.77.0.2:7999", "--nic", &a.name]);
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    assert_eq!(
        done.stderr,
        "roce: nobody listens on 10.77.0.2:7999 (its CM answered REJ, invalid service ID)\n"
    );
    // Neither a line nor an address: a usage error.
    let done = env.run(&["host", "connect", "--nic", &a.name]);
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
}

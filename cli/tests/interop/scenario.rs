//! One tool run with the guest on one side and `roce` on the other, and the groups of runs
//! that share one guest boot.

use super::guest::NIC_IP;

/// Which pair of programs a scenario runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ibv_<name>_pingpong` against `roce pingpong <name>`.
    Pingpong(&'static str),
    /// `ib_<name>` against `roce perftest <name>`.
    Perftest(&'static str),
    /// `rping` against `roce rping`, connected through the RDMA CM.
    Rping,
    /// `ucmatose` against `roce ucmatose`, connected through the RDMA CM.
    Ucmatose,
    /// `udaddy` against `roce udaddy`: UD, the server's QP found through the RDMA CM (SIDR).
    Udaddy,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    pub kind: Kind,
    /// Options both programs take alike (`-s`, `-n`, `-m`, `-c`, `-q`, `-A`).
    pub args: Vec<String>,
    /// Whether the guest is the server (and `roce` the client).
    pub guest_serves: bool,
    /// Our side is Debian's same program, unmodified, under `roce run` (our libibverbs.so.1)
    /// rather than `roce pingpong`/`roce perftest`.
    pub unmodified: bool,
}

/// The longest a guest tool may run before the guest's script kills it.
pub const GUEST_TOOL_LIMIT_S: u32 = 120;

impl Scenario {
    pub fn new(kind: Kind, args: &str, guest_serves: bool) -> Scenario {
        Scenario {
            kind,
            args: args.split_whitespace().map(str::to_owned).collect(),
            guest_serves,
            unmodified: false,
        }
    }

    /// Both directions, with Debian's program under `roce run` on our side.
    pub fn unmodified_both_ways(kind: Kind, args: &str) -> [Scenario; 2] {
        Scenario::both_ways(kind, args).map(|s| Scenario {
            unmodified: true,
            ..s
        })
    }

    /// Both directions of the same run.
    pub fn both_ways(kind: Kind, args: &str) -> [Scenario; 2] {
        [
            Scenario::new(kind, args, true),
            Scenario::new(kind, args, false),
        ]
    }

    pub fn program(&self) -> String {
        match self.kind {
            Kind::Pingpong(name) => format!("ibv_{name}_pingpong"),
            Kind::Perftest(name) => format!("ib_{name}"),
            Kind::Rping => "rping".into(),
            Kind::Ucmatose => "ucmatose".into(),
            Kind::Udaddy => "udaddy".into(),
        }
    }

    /// The file name of this scenario's capture: program, atomic operation, rxe's role.
    pub fn capture_name(&self) -> String {
        let op = self
            .args
            .windows(2)
            .find(|w| w[0] == "-A")
            .map(|w| format!("-{}", w[1].to_lowercase()))
            .unwrap_or_default();
        let role = if self.guest_serves {
            "server"
        } else {
            "client"
        };
        format!("{}{op}-rxe-{role}", self.program())
    }

    pub fn name(&self) -> String {
        let ours = if self.unmodified { "roce run" } else { "roce" };
        format!(
            "{} {} ({} serves)",
            self.program(),
            self.args.join(" "),
            if self.guest_serves { "guest" } else { ours }
        )
    }

    /// The guest's command line: the tool on GID index 1, and as a client the retry wrapper
    /// of the guest script (a refused connection exchanged nothing, so trying again is safe).
    pub fn guest_command(&self, port: u16) -> String {
        let gid = match self.kind {
            Kind::Pingpong(_) => "-g 1",
            // perftest wants -F in a VM: it cannot read a CPU frequency there.
            Kind::Perftest(_) => "-x 1 -F",
            Kind::Rping => return self.rping_guest_command(port),
            // udaddy's port is always 7174 (its -p is the port space).
            Kind::Udaddy => {
                let tool = format!(
                    "timeout {GUEST_TOOL_LIMIT_S} udaddy {}",
                    self.args.join(" ")
                );
                return if self.guest_serves {
                    format!("{tool} -b {}", super::guest::GUEST_IP)
                } else {
                    format!("client {tool} -s {NIC_IP}")
                };
            }
            Kind::Ucmatose => {
                let tool = format!(
                    "timeout {GUEST_TOOL_LIMIT_S} ucmatose -p {port} {}",
                    self.args.join(" ")
                );
                return if self.guest_serves {
                    tool
                } else {
                    format!("client {tool} -s {NIC_IP}")
                };
            }
        };
        let tool = format!(
            "timeout {GUEST_TOOL_LIMIT_S} {} {gid} -p {port} {}",
            self.program(),
            self.args.join(" ")
        );
        if self.guest_serves {
            tool
        } else {
            format!("client {tool} {NIC_IP}")
        }
    }

    /// rping's command line in the guest, printing every ping (`-v`). The real server ends
    /// when the client disconnects, with a complaint and a failing status ("wait for
    /// RDMA_READ_ADV state 10"), so its status is printed rather than returned: what it must
    /// have printed is checked instead ([`Scenario::guest_success_text`]).
    fn rping_guest_command(&self, port: u16) -> String {
        let tool = |role: &str, addr: &str| {
            format!(
                "timeout {GUEST_TOOL_LIMIT_S} rping {role} -v -a {addr} -p {port} {}",
                self.args.join(" ")
            )
        };
        if self.guest_serves {
            let tool = tool("-s", super::guest::GUEST_IP);
            format!("sh -c '{tool}; echo rping exited $?'")
        } else {
            format!("client {}", tool("-c", NIC_IP))
        }
    }

    /// `roce` arguments for our side (without the NIC or the limits).
    pub fn our_args(&self, port: u16) -> Vec<String> {
        if self.unmodified {
            let mut args: Vec<String> = vec!["run".into(), "--".into(), self.program()];
            match self.kind {
                Kind::Pingpong(_) => args.extend(["-g".into(), "1".into()]),
                Kind::Perftest(_) => args.extend(["-x".into(), "1".into()]),
                // rping names the server's address on both sides.
                Kind::Rping => {
                    let (role, addr) = if self.guest_serves {
                        ("-c", super::guest::GUEST_IP)
                    } else {
                        ("-s", NIC_IP)
                    };
                    args.extend([role.into(), "-v".into(), "-a".into(), addr.into()]);
                    args.extend(["-p".into(), port.to_string()]);
                    args.extend(self.args.iter().cloned());
                    return args;
                }
                Kind::Ucmatose => {}
                Kind::Udaddy => panic!("udaddy's UD service (SIDR) is not in our librdmacm"),
            }
            args.extend(["-p".into(), port.to_string()]);
            if self.kind == Kind::Ucmatose {
                args.extend(self.args.iter().cloned());
                if self.guest_serves {
                    args.extend(["-s".into(), super::guest::GUEST_IP.into()]);
                }
                return args;
            }
            args.extend(self.args.iter().cloned());
            if self.guest_serves {
                args.push(super::guest::GUEST_IP.into());
            }
            return args;
        }
        let mut args: Vec<String> = match self.kind {
            Kind::Pingpong(name) => vec!["pingpong".into(), name.into()],
            Kind::Perftest(name) => vec!["perftest".into(), name.into()],
            Kind::Rping => {
                let role = if self.guest_serves { "-c" } else { "-s" };
                vec!["rping".into(), role.into(), "-v".into()]
            }
            Kind::Ucmatose => vec!["ucmatose".into()],
            Kind::Udaddy => vec!["udaddy".into()],
        };
        let port = match self.kind {
            Kind::Udaddy => roce_tools::udaddy::DEFAULT_PORT,
            _ => port,
        };
        args.extend(["-p".into(), port.to_string()]);
        args.extend(self.args.iter().cloned());
        if self.guest_serves {
            match self.kind {
                Kind::Rping => args.push("-a".into()),
                Kind::Ucmatose | Kind::Udaddy => args.push("-s".into()),
                _ => {}
            }
            args.push(super::guest::GUEST_IP.into());
        }
        args
    }

    /// RoCE frames of ours rxe may rightly never count: ibv_srq_pingpong stops with up to one
    /// message per QP still in flight, so the last ACKs (or SENDs) between the two sides can
    /// reach QPs that no longer exist, which rxe drops before counting.
    /// rping's and ucmatose's sides destroy their QPs as soon as the CM says disconnected, so an ACK or a
    /// repeated response of ours still on its way then (the guest, slow under emulation, may
    /// have asked twice) can reach a QP already gone: at most a couple per run.
    pub fn uncounted_frames_allowed(&self) -> u64 {
        match self.kind {
            Kind::Rping | Kind::Ucmatose => 2,
            Kind::Pingpong("srq") => self
                .args
                .windows(2)
                .find(|w| w[0] == "-q")
                .and_then(|w| w[1].parse().ok())
                .unwrap_or(16),
            _ => 0,
        }
    }

    /// What the guest must have printed on success: pingpong's `N iters in` line, or
    /// perftest's result table (except where perftest prints none: the server of the READ and
    /// atomic latency tests), with `-a` down to the 8 MiB line.
    pub fn guest_success_text(&self) -> Option<String> {
        self.success_text(self.guest_serves)
    }

    /// What the real program prints on success as the server (`server`) or the client.
    /// Whether our side's exit status says if it worked. The real rping server ends with a
    /// failing status when the client disconnects (see Scenario::rping_guest_command): when it
    /// runs on our NIC under `roce run`, what it printed says whether it worked.
    pub fn our_status_counts(&self) -> bool {
        !(self.unmodified && self.kind == Kind::Rping && !self.guest_serves)
    }

    pub fn success_text(&self, server: bool) -> Option<String> {
        match self.kind {
            Kind::Pingpong(_) => {
                let iters = self
                    .args
                    .windows(2)
                    .find(|w| w[0] == "-n")
                    .map_or("1000", |w| w[1].as_str());
                Some(format!("{iters} iters in"))
            }
            // Every ping was printed, the last one too.
            Kind::Rping => {
                let count = self
                    .args
                    .windows(2)
                    .find(|w| w[0] == "-C")
                    .and_then(|w| w[1].parse::<u64>().ok())
                    .expect("an rping scenario gives -C");
                let who = if server { "server " } else { "" };
                Some(format!("\n{who}ping data: rdma-ping-{}: ", count - 1))
            }
            // The real ones check nothing they received: they completed, and said so.
            Kind::Ucmatose | Kind::Udaddy => Some("\ndata transfers complete\n".into()),
            Kind::Perftest("read_lat" | "atomic_lat") if server => None,
            // `-a`: both sides end on the line of the largest size.
            Kind::Perftest(_) if self.args.iter().any(|a| a == "-a") => Some(" 8388608 ".into()),
            Kind::Perftest(_) => Some(" #bytes ".into()),
        }
    }
}

/// Runs that share one guest boot (and one NIC of ours).
pub struct Group {
    pub name: &'static str,
    /// The link MTU of both sides: 1500 gives path MTU 1024, 4200 gives 4096.
    pub link_mtu: u32,
    /// Faults our NIC's link injects (both directions).
    pub faults: Option<&'static str>,
    /// Each run of ours brings up a NIC of its own (`--link`, not `--nic`) and keeps its own
    /// capture, named by [`Scenario::capture_name`]; otherwise one `roce nic` serves them all.
    pub capture_each: bool,
    /// The guest and our NIC are cabled to two ports of a `roce switch` rather than to each
    /// other; each port's capture must pass `roce decode --strict` too.
    pub via_switch: bool,
    /// The test of the harness itself: it stops the guest's QEMU (SIGSTOP) as a guest that
    /// froze, and must notice, boot a fresh guest and run the scenario again on it.
    pub stop_guest: Option<StopGuest>,
    pub scenarios: Vec<Scenario>,
}

/// When the harness stops the guest (see [`Group::stop_guest`]).
#[derive(Debug, Clone, Copy)]
pub struct StopGuest {
    /// The scenario during which,
    pub during: usize,
    /// once the guest's console printed a line that starts so (in that scenario).
    pub once_printed: &'static str,
}

impl Group {
    /// The guest's script: its heartbeat, then each scenario from `first` on between markers
    /// the test reads back.
    pub fn guest_script(&self, first_port: u16, first: usize) -> String {
        let mut script = String::from(GUEST_PRELUDE);
        script.push_str(HEARTBEAT);
        for (n, scenario) in self.scenarios.iter().enumerate().skip(first) {
            let port = first_port + n as u16;
            script.push_str(&format!("scenario {n} {}\n", scenario.guest_command(port)));
        }
        script
    }
}

/// The guest script's helpers. `client` retries (at most 240 times, 0.5 s apart: longer than
/// a scenario of ours may take, so that one failure does not make the next fail too) while the
/// server is not listening yet (for rping, ucmatose and perftest's `-R`: while the CM answers
/// REJ, which perftest reports as "Unable to init the socket connection"); `scenario`
/// frames a run's output for [`super::guest::Console`].
pub const GUEST_PRELUDE: &str = r#"
client() {
  i=0
  while :; do
    "$@" >/tmp/out 2>&1
    rc=$?
    if [ $rc -ne 0 ] && grep -Eq "Couldn't connect|Unable to open file descriptor|Connection refused|RDMA_CM_EVENT_REJECTED|event: RDMA_CM_EVENT_REJECTED|event: RDMA_CM_EVENT_UNREACHABLE|Unable to init the socket connection" /tmp/out && [ $i -lt 240 ]; then
      i=$((i + 1)); sleep 0.5; continue
    fi
    cat /tmp/out
    return $rc
  done
}
scenario() {
  n=$1; shift
  echo "SCENARIO-BEGIN $n"
  "$@" 2>&1
  echo "SCENARIO-END $n rc=$?"
}
"#;

/// The guest's sign of life on its console while the script runs: a line every second
/// (`read` and `echo` are dash's own; only `sleep` is a program), which
/// [`super::watch::Guest`] waits for and [`super::guest::Console`] leaves out. A guest that
/// froze prints nothing, while a tool may rightly be silent for minutes.
pub const HEARTBEAT: &str = r#"
( while :; do read up idle </proc/uptime; echo "SOFTROCE-ALIVE $up"; sleep 1; done ) &
"#;

//! Network namespaces for tests that need a real Linux interface: each test makes its own
//! namespace, puts veth pairs in it (so no frame ever leaves it), and removes it when done —
//! on failure too, from the guard's `Drop`. Creating one needs root (CAP_SYS_ADMIN).

use std::fs::File;
use std::os::fd::AsFd;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

/// A network namespace this test created.
pub struct Netns {
    name: String,
}

static NEXT: AtomicU32 = AtomicU32::new(0);

impl Netns {
    /// A new namespace, or `None` where this machine does not let the test create one (not
    /// root, no `ip`): the test then prints a loud SKIPPED line and passes. With `ROCE_CI=1`
    /// (CI runs as root) that is a failure instead.
    pub fn create(test: &str) -> Option<Netns> {
        let name = format!(
            "roce-{}-{}-{}",
            test,
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let made = Command::new("ip").args(["netns", "add", &name]).output();
        match made {
            Ok(out) if out.status.success() => Some(Netns { name }),
            other => {
                let why = match other {
                    Ok(out) => String::from_utf8_lossy(&out.stderr).trim().to_owned(),
                    Err(e) => format!("cannot run ip: {e}"),
                };
                roce_testkit::skip(&format!(
                    "cannot create a network namespace ({why}); run as root"
                ));
                None
            }
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip -n NS ARGS...`; panics if it fails.
    pub fn ip(&self, args: &[&str]) -> String {
        let out = Command::new("ip")
            .args(["-n", &self.name])
            .args(args)
            .output()
            .expect("ip runs");
        check(&format!("ip {}", args.join(" ")), &out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A veth pair `a`—`b` inside the namespace, both up. IPv6 duplicate address detection is
    /// off so that addresses are usable at once.
    pub fn veth(&self, a: &str, b: &str) {
        self.sysctl("net.ipv6.conf.default.accept_dad=0");
        self.ip(&["link", "add", a, "type", "veth", "peer", "name", b]);
        self.ip(&["link", "set", a, "up"]);
        self.ip(&["link", "set", b, "up"]);
    }

    pub fn sysctl(&self, setting: &str) {
        let out = self
            .command(&["sysctl", "-q", "-w", setting])
            .output()
            .unwrap();
        check(&format!("sysctl {setting}"), &out);
    }

    /// A command that runs inside the namespace (`ip netns exec`).
    pub fn command(&self, argv: &[&str]) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name]).args(argv);
        c
    }

    /// Starts a program inside the namespace; it is killed when the guard is dropped.
    pub fn spawn(&self, argv: &[&str]) -> Killed {
        let child = self
            .command(argv)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("program starts");
        Killed(Some(child))
    }

    /// Runs `f` on a thread that has entered the namespace: sockets it opens (a raw socket on
    /// an interface) belong to the namespace, wherever they are used afterwards.
    pub fn enter<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        let file = File::open(format!("/run/netns/{}", self.name)).expect("namespace file");
        std::thread::scope(|s| {
            s.spawn(|| {
                // setns(2) on this thread only, with a namespace file we hold open.
                move_into_link_name_space(file.as_fd(), Some(LinkNameSpaceType::Network))
                    .expect("setns into the test's namespace");
                f()
            })
            .join()
            .expect("thread in the namespace")
        })
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn check(what: &str, out: &Output) {
    assert!(
        out.status.success(),
        "{what} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A child process, killed (by its PID) and reaped when dropped.
pub struct Killed(Option<Child>);

impl Killed {
    /// Waits for the program to end by itself and returns what it printed; panics if it
    /// failed.
    pub fn finish(mut self, what: &str) -> String {
        let child = self.0.take().expect("child");
        let out = child.wait_with_output().expect("wait");
        check(what, &out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

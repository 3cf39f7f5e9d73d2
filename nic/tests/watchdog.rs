//! A NIC that stops taking the frames waiting at its link says so in its log while it lives: a
//! link whose receives fail is said at once, and the engine's watchdog says within seconds that
//! frames wait and none are taken — with the counters — and that it moves again when it does.
//! (A CI run's NIC once went silent in its capture with nothing at warn to say why.)

use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::Link;
use roce_nic::waker::Waker;
use roce_nic::{Device, DeviceConfig};
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

/// Every warning's message with its fields, as one line.
struct Warnings(Arc<Mutex<Vec<String>>>);

struct Line(String);

impl Visit for Line {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!(" {}={value:?}", field.name()));
    }
}

impl<S: Subscriber> Layer<S> for Warnings {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        if *event.metadata().level() == Level::WARN {
            let mut line = Line(String::new());
            event.record(&mut line);
            self.0.lock().unwrap().push(line.0);
        }
    }
}

/// A link whose socket fills while its receives fail (until `heard` is set): the engine sees
/// its descriptor readable and takes nothing.
struct Deaf {
    socket: UdpSocket,
    heard: Arc<AtomicBool>,
}

impl Link for Deaf {
    fn send(&mut self, _frame: FrameBuf) -> io::Result<()> {
        Ok(())
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        if !self.heard.load(Ordering::SeqCst) {
            return Err(io::Error::other("deaf on purpose"));
        }
        let mut buf = [0u8; 64];
        match self.socket.recv(&mut buf) {
            // Not a frame anyone takes: counted as received and dropped as too short.
            Ok(n) => Ok(Some(BufPool::new(1).copy_of(&buf[..n]))),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn attach(&mut self, _pool: &Arc<BufPool>, _waker: &Arc<Waker>) {}

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.socket.as_raw_fd())
    }

    fn describe(&self) -> String {
        "a deaf link".into()
    }
}

fn wait_for(warnings: &Mutex<Vec<String>>, what: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        if let Some(line) = warnings.lock().unwrap().iter().find(|l| l.contains(what)) {
            return line.clone();
        }
        assert!(
            Instant::now() < deadline,
            "no warning with {what:?} within {within:?}; warnings: {:?}",
            warnings.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_nic_that_takes_no_frame_while_frames_wait_says_so_and_says_when_it_moves_again() {
    let warnings = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry().with(Warnings(Arc::clone(&warnings))),
    )
    .unwrap();
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    let heard = Arc::new(AtomicBool::new(false));
    let link = Deaf {
        socket: socket.try_clone().unwrap(),
        heard: Arc::clone(&heard),
    };
    let device = Device::start(
        DeviceConfig::new("watched", "10.81.0.1".parse().unwrap()),
        link,
    )
    .unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender
        .send_to(b"a frame nobody takes", socket.local_addr().unwrap())
        .unwrap();

    let failed = wait_for(
        &warnings,
        "the link's receive failed",
        Duration::from_secs(5),
    );
    assert!(failed.contains("deaf on purpose"), "{failed}");
    let stalled = wait_for(&warnings, "engine stalled", Duration::from_secs(15));
    assert!(
        stalled.contains("frames wait at the link and the engine has taken none"),
        "{stalled}"
    );
    assert!(stalled.contains("rx_frames=0"), "{stalled}");
    // One line per stall, however long it lasts.
    std::thread::sleep(Duration::from_millis(2500));
    let said = |what: &str| {
        warnings
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    assert_eq!(said("engine stalled"), 1);
    assert_eq!(said("the link's receive failed"), 1, "at most one per 10 s");

    heard.store(true, Ordering::SeqCst);
    let moving = wait_for(&warnings, "engine moving again", Duration::from_secs(5));
    assert!(moving.contains("seconds="), "{moving}");
    assert_eq!(device.counters().rx_frames, 1);
    device.stop();
}

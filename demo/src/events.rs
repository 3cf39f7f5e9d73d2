//! What the NICs decided, as they logged it.
//!
//! The NIC's decisions are typed events ([`roce_nic::transport::Event`]), logged as tracing
//! events inside a span naming the packet (`rx{qpn, psn, opcode}`), each with its
//! [`EventKind`] in the `event` field. The demo narrates from these events, recognised by their
//! kind and never by the wording of their message: what it says a NIC did, the NIC logged.
//!
//! Both ends of one format live here, so they cannot drift apart: [`json_layer`] makes a
//! process write its events as JSON lines (tracing-subscriber's JSON format, stamped in
//! microseconds since the Unix epoch so that events of several processes and the frames on the
//! wire share one clock), and [`NicEvent::parse`] reads such a line back. A NIC process writes
//! them to standard error when [`LOG_FORMAT_VAR`] is `json`; NICs inside the demo's own process
//! hand them to a [`Capture`].

use std::io::{self, BufRead, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use roce_nic::transport::EventKind;
use serde::Deserialize;
use serde_json::{Map, Value};
use tracing::Level;
use tracing_subscriber::filter::{EnvFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::FormatTime;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

use crate::{DemoError, Side};

/// The environment variable that makes a `roce` process log JSON lines to standard error.
pub const LOG_FORMAT_VAR: &str = "ROCE_LOG_FORMAT";

/// Time since the Unix epoch: the clock of events and of frames on the wire.
pub fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

/// Stamps events in microseconds since the Unix epoch: a number, comparable across processes.
struct EpochMicros;

impl FormatTime for EpochMicros {
    fn format_time(&self, w: &mut Writer<'_>) -> std::fmt::Result {
        write!(w, "{}", since_epoch().as_micros())
    }
}

/// A layer that writes every event as one JSON line: time, level, message and fields, the
/// spans it happened in (innermost last) and the thread.
pub fn json_layer<S, W>(make_writer: W) -> impl Layer<S> + Send + Sync + 'static
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt::layer()
        .json()
        .with_timer(EpochMicros)
        .with_current_span(false)
        .with_span_list(true)
        .with_thread_names(true)
        .with_writer(make_writer)
}

/// Whether this process was asked to log JSON lines (see [`LOG_FORMAT_VAR`]).
pub fn wants_json() -> bool {
    std::env::var(LOG_FORMAT_VAR).is_ok_and(|v| v == "json")
}

/// `RUST_LOG`, or warnings only.
fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn"))
}

/// Makes this process log JSON lines to standard error, filtered by `RUST_LOG`: how a NIC
/// started by the demo tells it what it decided.
pub fn install_json_logging() {
    tracing_subscriber::registry()
        .with(json_layer(io::stderr).with_filter(env_filter()))
        .init();
}

/// Warnings (or `RUST_LOG`) to standard error, as every `roce` command logs; nothing if this
/// process logs somewhere already.
pub fn install_plain_logging() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(env_filter())
        .with_writer(io::stderr)
        .try_init();
}

/// The packet an event is about: the innermost span that names one (`rx`, `responder`, `tx`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PacketTag {
    pub span: String,
    pub qpn: Option<u64>,
    pub psn: Option<u64>,
    pub opcode: Option<String>,
}

/// One event a NIC logged.
#[derive(Debug, Clone, PartialEq)]
pub struct NicEvent {
    pub nic: Side,
    /// Since the Unix epoch.
    pub at: Duration,
    pub level: String,
    /// The module that logged it (`roce_nic::transport::responder`).
    pub target: String,
    pub message: String,
    /// What the NIC decided, when it is one of its typed events (the `event` field).
    pub kind: Option<EventKind>,
    /// The event's fields, without the message and the kind.
    pub fields: Map<String, Value>,
    pub packet: Option<PacketTag>,
}

/// A line as tracing-subscriber's JSON format writes it.
#[derive(Deserialize)]
struct RawLine {
    timestamp: String,
    level: String,
    #[serde(default)]
    target: String,
    #[serde(default)]
    fields: Map<String, Value>,
    #[serde(default)]
    spans: Vec<Map<String, Value>>,
    #[serde(rename = "threadName", default)]
    thread_name: Option<String>,
}

impl NicEvent {
    /// Reads one JSON line that `nic` wrote; `None` if it is not one.
    pub fn parse(line: &str, nic: Side) -> Option<NicEvent> {
        Self::parse_with_thread(line, |_| Some(nic))
    }

    /// Reads one JSON line, attributing it to a NIC by the thread that wrote it.
    fn parse_with_thread(line: &str, nic: impl Fn(&str) -> Option<Side>) -> Option<NicEvent> {
        let raw: RawLine = serde_json::from_str(line).ok()?;
        let nic = nic(raw.thread_name.as_deref().unwrap_or(""))?;
        let mut fields = raw.fields;
        let message = match fields.remove("message") {
            Some(Value::String(m)) => m,
            _ => String::new(),
        };
        let kind = match fields.remove("event") {
            Some(Value::String(name)) => EventKind::from_name(&name),
            _ => None,
        };
        let packet = raw
            .spans
            .iter()
            .rev()
            .find(|s| s.contains_key("psn"))
            .map(|s| PacketTag {
                span: s
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                qpn: s.get("qpn").and_then(number),
                psn: s.get("psn").and_then(number),
                opcode: s.get("opcode").and_then(Value::as_str).map(str::to_owned),
            });
        Some(NicEvent {
            nic,
            at: Duration::from_micros(raw.timestamp.parse().ok()?),
            level: raw.level,
            target: raw.target,
            message,
            kind,
            fields,
            packet,
        })
    }

    /// A field as a number: JSON numbers, and strings such as `0x100` (keys are logged in hex).
    pub fn number(&self, key: &str) -> Option<u64> {
        self.fields.get(key).and_then(number)
    }

    /// A field as text.
    pub fn text(&self, key: &str) -> Option<String> {
        self.fields.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }

    /// Whether it is a decision about packets (the transport, the way in), rather than the
    /// control path (a host creating a QP, asking for counters).
    pub fn on_data_path(&self) -> bool {
        if let Some(kind) = self.kind {
            return kind != EventKind::MemoryRegistered;
        }
        self.packet.is_some()
            || ["roce_nic::transport", "roce_nic::engine::rx"]
                .iter()
                .any(|t| self.target.starts_with(t))
    }

    /// Whether it is the typed event `kind`.
    pub fn is(&self, kind: EventKind) -> bool {
        self.kind == Some(kind)
    }

    /// The PSN the event is about: its own `psn` field, or its packet's.
    pub fn psn(&self) -> Option<u64> {
        self.number("psn")
            .or_else(|| self.packet.as_ref().and_then(|p| p.psn))
    }
}

fn number(value: &Value) -> Option<u64> {
    match value {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

/// The events of both NICs so far, in the order they arrived, and a way to wait for one.
#[derive(Clone, Default)]
pub struct EventLog {
    shared: Arc<(Mutex<Vec<NicEvent>>, Condvar)>,
}

impl EventLog {
    fn events(&self) -> MutexGuard<'_, Vec<NicEvent>> {
        // A panic while pushing leaves a valid Vec: carry on with it.
        self.shared.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn push(&self, event: NicEvent) {
        self.events().push(event);
        self.shared.1.notify_all();
    }

    /// How many events have arrived: a mark for [`EventLog::since`].
    pub fn mark(&self) -> usize {
        self.events().len()
    }

    /// The events that arrived after `mark`, in time order.
    pub fn since(&self, mark: usize) -> Vec<NicEvent> {
        let mut events: Vec<NicEvent> = self.events().get(mark..).unwrap_or_default().to_vec();
        events.sort_by_key(|e| e.at);
        events
    }

    /// Waits up to `timeout` for an event after `mark` that satisfies `want`.
    pub fn wait_for(
        &self,
        mark: usize,
        timeout: Duration,
        want: impl Fn(&NicEvent) -> bool,
    ) -> Option<NicEvent> {
        let deadline = Instant::now() + timeout;
        let mut events = self.events();
        loop {
            if let Some(e) = events
                .get(mark..)
                .unwrap_or_default()
                .iter()
                .find(|e| want(e))
            {
                return Some(e.clone());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            events = self
                .shared
                .1
                .wait_timeout(events, left)
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    /// Reads a NIC process's standard error to its end: JSON lines become events; other lines
    /// (a NIC's last words before it fails) are kept in `other`.
    pub fn read_lines(&self, from: impl BufRead, nic: Side, other: &Mutex<Vec<String>>) {
        for line in from.lines() {
            let Ok(line) = line else { break };
            match NicEvent::parse(&line, nic) {
                Some(event) => self.push(event),
                None => other.lock().unwrap_or_else(|e| e.into_inner()).push(line),
            }
        }
    }
}

/// The events of NICs that run in this process (`roce demo --in-process`): a JSON layer whose
/// lines go to an [`EventLog`] instead of a file, attributed to a NIC by the name of the engine
/// thread that logged them. Lines of other threads (the host programs) are not the NICs'.
#[derive(Clone, Default)]
pub struct Capture {
    log: EventLog,
    engines: Arc<Mutex<Vec<(String, Side)>>>,
}

impl Capture {
    /// Installs this process's logging: warnings (or `RUST_LOG`) to standard error as usual,
    /// and the events of `roce_nic` — every decision on the data path when `detailed`, only
    /// debug and above otherwise — to the returned capture.
    pub fn install(detailed: bool) -> Result<Capture, DemoError> {
        let capture = Capture::default();
        let level = if detailed { Level::TRACE } else { Level::DEBUG };
        let wanted = Targets::new().with_target("roce_nic", level);
        tracing_subscriber::registry()
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(io::stderr)
                    .with_filter(env_filter()),
            )
            .with(json_layer(capture.clone()).with_filter(wanted))
            .try_init()
            .map_err(|e| DemoError::because("cannot capture the NICs' events", e))?;
        Ok(capture)
    }

    /// Events logged by the engine thread of the NIC `nic_name` are `side`'s.
    pub fn attribute(&self, nic_name: &str, side: Side) {
        self.engines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((format!("{nic_name}-engine"), side));
    }

    pub fn log(&self) -> EventLog {
        self.log.clone()
    }

    fn side_of(&self, thread: &str) -> Option<Side> {
        let engines = self.engines.lock().unwrap_or_else(|e| e.into_inner());
        engines.iter().find(|(t, _)| t == thread).map(|(_, s)| *s)
    }
}

/// One line on its way from the JSON layer to the capture.
pub struct CaptureWriter {
    capture: Capture,
    line: Vec<u8>,
}

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.line.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Drop for CaptureWriter {
    /// The layer makes one writer per event and drops it once the line is written.
    fn drop(&mut self) {
        let line = String::from_utf8_lossy(&self.line);
        if let Some(event) =
            NicEvent::parse_with_thread(line.trim_end(), |thread| self.capture.side_of(thread))
        {
            self.capture.log.push(event);
        }
    }
}

impl<'w> MakeWriter<'w> for Capture {
    type Writer = CaptureWriter;

    fn make_writer(&'w self) -> CaptureWriter {
        CaptureWriter {
            capture: self.clone(),
            line: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::trace_span;

    /// Events made by a real tracing span and event, through the real JSON layer.
    fn logged(nic_thread: &str) -> Vec<NicEvent> {
        let capture = Capture::default();
        capture.attribute("nicb", Side::Target);
        let subscriber = tracing_subscriber::registry().with(json_layer(capture.clone()));
        let name = nic_thread.to_owned();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || {
                tracing::subscriber::with_default(subscriber, || {
                    let span = trace_span!("rx", qpn = 0x11u32, psn = 1234u32, opcode = %"RC RDMA_WRITE_ONLY");
                    let _enter = span.enter();
                    roce_nic::transport::Event::IcrcOk.log();
                    roce_nic::transport::Event::RkeyChecked { write: true, rkey: 0x100, va: 0x40, len: 64, npkts: 0 }.log();
                });
            })
            .unwrap()
            .join()
            .unwrap();
        capture.log().since(0)
    }

    #[test]
    fn events_cross_the_json_format_with_their_fields_and_packet() {
        let before = since_epoch();
        let events = logged("nicb-engine");
        assert_eq!(events.len(), 2);
        let e = &events[1];
        assert_eq!(e.nic, Side::Target);
        assert_eq!(e.kind, Some(EventKind::WriteAllowed));
        assert!(!e.fields.contains_key("event"));
        assert_eq!(e.level, "TRACE");
        assert_eq!(e.number("rkey"), Some(0x100));
        assert_eq!(e.number("va"), Some(0x40));
        assert_eq!(e.number("len"), Some(64));
        assert_eq!(e.text("rkey").as_deref(), Some("0x100"));
        let packet = e.packet.as_ref().unwrap();
        assert_eq!(packet.span, "rx");
        assert_eq!((packet.qpn, packet.psn), (Some(0x11), Some(1234)));
        assert_eq!(packet.opcode.as_deref(), Some("RC RDMA_WRITE_ONLY"));
        assert_eq!(e.psn(), Some(1234));
        assert!(e.at >= before - Duration::from_secs(1) && e.at <= since_epoch());
    }

    #[test]
    fn lines_of_threads_that_are_no_nic_engine_are_not_the_nics() {
        assert!(logged("some-host-thread").is_empty());
    }

    #[test]
    fn other_lines_are_kept_apart() {
        let log = EventLog::default();
        let other = Mutex::new(Vec::new());
        let input = "not json\n{\"timestamp\":\"5\",\"level\":\"DEBUG\",\"fields\":{\"message\":\"go-back-N\",\"event\":\"go_back\",\"psn\":7},\"target\":\"roce_nic::transport::completer\"}\n";
        log.read_lines(input.as_bytes(), Side::Initiator, &other);
        let events = log.since(0);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].at, Duration::from_micros(5));
        assert_eq!(events[0].psn(), Some(7));
        assert_eq!(events[0].kind, Some(EventKind::GoBack));
        assert!(events[0].on_data_path());
        assert_eq!(other.lock().unwrap().as_slice(), ["not json"]);
    }

    #[test]
    fn waiting_sees_events_pushed_later_and_gives_up_in_time() {
        let log = EventLog::default();
        let pusher = log.clone();
        let event = NicEvent {
            nic: Side::Target,
            at: Duration::ZERO,
            level: "TRACE".into(),
            target: "roce_nic::engine::objects".into(),
            message: "memory registered".into(),
            kind: Some(EventKind::MemoryRegistered),
            fields: Map::new(),
            packet: None,
        };
        assert!(!event.on_data_path());
        let sent = event.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            pusher.push(sent);
        });
        let got = log.wait_for(0, Duration::from_secs(5), |e| {
            e.is(EventKind::MemoryRegistered)
        });
        assert_eq!(got, Some(event));
        t.join().unwrap();
        let start = Instant::now();
        assert!(log
            .wait_for(1, Duration::from_millis(30), |_| true)
            .is_none());
        assert!(start.elapsed() >= Duration::from_millis(30));
    }
}

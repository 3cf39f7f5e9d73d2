//! The data path tells its story through `tracing`: for one RDMA WRITE the target NIC reports
//! the frame coming in, its headers parsed, the ICRC checked, the R_Key resolved to a region,
//! the DMA into that region at its offset and the ACK going out — with the real numbers. The
//! demo and `RUST_LOG=roce_nic=trace` both read these events.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use roce_nic::testbed::*;
use roce_nic::verbs::*;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

#[derive(Debug, Clone)]
struct Seen {
    thread: String,
    message: String,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
}

struct Recorder(Arc<Mutex<Vec<Seen>>>);

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let message = fields.0.remove("message").unwrap_or_default();
        let thread = std::thread::current().name().unwrap_or("").to_owned();
        self.0.lock().unwrap().push(Seen {
            thread,
            message,
            fields: fields.0,
        });
    }
}

#[test]
fn a_write_is_narrated_step_by_step_with_its_numbers() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(
        Recorder(Arc::clone(&seen)).with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
    );
    tracing::subscriber::set_global_default(subscriber).unwrap();

    let p = pair(QpType::Rc, Mtu::M1024, 1 << 20).unwrap();
    p.a.write(0, &pattern(2500, 1));
    seen.lock().unwrap().clear();
    p.a.qp
        .post_send(&[SendWr {
            wr_id: 1,
            op: SendOp::RdmaWrite {
                remote_addr: p.b.mr.va + 4096,
                rkey: p.b.mr.rkey,
            },
            sg_list: &[p.a.mr.sge(0, 2500)],
            flags: SendFlags::SIGNALED,
            ud: None,
        }])
        .unwrap();
    assert!(p.a.completion().is_success());

    let events = seen.lock().unwrap().clone();
    let target: Vec<&Seen> = events
        .iter()
        .filter(|e| e.thread == "nic-b-engine")
        .collect();
    let messages: Vec<&str> = target.iter().map(|e| e.message.as_str()).collect();
    let position = |m: &str| {
        messages
            .iter()
            .position(|x| *x == m)
            .unwrap_or_else(|| panic!("no {m:?} in {messages:#?}"))
    };
    let order = [
        "frame in: headers parsed",
        "ICRC ok",
        "rkey checked: WRITE allowed",
        "DMA: WRITE data placed in host memory",
        "ACK sent",
    ];
    let positions: Vec<usize> = order.iter().map(|m| position(m)).collect();
    assert!(
        positions.windows(2).all(|w| w[0] < w[1]),
        "out of order: {messages:#?}"
    );

    let event = |m: &str| target.iter().find(|e| e.message == m).unwrap();
    let checked = &event("rkey checked: WRITE allowed").fields;
    // Every decision carries its typed kind, what the demo matches on instead of the words.
    let kind = roce_nic::transport::EventKind::WriteAllowed;
    assert_eq!(checked["event"], format!("{:?}", kind.name()));
    assert_eq!(checked["rkey"], format!("{:#x}", p.b.mr.rkey));
    assert_eq!(checked["va"], format!("{:#x}", p.b.mr.va + 4096));
    assert_eq!(checked["len"], "2500");
    let dma: Vec<&&Seen> = target
        .iter()
        .filter(|e| e.message == "DMA: WRITE data placed in host memory")
        .collect();
    assert_eq!(dma.len(), 3, "three packets of 1024, 1024 and 452 bytes");
    assert_eq!(dma[0].fields["region_offset"], "4096");
    assert_eq!(dma[2].fields["region_offset"], (4096 + 2048).to_string());
    assert_eq!(dma[2].fields["len"], "452");
    // And the initiator saw its side: packets sent, the completion.
    let initiator: Vec<&str> = events
        .iter()
        .filter(|e| e.thread == "nic-a-engine")
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        initiator.iter().filter(|m| **m == "packet sent").count(),
        3,
        "three packets, none twice"
    );
    assert!(initiator.contains(&"send request completed"));
}

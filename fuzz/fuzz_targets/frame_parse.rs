//! Any bytes, as an Ethernet frame, as a packet starting at its IP header, and as a capture
//! file: parsing, describing and reading must never panic.

#![no_main]

use libfuzzer_sys::fuzz_target;
use roce_wire::capture::Reader;
use roce_wire::describe::Description;
use roce_wire::Frame;

fn describe(frame: &Frame) {
    let description = Description::new(frame);
    for field in description.fields() {
        let _ = field.to_string();
        let _ = field.bit_pattern(frame.bytes()).map(|b| b.to_string());
    }
    let _ = description.summary().to_string();
}

fuzz_target!(|data: &[u8]| {
    if let Ok(frame) = Frame::parse(data) {
        describe(&frame);
    }
    if let Some((&selector, rest)) = data.split_first() {
        let ethertype = [0x0800, 0x86dd, 0x8915][usize::from(selector % 3)];
        if let Ok(frame) = Frame::parse_network_layer(rest, ethertype) {
            describe(&frame);
        }
    }
    if let Ok(mut reader) = Reader::new(data) {
        while let Some(Ok(record)) = reader.next_record() {
            if let Ok(frame) = record.frame() {
                describe(&frame);
            }
        }
    }
});

//! Writes a large capture of the bundled every-opcode frames, over and over, for timing
//! `roce decode` against tshark (see the README's performance section):
//!
//! `cargo run --release -p roce-tests --example synthetic_capture -- /tmp/million.pcap 1000000`

use std::fs::File;
use std::io::BufWriter;
use std::process::ExitCode;

use roce_tests::bundled;
use roce_wire::capture::Writer;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let (Some(path), Some(Ok(count))) = (args.get(1), args.get(2).map(|n| n.parse::<usize>()))
    else {
        eprintln!("usage: synthetic_capture FILE PACKETS");
        return ExitCode::from(2);
    };
    let written = File::create(path)
        .map_err(|e| e.to_string())
        .and_then(|file| Writer::new(BufWriter::new(file)).map_err(|e| e.to_string()))
        .and_then(|mut writer| {
            for (i, frame) in bundled::endless_frames().take(count).enumerate() {
                writer
                    .write(bundled::time(i), &frame)
                    .map_err(|e| e.to_string())?;
            }
            writer
                .into_inner()
                .into_inner()
                .map(drop)
                .map_err(|e| e.to_string())
        });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("synthetic_capture: {path}: {e}");
            ExitCode::FAILURE
        }
    }
}

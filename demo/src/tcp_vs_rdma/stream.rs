//! The TCP half's two ends: the sender writes from its buffer and the receiver reads into its
//! memory, each straight between the socket and the region (as a program reads into its own
//! buffer: no copy in between that TCP would not need), with a deadline so that neither can
//! hang the demo.

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use roce_hostmem::Region;

use crate::events::since_epoch;

/// What the receiver saw of its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// When the first and the last byte were in its memory (since the Unix epoch).
    pub first_at: Duration,
    pub last_at: Duration,
    /// recv() calls that returned data.
    pub reads: u64,
}

fn check_range(region: &Region, offset: usize, len: usize) -> io::Result<()> {
    match offset.checked_add(len) {
        Some(end) if end <= region.len() => Ok(()),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{len} bytes at offset {offset} do not fit a region of {} bytes",
                region.len()
            ),
        )),
    }
}

/// Bounds every call on `stream` by `limit`, once (a system call per read would add to what
/// is measured).
fn bounded(stream: &TcpStream, limit: Duration) -> io::Result<()> {
    stream.set_read_timeout(Some(limit))?;
    stream.set_write_timeout(Some(limit))
}

/// Fails once `deadline` has passed.
fn in_time(deadline: Instant, done: usize, len: usize) -> io::Result<()> {
    if Instant::now() > deadline {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("only {done} of {len} bytes in the time allowed"),
        ));
    }
    Ok(())
}

/// Receives exactly `len` bytes into `region` at `offset`, within `limit`.
pub fn receive_into(
    stream: &TcpStream,
    region: &Region,
    offset: usize,
    len: usize,
    limit: Duration,
) -> io::Result<Received> {
    check_range(region, offset, len)?;
    let deadline = Instant::now() + limit;
    let mut done = 0;
    let mut received = Received {
        first_at: Duration::ZERO,
        last_at: Duration::ZERO,
        reads: 0,
    };
    bounded(stream, limit)?;
    while done < len {
        in_time(deadline, done, len)?;
        // SAFETY: `offset + len` lies inside the region's mapping (checked above), which lives
        // as long as `region`; the kernel writes at most `len - done` bytes from `offset +
        // done`, memory that nothing else writes meanwhile (the NIC writes only the RDMA copy,
        // elsewhere in the region).
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                region.as_ptr().add(offset + done).cast(),
                len - done,
                0,
            )
        };
        match n {
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the sender closed the connection after {done} of {len} bytes"),
                ))
            }
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            n => {
                let now = since_epoch();
                if received.reads == 0 {
                    received.first_at = now;
                }
                received.last_at = now;
                received.reads += 1;
                done += n as usize;
            }
        }
    }
    Ok(received)
}

/// Sends `len` bytes of `region` from `offset`, within `limit`.
pub fn send_from(
    stream: &TcpStream,
    region: &Region,
    offset: usize,
    len: usize,
    limit: Duration,
) -> io::Result<()> {
    check_range(region, offset, len)?;
    let deadline = Instant::now() + limit;
    let mut done = 0;
    bounded(stream, limit)?;
    while done < len {
        in_time(deadline, done, len)?;
        // SAFETY: as in `receive_into`; the kernel only reads these bytes, which nothing
        // writes while they are sent.
        let n = unsafe {
            libc::send(
                stream.as_raw_fd(),
                region.as_ptr().add(offset + done).cast(),
                len - done,
                libc::MSG_NOSIGNAL,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        } else {
            done += n as usize;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn bytes_go_from_one_region_to_the_other_over_loopback() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let len = 3 << 20;
        let from = Region::anonymous(len + 4096).unwrap();
        let bytes: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        from.write(100, &bytes).unwrap();
        let sender = std::thread::spawn(move || {
            let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            send_from(&stream, &from, 100, len, Duration::from_secs(30)).unwrap();
        });
        let (stream, _) = listener.accept().unwrap();
        let to = Region::anonymous(len + 8192).unwrap();
        let got = receive_into(&stream, &to, 5000, len, Duration::from_secs(30)).unwrap();
        sender.join().unwrap();
        assert!(got.reads >= 1 && got.first_at <= got.last_at);
        let mut back = vec![0; len];
        to.read(5000, &mut back).unwrap();
        assert!(back == bytes);
        // Nothing more: the sender closed, and a read past the end says so.
        let e = receive_into(&stream, &to, 0, 1, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
        let e = receive_into(&stream, &to, to.len(), 1, Duration::from_secs(5)).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}

//! `roce host connect`: the initiator side, many work requests over one connection, made one of
//! two ways. With `--peer LINE` (facing `roce host serve`) it prints its `LID:QPN:PSN:GID` for
//! the server like `post` and connects once the server has connected to it — the exchange by
//! hand that the pingpongs do over TCP. With `IP:PORT` (facing `roce host listen`) the NICs'
//! connection managers do it: a REQ to the port, the REP with the server's QP and its region's
//! rkey, VA and length, the RTU — nothing to copy between terminals. Either way it then reads
//! one operation a line from standard input and prints each completion. Once connected, the
//! server's process has nothing more to do: stop it (`kill -STOP`) and the WRITEs, READs and
//! atomics typed here still land, which is the bypass to watch.

use std::io::{self, BufRead};
use std::net::SocketAddr;
use std::process::ExitCode;

use super::client::{ClientError, ConnArgs, Op};
use super::parse_rkey;
use super::post::parse_hex;
use crate::mem::parse_offset;
use crate::Failure;

pub const EXAMPLES: &str = "\\
Examples:
  roce host connect 10.0.0.2:7000 --nic nic0
connects through the RDMA CM to roce host listen 7000 on 10.0.0.2 (its rkey comes in the REP);
  roce host connect --nic nic0 --peer LINE --rkey 0x100
connects by hand to roce host serve; then, once the server has its line and Enter is pressed,
one operation a line:
  write 0 hello while you sleep
  read 0 5
  fetch-add 0x1000 1
LINE is the `local` line roce host serve printed; `help` lists the operations.";

const HELP: &str = "\\
operations, one a line (VA and numbers in decimal, 0x-hex or with a K, M or G suffix):
  write VA TEXT        RDMA WRITE the text (the rest of the line) to VA
  write-hex VA HEX     RDMA WRITE bytes given as hex digits
  read VA LEN          RDMA READ LEN bytes from VA and print them
  send TEXT            SEND the text; it lands in the server's posted receive
  fetch-add VA N       add N to the 8 bytes at VA; prints the value before
  cmp-swap VA C S      put S in the 8 bytes at VA if they hold C; prints the value before
  help                 this list
The end of standard input (Ctrl-D) ends the connection.";

#[derive(clap::Args)]
#[command(group = clap::ArgGroup::new("server").required(true).args(["listener", "peer"]))]
pub struct Args {
    /// A `roce host listen` to connect to through the RDMA CM (instead of --peer).
    #[arg(value_name = "IP:PORT")]
    listener: Option<SocketAddr>,
    #[command(flatten)]
    conn: ConnArgs,
    /// The server's rkey (decimal or 0x-hex), for every operation but SEND; through the RDMA
    /// CM, the REP gives it.
    #[arg(long)]
    rkey: Option<String>,
    /// Bytes of local buffer: the largest WRITE, READ or SEND (K, M, G suffixes).
    #[arg(long, default_value = "1M", value_name = "SIZE")]
    buffer: String,
}

/// One line typed: an operation at a remote address, or help.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    Op(Op, u64),
    Help,
    Nothing,
}

fn parse_line(line: &str) -> Result<Line, Failure> {
    let line = line.trim();
    let (word, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    let rest = rest.trim_start();
    let args: Vec<&str> = rest.split_whitespace().collect();
    let number = |what: &str, text: &str| parse_offset(what, text);
    let wrong = |form: &str| Failure::usage(format!("{line:?}: write it as `{form}`"));
    Ok(match (word, &args[..]) {
        ("", _) => Line::Nothing,
        ("help", _) => Line::Help,
        ("write", [va, ..]) => {
            let text = rest[va.len()..].trim_start();
            if text.is_empty() {
                return Err(wrong("write VA TEXT"));
            }
            Line::Op(Op::Write(text.as_bytes().to_vec()), number("VA", va)?)
        }
        ("write-hex", [va, hex @ ..]) if !hex.is_empty() => {
            Line::Op(Op::Write(parse_hex(&hex.concat())?), number("VA", va)?)
        }
        ("read", [va, len]) => Line::Op(Op::Read(number("LEN", len)? as usize), number("VA", va)?),
        ("send", _) if !rest.is_empty() => Line::Op(Op::Send(rest.as_bytes().to_vec()), 0),
        ("fetch-add", [va, n]) => Line::Op(Op::FetchAdd(number("N", n)?), number("VA", va)?),
        ("cmp-swap", [va, c, s]) => Line::Op(
            Op::CmpSwap(number("C", c)?, number("S", s)?),
            number("VA", va)?,
        ),
        ("write", _) => return Err(wrong("write VA TEXT")),
        ("write-hex", _) => return Err(wrong("write-hex VA HEX")),
        ("read", _) => return Err(wrong("read VA LEN")),
        ("send", _) => return Err(wrong("send TEXT")),
        ("fetch-add", _) => return Err(wrong("fetch-add VA N")),
        ("cmp-swap", _) => return Err(wrong("cmp-swap VA C S")),
        _ => {
            return Err(Failure::usage(format!(
                "{word:?} is not an operation (help lists them)"
            )))
        }
    })
}

pub fn run(args: Args) -> Result<ExitCode, Failure> {
    let peer = match args.listener {
        Some(_) => None,
        None => Some(args.conn.peer()?),
    };
    let mut rkey = args.rkey.as_deref().map(parse_rkey).transpose()?;
    let buffer = roce_hostmem::parse_size(&args.buffer)
        .map_err(|e| Failure::usage(format!("--buffer {}: {e}", args.buffer)))?;
    let (ctx, mut client, me) = args.conn.open(buffer)?;
    let timeout = args.conn.timeout();
    // Kept for the connection's life: dropping it disconnects.
    let mut _connection = None;
    let first = match (args.listener, &peer) {
        (Some(server), _) => {
            let (id, served) = client.connect_cm(&ctx, server, timeout)?;
            _connection = Some(id);
            rkey = rkey.or(Some(served.rkey));
            say!(
                "connected to {server} through the RDMA CM: region rkey={:#010x} va={:#x} len={}",
                served.rkey,
                served.va,
                served.len
            );
            tell!("type an operation (help lists them)");
            String::new()
        }
        (None, Some(peer)) => {
            let Some(first) = client.introduce(&me) else {
                return Ok(ExitCode::SUCCESS);
            };
            client.connect(peer)?;
            tell!("connected to {peer}; type an operation (help lists them)");
            first
        }
        (None, None) => return Err(Failure::usage("give IP:PORT or --peer")),
    };
    let rest = io::stdin().lock().lines().map_while(Result::ok);
    for line in std::iter::once(first).chain(rest) {
        let (op, va) = match parse_line(&line) {
            Ok(Line::Op(op, va)) => (op, va),
            Ok(Line::Help) => {
                say!("{HELP}");
                continue;
            }
            Ok(Line::Nothing) => continue,
            Err(e) => {
                tell!("roce: {e}");
                continue;
            }
        };
        let rkey = match (&op, rkey) {
            (Op::Send(_), _) => 0,
            (_, Some(rkey)) => rkey,
            (_, None) => {
                tell!(
                    "roce: the {} needs the server's rkey: give --rkey",
                    op.name()
                );
                continue;
            }
        };
        match client.run(&op, va, rkey, timeout) {
            Ok(()) => {}
            Err(ClientError::Refused(e)) => tell!("roce: {e}"),
            Err(ClientError::Broken(e)) => return Err(e),
            Err(ClientError::Failed { op, status }) => {
                return Err(Failure::new(format!(
                    "the {op} failed: {status}; the connection is broken (its QP is in the \
                     error state): start roce host connect again"
                )))
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> Result<Line, String> {
        parse_line(line).map_err(|e| e.to_string())
    }

    #[test]
    fn operations_parse_with_their_operands() {
        assert_eq!(
            parsed("write 0x40 hello  you"),
            Ok(Line::Op(Op::Write(b"hello  you".to_vec()), 0x40))
        );
        assert_eq!(
            parsed("write-hex 4K de ad"),
            Ok(Line::Op(Op::Write(vec![0xde, 0xad]), 4096))
        );
        assert_eq!(parsed("read 0 15"), Ok(Line::Op(Op::Read(15), 0)));
        assert_eq!(
            parsed(" send hi there "),
            Ok(Line::Op(Op::Send(b"hi there".to_vec()), 0))
        );
        assert_eq!(parsed("fetch-add 8 1"), Ok(Line::Op(Op::FetchAdd(1), 8)));
        assert_eq!(parsed("cmp-swap 8 1 2"), Ok(Line::Op(Op::CmpSwap(1, 2), 8)));
        assert_eq!(parsed("help"), Ok(Line::Help));
        assert_eq!(parsed(""), Ok(Line::Nothing));
    }

    #[test]
    fn malformed_lines_say_their_form() {
        assert_eq!(
            parsed("read 0"),
            Err("\"read 0\": write it as `read VA LEN`".into())
        );
        assert_eq!(
            parsed("write 0"),
            Err("\"write 0\": write it as `write VA TEXT`".into())
        );
        assert_eq!(
            parsed("wrte 0 x"),
            Err("\"wrte\" is not an operation (help lists them)".into())
        );
    }
}

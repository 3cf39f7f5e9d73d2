//! One end of a connection as `ibv_rc_pingpong` exchanges it out of band: `LID:QPN:PSN:GID`, in
//! hex (4, 6 and 6 digits, then the GID's 32 digits), so the lines can be pasted between
//! terminals, or between our tools and rdma-core's.

use std::fmt;
use std::str::FromStr;

use roce_nic::verbs::Gid;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Endpoint {
    /// Always 0 on RoCE; kept for the format.
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: Gid,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:06x}:{:06x}:{}",
            self.lid,
            self.qpn,
            self.psn,
            self.gid.to_hex()
        )
    }
}

impl FromStr for Endpoint {
    type Err = String;

    /// Reads `LID:QPN:PSN:GID`; the GID may also be written as an IP address.
    fn from_str(text: &str) -> Result<Endpoint, String> {
        let text = text.trim();
        let bad = || {
            format!(
                "{text:?} is not LID:QPN:PSN:GID (for example 0000:000011:0a1b2c:00000000000000000000ffff0a000001)"
            )
        };
        let mut parts = text.splitn(4, ':');
        let mut field = |max: u32| {
            parts
                .next()
                .and_then(|p| u32::from_str_radix(p, 16).ok())
                .filter(|v| *v <= max)
                .ok_or_else(bad)
        };
        let lid = field(0xffff)? as u16;
        let qpn = field(0xff_ffff)?;
        let psn = field(0xff_ffff)?;
        let gid = parts.next().and_then(Gid::parse).ok_or_else(bad)?;
        Ok(Endpoint { lid, qpn, psn, gid })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_print_as_pingpong_does_and_parse_back() {
        let e = Endpoint {
            lid: 0,
            qpn: 0x11,
            psn: 0xabcdef,
            gid: Gid::from_ip("10.0.0.1".parse().unwrap()),
        };
        let text = e.to_string();
        assert_eq!(text, "0000:000011:abcdef:00000000000000000000ffff0a000001");
        assert_eq!(text.parse::<Endpoint>(), Ok(e));
        assert_eq!(
            "0000:11:abcdef:::ffff:10.0.0.1\n".parse::<Endpoint>(),
            Ok(e)
        );
    }

    #[test]
    fn malformed_endpoints_are_refused() {
        for bad in [
            "",
            "0000:000011:abcdef",
            "0000:1000000:000000:00000000000000000000ffff0a000001",
            "zz:000011:abcdef:00000000000000000000ffff0a000001",
            "0000:000011:abcdef:0a000001",
        ] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad:?}");
        }
    }
}

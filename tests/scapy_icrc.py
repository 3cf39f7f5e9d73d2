#!/usr/bin/python3
"""Recomputes the ICRC of every RoCEv2 frame of a capture with scapy, an implementation
independent of ours, for the Rust tests that check what our NIC put on the wire.

Usage: scapy_icrc.py CAPTURE
Prints one JSON object per frame, in order: {"frame": N, "ip": 4 or 6 (absent when the frame is
not RoCEv2), "stored": the ICRC on the wire, "scapy": scapy's ICRC (IPv4 only), "script": this
script's}. scapy 2.5 (Debian 12) computes the ICRC over IPv4 only; for IPv6 the second
implementation of scapy_roce.py (checked against scapy on every IPv4 frame here) stands in.
"""

import json
import struct
import sys

from scapy.all import IP, UDP, IPv6, raw, rdpcap
from scapy.contrib.roce import BTH

from scapy_roce import icrc as script_icrc


def check(frame):
    """The frame's entry, without its number."""
    if BTH not in frame or UDP not in frame:
        return {}
    bth = frame[BTH]
    # The ICRC as it was on the wire: scapy reads the trailing four bytes big-endian (FCSField).
    stored = struct.pack("!I", bth.icrc)
    if IP in frame:
        ip = frame[IP]
        whole = raw(ip)[: ip.len]
        # BTH.compute_icrc rebuilds the pseudo-packet from the dissected IP/UDP/BTH layers.
        entry = {"ip": 4, "scapy": bth.compute_icrc(b"").hex()}
    elif IPv6 in frame:
        ip = frame[IPv6]
        whole = raw(ip)[: 40 + ip.plen]
        entry = {"ip": 6}
    else:
        return {}
    if whole[-4:] != stored:
        sys.exit(f"scapy's ICRC field {stored.hex()} is not the frame's last bytes {whole[-4:].hex()}")
    entry["stored"] = stored.hex()
    entry["script"] = script_icrc(whole[:-4], entry["ip"] == 6).hex()
    return entry


def main(path):
    for number, frame in enumerate(rdpcap(path), start=1):
        print(json.dumps(dict(frame=number, **check(frame))))


if __name__ == "__main__":
    main(sys.argv[1])

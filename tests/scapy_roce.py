#!/usr/bin/python3
"""Builds RoCEv2 packets with scapy, an implementation independent of ours, for the Rust test
`scapy` to parse.

Usage: scapy_roce.py OUT_DIR
Writes OUT_DIR/scapy.pcap and OUT_DIR/scapy.json: for each packet, in order, the values it was
built from, which the Rust decoder must read back exactly, with a good ICRC.

scapy.contrib.roce has BTH (computing the ICRC when the packet is built), AETH and CNP. It has no
RETH, DETH, ImmDt, IETH, AtomicETH or AtomicAckETH: those are laid out here as raw bytes after
the facts sheet. scapy 2.5 (Debian 12) computes the ICRC over IPv4 only; for IPv6 it writes
zero. IPv6 packets therefore get their ICRC from `icrc()` below, a second implementation written
from the facts sheet, which is first checked against scapy on every IPv4 packet.
"""

import json
import struct
import sys
import zlib

from scapy.all import IP, UDP, Ether, IPv6, Raw, wrpcap
from scapy.contrib.roce import AETH, BTH, cnp

SEND_ONLY, SEND_ONLY_IMM, WRITE_ONLY, READ_REQUEST = 0x04, 0x05, 0x0A, 0x0C
ACKNOWLEDGE, ATOMIC_ACK, COMPARE_SWAP, SEND_ONLY_INV = 0x11, 0x12, 0x13, 0x17
UC_SEND_ONLY_IMM, UD_SEND_ONLY_IMM = 0x25, 0x65


def icrc(ip_and_rest, ipv6):
    """ICRC over the IP packet up to the pad, with the variant fields masked to ones."""
    b = bytearray(ip_and_rest)
    if ipv6:
        b[0] |= 0x0F  # traffic class, high nibble
        b[1:4] = b"\xff\xff\xff"  # traffic class low nibble, flow label
        b[7] = 0xFF  # hop limit
        udp = 40
    else:
        b[1] = 0xFF  # TOS
        b[8] = 0xFF  # TTL
        b[10:12] = b"\xff\xff"  # header checksum
        udp = (b[0] & 0x0F) * 4
    b[udp + 6 : udp + 8] = b"\xff\xff"  # UDP checksum
    b[udp + 8 + 4] = 0xFF  # FECN, BECN, reserved
    crc = zlib.crc32(b"\xff" * 8 + bytes(b)) & 0xFFFFFFFF
    return struct.pack("<I", crc)


def network(ipv6, i):
    eth = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")
    if ipv6:
        return eth / IPv6(src="fd00::1", dst="fd00::2", tc=i * 4 % 256, fl=i * 977, hlim=64)
    return eth / IP(src="10.1.0.1", dst="10.1.0.2", tos=i * 4 % 256, flags="DF", ttl=64, id=i)


def packets():
    """(opcode, extension header fields, extension bytes, payload) for each packet kind."""
    reth = {"va": 0x00007FFE12345678, "r_key": 0x2B8, "dma_len": 65536}
    reth_bytes = struct.pack("!QII", reth["va"], reth["r_key"], reth["dma_len"])
    out = []
    # Payloads of 4 to 7 bytes: pad counts 0, 3, 2, 1.
    for n in range(4, 8):
        out.append((SEND_ONLY, {}, b"", bytes(range(0x41, 0x41 + n))))
    out.append((WRITE_ONLY, {"reth": dict(reth, dma_len=9)},
                struct.pack("!QII", reth["va"], reth["r_key"], 9), b"write me!"))
    out.append((READ_REQUEST, {"reth": reth}, reth_bytes, b""))
    out.append((SEND_ONLY_IMM, {"immdt": 0xDEADBEEF}, struct.pack("!I", 0xDEADBEEF), b"imm"))
    out.append((UC_SEND_ONLY_IMM, {"immdt": 0x01020304}, struct.pack("!I", 0x01020304), b"uc"))
    out.append((SEND_ONLY_INV, {"ieth": 0x1234}, struct.pack("!I", 0x1234), b"inv"))
    deth = {"q_key": 0x11112222, "src_qp": 0xABCDEF}
    out.append((UD_SEND_ONLY_IMM, {"deth": deth, "immdt": 7},
                struct.pack("!II", deth["q_key"], deth["src_qp"]) + struct.pack("!I", 7), b"ud"))
    atomic = {"va": 0x7FFE00001000, "r_key": 0x99, "swap_add": 5, "compare": 3}
    out.append((COMPARE_SWAP, {"atomic_eth": atomic},
                struct.pack("!QIQQ", atomic["va"], atomic["r_key"], atomic["swap_add"],
                            atomic["compare"]), b""))
    out.append((ATOMIC_ACK, {"aeth": {"syndrome": 0x1F, "msn": 42}, "atomic_ack_eth": 3},
                struct.pack("!I", 42) + struct.pack("!Q", 3), b""))
    return out


def main(out_dir):
    frames, expected = [], []
    i = 0
    for ipv6 in (False, True):
        for opcode, ext, ext_bytes, payload in packets():
            i += 1
            pad = (4 - len(payload) % 4) % 4
            bth = BTH(opcode=opcode, solicited=i % 2, migreq=i % 3 == 0, padcount=pad,
                      pkey=0xFFFF if i % 4 else 0x7FFF, fecn=i % 5 == 0, becn=i % 7 == 0,
                      dqpn=0x100 + i, ackreq=1, psn=(0xFFFFF0 + i * 3) & 0xFFFFFF)
            if opcode == ATOMIC_ACK:
                # scapy's AETH layer for the AETH; the AtomicAckETH raw after it.
                body = AETH(syndrome=0x1F, msn=42) / Raw(ext_bytes[4:])
            else:
                body = Raw(ext_bytes + payload + b"\x00" * pad)
            frame = network(ipv6, i) / UDP(sport=0xC000 + i, dport=4791, chksum=0) / bth / body
            frames.append(frame)
            expected.append({
                "ipv6": ipv6, "opcode": opcode, "solicited": bool(bth.solicited),
                "migreq": bool(bth.migreq), "pad_count": pad, "p_key": bth.pkey,
                "fecn": bool(bth.fecn), "becn": bool(bth.becn), "dest_qp": bth.dqpn,
                "ack_req": True, "psn": bth.psn, "ext": ext, "payload": payload.hex(),
            })
    # ACKs through scapy's own AETH layer: ACK, RNR NAK, NAK.
    for syndrome, msn in ((0x1F, 1), (0x2E, 2), (0x62, 3)):
        i += 1
        frames.append(network(False, i) / UDP(sport=0xC000, dport=4791, chksum=0)
                      / BTH(opcode=ACKNOWLEDGE, dqpn=0x11, psn=i) / AETH(syndrome=syndrome, msn=msn))
        expected.append({"ipv6": False, "opcode": ACKNOWLEDGE, "solicited": False, "migreq": False,
                         "pad_count": 0, "p_key": 0xFFFF, "fecn": False, "becn": False,
                         "dest_qp": 0x11, "ack_req": False, "psn": i,
                         "ext": {"aeth": {"syndrome": syndrome, "msn": msn}}, "payload": ""})
    # A CNP as scapy makes it: BECN set, 16 reserved bytes.
    frames.append(network(False, 99) / UDP(sport=0, dport=4791, chksum=0) / cnp(0x118))
    expected.append({"ipv6": False, "opcode": 0x81, "solicited": False, "migreq": False,
                     "pad_count": 0, "p_key": 0xFFFF, "fecn": False, "becn": True,
                     "dest_qp": 0x118, "ack_req": False, "psn": 0, "ext": {},
                     "payload": "00" * 16})

    built = []
    for frame, exp in zip(frames, expected):
        raw = bytearray(bytes(frame))
        ip_and_rest = bytes(raw[14:-4])
        ours = icrc(ip_and_rest, exp["ipv6"])
        if exp["ipv6"]:
            raw[-4:] = ours
            exp["icrc_by"] = "this script (scapy 2.5 has no IPv6 ICRC)"
        else:
            if bytes(raw[-4:]) != ours:
                sys.exit(f"this script's ICRC {ours.hex()} disagrees with scapy's {raw[-4:].hex()}")
            exp["icrc_by"] = "scapy"
        exp["icrc"] = bytes(raw[-4:]).hex()
        built.append(Ether(bytes(raw)))
    wrpcap(f"{out_dir}/scapy.pcap", built)
    with open(f"{out_dir}/scapy.json", "w") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main(sys.argv[1])

"""What scripts/bench.sh's pcap builders share (imported with
PYTHONPATH=scripts): the Internet checksum."""
import struct


def csum(b):
    """RFC 1071: the one's-complement sum of 16-bit words, complemented."""
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF

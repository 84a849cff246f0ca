#!/usr/bin/python3
"""Where every byte of one fleet Set goes on the wire (bench/fleet.sh --wire).

Usage: fleet-wire.py LABEL TRACE-A TRACE-B KEY

TRACE-A is `strace -f -xx -s 65536 -e trace=sendto` of host A around a few Sets, TRACE-B
`strace -f -xx -s 65536 -e trace=recvfrom` of host B: the last txn A sent for KEY's value and
the last watch event B read for it are taken apart, field by field, with the value's own parts
(the 0xA7 frame, the value's ValueCodec bytes, the attribution: an a{sv} with field names, or
the compact record) and what base64 and JSON add.
"""
import base64
import json
import re
import struct
import sys

label, trace_a, trace_b, key = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
CALL = re.compile(r'(sendto|recvfrom)\(\d+, "((?:\\x[0-9a-f]{2})*)"')


def buffers(path):
    with open(path, errors="replace") as f:
        for line in f:
            m = CALL.search(line)
            if m:
                yield bytes.fromhex(m.group(2).replace("\\x", ""))


def value_parts(raw):
    """The value's parts: [(name, bytes)]."""
    if not raw or raw[0] != 0xA7 or len(raw) < 5:
        return [("bare ValueCodec value", len(raw))]
    length = struct.unpack_from("<I", raw, 1)[0]
    trailer = raw[5 + length:]
    parts = [("0xA7 frame (format byte, u32 length)", 5), ("the value's ValueCodec bytes", length)]
    if trailer[:1] == b"\x01" and trailer[1:7] == b"\x05a{sv}":
        parts.append(("attribution a{sv}: format, signature, count", 11))
        offset = 11
        while offset < len(trailer):
            start = offset
            (n,) = struct.unpack_from("<I", trailer, offset); offset += 4
            name = trailer[offset:offset + n].decode(); offset += n
            sig_len = trailer[offset]; sig = chr(trailer[offset + 1]); offset += 1 + sig_len
            if sig == "s":
                (m,) = struct.unpack_from("<I", trailer, offset); offset += 4 + m
            elif sig in "ui":
                offset += 4
            elif sig in "xt":
                offset += 8
            else:
                parts.append((f"  (unparsed from {name!r})", len(trailer) - start)); break
            parts.append((f"  {name}: name {4 + n}, signature 2, value {offset - start - 6 - n}", offset - start))
    elif trailer[:1] == b"\xca":
        parts.append(("compact attribution record", len(trailer)))
    elif trailer:
        parts.append(("unknown trailer", len(trailer)))
    return parts


def show_value(raw, indent="    "):
    for name, size in value_parts(raw):
        print(f"| {indent}{name} | {size} |")


def txn_report(path):
    body = None
    for buf in buffers(path):
        if b"POST /v3/kv/txn" in buf or (body is None and buf.startswith(b'{"compare"')):
            head, _, rest = buf.partition(b"\r\n\r\n")
            body = rest if b"POST" in head else buf
            request = len(buf)
            headers = len(buf) - len(body)
    if body is None:
        print(f"| {label}: no txn found | - |")
        return
    doc = json.loads(body)
    print(f"| **{label}: the txn A sends** (HTTP request {request} bytes: headers {headers}) | **{len(body)}** |")
    b64_total = 0
    for section in ("compare", "success", "failure"):
        for item in doc.get(section, []):
            text = json.dumps(item, separators=(",", ":"))
            inner = item.get("request_put") or item.get("request_range") or item.get("request_delete_range") or item
            kind = next(iter(item)) if section != "compare" else f"compare {item.get('target')} {item.get('result', 'EQUAL')}"
            k = base64.b64decode(inner["key"])
            print(f"| {section}: {kind} of {k.decode(errors='replace')} | {len(text)} |")
            print(f"|     key: {len(k)} bytes, {len(inner['key'])} in base64 | {len(inner['key'])} |")
            b64_total += len(inner["key"])
            if "value" in inner:
                raw = base64.b64decode(inner["value"])
                print(f"|     value: {len(raw)} bytes, {len(inner['value'])} in base64 | {len(inner['value'])} |")
                b64_total += len(inner["value"])
                show_value(raw, "      ")
    print(f"| JSON around the base64 (names, quotes, numbers, brackets) | {len(body) - b64_total} |")


def watch_report(path):
    event = None
    stream = b"".join(buffers(path))
    for line in stream.split(b"\n"):
        if b'"events"' not in line:
            continue
        try:
            doc = json.loads(line.strip())
        except ValueError:
            continue
        keys = [base64.b64decode(ev["kv"]["key"]) for ev in doc.get("result", {}).get("events", [])]
        if any(k.endswith(b"/keys/" + key.encode()) for k in keys):
            event = line.strip()
    if event is None:
        print(f"| {label}: no watch event found | - |")
        return
    doc = json.loads(event)
    print(f"| **{label}: the watch event B reads** (one line of the stream) | **{len(event)}** |")
    for ev in doc["result"]["events"]:
        kv = ev["kv"]
        raw = base64.b64decode(kv.get("value", ""))
        print(f"|     value: {len(raw)} bytes, {len(kv.get('value', ''))} in base64 | {len(kv.get('value', ''))} |")
        show_value(raw, "      ")
        print(f"|     key {len(kv['key'])} in base64, revisions, version, JSON | {len(event) - len(kv.get('value', ''))} |")


txn_report(trace_a)
watch_report(trace_b)

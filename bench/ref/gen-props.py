#!/usr/bin/python3
"""Generates the many-property inputs of bench/all.sh, fast.

    gen-props.py store DB COUNT GROUPS    fills a propbusd store with COUNT int32 properties
    gen-props.py model FILE COUNT GROUPS  writes a model file declaring COUNT int32 properties

Keys are gG.pN (G < GROUPS, COUNT / GROUPS names per group); property N of the store holds N.
For `store`, DB must be a store that propbusd made and that holds `bench.template`, created with
CreateProperty("bench.template", "i", <0>, {}): its schema and its definition's encoding of the
options come from propbusd, so only the int32 value encoding (ValueCodec: format 1, signature
length 1, 'i', 4 bytes little-endian) is written here. The template is removed.
"""
import json
import sqlite3
import struct
import sys


def keys(count, groups):
    per_group = count // groups
    return [(f"g{g}.p{n}", g * per_group + n) for g in range(groups) for n in range(per_group)]


def int32(value):
    return b"\x01\x01i" + struct.pack("<i", value)


def store(path, count, groups):
    db = sqlite3.connect(path)
    row = db.execute("SELECT type, options FROM definitions WHERE key = 'bench.template'").fetchone()
    if row is None:
        sys.exit(f"gen-props.py: {path} holds no bench.template")
    kind, options = row
    with db:
        db.execute("DELETE FROM definitions WHERE key = 'bench.template'")
        db.execute("DELETE FROM stored_values WHERE key = 'bench.template'")
        generated = keys(count, groups)
        db.executemany("INSERT INTO definitions (key, type, default_value, options) VALUES (?, ?, ?, ?)",
                       ((key, kind, int32(0), options) for key, _ in generated))
        db.executemany("INSERT INTO stored_values (key, value, revision) VALUES (?, ?, ?)",
                       ((key, int32(n), n + 1) for key, n in generated))
        db.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('revision', ?)", (count + 1,))
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()


def model(path, count, groups):
    declared = {}
    for key, n in keys(count, groups):
        group, name = key.split(".")
        declared.setdefault(group, {"properties": {}})["properties"][name] = {"type": "i", "default": n}
    with open(path, "w") as out:
        json.dump({"description": f"bench: {count} properties in {groups} groups", "groups": declared}, out)


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] not in ("store", "model"):
        sys.exit(__doc__)
    {"store": store, "model": model}[sys.argv[1]](sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))

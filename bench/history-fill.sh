#!/usr/bin/env bash
# Pre-fills a stopped propbusd's store with N rows of change history, quickly (one sqlite3
# transaction, a recursive CTE): for benches that need "a store already holding 1M rows".
#
#   bench/history-fill.sh STATE_DIR N [KEYS]
#
#   STATE_DIR  the daemon's --state-dir (propbus.db inside); the daemon must not be running
#   N          rows to add (e.g. 1000000)
#   KEYS       spread over bench.k0 … bench.k(KEYS-1) (default 10000); the bench writers'
#              keys (bench.w*) get none, so a history query for one of them is a real
#              search among N rows
#
# The rows are numbered 1…N ("change" and "revision"), like a history that came before the
# bench's writes: the store's revision is raised to N, so the daemon's next writes come after
# them, as in a real history (their rows at the end of the indexes by revision and change).
# Their values are int32 blobs in ValueCodec's format (format byte 1, signature "i", 4 bytes
# little-endian). Schema 10 to 12: they go into `history` with their entries in
# the index tables (schema 12: by uid too, and their bytes added to `meta`), ids after every row already there (schema 11: an entry per row, as the
# daemon's steps would make them, each batch of 512 rows holding one row of a key at most when
# KEYS > 512; schema 10: an entry per row as well). Before: into the indexed `history`
# table, with ids after every row already in either table (rows keep their ids when moved from
# `history_recent`).
set -euo pipefail
state=$1 rows=$2 keys=${3:-10000}
db="$state/propbus.db"
[ -f "$db" ] || { echo "history-fill: no store at $db" >&2; exit 1; }
command -v sqlite3 >/dev/null || { echo "history-fill: needs sqlite3 (apt-get install sqlite3)" >&2; exit 1; }
start=$(date +%s%N)
# A store of schema 7 and before (an earlier propbusd, to compare) has no history_recent; one of
# schema 8 and before keeps the caller's fields in each row, not in history_caller.
recent=history_recent
[ -n "$(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE name = 'history_recent'")" ] || recent=history
if [ -n "$(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE name = 'history_caller'")" ]; then
  caller_columns=caller
  caller_values="(SELECT id FROM history_caller WHERE bus_name = ':1.1' AND exe = '/usr/bin/bench')"
  add_caller="INSERT INTO history_caller (bus_name, uid, user, pid, comm, exe) SELECT ':1.1', 0, 'root', 1, 'bench', '/usr/bin/bench'
    WHERE NOT EXISTS (SELECT 1 FROM history_caller WHERE bus_name = ':1.1' AND exe = '/usr/bin/bench');"
else
  caller_columns="uid, user, pid, comm, exe, unit, bus_name"
  caller_values="0, 'root', 1, 'bench', '/usr/bin/bench', NULL, ':1.1'"
  add_caller=
fi
if [ -n "$(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'history_key'")" ]; then
  # Schema 11's entries count their rows (and pack those of a key in one batch: none here).
  if [ -n "$(sqlite3 "$db" "SELECT name FROM pragma_table_info('history_index') WHERE name = 'count'")" ]; then
    entry_columns="key_id, revision, id, count" entry_values="key_id, revision, id, 1"
  else
    entry_columns="key_id, revision, id" entry_values="key_id, revision, id"
  fi
  # Schema 12 indexes rows by uid and keeps the bytes of the indexed rows in meta.
  by_uid=
  if [ -n "$(sqlite3 "$db" "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'history_by_uid'")" ]; then
    bytes="coalesce(length(h.old_value), 0) + coalesce(length(h.new_value), 0) + 64"
    by_uid="INSERT INTO history_by_uid (uid, revision, id, count)
  SELECT c.uid, h.revision, h.id, 1 FROM history h JOIN history_caller c ON c.id = h.caller
  WHERE h.id > (SELECT indexed FROM last) AND c.uid IS NOT NULL ORDER BY 1, 2, 3;
INSERT INTO meta (name, value)
  SELECT 'history_bytes_uid_' || c.uid, sum($bytes) FROM history h JOIN history_caller c ON c.id = h.caller
  WHERE h.id > (SELECT indexed FROM last) AND c.uid IS NOT NULL GROUP BY c.uid
  UNION ALL SELECT 'history_bytes', coalesce(sum($bytes), 0) FROM history h WHERE h.id > (SELECT indexed FROM last)
  ON CONFLICT (name) DO UPDATE SET value = value + excluded.value;"
  fi
  # Schema 10: keys as ids in history_key, rows written once into history and indexed in the
  # index tables (with any rows the daemon left unindexed); the caller kept for every row.
  sqlite3 "$db" <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
INSERT INTO history_caller (bus_name, uid, user, pid, comm, exe, last_row) SELECT ':1.1', 0, 'root', 1, 'bench', '/usr/bin/bench', 0
  WHERE NOT EXISTS (SELECT 1 FROM history_caller WHERE bus_name = ':1.1' AND exe = '/usr/bin/bench');
WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < $keys - 1)
INSERT OR IGNORE INTO history_key (key) SELECT 'bench.k' || i FROM n;
CREATE TEMP TABLE last AS
  SELECT coalesce((SELECT max(id) FROM history), 0) AS id, coalesce((SELECT value FROM meta WHERE name = 'history_indexed'), 0) AS indexed;
CREATE TEMP TABLE keys AS SELECT id, CAST(substr(key, 8) AS INTEGER) AS k FROM history_key WHERE key GLOB 'bench.k[0-9]*';
CREATE UNIQUE INDEX temp.keys_k ON keys (k);
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $rows)
INSERT INTO history (id, change, revision, time, key_id, kind, old_value, new_value, via, caller)
SELECT (SELECT id FROM last) + i, i, i, $start - ($rows - i) * 1000, (SELECT id FROM keys WHERE k = i % $keys), 'changed',
       x'01016900000000', x'01016901000000', 'Set', (SELECT id FROM history_caller WHERE bus_name = ':1.1' AND exe = '/usr/bin/bench')
FROM n;
UPDATE history_caller SET last_row = (SELECT max(id) FROM history) WHERE bus_name = ':1.1' AND exe = '/usr/bin/bench';
INSERT INTO history_index ($entry_columns)
  SELECT $entry_values FROM history WHERE id > (SELECT indexed FROM last) ORDER BY key_id, revision, id;
INSERT INTO history_by_change (change, id) SELECT change, id FROM history WHERE id > (SELECT indexed FROM last) ORDER BY change, id;
$by_uid
INSERT OR REPLACE INTO meta (name, value) VALUES ('history_indexed', (SELECT max(id) FROM history));
INSERT OR REPLACE INTO meta (name, value) VALUES ('revision', max(coalesce((SELECT value FROM meta WHERE name = 'revision'), 0), (SELECT max(revision) FROM history)));
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
  echo "history-fill: $rows rows over $keys keys in $(( ($(date +%s%N) - start) / 1000000 )) ms; $(sqlite3 "$db" 'SELECT count(*) FROM history') rows in all" >&2
  exit 0
fi
sqlite3 "$db" <<SQL
PRAGMA journal_mode=WAL;
BEGIN;
$add_caller
CREATE TEMP TABLE last AS
  SELECT max(coalesce((SELECT max(id) FROM history), 0), coalesce((SELECT max(id) FROM $recent), 0)) AS id;
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $rows)
INSERT INTO history (id, change, revision, time, key, kind, old_value, new_value, via, $caller_columns)
SELECT (SELECT id FROM last) + i, i, i, $start - ($rows - i) * 1000, 'bench.k' || (i % $keys), 'changed',
       x'01016900000000', x'01016901000000', 'Set', $caller_values
FROM n;
INSERT OR REPLACE INTO meta (name, value) VALUES ('revision', max(coalesce((SELECT value FROM meta WHERE name = 'revision'), 0), (SELECT max(revision) FROM history)));
COMMIT;
PRAGMA wal_checkpoint(TRUNCATE);
SQL
echo "history-fill: $rows rows over $keys keys in $(( ($(date +%s%N) - start) / 1000000 )) ms; $(sqlite3 "$db" 'SELECT count(*) FROM history') rows in all" >&2

--[[ records.lua — every admin API document and the version, at one instant
(read only).

KEYS: 1 tg:{A}:version  2 tg:{A}:records (see record_write.lua); one tag,
      so the script runs in one slot of a Redis Cluster.
ARGV: none.
Returns: {version, documents}
  version    '0' on a store never written to
  documents  the records hash as a flat field/value list:
             `<kind>:<id>`, `<revision> <version> <call id> <body>`
Invariants: read only; one script, so the documents are exactly those of
the version returned.
]]

return { redis.call('GET', KEYS[1]) or '0', redis.call('HGETALL', KEYS[2]) }

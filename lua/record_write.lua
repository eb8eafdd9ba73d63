--[[ record_write.lua — write one admin API document (a key or an org) if it
is still at the revision the writer read, moving the version on and
appending the audit entry, all in this one call.

KEYS: the three keys of the admin tag A (`tollgate:admin`), which no budget
      tag can be (those are org ids, without ':', or `key:<id>`); one tag,
      so the script runs in one slot of a Redis Cluster:
  1 tg:{A}:version  string  the version: one more on every applied write;
                            absent on a store never written to (0)
  2 tg:{A}:records  hash    `<kind>:<id>` -> `<revision> <version> <call id> <body>`:
                            the document's revision, the version and the call id
                            of the write that made it, then the document (JSON)
  3 tg:{A}:audit    stream  one entry per applied write, id `<seq>-0`, where seq
                            is the version that write moved the store to;
                            one field, `body` (JSON)
ARGV:
  1 `<kind>:<id>`  the document's field ('key' or 'org', then its id)
  2 the revision the writer read, '' for an id that must be free (never
    used, not even by a deleted document)
  3 the document (JSON)
  4 the audit entry (JSON)
  5 call id (hex): the same for every attempt of one call
Returns:
  {'written', revision, version}  applied: the document's revision and the
                                  store's version now
  {'conflict', current}           not applied: the document's revision now,
                                  '' when there is none
Invariants: the version is the newest audit entry's seq, and only this
script moves either; a document's revision counts its writes, from 1; a
conflict writes nothing. The audit entry is written first, and XADD refuses
an id that is not past the newest, so a version and a trail out of step
fail the write before anything else changes (Redis does not roll a failed
script back). An attempt that timed out after it applied finds its call id
on the document and answers as it did. The script never reads a body.
]]

-- A refusal of the script's arguments (code TOLLGATE, as common.lua's).
local function fail(message)
  return error({ err = 'TOLLGATE ' .. message })
end

local field, expect, body, audit, call_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
if not string.match(field, '^%l+:') then
  fail('not a document field: ' .. field)
end
if expect ~= '' and not string.match(expect, '^%d+$') then
  fail('the expected revision is not an integer: ' .. expect)
end
if not string.match(call_id, '^%x+$') then
  fail('the call id is not hex: ' .. call_id)
end

local current, made_at, made_by = '', nil, nil
local raw = redis.call('HGET', KEYS[2], field)
if raw then
  current, made_at, made_by = string.match(raw, '^(%d+) (%d+) (%x+) ')
  if not current then
    return redis.error_reply('unreadable document ' .. field .. ' in ' .. KEYS[2])
  end
end
if current ~= expect then
  if made_by == call_id then
    -- This call's own earlier attempt applied it.
    return { 'written', current, made_at }
  end
  return { 'conflict', current }
end

local revision = 1
if current ~= '' then
  revision = tonumber(current) + 1
end
local version = tonumber(redis.call('GET', KEYS[1]) or '0') + 1
revision = string.format('%d', revision)
version = string.format('%d', version)
redis.call('XADD', KEYS[3], version .. '-0', 'body', audit)
redis.call('HSET', KEYS[2], field, revision .. ' ' .. version .. ' ' .. call_id .. ' ' .. body)
redis.call('SET', KEYS[1], version)
return { 'written', revision, version }

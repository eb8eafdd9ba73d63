--[[ sweep.lua — expire due reservations, forget old closed records, fold
ledger entries past the ledger buffer into their counters' folded sums
(`fold`, fold.lua), and drop spend aggregate rows past their retention.

KEYS: the seven keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      a key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV, read by name as `argv.<name>`: the names and their order are
`SweepArgs` in src/budget/redis/scripts.rs, which binds them in front of
this body (a test holds this list to it).
  limit: at most this many of each kind of work per call, so one call
    never blocks Redis for long; the caller repeats while `more` is '1'
  ledger_buffer_ms: how long an entry waits in the stream for a sink
    (drain.lua) before it is folded without one
  on_expiry: 'charge' | 'release', what each expired reservation is
    charged (see common.lua)
  aggregate_days: rows of days before today minus this many are deleted
Returns: {expired, forgotten, folded, more, dropped}
  `dropped` counts the aggregate fields deleted.
Ledger buffer: entries are trimmed by age in whole hours (an entry goes
once the hour it falls in is older than the buffer), so trims are rare
and a reader paging through the ledger can notice one (`folds` changes) and
start again. Before an entry is trimmed, its actual is added to the `:f`
field of each scope and period it charged, in this same script, so
`counter == folded + sum(ledger act) + sum(open amounts)` stays exact.
Aggregate retention: a pass over the agg hash (HSCAN, `limit` fields a
call, its cursor kept in the `scan` field beside the first day the pass
keeps) deletes the fields of older days; once a pass ends, `kept_from`
holds that day, and until the day changes a sweep costs one HGET. A field
present when a pass starts is seen by it (HSCAN's guarantee); fields
written meanwhile are of today, never old.
Invariants: idempotent (a repeated sweep finds nothing more to do); an
expired reservation's amount leaves its reserved parts and what on_expiry
charges stays in its committed counters, booked as one `expired` entry;
every key touched is in KEYS.
]]

local limit = int_arg(argv.limit, 'sweep limit')
local retention = int_arg(argv.ledger_buffer_ms, 'ledger buffer')
local on_expiry = on_expiry_arg(argv.on_expiry)
local aggregate_days = int_arg(argv.aggregate_days, 'aggregate retention')

local now = store_now()
local expired = expire_due(now, limit, on_expiry)
local forgotten = forget_due(now, limit)

local cutoff = math.floor((now - retention) / HOUR_MS) * HOUR_MS

-- When the entry was booked: `at`, the last of its fields.
local function booked_at(item)
  local values = item[2]
  for i = #values - 1, 1, -2 do
    if values[i] == 'at' then
      return tonumber(values[i + 1])
    end
  end
  fail('ledger entry ' .. item[1] .. ' has no time')
end

-- The oldest entry alone first. It is almost always recent, and the sweep
-- then stops there: a page of a thousand entries read into Lua blocks
-- Redis for milliseconds, and the sweep runs every second on every tag.
local entries = {}
if limit > 0 then
  entries = redis.call('XRANGE', KEYS[5], '-', '+', 'COUNT', '1')
  if entries[1] and limit > 1 and booked_at(entries[1]) < cutoff then
    entries = redis.call('XRANGE', KEYS[5], '-', '+', 'COUNT', fmt(limit))
  end
end
-- Folds the entries booked before the cutoff, the oldest first.
local folded = fold(entries, function(entry)
  return tonumber(entry.at) >= cutoff
end)

-- One step of the pass dropping aggregate rows of days before the first
-- kept one; returns how many fields it deleted and whether the pass goes on.
local function drop_old_aggregates()
  local first_kept = period_id('day', now - aggregate_days * 86400000)
  local done = redis.call('HGET', KEYS[6], 'kept_from')
  if done and done >= first_kept then
    return 0, false
  end
  -- A tag that never booked an entry: nothing to drop, and no hash made
  -- only to say so.
  if not done and redis.call('EXISTS', KEYS[6]) == 0 then
    return 0, false
  end
  -- A pass in progress keeps the day it started with, so the day it
  -- records at its end is one it has cleared throughout.
  local cursor = '0'
  local scan = redis.call('HGET', KEYS[6], 'scan')
  if scan then
    cursor, first_kept = string.match(scan, '^(%d+) (.+)$')
  end
  local page = redis.call('HSCAN', KEYS[6], cursor, 'COUNT', fmt(limit))
  local fields = page[2]
  local old = {}
  for i = 1, #fields, 2 do
    local field = fields[i]
    -- Rows start with their day; the pass's own fields with a letter.
    if string.find(field, '^%d') and string.sub(field, 1, 10) < first_kept then
      old[#old + 1] = field
    end
  end
  -- In slices: unpack puts every argument on Lua's stack.
  for i = 1, #old, 500 do
    redis.call('HDEL', KEYS[6], unpack(old, i, math.min(i + 499, #old)))
  end
  if page[1] == '0' then
    redis.call('HDEL', KEYS[6], 'scan')
    redis.call('HSET', KEYS[6], 'kept_from', first_kept)
    return #old, false
  end
  redis.call('HSET', KEYS[6], 'scan', page[1] .. ' ' .. first_kept)
  return #old, true
end

local dropped, dropping = 0, false
if limit > 0 then
  dropped, dropping = drop_old_aggregates()
end

local more = '0'
if expired == limit or forgotten == limit or folded == limit or dropping then
  more = '1'
end
return { fmt(expired), fmt(forgotten), fmt(folded), more, fmt(dropped) }

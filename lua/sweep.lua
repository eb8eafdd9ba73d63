--[[ sweep.lua — expire due reservations, forget old closed records, fold
ledger entries past the ledger buffer into their counters' folded sums
(`fold`, fold.lua), drop spend aggregate rows past their retention, and,
in a pass over the spend hash, forget rate limits' ended minutes and
customers without a call for the customer TTL.

KEYS: the eight keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done, cust.
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
  customer_ttl_ms: a customer whose last call is at least this old is
    forgotten
  on_expiry: 'charge' | 'release', what each expired reservation is
    charged (see common.lua)
  aggregate_days: rows of days before today minus this many are deleted
Returns: {expired, forgotten, folded, more, dropped, customers, cleared}
  `dropped` counts the aggregate fields deleted, `customers` the customers
  forgotten, `cleared` the spend fields the pass deleted (rate limit
  windows, forgotten customers' entries and counters, old marks).
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
The pass over the spend hash (HSCAN, `limit` fields a call, its state in
the `pass` field: `<pass number> <cursor> <due> <again>`, the cursor `-`
between passes, when the next one starts at `due`, at most a minute after
the last ended) deletes, on each page:
  - a rate limit's counter (`<kind>:<id>:<minute>/requests` or `/tokens`)
    and its reserved part, for a minute before the one two minutes ago
    (`caps::forget_windows_before`; minute ids sort as text), unless a
    reservation still holds part of it;
  - a customer (its `seen:` field) whose last call is at least the
    customer TTL old and whose reservations have all passed their
    deadline (`hold`) and are closed (none left due once this call
    expired what was due): its registry entry (`seen:` and its member of
    cust), and its counters of the counter periods its entry lists (those
    of its last call, the ones a reserve could read again) at once; the
    customer is marked `gone:` with the pass's number;
  - the counters of a customer marked `gone:` and not seen again since
    (`:r` and `:f` too), unless a reservation still holds part of one: the
    pass that forgot it deletes those after it, the next one those before;
  - a `gone:` mark two passes old, once every field of the customer has
    been through a whole pass; a pass that forgot a customer or saw a
    mark still needed starts the next one at once.
A customer that calls again is remembered again: the marks then spare its
counters.
Invariants: idempotent (a repeated sweep finds nothing more to do); an
expired reservation's amount leaves its reserved parts and what on_expiry
charges stays in its committed money counters (key, org, run, model
groups), booked as one `expired` entry; its rate limits' counters keep
what it held, whatever on_expiry says (see `expire` in common.lua);
every key touched is in KEYS.
]]

local limit = int_arg(argv.limit, 'sweep limit')
local retention = int_arg(argv.ledger_buffer_ms, 'ledger buffer')
local customer_ttl = int_arg(argv.customer_ttl_ms, 'customer ttl')
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

-- === The pass over the spend hash ===

-- Passes start at most this often (once the last one ended).
local PASS_EVERY_MS = 60000
-- A rate limit's counter is kept until the minute two minutes after its
-- own (`caps::forget_windows_before`).
local WINDOWS_KEPT_MS = 120000
local COUNTER_KINDS = { key = true, org = true, run = true, model = true, customer = true }

-- `kind, id, counter period, base` of a counter field
-- `<kind>:<id>:<counter period>[:r|:f]` (`base` without the suffix); nil
-- for any other field. Ids may hold `:`, counter periods never do, and
-- none is `r`, `f` or `cap`.
local function counter_parts(field)
  local kind, rest = string.match(field, '^(%l+):(.+)$')
  if not kind or not COUNTER_KINDS[kind] then
    return nil
  end
  local base = field
  local id, period = string.match(rest, '^(.*):([^:]*)$')
  if period == 'r' or period == 'f' then
    base = string.sub(field, 1, #field - 2)
    id, period = string.match(id, '^(.*):([^:]*)$')
  end
  if not id or id == '' or period == 'cap' then
    return nil
  end
  return kind, id, period, base
end

-- HMGET of many fields, in slices (unpack puts every argument on Lua's
-- stack); missing ones are false.
local function read_many(fields)
  local values = {}
  for i = 1, #fields, 500 do
    local slice = redis.call('HMGET', KEYS[1], unpack(fields, i, math.min(i + 499, #fields)))
    for j = 1, #slice do
      values[#values + 1] = slice[j]
    end
  end
  return values
end

-- HDEL of many fields, in slices; returns how many were there.
local function delete_many(fields)
  local deleted = 0
  for i = 1, #fields, 500 do
    deleted = deleted + redis.call('HDEL', KEYS[1], unpack(fields, i, math.min(i + 499, #fields)))
  end
  return deleted
end

-- One page of the pass; returns the customers it forgot, the fields it
-- deleted, and whether the sweep should call again (a pass under way, or
-- the next one due at once). `forget_ok`: no reservation is left due, so
-- a customer whose hold has passed holds none open.
local function pass_step(forget_ok)
  local state = redis.call('HGET', KEYS[1], 'pass')
  local number, cursor, due, again = 0, '-', 0, false
  if state then
    local n, c, d, a = string.match(state, '^(%d+) (%S+) (%d+) ([01])$')
    if n then
      number, cursor, due, again = n + 0, c, d + 0, a == '1'
    end
  elseif redis.call('EXISTS', KEYS[1]) == 0 then
    -- No books: nothing to clear, and no hash made only to say so.
    return 0, 0, false
  end
  if cursor == '-' then
    -- A due further ahead than a pass's wait was written by a clock
    -- since set back.
    if due > now and due <= now + PASS_EVERY_MS then
      return 0, 0, false
    end
    number, cursor, again = number + 1, '0', false
  end
  local page = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', fmt(limit))
  local items = page[2]
  local cutoff = period_id('minute', now - WINDOWS_KEPT_MS)

  local drop = {}
  local bases, base_list = {}, {}
  local members, member_list = {}, {}
  local idle = {}
  for i = 1, #items, 2 do
    local field, value = items[i], items[i + 1]
    local prefix, member = string.match(field, '^(%l+):(.+)$')
    if prefix == 'seen' then
      local last, hold, periods = parse_seen(value)
      if forget_ok and last and last + customer_ttl <= now and hold <= now then
        idle[#idle + 1] = { member = member, periods = periods }
      end
    elseif prefix == 'gone' then
      if (tonumber(value) or 0) + 2 <= number then
        drop[#drop + 1] = field
      else
        again = true
      end
    else
      local kind, id, period, base = counter_parts(field)
      if kind and not bases[base] then
        local minute, meter = string.match(period, '^(.*)/(%l+)$')
        local window = (meter == 'requests' or meter == 'tokens') and minute < cutoff
        if window or kind == 'customer' then
          bases[base] = { kind = kind, id = id, window = window }
          base_list[#base_list + 1] = base
          if kind == 'customer' and not members[id] then
            members[id] = true
            member_list[#member_list + 1] = id
          end
        end
      end
    end
  end

  -- One read: every candidate's reserved part, each customer's registry
  -- entry and mark, each idle customer's last counters' reserved parts.
  local wanted = {}
  for _, base in ipairs(base_list) do
    wanted[#wanted + 1] = base .. ':r'
  end
  for _, id in ipairs(member_list) do
    wanted[#wanted + 1] = seen_field(id)
    wanted[#wanted + 1] = gone_field(id)
  end
  for _, customer in ipairs(idle) do
    for _, period in ipairs(customer.periods) do
      wanted[#wanted + 1] = counter_field('customer', customer.member, period) .. ':r'
    end
  end
  local found = {}
  if #wanted > 0 then
    local values = read_many(wanted)
    for i = 1, #wanted do
      found[wanted[i]] = values[i]
    end
  end
  local function holds(field)
    return (tonumber(found[field] or '0') or 0) > 0
  end

  local forgotten, forgot, marks = {}, {}, {}
  for _, customer in ipairs(idle) do
    local member = customer.member
    local open = false
    for _, period in ipairs(customer.periods) do
      open = open or holds(counter_field('customer', member, period) .. ':r')
    end
    if not open then
      forgotten[member] = true
      forgot[#forgot + 1] = member
      drop[#drop + 1] = seen_field(member)
      for _, period in ipairs(customer.periods) do
        local base = counter_field('customer', member, period)
        drop[#drop + 1] = base
        drop[#drop + 1] = base .. ':r'
        drop[#drop + 1] = base .. ':f'
      end
      marks[#marks + 1] = gone_field(member)
      marks[#marks + 1] = fmt(number)
    end
  end
  for _, base in ipairs(base_list) do
    local info = bases[base]
    if not holds(base .. ':r') then
      local clear = info.window
      if not clear and info.kind == 'customer' then
        local id = info.id
        local remembered = found[seen_field(id)] and not forgotten[id]
        clear = not remembered and (found[gone_field(id)] or forgotten[id]) and true or false
      end
      if clear then
        drop[#drop + 1] = base
        drop[#drop + 1] = base .. ':r'
        drop[#drop + 1] = base .. ':f'
      end
    end
  end

  local cleared = 0
  if #drop > 0 then
    cleared = delete_many(drop)
  end
  if #forgot > 0 then
    for i = 1, #forgot, 500 do
      redis.call('ZREM', KEYS[8], unpack(forgot, i, math.min(i + 499, #forgot)))
    end
    again = true
  end
  local more = true
  if page[1] == '0' then
    -- The pass is over; the next starts at once if marks need it.
    more = again
    marks[#marks + 1] = 'pass'
    marks[#marks + 1] = fmt(number) .. ' - ' .. fmt(again and now or now + PASS_EVERY_MS) .. ' 0'
  else
    marks[#marks + 1] = 'pass'
    marks[#marks + 1] = fmt(number) .. ' ' .. page[1] .. ' 0 ' .. (again and '1' or '0')
  end
  -- In slices of pairs, like the deletes.
  for i = 1, #marks, 1000 do
    redis.call('HSET', KEYS[1], unpack(marks, i, math.min(i + 999, #marks)))
  end
  return #forgot, cleared, more
end

local customers, cleared, passing = 0, 0, false
if limit > 0 then
  -- With reservations still due, one of an idle customer may be open.
  customers, cleared, passing = pass_step(expired < limit)
end

local more = '0'
if expired == limit or forgotten == limit or folded == limit or dropping or passing then
  more = '1'
end
return { fmt(expired), fmt(forgotten), fmt(folded), more, fmt(dropped), fmt(customers),
  fmt(cleared) }

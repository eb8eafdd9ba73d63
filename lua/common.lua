--[[ common.lua — shared by every tollgate script; prepended to each one.

Layout (per hash tag T = the org id, or `key:<key id>` for a key without an
org; every key a script touches shares T, so each script runs in one slot
of a Redis Cluster):
  KEYS[1] tg:{T}:spend    hash   `<kind>:<id>:<counter period>` committed (spent + reserved);
                                 kind key, org, run (id `<key>/<run>`, period `total`)
                                 model (a model group, id `key:<key>/<group>` or
                                 `org:<org>/<group>`) or customer (id `<key>/<customer>`);
                                 the counter period is the period
                                 id for money (µUSD), `<period id>/requests` or
                                 `<period id>/tokens` for a rate limit's counter
                                 (`Meter::counter_period`); period ids hold no `:`
                                 `<kind>:<id>:<counter period>:r` reserved part
                                 `<kind>:<id>:<period id>:f`    folded ledger sum (trimmed
                                                                entries; key and org money only)
                                 `run:<id>:total:cap`           the run's cap, fixed by its first
                                                                call ('none': not capped)
                                 `folds`                        times the ledger was trimmed
                                 `epoch`                        the store epoch these books were
                                                                written under (see meta.lua)
                                 `lazy_at`                      when reserve's lazy sweep of this
                                                                tag is next due (ms)
                                 `seen:<key>/<customer>`        a customer's registry entry (with
                                                                its member of KEYS[8]):
                                                                `<last>|<hold>[|<counter period>]...`,
                                                                its last call (ms), the latest
                                                                deadline of its reservations (ms),
                                                                and the counter periods of its
                                                                caps on that last call
                                 `gone:<key>/<customer>`        a forgotten customer, by the pass
                                                                that forgot it: later passes
                                                                delete its counters while it is
                                                                not seen again (see sweep.lua)
                                 `pass`                         the sweep's pass over this hash
                                                                (see sweep.lua)
  KEYS[2] tg:{T}:res      hash   exec_id -> reservation record (cjson, amounts as strings)
                                 `claim:<claim>` -> the exec_id holding that idempotency claim
                                 `adj:<exec_id>` -> an applied adjustment's record
  KEYS[3] tg:{T}:pending  zset   exec_id by deadline (ms), open reservations only
  KEYS[4] tg:{T}:closed   zset   an expired exec_id by when its record may be forgotten (ms),
                                 and a late-settled one; `run:<key>/<run>` by when that
                                 run is forgotten (its last call + the run TTL)
  KEYS[5] tg:{T}:ledger   stream one entry per settle, expiry or adjustment
  KEYS[6] tg:{T}:agg      hash   `<day>|<key>[/<run>][#<customer>]|<model>|<metric>` spend
                                 aggregates: what the ledger entries of that UTC day, key, run,
                                 customer and model added up to (metrics `n` calls, `in` `cin`
                                 `cw` `out` tokens, `usd` µUSD, signed); `kept_from`, `scan`
                                 the sweep's progress (see sweep.lua)
  KEYS[7] tg:{T}:done     list   `<ms>|<exec_id>` (or `|adj:<exec_id>`): records kept the
                                 closed-record time (settled, denied, adjustments) in the
                                 order they closed, with when each may be forgotten
  KEYS[8] tg:{T}:cust     zset   `<key>/<customer>`, every score 0 (so it reads in id order,
                                 ZRANGEBYLEX): the customers remembered, one member per
                                 `seen:` field of spend; added by the reserve that first sees
                                 one, removed by the sweep that forgets it

One Redis key per reservation would be simpler, but a lazy sweep inside
`reserve` would then touch keys it was not given in KEYS, which a cluster
forbids. A fixed set of keys per tag, all passed in KEYS, keeps every
script cluster-safe.

Record (`res` value), every number a decimal string:
  s   open | expired | settled | denied
  a   amount; k key id; o org id (absent without org); kp, op the period
      ids charged; r the run's scope id `<key>/<run>` (absent without a
      run; its period is `total`), rt how long the run is kept after a
      call (ms); kc the key's cap at reserve time; d deadline (ms);
      ttl (ms) how long a closed record is kept; c the idempotency claim
      the reservation holds while open (absent without one, once closed,
      and once a later reservation took the claim over); m the model the
      call is for (absent when none was given, and in records written
      before this field existed), which its expiry books against;
      x the counter fields of the call's other caps (model groups' money,
      rate limits; absent without any), in the order the request named
      them, each held as its meter says (see `cap_held`): its money
      amount `a`, 1 request, or t tokens; t the token bound a `tokens`
      cap holds (absent without one); cu the customer the call named,
      without its key (absent without one)
  expired: ec what the expiry charged (the amount under on_expiry 'charge',
           0 under 'release'; absent in records expired before this field
           existed, which were all released)
  settled: st status, act actual, rem the key's remaining after the settle,
           by the id of the settle call that applied it
  denied:  dk kind, di id, dm meter (absent: usd, in records denied before
           this field existed), dp period, dc cap, dr remaining (in the
           meter's unit), at time (ms)

Adjustment record (`res` value of `adj:<exec_id>`, a field apart from the
reservations', so no exec id of one is ever read as the other): s
'adjusted', k, o, kp, op as above, ks the key's spent right after it, by the
id of the adjust call that applied it. Kept the closed-record time.

Ledger entry fields: exec key [org] [run] [cust] model in cin cw out res act
st kp [op] [note] at (`run` the run id the client named, without its key;
`cust` the customer the call named, without its key (the record's `cu`), on
a call's every entry: settle, expiry, late; `note` on adjustments only; `at`
always last).
`act` is what the entry moved its counters by: the actual cost of a settle
on time, what an expiry charged, for a `late` settle its actual cost
less what its expiry charged (negative when the call cost less), and an
adjustment's amount (negative for a refund).

Expiry policy (`on_expiry`, an ARGV of every script that can expire):
  'charge'   an expired reservation is charged its amount: the committed
             counter keeps it, the reserved part drops it
  'release'  an expired reservation is charged nothing
Either way a late settle moves each committed counter by actual - ec.
A rate limit's counter (meter requests or tokens, in `x`) keeps what the
call held whatever the policy says (the call was sent): expiry moves it
from the reserved part into spent, and a late settle moves it by what the
call used less what it held. A model group's money moves like the key's.
An expired record is kept `ttl` after its expiry, longer than a settle can
still come (the gateway retries one for two TTLs from before its reserve).
A settled or denied record is kept only the closed-record time (an ARGV
of reserve and settle, `store.closed_record_secs`): as long as a retry of
the call can arrive. These are most records, so they are listed in `done`
rather than in `closed`: a list entry costs about 40 bytes of Redis
memory, a sorted-set member about 130, and every call leaves one for the
retry horizon. One closed-record time for all gateways of a store pushes
entries in time order, and the sweep forgets from the head; an entry
pushed under a longer time (a gateway configured otherwise) only holds
back the ones behind it until its own time. A settled record keeps only
what a retry reads: s, k, o, a, st, act, rem, by, written
`settled|k|o|a|st|act|rem|by` (`o` empty without an org; see
`encode_settled`) rather than as JSON.

Aggregates: every ledger entry adds to its row in the same script (see
`aggregate`): `n` +1, except an adjustment and a late settle (whose call was counted when it
expired), which still writes `n` (+0) so every entry has a row; token counts
from the call (an expiry has none; its model is the record's `m`, '' when the
record has none); `usd` += the entry's `act`. A call that named a customer
books under `<key>[/<run>]#<customer>` (`#` is in no key, run or customer
id); rows without one read as before.

Customers: a reserve granted to a call naming a customer writes its
`seen:` field (in the same HSET as its counters) and, the first time, its
member of KEYS[8] (one ZADD). A settle never touches them. The sweep
forgets a customer whose last call is older than the customer TTL and
whose reservations are all closed (see sweep.lua).

Invariants, per key or org and money period id:
  counter == folded + sum(ledger act) + sum(open amounts)
  counter:r == sum(open amounts)
and for every counter (runs, model groups and rate limits too):
  counter:r == sum(what the open reservations hold of it)
and per tag, while no row has passed the aggregate retention:
  sum(agg usd) == sum(act) of every ledger entry ever booked, folded or not
Every number stays below 2^53 (Lua numbers are doubles): arguments are
checked before a script writes anything, since Redis does not roll back a
script that fails half way.
]]

local MAX_SAFE = 9007199254740991
local HOUR_MS = 3600000
-- Keeps `now + ttl` far below 2^53 (2^50 ms is some 35,000 years).
local MAX_TTL_MS = 1125899906842624

-- A refusal of the script's arguments: an error reply with its own code,
-- `TOLLGATE`, so the caller tells it from a store outage and never
-- retries it (the same call would be refused again).
local function fail(message)
  return error({ err = 'TOLLGATE ' .. message })
end

-- An integer as a decimal string: tostring would print 1e+15; %d is exact
-- below 2^53 and cheaper than %.0f.
local function fmt(value)
  return string.format('%d', value)
end

-- An integer of at most 2^53 - 1, given as a decimal string.
local function int_arg(text, what)
  if type(text) ~= 'string' or not string.match(text, '^%d+$') or #text > 16 then
    fail(what .. ' is not an integer: ' .. tostring(text))
  end
  -- Digits only, so arithmetic reads it as a number, without the cost of
  -- calling tonumber.
  local value = text + 0
  if value > MAX_SAFE then
    fail(what .. ' is 2^53 or more: ' .. text)
  end
  return value
end

-- A signed integer of at most 2^53 - 1 in magnitude.
local function signed_arg(text, what)
  if type(text) == 'string' and string.sub(text, 1, 1) == '-' then
    return -int_arg(string.sub(text, 2), what)
  end
  return int_arg(text, what)
end

-- A token count of at most 2^53 - 1, kept as given: it is stored in the
-- ledger as text and added to the aggregates by HINCRBY, which must never
-- fail half way through a script.
local function count_arg(text, what)
  if type(text) ~= 'string' or not string.match(text, '^%d+$') or #text > 16 then
    fail(what .. ' is not a count: ' .. tostring(text))
  end
  if text + 0 > MAX_SAFE then
    fail(what .. ' is 2^53 or more: ' .. text)
  end
  return text
end

-- The fields of an argument that joins records of `per` fields each with
-- `|` (which no id holds); refused unless they make whole records. An
-- empty field is kept, for the caller to refuse.
local function split_fields(text, per, what)
  local parts = {}
  for part in string.gmatch(text .. '|', '([^|]*)|') do
    parts[#parts + 1] = part
  end
  if #parts % per ~= 0 then
    fail(what .. ' are not ' .. per .. ' fields each: ' .. text)
  end
  return parts
end

local EXPIRY_POLICIES = { charge = true, release = true }

local function on_expiry_arg(text)
  if not EXPIRY_POLICIES[text] then
    fail('on_expiry is not charge or release: ' .. tostring(text))
  end
  return text
end

local PERIODS = { minute = true, hour = true, day = true, week = true, month = true, total = true }

local function period_arg(text, what)
  if not PERIODS[text] then
    fail(what .. ' is not a period: ' .. tostring(text))
  end
  return text
end

-- The answer to a call on books marked with another epoch than the one
-- the gateway serves under (`mark` nil: not marked at all), or nil when
-- they are its own (see meta.lua).
local function epoch_refusal(mark, epoch)
  if mark == epoch then
    return nil
  end
  if not mark then
    return { 'epoch_unknown' }
  end
  return { 'epoch_mismatch', mark }
end

-- The store's clock in ms: Redis's TIME, never the caller's clock.
-- TIME answers decimal strings, which arithmetic reads as numbers.
local function store_now()
  local time = redis.call('TIME')
  local micros = time[2] + 0
  return time[1] * 1000 + (micros - micros % 1000) / 1000
end

-- === Period ids (mirror Period::id_at) ===

-- A local: a period id takes a dozen floors, and looking `math.floor` up
-- each time adds a sixth to its cost.
local floor = math.floor

-- Days since 1970-01-01 to a proleptic Gregorian (year, month, day).
local function civil_from_days(days)
  local z = days + 719468
  local era = floor(z / 146097)
  local doe = z - era * 146097
  local yoe = floor((doe - floor(doe / 1460) + floor(doe / 36524)
    - floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + floor(yoe / 4) - floor(yoe / 100))
  local mp = floor((5 * doy + 2) / 153)
  local day = doy - floor((153 * mp + 2) / 5) + 1
  local month = mp < 10 and mp + 3 or mp - 9
  local year = yoe + era * 400
  if month <= 2 then
    year = year + 1
  end
  return year, month, day
end

local function days_from_civil(year, month, day)
  if month <= 2 then
    year = year - 1
  end
  local era = floor(year / 400)
  local yoe = year - era * 400
  local mp = month > 2 and month - 3 or month + 9
  local doy = floor((153 * mp + 2) / 5) + day - 1
  local doe = yoe * 365 + floor(yoe / 4) - floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

-- `2026-11-29T19`, `2026-11-29`, `2026-W48` (ISO week and ISO year),
-- `2026-11` or `total`.
local function period_id(period, now_ms)
  if period == 'total' then
    return 'total'
  end
  local secs = floor(now_ms / 1000)
  local days = floor(secs / 86400)
  if period == 'week' then
    -- 1970-01-01 was a Thursday; 0 is Monday. A week belongs to the ISO
    -- year of its Thursday.
    local weekday = (days + 3) % 7
    local thursday = days - weekday + 3
    local iso_year = civil_from_days(thursday)
    local week = floor((thursday - days_from_civil(iso_year, 1, 1)) / 7) + 1
    return string.format('%04d-W%02d', iso_year, week)
  end
  local year, month, day = civil_from_days(days)
  if period == 'hour' then
    local hour = floor((secs - days * 86400) / 3600)
    return string.format('%04d-%02d-%02dT%02d', year, month, day, hour)
  elseif period == 'minute' then
    local minutes = floor((secs - days * 86400) / 60)
    return string.format('%04d-%02d-%02dT%02d%02d', year, month, day, floor(minutes / 60), minutes % 60)
  elseif period == 'day' then
    return string.format('%04d-%02d-%02d', year, month, day)
  end
  return string.format('%04d-%02d', year, month)
end

-- === Counters ===

local function counter_field(kind, id, pid)
  return kind .. ':' .. id .. ':' .. pid
end

-- A run's counter: period `total`, id `<key>/<run>`.
local function run_field(run)
  return counter_field('run', run, 'total')
end

-- The committed counters a reservation holds headroom in: the key's, then
-- its org's and its run's when it has them.
local function charged_fields(rec)
  local fields = { counter_field('key', rec.k, rec.kp) }
  if rec.o then
    fields[#fields + 1] = counter_field('org', rec.o, rec.op)
  end
  if rec.r then
    fields[#fields + 1] = run_field(rec.r)
  end
  return fields
end

-- The suffix of each meter's counter period (`Meter::counter_period`):
-- money counts under the period id itself.
local METERS = { usd = '', requests = '/requests', tokens = '/tokens' }

-- The meter of the counter `field` of one of `rec`'s other caps (`x`),
-- read off its counter period (period ids hold no `/`, and the period
-- follows the field's last `:`), and what the reservation holds in it.
local function cap_held(rec, field)
  local meter = string.match(field, '/(%l+)$')
  if not meter then
    return 'usd', tonumber(rec.a)
  elseif meter == 'requests' then
    return meter, 1
  elseif meter == 'tokens' then
    return meter, tonumber(rec.t or '0')
  end
  fail('unknown meter in counter ' .. field)
end

local function counter(field)
  return tonumber(redis.call('HGET', KEYS[1], field) or '0')
end

local function add(field, delta)
  if delta ~= 0 then
    redis.call('HINCRBY', KEYS[1], field, fmt(delta))
  end
end

-- Reserve and settle read the counters they change with one HMGET and
-- write them with one HSET, where a HGET and a HINCRBY per field would
-- cost a redis.call each. `fields` alternates a committed counter and its
-- reserved part (`held_fields`). Values stay below 2^53, where doubles are
-- exact.

-- The committed counters a reservation holds headroom in and their
-- reserved parts, in the order of `committed` (the key's first).
local function held_fields(committed)
  if #committed == 1 then
    return { committed[1], committed[1] .. ':r' }
  elseif #committed == 2 then
    return { committed[1], committed[1] .. ':r', committed[2], committed[2] .. ':r' }
  end
  local fields = {}
  for i = 1, #committed do
    fields[2 * i - 1] = committed[i]
    fields[2 * i] = committed[i] .. ':r'
  end
  return fields
end

-- The values of `fields`, 0 where absent.
local function read_counters(fields)
  local values = redis.call('HMGET', KEYS[1], unpack(fields))
  for i = 1, #fields do
    values[i] = (values[i] or 0) + 0
  end
  return values
end

-- A committed counter `value` moved by `by`, never below its reserved
-- part once that has moved (`reserved_after`): spent never goes below
-- zero, as `books::moved` keeps it in the other stores. Only a late settle
-- of a run forgotten since its expiry would take it there.
local function committed_after(value, by, reserved_after)
  return fmt(math.max(value + by, reserved_after))
end

-- Moves each field of `fields` by its own `moves[i]` (a committed
-- counter's, then its reserved part's): a call with other caps (`x`)
-- moves each by what its meter holds. A counter listed twice moves by
-- both its moves, in one pair; a move of 0 writes nothing. `extra`, if
-- given, holds more field-value pairs of KEYS[1] to write in the same
-- command.
local function write_moves(fields, values, moves, extra)
  local first, merged = {}, {}
  for i = 1, #fields, 2 do
    local at = first[fields[i]]
    if at then
      merged[at] = merged[at] + moves[i]
      merged[at + 1] = merged[at + 1] + moves[i + 1]
    else
      first[fields[i]] = i
      merged[i] = moves[i]
      merged[i + 1] = moves[i + 1]
    end
  end
  local args = {}
  for i = 1, #fields, 2 do
    if first[fields[i]] == i then
      local by, held = merged[i], merged[i + 1]
      if by ~= 0 then
        args[#args + 1] = fields[i]
        args[#args + 1] = committed_after(values[i], by, values[i + 1] + held)
      end
      if held ~= 0 then
        args[#args + 1] = fields[i + 1]
        args[#args + 1] = fmt(values[i + 1] + held)
      end
    end
  end
  if extra then
    for i = 1, #extra do
      args[#args + 1] = extra[i]
    end
  end
  if #args > 0 then
    redis.call('HSET', KEYS[1], unpack(args))
  end
end

-- Moves each committed counter in `fields` by `committed` and each
-- reserved part by `reserved`; like `add`, a move of 0 writes nothing.
-- `extra`, if given, holds more field-value pairs of KEYS[1] to write in
-- the same command.
local function write_counters(fields, values, committed, reserved, extra)
  -- The common case, every field moving, spells its HSET out: a list
  -- built field by field costs more than the command.
  if committed ~= 0 and reserved ~= 0 and #fields <= 4 and not (extra and extra[1]) then
    local r1 = values[2] + reserved
    if fields[3] then
      local r2 = values[4] + reserved
      redis.call('HSET', KEYS[1],
        fields[1], committed_after(values[1], committed, r1), fields[2], fmt(r1),
        fields[3], committed_after(values[3], committed, r2), fields[4], fmt(r2))
    else
      redis.call('HSET', KEYS[1],
        fields[1], committed_after(values[1], committed, r1), fields[2], fmt(r1))
    end
    return
  end
  local moves = {}
  for i = 1, #fields, 2 do
    moves[i] = committed
    moves[i + 1] = reserved
  end
  write_moves(fields, values, moves, extra)
end

-- The lazy sweep inside `reserve` runs at most this often per tag (see
-- reserve.lua), and forgets up to this many times its limit of records.
local LAZY_EVERY_MS = 1000
local FORGET_PER_SWEEP = 64

-- Notes when the lazy sweep is next due, when `swept`, for a reserve that
-- writes no counter.
local function mark_swept(swept, now)
  if swept then
    redis.call('HSET', KEYS[1], 'lazy_at', fmt(now + LAZY_EVERY_MS))
  end
end

-- === Customers ===

-- A customer id as the gateway takes it: 1 to 128 of [A-Za-z0-9._:@-]
-- (so no `|`, `#` or `/`, which the layout's separators need), or '' for
-- none.
local function customer_arg(text)
  if text == '' then
    return text
  end
  if type(text) ~= 'string' or #text > 128 or not string.match(text, '^[%w%._:@%-]+$') then
    fail('customer is not 1 to 128 of [A-Za-z0-9._:@-]: ' .. tostring(text))
  end
  return text
end

-- A customer's registry entry (`seen:` field of KEYS[1]) and its mark
-- once forgotten (`gone:`); `member` is `<key>/<customer>`, its scope id
-- and its member of KEYS[8].
local function seen_field(member)
  return 'seen:' .. member
end

local function gone_field(member)
  return 'gone:' .. member
end

-- A `seen:` value: last call (ms), hold (ms), the counter periods of the
-- customer's caps on that call; nil when it does not read.
local function parse_seen(raw)
  local last, hold, rest = string.match(raw, '^(%d+)|(%d+)(.*)$')
  if not last then
    return nil
  end
  local periods = {}
  for period in string.gmatch(rest, '[^|]+') do
    periods[#periods + 1] = period
  end
  return last + 0, hold + 0, periods
end

-- Like `parse_seen`, refusing a value that does not read.
local function decode_seen(raw)
  local last, hold, periods = parse_seen(raw)
  if not last then
    fail('unreadable customer entry: ' .. raw)
  end
  return last, hold, periods
end

-- === Records and the ledger ===

-- A settled record as a retry reads it (see the layout): its fields joined
-- by `|`, which no id, status or number holds, rather than JSON: some 60
-- bytes less for each of the records a retry horizon holds.
local function encode_settled(rec)
  return table.concat({ 'settled', rec.k, rec.o or '', rec.a, rec.st, rec.act, rec.rem, rec.by },
    '|')
end

local SETTLED = '^settled|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$'

local function decode_record(raw)
  if not raw then
    return nil
  end
  if string.sub(raw, 1, 1) == '{' then
    return cjson.decode(raw)
  end
  local k, o, a, st, act, rem, by = string.match(raw, SETTLED)
  if not k then
    fail('unreadable reservation record: ' .. raw)
  end
  if o == '' then
    o = nil
  end
  return { s = 'settled', k = k, o = o, a = a, st = st, act = act, rem = rem, by = by }
end

local function load_record(exec_id)
  return decode_record(redis.call('HGET', KEYS[2], exec_id))
end

-- The `res` field naming the exec id that holds an idempotency claim; the
-- prefix keeps it apart from exec ids (UUIDs).
local function claim_field(claim)
  return 'claim:' .. claim
end

-- Releases the idempotency claim a reservation holds as it closes.
local function release_claim(exec_id, rec, now)
  if rec.c then
    local field = claim_field(rec.c)
    if tonumber(rec.d) > now or redis.call('HGET', KEYS[2], field) == exec_id then
      redis.call('HDEL', KEYS[2], field)
    end
    rec.c = nil
  end
end

-- Stores a closed record and keeps it `keep_ms` from now, so retries still
-- get the first answer; the sweep forgets it after that. The claim the
-- reservation holds is released. A later reservation takes a claim over
-- only past this one's deadline, and drops `c` from this record when it
-- does; past the deadline the holder is read as well, so a record whose
-- `c` outlived a takeover (one stored by older scripts) never releases
-- another reservation's claim.
-- `stored` is what to keep of it (encoded), when not the whole record.
local function close(exec_id, rec, now, keep_ms, stored)
  release_claim(exec_id, rec, now)
  redis.call('HSET', KEYS[2], exec_id, stored or cjson.encode(rec))
  redis.call('ZADD', KEYS[4], fmt(now + keep_ms), exec_id)
end

-- Stores a closed record kept the closed-record time `keep_ms`, listed in
-- `done` (see the layout) rather than in `closed`. The record must not be
-- in `closed` already: one expired before it settles stays there (`close`).
local function close_for_retries(exec_id, rec, now, keep_ms, stored)
  release_claim(exec_id, rec, now)
  redis.call('HSET', KEYS[2], exec_id, stored or cjson.encode(rec))
  redis.call('RPUSH', KEYS[7], fmt(now + keep_ms) .. '|' .. exec_id)
end

-- === Spend aggregates ===

-- Adds one ledger entry to its day's row (see the layout above and
-- src/budget/redis/aggregates.rs): a HINCRBY per metric that moves, so a
-- settle costs three to six small increments, and no read.
local function aggregate(rec, status, call, moved, now)
  local model = rec.m or ''
  if call then
    model = call.model
  end
  -- A run's row names it after its key (`<key>/<run>`, the run's scope id),
  -- and a customer's follows, after `#`.
  local scope = rec.r or rec.k
  if rec.cu then
    scope = scope .. '#' .. rec.cu
  end
  local row = period_id('day', now) .. '|' .. scope .. '|' .. model .. '|'
  local calls = '1'
  if status == 'late' or status == 'adjustment' then
    calls = '0'
  end
  redis.call('HINCRBY', KEYS[6], row .. 'n', calls)
  if call then
    if call.input ~= '0' then
      redis.call('HINCRBY', KEYS[6], row .. 'in', call.input)
    end
    if call.cached ~= '0' then
      redis.call('HINCRBY', KEYS[6], row .. 'cin', call.cached)
    end
    if call.written ~= '0' then
      redis.call('HINCRBY', KEYS[6], row .. 'cw', call.written)
    end
    if call.output ~= '0' then
      redis.call('HINCRBY', KEYS[6], row .. 'out', call.output)
    end
  end
  if moved ~= 0 then
    redis.call('HINCRBY', KEYS[6], row .. 'usd', fmt(moved))
  end
end

-- === The ledger ===

-- `call` holds model and usage counts (strings); nil for an expiry, which
-- books against the model its record kept (`m`), if any.
-- `moved` is the entry's `act`: what it moved the counters by (signed).
-- Every entry also goes to its day's aggregate row (`aggregate`).
-- The fields are spelled out once per shape (with and without an org):
-- building the entry as a list first cost more than the XADD itself.
local function book(exec_id, rec, status, call, moved, now)
  local model, input, cached, written, output = rec.m or '', '0', '0', '0', '0'
  local actual = fmt(moved)
  if call then
    model, input, cached, written, output = call.model, call.input, call.cached, call.written, call.output
  end
  if rec.r or rec.cu then
    -- A run's entry names the run as the client did, without its key; a
    -- customer's, the customer.
    local entry = { 'exec', exec_id, 'key', rec.k }
    if rec.o then
      entry[#entry + 1] = 'org'
      entry[#entry + 1] = rec.o
    end
    if rec.r then
      entry[#entry + 1] = 'run'
      entry[#entry + 1] = string.sub(rec.r, #rec.k + 2)
    end
    if rec.cu then
      entry[#entry + 1] = 'cust'
      entry[#entry + 1] = rec.cu
    end
    local rest = { 'model', model, 'in', input, 'cin', cached, 'cw', written,
      'out', output, 'res', rec.a, 'act', actual, 'st', status, 'kp', rec.kp }
    for i = 1, #rest do
      entry[#entry + 1] = rest[i]
    end
    if rec.o then
      entry[#entry + 1] = 'op'
      entry[#entry + 1] = rec.op
    end
    entry[#entry + 1] = 'at'
    entry[#entry + 1] = fmt(now)
    redis.call('XADD', KEYS[5], '*', unpack(entry))
  elseif rec.o then
    redis.call('XADD', KEYS[5], '*', 'exec', exec_id, 'key', rec.k, 'org', rec.o,
      'model', model, 'in', input, 'cin', cached, 'cw', written, 'out', output,
      'res', rec.a, 'act', actual, 'st', status, 'kp', rec.kp, 'op', rec.op, 'at', fmt(now))
  else
    redis.call('XADD', KEYS[5], '*', 'exec', exec_id, 'key', rec.k,
      'model', model, 'in', input, 'cin', cached, 'cw', written, 'out', output,
      'res', rec.a, 'act', actual, 'st', status, 'kp', rec.kp, 'at', fmt(now))
  end
  aggregate(rec, status, call, moved, now)
end

-- What expiring `rec` charges under the policy.
local function expiry_charge(rec, on_expiry)
  if on_expiry == 'charge' then
    return tonumber(rec.a)
  end
  return 0
end

-- Closes an open reservation as expired: its amount leaves the reserved
-- part, and the committed counter keeps what the policy charges; booked
-- as an `expired` entry of that charge. Its other caps' counters (`x`)
-- move alike for a model group's money; a rate limit's keeps what the
-- call held, whatever the policy (the call was sent), only its reserved
-- part letting go.
local function expire(exec_id, rec, now, on_expiry)
  local amount = tonumber(rec.a)
  local charged = expiry_charge(rec, on_expiry)
  for _, field in ipairs(charged_fields(rec)) do
    add(field, charged - amount)
    add(field .. ':r', -amount)
  end
  if rec.x then
    for _, field in ipairs(rec.x) do
      local meter, held = cap_held(rec, field)
      if meter == 'usd' then
        add(field, charged - amount)
      end
      add(field .. ':r', -held)
    end
  end
  redis.call('ZREM', KEYS[3], exec_id)
  book(exec_id, rec, 'expired', nil, charged, now)
  rec.s = 'expired'
  rec.ec = fmt(charged)
  close(exec_id, rec, now, tonumber(rec.ttl))
end

-- Expires up to `limit` open reservations whose deadline has come, oldest
-- first, charging them as `on_expiry` says; returns how many.
local function expire_due(now, limit, on_expiry)
  local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', fmt(now), 'LIMIT', '0', fmt(limit))
  local expired = 0
  for _, exec_id in ipairs(due) do
    local rec = load_record(exec_id)
    if rec and rec.s == 'open' then
      expire(exec_id, rec, now, on_expiry)
      expired = expired + 1
    else
      redis.call('ZREM', KEYS[3], exec_id)
    end
  end
  return expired
end

-- The `closed` member that says when a run is forgotten.
local function run_member(run)
  return 'run:' .. run
end

-- Keeps a run `rec.rt` ms from now: each call moves its forgetting on.
local function touch_run(rec, now)
  if rec.r then
    redis.call('ZADD', KEYS[4], fmt(now + tonumber(rec.rt)), run_member(rec.r))
  end
end

-- Forgets a run past its time: its counter, reserved and folded parts and
-- its cap, unless a reservation still holds part of it (then it is looked
-- at again an hour later).
local function forget_run(member, run, now)
  local field = run_field(run)
  if tonumber(redis.call('HGET', KEYS[1], field .. ':r') or '0') > 0 then
    redis.call('ZADD', KEYS[4], fmt(now + HOUR_MS), member)
    return
  end
  redis.call('HDEL', KEYS[1], field, field .. ':r', field .. ':f', field .. ':cap')
  redis.call('ZREM', KEYS[4], member)
end

-- Forgets up to `limit` records from the head of `done` whose time has
-- come, stopping at the first whose time has not; returns how many.
local function forget_done(now, limit)
  local head = redis.call('LRANGE', KEYS[7], '0', fmt(limit - 1))
  local members = {}
  for _, entry in ipairs(head) do
    local due, member = string.match(entry, '^(%d+)|(.+)$')
    if not due or tonumber(due) > now then
      break
    end
    members[#members + 1] = member
  end
  if #members > 0 then
    redis.call('HDEL', KEYS[2], unpack(members))
    redis.call('LTRIM', KEYS[7], fmt(#members), '-1')
  end
  return #members
end

-- Forgets up to `limit` closed records (and runs) whose retention has
-- passed, from `done` and from `closed`.
local function forget_due(now, limit)
  local forgotten = forget_done(now, limit)
  if forgotten >= limit then
    return forgotten
  end
  local due = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', fmt(now), 'LIMIT', '0',
    fmt(limit - forgotten))
  if #due == 0 then
    return forgotten
  end
  local records = {}
  for _, member in ipairs(due) do
    local run = string.match(member, '^run:(.*)$')
    if run then
      forget_run(member, run, now)
    else
      records[#records + 1] = member
    end
  end
  if #records > 0 then
    redis.call('HDEL', KEYS[2], unpack(records))
    redis.call('ZREM', KEYS[4], unpack(records))
  end
  return forgotten + #due
end

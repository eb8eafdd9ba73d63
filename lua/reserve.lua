--[[ reserve.lua — hold the most of [min amount, amount] that fits against a
key, its org, its run and its other caps (model groups, rate limits), all
or nothing.

KEYS: the eight keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done, cust.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      a key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV, read by name as `argv.<name>`: the names and their order are
`ReserveArgs` in src/budget/redis/scripts.rs, which binds them in front of
this body (a test holds this list to it).
  exec_id
  amount: the most the call may hold (µUSD)
  ttl_ms: how long the reservation holds its headroom if never settled,
    and how long its record is kept once closed
  key_id
  key_period
  key_cap (µUSD)
  has_org: '1' when the key has an org, else '0'
  org_id
  org_period
  org_cap (µUSD): the org's three are ignored without org
  lazy_limit: due reservations expired before this reserve, at most (and
    FORGET_PER_SWEEP times as many records in `done` forgotten); the
    lazy sweep runs at most once a LAZY_EVERY_MS per tag (`lazy_at`)
  claim: the idempotency claim (64 hex digits), or '' for none: the
    request is a duplicate while an open reservation under another exec
    id holds it
  on_expiry: 'charge' | 'release', what the lazy sweep charges each
    reservation it expires (see common.lua)
  epoch: the store epoch the gateway serves under (tg:meta's, see meta.lua)
  closed_record_ms: how long a denial is remembered for retries
  model: the model the call is for, kept in the open record (`m`, see
    common.lua) so its expiry books against it; '' for none
  min_amount (µUSD), at most `amount`: the least the call can be sent with
  run: the run scope id `<key id>/<run id>`, or '' for none
  run_cap: the run cap the call names (µUSD), or '' for none
  run_ttl_ms: how long the run is kept after its last call
  caps: the call's other caps, in the request's order (`Cap`s), or '' for
    none: five fields each, `kind|id|meter|period|limit`, every field of
    every cap joined by `|` (which no id holds), e.g.
    `model|key:alice/opus|usd|day|5000000|key|alice|requests|minute|60`;
    meter usd | requests | tokens, the limit in the meter's unit
  tokens: the call's token bound, what a `tokens` cap holds
  customer: the customer the call names, without its key (1 to 128 of
    [A-Za-z0-9._:@-]), or '' for none: kept in the record (`cu`), so
    every ledger entry of the call names it, and, once granted,
    remembered as one of the key's customers (see below)
Returns:
  {'reserved', expired, amount, [kind, meter, period id, committed]...}
                                    amount: what is held, the largest in
                                    [min amount, amount] that every money
                                    counter has room for (a retry: the
                                    first one, and no counters); then each
                                    counter charged (key, org, run, then
                                    the caps in order) with its committed
                                    counter after the reserve, in its
                                    meter's unit
  {'denied', expired, kind, id, meter, period, cap, remaining, at_ms}
  {'duplicate', expired}
  {'run_cap_conflict', expired, cap}  the run's first call fixed another
                                      cap ('none': none); nothing changed
                                      but the lazy sweep
  {'epoch_unknown'}         the tag's books carry no epoch mark: a new tag,
                            or books that vanished (Redis restarted empty)
  {'epoch_mismatch', mark}  they are marked with another epoch
  where `expired` counts the reservations the lazy sweep expired, and a
  denial names the first money counter (meter usd: key, org, run, then
  the caps in order) without room for the min amount, or, when every one
  has room, the first rate limit without room for what the call holds of
  it (requests: 1; tokens: the token bound); cap and remaining are in its
  meter's unit.
Each counter, once granted, grows in its committed counter and its
reserved part by what the call holds of its meter: the amount granted for
money, 1 for requests, the token bound for tokens (`Meter::held`); the
record keeps the caps' counter fields (`x`) and the bound (`t`), so settle
and expiry move them (see common.lua).
A granted call naming a customer remembers it under the key: its `seen:`
field (last call: the store's clock, never moved back; hold: the latest
deadline of its reservations; the counter periods of its customer caps)
in the same HSET as the counters, and, when it had none, its member of
`cust` (one ZADD); a denial, a duplicate or a retry touches neither.
Invariants: the epoch mark is checked before anything is written, and an epoch
answer changes nothing (not even the lazy sweep): the gateway reads
tg:meta, marks the tag (mark_epoch.lua) only if the store still holds the
epoch it saw, and asks again; so no reserve is charged against books that
vanished. Idempotent on exec_id (a retry returns the first answer, also
after that reservation was settled or expired, until its record is
forgotten), and an exec id with a record is never a duplicate, so the
gateway's own retry of a claimed reserve gets its first answer; a
reservation the lazy sweep expires is charged what on_expiry says, with an
`expired` ledger entry of that charge (added to its day's spend aggregate
row, see common.lua); a denial or a duplicate charges
nothing; a duplicate is not remembered (a retry of
it asks again); a denial takes no claim; a reservation holds its claim
until it closes; every key touched is in KEYS.
]]

if not argv.epoch or argv.epoch == '' then
  fail('no store epoch')
end

local exec_id = argv.exec_id
local amount = int_arg(argv.amount, 'amount')
local ttl = int_arg(argv.ttl_ms, 'ttl')
if ttl > MAX_TTL_MS then
  fail('ttl is above 2^50 ms: ' .. argv.ttl_ms)
end
local scopes = {
  { kind = 'key', id = argv.key_id, period = period_arg(argv.key_period, 'key period'),
    cap = int_arg(argv.key_cap, 'key cap') },
}
if argv.has_org == '1' then
  scopes[2] = { kind = 'org', id = argv.org_id, period = period_arg(argv.org_period, 'org period'),
    cap = int_arg(argv.org_cap, 'org cap') }
end
local lazy_limit = int_arg(argv.lazy_limit, 'lazy sweep limit')
local claim = argv.claim
if claim ~= '' and not string.match(claim, '^%x+$') then
  fail('claim is not hex: ' .. tostring(claim))
end
local on_expiry = on_expiry_arg(argv.on_expiry)
local keep_ms = int_arg(argv.closed_record_ms, 'closed-record time')
if keep_ms > MAX_TTL_MS then
  fail('closed-record time is above 2^50 ms: ' .. argv.closed_record_ms)
end
local model = argv.model
local min_amount = int_arg(argv.min_amount, 'min amount')
if min_amount > amount then
  fail('min amount ' .. argv.min_amount .. ' is above the amount ' .. argv.amount)
end
local customer = customer_arg(argv.customer)
local run = argv.run
local run_cap, run_ttl = argv.run_cap, 0
if run ~= '' then
  if run_cap ~= '' then
    int_arg(run_cap, 'run cap')
  end
  run_ttl = int_arg(argv.run_ttl_ms, 'run ttl')
  if run_ttl > MAX_TTL_MS then
    fail('run ttl is above 2^50 ms: ' .. argv.run_ttl_ms)
  end
end

-- The other caps: five `|`-separated fields each (an empty one is kept,
-- and refused).
local caps = {}
local tokens = int_arg(argv.tokens, 'token bound')
local holds_tokens = false
if argv.caps ~= '' then
  local parts = split_fields(argv.caps, 5, 'caps')
  for i = 1, #parts, 5 do
    local kind, id, meter = parts[i], parts[i + 1], parts[i + 2]
    if not string.match(kind, '^%l+$') then
      fail('cap kind is not a word: ' .. kind)
    end
    if id == '' then
      fail('cap of ' .. kind .. ' has no id')
    end
    if not METERS[meter] then
      fail('cap meter is not usd, requests or tokens: ' .. meter)
    end
    holds_tokens = holds_tokens or meter == 'tokens'
    caps[#caps + 1] = { kind = kind, id = id, meter = meter,
      period = period_arg(parts[i + 3], 'cap period'), cap = int_arg(parts[i + 4], 'cap limit') }
  end
end

local now = store_now()

-- The scopes charged, key first; a run's joins once its cap is known,
-- then the other caps.
for i = 1, #scopes do
  local scope = scopes[i]
  scope.meter = 'usd'
  -- An org on the key's period shares its id, which is not cheap to derive.
  if i > 1 and scope.period == scopes[1].period then
    scope.pid = scopes[1].pid
  else
    scope.pid = period_id(scope.period, now)
  end
  scope.field = counter_field(scope.kind, scope.id, scope.pid)
end
if #caps > 0 then
  local pids = {}
  for i = 1, #scopes do
    pids[scopes[i].period] = scopes[i].pid
  end
  for i = 1, #caps do
    local cap = caps[i]
    local pid = pids[cap.period]
    if not pid then
      pid = period_id(cap.period, now)
      pids[cap.period] = pid
    end
    cap.pid = pid
    cap.field = counter_field(cap.kind, cap.id, pid .. METERS[cap.meter])
  end
end
local run_counter = run ~= '' and run_field(run) or nil

-- One read of the tag's books: the epoch mark, when the lazy sweep is
-- next due, the run's cap, then every counter this reserve may charge,
-- in the order of `scopes` once the run and the caps have joined it.
local fields = { 'epoch', 'lazy_at', run_counter and run_counter .. ':cap' or 'epoch' }
for i = 1, #scopes do
  fields[#fields + 1] = scopes[i].field
  fields[#fields + 1] = scopes[i].field .. ':r'
end
if run_counter then
  fields[#fields + 1] = run_counter
  fields[#fields + 1] = run_counter .. ':r'
end
for i = 1, #caps do
  fields[#fields + 1] = caps[i].field
  fields[#fields + 1] = caps[i].field .. ':r'
end
-- The customer's registry entry comes last.
local member = customer ~= '' and scopes[1].id .. '/' .. customer or nil
if member then
  fields[#fields + 1] = seen_field(member)
end
local read = redis.call('HMGET', KEYS[1], unpack(fields))
local refusal = epoch_refusal(read[1], argv.epoch)
if refusal then
  return refusal
end
-- Read before anything is written: an unreadable entry refuses the call.
local seen_before = member and read[#fields] or nil
local seen_last, seen_hold = 0, 0
if seen_before then
  seen_last, seen_hold = decode_seen(seen_before)
end

-- The lazy sweep runs at most once a LAZY_EVERY_MS per tag: expiring a
-- hold a moment late only keeps its headroom held a moment longer, and
-- forgetting a record late only keeps it a moment longer.
local expired = 0
local swept = false
-- A mark further ahead than that was written by a clock since set back.
local lazy_at = tonumber(read[2] or '0')
if lazy_at <= now or lazy_at > now + LAZY_EVERY_MS then
  expired = expire_due(now, lazy_limit, on_expiry)
  forget_done(now, lazy_limit * FORGET_PER_SWEEP)
  swept = true
  if expired > 0 then
    -- Expiry moved counters this reserve may charge: read them again.
    read = redis.call('HMGET', KEYS[1], unpack(fields))
  end
end

-- The record and the claim's holder in one read.
local first, holder
if claim ~= '' then
  local raw = redis.call('HMGET', KEYS[2], exec_id, claim_field(claim))
  first, holder = decode_record(raw[1]), raw[2]
else
  first = load_record(exec_id)
end
if first then
  mark_swept(swept, now)
  if first.s == 'denied' then
    return { 'denied', fmt(expired), first.dk, first.di, first.dm or 'usd', first.dp, first.dc,
      first.dr, first.at }
  end
  return { 'reserved', fmt(expired), first.a }
end

local held = holder and load_record(holder)
if held and held.s == 'open' and tonumber(held.d) > now then
  mark_swept(swept, now)
  return { 'duplicate', fmt(expired) }
end

-- The run's first call fixes its cap (or that it has none); a call naming
-- another one is refused.
local new_run_cap = nil
if run_counter then
  local fixed = read[3] or nil
  if fixed and run_cap ~= '' and run_cap ~= fixed then
    mark_swept(swept, now)
    return { 'run_cap_conflict', fmt(expired), fixed }
  end
  if not fixed then
    fixed = run_cap ~= '' and run_cap or 'none'
    new_run_cap = fixed
  end
  local cap = MAX_SAFE
  if fixed ~= 'none' then
    cap = tonumber(fixed)
  end
  scopes[#scopes + 1] = { kind = 'run', id = run, meter = 'usd', period = 'total', cap = cap,
    pid = 'total', field = run_counter }
end
for i = 1, #caps do
  scopes[#scopes + 1] = caps[i]
end

-- Each scope's committed counter and its reserved part, as read above.
fields = {}
local values = {}
for i = 1, #scopes do
  fields[2 * i - 1] = scopes[i].field
  fields[2 * i] = scopes[i].field .. ':r'
  values[2 * i - 1] = (read[2 * i + 2] or 0) + 0
  values[2 * i] = (read[2 * i + 3] or 0) + 0
end

-- The most every money counter has room for, up to the amount.
local grant = amount
for i = 1, #scopes do
  if scopes[i].meter == 'usd' then
    local room = scopes[i].cap - values[2 * i - 1]
    if room < grant then
      grant = room
    end
  end
end

-- What the call holds of each scope's meter once granted.
local function holds(scope)
  if scope.meter == 'usd' then
    return grant
  elseif scope.meter == 'requests' then
    return 1
  end
  return tokens
end

-- Refuses the call, naming `scope`, with `committed` already held in it.
local function deny(scope, committed)
  local remaining = math.max(scope.cap - committed, 0)
  local denial = {
    s = 'denied', dk = scope.kind, di = scope.id, dp = scope.period,
    dc = fmt(scope.cap), dr = fmt(remaining), at = fmt(now),
    dm = scope.meter ~= 'usd' and scope.meter or nil,
  }
  close_for_retries(exec_id, denial, now, keep_ms)
  mark_swept(swept, now)
  return { 'denied', fmt(expired), denial.dk, denial.di, scope.meter, denial.dp, denial.dc,
    denial.dr, denial.at }
end

-- Not even the min amount fits: the key is checked first, so when several
-- would deny, the key is named, then the org, the run, the caps.
if grant < min_amount then
  for i = 1, #scopes do
    local scope = scopes[i]
    local committed = values[2 * i - 1]
    if scope.meter == 'usd' and committed + min_amount > scope.cap then
      return deny(scope, committed)
    end
  end
end
-- Money has room: a rate limit without room for what the call holds of
-- it refuses it (money first, so a call no wait lets through is never
-- told to wait).
if #caps > 0 then
  for i = 1, #scopes do
    local scope = scopes[i]
    local committed = values[2 * i - 1]
    if scope.meter ~= 'usd' and committed + holds(scope) > scope.cap then
      return deny(scope, committed)
    end
  end
end

-- Below the cap, so below 2^53.
local org = argv.has_org == '1' and scopes[2] or nil
local rec = {
  s = 'open', a = fmt(grant), k = scopes[1].id, kp = scopes[1].pid,
  kc = fmt(scopes[1].cap), d = fmt(now + ttl), ttl = fmt(ttl),
  o = org and org.id, op = org and org.pid,
  c = claim ~= '' and claim or nil, m = model ~= '' and model or nil,
  r = run ~= '' and run or nil, rt = run ~= '' and fmt(run_ttl) or nil,
  t = holds_tokens and fmt(tokens) or nil,
  cu = member and customer or nil,
}
if #caps > 0 then
  local x = {}
  for i = 1, #caps do
    x[i] = caps[i].field
  end
  rec.x = x
end
-- The run's cap, fixed now, and when the lazy sweep is next due go in
-- the same write as the counters.
local extra = {}
if new_run_cap then
  extra[#extra + 1] = run_counter .. ':cap'
  extra[#extra + 1] = new_run_cap
end
if swept then
  extra[#extra + 1] = 'lazy_at'
  extra[#extra + 1] = fmt(now + LAZY_EVERY_MS)
end
-- The customer's registry entry: its last call, the latest deadline of
-- its reservations (it is not forgotten before), and the counter periods
-- of its caps on this call (forgotten with it at once; see sweep.lua).
if member then
  local entry = { fmt(math.max(now, seen_last)), fmt(math.max(now + ttl, seen_hold)) }
  local listed = {}
  for i = 1, #caps do
    local cap = caps[i]
    if cap.kind == 'customer' and cap.id == member then
      local period = cap.pid .. METERS[cap.meter]
      if not listed[period] then
        listed[period] = true
        entry[#entry + 1] = period
      end
    end
  end
  extra[#extra + 1] = seen_field(member)
  extra[#extra + 1] = table.concat(entry, '|')
  if not seen_before then
    redis.call('ZADD', KEYS[8], '0', member)
  end
end
if #caps == 0 then
  write_counters(fields, values, grant, grant, extra)
else
  local moves = {}
  for i = 1, #scopes do
    local by = holds(scopes[i])
    moves[2 * i - 1] = by
    moves[2 * i] = by
  end
  write_moves(fields, values, moves, extra)
end
touch_run(rec, now)
local records = { exec_id, cjson.encode(rec) }
if claim ~= '' then
  records[3] = claim_field(claim)
  records[4] = exec_id
  -- A holder past its deadline loses the claim to this reservation.
  if held and held.c then
    held.c = nil
    records[5] = holder
    records[6] = cjson.encode(held)
  end
end
redis.call('HSET', KEYS[2], unpack(records))
redis.call('ZADD', KEYS[3], rec.d, exec_id)
local reply = { 'reserved', fmt(expired), rec.a }
for i = 1, #scopes do
  reply[#reply + 1] = scopes[i].kind
  reply[#reply + 1] = scopes[i].meter
  reply[#reply + 1] = scopes[i].pid
  reply[#reply + 1] = fmt(values[2 * i - 1] + holds(scopes[i]))
end
return reply

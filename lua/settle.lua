--[[ settle.lua — charge a reserved call's actual cost, exactly once.

KEYS: the eight keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done, cust.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      a key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV, read by name as `argv.<name>`: the names and their order are
`SettleArgs` in src/budget/redis/scripts.rs, which binds them in front of
this body (a test holds this list to it).
  exec_id
  key_id
  has_org: '1' when the settlement names an org, else '0'
  org_id
  model
  input
  cached_input
  cache_write
  output: the four token counts
  actual (µUSD)
  estimated: '1' when the usage was counted by the gateway, else '0'
  epsilon (µUSD): how far above its reservation a call may land before it
    counts as an overrun
  call_id: unique per settle call, the same across its retries, so a
    retry of an attempt that timed out after it applied still reports
    `applied` = '1'
  on_expiry: 'charge' | 'release', what expiring the reservation charges
    when this settle finds it past its deadline (see common.lua)
  closed_record_ms: how long the settled record is kept for retries of
    this settle
Returns:
  {'absent'}    no record of exec_id under this tag
  {'denied'}    exec_id was denied: there is nothing to settle
  {'mismatch'}  the record belongs to another key or org
  {'out_of_range', field}  the settle would take that counter to 2^53 or
                more; nothing was written (an answer, not an error: the
                same every time, so the caller must not retry it)
  {'settled', status, reserved, actual, key_remaining, applied, expired_now}
  `applied` is '0' for a repeated settle (the first result, nothing
  changed), '1' for the call (any attempt) that applied it;
  `expired_now` is '1' when this settle found the reservation past its
  deadline and expired it first (the settle is then `late`).
Invariants: idempotent on exec_id; on time, each money counter (key,
org, run, the record's model groups) moves by actual - amount and its
reserved part by -amount, booked as one entry of act = actual; late (after
expiry, which charged `ec`), each money counter moves by actual - ec,
booked as one `late` entry of act = actual - ec, giving back no more than
the least spent of the key and org (any other counter's spent stops at
zero) (a settle that finds its reservation past its deadline books the
`expired` entry first, as the sweep would have); a rate limit's counter
(the record's `x`, see common.lua) moves by what the call used of its
meter (requests: 1; tokens: input + cached input + cache write + output,
at most 2^53 - 1) less what it held (1, or the token bound `t`), its
reserved part by -held unless expiry already let go of it; a counter that
would reach 2^53 refuses the settle (`out_of_range`) before anything is
written, the expiry too. The counters are read in one HMGET and written
in one HSET, however many caps the record has.
Every entry booked also adds to its day's spend aggregate row (agg, see
common.lua), in this same script, and names the record's customer (`cust`)
when it has one. A settle never touches a customer's registry entry: a
late settle after the sweep forgot the customer moves its counters (spent
never below zero) without remembering it again.
An actual of 2^53 or more is refused by the caller before the script runs
(here it would fail int_arg).
]]

local exec_id = argv.exec_id
local key_id = argv.key_id
local org_id = nil
if argv.has_org == '1' then
  org_id = argv.org_id
end
local call = {
  model = argv.model,
  input = count_arg(argv.input, 'input tokens'),
  cached = count_arg(argv.cached_input, 'cached input tokens'),
  written = count_arg(argv.cache_write, 'cache write tokens'),
  output = count_arg(argv.output, 'output tokens'),
  actual = int_arg(argv.actual, 'actual'),
}
local estimated = argv.estimated == '1'
local epsilon = int_arg(argv.epsilon, 'settle epsilon')
local call_id = argv.call_id
local on_expiry = on_expiry_arg(argv.on_expiry)
local keep_ms = int_arg(argv.closed_record_ms, 'closed-record time')
if keep_ms > MAX_TTL_MS then
  fail('closed-record time is above 2^50 ms: ' .. argv.closed_record_ms)
end

local rec = load_record(exec_id)
if not rec then
  return { 'absent' }
end
if rec.s == 'denied' then
  return { 'denied' }
end
if rec.k ~= key_id or rec.o ~= org_id then
  return { 'mismatch' }
end
if rec.s == 'settled' then
  local applied = '0'
  if rec.by == call_id then
    applied = '1'
  end
  return { 'settled', rec.st, rec.a, rec.act, rec.rem, applied, '0' }
end

local now = store_now()
local amount = tonumber(rec.a)
local pending = rec.s == 'open'
-- What expiry charged, once the reservation is expired (nil on time).
local charged = nil
local expired_now = '0'
if not pending then
  -- A record expired before `ec` existed was released.
  charged = tonumber(rec.ec or '0')
elseif tonumber(rec.d) <= now then
  -- Expired first, as the sweep would have; its counter moves are folded
  -- into the ones below.
  charged = expiry_charge(rec, on_expiry)
  expired_now = '1'
end

-- An open reservation becomes the actual cost, whether it expires now or
-- not (expiry's own move, charged - amount, plus the late one, actual -
-- charged); one already expired moves by actual - charged.
local committed, reserved = call.actual - amount, -amount
if not pending then
  committed, reserved = call.actual - charged, 0
end

-- Each scope's committed counter and its reserved part, in one read,
-- checked before anything is written: the key's, the org's (when the
-- record has one), the run's, then the other caps' (`x`).
local fields = held_fields(charged_fields(rec))
-- What each rate limit's committed counter moves by (by field index); a
-- money counter moves by `committed`.
local rate_moves, rate_held = nil, nil
if rec.x then
  rate_moves, rate_held = {}, {}
  local used_tokens = math.min(call.input + call.cached + call.written + call.output, MAX_SAFE)
  for _, field in ipairs(rec.x) do
    fields[#fields + 1] = field
    fields[#fields + 1] = field .. ':r'
    local meter, held = cap_held(rec, field)
    if meter ~= 'usd' then
      local used = 1
      if meter == 'tokens' then
        used = used_tokens
      end
      rate_moves[#fields - 1] = used - held
      rate_held[#fields - 1] = held
    end
  end
end
local values = read_counters(fields)
for i = 1, #fields, 2 do
  if values[i] + (rate_moves and rate_moves[i] or committed) > MAX_SAFE then
    return { 'out_of_range', fields[i] }
  end
end
-- A late settle below expiry's charge gives back no more than the key and
-- its org still hold in spent (committed - reserved): an operator's refund
-- (which moves those two) may have given part of it back already. They
-- move by the same amount, the one its entry books; the run and the model
-- groups move by it too, down to zero if the run was forgotten meanwhile
-- (`write_counters`).
if not pending and committed < 0 then
  local owners = rec.o and 3 or 1
  for i = 1, owners, 2 do
    committed = math.max(committed, values[i + 1] - values[i])
  end
end

if expired_now == '1' then
  book(exec_id, rec, 'expired', nil, charged, now)
end

local status = 'ok'
if charged then
  status = 'late'
elseif estimated then
  status = 'estimated'
elseif call.actual > amount + epsilon then
  status = 'overrun'
end

if rate_moves then
  local moves = {}
  for i = 1, #fields, 2 do
    if rate_moves[i] then
      moves[i] = rate_moves[i]
      -- Expired, the reservation let go of its reserved part already.
      moves[i + 1] = pending and -rate_held[i] or 0
    else
      moves[i] = committed
      moves[i + 1] = reserved
    end
  end
  write_moves(fields, values, moves)
else
  write_counters(fields, values, committed, reserved)
end
if pending then
  redis.call('ZREM', KEYS[3], exec_id)
end
if pending then
  book(exec_id, rec, status, call, call.actual - (charged or 0), now)
else
  book(exec_id, rec, status, call, committed, now)
end
touch_run(rec, now)

local remaining = math.max(rec.kc - (values[1] + committed), 0)
rec.s = 'settled'
rec.st = status
rec.act = fmt(call.actual)
rec.rem = fmt(remaining)
rec.by = call_id
-- The record has done its work: a retry reads only the first answer and
-- who owns it.
local stored = encode_settled(rec)
if pending then
  close_for_retries(exec_id, rec, now, keep_ms, stored)
else
  -- Expired first: its member in `closed` moves to the closed-record time.
  close(exec_id, rec, now, keep_ms, stored)
end
return { 'settled', rec.st, rec.a, rec.act, rec.rem, '1', expired_now }

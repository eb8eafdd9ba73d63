--[[ settle.lua — charge a reserved call's actual cost, exactly once.

KEYS: the five keys of the tag (see common.lua): spend, res, pending, closed, ledger.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      DESIGN.md's key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV:
  1 exec_id
  2 key id      3 '1' when the settlement names an org, else '0'    4 org id
  5 model       6 input   7 cached input   8 cache write   9 output (token counts)
 10 actual (µUSD)
 11 '1' when the usage was counted by the gateway (estimated), else '0'
 12 settle epsilon (µUSD): how far above its reservation a call may land
    before it counts as an overrun
 13 call id: unique per settle call, the same across its retries, so a
    retry of an attempt that timed out after it applied still reports
    `applied` = '1'
Returns:
  {'absent'}    no record of exec_id under this tag
  {'denied'}    exec_id was denied: there is nothing to settle
  {'mismatch'}  the record belongs to another key or org
  {'settled', status, reserved, actual, key_remaining, applied, expired_now}
  `applied` is '0' for a repeated settle (the first result, nothing
  changed), '1' for the call (any attempt) that applied it;
  `expired_now` is '1' when this settle found the reservation past its
  deadline and expired it first (the settle is then `late`).
Invariants: idempotent on exec_id; on time, each counter moves by
actual - amount and its reserved part by -amount; late (after expiry), the
actual is charged in full; one ledger entry per applied settle; a counter
that would reach 2^53 refuses the settle before anything is written.
]]

local exec_id = ARGV[1]
local key_id = ARGV[2]
local org_id = nil
if ARGV[3] == '1' then
  org_id = ARGV[4]
end
local call = {
  model = ARGV[5],
  input = count_arg(ARGV[6], 'input tokens'),
  cached = count_arg(ARGV[7], 'cached input tokens'),
  written = count_arg(ARGV[8], 'cache write tokens'),
  output = count_arg(ARGV[9], 'output tokens'),
  actual = int_arg(ARGV[10], 'actual'),
}
local estimated = ARGV[11] == '1'
local epsilon = int_arg(ARGV[12], 'settle epsilon')
local call_id = ARGV[13]

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

-- Each scope's committed counter and its reserved part, in one read,
-- checked before anything is written.
local fields = held_fields(counter_field('key', rec.k, rec.kp),
  rec.o and counter_field('org', rec.o, rec.op))
local values = read_counters(fields)
for i = 1, #fields, 2 do
  if values[i] + call.actual > MAX_SAFE then
    fail('settling ' .. exec_id .. ' would take ' .. fields[i] .. ' to 2^53 or more')
  end
end

local now = store_now()
local amount = tonumber(rec.a)
local pending = rec.s == 'open'
local late = rec.s == 'expired'
local expired_now = '0'
if pending and tonumber(rec.d) <= now then
  -- Expired first, as the sweep would have; the release of its amount is
  -- folded into the counter moves below.
  book(exec_id, rec, 'expired', nil, now)
  rec.s = 'expired'
  late = true
  expired_now = '1'
end

local status = 'ok'
if late then
  status = 'late'
elseif estimated then
  status = 'estimated'
elseif call.actual > amount + epsilon then
  status = 'overrun'
end

-- An open reservation becomes the actual cost, whether it expires now or
-- not; one already expired released its amount then, and the cost is
-- charged in full.
local committed, reserved = call.actual, 0
if pending then
  committed, reserved = call.actual - amount, -amount
end
write_counters(fields, values, committed, reserved)
if pending then
  redis.call('ZREM', KEYS[3], exec_id)
end
book(exec_id, rec, status, call, now)

local remaining = math.max(rec.kc - (values[1] + committed), 0)
rec.s = 'settled'
rec.st = status
rec.act = fmt(call.actual)
rec.rem = fmt(remaining)
rec.by = call_id
close(exec_id, rec, now)
return { 'settled', rec.st, rec.a, rec.act, rec.rem, '1', expired_now }

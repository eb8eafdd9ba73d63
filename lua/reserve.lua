--[[ reserve.lua — hold `amount` against a key and its org, all or nothing.

KEYS: the five keys of the tag (see common.lua): spend, res, pending, closed, ledger.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      DESIGN.md's key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV:
  1 exec_id
  2 amount (µUSD)
  3 ttl (ms): how long the reservation holds its headroom if never settled,
    and how long its record is kept once closed
  4 key id        5 key period      6 key cap (µUSD)
  7 '1' when the key has an org, else '0'
  8 org id        9 org period     10 org cap (µUSD)   (ignored without org)
 11 clock offset (ms, signed; always 0 in production, set only by tests)
 12 lazy sweep limit: due reservations expired (and closed records
    forgotten) before this reserve
 13 idempotency claim (64 hex digits), or '' for none: the request is a
    duplicate while an open reservation under another exec id holds it
Returns:
  {'reserved', expired}
  {'denied', expired, kind, id, period, cap, remaining, at_ms}
  {'duplicate', expired}
  where `expired` counts the reservations the lazy sweep expired, and a
  denial names the key when both scopes would deny.
Invariants: idempotent on exec_id (a retry returns the first answer, also
after that reservation was settled or expired, until its record is
forgotten), and an exec id with a record is never a duplicate, so the
gateway's own retry of a claimed reserve gets its first answer; a denial
or a duplicate charges nothing; a duplicate is not remembered (a retry of
it asks again); a denial takes no claim; a reservation holds its claim
until it closes; every key touched is in KEYS.
]]

local exec_id = ARGV[1]
local amount = int_arg(ARGV[2], 'amount')
local ttl = int_arg(ARGV[3], 'ttl')
if ttl > MAX_TTL_MS then
  fail('ttl is above 2^50 ms: ' .. ARGV[3])
end
local scopes = {
  { kind = 'key', id = ARGV[4], period = period_arg(ARGV[5], 'key period'),
    cap = int_arg(ARGV[6], 'key cap') },
}
if ARGV[7] == '1' then
  scopes[2] = { kind = 'org', id = ARGV[8], period = period_arg(ARGV[9], 'org period'),
    cap = int_arg(ARGV[10], 'org cap') }
end
local offset = signed_arg(ARGV[11], 'clock offset')
local lazy_limit = int_arg(ARGV[12], 'lazy sweep limit')
local claim = ARGV[13]
if claim ~= '' and not string.match(claim, '^%x+$') then
  fail('claim is not hex: ' .. tostring(claim))
end

local now = store_now(offset)
local expired = expire_due(now, lazy_limit)
forget_due(now, lazy_limit)

local first = load_record(exec_id)
if first then
  if first.s == 'denied' then
    return { 'denied', fmt(expired), first.dk, first.di, first.dp, first.dc, first.dr, first.at }
  end
  return { 'reserved', fmt(expired) }
end

if claim ~= '' then
  local holder = redis.call('HGET', KEYS[2], claim_field(claim))
  local held = holder and load_record(holder)
  if held and held.s == 'open' and tonumber(held.d) > now then
    return { 'duplicate', fmt(expired) }
  end
end

-- The key is checked first, so when both would deny, the key is named.
for _, scope in ipairs(scopes) do
  scope.pid = period_id(scope.period, now)
  scope.field = counter_field(scope.kind, scope.id, scope.pid)
  local committed = counter(scope.field)
  if committed + amount > scope.cap then
    local remaining = math.max(scope.cap - committed, 0)
    local denial = {
      s = 'denied', dk = scope.kind, di = scope.id, dp = scope.period,
      dc = fmt(scope.cap), dr = fmt(remaining), at = fmt(now), ttl = fmt(ttl),
    }
    close(exec_id, denial, now)
    return { 'denied', fmt(expired), denial.dk, denial.di, denial.dp, denial.dc, denial.dr, denial.at }
  end
end

-- Below the cap, so below 2^53.
local rec = {
  s = 'open', a = fmt(amount), k = scopes[1].id, kp = scopes[1].pid,
  kc = fmt(scopes[1].cap), d = fmt(now + ttl), ttl = fmt(ttl),
}
if scopes[2] then
  rec.o = scopes[2].id
  rec.op = scopes[2].pid
end
if claim ~= '' then
  rec.c = claim
  redis.call('HSET', KEYS[2], claim_field(claim), exec_id)
end
for _, scope in ipairs(scopes) do
  add(scope.field, amount)
  add(scope.field .. ':r', amount)
end
redis.call('HSET', KEYS[2], exec_id, cjson.encode(rec))
redis.call('ZADD', KEYS[3], rec.d, exec_id)
return { 'reserved', fmt(expired) }

--[[ adjust.lua — an operator's refund or credit to a key and its org, once.

KEYS: the eight keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done, cust.
      One fixed set of keys per hash tag, all passed in KEYS: the key's and
      its org's counters share the tag, so the script is legal on a Redis
      Cluster.
ARGV, read by name as `argv.<name>`: the names and their order are
`AdjustArgs` in src/budget/redis/scripts.rs, which binds them in front of
this body (a test holds this list to it).
  exec_id: minted by the caller once per adjustment, the same across its
    retries
  key_id
  key_period
  has_org: '1' when the key has an org, else '0'
  org_id
  org_period: the org's two are ignored without org
  amount (µUSD, signed, below 2^53 in magnitude): negative refunds
  note: kept on the ledger entry
  epoch: the store epoch the gateway serves under (tg:meta's, see meta.lua)
  closed_record_ms: how long the adjustment's record is kept for retries
  call_id: unique per adjust call, the same across its retries, so a
    retry of an attempt that timed out after it applied still reports
    `applied` = '1'
Returns:
  {'applied', key_period_id, org_period_id ('' without org), key_spent, applied}
      `key_spent` is the key's spent right after the adjustment; `applied`
      is '0' for a repeated adjustment (the first answer, nothing changed)
  {'refused', kind, id, spent}  a refund larger than this scope's spent in
                                its current period (the key is named first);
                                nothing was written or remembered
  {'out_of_range', field}       the credit would take that counter to 2^53
                                or more; nothing was written
  {'mismatch'}                  exec_id was applied to another key or org
  {'epoch_unknown'} | {'epoch_mismatch', mark}  as reserve.lua: nothing was
                                done; the gateway marks the tag and asks again
Invariants: the epoch mark is checked first, so no adjustment lands on books
that vanished; idempotent on exec_id while its record is kept; the period
ids are the store clock's current ones; each committed counter moves by the
amount and no reserved part moves, booked as one `adjustment` entry of
act = amount, res = 0, charged to those periods, so
counter == folded + sum(ledger act) + sum(open amounts) still holds; a
spent never goes below zero; every key touched is in KEYS.
]]

if not argv.epoch or argv.epoch == '' then
  fail('no store epoch')
end
local refusal = epoch_refusal(redis.call('HGET', KEYS[1], 'epoch'), argv.epoch)
if refusal then
  return refusal
end

local exec_id = argv.exec_id
local scopes = {
  { kind = 'key', id = argv.key_id, period = period_arg(argv.key_period, 'key period') },
}
local org_id = nil
if argv.has_org == '1' then
  org_id = argv.org_id
  scopes[2] = { kind = 'org', id = org_id, period = period_arg(argv.org_period, 'org period') }
end
local amount = signed_arg(argv.amount, 'amount')
local note = argv.note
local keep_ms = int_arg(argv.closed_record_ms, 'closed-record time')
if keep_ms > MAX_TTL_MS then
  fail('closed-record time is above 2^50 ms: ' .. argv.closed_record_ms)
end
local call_id = argv.call_id

local record_field = 'adj:' .. exec_id
local first = load_record(record_field)
if first then
  if first.k ~= scopes[1].id or first.o ~= org_id then
    return { 'mismatch' }
  end
  local applied = '0'
  if first.by == call_id then
    applied = '1'
  end
  return { 'applied', first.kp, first.op or '', first.ks, applied }
end

local now = store_now()
for _, scope in ipairs(scopes) do
  scope.pid = period_id(scope.period, now)
  scope.field = counter_field(scope.kind, scope.id, scope.pid)
end
local fields = held_fields({ scopes[1].field, scopes[2] and scopes[2].field })
local values = read_counters(fields)

-- Checked before anything is written: Redis does not roll a script back.
for i, scope in ipairs(scopes) do
  local committed, reserved = values[2 * i - 1], values[2 * i]
  local spent = committed - reserved
  if spent + amount < 0 then
    return { 'refused', scope.kind, scope.id, fmt(spent) }
  end
  if committed + amount > MAX_SAFE then
    return { 'out_of_range', scope.field }
  end
end

write_counters(fields, values, amount, 0)

-- Built as a list: adjustments are rare, and the note is theirs alone.
local entry = { 'exec', exec_id, 'key', scopes[1].id }
if org_id then
  entry[#entry + 1] = 'org'
  entry[#entry + 1] = org_id
end
for _, pair in ipairs({
  { 'model', '' }, { 'in', '0' }, { 'cin', '0' }, { 'cw', '0' }, { 'out', '0' },
  { 'res', '0' }, { 'act', fmt(amount) }, { 'st', 'adjustment' }, { 'kp', scopes[1].pid },
}) do
  entry[#entry + 1] = pair[1]
  entry[#entry + 1] = pair[2]
end
if org_id then
  entry[#entry + 1] = 'op'
  entry[#entry + 1] = scopes[2].pid
end
entry[#entry + 1] = 'note'
entry[#entry + 1] = note
entry[#entry + 1] = 'at'
entry[#entry + 1] = fmt(now)
redis.call('XADD', KEYS[5], '*', unpack(entry))
-- In the spend reports too, as money moved by hand (no call).
aggregate({ k = scopes[1].id }, 'adjustment', nil, amount, now)

local key_spent = fmt(values[1] + amount - values[2])
local rec = {
  s = 'adjusted', k = scopes[1].id, o = org_id, kp = scopes[1].pid,
  op = scopes[2] and scopes[2].pid, ks = key_spent, by = call_id,
}
redis.call('HSET', KEYS[2], record_field, cjson.encode(rec))
redis.call('RPUSH', KEYS[7], fmt(now + keep_ms) .. '|' .. record_field)
return { 'applied', rec.kp, rec.op or '', key_spent, '1' }

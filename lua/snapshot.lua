--[[ snapshot.lua — the tag's counters and open reservations at one instant,
and where its ledger ends then (read only), for reconciliation.

KEYS: the eight keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done, cust.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      a key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV: none.
Returns: {spend, open, last_ledger_id}
  spend           the spend hash as a flat field/value list (incl. `folds`)
  open            flat list exec_id, record of every open reservation
  last_ledger_id  the newest ledger entry's id, '' when the ledger is empty
The caller reads the ledger up to last_ledger_id in pages and compares
`folds` afterwards: a sweep that trimmed the ledger in between changes it.
]]

local spend = redis.call('HGETALL', KEYS[1])
local open = {}
local pending = redis.call('ZRANGE', KEYS[3], '0', '-1')
for _, exec_id in ipairs(pending) do
  local raw = redis.call('HGET', KEYS[2], exec_id)
  if raw then
    open[#open + 1] = exec_id
    open[#open + 1] = raw
  end
end
local last = redis.call('XREVRANGE', KEYS[5], '+', '-', 'COUNT', '1')
local last_id = ''
if #last > 0 then
  last_id = last[1][1]
end
return { spend, open, last_id }

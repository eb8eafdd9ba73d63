--[[ meta.lua — read the store's own record, `tg:meta`, creating it when it
is missing.

KEYS: 1 tg:meta
      The one key outside every hash tag. A script that touches it touches
      nothing else, so it runs in one slot of a Redis Cluster.
ARGV:
  1 a fresh epoch id (a UUIDv7), used only when tg:meta is missing
  2 the layout this binary writes (an integer)
Returns: {created, name1, value1, name2, value2, …}
  created   '1' when this call created tg:meta, else '0'
  then tg:meta's fields as a flat name/value list.
tg:meta (hash):
  layout       the layout version of everything the scripts write; absent
               on a store from before the field existed, read as 0
  epoch        the store epoch: a random id minted when the books began
  created_at   when the epoch began (ms, Redis's TIME)
  accepted_at  when an operator accepted it after the books were lost
               (`tollgate admin store accept-epoch`; ms); absent for an
               epoch created on an empty store
Each tag's spend hash carries the epoch its books were written under
(field `epoch`, see common.lua); reserve.lua refuses to charge a tag whose
mark is missing or another epoch, so a Redis that restarted without its
data is noticed on the first reserve.
Invariants: creates tg:meta only when the key is missing, all its fields at
once, so gateways starting together agree on the first one's epoch; never
changes an existing tg:meta.
]]

if redis.call('EXISTS', KEYS[1]) == 0 then
  local time = redis.call('TIME')
  local now = time[1] * 1000 + math.floor(time[2] / 1000)
  redis.call('HSET', KEYS[1], 'layout', ARGV[2], 'epoch', ARGV[1],
    'created_at', string.format('%d', now))
  local reply = redis.call('HGETALL', KEYS[1])
  table.insert(reply, 1, '1')
  return reply
end
local reply = redis.call('HGETALL', KEYS[1])
table.insert(reply, 1, '0')
return reply

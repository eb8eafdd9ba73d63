--[[ accept_epoch.lua — start a fresh store epoch, accepted by an operator
(`tollgate admin store accept-epoch`), after the books were lost.

KEYS: 1 tg:meta (see meta.lua); nothing else, so it runs in one slot of a
      Redis Cluster.
ARGV:
  1 a fresh epoch id (a UUIDv7)
  2 the layout this binary writes (an integer)
Returns:
  {'accepted', previous epoch or '', now_ms}
  {'layout', found}  tg:meta holds another layout (absent: '0'); nothing
                     was written: the caller migrates an older one first,
                     and never writes over a newer one
Invariants: writes epoch, created_at and accepted_at together (and layout
when tg:meta was missing), so a gateway reading tg:meta sees the old epoch
or the whole new one; the new epoch's created_at is Redis's TIME now, so it
is never older than an epoch the gateways saw on this Redis.
]]

local found = redis.call('HMGET', KEYS[1], 'layout', 'epoch')
local exists = redis.call('EXISTS', KEYS[1]) == 1
if exists and (found[1] or '0') ~= ARGV[2] then
  return { 'layout', found[1] or '0' }
end
local time = redis.call('TIME')
local now = string.format('%d', time[1] * 1000 + math.floor(time[2] / 1000))
redis.call('HSET', KEYS[1], 'layout', ARGV[2], 'epoch', ARGV[1],
  'created_at', now, 'accepted_at', now)
return { 'accepted', found[2] or '', now }

--[[ migrate_layout_1.lua — bring tg:meta from layout 0 (no `layout`
field) to layout 1.

Layout 1 adds tg:meta itself and each tag's `epoch` mark (see meta.lua and
common.lua). The marks need no migration: reserve.lua finds a tag unmarked
and the gateway marks it on its first reserve. So this step writes the
`layout` field, and an epoch when tg:meta has none.

KEYS: 1 tg:meta; nothing else, so it runs in one slot of a Redis Cluster.
ARGV:
  1 a fresh epoch id (a UUIDv7), used only when tg:meta has no epoch
Returns:
  {'migrated'}        tg:meta is at layout 1 now
  {'layout', found}   tg:meta already had a layout; nothing was written
  {'missing'}         there is no tg:meta; nothing was written
Invariants: idempotent (gateways starting together may both run it); keeps
an existing epoch and its created_at.
]]

if redis.call('EXISTS', KEYS[1]) == 0 then
  return { 'missing' }
end
local layout = redis.call('HGET', KEYS[1], 'layout')
if layout then
  return { 'layout', layout }
end
local time = redis.call('TIME')
local now = string.format('%d', time[1] * 1000 + math.floor(time[2] / 1000))
redis.call('HSET', KEYS[1], 'layout', '1')
redis.call('HSETNX', KEYS[1], 'epoch', ARGV[1])
redis.call('HSETNX', KEYS[1], 'created_at', now)
return { 'migrated' }

--[[ bump_layout.lua — bring tg:meta from one layout to the next when
nothing written under the older one needs rewriting: the newer binary
still reads it in place. The step writes only the layout, so a gateway of
the older layout, which cannot read what the newer one writes, refuses
the store. What each layout changed is in `RedisStore::migrate`
(src/budget/redis/meta.rs).

KEYS: 1 tg:meta; nothing else, so it runs in one slot of a Redis Cluster.
ARGV:
  1 the layout the step starts from
  2 the layout it brings tg:meta to
Returns:
  {'migrated'}        tg:meta is at the new layout now
  {'layout', found}   tg:meta was not at the starting layout; nothing was
                      written
  {'missing'}         there is no tg:meta; nothing was written
Invariants: idempotent (gateways starting together may both run it).
]]

if redis.call('EXISTS', KEYS[1]) == 0 then
  return { 'missing' }
end
local layout = redis.call('HGET', KEYS[1], 'layout')
if layout ~= ARGV[1] then
  return { 'layout', layout or '0' }
end
redis.call('HSET', KEYS[1], 'layout', ARGV[2])
return { 'migrated' }

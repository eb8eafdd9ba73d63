--[[ migrate_layout_2.lua — bring tg:meta from layout 1 to layout 2.

Layout 2 lists the records of settled and denied calls in each tag's `done`
list and stores a settled record as `settled|k|o|a|st|act|rem|by` (see
common.lua). Nothing written under layout 1 needs rewriting: its records
stay JSON, which layout 2 still reads, and its members of `closed` are
still forgotten from there. The step only writes the layout, so a gateway
of layout 1, which cannot read the new records, refuses the store.

KEYS: 1 tg:meta; nothing else, so it runs in one slot of a Redis Cluster.
ARGV: none
Returns:
  {'migrated'}        tg:meta is at layout 2 now
  {'layout', found}   tg:meta was not at layout 1; nothing was written
  {'missing'}         there is no tg:meta; nothing was written
Invariants: idempotent (gateways starting together may both run it).
]]

if redis.call('EXISTS', KEYS[1]) == 0 then
  return { 'missing' }
end
local layout = redis.call('HGET', KEYS[1], 'layout')
if layout ~= '1' then
  return { 'layout', layout or '0' }
end
redis.call('HSET', KEYS[1], 'layout', '2')
return { 'migrated' }

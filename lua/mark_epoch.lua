--[[ mark_epoch.lua — mark a tag's books as written under a store epoch.

KEYS: 1 tg:{T}:spend (see common.lua): its `epoch` field is the mark.
      One key of one tag, so it runs in one slot of a Redis Cluster.
ARGV:
  1 the epoch tg:meta holds, as the caller read it just before
  2 the mark the caller found (reserve.lua's answer), '' for none
Returns:
  {'marked'}          the mark is ARGV[1] now (set here, or already)
  {'changed', mark}   the mark is neither: another caller moved it since
                      ('' when it vanished); nothing was written
Invariants: compare-and-set, so two gateways never overwrite each other's
fresh mark; touches only the `epoch` field. The caller reads tg:meta again
after this call: on one Redis, a mark written into books that vanished in
between is then noticed before any reserve relies on it.
]]

local mark = redis.call('HGET', KEYS[1], 'epoch')
if mark == ARGV[1] then
  return { 'marked' }
end
if (mark or '') ~= ARGV[2] then
  return { 'changed', mark or '' }
end
redis.call('HSET', KEYS[1], 'epoch', ARGV[1])
return { 'marked' }

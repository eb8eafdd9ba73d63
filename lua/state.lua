--[[ state.lua — one scope's counters in its current period (read only).

KEYS: the seven keys of the tag (see common.lua); only KEYS[1] (spend) is read.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      DESIGN.md's key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV:
  1 kind ('key' | 'org')   2 id   3 period
Returns: {now_ms, period_id, committed, reserved}
The period id is derived from the store's clock, like reserve's.
]]

local kind = ARGV[1]
local id = ARGV[2]
local period = period_arg(ARGV[3], 'period')

local now = store_now()
local pid = period_id(period, now)
local field = counter_field(kind, id, pid)
return { fmt(now), pid, fmt(counter(field)), fmt(counter(field .. ':r')) }

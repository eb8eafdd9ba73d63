--[[ state.lua — one scope's counters in its current period (read only).

KEYS: the eight keys of the tag (see common.lua); only KEYS[1] (spend) is read.
      One fixed set of keys per hash tag, all passed in KEYS, instead of
      a key per reservation: the lazy sweep then never touches a
      key it was not given, so the script is legal on a Redis Cluster.
ARGV, read by name as `argv.<name>`: the names and their order are
`StateArgs` in src/budget/redis/scripts.rs, which binds them in front of
this body (a test holds this list to it).
  kind: 'key' | 'org' | 'run' | 'model' | 'customer'
  id
  period
Returns: {now_ms, period_id, committed, reserved}
The period id is derived from the store's clock, like reserve's; the
counter read is the scope's money (µUSD) in that period.
]]

local kind = argv.kind
local id = argv.id
local period = period_arg(argv.period, 'period')

local now = store_now()
local pid = period_id(period, now)
local field = counter_field(kind, id, pid)
return { fmt(now), pid, fmt(counter(field)), fmt(counter(field .. ':r')) }

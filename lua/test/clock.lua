--[[ test/clock.lua — tests only: a clock offset for the store's time.

Never part of a production script. A test build (Rust `cfg(test)`) puts this
chunk between common.lua and the body of every script that reads the time
(all but snapshot.lua), and passes one ARGV more than the script's header
states, last:
  clock offset (ms, signed), added to Redis's TIME
The chunk takes it off ARGV, so the body reads exactly the ARGV its header
states, and rebinds common.lua's `store_now` local (one chunk, so the body
and common.lua's helpers all see the shifted clock). This lets the contract
suite cross a period boundary or a retention without waiting, while the
production scripts take no test-only argument.
]]

local clock_offset = signed_arg(table.remove(ARGV), 'clock offset')
local redis_now = store_now
store_now = function()
  return redis_now() + clock_offset
end

--[[ fold.lua — moving ledger entries out of the stream. Prepended, after
common.lua, to the two scripts that trim the ledger: sweep.lua (entries
past the ledger buffer, whether or not a sink has them) and drain.lua
(entries a durable sink acknowledged).

An entry leaves the stream only through `fold`: its `act` is added to the
folded sum (`<kind>:<id>:<period id>:f`) of every scope and period it
charged, the stream is trimmed past it and `folds` is bumped, all in the
caller's one script, so
  counter == folded + sum(ledger act) + sum(open amounts)
stays exact at every instant, and a reader paging through the ledger
(reconcile) sees `folds` change and starts again.
]]

-- An XRANGE item's fields as a table.
local function entry_fields(item)
  local entry = {}
  local values = item[2]
  for i = 1, #values, 2 do
    entry[values[i]] = values[i + 1]
  end
  return entry
end

-- Folds `items` (XRANGE items of KEYS[5], oldest first, from the stream's
-- start) up to the first for which `stop(entry)` is true, and trims the
-- stream past the last one folded; returns how many were folded.
-- The items must be the stream's first ones: XTRIM MINID drops every entry
-- below the last folded one, so an entry skipped here would be dropped
-- without being folded.
local function fold(items, stop)
  local folded = 0
  local last_id = nil
  -- Summed per folded field first: a page of a busy key's entries moves
  -- two fields, not two per entry.
  local sums, order = {}, {}
  local function sum(field, actual)
    if not sums[field] then
      sums[field] = 0
      order[#order + 1] = field
    end
    sums[field] = sums[field] + actual
  end
  for _, item in ipairs(items) do
    local entry = entry_fields(item)
    if stop and stop(entry) then
      break
    end
    local actual = tonumber(entry.act)
    sum(counter_field('key', entry.key, entry.kp) .. ':f', actual)
    if entry.org then
      sum(counter_field('org', entry.org, entry.op) .. ':f', actual)
    end
    folded = folded + 1
    last_id = item[1]
  end
  for _, field in ipairs(order) do
    add(field, sums[field])
  end
  if last_id then
    -- MINID keeps every entry at or above the id given: the one right
    -- after the last folded (stream ids are `<ms>-<seq>`).
    local ms, seq = string.match(last_id, '^(%d+)-(%d+)$')
    redis.call('XTRIM', KEYS[5], 'MINID', ms .. '-' .. fmt(tonumber(seq) + 1))
    redis.call('HINCRBY', KEYS[1], 'folds', '1')
  end
  return folded
end

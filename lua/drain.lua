--[[ drain.lua — fold and trim the ledger entries a durable sink has
acknowledged (see src/drain.rs: the drain reads a page of the stream from
its start, writes it to the sink in one committed transaction, then calls
this with the id of the last entry of that page).

KEYS: the eight keys of the tag (see common.lua): spend, res, pending, closed, ledger, agg,
      done, cust.
      Only spend and ledger are touched; all eight are passed so every
      ledger-trimming script takes the same keys.
ARGV, read by name as `argv.<name>`: the names and their order are
`DrainArgs` in src/budget/redis/scripts.rs, which binds them in front of
this body (a test holds this list to it).
  through: the stream id (`<ms>-<seq>`) of the last entry the sink
    acknowledged
  limit: at most this many entries are folded (the size of the page the
    sink took), so one call never blocks Redis for long
  first: the stream id of the page's first entry, or '' to have the
    script read the entries itself
  sums: what the page's entries add to each folded sum, as the gateway
    summed them from the page it read (an unbroken run of entries from the
    stream's start): `<field>|<amount>` pairs joined by `|`, each field a
    key's or an org's `<kind>:<id>:<period id>:f` (see common.lua), each
    amount signed; used only while the page is whole in the stream (see
    below)
Returns: {folded}, the entries folded and trimmed by this call.
Invariants:
  - only entries still in the stream with an id at or below `through` are
    folded, each exactly once (`fold` trims what it folds, in this script):
    a retried call, or a second gateway draining the same page, finds them
    gone and adds nothing;
  - entries the sink has not seen are never trimmed: stream ids only grow,
    so every entry at or below `through` still present was in the page the
    sink wrote (or was added before it and trimmed by the sweep since);
  - while the stream still starts at `first` and still holds `through`,
    nothing of the page has left it (entries leave only from the start,
    by `fold`; a Redis that lost the end of its history lost the newest),
    and every entry at or below `through` is one of the page's (ids only
    grow): `sums` are added and those entries trimmed, without reading
    them again; otherwise the entries still there are read and folded one
    by one;
  - counter == folded + sum(ledger act) + sum(open amounts) holds after
    the call as before it.
]]

local through = argv.through
if type(through) ~= 'string' or not string.match(through, '^%d+%-%d+$') or #through > 41 then
  fail('drain: not a stream id: ' .. tostring(through))
end
local limit = int_arg(argv.limit, 'drain limit')
local first = argv.first
if type(first) ~= 'string' or type(argv.sums) ~= 'string' then
  fail('drain: no first or sums')
end
if first ~= '' and (not string.match(first, '^%d+%-%d+$') or #first > 41) then
  fail('drain: first is not a stream id: ' .. tostring(first))
end
-- The page's sums, read and checked before anything is written.
local fields, amounts = {}, {}
if first ~= '' and argv.sums ~= '' then
  local parts = split_fields(argv.sums, 2, 'drain: sums')
  for i = 1, #parts, 2 do
    local field = parts[i]
    if not (string.match(field, '^key:.+:f$') or string.match(field, '^org:.+:f$')) then
      fail('drain: not a folded sum of a key or an org: ' .. field)
    end
    fields[#fields + 1] = field
    amounts[#amounts + 1] = signed_arg(parts[i + 1], 'drain sum')
  end
end

-- The page is whole in the stream when the stream still starts with its
-- first entry and still holds its last: entries leave from the start
-- only, and a Redis that lost the end of its history (a failover to a
-- replica behind, a restart from an older snapshot) lost the newest.
local function page_whole()
  if first == '' then
    return false
  end
  local head = redis.call('XRANGE', KEYS[5], '-', '+', 'COUNT', '1')[1]
  if not head or head[1] ~= first then
    return false
  end
  return first == through or #redis.call('XRANGE', KEYS[5], through, through) == 1
end

local folded = 0
if limit > 0 then
  if page_whole() then
    -- Summed first, then trimmed, as `fold` does: a script cut short
    -- between the two leaves the entries in the stream, not folded sums
    -- without them.
    for i = 1, #fields do
      add(fields[i], amounts[i])
    end
    local ms, seq = string.match(through, '^(%d+)-(%d+)$')
    folded = redis.call('XTRIM', KEYS[5], 'MINID', ms .. '-' .. fmt(tonumber(seq) + 1))
    redis.call('HINCRBY', KEYS[1], 'folds', '1')
  else
    local items = redis.call('XRANGE', KEYS[5], '-', through, 'COUNT', fmt(limit))
    folded = fold(items, nil)
  end
end
return { fmt(folded) }

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
Returns: {folded}, the entries folded and trimmed by this call.
Invariants:
  - only entries still in the stream with an id at or below `through` are
    folded, each exactly once (`fold` trims what it folds, in this script):
    a retried call, or a second gateway draining the same page, finds them
    gone and adds nothing;
  - entries the sink has not seen are never trimmed: stream ids only grow,
    so every entry at or below `through` still present was in the page the
    sink wrote (or was added before it and trimmed by the sweep since);
  - counter == folded + sum(ledger act) + sum(open amounts) holds after
    the call as before it.
]]

local through = argv.through
if type(through) ~= 'string' or not string.match(through, '^%d+%-%d+$') or #through > 41 then
  fail('drain: not a stream id: ' .. tostring(through))
end
local limit = int_arg(argv.limit, 'drain limit')

local folded = 0
if limit > 0 then
  local items = redis.call('XRANGE', KEYS[5], '-', through, 'COUNT', fmt(limit))
  folded = fold(items, nil)
end
return { fmt(folded) }

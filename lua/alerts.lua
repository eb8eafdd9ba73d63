--[[ alerts.lua — the queue of spending alerts: queue an event once per id,
lease the events due, and mark one delivered or failed.

KEYS: the three alert keys under the admin tag A (`tollgate:admin`, see
      record_write.lua); one tag, so the script runs in one slot of a Redis
      Cluster:
  1 tg:{A}:alerts       hash  event id -> `<attempts> <body>` while it waits
  2 tg:{A}:alerts:due   zset  waiting event ids by when each may be sent (ms)
  3 tg:{A}:alerts:done  zset  delivered event ids by when each may be
                              forgotten (ms)
ARGV:
  1 the operation: 'queue', 'due', 'delivered' or 'failed'
  queue:     2 event id (hex)  3 the body (JSON)
  due:       2 how many at most  3 the lease (ms)
  delivered: 2 event id  3 how long the id is remembered (ms)
  failed:    2 event id  3 the delay before the next attempt (ms)
Returns:
  queue      1 when queued, 0 when the id is waiting or was delivered
  due        a flat list id, attempts, body for each event due now, oldest
             due first; each is then leased: not due again for the lease
  delivered  1 when it was waiting, else 0
  failed     1 when it was waiting, else 0
Invariants: an id is in `alerts` exactly when it is in `due`; an id is
never in both `alerts` and `done`; an event's body never changes once
queued. Time is Redis's TIME. Delivered ids past their time are forgotten
a bounded page at a time by 'queue' and 'due'.
]]

-- A refusal of the script's arguments (code TOLLGATE, as common.lua's).
local function fail(message)
  return error({ err = 'TOLLGATE ' .. message })
end

local function now_ms()
  local time = redis.call('TIME')
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end

local function count(text, what)
  if not string.match(text, '^%d+$') then
    fail(what .. ' is not a whole number: ' .. text)
  end
  return tonumber(text)
end

-- Forgets up to 100 delivered ids whose time has come.
local function forget_done(now)
  local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now, 'LIMIT', 0, 100)
  if #old > 0 then
    redis.call('ZREM', KEYS[3], unpack(old))
  end
end

local op, id = ARGV[1], ARGV[2]
local now = now_ms()

if op == 'queue' then
  if not string.match(id, '^%x+$') then
    fail('the event id is not hex: ' .. id)
  end
  forget_done(now)
  if redis.call('HEXISTS', KEYS[1], id) == 1 or redis.call('ZSCORE', KEYS[3], id) then
    return 0
  end
  redis.call('HSET', KEYS[1], id, '0 ' .. ARGV[3])
  redis.call('ZADD', KEYS[2], now, id)
  return 1
elseif op == 'due' then
  local limit = count(ARGV[2], 'the limit')
  local lease = count(ARGV[3], 'the lease')
  forget_done(now)
  local reply = {}
  if limit == 0 then
    return reply
  end
  local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, limit)
  for _, due_id in ipairs(ids) do
    local raw = redis.call('HGET', KEYS[1], due_id)
    if raw then
      local attempts, body = string.match(raw, '^(%d+) (.*)$')
      redis.call('ZADD', KEYS[2], now + lease, due_id)
      reply[#reply + 1] = due_id
      reply[#reply + 1] = attempts
      reply[#reply + 1] = body
    else
      -- Not waiting after all: keep the invariant.
      redis.call('ZREM', KEYS[2], due_id)
    end
  end
  return reply
elseif op == 'delivered' then
  local keep = count(ARGV[3], 'the retention')
  local waiting = redis.call('HDEL', KEYS[1], id)
  redis.call('ZREM', KEYS[2], id)
  if waiting == 1 then
    redis.call('ZADD', KEYS[3], now + keep, id)
  end
  return waiting
elseif op == 'failed' then
  local delay = count(ARGV[3], 'the delay')
  local raw = redis.call('HGET', KEYS[1], id)
  if not raw then
    return 0
  end
  local attempts, body = string.match(raw, '^(%d+) (.*)$')
  redis.call('HSET', KEYS[1], id, string.format('%d', tonumber(attempts) + 1) .. ' ' .. body)
  redis.call('ZADD', KEYS[2], now + delay, id)
  return 1
end
fail('unknown operation: ' .. tostring(op))

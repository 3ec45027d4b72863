"""The Lua scripts: every step of the protocol is one of them, one atomic round trip.

Store layout (``P`` the URL's prefix, ``S`` a semaphore's name; docs/design.md section 3):

``P:seq``
    the store-wide counter (``INCR``): every entry's order and fencing token, and every
    capacity version, so both only grow, across semaphores and their deletion.
``P:lease:<lease>``
    one client's lease, a key with a TTL of its session timeout that the client renews;
    an entry whose lease key is gone is dead for every script.
``P:inbox:<lease>``
    the client's notification list: the scripts push one message per newly admitted
    entry of that client (``{"x": "admitted", "n": S, "k": entry id, "c": capacity,
    "v": version}``, and ``"z"``: the entry's job slots when it asked for them), one per
    entry removed by someone else (``"x": "deleted"``), one per revoke request on one of
    its held entries (``"x": "revoke"``), and
    one per capacity change of a semaphore it opened (``"x": "capacity"``).
``P:s:S:cfg``
    hash: ``capacity`` and its ``version`` (of every config write), ``drain`` while it
    drains, ``ramp`` while a capacity ramp is under way (its plan, JSON).
``P:s:S:q``
    sorted set: entry id -> order (FIFO by the counter, never by client clocks).
``P:s:S:e``
    hash: entry id -> JSON ``{"w": weight, "l": lease, "o": owner, "h": held, "s": since,
    "t": order}``, ``"r": true`` once a revoke request is on it (``sem.revoke()``), and
    for an ``acquire(slot=True)``: ``"z": true``, then, from the
    write that admits it, ``"x": [index1, token1, ...]``, its job slots (``give_slots``):
    the records live in the entry, so they go in the request that deletes it.
``P:s:S:open``
    set: the leases of the clients that opened the semaphore (told of capacity changes).
``P:s:S:d:<name>``
    the data keys of fenced transactions.
``P:s:S:t:<id>``
    the tombstone of an entry id its client removed before it was made (an abandoned
    acquire's enqueue still on its way): an enqueue of that id makes nothing
    (``{'abandoned'}``); it lasts as long as the client's lease.

Every script that changes the queue ends with ``sweep`` (a removal that leaves the queue
empty and an enqueue admitted at once into an empty one return before: nothing is left
to admit, and they then never make the sweep's functions; an enqueue behind a live
waiter skips it too: the sweep would stop at that waiter): walking from the head, it
removes dead entries, counts the holders, and admits each waiter whose prefix sum fits
the capacity, marking it held and notifying its client; it stops at the first waiter
that does not fit. An admitted entry that asked for job slots is given them there:
the held entries are a prefix of the queue (only ``sweep`` and an enqueue into an
empty queue admit, and ``sweep`` admits a prefix), so by the time the walk reaches a
waiter it has passed every live holder and knows the indices they hold. Its work is
the holders plus the newly admitted plus one, never the whole queue. A waiter's reply
lists no other entry (the server decides admission): it names the moment to look again
(``check_in``), from its nearest live lower entry (``nearest_below``). Scripts build
their keys from ``ARGV`` (the prefix and the name; the scripts of ``acquire_all``,
``*_ALL``, take several names and ``use`` each in turn). On Redis Cluster the prefix
the client gives carries the semaphore's hash tag (``P:{T}``, :mod:`.layout`): every
key a script builds, the lease, inbox and counter too, is then in the slot the call
is routed to.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["READ_ONLY", "SCRIPTS", "ScriptName"]

# Redis runs a script's whole chunk at every call, each `local function` making a
# closure then: a script's parts come in the order of the functions they need, and an
# uncontended enqueue or release returns from its first part, which needs none.
# First, every script: the semaphore's keys.
_PRELUDE = r"""
local P, S = ARGV[1], ARGV[2]
local QK, EK, CK = P .. ':s:' .. S .. ':q', P .. ':s:' .. S .. ':e', P .. ':s:' .. S .. ':cfg'
"""

# Then the functions of the entry itself; the queue's (the sweep and the views,
# :data:`_QUEUE`) after them.
_HEAD = r"""
-- Point the functions below at semaphore `s` (the scripts over several queues move
-- from one to the next; the functions read these as upvalues).
local function use(s)
  S = s
  QK = P .. ':s:' .. s .. ':q'
  EK = P .. ':s:' .. s .. ':e'
  CK = P .. ':s:' .. s .. ':cfg'
end
local function lease_key(l) return P .. ':lease:' .. l end
local function tombstone_key(id) return P .. ':s:' .. S .. ':t:' .. id end
-- The lease joins the semaphore's openers (told of capacity changes): at a writing
-- open, and at an entry made by a client that is not one yet (an open without create
-- writes nothing)
local function opened_by(l) redis.call('sadd', P .. ':s:' .. S .. ':open', l) end
-- On Redis Cluster the prefix carries the hash tag (layout.py): one BLPOP cannot span
-- slots, so a push to an inbox also rings a doorbell on the inbox's own name (inbox.py)
local CLUSTERED = string.find(P, '{', 1, true) ~= nil
local function ring(box) if CLUSTERED then redis.call('spublish', box, '') end end
local function now()
  local t = redis.call('time')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function entry(id)
  local raw = redis.call('hget', EK, id)
  if raw then return cjson.decode(raw) end
  return nil
end
-- Each lease is asked once per call (no key expires while a script runs, and a sweep
-- meets many entries of one client's lease)
local live = {}
local function alive(e)
  if e == nil then return false end
  local known = live[e.l]
  if known == nil then
    known = redis.call('exists', lease_key(e.l)) == 1
    live[e.l] = known
  end
  return known
end
local function drop(id)
  redis.call('zrem', QK, id)
  redis.call('hdel', EK, id)
end
-- -> capacity, version, and the drain flag beside them (`drain` is '1' while the
-- semaphore drains: an enqueue is refused and no waiter admitted)
local function config()
  local c = redis.call('hmget', CK, 'capacity', 'version', 'drain')
  if not c[1] then return nil, nil, false end
  return tonumber(c[1]), tonumber(c[2]), c[3] == '1'
end
-- Remove entry `id` (if there) for the client of `lease`; an entry of another client
-- is reported to its client. -> 1 if it was there
local function remove_entry(id, lease)
  -- The caller's own entry (ids are `lease.name.n`, and a lease has no dot): removed
  -- without reading it, as nobody else is told
  local own = lease ~= '' and string.sub(id, 1, #lease + 1) == lease .. '.'
  local e = nil
  if not own then
    e = entry(id)
  elseif redis.call('hdel', EK, id) == 1 then
    redis.call('zrem', QK, id)
    return 1
  end
  if not e then
    -- Its own client removes an id not made yet: an abandoned acquire whose enqueue
    -- is still on its way (sent on a connection its cancellation closed; another may
    -- overtake it). The id is never made after: a tombstone as long as the lease.
    local ttl = own and redis.call('pttl', lease_key(lease)) or -1
    if ttl > 0 then
      redis.call('set', tombstone_key(id), '1', 'PX', ttl)
    end
    return 0
  end
  drop(id)
  if e.l ~= lease then
    local box = P .. ':inbox:' .. e.l
    redis.call('rpush', box, cjson.encode({x = 'deleted', n = S, k = id}))
    ring(box)
  end
  return 1
end
-- The entry `e`, being admitted, gets its weight's lowest indices not in `used` (every
-- live holder's), if it asked for slots (`z`), each with a token from the counter.
-- (They are below the capacity: the holders and `e` weigh at most that.)
local function give_slots(e, used)
  if not e.z then return end
  local x, index = {}, 0
  for _ = 1, e.w do
    while used[index] do index = index + 1 end
    used[index] = true
    x[#x + 1] = index
    x[#x + 1] = redis.call('incr', P .. ':seq')
  end
  e.x = x
end
"""

_QUEUE = r"""
local function notify(id, e, cap, ver)
  local box = P .. ':inbox:' .. e.l
  local told = {x = 'admitted', n = S, k = id, c = cap, v = ver, z = e.x}
  redis.call('rpush', box, cjson.encode(told))
  local ttl = redis.call('pttl', lease_key(e.l))
  if ttl > 0 then redis.call('pexpire', box, ttl) end
  ring(box)
end
-- Job slots: `used` gets the indices the holder `e` holds.
local function note_slots(used, e)
  if e.x then
    for i = 1, #e.x, 2 do used[e.x[i]] = true end
  end
end
-- Admit the longest prefix that fits (dead entries on the way are removed), notifying
-- each newly admitted entry's client but `quiet` (the caller, who learns from the reply).
local function sweep(quiet)
  local ids = redis.call('zrange', QK, 0, 99)
  if #ids == 0 then return end -- (an empty queue: the capacity is not read)
  local cap, ver, drain = config()
  if not cap or drain then return end
  local total, start, used = 0, 0, {}
  while true do
    local kept = 0
    -- the block's entries in one read (a call per entry cost more than its decode);
    -- the walk usually stops after the holders and one waiter
    local raws = redis.call('hmget', EK, unpack(ids, 1, math.min(#ids, cap + 2)))
    for i, id in ipairs(ids) do
      local raw = raws[i]
      if raw == nil then raw = redis.call('hget', EK, id) end -- (past the first read)
      local e = raw and cjson.decode(raw) or nil
      if not alive(e) then
        drop(id)
      elseif e.h then
        total = total + e.w
        note_slots(used, e)
        kept = kept + 1
      elseif total + e.w <= cap then
        e.h = true
        e.s = now()
        give_slots(e, used)
        redis.call('hset', EK, id, cjson.encode(e))
        total = total + e.w
        kept = kept + 1
        if id ~= quiet then notify(id, e, cap, ver) end
      else
        return
      end
    end
    start = start + kept
    ids = redis.call('zrange', QK, start, start + 99)
    if #ids == 0 then return end
  end
end
-- The nearest live entry below `e`, nil when there is none (or only dead ones among the
-- 100 nearest). The dead entries passed are removed when that entry waits: behind a
-- waiter nothing is held (the held entries are a prefix), else they are left for a
-- sweep (a dead holder frees permits).
local function nearest_below(e)
  local below, passed = '(' .. e.t, {}
  for _ = 1, 100 do
    local found = redis.call('zrevrangebyscore', QK, below, '-inf', 'WITHSCORES', 'LIMIT', 0, 1)
    if #found == 0 then return nil end
    local x = entry(found[1])
    if alive(x) then
      if not x.h then
        for _, id in ipairs(passed) do drop(id) end
      end
      return x
    end
    passed[#passed + 1] = found[1]
    below = '(' .. found[2]
  end
  return nil
end
-- When a waiter should look again if nothing told it anything (milliseconds; -1: no
-- lease to time): at the expiry of its predecessor `pred`'s lease, or, for the head
-- (its predecessor holds), of the earliest lease among the holders. Renewed leases push
-- it back each time.
local function check_in(pred)
  if pred == nil then return -1 end
  local watched = {pred}
  if pred.h then
    watched = {}
    for _, hid in ipairs(redis.call('zrange', QK, 0, 199)) do
      local x = entry(hid)
      if not x or not x.h then break end
      watched[#watched + 1] = x
    end
  end
  local best = -1
  for _, x in ipairs(watched) do
    local ttl = redis.call('pttl', lease_key(x.l))
    if ttl >= 0 and (best < 0 or ttl < best) then best = ttl end
  end
  return best
end
-- The reply every queue step answers with, one string of integers:
-- 'order held capacity version later check_in [index1 token1 ...]'
-- (the job slots of a held entry that asked for them; no lower entry is listed: the
-- server decides admission). One bulk string costs the client a fraction of the
-- parsing of an array of seven. `pred`: a waiter's nearest live lower entry
-- (nearest_below), read after the sweep.
local function view(e, pred)
  local cap, ver = config()
  local later, held, check = 0, 0, -1
  if redis.call('zcount', QK, '(' .. e.t, '+inf') > 0 then later = 1 end
  if e.h then held = 1 else check = check_in(pred) end
  local out = string.format('%d %d %d %d %d %d', e.t, held, cap, ver, later, check)
  if e.h and e.x then
    for _, v in ipairs(e.x) do out = out .. ' ' .. string.format('%d', v) end
  end
  return out
end
-- Is `id` a live, admitted entry created with `token`? (a fenced transaction's fence)
local function fenced(id, token)
  local e = entry(id)
  return alive(e) and e.h and e.t == token
end
-- A fenced transaction's writes, (kind, key, value) from ARGV[first] on: all or none.
-- -> {'ok'} or {'conflict', key}
local function write_all(first)
  for i = first, #ARGV, 3 do
    local exists = redis.call('exists', ARGV[i + 1]) == 1
    if (ARGV[i] == 'create') == exists then return {'conflict', ARGV[i + 1]} end
  end
  for i = first, #ARGV, 3 do
    if ARGV[i] == 'delete' then
      redis.call('del', ARGV[i + 1])
    else
      redis.call('set', ARGV[i + 1], ARGV[i + 2])
    end
  end
  return {'ok'}
end
"""


class ScriptName(enum.Enum):
    """One script of :data:`SCRIPTS` (what a program asks the runner to evaluate)."""

    OPEN = "open"
    ENQUEUE = "enqueue"
    ENQUEUE_ALL = "enqueue_all"
    REMOVE_ALL = "remove_all"
    FENCE_ALL = "fence_all"
    CHECK = "check"
    REMOVE = "remove"
    SET_CAPACITY = "set_capacity"
    SET_DRAINING = "set_draining"
    RAMP_STEP = "ramp_step"
    STATUS = "status"
    CONFIG = "config"
    FENCE = "fence"
    RENEW = "renew"
    NEW_LEASE = "new_lease"
    END_LEASE = "end_lease"
    DELETE_SEMAPHORE = "delete_semaphore"
    REVOKE = "revoke"


# Tell every live client that opened the semaphore (a rare administrative event: the
# openers, not the waiters); a lease gone leaves the set.
_TELL_OPENERS = r"""
local function tell_openers(told)
  local OK = P .. ':s:' .. S .. ':open'
  local text = cjson.encode(told)
  for _, lease in ipairs(redis.call('smembers', OK)) do
    local ttl = redis.call('pttl', lease_key(lease))
    if ttl > 0 then
      local box = P .. ':inbox:' .. lease
      redis.call('rpush', box, text)
      redis.call('pexpire', box, ttl)
      ring(box)
    else
      redis.call('srem', OK, lease)
    end
  end
end
"""


@dataclass(frozen=True)
class _Parts:
    """A script's body in parts, by the functions each needs: ``bare`` none (it runs
    before any is made), ``entry`` the entry's (:data:`_HEAD`), ``queue`` the queue's
    too (:data:`_QUEUE`)."""

    bare: str = ""
    entry: str = ""
    queue: str = ""


_BODIES: dict[ScriptName, str | _Parts] = {
    # ARGV: P, S, capacity, lease. Creates the semaphore if it is missing; the lease
    # joins the semaphore's openers: a capacity change is told to each.
    # -> {capacity, version}
    ScriptName.OPEN: r"""
local cap, ver = config()
if not cap then
  cap = tonumber(ARGV[3])
  ver = redis.call('incr', P .. ':seq')
  redis.call('hset', CK, 'capacity', ARGV[3], 'version', ver)
end
opened_by(ARGV[4])
return {cap, ver}
""",
    # ARGV: P, S, id, lease, weight, owner, capacity to re-create with, '1' for job
    # slots (else ''), '1' to make the lease one of the openers (else: it is one).
    # The id is the client's: a retried enqueue whose first reply was lost finds its
    # entry instead of creating a second one.
    # -> view, or {'lost'} (the lease is gone)
    ScriptName.ENQUEUE: _Parts(
        # (no functions made yet: the config, the entry and the slots of an entry
        # admitted into an empty queue are read and made inline)
        bare=r"""
local id, lease = ARGV[3], ARGV[4]
if redis.call('exists', P .. ':lease:' .. lease) == 0 then return {'lost'} end
local c = redis.call('hmget', CK, 'capacity', 'version', 'drain')
local cap, ver = tonumber(c[1]), tonumber(c[2])
if not cap then
  cap, ver = tonumber(ARGV[7]), redis.call('incr', P .. ':seq')
  redis.call('hset', CK, 'capacity', ARGV[7], 'version', ver)
end
if c[3] == '1' then return {'draining'} end
if not redis.call('hget', EK, id) then
  if redis.call('exists', P .. ':s:' .. S .. ':t:' .. id) == 1 then return {'abandoned'} end
  local order = redis.call('incr', P .. ':seq')
  local w = tonumber(ARGV[5])
  -- An empty queue admits a weight that fits at once: no sweep or view to run (the
  -- same decision, as the uncontended acquire is the common case). The newest entry
  -- has nothing after it (orders come from the one counter).
  -- (ZRANGE, not ZCARD: the documented ACL user's commands stay the same)
  local first = w <= cap and #redis.call('zrange', QK, 0, 0) == 0
  local t = redis.call('time')
  local e = {w = w, l = lease, o = ARGV[6], h = first, t = order,
             s = tonumber(t[1]) + tonumber(t[2]) / 1000000}
  if ARGV[8] == '1' then
    e.z = true
    if first then
      -- (give_slots with no holder: the lowest indices, each with a token)
      local x = {}
      for index = 0, w - 1 do
        x[#x + 1] = index
        x[#x + 1] = redis.call('incr', P .. ':seq')
      end
      e.x = x
    end
  end
  redis.call('zadd', QK, order, id)
  redis.call('hset', EK, id, cjson.encode(e))
  if ARGV[9] == '1' then redis.call('sadd', P .. ':s:' .. S .. ':open', lease) end
  if first then  -- (the view, as `view` makes it)
    local out = string.format('%d 1 %d %d 0 -1', order, cap, ver)
    if e.x then
      for _, v in ipairs(e.x) do out = out .. ' ' .. string.format('%d', v) end
    end
    return out
  end
end
""",
        queue=r"""
local e = entry(id)
local pred = nearest_below(e)
-- Behind a live waiter nothing can be admitted (a sweep stops at the first waiter that
-- does not fit; a dead holder ahead is the head's to find, at its check-in): no sweep
if e.h or pred == nil or pred.h then
  sweep(id)
  e = entry(id)
  if not e.h then pred = nearest_below(e) end
end
return view(e, pred)
""",
    ),
    # ARGV: P, '', id, lease, owner, then per semaphore: name, weight, capacity to
    # re-create with. One entry `id` in every queue, all with one order from the
    # counter (their token): any two requests are ordered alike in every queue, and no
    # other script runs in between. A retry after a lost reply finds its entries (all
    # or none were made); if some were removed since, the rest go too and the client
    # tries again with a new id. -> {view per semaphore}, {'lost'} or {'partial'}
    ScriptName.ENQUEUE_ALL: r"""
local id, lease = ARGV[3], ARGV[4]
if redis.call('exists', lease_key(lease)) == 0 then return {'lost'} end
local found, n = 0, 0
for i = 6, #ARGV, 3 do
  use(ARGV[i])
  n = n + 1
  if entry(id) then found = found + 1 end
end
if found > 0 and found < n then
  for i = 6, #ARGV, 3 do
    use(ARGV[i])
    drop(id)
    sweep(nil)
  end
  return {'partial'}
end
if found == 0 then
  for i = 6, #ARGV, 3 do
    use(ARGV[i])
    if redis.call('exists', tombstone_key(id)) == 1 then return {'abandoned'} end
    if select(3, config()) then return {'draining', ARGV[i]} end
  end
  for i = 6, #ARGV, 3 do
    use(ARGV[i])
    if not config() then
      local ver = redis.call('incr', P .. ':seq')
      redis.call('hset', CK, 'capacity', ARGV[i + 2], 'version', ver)
    end
  end
  local order = redis.call('incr', P .. ':seq')
  for i = 6, #ARGV, 3 do
    use(ARGV[i])
    local e = {w = tonumber(ARGV[i + 1]), l = lease, o = ARGV[5], h = false, s = now(), t = order}
    redis.call('zadd', QK, order, id)
    redis.call('hset', EK, id, cjson.encode(e))
    opened_by(lease)
  end
end
local out = {}
for i = 6, #ARGV, 3 do
  use(ARGV[i])
  sweep(id)
  local e = entry(id)
  out[#out + 1] = view(e, not e.h and nearest_below(e) or nil)
end
return out
""",
    # ARGV: P, '', the caller's lease, then (semaphore, id) pairs: each entry removed as
    # REMOVE does (an id '' removes nothing), then every queue swept. -> how many entries
    # were there
    ScriptName.REMOVE_ALL: r"""
local found = 0
for i = 4, #ARGV, 2 do
  use(ARGV[i])
  if ARGV[i + 1] ~= '' then found = found + remove_entry(ARGV[i + 1], ARGV[3]) end
end
for i = 4, #ARGV, 2 do
  use(ARGV[i])
  sweep(nil)
end
return found
""",
    # ARGV: P, S, id. A waiter's look when nothing told it anything: admits what fits
    # (notifying everyone, the caller too), removes dead entries ahead.
    # -> {'gone'}, {'held'} or {'wait', check_in}
    ScriptName.CHECK: r"""
local id = ARGV[3]
local e = entry(id)
if not alive(e) then return {'gone'} end
sweep(nil)
e = entry(id)
if e.h then return {'held'} end
return {'wait', check_in(nearest_below(e))}
""",
    # ARGV: P, S, id ('' to sweep only), the caller's lease ('' for an operator), and
    # 'later' to leave the sweep to a script of its own (an abandon's: see
    # RedisQueue.abandon). An entry removed by anyone but its own client is
    # reported to that client. -> 1 if the entry was there
    ScriptName.REMOVE: _Parts(
        # The caller's own entry (ids are `lease.name.n`, and a lease has no dot) is
        # removed without reading it, before any function is made; (an empty queue
        # admits nothing: the release that empties it returns there)
        bare=r"""
local found = 0
local own = ARGV[4] ~= '' and string.sub(ARGV[3], 1, #ARGV[4] + 1) == ARGV[4] .. '.'
if own and redis.call('hdel', EK, ARGV[3]) == 1 then
  redis.call('zrem', QK, ARGV[3])
  found = 1
  if ARGV[5] == 'later' or #redis.call('zrange', QK, 0, 0) == 0 then return 1 end
end
""",
        entry=r"""
if found == 0 and ARGV[3] ~= '' then found = remove_entry(ARGV[3], ARGV[4]) end
if ARGV[5] == 'later' or #redis.call('zrange', QK, 0, 0) == 0 then return found end
""",
        queue=r"""
sweep(nil)
return found
""",
    ),
    # ARGV: P, S, capacity. Every live client that opened the semaphore is told (a
    # rare administrative event: the openers, not the waiters). -> the new version
    ScriptName.SET_CAPACITY: _TELL_OPENERS
    + r"""
local ver = redis.call('incr', P .. ':seq')
redis.call('hset', CK, 'capacity', ARGV[3], 'version', ver)
redis.call('hdel', CK, 'ramp')  -- (a plain capacity change cancels a ramp)
sweep(nil)
tell_openers({x = 'capacity', n = S, c = tonumber(ARGV[3]), v = ver})
return ver
""",
    # ARGV: P, S, capacity, version, plan ('' for none). A capacity ramp's step: the
    # capacity and the plan beside it, only over `version` (the config as the ramp read
    # it), then as SET_CAPACITY. -> the new version, 0 when the config changed meanwhile
    # (nothing written), {} when missing
    ScriptName.RAMP_STEP: _TELL_OPENERS
    + r"""
local cap, ver = config()
if not cap then return {} end
if ver ~= tonumber(ARGV[4]) then return 0 end
ver = redis.call('incr', P .. ':seq')
redis.call('hset', CK, 'capacity', ARGV[3], 'version', ver)
if ARGV[5] == '' then
  redis.call('hdel', CK, 'ramp')
else
  redis.call('hset', CK, 'ramp', ARGV[5])
end
sweep(nil)
tell_openers({x = 'capacity', n = S, c = tonumber(ARGV[3]), v = ver})
return ver
""",
    # ARGV: P, S, '1' to drain (else: resume). Stored beside the capacity with a new
    # version; the openers are told as of a capacity change (with `d`, the flag); a
    # resume admits the waiters that fit. -> {capacity, the new version}, {} when missing
    ScriptName.SET_DRAINING: _TELL_OPENERS
    + r"""
local cap = config()
if not cap then return {} end
local ver = redis.call('incr', P .. ':seq')
redis.call('hset', CK, 'drain', ARGV[3], 'version', ver)
sweep(nil)
tell_openers({x = 'capacity', n = S, c = cap, v = ver, d = ARGV[3] == '1'})
return {cap, ver}
""",
    # ARGV: P, S. -> {capacity, version}, {} when missing (reads only: an open without
    # create, and the look of a reader at the capacity)
    ScriptName.CONFIG: r"""
local cap, ver = config()
if not cap then return {} end
return {cap, ver}
""",
    # ARGV: P, S. -> {} when missing, else {capacity, version, draining (1 or 0),
    # ramp plan ('' for none), id1, owner1, w1, t1, h1, s1, slots1, ...} (live entries
    # in queue order, slots as {index, token, ...}; reads only)
    ScriptName.STATUS: r"""
local cap, ver, drain = config()
if not cap then return {} end
local out = {cap, ver, drain and 1 or 0, redis.call('hget', CK, 'ramp') or ''}
for _, id in ipairs(redis.call('zrange', QK, 0, -1)) do
  local e = entry(id)
  if alive(e) then
    local h = 0
    if e.h then h = 1 end
    out[#out + 1] = id
    out[#out + 1] = e.o
    out[#out + 1] = e.w
    out[#out + 1] = e.t
    out[#out + 1] = h
    out[#out + 1] = tostring(e.s)
    out[#out + 1] = e.x or {}
    out[#out + 1] = e.r and 1 or 0
  end
end
return out
""",
    # ARGV: P, S, id, token, 'force' to remove the entry (else: ask). Only the live held
    # entry `id` created with `token`. Asking marks it (`r`) and tells its client
    # (`"x": "revoke"`); forcing removes it as REMOVE does for an operator (its client
    # is told `"x": "deleted"`) and admits what fits. -> 1, or 0 when it is not there
    ScriptName.REVOKE: r"""
local id = ARGV[3]
local e = entry(id)
if not alive(e) or not e.h or e.t ~= tonumber(ARGV[4]) then return 0 end
if ARGV[5] == 'force' then
  remove_entry(id, '')
  sweep(nil)
  return 1
end
e.r = true
redis.call('hset', EK, id, cjson.encode(e))
local box = P .. ':inbox:' .. e.l
redis.call('rpush', box, cjson.encode({x = 'revoke', n = S, k = id}))
local ttl = redis.call('pttl', lease_key(e.l))
if ttl > 0 then redis.call('pexpire', box, ttl) end
ring(box)
return 1
""",
    # ARGV: P, S, id, token, then (kind, key, value) per write.
    # -> {'ok'}, {'lost'} or {'conflict', key}; all writes or none
    ScriptName.FENCE: r"""
if not fenced(ARGV[3], tonumber(ARGV[4])) then return {'lost'} end
return write_all(5)
""",
    # ARGV: P, '', token, n, then n (semaphore, id) pairs, then (kind, key, value) per
    # write: FENCE over every entry of a multi-permit (they share one token).
    # -> {'ok'}, {'lost'} or {'conflict', key}; all writes or none
    ScriptName.FENCE_ALL: r"""
local token, n = tonumber(ARGV[3]), tonumber(ARGV[4])
for i = 5, 4 + 2 * n, 2 do
  use(ARGV[i])
  if not fenced(ARGV[i + 1], token) then return {'lost'} end
end
return write_all(5 + 2 * n)
""",
    # ARGV: P, '', lease, ttl ms. Never re-creates an expired lease (its entries are
    # dead). -> {1, the counter P:seq} renewed (the counter for history.py, in the same
    # round trip), 0 gone
    ScriptName.RENEW: r"""
if redis.call('pexpire', lease_key(ARGV[3]), ARGV[4]) == 0 then return 0 end
redis.call('pexpire', P .. ':inbox:' .. ARGV[3], ARGV[4])
return {1, tonumber(redis.call('get', P .. ':seq') or '0')}
""",
    # ARGV: P, S. Deletes the capacity and the queue; the data keys go from the client
    # (SCAN). -> 1
    # ARGV: P, '', lease, ttl ms, owner (the lease's value). -> 1 made, 0 taken
    ScriptName.NEW_LEASE: r"""
return redis.call('set', lease_key(ARGV[3]), ARGV[5], 'NX', 'PX', ARGV[4]) and 1 or 0
""",
    # ARGV: P, '', lease. -> 1
    ScriptName.END_LEASE: r"""
redis.call('del', lease_key(ARGV[3]), P .. ':inbox:' .. ARGV[3])
return 1
""",
    ScriptName.DELETE_SEMAPHORE: r"""
redis.call('del', CK, QK, EK, P .. ':s:' .. S .. ':open')
return 1
""",
}

#: The scripts that only read: run as ``EVALSHA_RO``, so a user with read-only rights
#: may run them (docs/operations.md, read-only monitoring) and Redis refuses any write.
READ_ONLY = frozenset({ScriptName.STATUS, ScriptName.CONFIG})


def _source(body: str | _Parts) -> str:
    """A script's whole source: its parts, each after the functions it needs (a body
    given as a string needs them all)."""
    parts = body if isinstance(body, _Parts) else _Parts(queue=body)
    return _PRELUDE + parts.bare + _HEAD + parts.entry + _QUEUE + parts.queue


#: The source of each script.
SCRIPTS: dict[ScriptName, str] = {name: _source(body) for name, body in _BODIES.items()}

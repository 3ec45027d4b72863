"""The library's tables and functions in PostgreSQL, as SQL text, and how they are made.

Everything lives in one schema of its own (``?schema=``, ``semaphore_recipes`` by
default): the semaphores, their entries, the clients' sessions, job slot records, the
key-value data of fenced transactions, a sequence of fencing tokens, and one function
per protocol step, so that each step is one statement (one round trip) whose decision is
taken in the database with the semaphore's row locked. ``SCHEMA_VERSION`` is recorded
in the schema: a client whose release knows a higher one runs :func:`schema_sql`
again on connect (it is idempotent: tables made if missing, functions replaced).
``semaphore-recipes sql-schema`` prints it for migration tools.

Admission (``admit``): with the semaphore's row locked, entries of sessions expired by
the server's clock are deleted, then the waiting entries are taken in token order
(from the row's ``head``, past the entries deleted since the last vacuum) while their
weights fit (the first that does not fit blocks those after it), marked held, and each
admitted entry's client is sent one notification on its channel (``pg_notify``,
delivered at commit). Enqueues lock the same row, so tokens
are handed out in commit order: the order admission reads is the order of arrival.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VERSION", "capacity_channel", "schema_sql"]

#: the version of the tables and functions below (``<schema>.schema_version``)
SCHEMA_VERSION = 4

_TABLES = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.schema_version (version integer PRIMARY KEY);
CREATE SEQUENCE IF NOT EXISTS {s}.tokens;
CREATE TABLE IF NOT EXISTS {s}.sessions (
    id text PRIMARY KEY,
    owner text NOT NULL,
    channel text NOT NULL,
    timeout_ms integer NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS {s}.semaphores (
    name text PRIMARY KEY,
    capacity integer NOT NULL CHECK (capacity > 0),
    version bigint NOT NULL,
    -- the weight of the held entries and the number of waiting ones, kept by every
    -- step (dead entries included until a sweep), so that an uncontended acquire or
    -- release reads no other row; admit() counts them afresh
    used bigint NOT NULL DEFAULT 0,
    waiting bigint NOT NULL DEFAULT 0,
    -- every waiting entry's token is at least this: admit() reads the queue from here,
    -- past the entries admitted and deleted since the last vacuum
    head bigint NOT NULL DEFAULT 0,
    -- the drain flag beside the capacity: enqueues refused, nobody admitted (version 3)
    draining boolean NOT NULL DEFAULT false,
    -- a capacity ramp's plan (JSON) while one is under way, else null (version 4)
    ramp text
);
ALTER TABLE {s}.semaphores ADD COLUMN IF NOT EXISTS draining boolean NOT NULL DEFAULT false;
ALTER TABLE {s}.semaphores ADD COLUMN IF NOT EXISTS ramp text;
CREATE TABLE IF NOT EXISTS {s}.entries (
    -- (no foreign key to semaphores: every step holds the semaphore's row locked, and
    -- delete_semaphore deletes the entries; a key's check would cost each enqueue)
    semaphore text NOT NULL,
    id text NOT NULL,
    session text NOT NULL,
    owner text NOT NULL,
    weight integer NOT NULL CHECK (weight > 0),
    token bigint NOT NULL,
    held boolean NOT NULL DEFAULT false,
    since double precision NOT NULL,
    -- a revoke request on a holder (Semaphore.revoke, version 4): admit() never reads it
    revoke_requested boolean NOT NULL DEFAULT false,
    PRIMARY KEY (semaphore, id)
);
ALTER TABLE {s}.entries ADD COLUMN IF NOT EXISTS revoke_requested boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS entries_queue ON {s}.entries (semaphore, token);
CREATE INDEX IF NOT EXISTS entries_session ON {s}.entries (session);
CREATE TABLE IF NOT EXISTS {s}.slots (
    semaphore text NOT NULL,
    idx integer NOT NULL,
    entry text NOT NULL,
    token bigint NOT NULL,
    PRIMARY KEY (semaphore, idx),
    FOREIGN KEY (semaphore, entry) REFERENCES {s}.entries (semaphore, id) ON DELETE CASCADE
);
CREATE INDEX IF NOT EXISTS slots_entry ON {s}.slots (semaphore, entry);
CREATE TABLE IF NOT EXISTS {s}.data (key text PRIMARY KEY, value bytea NOT NULL);
-- ids of entries their own client removed before their create arrived (a create sent,
-- then abandoned: the two statements travel on different connections)
CREATE TABLE IF NOT EXISTS {s}.removed (
    id text PRIMARY KEY,
    session text NOT NULL
);
"""

# Every function plans with enable_seqscan off: each of its statements is an index
# lookup, and between two vacuums of these tables (a row per acquire, deleted at its
# release) their statistics say "empty", so the planner would pick sequential scans that
# read every dead row left since (docs/design.md, section 11). And without JIT: the
# penalty enable_seqscan adds to a plan's cost would have each statement compiled.
_FUNCTIONS = r"""
-- Is the session alive by the server's clock?
CREATE OR REPLACE FUNCTION {s}.live(sess text) RETURNS boolean
LANGUAGE sql SET enable_seqscan = off SET jit = off AS $$
    SELECT EXISTS (SELECT 1 FROM {s}.sessions
                   WHERE id = sess AND expires_at > clock_timestamp())
$$;

-- Sweep and admit (the semaphore's row is locked by the caller): entries of expired
-- sessions are deleted, then the waiting entries that fit, in token order from `head`,
-- are held; every admitted entry but `quiet` (the caller's own, told in its reply) is
-- notified on its client's channel. The counters follow every change.
CREATE OR REPLACE FUNCTION {s}.admit(sem text, quiet text) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    cap integer;
    ver bigint;
    used_now bigint;
    waiting_now bigint;
    head_now bigint;
    drain boolean;
    expired text[];
    r record;
BEGIN
    SELECT capacity, version, used, waiting, head, draining
        INTO cap, ver, used_now, waiting_now, head_now, drain
        FROM {s}.semaphores WHERE name = sem;
    expired := ARRAY(SELECT id FROM {s}.sessions WHERE expires_at <= clock_timestamp());
    IF cardinality(expired) > 0 THEN
        FOR r IN DELETE FROM {s}.entries WHERE semaphore = sem AND session = ANY (expired)
                 RETURNING held, weight LOOP
            IF r.held THEN
                used_now := used_now - r.weight;
            ELSE
                waiting_now := waiting_now - 1;
            END IF;
        END LOOP;
    END IF;
    IF waiting_now > 0 AND NOT drain THEN
        FOR r IN SELECT e.id, e.weight, e.token, x.channel FROM {s}.entries e
                 JOIN {s}.sessions x ON x.id = e.session
                 WHERE e.semaphore = sem AND NOT e.held AND e.token >= head_now
                 ORDER BY e.token LOOP
            IF used_now + r.weight > cap THEN
                head_now := r.token;  -- the head of the line waits
                EXIT;
            END IF;
            used_now := used_now + r.weight;
            waiting_now := waiting_now - 1;
            head_now := r.token + 1;
            UPDATE {s}.entries SET held = true, since = extract(epoch FROM clock_timestamp())
                WHERE semaphore = sem AND id = r.id;
            IF r.id <> quiet THEN
                PERFORM pg_notify(r.channel,
                                  json_build_array('admitted', sem, r.id, cap, ver)::text);
            END IF;
        END LOOP;
    END IF;
    UPDATE {s}.semaphores SET used = used_now, waiting = waiting_now, head = head_now
        WHERE name = sem;
END $$;

-- The counters counted afresh from the entries (after a change that did not keep them).
CREATE OR REPLACE FUNCTION {s}.recount(sem text) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
BEGIN
    UPDATE {s}.semaphores s SET
        used = (SELECT coalesce(sum(weight), 0) FROM {s}.entries WHERE semaphore = sem AND held),
        waiting = (SELECT count(*) FROM {s}.entries WHERE semaphore = sem AND NOT held),
        head = 0
        WHERE s.name = sem;
END $$;

-- An entry as its client needs it: ["ok", token, held, capacity, version, check_in_ms]
-- (check_in_ms: when the first other live session would expire, -1 when none; the
-- sessions of the whole schema, not only those ahead in this queue, whose index would
-- have to be read past every entry deleted since the last vacuum: a look too early does
-- no harm, and admit() has just swept the expired ones of this queue).
CREATE OR REPLACE FUNCTION {s}.view(sem text, eid text) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    e record;
    cap integer;
    ver bigint;
    check_in bigint;
BEGIN
    SELECT capacity, version INTO cap, ver FROM {s}.semaphores WHERE name = sem;
    SELECT token, held, session INTO e FROM {s}.entries WHERE semaphore = sem AND id = eid;
    IF NOT FOUND THEN
        RETURN json_build_array('gone')::text;
    END IF;
    check_in := -1;
    IF NOT e.held THEN
        SELECT CASE WHEN min(x.expires_at) IS NULL THEN -1 ELSE greatest(0, (extract(
                   epoch FROM min(x.expires_at) - clock_timestamp()) * 1000)::bigint) END
            INTO check_in
            FROM {s}.sessions x
            WHERE x.id <> e.session AND x.expires_at > clock_timestamp();
    END IF;
    RETURN json_build_array('ok', e.token, e.held, cap, ver, check_in)::text;
END $$;

CREATE OR REPLACE FUNCTION {s}.open_session(sess text, who text, chan text, ms integer)
RETURNS void LANGUAGE sql SET enable_seqscan = off SET jit = off AS $$
    -- (a session row goes with its last entry: admissions find dead entries by it)
    DELETE FROM {s}.sessions x WHERE x.expires_at < clock_timestamp()
        AND NOT EXISTS (SELECT 1 FROM {s}.entries e WHERE e.session = x.id);
    DELETE FROM {s}.removed r
        WHERE NOT EXISTS (SELECT 1 FROM {s}.sessions x WHERE x.id = r.session);
    INSERT INTO {s}.sessions VALUES (sess, who, chan, ms,
                                     clock_timestamp() + ms * interval '1 millisecond')
        ON CONFLICT (id) DO NOTHING;
$$;

-- Renew: false when the session is gone or expired (then it is never renewed again).
CREATE OR REPLACE FUNCTION {s}.renew(sess text) RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
BEGIN
    UPDATE {s}.sessions SET expires_at = clock_timestamp() + timeout_ms * interval '1 millisecond'
        WHERE id = sess AND expires_at > clock_timestamp();
    RETURN FOUND;
END $$;

-- The session ends: its entries go and each of their semaphores admits what fits.
CREATE OR REPLACE FUNCTION {s}.end_session(sess text) RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    sem text;
BEGIN
    UPDATE {s}.sessions SET expires_at = '-infinity' WHERE id = sess;
    FOR sem IN SELECT name FROM {s}.semaphores WHERE name IN
               (SELECT semaphore FROM {s}.entries WHERE session = sess)
               ORDER BY name FOR UPDATE LOOP
        PERFORM {s}.admit(sem, '');
    END LOOP;
    DELETE FROM {s}.sessions WHERE id = sess;
    DELETE FROM {s}.removed WHERE session = sess;
END $$;

-- [capacity, version], creating the semaphore with `requested` if it is missing and
-- that is not null; null when missing.
CREATE OR REPLACE FUNCTION {s}.open_semaphore(sem text, requested integer) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    srow record;
BEGIN
    IF requested IS NOT NULL THEN
        INSERT INTO {s}.semaphores VALUES (sem, requested, nextval('{s}.tokens'))
            ON CONFLICT (name) DO NOTHING;
    END IF;
    SELECT capacity, version INTO srow FROM {s}.semaphores WHERE name = sem;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    RETURN json_build_array(srow.capacity, srow.version)::text;
END $$;

-- The new capacity's version (null: no such semaphore); waiters that now fit admitted;
-- a ramp plan dropped (a plain change cancels it).
CREATE OR REPLACE FUNCTION {s}.set_capacity(sem text, cap integer) RETURNS bigint
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    ver bigint;
BEGIN
    UPDATE {s}.semaphores SET capacity = cap, ramp = NULL, version = nextval('{s}.tokens')
        WHERE name = sem RETURNING version INTO ver;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM {s}.admit(sem, '');
    -- (rare: every client of the schema hears of it, on the schema's channel)
    PERFORM pg_notify({capacity_channel}, json_build_array('capacity', sem, '{s}', cap, ver)::text);
    RETURN ver;
END $$;

-- A capacity ramp's step: the capacity and the plan beside it (plan '': none), only
-- over version `expected` (the config as the ramp read it), then as set_capacity: the
-- new version; 0 when the version moved meanwhile (nothing written); null: no semaphore.
CREATE OR REPLACE FUNCTION {s}.ramp_step(sem text, cap integer, expected bigint, plan text)
RETURNS bigint LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    ver bigint;
BEGIN
    UPDATE {s}.semaphores
        SET capacity = cap, ramp = nullif(plan, ''), version = nextval('{s}.tokens')
        WHERE name = sem AND version = expected RETURNING version INTO ver;
    IF NOT FOUND THEN
        IF EXISTS (SELECT 1 FROM {s}.semaphores WHERE name = sem) THEN
            RETURN 0;
        END IF;
        RETURN NULL;
    END IF;
    PERFORM {s}.admit(sem, '');
    PERFORM pg_notify({capacity_channel}, json_build_array('capacity', sem, '{s}', cap, ver)::text);
    RETURN ver;
END $$;

-- Set or clear the drain flag beside the capacity, with a new version: [capacity,
-- version] (null: no such semaphore); a resume admits the waiters that fit; every client
-- of the schema hears of it as of a capacity change, with the flag.
CREATE OR REPLACE FUNCTION {s}.set_draining(sem text, drain boolean) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    cap integer;
    ver bigint;
BEGIN
    UPDATE {s}.semaphores SET draining = drain, version = nextval('{s}.tokens')
        WHERE name = sem RETURNING capacity, version INTO cap, ver;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM {s}.admit(sem, '');
    PERFORM pg_notify({capacity_channel},
                      json_build_array('capacity', sem, '{s}', cap, ver, drain)::text);
    RETURN json_build_array(cap, ver)::text;
END $$;

-- Enqueue (or find again, after a lost reply) the entry `eid`: its view, or
-- ["missing"] (no semaphore), ["draining"] (it drains: nothing was made), ["lost"] (our
-- session expired: nothing was made), ["gone"] (the id was abandoned). An entry that
-- fits with nobody waiting is held at once (a dead holder only makes it not fit: the
-- general path then sweeps).
CREATE OR REPLACE FUNCTION {s}.enqueue(sem text, eid text, sess text, who text, w integer)
RETURNS text LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    cap integer;
    ver bigint;
    alive boolean;
    abandoned boolean;
    used_now bigint;
    waiting_now bigint;
    tok bigint;
    fits boolean;
    drain boolean;
BEGIN
    SELECT capacity, version, used, waiting, draining INTO cap, ver, used_now, waiting_now, drain
        FROM {s}.semaphores WHERE name = sem FOR UPDATE;
    IF NOT FOUND THEN
        RETURN '["missing"]';
    END IF;
    IF drain THEN  -- (nothing made: the client fails with Draining)
        RETURN '["draining"]';
    END IF;
    -- (a statement of its own, after the lock: its snapshot sees what the step that held
    -- the lock before committed, an abandon's record of this id among it)
    SELECT EXISTS (SELECT 1 FROM {s}.sessions WHERE id = sess AND expires_at > clock_timestamp()),
           EXISTS (SELECT 1 FROM {s}.removed WHERE id = eid)
        INTO alive, abandoned;
    IF NOT alive THEN
        RETURN '["lost"]';
    END IF;
    IF abandoned THEN
        RETURN '["gone"]';
    END IF;
    tok := nextval('{s}.tokens');
    fits := waiting_now = 0 AND used_now + w <= cap;
    WITH made AS (
        INSERT INTO {s}.entries VALUES (sem, eid, sess, who, w, tok, fits,
                                        extract(epoch FROM clock_timestamp()))
            ON CONFLICT (semaphore, id) DO NOTHING RETURNING held
    )
    UPDATE {s}.semaphores SET used = used + CASE WHEN made.held THEN w ELSE 0 END,
                              waiting = waiting + CASE WHEN made.held THEN 0 ELSE 1 END
        FROM made WHERE name = sem;
    IF FOUND AND fits THEN
        RETURN json_build_array('ok', tok, true, cap, ver, -1)::text;
    END IF;
    PERFORM {s}.admit(sem, eid);  -- (also a retry's: its entry was made before)
    RETURN {s}.view(sem, eid);
END $$;

-- Several semaphores at once: one token for every entry, rows locked in name order.
CREATE OR REPLACE FUNCTION {s}.enqueue_all(eid text, sess text, who text, sems text[],
                                           weights integer[]) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    tok bigint;
    made integer;
    views text[] := '{{}}';
BEGIN
    PERFORM 1 FROM {s}.semaphores WHERE name = ANY (sems) ORDER BY name FOR UPDATE;
    IF (SELECT count(*) FROM {s}.semaphores WHERE name = ANY (sems)) < cardinality(sems) THEN
        RETURN json_build_array('missing')::text;
    END IF;
    IF EXISTS (SELECT 1 FROM {s}.semaphores WHERE name = ANY (sems) AND draining) THEN
        RETURN json_build_array('draining', (SELECT min(name) FROM {s}.semaphores
                                             WHERE name = ANY (sems) AND draining))::text;
    END IF;
    IF NOT {s}.live(sess) THEN
        RETURN json_build_array('lost')::text;
    END IF;
    IF EXISTS (SELECT 1 FROM {s}.removed WHERE id = eid) THEN
        RETURN json_build_array('gone')::text;
    END IF;
    SELECT count(*) INTO made FROM {s}.entries WHERE id = eid AND semaphore = ANY (sems);
    IF made = 0 THEN
        tok := nextval('{s}.tokens');
        FOR i IN 1 .. cardinality(sems) LOOP
            INSERT INTO {s}.entries VALUES (sems[i], eid, sess, who, weights[i], tok, false,
                                            extract(epoch FROM clock_timestamp()));
            UPDATE {s}.semaphores SET waiting = waiting + 1 WHERE name = sems[i];
        END LOOP;
    ELSIF made < cardinality(sems) THEN  -- some died with a sweep: none may stay
        DELETE FROM {s}.entries WHERE id = eid AND semaphore = ANY (sems);
        FOR i IN 1 .. cardinality(sems) LOOP
            PERFORM {s}.recount(sems[i]);
        END LOOP;
        RETURN json_build_array('partial')::text;
    END IF;
    FOR i IN 1 .. cardinality(sems) LOOP
        PERFORM {s}.admit(sems[i], eid);
    END LOOP;
    FOR i IN 1 .. cardinality(sems) LOOP
        views := views || {s}.view(sems[i], eid);
    END LOOP;
    RETURN '["ok",' || array_to_string(views, ',') || ']';
END $$;

-- A waiter's look: sweep and admit (an admission of `eid` is in the reply), its view.
CREATE OR REPLACE FUNCTION {s}.check(sem text, eid text) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
BEGIN
    PERFORM 1 FROM {s}.semaphores WHERE name = sem FOR UPDATE;
    IF NOT FOUND THEN
        RETURN json_build_array('gone')::text;
    END IF;
    PERFORM {s}.admit(sem, eid);
    RETURN {s}.view(sem, eid);
END $$;

-- Remove entries (ours, or an operator's pick) from their semaphores, rows locked in
-- name order, then admit what fits in each. The client of an entry removed by someone
-- else (`by` is the remover's session) is told. Without `sweep`, nothing is admitted (an
-- abandoned acquire's client admits with `check` once the acquire is over).
CREATE OR REPLACE FUNCTION {s}.remove(sems text[], eids text[], by text, sweep boolean)
RETURNS void
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    sem text;
    r record;
    gone text[];
    mine text[];
    one text;
    freed bigint;
    left_queue bigint;
    waiting_now bigint;
BEGIN
    FOR sem IN SELECT name FROM {s}.semaphores WHERE name = ANY (sems)
               ORDER BY name FOR UPDATE LOOP
        gone := '{{}}';
        freed := 0;
        left_queue := 0;
        mine := ARRAY(SELECT u.e FROM unnest(sems, eids) AS u(s, e) WHERE u.s = sem);
        FOREACH one IN ARRAY mine LOOP
            -- (one id at a time: the primary key's lookup, never a scan of the queue's
            -- index, which holds every entry deleted since the last vacuum)
            DELETE FROM {s}.entries WHERE semaphore = sem AND id = one
                RETURNING id, session, held, weight INTO r;
            CONTINUE WHEN NOT FOUND;
            gone := gone || r.id;
            IF r.held THEN
                freed := freed + r.weight;
            ELSE
                left_queue := left_queue + 1;
            END IF;
            IF r.session <> by THEN
                PERFORM pg_notify(x.channel, json_build_array('deleted', sem, r.id, 0, 0)::text)
                    FROM {s}.sessions x WHERE x.id = r.session;
            END IF;
        END LOOP;
        IF by <> '' AND cardinality(gone) < cardinality(mine) THEN
            -- our own ids not made yet: their create, if it comes, is refused
            INSERT INTO {s}.removed
                SELECT m, by FROM unnest(mine) AS m WHERE m <> ALL (gone)
                ON CONFLICT (id) DO NOTHING;
        END IF;
        UPDATE {s}.semaphores SET used = used - freed, waiting = waiting - left_queue
            WHERE name = sem RETURNING waiting INTO waiting_now;
        IF sweep AND waiting_now > 0 THEN
            PERFORM {s}.admit(sem, '');
        END IF;
    END LOOP;
END $$;

-- Ask the live held entry `eid` created with `tok` to give its permits back: the flag
-- set and its client told on its channel (["revoke", ...]); with `force`, remove it as
-- an operator's remove does (its client told ["deleted", ...]) and admit what fits.
-- -> 'true', or 'false' when there is no such entry (JSON, as the steps answer)
CREATE OR REPLACE FUNCTION {s}.revoke(sem text, eid text, tok bigint, force boolean)
RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    r record;
BEGIN
    PERFORM 1 FROM {s}.semaphores WHERE name = sem FOR UPDATE;
    IF NOT FOUND THEN
        RETURN 'false';
    END IF;
    SELECT e.session, x.channel INTO r FROM {s}.entries e
        JOIN {s}.sessions x ON x.id = e.session
        WHERE e.semaphore = sem AND e.id = eid AND e.token = tok AND e.held
            AND x.expires_at > clock_timestamp();
    IF NOT FOUND THEN
        RETURN 'false';
    END IF;
    IF force THEN
        PERFORM {s}.remove(ARRAY[sem], ARRAY[eid], '', true);
        RETURN 'true';
    END IF;
    UPDATE {s}.entries SET revoke_requested = true WHERE semaphore = sem AND id = eid;
    PERFORM pg_notify(r.channel, json_build_array('revoke', sem, eid, 0, 0)::text);
    RETURN 'true';
END $$;

-- [capacity, version, [[id, owner, weight, token, held, since, [slot, ...],
-- revoke_requested], ...], draining, ramp plan or null] in queue order, after a sweep;
-- null when there is no such semaphore.
CREATE OR REPLACE FUNCTION {s}.status(sem text) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    srow record;
BEGIN
    SELECT capacity, version, draining, ramp INTO srow FROM {s}.semaphores
        WHERE name = sem FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    PERFORM {s}.admit(sem, '');
    RETURN (SELECT json_build_array(srow.capacity, srow.version,
                coalesce(json_agg(json_build_array(e.id, e.owner, e.weight, e.token, e.held,
                    e.since, (SELECT coalesce(json_agg(l.idx ORDER BY l.idx), '[]')
                              FROM {s}.slots l WHERE l.semaphore = sem AND l.entry = e.id),
                    e.revoke_requested)
                    ORDER BY e.token), '[]'), srow.draining, srow.ramp)::text
            FROM {s}.entries e WHERE e.semaphore = sem);
END $$;

-- The fence: every (semaphore, entry) is there with `tok`, held, its session alive; the
-- entries are locked (FOR SHARE) until the caller's transaction ends, so an admission
-- that would delete one of them waits for that commit.
CREATE OR REPLACE FUNCTION {s}.fence(sems text[], eids text[], tok bigint) RETURNS boolean
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    n integer;
BEGIN
    SELECT count(*) INTO n FROM (
        SELECT 1 FROM {s}.entries e JOIN unnest(sems, eids) AS u(s, i)
            ON e.semaphore = u.s AND e.id = u.i
        WHERE e.token = tok AND e.held AND {s}.live(e.session)
        FOR SHARE OF e) AS locked;
    RETURN n = cardinality(sems);
END $$;

-- A fenced key-value write in one statement: 'ok', 'lost' (the fence failed) or
-- 'conflict:<key>' (a write's condition failed); nothing is written but on 'ok'.
CREATE OR REPLACE FUNCTION {s}.fenced_write(sems text[], eids text[], tok bigint,
                                            kinds text[], keys text[], vals bytea[])
RETURNS text LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    present boolean;
BEGIN
    IF NOT {s}.fence(sems, eids, tok) THEN
        RETURN 'lost';
    END IF;
    FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
        present := EXISTS (SELECT 1 FROM {s}.data WHERE key = keys[i] FOR UPDATE);
        IF present = (kinds[i] = 'create') THEN
            RETURN 'conflict:' || keys[i];
        END IF;
    END LOOP;
    FOR i IN 1 .. coalesce(cardinality(keys), 0) LOOP
        IF kinds[i] = 'create' THEN
            INSERT INTO {s}.data VALUES (keys[i], vals[i]);
        ELSIF kinds[i] = 'set' THEN
            UPDATE {s}.data SET value = vals[i] WHERE key = keys[i];
        ELSE
            DELETE FROM {s}.data WHERE key = keys[i];
        END IF;
    END LOOP;
    RETURN 'ok';
END $$;

-- Job slots: the indices taken in `sem`.
CREATE OR REPLACE FUNCTION {s}.list_slots(sem text) RETURNS text
LANGUAGE sql SET enable_seqscan = off SET jit = off AS $$
    SELECT coalesce(json_agg(l.idx ORDER BY l.idx), '[]')::text FROM {s}.slots l
        JOIN {s}.entries e ON e.semaphore = l.semaphore AND e.id = l.entry
        WHERE l.semaphore = sem AND {s}.live(e.session)
$$;

-- Take slot `i` for our held entry: ["ok", token] (ours, new or adopted after a lost
-- reply), ["taken", [indices]] or ["lost"] (our entry is gone). At READ COMMITTED a
-- missing row locks nothing: two takers may both find index `i` free, so the insert
-- decides (ON CONFLICT waits for the other's commit), and a dead holder's record is
-- deleted only as found (a concurrent taker may have replaced it by a live one).
CREATE OR REPLACE FUNCTION {s}.take_slot(sem text, eid text, i integer) RETURNS text
LANGUAGE plpgsql SET enable_seqscan = off SET jit = off AS $$
DECLARE
    holder record;
    tok bigint;
BEGIN
    PERFORM 1 FROM {s}.entries e WHERE e.semaphore = sem AND e.id = eid AND e.held
        AND {s}.live(e.session) FOR SHARE;
    IF NOT FOUND THEN
        RETURN json_build_array('lost')::text;
    END IF;
    SELECT l.entry, l.token, {s}.live(e.session) AS alive INTO holder FROM {s}.slots l
        JOIN {s}.entries e ON e.semaphore = l.semaphore AND e.id = l.entry
        WHERE l.semaphore = sem AND l.idx = i FOR UPDATE OF l;
    IF FOUND THEN
        IF holder.entry = eid THEN
            RETURN json_build_array('ok', holder.token)::text;
        END IF;
        IF holder.alive THEN
            RETURN json_build_array('taken', {s}.list_slots(sem)::json)::text;
        END IF;
        DELETE FROM {s}.slots
            WHERE semaphore = sem AND idx = i AND entry = holder.entry AND token = holder.token;
    END IF;
    tok := nextval('{s}.tokens');
    INSERT INTO {s}.slots VALUES (sem, i, eid, tok) ON CONFLICT (semaphore, idx) DO NOTHING;
    IF FOUND THEN
        RETURN json_build_array('ok', tok)::text;
    END IF;
    -- another taker's record won (committed: this statement's snapshot sees it); ours
    -- when a retry after a lost reply raced the first try
    SELECT entry, token INTO holder FROM {s}.slots WHERE semaphore = sem AND idx = i;
    IF FOUND AND holder.entry = eid THEN
        RETURN json_build_array('ok', holder.token)::text;
    END IF;
    RETURN json_build_array('taken', {s}.list_slots(sem)::json)::text;
END $$;

CREATE OR REPLACE FUNCTION {s}.delete_semaphore(sem text) RETURNS void
LANGUAGE sql SET enable_seqscan = off SET jit = off AS $$
    DELETE FROM {s}.data WHERE starts_with(key, sem || '/');
    SELECT 1 FROM {s}.semaphores WHERE name = sem FOR UPDATE;
    DELETE FROM {s}.entries WHERE semaphore = sem;
    DELETE FROM {s}.semaphores WHERE name = sem;
$$;
"""


def capacity_channel(schema: str) -> str:
    """The channel on which every client of ``schema`` hears of capacity changes."""
    return f"sr_capacity_{schema}"[:63]


def schema_sql(schema: str) -> str:
    """The whole schema of version :data:`SCHEMA_VERSION` in ``schema`` (a validated,
    unquoted identifier): idempotent, for ``psql -f`` or a migration tool."""
    version = (
        f"INSERT INTO {schema}.schema_version VALUES ({SCHEMA_VERSION}) ON CONFLICT DO NOTHING;\n"
    )
    text = (_TABLES + _FUNCTIONS).replace("{capacity_channel}", f"'{capacity_channel(schema)}'")
    return text.replace("{s}", schema).replace("{{}}", "{}") + version

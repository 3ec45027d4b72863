"""The library's tables and stored procedures in MySQL/MariaDB, and how they are made.

Everything lives in the URL's database, in tables and procedures named ``sr_*``: the
semaphores (with counters), their entries, the clients' sessions, job slot records, the
key-value data of fenced transactions, fencing tokens (an ``AUTO_INCREMENT``), the
abandoned ids, and each client's notices. Each protocol step is one ``CALL`` of a
procedure that runs its own transaction with the semaphore's row locked (``SELECT ...
FOR UPDATE``): FIFO in commit order, weighted head-of-line admission decided in the
database, one round trip per step. ``SCHEMA_VERSION`` is recorded in
``sr_schema_version``: a client whose release knows a higher one runs
:func:`schema_statements` again on connect (idempotent: tables made if missing, each
procedure dropped and made again). ``semaphore-recipes sql-schema --dialect mysql``
prints :func:`schema_script` for the ``mysql`` client or a migration tool.

Admission (``sr_admit``): entries of sessions expired by the server's clock are deleted,
and so are the held entries whose client's connection is gone (its named lock
``sr.<session>`` is free: ``IS_FREE_LOCK``) for longer than the session's grace; then
the waiting entries are taken in token order while their weights fit. Each admitted
entry's client gets a notice row, and once the transaction committed the procedure
interrupts that client's waiting statement (``KILL QUERY`` of the connection that holds
its named lock): the server's work per release is one notice and one interrupt per
admitted waiter, whatever the number of waiters.
"""

from __future__ import annotations

__all__ = ["PROCEDURES", "SCHEMA_VERSION", "TABLES", "schema_script", "schema_statements"]

#: the version of the tables and procedures below (``sr_schema_version``)
SCHEMA_VERSION = 4

# names, entry ids and session ids are ASCII (validate_name) and compared byte for byte
_ID = "VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin"

TABLES = [
    "CREATE TABLE IF NOT EXISTS sr_schema_version (version INT PRIMARY KEY) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS sr_tokens (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY) "
    "ENGINE=InnoDB",
    f"""CREATE TABLE IF NOT EXISTS sr_sessions (
        id {_ID} NOT NULL PRIMARY KEY,
        owner VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
        timeout_ms INT NOT NULL,
        grace_ms INT NOT NULL,
        expires_at DATETIME(6) NOT NULL,
        renewed_at DATETIME(6) NOT NULL,
        KEY sessions_expiry (expires_at)
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS sr_semaphores (
        name {_ID} NOT NULL PRIMARY KEY,
        capacity INT NOT NULL,
        version BIGINT NOT NULL,
        used BIGINT NOT NULL DEFAULT 0,
        waiting BIGINT NOT NULL DEFAULT 0,
        head BIGINT NOT NULL DEFAULT 0,
        draining BOOLEAN NOT NULL DEFAULT FALSE,
        ramp TEXT NULL
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS sr_entries (
        semaphore {_ID} NOT NULL,
        id {_ID} NOT NULL,
        session {_ID} NOT NULL,
        owner VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
        weight INT NOT NULL,
        token BIGINT NOT NULL,
        held BOOLEAN NOT NULL DEFAULT FALSE,
        since DOUBLE NOT NULL,
        revoke_requested BOOLEAN NOT NULL DEFAULT FALSE,
        PRIMARY KEY (semaphore, id),
        KEY entries_queue (semaphore, held, token),
        KEY entries_session (session)
    ) ENGINE=InnoDB""",
    f"""CREATE TABLE IF NOT EXISTS sr_slots (
        semaphore {_ID} NOT NULL,
        idx INT NOT NULL,
        entry {_ID} NOT NULL,
        token BIGINT NOT NULL,
        PRIMARY KEY (semaphore, idx),
        KEY slots_entry (semaphore, entry),
        FOREIGN KEY (semaphore, entry) REFERENCES sr_entries (semaphore, id) ON DELETE CASCADE
    ) ENGINE=InnoDB""",
    "CREATE TABLE IF NOT EXISTS sr_data (k VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin "
    "NOT NULL PRIMARY KEY, value LONGBLOB NOT NULL) ENGINE=InnoDB",
    # ids of entries their own client removed before their create arrived
    f"""CREATE TABLE IF NOT EXISTS sr_removed (
        id {_ID} NOT NULL PRIMARY KEY,
        session {_ID} NOT NULL,
        KEY removed_session (session)
    ) ENGINE=InnoDB""",
    # what a client is told (its waiting statement is interrupted once one is written)
    f"""CREATE TABLE IF NOT EXISTS sr_notices (
        seq BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
        session {_ID} NOT NULL,
        notice TEXT CHARACTER SET utf8mb4 NOT NULL,
        KEY notices_session (session, seq)
    ) ENGINE=InnoDB""",
]

# (A routine's variables hide the columns of the same name: none is named as a column.
# Replies and lists are LONGTEXT: a TEXT variable holds 64 KiB, a queue of ~600 entries.)
# Every step procedure runs one transaction of its own (the connection is in autocommit
# mode, READ COMMITTED) and answers with one row of one column: JSON text for most.
# On any error the transaction is rolled back and the error goes to the client, which
# sends a deadlock (1213) or a lock wait timeout (1205) again within its deadline.
_ROLLBACK = "DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;"

PROCEDURES: dict[str, str] = {}


# Is the session of alias `x` alive: not expired by the server's clock, and its client's
# connection there (or gone for less than the grace a reconnect takes)? (An expression,
# not a stored function: with the binary log on, making a function needs SUPER.)
def _live(x: str) -> str:
    return (
        f"({x}.expires_at > SYSDATE(6) AND NOT (IS_FREE_LOCK(CONCAT('sr.', {x}.id)) "
        f"AND {x}.renewed_at < SYSDATE(6) - INTERVAL {x}.grace_ms * 1000 MICROSECOND))"
    )


# A token: a new value of the AUTO_INCREMENT (its row is deleted again; the counter stays).
PROCEDURES["sr_next_token"] = """
CREATE PROCEDURE sr_next_token(OUT tok BIGINT)
BEGIN
    INSERT INTO sr_tokens VALUES ();
    SET tok = LAST_INSERT_ID();
    DELETE FROM sr_tokens WHERE id = tok;
END
"""

# Interrupt the waiting statement of each session in `sessions` (a JSON array), after
# the caller's commit: the connection holding the session's named lock is its keeper's.
PROCEDURES["sr_wake"] = f"""
CREATE PROCEDURE sr_wake(sessions LONGTEXT)
BEGIN
    DECLARE i INT DEFAULT 0;
    DECLARE n INT DEFAULT COALESCE(JSON_LENGTH(sessions), 0);
    DECLARE sess {_ID};
    DECLARE cid BIGINT;
    -- unknown thread, not ours to kill: the client's timed look finds its admission
    DECLARE CONTINUE HANDLER FOR 1094, 1095 BEGIN END;
    WHILE i < n DO
        SET sess = JSON_UNQUOTE(JSON_EXTRACT(sessions, CONCAT('$[', i, ']')));
        SET cid = IS_USED_LOCK(CONCAT('sr.', sess));
        IF cid IS NOT NULL AND cid <> CONNECTION_ID() THEN
            KILL QUERY cid;
        END IF;
        SET i = i + 1;
    END WHILE;
END
"""

# The counters counted afresh from the entries (after a change that did not keep them).
PROCEDURES["sr_recount"] = f"""
CREATE PROCEDURE sr_recount(sem {_ID})
BEGIN
    UPDATE sr_semaphores SET
        used = (SELECT COALESCE(SUM(weight), 0) FROM sr_entries WHERE semaphore = sem AND held),
        waiting = (SELECT COUNT(*) FROM sr_entries WHERE semaphore = sem AND NOT held),
        head = 0
        WHERE name = sem;
END
"""

# Sweep and admit (the caller holds the semaphore's row locked, in its transaction):
# entries of dead sessions go, then the waiting entries that fit, in token order from
# `head`, are held; every admitted entry but `quiet` gets a notice, and its session is
# added to `wake` (a JSON array) for the caller to interrupt after its commit.
PROCEDURES["sr_admit"] = f"""
CREATE PROCEDURE sr_admit(sem {_ID}, quiet {_ID}, INOUT wake LONGTEXT)
BEGIN
    DECLARE cap INT;
    DECLARE ver, used_now, waiting_now, head_now BIGINT;
    DECLARE dead LONGTEXT;
    DECLARE orphans LONGTEXT;
    DECLARE drain BOOLEAN;
    SELECT capacity, version, used, waiting, head, draining
        INTO cap, ver, used_now, waiting_now, head_now, drain
        FROM sr_semaphores WHERE name = sem;
    SELECT GROUP_CONCAT(id) INTO dead FROM sr_sessions WHERE expires_at <= SYSDATE(6);
    IF waiting_now > 0 THEN
        -- (only the holders of this semaphore: their clients' locks are looked up, no scan)
        SELECT GROUP_CONCAT(DISTINCT e.session) INTO orphans
            FROM sr_entries e JOIN sr_sessions x ON x.id = e.session
            WHERE e.semaphore = sem AND e.held AND NOT {_live("x")};
        SET dead = NULLIF(CONCAT_WS(',', dead, orphans), '');
    END IF;
    IF dead IS NOT NULL THEN
        DELETE FROM sr_entries WHERE semaphore = sem AND FIND_IN_SET(session, dead);
        IF ROW_COUNT() > 0 THEN
            CALL sr_recount(sem);
            SELECT used, waiting, head INTO used_now, waiting_now, head_now
                FROM sr_semaphores WHERE name = sem;
        END IF;
    END IF;
    IF waiting_now > 0 AND NOT drain THEN  -- (nobody is admitted while it drains)
        BEGIN
            DECLARE done BOOLEAN DEFAULT FALSE;
            DECLARE eid, esess {_ID};
            DECLARE w INT;
            DECLARE tok BIGINT;
            DECLARE queue CURSOR FOR
                SELECT id, weight, token, session FROM sr_entries
                WHERE semaphore = sem AND NOT held AND token >= head_now ORDER BY token;
            DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
            OPEN queue;
            admitting: LOOP
                FETCH queue INTO eid, w, tok, esess;
                IF done THEN
                    LEAVE admitting;
                END IF;
                IF used_now + w > cap THEN
                    SET head_now = tok;  -- the head of the line waits
                    LEAVE admitting;
                END IF;
                SET used_now = used_now + w, waiting_now = waiting_now - 1, head_now = tok + 1;
                UPDATE sr_entries SET held = TRUE, since = UNIX_TIMESTAMP(SYSDATE(6))
                    WHERE semaphore = sem AND id = eid;
                IF eid <> quiet THEN
                    INSERT INTO sr_notices (session, notice)
                        VALUES (esess, JSON_ARRAY('admitted', sem, eid, cap, ver));
                    SET wake = JSON_ARRAY_APPEND(COALESCE(wake, '[]'), '$', esess);
                END IF;
            END LOOP;
            CLOSE queue;
        END;
    END IF;
    UPDATE sr_semaphores SET used = used_now, waiting = waiting_now, head = head_now
        WHERE name = sem;
END
"""

# An entry as its client needs it: ["ok", token, held, capacity, version, check_in_ms,
# watch] (check_in_ms: when the first other live session would expire, -1 when none;
# watch: the session of the oldest other holder of the semaphore, whose end a waiting
# client may learn of sooner by its named lock, '' when none), or ["gone"].
PROCEDURES["sr_view"] = f"""
CREATE PROCEDURE sr_view(sem {_ID}, eid {_ID}, OUT reply LONGTEXT)
BEGIN
    DECLARE cap INT;
    DECLARE ver, tok BIGINT;
    DECLARE is_held BOOLEAN;
    DECLARE esess {_ID};
    DECLARE watch {_ID} DEFAULT '';
    DECLARE check_in BIGINT DEFAULT -1;
    DECLARE nearest DATETIME(6);
    SELECT capacity, version INTO cap, ver FROM sr_semaphores WHERE name = sem;
    SELECT token, held, session INTO tok, is_held, esess
        FROM sr_entries WHERE semaphore = sem AND id = eid;
    IF tok IS NULL THEN
        SET reply = JSON_ARRAY('gone');
    ELSE
        IF NOT is_held THEN
            SELECT MIN(expires_at) INTO nearest FROM sr_sessions
                WHERE id <> esess AND expires_at > SYSDATE(6);
            IF nearest IS NOT NULL THEN
                SET check_in =
                    GREATEST(0, TIMESTAMPDIFF(MICROSECOND, SYSDATE(6), nearest) DIV 1000);
            END IF;
            SELECT session INTO watch FROM sr_entries
                WHERE semaphore = sem AND held AND session <> esess ORDER BY token LIMIT 1;
        END IF;
        SET reply = JSON_ARRAY('ok', tok, IF(is_held, 1, 0), cap, ver, check_in, watch);
    END IF;
END
"""

PROCEDURES["sr_open_session"] = f"""
CREATE PROCEDURE sr_open_session(sess {_ID}, who VARCHAR(255) CHARACTER SET utf8mb4,
                                 ms INT, grace INT)
BEGIN
    {_ROLLBACK}
    START TRANSACTION;
    -- (a session row goes with its last entry: admissions find dead entries by it)
    DELETE FROM sr_sessions WHERE expires_at < SYSDATE(6)
        AND NOT EXISTS (SELECT 1 FROM sr_entries e WHERE e.session = sr_sessions.id);
    DELETE FROM sr_removed
        WHERE NOT EXISTS (SELECT 1 FROM sr_sessions x WHERE x.id = sr_removed.session);
    DELETE FROM sr_notices
        WHERE NOT EXISTS (SELECT 1 FROM sr_sessions x WHERE x.id = sr_notices.session);
    INSERT IGNORE INTO sr_sessions VALUES (sess, who, ms, grace,
        SYSDATE(6) + INTERVAL ms * 1000 MICROSECOND, SYSDATE(6));
    COMMIT;
    SELECT 'ok';
END
"""

# Renew: 1, or 0 when the session is gone or expired (then it is never renewed again).
PROCEDURES["sr_renew"] = f"""
CREATE PROCEDURE sr_renew(sess {_ID})
BEGIN
    UPDATE sr_sessions SET expires_at = SYSDATE(6) + INTERVAL timeout_ms * 1000 MICROSECOND,
                           renewed_at = SYSDATE(6)
        WHERE id = sess AND expires_at > SYSDATE(6);
    SELECT ROW_COUNT() > 0;
END
"""

# The keeper's wait: first the notices the client has received (`done`: their seqs, comma
# separated) are deleted; then the session's notices are answered, or, when there are
# none, after a wait of up to `ms` milliseconds (interrupted by a wake). The answer is a
# JSON array: the seqs of the notices in it (for the next call's `done`), then the
# notices. A notice is deleted only once its client said it has it: an answer lost to an
# interrupt or a cut connection is answered again. With `watch` (a session whose end a
# waiter of ours depends on) the wait is for that session's named lock: taken (and given
# back at once) when its client's connection ended, which adds ["gone", "", watch, 0, 0]
# (["unwatchable", ...] when the server refused the wait as a deadlock of named locks).
PROCEDURES["sr_wait"] = f"""
CREATE PROCEDURE sr_wait(sess {_ID}, ms INT, watch {_ID}, done LONGTEXT)
BEGIN
    DECLARE top BIGINT;
    DECLARE got, seqs LONGTEXT;
    DECLARE gone TEXT DEFAULT NULL;
    IF done <> '' THEN
        DELETE FROM sr_notices WHERE session = sess AND FIND_IN_SET(seq, done);
    END IF;
    SELECT MAX(seq) INTO top FROM sr_notices WHERE session = sess;
    IF top IS NULL AND ms > 0 THEN
        IF watch = '' THEN
            DO SLEEP(ms / 1000);
        ELSE
            BEGIN
                -- two clients watching each other's locks: the server refuses one wait
                -- as a deadlock, and that client stops watching this session
                DECLARE CONTINUE HANDLER FOR 1213
                    SET gone = JSON_ARRAY('unwatchable', '', watch, 0, 0);
                IF GET_LOCK(CONCAT('sr.', watch), ms / 1000) = 1 THEN
                    DO RELEASE_LOCK(CONCAT('sr.', watch));
                    SET gone = JSON_ARRAY('gone', '', watch, 0, 0);
                END IF;
            END;
        END IF;
        SELECT MAX(seq) INTO top FROM sr_notices WHERE session = sess;
    END IF;
    IF top IS NOT NULL THEN
        SELECT GROUP_CONCAT(notice ORDER BY seq SEPARATOR ','), GROUP_CONCAT(seq) INTO got, seqs
            FROM sr_notices WHERE session = sess AND seq <= top;
    END IF;
    SELECT CONCAT('[', JSON_QUOTE(COALESCE(seqs, '')), IF(got IS NULL, '', ','),
                  COALESCE(got, ''), IF(gone IS NULL, '', ','), COALESCE(gone, ''), ']');
END
"""

# The session ends: its entries go and each of their semaphores admits what fits.
PROCEDURES["sr_end_session"] = f"""
CREATE PROCEDURE sr_end_session(sess {_ID})
BEGIN
    DECLARE wake LONGTEXT DEFAULT '[]';
    DECLARE done BOOLEAN DEFAULT FALSE;
    DECLARE sem {_ID};
    DECLARE sems CURSOR FOR SELECT name FROM sr_semaphores WHERE name IN
        (SELECT semaphore FROM sr_entries WHERE session = sess) ORDER BY name FOR UPDATE;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
    {_ROLLBACK}
    START TRANSACTION;
    UPDATE sr_sessions SET expires_at = '1970-01-02' WHERE id = sess;
    OPEN sems;
    ending: LOOP
        FETCH sems INTO sem;
        IF done THEN
            LEAVE ending;
        END IF;
        CALL sr_admit(sem, '', wake);
    END LOOP;
    CLOSE sems;
    DELETE FROM sr_sessions WHERE id = sess;
    DELETE FROM sr_removed WHERE session = sess;
    DELETE FROM sr_notices WHERE session = sess;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT 'ok';
END
"""

# [capacity, version], creating the semaphore with `requested` if it is missing and that
# is not null; null when missing.
PROCEDURES["sr_open_semaphore"] = f"""
CREATE PROCEDURE sr_open_semaphore(sem {_ID}, requested INT)
BEGIN
    DECLARE tok BIGINT;
    DECLARE cap INT;
    DECLARE ver BIGINT;
    {_ROLLBACK}
    START TRANSACTION;
    IF requested IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem) THEN
        CALL sr_next_token(tok);
        INSERT IGNORE INTO sr_semaphores (name, capacity, version) VALUES (sem, requested, tok);
    END IF;
    SELECT capacity, version INTO cap, ver FROM sr_semaphores WHERE name = sem;
    COMMIT;
    SELECT IF(cap IS NULL, NULL, JSON_ARRAY(cap, ver));
END
"""

# The new capacity's version (null: no such semaphore); waiters that now fit admitted,
# and every live client told (rare: a notice for each); a ramp plan dropped (a plain
# change cancels it).
PROCEDURES["sr_set_capacity"] = f"""
CREATE PROCEDURE sr_set_capacity(sem {_ID}, cap INT)
BEGIN
    DECLARE ver BIGINT;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    IF NOT EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem FOR UPDATE) THEN
        ROLLBACK;
        SELECT NULL;
    ELSE
        CALL sr_next_token(ver);
        UPDATE sr_semaphores SET capacity = cap, ramp = NULL, version = ver WHERE name = sem;
        CALL sr_admit(sem, '', wake);
        INSERT INTO sr_notices (session, notice)
            SELECT id, JSON_ARRAY('capacity', sem, '', cap, ver) FROM sr_sessions
            WHERE expires_at > SYSDATE(6);
        SELECT JSON_ARRAYAGG(id) INTO wake FROM sr_sessions WHERE expires_at > SYSDATE(6);
        COMMIT;
        IF wake <> '[]' THEN
            CALL sr_wake(wake);
        END IF;
        SELECT ver;
    END IF;
END
"""

# A capacity ramp's step: the capacity and the plan beside it (plan '': none), only over
# version `expected` (the config as the ramp read it), then as sr_set_capacity: the new
# version; 0 when the version moved meanwhile (nothing written); null: no semaphore.
PROCEDURES["sr_ramp_step"] = f"""
CREATE PROCEDURE sr_ramp_step(sem {_ID}, cap INT, expected BIGINT, plan TEXT)
BEGIN
    DECLARE stored BIGINT;
    DECLARE ver BIGINT;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    SELECT version INTO stored FROM sr_semaphores WHERE name = sem FOR UPDATE;
    IF stored IS NULL THEN
        ROLLBACK;
        SELECT NULL;
    ELSEIF stored <> expected THEN
        ROLLBACK;
        SELECT 0;
    ELSE
        CALL sr_next_token(ver);
        UPDATE sr_semaphores SET capacity = cap, ramp = NULLIF(plan, ''), version = ver
            WHERE name = sem;
        CALL sr_admit(sem, '', wake);
        INSERT INTO sr_notices (session, notice)
            SELECT id, JSON_ARRAY('capacity', sem, '', cap, ver) FROM sr_sessions
            WHERE expires_at > SYSDATE(6);
        SELECT JSON_ARRAYAGG(id) INTO wake FROM sr_sessions WHERE expires_at > SYSDATE(6);
        COMMIT;
        IF wake <> '[]' THEN
            CALL sr_wake(wake);
        END IF;
        SELECT ver;
    END IF;
END
"""

# Set or clear the drain flag beside the capacity, with a new version: [capacity, version]
# (null: no such semaphore); a resume admits the waiters that fit; every live client is
# told as of a capacity change, with the flag.
PROCEDURES["sr_set_draining"] = f"""
CREATE PROCEDURE sr_set_draining(sem {_ID}, drain BOOLEAN)
BEGIN
    DECLARE cap INT;
    DECLARE ver BIGINT;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    SELECT capacity INTO cap FROM sr_semaphores WHERE name = sem FOR UPDATE;
    IF cap IS NULL THEN
        ROLLBACK;
        SELECT NULL;
    ELSE
        CALL sr_next_token(ver);
        UPDATE sr_semaphores SET draining = drain, version = ver WHERE name = sem;
        CALL sr_admit(sem, '', wake);
        INSERT INTO sr_notices (session, notice)
            SELECT id, JSON_ARRAY('capacity', sem, '', cap, ver, IF(drain, 1, 0))
            FROM sr_sessions WHERE expires_at > SYSDATE(6);
        SELECT JSON_ARRAYAGG(id) INTO wake FROM sr_sessions WHERE expires_at > SYSDATE(6);
        COMMIT;
        IF wake <> '[]' THEN
            CALL sr_wake(wake);
        END IF;
        SELECT JSON_ARRAY(cap, ver);
    END IF;
END
"""

# Version 2 -> 3: the drain flag's column on a table made before it (a column already
# there is error 1060, ignored: the statements stay idempotent).
PROCEDURES["sr_add_drain_flag"] = """
CREATE PROCEDURE sr_add_drain_flag()
BEGIN
    DECLARE CONTINUE HANDLER FOR 1060 BEGIN END;
    ALTER TABLE sr_semaphores ADD COLUMN draining BOOLEAN NOT NULL DEFAULT FALSE;
END
"""

# Version 3 -> 4: the ramp plan's column, the same way.
PROCEDURES["sr_add_ramp_plan"] = """
CREATE PROCEDURE sr_add_ramp_plan()
BEGIN
    DECLARE CONTINUE HANDLER FOR 1060 BEGIN END;
    ALTER TABLE sr_semaphores ADD COLUMN ramp TEXT NULL;
END
"""

# Version 3 -> 4 too: the revoke request's column on a table made before it (error 1060
# ignored, as above).
PROCEDURES["sr_add_revoke_flag"] = """
CREATE PROCEDURE sr_add_revoke_flag()
BEGIN
    DECLARE CONTINUE HANDLER FOR 1060 BEGIN END;
    ALTER TABLE sr_entries ADD COLUMN revoke_requested BOOLEAN NOT NULL DEFAULT FALSE;
END
"""

# Enqueue (or find again, after a lost reply) the entry `eid`: its view, or ["missing"]
# (no semaphore), ["draining"] (it drains: nothing was made), ["lost"] (our session
# expired: nothing was made), ["gone"] (the id was abandoned). An entry that fits with
# nobody waiting is held at once.
PROCEDURES["sr_enqueue"] = f"""
CREATE PROCEDURE sr_enqueue(sem {_ID}, eid {_ID}, sess {_ID},
                            who VARCHAR(255) CHARACTER SET utf8mb4, w INT)
BEGIN
    DECLARE cap INT;
    DECLARE ver, used_now, waiting_now, tok BIGINT;
    DECLARE fits, drain BOOLEAN;
    DECLARE alive, abandoned, made INT;
    DECLARE reply LONGTEXT;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    SELECT capacity, version, used, waiting, draining
        INTO cap, ver, used_now, waiting_now, drain
        FROM sr_semaphores WHERE name = sem FOR UPDATE;
    -- (plain reads into variables: a condition's subquery would lock the rows it reads,
    -- and a lock on our session row would hold our renewal back)
    SELECT (SELECT COUNT(*) FROM sr_sessions WHERE id = sess AND expires_at > SYSDATE(6)),
           (SELECT COUNT(*) FROM sr_removed WHERE id = eid),
           (SELECT COUNT(*) FROM sr_entries WHERE semaphore = sem AND id = eid)
        INTO alive, abandoned, made;
    IF cap IS NULL THEN
        SET reply = '["missing"]';
    ELSEIF drain THEN
        SET reply = '["draining"]';  -- (nothing made: the client fails with Draining)
    ELSEIF alive = 0 THEN
        SET reply = '["lost"]';
    ELSEIF abandoned > 0 THEN
        SET reply = '["gone"]';
    ELSEIF made > 0 THEN
        CALL sr_admit(sem, eid, wake);  -- a retry after a lost reply: its entry was made
        CALL sr_view(sem, eid, reply);
    ELSE
        CALL sr_next_token(tok);
        SET fits = waiting_now = 0 AND used_now + w <= cap;
        INSERT INTO sr_entries (semaphore, id, session, owner, weight, token, held, since)
            VALUES (sem, eid, sess, who, w, tok, fits, UNIX_TIMESTAMP(SYSDATE(6)));
        IF fits THEN
            UPDATE sr_semaphores SET used = used + w WHERE name = sem;
            SET reply = JSON_ARRAY('ok', tok, 1, cap, ver, -1);
        ELSE
            UPDATE sr_semaphores SET waiting = waiting + 1 WHERE name = sem;
            CALL sr_admit(sem, eid, wake);
            CALL sr_view(sem, eid, reply);
        END IF;
    END IF;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT reply;
END
"""

# Several semaphores at once: one token for every entry, rows locked in name order.
# `sems` and `weights` are JSON arrays.
PROCEDURES["sr_enqueue_all"] = f"""
CREATE PROCEDURE sr_enqueue_all(eid {_ID}, sess {_ID}, who VARCHAR(255) CHARACTER SET utf8mb4,
                                sems TEXT, weights TEXT)
BEGIN
    DECLARE n INT DEFAULT JSON_LENGTH(sems);
    DECLARE i INT DEFAULT 0;
    DECLARE found_rows INT;
    DECLARE made, alive, abandoned INT;
    DECLARE tok BIGINT;
    DECLARE sem {_ID};
    DECLARE one LONGTEXT;
    DECLARE reply LONGTEXT;
    DECLARE views LONGTEXT DEFAULT '';
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    BEGIN
        DECLARE done BOOLEAN DEFAULT FALSE;
        DECLARE ordered CURSOR FOR
            SELECT j.n FROM JSON_TABLE(sems, '$[*]' COLUMNS (n VARCHAR(128) PATH '$')) j
            ORDER BY j.n;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
        SET found_rows = 0;
        OPEN ordered;
        locking: LOOP
            FETCH ordered INTO sem;
            IF done THEN
                LEAVE locking;
            END IF;
            IF EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem FOR UPDATE) THEN
                SET found_rows = found_rows + 1;
            END IF;
        END LOOP;
        CLOSE ordered;
    END;
    SELECT COUNT(*) INTO made FROM sr_entries
        WHERE id = eid AND JSON_CONTAINS(sems, JSON_QUOTE(semaphore));
    SELECT COUNT(*) INTO alive FROM sr_sessions WHERE id = sess AND expires_at > SYSDATE(6);
    SELECT COUNT(*) INTO abandoned FROM sr_removed WHERE id = eid;
    SELECT MIN(name) INTO sem FROM sr_semaphores
        WHERE draining AND JSON_CONTAINS(sems, JSON_QUOTE(name));
    IF found_rows < n THEN
        SET reply = '["missing"]';
    ELSEIF sem IS NOT NULL THEN
        SET reply = JSON_ARRAY('draining', sem);  -- (nothing made)
    ELSEIF alive = 0 THEN
        SET reply = '["lost"]';
    ELSEIF abandoned > 0 THEN
        SET reply = '["gone"]';
    ELSEIF made > 0 AND made < n THEN  -- some died with a sweep: none may stay
        WHILE i < n DO
            SET sem = JSON_UNQUOTE(JSON_EXTRACT(sems, CONCAT('$[', i, ']')));
            DELETE FROM sr_entries WHERE semaphore = sem AND id = eid;
            CALL sr_recount(sem);
            SET i = i + 1;
        END WHILE;
        SET reply = '["partial"]';
    ELSE
        IF made = 0 THEN
            CALL sr_next_token(tok);
            WHILE i < n DO
                SET sem = JSON_UNQUOTE(JSON_EXTRACT(sems, CONCAT('$[', i, ']')));
                INSERT INTO sr_entries (semaphore, id, session, owner, weight, token, held,
                                        since) VALUES (sem, eid, sess, who,
                    JSON_EXTRACT(weights, CONCAT('$[', i, ']')), tok, FALSE,
                    UNIX_TIMESTAMP(SYSDATE(6)));
                UPDATE sr_semaphores SET waiting = waiting + 1 WHERE name = sem;
                SET i = i + 1;
            END WHILE;
        END IF;
        SET i = 0;
        WHILE i < n DO
            CALL sr_admit(JSON_UNQUOTE(JSON_EXTRACT(sems, CONCAT('$[', i, ']'))), eid, wake);
            SET i = i + 1;
        END WHILE;
        SET i = 0;
        WHILE i < n DO
            CALL sr_view(JSON_UNQUOTE(JSON_EXTRACT(sems, CONCAT('$[', i, ']'))), eid, one);
            SET views = CONCAT(views, ',', one);
            SET i = i + 1;
        END WHILE;
        SET reply = CONCAT('["ok"', views, ']');
    END IF;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT reply;
END
"""

# A waiter's look: sweep and admit (an admission of `eid` is in the reply), its view.
PROCEDURES["sr_check"] = f"""
CREATE PROCEDURE sr_check(sem {_ID}, eid {_ID})
BEGIN
    DECLARE reply LONGTEXT;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    IF NOT EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem FOR UPDATE) THEN
        SET reply = '["gone"]';
    ELSE
        CALL sr_admit(sem, eid, wake);
        CALL sr_view(sem, eid, reply);
    END IF;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT reply;
END
"""

# Remove one entry (a release, an abandon): sr_remove_from without the lists.
PROCEDURES["sr_remove_one"] = f"""
CREATE PROCEDURE sr_remove_one(sem {_ID}, eid {_ID}, by_session {_ID}, sweep BOOLEAN)
BEGIN
    DECLARE wake LONGTEXT DEFAULT '[]';
    DECLARE esess {_ID};
    DECLARE is_held BOOLEAN;
    DECLARE w INT;
    DECLARE waiting_now BIGINT;
    {_ROLLBACK}
    START TRANSACTION;
    SELECT waiting INTO waiting_now FROM sr_semaphores WHERE name = sem FOR UPDATE;
    IF waiting_now IS NOT NULL THEN
        SELECT session, held, weight INTO esess, is_held, w
            FROM sr_entries WHERE semaphore = sem AND id = eid;
        IF esess IS NULL THEN
            IF by_session <> '' THEN  -- ours, not made yet: its create is refused
                INSERT IGNORE INTO sr_removed VALUES (eid, by_session);
            END IF;
        ELSE
            DELETE FROM sr_entries WHERE semaphore = sem AND id = eid;
            UPDATE sr_semaphores SET used = used - IF(is_held, w, 0),
                                     waiting = waiting - IF(is_held, 0, 1)
                WHERE name = sem;
            SET waiting_now = waiting_now - IF(is_held, 0, 1);
            IF esess <> by_session THEN
                INSERT INTO sr_notices (session, notice)
                    VALUES (esess, JSON_ARRAY('deleted', sem, eid, 0, 0));
                SET wake = JSON_ARRAY_APPEND(wake, '$', esess);
            END IF;
            IF sweep AND waiting_now > 0 THEN
                CALL sr_admit(sem, '', wake);
            END IF;
        END IF;
    END IF;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT NULL;
END
"""

# Remove entries (ours, or an operator's pick: `sems` and `eids` are parallel JSON
# arrays) from their semaphores, rows locked in name order, then admit what fits in each.
# The client of an entry removed by someone else (`by` is the remover's session) is
# told. Without `sweep`, nothing is admitted (an abandoned acquire's client admits with
# sr_check once the acquire is over).
PROCEDURES["sr_remove_from"] = f"""
CREATE PROCEDURE sr_remove_from(sem {_ID}, sems TEXT, eids TEXT, by_session {_ID},
                                sweep BOOLEAN, INOUT wake LONGTEXT)
BEGIN
    DECLARE n INT DEFAULT JSON_LENGTH(sems);
    DECLARE i INT DEFAULT 0;
    DECLARE eid, esess {_ID};
    DECLARE is_held BOOLEAN;
    DECLARE w INT;
    DECLARE freed, left_queue BIGINT DEFAULT 0;
    DECLARE waiting_now BIGINT;
    IF EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem FOR UPDATE) THEN
        WHILE i < n DO
            IF JSON_UNQUOTE(JSON_EXTRACT(sems, CONCAT('$[', i, ']'))) = sem THEN
                SET eid = JSON_UNQUOTE(JSON_EXTRACT(eids, CONCAT('$[', i, ']'))), esess = NULL;
                SELECT session, held, weight INTO esess, is_held, w
                    FROM sr_entries WHERE semaphore = sem AND id = eid;
                IF esess IS NULL THEN
                    IF by_session <> '' THEN  -- ours, not made yet: its create is refused
                        INSERT IGNORE INTO sr_removed VALUES (eid, by_session);
                    END IF;
                ELSE
                    DELETE FROM sr_entries WHERE semaphore = sem AND id = eid;
                    IF is_held THEN
                        SET freed = freed + w;
                    ELSE
                        SET left_queue = left_queue + 1;
                    END IF;
                    IF esess <> by_session THEN
                        INSERT INTO sr_notices (session, notice)
                            VALUES (esess, JSON_ARRAY('deleted', sem, eid, 0, 0));
                        SET wake = JSON_ARRAY_APPEND(wake, '$', esess);
                    END IF;
                END IF;
            END IF;
            SET i = i + 1;
        END WHILE;
        UPDATE sr_semaphores SET used = used - freed, waiting = waiting - left_queue
            WHERE name = sem;
        SELECT waiting INTO waiting_now FROM sr_semaphores WHERE name = sem;
        IF sweep AND waiting_now > 0 THEN
            CALL sr_admit(sem, '', wake);
        END IF;
    END IF;
END
"""

# Remove entries (ours, or an operator's pick: `sems` and `eids` are parallel JSON
# arrays) from their semaphores, rows locked in name order, then admit what fits in each.
# The client of an entry removed by someone else (`by_session` is the remover's session)
# is told. Without `sweep`, nothing is admitted (an abandoned acquire's client admits
# with sr_check once the acquire is over).
PROCEDURES["sr_remove"] = f"""
CREATE PROCEDURE sr_remove(sems TEXT, eids TEXT, by_session {_ID}, sweep BOOLEAN)
BEGIN
    DECLARE wake LONGTEXT DEFAULT '[]';
    DECLARE sem {_ID};
    {_ROLLBACK}
    START TRANSACTION;
    BEGIN
        DECLARE done BOOLEAN DEFAULT FALSE;
        DECLARE ordered CURSOR FOR
            SELECT DISTINCT j.n FROM JSON_TABLE(sems, '$[*]' COLUMNS (n VARCHAR(128) PATH '$')) j
            ORDER BY j.n;
        DECLARE CONTINUE HANDLER FOR NOT FOUND SET done = TRUE;
        OPEN ordered;
        removing: LOOP
            FETCH ordered INTO sem;
            IF done THEN
                LEAVE removing;
            END IF;
            CALL sr_remove_from(sem, sems, eids, by_session, sweep, wake);
        END LOOP;
        CLOSE ordered;
    END;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT NULL;
END
"""

# Ask the live held entry `eid` created with `tok` to give its permits back: the flag set
# and its client told (a notice ["revoke", ...] and a wake-up); with `force`, remove it as
# an operator's remove does (its client told ["deleted", ...]) and admit what fits.
# -> true, or false when there is no such entry
PROCEDURES["sr_revoke"] = f"""
CREATE PROCEDURE sr_revoke(sem {_ID}, eid {_ID}, tok BIGINT, by_force BOOLEAN)
BEGIN
    DECLARE esess {_ID} DEFAULT NULL;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    IF EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem FOR UPDATE) THEN
        SELECT e.session INTO esess FROM sr_entries e JOIN sr_sessions x ON x.id = e.session
            WHERE e.semaphore = sem AND e.id = eid AND e.token = tok AND e.held
                AND x.expires_at > SYSDATE(6);
    END IF;
    IF esess IS NULL THEN
        ROLLBACK;
        SELECT 'false';
    ELSE
        IF by_force THEN
            CALL sr_remove_from(sem, JSON_ARRAY(sem), JSON_ARRAY(eid), '', TRUE, wake);
        ELSE
            UPDATE sr_entries SET revoke_requested = TRUE WHERE semaphore = sem AND id = eid;
            INSERT INTO sr_notices (session, notice)
                VALUES (esess, JSON_ARRAY('revoke', sem, eid, 0, 0));
            SET wake = JSON_ARRAY(esess);
        END IF;
        COMMIT;
        IF wake <> '[]' THEN
            CALL sr_wake(wake);
        END IF;
        SELECT 'true';
    END IF;
END
"""

# [capacity, version, [[id, owner, weight, token, held, since, [slot, ...],
# revoke_requested], ...], draining, ramp plan or null], after a sweep; null when there
# is no such semaphore.
PROCEDURES["sr_status"] = f"""
CREATE PROCEDURE sr_status(sem {_ID})
BEGIN
    DECLARE cap INT;
    DECLARE ver BIGINT;
    DECLARE drain BOOLEAN;
    DECLARE plan TEXT;
    DECLARE reply LONGTEXT;
    DECLARE wake LONGTEXT DEFAULT '[]';
    {_ROLLBACK}
    START TRANSACTION;
    SELECT capacity, version, draining, ramp INTO cap, ver, drain, plan
        FROM sr_semaphores WHERE name = sem FOR UPDATE;
    IF cap IS NOT NULL THEN
        CALL sr_admit(sem, '', wake);
        -- (in no particular order: the client sorts by token)
        SELECT JSON_ARRAY(cap, ver, COALESCE(JSON_ARRAYAGG(JSON_ARRAY(e.id, e.owner, e.weight,
                   e.token, IF(e.held, 1, 0), e.since,
                   (SELECT COALESCE(JSON_ARRAYAGG(l.idx), JSON_ARRAY()) FROM sr_slots l
                    WHERE l.semaphore = sem AND l.entry = e.id),
                   IF(e.revoke_requested, 1, 0))), JSON_ARRAY()),
                   IF(drain, 1, 0), plan)
            INTO reply
            FROM sr_entries e WHERE e.semaphore = sem;
    END IF;
    COMMIT;
    IF wake <> '[]' THEN
        CALL sr_wake(wake);
    END IF;
    SELECT reply;
END
"""

# The fence, inside the caller's transaction (no transaction of its own): 1 when every
# (semaphore, entry) of the JSON arrays is there with `tok`, held, its session alive;
# the entries are locked (LOCK IN SHARE MODE) until the caller's transaction ends, so
# an admission that would delete one of them waits for that commit.
PROCEDURES["sr_fence"] = f"""
CREATE PROCEDURE sr_fence(sems TEXT, eids TEXT, tok BIGINT, OUT fenced BOOLEAN)
BEGIN
    DECLARE n INT DEFAULT JSON_LENGTH(sems);
    DECLARE i INT DEFAULT 0;
    DECLARE found_rows INT DEFAULT 0;
    DECLARE esess {_ID};
    DECLARE alive BOOLEAN;
    WHILE i < n DO
        SET esess = NULL;
        SELECT session INTO esess FROM sr_entries
            WHERE semaphore = JSON_UNQUOTE(JSON_EXTRACT(sems, CONCAT('$[', i, ']')))
            AND id = JSON_UNQUOTE(JSON_EXTRACT(eids, CONCAT('$[', i, ']')))
            AND token = tok AND held LOCK IN SHARE MODE;
        -- (a plain read, never a lock: the session's renewals must go on meanwhile)
        SET alive = FALSE;
        SELECT {_live("x")} INTO alive FROM sr_sessions x WHERE x.id = esess;
        IF alive THEN
            SET found_rows = found_rows + 1;
        END IF;
        SET i = i + 1;
    END WHILE;
    SET fenced = found_rows = n;
END
"""

PROCEDURES["sr_check_fence"] = """
CREATE PROCEDURE sr_check_fence(sems TEXT, eids TEXT, tok BIGINT)
BEGIN
    DECLARE fenced BOOLEAN;
    CALL sr_fence(sems, eids, tok, fenced);
    SELECT fenced;
END
"""

# A fenced key-value write in one call: 'ok', 'lost' (the fence failed) or
# 'conflict:<key>' (a write's condition failed); nothing is written but on 'ok'.
# `kinds`, `keys` and `vals` (hex) are JSON arrays.
PROCEDURES["sr_fenced_write"] = f"""
CREATE PROCEDURE sr_fenced_write(sems TEXT, eids TEXT, tok BIGINT,
                                 kinds LONGTEXT, ks LONGTEXT, vals LONGTEXT)
BEGIN
    DECLARE fenced BOOLEAN;
    DECLARE n INT DEFAULT COALESCE(JSON_LENGTH(ks), 0);
    DECLARE i INT DEFAULT 0;
    DECLARE kind VARCHAR(16);
    DECLARE k VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin;
    DECLARE present BOOLEAN;
    DECLARE reply LONGTEXT DEFAULT 'ok';
    {_ROLLBACK}
    START TRANSACTION;
    CALL sr_fence(sems, eids, tok, fenced);
    IF NOT fenced THEN
        SET reply = 'lost';
    END IF;
    WHILE reply = 'ok' AND i < n DO
        SET kind = JSON_UNQUOTE(JSON_EXTRACT(kinds, CONCAT('$[', i, ']')));
        SET k = JSON_UNQUOTE(JSON_EXTRACT(ks, CONCAT('$[', i, ']')));
        SET present = EXISTS (SELECT 1 FROM sr_data WHERE sr_data.k = k FOR UPDATE);
        IF present = (kind = 'create') THEN
            SET reply = CONCAT('conflict:', k);
        END IF;
        SET i = i + 1;
    END WHILE;
    SET i = 0;
    WHILE reply = 'ok' AND i < n DO
        SET kind = JSON_UNQUOTE(JSON_EXTRACT(kinds, CONCAT('$[', i, ']')));
        SET k = JSON_UNQUOTE(JSON_EXTRACT(ks, CONCAT('$[', i, ']')));
        IF kind = 'create' THEN
            INSERT INTO sr_data
                VALUES (k, UNHEX(JSON_UNQUOTE(JSON_EXTRACT(vals, CONCAT('$[', i, ']')))));
        ELSEIF kind = 'set' THEN
            UPDATE sr_data SET value = UNHEX(JSON_UNQUOTE(JSON_EXTRACT(vals, CONCAT('$[', i, ']'))))
                WHERE sr_data.k = k;
        ELSE
            DELETE FROM sr_data WHERE sr_data.k = k;
        END IF;
        SET i = i + 1;
    END WHILE;
    IF reply = 'ok' THEN
        COMMIT;
    ELSE
        ROLLBACK;
    END IF;
    SELECT reply;
END
"""

PROCEDURES["sr_read"] = """
CREATE PROCEDURE sr_read(k VARCHAR(300) CHARACTER SET ascii COLLATE ascii_bin)
BEGIN
    SELECT HEX(value) FROM sr_data WHERE sr_data.k = k;
END
"""

# Is a watched holder entry there (with its token, its session alive)? 0: gone, 1: there,
# 2: there with a revoke request (a heartbeat sees one whose notice was missed).
PROCEDURES["sr_holder_exists"] = f"""
CREATE PROCEDURE sr_holder_exists(sem {_ID}, eid {_ID}, tok BIGINT)
BEGIN
    -- 0: gone; 1: there; 2: there with a revoke request (version 4)
    DECLARE found INT;
    SELECT COALESCE(MAX(IF(e.revoke_requested, 2, 1)), 0) INTO found
        FROM sr_entries e JOIN sr_sessions x ON x.id = e.session
        WHERE e.semaphore = sem AND e.id = eid AND e.token = tok AND {_live("x")};
    SELECT found;
END
"""

# Job slots: the indices taken in `sem` (a JSON array), as `sr_list_slots` answers and
# `sr_take_slot` tells a taker that lost an index.
PROCEDURES["sr_slot_listing"] = f"""
CREATE PROCEDURE sr_slot_listing(sem {_ID}, OUT listing LONGTEXT)
BEGIN
    SELECT COALESCE(JSON_ARRAYAGG(l.idx), JSON_ARRAY()) INTO listing FROM sr_slots l
        JOIN sr_entries e ON e.semaphore = l.semaphore AND e.id = l.entry
        JOIN sr_sessions x ON x.id = e.session
        WHERE l.semaphore = sem AND {_live("x")};
END
"""

PROCEDURES["sr_list_slots"] = f"""
CREATE PROCEDURE sr_list_slots(sem {_ID})
BEGIN
    DECLARE listing LONGTEXT;
    CALL sr_slot_listing(sem, listing);
    SELECT listing;
END
"""

# Take slot `i` for our held entry: ["ok", token] (ours, new or adopted after a lost
# reply), ["taken", [indices]] or ["lost"] (our entry is gone). At READ COMMITTED a
# missing row locks nothing (no gap locks): two takers may both find index `i` free, so
# the insert decides (a duplicate key, 1062, waits for the other's commit, then says
# it won), and a dead holder's record is deleted only under the lock of its row as
# read (a concurrent taker may have replaced it by a live one).
PROCEDURES["sr_take_slot"] = f"""
CREATE PROCEDURE sr_take_slot(sem {_ID}, eid {_ID}, i INT)
BEGIN
    DECLARE holder {_ID};
    DECLARE holder_token, tok BIGINT;
    DECLARE alive BOOLEAN;
    DECLARE mine {_ID};
    DECLARE clashed BOOLEAN DEFAULT FALSE;
    DECLARE listing LONGTEXT;
    DECLARE reply LONGTEXT;
    DECLARE CONTINUE HANDLER FOR 1062 SET clashed = TRUE;
    {_ROLLBACK}
    START TRANSACTION;
    SELECT session INTO mine FROM sr_entries
        WHERE semaphore = sem AND id = eid AND held LOCK IN SHARE MODE;
    SET alive = FALSE;
    SELECT {_live("x")} INTO alive FROM sr_sessions x WHERE x.id = mine;
    IF NOT alive THEN
        SET reply = JSON_ARRAY('lost');
    ELSE
        SELECT entry, token INTO holder, holder_token FROM sr_slots
            WHERE semaphore = sem AND idx = i FOR UPDATE;
        IF holder IS NOT NULL AND holder <> eid THEN
            -- (a plain read, never a lock: the holder's renewals must go on meanwhile)
            SET alive = FALSE;
            SELECT {_live("x")} INTO alive FROM sr_entries e JOIN sr_sessions x ON x.id = e.session
                WHERE e.semaphore = sem AND e.id = holder;
            IF NOT alive THEN
                DELETE FROM sr_slots
                    WHERE semaphore = sem AND idx = i AND entry = holder AND token = holder_token;
                SET holder = NULL;
            END IF;
        END IF;
        IF holder IS NULL THEN
            CALL sr_next_token(tok);
            INSERT INTO sr_slots VALUES (sem, i, eid, tok);
            IF clashed THEN
                -- another taker's record won (committed: this read sees it); ours when a
                -- retry after a lost reply raced the first try
                SELECT entry, token INTO holder, holder_token FROM sr_slots
                    WHERE semaphore = sem AND idx = i;
            ELSE
                SET holder = eid, holder_token = tok;
            END IF;
        END IF;
        IF holder = eid THEN
            SET reply = JSON_ARRAY('ok', holder_token);
        ELSE
            CALL sr_slot_listing(sem, listing);
            SET reply = JSON_ARRAY('taken', JSON_EXTRACT(listing, '$'));
        END IF;
    END IF;
    COMMIT;
    SELECT reply;
END
"""

PROCEDURES["sr_delete_semaphore"] = f"""
CREATE PROCEDURE sr_delete_semaphore(sem {_ID})
BEGIN
    {_ROLLBACK}
    START TRANSACTION;
    DELETE FROM sr_data WHERE LEFT(k, CHAR_LENGTH(sem) + 1) = CONCAT(sem, '/');
    IF EXISTS (SELECT 1 FROM sr_semaphores WHERE name = sem FOR UPDATE) THEN
        DELETE FROM sr_entries WHERE semaphore = sem;
        DELETE FROM sr_semaphores WHERE name = sem;
    END IF;
    COMMIT;
    SELECT NULL;
END
"""


# The keeper's connection takes the session's named lock: its liveness, and where wakes
# go. A lock still held by an older connection of the same session (cut, not yet noticed
# by the server) is taken from it: that connection is ended. 1 when taken.
PROCEDURES["sr_claim"] = f"""
CREATE PROCEDURE sr_claim(sess {_ID})
BEGIN
    DECLARE cid BIGINT;
    DECLARE taken INT;
    DECLARE CONTINUE HANDLER FOR 1094, 1095 BEGIN END;
    -- (first a wait: another client that watches this session holds the lock an instant)
    SET taken = GET_LOCK(CONCAT('sr.', sess), 1);
    IF taken = 0 THEN
        SET cid = IS_USED_LOCK(CONCAT('sr.', sess));
        IF cid IS NOT NULL AND cid <> CONNECTION_ID() THEN
            KILL CONNECTION cid;
        END IF;
        SET taken = GET_LOCK(CONCAT('sr.', sess), 2);
    END IF;
    SELECT taken;
END
"""

# Interrupt the keeper of each session in `sessions` (a JSON array): a client asking its
# own keeper to renew or look now.
PROCEDURES["sr_poke"] = """
CREATE PROCEDURE sr_poke(sessions TEXT)
BEGIN
    CALL sr_wake(sessions);
    SELECT NULL;
END
"""


def schema_statements() -> list[str]:
    """The statements that make the schema of :data:`SCHEMA_VERSION` (each sent on its
    own: a procedure's body has semicolons); idempotent."""
    statements = list(TABLES)
    for name, text in PROCEDURES.items():
        statements += [f"DROP PROCEDURE IF EXISTS {name}", text.strip()]
    statements.append("CALL sr_add_drain_flag()")
    statements.append("CALL sr_add_ramp_plan()")
    statements.append("CALL sr_add_revoke_flag()")
    statements.append(f"INSERT IGNORE INTO sr_schema_version VALUES ({SCHEMA_VERSION})")
    return statements


def schema_script() -> str:
    """The whole schema of version :data:`SCHEMA_VERSION`, for the ``mysql`` client
    (procedures between ``DELIMITER`` lines): idempotent, run in the target database."""
    lines = [f"{table};" for table in TABLES]
    lines.append("DELIMITER //")
    for name, text in PROCEDURES.items():
        lines.append(f"DROP PROCEDURE IF EXISTS {name}//")
        lines.append(f"{text.strip()}//")
    lines.append("DELIMITER ;")
    lines.append("CALL sr_add_drain_flag();")
    lines.append("CALL sr_add_ramp_plan();")
    lines.append("CALL sr_add_revoke_flag();")
    lines.append(f"INSERT IGNORE INTO sr_schema_version VALUES ({SCHEMA_VERSION});")
    return "\n".join(lines) + "\n"

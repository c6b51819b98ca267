-- The statements of the MariaDB/MySQL engine (atp.engine.mysql), each whole, as it runs.
--
-- Neither database has data-modifying common table expressions, and MySQL has no
-- RETURNING: a verb is a few of these statements in one transaction, with row locks.
-- What PostgreSQL's statements decide with CASE is decided by the engine in Python, on
-- rows its transaction holds locked (the guards from atp.states.TRANSITIONS are there).
--
-- A list is one parameter, a JSON array, so that a statement's text never depends on
-- how many items it is given: a list of keys is joined as a table
-- (JSON_TABLE ... STRAIGHT_JOIN ... FORCE INDEX (PRIMARY): each row found by its key, in
-- the array's order, even where a table is small enough that the server would rather
-- scan it, and a locking read would then wait on every row another transaction holds;
-- an array whose rows are locked is in ascending order, the order of atp.engine.locks); a list of types filters a walk of an index (JSON_CONTAINS, tested
-- per row, which leaves the walk as the index gives it).
--
-- Every time a verb writes is one reading of the database's clock, UTC_TIMESTAMP(6)
-- (Django stores naive UTC on MySQL), so daemons on several hosts agree on deadlines.
-- Table and column names are atp's own (the models' db_table and columns);
-- tests/engine/test_statements.py checks them and has the server parse every statement.

-- name: now
SELECT UTC_TIMESTAMP(6);

-- name: alive
-- A claim's first read: the clock, and daemon %s's row locked shared while it is not
-- declared stopped (a reaper's FOR UPDATE waits for this transaction, or this one for
-- the reaper). No row: the daemon claims nothing.
SELECT UTC_TIMESTAMP(6) FROM atp_daemon WHERE id = %s AND stopped IS NULL LOCK IN SHARE MODE;

-- name: claimable_types
-- The types of the JSON array %s a claim may take: not paused, never a pull type (its
-- tasks are leased by consumers, atp.engine.pull).
SELECT y.id, y.identifier, y.handler, y.timeout, y.max_restarts, y.retention,
    y.max_concurrency, y.max_input_bytes, y.max_response_bytes, y.max_queued, y.rate,
    y.bucket_size, y.tokens, y.tokens_at, y.dedup_window, y.retry_limit, y.age_limit,
    y.min_backoff, y.max_backoff, y.max_doublings, y.retry_jitter, y.max_snoozes, y.key_concurrency, y.key_rate, y.key_bucket_size, y.gated, y.is_paused, y.pull,
    y.input_format, y.description, y.created, y.updated
FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_type AS y FORCE INDEX (PRIMARY) ON y.id = j.id
WHERE y.is_paused = 0 AND y.pull = 0;

-- name: lock_limited
-- claimable_types of the limited types of %s (ascending), read again under their rows'
-- locks: a claim within limits counts their leases and spends their tokens under them.
SELECT y.id, y.identifier, y.handler, y.timeout, y.max_restarts, y.retention,
    y.max_concurrency, y.max_input_bytes, y.max_response_bytes, y.max_queued, y.rate,
    y.bucket_size, y.tokens, y.tokens_at, y.dedup_window, y.retry_limit, y.age_limit,
    y.min_backoff, y.max_backoff, y.max_doublings, y.retry_jitter, y.max_snoozes, y.key_concurrency, y.key_rate, y.key_bucket_size, y.gated, y.is_paused, y.pull,
    y.input_format, y.description, y.created, y.updated
FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_type AS y FORCE INDEX (PRIMARY) ON y.id = j.id
WHERE y.is_paused = 0 AND y.pull = 0
ORDER BY y.id FOR UPDATE;

-- name: leases
-- The leases held of each type of the JSON array %s (its max_concurrency counts them),
-- read from the index of leased rows.
SELECT type_id, count(*) FROM atp_task
WHERE daemon_id IS NOT NULL AND JSON_CONTAINS(%s, CAST(type_id AS CHAR))
GROUP BY type_id;

-- name: waiting
-- Up to %(limit)s runnable tasks of the types %(types)s (a JSON array) in claim order,
-- their queue rows locked: a walk of the claim index that skips the rows other claims
-- hold, so that two claims take different tasks without waiting on each other. The
-- engine walks once for the types without a limit and once per limited type (at most
-- its free slots).
SELECT instance_id, type_id, priority, not_before FROM atp_task FORCE INDEX (atp_task_claim_idx)
WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s
    AND (expires IS NULL OR expires > %(now)s) AND gated = 0
    AND JSON_CONTAINS(%(types)s, CAST(type_id AS CHAR))
ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: lock_instances
-- The tasks of the JSON array %s (ascending), locked: the claim takes those still
-- ACCEPTED (atp.states.TRANSITIONS), the others are strays.
SELECT i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
    i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
    i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_instance AS i FORCE INDEX (PRIMARY) ON i.id = j.id
ORDER BY i.id FOR UPDATE;

-- name: schedule
-- The claimed tasks %(rows)s (a JSON array of [key, 1 to start it too, its type's
-- timeout in microseconds]), locked and ACCEPTED, are scheduled by daemon %(daemon)s, a
-- new attempt each (those to start, started too), and their queue rows leased to it:
-- the deadline is the type's timeout after the claim.
UPDATE JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
        id BIGINT PATH '$[0]', starts INT PATH '$[1]', timeout BIGINT PATH '$[2]')) AS j
    STRAIGHT_JOIN atp_instance AS i FORCE INDEX (PRIMARY) ON i.id = j.id
    STRAIGHT_JOIN atp_task AS t FORCE INDEX (PRIMARY) ON t.instance_id = j.id
SET i.status = IF(j.starts, 'RUNNING', 'SCHEDULED'), i.attempt = i.attempt + 1,
    i.daemon_id = %(daemon)s, i.updated = %(now)s, i.started = IF(j.starts, %(now)s, i.started),
    t.daemon_id = %(daemon)s, t.claimed = %(now)s,
    t.deadline = %(now)s + INTERVAL j.timeout MICROSECOND;

-- name: log_row
-- A history entry (task, time, state, attempt, message, daemon, actor: empty for a
-- daemon's). Only placeholders between the parentheses: the driver's executemany then
-- sends all of a round's rows in one INSERT (a literal there made it send one per row).
INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
VALUES (%s, %s, %s, %s, %s, %s, %s);

-- name: inputs_of_claimed
-- The inputs of the tasks of the JSON array %s.
SELECT n.instance_id, n.input_format, n.data
FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_inputs AS n FORCE INDEX (PRIMARY) ON n.instance_id = j.id;

-- name: spend
-- A type's bucket after a claim took tokens from it (atp.rates): tokens, when, type.
UPDATE atp_type SET tokens = %s, tokens_at = %s WHERE id = %s;

-- name: next_due
-- The first not_before of a waiting task of %(types)s (a JSON array) that is due after
-- now and within %(within)s microseconds, and now.
SELECT MIN(not_before), UTC_TIMESTAMP(6) FROM atp_task
WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before > UTC_TIMESTAMP(6)
    AND not_before < UTC_TIMESTAMP(6) + INTERVAL %(within)s MICROSECOND
    AND JSON_CONTAINS(%(types)s, CAST(type_id AS CHAR));

-- name: start
-- Attempt %(attempt)s of task %(pk)s, SCHEDULED, moves to RUNNING; no row written:
-- refused.
UPDATE atp_instance SET status = 'RUNNING', started = %(now)s, updated = %(now)s
WHERE id = %(pk)s AND status = 'SCHEDULED' AND attempt = %(attempt)s;

-- name: instance_of
SELECT id, type_id, identifier, named, status, priority, tag, attempt, restarts, retries, snoozes,
    batch_id, progress_done, progress_total, progress_message, daemon_id, created, updated,
    started, finished, expires
FROM atp_instance WHERE id = %s;

-- name: type_of
SELECT id, identifier, handler, timeout, max_restarts, retention, max_concurrency,
    max_input_bytes, max_response_bytes, max_queued, rate, bucket_size, tokens, tokens_at,
    dedup_window, retry_limit, age_limit, min_backoff, max_backoff, max_doublings,
    retry_jitter, max_snoozes, key_concurrency, key_rate, key_bucket_size, gated,
    is_paused, pull, input_format, description, created, updated
FROM atp_type WHERE id = %s;

-- name: inputs_of
SELECT instance_id, input_format, data FROM atp_inputs WHERE instance_id = %s;

-- name: dequeue
-- A leased task's queue row goes (its end is written next, or the transaction rolls
-- back).
DELETE FROM atp_task WHERE instance_id = %s AND daemon_id IS NOT NULL;

-- name: finish
-- Attempt %(attempt)s of task %(pk)s, RUNNING or PAUSED, moves to FINISHED.
UPDATE atp_instance SET status = 'FINISHED', finished = %(now)s, updated = %(now)s
WHERE id = %(pk)s AND attempt = %(attempt)s AND status IN ('PAUSED', 'RUNNING');

-- name: store
-- A task's response (task, data, content type, charset, size, when), replacing any.
INSERT INTO atp_response (instance_id, data, content_type, charset, size, stored)
VALUES (%s, %s, %s, %s, %s, %s)
ON DUPLICATE KEY UPDATE data = VALUES(data), content_type = VALUES(content_type),
    charset = VALUES(charset), size = VALUES(size), stored = VALUES(stored);

-- name: lock_leased
-- The settle's first read: the queue rows of the tasks of the JSON array %s (ascending)
-- that hold a lease, locked, with when they were claimed. A task without one is ended
-- by no settle.
SELECT t.instance_id, t.claimed
FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_task AS t FORCE INDEX (PRIMARY) ON t.instance_id = j.id
WHERE t.daemon_id IS NOT NULL
ORDER BY t.instance_id FOR UPDATE;

-- name: lock_states
-- The state and attempt of the tasks of the JSON array %s (ascending), locked: the
-- settle decides on them what each outcome may write.
SELECT i.id, i.status, i.attempt
FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_instance AS i FORCE INDEX (PRIMARY) ON i.id = j.id
ORDER BY i.id FOR UPDATE;

-- name: write_ends
-- What the settle decided, in one statement: %(rows)s is a JSON array of [key, state,
-- start (null: unchanged), end (null: unchanged)].
UPDATE JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
        id BIGINT PATH '$[0]', status VARCHAR(16) PATH '$[1]',
        started DATETIME(6) PATH '$[2]', finished DATETIME(6) PATH '$[3]')) AS j
    STRAIGHT_JOIN atp_instance AS i FORCE INDEX (PRIMARY) ON i.id = j.id
SET i.status = j.status, i.updated = %(now)s, i.started = COALESCE(j.started, i.started),
    i.finished = COALESCE(j.finished, i.finished);

-- name: dequeue_ended
-- The queue rows of the tasks of the JSON array %s, which the settle ended (it holds
-- them locked).
DELETE t FROM JSON_TABLE(%s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j
    STRAIGHT_JOIN atp_task AS t FORCE INDEX (PRIMARY) ON t.instance_id = j.id;

-- name: type_as_read
-- An enqueue's first read: the clock, and the task type locked shared (an operator's
-- change of it waits for the enqueue) only while it is as the enqueue read it: same
-- identifier, format and kind (pull or not), a limit the inputs fit in, no max_queued
-- (an enqueue within one counts the queue, the portable form), and for a task named by
-- its caller no dedup_window (the portable form checks one). No row: the enqueue writes
-- nothing and its caller reads the type again.
SELECT UTC_TIMESTAMP(6) FROM atp_type
WHERE id = %(type_id)s AND identifier = %(type_identifier)s AND input_format = %(input_format)s
    AND COALESCE(max_input_bytes, %(max_input_bytes)s) >= %(size)s AND max_queued IS NULL
    AND pull = %(pull)s AND (dedup_window IS NULL OR NOT %(named)s)
LOCK IN SHARE MODE;

-- name: insert_instances
-- MariaDB: one instance per identifier of %(identifiers)s (a JSON array), in its order,
-- with the values they share bound once; returns each key with its identifier.
INSERT INTO atp_instance (type_id, identifier, named, status, priority, tag, attempt,
    restarts, retries, snoozes, batch_id, progress_done, progress_total, progress_message,
    daemon_id, created, updated, started, finished, expires)
SELECT %(type_id)s, j.identifier, %(named)s, %(status)s, %(priority)s, %(tag)s, %(attempt)s,
    %(restarts)s, %(retries)s, %(snoozes)s, %(batch_id)s, %(progress_done)s, %(progress_total)s,
    %(progress_message)s, %(daemon_id)s, %(created)s, %(updated)s, %(started)s, %(finished)s, %(expires)s
FROM JSON_TABLE(%(identifiers)s, '$[*]' COLUMNS (
    number FOR ORDINALITY, identifier TEXT PATH '$' ERROR ON ERROR)) AS j
ORDER BY j.number
RETURNING id, identifier;

-- name: insert_instance
-- One instance, its key read from the driver: a task enqueued alone (an INSERT of
-- VALUES costs the server less than one of a JSON array), and on MySQL, which has no
-- RETURNING, each instance of a batch (the keys of an INSERT of many rows need not be
-- consecutive under innodb_autoinc_lock_mode = 2, MySQL 8's default).
INSERT INTO atp_instance (type_id, identifier, named, status, priority, tag, attempt,
    restarts, retries, snoozes, batch_id, progress_done, progress_total, progress_message,
    daemon_id, created, updated, started, finished, expires)
VALUES (%(type_id)s, %(identifier)s, %(named)s, %(status)s, %(priority)s, %(tag)s,
    %(attempt)s, %(restarts)s, %(retries)s, %(snoozes)s, %(batch_id)s, %(progress_done)s,
    %(progress_total)s, %(progress_message)s, %(daemon_id)s, %(created)s, %(updated)s,
    %(started)s, %(finished)s, %(expires)s);

-- name: insert_task
-- The queue row of a task enqueued alone.
INSERT INTO atp_task (instance_id, type_id, identifier, priority, tag, enqueued, not_before,
    daemon_id, claimed, deadline, paused_since, expires, gated, turn, key_id)
VALUES (%(instance_id)s, %(type_id)s, %(identifier)s, %(priority)s, %(tag)s, %(enqueued)s,
    %(not_before)s, NULL, NULL, NULL, NULL, NULL, FALSE, NULL, NULL);

-- name: insert_input
-- The inputs of a task enqueued alone.
INSERT INTO atp_inputs (instance_id, input_format, data)
VALUES (%(instance_id)s, %(input_format)s, %(data)s);

-- name: insert_tasks
-- The queue rows of the tasks %(rows)s (a JSON array of [key, identifier]).
INSERT INTO atp_task (instance_id, type_id, identifier, priority, tag, enqueued, not_before,
    daemon_id, claimed, deadline, paused_since, expires, gated, turn, key_id)
SELECT j.id, %(type_id)s, j.identifier, %(priority)s, %(tag)s, %(enqueued)s, %(not_before)s,
    NULL, NULL, NULL, NULL, NULL, FALSE, NULL, NULL
FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', identifier TEXT PATH '$[1]' ERROR ON ERROR)) AS j;

-- name: insert_inputs
-- The inputs of the tasks %(rows)s (a JSON array of [key, inputs as stored]).
INSERT INTO atp_inputs (instance_id, input_format, data)
SELECT j.id, %(input_format)s, j.data
FROM JSON_TABLE(%(rows)s, '$[*]' COLUMNS (
    id BIGINT PATH '$[0]', data LONGTEXT PATH '$[1]' ERROR ON ERROR)) AS j;

-- name: insert_accepted
-- The first history entry of each task of %(keys)s (a JSON array).
INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
SELECT j.id, %(time)s, 'ACCEPTED', 0, 'enqueued', '', ''
FROM JSON_TABLE(%(keys)s, '$[*]' COLUMNS (id BIGINT PATH '$')) AS j;

-- The statements of the SQLite engine (atp.engine.sqlite), each whole, as it runs.
--
-- SQLite has no data-modifying common table expressions: a verb is a few of these
-- statements in one immediate transaction (its single write lock serialises them with
-- every other writer), with the same guards, history and fencing as the portable engine
-- (atp.engine.orm). A list (keys, types) is one parameter, a JSON array read with
-- json_each, so that a statement's text never depends on how many items it is given.
-- Times are parameters: on SQLite the database clock is this host's clock, read once
-- per verb. Table and column names are atp's own (the models' db_table and columns);
-- the task states in a guard are those atp.states.TRANSITIONS allows.
-- tests/engine/test_statements.py checks both and compiles every statement.

-- name: has_json
-- Whether the library has its JSON functions (built in since 3.38); without them the
-- orm engine serves.
SELECT json_array_length('[]');

-- name: alive
-- The claim's first read: a daemon declared stopped claims nothing.
SELECT 1 FROM atp_daemon WHERE id = %s AND stopped IS NULL;

-- name: claimable_types
-- The types of the JSON array %s a claim may take: not paused, never a pull type (its
-- tasks are leased by consumers, atp.engine.pull).
SELECT id, identifier, handler, timeout, max_restarts, retention, max_concurrency,
    max_input_bytes, max_response_bytes, max_queued, rate, bucket_size, tokens, tokens_at,
    dedup_window, retry_limit, age_limit, min_backoff, max_backoff, max_doublings,
    retry_jitter, max_snoozes, key_concurrency, key_rate, key_bucket_size, gated,
    is_paused, pull, input_format, description, created, updated
FROM atp_type
WHERE is_paused = 0 AND pull = 0 AND id IN (SELECT value FROM json_each(%s));

-- name: leases
-- The leases held of each type of the JSON array %s (its max_concurrency counts them).
SELECT type_id, count(*) FROM atp_task
WHERE daemon_id IS NOT NULL AND type_id IN (SELECT value FROM json_each(%s))
GROUP BY type_id;

-- name: waiting
-- The keys of up to %(limit)s runnable tasks of the types %(types)s (a JSON array), in
-- claim order, walking the claim index.
SELECT instance_id FROM atp_task INDEXED BY atp_task_claim_idx
WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s
    AND (expires IS NULL OR expires > %(now)s) AND NOT gated
    AND turn IS NULL
    AND type_id IN (SELECT value FROM json_each(%(types)s))
ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s;

-- name: waiting_within_limits
-- The keys of up to %(limit)s runnable tasks in claim order: of the types without a limit
-- (%(unlimited)s, a JSON array), and of each type with a limit at most its free slots
-- (%(free)s, a JSON object: type key -> slots, each at most %(limit)s), counted by the
-- caller in this transaction (which holds the write lock, so no other claim can take a
-- slot or a token meanwhile). The claim index is walked once for the types without a
-- limit (not at all when there are none: a condition on parameters alone is tested
-- before the walk) and once per limited type; SQLite takes no LIMIT from an outer row,
-- so each limited type's walk stops after %(limit)s rows, of which its first free ones
-- (``rank``) are kept.
SELECT instance_id FROM (
    SELECT * FROM (
        SELECT instance_id, priority, not_before FROM atp_task INDEXED BY atp_task_claim_idx
        WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s
            AND (expires IS NULL OR expires > %(now)s) AND NOT gated
            AND turn IS NULL
            AND type_id IN (SELECT value FROM json_each(%(unlimited)s))
            AND json_array_length(%(unlimited)s) > 0
        ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s)
    UNION ALL
    SELECT instance_id, priority, not_before FROM (
        SELECT t.instance_id, t.priority, t.not_before, q.value AS free,
            row_number() OVER (
                PARTITION BY q.key ORDER BY t.priority DESC, t.not_before, t.instance_id
            ) AS rank
        FROM json_each(%(free)s) AS q CROSS JOIN atp_task AS t
        WHERE t.instance_id IN (
            SELECT instance_id FROM atp_task INDEXED BY atp_task_claim_idx
            WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= %(now)s
                AND (expires IS NULL OR expires > %(now)s) AND NOT gated
                AND turn IS NULL
                AND type_id = CAST(q.key AS INTEGER)
            ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s))
    WHERE rank <= free
) ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s;

-- name: schedule
-- The tasks %(keys)s (a JSON array), ACCEPTED, are scheduled by daemon %(daemon)s, a new
-- attempt each; those of %(starting)s are started too. Returns the tasks written.
UPDATE atp_instance
SET status = CASE WHEN id IN (SELECT value FROM json_each(%(starting)s))
        THEN 'RUNNING' ELSE 'SCHEDULED' END,
    attempt = attempt + 1, daemon_id = %(daemon)s, updated = %(now)s,
    started = CASE WHEN id IN (SELECT value FROM json_each(%(starting)s))
        THEN %(now)s ELSE started END
WHERE id IN (SELECT value FROM json_each(%(keys)s)) AND status IN ('ACCEPTED')
RETURNING id, type_id, identifier, named, status, priority, tag, attempt, restarts, retries, snoozes,
    batch_id, progress_done, progress_total, progress_message, daemon_id, created, updated,
    started, finished, expires;

-- name: lease
-- A queue row leased to a daemon (daemon, claimed, deadline, key): its deadline is its
-- type's timeout after its claim.
UPDATE atp_task SET daemon_id = %s, claimed = %s, deadline = %s WHERE instance_id = %s;

-- name: log_row
-- A history entry a daemon writes (task, time, state, attempt, message, daemon): no
-- person made it (actor is empty).
INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
VALUES (%s, %s, %s, %s, %s, %s, '');

-- name: inputs_of_claimed
-- The inputs of the tasks of the JSON array %s.
SELECT instance_id, input_format, data FROM atp_inputs
WHERE instance_id IN (SELECT value FROM json_each(%s));

-- name: spend
-- A type's bucket after a claim took tokens from it (atp.rates): tokens, when, type.
UPDATE atp_type SET tokens = %s, tokens_at = %s WHERE id = %s;

-- name: next_due
-- See next_due of postgresql.sql: the first not_before of a waiting task of %(types)s
-- (a JSON array) after %(now)s and before %(bound)s, by a skip scan of the claim index.
WITH RECURSIVE levels(priority) AS (
    SELECT * FROM (SELECT priority FROM atp_task INDEXED BY atp_task_claim_idx
        WHERE daemon_id IS NULL AND NOT gated AND turn IS NULL
        ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.priority FROM atp_task t INDEXED BY atp_task_claim_idx
            WHERE t.daemon_id IS NULL AND NOT t.gated AND t.turn IS NULL
                AND t.priority < l.priority
            ORDER BY t.priority DESC LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL
)
SELECT min((
    SELECT t.not_before FROM atp_task t INDEXED BY atp_task_claim_idx
    WHERE t.daemon_id IS NULL AND NOT t.gated AND t.turn IS NULL AND t.priority = l.priority
        AND t.not_before > %(now)s
        AND t.not_before < %(bound)s AND t.paused_since IS NULL
        AND t.type_id IN (SELECT value FROM json_each(%(types)s))
    ORDER BY t.not_before LIMIT 1))
FROM levels l WHERE l.priority IS NOT NULL;

-- name: start
-- Attempt %(attempt)s of task %(pk)s, SCHEDULED, moves to RUNNING; returns the task, or
-- no row (refused).
UPDATE atp_instance SET status = 'RUNNING', started = %(now)s, updated = %(now)s
WHERE id = %(pk)s AND status = 'SCHEDULED' AND attempt = %(attempt)s
RETURNING id, type_id, identifier, named, status, priority, tag, attempt, restarts, retries, snoozes,
    batch_id, progress_done, progress_total, progress_message, daemon_id, created, updated,
    started, finished, expires;

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
ON CONFLICT (instance_id) DO UPDATE SET data = excluded.data,
    content_type = excluded.content_type, charset = excluded.charset, size = excluded.size,
    stored = excluded.stored;

-- name: end_finished
-- The settle's end of attempt %(attempt)s of task %(pk)s: written only while the attempt
-- holds its lease and may move to FINISHED; the queue row goes once the task's row
-- matched (there is no savepoint to roll back to).
UPDATE atp_instance SET status = 'FINISHED', finished = %(now)s, updated = %(now)s
WHERE id = %(pk)s AND attempt = %(attempt)s
    AND status IN ('PAUSED', 'RUNNING')
    AND EXISTS (SELECT 1 FROM atp_task WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL);

-- name: end_failed
-- end_finished's twin for FAILED.
UPDATE atp_instance SET status = 'FAILED', finished = %(now)s, updated = %(now)s
WHERE id = %(pk)s AND attempt = %(attempt)s
    AND status IN ('PAUSED', 'RUNNING', 'SCHEDULED')
    AND EXISTS (SELECT 1 FROM atp_task WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL);

-- name: start_and_end
-- An attempt whose start is not written yet: from SCHEDULED to RUNNING, and on to its end
-- %(status)s when it has one (finished is left as it is for RUNNING). Its start is dated
-- when it started (%(began)s), never before its claim. Returns the start written.
UPDATE atp_instance SET status = %(status)s, updated = %(now)s,
    started = MAX(%(began)s, (SELECT claimed FROM atp_task WHERE instance_id = %(pk)s)),
    finished = CASE WHEN %(status)s = 'RUNNING' THEN finished ELSE %(now)s END
WHERE id = %(pk)s AND attempt = %(attempt)s AND status = 'SCHEDULED'
    AND EXISTS (SELECT 1 FROM atp_task WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL)
RETURNING started;

-- name: type_as_read
-- Selects the task type only while it is as an enqueue read it: same identifier, format
-- and kind (pull or not), a limit the inputs fit in, no max_queued (an enqueue within one
-- counts the queue, the portable form), and for a task named by its caller no
-- dedup_window (the portable form checks one). Otherwise the enqueue writes nothing and
-- its caller reads the type again.
SELECT 1 FROM atp_type
WHERE id = %(type_id)s AND identifier = %(type_identifier)s AND input_format = %(input_format)s
    AND COALESCE(max_input_bytes, %(max_input_bytes)s) >= %(size)s AND max_queued IS NULL
    AND pull = %(pull)s AND (dedup_window IS NULL OR NOT %(named)s);

-- name: insert_instances
-- One instance per identifier of %(identifiers)s (a JSON array), in its order, with the
-- values they share bound once; returns each key with its identifier.
INSERT INTO atp_instance (type_id, identifier, named, status, priority, tag, attempt,
    restarts, retries, snoozes, batch_id, progress_done, progress_total, progress_message,
    daemon_id, created, updated, started, finished, expires)
SELECT %(type_id)s, value, %(named)s, %(status)s, %(priority)s, %(tag)s, %(attempt)s,
    %(restarts)s, %(retries)s, %(snoozes)s, %(batch_id)s, %(progress_done)s, %(progress_total)s,
    %(progress_message)s, %(daemon_id)s, %(created)s, %(updated)s, %(started)s, %(finished)s, %(expires)s
FROM json_each(%(identifiers)s) ORDER BY key
RETURNING id, identifier;

-- name: insert_tasks
-- The queue rows of the tasks %(rows)s (a JSON array of [key, identifier]).
INSERT INTO atp_task (instance_id, type_id, identifier, priority, tag, enqueued, not_before,
    daemon_id, claimed, deadline, paused_since, expires, gated, turn, key_id)
SELECT json_extract(value, '$[0]'), %(type_id)s, json_extract(value, '$[1]'), %(priority)s,
    %(tag)s, %(enqueued)s, %(not_before)s, NULL, NULL, NULL, NULL, NULL, FALSE, NULL, NULL
FROM json_each(%(rows)s);

-- name: insert_inputs
-- The inputs of the tasks %(rows)s (a JSON array of [key, inputs as stored]).
INSERT INTO atp_inputs (instance_id, input_format, data)
SELECT json_extract(value, '$[0]'), %(input_format)s, json_extract(value, '$[1]')
FROM json_each(%(rows)s);

-- name: insert_accepted
-- The first history entry of each task of %(keys)s (a JSON array).
INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
SELECT value, %(time)s, 'ACCEPTED', 0, 'enqueued', '', '' FROM json_each(%(keys)s);

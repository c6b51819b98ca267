-- The statements of the PostgreSQL engine (atp.engine.postgresql), each whole, as it runs.
--
-- Each verb is one statement of data-modifying common table expressions, with the same
-- guards, history and locking order (queue row before task row, atp.engine.locks) as the
-- portable engine (atp.engine.orm). Table and column names are atp's own (the models'
-- db_table and columns); the task states in a guard are those atp.states.TRANSITIONS
-- allows. tests/engine/test_statements.py checks both, renders every statement against
-- the database, and checks that the statements repeating a step (the claim's, the
-- settle's) repeat it word for word.

-- name: claim_plan
-- Planner settings for the claim's transaction: the only plan left is a walk of the
-- claim index in claim order, which stops after ``limit`` rows. Chosen by cost, a table
-- whose statistics are missing or stale (never analyzed, or analyzed while nearly empty
-- before a burst of enqueues) is claimed with a bitmap scan and a sort of every waiting
-- row: 30 times slower with 100,000 of them. The penalty the planner adds to a disabled
-- plan would make the claim look expensive enough to be compiled (JIT) on every run,
-- hundreds of milliseconds each: JIT is off too. A claim prepared on the server
-- (``statement_cursor``) is planned once, under these settings, and its plan kept for the
-- connection (``plan_cache_mode``): planned anew each time, as PostgreSQL would choose,
-- it spends 2 ms planning for 0.4 ms running. The ORM's walks of the claim index on
-- PostgreSQL (pull leases, the orm engine) run it too (atp.engine.databases).
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
    set_config('enable_sort', 'off', true), set_config('jit', 'off', true),
    set_config('plan_cache_mode', 'force_generic_plan', true);

-- name: bound_claim_plan
-- claim_plan for the engine's own claims (and next_due), whose limit is a parameter:
-- every join a nested loop too. A claim takes few rows (about as many as a daemon has
-- workers), but the plan kept for a claim prepared with its limit as a parameter expects
-- a tenth of the waiting rows to be claimed, and starts the tasks claimed by hashing
-- every ACCEPTED task: 20 ms a claim with 30,000 waiting. Without hash and merge joins,
-- each row the claim reads is read by its key, as with a limit written in the statement;
-- the statement's own few rows (the claimed, the settled) are joined by nested loops too.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
    set_config('enable_sort', 'off', true), set_config('jit', 'off', true),
    set_config('plan_cache_mode', 'force_generic_plan', true),
    set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true);

-- name: lock_round
-- What a claim, or a round that writes the ends of attempts, runs first, in a statement of
-- its own: bound_claim_plan's planner settings, and the locks the next statement needs,
-- in the order of atp.engine.locks:
--
-- 1. the daemon's row (KEY SHARE: a reaper's FOR UPDATE before it declares the daemon
--    stopped waits for this round, or this round for the reaper);
-- 2. for a claim %(within_limits)s, its limited types' rows (NO KEY UPDATE: claims of
--    those types wait for each other, while enqueues, which only take KEY SHARE, go on),
--    kept for the transaction (atp.locked_types) for the claim to read;
-- 3. the queue rows of the attempts to settle (%(pks)s), those leased, in key order
--    (``held``, FOR UPDATE);
-- 4. their tasks, in key order (``prior``, FOR NO KEY UPDATE).
--
-- Each step waits for the one before it (``held`` counts the rows of ``alive`` and
-- ``locked`` first). The statement after it, in the same transaction, reads these rows as
-- they are under lock (no other transaction changes them before the commit), each by its
-- key. Locked in that statement's own steps instead, they would reach its update as
-- another step's rows, and a join of two steps is a nested loop over both (the planner
-- cannot know how many rows a step returns): 30 ms of a 60 ms round of 250 tasks.
WITH alive AS (
    SELECT id FROM atp_daemon WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), locked AS (
    SELECT id FROM atp_type
    WHERE id = ANY(%(types)b::bigint[]) AND NOT is_paused AND NOT pull
        AND (max_concurrency IS NOT NULL OR rate IS NOT NULL) AND EXISTS (SELECT 1 FROM alive)
        AND %(within_limits)s
    ORDER BY id FOR NO KEY UPDATE
), held AS (
    SELECT instance_id FROM atp_task
    WHERE instance_id = ANY(%(pks)b::bigint[]) AND daemon_id IS NOT NULL
        AND (SELECT count(*) FROM alive) + (SELECT count(*) FROM locked) >= 0
    ORDER BY instance_id FOR UPDATE
), prior AS (
    SELECT id FROM atp_instance WHERE id = ANY(ARRAY(SELECT instance_id FROM held))
    ORDER BY id FOR NO KEY UPDATE
)
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_bitmapscan', 'off', true),
    set_config('enable_sort', 'off', true), set_config('jit', 'off', true),
    set_config('plan_cache_mode', 'force_generic_plan', true),
    set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
    set_config('atp.locked_types', (SELECT coalesce(string_agg(id::text, ','), '') FROM locked), true),
    (SELECT count(*) FROM prior);

-- name: claim
-- Lease and schedule up to %(limit)s runnable tasks of the types %(types)s, start the
-- first %(start)s of them, and return them in claim order (with their inputs when
-- %(inputs)s), each row with the facts (meta): the daemon alive, a limited type met.
-- The stray rows met (and, in the statements that settle too, the keys settled) come on
-- one row only, the first the server makes (NULL on the others): repeated on every row,
-- a round of 170 tasks sent and parsed 170 copies of its 170 keys (18 µs a task in
-- psycopg, more on the server).
--
-- The types it may take (kinds): those of %(types)s not paused, never a pull type (its
-- tasks are leased by consumers, atp.engine.pull). The order of locks is the one of
-- atp.engine.locks: the daemon's row (KEY SHARE: ``alive``, or lock_round before it when
-- the round writes ends too), the queue rows (skipping those another claim holds), then
-- the tasks. A row whose task is not ACCEPTED is not taken; its key comes back in
-- ``strays`` for repair. The tasks leased come back from ``leased``, which carries the
-- rows ``scheduled`` wrote: joined to each other, two steps would be a nested loop over
-- both. ``scheduled`` reads each task by its key: its guard on the state is written so
-- that no index answers it (CASE), or the planner, which cannot know how many tasks wait
-- when atp_instance was never analyzed, would walk every waiting task's entry in
-- atp_instance_live_idx once per task claimed (30 ms a round with 20,000 waiting).
--
-- A task's type comes with the first task of that type only (``introduces``; the others'
-- type columns are NULL): reading 28 columns again for each task was a tenth of the
-- daemon's time in a drain.
--
-- This claim walks the claim index for all its types at once. When one of them has a
-- concurrency limit or a rate (is_limited), it takes nothing and says so (``limited``),
-- and claim_within_limits serves. No claim of this engine takes a gated task (one that
-- holds semaphores, which atp.engine.semaphores counts): they are not in the claim index.
WITH kinds AS (
    SELECT id, max_concurrency, rate, bucket_size, tokens, tokens_at,
        (max_concurrency IS NOT NULL OR rate IS NOT NULL) AS is_limited
    FROM atp_type WHERE id = ANY(%(types)b::bigint[]) AND NOT is_paused AND NOT pull
), alive AS (
    SELECT id FROM atp_daemon WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), limited AS (
    SELECT 1 FROM kinds WHERE is_limited LIMIT 1
), picked AS (
    SELECT instance_id, priority, not_before FROM atp_task
    WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
        AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP()) AND NOT gated
        AND turn IS NULL
        AND EXISTS (SELECT 1 FROM alive)
        AND type_id = ANY(ARRAY(SELECT id FROM kinds)) AND NOT EXISTS (SELECT 1 FROM limited)
    ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT instance_id,
        row_number() OVER (ORDER BY priority DESC, not_before, instance_id) <= %(start)s AS starts
    FROM picked
), scheduled AS (
    UPDATE atp_instance i
    SET status = CASE WHEN ranked.starts THEN 'RUNNING' ELSE 'SCHEDULED' END,
        started = CASE WHEN ranked.starts THEN STATEMENT_TIMESTAMP() ELSE i.started END,
        attempt = i.attempt + 1, daemon_id = %(daemon)s, updated = STATEMENT_TIMESTAMP()
    FROM ranked WHERE i.id = ranked.instance_id
        AND CASE WHEN i.status IN ('ACCEPTED') THEN true ELSE false END
    RETURNING i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
        i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
        i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
), leased AS (
    UPDATE atp_task t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, atp_type ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.not_before, s.id, s.type_id, s.identifier, s.named, s.status, s.priority, s.tag,
        s.attempt, s.restarts, s.retries, s.snoozes, s.batch_id, s.progress_done, s.progress_total,
        s.progress_message, s.daemon_id, s.created, s.updated, s.started, s.finished, s.expires
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'SCHEDULED', attempt, '', %(label)s, ''
    FROM scheduled
    UNION ALL
    SELECT id, STATEMENT_TIMESTAMP(), 'RUNNING', attempt, '', %(label)s, ''
    FROM scheduled WHERE status = 'RUNNING'
)
SELECT meta.alive, meta.limited,
    CASE WHEN row_number() OVER () = 1 THEN meta.strays END AS strays,
    CASE WHEN row_number() OVER () = 1 THEN meta.settled END AS settled,
    l.id, l.type_id, l.identifier, l.named, l.status, l.priority, l.tag, l.attempt,
    l.restarts, l.retries, l.snoozes, l.batch_id, l.progress_done, l.progress_total,
    l.progress_message, l.daemon_id, l.created, l.updated, l.started, l.finished, l.expires,
    ty.id, ty.identifier, ty.handler, ty.timeout, ty.max_restarts, ty.retention,
    ty.max_concurrency, ty.max_input_bytes, ty.max_response_bytes, ty.max_queued, ty.rate,
    ty.bucket_size, ty.tokens, ty.tokens_at, ty.dedup_window, ty.retry_limit, ty.age_limit,
    ty.min_backoff, ty.max_backoff, ty.max_doublings, ty.retry_jitter, ty.max_snoozes, ty.key_concurrency, ty.key_rate, ty.key_bucket_size, ty.gated, ty.is_paused, ty.pull,
    ty.input_format, ty.description, ty.created, ty.updated,
    inp.instance_id, inp.input_format, inp.data
FROM (
    SELECT (SELECT count(*) FROM alive) AS alive, (SELECT count(*) FROM limited) AS limited,
        (SELECT array_agg(instance_id) FROM picked
         WHERE instance_id NOT IN (SELECT id FROM scheduled)) AS strays,
        NULL::bigint[] AS settled
) AS meta
LEFT JOIN ((SELECT *, row_number() OVER (PARTITION BY type_id ORDER BY id) = 1 AS introduces
            FROM leased) l
           LEFT JOIN atp_type ty ON ty.id = l.type_id AND l.introduces
           LEFT JOIN atp_inputs inp ON inp.instance_id = l.id AND %(inputs)s)
    ON true
ORDER BY l.priority DESC, l.not_before, l.id;

-- name: lease_keys
-- The claim's second half (see claim) for the tasks %(keys)s, in claim order, chosen by
-- the gated claim in this transaction (atp.engine.semaphores: the daemon's row and the
-- tasks' queue rows are locked already): lease and schedule them, start the first
-- %(start)s, and return them in that order as claim does, with its facts (the daemon
-- alive: the caller locked its row; no limited type: the caller counted the limits).
WITH picked AS (
    SELECT t.instance_id, k.position
    FROM unnest(%(keys)b::bigint[]) WITH ORDINALITY AS k(id, position)
    JOIN atp_task t ON t.instance_id = k.id
    WHERE t.daemon_id IS NULL
), ranked AS (
    SELECT instance_id, position <= %(start)s AS starts FROM picked
), scheduled AS (
    UPDATE atp_instance i
    SET status = CASE WHEN ranked.starts THEN 'RUNNING' ELSE 'SCHEDULED' END,
        started = CASE WHEN ranked.starts THEN STATEMENT_TIMESTAMP() ELSE i.started END,
        attempt = i.attempt + 1, daemon_id = %(daemon)s, updated = STATEMENT_TIMESTAMP()
    FROM ranked WHERE i.id = ranked.instance_id
        AND CASE WHEN i.status IN ('ACCEPTED') THEN true ELSE false END
    RETURNING i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
        i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
        i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
), leased AS (
    UPDATE atp_task t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, atp_type ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.not_before, s.id, s.type_id, s.identifier, s.named, s.status, s.priority, s.tag,
        s.attempt, s.restarts, s.retries, s.snoozes, s.batch_id, s.progress_done, s.progress_total,
        s.progress_message, s.daemon_id, s.created, s.updated, s.started, s.finished, s.expires
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'SCHEDULED', attempt, '', %(label)s, ''
    FROM scheduled
    UNION ALL
    SELECT id, STATEMENT_TIMESTAMP(), 'RUNNING', attempt, '', %(label)s, ''
    FROM scheduled WHERE status = 'RUNNING'
)
SELECT meta.alive, meta.limited,
    CASE WHEN row_number() OVER () = 1 THEN meta.strays END AS strays,
    CASE WHEN row_number() OVER () = 1 THEN meta.settled END AS settled,
    l.id, l.type_id, l.identifier, l.named, l.status, l.priority, l.tag, l.attempt,
    l.restarts, l.retries, l.snoozes, l.batch_id, l.progress_done, l.progress_total,
    l.progress_message, l.daemon_id, l.created, l.updated, l.started, l.finished, l.expires,
    ty.id, ty.identifier, ty.handler, ty.timeout, ty.max_restarts, ty.retention,
    ty.max_concurrency, ty.max_input_bytes, ty.max_response_bytes, ty.max_queued, ty.rate,
    ty.bucket_size, ty.tokens, ty.tokens_at, ty.dedup_window, ty.retry_limit, ty.age_limit,
    ty.min_backoff, ty.max_backoff, ty.max_doublings, ty.retry_jitter, ty.max_snoozes, ty.key_concurrency, ty.key_rate, ty.key_bucket_size, ty.gated, ty.is_paused, ty.pull,
    ty.input_format, ty.description, ty.created, ty.updated,
    inp.instance_id, inp.input_format, inp.data
FROM (
    SELECT 1 AS alive, 0 AS limited,
        (SELECT array_agg(k.id) FROM unnest(%(keys)b::bigint[]) AS k(id)
         WHERE k.id NOT IN (SELECT id FROM scheduled)) AS strays,
        NULL::bigint[] AS settled
) AS meta
LEFT JOIN ((SELECT *, row_number() OVER (PARTITION BY type_id ORDER BY id) = 1 AS introduces
            FROM leased) l
           LEFT JOIN atp_type ty ON ty.id = l.type_id AND l.introduces
           LEFT JOIN atp_inputs inp ON inp.instance_id = l.id AND %(inputs)s)
    ON true
ORDER BY (SELECT p.position FROM picked p WHERE p.instance_id = l.id);

-- name: claim_within_limits
-- The claim (see claim) when one of its types has a concurrency limit or a rate. It
-- runs after lock_round in the same transaction, a statement of its own so that it
-- reads the leases after the types' locks are held (a single statement would count them
-- as they were when it began, before another claim of the same types committed). It
-- takes at most the free slots of each limited type (its max_concurrency less its
-- leases), and of a type with a rate at most the whole tokens in its bucket (atp.rates:
-- refilled since the last claim, ``bucket``), walking the claim index once per limited
-- type and once for the others, and keeps the first %(limit)s in claim order. The same
-- statement takes a token per task leased (``spent``: a bucket none was taken from is
-- left as it is, its refill counts from the same time). A type the locks did not take
-- (it was not limited, or paused, when they were taken, and is now) gets no slot this
-- round: its leases were counted without its lock (atp.locked_types, set by lock_round
-- for the transaction).
WITH kinds AS (
    SELECT id, max_concurrency, rate, bucket_size, tokens, tokens_at,
        (max_concurrency IS NOT NULL OR rate IS NOT NULL) AS is_limited
    FROM atp_type WHERE id = ANY(%(types)b::bigint[]) AND NOT is_paused AND NOT pull
), alive AS (
    SELECT id FROM atp_daemon WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), limited AS (
    SELECT 1 WHERE false
), bucket AS (
    SELECT k.*, k.id = ANY(
            string_to_array(current_setting('atp.locked_types', true), ',')::bigint[]) AS locked,
        CASE WHEN k.rate IS NULL THEN NULL WHEN k.tokens IS NULL OR k.tokens_at IS NULL
            THEN coalesce(k.bucket_size, %(default_bucket_size)s)
        ELSE LEAST(coalesce(k.bucket_size, %(default_bucket_size)s), k.tokens + k.rate * GREATEST(0,
            EXTRACT(EPOCH FROM STATEMENT_TIMESTAMP() - k.tokens_at)))
        END AS tokens_now
    FROM kinds k WHERE k.is_limited
), quota AS (
    SELECT b.id, CASE WHEN b.locked
        THEN GREATEST(0, LEAST(%(limit)s,
            coalesce(b.max_concurrency - (
                SELECT count(*) FROM atp_task l WHERE l.type_id = b.id AND l.daemon_id IS NOT NULL),
                %(limit)s),
            coalesce(floor(b.tokens_now)::bigint, %(limit)s)))
        ELSE 0 END AS free
    FROM bucket b
), unlimited AS (
    SELECT instance_id, priority, not_before FROM atp_task
    WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
        AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP()) AND NOT gated
        AND turn IS NULL
        AND EXISTS (SELECT 1 FROM alive)
        AND type_id = ANY(ARRAY(SELECT id FROM kinds WHERE NOT is_limited))
    ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), within AS (
    SELECT w.instance_id, w.priority, w.not_before FROM quota q CROSS JOIN LATERAL (
        SELECT instance_id, priority, not_before FROM atp_task
        WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
            AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP()) AND NOT gated
            AND turn IS NULL
            AND EXISTS (SELECT 1 FROM alive) AND type_id = q.id
        ORDER BY priority DESC, not_before, instance_id LIMIT q.free
        FOR UPDATE SKIP LOCKED) w
), picked AS (
    SELECT instance_id, priority, not_before FROM unlimited
    UNION ALL
    SELECT instance_id, priority, not_before FROM within
    ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
), ranked AS (
    SELECT instance_id,
        row_number() OVER (ORDER BY priority DESC, not_before, instance_id) <= %(start)s AS starts
    FROM picked
), scheduled AS (
    UPDATE atp_instance i
    SET status = CASE WHEN ranked.starts THEN 'RUNNING' ELSE 'SCHEDULED' END,
        started = CASE WHEN ranked.starts THEN STATEMENT_TIMESTAMP() ELSE i.started END,
        attempt = i.attempt + 1, daemon_id = %(daemon)s, updated = STATEMENT_TIMESTAMP()
    FROM ranked WHERE i.id = ranked.instance_id
        AND CASE WHEN i.status IN ('ACCEPTED') THEN true ELSE false END
    RETURNING i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
        i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
        i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
), leased AS (
    UPDATE atp_task t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, atp_type ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.not_before, s.id, s.type_id, s.identifier, s.named, s.status, s.priority, s.tag,
        s.attempt, s.restarts, s.retries, s.snoozes, s.batch_id, s.progress_done, s.progress_total,
        s.progress_message, s.daemon_id, s.created, s.updated, s.started, s.finished, s.expires
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'SCHEDULED', attempt, '', %(label)s, ''
    FROM scheduled
    UNION ALL
    SELECT id, STATEMENT_TIMESTAMP(), 'RUNNING', attempt, '', %(label)s, ''
    FROM scheduled WHERE status = 'RUNNING'
), spent AS (
    UPDATE atp_type ty SET tokens = b.tokens_now - (
            SELECT count(*) FROM leased l WHERE l.type_id = b.id),
        tokens_at = GREATEST(STATEMENT_TIMESTAMP(), coalesce(b.tokens_at, STATEMENT_TIMESTAMP()))
    FROM bucket b WHERE ty.id = b.id AND b.locked AND b.rate IS NOT NULL
        AND EXISTS (SELECT 1 FROM leased l WHERE l.type_id = b.id)
)
SELECT meta.alive, meta.limited,
    CASE WHEN row_number() OVER () = 1 THEN meta.strays END AS strays,
    CASE WHEN row_number() OVER () = 1 THEN meta.settled END AS settled,
    l.id, l.type_id, l.identifier, l.named, l.status, l.priority, l.tag, l.attempt,
    l.restarts, l.retries, l.snoozes, l.batch_id, l.progress_done, l.progress_total,
    l.progress_message, l.daemon_id, l.created, l.updated, l.started, l.finished, l.expires,
    ty.id, ty.identifier, ty.handler, ty.timeout, ty.max_restarts, ty.retention,
    ty.max_concurrency, ty.max_input_bytes, ty.max_response_bytes, ty.max_queued, ty.rate,
    ty.bucket_size, ty.tokens, ty.tokens_at, ty.dedup_window, ty.retry_limit, ty.age_limit,
    ty.min_backoff, ty.max_backoff, ty.max_doublings, ty.retry_jitter, ty.max_snoozes, ty.key_concurrency, ty.key_rate, ty.key_bucket_size, ty.gated, ty.is_paused, ty.pull,
    ty.input_format, ty.description, ty.created, ty.updated,
    inp.instance_id, inp.input_format, inp.data
FROM (
    SELECT (SELECT count(*) FROM alive) AS alive, (SELECT count(*) FROM limited) AS limited,
        (SELECT array_agg(instance_id) FROM picked
         WHERE instance_id NOT IN (SELECT id FROM scheduled)) AS strays,
        NULL::bigint[] AS settled
) AS meta
LEFT JOIN ((SELECT *, row_number() OVER (PARTITION BY type_id ORDER BY id) = 1 AS introduces
            FROM leased) l
           LEFT JOIN atp_type ty ON ty.id = l.type_id AND l.introduces
           LEFT JOIN atp_inputs inp ON inp.instance_id = l.id AND %(inputs)s)
    ON true
ORDER BY l.priority DESC, l.not_before, l.id;

-- name: settle
-- The ends of many attempts, one row each in ``batch``; returns the keys of the tasks
-- written. It runs after lock_round, which locked the queue rows, then the tasks, of
-- %(pks)s: each is the one of finish (or its FAILED twin), and only an attempt that still
-- holds its lease (``held``: its queue row) and may move to its state is written; the
-- others are left as they are, and missing from what the statement returns. A row with
-- ``started_ago`` is an attempt whose start was not known to be written: it moves from
-- SCHEDULED, through RUNNING (its history entry dated when it started, never before its
-- claim), to its end, or only to RUNNING when it has not ended; found RUNNING (its start
-- was written by a round whose answer was lost), it only ends. ``prior`` is the task's
-- row as it was before this statement (under lock: as the update finds it), whose state
-- says whether its start is written now. Each row is read by its key, and the ends carry
-- what the later steps write (RETURNING), so that no step is joined to another.
WITH batch AS (
    SELECT * FROM unnest(%(pks)b::bigint[], %(attempts)b::bigint[], %(states)b::text[],
        %(messages)b::text[], %(data)b::bytea[], %(content_types)b::text[], %(charsets)b::text[],
        %(started_agos)b::float8[])
    AS b(pk, attempt, status, message, data, content_type, charset, started_ago)
), ended AS (
    UPDATE atp_instance i
    SET status = b.status, updated = STATEMENT_TIMESTAMP(),
        started = CASE WHEN b.started_ago IS NOT NULL AND prior.status = 'SCHEDULED' THEN GREATEST(
            held.claimed, STATEMENT_TIMESTAMP() - make_interval(secs => b.started_ago))
            ELSE i.started END,
        finished = CASE WHEN b.status = 'RUNNING' THEN i.finished
            ELSE STATEMENT_TIMESTAMP() END
    FROM batch b, atp_task held, atp_instance prior
    WHERE i.id = b.pk AND held.instance_id = b.pk AND held.daemon_id IS NOT NULL
        AND prior.id = b.pk AND i.attempt = b.attempt AND (
        (b.started_ago IS NOT NULL AND i.status = 'SCHEDULED'
         AND b.status IN ('RUNNING', 'FINISHED', 'FAILED'))
        OR (b.status = 'FINISHED' AND i.status IN ('PAUSED', 'RUNNING'))
        OR (b.status = 'FAILED' AND i.status IN ('PAUSED', 'RUNNING', 'SCHEDULED')))
    RETURNING i.id, i.type_id, i.attempt, i.status, i.started,
        b.started_ago IS NOT NULL AND prior.status = 'SCHEDULED' AS starts,
        b.message, b.data, b.content_type, b.charset
), dequeued AS (
    DELETE FROM atp_task WHERE instance_id IN (SELECT id FROM ended WHERE status <> 'RUNNING')
), ended_logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, time, status, attempt, message, %(label)s, '' FROM (
        SELECT e.id, 0 AS step, e.started AS time, 'RUNNING' AS status, e.attempt,
            '' AS message
        FROM ended e WHERE e.starts
        UNION ALL
        SELECT e.id, 1, STATEMENT_TIMESTAMP(), e.status, e.attempt, e.message
        FROM ended e WHERE e.status <> 'RUNNING'
    ) AS entries ORDER BY id, step
), stored AS (
    INSERT INTO atp_response (instance_id, data, content_type, charset, size, stored)
    SELECT e.id, e.data, e.content_type, e.charset, length(e.data), STATEMENT_TIMESTAMP()
    FROM ended e WHERE e.data IS NOT NULL AND e.status <> 'RUNNING'
    ON CONFLICT (instance_id) DO UPDATE SET data = EXCLUDED.data,
        content_type = EXCLUDED.content_type, charset = EXCLUDED.charset,
        size = EXCLUDED.size, stored = EXCLUDED.stored
)
SELECT id FROM ended;

-- name: settle_and_claim
-- settle, then claim, in one statement (one commit): the steps of each, word for word;
-- ``settled`` in the facts holds the keys of the tasks settled.
WITH batch AS (
    SELECT * FROM unnest(%(pks)b::bigint[], %(attempts)b::bigint[], %(states)b::text[],
        %(messages)b::text[], %(data)b::bytea[], %(content_types)b::text[], %(charsets)b::text[],
        %(started_agos)b::float8[])
    AS b(pk, attempt, status, message, data, content_type, charset, started_ago)
), ended AS (
    UPDATE atp_instance i
    SET status = b.status, updated = STATEMENT_TIMESTAMP(),
        started = CASE WHEN b.started_ago IS NOT NULL AND prior.status = 'SCHEDULED' THEN GREATEST(
            held.claimed, STATEMENT_TIMESTAMP() - make_interval(secs => b.started_ago))
            ELSE i.started END,
        finished = CASE WHEN b.status = 'RUNNING' THEN i.finished
            ELSE STATEMENT_TIMESTAMP() END
    FROM batch b, atp_task held, atp_instance prior
    WHERE i.id = b.pk AND held.instance_id = b.pk AND held.daemon_id IS NOT NULL
        AND prior.id = b.pk AND i.attempt = b.attempt AND (
        (b.started_ago IS NOT NULL AND i.status = 'SCHEDULED'
         AND b.status IN ('RUNNING', 'FINISHED', 'FAILED'))
        OR (b.status = 'FINISHED' AND i.status IN ('PAUSED', 'RUNNING'))
        OR (b.status = 'FAILED' AND i.status IN ('PAUSED', 'RUNNING', 'SCHEDULED')))
    RETURNING i.id, i.type_id, i.attempt, i.status, i.started,
        b.started_ago IS NOT NULL AND prior.status = 'SCHEDULED' AS starts,
        b.message, b.data, b.content_type, b.charset
), dequeued AS (
    DELETE FROM atp_task WHERE instance_id IN (SELECT id FROM ended WHERE status <> 'RUNNING')
), ended_logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, time, status, attempt, message, %(label)s, '' FROM (
        SELECT e.id, 0 AS step, e.started AS time, 'RUNNING' AS status, e.attempt,
            '' AS message
        FROM ended e WHERE e.starts
        UNION ALL
        SELECT e.id, 1, STATEMENT_TIMESTAMP(), e.status, e.attempt, e.message
        FROM ended e WHERE e.status <> 'RUNNING'
    ) AS entries ORDER BY id, step
), stored AS (
    INSERT INTO atp_response (instance_id, data, content_type, charset, size, stored)
    SELECT e.id, e.data, e.content_type, e.charset, length(e.data), STATEMENT_TIMESTAMP()
    FROM ended e WHERE e.data IS NOT NULL AND e.status <> 'RUNNING'
    ON CONFLICT (instance_id) DO UPDATE SET data = EXCLUDED.data,
        content_type = EXCLUDED.content_type, charset = EXCLUDED.charset,
        size = EXCLUDED.size, stored = EXCLUDED.stored
), kinds AS (
    SELECT id, max_concurrency, rate, bucket_size, tokens, tokens_at,
        (max_concurrency IS NOT NULL OR rate IS NOT NULL) AS is_limited
    FROM atp_type WHERE id = ANY(%(types)b::bigint[]) AND NOT is_paused AND NOT pull
), alive AS (
    SELECT id FROM atp_daemon WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), limited AS (
    SELECT 1 FROM kinds WHERE is_limited LIMIT 1
), picked AS (
    SELECT instance_id, priority, not_before FROM atp_task
    WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
        AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP()) AND NOT gated
        AND turn IS NULL
        AND EXISTS (SELECT 1 FROM alive)
        AND type_id = ANY(ARRAY(SELECT id FROM kinds)) AND NOT EXISTS (SELECT 1 FROM limited)
    ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), ranked AS (
    SELECT instance_id,
        row_number() OVER (ORDER BY priority DESC, not_before, instance_id) <= %(start)s AS starts
    FROM picked
), scheduled AS (
    UPDATE atp_instance i
    SET status = CASE WHEN ranked.starts THEN 'RUNNING' ELSE 'SCHEDULED' END,
        started = CASE WHEN ranked.starts THEN STATEMENT_TIMESTAMP() ELSE i.started END,
        attempt = i.attempt + 1, daemon_id = %(daemon)s, updated = STATEMENT_TIMESTAMP()
    FROM ranked WHERE i.id = ranked.instance_id
        AND CASE WHEN i.status IN ('ACCEPTED') THEN true ELSE false END
    RETURNING i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
        i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
        i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
), leased AS (
    UPDATE atp_task t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, atp_type ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.not_before, s.id, s.type_id, s.identifier, s.named, s.status, s.priority, s.tag,
        s.attempt, s.restarts, s.retries, s.snoozes, s.batch_id, s.progress_done, s.progress_total,
        s.progress_message, s.daemon_id, s.created, s.updated, s.started, s.finished, s.expires
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'SCHEDULED', attempt, '', %(label)s, ''
    FROM scheduled
    UNION ALL
    SELECT id, STATEMENT_TIMESTAMP(), 'RUNNING', attempt, '', %(label)s, ''
    FROM scheduled WHERE status = 'RUNNING'
)
SELECT meta.alive, meta.limited,
    CASE WHEN row_number() OVER () = 1 THEN meta.strays END AS strays,
    CASE WHEN row_number() OVER () = 1 THEN meta.settled END AS settled,
    l.id, l.type_id, l.identifier, l.named, l.status, l.priority, l.tag, l.attempt,
    l.restarts, l.retries, l.snoozes, l.batch_id, l.progress_done, l.progress_total,
    l.progress_message, l.daemon_id, l.created, l.updated, l.started, l.finished, l.expires,
    ty.id, ty.identifier, ty.handler, ty.timeout, ty.max_restarts, ty.retention,
    ty.max_concurrency, ty.max_input_bytes, ty.max_response_bytes, ty.max_queued, ty.rate,
    ty.bucket_size, ty.tokens, ty.tokens_at, ty.dedup_window, ty.retry_limit, ty.age_limit,
    ty.min_backoff, ty.max_backoff, ty.max_doublings, ty.retry_jitter, ty.max_snoozes, ty.key_concurrency, ty.key_rate, ty.key_bucket_size, ty.gated, ty.is_paused, ty.pull,
    ty.input_format, ty.description, ty.created, ty.updated,
    inp.instance_id, inp.input_format, inp.data
FROM (
    SELECT (SELECT count(*) FROM alive) AS alive, (SELECT count(*) FROM limited) AS limited,
        (SELECT array_agg(instance_id) FROM picked
         WHERE instance_id NOT IN (SELECT id FROM scheduled)) AS strays,
        (SELECT array_agg(id) FROM ended) AS settled
) AS meta
LEFT JOIN ((SELECT *, row_number() OVER (PARTITION BY type_id ORDER BY id) = 1 AS introduces
            FROM leased) l
           LEFT JOIN atp_type ty ON ty.id = l.type_id AND l.introduces
           LEFT JOIN atp_inputs inp ON inp.instance_id = l.id AND %(inputs)s)
    ON true
ORDER BY l.priority DESC, l.not_before, l.id;

-- name: settle_and_claim_within_limits
-- settle, then claim_within_limits, in one statement, after lock_round. Within
-- limits, the leases this statement ends count no more (``quota``): the count of a
-- type's leases reads them as they were before the statement.
WITH batch AS (
    SELECT * FROM unnest(%(pks)b::bigint[], %(attempts)b::bigint[], %(states)b::text[],
        %(messages)b::text[], %(data)b::bytea[], %(content_types)b::text[], %(charsets)b::text[],
        %(started_agos)b::float8[])
    AS b(pk, attempt, status, message, data, content_type, charset, started_ago)
), ended AS (
    UPDATE atp_instance i
    SET status = b.status, updated = STATEMENT_TIMESTAMP(),
        started = CASE WHEN b.started_ago IS NOT NULL AND prior.status = 'SCHEDULED' THEN GREATEST(
            held.claimed, STATEMENT_TIMESTAMP() - make_interval(secs => b.started_ago))
            ELSE i.started END,
        finished = CASE WHEN b.status = 'RUNNING' THEN i.finished
            ELSE STATEMENT_TIMESTAMP() END
    FROM batch b, atp_task held, atp_instance prior
    WHERE i.id = b.pk AND held.instance_id = b.pk AND held.daemon_id IS NOT NULL
        AND prior.id = b.pk AND i.attempt = b.attempt AND (
        (b.started_ago IS NOT NULL AND i.status = 'SCHEDULED'
         AND b.status IN ('RUNNING', 'FINISHED', 'FAILED'))
        OR (b.status = 'FINISHED' AND i.status IN ('PAUSED', 'RUNNING'))
        OR (b.status = 'FAILED' AND i.status IN ('PAUSED', 'RUNNING', 'SCHEDULED')))
    RETURNING i.id, i.type_id, i.attempt, i.status, i.started,
        b.started_ago IS NOT NULL AND prior.status = 'SCHEDULED' AS starts,
        b.message, b.data, b.content_type, b.charset
), dequeued AS (
    DELETE FROM atp_task WHERE instance_id IN (SELECT id FROM ended WHERE status <> 'RUNNING')
), ended_logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, time, status, attempt, message, %(label)s, '' FROM (
        SELECT e.id, 0 AS step, e.started AS time, 'RUNNING' AS status, e.attempt,
            '' AS message
        FROM ended e WHERE e.starts
        UNION ALL
        SELECT e.id, 1, STATEMENT_TIMESTAMP(), e.status, e.attempt, e.message
        FROM ended e WHERE e.status <> 'RUNNING'
    ) AS entries ORDER BY id, step
), stored AS (
    INSERT INTO atp_response (instance_id, data, content_type, charset, size, stored)
    SELECT e.id, e.data, e.content_type, e.charset, length(e.data), STATEMENT_TIMESTAMP()
    FROM ended e WHERE e.data IS NOT NULL AND e.status <> 'RUNNING'
    ON CONFLICT (instance_id) DO UPDATE SET data = EXCLUDED.data,
        content_type = EXCLUDED.content_type, charset = EXCLUDED.charset,
        size = EXCLUDED.size, stored = EXCLUDED.stored
), kinds AS (
    SELECT id, max_concurrency, rate, bucket_size, tokens, tokens_at,
        (max_concurrency IS NOT NULL OR rate IS NOT NULL) AS is_limited
    FROM atp_type WHERE id = ANY(%(types)b::bigint[]) AND NOT is_paused AND NOT pull
), alive AS (
    SELECT id FROM atp_daemon WHERE id = %(daemon)s AND stopped IS NULL FOR KEY SHARE
), limited AS (
    SELECT 1 WHERE false
), bucket AS (
    SELECT k.*, k.id = ANY(
            string_to_array(current_setting('atp.locked_types', true), ',')::bigint[]) AS locked,
        CASE WHEN k.rate IS NULL THEN NULL WHEN k.tokens IS NULL OR k.tokens_at IS NULL
            THEN coalesce(k.bucket_size, %(default_bucket_size)s)
        ELSE LEAST(coalesce(k.bucket_size, %(default_bucket_size)s), k.tokens + k.rate * GREATEST(0,
            EXTRACT(EPOCH FROM STATEMENT_TIMESTAMP() - k.tokens_at)))
        END AS tokens_now
    FROM kinds k WHERE k.is_limited
), quota AS (
    SELECT b.id, CASE WHEN b.locked
        THEN GREATEST(0, LEAST(%(limit)s,
            coalesce(b.max_concurrency - (
                SELECT count(*) FROM atp_task l WHERE l.type_id = b.id AND l.daemon_id IS NOT NULL)
                + (SELECT count(*) FROM (SELECT type_id FROM ended WHERE status <> 'RUNNING') r
                   WHERE r.type_id = b.id),
                %(limit)s),
            coalesce(floor(b.tokens_now)::bigint, %(limit)s)))
        ELSE 0 END AS free
    FROM bucket b
), unlimited AS (
    SELECT instance_id, priority, not_before FROM atp_task
    WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
        AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP()) AND NOT gated
        AND turn IS NULL
        AND EXISTS (SELECT 1 FROM alive)
        AND type_id = ANY(ARRAY(SELECT id FROM kinds WHERE NOT is_limited))
    ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), within AS (
    SELECT w.instance_id, w.priority, w.not_before FROM quota q CROSS JOIN LATERAL (
        SELECT instance_id, priority, not_before FROM atp_task
        WHERE daemon_id IS NULL AND paused_since IS NULL AND not_before <= STATEMENT_TIMESTAMP()
            AND (expires IS NULL OR expires > STATEMENT_TIMESTAMP()) AND NOT gated
            AND turn IS NULL
            AND EXISTS (SELECT 1 FROM alive) AND type_id = q.id
        ORDER BY priority DESC, not_before, instance_id LIMIT q.free
        FOR UPDATE SKIP LOCKED) w
), picked AS (
    SELECT instance_id, priority, not_before FROM unlimited
    UNION ALL
    SELECT instance_id, priority, not_before FROM within
    ORDER BY priority DESC, not_before, instance_id LIMIT %(limit)s
), ranked AS (
    SELECT instance_id,
        row_number() OVER (ORDER BY priority DESC, not_before, instance_id) <= %(start)s AS starts
    FROM picked
), scheduled AS (
    UPDATE atp_instance i
    SET status = CASE WHEN ranked.starts THEN 'RUNNING' ELSE 'SCHEDULED' END,
        started = CASE WHEN ranked.starts THEN STATEMENT_TIMESTAMP() ELSE i.started END,
        attempt = i.attempt + 1, daemon_id = %(daemon)s, updated = STATEMENT_TIMESTAMP()
    FROM ranked WHERE i.id = ranked.instance_id
        AND CASE WHEN i.status IN ('ACCEPTED') THEN true ELSE false END
    RETURNING i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
        i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
        i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
), leased AS (
    UPDATE atp_task t SET daemon_id = %(daemon)s, claimed = STATEMENT_TIMESTAMP(),
        deadline = STATEMENT_TIMESTAMP() + ty.timeout
    FROM scheduled s, atp_type ty WHERE t.instance_id = s.id AND ty.id = t.type_id
    RETURNING t.not_before, s.id, s.type_id, s.identifier, s.named, s.status, s.priority, s.tag,
        s.attempt, s.restarts, s.retries, s.snoozes, s.batch_id, s.progress_done, s.progress_total,
        s.progress_message, s.daemon_id, s.created, s.updated, s.started, s.finished, s.expires
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'SCHEDULED', attempt, '', %(label)s, ''
    FROM scheduled
    UNION ALL
    SELECT id, STATEMENT_TIMESTAMP(), 'RUNNING', attempt, '', %(label)s, ''
    FROM scheduled WHERE status = 'RUNNING'
), spent AS (
    UPDATE atp_type ty SET tokens = b.tokens_now - (
            SELECT count(*) FROM leased l WHERE l.type_id = b.id),
        tokens_at = GREATEST(STATEMENT_TIMESTAMP(), coalesce(b.tokens_at, STATEMENT_TIMESTAMP()))
    FROM bucket b WHERE ty.id = b.id AND b.locked AND b.rate IS NOT NULL
        AND EXISTS (SELECT 1 FROM leased l WHERE l.type_id = b.id)
)
SELECT meta.alive, meta.limited,
    CASE WHEN row_number() OVER () = 1 THEN meta.strays END AS strays,
    CASE WHEN row_number() OVER () = 1 THEN meta.settled END AS settled,
    l.id, l.type_id, l.identifier, l.named, l.status, l.priority, l.tag, l.attempt,
    l.restarts, l.retries, l.snoozes, l.batch_id, l.progress_done, l.progress_total,
    l.progress_message, l.daemon_id, l.created, l.updated, l.started, l.finished, l.expires,
    ty.id, ty.identifier, ty.handler, ty.timeout, ty.max_restarts, ty.retention,
    ty.max_concurrency, ty.max_input_bytes, ty.max_response_bytes, ty.max_queued, ty.rate,
    ty.bucket_size, ty.tokens, ty.tokens_at, ty.dedup_window, ty.retry_limit, ty.age_limit,
    ty.min_backoff, ty.max_backoff, ty.max_doublings, ty.retry_jitter, ty.max_snoozes, ty.key_concurrency, ty.key_rate, ty.key_bucket_size, ty.gated, ty.is_paused, ty.pull,
    ty.input_format, ty.description, ty.created, ty.updated,
    inp.instance_id, inp.input_format, inp.data
FROM (
    SELECT (SELECT count(*) FROM alive) AS alive, (SELECT count(*) FROM limited) AS limited,
        (SELECT array_agg(instance_id) FROM picked
         WHERE instance_id NOT IN (SELECT id FROM scheduled)) AS strays,
        (SELECT array_agg(id) FROM ended) AS settled
) AS meta
LEFT JOIN ((SELECT *, row_number() OVER (PARTITION BY type_id ORDER BY id) = 1 AS introduces
            FROM leased) l
           LEFT JOIN atp_type ty ON ty.id = l.type_id AND l.introduces
           LEFT JOIN atp_inputs inp ON inp.instance_id = l.id AND %(inputs)s)
    ON true
ORDER BY l.priority DESC, l.not_before, l.id;

-- name: next_due
-- The earliest time a waiting task of %(types)s becomes runnable within the next
-- %(within)s seconds, in seconds from now (None: none). The bound keeps the walk short
-- when many tasks of other types, or paused ones, wait for a later time. The claim index
-- is ordered by priority first: the statement walks its distinct priorities (a recursive
-- skip scan, each step one index probe) and takes, within each, the first not_before to
-- come. Run under bound_claim_plan. The gated tasks are not in the claim index:
-- atp.engine.semaphores.next_due looks for theirs.
WITH RECURSIVE levels(priority) AS (
    (SELECT priority FROM atp_task WHERE daemon_id IS NULL AND NOT gated AND turn IS NULL
     ORDER BY priority DESC LIMIT 1)
    UNION ALL
    SELECT (SELECT t.priority FROM atp_task t
            WHERE t.daemon_id IS NULL AND NOT t.gated AND t.turn IS NULL
                AND t.priority < l.priority
            ORDER BY t.priority DESC LIMIT 1)
    FROM levels l WHERE l.priority IS NOT NULL
)
SELECT EXTRACT(EPOCH FROM min((
    SELECT t.not_before FROM atp_task t
    WHERE t.daemon_id IS NULL AND NOT t.gated AND t.turn IS NULL AND t.priority = l.priority
        AND t.not_before > STATEMENT_TIMESTAMP()
        AND t.not_before < STATEMENT_TIMESTAMP() + make_interval(secs => %(within)s)
        AND t.paused_since IS NULL
        AND t.type_id = ANY(%(types)b::bigint[])
    ORDER BY t.not_before LIMIT 1)) - STATEMENT_TIMESTAMP())
FROM levels l WHERE l.priority IS NOT NULL;

-- name: start
-- Attempt %(attempt)s of task %(pk)s, SCHEDULED, moves to RUNNING; returns the task
-- with its type and inputs, or no row (refused: nothing is written).
WITH started AS (
    UPDATE atp_instance i
    SET status = 'RUNNING', started = STATEMENT_TIMESTAMP(), updated = STATEMENT_TIMESTAMP()
    WHERE i.id = %(pk)s AND i.status = 'SCHEDULED' AND i.attempt = %(attempt)s
    RETURNING i.id, i.type_id, i.identifier, i.named, i.status, i.priority, i.tag, i.attempt,
        i.restarts, i.retries, i.snoozes, i.batch_id, i.progress_done, i.progress_total,
        i.progress_message, i.daemon_id, i.created, i.updated, i.started, i.finished, i.expires
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'RUNNING', attempt, '', %(label)s, ''
    FROM started
)
SELECT s.id, s.type_id, s.identifier, s.named, s.status, s.priority, s.tag, s.attempt,
    s.restarts, s.retries, s.snoozes, s.batch_id, s.progress_done, s.progress_total,
    s.progress_message, s.daemon_id, s.created, s.updated, s.started, s.finished, s.expires,
    ty.id, ty.identifier, ty.handler, ty.timeout, ty.max_restarts, ty.retention,
    ty.max_concurrency, ty.max_input_bytes, ty.max_response_bytes, ty.max_queued, ty.rate,
    ty.bucket_size, ty.tokens, ty.tokens_at, ty.dedup_window, ty.retry_limit, ty.age_limit,
    ty.min_backoff, ty.max_backoff, ty.max_doublings, ty.retry_jitter, ty.max_snoozes, ty.key_concurrency, ty.key_rate, ty.key_bucket_size, ty.gated, ty.is_paused, ty.pull,
    ty.input_format, ty.description, ty.created, ty.updated,
    inp.instance_id, inp.input_format, inp.data
FROM started s JOIN atp_type ty ON ty.id = s.type_id JOIN atp_inputs inp ON inp.instance_id = s.id;

-- name: finish
-- Attempt %(attempt)s of task %(pk)s, RUNNING or PAUSED, moves to FINISHED with its
-- response (when %(has_response)s); returns the attempt, or no row (refused). The queue
-- row is locked first (the order of atp.engine.locks) and deleted only once the task's
-- own row matched: refused, the statement writes nothing (it runs in autocommit mode,
-- with no transaction to roll back).
WITH leased AS (
    SELECT instance_id FROM atp_task WHERE instance_id = %(pk)s AND daemon_id IS NOT NULL
    FOR UPDATE
), finished AS (
    UPDATE atp_instance i
    SET status = 'FINISHED', finished = STATEMENT_TIMESTAMP(), updated = STATEMENT_TIMESTAMP()
    FROM leased WHERE i.id = leased.instance_id AND i.attempt = %(attempt)s
        AND i.status IN ('PAUSED', 'RUNNING')
    RETURNING i.id, i.attempt
), dequeued AS (
    DELETE FROM atp_task WHERE instance_id IN (SELECT id FROM finished)
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT id, STATEMENT_TIMESTAMP(), 'FINISHED', attempt, %(message)s, %(label)s, ''
    FROM finished
), stored AS (
    INSERT INTO atp_response (instance_id, data, content_type, charset, size, stored)
    SELECT id, %(data)s, %(content_type)s, %(charset)s, %(size)s, STATEMENT_TIMESTAMP()
    FROM finished WHERE %(has_response)s
    ON CONFLICT (instance_id) DO UPDATE SET data = EXCLUDED.data,
        content_type = EXCLUDED.content_type, charset = EXCLUDED.charset,
        size = EXCLUDED.size, stored = EXCLUDED.stored
)
SELECT attempt FROM finished;

-- name: log
-- A line %(message)s in task %(pk)s's history, no change of state: with %(attempt)s
-- (not %(any_attempt)s: a handler's line) only while that attempt runs (SCHEDULED for a
-- prefetched task whose start is not written yet, RUNNING or PAUSED); returns the
-- task's key, or no row (refused: nothing is written).
INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
SELECT i.id, STATEMENT_TIMESTAMP(), NULL, i.attempt, %(message)s, %(label)s, ''
FROM atp_instance i
WHERE i.id = %(pk)s AND (%(any_attempt)s
    OR (i.attempt = %(attempt)s AND i.status IN ('SCHEDULED', 'RUNNING', 'PAUSED')))
RETURNING instance_id;

-- name: set_progress
-- Task %(pk)s's progress: with %(attempt)s (not %(any_attempt)s: its handler's) while
-- that attempt runs, as log; else while the task is RUNNING or PAUSED. Returns the
-- task's key, or no row (refused: nothing is written).
UPDATE atp_instance i
SET progress_done = %(done)s, progress_total = %(total)s, progress_message = %(message)s,
    updated = STATEMENT_TIMESTAMP()
WHERE i.id = %(pk)s AND CASE WHEN %(any_attempt)s THEN i.status IN ('RUNNING', 'PAUSED')
    ELSE i.attempt = %(attempt)s AND i.status IN ('SCHEDULED', 'RUNNING', 'PAUSED') END
RETURNING i.id;

-- name: enqueue
-- One task: its instance, queue row, inputs and first history entry, written only while
-- its type is as the enqueue read it (``kind``: same identifier, format and kind, pull or
-- not, a limit the inputs fit in, no max_queued, and for a task named by its caller no
-- dedup_window; those take the portable form, atp.engine.enqueue.insert_tasks); returns
-- the task's key and creation time (and, when %(notify)s, wakes the idle daemons as
-- notify does, at its commit: in the same statement, so that it can be prepared, not
-- parsed and planned at each enqueue), or no row (read the type again). The instance's
-- values are those of the unsaved Instance (its columns by name). The queue row is
-- runnable at %(not_before)s, or %(delay)s after its creation (the other is NULL). A live
-- duplicate raises IntegrityError.
WITH kind AS (
    SELECT 1 FROM atp_type
    WHERE id = %(type_id)s AND identifier = %(type_identifier)s AND input_format = %(input_format)s
        AND COALESCE(max_input_bytes, %(max_input_bytes)s) >= %(size)s AND max_queued IS NULL
        AND pull = %(pull)s AND (dedup_window IS NULL OR NOT %(named)s)
), new AS (
    INSERT INTO atp_instance (type_id, identifier, named, status, priority, tag, attempt,
        restarts, retries, snoozes, batch_id, progress_done, progress_total, progress_message,
        daemon_id, created, updated, started, finished, expires)
    SELECT %(type_id)s, %(identifier)s, %(named)s, %(status)s, %(priority)s, %(tag)s,
        %(attempt)s, %(restarts)s, %(retries)s, %(snoozes)s, %(batch_id)s, %(progress_done)s,
        %(progress_total)s, %(progress_message)s, %(daemon_id)s,
        STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP(), %(started)s, %(finished)s, %(expires)s
    FROM kind
    RETURNING id, created
), queued AS (
    INSERT INTO atp_task (instance_id, type_id, identifier, priority, tag, enqueued, not_before,
        daemon_id, claimed, deadline, paused_since, expires, gated, turn, key_id)
    SELECT new.id, %(type_id)s, %(identifier)s, %(priority)s, %(tag)s, new.created,
        COALESCE(%(not_before)s::timestamptz, new.created + %(delay)s::interval),
        NULL, NULL, NULL, NULL, NULL, FALSE, NULL, NULL
    FROM new
), stored AS (
    INSERT INTO atp_inputs (instance_id, input_format, data)
    SELECT new.id, %(input_format)s, %(data)s FROM new
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT new.id, new.created, 'ACCEPTED', 0, 'enqueued', '', '' FROM new
)
SELECT id, created, CASE WHEN %(notify)s THEN pg_notify('atp_queue', '') END FROM new;

-- name: enqueue_many
-- Many tasks of one type (see enqueue), one per item of %(identifiers)s and %(data)s:
-- the rows of each table come from arrays (unnest), so the cost per task is the
-- database's, not the ORM's. The instances are written in the order of the arrays, and
-- their values but the identifier are those of one unsaved Instance. Returns (key,
-- identifier, creation time) per task, the time on the first row only: one creation
-- time for all (the statement's), and loading it costs more than the rest of a row.
WITH kind AS (
    SELECT 1 FROM atp_type
    WHERE id = %(type_id)s AND identifier = %(type_identifier)s AND input_format = %(input_format)s
        AND COALESCE(max_input_bytes, %(max_input_bytes)s) >= %(size)s AND max_queued IS NULL
        AND pull = %(pull)s AND (dedup_window IS NULL OR NOT %(named)s)
), batch AS (
    SELECT * FROM unnest(%(identifiers)b::text[], %(data)b::text[]) WITH ORDINALITY
    AS b(identifier, data, position)
), new AS (
    INSERT INTO atp_instance (type_id, identifier, named, status, priority, tag, attempt,
        restarts, retries, snoozes, batch_id, progress_done, progress_total, progress_message,
        daemon_id, created, updated, started, finished, expires)
    SELECT %(type_id)s, batch.identifier, %(named)s, %(status)s, %(priority)s, %(tag)s,
        %(attempt)s, %(restarts)s, %(retries)s, %(snoozes)s, %(batch_id)s, %(progress_done)s,
        %(progress_total)s, %(progress_message)s, %(daemon_id)s,
        STATEMENT_TIMESTAMP(), STATEMENT_TIMESTAMP(), %(started)s, %(finished)s, %(expires)s
    FROM kind, batch ORDER BY batch.position
    RETURNING id, identifier, created
), queued AS (
    INSERT INTO atp_task (instance_id, type_id, identifier, priority, tag, enqueued, not_before,
        daemon_id, claimed, deadline, paused_since, expires, gated, turn, key_id)
    SELECT new.id, %(type_id)s, new.identifier, %(priority)s, %(tag)s, new.created,
        COALESCE(%(not_before)s::timestamptz, new.created + %(delay)s::interval),
        NULL, NULL, NULL, NULL, NULL, FALSE, NULL, NULL
    FROM new
), stored AS (
    INSERT INTO atp_inputs (instance_id, input_format, data)
    SELECT new.id, %(input_format)s, batch.data FROM new JOIN batch USING (identifier)
), logged AS (
    INSERT INTO atp_logrecord (instance_id, time, status, attempt, message, daemon, actor)
    SELECT new.id, new.created, 'ACCEPTED', 0, 'enqueued', '', '' FROM new
)
SELECT id, identifier, CASE WHEN row_number() OVER () = 1 THEN created END FROM new;

-- name: notify
-- Wakes the idle daemons (they LISTEN on atp.engine.notify.QUEUE_CHANNEL) when the
-- transaction commits; after a bulk enqueue (a single one calls pg_notify itself).
NOTIFY atp_queue;

"""The ``ATP_*`` settings, each with its default.

Settings are read from ``django.conf.settings`` at every access (never at import), so
``override_settings`` in tests and late configuration both work. ``atp.checks``
validates them; ``docs/settings.md`` lists them in this order.
"""

from django.conf import settings


class AtpSettings:
    """Read access to every ``ATP_*`` setting, falling back to its default."""

    @property
    def HANDLER_MODULES(self):
        """Modules (with their sub-modules), besides installed apps, whose functions may be handlers."""
        return getattr(settings, "ATP_HANDLER_MODULES", [])

    @property
    def PICKLE_ENABLED(self):
        """Allow task types with pickled inputs (signed); off, none is registered or run."""
        return getattr(settings, "ATP_PICKLE_ENABLED", False)

    @property
    def SQLITE_WAL(self):
        """Switch SQLite databases to write-ahead logging so readers never wait for a writer."""
        return getattr(settings, "ATP_SQLITE_WAL", True)

    @property
    def ENGINE(self):
        """``"auto"``: the hand-written SQL of the database's engine for the verbs every task
        goes through; ``"orm"``: the portable ORM engine everywhere (slower; for tests and debugging)."""
        return getattr(settings, "ATP_ENGINE", "auto")

    @property
    def PREPARED_STATEMENTS(self):
        """Have PostgreSQL prepare the engine's statements (planned once per connection).
        Off behind a pooler that cannot keep them (PgBouncer before 1.21 in transaction mode)."""
        return getattr(settings, "ATP_PREPARED_STATEMENTS", True)

    @property
    def TRANSACTION_RETRY_SECONDS(self):
        """How long a queue write keeps retrying a locked SQLite database or a deadlock."""
        return getattr(settings, "ATP_TRANSACTION_RETRY_SECONDS", 30.0)

    @property
    def POLL_INTERVAL_SECONDS(self):
        """How often an idle daemon looks for runnable tasks without being notified."""
        return getattr(settings, "ATP_POLL_INTERVAL_SECONDS", 1.0)

    @property
    def HEARTBEAT_INTERVAL_SECONDS(self):
        """How often a daemon records in the database that it is alive."""
        return getattr(settings, "ATP_HEARTBEAT_INTERVAL_SECONDS", 5.0)

    @property
    def DAEMON_TIMEOUT_SECONDS(self):
        """After this long without a heartbeat, on the observer's monotonic clock, a daemon is
        declared dead and its tasks restarted."""
        return getattr(settings, "ATP_DAEMON_TIMEOUT_SECONDS", 30.0)

    @property
    def WORKER_KILL_GRACE_SECONDS(self):
        """How long a worker told to terminate has before it is killed."""
        return getattr(settings, "ATP_WORKER_KILL_GRACE_SECONDS", 3.0)

    @property
    def SHUTDOWN_TIMEOUT_SECONDS(self):
        """How long a stopping daemon lets running tasks finish (atpd --shutdown-timeout)."""
        return getattr(settings, "ATP_SHUTDOWN_TIMEOUT_SECONDS", 30.0)

    @property
    def PROGRESS_INTERVAL_SECONDS(self):
        """How often, at most, a running task's progress is written (the latest value wins)."""
        return getattr(settings, "ATP_PROGRESS_INTERVAL_SECONDS", 0.5)

    @property
    def TRACEBACK_MAX_CHARS(self):
        """How much of a failed task's traceback its history keeps (the end of it)."""
        return getattr(settings, "ATP_TRACEBACK_MAX_CHARS", 10_000)

    @property
    def DAEMON_RETENTION_SECONDS(self):
        """How long the registry keeps a stopped daemon that holds no task."""
        return getattr(settings, "ATP_DAEMON_RETENTION_SECONDS", 7 * 24 * 3600)

    @property
    def MAX_INPUT_BYTES(self):
        """The largest inputs a task may have, in bytes as stored (a type may set its own)."""
        return getattr(settings, "ATP_MAX_INPUT_BYTES", 1024 * 1024)

    @property
    def MAX_RESPONSE_BYTES(self):
        """The largest response a task may store, in bytes (a type may set its own)."""
        return getattr(settings, "ATP_MAX_RESPONSE_BYTES", 10 * 1024 * 1024)

    @property
    def PURGE_BATCH_SIZE(self):
        """How many finished tasks one purge transaction deletes at most."""
        return getattr(settings, "ATP_PURGE_BATCH_SIZE", 500)

    @property
    def MAX_QUEUED_TOTAL(self):
        """At most this many tasks in the queue, all types together (None: no limit):
        enqueue raises QueueFull beyond it. Protects against a task that enqueues tasks
        without end; every enqueue counts the queue while it is set."""
        return getattr(settings, "ATP_MAX_QUEUED_TOTAL", None)

    @property
    def SCHEDULE_GRACE_SECONDS(self):
        """How late a schedule's run may be enqueued when the schedule's ``catch_up`` is 0:
        a due time passed longer ago (no daemon ran then) is skipped."""
        return getattr(settings, "ATP_SCHEDULE_GRACE_SECONDS", 60.0)

    @property
    def UNSEALED_BATCH_SECONDS(self):
        """How long the daemons wait, after the process running a batch's block last showed
        it lives, before they seal the batch (its process died in the block), so that it
        can complete."""
        return getattr(settings, "ATP_UNSEALED_BATCH_SECONDS", 3600.0)

    @property
    def METRICS_TOKEN(self):
        """A bearer token that lets a scraper read ``atp.urls``' ``metrics`` without logging
        in (None: only staff with ``atp.view_instance`` may)."""
        return getattr(settings, "ATP_METRICS_TOKEN", None)

    @property
    def METRICS_WINDOW_SECONDS(self):
        """How far back the metrics count ended tasks and measure their run and wait times."""
        return getattr(settings, "ATP_METRICS_WINDOW_SECONDS", 300.0)


conf = AtpSettings()

"""The data model of the ATP RFC: task types, tasks, their inputs, responses, state
history and queue rows, plus the registry of daemons and the schedules of periodic
tasks.

Rows are written by the queue verbs in ``atp.engine`` only; create tasks with
``atp.enqueue`` rather than ``Instance.objects.create``.
"""

import datetime
import json

from django.db import models
from django.db.models import Q

from atp.conf import conf
from atp.processes import ProcessIdentity
from atp.retry import DEFAULT_MAX_BACKOFF, DEFAULT_MAX_DOUBLINGS, DEFAULT_MIN_BACKOFF
from atp.schedules import CRON_MAX_LENGTH, TIMEZONE_MAX_LENGTH, Timetable
from atp.schedules import NAME_MAX_LENGTH as SCHEDULE_NAME_MAX_LENGTH
from atp.serialization import TOKEN_END_CHARS, InputFormat, load_inputs, pickled_size
from atp.states import IN_FLIGHT, LIVE, TERMINAL, Status

IDENTIFIER_MAX_LENGTH = 255
#: A task's tag, which pull consumers lease related tasks by (App Engine's limit).
TAG_MAX_LENGTH = 500
#: The name of a pull consumer (``atp.lease_tasks``).
CONSUMER_MAX_LENGTH = 100
#: A task's identifier, its name (App Engine's limit).
NAME_MAX_LENGTH = 500
#: How long a task's name stays taken after its task ended, by default (App Engine's).
DEFAULT_DEDUP_WINDOW = datetime.timedelta(days=9)
STATUS_MAX_LENGTH = 10


class ConditionalIndexes:
    """A model some of whose indexes have a condition (``Index(condition=...)``), to keep
    them small where most rows need no entry: ended tasks in the live-task index, leased
    rows in the claim index.

    A database without partial indexes (MariaDB, MySQL) builds each as a whole index on
    the same columns, which serves the same queries in the same order, only larger;
    atp's engine for it is written so (``docs/engines.md``). Django's warning about it
    (``models.W037``: "conditions will be ignored") is answered here, rather than asking
    every project on those databases to silence it.
    """

    @classmethod
    def check(cls, **kwargs):
        return [error for error in super().check(**kwargs) if error.id != "models.W037"]


class WaitingIndex(models.Index):
    """An index of the waiting rows of one kind, told apart by ``condition`` where a
    database has partial indexes (with no boolean in it: Django writes those differently
    from one version to the next, and SQLite uses a partial index only for a query that
    repeats its condition word for word). Where a database has none (MariaDB, MySQL: the
    condition is ignored, see ``ConditionalIndexes``) ``lead``, a boolean field telling
    the kinds apart, comes first, so that a walk of the rows of one kind (``lead = 0`` or
    ``1``, an equality) still reads those alone, in order."""

    def __init__(self, *, lead, fields, **kwargs):
        self.lead = lead
        super().__init__(fields=fields, **kwargs)

    def deconstruct(self):
        path, args, kwargs = super().deconstruct()
        return path, args, {**kwargs, "lead": self.lead}

    def create_sql(self, model, schema_editor, using="", **kwargs):
        if schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using=using, **kwargs)
        led = models.Index(fields=[self.lead, *self.fields], name=self.name,
                           db_tablespace=self.db_tablespace, condition=self.condition)
        return led.create_sql(model, schema_editor, using=using, **kwargs)


class Type(models.Model):
    """A task type: its handler and the parameters every task of the type shares."""

    identifier = models.CharField(max_length=IDENTIFIER_MAX_LENGTH, unique=True)
    handler = models.CharField(
        max_length=255, help_text="Dotted path of the handler function."
    )
    timeout = models.DurationField(
        default=datetime.timedelta(hours=1),
        help_text="A task running longer is stopped and restarted.",
    )
    max_restarts = models.PositiveSmallIntegerField(
        default=3,
        help_text="How often a stale or timed-out task is restarted before it fails.",
    )
    retention = models.DurationField(
        null=True, blank=True,
        help_text="How long ended tasks are kept; empty keeps them forever.",
    )
    max_concurrency = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="At most this many tasks of the type in flight; empty for no limit.",
    )
    max_input_bytes = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Largest inputs a task may have, in bytes; empty for ATP_MAX_INPUT_BYTES.",
    )
    max_response_bytes = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Largest response a task may store, in bytes; empty for ATP_MAX_RESPONSE_BYTES.",
    )
    max_queued = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="At most this many tasks of the type in the queue (waiting or running); "
        "enqueue raises QueueFull beyond it. Empty for no limit.",
    )
    # Flow control (atp.rates): a token bucket the claims of every daemon share.
    rate = models.FloatField(
        null=True, blank=True,
        help_text="At most this many tasks started per second, on average, across all "
        "daemons (the API also takes \"5/s\", \"20/m\"); empty for no limit.",
    )
    bucket_size = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="How many tasks may start at once after a quiet spell (the token "
        "bucket's size); empty for 5. Only with a rate.",
    )
    # The bucket as the last claim left it: ``tokens`` at ``tokens_at`` (None: full).
    tokens = models.FloatField(null=True, blank=True, editable=False)
    tokens_at = models.DateTimeField(null=True, blank=True, editable=False)
    dedup_window = models.DurationField(
        null=True, blank=True, default=DEFAULT_DEDUP_WINDOW,
        help_text="How long the name of a named task stays taken after its task ended, "
        "even once it is purged; empty: free as soon as it ended.",
    )
    # The retry policy of handler failures (atp.retry): none unless a limit is set.
    retry_limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="Retry a failed task this many times; empty: age_limit alone decides.",
    )
    age_limit = models.DurationField(
        null=True, blank=True,
        help_text="Retry a failed task until it first ran this long ago; with retry_limit, "
        "until both are reached.",
    )
    min_backoff = models.DurationField(
        default=DEFAULT_MIN_BACKOFF, help_text="The wait before the first retry.",
    )
    max_backoff = models.DurationField(
        default=DEFAULT_MAX_BACKOFF, help_text="The longest wait between retries.",
    )
    max_doublings = models.PositiveSmallIntegerField(
        default=DEFAULT_MAX_DOUBLINGS,
        help_text="The wait doubles this many times, then grows linearly.",
    )
    retry_jitter = models.BooleanField(
        default=False, help_text="Draw each wait between half of it and all of it.",
    )
    max_snoozes = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="At most this many snoozes (atp.Snooze) per task; the next fails it. "
        "Empty for no limit.",
    )
    # Flow control by key (atp.engine.semaphores): a semaphore per key of the type.
    key_concurrency = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="At most this many tasks of one key (enqueue(..., key=...)) in flight at "
        "once; empty for no limit (a key needs this or a key_rate).",
    )
    key_rate = models.FloatField(
        null=True, blank=True,
        help_text="At most this many tasks of one key started per second, on average, "
        "across all daemons (the API also takes \"10/m\"); empty for no limit.",
    )
    key_bucket_size = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="How many tasks of one key may start at once after a quiet spell; empty "
        "for 5. Only with a key_rate.",
    )
    # Whether tasks of the type may hold semaphores: its claims then count them
    # (atp.engine.semaphores). Set by the first enqueue that names one; kept.
    gated = models.BooleanField(default=False, editable=False)
    is_paused = models.BooleanField(
        default=False, help_text="Paused types keep their queue but no task is started."
    )
    pull = models.BooleanField(
        default=False, editable=False,
        help_text="A pull type: its tasks are leased by consumers outside atpd "
        "(atp.lease_tasks), never run by a daemon; it has no handler.",
    )
    input_format = models.CharField(
        max_length=8, choices=InputFormat.choices, default=InputFormat.JSON
    )
    description = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["identifier"]
        verbose_name = "task type"

    def __str__(self):
        return self.identifier

    @property
    def input_limit(self):
        """Return the largest inputs its tasks may have, in bytes."""
        return self.max_input_bytes or conf.MAX_INPUT_BYTES

    @property
    def response_limit(self):
        """Return the largest response its tasks may store, in bytes."""
        return self.max_response_bytes or conf.MAX_RESPONSE_BYTES


class Daemon(models.Model):
    """One run of ``atpd``: where it runs and when it last reported alive."""

    host = models.CharField(max_length=255)
    pid = models.PositiveIntegerField()
    # Who its process is, by what a wall-clock step does not move (see atp.processes).
    boot_id = models.CharField(max_length=64, blank=True, help_text="Its host's boot id.")
    pid_namespace = models.CharField(max_length=64, blank=True)
    process_start_ticks = models.BigIntegerField(
        null=True, blank=True, help_text="When its process started, in clock ticks since boot."
    )
    started = models.DateTimeField()
    heartbeat = models.DateTimeField(help_text="When it last reported alive, on the database clock.")
    # Other daemons judge it by this counter advancing on their own monotonic clocks,
    # never by the stamp above (see atp.liveness).
    beats = models.PositiveBigIntegerField(
        default=0, help_text="How many heartbeats it recorded: others watch it advance.",
    )
    stopped = models.DateTimeField(null=True, blank=True)
    workers = models.PositiveSmallIntegerField(default=0)
    types = models.TextField(blank=True, help_text="The types it was asked to run; empty for all.")
    serves = models.ManyToManyField(
        Type, blank=True, related_name="served_by",
        help_text="The types it runs: those whose handler it has loaded.",
    )
    # A pull consumer holds leases like a daemon but never heartbeats: its leases end
    # at their deadline (atp.engine.pull), and no reaper declares it stopped.
    # NULL for a daemon, not an empty name: one unique constraint with no condition
    # holds on every database (MariaDB and MySQL have none with a condition).
    consumer = models.CharField(
        max_length=CONSUMER_MAX_LENGTH, null=True, blank=True, default=None,
        help_text="Set for a pull consumer (atp.lease_tasks): its name. It never "
        "heartbeats (its heartbeat is its first lease); its leases end at their deadline.",
    )

    class Meta:
        ordering = ["-started"]
        constraints = [
            models.UniqueConstraint(fields=["consumer"], name="atp_daemon_consumer_uniq"),
        ]

    def __str__(self):
        if self.consumer:
            return f"consumer {self.consumer}"
        return f"{self.host}:{self.pid}"

    @property
    def is_consumer(self):
        """Whether it is a pull consumer rather than a run of ``atpd``."""
        return bool(self.consumer)

    @property
    def identity(self):
        """Return who its process is on its host, as a ``ProcessIdentity``."""
        return ProcessIdentity(self.boot_id, self.pid_namespace, self.pid, self.process_start_ticks)


class Instance(ConditionalIndexes, models.Model):
    """One task: what it is, where it stands, and how often it was tried."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the (type, -id) index leads with it.
    type = models.ForeignKey(
        Type, on_delete=models.PROTECT, related_name="instances", db_index=False
    )
    identifier = models.CharField(max_length=NAME_MAX_LENGTH)
    named = models.BooleanField(
        default=False, help_text="Its identifier was given by its enqueuer (a name), not drawn.",
    )
    status = models.CharField(
        max_length=STATUS_MAX_LENGTH, choices=Status.choices, default=Status.ACCEPTED
    )
    priority = models.SmallIntegerField(default=0)
    # NULL, not "", when untagged: ``tag = %s`` then implies ``tag IS NOT NULL``, which
    # lets both databases use the queue's partial tag index for it.
    tag = models.CharField(
        max_length=TAG_MAX_LENGTH, null=True, blank=True,
        help_text="What pull consumers lease related tasks together by (atp.lease_tasks).",
    )
    attempt = models.PositiveIntegerField(
        default=0, help_text="Number of the latest attempt; each claim starts a new one."
    )
    restarts = models.PositiveIntegerField(
        default=0, help_text="Restarts spent against the type's max_restarts."
    )
    retries = models.PositiveIntegerField(
        default=0, help_text="How often a failed attempt was retried (the type's retry policy).",
    )
    snoozes = models.PositiveIntegerField(
        default=0, help_text="How often its handler snoozed it (atp.Snooze).",
    )
    # No index of its own: the partial (batch, status) index leads with it.
    batch = models.ForeignKey(
        "Batch", on_delete=models.SET_NULL, null=True, blank=True, related_name="members",
        db_index=False, help_text="The batch it was enqueued in (atp.batch), if any.",
    )
    progress_done = models.FloatField(null=True, blank=True)
    progress_total = models.FloatField(null=True, blank=True)
    progress_message = models.CharField(max_length=255, blank=True)
    daemon = models.ForeignKey(
        Daemon, on_delete=models.SET_NULL, null=True, blank=True, related_name="instances",
        help_text="The daemon of the latest attempt.",
    )
    created = models.DateTimeField()
    updated = models.DateTimeField()
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    expires = models.DateTimeField(
        null=True, blank=True, help_text="No attempt starts after this time (given to enqueue).",
    )

    class Meta:
        verbose_name = "task"
        indexes = [
            # A type's tasks, newest first (monitoring lists); also the type's foreign key.
            models.Index(fields=["type", "-id"], name="atp_instance_type_idx"),
            # Looking a task up by its identifier, across types (search).
            models.Index(fields=["identifier"], name="atp_instance_identifier_idx"),
            # The admin's date hierarchy reads the first and last creation times.
            models.Index(fields=["created"], name="atp_instance_created_idx"),
            # Counting and listing live tasks reads only this small index, however
            # many ended tasks the table holds.
            models.Index(
                fields=["type", "status"], condition=Q(status__in=LIVE),
                name="atp_instance_live_idx",
            ),
            # Retention purges and "ended recently" read this one.
            models.Index(
                fields=["type", "finished"], condition=Q(status__in=TERMINAL),
                name="atp_instance_ended_idx",
            ),
            # A batch's members by state: its progress, and whether one still lives.
            models.Index(
                fields=["batch", "status"], condition=Q(batch__isnull=False),
                name="atp_instance_batch_idx",
            ),
            # The tasks an operator looks into: failed and cancelled ones of a type,
            # newest first, listed and counted without reading the finished millions.
            models.Index(
                fields=["type", "status", "-id"],
                condition=Q(status__in=[Status.FAILED, Status.CANCELLED]),
                name="atp_instance_failed_idx",
            ),
        ]

    def __str__(self):
        return f"#{self.pk} {self.identifier}"

    @property
    def is_live(self):
        return self.status in LIVE

    @property
    def is_in_flight(self):
        return self.status in IN_FLIGHT

    @property
    def is_terminal(self):
        return self.status in TERMINAL

    @property
    def daemon_shown(self):
        """The daemon of the latest attempt, None while the task waits for its next one."""
        return None if self.status == Status.ACCEPTED else self.daemon

    @property
    def progress_fraction(self):
        """Return the progress as a fraction from 0 to 1, or None when unknown."""
        if self.progress_done is None or not self.progress_total:
            return None
        return max(0.0, min(1.0, self.progress_done / self.progress_total))

    @property
    def duration(self):
        """Return how long the latest attempt ran, up to now if it still runs."""
        if self.started is None:
            return None
        return (self.finished or self.updated) - self.started

    def load_inputs(self):
        """Return the task's inputs; raise ``atp.exceptions.TamperedInputs`` for a forged pickle."""
        return self.inputs.load()


class Inputs(models.Model):
    """The inputs of a task, as JSON text or as a signed pickle."""

    instance = models.OneToOneField(
        Instance, on_delete=models.CASCADE, primary_key=True, related_name="inputs"
    )
    input_format = models.CharField(
        max_length=8, choices=InputFormat.choices, default=InputFormat.JSON
    )
    data = models.TextField()

    class Meta:
        verbose_name_plural = "inputs"

    def __str__(self):
        return f"inputs of task #{self.instance_id}"

    def load(self):
        """Return the stored value; raise ``TamperedInputs`` for a forged pickle."""
        return load_inputs(self.data, self.input_format)

    @property
    def size(self):
        """Return the payload size in bytes (a pickle's size without unpickling it)."""
        if self.input_format == InputFormat.PICKLE:
            return pickled_size(len(self.data), self.data[-TOKEN_END_CHARS:])
        return len(self.data.encode("utf-8"))


class TraceContext(models.Model):
    """Where a task was enqueued in a distributed trace, for the span that runs it.

    Written beside the task when the project traces with OpenTelemetry
    (``atp.telemetry``): the propagation fields (``traceparent`` and whatever else the
    project's propagators carry) of the span of the enqueue.
    """

    instance = models.OneToOneField(
        Instance, on_delete=models.CASCADE, primary_key=True, related_name="trace_context"
    )
    carrier = models.JSONField(help_text="The propagation fields, as OpenTelemetry injects them.")

    def __str__(self):
        return f"trace context of task #{self.instance_id}"


class Response(models.Model):
    """The output of a task: bytes or text with their content type."""

    instance = models.OneToOneField(
        Instance, on_delete=models.CASCADE, primary_key=True, related_name="response"
    )
    data = models.BinaryField()
    content_type = models.CharField(max_length=255)
    charset = models.CharField(max_length=40, blank=True, help_text="Set for text.")
    size = models.PositiveBigIntegerField()
    stored = models.DateTimeField(help_text="Database clock.")

    def __str__(self):
        return f"response of task #{self.instance_id}"

    @property
    def is_text(self):
        return bool(self.charset)

    @property
    def text(self):
        """Return the response decoded as text; raise ``ValueError`` for binary data."""
        if not self.charset:
            raise ValueError(f"the response is binary ({self.content_type}), not text")
        return bytes(self.data).decode(self.charset)

    def json(self):
        """Return the response parsed as JSON."""
        return json.loads(self.text)


class LogRecord(models.Model):
    """One entry of a task's history: a state change, or a message while it ran."""

    id = models.BigAutoField(primary_key=True)
    # No index of its own: the (instance, id) timeline index leads with it.
    instance = models.ForeignKey(
        Instance, on_delete=models.CASCADE, related_name="log_records", db_index=False
    )
    time = models.DateTimeField(help_text="Database clock.")
    status = models.CharField(
        max_length=STATUS_MAX_LENGTH, choices=Status.choices, null=True, blank=True,
        help_text="The new state; empty for a message logged while the state stayed.",
    )
    attempt = models.PositiveIntegerField(default=0)
    message = models.TextField(blank=True)
    # Text, not a foreign key: the history stays as written when daemons are pruned.
    daemon = models.CharField(max_length=300, blank=True)
    # Text too: the history outlives the user accounts.
    actor = models.CharField(
        max_length=150, blank=True, help_text="The person who made this change, if one did.",
    )

    class Meta:
        ordering = ["id"]
        indexes = [
            models.Index(fields=["instance", "id"], name="atp_logrecord_timeline_idx"),
            # The charts (atp.trends.activity): the entries of a state in a window, and
            # their attempts (a retry is an ACCEPTED entry after an attempt), read from
            # the index alone. No condition: SQLite would match one only against literal
            # states, and Django binds them as parameters.
            models.Index(fields=["status", "time", "attempt"], name="atp_logrecord_moves_idx"),
        ]

    def __str__(self):
        return f"task #{self.instance_id} {self.status or 'message'}"


class Task(ConditionalIndexes, models.Model):
    """The queue row of a live task: its place in the queue and, once claimed, its lease.

    It exists from enqueue until the task ends and no worker may still run it; a
    waiting task has no daemon. A lease is only ever given up by its daemon (or, when
    that daemon is dead, by the one that reaps it): when an operator re-enqueues or
    cancels a running task, the row keeps its lease until the worker is stopped. Only
    one row of a type may carry an identifier, which makes the identifier the
    de-duplication key while an ended task's identifier is free for a new one.
    """

    instance = models.OneToOneField(
        Instance, on_delete=models.CASCADE, primary_key=True, related_name="task"
    )
    # The type and identifier are copies of the instance's, for the claim filter and
    # the unique constraint; neither changes after enqueue.
    type = models.ForeignKey(Type, on_delete=models.PROTECT, related_name="+", db_index=False)
    identifier = models.CharField(max_length=NAME_MAX_LENGTH)
    priority = models.SmallIntegerField(default=0)
    # A copy of the instance's too, for ``lease_tasks``'s filter.
    tag = models.CharField(max_length=TAG_MAX_LENGTH, null=True, blank=True)
    enqueued = models.DateTimeField()
    not_before = models.DateTimeField(help_text="Not claimed before this time.")
    daemon = models.ForeignKey(
        Daemon, on_delete=models.PROTECT, null=True, blank=True, related_name="leases",
        db_index=False,
    )
    claimed = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(
        null=True, blank=True, help_text="The running attempt times out at this time."
    )
    paused_since = models.DateTimeField(null=True, blank=True)
    expires = models.DateTimeField(
        null=True, blank=True, help_text="No attempt starts after this time; the task waiting "
        "then is cancelled as expired.",
    )
    # Whether the task holds semaphores (``Hold``): only the claim that counts them takes it.
    gated = models.BooleanField(default=False)
    # A gated task's place in the fair order its claim takes (``atp.engine.semaphores``):
    # its due time, or for a task with a key, a second after the last of its key's that
    # waits (keys take turns). None for a task that holds no semaphore.
    turn = models.DateTimeField(null=True, blank=True, editable=False)
    # The semaphore of its key (``enqueue(..., key=...)``), where its turn is counted.
    key = models.ForeignKey("Semaphore", on_delete=models.DO_NOTHING, null=True, blank=True,
                            related_name="+", db_index=False, db_constraint=False,
                            editable=False)

    class Meta:
        verbose_name = "queue entry"
        verbose_name_plural = "queue entries"
        constraints = [
            models.UniqueConstraint(
                fields=["type", "identifier"], name="atp_task_live_identifier_uniq"
            ),
        ]
        indexes = [
            # Claim order: higher priority first, then the longest runnable. Only
            # waiting rows are in it, so it stays small however busy the queue; and no
            # gated row (those have a turn), which the engines' claims never take.
            WaitingIndex(
                lead="gated", fields=["-priority", "not_before", "instance"],
                condition=Q(daemon__isnull=True, turn__isnull=True), name="atp_task_claim_idx",
            ),
            # The gated rows' claim order: priority, then their turn (keys take turns).
            # A gated row has a turn, an ungated one none (atp.invariants: gated-in-turn).
            WaitingIndex(
                lead="gated", fields=["-priority", "turn", "instance"],
                condition=Q(daemon__isnull=True, turn__isnull=False), name="atp_task_gated_idx",
            ),
            # The last turn of a key's waiting tasks: where its next task's turn is counted.
            models.Index(
                fields=["key", "turn"], condition=Q(daemon__isnull=True, key__isnull=False),
                name="atp_task_key_idx",
            ),
            models.Index(
                fields=["daemon"], condition=Q(daemon__isnull=False), name="atp_task_lease_idx"
            ),
            # A type's leases: what a claim counts against its ``max_concurrency``.
            models.Index(
                fields=["type"], condition=Q(daemon__isnull=False), name="atp_task_type_lease_idx"
            ),
            models.Index(
                fields=["deadline"], condition=Q(deadline__isnull=False),
                name="atp_task_deadline_idx",
            ),
            # The waiting tasks that expire, soonest first (``expire_waiting``).
            models.Index(
                fields=["expires"], condition=Q(expires__isnull=False, daemon__isnull=True),
                name="atp_task_expiry_idx",
            ),
            # Leasing a tag's tasks (pull types), in claim order; untagged rows are
            # left out, so enqueues without a tag do not pay for it.
            models.Index(
                fields=["type", "tag", "-priority", "not_before", "instance"],
                condition=Q(daemon__isnull=True, tag__isnull=False), name="atp_task_tag_idx",
            ),
        ]

    def __str__(self):
        return f"queue entry of task #{self.instance_id}"


#: The longest name of a semaphore, and of a key.
SEMAPHORE_NAME_MAX_LENGTH = 200
KEY_MAX_LENGTH = 100


class Semaphore(models.Model):
    """A named counter of slots (a mutex with a limit of 1): a task that holds it
    (``Hold``) is claimed only while it has a free slot, and keeps that slot while its
    attempt holds a lease (``atp.engine.semaphores``). A key's semaphore (``enqueue(...,
    key=...)``) belongs to its task type, whose ``key_concurrency`` is its limit."""

    # A key's: "[<its type's key>]<the key>" (brackets are in no name a user gives).
    name = models.CharField(max_length=255, unique=True)
    limit = models.PositiveIntegerField(
        null=True, blank=True,
        help_text="How many tasks may hold it at once; empty for a key's: its type's "
        "key_concurrency.",
    )
    type = models.ForeignKey(
        Type, on_delete=models.CASCADE, null=True, blank=True, related_name="+",
        help_text="The task type of a key's semaphore.",
    )
    # A key's token bucket (its type's key_rate) as the last claim left it: ``tokens`` at
    # ``tokens_at`` (None: full).
    tokens = models.FloatField(null=True, blank=True, editable=False)
    tokens_at = models.DateTimeField(null=True, blank=True, editable=False)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.label

    @property
    def label(self):
        """The name an operator reads: a key's as ``<type>[<key>]``."""
        if self.type_id is None:
            return self.name
        return f"{self.type.identifier}[{self.name.split(']', 1)[1]}]"


class Hold(models.Model):
    """A semaphore a task needs: it is claimed only with a slot of each it holds."""

    instance = models.ForeignKey(Instance, on_delete=models.CASCADE, related_name="holds",
                                 db_index=False)
    semaphore = models.ForeignKey(Semaphore, on_delete=models.PROTECT, related_name="holds")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["instance", "semaphore"], name="atp_hold_uniq"),
        ]

    def __str__(self):
        return f"task #{self.instance_id} holds semaphore #{self.semaphore_id}"


class Tombstone(models.Model):
    """The name of a named task deleted within its type's ``dedup_window`` after it ended:
    the name stays taken until the window closes, then the tombstone is purged."""

    type = models.ForeignKey(Type, on_delete=models.CASCADE, related_name="+", db_index=False)
    identifier = models.CharField(max_length=NAME_MAX_LENGTH)
    ended = models.DateTimeField(help_text="When its (latest) task of that name ended.")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["type", "identifier"], name="atp_tombstone_uniq"),
        ]
        indexes = [models.Index(fields=["ended"], name="atp_tombstone_ended_idx")]

    def __str__(self):
        return f"tombstone of {self.identifier}"


class Schedule(models.Model):
    """A periodic task: a task of ``type`` enqueued at each due time of a cron expression
    or an interval, once across all daemons (see ``atp.schedules``).

    Rows change through ``atp.schedule``/``atp.unschedule`` (the code's declarations) and
    the admin (an operator's, ``atp.engine.save_schedule``); the daemons move
    ``next_run`` as they enqueue the runs.
    """

    name = models.CharField(
        max_length=SCHEDULE_NAME_MAX_LENGTH, unique=True,
        help_text="Letters, digits, '_' and '-'; names the tasks it enqueues.",
    )
    type = models.ForeignKey(Type, on_delete=models.PROTECT, related_name="schedules")
    cron = models.CharField(
        max_length=CRON_MAX_LENGTH, blank=True,
        help_text="A cron expression (5 fields, or 6 with seconds last); empty for an interval.",
    )
    interval = models.DurationField(
        null=True, blank=True, help_text="Every this long (whole seconds); empty for a cron expression.",
    )
    timezone = models.CharField(
        max_length=TIMEZONE_MAX_LENGTH, blank=True,
        help_text="The time zone of the cron expression, such as Europe/Paris; empty for UTC.",
    )
    inputs = models.TextField(default="null", help_text="The inputs of each task, as JSON.")
    priority = models.SmallIntegerField(default=0)
    catch_up = models.PositiveSmallIntegerField(
        default=1,
        help_text="After missed due times (no daemon ran), enqueue at most this many runs, "
        "the latest; 0: none more than ATP_SCHEDULE_GRACE_SECONDS late.",
    )
    enabled = models.BooleanField(default=True)
    switched_by_operator = models.BooleanField(
        default=False,
        help_text="An operator set whether it is enabled: a declaration in code no longer "
        "changes that.",
    )
    next_run = models.DateTimeField(db_index=True, help_text="The next due time not enqueued yet.")
    last_run = models.DateTimeField(
        null=True, blank=True, help_text="The latest due time a task was enqueued for.",
    )
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def timetable(self):
        """Return when it comes due, as an ``atp.schedules.Timetable``."""
        return Timetable(cron=self.cron, interval=self.interval, timezone=self.timezone)


class Batch(ConditionalIndexes, models.Model):
    """Tasks enqueued together (``atp.batch``), and the task enqueued once all have ended.

    Once the batch is sealed (its ``with`` block ended) and none of its members is
    live, a daemon enqueues its on-complete task, once (see ``atp.engine.batches``).
    """

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=255, blank=True)
    on_complete = models.CharField(
        max_length=IDENTIFIER_MAX_LENGTH,
        help_text="The type of the task enqueued once every member has ended.",
    )
    function = models.CharField(
        max_length=255, blank=True,
        help_text="A function called then (atp.defer), in a task of the type above.",
    )
    inputs = models.TextField(default="{}", help_text="Given to the on-complete task (JSON).")
    created = models.DateTimeField()
    sealed = models.DateTimeField(
        null=True, blank=True, help_text="When its last member was enqueued (its block ended).",
    )
    # While its block runs, its process advances this counter (atp.liveness.Pulse); the
    # daemons seal as forgotten only a batch whose counter they saw stand still.
    beats = models.PositiveBigIntegerField(
        default=0, help_text="Signs of life of the process running its block.",
    )
    completed = models.DateTimeField(
        null=True, blank=True, help_text="When its on-complete task was enqueued.",
    )
    completion = models.ForeignKey(
        Instance, on_delete=models.SET_NULL, null=True, blank=True, related_name="+",
        help_text="Its on-complete task.",
    )
    # The members' ends as counted at completion.
    total = models.PositiveIntegerField(null=True, blank=True)
    finished = models.PositiveIntegerField(null=True, blank=True)
    failed = models.PositiveIntegerField(null=True, blank=True)
    cancelled = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "batches"
        indexes = [
            # The batches daemons look at: sealed, not completed. Few, however many ended.
            models.Index(fields=["id"], condition=Q(completed__isnull=True, sealed__isnull=False),
                         name="atp_batch_open_idx"),
        ]

    def __str__(self):
        return f"batch #{self.pk}{f' {self.name}' if self.name else ''}"

"""The supervisor: atpd's main loop.

One thread, one loop. Each round it waits for something to happen (a worker reports
or dies, a notification or a signal arrives, a timer is due), then does its database
work: the ends its workers reported and the starts of prefetched tasks (written
together), pending restarts, the heartbeat, the check against its leases, the
maintenance duties that are due (``atp.daemon.duties``: among them the batches whose
members all ended and the due runs of schedules), and, when the claim policy calls
for one (``atp.daemon.claiming``), a claim that starts tasks for the idle workers and
queues a few more behind busy ones when tasks are short (``atp.daemon.prefetch``);
last, the duties that wait for the round's own work: the ended tasks retention lets
go, in short turns a moment apart while some are due (``atp.daemon.retention``). A database
that goes away puts the loop in outage mode: running tasks go on, database work is
retried with back-off.
"""

import logging
import multiprocessing
import signal
import time
from multiprocessing.connection import wait

from atp import engine
from atp.conf import conf
from atp.daemon import claiming, collector, handoff, maintenance, recording, stopping
from atp.daemon.catalog import Catalog
from atp.daemon.claiming import ClaimPolicy
from atp.daemon.duties import Duties, Duty, contain
from atp.daemon.events import Every, SignalInbox
from atp.daemon.lease import Lease, clock
from atp.daemon.outage import (
    CONNECTION_ERRORS,
    SUPERVISOR_WAIT_SECONDS,
    Backoff,
    Contention,
    Outage,
    close_connections,
    harden_connections,
)
from atp.daemon.pool import WorkerPool, exit_cause
from atp.daemon.prefetch import Pace, distribute, weight
from atp.daemon.retention import Retention
from atp.daemon.stopping import (
    Assignment,
    Ending,
    PendingWrites,
    Stopper,
    hand_back_unstarted,
    unwritten_start,
    write_after,
)
from atp.daemon.wakeup import Listener
from atp.db import is_retryable, retry_budget
from atp.engine.base import database
from atp.engine.claim import claimable_types
from atp.engine.outcomes import Outcome
from atp.engine.schedules import sync_declared_schedules
from atp.engine.types import sync_declared_types
from atp.exceptions import DaemonStopped
from atp.liveness import Watch
from atp.states import Status

logger = logging.getLogger(__name__)

CONTROL_INTERVAL_SECONDS = 0.5
MAX_WAIT_SECONDS = 1.0


class Reports:
    """What one round writes of what the workers reported: ``taken`` (``(outcome, when
    its attempt started)``, the time None when its start is written), and the prefetched
    tasks ``started`` whose start alone is due."""

    def __init__(self, taken):
        self.taken = taken
        self.started = []
        self.outcomes = []

    def date(self, now):
        """Make the outcomes to write at ``now``: each start not written goes with them."""
        self.outcomes = [outcome if since is None else outcome.since_start(now - since)
                         for outcome, since in self.taken]
        self.outcomes += [Outcome.started(task.pk, task.attempt, now - task.since)
                          for task in self.started]

    def written(self):
        for task in self.started:
            task.start_written = True  # or refused: the task went on, and will be stopped


class Supervisor:
    """Runs one atpd: a pool of workers fed from the queue until it is told to stop."""

    def __init__(self, config):
        self.config = config
        context = multiprocessing.get_context("fork")
        self.lease = Lease(context)
        self.listener = Listener(database())
        self.inbox = None
        self.pool = WorkerPool(
            context, self.lease, before_fork=self._before_fork, private_fds=self._private_fds,
            max_tasks=config.max_tasks_per_child,
        )
        self.daemon = None
        self.catalog = Catalog(config.types)
        self.pending = PendingWrites()
        self.stopper = Stopper()
        # What workers reported, not written yet: (outcome, when its attempt started if
        # its start is not written either, else None).
        self.outcomes = []
        self.pace = Pace(config.prefetch)
        # Prefetched tasks no worker's pipe had room for (large inputs): given out, in
        # claim order, as room frees up; SCHEDULED and leased meanwhile.
        self.held = []
        self.stop_requests = 0
        self.drain_deadline = None
        self.outage = Outage()
        self.contention = Contention()
        self.claims = ClaimPolicy(config.poll_interval)
        self.retention = Retention()
        self.heartbeats = Every(conf.HEARTBEAT_INTERVAL_SECONDS)
        self.controls = Every(CONTROL_INTERVAL_SECONDS)
        # Other daemons' heartbeat counters, and the pulses of open batches' blocks, as
        # seen on this one's monotonic clock.
        self.neighbours = Watch()
        self.batch_blocks = Watch()
        self.duties = Duties(self._duties(), log=logger)
        self.gated_first = False  # whether the last claim took the gated types' tasks first

    def _duties(self):
        """Return the maintenance duties, in the order a round runs them (see
        ``atp.daemon.duties``)."""
        heartbeat, poll = conf.HEARTBEAT_INTERVAL_SECONDS, self.config.poll_interval
        return [
            Duty("taking on new types", heartbeat, self._reload_catalog, is_contained=False),
            Duty("reaping silent daemons", heartbeat, is_contained=False, run=lambda:
                 maintenance.reap_stale_daemons(self.daemon, self.neighbours)),
            Duty("expiring pull leases", heartbeat, maintenance.expire_pull_leases),
            Duty("cancelling expired tasks", heartbeat, maintenance.expire_waiting_tasks),
            Duty("tending batches", heartbeat,
                 lambda: maintenance.tend_batches(self.batch_blocks)),
            Duty("pruning stopped daemons", heartbeat, maintenance.prune_stopped_daemons,
                 is_contained=False),
            Duty("tending the queue table", heartbeat, maintenance.tend_queue_table,
                 is_contained=False),
            # Every poll, and when the first schedule comes due, if before the next poll.
            Duty("enqueueing what came due", poll, self._enqueue_due, is_paced=True,
                 while_stopping=False),
            # After the round's own work; in short turns, a moment apart, while some are
            # due, so that retention keeps pace with what ends and holds no round back.
            Duty("purging ended tasks and tombstones", heartbeat, self.retention.purge,
                 is_paced=True, after_claim=True, while_stopping=False),
        ]

    # -- the loop ------------------------------------------------------------------

    def run(self):
        """Run until stopped and every task is finished or handed back; return the exit code."""
        self._start()
        exit_code = 0
        with SignalInbox() as inbox:
            self.inbox = inbox
            try:
                while not self._is_finished():
                    self._wait(inbox)
                    busy_since = time.monotonic()
                    for signum in inbox.take():
                        self._on_signal(signum)
                    self._collect_workers()
                    self._give_out(self.held)
                    self._database_round()
                    self._enforce_deadlines()
                    self.pace.round_took(time.monotonic() - busy_since)
            except Exception:
                logger.exception("atpd %s stopping after an unexpected error", self.daemon)
                exit_code = 1
        self._finish()
        return exit_code

    def _start(self):
        harden_connections(database())
        backoff = Backoff()
        while True:
            try:
                sync_declared_types()
                sync_declared_schedules()
                claimable_types(self.config.types)  # unknown --types fail here, clearly
                # Before the workers are forked: they run the code loaded now.
                self.catalog.load(may_import=True)
                self._register()
                maintenance.reap_gone_daemons_on_this_host(self.daemon)
                break
            except CONNECTION_ERRORS as exc:
                delay = backoff.next()
                logger.warning("database unreachable at start (%s); retrying in %.1f s", exc, delay)
                close_connections()
                time.sleep(delay)
        collector.for_supervisor()
        self.pool.spawn(self.config.workers)
        logger.info(
            "atpd %s started: %s workers, running types %s%s", self.daemon, self.config.workers,
            ",".join(self.catalog.identifiers()) or "none", ", burst" if self.config.burst else "",
        )

    def _is_finished(self):
        if self.drain_deadline is None or self.pool.workers:
            return False
        if not (self.pending or self.outcomes) or self.stop_requests > 1:
            return True
        # Writes the database will not take: leave them to the reapers.
        return time.monotonic() > self.drain_deadline + conf.DAEMON_TIMEOUT_SECONDS

    def _wait(self, inbox):
        now = time.monotonic()
        ready = [inbox, *self.pool.waitables()]
        if self.listener.is_listening:
            ready.append(self.listener)
        has_room = self._may_claim() and self._has_room()
        timeout = (0.0 if has_room and self.claims.is_due(now)
                   else self._seconds_to_next_duty(now, has_room))
        if self.listener in wait(ready, timeout) and self.listener.drain():
            self.claims.woken()

    def _seconds_to_next_duty(self, now, has_room):
        due = [now + MAX_WAIT_SECONDS]
        if self.outage.is_on:
            due.append(self.outage.retry_at)  # no database work before then
        elif self.lease.is_expired():
            due.append(self.heartbeats.next)  # nothing but the heartbeat until it is back
        else:
            due += [self.heartbeats.next,
                    self.duties.next_due(is_stopping=self.drain_deadline is not None)]
            if self.pool.workers:
                due.append(self.controls.next)
            claim_at = self.claims.wake_at(has_idle=bool(self.pool.idle()), has_room=has_room,
                                           is_stopping=self.drain_deadline is not None)
            if claim_at is not None:
                due.append(claim_at)
        deadlines = [w.assignment.kill_at for w in self.pool.busy() if w.assignment.kill_at]
        if self.drain_deadline is not None and self.drain_deadline > now:
            deadlines.append(self.drain_deadline)
        return max(0.0, min(due + deadlines) - now)

    # -- signals and stopping ------------------------------------------------------

    def _on_signal(self, signum):
        self.stop_requests += 1
        name = signal.Signals(signum).name
        if self.stop_requests == 1:
            self._begin_drain(f"received {name}")
        else:
            self._stop_now(f"received {name} again")

    def _begin_drain(self, why):
        if self.drain_deadline is not None:
            return
        self.drain_deadline = time.monotonic() + self.config.shutdown_timeout
        logger.info("atpd %s stopping (%s): %s running task(s) have %g s to finish",
                    self.daemon, why, len(self.pool.busy()), self.config.shutdown_timeout)
        self.pool.drop_queued()  # prefetched tasks come back unrun ("dropped")
        self._hand_back_held(f"daemon {self.daemon} stopped")
        for worker in self.pool.workers:
            worker.retire()  # once its queue is through

    def _stop_now(self, why):
        logger.warning("atpd %s stopping at once (%s)", self.daemon, why)
        self._begin_drain(why)
        for worker in self.pool.busy():
            self.stopper.end(worker, Ending.SHUTDOWN, "daemon stopped at once", kill=True)

    def _enforce_deadlines(self):
        decisions = stopping.due(self.pool.busy(), time.monotonic(),
                                 drain_deadline=self.drain_deadline,
                                 lease_expired=self.lease.is_expired())
        self.stopper.apply(decisions, self.daemon)

    # -- workers -------------------------------------------------------------------

    def _collect_workers(self):
        dead = self.pool.dead()  # first: what they said before they died is read below
        for worker, message in self.pool.messages():
            if message[0] == "done":
                self._on_done(worker, *message[1:])
            elif message[0] == "dropped":
                self._on_dropped(worker, *message[1:])
        replacements = 0
        for worker in self.pool.collect_dead(dead):
            self._on_death(worker)
            replacements += self.drain_deadline is None
        self.pool.spawn(replacements)

    def _on_done(self, worker, pk, attempt, outcome, ended_at):
        outcome = handoff.outcome_of(outcome)
        assignment = self._answered(worker, pk, attempt)
        if assignment is None:
            return
        # Written even when the task was being stopped: it ended first, and a write
        # refused because the task went on meanwhile is dropped.
        self.outcomes.append((outcome, None if assignment.start_written else assignment.since))
        self.pace.task_ended(ended_at - assignment.since)
        if (following := worker.assignment) is not None:
            # The worker went on with the next task of its queue when this one ended.
            following.since = max(following.since, ended_at)
            following.follow(assignment)
        if assignment.ending is not None:
            worker.retire()  # it was being stopped: a signal may still be on its way
            return
        worker.is_suspended = False  # a task can only end running: a pause came too late
        worker.tasks_done += 1
        # A semaphore's slot freed may let a task wait no more, as a type's place does.
        self.claims.task_ended(has_limits=self.catalog.has_limits or bool(self.catalog.gated))
        limit_tasks = self.config.max_tasks_per_child
        limit_mb = self.config.max_memory_per_child_mb
        if worker.is_retiring:
            return  # asked already: it stops once through its queue
        if self.drain_deadline is not None:
            worker.retire()
        elif limit_tasks and worker.tasks_done + len(worker.queue) >= limit_tasks:
            logger.info("worker pid=%s recycled after %s tasks", worker.pid,
                        worker.tasks_done + len(worker.queue))
            worker.retire()
        elif limit_mb and (used := worker.memory_mb()) > limit_mb:
            logger.info("worker pid=%s recycled at %.0f MB", worker.pid, used)
            worker.retire()

    def _on_dropped(self, worker, pk, attempt):
        """A prefetched task the worker did not run (the daemon stops): back to the queue."""
        assignment = self._answered(worker, pk, attempt)
        if assignment is not None:
            self.pending.add(*hand_back_unstarted(assignment, f"daemon {self.daemon} stopped"))

    @staticmethod
    def _answered(worker, pk, attempt):
        """Take the task a worker answered for off its queue; return it (None: not its)."""
        assignment = worker.assignment
        if assignment is None or (assignment.pk, assignment.attempt) != (pk, attempt):
            logger.error("worker pid=%s reported task id=%s attempt=%s it was not running",
                         worker.pid, pk, attempt)
            return None
        return worker.finished()

    def _on_death(self, worker):
        cause = exit_cause(worker.process.exitcode)
        assignment = worker.assignment
        for queued in worker.queued:  # it never reached them
            self.pending.add(*hand_back_unstarted(queued, f"its worker died ({cause})"))
        if assignment is None:
            if not worker.is_retiring:
                logger.warning("idle worker pid=%s died: %s", worker.pid, cause)
            return
        if assignment.ending is None:
            logger.warning("worker pid=%s died running task id=%s: %s",
                           worker.pid, assignment.pk, cause)
            self.pace.setback()
        write = write_after(assignment, cause)
        if write is not None:
            start = unwritten_start(assignment)
            if start is not None:
                self.pending.add(*start)
            self.pending.add(*write)

    def _before_fork(self):
        # A forked child must not share a live database connection with its parent.
        close_connections()
        self.listener.before_fork()

    def _private_fds(self):
        inbox = [] if self.inbox is None else self.inbox.filenos()
        return inbox + self.listener.private_fds()

    # -- the database round --------------------------------------------------------

    def _database_round(self):
        now = time.monotonic()
        if self.outage.is_waiting(now):
            return
        try:
            with retry_budget(SUPERVISOR_WAIT_SECONDS):
                self._database_work(now)
        except CONNECTION_ERRORS as exc:
            if not is_retryable(exc):
                self.outage.begin(exc)
                self.listener.close()
                return
            # Busy (another writer holds SQLite's lock): answered, so not an outage;
            # the rest of the round waits for the next one.
            self.contention.met(exc)
        else:
            self.contention.end()
        if self.outage.end():
            self.claims.woken()

    def _database_work(self, now):
        """The round's database work, in order; a connection error ends it early."""
        if self.controls.is_due(now):
            self._settle()  # the check of the leases must see them
        self.pending.flush()
        if self.heartbeats.is_due(now):
            self._heartbeat()
            self.heartbeats.done(now)
        if self.lease.is_expired():
            return
        if self.controls.is_due(now):
            busy = self.pool.busy()
            observed = stopping.observe(busy, self.daemon)
            queued = [task.pk for worker in busy for task in worker.queued]
            queued += [instance.pk for instance in self.held]
            self.stopper.apply(stopping.decide(observed, busy, queued), self.daemon)
            self.controls.done(now)
        self.duties.run_due(now, is_stopping=self.drain_deadline is not None)
        self.listener.ensure_connected()
        claim = self._claim_due(now)
        if claim is not None:
            self._claim(claim, now)  # writes the reported ends too, in the same statement
        self._settle()
        # Asked again: a burst's claim that found nothing began the drain.
        self.duties.run_due(now, is_stopping=self.drain_deadline is not None, after_claim=True)
        self._look_for_next_due(time.monotonic())

    def _enqueue_due(self):
        """Enqueue the on-complete task of each batch whose members all ended, and the due
        runs of schedules; return the seconds until the next schedule comes due (None:
        none is known). Each part's failure is logged, and tried again at the next turn."""
        completed = contain("completing batches", maintenance.complete_batches, logger)
        self.claims.enqueued(completed or 0)
        done = contain("enqueueing the due runs of schedules", maintenance.enqueue_due_schedules,
                       logger)
        if done is None:
            return None
        enqueued, seconds = done
        self.claims.enqueued(enqueued)
        return seconds

    def _settle(self):
        """Write the ends the workers reported since the last round, and the starts of
        prefetched tasks they began, together (when the round claims, its claim writes
        them)."""
        reports = self._take_reports()
        if not reports.outcomes:
            return
        try:
            recording.settle(self.daemon, reports.outcomes)
        except CONNECTION_ERRORS:
            self._keep(reports)
            raise
        reports.written()

    def _take_reports(self):
        """Take what is to write: the outcomes reported, and the starts of prefetched
        tasks running with their start unwritten (none while stopping: a task queued
        behind may come back unrun)."""
        reports, self.outcomes = Reports(self.outcomes), []
        if self.drain_deadline is None:
            reports.started = [
                worker.assignment for worker in self.pool.busy()
                if not worker.assignment.start_written and worker.assignment.ending is None]
        reports.date(time.monotonic())
        return reports

    def _keep(self, reports):
        """Keep what a round did not write for the next (the database went away)."""
        self.outcomes = reports.taken + self.outcomes

    def _heartbeat(self):
        sent = clock()
        if engine.heartbeat(self.daemon):
            self.lease.renew(sent)
        else:
            self._register_again()

    def _register_again(self):
        logger.error("daemon %s was declared dead by another daemon: stopping its tasks and "
                     "registering again", self.daemon)
        # Each task is restarted once its worker is dead (refused if the reaper already
        # did it): never while a copy may still run here.
        for worker in self.pool.busy():
            self.stopper.end(worker, Ending.LEASE_LOST, f"daemon {self.daemon} was declared dead",
                      kill=True)
        self._hand_back_held(f"daemon {self.daemon} was declared dead")  # refused: reaped
        self._register()

    def _register(self):
        sent = clock()
        self.daemon = engine.register_daemon(
            workers=self.config.workers, types=self.config.types or ()
        )
        engine.serve_types(self.daemon, self.catalog.type_ids())
        self.lease.renew(sent)

    def _reload_catalog(self):
        """Take on types that appeared (with their handler loaded here) or went away."""
        if self.catalog.load(may_import=False):
            engine.serve_types(self.daemon, self.catalog.type_ids())
            self.claims.woken()

    def _may_claim(self):
        """Return whether the daemon may claim at all: not stopping, the database there,
        its lease held."""
        return (self.drain_deadline is None and not self.outage.is_on
                and not self.lease.is_expired())

    def _has_room(self):
        slots = self.pace.free_slots(self.pool.workers, time.monotonic())
        return claiming.room(slots, holding=bool(self.held)) > 0

    def _claim_due(self, now):
        """Return the claim to make this round (``claiming.Claim``), or None."""
        if not (self._may_claim() and self.claims.is_due(now)):
            return None
        slots = self.pace.free_slots(self.pool.workers, time.monotonic())
        return claiming.size(slots, len(self.pool.idle()), holding=bool(self.held))

    def _claim(self, claim, now):
        """Claim tasks for the workers: started for the idle ones, prefetched for the
        queues of busy ones; write the reported ends (and starts) in the same
        transaction (one statement on PostgreSQL), and hand the tasks out."""
        self.claims.began(now)
        reports = self._take_reports()
        try:
            instances = self._settle_and_claim(reports.outcomes, claim.limit, claim.start)
        except DaemonStopped:
            self._keep(reports)  # written again: refused if they were
            self._register_again()
            return
        except CONNECTION_ERRORS:
            self._keep(reports)
            raise
        reports.written()
        claimed = clock()
        runnable, unknown = [], []
        for instance in instances:
            instance.claimed_clock = claimed  # a prefetched task's expiry counts from it
            task_type = instance.type
            can_run = self.catalog.can_run(task_type.identifier, task_type.handler)
            (runnable if can_run else unknown).append(instance)
        self._give_out(runnable, claim.slots)
        self.claims.claimed(claim.limit, len(instances), time.monotonic(),
                            is_stopping=self.drain_deadline is not None)
        for instance in unknown:
            self._hand_back_unknown(instance)  # after: it takes the new types on
        if self.config.burst and not instances and not self.pool.busy():
            self._begin_drain("burst: nothing left to run")

    def _look_for_next_due(self, now):
        """When the claim policy asks for it, learn when the first task waiting for its
        time (an ``eta``, a retry's backoff) becomes runnable, or the next token of a
        type with a rate and runnable tasks comes, if before the next poll (see
        ``atp.daemon.claiming``)."""
        claimed_ago = self.claims.take_due_lookup(now, is_stopping=self.drain_deadline is not None)
        if claimed_ago is None:
            return
        seconds = engine.next_due(self.catalog.type_ids(), self.config.poll_interval,
                                  rates=self.catalog.has_rates, claimed_ago=claimed_ago,
                                  gated=self.catalog.gated)
        self.claims.due_in(seconds, time.monotonic())

    def _give_out(self, instances, slots=None):
        """Send claimed tasks to the workers (see ``prefetch.distribute``); hold the ones
        no pipe has room for."""
        if not instances:
            return
        workers = self.pool.workers
        if slots is None:
            slots = self.pace.free_slots(workers, time.monotonic())
        pairs, self.held = distribute(instances, workers, slots)
        given = {}
        for worker, instance in pairs:
            task_type = instance.type
            given.setdefault(worker, []).append((Assignment(
                instance.pk, instance.attempt, task_type.identifier, task_type.handler,
                task_type.timeout.total_seconds(), daemon=self.daemon,
                start_written=instance.status == Status.RUNNING, size=weight(instance),
            ), instance))
        for worker, tasks in given.items():
            try:
                worker.assign(tasks)
            except OSError:
                pass  # the worker just died: its death restarts or hands back the tasks

    def _hand_back_held(self, why):
        for instance in self.held:
            self.pending.add(f"hand back task id={instance.pk}", lambda pk=instance.pk,
                             attempt=instance.attempt: engine.hand_back(
                                 pk, f"handed back before it started: {why}",
                                 attempt=attempt, daemon=self.daemon))
        self.held = []

    def _settle_and_claim(self, outcomes, limit, start):
        type_ids = self.catalog.type_ids()
        limited = self.catalog.has_limits  # claim within limits at once
        gated = self.catalog.gated  # claimed apart, their semaphores counted
        # The gated types' claim and the others' take turns at going first.
        self.gated_first = gated_first = bool(gated) and not self.gated_first

        def claim():
            return engine.claim_for_daemon(self.daemon, limit, type_ids, start=start,
                                           limited=limited, gated=gated,
                                           gated_first=gated_first)

        alone = [outcome for outcome in outcomes if outcome.alone]
        if alone:  # rare (hand-backs, failures that may be retried): each alone
            recording.settle(self.daemon, alone)
            outcomes = [outcome for outcome in outcomes if not outcome.alone]
        if not outcomes:
            return claim()
        try:
            settled, instances = engine.settle_and_claim(
                self.daemon, outcomes, limit, type_ids, start=start, limited=limited,
                gated=gated, gated_first=gated_first)
        except (DaemonStopped, *CONNECTION_ERRORS):
            raise
        except Exception:  # a value the database refuses: each end alone, then the claim
            logger.exception("writing %s ends with the claim failed", len(outcomes))
            recording.settle(self.daemon, outcomes)
            return claim()
        recording.report(outcomes, settled)
        return instances

    def _hand_back_unknown(self, instance):
        # Its type's handler changed since the catalog was read: not ours to run.
        reason = (f"not run by daemon {self.daemon}: it has not loaded handler "
                  f"{instance.type.handler}")
        self.pending.add(f"hand back task id={instance.pk}", lambda: engine.hand_back(
            instance.pk, reason, attempt=instance.attempt, daemon=self.daemon))
        self._reload_catalog()

    # -- the end -------------------------------------------------------------------

    def _finish(self):
        if self.drain_deadline is None:
            self.drain_deadline = time.monotonic()
        for worker in self.pool.busy():
            self.stopper.end(worker, Ending.SHUTDOWN, "daemon stopped", kill=True)
        self.pool.stop_all()
        self._collect_workers()
        self._hand_back_held(f"daemon {self.daemon} stopped")
        try:
            self._settle()
            self.pending.flush()
            returned = engine.retire_daemon(self.daemon, f"daemon {self.daemon} stopped")
            if returned:
                logger.warning("handed back %s task(s) still leased at stop", returned)
        except Exception as exc:
            logger.error("could not record the stop (%s): the tasks still leased will be "
                         "restarted by another daemon, or at the next start on this host", exc)
        self.listener.close()
        close_connections()
        logger.info("atpd %s stopped", self.daemon)

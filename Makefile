# django-atp: `make demo` runs the demo, `make test` runs the whole suite, `make bench`
# measures atpd.
#
# Everything is installed into .venv from setup.cfg; nothing else is needed but
# Python 3.11+ and make. `make test` runs the suite on SQLite, on PostgreSQL when
# ATP_TEST_DATABASE_URL (default: a local server) answers, and on MariaDB/MySQL when
# ATP_TEST_MYSQL_URL answers; with ATP_REQUIRE_POSTGRES=1 (ATP_REQUIRE_MYSQL=1) an
# unreachable server fails the run.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=
export ATP_TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
ATP_BENCH_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/atp_bench
ATP_BENCH_MYSQL_URL ?= mysql://root@127.0.0.1:3306/atp_bench
export ATP_CHAOS_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/atp_chaos
ATP_CHAOS_MYSQL_URL ?= mysql://root@127.0.0.1:3306/atp_chaos
export ATP_TEST_MYSQL_URL ?= mysql://root@127.0.0.1:3306/test
CHAOS_ARGS ?=
ATP_REQUIRE_POSTGRES ?= 0
ATP_REQUIRE_MYSQL ?= 0
DJANGO_COMPAT ?= Django>=4.2,<5.0

.PHONY: demo test test-fast browser test-sqlite test-pages test-sqlite-core test-sqlite-slow \
	test-sqlite-fast test-postgres-slow test-mysql-slow test-postgres \
	test-postgres-own test-postgres-orm test-postgres-fast test-mysql test-mysql-own \
	test-mysql-orm test-mysql-fast mysql-driver test-orm test-djangotasks test-compat \
	test-django6 test-lane test-beside bench bench-peers bench-admin soak screenshots guards chaos lint clean

$(VENV)/.installed: setup.cfg pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# The demo needs the package alone, none of the test tools. Its login is kept across
# runs; DEMO_RESET=1 draws a new password and removes the demo's tasks and schedule.
DEMO_ADDRESS ?= 127.0.0.1:8000
DEMO_RESET ?= 0
$(VENV)/.demo: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e .
	touch $@

demo: $(VENV)/.demo
	$(PY) manage.py migrate --noinput
	$(PY) manage.py demo_setup $(if $(filter 1,$(DEMO_RESET)),--reset)
	$(PY) manage.py demo_serve $(DEMO_ADDRESS)

# `make test` runs its stages in two lanes side by side, each stage with a database of its
# own (SQLite: a file per process; on a server, the test database with a suffix of its
# own), and every stage even when another fails (-k); each lane prints a stage's output
# whole when the stage ends. TEST_LANE holds the tests marked `slow` (real daemons and
# processes, large tables), one database after another: most wait for their daemons'
# timers, and only one of them runs at a time, as when run alone. TEST_BESIDE holds the rest: each
# database's other tests, the queue verbs' suite on the orm engine, and the pages' browser
# tests. TEST_LANES=1 runs both lists one stage after another (docs/development.md).
TEST_LANE ?= test-sqlite-slow test-postgres-slow test-mysql-slow
TEST_BESIDE ?= test-sqlite-fast test-postgres-fast test-mysql-fast test-postgres-orm \
	test-mysql-orm test-orm test-pages
TEST_LANES ?= 2
test: $(VENV)/.installed mysql-driver browser  # installed once, before the stages
ifeq ($(TEST_LANES),1)
	@$(MAKE) --no-print-directory -k -j1 $(TEST_LANE) $(TEST_BESIDE)
else
	@$(MAKE) --no-print-directory -k -j2 --output-sync=target test-lane test-beside
endif
# -j1: a lane's stages one after another, whatever job slots the other lane has freed
# (make says it resets the jobserver in that sub-make: that is the point).
test-lane: $(VENV)/.installed
	@$(MAKE) --no-print-directory -k -j1 $(TEST_LANE)
test-beside: $(VENV)/.installed
	@$(MAKE) --no-print-directory -k -j1 $(TEST_BESIDE)

# The edit-test loop: everything but real daemons, processes and large tables, on SQLite.
test-fast: $(VENV)/.installed
	env -u ATP_TEST_DATABASE_URL $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# The queue verbs' behaviour suite once more on the portable engine (ATP_ENGINE = "orm"),
# which serves databases without an engine of their own: here on SQLite, and beside the
# database's own engine in test-postgres-orm and test-mysql-orm. ORM_TESTS=tests runs the
# whole suite on three databases, each with two engines (on demand: about 20 minutes more).
ORM_TESTS ?= tests/engine tests/daemon/test_execution.py tests/test_api.py
# The pages' browser tests and the demo's run once per stack, in its SQLite stage
# (test-pages): what they check (pages, their scripts and layout, the demo project) is
# the same on every database and engine, and the figures behind the pages are tested on
# each database (tests/test_stats.py, tests/views). So do the tests marked `once` (code
# reloading, the wheel, the CLI's exit codes as a process), in test-sqlite-core. The
# other stages leave them out.
ONCE_TESTS ?= --ignore=tests/browser --ignore=tests/demo --once-elsewhere
PAGE_TESTS ?= tests/browser tests/demo
test-orm: $(VENV)/.installed
	env -u ATP_TEST_DATABASE_URL ATP_TEST_ENGINE=orm $(PY) -m pytest $(PYTEST_ARGS) $(ORM_TESTS) $(ONCE_TESTS)

# $(call apt_install,PACKAGES): install Debian's PACKAGES, one apt at a time: stages that
# run side by side (make test's lanes) may each need one (flock), and apt waits for another
# apt's lock.
APT_LOCK ?= /tmp/atp-apt.lock
apt_install = flock $(APT_LOCK) sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "$$@" \
	>/dev/null' apt-install $(1)

# The browser tests drive Debian's Chromium. Installing it needs root; without it the
# browser tests are skipped with a message (outside CI, where they must run).
browser:
	@if command -v chromium >/dev/null 2>&1 || [ -n "$$ATP_CHROMIUM" ]; then \
		true; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "== installing Chromium for the browser tests"; \
		$(call apt_install,chromium); \
	else \
		echo "== no Chromium and no root to install it: the browser tests will be skipped"; \
	fi

# The whole suite on SQLite: the pages' tests, then the rest (side by side under -j).
test-sqlite: test-pages test-sqlite-core

test-pages: $(VENV)/.installed browser
	env -u ATP_TEST_DATABASE_URL $(PY) -m pytest $(PYTEST_ARGS) $(PAGE_TESTS)

# SQLite's core: its `slow` tests and the rest, which make test runs in its two lanes.
test-sqlite-core: test-sqlite-slow test-sqlite-fast

test-sqlite-slow: $(VENV)/.installed
	env -u ATP_TEST_DATABASE_URL $(PY) -m pytest -m slow $(PYTEST_ARGS) --ignore=tests/browser \
		--ignore=tests/demo

test-sqlite-fast: $(VENV)/.installed
	env -u ATP_TEST_DATABASE_URL $(PY) -m pytest -m "not slow" $(PYTEST_ARGS) \
		--ignore=tests/browser --ignore=tests/demo

# $(call suffixed,URL,SUFFIX): the database URL of a stage that runs beside the one on URL
# on the same server: the same but for SUFFIX after its database's name.
suffixed = $(dir $(1))$(notdir $(1))$(2)
orm_url = $(call suffixed,$(1),_orm)

# $(call on_postgres,TITLE,COMMAND): run COMMAND when the PostgreSQL server of
# $(ATP_TEST_DATABASE_URL) answers (its database need not exist: the tests create their
# own); otherwise a failure with ATP_REQUIRE_POSTGRES=1, else a message.
postgres_answers = $(PY) -c 'import os, psycopg; psycopg.connect( \
	os.environ["ATP_TEST_DATABASE_URL"], dbname="postgres", connect_timeout=5).close()' 2>/dev/null
on_postgres = if $(postgres_answers); then \
		echo "== PostgreSQL, $(1)" && $(2); \
	elif [ "$(ATP_REQUIRE_POSTGRES)" = "1" ]; then \
		echo "PostgreSQL is required but $$ATP_TEST_DATABASE_URL does not answer" >&2; exit 1; \
	else \
		echo "== PostgreSQL at $$ATP_TEST_DATABASE_URL does not answer: skipped"; \
	fi

# The whole suite (but ONCE_TESTS) on PostgreSQL with its engine, and ORM_TESTS on the
# orm engine (in the database $(ATP_TEST_DATABASE_URL)_orm).
test-postgres: test-postgres-own test-postgres-orm

test-postgres-own: test-postgres-slow test-postgres-fast

test-postgres-slow: $(VENV)/.installed
	@$(call on_postgres,the slow tests in $(ATP_TEST_DATABASE_URL),$(PY) -m pytest -m slow $(PYTEST_ARGS) $(ONCE_TESTS))

# The rest, in the database named as ATP_TEST_DATABASE_URL's with `_fast` added.
test-postgres-fast: $(VENV)/.installed
	@$(call on_postgres,the fast tests in $(call suffixed,$(ATP_TEST_DATABASE_URL),_fast),\
		ATP_TEST_DATABASE_URL=$(call suffixed,$(ATP_TEST_DATABASE_URL),_fast) \
		$(PY) -m pytest -m "not slow" $(PYTEST_ARGS) $(ONCE_TESTS))

test-postgres-orm: $(VENV)/.installed
	@$(call on_postgres,the orm engine in $(call orm_url,$(ATP_TEST_DATABASE_URL)),\
		ATP_TEST_DATABASE_URL=$(call orm_url,$(ATP_TEST_DATABASE_URL)) \
		ATP_TEST_ENGINE=orm $(PY) -m pytest $(PYTEST_ARGS) $(ORM_TESTS) $(ONCE_TESTS))

# MariaDB/MySQL at $(ATP_TEST_MYSQL_URL). Its driver (the `mysql` extra, mysqlclient)
# builds against the client library's headers: the Debian packages are installed here
# when missing and make runs as root.
$(VENV)/.mysql: $(VENV)/.installed
	@if ! pkg-config --exists libmariadb 2>/dev/null && ! pkg-config --exists mysqlclient 2>/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "== installing libmariadb-dev and pkg-config for the MariaDB/MySQL driver"; \
			$(call apt_install,libmariadb-dev pkg-config); \
		else \
			echo "the MariaDB/MySQL driver needs libmariadb-dev and pkg-config (apt-get install as root)" >&2; \
			exit 1; \
		fi; \
	fi
	$(PY) -m pip install --quiet -e '.[mysql]'
	touch $@

# Whether the MariaDB/MySQL server of the URL $(1) answers (a TCP connection).
mysql_answers = $(PY) -c 'import sys, socket, urllib.parse as u; \
	url = u.urlsplit(sys.argv[1]); \
	socket.create_connection((url.hostname, url.port or 3306), timeout=5).close()' "$(1)"

# The driver, installed once per make (a prerequisite of each MariaDB/MySQL stage) when
# the server answers.
mysql-driver: $(VENV)/.installed
	@if $(call mysql_answers,$(ATP_TEST_MYSQL_URL)) 2>/dev/null; then \
		$(MAKE) --no-print-directory $(VENV)/.mysql; fi

# $(call on_mysql,TITLE,COMMAND): as on_postgres, for $(ATP_TEST_MYSQL_URL), which COMMAND
# finds as ATP_TEST_DATABASE_URL unless it sets that itself.
on_mysql = if $(call mysql_answers,$(ATP_TEST_MYSQL_URL)) 2>/dev/null; then \
		echo "== MariaDB/MySQL, $(1)" && \
		ATP_TEST_DATABASE_URL=$$ATP_TEST_MYSQL_URL $(2); \
	elif [ "$(ATP_REQUIRE_MYSQL)" = "1" ]; then \
		echo "MariaDB/MySQL is required but $$ATP_TEST_MYSQL_URL does not answer" >&2; exit 1; \
	else \
		echo "== MariaDB/MySQL at $$ATP_TEST_MYSQL_URL does not answer: skipped"; \
	fi

# The whole suite (MYSQL_TESTS, but ONCE_TESTS) on the database's engine (mysql,
# docs/engines.md), and ORM_TESTS on the orm engine (in $(ATP_TEST_MYSQL_URL)_orm).
MYSQL_TESTS ?= tests
test-mysql: test-mysql-own test-mysql-orm

test-mysql-own: test-mysql-slow test-mysql-fast

test-mysql-slow: mysql-driver
	@$(call on_mysql,the slow tests in $(ATP_TEST_MYSQL_URL),$(PY) -m pytest -m slow $(PYTEST_ARGS) $(MYSQL_TESTS) $(ONCE_TESTS))

test-mysql-fast: mysql-driver
	@$(call on_mysql,the fast tests in $(call suffixed,$(ATP_TEST_MYSQL_URL),_fast),\
		ATP_TEST_DATABASE_URL=$(call suffixed,$(ATP_TEST_MYSQL_URL),_fast) \
		$(PY) -m pytest -m "not slow" $(PYTEST_ARGS) $(MYSQL_TESTS) $(ONCE_TESTS))

test-mysql-orm: mysql-driver
	@$(call on_mysql,the orm engine in $(call orm_url,$(ATP_TEST_MYSQL_URL)),\
		ATP_TEST_DATABASE_URL=$(call orm_url,$(ATP_TEST_MYSQL_URL)) ATP_TEST_ENGINE=orm $(PY) -m pytest $(PYTEST_ARGS) $(ORM_TESTS) $(ONCE_TESTS))

# Django 6 (built-in django.tasks) needs Python 3.12: the first interpreter found that is
# 3.12 (pyenv's shim of python3.12 may refuse to run; pyenv's own copy is looked for).
PYTHON312 ?= $(shell for p in python3.12 "$$(pyenv root 2>/dev/null)/versions/3.12.1/bin/python3.12"; do \
	"$$p" -c 'import sys; assert sys.version_info[:2] == (3, 12)' >/dev/null 2>&1 && echo "$$p" && break; done)
DJANGO_NEXT ?= Django>=6.0,<6.2

# The other supported Djangos' stacks (test-compat, test-django6): what a Django version
# changes (the ORM, the admin and atp's pages, migrations, the Tasks framework) is run on
# each; the daemons' processes and the databases' own behaviour, which no Django version
# changes, run once per database in the main stack's `make test`. So: the pages' tests,
# every test but the `slow` ones (real daemons and processes, large tables) on SQLite,
# PostgreSQL and MariaDB/MySQL, Django's Tasks run by real daemons (test-djangotasks),
# and the orm engine's suite on SQLite.
STACK_TARGETS ?= test-pages test-fast test-djangotasks test-postgres-fast test-mysql-fast \
	test-orm

# Django's Tasks framework run by atpd (tests/djangotasks), on SQLite.
test-djangotasks: $(VENV)/.installed
	env -u ATP_TEST_DATABASE_URL $(PY) -m pytest $(PYTEST_ARGS) tests/djangotasks

# The other stacks' stages run one after another; STACK_JOBS=N runs N at once.
STACK_JOBS ?= 1

# Django 6 and Python 3.12, in a venv of its own (STACK_TARGETS).
test-django6:
	@if [ -z "$(PYTHON312)" ]; then \
		echo "the Django 6 stack needs Python 3.12, and none was found (python3.12, or pyenv's 3.12.1)" >&2; \
		exit 1; fi
	$(MAKE) .venv-django6/.installed VENV=.venv-django6 PYTHON="$(PYTHON312)"
	.venv-django6/bin/python -m pip install --quiet '$(DJANGO_NEXT)'
	@$(MAKE) --no-print-directory -k -j$(STACK_JOBS) --output-sync=target $(STACK_TARGETS) \
		VENV=.venv-django6

# The oldest supported Django, in a venv of its own (STACK_TARGETS).
test-compat:
	$(MAKE) .venv-compat/.installed VENV=.venv-compat
	.venv-compat/bin/python -m pip install --quiet '$(DJANGO_COMPAT)'
	@$(MAKE) --no-print-directory -k -j$(STACK_JOBS) --output-sync=target $(STACK_TARGETS) \
		VENV=.venv-compat

# Drain rate and enqueue->start latency of atpd (see bench/daemon.py), what an idle
# daemon's lone rounds cost (bench/rounds.py), then 3 minutes of a steady stream at a
# third of the drain rate (bench/stream.py), on SQLite and, when it answers, on
# PostgreSQL (its database $(ATP_BENCH_DATABASE_URL) is recreated).
bench: $(VENV)/.installed
	env -u ATP_BENCH_DATABASE_URL $(PY) -m bench.daemon
	env -u ATP_BENCH_DATABASE_URL $(PY) -m bench.rounds
	env -u ATP_BENCH_DATABASE_URL $(PY) -m bench.stream $(STREAM_ARGS)
	@if $(PY) -c 'import psycopg; psycopg.connect("$(ATP_BENCH_DATABASE_URL)".rsplit("/", 1)[0] + "/postgres", connect_timeout=5).close()' 2>/dev/null; then \
		ATP_BENCH_DATABASE_URL=$(ATP_BENCH_DATABASE_URL) $(PY) -m bench.daemon && \
		ATP_BENCH_DATABASE_URL=$(ATP_BENCH_DATABASE_URL) $(PY) -m bench.rounds && \
		ATP_BENCH_DATABASE_URL=$(ATP_BENCH_DATABASE_URL) $(PY) -m bench.stream $(STREAM_ARGS); \
	else \
		echo "== PostgreSQL at $(ATP_BENCH_DATABASE_URL) does not answer: skipped"; \
	fi
	@if $(call mysql_answers,$(ATP_BENCH_MYSQL_URL)) 2>/dev/null; then \
		$(MAKE) --no-print-directory $(VENV)/.mysql && \
		ATP_BENCH_DATABASE_URL=$(ATP_BENCH_MYSQL_URL) $(PY) -m bench.daemon && \
		ATP_BENCH_DATABASE_URL=$(ATP_BENCH_MYSQL_URL) $(PY) -m bench.rounds; \
	else \
		echo "== MariaDB/MySQL at $(ATP_BENCH_MYSQL_URL) does not answer: skipped"; \
	fi

# atp beside its peers (PgQueuer, Procrastinate, django-q2, django-tasks-db, Huey, Celery),
# one after another on this machine: the workloads of `make bench` and a steady stream,
# the table with each peer's ratio to atp's (bench/peers; about 20 minutes). The peers
# run from a venv of their own, every version pinned in bench/peers/requirements.txt;
# atp from .venv. Each system gets a database of its own on the PostgreSQL server of
# ATP_PEERS_POSTGRES_URL (dropped and created anew), Huey and Celery a database number
# of their own on the Redis server of ATP_PEERS_REDIS_URL (flushed). PEERS_ARGS passes
# options, e.g. PEERS_ARGS="--peers pgqueuer,celery --tasks 2000 --repeat 1".
PEERS_VENV ?= .venv-peers
PEERS_ARGS ?=
export ATP_PEERS_POSTGRES_URL ?= postgres://postgres@127.0.0.1:5432
export ATP_PEERS_REDIS_URL ?= redis://127.0.0.1:6379
export ATP_PEERS_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672//
$(PEERS_VENV)/.installed: bench/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers/requirements.txt
	touch $@

bench-peers: $(VENV)/.installed $(PEERS_VENV)/.installed
	$(PEERS_VENV)/bin/python -m bench.peers --atp-python $(PY) \
		--peers-python $(PEERS_VENV)/bin/python $(PEERS_ARGS)

# A steady stream of mixed work for 12 minutes on a stock PostgreSQL of its own (made
# with the machine's initdb in .bench/cluster, removed after; or ATP_SOAK_DATABASE_URL):
# retention must keep the tables bounded and the p99 wait steady (bench/soak.py).
soak: $(VENV)/.installed
	$(PY) -m bench.soak $(SOAK_ARGS)

# Time the admin and atp's pages with 1,000,000 tasks and 5,000,000 history rows on
# PostgreSQL (bench/admin_pages.py; its database is dropped and refilled, ~5 min).
bench-admin: $(VENV)/.installed
	ATP_BENCH_DATABASE_URL=$(ATP_BENCH_DATABASE_URL)_admin $(PY) -m bench.admin_pages

# The screenshots in docs/images, taken by a real browser of a busy system.
screenshots: $(VENV)/.installed browser
	env -u ATP_TEST_DATABASE_URL ATP_SCREENSHOTS=docs/images $(PY) -m pytest -q \
		tests/browser/test_screenshots.py

# Remove each guard of the queue's transitions in turn; a test must fail every time
# on SQLite, PostgreSQL and MariaDB (tests/guards.py; about 45 minutes, on demand).
guards: $(VENV)/.installed
	$(PY) -m tests.guards

# Daemons SIGKILLed at random while an operator steers tasks at random, on PostgreSQL
# (tests/chaos.py; its database $(ATP_CHAOS_DATABASE_URL) is recreated), then on
# MariaDB/MySQL ($(ATP_CHAOS_MYSQL_URL), recreated) when it answers (required with
# ATP_REQUIRE_MYSQL=1). It prints its figures and fails if an invariant broke, a task
# ran twice at once or never ended.
chaos: $(VENV)/.installed
	$(PY) -m tests.chaos $(CHAOS_ARGS)
	@if $(call mysql_answers,$(ATP_CHAOS_MYSQL_URL)) 2>/dev/null; then \
		$(MAKE) --no-print-directory $(VENV)/.mysql && \
		echo "== chaos on MariaDB/MySQL: $(ATP_CHAOS_MYSQL_URL)" && \
		ATP_CHAOS_DATABASE_URL=$(ATP_CHAOS_MYSQL_URL) $(PY) -m tests.chaos $(CHAOS_ARGS); \
	elif [ "$(ATP_REQUIRE_MYSQL)" = "1" ]; then \
		echo "MariaDB/MySQL is required but $(ATP_CHAOS_MYSQL_URL) does not answer" >&2; exit 1; \
	else \
		echo "== MariaDB/MySQL at $(ATP_CHAOS_MYSQL_URL) does not answer: chaos ran on PostgreSQL only"; \
	fi

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check atp atp_demo tests bench

clean:
	rm -rf $(VENV) .venv-compat .venv-django6 $(PEERS_VENV) .demo build dist *.egg-info db.sqlite3 db.sqlite3-shm db.sqlite3-wal db.sqlite3.atpd

"""The soak's account of a slow minute: what its server's log says of it."""

from bench.soak import server_waits

LOG = """\
2026-11-27 14:11:34.618 UTC [1] LOG:  checkpoint starting: immediate force wait
2026-11-27 14:11:34.622 UTC [1] LOG:  checkpoint complete: wrote 6 buffers (0.0%); 0 WAL file(s) added
2026-11-27 14:15:55.647 UTC [1] LOG:  checkpoint starting: wal
2026-11-27 14:16:25.154 UTC [7] LOG:  duration: 103.809 ms  statement: WITH kind AS (
\tSELECT 1
2026-11-27 14:17:00.746 UTC [8] LOG:  duration: 144.171 ms  statement: COMMIT
2026-11-27 14:17:00.746 UTC [9] LOG:  duration: 224.641 ms  execute _pg3_4: WITH batch AS (
2026-11-27 14:17:00.780 UTC [7] LOG:  duration: 359.501 ms  statement: WITH kind AS (
2026-11-27 14:17:20.000 UTC [7] LOG:  duration: 110.000 ms  statement: COMMIT
2026-11-27 14:17:20.040 UTC [8] LOG:  duration: 150.000 ms  statement: COMMIT
2026-11-27 14:17:20.080 UTC [9] LOG:  duration: 190.000 ms  statement: COMMIT
2026-11-27 14:17:30.100 UTC [7] LOG:  automatic vacuum of table "atp_soak.public.atp_task": index scans: 1
2026-11-27 14:17:40.000 UTC [9] LOG:  duration: 120.000 ms  statement: COMMIT
2026-11-27 14:18:00.000 UTC [9] LOG:  duration: 999.000 ms  statement: COMMIT
2026-11-27 14:18:00.500 UTC [8] LOG:  duration: 1600.000 ms  statement: COMMIT
"""


def test_a_minute_is_told_by_its_slow_statements_those_that_ended_together_as_one(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG)
    # The stream began at 14:11:59: its sixth minute runs from 14:16:59 to 14:17:59. A
    # statement is logged when it ends: the last one ran in that minute too. Statements
    # end together within 50 ms of the first of them, not in a chain.
    assert server_waits(log, "2026-11-27T14:11:59+00:00", 6) == [
        "the server's log in that minute: 8 statement(s) over 100 ms; a checkpoint under "
        "way (checkpoint starting: wal, at 236.6 s)",
        "  at 301.7 s: 3 ended together, after up to 360 ms (COMMIT x1, WITH batch x1, "
        "WITH kind x1)",
        "  at 321.0 s: 2 ended together, after up to 150 ms (COMMIT x2)",
        "  at 321.1 s: one of 190 ms (COMMIT x1)",
        "  at 341.0 s: one of 120 ms (COMMIT x1)",
        "  at 361.5 s: one of 1600 ms (COMMIT x1)",
    ]


def test_a_checkpoint_is_under_way_in_the_minutes_it_overlaps(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(LOG + "2026-11-27 14:19:00.000 UTC [1] LOG:  checkpoint complete: wrote 9 "
                   "buffers (0.1%)\n")
    began = "2026-11-27T14:11:59+00:00"
    assert server_waits(log, began, 8) == [  # 14:18:59 to 14:19:59: it ended in it
        "the server's log in that minute: 0 statement(s) over 100 ms; a checkpoint under "
        "way (checkpoint starting: wal, at 236.6 s)"]
    assert server_waits(log, began, 9) == [
        "the server's log in that minute: 0 statement(s) over 100 ms"]

"""The peers benchmark's arithmetic and table (bench/peers/report.py)."""

import pytest

from bench.peers.report import cell, quantiles, rate, ratio, render_notes, render_table


def test_quantiles_of_one_value_are_that_value():
    assert quantiles([4.0]) == {"p50": 4.0, "p99": 4.0}


def test_quantiles_take_the_median_and_the_99th_percentile():
    figures = quantiles(range(1, 102))  # 1..101

    assert figures["p50"] == 51
    assert figures["p99"] == pytest.approx(100)


def test_rate_is_tasks_over_the_first_start_to_the_last_end():
    assert rate(5000, 100.0, 102.0) == 2500


def test_ratio_is_the_figure_over_the_reference():
    assert ratio(8000, 4000) == 2
    assert ratio(None, 4000) is None
    assert ratio(8000, None) is None
    assert ratio(8000, 0) is None


def test_cell_shows_the_figure_and_its_ratio():
    assert cell(7512.4, "{:,.0f}", 2.0) == "7,512 (2.00×)"
    assert cell(4.44, "{:.1f}") == "4.4"
    assert cell(None, "{:.1f}", 1.0) == "—"


def results():
    return [
        {"system": "atp", "version": "0.1", "store": "PostgreSQL",
         "figures": {"drain_4": 4000.0, "start_p50": 2.0}},
        {"system": "pgqueuer", "version": "1.6.0", "store": "PostgreSQL",
         "configuration": "defaults", "bulk_api": "lists",
         "figures": {"drain_4": 8000.0, "start_p50": 3.0, "repeated": 2}},
        {"system": "celery", "error": "skipped: redis://x does not answer"},
    ]


def test_the_table_has_a_column_per_system_and_ratios_to_atp():
    lines = render_table(results())

    assert lines[0] == ("| figure | atp 0.1 (PostgreSQL) | pgqueuer 1.6.0 (PostgreSQL) | "
                        "celery (?) |")
    drain = next(line for line in lines if line.startswith("| drain, 4 workers"))
    assert drain == "| drain, 4 workers (tasks/s) | 4,000 | 8,000 (2.00×) | failed |"
    start = next(line for line in lines if line.startswith("| enqueue → start p50"))
    assert start == "| enqueue → start p50, idle worker (ms) | 2.0 | 3.0 (1.50×) | failed |"
    bulk = next(line for line in lines if line.startswith("| bulk enqueue"))
    assert bulk == "| bulk enqueue (tasks/s) | — | — | failed |"


def test_the_notes_say_how_each_system_ran_and_what_went_wrong():
    notes = render_notes(results())

    assert notes[1] == "- pgqueuer: defaults; bulk enqueue: lists; 2 task(s) ran twice"
    assert notes[2].endswith("FAILED: skipped: redis://x does not answer")


def test_atp_measured_again_is_compared_to_its_first_run():
    again = {"system": "atp", "again": True, "version": "0.1", "store": "PostgreSQL",
             "figures": {"drain_4": 3000.0}}

    lines = render_table([*results(), again])

    assert lines[0].endswith("| atp again 0.1 (PostgreSQL) |")
    drain = next(line for line in lines if line.startswith("| drain, 4 workers"))
    assert drain.endswith("| 3,000 (0.75×) |")
    assert len(render_notes([*results(), again])) == 3

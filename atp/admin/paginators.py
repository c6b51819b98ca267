"""Pagination for lists of millions of rows: a page, and a count that costs nothing."""

from django.core.exceptions import EmptyResultSet
from django.core.paginator import Paginator
from django.db import OperationalError, connections, transaction
from django.utils.functional import cached_property

#: Where PostgreSQL expects more rows than this, its estimate is shown at once.
EXACT_COUNT_UP_TO = 100_000
#: An exact count may take this long; past it, PostgreSQL's estimate is shown.
COUNT_BUDGET_MILLISECONDS = 200
#: Deeper pages are an OFFSET that reads every row before them: filter instead.
MAX_PAGES = 200


class EstimatedCountPaginator(Paginator):
    """A paginator whose count is exact when that is quick, and an estimate otherwise.

    Counting a million tasks exactly (``COUNT(*)``) takes longer than rendering the
    page. On PostgreSQL the planner's row estimate for the query is asked first (a
    millisecond); past ``EXACT_COUNT_UP_TO`` rows it is the count. Below, the exact
    count gets ``COUNT_BUDGET_MILLISECONDS``, and the estimate stands in if it takes
    longer. Other databases count. Only the first ``MAX_PAGES`` pages are offered.
    """

    @cached_property
    def num_pages(self):
        return min(super().num_pages, MAX_PAGES)

    @cached_property
    def count(self):
        queryset = self.object_list
        from atp.engine.databases import database_of  # the admin loads before the engine

        connection = connections[queryset.db]
        database = database_of(connection)
        if not database.estimates_counts:
            return super().count
        estimate = self._estimate(queryset, connection, database)
        if estimate > EXACT_COUNT_UP_TO:
            return estimate
        try:
            with transaction.atomic(using=queryset.db), connection.cursor() as cursor:
                with database.time_limit(cursor, COUNT_BUDGET_MILLISECONDS):
                    return queryset.count()
        except OperationalError:
            return estimate

    @staticmethod
    def _estimate(queryset, connection, database):
        try:
            sql, params = queryset.order_by().query.sql_with_params()
        except EmptyResultSet:  # Django knows it matches nothing (.none(), an id past bigint)
            return 0
        with connection.cursor() as cursor:
            return database.estimate_count(cursor, sql, params)


def no_facets(admin_class):
    """Turn off Django 5's "show counts" (it counts the whole table per filter)."""
    from django.contrib import admin

    if hasattr(admin, "ShowFacets"):  # Django 5.0+
        admin_class.show_facets = admin.ShowFacets.NEVER
    return admin_class

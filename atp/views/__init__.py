"""django-atp's staff-only pages: dashboard, task list, task detail, response, JSON status."""

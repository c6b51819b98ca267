"""The admin's dropdown list filters, shown alike: a dropdown however few their choices."""

from django_admin_listfilter_dropdown.filters import ChoiceDropdownFilter, RelatedDropdownFilter


class AlwaysDropdown:
    """A dropdown list filter however few its choices (the package's shows four or fewer
    as a plain list, among the others' dropdowns)."""

    template = "atp/admin/dropdown_filter.html"


class RelatedDropdown(AlwaysDropdown, RelatedDropdownFilter):
    """A related field's values, in a dropdown."""


class ChoiceDropdown(AlwaysDropdown, ChoiceDropdownFilter):
    """A field's choices, in a dropdown."""

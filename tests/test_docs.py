"""The documentation stays true to the code: its links resolve, the state diagram of
docs/concepts.md is the transition table's, and the Python samples of README.md,
docs/handlers.md and docs/upgrading.md run as shown.

A sample whose first line names a file (``# reports/tasks.py``) is written as that
module of a temporary package and imported; the others run in turn in one namespace,
as typed into ``manage.py shell``, each followed by what atpd would do meanwhile: every
runnable task is run. A ``print(...)`` with a comment after it, on its line or alone on
the next, must print the start of that comment.
"""

import contextlib
import io
import re
import sys
from pathlib import Path

import pytest
from django.db import transaction
from django.test import override_settings

import atp
from atp import registry
from atp.daemon.execution import run_task
from atp.models import Instance
from atp.states import TRANSITIONS, Status

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN = [ROOT / "README.md", ROOT / "docs" / "handlers.md", ROOT / "docs" / "upgrading.md"]

FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
MODULE_HEADER = re.compile(r"^# (?:(\w+)/)?(\w+)\.py\s*$")

#: What moves a task along each edge of ``TRANSITIONS``, as the diagram labels it.
EDGE_LABELS = {
    (Status.ACCEPTED, Status.SCHEDULED): "claimed by a daemon",
    (Status.ACCEPTED, Status.CANCELLED): "cancel",
    (Status.SCHEDULED, Status.ACCEPTED): "restart, hand back, re-enqueue",
    (Status.SCHEDULED, Status.RUNNING): "start",
    (Status.SCHEDULED, Status.FAILED): "restarts spent, set_status",
    (Status.SCHEDULED, Status.CANCELLED): "cancel",
    (Status.RUNNING, Status.ACCEPTED): "retry, restart, hand back, re-enqueue",
    (Status.RUNNING, Status.PAUSED): "pause",
    (Status.RUNNING, Status.FINISHED): "handler returned",
    (Status.RUNNING, Status.FAILED): "handler raised, restarts spent",
    (Status.RUNNING, Status.CANCELLED): "cancel",
    (Status.PAUSED, Status.ACCEPTED): "resume a held task, re-enqueue",
    (Status.PAUSED, Status.RUNNING): "resume",
    (Status.PAUSED, Status.FINISHED): "handler returned",
    (Status.PAUSED, Status.FAILED): "handler raised, restarts spent",
    (Status.PAUSED, Status.CANCELLED): "cancel",
    (Status.FAILED, Status.ACCEPTED): "re-enqueue",
    (Status.CANCELLED, Status.ACCEPTED): "re-enqueue",
}


def state_diagram():
    """Return the Mermaid state diagram of ``TRANSITIONS`` (paste it into docs/concepts.md)."""
    order = list(Status)
    lines = ["stateDiagram-v2", f"    [*] --> {Status.ACCEPTED.value}: enqueue"]
    for source in order:
        for target in sorted(TRANSITIONS[source], key=order.index):
            lines.append(f"    {source.value} --> {target.value}: {EDGE_LABELS[source, target]}")
    lines += [f"    {state.value} --> [*]" for state in order if state in
              (Status.FINISHED, Status.FAILED, Status.CANCELLED)]
    return "\n".join(lines)


def fenced_blocks(text, language):
    """Return the fenced code blocks of ``language`` in Markdown ``text``, in order."""
    blocks, fence, current = [], None, []
    for line in text.splitlines():
        if fence is None:
            opening = FENCE.match(line)
            if opening:
                fence, tag, current = opening.group(1), line[3:].strip(), []
        elif line.startswith(fence):
            if tag == language:
                blocks.append("\n".join(current) + "\n")
            fence = None
        else:
            current.append(line)
    return blocks


def prose(text):
    """Return ``text`` without its fenced code blocks (their ``#`` lines are no headings)."""
    kept, fence = [], None
    for line in text.splitlines():
        opening = FENCE.match(line)
        if opening and fence is None:
            fence = opening.group(1)
        elif fence and line.startswith(fence):
            fence = None
        elif fence is None:
            kept.append(line)
    return "\n".join(kept)


def anchors(path):
    """Return the anchors GitHub makes of the headings of the Markdown file ``path``."""
    found, seen = set(), {}
    for line in prose(path.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        found.add(slug if count == 0 else f"{slug}-{count}")
    return found


def test_the_state_diagram_is_the_transition_table():
    assert set(EDGE_LABELS) == {(source, target) for source, targets in TRANSITIONS.items()
                                for target in targets}, "label every edge of TRANSITIONS"
    [diagram] = fenced_blocks((ROOT / "docs" / "concepts.md").read_text(), "mermaid")
    assert diagram.strip() == state_diagram(), (
        "docs/concepts.md's diagram differs from atp.states.TRANSITIONS; it should read:\n"
        + state_diagram())


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_every_relative_link_points_at_a_file_and_an_anchor_there(document):
    broken = []
    for match in LINK.finditer(prose(document.read_text())):
        target = match.group(1) or match.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:
            continue
        path, _, anchor = target.partition("#")
        file = (document.parent / path).resolve() if path else document
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert not broken, f"{document.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_link_checker_catches_a_wrong_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Two words, `code`\n\n```sh\n# not a heading\n```\n")
    assert anchors(tmp_path / "a.md") == {"title", "two-words-code"}


# Running the samples.


def expected_prints(code):
    """Return what each commented ``print`` of ``code`` must print the start of."""
    lines = code.splitlines()
    expected = []
    for number, line in enumerate(lines):
        if not line.lstrip().startswith("print("):
            continue
        comment = re.search(r"\)\s*#\s*(.*)$", line)
        if comment:
            expected.append(comment.group(1))
        elif number + 1 < len(lines) and lines[number + 1].lstrip().startswith("#"):
            expected.append(lines[number + 1].lstrip()[1:].strip())
        else:
            expected.append(None)
    return expected


def run_runnable_tasks(daemon):
    """Run every task a daemon would run now, one after the other, as atpd would."""
    while claimed := atp.dequeue(daemon, limit=10):
        for task in claimed:
            run_task(task.pk, task.attempt, task.type.handler, daemon)


class Samples:
    """The Python samples of one document, written out and run."""

    def __init__(self, document, tmp_path):
        self.modules, self.shell, self.settings = [], [], []
        self.root = tmp_path
        for code in fenced_blocks(document.read_text(), "python"):
            header = MODULE_HEADER.match(code.splitlines()[0])
            if header and header.group(2) == "settings" and not header.group(1):
                self.settings.append(code)
            elif header:
                package = header.group(1) or "docsite"
                folder = tmp_path / package
                folder.mkdir(exist_ok=True)
                (folder / "__init__.py").touch()
                (folder / f"{header.group(2)}.py").write_text(code)
                self.modules.append(f"{package}.{header.group(2)}")
            else:
                self.shell.append(code)

    @property
    def packages(self):
        return sorted({module.partition(".")[0] for module in self.modules})

    def run_shell(self, daemon, namespace):
        for code in self.shell:
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                exec(compile(code, "<sample>", "exec"), namespace)  # noqa: S102
            printed = output.getvalue().splitlines()
            for expected, line in zip(expected_prints(code), printed, strict=False):
                if expected is not None:
                    assert expected == line or expected.startswith(line + " "), (
                        f"the sample printed {line!r} where it says {expected!r}:\n{code}")
            run_runnable_tasks(daemon)


@pytest.fixture
def samples(tmp_path, monkeypatch, settings):
    """Return a function that prepares a document's samples: written, importable, allowed."""
    monkeypatch.setattr(registry, "_declarations", dict(registry._declarations))
    monkeypatch.setattr(registry, "_handlers", dict(registry._handlers))
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(sys.modules)

    def prepare(document):
        prepared = Samples(document, tmp_path)
        settings.ATP_HANDLER_MODULES = [*settings.ATP_HANDLER_MODULES, *prepared.packages]
        for module in prepared.modules:
            __import__(module)
        return prepared

    yield prepare
    for name in set(sys.modules) - before:
        if name.partition(".")[0] in ("reports", "sequences", "docsite"):
            del sys.modules[name]


@pytest.mark.django_db
def test_the_readme_quick_start_runs(samples, daemon, client, django_user_model):
    readme = samples(ROOT / "README.md")
    namespace = {}
    readme.run_shell(daemon, namespace)
    instance = Instance.objects.get(pk=namespace["instance"].pk)
    assert instance.status == Status.FINISHED
    assert atp.get_response(instance).json() == {"report": 42, "pages": 3}

    # The settings and URLs it gives: an anonymous visit to atp's pages goes to the login
    # page LOGIN_URL names, and Django's default is /accounts/login/.
    [settings_sample] = readme.settings
    project = {"INSTALLED_APPS": ["django.contrib.admin"]}
    exec(settings_sample, project)  # noqa: S102
    assert project["INSTALLED_APPS"][-2:] == ["django_admin_listfilter_dropdown", "atp"]
    with override_settings(ROOT_URLCONF="docsite.urls", LOGIN_URL=project["LOGIN_URL"]):
        assert client.get("/atp/")["Location"] == "/admin/login/?next=/atp/"
    with override_settings(ROOT_URLCONF="docsite.urls", LOGIN_URL="/accounts/login/"):
        assert client.get("/atp/")["Location"] == "/accounts/login/?next=/atp/"
        staff = django_user_model.objects.create_superuser("operator", "o@example.com", "pw")
        client.force_login(staff)
        status = client.get(f"/atp/tasks/{instance.pk}.json").json()
    assert status["status"] == "FINISHED"
    assert status["response_url"] == f"/atp/tasks/{instance.pk}/response"


@pytest.mark.django_db
def test_the_readme_enqueue_rolls_back_with_its_block(samples):
    samples(ROOT / "README.md")
    with pytest.raises(ZeroDivisionError), transaction.atomic():
        atp.enqueue("reports.render", {"report": 7}, identifier="report-7")
        1 / 0  # noqa: B018
    assert not Instance.objects.filter(identifier="report-7").exists()


@pytest.mark.django_db
def test_the_handler_examples_run(samples, daemon, tmp_path):
    samples(ROOT / "docs" / "handlers.md")
    render = atp.enqueue("reports.render", {"report": 5, "pages": 3})
    export = atp.enqueue("reports.export", {"report": 5})
    run_runnable_tasks(daemon)
    render.refresh_from_db()
    export.refresh_from_db()
    assert (render.status, export.status) == (Status.FINISHED, Status.FINISHED)
    assert atp.get_response(render).json() == {"report": 5, "pages": 3}
    assert render.progress_done == 2 and render.progress_message == "page 3 of 3"
    assert "rendered 3 pages" in render.log_records.values_list("message", flat=True)

    # The idempotent one run again writes the same file, whole, and leaves nothing behind.
    from reports.exports import OUTPUT

    written = (OUTPUT / "report-5.csv").read_text()
    again = atp.run_again(export)
    run_runnable_tasks(daemon)
    again.refresh_from_db()
    assert again.status == Status.FINISHED
    assert (OUTPUT / "report-5.csv").read_text() == written
    assert not list(OUTPUT.glob("report-5.csv.*.part"))


@pytest.mark.django_db
def test_the_upgrade_example_runs(samples, daemon):
    upgrading = samples(ROOT / "docs" / "upgrading.md")
    namespace = {}
    upgrading.run_shell(daemon, namespace)
    assert not Instance.objects.filter(identifier="Task001").exists()  # deleted at its end

    bad = atp.enqueue("SequenceSum", ["one", "two"])
    run_runnable_tasks(daemon)
    bad.refresh_from_db()
    assert bad.status == Status.FAILED
    assert "Input must be a sequence of numbers!" in bad.log_records.last().message

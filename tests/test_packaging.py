import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.once
@pytest.mark.slow
def test_the_wheel_ships_migrations_templates_and_statements_and_nothing_else(tmp_path):
    # From a clean copy: a build/ folder left by an earlier build would leak old files.
    source = tmp_path / "source"
    shutil.copytree(PROJECT_ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", "docs", "db.sqlite3*"
    ))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "--wheel-dir", str(tmp_path), str(source)],
        check=True, capture_output=True,
    )
    [wheel] = tmp_path.glob("django_atp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "atp/migrations/0001_initial.py" in names
    templates = {name for name in names if name.startswith("atp/templates/atp/")}
    sources = {
        str(path.relative_to(PROJECT_ROOT))
        for path in (PROJECT_ROOT / "atp" / "templates" / "atp").rglob("*.html")
    }
    assert sources and templates == sources
    static = {name for name in names if name.startswith("atp/static/atp/")}
    assert static == {"atp/static/atp/atp.css", "atp/static/atp/live.js"}
    statements = {name for name in names if name.endswith(".sql")}
    assert statements == {"atp/engine/statements/mysql.sql",
                          "atp/engine/statements/postgresql.sql",
                          "atp/engine/statements/sqlite.sql"}
    assert not any(name.startswith(("tests/", "atp_demo/")) for name in names)

"""Bad settings and a missing engine get one clear line, before any job runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import dramatiq
import pytest
from celery import Celery

import call4agents as c4a
from call4agents_jobs.celery import OnceOnly as CeleryOnceOnly
from call4agents_jobs.dramatiq import OnceOnly as DramatiqOnceOnly
from call4agents_jobs.rq import OnceOnly as RqOnceOnly


@pytest.mark.parametrize("engine", [CeleryOnceOnly, DramatiqOnceOnly])
@pytest.mark.parametrize(
    ("settings", "says"),
    [
        ({"ledger": 5}, "takes a ledger URL such as"),
        ({"ledger": "ledger.db"}, "is not a ledger URL: pass 'sqlite:///path.db'"),
        ({"run_prefix": None}, "OnceOnly(run_prefix=...) takes a string"),
    ],
)
def test_bad_settings_are_refused_in_one_line(
    engine: type, settings: dict[str, object], says: str
) -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"^OnceOnly") as info:
        engine(**settings)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_install_takes_a_celery_app_before_its_tasks_are_set_up() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"takes a celery\.Celery app; got str"):
        CeleryOnceOnly().install("app")  # type: ignore[arg-type]
    app = Celery("late", set_as_current=False)
    app.finalize()
    with pytest.raises(c4a.ConfigurationError, match="right after creating the app"):
        CeleryOnceOnly().install(app)


def test_install_keeps_the_apps_own_annotations(tmp_path: Path) -> None:
    app = Celery("annotated", set_as_current=False)
    app.conf.task_annotations = {"tasks.add": {"rate_limit": "10/s"}}
    CeleryOnceOnly(f"sqlite:///{tmp_path / 'ledger.db'}").install(app)

    @app.task(name="tasks.add")
    def add(x: int, y: int) -> int:
        return x + y

    app.finalize()
    assert app.tasks["tasks.add"].rate_limit == "10/s"
    assert app.tasks["tasks.add"].apply((2, 3)).get() == 5  # eager: runs in its run, no worker


def test_dramatiq_middleware_is_a_broker_middleware() -> None:
    assert isinstance(DramatiqOnceOnly(), dramatiq.Middleware)


@pytest.mark.parametrize(
    ("module", "engine"), [("celery", "celery"), ("dramatiq", "dramatiq"), ("rq", "rq")]
)
def test_importing_without_the_engine_names_the_install_line(module: str, engine: str) -> None:
    hide = f"import sys; sys.modules[{engine!r}] = None; import call4agents_jobs.{module}"
    done = subprocess.run(
        [sys.executable, "-c", hide], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode != 0
    assert f'pip install "call4agents-jobs[{engine}]"' in done.stderr.splitlines()[-1]


@pytest.mark.parametrize("module", ["celery", "dramatiq", "rq"])
def test_one_engines_module_imports_no_other_engine(module: str) -> None:
    engines = {"celery", "dramatiq", "rq", "dbos", "temporalio"}
    check = f"import sys, call4agents_jobs.{module}; print(sorted({engines!r} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == repr([module])


def test_rq_settings_are_checked_when_the_job_class_is_defined() -> None:
    with pytest.raises(c4a.ConfigurationError, match=r"^Jobs\(ledger='ledger.db'\) is not a"):

        class Jobs(RqOnceOnly):
            ledger = "ledger.db"

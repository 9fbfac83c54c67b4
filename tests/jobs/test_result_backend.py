"""What a Celery caller gets back for an in-doubt task, by result serializer (the docs' claims)."""

from __future__ import annotations

from celery import Celery

import call4agents as c4a

ERROR = c4a.EffectInDoubt(
    key="ab" * 32, run_id="celery-1", tool="send_email", reason="x", attempt=1
)


def _through_backend(serializer: str) -> BaseException:
    app = Celery("results", set_as_current=False)
    app.conf.update(result_backend="cache+memory://", result_serializer=serializer)
    app.conf.result_accept_content = ["json", "pickle"]
    stored = app.backend.encode(app.backend.prepare_exception(ERROR))
    back: BaseException = app.backend.exception_to_python(app.backend.decode(stored))
    return back


def test_with_pickled_results_the_caller_gets_the_error_whole() -> None:
    back = _through_backend("pickle")
    assert isinstance(back, c4a.EffectInDoubt)
    assert (back.key, back.run_id, back.tool, str(back)) == (
        ERROR.key, ERROR.run_id, ERROR.tool, str(ERROR)
    )  # fmt: skip


def test_with_json_results_the_message_and_the_keys_prefix_survive() -> None:
    back = _through_backend("json")
    assert type(back) is Exception  # Celery could not call the class with the message alone
    assert ERROR.key[:12] in str(back)
    assert str(ERROR) in str(back)

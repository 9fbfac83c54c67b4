"""Call4Agents for job queues and durable engines: once-only side effects under redelivery.

Each engine has its own ``OnceOnly`` in a module of its own (``call4agents_jobs.celery``,
``.dramatiq``, ``.rq``, ``.dbos``, ``.temporal``), so importing one never imports another
engine.

- DBOS: ``@OnceOnly()`` below ``@DBOS.workflow()`` or ``@DBOS.step()``; run ``dbos-<workflow id>``.
- Temporal: ``Worker(..., interceptors=[OnceOnly()])``; a run per activity, named by its workflow
  id, workflow run id and activity id.
"""

from __future__ import annotations

__all__: list[str] = []

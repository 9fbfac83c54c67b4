"""Once-only actions in plain Python: a repeat returns the recorded result; a doubt is reported.

Run it twice: the second run sends nothing, because run "ticket-1234" already sent its emails.
"""

from __future__ import annotations

import call4agents as c4a

ledger = c4a.init()  # sqlite:///.c4a/ledger.db in the current folder, or $CALL4AGENTS_URL
outbox: list[str] = []


@c4a.effect
def send_email(to: str, body: str) -> dict[str, str]:
    outbox.append(to)  # stands in for a mail provider's API call
    return {"message_id": f"msg-{len(outbox)}", "key": c4a.current().idempotency_key}


@c4a.effect
def notify_billing(invoice: str) -> None:
    raise TimeoutError("the billing API did not answer")  # did it act? nobody knows


with c4a.run("ticket-1234"):  # the id the agent resumes with
    first = send_email("bob@example.com", "Your refund is on its way")
    again = send_email("bob@example.com", "Your refund is on its way")  # a retry
    print(f"first call:  {first['message_id']}")
    print(f"second call: {again['message_id']} (recorded result, nothing sent)")
    print(f"emails sent by this process: {len(outbox)}")

    for _ in range(2):  # the agent tries twice
        try:
            notify_billing("INV-7")
        except TimeoutError:
            print("notify_billing timed out: recorded as in doubt")
        except c4a.EffectInDoubt as exc:
            print(f"notify_billing again: refused, {exc.reason}")

for record in ledger.in_doubt():
    print(f"in doubt: {record.tool} in run {record.run_id} (key {record.key[:12]})")
    ledger.resolve(record.key, happened=False, by="example", note="billing has no such call")
    print("resolved: it did not happen; the next call may run it again")

"""The ensemble the agent may rewrite (`python -m apps.ensemble RUN --rule agent`).

`ensemble(rows, members)` gets the archive's best nodes as `members`, best first ({"node_id",
"score": its selection score}), and per row {"id", "answers": {node_id: that node's
prediction}}; it returns {row id: the ensemble's prediction}. It runs in a sandbox, sees no
label, and a row it leaves out gets the best member's answer. This version: the answer most
members gave (compared after strip and lower case), ties to the better member.
"""


def ensemble(rows: list[dict], members: list[dict]) -> dict:
    order = [m["node_id"] for m in members]
    chosen = {}
    for row in rows:
        answers = [row["answers"][node] for node in order]
        keys = [str(a).strip().lower() for a in answers]
        top = max(keys.count(k) for k in keys)
        chosen[row["id"]] = next(a for a, k in zip(answers, keys) if keys.count(k) == top)
    return chosen

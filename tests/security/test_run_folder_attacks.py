"""A run folder someone hands over (archive/run_folder.py): its run.json may not decide where code runs or
data goes, and its ledger.sqlite is read as a stranger's file. Each attack goes through the real command
lines and API (a resume, apps.analyze, hyperagents.load_run, the dashboard's run page) and must end in
one line, in seconds, with nothing run, contacted or written."""

import dataclasses
import html
import http.server
import json
import os
import re
import sqlite3
import threading
import time

import pytest
from attack_kit import Tripwire

from archive.records import RunRecord
from archive.run_folder import DATA, GUARDED, NAMED_LIKE_A_PLACE, accepting_flags, resumed_config
from services.config import Config, load_config
from services.errors import UserError
from services.fsutil import atomic_write_json
from support.cli import cli_env, run_cli
from support.small_runs import write_run

SECONDS = 20  # a refusal takes an interpreter's start; a hang would take for ever


def handed_run(tmp_path, config: dict, backend: str = "bwrap"):
    """A run folder of three scored nodes whose run.json holds `config`, as someone might hand it over."""
    run = write_run(tmp_path / "handed", 0, [0.5, 0.6, 0.7])
    atomic_write_json(run / "run.json", RunRecord(["imo_grading"], config, backend).to_dict())
    return run


def evil_spec(folder, marker):
    """evil.yaml in `folder`: a spec whose scorer, a module beside it, writes `marker` when imported."""
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\ndef score(p, row):\n    return 1.0\n")
    (folder / "train.csv").write_text("qid,q,a\nx1,1+1,2\nx2,2+2,4\n")
    (folder / "evil.yaml").write_text("name: evil\ndata: {train: train.csv}\nid: qid\ninputs: {question: q}\n"
                                      "label: a\nscorer: evil:score\n")
    return marker


def listing(folder) -> dict:
    return {str(p.relative_to(folder)): p.lstat().st_mtime_ns for p in folder.rglob("*")}


def refused(r, *expected: str, seconds: float | None = None) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    for text in expected:
        assert text in r.stderr, r.stderr
    assert seconds is None or seconds < SECONDS, seconds
    return r.stderr


def timed_cli(*args, env=None):
    started = time.monotonic()
    r = run_cli(*args, env=env or {**os.environ}, timeout=120)
    return r, time.monotonic() - started


# -- what a folder may decide --------------------------------------------------------------------------
WORDS = {"address", "uri", "url", "path", "paths", "host", "port", "backend", "backends", "executor", "image",
         "files", "entity", "endpoint", "key", "token", "dir", "socket", "command", "module", "scorer", "server",
         "agent", "mode"}


def test_every_config_field_is_either_the_folders_or_the_commands():
    sections = [s.name for s in dataclasses.fields(Config) if dataclasses.is_dataclass(getattr(Config(), s.name))]
    keys = {f"{s}.{f.name}" for s in sections for f in dataclasses.fields(getattr(Config(), s))}
    keys |= {s.name for s in dataclasses.fields(Config)} - set(sections)  # `search`, of no fixed keys
    assert set(GUARDED) | DATA == keys, sorted(keys ^ (set(GUARDED) | DATA))
    assert not set(GUARDED) & DATA
    looks_like_a_place = {k for k in keys if WORDS & set(k.split(".")[-1].split("_"))
                          or k.endswith(("api_base", "base_url"))}
    assert looks_like_a_place - set(GUARDED) <= set(NAMED_LIKE_A_PLACE), looks_like_a_place - set(GUARDED)
    assert set(NAMED_LIKE_A_PLACE) <= DATA
    from optimizer.trackers import BACKENDS, STORES

    assert set(STORES) == set(BACKENDS)  # every tracker's store is checked for links before it writes there


def test_a_folder_keeps_what_the_command_allows_and_the_user_decides_the_rest(tmp_path):
    defaults = load_config()
    saved = Config.from_dict({"sandbox": {"backend": "bwrap"}, "loop": {"max_generation": 7}})
    kept = resumed_config(saved, defaults, tmp_path / "run.json")
    assert kept.sandbox.backend == "bwrap" and kept.loop.max_generation == 7  # a resumed run goes on as it ran
    chosen = Config.from_dict({"sandbox": {"backend": "docker"}})
    assert resumed_config(saved, chosen, tmp_path / "run.json").sandbox.backend == "docker"  # the user's own
    weak = Config.from_dict({"sandbox": {"backend": "none"}, "tracking": {"backends": ["tensorboard"]}})
    with pytest.raises(UserError) as e:
        resumed_config(weak, defaults, tmp_path / "run.json")
    assert str(e.value).endswith("pass --sandbox none --track tensorboard to accept them")
    assert accepting_flags(weak) == ["--sandbox", "none", "--track", "tensorboard"]


# -- run.json ------------------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json asks for sandbox.backend none (its agent code on the host), "
                    "resumed and evaluated without --sandbox none")
def test_a_run_json_that_asks_for_no_sandbox_is_refused(tmp_path):
    run = handed_run(tmp_path, {"sandbox": {"backend": "none"}}, backend="none")
    before = listing(run)
    for extra in ([], ["--evaluate", "initial", "--split", "val"], ["--sandbox", "auto"]):
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run), *extra)
        refused(r, f"{run}/run.json asks for --sandbox none (agent code on this host, outside any sandbox); pass "
                   "--sandbox none to accept it", seconds=seconds)
    r, _ = timed_cli("run_optimization", "--initial_from", str(run), "--domain", "imo_grading", "--output_dir",
                     str(tmp_path / "out"), "--dry_run")
    refused(r, "--sandbox none")
    assert listing(run) == before and not (tmp_path / "out").exists()  # nothing ran, not even the lock
    r, _ = timed_cli("run_optimization", "--resume_from", str(run), "--sandbox", "none", "--dry_run")
    assert r.returncode == 0 and "sandbox  none" in r.stdout, r.stderr[-2000:]


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json runs agent code on a Ray cluster it names (sandbox.executor "
                    "ray, a ray_address of its own)")
def test_a_run_json_that_names_a_ray_cluster_is_refused(tmp_path):
    wire = Tripwire()
    try:
        run = handed_run(tmp_path, {"sandbox": {"executor": "ray", "ray_address": f"127.0.0.1:{wire.port}"}})
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run))
        refused(r, f"pass --executor ray --ray_address 127.0.0.1:{wire.port} to accept them", seconds=seconds)
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run), "--executor", "ray")
        refused(r, f"pass --ray_address 127.0.0.1:{wire.port} to accept it", seconds=seconds)
        assert wire.connections == 0
    finally:
        wire.close()


class Recorder(http.server.BaseHTTPRequestHandler):
    """A tracking server that answers nothing useful and remembers every request and its headers."""

    seen: list = []

    def _any(self) -> None:
        Recorder.seen.append((self.command, self.path, dict(self.headers)))
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST = do_PATCH = do_PUT = _any

    def log_message(self, *args) -> None:
        pass


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json and tracking state send the run (config, records, patches) to "
                    "an MLflow server it names, with the user's MLFLOW_TRACKING_TOKEN")
def test_a_tracker_uri_of_the_folder_is_never_contacted(tmp_path, fake_openai):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    uri = f"http://127.0.0.1:{server.server_address[1]}"
    env = cli_env(fake_openai, MLFLOW_TRACKING_TOKEN="user-secret-token-0123", MLFLOW_HTTP_REQUEST_MAX_RETRIES="0")
    try:
        run = handed_run(tmp_path, {"tracking": {"backends": ["mlflow"], "mlflow_uri": uri}})
        for extra in ([], ["--track", "mlflow"], ["--dry_run"]):
            r, seconds = timed_cli("run_optimization", "--resume_from", str(run), *extra, env=env)
            refused(r, f"--set tracking.mlflow_uri={uri} (uploads to the MLflow server it names", seconds=seconds)
        # A real run that tracked to a local store, handed over with a state file naming the server:
        # resumed with --track mlflow, it logs to its own store and never to the kept address.
        config = tmp_path / "c.yaml"
        config.write_text("sandbox:\n  backend: bwrap\nloop:\n  eval_samples: 3\n  skip_staged_eval: true\n")
        r = run_cli("run_optimization", "--domain", "imo_grading", "--output_dir", str(tmp_path / "out"), "--run_id",
                    "run", "--task_model", "openai/fake", "--meta_model", "openai/fake-meta", "--config", str(config),
                    "--max_generation", "0", "--track", "mlflow", env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        mine = tmp_path / "out" / "run"
        state = json.loads((mine / "tracking" / "mlflow.json").read_text())
        state["kept"]["uri"] = uri
        (mine / "tracking" / "mlflow.json").write_text(json.dumps(state))
        r = run_cli("run_optimization", "--resume_from", str(mine), "--track", "mlflow", "--max_generation", "0",
                    env=env, timeout=600)
        assert r.returncode == 0 and "warning" not in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]
        assert Recorder.seen == [], Recorder.seen
        assert json.loads((mine / "run.json").read_text())["config"]["tracking"]["mlflow_uri"] is None
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json points the models at an endpoint of its own (models.api_base) "
                    "or opens the gateway, which holds the provider keys, beyond loopback (gateway.host)")
def test_a_run_json_that_names_an_endpoint_is_refused(tmp_path, fake_openai):
    wire = Tripwire()
    try:
        run = handed_run(tmp_path, {"models": {"task": "openai/fake", "api_base": f"http://127.0.0.1:{wire.port}"}})
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run), env=cli_env(fake_openai))
        refused(r, "unknown config key models.api_base", seconds=seconds)
        open_gateway = handed_run(tmp_path / "g", {"gateway": {"host": "0.0.0.0"}})
        r, seconds = timed_cli("run_optimization", "--resume_from", str(open_gateway), env=cli_env(fake_openai))
        refused(r, "pass --set gateway.host=0.0.0.0 to accept it", seconds=seconds)
        assert wire.connections == 0
    finally:
        wire.close()


@pytest.mark.e2e
@pytest.mark.attack("a handed group of replicates whose group.json keeps a command line with --sandbox none and a "
                    "tracker URI for the replicates it has not started")
def test_a_group_json_that_asks_for_no_sandbox_is_refused(tmp_path):
    group = tmp_path / "group"
    group.mkdir()
    atomic_write_json(group / "group.json", {"schema_version": 1, "runs": ["seed-0"], "seeds": [0], "argv": [
        "--domain", "imo_grading", "--sandbox", "none", "--track", "mlflow", "--set",
        "tracking.mlflow_uri=http://127.0.0.1:9"]})
    r, seconds = timed_cli("run_optimization", "--resume_from", str(group))
    refused(r, f"{group}/group.json asks for --sandbox none", "--set tracking.mlflow_uri=http://127.0.0.1:9",
            seconds=seconds)
    assert not (group / "seed-0").exists()


@pytest.mark.e2e
@pytest.mark.attack("a handed group of replicates whose group.json names a spec in the handed folder, whose scorer "
                    "(module:function beside it) would run on the host, and a command line argparse cannot read "
                    "holding terminal escapes")
def test_a_group_json_that_names_a_spec_of_its_own_is_refused(tmp_path):
    group = tmp_path / "group"
    group.mkdir()
    marker = evil_spec(group, tmp_path / "scorer-ran")
    atomic_write_json(group / "group.json", {"schema_version": 1, "runs": ["seed-0"], "seeds": [0], "argv": [
        "--domain_spec", str(group / "evil.yaml"), "--max_generation", "0"]})
    r, seconds = timed_cli("run_optimization", "--resume_from", str(group))
    refused(r, f"{group}/group.json asks for --domain_spec {group / 'evil.yaml'}",
            f"pass --domain_spec {group / 'evil.yaml'} to accept it", seconds=seconds)
    assert not marker.exists() and not (group / "seed-0").exists()
    # The same spec named by the config's loop.domains (a new run naming no domain takes them) instead.
    atomic_write_json(group / "group.json", {"schema_version": 1, "runs": ["seed-0"], "seeds": [0], "argv": [
        "--set", f"loop.domains=[{group / 'evil.yaml'}]", "--max_generation", "0"]})
    r, seconds = timed_cli("run_optimization", "--resume_from", str(group))
    refused(r, f"{group}/group.json asks for --domain_spec {group / 'evil.yaml'}", seconds=seconds)
    assert not marker.exists() and not (group / "seed-0").exists()
    # A command line that is not one run_optimization takes: one line, no usage echoing its text.
    atomic_write_json(group / "group.json", {"schema_version": 1, "runs": ["seed-0"], "seeds": [0],
                                            "argv": ["--no_such_flag\x1b]0;owned\x07"]})
    r, seconds = timed_cli("run_optimization", "--resume_from", str(group))
    assert "\x1b" not in r.stderr and "usage" not in r.stderr
    refused(r, "its command line is not one run_optimization takes", seconds=seconds)


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json names, in loop.domains, a spec in the handed folder whose "
                    "scorer (module:function beside it) would run on the host")
def test_a_run_json_whose_config_names_a_spec_runs_no_scorer(tmp_path):
    run = handed_run(tmp_path, {})
    marker = evil_spec(run, tmp_path / "scorer-ran")
    atomic_write_json(run / "run.json", RunRecord(["imo_grading"], {"loop": {"domains": [str(run / "evil.yaml")]}},
                                                  "bwrap").to_dict())
    r, _ = timed_cli("run_optimization", "--resume_from", str(run), "--dry_run")
    assert r.returncode == 0 and "domain   imo_grading:" in r.stdout and "evil" not in r.stdout, r.stderr[-2000:]
    r, seconds = timed_cli("run_optimization", "--resume_from", str(run), "--set", "loop.domains=[imo_proof]",
                           "--dry_run")
    refused(r, "a resume cannot change loop.domains", seconds=seconds)
    assert not marker.exists()


@pytest.mark.attack("a config file someone hands over whose loop.domains names a spec in their folder whose scorer "
                    "(module:function beside it) would run on the host, even on --dry_run, or names 65 domains, or "
                    "~nouser paths; and a config whose top level is a list")
def test_a_handed_config_names_no_code_for_the_host_to_run(tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    marker = evil_spec(given, tmp_path / "scorer-ran")
    (given / "run.yaml").write_text("loop:\n  domains: [evil.yaml]\n")
    r, seconds = timed_cli("run_optimization", "--config", str(given / "run.yaml"), "--dry_run")
    refused(r, f"loop.domains names the spec {given / 'evil.yaml'}, whose scorer evil:score is code of its folder",
            f"name it on the command line: --domain_spec {given / 'evil.yaml'}", seconds=seconds)
    assert not marker.exists()
    r, _ = timed_cli("run_optimization", "--config", str(given / "run.yaml"), "--domain_spec", str(given / "evil.yaml"),
                     "--dry_run")
    assert r.returncode == 0 and "domain   evil:" in r.stdout, r.stderr[-2000:]  # named by the user: accepted
    for config, said in (("loop:\n  domains: [" + ", ".join(["imo_grading"] * 65) + "]\n", "at most 64"),
                         ("loop:\n  domains: ['~nouser-xyz/a.yaml']\n", "~nouser-xyz/a.yaml"),
                         ("- a\n- b\n", "top level must be a mapping")):
        (given / "other.yaml").write_text(config)
        r, seconds = timed_cli("run_optimization", "--config", str(given / "other.yaml"), "--dry_run")
        refused(r, said, seconds=seconds)
    r, seconds = timed_cli("run_optimization", "--set", "loop.domains=[~nouser-xyz/a.yaml]", "--dry_run")
    refused(r, "~nouser-xyz/a.yaml", seconds=seconds)


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json names as its parent selection strategy, promotion rule, "
                    "best choice or novelty measure a module of the strategies' package that is none (__init__), "
                    "another module (os.path, a path out of the folder) or a plug-in this host does not have, so "
                    "that resuming it would import that")
def test_a_run_json_names_only_strategies_of_the_search_or_of_installed_plug_ins(tmp_path):
    known = {"parent_selection": ("parent_selection", "best",
                                  "best, islands, latest, pareto, random, score_child_prop, score_prop"),
             "promotion": ("promotion", "sica", "not_worse_than_parent, score_above, sica"),
             "best_choice": ("best_choice", "paired", "heldout, highest, paired"),
             "novelty_measure": ("novelty", "dice", "dice")}
    for field, (kind, bundled, names) in known.items():
        for name in ("__init__", "os.path", "../../services/install", f"search.{kind}.{bundled}", "oldest"):
            run = handed_run(tmp_path / field / name.replace("/", "_"), {"loop": {field: name}})
            r, seconds = timed_cli("run_optimization", "--resume_from", str(run), "--dry_run")
            refused(r, f"loop.{field} must be one of {names}", seconds=seconds)


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json gives strategies settings (the config's `search` section) "
                    "that name a module or a path as a strategy, a setting the strategy lacks, a value of another "
                    "type or out of its range (a paired test's level or test, sica's confidence, also as the loop "
                    "keys they were before), a name with a control character or a deeply nested value, so that "
                    "resuming or reading it would import something, call a strategy with what it never checks, or "
                    "stall")
def test_a_run_json_gives_strategies_only_settings_they_declare(tmp_path):
    cases = [({"os.path": {"x": 1}}, "search.os.path"),  # not an identifier: the shape is refused whole
             ({"__init__": {"islands": 2}}, "search.__init__: no strategy is named __init__"),
             ({"islands": {"__class__": 1}}, "search.islands.__class__: islands has no such setting"),
             ({"islands": {"islands": "4; rm -rf /"}}, "search.islands.islands must be an integer"),
             ({"islands": {"islands": 10**6}}, "search.islands: islands must be from 1 to 64"),
             ({"islands\x1b[2J": {}}, "search must be a mapping of strategy name -> its settings"),
             ({"islands": {"islands": [[[[[[[[[[1]]]]]]]]]]}}, "search.islands.islands must be an integer"),
             ({"paired": {"level": 5}}, "search.paired: level must be a number between 0 and 1"),
             ({"not_worse_than_parent": {"test": "os.system"}}, "test must be one of exact, bootstrap"),
             ({"sica": {"confidence": float("nan")}}, "search.sica: confidence must be a number between 0 and 1")]
    for i, (search, expected) in enumerate(cases):
        run = handed_run(tmp_path / str(i), {"loop": {"parent_selection": "islands"}, "search": search})
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run), "--dry_run")
        text = refused(r, seconds=seconds)
        assert expected in text or (i == 0 and "search must be a mapping" in text), (search, text)
        assert "\x1b" not in text  # a control character of the folder's is shown, never sent to the terminal
    # The settings the paired tests once had as loop keys (a run.json saved before they moved) are checked alike,
    # and a reader (the API's load_run, the dashboard) refuses the best choice's in one line too.
    run = handed_run(tmp_path / "legacy", {"loop": {"best_choice": "paired", "promotion_test": "__import__"}})
    refused(timed_cli("run_optimization", "--resume_from", str(run), "--dry_run")[0],
            "test must be one of exact, bootstrap")
    from hyperagents import load_run

    run = handed_run(tmp_path / "read", {"loop": {"best_choice": "paired"}, "search": {"paired": {"level": -1}}})
    with pytest.raises(UserError, match="run.json: search.paired: level must be a number between 0 and 1, got -1"):
        load_run(run)
    for i, (search, _) in enumerate(cases):  # the API's reader refuses each as the resume does
        run = handed_run(tmp_path / f"read{i}", {"loop": {"parent_selection": "islands"}, "search": search})
        with pytest.raises(UserError, match="run.json: ") as raised:
            load_run(run)
        assert "\x1b" not in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.attack("a handed run folder whose node.json carries a raced_out verdict of its own: terminal control "
                    "characters, or a megabyte pasted into every page and title that shows the node")
def test_a_raced_out_verdict_is_one_short_printable_line_or_the_record_is_refused(tmp_path):
    from hyperagents import load_run

    for i, verdict in enumerate(["raced out\x1b[31m\x07 <script>", "raced out " + "x" * 900_000]):
        run = handed_run(tmp_path / str(i), {"loop": {}})
        record = run / "nodes" / "1" / "node.json"
        atomic_write_json(record, {**json.loads(record.read_text()), "raced_out": verdict})
        with pytest.raises(UserError, match="raced_out must be one line of printable text") as raised:
            load_run(run)
        assert str(raised.value).startswith(str(record)) and len(str(raised.value)) < 500, str(raised.value)[:600]
        assert "\x1b" not in str(raised.value)


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json gives loop.racing settings that cannot race (a chunk of 0 "
                    "or a billion rows, an error rate of 0 or above one half, racing as text), so that resuming it "
                    "would stop every child at once, never look, or divide by zero")
def test_a_run_json_races_only_with_settings_that_can_race(tmp_path):
    cases = [({"racing_chunk": 0}, "loop.racing_chunk must be a positive integer, got 0"),
             ({"racing_chunk": 10**9}, "loop.racing_chunk must be at most 1,000,000"),
             ({"racing_alpha": 0}, "loop.racing_alpha must be a number from 0.000001 to below 0.5"),
             ({"racing_alpha": 0.9}, "loop.racing_alpha must be a number from 0.000001 to below 0.5"),
             ({"racing_alpha": 1e-320}, "loop.racing_alpha must be a number from 0.000001 to below 0.5"),
             ({"racing": "yes"}, "loop.racing must be")]
    for i, (loop, expected) in enumerate(cases):
        run = handed_run(tmp_path / str(i), {"loop": loop})
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run), "--dry_run")
        refused(r, expected, seconds=seconds)


# -- ledger.sqlite -------------------------------------------------------------------------------------
CALLS = ("id INTEGER PRIMARY KEY, ts REAL, run_id TEXT, node TEXT, role TEXT, model TEXT, prompt_tokens INTEGER, "
         "completion_tokens INTEGER, cost_usd REAL, latency_s REAL, cache_hit INTEGER, attempts INTEGER, error TEXT")


def sqlite_ledger(path, *statements: str) -> None:
    db = sqlite3.connect(path)
    db.executescript(";\n".join(statements))
    db.commit()
    db.close()


def readers_answer_in_one_line(tmp_path, run, expected: str) -> None:
    """load_run, apps.analyze and a resume each refuse in one line; the dashboard's run page shows it."""
    from hyperagents import load_run
    from support.dashboard import get, serving

    started = time.monotonic()
    with pytest.raises(UserError) as e:
        load_run(run)
    assert time.monotonic() - started < SECONDS and "\n" not in str(e.value)
    assert str(e.value).startswith(f"{run / 'ledger.sqlite'}: not a ledger this project wrote: {expected}")
    for args in (("apps.analyze", str(run), "--out", str(tmp_path / "analysis")),
                 ("run_optimization", "--resume_from", str(run)), ("run_optimization", "--resume_from", str(run),
                                                                   "--dry_run")):
        r, seconds = timed_cli(*args)
        refused(r, "ledger.sqlite: not a ledger this project wrote: " + expected, seconds=seconds)
    with serving(run.parent) as port:
        started = time.monotonic()
        status, _, body = get(port, f"/runs/{run.name}")
        assert status == 200 and time.monotonic() - started < SECONDS
        assert re.search(r"ledger\.sqlite: not a ledger this project wrote: " + re.escape(expected),
                         html.unescape(body)), body[-3000:]


@pytest.mark.e2e
@pytest.mark.attack("a ledger.sqlite whose calls table is a view over an endless recursive query (load_run, the "
                    "dashboard's run page, apps.analyze and a resume would hang)")
def test_a_ledger_view_over_an_endless_query(tmp_path):
    run = handed_run(tmp_path, {})
    sqlite_ledger(run / "ledger.sqlite", "CREATE VIEW calls AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
                  "FROM n) SELECT i AS id, 0 AS ts, '' AS run_id, '' AS node, 'task' AS role, 'm' AS model, 1 AS "
                  "prompt_tokens, 1 AS completion_tokens, 1.0 AS cost_usd, 0 AS latency_s, 0 AS cache_hit, 1 AS "
                  "attempts, NULL AS error FROM n")
    readers_answer_in_one_line(tmp_path, run, "it holds the view 'calls'")


@pytest.mark.e2e
@pytest.mark.attack("a ledger.sqlite with a trigger that a resumed run's first booked call would fire")
def test_a_ledger_with_a_trigger(tmp_path):
    run = handed_run(tmp_path, {})
    sqlite_ledger(run / "ledger.sqlite", f"CREATE TABLE calls ({CALLS})", "CREATE TRIGGER slow AFTER INSERT ON calls "
                  "BEGIN SELECT count(*) FROM calls a, calls b, calls c; END")
    readers_answer_in_one_line(tmp_path, run, "it holds the trigger 'slow'")


@pytest.mark.e2e
@pytest.mark.attack("a ledger.sqlite with tables of another shape: an unknown column, a generated column that "
                    "allocates a gigabyte per row, an unknown table")
def test_a_ledger_of_unknown_shape(tmp_path):
    run = handed_run(tmp_path, {})
    sqlite_ledger(run / "ledger.sqlite", f"CREATE TABLE calls ({CALLS}, big BLOB AS (zeroblob(1000000000)))")
    readers_answer_in_one_line(tmp_path, run, "table calls has the column 'big'")
    other = handed_run(tmp_path / "b", {})
    sqlite_ledger(other / "ledger.sqlite", f"CREATE TABLE calls ({CALLS})", "CREATE TABLE secrets (x)")
    readers_answer_in_one_line(tmp_path / "b", other, "it holds the table 'secrets'")


@pytest.mark.e2e
@pytest.mark.attack("a ledger.sqlite that is a 2 GB sparse file, and one that is a fifo")
def test_a_sparse_or_fifo_ledger(tmp_path):
    run = handed_run(tmp_path, {})
    with open(run / "ledger.sqlite", "wb") as f:
        f.truncate(2 * 2**30)
    readers_answer_in_one_line(tmp_path, run, "file is not a database")
    fifo = handed_run(tmp_path / "f", {})
    os.mkfifo(fifo / "ledger.sqlite")
    readers_answer_in_one_line(tmp_path / "f", fifo, "ledger.sqlite is not a regular file")


@pytest.mark.e2e
@pytest.mark.attack("a ledger.sqlite that is a link to another SQLite file of the user (a resume would add the "
                    "ledger's tables to it)")
def test_a_linked_ledger_is_never_written(tmp_path):
    victim = tmp_path / "places.sqlite"
    sqlite_ledger(victim, "CREATE TABLE places (url TEXT)")
    before = victim.read_bytes()
    run = handed_run(tmp_path, {})
    os.symlink(victim, run / "ledger.sqlite")
    r, seconds = timed_cli("run_optimization", "--resume_from", str(run))
    refused(r, "ledger.sqlite: not a ledger this project wrote: ledger.sqlite is not a regular file", seconds=seconds)
    assert victim.read_bytes() == before


def test_a_ledger_query_stops_at_its_deadline_and_its_row_limit(tmp_path, monkeypatch):
    import services.ledger
    from services.ledger import Call, Ledger, LedgerReader, NotALedger

    ledger = Ledger(tmp_path / "ledger.sqlite")
    for i in range(3000):
        ledger.record(Call("r", "initial", "task", f"model-{i}", 1, 1, 0.01))
    ledger.close()
    assert len(LedgerReader(tmp_path / "ledger.sqlite").spend()) == 3000
    monkeypatch.setattr(services.ledger, "MAX_ROWS", 100)
    with pytest.raises(NotALedger, match="over 100 rows of calls"):
        LedgerReader(tmp_path / "ledger.sqlite").spend()
    monkeypatch.setattr(services.ledger, "READ_SECONDS", 0.0)
    with pytest.raises(NotALedger, match="not read within 0 s"):
        LedgerReader(tmp_path / "ledger.sqlite").spend()


# -- tracking/ -----------------------------------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose tracking/ store holds links to the user's files (mlruns/ a link to a "
                    "folder, an event file a link to a file), written through when the resume tracks again")
def test_a_tracker_never_writes_through_a_planted_link(tmp_path, monkeypatch):
    from archive.store import Archive
    from optimizer.events import Events, RunEnded, RunStarted, Warned
    from optimizer.trackers import Trackers
    from support.synthetic_run import make_run

    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    victim = tmp_path / "mine"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine")
    run = tmp_path / "run"
    make_run(run, nodes=3, seed=1)
    (run / "tracking" / "tensorboard").mkdir(parents=True)
    os.symlink(victim, run / "tracking" / "mlruns")
    os.symlink(victim / "notes.txt", run / "tracking" / "tensorboard" / "events.out.tfevents.1.planted")
    config = Config()
    config.tracking.backends = ["mlflow", "tensorboard"]
    told: list = []
    events = Events(told.append)
    archive = Archive(run)
    events.subscribe(Trackers(run, config, archive, lambda: None, events))
    events.emit(RunStarted(str(run)))
    events.emit(RunEnded("finished"))
    warned = [e.message for e in told if isinstance(e, Warned)]
    assert len(warned) == 2 and all("is a link or a special file" in w for w in warned), warned
    assert sorted(p.name for p in victim.iterdir()) == ["notes.txt"] and (victim / "notes.txt").read_text() == "mine"


# -- files the readers and a resume write --------------------------------------------------------------
@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose ledger has an empty ledger.sqlite-wal beside a ledger.sqlite-shm that "
                    "is a hard link to a file of the user (SQLite's read-only mode would truncate it to its index)")
def test_a_hard_linked_shm_is_never_written(tmp_path):
    from services.ledger import Call, Ledger

    run = handed_run(tmp_path, {})
    ledger = Ledger(run / "ledger.sqlite")
    ledger.record(Call("handed", "1", "meta", "m", 10, 10, 0.5))
    ledger.close()
    victim = tmp_path / "userfile"
    victim.write_bytes(b"the user's own bytes\n")
    (run / "ledger.sqlite-wal").write_bytes(b"")
    os.link(victim, run / "ledger.sqlite-shm")
    before = listing(run)
    r, seconds = timed_cli("apps.analyze", str(run), "--out", str(tmp_path / "analysis"))
    assert r.returncode == 0 and seconds < SECONDS, r.stderr[-2000:]
    assert "| meta | 0.5000 | 20 |" in (tmp_path / "analysis" / "analysis.md").read_text()  # its calls, read
    assert victim.read_bytes() == b"the user's own bytes\n" and listing(run) == before  # read, nothing written
    # A resume would open it to write: refused before SQLite opens it.
    r, seconds = timed_cli("run_optimization", "--resume_from", str(run))
    refused(r, "ledger.sqlite: not a ledger this project wrote: ledger.sqlite-shm is a hard link (2 names)",
            seconds=seconds)
    assert victim.read_bytes() == b"the user's own bytes\n"


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose .lock is a hard link to a file of the user (a resume's lock would "
                    "write its pid into it)")
def test_a_hard_linked_lock_is_never_written(tmp_path):
    run = handed_run(tmp_path, {})
    victim = tmp_path / "userfile2"
    victim.write_bytes(b"mine\n")
    os.link(victim, run / ".lock")
    for args in (["--resume_from", str(run)], ["--resume_from", str(run), "--evaluate", "initial", "--split", "val"]):
        r, seconds = timed_cli("run_optimization", *args)
        refused(r, f"{run}/.lock is a file of 2 names (a hard link), not a lock file of the run", seconds=seconds)
        assert victim.read_bytes() == b"mine\n"


def handed_members(run) -> None:
    """Two scored members of `run` with stored val predictions, for apps.ensemble."""
    from archive.records import Node
    from domains.registry import get_domain
    from services.fsutil import atomic_write_csv

    val = get_domain("imo_grading").load("val").head(4)
    for g, node_id in enumerate(("1", "2"), 1):
        rows = val.copy()
        rows["prediction"] = list(val["Reward"])
        key = f"{g:02d}a" + "0" * 21
        atomic_write_csv(run / "evals" / key / "predictions.csv", rows)
        node = Node(node_id, "initial", g, scores={"imo_grading": {"val": 0.5 + g / 10}},
                    samples={"imo_grading": {"val": 100}}, full_eval={"imo_grading": True},
                    eval_keys={"imo_grading": {"val": key}})
        atomic_write_json(run / "nodes" / node_id / "node.json", node.to_dict())


@pytest.mark.e2e
@pytest.mark.attack("a handed group whose analysis/ is a link to a folder of the user, and a handed run whose "
                    "ensembles/ (or a folder below it) is one: apps.analyze and apps.ensemble would write "
                    "their reports into it")
def test_readers_never_write_through_a_planted_folder_link(tmp_path):
    victim = tmp_path / "victimdir"
    victim.mkdir()
    group = tmp_path / "group"
    for seed in (1, 2):
        handed_run(group / f"seed-{seed}", {})
    for seed in (1, 2):
        (group / f"seed-{seed}" / "handed").rename(group / f"run-{seed}")
        os.rmdir(group / f"seed-{seed}")
    os.symlink(victim, group / "analysis")
    r, seconds = timed_cli("apps.analyze", str(group))
    refused(r, f"{group}/analysis is a link or not a folder: nothing is written through it", seconds=seconds)
    run = handed_run(tmp_path / "e", {})
    handed_members(run)
    for planted in ("ensembles", "ensembles/val-majority-top5"):
        (run / planted).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(victim, run / planted)
        r, seconds = timed_cli("apps.ensemble", str(run), "--split", "val")
        refused(r, f"{run}/{planted} is a link or not a folder: nothing is written through it", seconds=seconds)
        os.unlink(run / planted)
    assert list(victim.iterdir()) == []
    r, _ = timed_cli("apps.ensemble", str(run), "--split", "val")  # the same run, without the link: written
    assert r.returncode == 0 and (run / "ensembles" / "val-majority-top5" / "report.json").is_file(), r.stderr


@pytest.mark.attack("a handed run folder, resumed, whose report.html, plots, heldout.json, event log and evaluation "
                    "journal are links to files of the user, and whose feedback/ and nodes/ are links to a folder")
def test_a_resumed_run_writes_through_no_planted_link(tmp_path):
    from archive.eval_store import EvalStore
    from archive.heldout import HELDOUT
    from archive.store import Archive
    from domains.harness.journal import Journal
    from services.fsutil import atomic_write_text, hold_folder, make_folder, release_folder

    victim = tmp_path / "bashrc"
    victim.write_text("the user's shell\n")
    folder = tmp_path / "victimdir"
    folder.mkdir()
    run = handed_run(tmp_path, {})
    for name in ("report.html", "progress_imo_grading_val.png", HELDOUT):
        os.symlink(victim, run / name)
    os.symlink(folder, run / "feedback")
    hold_folder(run, "run")  # as a resume does, before it writes
    try:
        for name in ("report.html", "progress_imo_grading_val.png", HELDOUT):
            atomic_write_text(run / name, "the run's own\n")  # the link is replaced, not followed
            assert not (run / name).is_symlink() and (run / name).read_text() == "the run's own\n"
        with pytest.raises(UserError, match=f"^{re.escape(str(run))}/feedback is a link or not a folder"):
            make_folder(run / "feedback" / "1")
        with pytest.raises(UserError, match="feedback is a link or not a folder"):
            atomic_write_text(run / "feedback" / "1" / "metadata.json", "{}")
        os.symlink(victim, run / "archive.jsonl")
        with pytest.raises(UserError, match="archive.jsonl is a link: nothing is written through it"):
            Archive(run).log("gen_start", node_id="1")
        store = EvalStore(run)
        make_folder(store.folder("c" * 24))
        os.link(victim, store.folder("c" * 24) / "predictions.jsonl")
        with pytest.raises(UserError, match=r"predictions.jsonl is a file of 2 names \(a hard link\)"):
            Journal(store.folder("c" * 24) / "predictions.jsonl").append({"id": "x"})
    finally:
        release_folder(run)
    assert victim.read_text() == "the user's shell\n" and list(folder.iterdir()) == []


@pytest.mark.e2e
@pytest.mark.attack("a handed run folder whose run.json prices the models it runs at $0 (gateway.prices), so that a "
                    "resume's --budget_usd would never stop it")
def test_a_run_json_that_prices_its_models_is_refused(tmp_path):
    run = handed_run(tmp_path, {"models": {"task": "openai/o4-mini", "meta": "openai/o4-mini"},
                                "gateway": {"prices": {"openai/o4-mini": [0, 0]}}})
    accept = """--set gateway.prices='{"openai/o4-mini": [0, 0]}'"""
    for extra in ([], ["--dry_run"], ["--set", "gateway.prices={openai/o4-mini: [1, 1]}", "--dry_run"]):
        r, seconds = timed_cli("run_optimization", "--resume_from", str(run), "--budget_usd", "5", *extra)
        if "--set" in extra:  # the user's own prices: theirs, not the folder's
            assert r.returncode == 0, r.stderr[-2000:]
            continue
        refused(r, f"{run}/run.json asks for {accept} (prices of its own for the models", f"pass {accept} to accept it",
                seconds=seconds)
    r, _ = timed_cli("run_optimization", "--resume_from", str(run), "--budget_usd", "5", "--set",
                     'gateway.prices={"openai/o4-mini": [0, 0]}', "--dry_run")
    assert r.returncode == 0, r.stderr[-2000:]


@pytest.mark.attack("a handed run folder whose node record names no commit of its agent, evaluated with --evaluate")
def test_a_node_record_without_a_commit_is_refused_by_evaluate(tmp_path):
    from archive.store import Archive
    from domains.registry import get_domain
    from optimizer.final_test import check_evaluate

    run = handed_run(tmp_path, {})
    nodes = Archive(run).nodes
    assert nodes["1"].valid_parent and not nodes["1"].commit
    with pytest.raises(UserError, match=r"^--evaluate 1: node 1's record names no commit of its agent$"):
        check_evaluate(nodes, [get_domain("imo_grading")], ["1"], "val")

"""The Python API takes a search strategy as an object, as GEPA takes its selector: `run(parent_selection=obj)`
runs the loop with it (search.registry.use names it), the run's record keeps its name, a resume without it is one
line, and an object without the kind's methods is refused before anything is made."""

import json

import pytest

from search.parent_selection import Candidate, Context, Pointed
from services.errors import UserError
from support.cli import FAST_CONFIG, REPO_ROOT

SPEC = REPO_ROOT / "examples" / "capitals" / "capitals.yaml"


class FirstEver(Pointed):
    """Always the earliest candidate; counts its calls."""

    name = "first_ever"

    def __init__(self) -> None:
        self.calls = 0

    def pick(self, candidates: list[Candidate], context: Context) -> Candidate:
        self.calls += 1
        return min(candidates, key=lambda c: c.order)


class NoMethods:
    pass


@pytest.mark.e2e
def test_a_strategy_object_chooses_the_parents_and_a_resume_needs_it_again(tmp_path, api_provider):
    from hyperagents import run

    api_provider.responder = lambda request: "Paris"  # the meta agent makes no edit: each child is no_change
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    chooser = FirstEver()
    common = dict(config=config, output_dir=tmp_path, eval_samples=4, task_model="openai/fake",
                  meta_model="openai/fake-meta")
    view = run(domain_spec=SPEC, run_id="r", max_generation=2, parent_selection=chooser, **common)
    assert chooser.calls >= 2 and list(view.nodes) == ["initial", "1", "2"]  # it chose, and gave the chances
    record = json.loads((tmp_path / "r" / "run.json").read_text())
    assert record["config"]["loop"]["parent_selection"] == "first_ever"
    events = [json.loads(line) for line in (tmp_path / "r" / "archive.jsonl").read_text().splitlines()]
    chosen = [e for e in events if e["event"] == "parent_chosen"]
    assert [(e["strategy"], e["parent"]) for e in chosen] == [("first_ever", "initial")] * 2

    from search.registry import GIVEN

    GIVEN["parent_selection"].clear()  # a new process: the object is gone
    with pytest.raises(UserError, match=r"loop.parent_selection must be one of .*got 'first_ever'"):
        run(domain_spec=SPEC, resume_from=tmp_path / "r", max_generation=3, **common)


def test_an_object_without_the_kinds_methods_is_refused_before_anything_is_made(tmp_path):
    from hyperagents import run

    with pytest.raises(UserError, match=r"the parent selection strategy NoMethods lacks what a parent selection "
                                        r"strategy has \(needs_rows, weights"):
        run(domain_spec=SPEC, output_dir=tmp_path, parent_selection=NoMethods())
    with pytest.raises(UserError, match=r"the promotion strategy FirstEver lacks"):
        run(domain_spec=SPEC, output_dir=tmp_path, settings={"loop.promotion": FirstEver()})
    bad = FirstEver()
    bad.name = "two words"
    with pytest.raises(UserError, match=r"is named 'two words': a name is letters, digits and _"):
        run(domain_spec=SPEC, output_dir=tmp_path, parent_selection=bad)
    named_as_bundled = FirstEver()
    named_as_bundled.name = "best"
    with pytest.raises(UserError, match=r"the name 'best' is another strategy's"):
        run(domain_spec=SPEC, output_dir=tmp_path, parent_selection=named_as_bundled)
    assert list(tmp_path.iterdir()) == []


class Boom(FirstEver):
    name = "boom"

    def pick(self, candidates: list[Candidate], context: Context) -> Candidate:
        raise RuntimeError("no candidate suits me")


@pytest.mark.e2e
def test_a_strategy_that_raises_ends_the_run_in_one_line_and_keeps_what_was_done(tmp_path, api_provider):
    from hyperagents import load_run, run

    api_provider.responder = lambda request: "Paris"
    config = tmp_path / "c.yaml"
    config.write_text(FAST_CONFIG)
    with pytest.raises(UserError) as e:
        run(domain_spec=SPEC, config=config, output_dir=tmp_path, run_id="r", max_generation=1, eval_samples=4,
            task_model="openai/fake", meta_model="openai/fake-meta", parent_selection=Boom())
    assert str(e.value) == "the parent selection strategy boom raised RuntimeError in choose: no candidate suits me"
    assert "\n" not in str(e.value) and e.value.__cause__ is None
    view = load_run(tmp_path / "r")
    assert list(view.nodes) == ["initial"] and view.nodes["initial"].status == "ok"  # kept, for a resume

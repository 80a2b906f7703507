"""A read-only web dashboard of runs: `python -m apps.dashboard`, or `run_optimization --dashboard`.

reader.py reads a run folder (bounded, checked, cached), flight.py the generations under way;
markup.py escapes; svg.py draws; pieces.py, pages.py, compare.py (two nodes) and runs_page.py
(runs side by side) make the pages (pieces also make report.html); server.py serves them;
static/ holds the only script and style sheet, written for this package.
"""

"""Applications: what reads finished or running runs and makes something for a person.

The dashboard (dashboard/: a read-only web app of runs), report.html (report.py) and the plots
(plots.py), both drawn after the loop's nodes through pictures.py; the analysis of groups of runs
(`python -m apps.analyze`), ensembles of a run's nodes (`python -m apps.ensemble`) and a node's
code exported as a folder (`python -m apps.export`). They read the store through archive/ and may
use the loop (optimizer/); nothing below imports them."""

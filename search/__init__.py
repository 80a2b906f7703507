"""The search's policies, each kind a folder of strategies, one file a strategy (its name the file's), and
installed plug-ins beside them (entry point group `hyperagents_imo.<kind>`): `search.registry` finds them by
name for the loop, the config's validation and the command line's choices.

Kinds: parent_selection (which archive node the next generation starts from), promotion (whether a screening
stage lets a child on) and best_choice (which node is a run's best). stats.py: the intervals and paired tests
they and the archive's readers use."""

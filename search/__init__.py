"""The search's policies, each kind a folder of strategies, one file a strategy (its name the file's), and
installed plug-ins beside them (entry point group `hyperagents_imo.<kind>`): `search.registry` finds them by
name for the loop, the config's validation and the command line's choices.

Kinds so far: parent_selection (which archive node the next generation starts from)."""

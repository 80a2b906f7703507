"""The tools, found by module as the reference's `load_tools` (agent/tools/__init__.py) finds them.

Every module of this folder is a tool and must define `tool_info()` (the dict the model reads: name,
description, input schema) and `tool_function(**tool_input)` (returns the text the model gets back).
Every module is imported on each load, also those not asked for, and one that fails to import or
lacks either function is logged and raised, as in the reference: a broken tool stops the loop.
A tool is chosen by its module's name; "all" chooses every one. Here each module is named as its
tool is (the reference's editor lives in edit.py, so asking for "editor" there finds nothing).
"""

import importlib
from pathlib import Path


def load_tools(names=(), logging=print):
    """[{"info", "function", "name"}] of the tools `names` chooses ("all", or a list of module names)."""
    chosen = []
    for stem in sorted(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem != "__init__"):
        module_name = f"{__name__}.{stem}"
        try:
            module = importlib.import_module(module_name)
            if not (hasattr(module, "tool_info") and hasattr(module, "tool_function")):
                raise ImportError(f"{module_name} lacks tool_info() or tool_function()")
            if names == "all" or (names and stem in names):
                chosen.append({"info": module.tool_info(), "function": module.tool_function, "name": stem})
        except Exception as e:
            logging(f"Cannot load the tool module {module_name}: {e}")
            raise
    return chosen

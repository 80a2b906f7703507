"""The helpers the paper's task agent and meta agent share: the model call, the tool loop, the tools."""

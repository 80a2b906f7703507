"""The paper's initial meta agent, as the reference's meta_agent.py: one line of instruction, both tools.

It is told only to change whatever it wants of the code base at `repo_path`, and then runs the tool
loop with every tool (bash and the editor), up to its limit of tool calls. Like the reference, it
is given the path of earlier agents' evaluations and the number of iterations left but does not
mention them to the model: finding and using them is left to what the meta agent becomes.
"""

from agent.base_agent import AgentSystem
from agent.tool_chat import chat_with_agent


class MetaAgent(AgentSystem):
    def forward(self, repo_path, eval_path, iterations_left=None):
        """Improve the code at `repo_path`, in place.

        repo_path: the code base to change (this agent's own code among it).
        eval_path: the folder of earlier generations' agents, with how each of them scored.
        iterations_left: how many more times a meta agent will be run after this one, if known.
        """
        instruction = f"Change any part of the code base at `{repo_path}` as you see fit."
        chat_with_agent(instruction, model=self.model, msg_history=[], logging=self.log, tools_available="all")

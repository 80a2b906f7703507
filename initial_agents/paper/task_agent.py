"""The paper's initial task agent, as the reference's task_agent.py: one generic prompt, one answer.

The agent is told it is an agent, shown the task's whole `inputs` dict as Python prints it in a
fenced block, and asked for a JSON object with one key, "response", inside <json>...</json>. The
model is asked through the same loop the meta agent uses, with no tools, as in the reference: the
message begins with that loop's (here empty) tool preamble and a blank line, and a reply is one
call unless it is itself written as a tool use.

The prediction is read strictly, as the reference reads it: the "response" value of the LAST JSON
object that `extract_jsons` finds (every <json> block in order, then every ```json fence in order,
malformed ones skipped). There is no lenient matching of labels in free text: a reply without JSON,
a last JSON value that is not an object with "response" (a list, a string, a number), or any
failure while reading gives the string "None".
"""

from agent.base_agent import AgentSystem
from agent.extract import extract_jsons
from agent.tool_chat import chat_with_agent

NO_PREDICTION = "None"


def task_prompt(inputs):
    return f"""You are acting as an agent.

The input of your task:
```
{inputs}
```

Answer in JSON, in this shape:
<json>
{{
    "response": ...
}}
</json>"""


class TaskAgent(AgentSystem):
    def forward(self, inputs):
        """Answer one task.

        inputs: the task's fields, a dict.
        Returns (prediction, message history): the prediction as read from the model's last reply,
        the history as [{"role", "text"}] messages.
        """
        history = chat_with_agent(task_prompt(inputs), model=self.model, msg_history=[], logging=self.log)
        prediction = NO_PREDICTION
        try:
            found = extract_jsons(history[-1]["text"])
            if found is not None and isinstance(found[-1], dict) and "response" in found[-1]:
                prediction = found[-1]["response"]
        except Exception as e:
            self.log(f"Could not read a prediction: {e}")
        return prediction, history

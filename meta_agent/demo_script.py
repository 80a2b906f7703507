"""The edits the meta agent's replay mode makes (meta_agent/replay.py): the no-key demo's script.

Written in advance, by people, for the bundled local model (SmolLM2-135M) as the task agent on a
task of the user's own, such as examples/capitals. Each step is one idea, made of editor tool calls
(`str_replace`, paths relative to the workspace) that apply to the default task agent
(task_agent/task_agent.py) with the steps before it; `marker` is text of the step's new code, which
tells whether a workspace has the step already. The replay makes, in each generation, the first step
its workspace lacks.

Measured with the bundled model on examples/capitals, the harness alone (12 train + 6 val + 6 test rows):
the default task agent 3 to 10 of 24 (sampled), after step 1 14 to 18 of 24, after step 2 21 of 24.
"""

from __future__ import annotations

TASK_AGENT = "task_agent/task_agent.py"

STEPS = [
    {
        "title": "answer in words, then read the answer out of the sentence",
        "why": ("The small model answers a task of the user's own far better in a sentence of its own (\"The capital "
                "of Kenya is Nairobi.\") than in a JSON field, where it often names the country instead. So the task "
                "is asked in plain words, for one short sentence, and the answer is read out of that sentence: of the "
                "parts of its first clause around \"is\", the one with the fewest of the question's words."),
        "marker": "def read_answer(",
        "edits": [
            {"path": TASK_AGENT,
             "old_str": "from __future__ import annotations\n\n",
             "new_str": "from __future__ import annotations\n\nimport re\n\n"},
            {"path": TASK_AGENT,
             "old_str": 'class TaskAgent(AgentSystem):\n    def forward(self, inputs: dict):\n'
                        '        domain = inputs.get("domain", "")\n',
             "new_str": '''def plain_question(inputs: dict) -> str:
    """The inputs of a task of the user's own as plain text (demo step 1, replayed)."""
    return "\\n".join(str(value) for key, value in inputs.items() if key != "domain")


def read_answer(sentence: str, question: str) -> str:
    """The answer a one-sentence reply holds: of the parts of its first clause around "is", the one with
    the fewest of the question's words ("The capital of Mexico is Mexico City." -> "Mexico City")."""
    clause = re.split(r"[,.;:!?\\n(]", sentence.strip(), maxsplit=1)[0]
    asked = {word.lower() for word in re.findall(r"\\w+", question)}
    parts = [p.strip() for p in re.split(r"\\s+(?:is|are|was|were)\\s+", clause) if p.strip()]
    if not parts:
        return sentence.strip()
    fewest = min(reversed(parts), key=lambda p: sum(w.lower() in asked for w in re.findall(r"\\w+", p)))
    return fewest.strip("\\"'*` ")


class TaskAgent(AgentSystem):
    def forward(self, inputs: dict):
        domain = inputs.get("domain", "")
        if domain not in INSTRUCTIONS:  # a task of the user's own: answered in words (demo step 1)
            return self.answer_in_words(inputs)
'''},
            {"path": TASK_AGENT,
             "old_str": '        self.log(f"## prediction\\n\\n{prediction}")\n        return prediction, history\n',
             "new_str": '''        self.log(f"## prediction\\n\\n{prediction}")
        return prediction, history

    def answer_in_words(self, inputs: dict):
        """Ask for one short sentence, then read the answer out of it (demo step 1)."""
        question = plain_question(inputs)
        messages = [{"role": "user", "content": question + "\\nAnswer in one short sentence."}]
        reply = get_response(messages, model=self.model)
        history = messages + [{"role": "assistant", "content": reply.text}]
        self.log_messages(history)
        prediction = read_answer(reply.text, question) or "None"
        self.log(f"## prediction\\n\\n{prediction}")
        return prediction, history
'''},
        ],
    },
    {
        "title": "greedy decoding and a short reply",
        "why": ("Sampled at the server's default temperature, the small model sometimes wanders off into another city or "
                "a description; its most likely sentence is right more often. So the answer is decoded greedily "
                "(temperature 0), and one sentence needs no more than 48 tokens."),
        "marker": "temperature=0, max_tokens=48",
        "edits": [
            {"path": TASK_AGENT,
             "old_str": "        reply = get_response(messages, model=self.model)\n",
             "new_str": "        # Greedy decoding and a short reply (demo step 2).\n"
                        "        reply = get_response(messages, model=self.model, temperature=0, max_tokens=48)\n"},
        ],
    },
]
